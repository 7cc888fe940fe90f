"""The history's journal between checkpoints (issue 29 #5, devices/history.py): stops and the
debugger's changes while halted are journaled legs, replayed forward from the checkpoint before
them when going back. On every device, over programs of at least 20 units: what the debugger
writes while halted between two continues (memory, a register, a scratch core register) is
there again at every boundary after it reached by going back, and going forward again from
there reproduces every state of the first run; over more continues than a checkpoint holds,
each with another input written before it, every boundary going back equals the one going
forward; a change no log names (stored straight into memory) ends a checkpoint and is undone
exactly. The reference is a second device stepped unit by unit with the same changes."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from accelstub.devices import DEVICES, history
from accelstub.devices.history import CHECKPOINT_EVERY
from accelstub.devices.runcontrol import RunControl

from .test_reverse import diff, fingerprint, loaded, long_program

Change = Callable[[RunControl, int], None]


def feed(rc: RunControl, seed: int) -> None:
    """The debugger's changes while halted before the next unit: another input (random bytes
    into the first elements of the next unit's declared input tensor, else into the lowest
    data memory), a register without side effects on the unit and a scratch core register."""
    dev = rc.device
    rng = np.random.default_rng(seed)
    index = [u.address for u in dev.units()].index(dev.pc)
    spec = next((t for t in dev.unit_tensors(index) if t.name == "input"), None)
    if spec is not None:
        for addr in spec.addresses().reshape(-1)[:48].tolist():
            dev.write(int(addr), rng.integers(0, 256, spec.itemsize, np.uint8).tobytes())
    else:
        addr = min(m.region.base for m in dev.bus.memories.values()
                   if m.region.kind != "rom" and m.region.name != "emu_program")
        dev.write(addr, rng.integers(0, 256, 16, np.uint8).tobytes())
    dev.write_register("EMU_THROTTLE_US", 1 + seed % 3)
    dev.write_core("r3", seed)


def reference(name: str, path: Path, at: list[int], change: Change = feed) -> list[dict]:
    """The state at every boundary stepping forward, with ``change`` (seed = units done) at
    the boundaries after ``at`` units: the state of boundary n is after that change."""
    rc = loaded(name, path)
    states = []
    while True:
        if rc.device.units_done in at:
            change(rc, rc.device.units_done)
        states.append(fingerprint(rc))
        if rc.step(300).reason == "done":
            states.append(fingerprint(rc))
            return states


def continues(name: str, path: Path, at: list[int], change: Change = feed) -> RunControl:
    """The same program run by continues that stop at breakpoints on the units after ``at``
    units, with the same changes made at each stop."""
    rc = loaded(name, path)
    pcs = [u.address for u in rc.device.units()]
    for n in at:
        rc.add_breakpoint(pcs[n])
    while True:
        stop = rc.run(300)
        if stop.reason == "done":
            break
        assert stop.reason == "breakpoint", stop
        change(rc, rc.device.units_done)
    rc.clear_breakpoints()
    return rc


def back_to(rc: RunControl, states: list[dict], n: int) -> None:
    """Step back from where the device is to the boundary after ``n`` units, each boundary
    on the way equal to the forward one."""
    while rc.device.units_done > n:
        stop = rc.reverse(True, 300)
        assert stop.reason == "step" and not stop.replaylog, stop
        k = rc.device.units_done
        got = fingerprint(rc)
        assert got == states[k], f"unit {k}: {diff(got, states[k])}"


@pytest.mark.parametrize("name", DEVICES)
def test_a_write_between_two_continues_is_there_after_going_back_and_forward(name, tmp_path,
                                                                           monkeypatch):
    """Two continues with the debugger's changes between them, all journaled (no checkpoint
    since the load; CHECKPOINT_S, run time, set out of reach so a slow machine cannot add
    one): stepping back replays from the checkpoint over the change, so every boundary after
    it has it; going forward from the first boundary after it reproduces the first run's
    states; going back again crosses it to the start."""
    monkeypatch.setattr(history, "CHECKPOINT_S", 3600.0)
    path = long_program(name, tmp_path)
    at = [3]
    states = reference(name, path, at)
    rc = continues(name, path, at)
    h = rc.history
    assert not h.entries and [leg.redo is not None for leg in h.legs] == [False, True, False]
    assert fingerprint(rc) == states[-1]
    back_to(rc, states, at[0])
    assert h.legs == [] and h.entries  # closed into a checkpoint, replayed unit by unit
    while rc.device.units_done < len(states) - 2:
        assert rc.step(300).reason == "step"
        k = rc.device.units_done
        assert fingerprint(rc) == states[k], f"unit {k}: {diff(fingerprint(rc), states[k])}"
    assert rc.step(300).reason == "done" and fingerprint(rc) == states[-1]
    back_to(rc, states, 0)
    assert rc.reverse(True, 300).replaylog == "begin" and fingerprint(rc) == states[0]


@pytest.mark.parametrize("name", DEVICES)
def test_going_back_over_more_continues_than_a_checkpoint_holds(name, tmp_path, monkeypatch):
    """CHECKPOINT_EVERY + 1 continues, another input written before each: checkpoints that
    close journaled host changes (redo) among stops (CHECKPOINT_S out of reach, so the count
    makes them on any machine); stepping back over all of them gives every forward boundary,
    the ones right after each change included."""
    monkeypatch.setattr(history, "CHECKPOINT_S", 3600.0)
    path = long_program(name, tmp_path)
    at = list(range(1, CHECKPOINT_EVERY + 2))  # CHECKPOINT_EVERY + 1 changes, 2 legs each
    states = reference(name, path, at)
    assert len(states) - 2 > at[-1]
    rc = continues(name, path, at)
    h = rc.history
    assert any(len(e.legs) > 1 and any(leg.redo is not None for leg in e.legs)
               for e in h.entries)
    assert fingerprint(rc) == states[-1]
    back_to(rc, states, 0)
    assert rc.reverse(True, 300).replaylog == "begin" and fingerprint(rc) == states[0]


def store_directly(rc: RunControl, seed: int) -> None:
    """A change while halted that no log names: bytes stored straight into a memory's array
    (as a write hook or a command may), the memory touched, plus :func:`feed`'s changes."""
    feed(rc, seed)
    mem = next(m for m in rc.device.bus.memories.values()
               if m.region.kind != "rom" and m.region.name != "emu_program")
    mem.data[:8] = np.random.default_rng(seed).integers(0, 256, 8, np.uint8)
    mem.touch()


