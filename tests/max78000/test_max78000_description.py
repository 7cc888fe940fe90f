"""The MAX78000 description (configs/max78000.toml) against checkable facts
(numbered "Fact n" as in the project's notes, each with its user-guide citation); "[UG-CNN: ...]"
cites the user guide."""
from __future__ import annotations

import pytest

from accelstub.devices import BusError, open_device
from accelstub.devices.description import Description, Field, Register, load_description
from tests.helpers import source_docs

GLOBAL = 0x5000_0000
QB = [0x5010_0000, 0x5050_0000, 0x5090_0000, 0x50D0_0000]  # quadrant bases [UG-CNN: Table 27-17]


@pytest.fixture(scope="module")
def desc() -> Description:
    return load_description("max78000")


@pytest.fixture()
def dev():
    return open_device("max78000")


def reg(desc: Description, name: str) -> Register:
    return desc.register(name)


def fld(desc: Description, reg_name: str, field: str) -> Field:
    for f in desc.register(reg_name).fields:
        if f.name == field:
            return f
    raise AssertionError(f"{reg_name} has no field {field}")


def bits(desc: Description, reg_name: str, field: str) -> tuple[int, int]:
    f = fld(desc, reg_name, field)
    return f.msb, f.lsb


def used_mask(r: Register) -> int:
    m = 0
    for f in r.fields:
        m |= f.mask
    return m


def rd32(dev, addr: int) -> int:
    return int.from_bytes(dev.read(addr, 4), "little")


def wr32(dev, addr: int, value: int) -> None:
    dev.write(addr, value.to_bytes(4, "little"))


# ---------------------------------------------------------------------------------------------
# counts

def test_register_count_is_2303_architected_plus_8_emu(desc):
    """7 global (incl. CNN_AOD_CTRL) + 4 x 574 quadrant registers (R§2)."""
    arch = [r for r in desc.registers if r.block != "emu"]
    assert len(arch) == 2303
    assert len([r for r in desc.registers if r.block == "emu"]) == 8
    assert len(desc.registers) == 2311


def test_each_quadrant_has_574_registers(desc):
    """6 singles + 16 per-layer arrays x 32 + LCTRL1 x 32 + 3 stream arrays x 8
    (R§2)."""
    for q in range(4):
        assert len([r for r in desc.registers if r.block == f"q{q}"]) == 574


def test_every_register_and_field_cites_the_user_guide_in_the_description_file(desc):
    """Provenance stays in configs/max78000.toml; what users see (SVD, describe, the TUI) is
    the text without the citations."""
    src = source_docs("max78000")
    for r in desc.registers:
        if r.block == "emu":
            continue
        doc, fields = src[r.definition.name]
        assert "[UG-CNN: " in doc, r.name
        assert r.doc and "[UG-CNN" not in r.doc, r.name
        for f in r.fields:
            assert "[UG-CNN: " in fields[f.name], (r.name, f.name)
            assert "[UG-CNN" not in f.doc, (r.name, f.name)


def test_32_layers_and_8_streams_per_quadrant(desc):
    """Up to 8 streams for the first 8 layers, up to 32 layers
    [UG-CNN: CNNx16_n Processor Stream Registers, CNNx16_n Per Layer Registers (CNNx16_n_Ly)]."""
    assert desc.find_register("CNNx16_0_L31_RCNT") is not None
    assert desc.find_register("CNNx16_0_L32_RCNT") is None
    assert desc.find_register("CNNx16_3_S7_FBUF") is not None
    assert desc.find_register("CNNx16_3_S8_FBUF") is None


# ---------------------------------------------------------------------------------------------
# global registers

def test_fifo_ctrl_at_global_0x0000_rdy_sel_1_0_reset_0x3(desc):
    """Fact 1 [UG-CNN: Table 27-9, Table 27-10]."""
    r = reg(desc, "CNN_FIF0_CTRL")
    assert r.address == GLOBAL
    assert bits(desc, "CNN_FIF0_CTRL", "rdy_sel") == (1, 0)
    assert fld(desc, "CNN_FIF0_CTRL", "rdy_sel").reset == 3
    assert r.reset == 0x3
    assert desc.register("CNN_FIFO_CTRL") is r  # alias with letter O (R7#6)


def test_fifo_ctrl_fifo_en_bits_15_12(desc):
    """Fact 2 [UG-CNN: Table 27-10]."""
    assert bits(desc, "CNN_FIF0_CTRL", "fifo_en") == (15, 12)


def test_fifo_ctrl_fifo_cpl_bit_11_and_bits_10_6_5_reserved(desc):
    """Fact 3 [UG-CNN: Table 27-10]."""
    assert bits(desc, "CNN_FIF0_CTRL", "fifo_cpl") == (11, 11)
    m = used_mask(reg(desc, "CNN_FIF0_CTRL"))
    assert m & ((1 << 10) | (3 << 5)) == 0
    assert m == 0xFFFF_FB9F


