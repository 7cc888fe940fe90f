"""Ethos-U85 blocks (EthosU85.run_block): the units of a run replayed at once when no one looks
at single units, against the same runs unit by unit (a device whose blocks are off): memory,
every register, the model state (SET state, chain bookkeeping and FIFOs, LUT, stop state,
statistics), cycles, units done and the stop, after every run."""
from __future__ import annotations

import numpy as np

from accelstub.devices import open_device
from accelstub.devices.ethos_u85 import stream as es
from accelstub.devices.runcontrol import RunControl
from tests.ethos_u85.test_ethosu85_device import BUF, BUF2, QBASE, SRAM, STOP, Host, dma_cmds
from tests.ethos_u85.test_ethosu85_fastpath import chained_add
from tests.ethos_u85.test_ethosu85_ops_device import (
    acc_format,
    ifm,
    kernel,
    ofm,
    out,
    scale_cmds,
    weight_cmds,
)

H, W, C, D = 3, 4, 6, 18
MOVED = SRAM + 0x20000


def program(d, rng, weights) -> list[int]:
    """A DMA of the input, a convolution into the chaining FIFO, an add of it and a broadcast
    row into an NHCWB16 tensor, a max pool of that with per-channel scales (a scale stream:
    no kept run, the general path inside a block), a 1x1x1 subtraction whose result flag
    picks the branch, a multiply the branch skips when the flag is 1, STOP."""
    head = (dma_cmds(H * W * C, 0x800, 0x6000)  # region 1 -> region 2, then DMA_WAIT
            + ifm("IFM", (H, W, C), 0x6000, region=2)
            + [("NPU_SET_IFM_DEPTH_M1", dict(depth_m1=C - 1))]
            + ofm((H, W, D), 0, out(zp=-2, rnd=0, per_channel=True), storage="chained",
                  region=0, blk=(H, W, 32))
            + kernel(3, 3, pad=(1, 1, 1, 1)) + acc_format()
            + weight_cmds(d, weights, ofm_blk_depth=32, kernel_hw=(3, 3))
            + scale_cmds(d, rng.integers(-900, 900, D), rng.integers(1 << 29, 1 << 31, D),
                         rng.integers(36, 40, D))
            + [("NPU_OP_CONV", {})] + chained_add(H, W, D) + [("NPU_OP_KERNEL_WAIT", {})]
            + ifm("IFM", (H, W, D), 0x200, fmt="nhcwb16", zp=1)
            + ofm((H, W, D), 0xA00, out(per_channel=True))
            + scale_cmds(d, rng.integers(-9, 9, D), rng.integers(1 << 29, 1 << 31, D),
                         rng.integers(30, 32, D), off=0x4800)
            + kernel(1, 1) + [("NPU_OP_POOL", dict(pooling_mode="max"))]
            + ifm("IFM", (1, 1, 1), 0x180)
            + ifm("IFM2", None, 0, storage="none", broadcast="scalar")
            + [("NPU_SET_OP_SCALAR", dict(scalar=1))] + ofm((1, 1, 1), 0xC00, out())
            + [("NPU_OP_ELEMENTWISE", dict(elementwise_mode="sub"))])
    skipped = (ifm("IFM", (H, W, D), 0xA00) + [("NPU_SET_OP_SCALAR", dict(scalar=-7))]
               + ofm((H, W, D), 0xD00, out(zp=-1, scale=3, shift=2))
               + [("NPU_OP_ELEMENTWISE", dict(elementwise_mode="mul"))])
    n_head, n_skip = len(es.encode_stream(head)), len(es.encode_stream(skipped))
    branch = [("NPU_OP_BRANCH", dict(branch_cond="rf_true",
                                     branch_target=4 * (n_head + 2 + n_skip)))]
    assert len(es.encode_stream(branch)) == 2
    return es.encode_stream(head + branch + skipped + STOP)


def state(d, stop) -> tuple:
    s = d._state()
    npu = s.pop("npu")
    fifos = {k: (v[0].tolist(), v[1]) for k, v in npu.fifo.items()}
    s["lut"] = bytes(s["lut"])
    return (d.read(SRAM, 0x28000), d.regs.snapshot(), s, (npu.chain_length, npu.num_ifm,
            npu.fifo_valid, fifos), d.cycles, d.units_done, stop.reason, stop.message)