def test_a_change_no_log_names_closes_the_journal_and_is_undone_exactly(tmp_path, monkeypatch):
    """A change while halted outside the bus's logs between journaled continues cannot be
    replayed: History.hidden sees the change counters move more than the bus's stores, so it
    is recorded as the last leg of a checkpoint (compared memory by memory), and going back
    over it still gives every forward state."""
    monkeypatch.setattr(history, "CHECKPOINT_S", 3600.0)
    path = long_program("max78000", tmp_path)
    at = [3, 6]
    states = reference("max78000", path, at, store_directly)
    rc = continues("max78000", path, at, store_directly)
    h = rc.history
    assert [[(len(leg.units), leg.redo) for leg in e.legs] for e in h.entries] == \
        [[(3, None), (0, None)]] * 2  # each change the last leg of a checkpoint
    assert fingerprint(rc) == states[-1]
    back_to(rc, states, 0)
    assert rc.reverse(True, 300).replaylog == "begin" and fingerprint(rc) == states[0]


@pytest.mark.parametrize("name", DEVICES)
def test_reverse_continue_over_checkpoints_of_changes_reaches_the_start(name, tmp_path,
                                                                        monkeypatch):
    """Going back without a stop inside them undoes each checkpoint whole (no replay): its
    undo holds what the journaled changes left different (History._redo_ranges), so the start
    is reached byte for byte; going forward again from there is the program without them."""
    monkeypatch.setattr(history, "CHECKPOINT_S", 3600.0)
    path = long_program(name, tmp_path)
    at = list(range(1, CHECKPOINT_EVERY + 2))
    states = reference(name, path, at)
    rc = continues(name, path, at)
    assert any(leg.redo is not None for e in rc.history.entries for leg in e.legs)
    stop = rc.reverse(False, 300)
    assert stop.replaylog == "begin" and fingerprint(rc) == states[0]
    plain = reference(name, path, [])
    assert rc.run(300).reason == "done" and fingerprint(rc) == plain[-1]
