"""NVDLA's producer/consumer register groups, S_STATUS/S_POINTER, dropped writes to an armed
group, and GLB's interrupt mask/set/status: the ping-pong scenario
[NVDLA-CONV: Programming order summary] on the SDP unit, driven by bus writes as a driver would."""
from __future__ import annotations

import pytest

from accelstub.devices import open_device
from accelstub.stub.program import run_to_end
from tests.helpers import ROOT, control, step

SDP = 0x9000
S_STATUS, S_POINTER, D_OP_ENABLE = SDP, SDP + 4, SDP + 0x38
GLB_MASK, GLB_SET, GLB_STATUS = 0x1004, 0x1008, 0x100C


def w(dev, addr: int, value: int) -> None:
    dev.write(addr, value.to_bytes(4, "little"))


def r(dev, addr: int) -> int:
    return int.from_bytes(dev.read(addr, 4), "little")


@pytest.fixture
def dev():
    return open_device("nvdla")


def arm_sdp_layer(dev, group: int, out: int) -> None:
    """An offline SDP pass-through of one atom: SDP and SDP_RDMA in ``group``."""
    for unit in (0x9000, 0x8000):
        w(dev, unit + 4, group)
    w(dev, 0x9000 + 0xB0, 0)  # SDP flying mode off
    w(dev, 0x9000 + 0xBC, 0)  # SDP INT8 (the reset value is INT16)
    w(dev, 0x8000 + 0x70, 0)  # SDP_RDMA: INT8, flying mode off
    for reg in (0x58, 0x6C, 0x80):  # BS, BN, EW bypassed
        w(dev, 0x9000 + reg, 1)
    w(dev, 0x9000 + 0xC4, 1)  # CVT_SCALE 1
    w(dev, 0x9000 + 0x48, out)
    w(dev, 0x9000 + 0x50, 8)
    w(dev, 0x9000 + 0x54, 8)
    for reg in (0x28, 0x40, 0x58):  # BRDMA/NRDMA/ERDMA disabled
        w(dev, 0x8000 + reg, 1)
    w(dev, 0x8000 + 0x18, 0x8000_0000)
    w(dev, 0x8000 + 0x20, 8)
    w(dev, 0x8000 + 0x24, 8)
    w(dev, 0x9000 + 0x38, 1)
    w(dev, 0x8000 + 0x08, 1)


def test_ping_pong_status_and_pointer(dev):
    w(dev, GLB_MASK, 0)
    dev.write(0x8000_0000, bytes(range(1, 9)))
    arm_sdp_layer(dev, 0, 0x9000_0000)
    assert (r(dev, S_STATUS), r(dev, S_POINTER)) == (0x0000_0001, 0x0000_0000)  # G0 running
    arm_sdp_layer(dev, 1, 0x9000_0100)
    assert (r(dev, S_STATUS), r(dev, S_POINTER)) == (0x0002_0001, 0x0000_0001)  # G1 pending
    assert step(dev).reason in ("step", "done")
    assert (r(dev, S_STATUS), r(dev, S_POINTER)) == (0x0001_0000, 0x0001_0001)  # G1 running
    assert r(dev, GLB_STATUS) == 0b01  # SDP_DONE_STATUS0
    assert dev.interrupts()["NVDLA"]
    step(dev)
    assert (r(dev, S_STATUS), r(dev, S_POINTER)) == (0x0000_0000, 0x0000_0001)  # both done
    assert r(dev, GLB_STATUS) == 0b11
    assert dev.read(0x9000_0000, 8) == dev.read(0x9000_0100, 8) == bytes(range(1, 9))
    assert dev.interrupt_counts()["SDP_0"] == dev.interrupt_counts()["SDP_1"] == 1


def test_writes_to_an_armed_group_are_dropped_and_counted(dev):
    arm_sdp_layer(dev, 0, 0x9000_0000)
    w(dev, SDP + 0x48, 0x9000_0800)  # producer is still G0, which is armed
    assert dev.read_register("SDP_D_DST_BASE_ADDR_LOW_G0") == 0x9000_0000
    assert dev.regs.ignored_writes["SDP_D_DST_BASE_ADDR_LOW_G0"] == 1
    w(dev, S_POINTER, 1)
    w(dev, SDP + 0x48, 0x9000_0800)  # G1 is idle: taken
    assert dev.read_register("SDP_D_DST_BASE_ADDR_LOW_G1") == 0x9000_0800