def device(blocks: bool) -> tuple:
    """An Ethos-U85 device and its run control; ``blocks`` False: every run unit by unit (the
    runs the tests compare with)."""
    d = open_device("ethos-u85")
    if not blocks:
        d.blocks.stored = None
    return d, RunControl(d)


def returns_of(d, method: str) -> list:
    """The list that every later call of ``d``'s ``method`` appends its return value to."""
    returned = []
    real = getattr(d, method)

    def spy(*args):
        returned.append(real(*args))
        return returned[-1]
    setattr(d, method, spy)
    return returned


def runs(blocks: bool) -> tuple[list, list]:
    d, rc = device(blocks)
    replays = returns_of(d.blocks, "replay")  # (each replay's list of the units it ran)
    rng = np.random.default_rng(4)
    weights = rng.integers(-20, 21, (D, 3, 3, C))
    words = program(d, rng, weights)
    out_ = []
    for n in range(12):
        d.write(BUF, rng.integers(0, 256, 0x181).astype(np.uint8).tobytes())  # operands
        d.write(BUF + 0x800, rng.integers(0, 256, H * W * C).astype(np.uint8).tobytes())
        if n == 5:  # other weights of the same stream length under the same commands
            for _ in range(200):
                w2 = rng.integers(-20, 21, (D, 3, 3, C))
                if program(d, rng, w2) == words:
                    break
        base = MOVED if n == 7 else BUF
        if n == 7:  # region 1 moved: its operands with it
            d.write(MOVED, d.read(BUF, 0x1000))
        if n < 9:  # the driver's soft reset (from the tenth run on none: the statistics
            Host(d).boot()  # add up, and the SET state is the last run's)
        Host(d).start(words, basep={1: base, 2: BUF2})
        stop = rc.run_here()
        assert stop.reason == "done", stop
        out_.append(state(d, stop))
    return out_, replays


def test_blocks_equal_the_runs_unit_by_unit():
    """Twelve runs: the first walks its commands (no block kept), the second records the
    block, the rest replay it: with new inputs (the branch goes either way: the replay
    continues unit by unit from the branch where it differs from the recording), with
    rewritten weights (the convolution's kept run no longer applies: the general path, then
    its new kept run), with a region moved (another start state: recorded anew), without the
    soft reset between runs (statistics that add up; another SET state at the start)."""
    unit_by_unit, none = runs(False)
    blocked, replays = runs(True)
    assert none == []
    for n, (a, b) in enumerate(zip(unit_by_unit, blocked)):
        assert a == b, f"run {n}"
    done = [u[5] for u in unit_by_unit]
    per_run = [b - a for a, b in zip([0] + done, done)]
    assert len(set(per_run)) == 2  # the branch went both ways
    ran = [len(r) for r in replays]
    assert len(ran) >= 5 and max(ran) in per_run  # whole runs replayed at once
    assert min(ran) < min(per_run)  # and one left at the branch


def started(blocks: bool = True):
    """A device with the program placed and started, and its run control."""
    d, rc = device(blocks)
    rng = np.random.default_rng(4)
    words = program(d, rng, rng.integers(-20, 21, (D, 3, 3, C)))
    d.write(BUF, rng.integers(0, 256, 0x181).astype(np.uint8).tobytes())
    d.write(BUF + 0x800, rng.integers(0, 256, H * W * C).astype(np.uint8).tobytes())

    def start():
        Host(d).boot()
        Host(d).start(words, basep={1: BUF, 2: BUF2})
    start()
    return d, rc, start


def fourth_run_unit_by_unit() -> tuple:
    """The state after the fourth run of the program unit by unit."""
    d, rc, start = started(blocks=False)
    for _ in range(4):
        start()
        stop = rc.run_here()
    return state(d, stop)


