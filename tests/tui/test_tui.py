"""The Textual TUI against the in-process demo stub: Pilot tests of every view and control.

Facts of the demo used here: 4 layers, pc 0x50100010 before layer 0, SRAM word 0x04030201 at
0x50400000, a step advances pc by 4, continue completes and CNNx16_0_CTRL then reads 0x1009.
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import pytest

from accelstub.stub.client import RspClient
from accelstub.tui.app import AccelApp, HelpScreen, parse_connect, run_tui
from accelstub.tui.target import (
    Target,
    Unit,
    describe_stop,
    parse_memory_map,
    parse_status,
    parse_target_xml,
    parse_units,
)
from accelstub.tui.tensor import element_index, parse_shape, to_value


@pytest.fixture
def target(stub):
    """The TUI's two connections; made before any other client, so the TUI controls runs."""
    t = Target("127.0.0.1", stub.gdb[0].port)
    try:
        yield t
    finally:
        t.close()


@pytest.fixture
def other(stub, target):
    """A second client beside the TUI (as gdb would be)."""
    c = RspClient("127.0.0.1", stub.gdb[0].port)
    try:
        yield c
    finally:
        c.close()


def run(coro):
    return asyncio.run(coro)


@contextlib.contextmanager
def served(dev, program=None):
    """A stub for ``dev`` on an ephemeral 127.0.0.1 port (``program`` loaded) and a Target on
    it; both closed after the test."""
    from accelstub.stub.server import StubServer

    server = StubServer([dev], gdb_port=0, telnet_port=None, tcl_port=None)
    if program is not None:
        server.load_program(program, log=lambda s: None)
    server.start()
    t = Target("127.0.0.1", server.gdb[0].port)
    try:
        yield t
    finally:
        t.close()
        server.stop()


async def wait_for(pilot, cond: Callable[[], object], timeout: float = 60.0, what: str = ""):
    # 60 s: on a 2-core machine running two other test suites, 20 s once ran out before a stop
    # reached the view (the same wait takes well under a second on a quiet machine)
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        await pilot.pause(0.05)


def statusline(app) -> str:
    return str(app.query_one("#statusline").render())


def make_app(target, **kw) -> AccelApp:
    kw.setdefault("idle_period", 0.1)
    return AccelApp(target, label="test", **kw)


async def started(pilot):
    await wait_for(pilot, lambda: "pc 0x" in statusline(pilot.app), what="first poll")


async def show(pilot, key: str, view_id: str):
    """Press a view's number and wait until the view is active and holds the focus (focus moves
    through Textual's message queue: a key pressed before it lands would go to the old view)."""
    app = pilot.app
    await pilot.press(key)
    view = app.query_one(f"#{view_id}")
    await wait_for(pilot, lambda: app.active_view is view and app.focused is not None
                   and view in app.focused.ancestors_with_self, what=f"{view_id} focused")
    return view


# -- parsers ------------------------------------------------------------------------------------

def test_parse_target_xml_blocks_fields_enums(target):
    desc = parse_target_xml(target.poll.target_xml())
    assert desc.device == "max78000"
    names = [b.name for b in desc.blocks]
    assert names[0] == "core" and "q0" in names and "emu" in names
    ctrl = desc.register("CNNx16_0_CTRL")
    assert ctrl is not None and ctrl.block == "q0" and ctrl.bits == 32
    f = {x.name: x for x in ctrl.fields}
    assert (f["cnn_irq"].lsb, f["cnn_irq"].msb) == (12, 12)
    assert f["cnn_en"].describe(0x1009) == "start"
    assert f["cnn_irq"].describe(0x1009) == "active"
    assert desc.register("pc").regnum == 15


