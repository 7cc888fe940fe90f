"""A per-layer diff run (issue 27) against a plain run of the same program, on every device:
MAX78000's MNIST-shaped network (testkit max78000_build.mnist_shapes_network, referenced by
the independent per-layer integer reference) and each device's bundled demo (referenced by
every declared output of a clean run). Prints the machine line, both times (best of 5,
kernels compiled first) and their ratio; the issue asks for at most 2x.

    python benchmarks/bench_diff.py
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from accelstub.devices import DEVICES, device_spec, open_device
from accelstub.devices.device import ProgramOptions
from accelstub.devices.layer_diff import start_diff
from accelstub.devices.runcontrol import RunControl
from accelstub.devices.tensors import read_tensor
from accelstub.stub.cli import demo_program
from accelstub.stub.commands import CommandContext
from accelstub.stub.program import load_program
from accelstub.testkit.max78000_build import build, mnist_shapes_network
from machine import bench_main


def loaded(device: str, program: Path, options: ProgramOptions) -> RunControl:
    opts = device_spec(device).program_device_options(program)
    rc = RunControl(open_device(device, **opts))
    load_program(CommandContext(targets=[rc]), program, options)
    return rc


def clean_outputs(device: str, program: Path, options: ProgramOptions, path: Path) -> None:
    """Every declared output of a clean run, as the generic .npz."""
    rc = loaded(device, program, options)
    dev, outs = rc.device, {}

    def after(done: int) -> None:
        for s in dev.unit_tensors(done - 1):
            if s.name == "output":
                outs[str(done - 1)] = read_tensor(s, dev.read)
    rc.add_unit_listener(after)
    assert rc.run_here().reason == "done"
    np.savez(path, **outs)


def one(device: str, program: Path, options: ProgramOptions, reference: Path | None) -> float:
    rc = loaded(device, program, options)
    differ = start_diff(rc, reference, stop=False) if reference is not None else None
    t0 = time.perf_counter()
    stop = rc.run_here()
    t = time.perf_counter() - t0
    assert stop.reason == "done", stop
    assert differ is None or (differ.first_divergence is None and differ.results)
    return t


def compare(name: str, device: str, program: Path, options: ProgramOptions,
            ref: Path) -> None:
    one(device, program, options, ref)  # compile the kernels
    plain = min(one(device, program, options, None) for _ in range(5))
    diff = min(one(device, program, options, ref) for _ in range(5))
    print(f"{name:<28} plain {plain * 1e3:8.1f} ms  diff {diff * 1e3:8.1f} ms  "
          f"ratio {diff / plain:5.2f} (issue 27: at most 2)")


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        proj = build(mnist_shapes_network(), seed=1)
        prog = proj.write(Path(d) / "net")
        ref = Path(d) / "mnist.npz"
        np.savez(ref, **{str(i): o for i, o in enumerate(proj.outputs)})
        compare("max78000 mnist_shapes", "max78000", prog, ProgramOptions(), ref)
        for device in DEVICES:
            demo = demo_program(device)
            options = ProgramOptions()
            if demo.is_dir() and (demo / "input.npy").exists():  # Ethos-U85: Vela + input
                options = ProgramOptions(input=str(demo / "input.npy"))
                demo = next(demo.glob("*_vela.tflite"))
            ref = Path(d) / f"{device}.npz"
            clean_outputs(device, demo, options, ref)
            compare(f"{device} demo", device, demo, options, ref)


if __name__ == "__main__":
    sys.exit(bench_main(main))
