"""Ethos-U85 kernels (accelstub.emu.ethosu85_*): hand-computed values from the TRM's pseudocode
and the worked examples of C§10 ([U85-TRM: ...],
docs/citations.md), and hypothesis-random comparisons against the
independent plain-integer reference tests/ethosu85_reference.py."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from accelstub.emu.conv import ethosu85 as conv_k
from accelstub.emu.eltwise import ethosu85 as eltwise_k
from accelstub.emu.memory import ethosu85 as L
from accelstub.emu.numeric import ethosu85 as P
from accelstub.emu.pool import ethosu85 as pool_k
from accelstub.emu.resize import ethosu85 as resize_k
from accelstub.emu.weights import ethosu85 as Wt
from tests.ethos_u85 import ethosu85_reference as R

# ETHOSU85_EXAMPLES=500 for a stress run; CI keeps a few examples per property
N_EXAMPLES = int(os.environ.get("ETHOSU85_EXAMPLES", "12"))
FEW = settings(max_examples=N_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


# ================================================================================================
# primitives: hand-computed

@pytest.mark.parametrize("mode,expected", [
    # [U85-TRM: §3.6.6] worked values, shift 1 on -5,-3,-1,1,3,5 [U85-TRM: §3.6.6]
    (P.RND_NATURAL, [-2, -1, 0, 1, 2, 3]),
    (P.RND_DOUBLE_SYMMETRIC, [-2, -1, 0, 1, 2, 3]),     # D = 0 for shift 1
    (P.RND_DOUBLE_ASYMMETRIC, [-2, -1, 0, 1, 2, 3]),
    (P.RND_SYMMETRIC, [-3, -2, -1, 1, 2, 3]),
    (P.RND_TRUNCATE_TO_ZERO, [-2, -1, 0, 0, 1, 2]),
    (P.RND_TRUNCATE_TO_LOWER, [-3, -2, -1, 0, 1, 2]),
])
def test_rounded_shift_right_shift1(mode, expected):
    assert [P.rounded_shift_right(x, 1, mode, 0) for x in (-5, -3, -1, 1, 3, 5)] == expected


def test_rounded_shift_right_double_rounding():
    # [U85-TRM: §3.6.6]: D = 1 << 30 when shift 32 > 31 - 0. acc = 2^30 (0.25): natural 0,
    # double_symmetric 1
    assert P.rounded_shift_right(1 << 30, 32, P.RND_NATURAL, 0) == 0
    assert P.rounded_shift_right(1 << 30, 32, P.RND_DOUBLE_SYMMETRIC, 0) == 1
    # acc = -3*2^30 (-0.75): double_symmetric (R - D = 0) -> floor(-0.75) = -1; asymmetric
    # (R + D = 2^31 + 2^30) -> floor((-3*2^30 + 3*2^30)/2^32) = 0
    assert P.rounded_shift_right(-3 << 30, 32, P.RND_DOUBLE_SYMMETRIC, 0) == -1
    assert P.rounded_shift_right(-3 << 30, 32, P.RND_DOUBLE_ASYMMETRIC, 0) == 0
    # dbl_rnd 2: D = 1 << 28 only when shift > 29; shift 29 -> D = 0 (natural)
    assert P.rounded_shift_right(3 << 26, 29, P.RND_DOUBLE_SYMMETRIC, 2) == 0   # 0.375 -> 0
    # (0.375*2^30 + 2^29 + 2^28) >> 30 = 1
    assert P.rounded_shift_right(3 << 27, 30, P.RND_DOUBLE_SYMMETRIC, 2) == 1
    # C§10.2 pixel 0 / oc 0: 168 * 1518500250 >> 32 with double rounding -> 60 (natural 59)
    assert P.rounded_shift_right(168 * 1518500250, 32, P.RND_DOUBLE_SYMMETRIC, 0) == 60
    assert P.rounded_shift_right(168 * 1518500250, 32, P.RND_NATURAL, 0) == 59
    # shift 0 is the identity [U85-TRM: §3.6.6]
    assert P.rounded_shift_right(-7, 0, P.RND_TRUNCATE_TO_ZERO, 0) == -7


def test_rounded_shift_right_no_int64_overflow_G_R11():
    big = (1 << 62) - 1
    # (big + 2^62 + 2^30) >> 63 exceeds int64 before the shift: true value = 1
    assert P.rounded_shift_right(big, 63, P.RND_DOUBLE_SYMMETRIC, 0) == 1
    assert P.rounded_shift_right(big, 63, P.RND_NATURAL, 0) == 0      # 0.4999.. -> 0
    assert P.rounded_shift_right(-(1 << 62), 63, P.RND_TRUNCATE_TO_ZERO, 0) == 0
    assert P.rounded_shift_right(-(1 << 62), 63, P.RND_TRUNCATE_TO_LOWER, 0) == -1
    assert P.rounded_shift_right(-(1 << 62), 63, P.RND_SYMMETRIC, 0) == -1   # -0.5 away from 0


def test_avgpool_scale_table():
    # [U85-TRM: §3.6.6] computed from [U85-TRM: §3.6.6]
    table = {1: (1073741825, 30), 2: (1073741825, 31), 3: (1431655766, 32), 4: (1073741825, 32),
             5: (1717986920, 33), 7: (1227133514, 33), 9: (1908874355, 34), 16: (1073741825, 34),
             25: (1374389536, 35), 49: (1402438302, 36), 64: (1073741825, 36)}
    for d, exp in table.items():
        assert tuple(P.avgpool_scale(d)) == exp


def test_bit_helpers():
    assert P.sign_extend(0xFF80, 16) == -128 and P.sign_extend(0x7F, 8) == 127
    # argmax identity low half [U85-TRM: §3.10.10]
    assert P.sign_extend(-(1 << 31), 16) == 0
    assert P.truncate(300, 8, True) == 44 and P.truncate(-1, 8, False) == 255   # [U85-TRM: §3.6.2]
    # [U85-TRM: §3.6.6]
    assert P.clz(1, 32) == 31 and P.clz(0, 32) == 32 and P.clz(-1, 32) == 0
    # wrap [U85-TRM: §3.6.6]
    assert P.accumulate((1 << 31) - 1, 1, 32) == -(1 << 31)
    assert P.accumulate((1 << 31) - 1, 1, 48) == 1 << 31


def test_zero_points():
    # [U85-TRM: §3.6.5]: signed b8 -128..127 or 0; uint8 < 256; uint16 32768 or 0; s16/s32 0 only
    assert P.ifm_zero_point(0xFFFE, 8, True) == (-2, True)
    assert P.ifm_zero_point(200, 8, False) == (200, True)
    assert P.ifm_zero_point(32768, 16, False) == (32768, True)
    assert P.ifm_zero_point(5, 16, True) == (5, False)
    assert P.ofm_zero_point(0xFF80, True) == (-128, True)    # [U85-TRM: §3.10.57] (G-R3)
    assert P.ofm_zero_point(300, False) == (300, False)
    assert P.saturate(np.array([-200, 5, 300]), 8, True).tolist() == [-128, 5, 127]


def _lut():
    return np.zeros(P.LUT_BYTES, np.uint8)


def test_activation_clamp_and_zero_point():
    cfg = P.out_config(8, True, zero_point=5, act_min=-10, act_max=20)
    assert P.activation(100, cfg, _lut()) == 20
    assert P.activation(-100, cfg, _lut()) == -10
    assert P.activation(3, cfg, _lut()) == 8
    # (int32)(acc64 + zp) BEFORE the clamp [U85-TRM: §3.6.7]: 2^32 + 3 wraps to 3 (+5 = 8)
    assert P.activation((1 << 32) + 3, cfg, _lut()) == 8
    # unsigned OFM: min/max/zp read as uint16 [U85-TRM: §3.6.7]; 0xFF80 is 65408, not -128
    cfg = P.out_config(8, False, zero_point=128, act_min=0, act_max=0xFF80)
    assert P.activation(-200, cfg, _lut()) == 0 and P.activation(1000, cfg, _lut()) == 1128
    # clip_range none: no clamp, write_ofm wraps [U85-TRM: §3.6.5]
    cfg = P.out_config(8, True, clip_none=True)
    assert P.write_value(P.activation(130, cfg, _lut()), cfg) == -126
    # b64 OFM: untouched [U85-TRM: §3.6.7]
    cfg = P.out_config(64, True, zero_point=5)
    assert P.activation(1 << 40, cfg, _lut()) == 1 << 40


def test_activation_luts():
    lut = np.arange(P.LUT_BYTES, dtype=np.int64).astype(np.uint8)   # byte i = i & 0xFF
    # u8_u8 table 1: u8[256 + (acc & 0xFF)] = (256 + 7) & 0xFF = 7 [U85-TRM: §3.6.7]
    cfg = P.out_config(8, False, function=P.LUT_U8_U8, table=1, act_max=255)
    assert P.activation(7, cfg, lut) == 7
    # s8_s8: s8[(acc + 128) & 0xFF]; acc = 100 -> index 228 -> byte 228 = -28 [U85-TRM: §3.6.7]
    cfg = P.out_config(8, True, function=P.LUT_S8_S8)
    assert P.activation(100, cfg, lut) == -28
    # s8_s16: s16[(acc+128)&0xFF], acc = -128 -> entry 0 = bytes 0,1 = 0x0100 = 256
    cfg = P.out_config(16, True, function=P.LUT_S8_S16, act_min=-128, act_max=127)
    assert P.activation(-128, cfg, lut) == 0x0100
    # s8_s32 entry 1 = bytes 4..7 = 0x07060504
    cfg = P.out_config(32, True, function=P.LUT_S8_S32, act_min=-128, act_max=127)
    assert P.activation(-127, cfg, lut) == 0x07060504
    # s16_s16 interpolation [U85-TRM: §3.6.7]: acc = 200 -> i = 256 + 1 = 257, base = s16[514],
    # slope = s16[515]; set base 1000, slope -3: (1000*128 + 72*(-3) + 64) >> 7 = 998
    lut = np.zeros(P.LUT_BYTES, np.uint8)
    lut[4 * 257:4 * 257 + 4] = np.frombuffer(np.array([1000, -3], "<i2").tobytes(), np.uint8)
    cfg = P.out_config(16, True, function=P.LUT_S16_S16)
    assert P.activation(200, cfg, lut) == (1000 * 128 + 72 * -3 + 64) >> 7 == 998
    cfg = P.out_config(32, True, function=P.LUT_S16_S32)
    assert P.activation(200, cfg, lut) == 1000 * 128 - 216
    # tanh: i = 256 + (acc >> 8); acc = 300 -> i = 257, frac 44, round 0x80 [U85-TRM: §3.6.7]
    cfg = P.out_config(16, True, function=P.LUT_TANH)
    assert P.activation(300, cfg, lut) == (1000 * 256 + 44 * -3 + 0x80) >> 8 == 999
    # tanh clamps to [-0x10000, 0xffff] regardless of ACTIVATION_MIN/MAX [U85-TRM: §3.6.7]
    lut2 = np.zeros(P.LUT_BYTES, np.uint8)
    lut2[4 * 511:4 * 511 + 2] = np.frombuffer(np.array([77], "<i2").tobytes(), np.uint8)
    assert P.activation(1 << 20, cfg, lut2) == (77 * 256 + 255 * 0 + 0x80) >> 8 == 77
    # sigmoid: i = 256 + (acc >> 9); acc = 600 -> i 257, frac 88 [U85-TRM: §3.6.7]
    cfg = P.out_config(16, True, function=P.LUT_SIGMOID)
    assert P.activation(600, cfg, lut) == (1000 * 512 + 88 * -3 + 0x1000200) >> 10


def test_rescale_modes():
    cfg = P.out_config(scale=3, shift=1, round_mode=P.RND_NATURAL)
    e = np.zeros(1, np.int64)
    assert P.rescale(5, -1, P.RESCALE_GLOBAL, cfg, e, e) == 8          # 15 >> 1 rounded
    assert P.rescale(5, -1, P.RESCALE_SHIFT_ONLY, cfg, e, e) == 3       # 5 >> 1 rounded
    assert P.rescale(5, -1, P.RESCALE_NONE, cfg, e, e) == 5
    assert P.rescale(9 * 7, 0, P.RESCALE_AVPOOL + 8, cfg, e, e) == 7    # /9
    sc, sh = np.array([2, 4], np.int64), np.array([0, 2], np.int64)
    cfg = P.out_config(per_channel=True, round_mode=P.RND_NATURAL)
    assert P.rescale(10, 1, P.RESCALE_NORMAL, cfg, sc, sh) == 10


# ================================================================================================
# weight and scale streams

def test_bit_order_example():
    # [U85-TRM: §3.9.3]: 0b10010 (5 bits), 0b1011 (4), 0b1010101 (7) -> 0x72, 0xAB
    bw = Wt._BitWriter()
    bw.put(0b10010, 5)
    bw.put(0b1011, 4)
    bw.put(0b1010101, 7)
    assert bw.tobytes(align=8) == bytes([0x72, 0xAB])


@pytest.mark.parametrize("hexs,expected", [
    ("10004c007000b900d1ffffffffffffff", [0, 5, 6, 0, 0, 0, 7, 0]),                 # V1
    ("360064107408058a1c004800f0ffffff", [-3, 4, -3, -3, 0, 4, 1, 4, 4]),            # V2
    ("10005c318456c20ff90000e7ff9fffffffffff1fffffffffffffffffffffffff",
     [3, -2, 0, 0, 0, 0, 0, 0, 1, 4] + [0] * 502),                                   # V3 (G-W7)
])
def test_swd_vectors(hexs, expected):
    v, status, _ = Wt.decode_swd(bytes.fromhex(hexs))
    assert status == Wt.SWD_OK
    assert v.tolist() == expected


@st.composite
def swd_case(draw):
    n = draw(st.integers(1, 300))
    density = draw(st.floats(0.0, 1.0))
    seed = draw(st.integers(0, 2 ** 31))
    rng = np.random.default_rng(seed)
    mag = draw(st.sampled_from([3, 15, 60, 255]))
    vals = rng.integers(-mag, mag + 1, n) * (rng.random(n) < density)
    zdiv = draw(st.sampled_from([0, 1, 2, 3, 6]))
    use_pal = draw(st.booleans())
    cand = sorted(set(vals.tolist()) - ({0} if zdiv < 4 else set()))
    pal = cand[:draw(st.integers(2, 32))] if use_pal and len(cand) >= 2 else None
    wtrunc = draw(st.booleans())
    idx_max = max([2 * abs(v) + 1 for v in vals.tolist()] + [1]) + (len(pal) if pal else 0)
    if draw(st.booleans()) and (pal is None or len(pal) == len(cand)):
        wdiv = 7
    else:
        wdiv = next(d for d in range(10) if (idx_max >> d) <= (2 if wtrunc else 31))
        if wdiv > 5:
            wdiv, wtrunc = 7, False
    if wdiv == 7 and pal is not None and len(pal) != len(cand):
        pal = None
    return (vals, zdiv, wdiv, wtrunc, pal, draw(st.integers(1, 40)),
            draw(st.sampled_from([(1,), (0,), (1, 0)])))


@FEW
@given(swd_case())
def test_swd_encode_decode_roundtrip(case):
    vals, zdiv, wdiv, wtrunc, pal, slice_len, pattern = case
    stream = Wt.encode_swd(vals, zdiv=zdiv, wdiv=wdiv, wtrunc=wtrunc, palette=pal,
                           slice_len=slice_len, newpal_pattern=pattern)
    assert len(stream) % 16 == 0
    v, status, _ = Wt.decode_swd(stream)
    assert status == Wt.SWD_OK
    assert v.tolist() == vals.tolist()


@pytest.mark.parametrize("mode,vals", [("raw", list(range(-40, 40, 3))),
                                       ("lut", [-5, 0, 7, 255] * 20),
                                       ("small", [0, 1, -1, 9] * 40)])
def test_fwd_roundtrip_and_header(mode, vals):
    s = Wt.encode_fwd(vals, mode, zero_point=-3 if mode == "raw" else 0)
    assert len(s) % 32 == 0
    assert Wt.decode_fwd(s, len(vals)).tolist() == vals
    hdr = int.from_bytes(s[:32], "little")
    # [U85-TRM: §3.9.11]
    assert hdr & 1 == (mode == "raw") and (hdr >> 1) & 1 == (mode == "small")


def test_fwd_hand_header():
    # raw mode, zero point 2 at bits [111:104], one payload word of bytes 5 -> weights 3
    hdr = 1 | (2 << 104)
    s = hdr.to_bytes(32, "little") + bytes([5] * 32)
    assert Wt.decode_fwd(s).tolist() == [3] * 32
    # LUT mode: entry 1 = sign 1, abs 7 -> -7; payload nibbles 1,0 -> [-7, lut0=0]
    hdr = ((7 << 1) | 1) << (112 + 9)
    s = hdr.to_bytes(32, "little") + bytes([0x01] + [0] * 31)
    assert Wt.decode_fwd(s, 2).tolist() == [-7, 0]


def test_scale_stream_records():
    # [U85-TRM: §3.7], C§10.2: (100, 1518500250, 32) and (-50, 2^30, 30), i32 records
    s = Wt.encode_scale_stream([100, -50], [1518500250, 1 << 30], [32, 30])
    assert s[:10] == bytes.fromhex("640000009a7982 5a2000".replace(" ", ""))
    assert s[10:20] == bytes.fromhex("ceffffff000000401e00")
    assert len(s) == 160                                                            # whole set
    b, sc, sh = Wt.decode_scale_stream(s, 2)
    assert b.tolist() == [100, -50] and sc.tolist() == [1518500250, 1 << 30]
    assert sh.tolist() == [32, 30]
    # i48: bias 48 bits, scale 15, shift 6
    s = Wt.encode_scale_stream([-(1 << 40), 7], [32767, 1], [63, 0], acc48=True, set_size=16)
    record = (-(1 << 40)) & ((1 << 48) - 1) | 32767 << 48 | 63 << 64
    assert s[:10] == record.to_bytes(10, "little")
    b, sc, sh = Wt.decode_scale_stream(s, 2, acc48=True)
    assert b.tolist() == [-(1 << 40), 7] and sc.tolist() == [32767, 1] and sh.tolist() == [63, 0]


def test_scale_stream_reverse_c():
    # reverse C: sets in reverse order, channels inside a set in order [U85-TRM: §3.7.2]
    bias = list(range(40))
    s = Wt.encode_scale_stream(bias, [1] * 40, [0] * 40, set_size=16, reverse_c=True)
    first = int.from_bytes(s[:4], "little", signed=True)
    assert first == 32                                    # last set (32..47) comes first
    assert Wt.decode_scale_stream(s, 40, reverse_c=True)[0].tolist() == bias


def test_weight_order_conv_example():
    # C§10.2: 256 MACs, u1x4 -> wblk_o 8, OFM_BLK_DEPTH 8, ifm_block_depth 64 -> 512 values
    p = Wt.ordering_params(ofm_depth=2, ifm_depth=2, kernel_hw=(1, 1), ofm_block_depth=8,
                           macs_per_cc=256, microblock=2)
    W = np.array([[3, -2], [1, 4]]).reshape(2, 1, 1, 2)
    streams = Wt.order_weights(W, p)
    assert streams[0].tolist() == [3, -2, 0, 0, 0, 0, 0, 0, 1, 4] + [0] * 502
    v3 = bytes.fromhex("10005c318456c20ff90000e7ff9fffffffffff1fffffffffffffffffffffffff")
    diag = []
    assert Wt.decode_weights([v3], p, diag=diag).tolist() == W.tolist() and diag == []


def test_sparse_2_4_order_and_rule():
    """sparse_2_4 takes 16 input channels per step (i_sz 16, [U85-TRM: §3.9.2]): ic 0..15 of one oc
    come together; the decoded weights are checked against the 2:4 rule [U85-TRM: Table 3-157]."""
    p = Wt.ordering_params(ofm_depth=1, ifm_depth=16, kernel_hw=(1, 1), ofm_block_depth=8,
                           macs_per_cc=256, microblock=2, sparse=True)
    W = np.zeros((1, 1, 1, 16), np.int64)
    W[0, 0, 0, 0::4] = np.arange(1, 5)
    W[0, 0, 0, 1::4] = -np.arange(1, 5)
    vals = Wt.order_weights(W, p)[0]
    assert vals[:16].tolist() == W.ravel().tolist()
    diag = []
    assert Wt.decode_weights([Wt.encode_swd(vals)], p, diag=diag).tolist() == W.tolist()
    Wt.check_sparse_2_4(W, diag)
    assert diag == []
    W[0, 0, 0, 2] = 9   # three non-zero weights in ic 0..3
    W[0, 0, 0, 7] = 128
    Wt.check_sparse_2_4(W, diag)
    assert len(diag) == 2 and "-127..+127" in diag[0] and "group of 4" in diag[1]


@FEW
@given(st.integers(0, 2 ** 31), st.sampled_from(["depth", "part", "dw"]),
       st.sampled_from([256, 512, 1024]), st.integers(1, 3), st.integers(1, 2), st.booleans(),
       st.booleans())
def test_weight_order_roundtrip(seed, kind, macs, k, stride, dil, i16):
    rng = np.random.default_rng(seed)
    mb = {256: 2, 512: 3, 1024: 3}[macs]
    kh, kw = k, int(rng.integers(1, 4))
    dl = (2 if dil else 1, 1)
    p = Wt.ordering_params(ofm_depth=int(rng.integers(1, 20)), ifm_depth=int(rng.integers(1, 40)),
                           kernel_hw=((kh - 1) * dl[0] + 1, kw), dilation=dl,
                           stride=(stride, stride),
                           ofm_block_depth=16, macs_per_cc=macs, microblock=mb,
                           depthwise=kind == "dw", part_kernel_first=kind == "part", ifm16bit=i16)
    shape = Wt._wshape(p)
    assert shape[1:3] == (kh, kw)
    W = rng.integers(-255, 256, shape)
    streams = Wt.order_weights(W, p)
    assert [len(s) for s in streams] == Wt.expected_counts(p)
    enc = [Wt.encode_swd(s, zdiv=0, wdiv=5) for s in streams]
    diag = []
    assert (Wt.decode_weights(enc, p, diag=diag) == W).all() and diag == []
    if kind != "dw" and np.abs(W).max() < 128:  # FWD raw mode holds -128..127 here
        f = Wt.encode_fwd(Wt.fwd_merge(streams, p), "raw", zero_point=0)
        assert (Wt.decode_weights([f], p, fwd=True) == W).all()


@pytest.mark.parametrize("field, name", [(8, "ofm_block_depth"), (14, "wblk_o"), (6, "stride_y"),
                                         (7, "stride_x"), (15, "num_wd"), (9, "decomp_size")])
def test_walk_refuses_a_step_below_1_compiled_and_interpreted(field, name):
    """The walk's stepped loops are while loops (issue 31 #5, compile time): a block depth,
    stride, decoder count or decomposition of 0 raises ValueError, compiled and interpreted
    alike, instead of looping forever (a range() step of 0 raised before)."""
    from accelstub.emu.jit import interpreted

    p = Wt.ordering_params(ofm_depth=8, ifm_depth=8, kernel_hw=(3, 3), stride=(2, 2),
                           ofm_block_depth=8, part_kernel_first=True)
    z = np.zeros(0, np.int64)
    assert Wt._walk(p, False, z, z) > 0
    p[field] = 0
    for walk in (Wt._walk, interpreted(Wt._walk)):
        with pytest.raises(ValueError, match="below 1"):
            walk(p, False, z, z)


def test_fwd_merge_interleaves_decoder_blocks():
    """[U85-TRM: §3.9.2] with num_wd = 2 (512 MACs): blocks of wblk_k*wblk_o*wblk_i/num_wd values,
    stream 0's block then stream 1's, over the length of stream 0."""
    p = Wt.ordering_params(ofm_depth=16, ifm_depth=8, kernel_hw=(1, 1), dilation=(1, 1),
                           stride=(1, 1), ofm_block_depth=16, macs_per_cc=512,
                           microblock=0, depthwise=False, part_kernel_first=False,
                           decomposition_d4x4=False, ifm16bit=False)
    assert int(p[15]) == 2
    size = Wt._fwd_block(p)
    a, b = np.arange(3 * size), 1000 + np.arange(3 * size)
    merged = Wt.fwd_merge([a, b], p)
    assert merged[:size].tolist() == a[:size].tolist()
    assert merged[size:2 * size].tolist() == b[:size].tolist()
    assert merged[2 * size:3 * size].tolist() == a[size:2 * size].tolist()
    assert [x.tolist() for x in Wt.fwd_split(merged, p)] == [a.tolist(), b.tolist()]


# ================================================================================================
# layout

def test_nhcwb16_roundtrip_and_addresses():
    rng = np.random.default_rng(3)
    t = rng.integers(-128, 128, (3, 5, 20)).astype(np.int8)
    b = L.nhwc_to_nhcwb16(t)
    assert b.shape == (3, 2, 5, 16)
    assert (L.nhcwb16_to_nhwc(b, 20) == t).all()
    # [U85-TRM: §3.6.5]: base + y*stride_y + (c>>4)*stride_c + (16x + (c&15))*es, dense strides
    addr = L.element_addresses((3, 5, 20), [0], stride_y=2 * 5 * 16, stride_x=0, stride_c=5 * 16,
                               width0=5, heights=(3, 3), fmt=L.NHCWB16)
    mem = b.view(np.uint8).ravel()
    assert (L.read_elements(mem, addr, 8, True) == t).all()
    # int16 NHWC with c*es (G-A1)
    t16 = rng.integers(-30000, 30000, (2, 3, 4)).astype("<i2")
    addr = L.element_addresses((2, 3, 4), [0], stride_y=24, stride_x=8, stride_c=0, width0=3,
                               heights=(2, 2), element_size=2)
    assert (L.read_elements(t16.view(np.uint8).ravel(), addr, 16, True) == t16).all()
    out = np.zeros(48, np.uint8)
    L.write_elements(out, addr, t16, 16)
    assert out.tobytes() == t16.tobytes()


def test_tile2x2_addresses():
    # [U85-TRM: §3.6.5]: x >= width0 -> tile 1; then y >= height[tile] -> tile + 2
    a = L.element_addresses((4, 4, 1), [0, 100, 200, 300], stride_y=10, stride_x=1, stride_c=0,
                            width0=2, heights=(1, 3))
    assert a[0, 0, 0] == 0 and a[0, 3, 0] == 101 and a[1, 0, 0] == 200 and a[3, 3, 0] == 301
    assert a[2, 1, 0] == 211
    a = L.element_addresses((5, 1, 1), [0, 100, 200], 10, 1, 0, 1, (2, 4), storage=L.TILE3X1)
    assert a[:, 0, 0].tolist() == [0, 10, 100, 110, 200]                      # G-A2 literal


# ================================================================================================
# ops: the worked examples of C§10 (exact bytes)

def test_elementwise_add_example_10_1():
    ifm = np.frombuffer(bytes.fromhex("0af600 7f8032cd03".replace(" ", "")),
                        np.int8).reshape(1, 2, 4)
    ifm2 = np.frombuffer(bytes.fromhex("1405f97f809c3cfe"), np.int8).reshape(1, 2, 4)
    cfg = P.out_config(8, True, zero_point=5, act_min=-128, act_max=127, scale=5, shift=2,
                       round_mode=P.RND_DOUBLE_SYMMETRIC)
    diag = []
    out = eltwise_k.elementwise(eltwise_k.EW_ADD, ifm, ifm2, ifm_zp=3, ifm2_zp=-2,
                                ifm_scale=(3, 1, 1, 0), ifm2_scale=(1, 0, 1, 0), cfg=cfg,
                                diag=diag)
    assert out.tobytes() == bytes.fromhex("2ef6fa7f80e3ed05") and diag == []


def test_mul_32bit_keeps_the_whole_product():
    """Vela's MEAN: a 32-bit sum times a 32-bit scalar multiplier, shift 32 (shift_only). The
    product (about 2^61) reaches the rounding shift whole; wrapped to 32 bits it would be junk."""
    sums = np.array([[[1_999_999_999, -1_234_567_890, 77, 0]]], np.int32)
    mult, shift = 1487757805, 32
    cfg = P.out_config(32, True, scale=1, shift=shift, round_mode=P.RND_DOUBLE_SYMMETRIC,
                       clip_none=True)
    diag = []
    out = eltwise_k.elementwise(eltwise_k.EW_MUL, sums, None, ifm_bits=32, ifm_signed=True,
                                broadcast2=eltwise_k.BC_SCALAR, scalar=mult, cfg=cfg, diag=diag)
    d = 1 << 30  # double rounding addend, shift > 31 [U85-TRM: §3.6.6]
    want = [(int(v) * mult + (1 << 31) + (d if v >= 0 else -d)) >> shift for v in sums.ravel()]
    assert out.ravel().tolist() == want == [692791215, -427648894, 27, 0] and diag == []


def test_scalar_operand_minus_its_zero_point():
    """x * 0.37 as Vela writes it: scalar 127 with IFM2 zero point -128 stands for 255."""
    x = np.array([[[-128, -1, 0, 5, 127]]], np.int8)
    cfg = P.out_config(16, True, scale=1, shift=0)
    out = eltwise_k.elementwise(eltwise_k.EW_MUL, x, None, ifm_zp=0, ifm2_zp=-128,
                                broadcast2=eltwise_k.BC_SCALAR, scalar=127, cfg=cfg)
    assert out.ravel().tolist() == [v * 255 for v in x.ravel().tolist()]
    diag = []  # the zero point is checked as for a tensor of the operand's type
    eltwise_k.elementwise(eltwise_k.EW_ADD, x, None, ifm2_zp=300, broadcast2=eltwise_k.BC_SCALAR,
                          scalar=1, cfg=cfg, diag=diag)
    assert any("IFM2 zero point 300" in m for m in diag)


def test_conv_1x1_example_10_2():
    ifm = np.frombuffer(bytes.fromhex("0aecfb07"), np.int8).reshape(1, 2, 2)
    p = Wt.ordering_params(ofm_depth=2, ifm_depth=2, kernel_hw=(1, 1), ofm_block_depth=8,
                           macs_per_cc=256, microblock=2)
    W = Wt.decode_weights([bytes.fromhex(
        "10005c318456c20ff90000e7ff9fffffffffff1fffffffffffffffffffffffff")], p)
    scale_stream = (bytes.fromhex("640000009a79825a2000") + bytes.fromhex("ceffffff000000401e00")
                    + bytes(140))
    bias, scales, shifts = Wt.decode_scale_stream(scale_stream, 2, set_size=16)
    cfg = P.out_config(8, True, zero_point=-3, act_min=-128, act_max=127, per_channel=True,
                       round_mode=P.RND_DOUBLE_SYMMETRIC)
    diag = []
    out = conv_k.conv2d(ifm, W, (1, 2), ifm_zp=2, cfg=cfg, bias=bias, scales=scales, shifts=shifts,
                   diag=diag)
    assert out.tobytes() == bytes.fromhex("398016d8") and diag == []
    # natural rounding instead gives 59 - 3 = 56 = 0x38 for pixel 0 / oc 0 [U85-TRM: §3.6.6]
    cfg[P.C_ROUND] = P.RND_NATURAL
    assert conv_k.conv2d(ifm, W, (1, 2), ifm_zp=2, cfg=cfg, bias=bias, scales=scales,
                    shifts=shifts).tobytes()[0] == 0x38


def test_pool_hand_values():
    ifm = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]], np.int8).reshape(3, 3, 1)
    # average 3x3, pad top/left 1: derived IFM extent [U85-TRM: §3.10.10] = 3 - 1 = 2 -> window
    # covers the 4 valid values 1, 2, 4, 5 -> 12/4 = 3
    cfg = P.out_config(8, True, round_mode=P.RND_NATURAL)
    out = pool_k.pool2d(ifm, pool_k.POOL_AVERAGE, (3, 3), (1, 1), pad=(1, 1, 0, 0), cfg=cfg)
    assert out.ravel().tolist() == [3]
    # max with negative data and padding: identity -2^31 never wins
    neg = -ifm
    out = pool_k.pool2d(neg, pool_k.POOL_MAX, (3, 3), (1, 1), pad=(1, 1, 1, 1),
                        cfg=P.out_config(scale=1))
    assert out.ravel().tolist() == [-1]
    # argmax_x over a row [1, 9, 3]: acc = 9 + 65536*1; rescale scale 1 shift 16 natural -> 1
    row = np.array([1, 9, 3], np.int8).reshape(1, 3, 1)
    cfg = P.out_config(8, True, scale=1, shift=16, round_mode=P.RND_NATURAL)
    assert pool_k.pool2d(row, pool_k.POOL_ARGMAX_X, (1, 3), (1, 1), cfg=cfg).ravel().tolist() == [1]
    # sum with global scale 1 shift 0: 45
    cfg = P.out_config(16, True, scale=1, act_min=-32768, act_max=32767)
    assert pool_k.pool2d(ifm, pool_k.POOL_SUM, (3, 3), (1, 1), cfg=cfg).ravel().tolist() == [45]
    # reduce_sum over channels of [[1, 2, 3]]: 6
    ch = np.array([1, 2, 3], np.int8).reshape(1, 1, 3)
    out = pool_k.pool2d(ch, pool_k.POOL_REDUCE_SUM, (1, 1), (1, 1), cfg=cfg)
    assert out.ravel().tolist() == [6]


def test_resize_hand_values():
    # 2x bilinear upscale of [0, 100] along x: scale_n 2, step 1/2 (int 0, mod 1), offset 0;
    # acc = (2 - xm)*v0 + xm*v1 with y weight 2 (ny 1? use ny=1): OFM shift 16 + log2(2*1)
    ifm = np.array([0, 100], np.int8).reshape(1, 2, 1)
    cfg = P.out_config(8, True, scale=1, shift=17, round_mode=P.RND_NATURAL)
    out = resize_k.resize(ifm, resize_k.RESIZE_BILINEAR, (1, 4), scale_n=(1, 2),
                          step=((1, 0), (0, 1)), cfg=cfg)
    assert out.ravel().tolist() == [0, 50, 100, 100]
    cfg = P.out_config(8, True, scale=1, shift=16, round_mode=P.RND_NATURAL)   # no weights
    out = resize_k.resize(ifm, resize_k.RESIZE_NEAREST, (1, 4), scale_n=(1, 2),
                          step=((1, 0), (0, 1)), cfg=cfg)
    assert out.ravel().tolist() == [0, 100, 100, 100]      # 2*x_mod < 2 picks ix0 only at mod 0
    out = resize_k.resize(ifm, resize_k.RESIZE_REPLICATE, (1, 4), scale_n=(1, 2),
                          step=((1, 0), (0, 1)), cfg=cfg)
    assert out.ravel().tolist() == [0, 0, 100, 100]


# ================================================================================================
# ops vs. the independent reference (hypothesis)

@st.composite
def out_stage(draw, per_channel_ok=True,
              ofm_choices=((8, True), (8, False), (16, True), (32, True))):
    bits, signed = draw(st.sampled_from(ofm_choices))
    acc_bits = draw(st.sampled_from([32, 48]))
    lo, hi = P.type_range(min(bits, 16), signed)
    amin = draw(st.integers(lo, hi))
    amax = draw(st.integers(amin, hi))
    zp = draw(st.integers(-128, 127)) if signed else draw(st.sampled_from([0, 7, 255]))
    o = dict(bits=bits, signed=signed, zp=zp, amin=amin, amax=amax,
             scale=draw(st.integers(0, (1 << 15) - 1 if acc_bits == 48 else (1 << 31) - 1)),
             shift=draw(st.integers(0, 63)), rnd=draw(st.integers(0, 5)),
             dbl=draw(st.integers(0, 30)),
             per_channel=per_channel_ok and draw(st.booleans()), acc_bits=acc_bits,
             clip_none=draw(st.booleans()) and bits == 8, raw=False)
    func = draw(st.sampled_from([0, 0, 1, 4, 5, 7, 8, 9, 10, 11]))
    o["func"] = func
    tables = {1: 7, 4: 7, 5: 3, 7: 1}.get(func, 0)
    o["table"] = tables and draw(st.integers(0, tables))
    return o


def cfg_of(o):
    return P.out_config(o["bits"], o["signed"], o["zp"], o["amin"], o["amax"], o["scale"],
                        o["shift"], o["rnd"], o["dbl"], o["per_channel"], o["acc_bits"], o["func"],
                        o["table"],
                        o["clip_none"], o.get("raw", False))


def rand_lut(rng):
    return rng.integers(0, 256, P.LUT_BYTES).astype(np.uint8)


def same(a, b):
    return np.asarray(a).astype(object).tolist() == np.asarray(b).tolist()


@FEW
@given(out_stage(), st.integers(0, 2 ** 31), st.sampled_from([(8, True), (8, False), (16, True)]),
       st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), st.integers(1, 2), st.booleans())
def test_conv_vs_reference(o, seed, ityp, kh, kw, sy, dy, raw_out):
    rng = np.random.default_rng(seed)
    bits, signed = ityp
    lo, hi = P.type_range(bits, signed)
    ic, oc = int(rng.integers(1, 6)), int(rng.integers(1, 5))
    H, W = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    pad = tuple(int(x) for x in rng.integers(0, 2, 4))
    dh, dw = (kh - 1) * dy + 1, (kw - 1) * dy + 1
    ih, iw = (H - 1) * sy + dh - pad[0] - pad[2], (W - 1) * sy + dw - pad[1] - pad[3]
    if ih < 1 or iw < 1:
        return
    ifm = rng.integers(lo, hi + 1, (ih, iw, ic))
    zp = 0 if bits == 16 else int(rng.integers(lo, hi + 1)) if bits == 8 else 0
    w = rng.integers(-255, 256, (oc, kh, kw, ic))
    bias = (rng.integers(-(1 << 31), 1 << 31, oc) if o["acc_bits"] == 32
            else rng.integers(-(1 << 47), 1 << 47, oc))
    scales = rng.integers(0, 1 << (15 if o["acc_bits"] == 48 else 31), oc)
    shifts = rng.integers(0, 64, oc)
    o["raw"] = raw_out
    lut = rand_lut(rng)
    got = conv_k.conv2d(ifm.astype(np.int64), w, (H, W), stride=(sy, sy), dilation=(dy, dy),
                        pad=pad, ifm_zp=zp, ifm_bits=bits, ifm_signed=signed, cfg=cfg_of(o),
                        bias=bias, scales=scales, shifts=shifts, lut=lut)
    v = R.values(ifm, zp, bits, signed)
    exp = R.conv(v, w, H, W, (sy, sy), (dy, dy), pad, o, lut.tobytes(), bias, scales, shifts)
    assert same(got, exp)


@FEW
@given(out_stage(), st.integers(0, 2 ** 31), st.integers(1, 3), st.integers(1, 2),
       st.sampled_from([0, 1, 2]))
def test_depthwise_vs_reference(o, seed, k, s, up):
    rng = np.random.default_rng(seed)
    c = int(rng.integers(1, 6))
    H, W = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    pad = tuple(int(x) for x in rng.integers(0, 2, 4))
    sy = 1 if up else s
    ih, iw = (H - 1) * sy + k - pad[0] - pad[2], (W - 1) * sy + k - pad[1] - pad[3]
    if ih < 1 or iw < 1:
        return
    raw = rng.integers(-128, 128, ((ih + 1) // 2 if up else ih, (iw + 1) // 2 if up else iw, c))
    zp = int(rng.integers(-128, 128))
    w = rng.integers(-255, 256, (c, k, k))
    lut = rand_lut(rng)
    bias = rng.integers(-1000, 1000, c)
    scales, shifts = rng.integers(0, 1 << 15, c), rng.integers(0, 40, c)
    got = conv_k.depthwise2d(raw.astype(np.int8), w, (H, W), stride=(sy, sy), pad=pad, ifm_zp=zp,
                             upscale_mode=up, cfg=cfg_of(o), bias=bias, scales=scales,
                             shifts=shifts, lut=lut)
    v = R.values(raw, zp, 8, True)
    if up == 1:
        v = np.repeat(np.repeat(v, 2, 0), 2, 1)
    elif up == 2:
        z = np.zeros((v.shape[0] * 2, v.shape[1] * 2, c), dtype=object)
        z[::2, ::2] = v
        v = z
    v = v[:ih, :iw]
    exp = R.conv(v, w[..., None], H, W, (sy, sy), (1, 1), pad, o, lut.tobytes(), bias, scales,
                 shifts, depthwise=True)
    assert same(got, exp)


@FEW
@given(out_stage(), st.integers(0, 2 ** 31), st.sampled_from([(8, True), (16, True)]))
def test_matmul_vs_reference(o, seed, ityp):
    rng = np.random.default_rng(seed)
    bits, _ = ityp
    lo, hi = P.type_range(bits, True)
    W, ic, d = int(rng.integers(1, 5)), int(rng.integers(1, 6)), int(rng.integers(1, 5))
    a = rng.integers(lo, hi + 1, (1, W, ic))
    b = rng.integers(lo, hi + 1, (1, d, ic))  # IFM2 [1][oc][ic]: B transposed [U85-TRM: §4.1]
    zp, zp2 = (int(rng.integers(-128, 128)), int(rng.integers(-128, 128))) if bits == 8 else (0, 0)
    o["acc_bits"] = 48 if bits == 16 else o["acc_bits"]
    if o["acc_bits"] == 48:
        o["scale"] &= 0x7FFF
    lut = rand_lut(rng)
    scales = rng.integers(0, 1 << 15, d)
    shifts = rng.integers(0, 50, d)
    bias = rng.integers(-99, 99, d)
    got = conv_k.matmul(a, b, ifm_zp=zp, ifm2_zp=zp2, ifm_bits=bits, ifm_signed=True, cfg=cfg_of(o),
                   bias=bias, scales=scales, shifts=shifts, lut=lut)
    va, vb = R.values(a, zp, bits, True), R.values(b, zp2, bits, True)
    w = np.array([[[[int(vb[0, oc, i]) for i in range(ic)]]] for oc in range(d)], dtype=object)
    exp = R.conv(va, w, 1, W, (1, 1), (1, 1), (0, 0), o, lut.tobytes(), bias, scales, shifts)
    assert same(got, exp)


@FEW
@given(out_stage(), st.integers(0, 2 ** 31), st.integers(0, 7),
       st.sampled_from([(8, True), (8, False), (16, True), (32, True)]),
       st.booleans())
def test_pool_vs_reference(o, seed, mode, ityp, keep):
    rng = np.random.default_rng(seed)
    bits, signed = ityp
    if mode in (1, 6, 7) and bits == 32:
        bits = 16
    if mode not in (2, 3, 4):
        o["acc_bits"] = 32
        o["scale"] &= 0x7FFFFFFF
    lo, hi = P.type_range(bits, signed)
    c = int(rng.integers(1, 4))
    H, W = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    sy, sx = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    pad = tuple(int(x) for x in rng.integers(0, 2, 4))
    if mode == 6:
        kh, H, sy, sx = 1, H, 1, 1
        W = 1
    if mode == 7:
        kw, W, sy, sx = 1, 1, 1, 1
        H = 1
    if mode == 2:
        kh = kw = sy = sx = 1
        pad = (0, 0, 0, 0)
    ih, iw = (H - 1) * sy + kh - pad[0] - pad[2], (W - 1) * sx + kw - pad[1] - pad[3]
    if ih < 1 or iw < 1:
        return
    if bits == 32:
        o["acc_bits"] = 48 if mode in (2, 3) else 32
        raw = rng.integers(-(1 << 20), 1 << 20, (ih, iw, c))
    else:
        raw = rng.integers(lo, hi + 1, (ih, iw, c))
    zp = int(rng.integers(lo, hi + 1)) if bits == 8 and mode != 2 else 0
    d = 1 if mode == 2 else c
    acc0 = rng.integers(-(1 << 20), 1 << 20, (H, W, d)) if (keep or mode == 4) else None
    lut = rand_lut(rng)
    bias = rng.integers(-500, 500, d)
    scales, shifts = rng.integers(0, 1 << 15, d), rng.integers(0, 40, d)
    got = pool_k.pool2d(None if mode == 4 else raw, mode, (kh, kw), (H, W), stride=(sy, sx),
                        pad=pad, ifm_zp=zp, ifm_bits=bits, ifm_signed=signed, cfg=cfg_of(o),
                        bias=bias, scales=scales, shifts=shifts, lut=lut, acc_in=acc0, depth=d)
    v = R.values(raw, zp, bits, signed)
    if mode == 2:
        v = v[:H, :W]
    exp = R.pool(v, mode, H, W, (kh, kw), (sy, sx), pad, o, lut.tobytes(), bias, scales, shifts,
                 acc0)
    assert same(got, exp)


@settings(max_examples=3 * N_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(out_stage(per_channel_ok=False), st.integers(0, 2 ** 31),
       st.sampled_from(eltwise_k.EW_MODES),
       st.sampled_from([(8, True), (8, False), (16, True), (16, False), (32, True)]),
       st.sampled_from([0, 1, 2, 4, 7]), st.sampled_from([0, 3, 6, 8]))
def test_elementwise_vs_reference(o, seed, mode, ityp, bc1, bc2):
    rng = np.random.default_rng(seed)
    bits, signed = ityp
    lo, hi = P.type_range(bits, signed)
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    if bc2 == 8 and mode in eltwise_k.EW_UNARY:
        bc2 = 0

    def tensor(bc):  # 1 or 2 along a broadcast axis: it is read at coordinate 0
        s = tuple(int(rng.integers(1, 3)) if bc & bit else n for bit, n in zip((1, 2, 4), shape))
        return rng.integers(lo, hi + 1, s)

    def first(t, bc):
        return t[tuple(slice(0, 1) if bc & bit else slice(None) for bit in (1, 2, 4))]

    a, b = tensor(bc1), tensor(bc2 if bc2 != 8 else 0)
    if bits == 8:
        zp1, zp2 = (int(rng.integers(-128, 128)), int(rng.integers(-128, 128))) if signed else \
            (int(rng.integers(0, 256)), int(rng.integers(0, 256)))
    elif bits == 16 and not signed:
        zp1 = zp2 = 32768
    else:
        zp1 = zp2 = 0
    if mode == eltwise_k.EW_DIV:
        zp1 = zp2 = 0
    sc1 = (int(rng.integers(0, 1 << 31)), int(rng.integers(0, 64)), int(rng.integers(0, 2)),
           int(rng.integers(0, 31)))
    sc2 = (int(rng.integers(0, 1 << 31)), int(rng.integers(0, 64)), int(rng.integers(0, 2)),
           int(rng.integers(0, 31)))
    scalar = (int(rng.integers(-(1 << 31), 1 << 31)) if rng.random() < 0.5
              else int(rng.integers(-40, 40)))
    lut = rand_lut(rng)
    got = eltwise_k.elementwise(mode, a, b if bc2 != 8 else None, shape, ifm_zp=zp1, ifm2_zp=zp2,
                                ifm_bits=bits, ifm_signed=signed, ifm_scale=sc1, ifm2_scale=sc2,
                                broadcast=bc1, broadcast2=bc2,
                        scalar=scalar, cfg=cfg_of(o), lut=lut)
    va = np.broadcast_to(R.values(first(a, bc1), zp1, bits, signed), shape)
    if bc2 == 8:
        vb = np.full(shape, scalar - zp2, dtype=object)
    else:
        vb = np.broadcast_to(R.values(first(b, bc2), zp2, bits, signed), shape)
    if mode in eltwise_k.EW_UNARY:
        vb = np.zeros(shape, dtype=object)
    if mode == eltwise_k.EW_MUL and bits in (8, 16):
        # rescale's (int64_t)acc * scale [U85-TRM: §3.6.6] overflows int64 beyond this: the
        # pseudocode's product is undefined there (its assert acc == sign_extend(acc, 32)
        # fails long before: UNPREDICTABLE), the reference's Python integers are not
        prod = max(abs(int(x) * int(y)) for x, y in zip(np.ravel(va), np.ravel(vb)))
        assume(prod * o["scale"] < 1 << 63)
    exp = R.elementwise(mode, va, vb, bits, signed, sc1, sc2, o, lut.tobytes())
    assert same(got, exp)


@FEW
@given(out_stage(per_channel_ok=False), st.integers(0, 2 ** 31), st.integers(0, 2), st.booleans())
def test_resize_vs_reference(o, seed, mode, i16):
    rng = np.random.default_rng(seed)
    bits = 16 if i16 else 8
    lo, hi = P.type_range(bits, True)
    ih, iw, c = int(rng.integers(1, 5)), int(rng.integers(1, 5)), int(rng.integers(1, 3))
    ny, nx = int(rng.integers(1, 9)), int(rng.integers(1, 9))
    dy, dx = int(rng.integers(1, 17)), int(rng.integers(1, 17))       # scale_d
    offy, offx = int(rng.integers(-ny, ny)), int(rng.integers(-nx, nx))
    OH = max(1, ((ih - 1) * ny - offy) // dy + 1)
    OW = max(1, ((iw - 1) * nx - offx) // dx + 1)
    o["shift"] = int(rng.integers(16, 40))
    ifm = rng.integers(lo, hi + 1, (ih, iw, c))
    lut = rand_lut(rng)
    step = (resize_k.resize_step(ny, dy), resize_k.resize_step(nx, dx))
    got = resize_k.resize(ifm, mode, (OH, OW), scale_n=(ny, nx), offset=(offy, offx), step=step,
                   ifm_bits=bits, ifm_signed=True, cfg=cfg_of(o), lut=lut)
    exp = R.resize(R.values(ifm, 0, bits, True), mode, OH, OW, (ny, nx), (offy, offx), step, o,
                   lut.tobytes())
    assert same(got, exp)


def test_nhwc_batch_and_dtype():
    x = np.arange(2 * 2 * 2 * 3, dtype=np.int64).reshape(2, 2, 2, 3).astype(np.int8)
    w = np.ones((4, 1, 1, 3), np.int64)
    cfg = P.out_config(16, True, scale=1, act_min=-32768, act_max=32767)
    out = conv_k.conv2d(x, w, cfg=cfg)
    assert out.shape == (2, 2, 2, 4) and out.dtype == np.int16
    assert out[1, 1, 1, 0] == int(x[1, 1, 1].astype(int).sum())
    cfg = P.out_config(acc_output_disable=True)
    assert conv_k.conv2d(x, w, cfg=cfg).dtype == np.int64


@pytest.mark.parametrize("bc, want", [
    (0, (2, 3, 5)), (eltwise_k.BC_H, (1, 3, 5)), (eltwise_k.BC_W, (2, 1, 5)),
    (eltwise_k.BC_C, (2, 3, 1)), (eltwise_k.BC_H | eltwise_k.BC_C, (1, 3, 1)),
    (eltwise_k.BC_H | eltwise_k.BC_W | eltwise_k.BC_C, (1, 1, 1)),
])
def test_operand_shape_reads_one_element_along_each_broadcast_axis(bc, want):
    """operand_shape, the one rule the model's operand reads, the kernel's broadcast and the
    executor's rows share: broadcast_mode bit 0/1/2 (H/W/C) reads extent 1 on that axis, the
    OFM's [2, 3, 5] elsewhere [U85-TRM: Table 3-117] (the values written out by hand)."""
    assert eltwise_k.operand_shape(bc, (2, 3, 5)) == want


