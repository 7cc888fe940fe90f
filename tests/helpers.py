"""Helpers every test folder shares: the repository root, real gdb-multiarch runs, a served
demo stub's command line, and stepping or running a device through run control (the one owner
of the run loop) the way a debugger does."""
from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

from accelstub.devices import DeviceError
from accelstub.devices.device import Device, Stop
from accelstub.devices.runcontrol import RunControl

ROOT = Path(__file__).resolve().parent.parent
GDB = shutil.which("gdb-multiarch")


def require_gdb() -> str:
    """gdb-multiarch, or a skip with a reason; in CI (CI=true) a missing gdb fails instead."""
    if GDB is None:
        if os.environ.get("CI"):
            pytest.fail("gdb-multiarch is required in CI (apt-get install -y gdb-multiarch)")
        pytest.skip("gdb-multiarch is not installed (apt-get install gdb-multiarch)")
    return GDB


def run_gdb(commands: list[str], port: int | None = None, target: str | None = None,
            timeout: float = 60) -> str:
    """Run gdb-multiarch in batch mode; ``commands`` are gdb CLI lines (python ... allowed)."""
    gdb = require_gdb()
    target = target or f"target remote 127.0.0.1:{port}"
    args = [gdb, "-q", "-nx", "-batch", "-ex", "set pagination off", "-ex", "set confirm off",
            "-ex", target]
    for c in commands:
        args += ["-ex", c]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    return proc.stdout + proc.stderr


def serve_cmd(*extra: str) -> list[str]:
    """``accelstub serve max78000`` with configs/demo/max78000_chain.cfg: the same 4-layer
    program as tests/max78000/programs.chain_writes(4)."""
    return [sys.executable, "-m", "accelstub.stub.cli", "serve", "max78000", "--program",
            str(ROOT / "configs" / "demo" / "max78000_chain.cfg"), *extra]


_CONTROLS: weakref.WeakKeyDictionary[Device, RunControl] = weakref.WeakKeyDictionary()


def control(dev: Device) -> RunControl:
    """The RunControl of ``dev`` (one per device, as the stub has)."""
    rc = _CONTROLS.get(dev)
    if rc is None:
        rc = _CONTROLS[dev] = RunControl(dev)
    return rc


def step(dev: Device, granularity: str | None = None, timeout: float = 300) -> Stop:
    """``stepi``: one unit (or one part of it). A fault stop raises DeviceError with the
    stop's message, so tests assert on the model's report as on an exception."""
    return _raise_fault(control(dev).step(timeout, granularity))


def run(dev: Device, timeout: float = 300) -> Stop:
    """``continue`` with no breakpoints: to the end of the program (faults raise)."""
    return _raise_fault(control(dev).run(timeout))


def _raise_fault(stop: Stop | None) -> Stop:
    if stop is None:
        raise TimeoutError("the device is still running")
    if stop.reason == "fault":
        raise DeviceError(stop.message)
    return stop


def source_docs(device: str) -> dict[str, tuple[str, dict[str, str]]]:
    """The doc texts as written in configs/<device>.toml, with their seed citations (the loaded
    description shows users the text without them): register name as written (``L{i}_RCNT``)
    -> (doc, {field name: doc})."""
    import tomllib

    data = tomllib.loads((ROOT / "configs" / f"{device}.toml").read_text())
    return {r["name"]: (r.get("doc", ""), {f["name"]: f.get("doc", "") for f in r.get("field", [])})
            for b in data.get("block", []) for r in b.get("register", [])}


class TelnetClient:
    """A line client of the telnet port: ``until`` reads up to a marker (kept in the text),
    ``command`` sends one line and returns what came before the next prompt."""

    def __init__(self, port: int, timeout: float = 10) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def until(self, marker: bytes) -> bytes:
        while marker not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError(self.buf)
            self.buf += data
        out, _, self.buf = self.buf.partition(marker)
        return out + marker

    def command(self, line: str | bytes) -> str:
        self.sock.sendall((line.encode() if isinstance(line, str) else line) + b"\r\n")
        return self.until(b"> ").decode("latin-1")[:-len("> ")]

    def close(self) -> None:
        self.sock.close()


def load_benchmark(name: str):
    """A script of benchmarks/ (no package) as a module, registered in sys.modules first (its
    dataclasses need that); loaded once."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod



class FieldReads:
    """The register fields a decoder reads by name (issue 33 #1): :meth:`wrap` gives a view
    that records each field read, (register definition, field) -> the widths it had in the
    definitions read (units may share a definition name), in :attr:`seen`."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], set[int]] = {}

    def wrap(self, view):
        return _RecordedView(view, self.seen)

    def reader(self, read):
        """``read`` (a function giving FieldViews) with every view it gives recorded."""
        return lambda *args: self.wrap(read(*args))

    def check(self, description, assumed: dict[tuple[str, str], int | set[int]]) -> None:
        """Every field read is declared in ``assumed``: (register definition, field) -> the
        width the decoder relies on (a set where units sharing the name differ); each field
        read had such a width, and each declared field exists with it in ``description``."""
        undeclared = set(self.seen) - set(assumed)
        assert not undeclared, f"fields read but not declared in the test: {sorted(undeclared)}"
        described: dict[tuple[str, str], set[int]] = {}
        for r in description.registers:
            for f in r.fields:
                described.setdefault((r.definition.type_id, f.name), set()).add(f.width)
        for key, width in assumed.items():
            want = width if isinstance(width, set) else {width}
            assert described.get(key, set()) & want, (
                f"{description.source}: {key[0]}.{key[1]} is {sorted(described.get(key, []))} "
                f"bits, the decoder assumes {sorted(want)}")
            assert self.seen.get(key, set()) <= want, (
                f"{description.source}: {key[0]}.{key[1]} read with {sorted(self.seen[key])} "
                f"bits, the decoder assumes {sorted(want)}")


class _RecordedView:
    def __init__(self, view, seen: dict) -> None:
        self._view, self._seen = view, seen

    def __getattr__(self, name: str):
        view = self._view
        f = view.fields.get(name)
        if f is not None:
            self._seen.setdefault((view.register, name), set()).add(f.width)
        return getattr(view, name)


def emu_kernels():
    """Every numba dispatcher defined in accelstub.emu, as (module name, name, dispatcher): the
    kernel checks (tests/framework/test_emu_jit.py, test_kernel_twins.py) walk the same set."""
    import importlib
    import pkgutil

    from numba.core.registry import CPUDispatcher

    import accelstub.emu

    for info in pkgutil.walk_packages(accelstub.emu.__path__, "accelstub.emu."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == module.__name__:
                yield info.name, name, obj