def test_run_control_takes_blocks_only_where_no_one_looks_at_single_units():
    """Breakpoints, watchpoints, unit listeners, stepping and a throttle each keep the run
    unit by unit (run_block is not called); a plain continue takes blocks."""
    setups = {"breakpoint": lambda rc: rc.add_breakpoint(0xFFFF_FFF0),
              "watchpoint": lambda rc: rc.add_watchpoint("w", 0xFFFF_FF00, 4),
              "listener": lambda rc: rc.add_unit_listener(lambda n: None),
              "throttle": lambda rc: rc.device.regs.poke("EMU_THROTTLE_US", 1),
              "plain": lambda rc: None}
    for name, setup in setups.items():
        d, rc, _ = started()
        calls = []
        real = d.run_block
        d.run_block = lambda halt: calls.append(1) or real(halt)
        setup(rc)
        stop = rc.run_here()
        assert stop.reason == "done", (name, stop)
        assert bool(calls) == (name == "plain"), name
    d, rc, _ = started()
    d.run_block = lambda halt: (_ for _ in ()).throw(AssertionError("a block in a step"))
    assert rc.run_here(single=True).reason == "step"


def test_a_halt_before_a_replay_leaves_the_state_as_it_was():
    """run_block with the halt already requested replays nothing: the device's state is the
    start state, and the run after it ends as the run unit by unit does."""
    import threading

    d, rc, start = started()
    for _ in range(3):  # a walk, a recording, a replay
        start()
        assert rc.run_here().reason == "done"
    start()
    before = (d.read(SRAM, 0x28000), d.regs.snapshot(), d.cycles, d.units_done, dict(d.stats))
    halt = threading.Event()
    halt.set()
    assert d.run_block(halt) == []
    assert (d.read(SRAM, 0x28000), d.regs.snapshot(), d.cycles, d.units_done,
            dict(d.stats)) == before
    assert state(d, rc.run_here()) == fourth_run_unit_by_unit()


def test_a_host_program_waiting_for_its_interrupt_takes_blocks():
    """The bundled Vela demo run as `accelstub run` and a debugger session run it (its host
    program places it, starts the NPU, waits for the IRQ, checks the output), five times: with
    blocks (taken while the host program waits for the IRQ; the block ends at the unit that
    raises it) it prints what the runs unit by unit print, the host program records the same
    units (pc and writes, for naming a unit that wrote a wrong output) and the device ends in
    the same state."""
    import re
    from pathlib import Path

    from accelstub.devices.device import ProgramOptions
    from accelstub.stub.commands import CommandContext
    from accelstub.stub.program import load_program, run_to_end

    demo = Path(__file__).resolve().parents[2] / "configs" / "demo" / "ethos-u85_demo"

    def runs(blocks: bool) -> tuple[list, list]:
        d, rc = device(blocks)
        took = returns_of(d, "run_block")
        out = []
        for _ in range(5):
            load_program(CommandContext(targets=[rc]), demo, ProgramOptions())
            outcome = run_to_end(rc)
            lines = [re.sub(r", \d+ ms\)", ")", line) for line in outcome.lines]  # wall time
            assert outcome.code == 0, lines
            st = state(d, rc.last_stop)
            out.append((lines, rc.host.history, rc.host.units, st[:-1],
                        re.sub(r", \d+ ms\)", ")", st[-1])))
        return out, took

    unit_by_unit, none = runs(False)
    blocked, took = runs(True)
    assert none == [None] * 5
    assert blocked == unit_by_unit
    n = unit_by_unit[0][2]
    assert [len(t) for t in took] == [n] * 5  # a walk, a recording, three replays


