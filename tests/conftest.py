"""Shared fixtures: an in-process stub with a 4-layer test program, and real gdb-multiarch runs."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from accelstub.devices import open_device
from accelstub.stub.server import StubServer

from . import programs

GDB = shutil.which("gdb-multiarch")


def require_gdb() -> str:
    """gdb-multiarch, or a skip with a reason; in CI (CI=true) a missing gdb fails instead."""
    if GDB is None:
        if os.environ.get("CI"):
            pytest.fail("gdb-multiarch is required in CI (apt-get install -y gdb-multiarch)")
        pytest.skip("gdb-multiarch is not installed (apt-get install gdb-multiarch)")
    return GDB


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels():
    """Run one layer before any test: on a fresh clone numba compiles the MAX78000 kernels
    (several seconds, then cached on disk), and tests with halt/step time limits must not pay
    for that inside a unit that cannot be interrupted."""
    import threading

    device = open_device("max78000")
    programs.apply(device, 1)
    device.step(threading.Event())


@pytest.fixture
def stub():
    """A StubServer on free loopback ports serving max78000 with programs.chain_writes(4)
    loaded: halted before layer 0 (pc 0x50100010); input word 0x04030201 at 0x50400000; layers
    0 and 2 write 0x50400100-0x5040010f, layers 1 and 3 write 0x50400000-0x5040000f."""
    device = open_device("max78000")
    programs.apply(device, 4)
    server = StubServer([device], gdb_port=0, telnet_port=0, tcl_port=0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


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
    program as programs.chain_writes(4)."""
    return [sys.executable, "-m", "accelstub.stub.cli", "serve", "max78000", "--program",
            str(ROOT / "configs" / "demo" / "max78000_chain.cfg"), *extra]


ROOT = Path(__file__).resolve().parent.parent
