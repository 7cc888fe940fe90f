"""Reverse execution on every device (issue 29): stepping back restores the whole device state
byte for byte (registers, every memory, counters, the model's own state, the host program's
position) at every unit of a program of at least 20 units, after stepping forward or after one
`continue` (the fast path's blocks); going forward again reproduces the final output; going
back stops at breakpoints, at the last unit that wrote a watched address, and at the start of
the history, which the budget moves forward. Programs are made by the project's builders."""
from __future__ import annotations

import hashlib
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from accelstub.devices import DEVICES, open_device
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.cli import demo_program
from accelstub.stub.server import StubServer
from accelstub.testkit import max78000_build as M
from accelstub.testkit import ne16_build as N
from accelstub.testkit import nvdla_build as V


def long_program(name: str, tmp: Path) -> Path:
    """A whole network of at least 20 units on ``name``."""
    if name == "max78000":  # 21 layers
        net = M.Network(3, 8, 8, [M.Layer(8, kernel=3, pad=1, activation="relu", shift=-1)
                                  for _ in range(20)]
                        + [M.Layer(4, kernel=1, pad=0, wide=True)], name="deep")
        return M.build(net, seed=2).write(tmp / "deep")
    if name == "ne16":  # a stride-2 layer of 28 jobs
        layer = N.Layer(13, 25, 24, 34, stride=2, padding=(1, 1, 1, 1), name="s2")
        return N.build(layer, seed=3).write(tmp / "ne16_s2")
    if name == "nvdla":  # 20 hardware layers
        layers = [V.Conv(8, 8, 16, 16, clip=4, cvt=(0, 1, 3)) for _ in range(20)]
        return V.build(layers, "deep", 1).write(tmp / "nvdla_deep")
    return demo_program(name)  # ethos-u85: the demo network, 25 commands


def loaded(name: str, path: Path) -> RunControl:
    server = StubServer([open_device(name)], gdb_port=None, telnet_port=None, tcl_port=None)
    server.load_program(path, log=lambda s: None)
    return server.targets[0]


def fingerprint(rc: RunControl) -> dict:
    """The whole state: every register value, a digest of every memory's bytes, counters,
    pc, the scratch core registers, the model's own state and the driver's position."""
    dev, host = rc.device, rc.host
    return {"regs": dev.regs.snapshot(),
            "mem": {k: hashlib.sha256(m.data.tobytes()).hexdigest()
                    for k, m in dev.bus.memories.items()},
            "cycles": dev.cycles, "units": dev.units_done, "pc": dev.pc, "core": dict(dev.core),
            "model": hashlib.sha256(pickle.dumps(dev._state())).hexdigest(),
            "host": None if host is None else host.mark()}


def diff(a: dict, b: dict) -> list[str]:
    out = [k for k in a if k not in ("mem", "regs") and a[k] != b[k]]
    out += [f"memory {m}" for m in a["mem"] if a["mem"][m] != b["mem"][m]]
    out += [f"register {r:#x}" for r in a["regs"] if a["regs"][r] != b["regs"].get(r)]
    return out


def untimed(message: str) -> str:
    return re.sub(r"\d+ ms", "N ms", message)


def forward(rc: RunControl) -> tuple[list[dict], list]:
    """Step to the end: the state at every boundary, and the stop of the end."""
    states = [fingerprint(rc)]
    while True:
        stop = rc.step(300)
        assert stop is not None and stop.reason in ("step", "done"), stop
        states.append(fingerprint(rc))
        if stop.reason == "done":
            return states, stop


@pytest.fixture(scope="module", params=DEVICES)
def recorded(request, tmp_path_factory):
    """(device, program, states at every unit going forward, the final stop)."""
    path = long_program(request.param, tmp_path_factory.mktemp(request.param))
    rc = loaded(request.param, path)
    states, end = forward(rc)
    assert len(states) - 1 >= 20, f"{request.param}: only {len(states) - 1} units"
    return request.param, path, states, end


class Words:
    """``a in Words(rc)``: whether the word at ``a`` lies in one of the device's memories."""

    def __init__(self, rc: RunControl) -> None:
        self.bus = rc.device.bus

    def __contains__(self, a: int) -> bool:
        r = self.bus.region_at(a)
        return r is not None and r.name in self.bus.memories and self.bus.is_mapped(a, 4)


