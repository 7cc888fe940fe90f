"""NVDLA fixed-point primitives, as the hardware repository's C model computes them (cmod/hls
include/nvdla_int.h: IntShiftRight with ac_fixed AC_RND_INF and AC_SAT; facts, written here in
numpy over int64 arrays): every right shift in the data paths rounds half away from zero and the
result saturates to the stage's width; the line buffers and int8 stores of some stages wrap."""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from ..jit import njit
from ..ranged import call_ranged, ranged, ranged_wrapper


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


@ranged(fastmath={"contract"})
def post_process(acc, k, add, clip, stages, bs_alu, bs_mul, bn_alu, bn_mul, offset, scale,
                 shift, c_n, h, w, words, base, line, surf, parts, start, stop):
    """Rows ``start`` to ``stop`` (all of them: 0 to ``h``; :func:`post_process_parallel`
    gives each of its ``parts`` a range: ``parts`` is its argument, unused here, since a
    body takes its wrapper's arguments, emu/ranged.py) of an int8 cube [``c_n``, ``h``,
    ``w``] (``c_n`` a multiple of 8) stored into memory viewed as 8-byte ``words`` (uint64,
    little-endian) in surfaces of 8 channels: element (c, y, x) in byte c % 8 of word
    ``base + (c // 8)*surf + y*line + x`` (the in-memory feature layout with aligned atoms,
    offsets and strides counted in words; nothing else is written), from int32 sums ``acc``
    [>= H, >= W, >= k] (channels last: the convolution's hwc work array) plus ``add`` [k]
    (int64, the sum wrapping to 32 bits; channels from ``k`` on read 0: the last atom's
    unused lanes): CACC (round_shift by ``clip``; its saturation to 32 bits cannot act on a
    sum wrapped to 32 bits, so its count is 0 and not computed: 0.01 ms of the 64->64 3x3
    layer), the X stages of ``stages`` (int64 [2, 7], columns STAGE_*; operands int64
    [C or 1, H*W or 1], per element, per channel or one value), the converter ((x - offset)
    * scale, round_shift by ``shift``, saturate to 17 then 8 bits). Returns the converter's
    17-bit saturations (CACC's are 0: sdp.process gives that). The same arithmetic, value for
    value, as devices/nvdla/sdp.py states it from the C model (sdp_x.cpp, sdp_c.cpp,
    NV_NVDLA_cacc.cpp);
    one pass over the cube instead of a numpy pass (and a fresh int64 temporary) per operation:
    those took ~2 ms of a 64->64 3x3 layer whose convolution took 0.4 ms. Stored as it is
    computed: a cube and a second pass storing it took 0.045 ms more of that layer. Channels
    last because an atom's 8 bytes are then adjacent in a row's bytes (its store is one word)
    and a row's sums are read in order: 54 -> 40 us for that layer's 64x32x32 under the AVX2
    approximation, 41 -> 32 us with AVX-512, against channel-first sums, whose 8 channel rows
    had to be interleaved byte by byte.

    Why float64 (issue 31: AVX2 has no 64-bit multiply or arithmetic shift, LLVM emulated
    them; the pass took 74 us of the 64->64 3x3 layer there, 52 us this way, and 41 -> 39 us
    with AVX-512): CACC and the converter run in float64 lanes, every step exact because every
    value is an integer (or an integer times a power of two) below 2^53:

    - CACC: v = the sum wrapped to int32 (int32 arithmetic: the low 32 bits of a sum depend
      only on the operands' low 32 bits), |v| <= 2^31; with h = 2^(clip-1) (0 for clip 0,
      clip <= 16 [NVDLA-CONV: CACC_D_CLIP_CFG], conv.decode), v + copysign(h, v) is an integer
      below 2^32, times 2^-clip is exact (a power of two, no underflow), and truncating it is
      round_shift: for v >= 0 trunc((v + h) / 2^clip) = floor, for v < 0 -floor((-v + h) /
      2^clip), rounding half away from zero. The result is within int32 (|.| <= 2^30 + 2^14
      for clip >= 1), so the X stages read it as an integer exactly.
    - converter: scale is the 16-bit SDP_D_CVT_SCALE and offset the 32-bit SDP_D_CVT_OFFSET
      (sdp.decode), x within int32 (CACC's or an X stage's output), so x * scale and offset *
      scale are below 2^46 and t = x * scale - offset * scale = (x - offset) * scale is an
      integer below (2^32 - 1) * 2^15 < 2^47: exact, also as one fused multiply-add (the
      ``contract`` flag lets LLVM fuse it; an FMA rounds once, and t needs no rounding).
      For shift >= 48 |t| < 2^(shift-1), so the rounded shift is 0 and the floor shift 0 or
      -1 (never counted), as with shift 48: s = min(shift, 48). Then t + copysign(2^(s-1),
      t) is an integer below 2^48, times 2^-s exact, truncated the rounded shift (as CACC's);
      clamping to [-128, 127] before the truncation equals clamping after (both monotone,
      integer bounds), and saturating to 17 then 8 bits is saturating to 8. The 17-bit count:
      the floor shift f = floor(t / 2^s) is above 65536 iff t >= 65537 * 2^s and below -65537
      iff t < -65537 * 2^s (bounds exact: 17 significant bits); the rounded value is f or
      f + 1, so |f - saturate(rounded, 17)| > 1 is f outside [-65537, 65536].
    All of it is AVX2 (vcvtdq2pd, vfmsub, vaddpd, vmulpd, vroundpd, vcmppd, vcvttpd2dq), four
    lanes a ymm register. Int32 or int64 forms that were faster on AVX2 were slower on
    AVX-512, where the 64-bit operations are single instructions (design notes, "NVDLA
    post_process's converter product in AVX2 lanes")."""
    ssat = 0
    staged = stages[0, STAGE_ON] != 0 or stages[1, STAGE_ON] != 0
    # the hot path written out (no calls, no branches on the data): LLVM vectorises it. Powers
    # of two by ldexp (``2.0 ** n`` compiled a slower, larger pow)
    lo32 = np.int64(1) << 31
    half_clip = math.ldexp(0.5, clip) if clip else 0.0
    inv_clip = math.ldexp(1.0, -clip)
    s = min(shift, 48)
    half_cvt = math.ldexp(0.5, s) if s else 0.0
    inv_cvt = math.ldexp(1.0, -s)
    sat_hi = math.ldexp(65537.0, s)
    scf = float(scale)
    off_scf = float(offset * scale)
    # a row's values (CACC's, then the X stages'), channels last as in ``acc``: (x, c) at
    # x*c_n + c, kept as float64, which the converter reads without a conversion (49 -> 42 us
    # with AVX-512); then its bytes, in the same order, so that (x, atom sf) is word
    # x*(c_n // 8) + sf of them. Lanes from k on: 0, never written unless an X stage writes
    # them (then zeroed again for each row)
    a32 = np.zeros(c_n, np.int32)  # the adds, wrapped to int32
    for c in range(k):
        a32[c] = np.int32(((add[c] + lo32) & 0xFFFFFFFF) - lo32)
    vals = np.zeros(w * c_n, np.float64)
    blk = np.empty(w * c_n, np.uint8)
    atoms = blk.view(np.uint64)
    na = c_n // 8
    for y in range(start, stop):
        for x in range(w):
            src = acc[y, x]
            row = vals[x * c_n:x * c_n + k]
            for c in range(k):
                v = float(np.int32(src[c] + a32[c]))
                row[c] = np.trunc((v + np.copysign(half_clip, v)) * inv_clip)
        if staged:
            for c in range(c_n):
                col = vals[c::c_n]  # channel c along the row
                if c >= k:
                    col[:] = 0.0
                _stage_row(col, stages, 0, bs_alu, bs_mul, c, y * w)
                _stage_row(col, stages, 1, bn_alu, bn_mul, c, y * w)
        for i in range(w * c_n):  # the converter
            t = vals[i] * scf - off_scf
            ssat += (t >= sat_hi) | (t < -sat_hi)
            r = (t + np.copysign(half_cvt, t)) * inv_cvt
            blk[i] = np.uint8(np.int32(min(max(r, -128.0), 127.0)) & 0xFF)
        for sf in range(na):
            o = base + sf * surf + y * line
            dst = words[o:o + w]
            for x in range(w):
                dst[x] = atoms[x * na + sf]
    return ssat