def test_parse_helpers():
    assert parse_units("0x50100010 Layer 0: conv 3x3\nnoise\n0x50100014 Layer 1: x: y\n") == [
        Unit(0x50100010, "Layer 0", "conv 3x3"), Unit(0x50100014, "Layer 1", "x: y")]
    assert parse_status("state: running\npc: 0x50100010\nirq.CNN: 1\n") == {
        "state": "running", "pc": "0x50100010", "irq.CNN": "1"}
    mm = parse_memory_map('<memory-map><memory type="ram" start="0x10" length="0x20"/>'
                          '</memory-map>')
    assert mm == [(0x10, 0x30, "ram")]
    assert describe_stop("T050f:10001050;") == "SIGTRAP (step/breakpoint)"
    assert describe_stop("T020f:10001050;") == "SIGINT (halted)"
    assert describe_stop("T050f:10001050;watch:50400010;") == "watchpoint hit at 0x50400010"
    assert parse_connect("localhost:3333") == ("localhost", 3333)
    assert parse_connect(":3333") == ("127.0.0.1", 3333)
    with pytest.raises(ValueError):
        parse_connect("nohost")
    assert parse_shape("4,8,8") == (4, 8, 8) and parse_shape("2x3x4") == (2, 3, 4)
    with pytest.raises(ValueError):
        parse_shape("4,8")
    assert element_index(1, 0, 0, (4, 2, 2), "HWC") == 1
    assert element_index(1, 0, 0, (4, 2, 2), "CHW") == 4
    assert to_value(0xFF, "int8") == -1 and to_value(0xFF, "uint8") == 255


def test_target_status_and_units(target):
    st = target.status()
    assert st["state"] == "halted"
    assert int(st["pc"], 16) == 0x50100010
    units = target.units()
    assert len(units) == 4 and units[0].address == 0x50100010
    assert target.read_memory(0x50400000, 4) == [1, 2, 3, 4]
    # outside the memory map: no request, None
    assert target.read_memory(0x4FFFFFFE, 4)[:2] == [None, None]


# -- attach and run control ---------------------------------------------------------------------

def test_attach_shows_halted_state_and_pc(target):
    async def go():
        app = make_app(target)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(pilot)
            await wait_for(pilot, lambda: "(Layer 0)" in statusline(app), what="unit label")
            line = statusline(app)
            assert "halted" in line and "pc 0x50100010" in line
            assert app.title == "accelstub — max78000"
    run(go())


def test_a_poll_landing_while_the_app_closes_is_dropped(target):
    """The poll thread may post a result after shutdown began (seen in CI): the widgets it would
    update are gone, and applying it raised NoMatches out of the app."""
    from accelstub.tui.app import PollResult

    async def go():
        app = make_app(target)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(pilot)
            view = app.query_one("#registers-view")
            names = [r.name for r in view.block.registers[:2]]
            status = dict(app.status)
        applied = app.applied
        app.on_poll_result(PollResult(status, view, {n: 1 for n in names}, False))
        assert app.applied == applied  # nothing applied, nothing raised
    run(go())


def test_step_advances_pc_by_4(target):
    async def go():
        app = make_app(target)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(pilot)
            await pilot.press("s")
            await wait_for(pilot, lambda: "pc 0x50100014" in statusline(app), what="pc+4")
            assert "single-step" in statusline(app) or "SIGTRAP" in statusline(app)
            await pilot.press("s")
            await wait_for(pilot, lambda: "pc 0x50100018" in statusline(app), what="pc+8")
    run(go())


def test_continue_completes(target, other):
    async def go():
        app = make_app(target)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(pilot)
            await pilot.press("c")
            await wait_for(pilot, lambda: not app.continue_pending and "complete" in
                           statusline(app), what="completion")
            assert "halted" in statusline(app)
            assert other.read_register("CNNx16_0_CTRL") == 0x1009
    run(go())


def test_halt_while_running_and_live_updates(target, other):
    other.write_register("EMU_THROTTLE_US", 1_000_000)  # 1 s per layer: a run to watch

    async def go():
        app = make_app(target)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(pilot)
            await show(pilot, "4", "status-view")  # the Status view, updating live
            await pilot.press("c")
            await wait_for(pilot, lambda: "RUNNING" in statusline(app), what="running")
            polls = app.polls
            # several updates while it runs (10/s nominal: benchmarks/bench_tui.py measures the
            # rate; a time bound here would fail on a loaded machine)
            await wait_for(pilot, lambda: app.polls - polls >= 3, what="live updates")
            assert "RUNNING" in statusline(app)
            await pilot.press("h")
            await wait_for(pilot, lambda: not app.continue_pending and "halted" in
                           statusline(app), what="halt")
            assert "debug-request" in statusline(app) or "SIGINT" in statusline(app)
            assert other.read_register("CNNx16_0_CTRL") != 0x1009  # stopped before the end
            status = app.query_one("#status-view")
            assert any(len(h) > 1 for h in status.history.values())
    run(go())


