"""An Ethos-U85 step's own costs (issue 26 #7): the unit listing is made once per stream and
kept while the stream's words, its placing registers and the program stay the same, and the
unit at pc is looked up in a table kept with that listing; a unit run one by one from a
state a stored block recorded runs as its operation table's rows (BlockReplay.step) and ends
as the per-operation path and a continue end it."""
from __future__ import annotations

import numpy as np
import pytest

from accelstub import Session
from accelstub.devices import open_device
from accelstub.devices.ethos_u85 import listing as L
from accelstub.devices.ethos_u85.blocks import NO_DATA
from accelstub.devices.ethos_u85.vela import place_vela_program, read_outputs, read_vela
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.commands.target import unit_at_pc
from accelstub.testkit.ethosu85_models import sample_inputs
from accelstub.testkit.ethosu85_networks import build_network
from tests.ethos_u85.compiled import compile_cache
from tests.ethos_u85.test_ethosu85_executor import state as run_state
from tests.ethos_u85.test_ethosu85_vela import needs_vela


def count_listings(monkeypatch) -> list[int]:
    """A list that gets the QBASE of every listing of a stream made from here on."""
    made: list[int] = []
    real = L.stream_units

    def counting(words, qbase, out):
        made.append(qbase)
        real(words, qbase, out)

    monkeypatch.setattr(L, "stream_units", counting)
    return made


@pytest.fixture
def demo(monkeypatch):
    """The bundled demo in-process, and a list that counts the listings made."""
    made = count_listings(monkeypatch)
    with Session.open("ethos-u85", None) as s:
        yield s, s.backend.device, made


def test_the_listing_is_kept_over_steps_and_the_unit_at_pc_follows_the_pc(demo):
    s, dev, made = demo
    first = dev.units()
    assert len(made) == 1
    for i in range(len(first)):
        assert unit_at_pc(dev) == i
        assert dev.units() is first  # the same listing object: not made again
        s.step(timeout=300)
    assert len(made) == 1
    assert unit_at_pc(dev) is None  # past the last unit: the end address