def test_fifo_ctrl_thresholds_empty_9_7_full_4_2(desc):
    """Fact 4 [UG-CNN: Table 27-10]."""
    assert bits(desc, "CNN_FIF0_CTRL", "empty_thresh") == (9, 7)
    assert bits(desc, "CNN_FIF0_CTRL", "full_thresh") == (4, 2)


def test_fifo_ctrl_interrupt_enables(desc):
    """Fact 5 [UG-CNN: Table 27-10]."""
    assert bits(desc, "CNN_FIF0_CTRL", "almost_empty_int_en") == (31, 28)
    assert bits(desc, "CNN_FIF0_CTRL", "almost_full_int_en") == (27, 24)
    assert bits(desc, "CNN_FIF0_CTRL", "empty_int_en") == (23, 20)
    assert bits(desc, "CNN_FIF0_CTRL", "full_int_en") == (19, 16)


def test_fifo_stat_at_0x0004_rptr_eq_21_wptr_eq_20_bits_31_22_reserved(desc):
    """Fact 6 [UG-CNN: Table 27-9, Table 27-11]."""
    r = reg(desc, "CNN_FIF0_STAT")
    assert r.address == GLOBAL + 4
    assert desc.register("CNN_FIFO_STAT") is r
    assert bits(desc, "CNN_FIF0_STAT", "rptr_eq") == (21, 21)
    assert bits(desc, "CNN_FIF0_STAT", "wptr_eq") == (20, 20)
    assert used_mask(r) >> 22 == 0


def test_fifo_stat_per_fifo_and_aggregate_fields(desc):
    """Facts 7 and 8 [UG-CNN: Table 27-11]."""
    assert bits(desc, "CNN_FIF0_STAT", "almost_empty") == (15, 12)
    assert bits(desc, "CNN_FIF0_STAT", "almost_full") == (11, 8)
    assert bits(desc, "CNN_FIF0_STAT", "empty") == (7, 4)
    assert bits(desc, "CNN_FIF0_STAT", "full") == (3, 0)
    assert bits(desc, "CNN_FIF0_STAT", "fifos_full") == (16, 16)
    assert bits(desc, "CNN_FIF0_STAT", "fifos_empty") == (17, 17)
    assert bits(desc, "CNN_FIF0_STAT", "fifos_almost_full") == (18, 18)
    assert bits(desc, "CNN_FIF0_STAT", "fifos_almost_empty") == (19, 19)


def test_fifo_stat_all_fields_read_only(desc):
    """Table 27-11 "All fields read-only" ([UG-CNN: Table 27-11]; R§7)."""
    assert {f.access for f in reg(desc, "CNN_FIF0_STAT").fields} == {"ro"}


def test_fifo_wr0_3_at_0x8_0xc_0x10_0x14_32_bit_data(desc):
    """Fact 9 [UG-CNN: Table 27-9, Table 27-12]."""
    for n in range(4):
        r = reg(desc, f"CNN_FIFO_WR{n}")
        assert r.address == GLOBAL + 8 + 4 * n
        assert used_mask(r) == 0xFFFF_FFFF
        assert r.fields[0].access == "rw"


def test_aod_ctrl_at_0x50001000_reset_0x3_rm_pd_dsleep(desc):
    """Fact 10 [UG-CNN: Table 27-9, Table 27-16]."""
    r = reg(desc, "CNN_AOD_CTRL")
    assert r.address == 0x5000_1000 and r.block == "aod" and r.group == "cnn_global"
    assert r.reset == 0x3
    assert bits(desc, "CNN_AOD_CTRL", "rm") == (19, 16)
    assert bits(desc, "CNN_AOD_CTRL", "pd") == (15, 12)
    assert bits(desc, "CNN_AOD_CTRL", "dsleep") == (11, 8)
    assert bits(desc, "CNN_AOD_CTRL", "rdy_sel") == (1, 0)


# ---------------------------------------------------------------------------------------------
# quadrant registers

def test_quadrant_bases_0x10_0000_0x50_0000_0x90_0000_0xD0_0000(desc):
    """Fact 11 [UG-CNN: Table 27-17]: offsets from the CNN base 0x5000_0000."""
    for q in range(4):
        assert reg(desc, f"CNNx16_{q}_CTRL").address == GLOBAL + [0x10_0000, 0x50_0000, 0x90_0000,
                                                                    0xD0_0000][q]
        b = next(b for b in desc.blocks if b.name == f"q{q}")
        assert b.base == QB[q] and b.group == f"cnn_q{q}"


def test_ctrl_at_0x0000_resets_to_0x6(desc):
    """Fact 12 [UG-CNN: Table 27-18, Table 27-19]: rdy_sel bits 2:1 reset 0b11."""
    for q in range(4):
        r = reg(desc, f"CNNx16_{q}_CTRL")
        assert r.address == QB[q] and r.reset == 0x6
    assert bits(desc, "CNNx16_0_CTRL", "rdy_sel") == (2, 1)


