"""MAX78000 device-level features, each driven through bus writes as a driver does it: input
FIFOs, streaming (frame-at-once), the Mlator, BIST / zeroization, memory power and clocks, and
the `monitor layers` listing. "[UG-CNN: ...]" = a table or heading of the
user guide's CNN chapter; "R7#n" = a MAX78000 implementer decision (docs/citations.md); "4.1 X" = a
programming sequence of the project's notes (R§4.1).
"""
from __future__ import annotations

import pytest

from accelstub.devices import open_device
from accelstub.devices.max78000.fifo import FIFO_DEPTH
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.commands import CommandContext, CommandError, execute
from tests.helpers import step

from . import programs

G = 0x5000_0000  # global registers (R7#1)
FIFO_CTRL, FIFO_STAT = G, G + 4
WR = [G + 8 + 4 * n for n in range(4)]  # CNN_FIFO_WR0-3 [UG-CNN: Table 27-9]
AOD = 0x5000_1000
QB = [0x5010_0000 + q * 0x40_0000 for q in range(4)]
SRAM = 0x5040_0000
MRAM, TRAM, BRAM = 0x5018_0000, 0x5011_0000, 0x5010_8000


def wr(dev, addr, value):
    dev.write(addr, (value & 0xFFFFFFFF).to_bytes(4, "little"))


def rd(dev, addr):
    return int.from_bytes(dev.read(addr, 4), "little")


@pytest.fixture
def dev():
    return open_device("max78000")


def stat(dev, field):
    reg = dev.description.register("CNN_FIF0_STAT")
    f = next(f for f in reg.fields if f.name == field)
    return f.extract(rd(dev, FIFO_STAT))


# == 1. input FIFOs ============================================================================
def test_fifo_status_follows_sequence_k(dev):
    """4.1 K [UG-CNN: Global CNN Register Details]: enable FIFO 0 with thresholds 2/2, push words
    and watch empty, almost_empty, almost_full, full; disabling clears the status
    ([UG-CNN: Table 27-11], R7#15)."""
    assert rd(dev, FIFO_STAT) == 0  # reset 0 although empty: disabled FIFOs report 0 (R7#15)
    wr(dev, FIFO_CTRL, 1 << 12 | 2 << 7 | 2 << 2 | 3)
    assert stat(dev, "empty") == 1 and stat(dev, "almost_empty") == 1
    assert stat(dev, "fifos_empty") == 1 and stat(dev, "full") == 0
    wr(dev, WR[0], 0x11)
    assert stat(dev, "empty") == 0 and stat(dev, "almost_empty") == 1  # 1 < empty_thresh 2
    wr(dev, WR[0], 0x22)
    assert stat(dev, "almost_empty") == 0 and stat(dev, "almost_full") == 0  # 2 entries
    wr(dev, WR[0], 0x33)
    assert stat(dev, "almost_full") == 1 and stat(dev, "fifos_almost_full") == 1  # 3 > 2
    for i in range(FIFO_DEPTH - 3):
        wr(dev, WR[0], i)
    assert stat(dev, "full") == 1 and stat(dev, "fifos_full") == 1
    wr(dev, WR[0], 0x99)  # overrun: dropped, reported as a message
    assert dev.fifos.dropped[0] == 1 and "overrun" in dev.warnings[-1]
    assert rd(dev, WR[0]) == 0  # reading CNN_FIFO_WRn returns 0 (R7#15)
    wr(dev, FIFO_CTRL, 3)
    assert rd(dev, FIFO_STAT) == 0


def test_fifo_aggregates_and_pointer_equality(dev):
    """fifos_full/almost_full are AND, fifos_empty/almost_empty OR of the enabled FIFOs
    [UG-CNN: Table 27-11]; wptr_eq / rptr_eq compare the enabled FIFOs' pointers
    [UG-CNN: Table 27-11]."""
    wr(dev, FIFO_CTRL, 0b0011 << 12 | 3)
    assert stat(dev, "wptr_eq") == 1 and stat(dev, "rptr_eq") == 1
    for _ in range(FIFO_DEPTH):
        wr(dev, WR[0], 1)
    assert stat(dev, "full") == 0b01 and stat(dev, "fifos_full") == 0  # AND: FIFO 1 not full
    assert stat(dev, "empty") == 0b10 and stat(dev, "fifos_empty") == 1  # OR
    assert stat(dev, "wptr_eq") == 1  # 8 mod depth 8 == 0: equal pointers again
    wr(dev, WR[1], 1)
    assert stat(dev, "wptr_eq") == 0