def test_reset_returns_to_first_unit(target):
    async def go():
        app = make_app(target)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(pilot)
            await pilot.press("s")
            await wait_for(pilot, lambda: "pc 0x50100014" in statusline(app))
            await pilot.press("r")
            await wait_for(pilot, lambda: "pc 0x50100010" in statusline(app) and
                           not app.ctl_busy, what="reset")
            assert "reset" in statusline(app)
    run(go())


def test_control_refused_is_shown_not_raised(stub):
    """gdb attached first controls run state: the TUI's step is refused, and says so."""
    gdb = RspClient("127.0.0.1", stub.gdb[0].port)
    t = Target("127.0.0.1", stub.gdb[0].port)
    try:
        async def go():
            app = make_app(t)
            async with app.run_test(size=(80, 24)) as pilot:
                await started(pilot)
                await pilot.press("s")
                await wait_for(pilot, lambda: "another client" in statusline(app),
                               what="refusal")
                assert "pc 0x50100010" in statusline(app)
        run(go())
    finally:
        t.close()
        gdb.close()


def test_connection_lost_is_shown(stub, target):
    async def go():
        app = make_app(target)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(pilot)
            stub.stop()
            await wait_for(pilot, lambda: "connection lost" in statusline(app), what="lost")
            await pilot.press("s")  # no traceback, just a note
            await pilot.pause(0.1)
            assert app.lost
    run(go())


def test_run_tui_errors_are_messages(capsys):
    assert run_tui(connect="127.0.0.1:1") == 1
    assert "error" in capsys.readouterr().err
    assert run_tui(device="no-such-device") == 1
    err = capsys.readouterr().err  # the stub's own refusal, naming the name and the choices
    assert "'no-such-device'" in err and "'max78000'" in err and "Traceback" not in err
    assert run_tui() == 2


# -- views ----------------------------------------------------------------------------------------

def test_registers_view_read_edit_and_highlight(target, other):
    async def go():
        app = make_app(target)
        async with app.run_test(size=(100, 30)) as pilot:
            await started(pilot)
            view = app.query_one("#registers-view")
            blocks = app.query_one("#reg-blocks")
            blocks.highlighted = [b.name for b in view.blocks].index("q0")
            await wait_for(pilot, lambda: view.values.get("CNNx16_0_CTRL") == 0x9,
                           what="CTRL read")
            table = app.query_one("#reg-table")
            names = [r.name for r in view.block.registers]
            table.focus()
            table.move_cursor(row=names.index("CNNx16_0_L3_WPTR_BASE"))
            before = other.read_register("CNNx16_0_L3_WPTR_BASE")
            after = before ^ 0x20
            await wait_for(pilot, lambda: view.values.get("CNNx16_0_L3_WPTR_BASE") == before)
            await pilot.press("e")
            edit = app.query_one("#reg-edit")
            assert edit.display and edit.has_focus and edit.value == f"{before:#x}"
            edit.value = f"{after:#x}"
            await pilot.press("enter")
            await wait_for(pilot, lambda: view.values.get("CNNx16_0_L3_WPTR_BASE") == after,
                           what="written value read back")
            assert "CNNx16_0_L3_WPTR_BASE" in view.changed  # highlighted
            assert other.read_register("CNNx16_0_L3_WPTR_BASE") == after
            assert not edit.display
            fields = str(app.query_one("#reg-fields").render())
            assert "CNNx16_0_L3_WPTR_BASE" in fields
            # a bad value is refused in the UI, nothing written
            await pilot.press("e")
            edit.value = "zz"
            await pilot.press("enter")
            await pilot.press("escape")
            assert other.read_register("CNNx16_0_L3_WPTR_BASE") == after
    run(go())