def test_host_steps_between_units_keep_their_place_with_blocks():
    """A host program that, in the middle of the stream, polls QREAD for a command or takes the
    interrupt an NPU_OP_IRQ raises, and then writes the input of a later DMA and clears the
    IRQ: blocks are not taken while it polls, and end at the unit that raises the interrupt,
    so the later DMA copies what the host wrote and every run ends as unit by unit (five runs
    each)."""
    from accelstub.devices.host import HostProgram, Poll, WaitIrq, Write
    from tests.ethos_u85.test_ethosu85_device import stream

    first = dma_cmds(16, 0, 0) + [("NPU_OP_IRQ", dict(mask=1))]
    words = stream(first, dma_cmds(16, 0x40, 0x40), STOP)
    # the poll waits for QREAD at the first DMA's DMA_WAIT (no interrupt there)
    polled = 4 * len(stream(dma_cmds(16, 0, 0)[:-1]))

    def runs(wait: str, blocks: bool) -> list:
        d, rc = device(blocks)
        cmd = d.description.register("CMD").address
        qread = d.description.register("QREAD").address
        rng = np.random.default_rng(8)
        out = []
        for _ in range(5):
            d.write(BUF, rng.integers(0, 256, 0x80).astype(np.uint8).tobytes())
            Host(d).boot()
            Host(d).start(words)
            mid = Poll(qread, 0xFFFF_FFFF, polled) if wait == "poll" else WaitIrq("IRQ")
            rc.attach(HostProgram("t", [mid, Write(BUF + 0x40, rng.bytes(16)),
                                        Write(cmd, (0x6).to_bytes(4, "little")),
                                        WaitIrq("IRQ")]))
            stop = rc.run_here()
            assert stop.reason == "done" and rc.host.finished, stop
            out.append((state(d, stop), rc.host.history))
        return out

    for wait in ("poll", "irq"):
        assert runs(wait, True) == runs(wait, False), wait


def test_blocks_with_the_pmu_counting():
    """With the PMU counting (PMCR.cnt_en, the cycle counter enabled): with the driver's soft
    reset before each run the counters start at 0 every time, so blocks replay; without it
    they add up and no start state comes again: after four recordings no replay used,
    run_block declines and the runs go unit by unit. Either way every run ends as unit by
    unit, the counters included."""
    def runs(blocks: bool, reset: bool) -> tuple[list, list]:
        d, rc, _ = started(blocks)
        took = returns_of(d, "run_block")
        words = d.read(QBASE, 4 * d.regs.peek("QSIZE"))
        out = []
        for _ in range(8):
            if reset:
                Host(d).boot()
            Host(d).start(list(np.frombuffer(words, "<u4")), basep={1: BUF, 2: BUF2})
            Host(d).w("PMCR", 1)
            Host(d).w("PMCNTENSET", 1 << 31)
            stop = rc.run_here()
            out.append(state(d, stop))
        return out, [None if t is None else len(t) for t in took]

    ccnt = open_device("ethos-u85").description.register("PMCCNTR_LO").key
    for reset in (True, False):
        unit_by_unit, _ = runs(False, reset)
        blocked, took = runs(True, reset)
        assert blocked == unit_by_unit, reset
        cycles = [u[1][ccnt] for u in unit_by_unit]
        if reset:
            assert len(set(cycles)) == 1 and cycles[0] > 0
            assert took[3:] == [took[3]] * 5 and took[3] > 0  # replays
        else:
            assert cycles == sorted(cycles) and len(set(cycles)) == 8
            first = took.index(None)  # recordings first (the first runs keep their runs)
            assert 4 <= first < 8 and took[first:] == [None] * (8 - first)


def test_a_halt_in_the_middle_of_a_replay_stops_between_units():
    """A halt requested while a block replays (here by its third unit) stops after that unit
    with the state the units before left (pc at the next unit, its units done), and the
    continue after it ends as the run unit by unit does."""
    d, rc, start = started()
    for _ in range(3):  # a first run, a recording, a replay
        start()
        assert rc.run_here().reason == "done"
    (_, blk), = [e for e in d.blocks.stored.values() if e[1] is not None]
    k = next(i for i, s in enumerate(blk.steps) if callable(s) and i >= 2)
    real = blk.steps[k]

    def halting(dev):
        rc._halt.set()  # (what a Ctrl-C from a client does)
        return real(dev)
    blk.steps[k] = halting
    start()
    units0 = d.units_done
    stop = rc.run_here()
    assert stop.reason == "halt"
    assert d.units_done == units0 + k + 1 and d.pc == QBASE + blk.states[k + 1][0][
        d.description.register("QREAD").key]
    blk.steps[k] = real
    assert state(d, rc.run_here()) == fourth_run_unit_by_unit()
