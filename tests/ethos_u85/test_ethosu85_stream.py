"""The Ethos-U85 command-stream codec (devices/ethos_u85/stream.py) against the TRM's encoding
(C§1, C§9, C§10; "[U85-TRM: ...]" cites the TRM)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelstub.devices.ethos_u85 import stream as cs
from accelstub.devices.ethos_u85.stream import OPCODES, UNKNOWN, decode, disassemble, encode


def words_of(text: str) -> list[int]:
    return [int(w, 16) for w in text.split()]


# ---------------------------------------------------------------------------------------------
# the opcode table

def test_opcode_counts():
    """63 cmd0 (11 OPs + 52 SETs, [U85-TRM: Table 3-94]) + 48 cmd1 (47 SETs + NPU_OP_BRANCH,
    [U85-TRM: Table 3-159])."""
    cmd0 = [s for s in OPCODES.values() if s.kind == "cmd0"]
    cmd1 = [s for s in OPCODES.values() if s.kind == "cmd1"]
    assert len(cmd0) == 63 and len(cmd1) == 48 and len(OPCODES) == 111
    assert len([s for s in cmd0 if s.is_operation]) == 11
    assert [s.name for s in cmd1 if s.is_operation] == ["NPU_OP_BRANCH"]
    # numbering rule: cmd0 OPs have bit 8 clear, SETs set; cmd1 the reverse [U85-TRM: §3.5.5]
    for s in OPCODES.values():
        want = s.is_operation if s.kind == "cmd1" else not s.is_operation
        assert bool(s.opcode & 0x100) == want
    assert len({s.key for s in OPCODES.values()}) == 111


@pytest.mark.parametrize("name,key", [
    # [U85-TRM: §3.10.1, §3.10.3, §3.10.5]
    ("NPU_OP_STOP", 0x0000), ("NPU_OP_DEPTHWISE", 3), ("NPU_OP_DMA_WAIT", 17),
    ("NPU_SET_IFM_PAD_TOP", 256), ("NPU_SET_IFM_PAD_BOTTOM", 259),  # [U85-TRM: §3.10.37, §3.10.34]
    ("NPU_SET_IFM_REGION", 271), ("NPU_SET_OFM_REGION", 287), ("NPU_SET_IFM2_REGION", 399),
    ("NPU_SET_WEIGHT_REGION", 296),  # [U85-TRM: §3.10.39, §3.10.54, §3.10.27, §3.10.64]
    ("NPU_SET_ACC_FORMAT", 292), ("NPU_SET_ACTIVATION", 293),  # [U85-TRM: §3.10.13, §3.10.14]
    # [U85-TRM: §3.10.16, §3.10.15]
    ("NPU_SET_ACTIVATION_MIN", 294), ("NPU_SET_ACTIVATION_MAX", 295),
    # [U85-TRM: §3.10.44, §3.10.59]
    ("NPU_SET_KERNEL_STRIDE", 290), ("NPU_SET_RESIZE_X_SCALE_N_M1", 298),
    # [U85-TRM: §3.10.58, §3.10.60]
    ("NPU_SET_RESIZE_X_OFFSET", 300), ("NPU_SET_RESIZE_Y_OFFSET", 301),
    ("NPU_SET_IFM_BASE0", 0x4000), ("NPU_SET_IFM_STRIDE_C", 0x4006),  # [U85-TRM: §3.11.1]
    # [U85-TRM: §3.11.17, §3.11.34]
    ("NPU_SET_IFM2_SCALE", 0x4026), ("NPU_SET_OFM_STRIDE_C", 0x4016),
    # [U85-TRM: §3.11.13, §3.11.1]
    ("NPU_SET_IFM2_BASE0", 0x4080), ("NPU_SET_RESIZE_X_STEP", 0x4096),
    ("NPU_SET_RESIZE_Y_STEP", 0x4097), ("NPU_OP_BRANCH", 0x4100),  # [U85-TRM: §3.11.1]
])
def test_opcode_numbers(name, key):
    """Facts 4-9, 12, 15-17 of C§9 (opcode digits readable in the seed)."""
    assert OPCODES[name].key == key


def _bits(name: str, field: str) -> tuple[int, int]:
    (fs,) = [f for f in OPCODES[name].fields if f.name == field]
    (lsb, w, _), = fs.parts
    return lsb + w - 1, lsb


@pytest.mark.parametrize("name,field,msb,lsb", [
    ("NPU_OP_ELEMENTWISE", "elementwise_mode", 21, 16),  # [U85-TRM: Table 3-99]
    ("NPU_OP_DMA_WAIT", "k", 17, 16),  # [U85-TRM: Table 3-98]
    ("NPU_SET_ACC_FORMAT", "acc_format", 17, 16), ("NPU_SET_ACC_FORMAT", "acc_input", 21, 20),
    ("NPU_SET_ACC_FORMAT", "acc_output", 22, 22),
    ("NPU_SET_ACC_FORMAT", "microblock", 26, 24),  # [U85-TRM: Table 3-107]
    ("NPU_SET_ACTIVATION", "activation_function", 20, 16), ("NPU_SET_ACTIVATION", "table", 23, 21),
    ("NPU_SET_ACTIVATION", "activation_clip_range", 28, 28),  # [U85-TRM: Table 3-108]
    ("NPU_SET_KERNEL_STRIDE", "stride_x_lsb", 16, 16),
    ("NPU_SET_KERNEL_STRIDE", "stride_y_lsb", 17, 17),
    ("NPU_SET_KERNEL_STRIDE", "weight_order", 18, 18),
    ("NPU_SET_KERNEL_STRIDE", "dilation_x", 19, 19),
    ("NPU_SET_KERNEL_STRIDE", "dilation_y", 20, 20),
    ("NPU_SET_KERNEL_STRIDE", "decomposition", 21, 21),
    ("NPU_SET_KERNEL_STRIDE", "stride_x_msb", 22, 22),
    ("NPU_SET_KERNEL_STRIDE", "stride_y_msb", 25, 25),  # [U85-TRM: Table 3-138]
    ("NPU_SET_IFM_PAD_TOP", "pad", 22, 16),
    ("NPU_SET_IFM_PAD_BOTTOM", "pad", 23, 16),  # [U85-TRM: Table 3-131, Table 3-128]
    ("NPU_SET_IFM_PAD_LEFT", "pad", 22, 16),
    ("NPU_SET_IFM_PAD_RIGHT", "pad", 23, 16),  # [U85-TRM: Table 3-129, Table 3-130]
    ("NPU_SET_IFM_REGION", "region", 18, 16),
    ("NPU_SET_WEIGHT_REGION", "region", 18, 16),  # [U85-TRM: Table 3-133, Table 3-158]
    ("NPU_SET_IFM_PRECISION", "activation_precision", 19, 18),  # [U85-TRM: Table 3-132]
    ("NPU_SET_IFM2_PRECISION", "activation_precision", 19, 18),  # [U85-TRM: Table 3-120]
    ("NPU_SET_OFM_PRECISION", "activation_precision", 18, 17),  # [U85-TRM: Table 3-147]
    ("NPU_SET_OFM_PRECISION", "scale_mode", 24, 24),
    ("NPU_SET_OFM_PRECISION", "activation_reverse", 26, 25),
    ("NPU_SET_OFM_PRECISION", "activation_transpose", 29, 27),
    ("NPU_SET_OFM_PRECISION", "activation_storage", 31, 30),  # [U85-TRM: Table 3-147]
    ("NPU_SET_RESIZE_X_SCALE_N_M1", "resize_x_scale_n_m1", 26, 16),  # [U85-TRM: Table 3-153]
    ("NPU_SET_RESIZE_X_OFFSET", "resize_x_offset", 27, 16),  # [U85-TRM: Table 3-152]
    ("NPU_SET_OFM_BLK_DEPTH_M1", "depth_m1", 25, 16),
    ("NPU_SET_OFM_BLK_HEIGHT_M1", "height_m1", 22, 16),
    # [U85-TRM: §3.10.46, Table 3-141, Table 3-142]
    ("NPU_SET_OFM_BLK_WIDTH_M1", "width_m1", 22, 16),
    ("NPU_SET_OFM_SCALE", "shift", 21, 16), ("NPU_SET_OFM_SCALE", "dbl_rnd", 26, 22),
    ("NPU_SET_OFM_SCALE", "round_mode", 31, 29),
    ("NPU_SET_OFM_SCALE", "scale", 62, 32),  # [U85-TRM: Table 3-191]
    ("NPU_SET_IFM_SCALE", "round_mode", 29, 29),
    ("NPU_SET_IFM2_SCALE", "round_mode", 29, 29),  # [U85-TRM: Table 3-183, Table 3-175]
    ("NPU_SET_RESIZE_X_STEP", "one_step_int", 19, 16),
    ("NPU_SET_RESIZE_X_STEP", "blk_step_int", 30, 20),
    ("NPU_SET_RESIZE_X_STEP", "one_step_mod", 42, 32),
    ("NPU_SET_RESIZE_X_STEP", "blk_step_mod", 58, 48),  # [U85-TRM: Table 3-196]
    ("NPU_OP_BRANCH", "branch_cond", 16, 16),
    ("NPU_OP_BRANCH", "branch_target", 63, 32),  # [U85-TRM: Table 3-160]
    ("NPU_SET_SCALE_LENGTH", "length", 51, 32),
    ("NPU_SET_WEIGHT_LENGTH", "length", 63, 32),  # [U85-TRM: §3.11.41, Table 3-207]
    ("NPU_SET_DMA0_IDX_MAX", "idx_max", 62, 32),
    ("NPU_SET_OP_SCALAR", "scalar", 63, 32),  # [U85-TRM: §3.11.7, Table 3-195]
    ("NPU_SET_DMA0_SRC_REGION", "region_mode", 24, 24),
    ("NPU_SET_DMA0_SRC_REGION", "stride_mode", 26, 25),
    ("NPU_SET_DMA0_SRC_REGION", "idx_mode", 27, 27),  # [U85-TRM: Table 3-116]
    ("NPU_SET_WEIGHT_FORMAT", "weight_format", 16, 16),
    ("NPU_SET_WEIGHT_FORMAT", "weight_sparsity", 20, 20),  # [U85-TRM: Table 3-157]
])
def test_field_positions(name, field, msb, lsb):
    """Facts 5-22 of C§9."""
    assert _bits(name, field) == (msb, lsb)


def _enum(name: str, field: str) -> dict[int, str]:
    (fs,) = [f for f in OPCODES[name].fields if f.name == field]
    return fs.enum


def test_enumerations():
    """Fact 20
    [U85-TRM: Table 3-100, Table 3-104, Table 3-105, Table 3-108, Table 3-191, Table 3-117,
    Table 3-107] and facts 11, 21, 22."""
    ew = _enum("NPU_OP_ELEMENTWISE", "elementwise_mode")
    assert (ew[33], ew[36], ew[42], ew[16], ew[11], ew[1]) == \
        ("and", "not", "and_not", "cmp_eq", "div", "add")
    pool = _enum("NPU_OP_POOL", "pooling_mode")
    assert (pool[3], pool[4], pool[7]) == ("sum", "none", "argmax_y")
    rs = _enum("NPU_OP_RESIZE", "resize_mode")
    assert (rs[1], rs[2]) == ("replicate", "nearest")
    act = _enum("NPU_SET_ACTIVATION", "activation_function")
    assert (act[10], act[11], act[7]) == ("lut_tanh", "lut_sigmoid", "lut_s8_s32")
    rnd = _enum("NPU_SET_OFM_SCALE", "round_mode")
    assert (rnd[3], rnd[5]) == ("symmetric", "truncate_to_lower")
    assert _enum("NPU_SET_IFM_BROADCAST", "broadcast_mode")[8] == "scalar"
    mb = _enum("NPU_SET_ACC_FORMAT", "microblock")
    assert (mb[4], mb[5]) == ("u2x4", "u4x4") and 6 not in mb  # 6 reserved (G-E4)
    tr = _enum("NPU_SET_OFM_PRECISION", "activation_transpose")
    assert (tr[6], tr[7]) == ("CHW", "CWH") and 4 not in tr and 5 not in tr
    st_ = _enum("NPU_SET_OFM_PRECISION", "activation_storage")
    assert (st_[2], st_[3]) == ("chained", "none")
    assert _enum("NPU_SET_DMA0_SRC_REGION", "stride_mode")[2] == "d3"
    assert _enum("NPU_SET_DMA0_DST_REGION", "region_mode")[1] == "internal"
    assert _enum("NPU_SET_WEIGHT_FORMAT", "weight_format")[1] == "fwd"
    assert _enum("NPU_SET_WEIGHT_FORMAT", "weight_sparsity")[1] == "sparse_2_4"


# ---------------------------------------------------------------------------------------------
# round trip of every opcode with hypothesis-chosen field values

def _field_strategy(fs: cs.FieldSpec):
    if fs.enum is not None:
        return st.sampled_from(sorted(fs.enum))
    lo, hi = fs.value_range()
    return st.integers(lo, hi)


@pytest.mark.parametrize("name", sorted(OPCODES))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_opcode_round_trips(name, data):
    sp = OPCODES[name]
    values = {fs.name: data.draw(_field_strategy(fs), label=fs.name) for fs in sp.fields}
    words = encode(name, **values)
    assert len(words) == sp.length and all(0 <= w < 1 << 32 for w in words)
    assert words[0] & 0xFFFF == sp.key  # header: control and opcode, bits [13:10] zero
    (c,) = decode(words)
    assert (c.name, c.kind, c.opcode, c.length, c.offset) == \
        (name, sp.kind, sp.opcode, sp.length, 0)
    assert c.param == words[0] >> 16
    assert c.data == (words[1] if sp.length == 2 else None)
    assert c.reserved_bits == 0 and c.error == ""
    expect = {k: (v & 0xFFFF if fs.kind == "x" else v)
              for fs in sp.fields for k, v in [(fs.name, values[fs.name])]}
    assert c.fields == expect
    assert encode(c) == words
    # enumerators by name give the same words
    named = {fs.name: fs.enum[values[fs.name]] for fs in sp.fields if fs.enum is not None}
    assert encode(name, **{**values, **named}) == words


def test_encode_examples_and_errors():
    assert encode("NPU_OP_ELEMENTWISE", elementwise_mode="add") == [0x00010006]  # fact 3
    assert encode("NPU_OP_STOP", mask=0xFFFF) == [0xFFFF0000]
    assert encode("NPU_SET_OFM_ZERO_POINT", zero_point=-3) == [0xFFFD0118]
    assert encode("NPU_SET_DMA0_SRC_STRIDE0", addr=-16) == [0x00FF4033, 0xFFFFFFF0]
    assert encode("NPU_SET_IFM_BASE0", addr=0xAB_1234_5678) == [0x00AB4000, 0x12345678]
    assert encode("NPU_SET_RESIZE_X", one_step_int=1) == \
        encode("NPU_SET_RESIZE_X_STEP", one_step_int=1)
    assert encode("NPU_OP_DEPTHWISE") == [0x00000003]
    with pytest.raises(ValueError):
        encode("NPU_SET_IFM_PAD_TOP", pad=128)  # 7-bit field [U85-TRM: Table 3-131]
    with pytest.raises(ValueError):
        encode("NPU_SET_IFM_REGION", regin=1)
    with pytest.raises(ValueError):
        encode("NPU_OP_POOL", pooling_mode="maximum")
    with pytest.raises(ValueError):
        encode("NPU_OP_NOTHING")


def test_signed_and_address_fields_decode():
    """Fact 18: 40-bit addresses, DMA strides signed [U85-TRM: Table 3-169]; resize offsets signed
    12-bit [U85-TRM: Table 3-152]; OP_SCALAR signed 32-bit [U85-TRM: Table 3-195]."""
    (c,) = decode([0x00FF4033, 0xFFFFFFF0])
    assert c.name == "NPU_SET_DMA0_SRC_STRIDE0" and c.fields == {"addr": -16}
    (c,) = decode([0x00AB4010, 0x00000020])
    assert c.fields == {"addr": 0xAB_0000_0020}
    (c,) = decode([0x0800012C])
    assert c.name == "NPU_SET_RESIZE_X_OFFSET" and c.fields == {"resize_x_offset": -2048}
    (c,) = decode([0x00004027, 0x80000000])
    assert c.fields == {"scalar": -(1 << 31)}


# ---------------------------------------------------------------------------------------------
# the worked examples of C§10

EX_10_1 = [  # elementwise ADD, int8, OFM 1x2x4 (C§10.1)
    (0x0000, "00010105", "NPU_SET_IFM_PRECISION", dict(activation_type=1, activation_precision=0,
                                                       activation_format=0, activation_storage=0)),
    (0x0004, "00030109", "NPU_SET_IFM_ZERO_POINT", dict(zero_point=3)),
    (0x0008, "0001010f", "NPU_SET_IFM_REGION", dict(region=1)),
    (0x000c, "00004000 00000000", "NPU_SET_IFM_BASE0", dict(addr=0)),
    (0x0014, "0001010a", "NPU_SET_IFM_WIDTH0_M1", dict(width_m1=1)),
    (0x0018, "0000010b", "NPU_SET_IFM_HEIGHT0_M1", dict(height_m1=0)),
    (0x001c, "0000010c", "NPU_SET_IFM_HEIGHT1_M1", dict(height_m1=0)),
    (0x0020, "00004004 00000004", "NPU_SET_IFM_STRIDE_X", dict(addr=4)),
    (0x0028, "00004005 00000008", "NPU_SET_IFM_STRIDE_Y", dict(addr=8)),
    (0x0030, "00004006 00000001", "NPU_SET_IFM_STRIDE_C", dict(addr=1)),
    (0x0038, "00000108", "NPU_SET_IFM_BROADCAST", dict(broadcast_mode=0)),
    (0x003c, "00000107", "NPU_SET_IFM_UPSCALE", dict(mode=0)),
    (0x0040, "20014025 00000003", "NPU_SET_IFM_SCALE", dict(shift=1, dbl_rnd=0, round_mode=1,
                                                            scale=3)),
    (0x0048, "00010185", "NPU_SET_IFM2_PRECISION", dict(activation_type=1, activation_precision=0,
                                                        activation_format=0, activation_storage=0)),
    (0x004c, "fffe0189", "NPU_SET_IFM2_ZERO_POINT", dict(zero_point=0xFFFE)),
    (0x0050, "0001018f", "NPU_SET_IFM2_REGION", dict(region=1)),
    (0x0054, "00004080 00000010", "NPU_SET_IFM2_BASE0", dict(addr=0x10)),
    (0x005c, "0001018a", "NPU_SET_IFM2_WIDTH0_M1", dict(width_m1=1)),
    (0x0060, "0000018b", "NPU_SET_IFM2_HEIGHT0_M1", dict(height_m1=0)),
    (0x0064, "0000018c", "NPU_SET_IFM2_HEIGHT1_M1", dict(height_m1=0)),
    (0x0068, "00004084 00000004", "NPU_SET_IFM2_STRIDE_X", dict(addr=4)),
    (0x0070, "00004085 00000008", "NPU_SET_IFM2_STRIDE_Y", dict(addr=8)),
    (0x0078, "00004086 00000001", "NPU_SET_IFM2_STRIDE_C", dict(addr=1)),
    (0x0080, "00000180", "NPU_SET_IFM2_BROADCAST", dict(broadcast_mode=0)),
    (0x0084, "20004026 00000001", "NPU_SET_IFM2_SCALE", dict(shift=0, dbl_rnd=0, round_mode=1,
                                                             scale=1)),
    (0x008c, "01010114", "NPU_SET_OFM_PRECISION", dict(activation_type=1, activation_precision=0,
                                                       activation_format=0, scale_mode=1,
                                                       activation_reverse=0, activation_transpose=0,
                                                       activation_storage=0)),
    (0x0090, "00050118", "NPU_SET_OFM_ZERO_POINT", dict(zero_point=5)),
    (0x0094, "0001011f", "NPU_SET_OFM_REGION", dict(region=1)),
    (0x0098, "00004010 00000020", "NPU_SET_OFM_BASE0", dict(addr=0x20)),
    (0x00a0, "00000112", "NPU_SET_OFM_HEIGHT_M1", dict(height_m1=0)),
    (0x00a4, "00010111", "NPU_SET_OFM_WIDTH_M1", dict(width_m1=1)),
    (0x00a8, "00030113", "NPU_SET_OFM_DEPTH_M1", dict(depth_m1=3)),
    (0x00ac, "0001011a", "NPU_SET_OFM_WIDTH0_M1", dict(width_m1=1)),
    (0x00b0, "0000011b", "NPU_SET_OFM_HEIGHT0_M1", dict(height_m1=0)),
    (0x00b4, "0000011c", "NPU_SET_OFM_HEIGHT1_M1", dict(height_m1=0)),
    (0x00b8, "00004014 00000004", "NPU_SET_OFM_STRIDE_X", dict(addr=4)),
    (0x00c0, "00004015 00000008", "NPU_SET_OFM_STRIDE_Y", dict(addr=8)),
    (0x00c8, "00004016 00000001", "NPU_SET_OFM_STRIDE_C", dict(addr=1)),
    (0x00d0, "00000116", "NPU_SET_OFM_BLK_HEIGHT_M1", dict(height_m1=0)),
    (0x00d4, "00010115", "NPU_SET_OFM_BLK_WIDTH_M1", dict(width_m1=1)),
    (0x00d8, "00030117", "NPU_SET_OFM_BLK_DEPTH_M1", dict(depth_m1=3)),
    (0x00dc, "00024024 00000005", "NPU_SET_OFM_SCALE", dict(shift=2, dbl_rnd=0, round_mode=0,
                                                            scale=5)),
    (0x00e4, "00000125", "NPU_SET_ACTIVATION", dict(activation_function=0, table=0,
                                                    activation_clip_range=0)),
    (0x00e8, "ff800126", "NPU_SET_ACTIVATION_MIN", dict(clip_boundary=0xFF80)),
    (0x00ec, "007f0127", "NPU_SET_ACTIVATION_MAX", dict(clip_boundary=127)),
    (0x00f0, "03000124", "NPU_SET_ACC_FORMAT", dict(acc_format=0, acc_input=0, acc_output=0,
                                                    microblock=3)),
    (0x00f4, "00010006", "NPU_OP_ELEMENTWISE", dict(elementwise_mode=1)),
    (0x00f8, "ffff0000", "NPU_OP_STOP", dict(mask=0xFFFF)),
]

EX_10_2 = [  # 1x1 CONV, int8 (C§10.2): (offset, words, name, fields)
    (0x0000, "00010105", "NPU_SET_IFM_PRECISION", dict(activation_type=1, activation_precision=0,
                                                       activation_format=0, activation_storage=0)),
    (0x0004, "00020109", "NPU_SET_IFM_ZERO_POINT", dict(zero_point=2)),
    (0x0008, "0001010f", "NPU_SET_IFM_REGION", dict(region=1)),
    (0x000c, "00004000 00000000", "NPU_SET_IFM_BASE0", dict(addr=0)),
    (0x0014, "0001010a", "NPU_SET_IFM_WIDTH0_M1", dict(width_m1=1)),
    (0x0018, "0000010b", "NPU_SET_IFM_HEIGHT0_M1", dict(height_m1=0)),
    (0x001c, "0000010c", "NPU_SET_IFM_HEIGHT1_M1", dict(height_m1=0)),
    (0x0020, "00004004 00000002", "NPU_SET_IFM_STRIDE_X", dict(addr=2)),
    (0x0028, "00004005 00000004", "NPU_SET_IFM_STRIDE_Y", dict(addr=4)),
    (0x0030, "00004006 00000001", "NPU_SET_IFM_STRIDE_C", dict(addr=1)),
    (0x0038, "00010104", "NPU_SET_IFM_DEPTH_M1", dict(depth_m1=1)),
    (0x003c, "00000107", "NPU_SET_IFM_UPSCALE", dict(mode=0)),
    (0x0040, "00000100", "NPU_SET_IFM_PAD_TOP", dict(pad=0)),
    (0x0044, "00000101", "NPU_SET_IFM_PAD_LEFT", dict(pad=0)),
    (0x0048, "00000103", "NPU_SET_IFM_PAD_BOTTOM", dict(pad=0)),
    (0x004c, "00000102", "NPU_SET_IFM_PAD_RIGHT", dict(pad=0)),
    (0x0050, "00010114", "NPU_SET_OFM_PRECISION", dict(activation_type=1, activation_precision=0,
                                                       activation_format=0, scale_mode=0,
                                                       activation_reverse=0, activation_transpose=0,
                                                       activation_storage=0)),
    (0x0054, "fffd0118", "NPU_SET_OFM_ZERO_POINT", dict(zero_point=0xFFFD)),
    (0x0058, "0001011f", "NPU_SET_OFM_REGION", dict(region=1)),
    (0x005c, "00004010 00000020", "NPU_SET_OFM_BASE0", dict(addr=0x20)),
    (0x0064, "00000112", "NPU_SET_OFM_HEIGHT_M1", dict(height_m1=0)),
    (0x0068, "00010111", "NPU_SET_OFM_WIDTH_M1", dict(width_m1=1)),
    (0x006c, "00010113", "NPU_SET_OFM_DEPTH_M1", dict(depth_m1=1)),
    (0x0070, "0001011a", "NPU_SET_OFM_WIDTH0_M1", dict(width_m1=1)),
    (0x0074, "0000011b", "NPU_SET_OFM_HEIGHT0_M1", dict(height_m1=0)),
    (0x0078, "0000011c", "NPU_SET_OFM_HEIGHT1_M1", dict(height_m1=0)),
    (0x007c, "00004014 00000002", "NPU_SET_OFM_STRIDE_X", dict(addr=2)),
    (0x0084, "00004015 00000004", "NPU_SET_OFM_STRIDE_Y", dict(addr=4)),
    (0x008c, "00004016 00000001", "NPU_SET_OFM_STRIDE_C", dict(addr=1)),
    (0x0094, "00000116", "NPU_SET_OFM_BLK_HEIGHT_M1", dict(height_m1=0)),
    (0x0098, "00010115", "NPU_SET_OFM_BLK_WIDTH_M1", dict(width_m1=1)),
    (0x009c, "00070117", "NPU_SET_OFM_BLK_DEPTH_M1", dict(depth_m1=7)),
    (0x00a0, "00000121", "NPU_SET_KERNEL_HEIGHT_M1", dict(height_m1=0)),
    (0x00a4, "00000120", "NPU_SET_KERNEL_WIDTH_M1", dict(width_m1=0)),
    (0x00a8, "00000122", "NPU_SET_KERNEL_STRIDE", dict(stride_x_lsb=0, stride_y_lsb=0,
                                                       weight_order=0, dilation_x=0, dilation_y=0,
                                                       decomposition=0, stride_x_msb=0,
                                                       stride_y_msb=0)),
    (0x00ac, "0000012e", "NPU_SET_WEIGHT_FORMAT", dict(weight_format=0, weight_sparsity=0)),
    (0x00b0, "00020128", "NPU_SET_WEIGHT_REGION", dict(region=2)),
    (0x00b4, "00004020 00000000", "NPU_SET_WEIGHT_BASE", dict(addr=0)),
    (0x00bc, "00004021 00000020", "NPU_SET_WEIGHT_LENGTH", dict(length=32)),
    (0x00c4, "00020129", "NPU_SET_SCALE_REGION", dict(region=2)),
    (0x00c8, "00004022 00000100", "NPU_SET_SCALE_BASE", dict(addr=0x100)),
    (0x00d0, "00004023 000000a0", "NPU_SET_SCALE_LENGTH", dict(length=160)),
    (0x00d8, "00004024 00000000", "NPU_SET_OFM_SCALE", dict(shift=0, dbl_rnd=0, round_mode=0,
                                                            scale=0)),
    (0x00e0, "00000125", "NPU_SET_ACTIVATION", dict(activation_function=0, table=0,
                                                    activation_clip_range=0)),
    (0x00e4, "ff800126", "NPU_SET_ACTIVATION_MIN", dict(clip_boundary=0xFF80)),
    (0x00e8, "007f0127", "NPU_SET_ACTIVATION_MAX", dict(clip_boundary=0x7F)),
    (0x00ec, "02000124", "NPU_SET_ACC_FORMAT", dict(acc_format=0, acc_input=0, acc_output=0,
                                                    microblock=2)),
    (0x00f0, "00000002", "NPU_OP_CONV", dict(weights_ifm2=0)),
    (0x00f4, "ffff0000", "NPU_OP_STOP", dict(mask=0xFFFF)),
]


@pytest.mark.parametrize("example,length", [(EX_10_1, 0xFC), (EX_10_2, 0xF8)], ids=["10.1", "10.2"])
def test_worked_example_streams_decode(example, length):
    """Fact 56: every row of the section-10 command tables is a disassembler check; fact 57: the
    10.1 stream is 252 bytes (QSIZE = 0xFC)."""
    words = [w for _, text, _, _ in example for w in words_of(text)]
    assert 4 * len(words) == length
    cmds = decode(words)
    assert len(cmds) == len(example)
    for c, (offset, text, name, fields) in zip(cmds, example):
        assert (c.offset, c.name, c.fields, list(c.words)) == (offset, name, fields, words_of(text))
        assert c.reserved_bits == 0
        assert encode(name, **fields) == words_of(text)
    # bytes and numpy inputs give the same result
    raw = np.array(words, dtype="<u4").tobytes()
    assert decode(raw) == cmds and decode(np.array(words, dtype=np.uint32)) == cmds
    assert decode(np.frombuffer(raw, dtype=np.uint8)) == cmds
    assert cmds[-1].next_offset == length


def test_decode_from_an_offset_and_count():
    words = [w for _, text, _, _ in EX_10_1 for w in words_of(text)]
    c = decode(words, offset=0x00dc, count=2)
    assert [(x.offset, x.name) for x in c] == \
        [(0xdc, "NPU_SET_OFM_SCALE"), (0xe4, "NPU_SET_ACTIVATION")]
    assert decode(words, offset=0xFC) == []
    with pytest.raises(ValueError):
        decode(words, offset=2)


def test_fact_56_examples_as_text():
    """`20014025 00000003` -> NPU_SET_IFM_SCALE shift=1 dbl_rnd=0 round_mode=natural scale=3;
    `01010114` -> OFM_PRECISION signed b8 nhwc scale_mode=global; `ffff0000` -> STOP 0xffff."""
    a, b, c = decode(words_of("20014025 00000003 01010114 ffff0000"))
    assert str(a) == "NPU_SET_IFM_SCALE shift=1 dbl_rnd=0 round_mode=natural scale=3"
    assert str(b) == ("NPU_SET_OFM_PRECISION activation_type=signed activation_precision=b8 "
                      "activation_format=nhwc scale_mode=global activation_reverse=none "
                      "activation_transpose=HWC activation_storage=tile2x2")
    assert str(c) == "NPU_OP_STOP mask=0xffff"


# ---------------------------------------------------------------------------------------------
# unknown and reserved encodings never raise

@pytest.mark.parametrize("word,why", [
    (0x0000C123, "reserved control 11"), (0x00008000, "reserved control 10"),
    (0x00000400, "reserved bits [13:10]"), (0x00000004, "reserved cmd0 opcode 4"),
    (0x0000010D, "reserved cmd0 opcode 269"),  # U55 IFM_IB_END does not exist on U85
])
def test_unknown_cmd0_words(word, why):
    (c,) = decode([word])
    assert c.name == UNKNOWN and c.words == (word,) and c.length == 1 and why in c.error
    assert encode(c) == [word]


def test_unknown_cmd1_keeps_its_data_word_and_truncated_cmd1():
    c1, c2 = decode([0x00004007, 0x12345678, 0x00004000])
    assert (c1.name, c1.kind, c1.words, c1.data) == \
        (UNKNOWN, "cmd1", (0x4007, 0x12345678), 0x12345678)
    assert (c2.name, c2.length) == (UNKNOWN, 1) and "data word" in c2.error


def test_reserved_payload_bits_are_reported_and_kept():
    (c,) = decode([0x80010006])  # ELEMENTWISE add with reserved bit 31 set
    assert c.name == "NPU_OP_ELEMENTWISE" and c.fields == {"elementwise_mode": 1}
    assert c.reserved_bits == 0x8000_0000 and "reserved=0x80000000" in c.field_text()
    assert encode(c) == [0x80010006]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 0xFFFF_FFFF), max_size=40))
def test_random_words_never_raise_and_reencode_exactly(words):
    cmds = decode(words)
    assert sum(c.length for c in cmds) == len(words)
    out = [w for c in cmds for w in encode(c)]
    assert out == words
    disassemble(words)  # never raises either


def test_trailing_partial_word_is_ignored():
    assert [c.name for c in decode(b"\x00\x00\xff\xff\x01")] == ["NPU_OP_STOP"]


# ---------------------------------------------------------------------------------------------
# disassembly listing

LISTING = """\
0x0000: 00010105           NPU_SET_IFM_PRECISION       activation_type=signed activation_precision=b8 activation_format=nhwc activation_storage=tile2x2
0x0004: fffe0189           NPU_SET_IFM2_ZERO_POINT     zero_point=-2
0x0008: 00004010 00000020  NPU_SET_OFM_BASE0           addr=0x20
0x0010: 00024024 00000005  NPU_SET_OFM_SCALE           shift=2 dbl_rnd=0 round_mode=double_symmetric scale=5
0x0018: 00000122           NPU_SET_KERNEL_STRIDE       stride_x_lsb=0 stride_y_lsb=0 weight_order=depth_first dilation_x=none dilation_y=none decomposition=d8x8 stride_x_msb=0 stride_y_msb=0
0x001c: 00010006           NPU_OP_ELEMENTWISE          elementwise_mode=add
0x0020: 00014100 00000028  NPU_OP_BRANCH               branch_cond=rf_true branch_target=0x28
0x0028: 0000c123           UNKNOWN                     raw=0x0000c123 (reserved control 11 [U85-TRM: §3.5.3])
0x002c: ffff0000           NPU_OP_STOP                 mask=0xffff
"""  # noqa: E501 (the listing's lines are as long as the disassembler writes them)


def test_disassembly_matches_hand_written_listing():
    words = words_of("00010105 fffe0189 00004010 00000020 00024024 00000005 00000122 00010006 "
                     "00014100 00000028 0000c123 ffff0000")
    assert disassemble(words) == LISTING
    with_base = disassemble(words, base=0x1000_0000).splitlines()
    assert with_base[1] == "0x10000004 " + LISTING.splitlines()[1]
    assert disassemble([]) == ""


def test_tensor_memo_names_every_command_the_tensor_description_reads():
    """ops.tensor is memoised on the commands listed in operands._TENSOR_CMDS: a description
    that read a command outside that list would be served stale when only that command
    changed."""
    from accelstub.devices.ethos_u85 import operands, ops

    class Recording(ops.SetState):
        def get(self, name, fld, default=None):
            self.read.add(self._key(name))
            return super().get(name, fld, default)

    for which in ("IFM", "IFM2", "OFM"):
        names = [n for n in cs.OPCODES if n.startswith(f"NPU_SET_{which}_")]
        for storage in range(4):
            for fmt in (0, 1):
                cmds = cs.decode(cs.to_bytes(cs.encode_stream(
                    [n for n in names if not n.endswith("_PRECISION")]
                    + [(f"NPU_SET_{which}_PRECISION",
                        dict(activation_storage=storage, activation_format=fmt))])))
                s = Recording()
                s.read = set()
                for c in cmds:
                    s.set(c)
                operands._tensor(s, which)
                assert s.read and s.read <= set(operands._TENSOR_CMDS[which]), \
                    (which, storage, fmt, s.read - set(operands._TENSOR_CMDS[which]))


def test_output_config_memo_names_every_command_it_reads():
    """ops.out_config is memoised on output._OUT_CMDS (as ops.tensor on _TENSOR_CMDS): every
    command the decode reads, over the activation functions, clip ranges, precisions and
    accumulator formats, is in the list."""
    from accelstub.devices.ethos_u85 import ops, output

    class Recording(ops.SetState):
        def get(self, name, fld, default=None):
            self.read.add(self._key(name))
            return super().get(name, fld, default)

    for fn, table, clip, prec, acc in [(0, 0, 0, 0, 0), (0, 0, 1, 3, 0), (3, 0, 0, 1, 1),
                                       (1, 0, 0, 0, 0), (16, 3, 0, 0, 1)]:
        cmds = cs.decode(cs.to_bytes(cs.encode_stream([
            ("NPU_SET_OFM_PRECISION", dict(activation_precision=prec, activation_type=1)),
            ("NPU_SET_ACTIVATION", dict(activation_function=fn, table=table,
                                        activation_clip_range=clip)),
            ("NPU_SET_ACTIVATION_MIN", dict(clip_boundary=-128)),
            ("NPU_SET_ACTIVATION_MAX", dict(clip_boundary=127)), "NPU_SET_OFM_ZERO_POINT",
            ("NPU_SET_OFM_SCALE", dict(shift=20, scale=3)),
            ("NPU_SET_ACC_FORMAT", dict(acc_format=acc))])))
        for path in (True, False):
            s = Recording()
            s.read = set()
            for c in cmds:
                s.set(c)
            try:
                output._out_config(s, accumulator_path=path)
            except ops.Unpredictable:
                pass  # an assert failed: what it read so far still counts
            assert s.read and s.read <= set(output._OUT_CMDS), s.read - set(output._OUT_CMDS)
