"""SVG snapshots of the TUI's main screens (pytest-textual-snapshot).

Deterministic: a fresh in-process stub with the test program, a fixed terminal size, a fixed
connection label instead of the (random) port, and a wait until the first data is on screen.
Update the baselines with ``python -m pytest tests/test_tui_snapshots.py --snapshot-update``.
"""
from __future__ import annotations

import time

import pytest

from accelstub.tui.app import AccelApp
from accelstub.tui.target import Target

import pytest_textual_snapshot  # noqa: F401,E402  (test extra: fail loudly, never skip)


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


def test_snapshot_registers_80x24(app, snap_compare):
    assert snap_compare(app, terminal_size=(80, 24), run_before=waiting(regs_loaded))


def test_snapshot_registers_large(app, snap_compare):
    assert snap_compare(app, terminal_size=(160, 48), run_before=waiting(regs_loaded))


def test_snapshot_memory_80x24(app, snap_compare):
    assert snap_compare(app, terminal_size=(80, 24), run_before=waiting(
        lambda a: 0x50400000 in a.query_one("#mem-hex").data, "2"))


def test_snapshot_program_80x24(app, snap_compare):
    assert snap_compare(app, terminal_size=(80, 24), run_before=waiting(
        lambda a: a.query_one("#prog-table").row_count == 4, "3"))


def test_snapshot_status_80x24(app, snap_compare):
    assert snap_compare(app, terminal_size=(80, 24), run_before=waiting(
        lambda a: "halted" in str(a.query_one("#status-table").render()), "4"))


def test_snapshot_tensor_80x24(app, snap_compare):
    assert snap_compare(app, terminal_size=(80, 24), run_before=waiting(
        lambda a: a.query_one("#tensor-view").data is not None, "5"))


def test_snapshot_help_80x24(app, snap_compare):
    assert snap_compare(app, terminal_size=(80, 24), run_before=waiting(
        lambda a: True, "question_mark"))