def step_back_all(rc: RunControl, states: list[dict]) -> None:
    for k in range(len(states) - 2, -1, -1):
        stop = rc.reverse(True, 300)
        assert stop is not None and stop.reason == "step" and not stop.replaylog, (k, stop)
        got = fingerprint(rc)
        assert got == states[k], f"unit {k}: {diff(got, states[k])}"
    stop = rc.reverse(True, 300)
    assert stop.replaylog == "begin" and "start of the recorded history" in stop.message
    assert fingerprint(rc) == states[0]


def test_stepping_back_after_stepi_equals_every_forward_state(recorded):
    name, path, states, end = recorded
    rc = loaded(name, path)
    assert forward(rc)[0] == states
    step_back_all(rc, states)
    again = rc.run(300)  # forward again: the same end, output and checks (times aside)
    assert again.reason == "done" and untimed(again.message) == untimed(end.message)
    assert fingerprint(rc) == states[-1]
    assert "PASS" in again.message and "FAIL" not in again.message, again.message


def test_stepping_back_over_a_continue_equals_every_forward_state(recorded):
    """One continue runs blocks of units at once where the device can (Device.run_block);
    going back replays a block unit by unit and then restores each unit's state."""
    name, path, states, _ = recorded
    rc = loaded(name, path)
    assert rc.run(300).reason == "done"
    assert fingerprint(rc) == states[-1]
    step_back_all(rc, states)


def test_reverse_continue_stops_at_the_last_unit_that_wrote_a_watched_word(recorded):
    name, path, states, _ = recorded
    rc = loaded(name, path)
    rc.run(300)
    writes = [w for _, w in rc.host.history]  # (pc, ranges written) of every unit
    last: dict[int, int] = {}
    memory = Words(rc)
    for k, ranges in enumerate(writes):
        for s, e in ranges:
            for a in range(s & ~3, e, 4):
                if a in memory:
                    last[a] = k
    # a word whose last writer is as near the middle of the program as any
    mid = len(writes) // 2
    addr, k = min(last.items(), key=lambda t: (abs(t[1] - mid), t[0]))
    rc.add_watchpoint("w", addr, 4)
    stop = rc.reverse(False, 300)
    assert stop.reason == "watchpoint" and stop.watch[0] == "watch", stop
    assert addr <= stop.watch[1] < addr + 4  # the first byte of the word the unit wrote
    assert rc.device.units_done == k and fingerprint(rc) == states[k]
    # further back: the unit before it that wrote the word, or the start of the history
    earlier = [j for j, ranges in enumerate(writes[:k])
               if any(s < addr + 4 and addr < e for s, e in ranges)]
    stop = rc.reverse(False, 300)
    if earlier:
        assert stop.reason == "watchpoint" and rc.device.units_done == earlier[-1]
    else:
        assert stop.replaylog == "begin" and fingerprint(rc) == states[0]


def test_reverse_continue_stops_at_a_breakpoint_and_at_the_start(recorded):
    name, path, states, _ = recorded
    rc = loaded(name, path)
    pcs = []
    while rc.device.units_done < 5:
        pcs.append(rc.device.pc)
        rc.step(300)
    rc.run(300)
    rc.add_breakpoint(pcs[3])
    stop = rc.reverse(False, 300)
    assert stop.reason == "breakpoint" and rc.device.pc == pcs[3]
    assert fingerprint(rc) == states[3]
    stop = rc.reverse(False, 300)  # the breakpoint it stands on does not stop it again
    assert stop.replaylog == "begin" and fingerprint(rc) == states[0]