@ranged_wrapper(post_process, nogil=True, parallel=True, cache=True)
def post_process_parallel(acc, k, add, clip, stages, bs_alu, bs_mul, bn_alu, bn_mul, offset,
                          scale, shift, c_n, h, w, words, base, line, surf, parts):
    """:func:`post_process` of every row, the rows split into ``parts`` even ranges (the
    launch's numba threads, an argument: numba's get_num_threads called in here made the
    kernel uncachable, a ctypes pointer; a part per thread because each call of post_process
    allocates and fills a row's buffers), their saturations summed (the ranges write disjoint
    words). Why a wrapper calling post_process through its address (emu/ranged.py) and not a
    prange in post_process: numba's parfor passes double the compile time of the kernel they
    are in (emu/conv/int_conv.py Twin), and post_process linked into the wrapper is compiled
    again there (1.4-1.9 s of CPU that way). Launched under emu/conv/int_conv.py ``parallel``
    (devices/nvdla/sdp.py PARALLEL_ELEMENTS). The 64->64 3x3 layer's 64x32x32 under the AVX2
    approximation: 40 us on one thread, 23 on two (design notes, "NVDLA post_process on two
    threads")."""
    ssat = 0
    for p in prange(parts):
        ssat += call_ranged(post_process, (acc, k, add, clip, stages, bs_alu, bs_mul, bn_alu,
                                           bn_mul, offset, scale, shift, c_n, h, w, words,
                                           base, line, surf, parts, h * p // parts,
                                           h * (p + 1) // parts))
    return ssat


@njit(nogil=True, cache=True)
def _stage_row(row, stages, s, a_op, m_op, c, p0):
    """X stage ``s`` (a row of ``stages``; 0 BS, 1 BN) over ``row``, the values of channel
    ``c`` at elements p0, p0 + 1, ... (operands [C or 1, H*W or 1]), float64 integers within
    int32 as :func:`post_process` keeps them (exact as int64 and back). A row at a time: one
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
        v = np.int64(row[x])
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
        row[x] = float(max(v, 0) if relu else v)