def test_registers_fields_decoded(target):
    async def go():
        app = make_app(target)
        async with app.run_test(size=(100, 30)) as pilot:
            await started(pilot)
            view = app.query_one("#registers-view")
            app.query_one("#reg-blocks").highlighted = [b.name for b in view.blocks].index("q0")
            await wait_for(pilot, lambda: view.values.get("CNNx16_0_CTRL") == 0x9)
            app.query_one("#reg-table").move_cursor(
                row=[r.name for r in view.block.registers].index("CNNx16_0_CTRL"))
            await wait_for(pilot, lambda: "cnn_en" in str(app.query_one("#reg-fields").render()),
                           what="CTRL's fields")
            fields = str(app.query_one("#reg-fields").render())
            assert "cnn_en" in fields and "start" in fields and "inactive" in fields
    run(go())


def test_memory_view_goto_region_and_changed_bytes(target, other):
    async def go():
        app = make_app(target)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(pilot)
            await show(pilot, "2", "memory-view")
            await pilot.press("g")
            goto = app.query_one("#mem-goto")
            assert goto.has_focus
            goto.value = "0x50400000"
            await pilot.press("enter")
            hexv = app.query_one("#mem-hex")
            await wait_for(pilot, lambda: hexv.data.get(0x50400003) == 4, what="SRAM bytes")
            text = str(hexv.render())
            assert "50400000  01 02 03 04" in text
            info = str(app.query_one("#mem-info").render())
            assert "0x50400000-0x5041ffff" in info and "128 KiB" in info
            await pilot.press("right", "right")
            assert hexv.cursor == 0x50400002
            info = str(app.query_one("#mem-info").render())
            assert "cursor 0x50400002 = 0x03" in info and "sram_q0_g0" in info
            # another client writes; the next stop refreshes and marks the bytes
            other.write_memory(0x50400020, b"\xaa\xbb")
            await pilot.press("s")
            await wait_for(pilot, lambda: {0x50400020, 0x50400021} <= hexv.changed,
                           what="changed bytes")
            # an address outside the memory map is shown, not requested
            await pilot.press("g")
            goto.value = "0x4ffffff0"
            await pilot.press("enter")
            await wait_for(pilot, lambda: 0x4ffffff0 in hexv.data)
            assert hexv.data[0x4ffffff0] is None and hexv.data[0x50000000] == \
                other.read_memory(0x50000000, 1)[0]
            assert "not in the memory map" in str(app.query_one("#mem-info").render())
    run(go())


def test_program_view_units_pc_and_breakpoint(target, other):
    async def go():
        app = make_app(target)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(pilot)
            prog = await show(pilot, "3", "program-view")
            table = app.query_one("#prog-table")
            await wait_for(pilot, lambda: table.row_count == 4, what="4 units")
            assert prog.pc == 0x50100010
            assert str(table.get_row_at(0)[0]).startswith("▶")
            table.focus()
            table.move_cursor(row=2)
            await pilot.press("b")
            await wait_for(pilot, lambda: 0x50100018 in prog.breakpoints, what="breakpoint")
            assert "●" in str(table.get_row_at(2)[0])
            await pilot.press("c")
            await wait_for(pilot, lambda: not app.continue_pending and
                           "pc 0x50100018" in statusline(app), what="stop at breakpoint")
            await wait_for(pilot, lambda: str(table.get_row_at(2)[0]).startswith("▶"))
            await pilot.press("b")
            await wait_for(pilot, lambda: 0x50100018 not in prog.breakpoints)
            await pilot.press("c")
            await wait_for(pilot, lambda: not app.continue_pending and
                           "complete" in statusline(app), what="completion")
            assert other.read_register("CNNx16_0_CTRL") == 0x1009
    run(go())