def test_glb_mask_set_and_write_one_to_clear(dev):
    w(dev, GLB_MASK, 0x3F03FE)  # everything masked but SDP_DONE_STATUS0
    w(dev, GLB_SET, 0b110)  # SDP_DONE1 and CDP_DONE0: masked
    assert r(dev, GLB_STATUS) == 0b110 and not dev.interrupts()["NVDLA"]
    w(dev, GLB_SET, 0b1)
    assert dev.interrupts()["NVDLA"] and dev.interrupt_counts()["SDP_0"] == 1
    assert dev.interrupt_counts()["SDP_1"] == 0  # set while masked: no event
    w(dev, GLB_STATUS, 0b101)  # write one to clear
    assert r(dev, GLB_STATUS) == 0b010 and not dev.interrupts()["NVDLA"]


def test_read_only_fields_keep_their_value_and_writes_are_counted(dev):
    w(dev, S_POINTER, 0x0001_0001)  # CONSUMER is the hardware's
    assert r(dev, S_POINTER) == 0x0000_0001
    w(dev, S_STATUS, 0xFFFF_FFFF)
    assert r(dev, S_STATUS) == 0 and dev.ro_writes["SDP_S_STATUS"] == 1


def test_a_group_armed_out_of_turn_waits_and_the_stuck_message_says_why(dev):
    w(dev, S_POINTER, 1)
    w(dev, 0x8004, 1)
    w(dev, D_OP_ENABLE, 1)
    w(dev, 0x8008, 1)
    assert r(dev, S_STATUS) == 0x0002_0000  # armed, not the consumer: pending
    assert dev.finished()
    assert "SDP G1 (its consumer is G0)" in dev.idle_message()


def test_the_bundled_demo_runs_two_layers_in_alternate_groups():
    dev = open_device("nvdla")
    rc = control(dev)
    from accelstub.stub.commands import CommandContext
    from accelstub.stub.program import load_program

    load_program(CommandContext([rc]), ROOT / "configs" / "demo" / "nvdla_demo")
    outcome = run_to_end(rc)
    assert outcome.code == 0 and sum(": PASS" in ln for ln in outcome.lines) == 2
    assert dev.consumer["SDP"] == 0 and dev.consumer["CACC"] == 1  # SDP ran twice, CACC once


def test_registers_by_csb_word_address(dev):
    """The manual's second address form: the CSB word address (byte address >> 2)."""
    from accelstub.devices.runcontrol import RunControl
    from accelstub.stub.commands import CommandContext, execute

    ctx = CommandContext([RunControl(dev)])
    assert execute(ctx, "nvdla csb 0x2412 0x90000040") == \
        "CSB 0x2412 = byte 0x09048 SDP_D_DST_BASE_ADDR_LOW_G0: 0x90000040"
    assert dev.read_register("SDP_D_DST_BASE_ADDR_LOW_G0") == 0x9000_0040
    assert execute(ctx, "nvdla csb 0x0c00") == "CSB 0x0c00 = byte 0x03000 CDMA_S_STATUS: 0x00000000"


def test_a_layers_end_stores_its_groups_as_pokes_do_with_their_old_values_logged(dev):
    """The end of a layer (Nvdla._done, one RegisterFile.redo instead of a poke per register,
    issue 31 #2): D_OP_ENABLE of its groups cleared, S_POINTER's CONSUMER toggled (PRODUCER
    kept: test_ping_pong_status_and_pointer), GLB_S_INTR_STATUS raised, and the old values of
    the registers it changed logged for the history, as pokes log them."""
    w(dev, GLB_MASK, 0)
    dev.write(0x8000_0000, bytes(range(1, 9)))
    arm_sdp_layer(dev, 0, 0x9000_0000)
    regs = dev.regs
    before = regs.snapshot()
    regs.log = {}
    assert step(dev).reason in ("step", "done")
    assert (r(dev, D_OP_ENABLE), r(dev, S_POINTER)) == (0, 0x0001_0000)  # G0 read, G1 next
    assert r(dev, GLB_STATUS) == 0b01 and r(dev, 0x8000 + 0x08) == 0  # SDP_RDMA disarmed
    changed = {k for k, v in regs.snapshot().items() if v != before[k]}
    assert changed and changed <= set(regs.log)
    assert all(regs.log[k] == before[k] for k in regs.log)
    # the pulse counts the host program samples: every line, in DONE_EVENTS' order
    counts = dev.interrupt_counts()
    assert list(counts) == list(dev.DONE_EVENTS)
    assert counts == {name: int(name == "SDP_0") for name in dev.DONE_EVENTS}