def test_a_write_into_the_command_stream_lists_it_again(demo):
    s, dev, made = demo
    first = dev.units()
    words = dev.stream.words()
    cmd = next(c for c in dev.stream.decoded() if c.name == "NPU_SET_IFM_DEPTH_M1")
    at = dev.qbase + cmd.offset
    old = bytes(dev.read(at, 4))
    depth = (cmd.fields["depth_m1"] + 1) & 0xFFFF  # one channel more
    dev.write(at, (int.from_bytes(old, "little") & 0xFFFF | depth << 16).to_bytes(4, "little"))
    again = dev.units()
    assert len(made) == 2 and again is not first
    assert [u.summary for u in again] != [u.summary for u in first]
    # the NPU's own stores do not count in the memory's version: the words themselves are
    # compared, so a store straight into the memory is seen too
    words[cmd.offset // 4] = np.frombuffer(old, "<u4")[0]
    assert [u.summary for u in dev.units()] == [u.summary for u in first]
    assert len(made) == 3
    assert dev.units() is dev.units() and len(made) == 3


def test_a_reload_and_another_queue_register_list_it_again(demo):
    s, dev, made = demo
    first = dev.units()
    s.step(timeout=300)
    s.reset("init")  # the program loaded again
    assert dev.units() is not first and len(made) == 2
    assert [u.summary for u in dev.units()] == [u.summary for u in first]
    assert len(made) == 2
    qsize = dev.regs.peek("QSIZE")
    s.write_register("QSIZE", qsize - 4)  # the stream one word shorter: a register it derives from
    assert len(dev.units()) <= len(first) and len(made) == 3


def test_a_dataset_run_lists_the_stream_once(monkeypatch):
    """Each sample of a dataset run rewinds (the model's state restored) and its driver writes
    QBASE and QSIZE again: neither lists the stream again, since the listing is kept by the
    stream's words, compared when next asked (each sample listed it again: ~1.5 ms of the
    demo's 1.9 ms sample, issue 31 #2); the outputs stay the first sample's."""
    from accelstub.evaluation import Evaluator

    made = count_listings(monkeypatch)
    ev = Evaluator("ethos-u85", None)
    try:
        x = np.zeros(ev.input.shape, ev.input.dtype)
        first = ev.run(x)
        listed = len(made)
        for _ in range(4):
            assert np.array_equal(ev.run(x), first)
        assert listed >= 1 and len(made) == listed
    finally:
        ev.close()


# -- a step through the operation table's rows (BlockReplay.step) ------------------------------

def state(d) -> tuple:
    """Everything a unit leaves: the executor tests' state (memories, registers with
    COND_STATUS, model state, FIFOs, cycles, counters), the interrupt lines and pc."""
    return run_state(d) + (d.interrupts(), d.pc)


def test_stepping_the_demo_through_rows_equals_the_per_operation_path_and_cont():
    """After three continues (a walk, a recording, a replay: the block and its table exist),
    the demo stepped unit by unit ends every unit in the state the per-operation path
    (blocks off) and a continue to that unit (a breakpoint there) give; units ran as rows
    and waits as the recording's state after them; stepping back over every unit (the
    history's journal) gives each state again."""
    with Session.open("ethos-u85", None) as fast, Session.open("ethos-u85", None) as ref, \
            Session.open("ethos-u85", None) as to:
        d, r, t = fast.backend.device, ref.backend.device, to.backend.device
        r.blocks.stored = None
        for _ in range(3):
            fast.reset("init")
            assert fast.cont(timeout=300).reason == "done"
        assert d.blocks.stored and d.blocks.units_stepped == 0
        fast.reset("init")
        ref.reset("init")
        seen = [state(d)]
        assert seen[0] == state(r)
        n = len(fast.units())
        for k in range(n):
            a, b = fast.step(timeout=300), ref.step(timeout=300)
            assert (a.reason, a.pc, a.unit) == (b.reason, b.pc, b.unit), k
            seen.append(state(d))
            assert seen[-1] == state(r), f"unit {k}"
            if k + 1 < n:
                to.reset("init")
                assert to.run_to(k + 1, timeout=300).unit == k + 1
                assert state(t) == seen[-1], f"cont to unit {k + 1}"
        assert a.reason == "done"
        (_, blk), = d.blocks.stored.values()
        waits = sum(step is NO_DATA for step in blk.steps[:-1])
        # rows ran besides the waits, the pairs through the chaining FIFO too: every unit but
        # the block's last (the one that may change the interrupt lines) was stepped
        assert waits < d.blocks.units_stepped < n
        assert d.blocks.units_stepped == n - 1
        for k in range(n, 0, -1):
            fast.reverse_step(timeout=300)
            assert state(d) == seen[k - 1], k - 1


def test_a_changed_register_between_steps_takes_the_per_operation_path():
    """The state before a unit is compared with the recording's: a register the debugger
    wrote between two steps (an IFM base) makes that unit go through the per-operation path,
    as a device without blocks runs it."""
    with Session.open("ethos-u85", None) as fast, Session.open("ethos-u85", None) as ref:
        d, r = fast.backend.device, ref.backend.device
        r.blocks.stored = None
        for _ in range(3):
            fast.reset("init")
            fast.cont(timeout=300)
        for s in (fast, ref):
            s.reset("init")
            s.step(timeout=300)
            s.write_register("BASEP1_LO", s.read_register("BASEP1_LO") + 16)
        for k in range(4):
            before = d.blocks.units_stepped
            fast.step(timeout=300), ref.step(timeout=300)
            assert state(d) == state(r), k
            assert d.blocks.units_stepped == before, k


@pytest.mark.slow
@needs_vela
def test_stepping_a_network_through_rows_equals_the_per_operation_path_and_cont(tmp_path):
    """DS-CNN (Vela, 256 MACs; every data step a row, the executor tests show), stepped unit
    by unit after three continues with other inputs: after every unit the same state as the
    same steps on a device without blocks (the per-operation path), the same outputs as a
    continue, and most units ran as rows."""
    src, path = compile_cache(tmp_path, build_network)("ds_cnn", 256)
    prog = read_vela(path)
    fast, ref = open_device("ethos-u85", macs=256), open_device("ethos-u85", macs=256)
    ref.blocks.stored = None
    rf, rr = RunControl(fast), RunControl(ref)
    for seed in range(3):
        for d, rc in ((fast, rf), (ref, rr)):
            place_vela_program(d, prog, sample_inputs(src.read_bytes(), seed=seed))
            assert rc.run_here().reason == "done"
    assert fast.blocks.stored
    xs = sample_inputs(src.read_bytes(), seed=7)
    for d in (fast, ref):
        place_vela_program(d, prog, xs)
    assert state(fast) == state(ref)
    units = 0
    while True:
        a, b = rf.run_here(single=True), rr.run_here(single=True)
        units += 1
        assert (a.reason, a.message) == (b.reason, b.message), units
        assert state(fast) == state(ref), f"unit {units}"
        if a.reason != "step":
            break
    assert a.reason == "done"
    stepped = [o.tobytes() for o in read_outputs(fast, prog)]
    place_vela_program(ref, prog, xs)
    assert rr.run_here().reason == "done"
    assert stepped == [o.tobytes() for o in read_outputs(ref, prog)]
    assert fast.blocks.units_stepped > units // 3, (fast.blocks.units_stepped, units)