def test_ctrl_cnn_en_bit_0_oneshot_bit_8_cnn_irq_bit_12_rw(desc):
    """Facts 13-15 [UG-CNN: Table 27-19]."""
    assert bits(desc, "CNNx16_0_CTRL", "cnn_en") == (0, 0)
    assert bits(desc, "CNNx16_0_CTRL", "oneshot") == (8, 8)
    assert bits(desc, "CNNx16_0_CTRL", "cnn_irq") == (12, 12)
    assert fld(desc, "CNNx16_0_CTRL", "cnn_irq").access == "rw"


def test_ctrl_ext_sync_to_mexpress_positions(desc):
    """Fact 16 [UG-CNN: Table 27-19]."""
    exp = {"ext_sync": (11, 9), "stream_en": (14, 14), "fifo_en": (15, 15), "mlat_ld": (16, 16),
           "mlatch_sel": (18, 17), "lilbuf": (19, 19), "mexpress": (20, 20)}
    for name, b in exp.items():
        assert bits(desc, "CNNx16_1_CTRL", name) == b, name


def test_ctrl_simple1b_to_qupac_positions(desc):
    """Fact 17 [UG-CNN: Table 27-19]."""
    exp = {"simple1b": (21, 21), "ffifo_en": (22, 22), "fifogrp": (23, 23),
           "fclk_dly": (29, 24), "timeshft": (30, 30), "qupac": (31, 31)}
    for name, b in exp.items():
        assert bits(desc, "CNNx16_2_CTRL", name) == b, name


def test_ctrl_clk_en_to_poolrnd_positions(desc):
    """Fact 18 [UG-CNN: Table 27-19]."""
    exp = {"clk_en": (3, 3), "calcmax": (4, 4), "pool_en": (5, 5), "bigdata": (6, 6),
           "apbclk_en": (7, 7), "poolrnd": (13, 13)}
    for name, b in exp.items():
        assert bits(desc, "CNNx16_3_CTRL", name) == b, name


def test_ctrl_mlatch_sel_enumeration(desc):
    """mlatch_sel 0..3 selects SRAM bits 7:0 .. 31:24 [UG-CNN: Table 27-19]."""
    f = fld(desc, "CNNx16_0_CTRL", "mlatch_sel")
    assert [e.value for e in f.enums] == [0, 1, 2, 3]


def test_sram_at_0x0004_rmargin_5_2_reset_3_rmargin_en_reset_1_reset_0xE(desc):
    """Fact 19 [UG-CNN: Table 27-18, Table 27-20]."""
    r = reg(desc, "CNNx16_0_SRAM")
    assert r.address == QB[0] + 4
    assert bits(desc, "CNNx16_0_SRAM", "rmargin") == (5, 2)
    assert fld(desc, "CNNx16_0_SRAM", "rmargin").reset == 3
    assert fld(desc, "CNNx16_0_SRAM", "rmargin_en").reset == 1
    assert r.reset == 0xE


def test_sram_pd_bit_16_ds_bit_15(desc):
    """Fact 20 [UG-CNN: Table 27-20]."""
    assert bits(desc, "CNNx16_0_SRAM", "pd") == (16, 16)
    assert bits(desc, "CNNx16_0_SRAM", "ds") == (15, 15)


def test_sram_light_sleep_wpulse_wneg_ra_extacc(desc):
    """Fact 21 [UG-CNN: Table 27-20]; wneg_en R/W reset 0 and bits
    31:23 unlisted per R7#18."""
    exp = {"lsdram": (19, 19), "lsmram": (20, 20), "lstram": (21, 21), "lsbram": (22, 22),
           "wpulse": (13, 11), "wneg_en": (10, 10), "wneg_vol": (9, 8), "ra": (7, 6),
           "extacc": (0, 0)}
    for name, b in exp.items():
        assert bits(desc, "CNNx16_0_SRAM", name) == b, name
    wneg = fld(desc, "CNNx16_0_SRAM", "wneg_en")
    assert wneg.access == "rw" and wneg.reset == 0
    assert used_mask(reg(desc, "CNNx16_0_SRAM")) >> 23 == 0
    assert len(fld(desc, "CNNx16_0_SRAM", "ra").enums) == 4
    assert len(fld(desc, "CNNx16_0_SRAM", "wneg_vol").enums) == 4


def test_lcnt_max_at_0x0008_lcnt_4_0_bits_31_5_reserved(desc):
    """Fact 22 [UG-CNN: Table 27-18, Table 27-21]."""
    r = reg(desc, "CNNx16_0_LCNT_MAX")
    assert r.address == QB[0] + 8
    assert bits(desc, "CNNx16_0_LCNT_MAX", "lcnt") == (4, 0)
    assert used_mask(r) == 0x1F