@pytest.mark.parametrize("shape2, bc, short", [
    ((2, 3, 5), 0, False), ((2, 3, 4), 0, True), ((2, 2, 5), 0, True), ((1, 3, 5), 0, True),
    ((1, 3, 5), eltwise_k.BC_H, False), ((2, 3, 1), eltwise_k.BC_C, False),
    ((2, 1, 1), eltwise_k.BC_W | eltwise_k.BC_C, False), ((1, 1, 5), eltwise_k.BC_H, True),
])
def test_an_operand_short_of_the_ofm_on_a_non_broadcast_axis_is_reported(shape2, bc, short):
    """An IFM2 smaller than the OFM [2, 3, 5] on an axis it is not broadcast along is
    UNPREDICTABLE (reported); the kept plan of the operation (plan_elementwise, run by
    run_elementwise) gives what elementwise gives, and the Python-integer reference where the
    operand covers the OFM."""
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (2, 3, 5)).astype(np.int8)
    b = rng.integers(-128, 128, shape2).astype(np.int8)
    o = dict(bits=8, signed=True, zp=1, amin=-128, amax=127, scale=1 << 30, shift=31, rnd=0,
             dbl=0, per_channel=False, acc_bits=32, func=0, table=0, clip_none=False)
    cfg = cfg_of(o)
    kw = dict(ifm_zp=3, ifm2_zp=-2, ifm_scale=(3, 1, 1, 0), ifm2_scale=(5, 2, 0, 0),
              broadcast2=bc, cfg=cfg)
    diag = []
    out = eltwise_k.elementwise(eltwise_k.EW_ADD, a, b, (2, 3, 5), diag=diag, **kw)
    assert (diag == ["IFM2 smaller than the OFM on a non-broadcast axis"]) == short
    plan = eltwise_k.plan_elementwise(eltwise_k.EW_ADD, a, b, (2, 3, 5), **kw)
    np.testing.assert_array_equal(eltwise_k.run_elementwise(plan, a, b), out)
    if not short:
        bb = np.broadcast_to(b, (2, 3, 5))
        want = R.elementwise(1, R.values(a, 3, 8, True), R.values(bb, -2, 8, True), 8, True,
                             (3, 1, 1, 0), (5, 2, 0, 0), o, bytes(P.LUT_BYTES))
        assert same(out, want)