def test_fifo_interrupt_enables(dev):
    """FIFO_CTRL interrupt enables [UG-CNN: Table 27-10] drive the FIFO interrupt line."""
    rc = RunControl(dev)
    wr(dev, FIFO_CTRL, 1 << 12 | 1 << 16 | 3)  # full_int_en[0]
    assert dev.interrupts()["CNN_FIFO"] is False
    for _ in range(FIFO_DEPTH):
        wr(dev, WR[0], 0)
    assert dev.interrupts()["CNN_FIFO"] is True
    assert "irq.CNN_FIFO: 1" in execute(CommandContext([rc]), "status")
    wr(dev, FIFO_CTRL, 1 << 12 | 1 << 20 | 3)  # empty_int_en[0] only: not empty -> 0
    assert dev.interrupts()["CNN_FIFO"] is False


def fifo_chain(dev, layers=2, push=True):
    """tests/programs.py chain with CTRL.fifo_en: the 4 input words go to CNN_FIFO_WR0 after
    the start edge, as the generated load_input() does [UG-CNN: Table 27-19]."""
    writes = programs.chain_writes(layers)
    inputs = [v for a, v, _ in writes if SRAM <= a < SRAM + 0x10]
    wr(dev, FIFO_CTRL, 1 << 12 | 2 << 7 | 2 << 2 | 3)
    for a, v, _ in writes:
        if SRAM <= a < SRAM + 0x10:
            continue  # no input in data memory
        if a == QB[0]:
            v |= 1 << 15  # CTRL.fifo_en
        wr(dev, a, v)
    if push:
        for v in inputs:
            wr(dev, WR[0], v)
    return inputs


def chain_result(dev, layers):
    off, vals = programs.chain_expected(layers)
    got = [list(dev.read(SRAM + off + 4 * p, 4)) for p in range(4)]
    return got, vals


def test_fifo_input_equals_memory_input(dev):
    """CTRL.fifo_en: layer 0 takes HWC input from FIFO 0, byte b -> processor b
    ([UG-CNN: Table 27-19], [AI8X: Standard FIFOs]); the outputs equal those of the same program
    with the input in data memory."""
    fifo_chain(dev, 2)
    assert rd(dev, FIFO_STAT) & 0xF0 == 0x10  # the armed engine drained FIFO 0: empty
    while not dev.finished():
        assert step(dev).reason in ("step", "done")
    got, want = chain_result(dev, 2)
    assert got == want
    assert dev.fifos.staged[0] == bytearray()


def test_fifo_layer_waits_for_missing_data(dev):
    """A debugger-driven layer runs at once: without enough FIFO data it stops with a clear
    fault and runs when the data has been pushed ([AI8X: FIFOs] "stalls")."""
    rc = RunControl(dev)
    inputs = fifo_chain(dev, 1, push=False)
    wr(dev, WR[0], inputs[0])
    stop = rc.step()
    assert stop.reason == "fault"
    assert stop.message.startswith("layer 0 waits for 12 more bytes in FIFO 0")
    assert dev.layer == 0 and not dev.finished()
    for v in inputs[1:]:
        wr(dev, WR[0], v)
    assert rc.step().reason == "done"
    got, want = chain_result(dev, 1)
    assert got == want


def test_fifo_chw_routing_goes_to_the_first_processor_of_each_quadrant(dev):
    """CHW (LCTRL0.parallel): FIFO n carries one channel, 4 pixels per word, to processor 16n;
    with fifogrp = 1 to processor n [UG-CNN: Table 27-19, Table 27-34]."""
    from accelstub.devices.max78000.fifo import Fifos

    f = dev.fifos
    assert f.routing(None, True, False) == {0: (0, -1), 16: (1, -1), 32: (2, -1), 48: (3, -1)}
    assert f.routing(None, True, True) == {n: (n, -1) for n in range(4)}
    assert f.routing(None, False, False)[17] == (1, 1)
    assert isinstance(f, Fifos)