def test_test_at_0x000c_run_and_zeroize_bits(desc):
    """Fact 23 [UG-CNN: Table 27-18, Table 27-22]."""
    assert reg(desc, "CNNx16_0_TEST").address == QB[0] + 0xC
    for i, name in enumerate(["sbistrun", "sramz", "mbistrun", "mramz", "tbistrun", "tramz",
                              "bbistrun", "bramz"]):
        assert bits(desc, "CNNx16_0_TEST", name) == (i, i), name
        assert fld(desc, "CNNx16_0_TEST", name).access == "rw"


def test_test_bistsel_and_bist_status_bits(desc):
    """Fact 24 [UG-CNN: Table 27-22]."""
    assert bits(desc, "CNNx16_0_TEST", "bistsel") == (13, 8)
    for i, name in enumerate(["sallbfail", "mallbfail", "tallbfail", "ballbfail", "sallbdone",
                              "mallbdone", "tallbdone", "ballbdone"], start=14):
        assert bits(desc, "CNNx16_0_TEST", name) == (i, i), name


def test_test_zeroize_done_bits_and_status_read_only(desc):
    """Fact 25 [UG-CNN: Table 27-22]; status bits 14..28 read-only per R7#19."""
    for i, name in enumerate(["sallzdone", "mallzdone", "tallzdone", "ballzdone", "bistfail",
                              "bistdone", "zerodone"], start=22):
        assert bits(desc, "CNNx16_0_TEST", name) == (i, i), name
    r = reg(desc, "CNNx16_0_TEST")
    assert r.mask_of("ro") == 0x1FFF_C000
    assert used_mask(r) == 0x1FFF_FFFF


def test_l21_rcnt_at_quadrant_offset_0x64(desc):
    """Fact 27 [UG-CNN: CNNx16_n Per Layer Registers (CNNx16_n_Ly)]."""
    for q in range(4):
        assert reg(desc, f"CNNx16_{q}_L21_RCNT").address == QB[q] + 0x64


def test_s5_strm0_at_quadrant_offset_0x824(desc):
    """Fact 28 [UG-CNN: CNNx16_n Processor Stream Registers]."""
    for q in range(4):
        assert reg(desc, f"CNNx16_{q}_S5_STRM0").address == QB[q] + 0x824


ARRAYS = [("RCNT", 0x010), ("CCNT", 0x090), ("ONED", 0x110), ("PRCNT", 0x190), ("PCCNT", 0x210),
          ("STRIDE", 0x290), ("WPTR_BASE", 0x310), ("WPTR_TOFF", 0x390), ("WPTR_MOFF", 0x410),
          ("WPTR_CHOFF", 0x490), ("RPTR_BASE", 0x510), ("LCTRL0", 0x590), ("MCNT", 0x610),
          ("TPTR", 0x690), ("EN", 0x710), ("POST", 0x790), ("LCTRL1", 0xA10)]


def test_per_layer_arrays_at_base_plus_4y(desc):
    """Table 27-18 ranges [UG-CNN: Table 27-18]: Ly_X at base(X) + 4y, y = 0..31."""
    for q in range(4):
        for name, base in ARRAYS:
            for y in range(32):
                r = reg(desc, f"CNNx16_{q}_L{y}_{name}")
                assert r.address == QB[q] + base + 4 * y and r.reset == 0


def test_stream_arrays_at_base_plus_4z(desc):
    """Table 27-18 [UG-CNN: Table 27-18]: Sz_X at base(X) + 4z, z = 0..7."""
    for q in range(4):
        for name, base in [("STRM0", 0x810), ("STRM1", 0x890), ("FBUF", 0x910)]:
            for z in range(8):
                assert reg(desc, f"CNNx16_{q}_S{z}_{name}").address == QB[q] + base + 4 * z


def test_rcnt_pad_17_16_max_9_0(desc):
    """Fact 29 [UG-CNN: Table 27-23]."""
    assert bits(desc, "CNNx16_0_L0_RCNT", "rcnt_pad") == (17, 16)
    assert bits(desc, "CNNx16_0_L0_RCNT", "rcnt_max") == (9, 0)


def test_ccnt_pad_17_16_max_9_0_at_0x090(desc):
    """Fact 30 [UG-CNN: Table 27-18, Table 27-24]."""
    assert reg(desc, "CNNx16_0_L0_CCNT").address == QB[0] + 0x90
    assert reg(desc, "CNNx16_0_L31_CCNT").address == QB[0] + 0x10C
    assert bits(desc, "CNNx16_0_L0_CCNT", "ccnt_pad") == (17, 16)
    assert bits(desc, "CNNx16_0_L0_CCNT", "ccnt_max") == (9, 0)


