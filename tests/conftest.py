"""Shared fixtures: an in-process stub with a 4-layer MAX78000 test program, and a kernel
warm-up for the folders whose tests have halt/step time limits (their conftest uses it)."""
from __future__ import annotations

import pytest

from accelstub.stub.install_check import install_problem

PROBLEM = install_problem()
if PROBLEM:  # before any import that the stale folder would break
    raise pytest.UsageError(PROBLEM)

from accelstub.devices import open_device  # noqa: E402
from accelstub.stub.server import StubServer  # noqa: E402

from .helpers import step  # noqa: E402
from .max78000 import programs  # noqa: E402


@pytest.fixture(scope="session")
def warm_kernels():
    """Run one layer once: on a fresh clone numba compiles the MAX78000 kernels (several seconds,
    then cached on disk), and a test with a halt or step time limit must not pay for that inside
    a unit that cannot be interrupted."""
    device = open_device("max78000")
    programs.apply(device, 1)
    step(device)


@pytest.fixture
def stub(warm_kernels):
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