def test_status_view_counters_and_interrupts(target):
    async def go():
        app = make_app(target)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(pilot)
            status = await show(pilot, "4", "status-view")
            await wait_for(pilot, lambda: "halted" in str(
                app.query_one("#status-table").render()))
            await pilot.press("c")
            await wait_for(pilot, lambda: not app.continue_pending and
                           "complete" in statusline(app))
            irq = [k for k in status.status if k.startswith("irq.")]
            await wait_for(pilot, lambda: any(status.status.get(k) == "1" for k in irq),
                           what="an interrupt line up")
            # every metric has a history line; the interrupt line's ends on a raised level
            await wait_for(pilot, lambda: all(k in str(app.query_one("#status-metrics").render())
                                              for k in irq), what="history lines drawn")
            lines = str(app.query_one("#status-metrics").render()).splitlines()
            raised = [ln for ln in lines if ln.startswith(irq[0])]
            assert raised and raised[0].rstrip().endswith("█ 1")
    run(go())


def test_tensor_view_layouts_and_dtypes(target, other):
    other.write_memory(0x50400004, b"\xff")

    async def go():
        app = make_app(target)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(pilot)
            tv = await show(pilot, "5", "tensor-view")
            await wait_for(pilot, lambda: tv.data is not None, what="tensor read")
            # HWC, C=4: the first word holds channels 0..3 of pixel (0,0)
            assert [tv.value_at(c, 0, 0) for c in range(4)] == [1, 2, 3, 4]
            assert tv.value_at(0, 0, 1) == -1  # 0xff as int8
            assert " -1" in str(app.query_one("#tensor-map").render())
            tv.query_one("#tensor-dtype").value = "uint8"
            await wait_for(pilot, lambda: tv.value_at(0, 0, 1) == 255, what="uint8 shown")
            tv.query_one("#tensor-layout").value = "CHW"
            await wait_for(pilot, lambda: tv.order == "CHW" and tv.data is not None)
            assert [tv.value_at(0, 0, w) for w in range(4)] == [1, 2, 3, 4]
            shape = tv.query_one("#tensor-shape")
            shape.focus()
            shape.value = "2,2,2"
            await pilot.press("enter")
            await wait_for(pilot, lambda: tv.shape == (2, 2, 2) and tv.data is not None
                           and len(tv.data) == 8)
            app.query_one("#tensor-scroll").focus()
            await pilot.press("right_square_bracket")
            assert tv.channel == 1
            await pilot.press("v")
            assert tv.grid
            assert "c0" in str(app.query_one("#tensor-map").render())
    run(go())


def test_help_screen_lists_keys(target):
    async def go():
        app = make_app(target)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(pilot)
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            text = str(app.screen.query_one("#help").render())
            for word in ("step", "continue", "halt", "reset", "quit", "breakpoint"):
                assert word in text
            await pilot.press("escape")
            assert not isinstance(app.screen, HelpScreen)
    run(go())


def test_footer_shows_bindings(target):
    async def go():
        app = make_app(target)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(pilot)
            keys = {b.key for b in app.BINDINGS}
            assert {"s", "c", "h", "r", "q", "question_mark"} <= keys
            await pilot.press("q")
        assert app.return_code in (0, None)
    run(go())


def test_registers_view_shows_each_bank_under_its_own_name():
    """Banked registers (the toy device's two job contexts) are registers of their own in the
    TUI, read and written by name whatever the bank selector says."""
    from tests.contract.toy_device import Toy

    dev = Toy()
    dev.write_register("SRC_C0", 0x111)
    dev.write_register("SRC_C1", 0x222)

    async def go(t):
        app = make_app(t)
        async with app.run_test(size=(100, 30)) as pilot:
            await started(pilot)
            view = app.query_one("#registers-view")
            await wait_for(pilot, lambda: (view.values.get("SRC_C0"), view.values.get("SRC_C1"))
                           == (0x111, 0x222), what="both banks read")
            names = [r.name for r in view.block.registers]
            assert names.index("SRC_C0") < names.index("SRC_C1")

    with served(dev) as t:
        run(go(t))