# == 2. streaming ===============================================================================
def stream_chain(dev, fbuf=2, q1_ctrl=None):
    """The 2-layer chain as stream layers 0-1 (CTRL.stream_en | lilbuf, S0/S1 start counts,
    S1 delta 1, S1_FBUF = circular buffer of ``fbuf`` words,
    [UG-CNN: CNNx16_n Processor Stream Registers])."""
    for a, v, _ in programs.chain_writes(2):
        if a == QB[0]:
            v |= 1 << 14 | 1 << 19
            if v & 1:
                wr(dev, QB[0] + 0x810, 1)  # S0_STRM0
                wr(dev, QB[0] + 0x814, 4)  # S1_STRM0: start after 4 bytes
                wr(dev, QB[0] + 0x894, 1 << 4)  # S1_STRM1.dsval1 = 1
                wr(dev, QB[0] + 0x914, fbuf)  # S1_FBUF
                wr(dev, QB[0] + 0x694, 0x00100012)  # L1_TPTR: TRAM 16..18 (L0: 0..0)
                if q1_ctrl is not None:
                    wr(dev, QB[1], q1_ctrl)
        wr(dev, a, v)


def test_streaming_results_equal_whole_frame_processing(dev):
    """Stream layers run frame-at-once: the last stream layer's output equals the
    non-streaming run; the producer's circular buffer holds what the hardware leaves, the last
    FBUF words (izer rollover model)."""
    stream_chain(dev, fbuf=2)
    units = [u.summary for u in dev.units()]
    assert units[0].startswith("4x2x2 streaming, no pooling, conv2d")
    while not dev.finished():
        step(dev)
    got, want = chain_result(dev, 2)
    assert got == want
    # layer 0 wrote 4 pixels into a 2-word circular buffer at word 0x40: pixels 2, 3 remain
    l0 = [[min(127, x << 1) for x in chans] for chans in programs.INPUT]
    assert [list(dev.read(SRAM + 0x100 + 4 * p, 4)) for p in range(4)] == \
        [l0[2], l0[3], [0] * 4, [0] * 4]
    assert dev.warnings == []


def test_streaming_warns_on_quadrants_configured_differently(dev):
    """All quadrants must be configured identically ([UG-CNN: Table 27-19], R7#38): a warning
    message."""
    stream_chain(dev, q1_ctrl=0x9)  # quadrant 1 enabled without stream_en
    step(dev)
    assert any("CNNx16_1_CTRL" in w and "identically" in w for w in dev.warnings)


def test_streaming_without_circular_buffer_length_faults(dev):
    """CTRL.lilbuf with S1_FBUF = 0: no buffer [UG-CNN: Table 27-19, Table 27-43] -> fault, not a
    wrong result."""
    rc = RunControl(dev)
    stream_chain(dev, fbuf=0)
    stop = rc.step()
    assert stop.reason == "fault" and "FBUF = 0" in stop.message


# == 3. Mlator ==================================================================================
def mlat_setup(dev, sel=2):
    for w in range(8):
        wr(dev, SRAM + 4 * w, int.from_bytes(bytes([w, 0x10 + w, 0x20 + w, 0x30 + w]), "little"))
    wr(dev, QB[0] + 0x310, 0x0)  # L0_WPTR_BASE: memory 0, word 0 (R7#20)
    wr(dev, QB[0], sel << 17 | 1 << 3)
    wr(dev, QB[0], sel << 17 | 1 << 16 | 1 << 3)  # mlat_ld 0->1 [UG-CNN: Table 27-19]


def test_mlator_sequence_e_cpu_reads_advance_debugger_reads_do_not(dev):
    """4.1 E [UG-CNN: Table 27-19, Table 27-40]: MLAT packs byte mlatch_sel of 4 words,
    first-fetched byte in bits 7:0 (R7#20); a CPU read advances, a debugger read never does
    (devices/device.py)."""
    mlat_setup(dev, sel=2)
    a = QB[0] + 0x1000
    assert rd(dev, a) == 0x23222120 and rd(dev, a) == 0x23222120
    assert int.from_bytes(dev.host_read(a, 4), "little") == 0x23222120
    assert rd(dev, a) == 0x27262524
    rc = RunControl(dev)
    out = execute(CommandContext([rc]), "mlat 0 1")
    assert out == "0x50101000: 27262524"
    assert rd(dev, a) == 0  # words 8..11 are 0


def test_mlator_command_refuses_before_load(dev):
    with pytest.raises(CommandError, match="not loaded"):
        execute(CommandContext([RunControl(dev)]), "mlat 1")


