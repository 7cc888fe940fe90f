"""Reverse execution as real gdb-multiarch drives it, on every device (issue 29 #1): the stub
offers ReverseStep+/ReverseContinue+, so `reverse-stepi`, `reverse-nexti` and
`reverse-continue` work with no `record` command (the stub records, as rr's does);
`reverse-continue` honours breakpoints and stops on a `watch`ed word at the last unit that wrote
it; the start of the history is gdb's "No more reverse-execution history."; MI's
``-exec-step-instruction --reverse`` works too. gdb-multiarch skips locally when missing and
fails in CI (tests/helpers.require_gdb)."""
from __future__ import annotations

from accelstub.stub.client import RspClient

from ..helpers import run_gdb
from .test_gdb_sessions import END, first_change, loaded, pcs, program, served  # noqa: F401


def last_writer(name, path, addr: int) -> int:
    """pc of the last unit of the program that writes the word at ``addr``."""
    rc = loaded(name, path).targets[0]
    assert rc.run(300).reason == "done"
    return next(pc for pc, writes in reversed(rc.host.history)
                if any(s < addr + 4 and addr < e for s, e in writes))


def test_reverse_stepi_continue_watch_and_break_under_gdb(served):
    name, path, server = served
    units = [u.address for u in server.targets[0].device.units()]
    _, addr = first_change(name, path)
    writer = last_writer(name, path, addr)
    show = 'printf "PC=%#x\\n", $pc'
    out = run_gdb([
        "stepi", "stepi", show,
        "reverse-stepi", show,
        "reverse-nexti", show,
        "reverse-stepi", show,                   # at the start: nothing moves
        "continue", show,                        # forward again to the end
        f"watch *(unsigned int *){addr:#x}", "reverse-continue", show,
        "delete", "continue", f"break *{units[1]:#x}", "reverse-continue", show,
        "delete", "reverse-continue", show,
        'interpreter-exec mi "-exec-step-instruction"', show,
        'interpreter-exec mi "-exec-step-instruction --reverse"', show,
        'printf "DONE\\n"',
    ], port=server.ready_info()["gdb"][0], timeout=300)
    assert pcs(out) == [units[2] if len(units) > 2 else END, units[1], units[0], units[0], END,
                        writer, units[1], units[0], units[1], units[0]], out
    assert out.count("No more reverse-execution history.") == 2, out
    assert f"Hardware watchpoint 1: *(unsigned int *){addr:#x}" in out and "Old value" in out
    assert f"Breakpoint 2, {units[1]:#010x} in ?? ()" in out, out
    assert "Protocol error" not in out and "DONE" in out, out


def test_reverse_packets_and_the_start_of_history_in_stop_replies(tmp_path):
    """``bs``/``bc`` over raw RSP: qSupported offers them; at the start of the history the
    stop reply carries ``replaylog:begin``; an unknown ``b`` packet gets the empty reply."""
    server = loaded("max78000", program("max78000", tmp_path), gdb_port=0)
    server.start()
    try:
        with RspClient(port=server.ready_info()["gdb"][0]) as c:
            feats = c.request("qSupported:multiprocess+").split(b";")
            assert b"ReverseStep+" in feats and b"ReverseContinue+" in feats
            pc0 = c.read_register("pc")
            assert c.request("bs", 60).endswith(b"replaylog:begin;")
            c.request("vCont;s", 60)
            c.request("vCont;s", 60)
            reply = c.request("bs", 60)
            assert b"replaylog" not in reply and c.read_register("pc") != pc0
            assert c.request("bc", 60).endswith(b"replaylog:begin;")
            assert c.read_register("pc") == pc0
            assert c.request("bx") == b""
    finally:
        server.stop()
