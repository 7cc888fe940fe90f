"""Nvdla._memoised's last answer per decode (issue 31 #2): returned with no lookup while no
register was written (RegisterFile.version), or when the registers it read hold the same values
again; any write that changes one of them gives the answer of the new values."""
from __future__ import annotations

import tempfile
from pathlib import Path

from accelstub.devices import open_device
from accelstub.devices.nvdla import conv as C
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.commands import CommandContext
from accelstub.stub.program import load_program
from accelstub.testkit.nvdla_build import Conv, build


def _armed() -> RunControl:
    trace = build([Conv(9, 7, 16, 16, clip=3)], "memo_last", seed=6).write(
        Path(tempfile.mkdtemp()) / "t")
    rc = RunControl(open_device("nvdla"))
    load_program(CommandContext([rc]), trace)
    return rc


def test_with_no_register_write_the_last_answer_is_returned_without_reading_registers():
    dev = _armed().device
    layer = dev.ready()
    assert layer is not None and layer.kind == "conv"

    def no_read():
        raise AssertionError("read the registers although none was written")

    dev._memo_last["ready"][0][2] = no_read  # the peeker of ready's registers
    assert dev.ready() is layer and dev.finished() is False
    dev.regs.write("GLB_S_INTR_MASK", 0)  # a write (any register): the values are compared
    try:
        dev.ready()
    except AssertionError as e:
        assert "none was written" in str(e)
    else:
        raise AssertionError("a write left the last answer unchecked")


def test_a_memoised_answer_follows_every_write_of_a_register_it_read():
    rc = _armed()
    dev = rc.device
    layer = dev.ready()
    clip = dev._conv_config().clip
    assert clip == 3
    # an armed group's registers are locked against the bus (RegisterFile.locked): the
    # changes below are the device's own stores
    op_en = f"SDP_D_OP_ENABLE_G{dev.consumer_group('SDP')}"
    dev.regs.poke(op_en, 0)  # the layer's SDP no longer armed
    assert dev.ready() is None and dev.finished()
    dev.regs.poke(op_en, 1)  # armed again: the same values, the same answer
    assert dev.ready() == layer
    clip_cfg = f"CACC_D_CLIP_CFG_G{dev.consumer_group('CACC')}"
    dev.regs.set_field(clip_cfg, "clip_truncate", 5)
    assert dev._conv_config().clip == 5 == C.decode(dev.view).clip
    dev.regs.poke(clip_cfg, 3)
    assert dev._conv_config().clip == 3
    snap = rc.checkpoint()
    dev.regs.poke(clip_cfg, 7)
    assert dev._conv_config().clip == 7
    rc.rewind(snap)  # RegisterFile.restore
    assert rc.device._conv_config().clip == 3
    stop = rc.run_here()
    assert stop.reason == "done" and rc.host.ok
    assert any("PASS" in r.line for r in rc.host.results)


def test_check_crc_reports_the_same_lines_on_every_run_and_fails_as_before():
    """check_crc's pass result is made once when the trace is read (trace._crc_result): each
    rewound run reports exactly the line a pass has always had, and a changed output byte
    still fails with the expected and the computed CRC."""
    import re
    import zlib

    rc = _armed()
    armed = rc.checkpoint()
    lines = []
    for _ in range(2):
        rc.rewind(armed)
        assert rc.run_here().reason == "done"
        lines.append([r.line for r in rc.host.results])
    assert lines[0] == lines[1]
    crc_lines = [line for line in lines[0] if line.startswith("check_crc(")]
    assert len(crc_lines) == 1
    m = re.fullmatch(r"check_crc\((\w+)\) (0x[0-9a-f]+) bytes at (0x[0-9a-f]{8}): PASS  "
                     r"\[(memo_last\.cfg:\d+)\]", crc_lines[0])
    assert m is not None, crc_lines[0]
    sync, size, address, where = m.group(1), int(m.group(2), 16), int(m.group(3), 16), m.group(4)
    good = zlib.crc32(rc.device.read(address, size)) & 0xFFFFFFFF
    step = next(s for s in rc.host.steps if s.where == where and hasattr(s, "check"))
    rc.device.write(address, bytes([rc.device.read(address, 1)[0] ^ 1]))  # one bit off
    bad = zlib.crc32(rc.device.read(address, size)) & 0xFFFFFFFF
    result = step.check(rc.host)
    assert not result.ok and bad != good
    assert result.line == (f"check_crc({sync}) {size:#x} bytes at {address:#010x}: FAIL "
                           f"(expected {good:#010x}, got {bad:#010x})  [{where}]")