def test_oned_fields_and_ewise_func_encoding(desc):
    """Fact 31 [UG-CNN: Table 27-25]; doc field '2d_conv' is named conv2d_en."""
    exp = {"ewise_cnt": (21, 18), "conv2d_en": (17, 17), "prepool": (16, 16),
           "ewise_func": (15, 14), "ewise_en": (13, 13), "oned_en": (12, 12),
           "oned_width": (11, 8), "oned_sad": (7, 4), "tscnt_max": (3, 0)}
    for name, b in exp.items():
        assert bits(desc, "CNNx16_0_L3_ONED", name) == b, name
    assert "2d_conv" in source_docs("max78000")["L{i}_ONED"][1]["conv2d_en"]
    enums = {e.value: e.name for e in fld(desc, "CNNx16_0_L3_ONED", "ewise_func").enums}
    assert enums == {0: "sub", 1: "add", 2: "or", 3: "xor"}


def test_prcnt_pccnt_stride(desc):
    """Fact 32 [UG-CNN: Table 27-26, Table 27-27, Table 27-28]; STRIDE stored as 4 bits 3:0 per
    R7#33."""
    assert reg(desc, "CNNx16_0_L0_PRCNT").address == QB[0] + 0x190
    assert reg(desc, "CNNx16_0_L0_PCCNT").address == QB[0] + 0x210
    assert reg(desc, "CNNx16_0_L0_STRIDE").address == QB[0] + 0x290
    assert bits(desc, "CNNx16_0_L0_PRCNT", "prcnt_max") == (3, 0)
    assert bits(desc, "CNNx16_0_L0_PCCNT", "pccnt_max") == (3, 0)
    assert bits(desc, "CNNx16_0_L0_STRIDE", "stride") == (3, 0)
    assert "#33" in source_docs("max78000")["L{i}_STRIDE"][1]["stride"]


def test_pointer_registers_are_single_17_bit_fields(desc):
    """Fact 33 [UG-CNN: Table 27-29, Table 27-30, Table 27-31, Table 27-32, Table 27-33]."""
    for name in ["WPTR_BASE", "WPTR_TOFF", "WPTR_MOFF", "WPTR_CHOFF", "RPTR_BASE"]:
        r = reg(desc, f"CNNx16_2_L7_{name}")
        assert len(r.fields) == 1 and (r.fields[0].msb, r.fields[0].lsb) == (16, 0)


def test_lctrl0_fields_at_0x590(desc):
    """Fact 34 [UG-CNN: Table 27-34]."""
    assert reg(desc, "CNNx16_0_L0_LCTRL0").address == QB[0] + 0x590
    exp = {"bigdwrt": (16, 16), "cnnsi_en": (15, 12), "sramlsrc": (11, 11),
           "cpad_only": (10, 10), "act_en": (9, 9), "maxpl_en": (8, 8), "pool_en": (7, 7),
           "parallel": (6, 6), "master": (5, 5), "mslave": (4, 4), "sslave": (3, 0)}
    for name, b in exp.items():
        assert bits(desc, "CNNx16_0_L0_LCTRL0", name) == b, name


def test_mcnt_sad_31_16_max_15_0_at_0x610(desc):
    """Fact 35 [UG-CNN: Table 27-35]."""
    assert reg(desc, "CNNx16_0_L0_MCNT").address == QB[0] + 0x610
    assert bits(desc, "CNNx16_0_L0_MCNT", "mcnt_sad") == (31, 16)
    assert bits(desc, "CNNx16_0_L0_MCNT", "mcnt_max") == (15, 0)


def test_tptr_sad_26_16_max_10_0_reserved_31_27_15_11(desc):
    """Fact 36 [UG-CNN: Table 27-36]."""
    assert reg(desc, "CNNx16_0_L0_TPTR").address == QB[0] + 0x690
    assert bits(desc, "CNNx16_0_L0_TPTR", "tptr_sad") == (26, 16)
    assert bits(desc, "CNNx16_0_L0_TPTR", "tptr_max") == (10, 0)
    assert used_mask(reg(desc, "CNNx16_0_L0_TPTR")) == 0x07FF_07FF


def test_en_mask_en_31_16_pro_en_15_0(desc):
    """Fact 37 [UG-CNN: Table 27-37]."""
    assert reg(desc, "CNNx16_0_L0_EN").address == QB[0] + 0x710
    assert bits(desc, "CNNx16_0_L0_EN", "mask_en") == (31, 16)
    assert bits(desc, "CNNx16_0_L0_EN", "pro_en") == (15, 0)


def test_post_fields_at_0x790(desc):
    """Fact 38 [UG-CNN: Table 27-38]."""
    assert reg(desc, "CNNx16_0_L0_POST").address == QB[0] + 0x790
    assert reg(desc, "CNNx16_0_L31_POST").address == QB[0] + 0x80C
    exp = {"deconv_en": (28, 28), "flatten_en": (27, 27), "out_abs": (26, 26),
           "onexone_en": (25, 25), "ts_en": (24, 24), "mask_size": (23, 22),
           "xpmp_cnt": (21, 18), "scale_shft": (17, 17), "scale_reg": (16, 13),
           "bptr_en": (12, 12), "bptr_sad": (11, 0)}
    for name, b in exp.items():
        assert bits(desc, "CNNx16_0_L0_POST", name) == b, name


