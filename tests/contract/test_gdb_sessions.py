"""One debugger behaviour on every device, as real gdb-multiarch sees it (issue 25 #13): a
breakpoint on the second unit stops there, `watch` on an output word stops after the unit that
changes it, the end of the program is reported as such (and `stepi` there says so), and a failing
monitor command shows only its message. Group names: test_gdb_groups.py. gdb-multiarch skips
locally when missing and fails in CI (tests/helpers.require_gdb)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from accelstub.devices import DEVICES, open_device
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.cli import demo_program
from accelstub.stub.server import StubServer
from accelstub.testkit.ne16_build import Layer, build

from ..helpers import require_gdb, run_gdb

END = 0xF000_001C  # EMU_END: the end address of every device's programs


def program(name: str, tmp_path: Path) -> Path:
    """The bundled demo, but for NE16, whose demo is one job: a stride-2 layer of 9 jobs."""
    if name == "ne16":
        layer = Layer(9, 11, 24, 34, stride=2, padding=(1, 1, 1, 1), name="s2")
        return build(layer, seed=3).write(tmp_path / "ne16_s2")
    return demo_program(name)


def loaded(name: str, path: Path, **ports) -> StubServer:
    server = StubServer([open_device(name)], **({"gdb_port": None, "telnet_port": None,
                                                 "tcl_port": None} | ports))
    server.load_program(path, log=lambda s: None)
    return server


def first_change(name: str, path: Path) -> tuple[int, int]:
    """(k, address): the first unit k >= 1 that changes a word it writes which no earlier unit
    wrote. Two devices in lockstep, one a unit behind: the one behind holds each word's value
    before the unit ran."""
    ahead: RunControl = loaded(name, path).targets[0]
    behind: RunControl = loaded(name, path).targets[0]
    written: set[int] = set()
    for k in range(len(ahead.device.units())):
        ahead.step(120)
        words = [a for s, e in ahead.last_touched.writes for a in range(s & ~3, e, 4)]
        for addr in words:
            if k >= 1 and addr not in written and \
                    ahead.device.read(addr, 4) != behind.device.read(addr, 4):
                return k, addr
        written.update(words)
        behind.step(120)
    raise AssertionError(f"{name}: no unit after the first changes a word")


@pytest.fixture(params=DEVICES)
def served(request, tmp_path):
    require_gdb()
    path = program(request.param, tmp_path)
    server = loaded(request.param, path, gdb_port=0)
    server.start()
    try:
        yield request.param, path, server
    finally:
        server.stop()


def pcs(out: str) -> list[int]:
    return [int(v, 16) for v in re.findall(r"^PC=(0x[0-9a-f]+)$", out, re.M)]


def test_break_watch_end_and_monitor_errors_under_gdb(served):
    name, path, server = served
    units = [u.address for u in server.targets[0].device.units()]
    assert len(units) >= 2 and END not in units
    k, addr = first_change(name, path)
    after_k = units[k + 1] if k + 1 < len(units) else END
    out = run_gdb([
        f"break *{units[1]:#x}", "continue", 'printf "PC=%#x\\n", $pc',
        "delete", "monitor reset init", "maintenance flush register-cache",
        f"watch *(unsigned int *){addr:#x}", "continue", 'printf "PC=%#x\\n", $pc',
        "delete", "continue", 'printf "PC=%#x\\n", $pc',
        "stepi", 'printf "PC=%#x\\n", $pc',
        "monitor no_such_command",
        'printf "DONE\\n"',
    ], port=server.ready_info()["gdb"][0], timeout=300)
    assert pcs(out) == [units[1], after_k, END, END], out
    assert f"Breakpoint 1, {units[1]:#010x} in ?? ()" in out, out
    assert f"Hardware watchpoint 2: *(unsigned int *){addr:#x}" in out and \
        "New value = " in out, out
    assert f"accelstub: {name} program ended: pc 0xf000001c is its end address (EMU_END)" \
        in out, out
    assert "the program has ended: pc 0xf000001c is its end address (EMU_END)" in out, out
    assert "Protocol error" not in out and "no_such_command" in out and "DONE" in out, out