def test_the_debuggers_writes_while_halted_are_recorded_too(recorded):
    """Writes while halted (memory, a register, a scratch core register) are a transition of
    their own: stepping back over the next unit returns to the state with them; the step back
    before it undoes them and the unit before. Writes and no step: the step back undoes them
    and one unit."""
    name, path, states, _ = recorded
    rc = loaded(name, path)
    rc.step(300)
    rc.step(300)
    dev = rc.device
    addr = min(m.region.base for m in dev.bus.memories.values() if m.region.kind != "rom"
               and m.region.name != "emu_program")
    dev.write(addr, b"\xa5\x5a\xa5\x5a")
    dev.write_core("r3", 0x1234)
    dev.write_register("EMU_THROTTLE_US", 1)  # a register without side effects on the unit
    poked = fingerprint(rc)
    assert poked != states[2]
    rc.step(300)
    rc.reverse(True, 300)
    assert fingerprint(rc) == poked
    rc.reverse(True, 300)
    assert fingerprint(rc) == states[1]
    rc.step(300)
    dev.write(addr, b"\x01\x02\x03\x04")  # and with no step after them
    rc.reverse(True, 300)
    assert fingerprint(rc) == states[1]


def test_the_budget_drops_the_oldest_history_and_the_start_says_so(tmp_path):
    rc = loaded("max78000", long_program("max78000", tmp_path))
    rc.history.budget = 3 * 4096  # a few checkpoints' worth
    states, _ = forward(rc)
    h = rc.history  # each step is one boundary (a leg), journaled or in a checkpoint
    kept = sum(len(e.legs) for e in h.entries) + len(h.legs)
    assert 1 <= kept < len(states) - 1 and rc.history.dropped == len(states) - 1 - kept
    stop = rc.reverse(False, 300)
    assert stop.replaylog == "begin" and "older boundaries were dropped" in stop.message
    # closing the journal to go back may drop more: history begins after the dropped units
    assert rc.device.units_done == h.dropped >= len(states) - 1 - kept
    assert fingerprint(rc) == states[rc.device.units_done]


def test_recording_off_refuses_to_go_back_and_says_why(tmp_path):
    rc = loaded("max78000", long_program("max78000", tmp_path))
    rc.history.budget = 0
    rc.step(300)
    before = fingerprint(rc)
    stop = rc.reverse(True, 300)
    assert stop.replaylog == "begin" and "--history-mib 0" in stop.message
    assert fingerprint(rc) == before and not rc.history.entries


def test_a_long_continue_records_boundaries_on_the_way(tmp_path, monkeypatch):
    """A continue notes each unit's pc and writes and records a whole boundary every
    CHECKPOINT_S of run time (history.py): with 0 s every unit is one, and going back over
    them is exact without a replay."""
    from accelstub.devices import history

    rc = loaded("max78000", long_program("max78000", tmp_path))
    states, _ = forward(loaded("max78000", long_program("max78000", tmp_path / "again")))
    monkeypatch.setattr(history, "CHECKPOINT_S", 0.0)
    assert rc.run(300).reason == "done"
    assert [len(e.units) for e in rc.history.entries] == [1] * (len(states) - 1)
    step_back_all(rc, states)


def test_merge_ranges_numpy_path_equals_its_loop():
    """merge_ranges' numpy path (for thousands of ranges) against its Python loop on random
    ranges, touching and overlapping ones included (each path called directly: merge_ranges
    picks one by size), and both against a byte mask for the ranges that cover bytes (an
    empty range is kept as it is by both paths, so the mask cannot name it). The history
    joins its ranges in a kernel of its own, checked against a byte mask
    in tests/framework/test_history_undo.py."""
    import random

    from accelstub.devices.ranges import _merge_loop, _merge_numpy

    rng = random.Random(29)
    for n in (0, 1, 63, 64, 65, 500, 3000):
        ranges = [(s, s + rng.randint(0, 40)) for s in (rng.randint(0, 4000) for _ in range(n))]
        assert _merge_numpy(ranges) == _merge_loop(ranges)
        # the reference for the ranges that cover bytes: each maximal run of covered bytes
        covered = np.zeros(4100, bool)
        for s, e in ranges:
            covered[s:e] = True
        edges = np.flatnonzero(np.diff(np.r_[0, covered.view(np.int8), 0]))
        want = list(zip(edges[::2].tolist(), edges[1::2].tolist()))
        nonempty = [(s, e) for s, e in ranges if e > s]
        assert _merge_numpy(nonempty) == _merge_loop(nonempty) == want
