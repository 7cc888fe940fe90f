"""SVG snapshots of the TUI's main screens (pytest-textual-snapshot).

Deterministic: a fresh in-process stub with the test program, a fixed terminal size, a fixed
connection label instead of the (random) port, and a wait until the first data is on screen.
Update the baselines with ``python -m pytest tests/test_tui_snapshots.py --snapshot-update``.
"""
from __future__ import annotations

import time

import pytest
import pytest_textual_snapshot  # noqa: F401,E402  (test extra: fail loudly, never skip)

from accelstub.tui.app import AccelApp
from accelstub.tui.target import Target


@pytest.fixture
def app(stub):
    t = Target("127.0.0.1", stub.gdb[0].port)
    try:
        yield AccelApp(t, label="snapshot", idle_period=0.1)
    finally:
        t.close()


def waiting(cond_for, key: str | None = None):
    """run_before: switch to a view, then wait until ``cond_for(app)`` holds."""
    async def run_before(pilot) -> None:
        app = pilot.app
        deadline = time.monotonic() + 10
        while "pc 0x" not in str(app.query_one("#statusline").render()):
            assert time.monotonic() < deadline, "no first poll"
            await pilot.pause(0.05)
        if key:
            await pilot.press(key)
        while not cond_for(app):
            assert time.monotonic() < deadline, "view data never arrived"
            await pilot.pause(0.05)
        await pilot.pause(0.3)  # two more polls: nothing changes while halted
    return run_before


def regs_loaded(app) -> bool:
    v = app.query_one("#registers-view")
    return bool(v.block) and all(r.name in v.values for r in v.block.registers[:6])


def program_listed(app) -> bool:
    """The Program view shows the whole listing (the 4 layers, and the end row where the stub
    lists one)."""
    units = app.query_one("#program-view").units
    return bool(units) and app.query_one("#prog-table").row_count == len(units)


def test_snapshot_registers_80x24(app, snap_compare):
    assert snap_compare(app, terminal_size=(80, 24), run_before=waiting(regs_loaded))


def test_snapshot_registers_large(app, snap_compare):
    assert snap_compare(app, terminal_size=(160, 48), run_before=waiting(regs_loaded))


def test_snapshot_memory_80x24(app, snap_compare):
    assert snap_compare(app, terminal_size=(80, 24), run_before=waiting(
        lambda a: 0x50400000 in a.query_one("#mem-hex").data, "2"))


def test_snapshot_program_80x24(app, snap_compare):
    assert snap_compare(app, terminal_size=(80, 24), run_before=waiting(
        program_listed, "3"))


def test_snapshot_status_80x24(app, snap_compare):
    assert snap_compare(app, terminal_size=(80, 24), run_before=waiting(
        lambda a: "halted" in str(a.query_one("#status-table").render()), "4"))


def test_snapshot_tensor_80x24(app, snap_compare):
    assert snap_compare(app, terminal_size=(80, 24), run_before=waiting(
        lambda a: a.query_one("#tensor-view").data is not None, "5"))


@pytest.fixture(params=("max78000", "ethos-u85", "ne16", "nvdla"))
def device_app(request):
    """The app on a stub of each device with its bundled demo (issue 25 #14: the views at
    80x24 on every device, not only on the MAX78000 test program)."""
    from accelstub.devices import open_device
    from accelstub.stub.cli import demo_program
    from accelstub.stub.server import StubServer

    server = StubServer([open_device(request.param)], gdb_port=0, telnet_port=None,
                        tcl_port=None)
    server.load_program(demo_program(request.param), log=lambda s: None)
    server.start()
    t = Target("127.0.0.1", server.gdb[0].port)
    try:
        yield AccelApp(t, label="snapshot", idle_period=0.1)
    finally:
        t.close()
        server.stop()


def test_snapshot_device_registers_80x24(device_app, snap_compare):
    assert snap_compare(device_app, terminal_size=(80, 24), run_before=waiting(regs_loaded))


def test_snapshot_device_program_80x24(device_app, snap_compare):
    """After one step: the second unit marked, its label as in the status line."""
    async def run_before(pilot) -> None:
        app = pilot.app
        await waiting(program_listed, "3")(pilot)
        line = str(app.query_one("#statusline").render())
        await pilot.press("s")
        deadline = time.monotonic() + 20
        while str(app.query_one("#statusline").render()) == line or \
                app.query_one("#program-view").units is None:
            assert time.monotonic() < deadline, "the step never ended"
            await pilot.pause(0.05)
        await pilot.pause(0.3)
    assert snap_compare(device_app, terminal_size=(80, 24), run_before=run_before)


def test_snapshot_help_80x24(app, snap_compare):
    assert snap_compare(app, terminal_size=(80, 24), run_before=waiting(
        lambda a: True, "question_mark"))


def test_snapshot_tensor_declared_80x24(snap_compare):
    """The MAX78000 demo after one step: the Tensor view follows Layer 0's output (16 channels
    of 16x16, CHW), every value whole at 80 columns."""
    from accelstub.devices import open_device
    from accelstub.stub.cli import demo_program
    from accelstub.stub.server import StubServer

    server = StubServer([open_device("max78000")], gdb_port=0, telnet_port=None, tcl_port=None)
    server.load_program(demo_program("max78000"), log=lambda s: None)
    server.start()
    t = Target("127.0.0.1", server.gdb[0].port)

    async def run_before(pilot) -> None:
        await waiting(lambda a: a.query_one("#tensor-view").data is not None, "5")(pilot)
        await pilot.press("s")
        view = pilot.app.query_one("#tensor-view")
        deadline = time.monotonic() + 20
        while view.spec is None or view.data is None:
            assert time.monotonic() < deadline, "the view never followed the step"
            await pilot.pause(0.05)
        await pilot.pause(0.3)
    try:
        assert snap_compare(AccelApp(t, label="snapshot", idle_period=0.1),
                            terminal_size=(80, 24), run_before=run_before)
    finally:
        t.close()
        server.stop()
