"""`monitor snapshot` and `monitor history` (issue 29 #2, #3) as telnet, Tcl and gdb's monitor
share them (one command table), and `serve --history-mib`: output lines, the one-line errors for
bad input, and the budget reaching the history."""
from __future__ import annotations

import pytest

from accelstub.devices import open_device
from accelstub.devices.history import DEFAULT_BUDGET_MIB
from accelstub.stub.cli import demo_program, main
from accelstub.stub.commands import CommandError, execute
from accelstub.stub.server import StubServer


@pytest.fixture
def ctx():
    server = StubServer([open_device("max78000")], gdb_port=None, telnet_port=None,
                        tcl_port=None)
    server.load_program(demo_program("max78000"), log=lambda s: None)
    return server.context(log=lambda s: None)


def test_snapshot_commands_save_list_restore_delete(ctx):
    assert execute(ctx, "snapshot list") == "no snapshots"
    pc0 = ctx.target.device.pc
    assert execute(ctx, "snapshot save start") == f"saved snapshot start at pc 0x{pc0:08x}"
    ctx.target.device.write_core("r5", 0xBEEF)  # scratch core registers come back too
    execute(ctx, "step")
    execute(ctx, "snapshot save one")
    ctx.target.device.write_core("r5", 0x1111)  # neither snapshot's value
    assert execute(ctx, "snapshot list").splitlines() == [
        f"start: pc 0x{pc0:08x} (layer 0), 0 layers done",
        f"one: pc 0x{ctx.target.device.pc:08x} (layer 1), 1 layers done"]
    assert execute(ctx, "snapshot restore start").startswith(
        f"restored snapshot start: pc 0x{pc0:08x}")
    assert ctx.target.device.pc == pc0 and ctx.target.device.units_done == 0
    assert ctx.target.device.read_core("r5") == 0
    execute(ctx, "snapshot restore one")
    assert ctx.target.device.read_core("r5") == 0xBEEF and ctx.target.device.units_done == 1
    assert execute(ctx, "snapshot delete one") == "deleted snapshot one"
    with pytest.raises(CommandError, match=r"^snapshot restore: no snapshot named 'one' "
                       r"\(saved: start\)$"):
        execute(ctx, "snapshot restore one")
    with pytest.raises(CommandError, match="usage: snapshot"):
        execute(ctx, "snapshot rename start")


def test_history_command_shows_and_sets_the_budget(ctx):
    rc = ctx.target
    assert rc.history.budget == DEFAULT_BUDGET_MIB << 20
    execute(ctx, "step")
    execute(ctx, "step")
    assert execute(ctx, "history").startswith("history: 2 boundaries back (2 units)")
    assert execute(ctx, "history 1").endswith("of 1 MiB")
    assert execute(ctx, "history 0").startswith("history: 0 boundaries back")
    assert rc.reverse(True, 60).message.endswith("recording is off (--history-mib 0)")
    with pytest.raises(CommandError, match="history"):
        execute(ctx, "history lots")


def test_serve_history_mib_reaches_run_control_and_refuses_bad_sizes(capsys):
    server = StubServer([open_device("ne16")], gdb_port=None, telnet_port=None, tcl_port=None,
                        history_mib=3)
    assert server.targets[0].history.budget == 3 << 20
    with pytest.raises(SystemExit) as e:
        main(["serve", "max78000", "--history-mib", "-1"])
    assert e.value.code == 2
    assert "invalid size '-1'" in capsys.readouterr().err
