"""Tests here have halt/step time limits: compile the kernels before the first of them. ``rc``:
a MAX78000 run control, halted when the test ends."""
import pytest

from accelstub.devices import open_device
from accelstub.devices.runcontrol import RunControl


@pytest.fixture(autouse=True)
def _warm(warm_kernels):
    pass


@pytest.fixture
def rc():
    r = RunControl(open_device("max78000"))
    try:
        yield r
    finally:
        if r.running:
            r.halt_and_wait(2)
