"""The Python API's reverse execution and named snapshots (issue 29 #3), on both back ends and
all four devices: reverse_step() and reverse_continue() bring back the state a forward step saw
(pc, unit, every byte the units wrote), history_begin says where the history starts, and
snapshot_save/restore/list/delete work as `monitor snapshot` does."""
from __future__ import annotations

import pytest

from accelstub import Session, TargetError

from .test_session import _warm, open_session, session  # noqa: F401  (fixtures)


def written(s: Session) -> list[int]:
    """The units that declare an output tensor (what the program writes)."""
    return [i for i in range(len(s.units())) if any(t.name == "output" for t in s.tensors(i))]


def image(s: Session, units: list[int]) -> bytes:
    """Every declared output tensor's bytes as memory holds them now."""
    return b"".join(s.tensor(i).tobytes() for i in units)


def test_reverse_step_and_continue_restore_what_a_forward_step_saw(session):
    s = session
    first = s.reverse_step()
    assert first.history_begin and first.unit == 0  # nothing recorded yet
    ranges = written(s)
    seen = [(s.pc, image(s, ranges))]
    while True:
        stop = s.step()
        seen.append((s.pc, image(s, ranges)))
        if stop.reason != "step":
            break
    assert stop.reason == "done"
    for k in range(len(seen) - 2, -1, -1):
        back = s.reverse_step()
        assert back.reason == "step" and not back.history_begin
        assert (back.pc, image(s, ranges)) == seen[k], k
    assert s.cont().reason == "done" and image(s, ranges) == seen[-1][1]
    begin = s.reverse_continue()
    assert begin.history_begin and begin.unit == 0 and image(s, ranges) == seen[0][1]


def test_named_snapshots_save_restore_list_and_delete(session):
    s = session
    assert s.snapshots() == []
    s.step()
    s.snapshot_save("after_one")
    ranges = written(s)
    saved = (s.pc, image(s, ranges), s.counters())
    s.cont()  # to the end (NE16's demo, one job, is there already: an idle stop)
    assert s.unit is None and s.snapshots() == ["after_one"]
    stop = s.snapshot_restore("after_one")
    assert (stop.pc, image(s, ranges), s.counters()) == saved
    assert "restored snapshot after_one" in stop.message
    assert s.reverse_step().history_begin  # the history starts again at the snapshot
    s.cont()
    assert s.unit is None
    s.snapshot_delete("after_one")
    assert s.snapshots() == []
    with pytest.raises(TargetError, match="no snapshot named 'after_one'"):
        s.snapshot_restore("after_one")
    with pytest.raises(TargetError, match="is not a snapshot name"):
        s.snapshot_save("bad/name")
