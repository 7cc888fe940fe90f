"""The NE16 job queue as the seed's TRIGGER/ACQUIRE/STATUS/RUNNING_JOB/SOFT_CLEAR describe it
([NE16: Register map] and the protocol tests [NE16: Register map]), driven by
bus reads and writes."""
from __future__ import annotations

import pytest

from accelstub.devices import open_device
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.commands import CommandContext, execute
from tests.helpers import step

from .jobs import (
    ACQUIRE,
    FINISHED,
    L1,
    NE16,
    RUNNING_JOB,
    SOFT_CLEAR,
    STATUS,
    TRIGGER,
    r32,
    submit,
    w32,
)
from .test_ne16_jobs import A_REGS

CONFIG0_C0, CONFIG0_C1 = "CONFIG0_C0", "CONFIG0_C1"


@pytest.fixture
def dev():
    d = open_device("ne16")
    d.write(L1, bytes(0x5000))
    return d


def test_after_reset_everything_reads_zero(dev):
    assert r32(dev, STATUS) == r32(dev, RUNNING_JOB) == r32(dev, FINISHED) == 0
    assert all(dev.read_register(f"{n}_C{c}") == 0 for c in (0, 1)
               for n in ("WEIGHTS_PTR", "SUBTILE_NB0", "CONFIG0"))
    assert dev.finished()


def test_one_job(dev):
    """ACQUIRE gives 0; while queued STATUS = 1; after it STATUS = 0, RUNNING_JOB = 0 (the last
    job run), FINISHED = 1, one end-of-job event."""
    assert submit(dev, A_REGS) == 0
    assert r32(dev, STATUS) == 0x1 and r32(dev, RUNNING_JOB) == 0
    assert step(dev).reason == "done"
    assert r32(dev, STATUS) == 0 and r32(dev, RUNNING_JOB) == 0 and r32(dev, FINISHED) == 1
    assert dev.interrupt_counts() == {"EVT": 1} and dev.counters()["events"] == 1


def test_two_jobs_fill_the_queue_and_a_third_acquire_fails(dev):
    assert submit(dev, A_REGS) == 0
    assert submit(dev, {**A_REGS, "CONFIG0": 0x00878017}) == 1
    assert r32(dev, STATUS) == 0x101
    # both contexts keep their own registers (the second job went to context 1)
    assert dev.read_register(CONFIG0_C0) == 0x00008017
    assert dev.read_register(CONFIG0_C1) == 0x00878017
    assert int.from_bytes(dev.host_read(ACQUIRE, 4), "little") == 0xFFFFFFFF
    assert step(dev).reason == "step" and r32(dev, STATUS) == 0x100
    assert r32(dev, RUNNING_JOB) == 1  # the second job runs now
    assert int.from_bytes(dev.host_read(ACQUIRE, 4), "little") == 2  # context 0 free again
    w32(dev, TRIGGER, 0)
    assert r32(dev, STATUS) == 0x101


def test_acquire_locks_and_the_debuggers_read_does_not_acquire(dev):
    assert r32(dev, ACQUIRE) == 0 and r32(dev, ACQUIRE) == 0  # debugger reads: no side effect
    assert int.from_bytes(dev.host_read(ACQUIRE, 4), "little") == 0
    assert int.from_bytes(dev.host_read(ACQUIRE, 4), "little") == 0xFFFFFFFE  # locked
    assert r32(dev, ACQUIRE) == 0xFFFFFFFE
    w32(dev, TRIGGER, 0)
    assert int.from_bytes(dev.host_read(ACQUIRE, 4), "little") == 1


def test_job_registers_reach_the_acquired_context(dev):
    """The offload pointer selects the bank the bus reaches (round-robin contexts)."""
    submit(dev, {**A_REGS, "WEIGHTS_PTR": 0x1111})
    dev.host_read(ACQUIRE, 4)
    w32(dev, NE16 + 0x20, 0x2222)
    assert dev.read_register("WEIGHTS_PTR_C0") == 0x1111
    assert dev.read_register("WEIGHTS_PTR_C1") == 0x2222
    assert r32(dev, NE16 + 0x20) == 0x2222


def test_deferred_start(dev):
    """TRIGGER != 0 commits without starting; the job runs once the next one is committed with
    TRIGGER = 0, and both run in order [NE16: TRIGGER]."""
    assert submit(dev, A_REGS, trigger=1) == 0
    assert r32(dev, STATUS) == 0x1 and dev.finished()
    stop = RunControl(dev).step(30)
    assert stop.reason == "idle" and "held" in stop.message
    assert submit(dev, A_REGS) == 1
    assert not dev.finished()
    assert step(dev).reason == "step" and r32(dev, RUNNING_JOB) == 1
    assert step(dev).reason == "done" and r32(dev, RUNNING_JOB) == 1 and r32(dev, FINISHED) == 2


def test_soft_clear(dev):
    """0 clears the status and the register file; non-0 keeps the register file
    [NE16: SOFT_CLEAR]."""
    submit(dev, A_REGS)
    w32(dev, SOFT_CLEAR, 1)
    assert r32(dev, STATUS) == 0 and dev.read_register(CONFIG0_C0) == A_REGS["CONFIG0"]
    assert dev.finished() and r32(dev, ACQUIRE) == 0
    submit(dev, A_REGS)
    w32(dev, SOFT_CLEAR, 0)
    assert r32(dev, STATUS) == 0 and dev.read_register(CONFIG0_C0) == 0
    assert dev.read_register("WEIGHTS_PTR_C0") == 0


def test_trigger_without_acquire_is_ignored_with_a_warning(dev):
    w32(dev, TRIGGER, 0)
    assert r32(dev, STATUS) == 0 and dev.finished()
    ctx = CommandContext([RunControl(dev)])
    assert "TRIGGER written (0x0) with no job acquired: ignored [NE16: TRIGGER]" in \
        execute(ctx, "ne16 warnings")


def test_subtile_steps_and_the_queue_in_monitor(dev):
    """`step subtile` runs one output subtile of the running job; `monitor ne16 queue` shows
    the contexts and the progress."""
    regs = {**A_REGS, "SUBTILE_NB1": 0x00020002, "SUBTILE_REM1": 0x00010001,
            "SUBTILE_REM2": 0x00030003}  # 4 output subtiles
    submit(dev, regs)
    rc = RunControl(dev)
    ctx = CommandContext([rc])
    execute(ctx, "step subtile")
    assert "queue[0]: job 0 in C0, running, 1/4 subtiles done" in execute(ctx, "ne16 queue")
    assert dev.units_done == 0 and dev.pc == 0xF000_1000  # still job 0 (program window)
    execute(ctx, "step")  # the rest of the job
    assert dev.units_done == 1 and "queue: empty" in execute(ctx, "ne16 queue")
    assert dev.pc == 0xF000_001C  # the end address: no job left
    assert "3x3, 16 -> 32 channels, 4x4 output" in execute(ctx, "ne16 job C0")  # 3 + 1


def test_units_list_the_queue(dev):
    submit(dev, A_REGS)
    submit(dev, {**A_REGS, "CONFIG0": 0x00878017}, trigger=0)
    units = dev.units()
    assert [u.label for u in units] == ["job 0", "job 1"]
    assert [u.address for u in units] == [0xF000_1000, 0xF000_1004]
    assert units[0].summary == ("3x3, 16 -> 32 channels, 3x3 output, 8-bit weights, u8, "
                                "1 subtiles (ID 0, C0)")
    assert units[1].summary.endswith(" (ID 1, C1)")
