"""CACC, SDP's X stages and its converter in one pass (emu/numeric/nvdla.py post_process, issue
31 #2), value for value against the independent integer reference (testkit/nvdla_reference.py
cacc and sdp), over random sums, stage settings, operand kinds and shifts up to the fields'
widths; feature cubes read and written through strided views as the reference packs them;
and the layer path around the kernel: weights packed once while their bytes stay the same, each
layer's registers decoded once while they keep their values, and afresh when they change."""
from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from unittest.mock import patch

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelstub.devices.nvdla import conv as C
from accelstub.devices.nvdla import feature as F
from accelstub.devices.nvdla import sdp as S
from accelstub.devices.nvdla.feature import ATOM
from accelstub.emu.conv import int_conv as IC
from accelstub.testkit import nvdla_reference as ref

OPERAND = st.integers(-(1 << 15), (1 << 15) - 1)


def hwc(acc: np.ndarray) -> np.ndarray:
    """Sums [K, H, W] as the convolution's work array that S.process takes: channels last
    (conv.convolve)."""
    return np.ascontiguousarray(acc.transpose(1, 2, 0))


@st.composite
def stages(draw, c: int, h: int, w: int, rng: np.random.Generator):
    """(our Stage, the reference's XStage, our operands) of one random X stage."""
    alu = draw(st.sampled_from([None, "max", "min", "sum"]))
    mul = draw(st.booleans())
    kind = draw(st.sampled_from(["reg", "kernel", "element"]))

    def operand():
        if kind == "reg":
            v = draw(OPERAND)
            return v, v
        shape = (c, 1, 1) if kind == "kernel" else (c, h, w)
        a = rng.integers(-(1 << 15), 1 << 15, shape, dtype=np.int64)
        return a, (a[:, 0, 0] if kind == "kernel" else a)

    (a_ours, a_ref), (m_ours, m_ref) = operand(), operand()
    alu_shift = draw(st.integers(0, 63))  # 6-bit field
    mul_shift = draw(st.sampled_from([0, 1, 5, 17, 31, 62, 63, 64, 65, 255]))  # 8-bit field
    prelu, relu = mul and draw(st.booleans()), draw(st.booleans())
    ours = S.Stage("BS", alu, False, 0, alu_shift, mul, False, 0, mul_shift, prelu, relu, None)
    theirs = ref.XStage(alu=alu, alu_operand=a_ref, alu_shift=alu_shift, mul=mul,
                        mul_operand=m_ref, mul_shift=mul_shift, prelu=prelu, relu=relu)
    return ours, theirs, (a_ours, m_ours)