@pytest.mark.parametrize("words, message", [
    ("mlat 4", "mlat: quadrant 4, count 1: the quadrant is 0-3, the count 1-4096"),
    ("mlat 0 0", "mlat: quadrant 0, count 0: the quadrant is 0-3, the count 1-4096"),
    ("mlat 0 4097", "mlat: quadrant 0, count 4097: the quadrant is 0-3, the count 1-4096"),
    ("mlat x", "usage: mlat [quadrant [count]]"),
    ("mlat 0 1 2", "usage: mlat [quadrant [count]]")])
def test_mlator_command_names_a_value_out_of_range(dev, words, message):
    """Numbers outside the ranges are named with the ranges; words that are not its grammar get
    the declared usage (Device.usage_error)."""
    mlat_setup(dev)
    with pytest.raises(CommandError) as e:
        execute(CommandContext([RunControl(dev)]), words)
    assert str(e.value) == message


# == 4. BIST and zeroization ====================================================================
TEST = QB[0] + 0xC


def test_bist_sequence_f(dev):
    """4.1 F [UG-CNN: Table 27-22]: sbistrun 0->1 -> sallbdone, bistdone, pass; writing 1 again does
    not rerun; run bit back to 0 clears done bits; bistdone clears when all run bits are 0."""
    wr(dev, TEST, 1 << 0)
    v = rd(dev, TEST)
    assert v >> 18 & 1 and v >> 27 & 1 and not v >> 14 & 1 and not v >> 26 & 1
    wr(dev, TEST, 1 << 0 | 1 << 2)  # MRAM BIST too
    assert rd(dev, TEST) >> 19 & 1
    wr(dev, TEST, 1 << 2)  # SRAM run bit back to 0: its done clears, bistdone stays (MRAM)
    v = rd(dev, TEST)
    assert not v >> 18 & 1 and v >> 19 & 1 and v >> 27 & 1
    wr(dev, TEST, 0)
    assert rd(dev, TEST) == 0


def test_bist_run_leaves_that_memory_of_the_quadrant_zeroed(dev):
    """ai8xize.py --zero-sram zeroes the memories with the four BIST run bits and then omits
    all-zero kernels: a BIST run clears the memory type it tests, in its quadrant only."""
    wr(dev, SRAM + 0x7FFC, 0xDEADBEEF)
    wr(dev, SRAM + 0x40_0000, 0x12345678)  # quadrant 1: untouched
    wr(dev, MRAM + 4, 0x01020304)
    wr(dev, TRAM, 0xABCD)
    wr(dev, BRAM, 0x7F)
    wr(dev, TEST, 1 << 0)  # sbistrun
    assert rd(dev, SRAM + 0x7FFC) == 0 and rd(dev, SRAM + 0x40_0000) == 0x12345678
    assert rd(dev, MRAM + 4) == 0x01020304 and rd(dev, TRAM) == 0xABCD and rd(dev, BRAM) == 0x7F
    for bit, addr in ((2, MRAM + 4), (4, TRAM), (6, BRAM)):
        wr(dev, TEST, 1 << bit)
        assert rd(dev, addr) == 0


def test_zeroize_sequence_g_clears_that_memory_of_the_quadrant(dev):
    """4.1 G [UG-CNN: Table 27-22]: a pattern in data SRAM, MRAM, TRAM, BRAM; sramz 0->1 clears only
    the quadrant's data SRAM; sallzdone and zerodone set; sramz = 0 clears them."""
    wr(dev, SRAM + 0x7FFC, 0xDEADBEEF)
    wr(dev, SRAM + 0x40_0000, 0x12345678)  # quadrant 1: untouched
    wr(dev, MRAM + 4, 0x01020304)
    wr(dev, TRAM, 0xABCD)
    wr(dev, BRAM, 0x7F)
    wr(dev, TEST, 1 << 1)
    v = rd(dev, TEST)
    assert v >> 22 & 1 and v >> 28 & 1
    assert rd(dev, SRAM + 0x7FFC) == 0 and rd(dev, SRAM + 0x40_0000) == 0x12345678
    assert rd(dev, MRAM + 4) == 0x01020304
    for bit, addr in ((3, MRAM + 4), (5, TRAM), (7, BRAM)):
        wr(dev, TEST, 1 << bit)
        assert rd(dev, addr) == 0
    wr(dev, TEST, 0)
    assert rd(dev, TEST) == 0


def test_bistsel_reports_the_selected_controller(dev):
    wr(dev, TEST, 0x10 << 8 | 1 << 2)  # bistsel = MRAM instance 0, MRAM BIST run
    out = execute(CommandContext([RunControl(dev)]), "cnn test").splitlines()[0]
    assert out == "q0: bistsel 0x10: mram instance 0: done 1, fail 0"


