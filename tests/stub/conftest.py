"""Tests here have halt/step time limits: compile the kernels before the first of them. ``rc``:
a MAX78000 run control, halted when the test ends. ``session``: a no-ack GdbSession on the
``stub`` fixture's first server whose transport keeps what it sends (``session.conn.sent``)."""
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


class _Sink:
    """A transport that keeps what the session sends."""

    peer = "test"

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.sent.append(data)


@pytest.fixture
def session(stub):
    from accelstub.stub.session import GdbSession

    s = GdbSession(stub.gdb[0], _Sink())
    s.noack = True
    return s