def draw_case(data, rng, k_max: int, h_max: int, w_max: int, shift_max: int) -> tuple:
    """A random flying SDP layer: k, h, w, its lanes, CACC's clip, the kernel's work array
    (channels last, more rows, columns and channels than the cube, as conv_sums leaves it),
    the adds, 0-2 X stages (drawn by :func:`stages`), the converter and the SdpConfig."""
    k = data.draw(st.integers(1, k_max), "k")
    h, w = data.draw(st.integers(1, h_max), "h"), data.draw(st.integers(1, w_max), "w")
    lanes = -(-k // ATOM) * ATOM
    clip = data.draw(st.integers(0, 16), "clip")  # CACC_D_CLIP_CFG: at most 16
    acc = rng.integers(-(1 << 31), 1 << 31, (k + 2, h + 1, w + 3), dtype=np.int64)
    acc = acc.astype(np.int32)
    add = rng.integers(-(1 << 33), 1 << 33, k, dtype=np.int64)
    drawn = [data.draw(stages(lanes, h, w, rng), f"stage {i}")
             for i in range(data.draw(st.integers(0, 2), "stages"))]
    cvt = (data.draw(st.integers(-(1 << 31), (1 << 31) - 1), "offset"),
           data.draw(OPERAND, "scale"), data.draw(st.integers(0, shift_max), "shift"))
    cfg = S.SdpConfig(w, h, k, True, False, None, (0, 0, 0), tuple(s for s, _, _ in drawn), cvt)
    return k, h, w, lanes, clip, acc, add, drawn, cvt, cfg


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_fused_post_process_equals_the_reference_value_for_value(data, seed):
    rng = np.random.default_rng(seed)
    k, h, w, lanes, clip, acc, add, drawn, cvt, cfg = draw_case(data, rng, 19, 4, 5, 63)
    # the operands as SDP_RDMA would give them (per channel [C, 1, 1], per element [C, H, W])
    with patch.object(S, "operands", side_effect=[ops for _, _, ops in drawn]):
        out, sat, cacc_sat = S.process(cfg, hwc(acc), None, k=k, add=add, clip=clip)

    wrapped = ((acc[:k, :h, :w].astype(np.int64) + add[:, None, None] + (1 << 31))
               & 0xFFFFFFFF) - (1 << 31)
    cacc = np.vectorize(lambda v: ref.cacc(int(v), clip), otypes=[object])(wrapped)
    values = np.zeros((lanes, h, w), object)
    values[:k] = cacc
    want, want_sat = ref.sdp_counted(values, ref.SdpRef([t for _, t, _ in drawn], cvt))
    assert np.array_equal(out.astype(np.int64), want)
    shifted = np.vectorize(lambda v: ref.rshift_round(int(v), clip), otypes=[object])(wrapped)
    assert cacc_sat == int(np.count_nonzero(shifted != cacc))
    assert out.shape == (lanes, h, w) and out.dtype == np.int8
    assert isinstance(sat, int) and sat == want_sat


@settings(max_examples=60, deadline=None)
@given(k=st.integers(1, 19), h=st.integers(1, 4), w=st.integers(1, 5),
       pad_line=st.integers(0, 24), pad_surf=st.integers(0, 40), offset=st.integers(0, 19),
       aligned=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_sdp_stores_in_place_as_write_feature_stores_its_cube(k, h, w, pad_line, pad_surf,
                                                               offset, aligned, seed):
    """S.process with ``dst`` stores the cube into memory as it computes it: the same bytes as
    the cube it returns without ``dst``, stored by F.write_feature, and nothing between the
    atoms changes; placements whose atoms are aligned 8-byte words (stored by the kernel as
    words) and others (stored from the cube)."""
    rng = np.random.default_rng(seed)
    if aligned:
        offset, pad_line, pad_surf = offset // 8 * 8, pad_line // 8 * 8, pad_surf // 8 * 8
    lanes = -(-k // ATOM) * ATOM
    line = w * ATOM + pad_line
    surf = h * line + pad_surf
    acc = rng.integers(-(1 << 20), 1 << 20, (k + 2, h, w + 3), dtype=np.int64).astype(np.int32)
    cfg = S.SdpConfig(w, h, k, True, False, None, (0, 0, 0), (), (3, 5, 2))
    add = rng.integers(-1000, 1000, k, dtype=np.int64)
    cube, sat, cacc_sat = S.process(cfg, hwc(acc), None, k=k, add=add, clip=1)
    size = offset + F.feature_span(lanes, h, w, line, surf) + 8
    mem = rng.integers(0, 256, -(-size // 8) * 8 if aligned else size, dtype=np.uint8)
    want = mem.copy()
    F.write_feature(want, offset, cube, line, surf)
    got, sat2, cacc_sat2 = S.process(cfg, hwc(acc), None, k=k, add=add, clip=1,
                                     dst=(mem, offset, line, surf))
    assert got is None and (sat2, cacc_sat2) == (sat, cacc_sat)
    assert mem.tobytes() == want.tobytes()


def test_converter_saturations_are_counted_against_the_floor_shift():
    """SDP_D_PERF_OUT_SATURATION counts values whose 17-bit saturation moved them by more than
    the rounding (|x >> shift - t17| > 1): with shift 0, 70000 and -70000 are, 65536 (moved by
    one) is not."""
    cfg = S.SdpConfig(4, 1, 8, True, False, None, (0, 0, 0), (), (0, 1, 0))
    acc = np.array([70000, -70000, 65535, -65536, 65536, 5, -5, 0], np.int32).reshape(8, 1, 1)
    acc = np.repeat(acc, 4, axis=2)
    out, sat, cacc_sat = S.process(cfg, hwc(acc), lambda *a: None, k=8,
                                   add=np.zeros(8, np.int64))
    assert sat == 2 * 4 and cacc_sat == 0
    assert out[:, 0, 0].tolist() == [127, -128, 127, -128, 127, 5, -5, 0]


def _post_processed(acc: np.ndarray, add: np.ndarray, clip: int, cvt: tuple[int, int, int]
                    ) -> tuple[np.ndarray, int, np.ndarray, int]:
    """(ours, our converter saturations, the reference's, its count) for sums ``acc`` [K, 1, 1]
    plus ``add`` [K], no X stage."""
    k = acc.shape[0]
    cfg = S.SdpConfig(1, 1, k, True, False, None, (0, 0, 0), (), cvt)
    out, sat, cacc_sat = S.process(cfg, hwc(acc), None, k=k, add=add, clip=clip)
    assert cacc_sat == 0
    wrapped = ((acc.astype(np.int64)[:, 0, 0] + add + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
    values = np.zeros(out.shape, object)
    values[:k, 0, 0] = [ref.cacc(int(v), clip) for v in wrapped]
    want, want_sat = ref.sdp_counted(values, ref.SdpRef([], cvt))
    return out.astype(np.int64), sat, want, want_sat


def test_post_process_rounds_and_saturates_at_the_edges_as_the_reference():
    """The one-shift rounding ((v + 2^(s-1) - (v < 0)) >> s), CACC without its 32-bit
    saturation (a sum wrapped to 32 bits cannot reach it) and the converter's saturation count
    taken from the floor shift alone, at the values where they could differ from the
    reference: sums half a step either side of every rounding boundary of each CLIP_TRUNCATE
    (0..16) and at the ends of the 32-bit range; converter inputs at the 8- and 17-bit edges of
    each shift 0..63 and at extreme offsets and scales. CACC's values are also checked at full
    width (the converter's offset set to the reference's value)."""
    lo, hi = -(1 << 31), (1 << 31) - 1
    for clip in range(17):
        half = (1 << clip) >> 1
        sums = {lo, lo + 1, hi, hi - 1, 0, 1, -1}
        sums |= {m * (1 << clip) + d * half + e for m in (-129, -128, -1, 0, 1, 127, 128)
                 for d in (-1, 1) for e in (-1, 0, 1)}
        sums = sorted(v for v in sums if lo <= v <= hi)
        acc = np.array(sums, np.int64).astype(np.int32).reshape(-1, 1, 1)
        for add in (0, 1, -(1 << 32) + 3):  # adds that wrap the sum
            got, sat, want, want_sat = _post_processed(acc, np.full(len(sums), add), clip,
                                                       (0, 1, 0))
            assert np.array_equal(got, want) and sat == want_sat, (clip, add)
        # the 8-bit output shows CACC's value only near 0: each sum once more, with the
        # converter's offset at the reference's CACC value, so a CACC value one off at any
        # magnitude shows as +-1 instead of a saturated byte
        for v in sums:
            offset = ref.cacc(v, clip)
            got, sat, want, want_sat = _post_processed(
                np.full((1, 1, 1), v, np.int32), np.zeros(1, np.int64), clip, (offset, 1, 0))
            assert np.array_equal(got, want) and sat == want_sat, (clip, v)
            assert got[0, 0, 0] == 0, (clip, v)  # lane 0; the other lanes read 0 - offset
    for offset in (0, 3, lo, hi):
        for scale in (1, -1, 0, 7, (1 << 15) - 1, -(1 << 15)):
            for shift in range(64):
                r = {lo, lo + 1, hi, hi - 1, 0, offset - 1, offset, offset + 1}
                if scale:
                    for m in (-65538, -65537, -65536, -129, -128, 127, 128, 65535, 65536, 65537):
                        r |= {offset + (m << shift) // scale + e for e in (-1, 0, 1)}
                r = sorted(v for v in r if lo <= v <= hi)
                zeros = np.zeros((len(r), 1, 1), np.int32)
                got, sat, want, want_sat = _post_processed(zeros, np.array(r, np.int64), 0,
                                                           (offset, scale, shift))
                assert np.array_equal(got, want) and sat == want_sat, (offset, scale, shift)


def test_converter_products_at_the_int32_and_16_bit_ends_equal_the_reference():
    """The converter's product taken as x * scale - offset * scale with x and scale
    sign-extended from 32 bits (vpmuldq on AVX2, issue 31), for converter inputs at both ends
    of int32 as CACC and the X stages leave them (an ALU sum and a MUL product saturating to
    int32, PReLU's wrapped non-negative sums, and no stage), with offsets at the ends of the
    32-bit SDP_D_CVT_OFFSET, scales at the ends of the 16-bit SDP_D_CVT_SCALE and every shift
    0..63: each byte and the 17-bit saturation count (floor shift) equal the reference's
    (the products reach |(x - offset) * scale| = (2^32 - 1) * 2^15)."""
    lo, hi = -(1 << 31), (1 << 31) - 1
    sums = np.array([lo, lo + 1, -65537, -2, -1, 0, 1, 65536, hi - 1, hi], np.int64)
    acc = np.tile(sums, (ATOM, 1)).astype(np.int32).reshape(ATOM, 1, -1)
    w = acc.shape[2]
    ends = np.array([0, 1, -1, (1 << 15) - 1, -(1 << 15), 3, -3, 2], np.int64)  # per channel
    variants = [None,  # no stage: the sums themselves
                ("sum", 32, True, False),  # +-2^15 << 32 saturated, PReLU wraps sums >= 0
                ("sum", 16, True, False),
                (None, 0, True, False),  # products saturated to int32, PReLU
                ("max", 31, False, True)]  # ALU max, then ReLU
    for variant in variants:
        stages, ours = [], ()
        if variant is not None:
            alu, alu_shift, mul, relu = variant
            ours = (S.Stage("BS", alu, False, 0, alu_shift, True, False, 0, 0, mul, relu, None),)
            stages = [ref.XStage(alu=alu, alu_operand=ends, alu_shift=alu_shift, mul=True,
                                 mul_operand=ends[::-1].copy(), mul_shift=0, prelu=mul,
                                 relu=relu)]
            operands = (ends.reshape(-1, 1, 1), ends[::-1].reshape(-1, 1, 1))
        for offset in (lo, hi, 0, -1, 1):
            for scale in (-(1 << 15), (1 << 15) - 1, -1, 1, 0):
                for shift in range(64):
                    cvt = (offset, scale, shift)
                    cfg = S.SdpConfig(w, 1, ATOM, True, False, None, (0, 0, 0), ours, cvt)
                    with patch.object(S, "operands", return_value=operands if ours else None):
                        out, sat, _ = S.process(cfg, hwc(acc), None, k=ATOM,
                                                add=np.zeros(ATOM, np.int64), clip=0)
                    want, want_sat = ref.sdp_counted(acc.astype(np.int64).astype(object),
                                                     ref.SdpRef(stages, cvt))
                    assert np.array_equal(out.astype(np.int64), want), (variant, cvt)
                    assert sat == want_sat, (variant, cvt)


def _wrap32(v: int) -> int:
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def test_float64_form_is_exact_at_the_limits_of_its_proof():
    """post_process computes CACC and the converter in float64 lanes (its docstring proves each
    step exact; issue 31). At the limits of that proof each byte and the 17-bit count equal
    the reference's: CACC sums on, one below and one above every rounding tie of each
    CLIP_TRUNCATE 0..16, including the ties nearest both int32 ends, and the ends themselves,
    each reached through adds that wrap the sum (acc + add leaves int32); converter products
    (x - offset) * scale with offsets +-2^31, scales +-2^15 and inputs at the int32 ends (up to
    (2^32 - 1) * 2^15), on and either side of the ties of shifts 0, 1 and 46..63 (from 48 on
    no tie is reachable: the clamp of the shift to 48) and of the floor shift's 17-bit bounds."""
    lo, hi = -(1 << 31), (1 << 31) - 1
    adds = (0, 1 << 32, (1 << 31) + 5, lo, -(1 << 33) + 7, hi)
    for clip in range(17):
        half = (1 << clip) >> 1
        ms = {0, 1, 2, 127, 128, (hi - half) >> clip, ((hi - half) >> clip) - 1}
        sums = {lo, lo + 1, hi, hi - 1, 0, 1, -1}
        sums |= {sign * (m * (1 << clip) + half) + e
                 for m in ms for sign in (1, -1) for e in (-1, 0, 1)}
        for v in sorted(s for s in sums if lo <= s <= hi):
            # every channel's wrapped sum is v; the converter's offset at the reference's CACC
            # value turns a CACC value one off at any magnitude into a byte +-1 instead of 0
            acc = np.array([_wrap32(v - a) for a in adds], np.int64).astype(np.int32)
            got, sat, want, want_sat = _post_processed(
                acc.reshape(-1, 1, 1), np.array(adds, np.int64), clip, (ref.cacc(v, clip), 1, 0))
            assert np.array_equal(got, want) and sat == want_sat, (clip, v)
            assert not got[:len(adds), 0, 0].any(), (clip, v)
    for offset in (lo, hi, 0, -1):
        for scale in (1, -1, (1 << 15) - 1, -(1 << 15)):
            for shift in (0, 1, *range(46, 64)):
                s = min(shift, 48)
                ts = {-65537 << s, (65537 << s) - 1, (-65537 << s) - 1, 65537 << s,
                      -128 << s, 127 << s}  # the 17-bit bounds of the floor shift, the int8 ends
                if shift:
                    ts |= {sign * (m << shift | 1 << (shift - 1))  # ties, the largest last
                           for m in (0, 1, 127, 128, 65536, (1 << 47 >> shift) - 1)
                           for sign in (1, -1)}
                qs = {0, 1, -1, lo - offset, lo + 1 - offset, hi - offset, hi - 1 - offset}
                qs |= {t // scale + e for t in ts for e in (-1, 0, 1)}
                xs = sorted(offset + q for q in qs if lo <= offset + q <= hi)
                got, sat, want, want_sat = _post_processed(
                    np.zeros((len(xs), 1, 1), np.int32), np.array(xs, np.int64), 0,
                    (offset, scale, shift))
                assert np.array_equal(got, want) and sat == want_sat, (offset, scale, shift)


def test_weights_are_decoded_and_packed_once_while_their_bytes_stay_the_same():
    """read_weights gives the same read-only array for the same bytes, so the kernel's packed
    form (kept per read-only array) is made once; other bytes give another array."""
    cfg = _conv_config(k=9, c=5, r=3, s=3)
    raw = np.random.default_rng(3).integers(0, 256, 9 * 5 * 9, dtype=np.uint8)
    first = C.read_weights(cfg, raw)
    again = C.read_weights(cfg, raw.copy())
    assert again is first and not first.flags.writeable
    assert IC.packed_weights(again) is IC.packed_weights(first)
    changed = raw.copy()
    changed[7] ^= 1
    other = C.read_weights(cfg, changed)
    assert other is not first
    assert int(np.count_nonzero(other != first)) == 1
    # two layers of one shape at two addresses keep one array each
    elsewhere = replace(cfg, wt_addr=0x1000)
    assert C.read_weights(elsewhere, raw) is not C.read_weights(cfg, changed)
    assert C.read_weights(elsewhere, raw) is C.read_weights(elsewhere, raw.copy())
    assert C.read_weights(cfg, changed) is other


def _conv_config(k: int, c: int, r: int, s: int) -> C.ConvConfig:
    return C.ConvConfig(w=4, h=4, c=c, k=k, r=r, s=s, batches=1, in_addr=0, line=32, surf=128,
                        wt_addr=0, stride=(1, 1), dilation=(1, 1), pad=(0, 0, 0, 0),
                        pad_value=0, out_w=2, out_h=2, clip=0, cvt=None, pixel=None, kc=c,
                        y_ext=1, reuse=(False, False), keep=(False, False), bank=0)


@settings(max_examples=80, deadline=None)
@given(c=st.integers(1, 21), h=st.integers(1, 4), w=st.integers(1, 5),
       pad_line=st.integers(-8, 24), pad_surf=st.integers(-40, 40), offset=st.integers(0, 19),
       seed=st.integers(0, 2**32 - 1))
def test_feature_cubes_read_and_write_as_the_reference_packs_them(c, h, w, pad_line, pad_surf,
                                                                  offset, seed):
    """F.read_feature (both layouts) and F.write_feature through strided views agree with the
    reference's byte-by-byte packing (testkit/nvdla_reference.py feature_offset), for aligned
    and unaligned placements, partial last surfaces, and strides where lines or surfaces
    overlap (the write then keeps what the reference's element order keeps)."""
    rng = np.random.default_rng(seed)
    line = max(1, w * ATOM + pad_line)
    surf = max(1, h * line + pad_surf)
    cube = rng.integers(-128, 128, (c, h, w)).astype(np.int8)
    data = rng.integers(0, 256, offset + F.feature_span(c, h, w, line, surf) + 8, dtype=np.uint8)
    want = data.copy()
    for ci in range(c):  # element order, as the reference writes them
        for y in range(h):
            for x in range(w):
                want[offset + ref.feature_offset(ci, y, x, line, surf)] = int(cube[ci, y, x]) & 0xFF
    F.write_feature(data, offset, cube, line, surf)
    assert np.array_equal(data, want)
    raw = bytes(data[offset:])
    expect = ref.unpack_feature(raw, c, h, w, line, surf)
    for channels_last in (False, True):
        got = F.read_feature(data, offset, c, h, w, line, surf, channels_last)
        assert got.dtype == np.int8 and got.shape == (c, h, w)
        assert np.array_equal(got.astype(np.int64), expect)
        if channels_last and c % ATOM == 0:  # the kernel's input layout: not copied again
            assert got.transpose(1, 2, 0).flags.c_contiguous


@settings(max_examples=60, deadline=None)
@given(atoms=st.integers(1, 5), h=st.integers(1, 5), w=st.integers(1, 6),
       pad_line=st.integers(-2, 3), pad_surf=st.integers(-6, 6), offset=st.integers(0, 4),
       lead=st.integers(0, 9), seed=st.integers(0, 2**32 - 1))
def test_aligned_cubes_read_channels_last_as_the_reference_packs_them(atoms, h, w, pad_line,
                                                                      pad_surf, offset, lead,
                                                                      seed):
    """The convolution input's path of F.read_feature (whole atoms, atom-aligned offset,
    line and surface strides: one 8-byte move per atom, issue 31 #2) against the reference's
    byte-by-byte unpacking, overlapping strides and memories that are views at any byte
    (``lead``) included."""
    rng = np.random.default_rng(seed)
    c, off = atoms * ATOM, offset * ATOM
    line = max(1, w + pad_line) * ATOM
    surf = max(1, h * line // ATOM + pad_surf) * ATOM
    mem = rng.integers(0, 256, lead + off + F.feature_span(c, h, w, line, surf), dtype=np.uint8)
    data = mem[lead:]
    got = F.read_feature(data, off, c, h, w, line, surf, channels_last=True)
    expect = ref.unpack_feature(bytes(data[off:]), c, h, w, line, surf)
    assert got.dtype == np.int8 and got.shape == (c, h, w)
    assert np.array_equal(got.astype(np.int64), expect)
    assert got.transpose(1, 2, 0).flags.c_contiguous


def test_a_layer_decodes_its_registers_once_and_the_next_layer_afresh(monkeypatch):
    """The listing, the tensors and the run share one decode per layer (Nvdla._memoised); the
    next layer, with other registers, is decoded again (its output still passes the CRC)."""
    from accelstub.devices import open_device
    from accelstub.devices.runcontrol import RunControl
    from accelstub.stub.commands import CommandContext
    from accelstub.stub.program import load_program
    from accelstub.testkit.nvdla_build import Conv, build

    trace = build([Conv(9, 7, 16, 16, clip=3), Conv(6, 5, 8, 9, clip=2, cvt=(1, 2, 1))],
                  "decode_once", seed=2).write(Path(tempfile.mkdtemp()) / "t")
    rc = RunControl(open_device("nvdla"))
    load_program(CommandContext([rc]), trace)
    decoded = []
    conv_decode = C.decode
    monkeypatch.setattr(C, "decode", lambda reg: decoded.append(conv_decode(reg)) or decoded[-1])
    stop = rc.run_here()
    assert stop.reason == "done" and rc.host.ok
    assert any("PASS" in r.line for r in rc.host.results)
    assert [(d.c, d.k) for d in decoded] == [(16, 16), (8, 9)]
    # the listing was written from the same decodes, layer by layer
    summaries = [u.summary for u in rc.device.units()]
    assert "16x7x9 -> 16x7x9" in summaries[0] and "(x-0)*1>>0" in summaries[0]
    assert "8x5x6 -> 9x5x6" in summaries[1] and "(x-1)*2>>1" in summaries[1]


def test_decodes_are_kept_on_register_values_over_runs_and_programs(monkeypatch):
    """Nvdla._memoised keeps a decode while the registers it read keep their values: a program
    rewound and run again (as `accelstub eval` does per sample) decodes nothing; another
    trace loaded on the same device after a reset (other register values) is decoded afresh
    and passes its CRC; the first trace loaded again finds its decode kept and passes its CRC
    too."""
    from accelstub.devices import open_device
    from accelstub.devices.runcontrol import RunControl
    from accelstub.stub.commands import CommandContext
    from accelstub.stub.program import load_program
    from accelstub.testkit.nvdla_build import Conv, build

    tmp = Path(tempfile.mkdtemp())
    first = build([Conv(9, 7, 16, 16, clip=3)], "memo_a", seed=4).write(tmp / "a")
    second = build([Conv(9, 7, 16, 16, clip=2, cvt=(1, 2, 1))], "memo_b", seed=5).write(tmp / "b")
    rc = RunControl(open_device("nvdla"))
    ctx = CommandContext([rc])
    decoded = []
    conv_decode = C.decode
    monkeypatch.setattr(C, "decode", lambda reg: decoded.append(conv_decode(reg)) or decoded[-1])

    def run() -> list[C.ConvConfig]:
        """The decodes of the run (loading a trace also decodes: on the planner's device)."""
        before = len(decoded)
        stop = rc.run_here()
        assert stop.reason == "done" and rc.host.ok
        assert any("PASS" in r.line for r in rc.host.results)
        return decoded[before:]

    load_program(ctx, first)
    armed = rc.checkpoint()
    assert [d.clip for d in run()] == [3]
    rc.rewind(armed)
    assert run() == []  # the same register values: nothing decoded again
    rc.device.reset("halt")  # a trace starts from reset
    load_program(ctx, second)
    assert [d.clip for d in run()] == [2]
    rc.device.reset("halt")
    load_program(ctx, first)
    assert run() == []