def test_escape_closes_the_register_editor_after_tab(target):
    async def go():
        app = make_app(target)
        async with app.run_test(size=(100, 30)) as pilot:
            await started(pilot)
            view = app.query_one("#registers-view")
            app.query_one("#reg-table").focus()
            await wait_for(pilot, lambda: view.values, what="first register values")
            await pilot.press("e")
            edit = app.query_one("#reg-edit")
            await wait_for(pilot, lambda: edit.display and edit.has_focus, what="editor open")
            await pilot.press("tab")
            await wait_for(pilot, lambda: not edit.has_focus, what="focus moved by Tab")
            await pilot.press("escape")
            await wait_for(pilot, lambda: not edit.display and view.editing is None,
                           what="editor closed by Esc")
    run(go())


def test_tensor_view_opens_on_the_devices_data_memory():
    """On ethos-u85 the Tensor view opens on its SRAM window, not at a MAX78000 address."""
    from accelstub.devices import open_device

    dev = open_device("ethos-u85")
    sram = next(r for r in dev.description.regions if r.kind == "ram")

    async def go(t):
        app = make_app(t)
        async with app.run_test(size=(100, 30)) as pilot:
            await started(pilot)
            assert app.query_one("#tensor-view").address == sram.base
            assert app.query_one("#tensor-addr").value == f"{sram.base:#010x}"

    with served(dev) as t:
        run(go(t))


def test_ne16_queue_in_the_program_view_and_both_contexts_in_the_registers_view():
    """NE16 with its demo loaded: the program view lists the program's job with its context, the
    registers view shows the two job contexts as registers of their own, and a step runs the
    job (pc goes to the end address)."""
    from accelstub.devices import open_device
    from tests.helpers import ROOT

    async def go(t):
        app = make_app(t)
        async with app.run_test(size=(120, 40)) as pilot:
            await started(pilot)
            assert "pc 0xf0001000 (job 0)" in statusline(app)  # the program window
            view = app.query_one("#registers-view")
            await wait_for(pilot, lambda: "INFEAT_PTR_C1" in view.values, what="context 1")
            assert view.values["INFEAT_PTR_C0"] != 0 and view.values["INFEAT_PTR_C1"] == 0
            await show(pilot, "3", "program-view")
            table = app.query_one("#prog-table")
            await wait_for(pilot, lambda: table.row_count == 1, what="the program's job")
            row = " ".join(str(c) for c in table.get_row_at(0))
            assert "job 0" in row and "(ID 0, C0)" in row
            await pilot.press("s")
            await wait_for(pilot, lambda: "pc 0xf000001c" in statusline(app),
                           what="the end address")

    with served(open_device("ne16"), ROOT / "configs" / "demo" / "ne16_demo") as t:
        run(go(t))


def test_nvdla_layer_in_the_program_view_and_both_groups_in_the_registers_view():
    """NVDLA with its demo: the program view shows the armed hardware layer, the registers view
    both register groups of a unit, and a step runs the layer."""
    from accelstub.devices import open_device
    from tests.helpers import ROOT

    async def go(t):
        app = make_app(t)
        async with app.run_test(size=(120, 40)) as pilot:
            await started(pilot)
            assert "pc 0xf0001000 (layer 0" in statusline(app)  # the program window
            view = app.query_one("#registers-view")
            blocks = app.query_one("#reg-blocks")
            blocks.highlighted = [b.name for b in view.blocks].index("sdp")
            await wait_for(pilot, lambda: "SDP_D_DST_BASE_ADDR_LOW_G1" in view.values,
                           what="group 1")
            assert view.values["SDP_D_DST_BASE_ADDR_LOW_G0"] == 0x9000_0000
            await show(pilot, "3", "program-view")
            table = app.query_one("#prog-table")
            await wait_for(pilot, lambda: table.row_count == 2, what="the program's layers")
            assert "conv 3x3" in " ".join(str(c) for c in table.get_row_at(0))
            await pilot.press("s")
            await wait_for(pilot, lambda: "(layer 1" in statusline(app), what="next layer")

    with served(open_device("nvdla"), ROOT / "configs" / "demo" / "nvdla_demo") as t:
        run(go(t))