def test_post_mask_size_encoding(desc):
    """Fact 39 [UG-CNN: Table 27-38]: 00 = 8-bit, 01 = 1-bit, 10 = 2-bit, 11 = 4-bit."""
    enums = {e.value: e.name for e in fld(desc, "CNNx16_0_L0_POST", "mask_size").enums}
    assert enums == {0: "bits8", 1: "bits1", 2: "bits2", 3: "bits4"}


def test_post_scale_shft_encoding_and_onexone(desc):
    """Fact 40 [UG-CNN: Table 27-38] and onexone_en [UG-CNN: Table 27-38]."""
    enums = {e.value: e.name for e in fld(desc, "CNNx16_0_L0_POST", "scale_shft").enums}
    assert enums == {0: "left", 1: "right"}
    enums = {e.value: e.name for e in fld(desc, "CNNx16_0_L0_POST", "onexone_en").enums}
    assert enums == {0: "pass_thru", 1: "onexone"}


def test_lctrl1_at_0xa10_xpch_max_wptr_inc_inpchexp(desc):
    """Fact 43 [UG-CNN: Table 27-18, Table 27-39]."""
    assert reg(desc, "CNNx16_0_L0_LCTRL1").address == QB[0] + 0xA10
    assert reg(desc, "CNNx16_0_L31_LCTRL1").address == QB[0] + 0xA8C
    assert bits(desc, "CNNx16_0_L0_LCTRL1", "xpch_max") == (16, 8)
    assert bits(desc, "CNNx16_0_L0_LCTRL1", "wptr_inc") == (7, 4)
    assert bits(desc, "CNNx16_0_L0_LCTRL1", "inpchexp") == (3, 0)


def test_stream_register_fields(desc):
    """Fact 44 [UG-CNN: Table 27-41, Table 27-42, Table 27-43]."""
    assert bits(desc, "CNNx16_0_S0_STRM0", "strm_isval") == (13, 0)
    assert bits(desc, "CNNx16_0_S0_STRM1", "strm_dsval2") == (27, 16)
    assert bits(desc, "CNNx16_0_S0_STRM1", "strm_dsval1") == (8, 4)
    assert bits(desc, "CNNx16_0_S0_STRM1", "strm_invol") == (3, 0)
    assert bits(desc, "CNNx16_0_S0_FBUF", "fbuf_max") == (16, 0)


def test_ifrm_at_0x990_and_mlat_at_0x1000_read_only(desc):
    """Fact 45 [UG-CNN: Table 27-18, Table 27-44, Table 27-40]."""
    assert reg(desc, "CNNx16_0_IFRM").address == QB[0] + 0x990
    assert bits(desc, "CNNx16_0_IFRM", "ifrm_reg") == (16, 0)
    m = reg(desc, "CNNx16_0_MLAT")
    assert m.address == QB[0] + 0x1000
    assert bits(desc, "CNNx16_0_MLAT", "mlatdat") == (31, 0)
    assert m.mask_of("ro") == 0xFFFF_FFFF


# ---------------------------------------------------------------------------------------------
# regions

def region(desc: Description, name: str):
    return next(r for r in desc.regions if r.name == name)


def test_mram_q0_block_0_valid_to_0x50182fff_end_0x50183fff(desc):
    """Fact 46 [UG-CNN: Table 27-5]."""
    r = region(desc, "mram_q0_p0")
    assert r.kind == "weights" and r.base == 0x5018_0000
    assert r.populated == ((0x5018_0000, 0x5018_3000),)
    assert r.end - 1 == 0x5018_3FFF


def test_mram_q3_block_15_starts_at_0x50dbc000(desc):
    """Fact 46 [UG-CNN: Table 27-8]."""
    r = region(desc, "mram_q3_p15")
    assert r.base == 0x50DB_C000
    assert r.populated[0][1] - 1 == 0x50DB_EFFF  # valid end
    assert r.end - 1 == 0x50DB_FFFF  # block end


def test_mram_word_mask_keeps_72_of_128_bits(desc):
    """Fact 47 [UG-CNN: CNNx16_n MRAM Details]: 768 x 72 bits = 6912 B in 12 KB of a 16 KB block."""
    r = region(desc, "mram_q1_p3")
    assert r.word_mask == (0xFF, 0xFFFF_FFFF, 0xFFFF_FFFF, 0x0)
    bits_per_16b = sum(bin(m).count("1") for m in r.word_mask)
    assert bits_per_16b == 72
    used = sum(e - s for s, e in r.populated)
    assert used == 12 * 1024 and r.size == 16 * 1024
    assert used // 16 * 72 // 8 == 6912


