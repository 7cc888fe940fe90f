"""The Ethos-U85 device model driven through bus writes, the way the Ethos-U core driver does it
(U§3: boot CMD, soft reset, BASEP, QBASE/QSIZE,
CMD.transition_to_running_state, wait for the IRQ, CMD.clear_irq). "[U85-TRM: ...]" cites the
TRM."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

from accelstub.devices import DeviceError, open_device
from accelstub.devices.ethos_u85 import stream as es
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.client import RspClient
from accelstub.stub.commands import CommandContext, execute
from accelstub.stub.server import StubServer
from tests.helpers import step

SRAM = 0x1000_0000
DRAM = 0x6000_0000
QBASE = SRAM  # command stream
BUF = SRAM + 0x1000  # BASEP1: tensors (region 1)
BUF2 = SRAM + 0x8000  # BASEP2: DMA destination (region 2)


# ---------------------------------------------------------------------------------------------
# the host side: register accesses by name, the driver's sequences


class Host:
    def __init__(self, dev) -> None:
        self.dev = dev

    def w(self, name: str, value: int) -> None:
        self.dev.write(self.dev.description.register(name).address,
                       (value & 0xFFFFFFFF).to_bytes(4, "little"))

    def r(self, name: str) -> int:
        return int.from_bytes(self.dev.read(self.dev.description.register(name).address, 4),
                              "little")

    def field(self, reg: str, fld: str) -> int:
        v = self.r(reg)
        for f in self.dev.description.register(reg).fields:
            if f.name == fld:
                return f.extract(v)
        raise KeyError(fld)

    def boot(self) -> None:
        """Boot + soft reset [U85-TRM: §3.1, §7]: CMD power_q_enable=0 clock_q_enable=1,
        RESET, poll STATUS.reset_status, CMD again."""
        self.w("CMD", 0x4)
        self.w("RESET", 0x0)
        for _ in range(100):
            if not self.field("STATUS", "reset_status"):
                break
        else:
            raise AssertionError("reset_status never cleared")
        self.w("CMD", 0x4)

    def start(self, words: list[int], qbase: int = QBASE,
              basep: dict[int, int] | None = None) -> None:
        self.dev.write(qbase, es.to_bytes(words))
        for region, addr in (basep or {1: BUF, 2: BUF2}).items():
            self.w(f"BASEP{region}_LO", addr)
            self.w(f"BASEP{region}_HI", 0)
        self.w("QBASE_LO", qbase)
        self.w("QBASE_HI", 0)
        self.w("QSIZE", 4 * len(words))
        self.w("CMD", 0x5)  # transition_to_running_state, keep clock_q_enable

    def clear_irq(self) -> None:
        self.w("CMD", 0x6)


def run_to_irq(dev):
    """Let the NPU run (the debugger's continue) and return the stop."""
    rc = RunControl(dev)
    rc.resume()
    stop = rc.wait(10)
    assert stop is not None
    return stop


@pytest.fixture
def dev():
    d = open_device("ethos-u85")
    Host(d).boot()
    return d


@pytest.fixture
def host(dev):
    return Host(dev)


# ---------------------------------------------------------------------------------------------
# command streams


def add_example() -> list[tuple[str, dict]]:
    """Worked example C§10.1: elementwise ADD, int8, OFM 1x2x4, region 1."""
    tiles = lambda p, w: [(f"NPU_SET_{p}_WIDTH0_M1", dict(width_m1=w)),  # noqa: E731
                          (f"NPU_SET_{p}_HEIGHT0_M1", {}), (f"NPU_SET_{p}_HEIGHT1_M1", {})]
    strides = lambda p: [(f"NPU_SET_{p}_STRIDE_X", dict(addr=4)),  # noqa: E731
                         (f"NPU_SET_{p}_STRIDE_Y", dict(addr=8)),
                         (f"NPU_SET_{p}_STRIDE_C", dict(addr=1))]
    return ([("NPU_SET_IFM_PRECISION", dict(activation_type="signed")),
             ("NPU_SET_IFM_ZERO_POINT", dict(zero_point=3)), ("NPU_SET_IFM_REGION", dict(region=1)),
             ("NPU_SET_IFM_BASE0", dict(addr=0))] + tiles("IFM", 1) + strides("IFM")
            + [("NPU_SET_IFM_BROADCAST", {}), ("NPU_SET_IFM_UPSCALE", {}),
               ("NPU_SET_IFM_SCALE", dict(shift=1, round_mode="natural", scale=3)),
               ("NPU_SET_IFM2_PRECISION", dict(activation_type="signed")),
               ("NPU_SET_IFM2_ZERO_POINT", dict(zero_point=-2)),
               ("NPU_SET_IFM2_REGION", dict(region=1)), ("NPU_SET_IFM2_BASE0", dict(addr=0x10))]
            + tiles("IFM2", 1) + strides("IFM2")
            + [("NPU_SET_IFM2_BROADCAST", {}),
               ("NPU_SET_IFM2_SCALE", dict(round_mode="natural", scale=1)),
               ("NPU_SET_OFM_PRECISION", dict(activation_type="signed", scale_mode="global")),
               ("NPU_SET_OFM_ZERO_POINT", dict(zero_point=5)),
               ("NPU_SET_OFM_REGION", dict(region=1)),
               ("NPU_SET_OFM_BASE0", dict(addr=0x20)), ("NPU_SET_OFM_HEIGHT_M1", {}),
               ("NPU_SET_OFM_WIDTH_M1", dict(width_m1=1)),
               ("NPU_SET_OFM_DEPTH_M1", dict(depth_m1=3))]
            + tiles("OFM", 1) + strides("OFM")
            + [("NPU_SET_OFM_BLK_HEIGHT_M1", {}), ("NPU_SET_OFM_BLK_WIDTH_M1", dict(width_m1=1)),
               ("NPU_SET_OFM_BLK_DEPTH_M1", dict(depth_m1=3)),
               ("NPU_SET_OFM_SCALE", dict(shift=2, scale=5)), ("NPU_SET_ACTIVATION", {}),
               ("NPU_SET_ACTIVATION_MIN", dict(clip_boundary=-128)),
               ("NPU_SET_ACTIVATION_MAX", dict(clip_boundary=127)),
               ("NPU_SET_ACC_FORMAT", dict(microblock="u2x2")),
               ("NPU_OP_ELEMENTWISE", dict(elementwise_mode="add"))])


#: worked example C§10.1, word for word
ADD_WORDS = [int(w, 16) for w in """
00010105 00030109 0001010f 00004000 00000000 0001010a 0000010b 0000010c 00004004 00000004
00004005 00000008 00004006 00000001 00000108 00000107 20014025 00000003 00010185 fffe0189
0001018f 00004080 00000010 0001018a 0000018b 0000018c 00004084 00000004 00004085 00000008
00004086 00000001 00000180 20004026 00000001 01010114 00050118 0001011f 00004010 00000020
00000112 00010111 00030113 0001011a 0000011b 0000011c 00004014 00000004 00004015 00000008
00004016 00000001 00000116 00010115 00030117 00024024 00000005 00000125 ff800126 007f0127
03000124 00010006 ffff0000""".split()]

ADD_IFM = bytes.fromhex("0af6007f8032cd03")
ADD_IFM2 = bytes.fromhex("1405f97f809c3cfe")
ADD_OFM = bytes.fromhex("2ef6fa7f80e3ed05")


def load_add_inputs(dev) -> None:
    dev.write(BUF, ADD_IFM)
    dev.write(BUF + 0x10, ADD_IFM2)


def pool_cmds(mode: str, ih: int, iw: int, c: int, k: int, stride: int, pad: int,
              ifm_off: int, ofm_off: int, zp: int = 0) -> tuple[list, tuple[int, int, int]]:
    """A pooling operation on an int8 NHWC tensor in region 1 (global scale 1, shift 0)."""
    oh = (ih + 2 * pad - k) // stride + 1
    ow = (iw + 2 * pad - k) // stride + 1
    s = stride - 1
    cmds = [("NPU_SET_IFM_PRECISION", dict(activation_type="signed")),
            ("NPU_SET_IFM_ZERO_POINT", dict(zero_point=zp)), ("NPU_SET_IFM_REGION", dict(region=1)),
            ("NPU_SET_IFM_BASE0", dict(addr=ifm_off)),
            ("NPU_SET_IFM_WIDTH0_M1", dict(width_m1=iw - 1)),
            ("NPU_SET_IFM_HEIGHT0_M1", dict(height_m1=ih - 1)),
            ("NPU_SET_IFM_HEIGHT1_M1", dict(height_m1=ih - 1)),
            ("NPU_SET_IFM_STRIDE_X", dict(addr=c)), ("NPU_SET_IFM_STRIDE_Y", dict(addr=c * iw)),
            ("NPU_SET_IFM_STRIDE_C", dict(addr=1)), ("NPU_SET_IFM_DEPTH_M1", dict(depth_m1=c - 1)),
            ("NPU_SET_IFM_UPSCALE", {}),
            ("NPU_SET_IFM_PAD_TOP", dict(pad=pad)), ("NPU_SET_IFM_PAD_LEFT", dict(pad=pad)),
            ("NPU_SET_IFM_PAD_BOTTOM", dict(pad=pad)), ("NPU_SET_IFM_PAD_RIGHT", dict(pad=pad)),
            ("NPU_SET_OFM_PRECISION", dict(activation_type="signed", scale_mode="global")),
            ("NPU_SET_OFM_ZERO_POINT", dict(zero_point=zp)), ("NPU_SET_OFM_REGION", dict(region=1)),
            ("NPU_SET_OFM_BASE0", dict(addr=ofm_off)),
            ("NPU_SET_OFM_HEIGHT_M1", dict(height_m1=oh - 1)),
            ("NPU_SET_OFM_WIDTH_M1", dict(width_m1=ow - 1)),
            ("NPU_SET_OFM_DEPTH_M1", dict(depth_m1=c - 1)),
            ("NPU_SET_OFM_WIDTH0_M1", dict(width_m1=ow - 1)),
            ("NPU_SET_OFM_HEIGHT0_M1", dict(height_m1=oh - 1)),
            ("NPU_SET_OFM_HEIGHT1_M1", dict(height_m1=oh - 1)),
            ("NPU_SET_OFM_STRIDE_X", dict(addr=c)), ("NPU_SET_OFM_STRIDE_Y", dict(addr=c * ow)),
            ("NPU_SET_OFM_STRIDE_C", dict(addr=1)),
            ("NPU_SET_OFM_BLK_HEIGHT_M1", dict(height_m1=oh - 1)),
            ("NPU_SET_OFM_BLK_WIDTH_M1", dict(width_m1=ow - 1)),
            ("NPU_SET_OFM_BLK_DEPTH_M1", dict(depth_m1=c - 1)),
            ("NPU_SET_KERNEL_HEIGHT_M1", dict(height_m1=k - 1)),
            ("NPU_SET_KERNEL_WIDTH_M1", dict(width_m1=k - 1)),
            ("NPU_SET_KERNEL_STRIDE", dict(stride_x_lsb=s & 1, stride_y_lsb=s & 1,
                                           stride_x_msb=s >> 1, stride_y_msb=s >> 1)),
            ("NPU_SET_OFM_SCALE", dict(shift=0, scale=1, round_mode="natural")),
            ("NPU_SET_ACTIVATION", {}), ("NPU_SET_ACTIVATION_MIN", dict(clip_boundary=-128)),
            ("NPU_SET_ACTIVATION_MAX", dict(clip_boundary=127)),
            ("NPU_SET_ACC_FORMAT", dict(microblock="u2x2")),
            ("NPU_OP_POOL", dict(pooling_mode=mode))]
    return cmds, (oh, ow, c)


POOL_IFM = (np.arange(32, dtype=np.int64) * 7 % 61 - 30).reshape(4, 4, 2)  # 4x4x2 int8


def max_pool_expected() -> np.ndarray:
    return POOL_IFM.reshape(2, 2, 2, 2, 2).max(axis=(1, 3))


def stream(*parts) -> list[int]:
    return es.encode_stream([c for p in parts for c in p])


STOP = [("NPU_OP_STOP", dict(mask=0xFFFF))]


# ---------------------------------------------------------------------------------------------
# identification and reset


@pytest.mark.parametrize("macs, config", [(128, 0x20000117), (256, 0x20000118), (512, 0x20001119),
                                          (1024, 0x2000251A), (2048, 0x2000261B)])
def test_id_and_config_per_mac_configuration(macs, config):
    """CONFIG per configuration (U§1.2; [U85-TRM: Table 3-13]), ID constant [U85-TRM: §3.3.1.1]."""
    h = Host(open_device("ethos-u85", macs=macs))
    assert h.r("ID") == 0x20007001
    assert h.r("CONFIG") == config
    assert h.field("CONFIG", "macs_per_cc") == macs.bit_length() - 1
    assert h.field("CFG_EXT_CAP", "max_outstanding_read_m1") == (31 if macs <= 256 else 63)
    assert h.r("CFG_SRAM_HASH1_LO") == (0x80 if macs == 2048 else 0)
    h.w("RESET", 0)  # the soft reset keeps the configuration (pins are sampled again)
    assert h.r("CONFIG") == config


def test_unknown_mac_configuration_is_refused():
    with pytest.raises(ValueError, match="macs must be one of"):
        open_device("ethos-u85", macs=300)


def reset_value(dev, reg) -> int:
    expected = {"STATUS": 0, "CONFIG": 0x20000118}  # reset_status cleared: the sequence is over
    return expected.get(reg.name, reg.reset)


def test_soft_reset_restores_every_reset_value(dev, host):
    host.w("QBASE_LO", 0x1000_0100)
    host.w("QSIZE", 0x40)
    host.w("BASEP3_LO", 0x6000_0000)
    host.w("REGIONCFG", 0xFFFF)
    host.w("MEM_ATTR1", 0xB4)
    host.w("PMCR", 1)
    host.w("PMCNTENSET", 0x8000_0003)
    host.w("PMEVTYPER2", 130)
    host.w("CMD", 0x0)
    changed = {r.name for r in dev.description.registers if r.block != "emu"
               and host.r(r.name) != reset_value(dev, r)}
    assert {"QBASE_LO", "QSIZE", "BASEP3_LO", "REGIONCFG", "MEM_ATTR1", "PMCR", "PMCNTENSET",
            "PMCNTENCLR", "PMEVTYPER2", "CMD"} <= changed
    host.w("RESET", 0)
    for r in dev.description.registers:
        if r.block != "emu":
            assert host.r(r.name) == reset_value(dev, r), r.name
    assert host.r("CMD") == 0xC  # clock_q_enable and power_q_enable reset to 1 [U85-TRM: Table 3-6]


def test_reset_sets_prot_from_the_pending_levels(host):
    """RESET pending_CPL/pending_CSL (bits 0/1, U8#1) become PROT [U85-TRM: §3.3.1.4]."""
    host.w("RESET", 0x3)
    assert host.r("PROT") == 0x3
    assert host.r("RESET") == 0x3
    host.w("RESET", 0x1)
    assert host.r("PROT") == 0x1


def test_reset_stops_a_running_npu_and_clears_sticky_faults(dev, host):
    host.start([0x0000_0004])  # reserved cmd0 opcode 4
    with pytest.raises(DeviceError):
        step(dev)
    assert host.field("STATUS", "cmd_parse_error") == 1
    host.clear_irq()
    # cleared only by reset [U85-TRM: Table 3-5]
    assert host.field("STATUS", "cmd_parse_error") == 1
    host.w("RESET", 0)
    assert host.r("STATUS") == 0
    assert dev.finished()


# ---------------------------------------------------------------------------------------------
# running command streams the way the driver does


def test_encoded_add_stream_is_the_digests_worked_example():
    words = stream(add_example(), STOP)
    assert words == ADD_WORDS
    assert len(words) * 4 == 0xFC


def test_elementwise_add_worked_example_and_irq(dev, host):
    """C§10.1: OFM 2e f6 fa 7f 80 e3 ed 05; after STOP: stopped, irq_raised,
    irq_history_mask 0xffff, QREAD 0xfc (C9#57)."""
    load_add_inputs(dev)
    host.start(ADD_WORDS)
    assert host.field("STATUS", "state") == 1
    assert dev.interrupts() == {"IRQ": False}
    stop = run_to_irq(dev)
    assert stop.reason == "done"
    assert "NPU_OP_STOP" in stop.message and "IRQ raised" in stop.message
    assert dev.read(BUF + 0x20, 8) == ADD_OFM
    st = host.r("STATUS")
    assert st & 1 == 0 and (st >> 1) & 1 == 1
    assert host.field("STATUS", "irq_history_mask") == 0xFFFF
    assert host.field("STATUS", "cmd_end_reached") == 0  # the STOP stopped it, not the end
    assert host.r("QREAD") == 0xFC
    assert dev.interrupts() == {"IRQ": True}
    host.clear_irq()  # CMD.clear_irq [U85-TRM: Table 3-6]
    assert host.field("STATUS", "irq_raised") == 0
    assert dev.interrupts() == {"IRQ": False}
    assert host.field("STATUS", "irq_history_mask") == 0xFFFF
    host.w("CMD", 0x00F0_0004)  # clear_irq_history bits 4-7 [U85-TRM: Table 3-6]
    assert host.field("STATUS", "irq_history_mask") == 0xFF0F
    assert host.r("CMD") == 0x00F0_0004  # reads as the last written value [U85-TRM: §3.3.1.3]


def test_max_pool(dev, host):
    cmds, (oh, ow, c) = pool_cmds("max", 4, 4, 2, k=2, stride=2, pad=0, ifm_off=0x100,
                                  ofm_off=0x200)
    dev.write(BUF + 0x100, POOL_IFM.astype(np.int8).tobytes())
    host.start(stream(cmds, STOP))
    assert run_to_irq(dev).reason == "done"
    got = np.frombuffer(dev.read(BUF + 0x200, oh * ow * c), dtype=np.int8).reshape(oh, ow, c)
    np.testing.assert_array_equal(got, max_pool_expected())
    assert dev.counters()["macs"] == oh * ow * c * 2 * 2


def test_average_pool_with_padding_uses_the_builtin_scale(dev, host):
    """Average over the valid window elements with scale ((2^30+1) << k) / d, shift 30 + k
    [U85-TRM: §3.6.6] and the OFM round mode (natural)."""
    ifm = np.array([[9, -7, 4], [3, 0, -11], [5, 8, -2]], dtype=np.int64).reshape(3, 3, 1)
    cmds, (oh, ow, c) = pool_cmds("average", 3, 3, 1, k=3, stride=1, pad=1, ifm_off=0x100,
                                  ofm_off=0x200)
    dev.write(BUF + 0x100, ifm.astype(np.int8).tobytes())
    host.start(stream(cmds, STOP))
    run_to_irq(dev)
    got = np.frombuffer(dev.read(BUF + 0x200, 9), dtype=np.int8).reshape(3, 3)
    exp = np.zeros((3, 3), dtype=np.int64)
    for y in range(3):
        for x in range(3):
            win = ifm[max(0, y - 1):y + 2, max(0, x - 1):x + 2, 0]
            d = win.size
            k = (d - 1).bit_length()
            scale = (((1 << 30) + 1) << k) // d
            exp[y, x] = (int(win.sum()) * scale + (1 << (29 + k))) >> (30 + k)
    np.testing.assert_array_equal(got, exp)
    assert exp[0, 0] == 1  # (9 - 7 + 3 + 0) / 4 = 1.25 -> 1


def test_end_of_stream_without_stop(dev, host):
    load_add_inputs(dev)
    host.start(stream(add_example()))
    stop = run_to_irq(dev)
    assert "end of command stream" in stop.message
    assert host.field("STATUS", "cmd_end_reached") == 1 and host.field("STATUS", "irq_raised") == 1
    assert host.r("QREAD") == host.r("QSIZE")
    # writing QSIZE in stopped state clears it [U85-TRM: Table 3-5]
    host.w("QSIZE", host.r("QSIZE"))
    assert host.field("STATUS", "cmd_end_reached") == 0


def test_stop_resumes_after_the_stop_unless_the_queue_is_rewritten(dev, host):
    """[U85-TRM: Table 3-6]: RS after NPU_OP_STOP continues at QBASE+QREAD; after a QBASE/QSIZE
    write at QBASE."""
    load_add_inputs(dev)
    words = stream([("NPU_OP_STOP", dict(mask=1))], add_example(), [("NPU_OP_STOP", dict(mask=2))])
    host.start(words)
    run_to_irq(dev)
    assert host.r("QREAD") == 4 and dev.read(BUF + 0x20, 8) == bytes(8)
    host.clear_irq()
    host.w("CMD", 0x5)  # resume after the first STOP
    assert dev.pc == QBASE + 4
    run_to_irq(dev)
    assert dev.read(BUF + 0x20, 8) == ADD_OFM
    assert host.field("STATUS", "irq_history_mask") == 3
    host.clear_irq()
    host.w("QBASE_LO", QBASE)
    host.w("CMD", 0x5)
    assert host.r("QREAD") == 0 and dev.pc == QBASE


def test_stop_request_stops_at_the_command_boundary(dev, host):
    load_add_inputs(dev)
    host.start(stream(add_example(), add_example(), STOP))
    step(dev)
    q = host.r("QREAD")
    host.w("CMD", 0x14)  # stop_request [U85-TRM: Table 3-6]
    assert host.field("STATUS", "state") == 0 and host.field("STATUS", "irq_raised") == 1
    assert host.r("QREAD") == q
    assert dev.finished()
    assert "stop_request" in dev.done_message()


def test_qsize_zero_ends_at_once(dev, host):
    host.start([], qbase=QBASE)
    assert host.field("STATUS", "cmd_end_reached") == 1 and host.field("STATUS", "state") == 0


# ---------------------------------------------------------------------------------------------
# error states


def test_unknown_opcode_is_a_parse_error_naming_the_offset(dev, host):
    words = stream([("NPU_SET_IFM_REGION", dict(region=1))]) + [0x0000_0004] + stream(STOP)
    host.start(words)
    stop = run_to_irq(dev)
    assert stop.reason == "fault"
    assert "command parse error at offset 0x0004" in stop.message
    assert host.field("STATUS", "cmd_parse_error") == 1
    assert host.field("STATUS", "state") == 0 and host.field("STATUS", "irq_raised") == 1
    assert host.r("QREAD") == 4  # left at the faulting command ([U85-TRM: §3.3.1.6] permits it)
    assert dev.units()[0].summary.startswith("UNKNOWN at offset 0x0004")


def test_framework_reference_pairs_operations_with_the_listings_units(dev, host):
    """framework_reference pairs Vela's debug-database offsets with units: each kernel
    operation's byte offset must name the listing's unit that ends at it, also when an
    undecodable command and a DMA operation end units of their own."""
    from accelstub.devices.ethos_u85.framework_reference import _kernel_offsets
    words = (stream([("NPU_SET_IFM_REGION", dict(region=1)), ("NPU_OP_CONV", {})])  # 0x0, 0x4
             + [0x0000_0004]  # 0x8: UNKNOWN, unit 1
             + stream([("NPU_OP_DMA_START", {}),  # 0xc: unit 2, no kernel
                       ("NPU_OP_POOL", dict(pooling_mode=0)),  # 0x10: unit 3
                       ("NPU_SET_IFM_REGION", dict(region=2))]))  # 0x14: trailing, unit 4
    host.start(words)
    units = dev.units()
    assert [u.label for u in units] == [f"cmd {k}" for k in range(5)]
    assert _kernel_offsets(np.array(words, "<u4")) == {0x4: 0, 0x10: 3}
    assert "CONV" in units[0].summary and "POOL" in units[3].summary


def test_cmd1_header_without_its_data_word_is_a_parse_error(dev, host):
    host.start(stream(STOP)[:0] + [0x0000_4000])  # NPU_SET_IFM_BASE0 header, QSIZE ends
    with pytest.raises(DeviceError, match="offset 0x0000.*data word"):
        step(dev)


def test_unpredictable_programming_is_reported_as_an_error(dev, host):
    """Elementwise with a per-channel OFM scale fails assert(mode == normal) [U85-TRM: §3.6.6]."""
    load_add_inputs(dev)
    cmds = [c if c[0] != "NPU_SET_OFM_PRECISION" else
            ("NPU_SET_OFM_PRECISION", dict(activation_type="signed", scale_mode="per_channel"))
            for c in add_example()]
    host.start(stream(cmds, STOP))
    with pytest.raises(DeviceError, match=r"NPU_OP_ELEMENTWISE at offset 0x00f4.*UNPREDICTABLE"):
        step(dev)
    assert host.field("STATUS", "cmd_parse_error") == 1 and host.field("STATUS", "state") == 0


def test_bus_fault_outside_the_memory_windows(dev, host):
    """OFM in a region whose BASEP points outside every memory window: bus_status, the OFM
    write channel, the region's MEM_ATTR port family."""
    load_add_inputs(dev)
    host.w("MEM_ATTR1", 0x4)  # axi_port ext
    host.w("REGIONCFG", 1 << 6)  # region 3 -> MEM_ATTR1
    cmds = [c if c[0] != "NPU_SET_OFM_REGION" else ("NPU_SET_OFM_REGION", dict(region=3))
            for c in add_example()]
    host.start(stream(cmds, STOP), basep={1: BUF, 3: 0x7000_0000})
    stop = run_to_irq(dev)
    assert stop.reason == "fault" and "bus fault" in stop.message and "0x70000020" in stop.message
    assert host.field("STATUS", "bus_status") == 1
    assert host.field("STATUS", "faulting_channel") == 8  # wr_ofm
    assert host.field("STATUS", "faulting_interface") == 1  # ext
    assert dev.read(BUF + 0x20, 8) == bytes(8)


def test_command_fetch_bus_fault(dev, host):
    host.w("QBASE_LO", 0x7000_0000)
    host.w("QSIZE", 8)
    host.w("CMD", 0x5)
    with pytest.raises(DeviceError, match="bus fault"):
        step(dev)
    assert host.field("STATUS", "bus_status") == 1 and host.field("STATUS", "faulting_channel") == 0


def test_branch_and_branch_fault(dev, host):
    load_add_inputs(dev)
    body = stream(add_example(), STOP)
    words = stream([("NPU_OP_BRANCH", dict(branch_target=12))]) + [0x0000_0004] + body
    host.start(words)
    assert run_to_irq(dev).reason == "done"
    assert dev.read(BUF + 0x20, 8) == ADD_OFM
    host.w("RESET", 0)
    Host(dev).boot()
    host.start(stream([("NPU_OP_BRANCH", dict(branch_target=0x100))], STOP))
    with pytest.raises(DeviceError, match="branch target 0x100 >= QSIZE"):
        step(dev)
    assert host.field("STATUS", "branch_fault") == 1


# ---------------------------------------------------------------------------------------------
# DMA


def dma_cmds(length: int, src: int, dst: int, mode: str = "d1", size0: int = 0, size1: int = 0,
             strides: tuple[int, int, int, int] = (0, 0, 0, 0), internal: bool = False) -> list:
    cmds = [("NPU_SET_DMA0_SRC_REGION", dict(region=1, stride_mode=mode)),
            ("NPU_SET_DMA0_DST_REGION", dict(region=0 if internal else 2,
                                              region_mode="internal" if internal else "external")),
            ("NPU_SET_DMA0_SRC", dict(addr=src)), ("NPU_SET_DMA0_DST", dict(addr=dst)),
            ("NPU_SET_DMA0_LEN", dict(addr=length))]
    if mode != "d1":
        cmds += [("NPU_SET_DMA0_SIZE0", dict(size=size0)),
                 ("NPU_SET_DMA0_SRC_STRIDE0", dict(addr=strides[0])),
                 ("NPU_SET_DMA0_DST_STRIDE0", dict(addr=strides[1]))]
    if mode == "d3":
        cmds += [("NPU_SET_DMA0_SIZE1", dict(size=size1)),
                 ("NPU_SET_DMA0_SRC_STRIDE1", dict(addr=strides[2])),
                 ("NPU_SET_DMA0_DST_STRIDE1", dict(addr=strides[3]))]
    return cmds + [("NPU_OP_DMA_START", {}), ("NPU_OP_DMA_WAIT", dict(k=0))]


def test_dma_1d_2d_3d_copies(dev, host):
    src = bytes(range(256))
    dev.write(BUF, src)
    words = stream(dma_cmds(16, 0, 0),
                   dma_cmds(4, 0x20, 0x100, "d2", size0=3, strides=(8, 16)),
                   dma_cmds(2, 0x40, 0x200, "d3", size0=2, size1=2, strides=(4, -2, 32, 8)),
                   [("NPU_OP_KERNEL_WAIT", {})], STOP)
    host.start(words)
    assert run_to_irq(dev).reason == "done"
    assert dev.read(BUF2, 16) == src[:16]
    for x in range(3):
        assert dev.read(BUF2 + 0x100 + 16 * x, 4) == src[0x20 + 8 * x:0x24 + 8 * x]
    # 3-D: per y, x transfers at stride0 (dst stride -2), then both advance by stride1
    assert dev.read(BUF2 + 0x200, 2) == src[0x40:0x42]
    assert dev.read(BUF2 + 0x1FE, 2) == src[0x44:0x46]
    assert dev.read(BUF2 + 0x208, 2) == src[0x60:0x62]
    assert dev.read(BUF2 + 0x206, 2) == src[0x64:0x66]
    assert dev.counters()["dma_bytes"] == 16 + 12 + 8


def idx_dma(side: str, mode: str, length: int, size0: int, strides: tuple[int, int],
            idx_max: int, size1: int = 1, strides1: tuple[int, int] = (0, 0),
            skip1: int = 0) -> list:
    """A gather (side "src") or scatter ("dst") DMA reading int32 indices at BUF+0x300."""
    on = dict(idx_mode="enabled")
    return [("NPU_SET_DMA0_SRC_REGION", dict(region=1, stride_mode=mode,
                                             **(on if side == "src" else {}))),
            ("NPU_SET_DMA0_DST_REGION", dict(region=2, **(on if side == "dst" else {}))),
            ("NPU_SET_DMA0_SRC", dict(addr=0)), ("NPU_SET_DMA0_DST", dict(addr=0)),
            ("NPU_SET_DMA0_LEN", dict(addr=length)),
            ("NPU_SET_DMA0_SIZE0", dict(size=size0)), ("NPU_SET_DMA0_SIZE1", dict(size=size1)),
            ("NPU_SET_DMA0_SRC_STRIDE0", dict(addr=strides[0])),
            ("NPU_SET_DMA0_DST_STRIDE0", dict(addr=strides[1])),
            ("NPU_SET_DMA0_SRC_STRIDE1", dict(addr=strides1[0])),
            ("NPU_SET_DMA0_DST_STRIDE1", dict(addr=strides1[1])),
            ("NPU_SET_DMA0_IDX_REGION", dict(region=1)), ("NPU_SET_DMA0_IDX", dict(addr=0x300)),
            ("NPU_SET_DMA0_IDX_MAX", dict(idx_max=idx_max)),
            ("NPU_SET_DMA0_IDX_SKIP1", dict(addr=skip1)),
            ("NPU_OP_DMA_START", {}), ("NPU_OP_DMA_WAIT", dict(k=0))]


def test_dma_gather_takes_source_rows_from_the_index_stream(dev, host):
    """[U85-TRM: §3.10.4]: per x an int32 index is read from IDX (region IDX_REGION) and replaces x
    on the source side; an index < 0 or > IDX_MAX skips that copy (the destination keeps its
    bytes)."""
    src = bytes(range(256))
    dev.write(BUF, src)
    dev.write(BUF + 0x300, np.array([5, -1, 2, 40], "<i4").tobytes())
    dev.write(BUF2, b"\xee" * 16)
    host.start(stream(idx_dma("src", "d2", 4, size0=4, strides=(8, 4), idx_max=10), STOP))
    assert run_to_irq(dev).reason == "done"
    assert dev.read(BUF2, 16) == src[40:44] + b"\xee" * 4 + src[16:20] + b"\xee" * 4
    assert dev.counters()["dma_bytes"] == 8


def test_dma_scatter_and_the_3d_index_skip(dev, host):
    """Scatter: the index picks the destination slot. 3-D: after each row the source and
    destination advance by stride 1 and the index pointer by IDX_SKIP1 [U85-TRM: §3.10.4]."""
    src = bytes(range(256))
    dev.write(BUF, src)
    dev.write(BUF + 0x300, np.array([3, 0, 99, 1, 2], "<i4").tobytes())
    dev.write(BUF2, bytes(64))
    host.start(stream(idx_dma("dst", "d3", 2, size0=2, strides=(8, 2), idx_max=7, size1=2,
                              strides1=(0x20, 0x10), skip1=4), STOP))
    assert run_to_irq(dev).reason == "done"
    want = bytearray(64)
    want[6:8] = src[0:2]  # row 0: x=0 index 3 -> dst 0 + 3*2
    want[0:2] = src[8:10]  # x=1 index 0
    # row 1: the index 99 is skipped by IDX_SKIP1; indices 1 and 2, rows advanced by stride 1
    want[0x12:0x14] = src[0x20:0x22]
    want[0x14:0x16] = src[0x28:0x2A]
    assert dev.read(BUF2, 64) == bytes(want)


def test_dma_to_the_internal_lut_ram(dev, host):
    dev.write(BUF, bytes(range(32)))
    host.start(stream(dma_cmds(32, 0, 0x40, internal=True), STOP))
    run_to_irq(dev)
    assert dev.lut[0x40:0x60].tobytes() == bytes(range(32))


# ---------------------------------------------------------------------------------------------
# PMU


def test_pmu_counts_commands_macs_beats_and_cycles(dev, host):
    cmds, (oh, ow, c) = pool_cmds("max", 4, 4, 2, k=2, stride=2, pad=0, ifm_off=0x100,
                                  ofm_off=0x200)
    dev.write(BUF + 0x100, POOL_IFM.astype(np.int8).tobytes())
    host.w("PMCR", 1)  # cnt_en first [U85-TRM: §3.3.4]
    host.w("PMEVTYPER0", 135)  # sram_wr_data_beat_written
    host.w("PMEVTYPER1", 132)  # sram_wr_trans_accepted
    host.w("PMEVTYPER2", 17)  # cycle (modelled)
    host.w("PMEVTYPER3", 35)  # npu_active (modelled)
    host.w("PMCNTENSET", 0x8000_000F)
    words = stream(cmds, STOP)
    host.start(words)
    run_to_irq(dev)
    cnt = dev.counters()
    assert cnt["commands"] == len(es.decode(es.to_bytes(words)))
    assert cnt["operations"] == 2 and cnt["kernel_operations"] == 1
    assert cnt["macs"] == oh * ow * c * 4
    # the OFM is 8 contiguous bytes at BUF+0x200: one burst, one 16-byte beat
    assert host.r("PMEVCNTR0") == 1 and host.r("PMEVCNTR1") == 1
    cycles = host.r("PMCCNTR_LO")
    assert cycles == cnt["cycles"] > 0 and host.r("PMEVCNTR2") == cycles == host.r("PMEVCNTR3")
    # a second run keeps counting; PMCR.cycle_cnt_rst / event_cnt_rst zero them
    host.clear_irq()
    host.w("QBASE_LO", QBASE)
    host.w("CMD", 0x5)
    run_to_irq(dev)
    assert host.r("PMCCNTR_LO") == 2 * cycles and host.r("PMEVCNTR0") == 2
    host.w("PMCR", 0x5)
    assert host.r("PMCCNTR_LO") == 0 and host.r("PMEVCNTR0") == 2
    host.w("PMCR", 0x3)
    assert host.r("PMEVCNTR0") == 0 and host.r("PMCR") == 0x4001  # wo bits read 0; num_event_cnt 8


def test_pmu_enable_pairs_overflow_and_pmu_irq(dev, host):
    host.w("PMCR", 1)
    host.w("PMCNTENSET", 0x8000_0001)
    assert host.r("PMCNTENCLR") == 0x8000_0001
    host.w("PMCNTENCLR", 0x8000_0000)
    assert host.r("PMCNTENSET") == 1
    host.w("PMEVTYPER0", 17)  # cycle
    host.w("PMEVCNTR0", 0xFFFF_FFFF)
    host.w("PMINTSET", 1)
    load_add_inputs(dev)
    host.start(ADD_WORDS)
    run_to_irq(dev)
    assert host.r("PMOVSSET") & 1 and host.r("PMOVSCLR") & 1
    assert host.field("STATUS", "pmu_irq_raised") == 1
    host.w("PMOVSCLR", 1)
    assert host.r("PMOVSSET") == 0
    host.clear_irq()
    assert host.field("STATUS", "pmu_irq_raised") == 0 and dev.interrupts() == {"IRQ": False}


def test_pmu_counts_nothing_unless_enabled(dev, host):
    host.w("PMCNTENSET", 0x8000_0001)
    host.w("PMEVTYPER0", 17)
    load_add_inputs(dev)
    host.start(ADD_WORDS)
    run_to_irq(dev)
    assert host.r("PMEVCNTR0") == 0 and host.r("PMCCNTR_LO") == 0
    assert dev.counters()["cycles"] > 0


# ---------------------------------------------------------------------------------------------
# run control: units, stepping, breakpoints, watchpoints


def three_unit_program(dev, host) -> tuple[list[int], list[es.Command]]:
    load_add_inputs(dev)
    dev.write(BUF + 0x100, POOL_IFM.astype(np.int8).tobytes())
    pool, _ = pool_cmds("max", 4, 4, 2, k=2, stride=2, pad=0, ifm_off=0x100, ofm_off=0x200)
    words = stream(add_example(), pool, STOP)
    host.start(words)
    return words, es.decode(es.to_bytes(words))


def test_units_list_the_operations(dev, host):
    words, cmds = three_unit_program(dev, host)
    units = dev.units()
    ops = [c for c in cmds if c.is_operation]
    assert [u.label for u in units] == ["cmd 0", "cmd 1", "cmd 2"]
    assert units[0].address == QBASE
    assert units[1].address == QBASE + cmds[cmds.index(ops[0]) + 1].offset
    assert units[2].address == QBASE + ops[2].offset
    assert units[0].summary.startswith("ELEMENTWISE elementwise_mode=add, ifm 1x2x4 s8, "
                                       "ifm2 1x2x4 s8, -> ofm 1x2x4 s8")
    assert "act lut_none clip [-128,127]" in units[0].summary
    assert units[1].summary.startswith("POOL pooling_mode=max, ifm 4x4x2 s8, -> ofm 2x2x2 s8, "
                                       "kernel 2x2 stride 2x2")
    assert units[2].summary == "STOP mask=0xffff"


def test_step_runs_one_operation_and_pc_moves_to_the_next(dev, host):
    words, cmds = three_unit_program(dev, host)
    rc = RunControl(dev)
    units = dev.units()
    assert dev.pc == units[0].address
    stop = rc.step(5)
    assert stop.reason == "step"
    assert dev.pc == units[1].address == QBASE + host.r("QREAD")
    assert dev.read(BUF + 0x20, 8) == ADD_OFM  # the elementwise op ran
    assert dev.read(BUF + 0x200, 8) == bytes(8)  # the pool has not
    stop = rc.step(5)
    assert dev.pc == units[2].address
    stop = rc.step(5)
    assert stop.reason == "done" and dev.finished()
    assert rc.step(5).reason == "idle"
    assert dev.units_done == 3


def test_breakpoint_on_a_command_address(dev, host):
    words, cmds = three_unit_program(dev, host)
    rc = RunControl(dev)
    pool_op = next(c for c in cmds if c.name == "NPU_OP_POOL")
    rc.add_breakpoint(QBASE + pool_op.offset)  # inside unit 1: stops before the operation
    rc.resume()
    stop = rc.wait(5)
    assert stop.reason == "breakpoint" and dev.pc == QBASE + pool_op.offset
    assert dev.read(BUF + 0x200, 8) == bytes(8)
    assert "NPU_OP_POOL" in dev.disasm_text(1 + 3).splitlines()[-1]
    rc.remove_breakpoint(QBASE + pool_op.offset)
    rc.add_breakpoint(dev.units()[2].address)  # a unit start
    rc.resume()
    stop = rc.wait(5)
    assert stop.reason == "breakpoint" and dev.pc == dev.units()[2].address
    np.testing.assert_array_equal(
        np.frombuffer(dev.read(BUF + 0x200, 8), dtype=np.int8).reshape(2, 2, 2),
        max_pool_expected())


def test_watchpoint_on_ofm_memory(dev, host):
    three_unit_program(dev, host)
    rc = RunControl(dev)
    rc.add_watchpoint("w", BUF + 0x204, 4)  # the pool's OFM
    rc.resume()
    stop = rc.wait(5)
    assert stop.reason == "watchpoint" and stop.watch == ("watch", BUF + 0x204)
    assert dev.pc == dev.units()[2].address  # stopped after the unit that wrote it
    rc.add_watchpoint("r", QBASE, 4)  # command stream reads are recorded as well
    rc.remove_watchpoint("w", BUF + 0x204)
    host.clear_irq()


def test_writing_pc_chooses_the_next_command(dev, host):
    words, cmds = three_unit_program(dev, host)
    dev.write_core("pc", dev.units()[2].address)
    assert host.r("QREAD") == dev.units()[2].address - QBASE
    with pytest.raises(DeviceError, match="command address"):
        dev.write_core("pc", 0x2000_0000)


# ---------------------------------------------------------------------------------------------
# monitor commands and the stub


def test_monitor_npu_state_disasm_and_status(dev, host):
    three_unit_program(dev, host)
    rc = RunControl(dev)
    ctx = CommandContext(targets=[rc], log=lambda s: None)
    text = execute(ctx, "npu state")
    assert "NPU running" in text and "next operation at 0x100000f4: ELEMENTWISE" in text
    assert " *NPU_SET_IFM_ZERO_POINT" in text and "zero_point=3" in text
    rc.step(5)
    text = execute(ctx, "npu state")
    assert "NPU_SET_IFM2_ZERO_POINT" in text and " *NPU_SET_IFM2_ZERO_POINT" not in text
    assert " *NPU_SET_IFM_ZERO_POINT" in text and "zero_point=0" in text
    assert "next operation" in text and "POOL pooling_mode=max" in text
    dis = execute(ctx, "npu disasm 5").splitlines()
    assert len(dis) == 5 and sum(line.startswith("=>") for line in dis) == 1
    assert dis[3].startswith(f"=> 0x{dev.pc:08x}")
    status = execute(ctx, "status")
    assert "irq.IRQ: 0" in status and f"commands: {dev.counters()['commands']}" in status
    assert "cycles: " in status and "pmu.PMCCNTR: 0" in status
    with pytest.raises(Exception, match="usage: npu"):
        execute(ctx, "npu frob")
    assert "cmd 1" in execute(ctx, "units")


def test_serve_ethos_u85_target_xml_and_registers():
    server = StubServer([open_device("ethos-u85", macs=512)], gdb_port=0, telnet_port=0,
                        tcl_port=0)
    server.start()
    try:
        info = server.ready_info()
        assert info["devices"] == ["ethos-u85"]
        with RspClient(port=info["gdb"][0]) as c:
            xml = c.target_xml()
            assert '<feature name="org.accelstub.ethos-u85.base">' in xml
            for reg in ("ID", "STATUS", "CMD", "QBASE_LO", "QREAD", "QSIZE", "BASEP0_LO", "PMCR",
                        "PMCCNTR_LO", "PMEVTYPER7"):
                assert f'<reg name="{reg}"' in xml, reg
            assert c.read_register("CONFIG") == 0x20001119
            assert c.read_register("ID") == 0x20007001
            assert "NPU stopped" in c.monitor("npu state")
    finally:
        server.stop()


def test_cli_serve_with_macs_and_disasm(tmp_path, capsys):
    from accelstub.stub.cli import main

    f = tmp_path / "stream.bin"
    f.write_bytes(es.to_bytes(ADD_WORDS))
    assert main(["disasm", str(f)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2].startswith("0x00f4: 00010006") and "NPU_OP_ELEMENTWISE" in out[-2]
    assert "NPU_OP_STOP" in out[-1] and len(out) == 48
    proc = subprocess.Popen([sys.executable, "-m", "accelstub.stub.cli", "serve", "ethos-u85",
                             "--macs", "1024", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        timer = threading.Timer(30, proc.kill)
        timer.start()
        while not line.startswith("accelstub ready"):
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
        timer.cancel()
        info = json.loads(line.split(" ", 2)[2])
        with RspClient(port=info["gdb"][0]) as c:
            assert c.read_register("CONFIG") == 0x2000251A
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


# ---------------------------------------------------------------------------------------------
# the other elementwise modes (identity scales: the reference is plain integer arithmetic)


def ew_cmds(mode: str, ifm2_broadcast: str = "none", scalar: int | None = None) -> list:
    cmds = []
    for c in add_example():
        name, f = c
        if name in ("NPU_SET_IFM_ZERO_POINT", "NPU_SET_IFM2_ZERO_POINT", "NPU_SET_OFM_ZERO_POINT"):
            c = (name, dict(zero_point=0))
        elif name in ("NPU_SET_IFM_SCALE", "NPU_SET_IFM2_SCALE"):
            c = (name, dict(round_mode="natural", scale=1))
        elif name == "NPU_SET_OFM_SCALE":
            c = (name, dict(scale=1, shift=0))
        elif name == "NPU_SET_IFM2_BROADCAST":
            c = (name, dict(broadcast_mode=ifm2_broadcast))
        elif name == "NPU_SET_IFM2_PRECISION" and scalar is not None:
            c = (name, dict(activation_type="signed", activation_storage="none"))
        elif name == "NPU_OP_ELEMENTWISE":
            continue
        cmds.append(c)
    if scalar is not None:
        cmds.append(("NPU_SET_OP_SCALAR", dict(scalar=scalar)))
    return cmds + [("NPU_OP_ELEMENTWISE", dict(elementwise_mode=mode))]


@pytest.mark.parametrize("mode, fn", [("sub", np.subtract), ("mul", np.multiply),
                                      ("min", np.minimum), ("max", np.maximum),
                                      ("abs", lambda a, b: np.abs(a))])
def test_elementwise_modes(dev, host, mode, fn):
    load_add_inputs(dev)
    host.start(stream(ew_cmds(mode), STOP))
    run_to_irq(dev)
    a = np.frombuffer(ADD_IFM, dtype=np.int8).astype(np.int64)
    b = np.frombuffer(ADD_IFM2, dtype=np.int8).astype(np.int64)
    exp = np.clip(fn(a, b), -128, 127)
    got = np.frombuffer(dev.read(BUF + 0x20, 8), dtype=np.int8)
    np.testing.assert_array_equal(got, exp)


def test_elementwise_scalar_and_channel_broadcast(dev, host):
    load_add_inputs(dev)
    a = np.frombuffer(ADD_IFM, dtype=np.int8).astype(np.int64).reshape(2, 4)
    b = np.frombuffer(ADD_IFM2, dtype=np.int8).astype(np.int64).reshape(2, 4)
    host.start(stream(ew_cmds("add", "scalar", scalar=-7), STOP))
    run_to_irq(dev)
    got = np.frombuffer(dev.read(BUF + 0x20, 8), dtype=np.int8).reshape(2, 4)
    np.testing.assert_array_equal(got, np.clip(a - 7, -128, 127))
    host.clear_irq()
    host.w("RESET", 0)
    host.boot()
    host.start(stream(ew_cmds("max", "c"), STOP))  # IFM2 channel 0 of each pixel
    run_to_irq(dev)
    got = np.frombuffer(dev.read(BUF + 0x20, 8), dtype=np.int8).reshape(2, 4)
    np.testing.assert_array_equal(got, np.maximum(a, b[:, :1]))


def test_max_pool_overlapping_windows_with_padding(dev, host):
    ifm = (np.arange(5 * 5 * 3) * 37 % 251 - 125).reshape(5, 5, 3)
    cmds, (oh, ow, c) = pool_cmds("max", 5, 5, 3, k=3, stride=1, pad=1, ifm_off=0x100,
                                  ofm_off=0x300)
    dev.write(BUF + 0x100, ifm.astype(np.int8).tobytes())
    host.start(stream(cmds, STOP))
    run_to_irq(dev)
    pad = np.pad(ifm, ((1, 1), (1, 1), (0, 0)), constant_values=-(1 << 31))
    exp = np.array([[pad[y:y + 3, x:x + 3].max(axis=(0, 1)) for x in range(5)] for y in range(5)])
    got = np.frombuffer(dev.read(BUF + 0x300, 75), dtype=np.int8).reshape(5, 5, 3)
    np.testing.assert_array_equal(got, exp)