# == 5. power, clocks ===========================================================================
def test_sram_pd_loses_contents(dev):
    """4.1 H, SRAM.pd [UG-CNN: Table 27-20]: all four memory types of the quadrant are lost."""
    wr(dev, SRAM, 0x55)
    wr(dev, MRAM, 0x66)
    wr(dev, QB[0] + 4, 0xE | 1 << 16)
    wr(dev, QB[0] + 4, 0xE)
    assert rd(dev, SRAM) == 0 and rd(dev, MRAM) == 0


def test_sram_ds_reads_zero_for_the_cpu_and_keeps_contents(dev):
    """SRAM.ds [UG-CNN: Table 27-20]: the CPU reads 0, contents retained; the debugger's read shows
    the retained contents (R7#41); CPU writes are dropped."""
    wr(dev, SRAM, 0x1234)
    wr(dev, QB[0] + 4, 0xE | 1 << 15)
    assert dev.host_read(SRAM, 4) == bytes(4)
    assert rd(dev, SRAM) == 0x1234
    wr(dev, SRAM, 0x9999)
    wr(dev, QB[0] + 4, 0xE)
    assert rd(dev, SRAM) == 0x1234 and dev.host_read(SRAM, 4) == (0x1234).to_bytes(4, "little")


def test_aod_pd_and_dsleep_act_on_mram_only(dev):
    """CNN_AOD_CTRL.pd bit n loses quadrant n's MRAM; dsleep keeps it, CPU reads 0
    [UG-CNN: Table 27-16]."""
    wr(dev, MRAM, 0x11)
    wr(dev, SRAM, 0x22)
    wr(dev, AOD, 1 << 8)  # dsleep q0
    assert dev.host_read(MRAM, 4) == bytes(4) and dev.host_read(SRAM, 1) == b"\x22"
    wr(dev, AOD, 1 << 12)  # pd q0
    wr(dev, AOD, 0)
    assert rd(dev, MRAM) == 0 and rd(dev, SRAM) == 0x22


def test_layer_on_a_sleeping_quadrant_faults(dev):
    rc = RunControl(dev)
    programs.apply(dev, 1)
    wr(dev, QB[0] + 4, 0xE | 1 << 15)
    stop = rc.step()
    assert stop.reason == "fault" and "CNNx16_0_SRAM.ds = 1" in stop.message


def test_cnn_en_edge_without_clk_en_is_ignored_with_a_message(dev):
    """CTRL.clk_en [UG-CNN: Table 27-19] off: the start edge is ignored (R7#36), with a message."""
    for a, v, _ in programs.chain_writes(1):
        wr(dev, a, v & ~0x8 if a == QB[0] else v)
    assert dev.finished()
    assert "clk_en = 0 ignored" in dev.warnings[-1]
    assert "clk_en = 0 ignored" in execute(CommandContext([RunControl(dev)]), "cnn warnings")


# == 6. monitor layers ==========================================================================
def test_monitor_layers_lists_the_program_like_cnn_c_comments(dev):
    rc = RunControl(dev)
    programs.apply(dev, 2)
    out = execute(CommandContext([rc]), "layers").splitlines()
    # 1x1 conv, 4 output channels, 2x2: 4 + 2 * (2 + 2 * 4 * 1) = 24 cycles
    assert out == [f"Layer {y}: 4x2x2, no pooling, conv2d with kernel size 1x1, stride 1/1, "
                   "pad 0/0, no activation, 4x2x2 output (24 cycles)" for y in (0, 1)] + \
        ["total: 48 cycles (model)"]
    helptext = execute(CommandContext([rc]), "help layers")
    assert "4 + out_rows * (2 + out_cols * out_channels * input_passes)" in helptext
    rc.step()
    assert dev.cycles == 24


def test_listing_wording_for_pooling(dev):
    from accelstub.devices.max78000.listing import ai8x_summary

    programs.apply(dev, 1)
    cfg = dev.layer_config(0)
    import dataclasses

    cfg = dataclasses.replace(cfg, pool_kind="max", pool_rows=2, pool_cols=2, pool_stride=2,
                              activation="relu")
    assert ai8x_summary(cfg) == ("4x2x2, max pool 2x2 with stride 2/2, conv2d with kernel size "
                                 "1x1, stride 1/1, pad 0/0, ReLU, 4x2x2 output")