def test_tram_3072_x_16_bits_16_blocks_per_quadrant(desc):
    """Fact 48 [UG-CNN: CNNx16_n TRAM Details]: 6144 B per block, 16 x 16 KB = 256 KB per
    quadrant."""
    for q in range(4):
        blocks = [r for r in desc.regions if r.kind == "tram" and r.group == f"q{q}"]
        assert len(blocks) == 16
        assert sum(r.size for r in blocks) == 256 * 1024
        assert blocks[0].base == 0x5011_0000 + q * 0x40_0000
    r = region(desc, "tram_q0_p1")
    assert r.base == 0x5011_4000 and r.word_mask == (0xFFFF,)
    assert sum(e - s for s, e in r.populated) // 4 == 3072


def test_per_quadrant_memory_sizes(desc):
    """Fact 49 [UG-CNN: Memory Configuration]: 128 KB SRAM, 6912 B x 16 MRAM (110 kB), 512 B BRAM,
    6144 B x 16 TRAM (98 kB) per quadrant."""
    def stored(r):
        per_word = sum(bin(m).count("1") for m in r.word_mask) // 8
        return sum(e - s for s, e in r.populated) // (4 * len(r.word_mask)) * per_word
    for q in range(4):
        rs = [r for r in desc.regions if r.group == f"q{q}"]
        def by(k: str, rs: list = rs) -> int:
            return sum(stored(r) for r in rs if r.kind == k)
        assert by("ram") == 128 * 1024
        assert by("weights") == 16 * 6912 == 110_592
        assert by("bias") == 512
        assert by("tram") == 16 * 6144 == 98_304


def test_bram_at_0x50108000_512_bytes_one_per_word(desc):
    """BRAM 512 x 8-bit [UG-CNN: Memory Configuration]; address and layout [AI8X: Bias memory]
    (R7#4)."""
    for q in range(4):
        r = region(desc, f"bram_q{q}")
        assert r.kind == "bias" and r.base == 0x5010_8000 + q * 0x40_0000
        assert r.size == 0x8000 and r.populated == ((r.base, r.base + 0x800),)
        assert r.word_mask == (0xFF,)


def test_data_sram_4_groups_per_quadrant(desc):
    """Data SRAM 4 x 8192 x 32-bit per quadrant [UG-CNN: Memory Configuration],
    [AI8X: Data memory]."""
    assert region(desc, "sram_q0_g0").base == 0x5040_0000
    assert region(desc, "sram_q3_g3").base == 0x5101_8000
    assert region(desc, "sram_q2_g1").size == 0x8000


def test_register_windows_populated_vs_addressable(desc):
    """Quadrant window 0x8000 addressable, registers only where Table 27-18 puts them
    [UG-CNN: Table 27-18]; global window 0x1000 with 0x18 populated [UG-CNN: Table 27-9]."""
    r = region(desc, "cnn_q2_regs")
    assert r.kind == "registers" and r.base == QB[2] and r.size == 0x8000 and r.block == "q2"
    spans = [(s - r.base, e - r.base) for s, e in r.populated]
    assert (0x830 - 0x810) in [e - s for s, e in spans]
    assert sum(e - s for s, e in spans) == 574 * 4
    g = region(desc, "cnn_global")
    assert g.size == 0x1000 and g.populated == ((GLOBAL, GLOBAL + 0x18),)
    a = region(desc, "cnn_aod")
    assert a.populated == ((0x5000_1000, 0x5000_1004),) and a.block == "aod"


def test_emu_block_and_region_unchanged(desc):
    """Emulator-only state at 0xF000_0000 (docs/description-format.md)."""
    e = region(desc, "emu")
    assert e.kind == "pseudo" and e.base == 0xF000_0000 and e.block == "emu"
    names = [r.name for r in desc.registers if r.block == "emu"]
    assert names == ["EMU_STATE", "EMU_PC", "EMU_UNIT", "EMU_UNITS", "EMU_CYCLES_LO",
                     "EMU_CYCLES_HI", "EMU_THROTTLE_US", "EMU_END"]


# ---------------------------------------------------------------------------------------------
# through the device

def test_device_reset_values_read_back(dev):
    """CTRL 0x6 [UG-CNN: Table 27-19], SRAM 0xE [UG-CNN: Table 27-20], FIFO_CTRL 0x3
    [UG-CNN: Table 27-10], AOD 0x3 [UG-CNN: Table 27-16]."""
    assert rd32(dev, GLOBAL) == 0x3
    assert rd32(dev, GLOBAL + 4) == 0
    assert rd32(dev, 0x5000_1000) == 0x3
    for q in range(4):
        assert rd32(dev, QB[q]) == 0x6
        assert rd32(dev, QB[q] + 4) == 0xE
        assert rd32(dev, QB[q] + 8) == 0
        assert rd32(dev, QB[q] + 0xC) == 0
        assert rd32(dev, QB[q] + 0x64) == 0


