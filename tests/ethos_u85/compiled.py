"""Vela-compiled test models: each (name, MACs) compiled once per test module, and a loaded
program run to the end as its driver runs it. Test support (issue 33: devices/ has no use for a
run that blocks until the end; the debugger, the CLI and eval run programs through run control
themselves)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from accelstub.devices import open_device
from accelstub.devices.errors import DeviceError
from accelstub.devices.ethos_u85.vela import VelaProgram, load_vela_program, read_outputs
from accelstub.devices.runcontrol import RunControl
from accelstub.testkit.ethosu85_models import compile_with_vela


def compile_cache(root: Path, build: Callable[[str], bytes]) -> Callable[..., tuple[Path, Path]]:
    """``get(name, macs=256)`` -> (the model .tflite that ``build(name)`` writes, Vela's
    .tflite for ``macs``), each made once under ``root``."""
    cache: dict[tuple[str, int], tuple[Path, Path]] = {}
    root.mkdir(parents=True, exist_ok=True)

    def get(name: str, macs: int = 256) -> tuple[Path, Path]:
        if (name, macs) not in cache:
            src = root / f"{name}.tflite"
            if not src.exists():
                src.write_bytes(build(name))
            cache[name, macs] = src, compile_with_vela(src, root / str(macs), macs=macs)
        return cache[name, macs]
    return get


def run_vela_program(device, program: VelaProgram,
                     timeout: float | None = None) -> list[np.ndarray]:
    """Run a loaded program to the end (as the driver waits for the IRQ) and return every
    output. A fault, an unimplemented operation or a stream that does not end with the NPU
    stopped raises DeviceError naming the file."""
    rc = RunControl(device)
    stop = rc.run(timeout)
    if stop is None:
        rc.halt_and_wait()
        raise DeviceError(f"{program.path}: the NPU did not finish within {timeout} s")
    if stop.reason != "done":
        raise DeviceError(f"{program.path}: the NPU did not finish ({stop.reason}"
                          f"{': ' + stop.message if stop.message else ''})")
    return read_outputs(device, program)


def run_compiled(path: Path, inputs, macs: int, timeout: float = 300) -> list[np.ndarray]:
    """Vela's .tflite ``path`` loaded with ``inputs`` on a new device of ``macs`` and run to
    the end: its outputs."""
    dev = open_device("ethos-u85", macs=macs)
    return run_vela_program(dev, load_vela_program(dev, path, inputs), timeout)
