"""NVDLA fixed-point primitives, as the hardware repository's C model computes them (cmod/hls
include/nvdla_int.h: IntShiftRight with ac_fixed AC_RND_INF and AC_SAT; facts, written here in
numpy over int64 arrays): every right shift in the data paths rounds half away from zero and the
result saturates to the stage's width; the line buffers and int8 stores of some stages wrap."""
from __future__ import annotations

import numpy as np

from ..jit import njit


def round_shift(v, shift: int):
    """v / 2^shift rounded half away from zero; a negative shift multiplies (CDP's slopes)."""
    v = np.asarray(v, np.int64)
    if shift <= 0:
        return v << -shift
    mag = (np.abs(v) + (np.int64(1) << (shift - 1))) >> shift
    return np.where(v < 0, -mag, mag)


def saturate(v, bits: int):
    """Clamp to the signed ``bits``-bit range."""
    return np.clip(v, -(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def wrap(v, bits: int):
    """Keep the low ``bits`` bits as a signed value (a store into a narrower register)."""
    half = np.int64(1) << (bits - 1)
    return ((np.asarray(v, np.int64) + half) & ((half << 1) - 1)) - half


def cdma_convert(v, offset, scale: int, shift: int) -> np.ndarray:
    """CDMA's input converter (cmod hls/cdma_libs/cdma_cvt.cpp): (v - offset) * scale, shifted
    right by ``shift`` rounding half away from zero, saturated to 17 bits, then to int8.
    ``offset`` broadcasts (the image path's per-element means)."""
    t = round_shift((np.asarray(v, np.int64) - offset) * scale, shift)
    return saturate(saturate(t, 17), 8).astype(np.int8)


# ------------------------------------------------------------------------------------------------
# CACC, SDP's X stages and its output converter, fused into one pass (issue 31 #2)

#: columns of a row of :func:`post_process`'s ``stages`` (one row per X stage, BS then BN)
STAGE_ON, STAGE_ALU, STAGE_ALU_SHIFT, STAGE_MUL, STAGE_MUL_SHIFT, STAGE_PRELU, STAGE_RELU = range(7)
#: STAGE_ALU's values: the ALU bypassed, MAX, MIN, SUM
ALU_CODES = {None: 0, "max": 1, "min": 2, "sum": 3}


@njit(nogil=True, cache=True)
def post_process(acc, k, add, clip, stages, bs_alu, bs_mul, bn_alu, bn_mul, offset, scale,
                 shift, c_n, h, w, words, base, line, surf):
    """An int8 cube [``c_n``, ``h``, ``w``] (``c_n`` a multiple of 8) stored into memory
    viewed as 8-byte ``words`` (uint64, little-endian) in surfaces of 8 channels: element
    (c, y, x) in byte c % 8 of word ``base + (c // 8)*surf + y*line + x`` (the in-memory
    feature layout with aligned atoms, offsets and strides counted in words; nothing else is
    written), from int32 sums ``acc`` [>= k, >= H, >= W] plus ``add`` [k] (int64,
    the sum wrapping to 32 bits; channels from ``k`` on read 0: the last atom's unused lanes):
    CACC (round_shift by ``clip``; its saturation to 32 bits cannot act on a sum wrapped to
    32 bits, so its count is 0 and not computed: 0.01 ms of the 64->64 3x3 layer),
    the X stages of ``stages`` (int64 [2, 7], columns STAGE_*; operands int64 [C or 1, H*W or
    1], per element, per channel or one value), the converter ((x - offset) * scale, round_shift
    by ``shift``, saturate to 17 then 8 bits). Returns the converter's 17-bit saturations
    (CACC's are 0: sdp.process gives that). The same arithmetic, value for value, as
    devices/nvdla/sdp.py states it from the C model (sdp_x.cpp, sdp_c.cpp, NV_NVDLA_cacc.cpp);
    one pass over the cube instead of a numpy pass (and a fresh int64 temporary) per operation:
    those took ~2 ms of a 64->64 3x3 layer whose convolution took 0.4 ms. Stored as it is
    computed: a cube and a second pass storing it (its atoms interleave 8 channel rows) took
    0.045 ms more of that layer."""
    ssat = 0
    staged = stages[0, STAGE_ON] != 0 or stages[1, STAGE_ON] != 0
    # the hot path written out (no calls, no branches on the data): LLVM vectorises it. A right
    # shift by s >= 1 rounding half away from zero is (v + 2^(s-1) - (v < 0)) >> s, one
    # arithmetic shift (v >> 63 is -1 for v < 0); clip is at most 16 (conv.decode) and shift
    # at most 63 (a 6-bit field), so plain shifts match numpy's
    half_clip = np.int64(1) << (clip - 1) if clip else np.int64(0)
    half_cvt = np.int64(1) << (shift - 1) if shift else np.int64(0)
    neg_clip, neg_cvt = np.int64(clip != 0), np.int64(shift != 0)
    lo32 = -(np.int64(1) << 31)
    # the converter's product as vpmuldq (signed 32 x 32 -> 64 bits) computes it, which AVX2
    # has; a 64 x 64-bit multiply is AVX-512's vpmullq, emulated on AVX2 by three vpmuludq
    # and shifts (issue 31: 82 -> 74 us of the 64->64 3x3 layer's pass there, the same on
    # AVX-512). Exact: (x - offset) * scale = x * scale - offset * scale, where x (CACC's or an
    # X stage's output) is within int32, scale is the 16-bit SDP_D_CVT_SCALE and offset the
    # 32-bit SDP_D_CVT_OFFSET (sdp.decode), so each product and the difference stay within
    # 2^47; LLVM picks vpmuldq when both factors are visibly sign-extended from 32 bits
    sc = np.int64(np.int32(scale))
    off_sc = offset * scale
    row = np.empty(w, np.int64)  # one row's values between the three loops
    # a surface's row of atoms: its 8 channels' rows, then interleaved into 8-byte words (a
    # store per byte at a stride of 8 did not vectorise: 0.03 ms more for 64x32x32)
    blk = np.zeros((8, w), np.uint8)
    for sf in range(c_n // 8):
        for y in range(h):
            for ci in range(8):
                c = sf * 8 + ci
                if c < k:
                    a = add[c]
                    for x in range(w):
                        v = ((acc[c, y, x] + a - lo32) & 0xFFFFFFFF) + lo32
                        row[x] = (v + half_clip - (v >> 63 & neg_clip)) >> clip
                else:  # the last atom's lanes without a kernel
                    row[:] = 0
                if staged:
                    _stage_row(row, stages, 0, bs_alu, bs_mul, c, y * w)
                    _stage_row(row, stages, 1, bn_alu, bn_mul, c, y * w)
                b = blk[ci]
                for x in range(w):
                    # the converter. The rounded shift is the floor shift f or f + 1, so the
                    # count |f - saturate(rounded, 17)| > 1 is f outside [-65537, 65536]; and
                    # saturating to 17 bits, then to 8, is saturating to 8
                    t = np.int64(np.int32(row[x])) * sc - off_sc
                    f = t >> shift
                    ssat += (f > 65536) | (f < -65537)
                    r = (t + half_cvt - (t >> 63 & neg_cvt)) >> shift
                    b[x] = np.uint8(min(max(r, -128), 127) & 0xFF)
            o = base + sf * surf + y * line
            dst = words[o:o + w]  # a view: indices from a range vectorise
            for x in range(w):
                dst[x] = (np.uint64(blk[0, x]) | np.uint64(blk[1, x]) << 8
                          | np.uint64(blk[2, x]) << 16 | np.uint64(blk[3, x]) << 24
                          | np.uint64(blk[4, x]) << 32 | np.uint64(blk[5, x]) << 40
                          | np.uint64(blk[6, x]) << 48 | np.uint64(blk[7, x]) << 56)
    return ssat


@njit(nogil=True, cache=True)
def _stage_row(row, stages, s, a_op, m_op, c, p0):
    """X stage ``s`` (a row of ``stages``; 0 BS, 1 BN) over ``row``, the values of channel
    ``c`` at elements p0, p0 + 1, ... (operands [C or 1, H*W or 1]). A row at a time: one
    call per row, not per value (a call per value passing the operand arrays cost 20x the
    arithmetic); one function for both stages, no helpers (each jitted function costs ~0.3 s
    to compile on a first run)."""
    if stages[s, STAGE_ON] == 0:
        return
    lo32, hi32 = -(np.int64(1) << 31), (np.int64(1) << 31) - 1
    alu, mul = stages[s, STAGE_ALU], stages[s, STAGE_MUL] != 0
    alu_shift = min(stages[s, STAGE_ALU_SHIFT], 32)  # |operand| < 2**15: past 32 it saturates
    mul_shift = stages[s, STAGE_MUL_SHIFT]
    prelu, relu = stages[s, STAGE_PRELU] != 0, stages[s, STAGE_RELU] != 0
    ac = c if a_op.shape[0] > 1 else 0
    mc = c if m_op.shape[0] > 1 else 0
    for x in range(row.shape[0]):
        v = row[x]
        if alu != 0:
            a = a_op[ac, p0 + x if a_op.shape[1] > 1 else 0]
            a = min(max(a << alu_shift, lo32), hi32)
            v = max(v, a) if alu == 1 else min(v, a) if alu == 2 else v + a
        # the product (or v) shifted right rounding half away from zero, exactly: 0 once the
        # 8-bit MUL shift reaches 64 (|t| < 2**62; numpy's 1 << 63 had wrapped there)
        t = v * m_op[mc, p0 + x if m_op.shape[1] > 1 else 0] if mul else v
        r = t
        if mul_shift >= 64:
            r = np.int64(0)
        elif mul_shift > 0:
            mag = (abs(t) + (np.int64(1) << (mul_shift - 1))) >> mul_shift
            r = -mag if t < 0 else mag
        r = min(max(r, lo32), hi32)
        v = ((v - lo32) & 0xFFFFFFFF) + lo32 if mul and prelu and v >= 0 else r
        row[x] = max(v, 0) if relu else v