def test_device_read_only_bits_ignore_writes(dev):
    """TEST status bits 14..28 (R7#19), FIFO_STAT [UG-CNN: Table 27-11], MLAT
    [UG-CNN: Table 27-40]."""
    # only the status bits: a write of the run/zeroize bits would start BIST/zeroization
    # and set them (tests/test_max78000_device_features.py)
    wr32(dev, QB[1] + 0xC, 0xFFFF_C000)
    assert rd32(dev, QB[1] + 0xC) == 0
    wr32(dev, GLOBAL + 4, 0xFFFF_FFFF)
    assert rd32(dev, GLOBAL + 4) == 0
    wr32(dev, QB[1] + 0x1000, 0xFFFF_FFFF)
    assert rd32(dev, QB[1] + 0x1000) == 0


def test_device_reserved_bits_read_zero(dev):
    """Reserved bits read 0: LCNT_MAX 31:5 [UG-CNN: Table 27-21], FIFO_CTRL 10 and 6:5
    [UG-CNN: Table 27-10], SRAM 31:23, 18:17, 14 [UG-CNN: Table 27-20], TPTR 31:27/15:11
    [UG-CNN: Table 27-36]."""
    wr32(dev, QB[0] + 8, 0xFFFF_FFFF)
    assert rd32(dev, QB[0] + 8) == 0x1F
    wr32(dev, GLOBAL, 0xFFFF_FFFF)
    assert rd32(dev, GLOBAL) == 0xFFFF_FB9F
    wr32(dev, QB[0] + 4, 0xFFFF_FFFF)
    assert rd32(dev, QB[0] + 4) == 0x0079_BFFF
    wr32(dev, QB[0] + 0x690, 0xFFFF_FFFF)
    assert rd32(dev, QB[0] + 0x690) == 0x07FF_07FF
    wr32(dev, QB[0] + 0x290, 0xFFFF_FFFF)
    assert rd32(dev, QB[0] + 0x290) == 0xF
    wr32(dev, 0x5000_1000, 0xFFFF_FFFF)
    assert rd32(dev, 0x5000_1000) == 0x000F_FF03


@pytest.mark.parametrize("addr", [
    0x5018_3000,  # MRAM block tail [UG-CNN: CNNx16_n MRAM Details]
    0x50DB_F000,  # MRAM q3 block 15 tail [UG-CNN: Table 27-8]
    0x5011_3000,  # TRAM block tail [UG-CNN: CNNx16_n TRAM Details]
    0x5010_0830,  # quadrant register hole after S7_STRM0
    0x5010_0A90,  # after L31_LCTRL1
    0x5010_1004,  # after MLAT
    0x5000_0018,  # global window after CNN_FIFO_WR3
    0x5000_1004,  # after CNN_AOD_CTRL
    0x5010_8800,  # BRAM past 512 entries
])
def test_device_unpopulated_gap_raises_bus_error(dev, addr):
    """Unpopulated parts of a window fault (docs/design-notes.md: never silent zeros; R7#5)."""
    with pytest.raises(BusError):
        dev.read(addr, 4)
    with pytest.raises(BusError):
        dev.write(addr, b"\0\0\0\0")


def test_device_unmapped_address_raises_bus_error(dev):
    with pytest.raises(BusError):
        dev.read(0x5015_0000, 4)  # between TRAM and MRAM windows (R§1.3 gaps)


def test_device_bram_keeps_bits_7_0_of_each_word(dev):
    """BRAM holds one byte per 32-bit word, bits 7:0 (R§1.3, [EXT] write_bias)."""
    base = 0x5010_8000
    dev.write(base, bytes([0x44, 0x33, 0x22, 0x11, 0xAA, 0xBB, 0xCC, 0xDD]))
    assert rd32(dev, base) == 0x44
    assert rd32(dev, base + 4) == 0xAA
    dev.write(base + 9, b"\x55")  # a byte in the upper lanes is dropped
    assert rd32(dev, base + 8) == 0
    dev.write(base + 0x7FC, b"\x80")
    assert dev.read(base + 0x7FC, 4) == b"\x80\0\0\0"


def test_device_tram_and_mram_word_masks(dev):
    """TRAM 16 bits per word [UG-CNN: CNNx16_n TRAM Details]; MRAM 72 of 128 bits
    [UG-CNN: CNNx16_n MRAM Details]."""
    wr32(dev, 0x5011_0000, 0xFFFF_FFFF)
    assert rd32(dev, 0x5011_0000) == 0xFFFF
    dev.write(0x5018_0000, b"\xFF" * 16)
    assert dev.read(0x5018_0000, 16) == b"\xFF" + b"\0" * 3 + b"\xFF" * 8 + b"\0" * 4


def test_device_data_sram_keeps_full_words(dev):
    wr32(dev, 0x5040_0000, 0xDEAD_BEEF)
    assert rd32(dev, 0x5040_0000) == 0xDEAD_BEEF
