"""Ethos-U85 arithmetic primitives: rounding shift, rescale, activation (clamp + LUT), zero points
and type truncation. Pure numba functions on int64 scalars / numpy arrays; no device knowledge.

Source: the Arm Ethos-U85 TRM's pseudocode [U85-TRM: §3.6] ("[U85-TRM: ...]" cites a section
or table, docs/citations.md), [U85-TRM: §3.6] ("G-xx" = a gap
the project decided, docs/citations.md).
Integers in the pseudocode are unbounded; here everything is int64 and every place where an
unbounded intermediate could exceed int64 is rearranged so the result is still exact (G-R11).

Packed output-stage configuration ``cfg`` (int64 array, indices ``C_*`` below) carries the state
registers that ``write_accumulator`` -> ``rescale`` -> ``activation`` -> ``write_ofm`` read
[U85-TRM: §3.6.5, §3.6.6, §3.6.7]; build it with :func:`out_config`. Packing
keeps one numba signature per kernel.
"""
from __future__ import annotations

import numpy as np

from ..jit import njit

# round_mode_ofm_t [U85-TRM: Table 3-191]; round_mode_ifm_t uses 0 and 1 only
# [U85-TRM: Table 3-175, Table 3-183]
RND_DOUBLE_SYMMETRIC = 0
RND_NATURAL = 1
RND_DOUBLE_ASYMMETRIC = 2
RND_SYMMETRIC = 3
RND_TRUNCATE_TO_ZERO = 4
RND_TRUNCATE_TO_LOWER = 5

# rescale_mode_t [U85-TRM: §3.6.6]
RESCALE_NONE = 0
RESCALE_NORMAL = 1
RESCALE_GLOBAL = 2
RESCALE_SHIFT_ONLY = 3
RESCALE_AVPOOL = 64

# activation_function [U85-TRM: Table 3-108]
LUT_NONE = 0
LUT_U8_U8 = 1
LUT_S8_S8 = 4
LUT_S8_S16 = 5
LUT_S8_S32 = 7
LUT_S16_S16 = 8
LUT_S16_S32 = 9
LUT_TANH = 10
LUT_SIGMOID = 11

LUT_BYTES = 2048  # G-C4 [I]: every LUT mode addresses at most 2 KiB

# packed output-stage configuration
C_ACC_BITS = 0      # 32 (i32) or 48 (i48)              NPU_SET_ACC_FORMAT.acc_format
C_SCALE_MODE = 1    # 0 per_channel, 1 global             NPU_SET_OFM_PRECISION.scale_mode
C_SCALE = 2         # NPU_SET_OFM_SCALE.scale (31 bit)
C_SHIFT = 3         # NPU_SET_OFM_SCALE.shift (6 bit)
C_ROUND = 4         # NPU_SET_OFM_SCALE.round_mode
C_DBL_RND = 5       # NPU_SET_OFM_SCALE.dbl_rnd
C_OFM_BITS = 6      # 8, 16, 32, 64                       NPU_SET_OFM_PRECISION.activation_precision
C_OFM_SIGNED = 7    # 0 unsigned, 1 signed                NPU_SET_OFM_PRECISION.activation_type
C_ZP = 8            # raw 16-bit NPU_SET_OFM_ZERO_POINT
C_ACT_MIN = 9       # raw 16-bit NPU_SET_ACTIVATION_MIN
C_ACT_MAX = 10      # raw 16-bit NPU_SET_ACTIVATION_MAX
C_FUNC = 11         # NPU_SET_ACTIVATION.activation_function
C_TABLE = 12        # NPU_SET_ACTIVATION.table
C_CLIP = 13         # NPU_SET_ACTIVATION.activation_clip_range: 0 b16, 1 none
C_ACC_OUTPUT = 14   # NPU_SET_ACC_FORMAT.acc_output: 0 enable, 1 disable (raw accumulators out)
C_N = 15


def out_config(ofm_bits: int = 8, ofm_signed: bool = True, zero_point: int = 0,
               act_min: int | None = None, act_max: int | None = None, scale: int = 1,
               shift: int = 0, round_mode: int = RND_DOUBLE_SYMMETRIC, dbl_rnd: int = 0,
               per_channel: bool = False, acc_bits: int = 32, function: int = LUT_NONE,
               table: int = 0, clip_none: bool = False, acc_output_disable: bool = False
               ) -> np.ndarray:
    """Pack the output-stage registers into the int64 ``cfg`` array the kernels take.

    ``act_min``/``act_max`` default to the OFM type's range clipped to 16 bits (the registers are
    16-bit, [U85-TRM: Table 3-109, Table 3-110]); zero point and clip bounds may be given signed or
    as raw 16 bits."""
    if act_min is None:
        act_min = 0 if not ofm_signed else -(1 << (min(ofm_bits, 16) - 1))
    if act_max is None:
        act_bits = min(ofm_bits, 16)
        act_max = (1 << act_bits) - 1 if not ofm_signed else (1 << (act_bits - 1)) - 1
    cfg = np.zeros(C_N, np.int64)
    cfg[C_ACC_BITS] = 48 if acc_bits == 48 else 32
    cfg[C_SCALE_MODE] = 0 if per_channel else 1
    cfg[C_SCALE] = scale
    cfg[C_SHIFT] = shift
    cfg[C_ROUND] = round_mode
    cfg[C_DBL_RND] = dbl_rnd
    cfg[C_OFM_BITS] = ofm_bits
    cfg[C_OFM_SIGNED] = 1 if ofm_signed else 0
    cfg[C_ZP] = zero_point & 0xFFFF
    cfg[C_ACT_MIN] = act_min & 0xFFFF
    cfg[C_ACT_MAX] = act_max & 0xFFFF
    cfg[C_FUNC] = function
    cfg[C_TABLE] = table
    cfg[C_CLIP] = 1 if clip_none else 0
    cfg[C_ACC_OUTPUT] = 1 if acc_output_disable else 0
    return cfg


# ------------------------------------------------------------------------------------------------
# bit helpers [U85-TRM: §3.6.2, §3.6.6]

@njit(nogil=True, cache=True)
def sign_extend(v, n):
    """``sign_extend(v, n)`` [U85-TRM: §3.6.2]: keep the low n bits, two's complement; n >= 64 is
    the identity."""
    v = np.int64(v)
    if n >= 64:
        return v
    m = (np.int64(1) << n) - 1
    v = v & m
    if v >= (np.int64(1) << (n - 1)):
        v -= np.int64(1) << n
    return v


@njit(nogil=True, cache=True)
def zero_extend(v, n):
    """``zero_extend(v, n)`` = v & ((1<<n)-1) [U85-TRM: §3.6.2]; n >= 64 is the identity."""
    v = np.int64(v)
    if n >= 64:
        return v
    return v & ((np.int64(1) << n) - 1)


@njit(nogil=True, cache=True)
def truncate(v, n, signed):
    """``truncate(v, n, t)`` [U85-TRM: §3.6.2]: wrap to n bits, sign- or zero-extended. This is what
    write_ofm does to every OFM value [U85-TRM: §3.6.5]: it wraps, it never saturates."""
    if signed:
        return sign_extend(v, n)
    return zero_extend(v, n)


@njit(nogil=True, cache=True)
def clz(a, n):
    """``clz(a, n)`` [U85-TRM: §3.6.6]: leading zeros of the n-bit unsigned view of ``a``
    (rescale calls it with one argument, [U85-TRM: §3.6.6]: 32 bits, G-R6)."""
    v = zero_extend(a, n)
    r = np.int64(n)
    while v != 0:
        r -= 1
        v >>= 1
    return r


@njit(nogil=True, cache=True)
def clamp(acc, lo, hi):
    """``clamp(acc, lo, hi)`` [U85-TRM: §3.6.6]."""
    if acc < lo:
        return np.int64(lo)
    if acc > hi:
        return np.int64(hi)
    return np.int64(acc)


@njit(nogil=True, cache=True)
def accumulate(acc, v, acc_bits):
    """``accumulate(acc, v)`` [U85-TRM: §3.6.6]: acc + v wrapped (not saturated) to 32 (i32) or 48
    (i48) bits."""
    return sign_extend(np.int64(acc) + np.int64(v), acc_bits)


# ------------------------------------------------------------------------------------------------
# rounding [U85-TRM: §3.6.6]

@njit(nogil=True, cache=True)
def rounded_shift_right(acc, shift, mode, dbl_rnd):
    """``rounded_shift_right(acc, shift, mode, dbl_rnd)`` [U85-TRM: §3.6.6]::

        R = 1 << (shift-1); D = (shift > 31-dbl_rnd) ? 1 << (30-dbl_rnd) : 0
        double_symmetric (0): R += acc >= 0 ? D : -D     natural (1): R
        double_asymmetric (2): R += D                     symmetric (3): acc >= 0 ? R : R-1
        truncate_to_zero (4): acc >= 0 ? 0 : (1<<shift)-1 truncate_to_lower (5): 0
        result = (acc + R) >> shift   (arithmetic), shift 0 -> acc unchanged

    Exact for every int64 ``acc`` and shift 0..63: ``acc + R`` can exceed int64 for shift 62/63
    (G-R11), so both are halved first: floor((a+R)/2^s) = floor((a>>1 + R>>1 + carry)/2^(s-1)).
    Reserved modes 6/7 round like natural; dbl_rnd > 30 (UNPREDICTABLE, assert [U85-TRM: §3.6.6])
    gives D = 0.
    """
    acc = np.int64(acc)
    if shift <= 0:
        return acc
    rp, rn = round_terms(shift, mode, dbl_rnd)
    r = rp if acc >= 0 else rn
    carry = ((acc & 1) + (r & 1)) >> 1
    return ((acc >> 1) + (r >> 1) + carry) >> (shift - 1)


@njit(nogil=True, cache=True)
def round_terms(shift, mode, dbl_rnd):
    """The rounding addends R of rounded_shift_right [U85-TRM: §3.6.6] for acc >= 0 and acc < 0
    (shift 0..63, 0 and 0 for shift 0: no rounding): rounded_shift_right picks one per value,
    and the output loops take both once, so they need no per-element mode dispatch."""
    if shift <= 0:
        return np.int64(0), np.int64(0)
    half = np.int64(1) << (shift - 1)
    d = np.int64(0)
    if dbl_rnd <= 30 and shift > 31 - dbl_rnd:
        d = np.int64(1) << (30 - dbl_rnd)
    rp = half
    rn = half
    if mode == RND_DOUBLE_SYMMETRIC:
        rp, rn = half + d, half - d
    elif mode == RND_DOUBLE_ASYMMETRIC:
        rp, rn = half + d, half + d
    elif mode == RND_TRUNCATE_TO_ZERO:
        rp, rn = np.int64(0), (half - 1) + half  # (1 << shift) - 1 without overflow
    elif mode == RND_TRUNCATE_TO_LOWER:
        rp, rn = np.int64(0), np.int64(0)
    elif mode == RND_SYMMETRIC:
        rp, rn = half, half - 1
    return rp, rn


@njit(nogil=True, cache=True)
def avgpool_scale(d):
    """Built-in average-pool scale for a divisor d [U85-TRM: §3.6.6]::

        k = 32 - clz(d-1, 32); scale = (((1<<30)+1) << k) / d; shift = 30 + k

    Returns (scale, shift). d < 1 (all-padding window) is UNPREDICTABLE; it is treated as 1."""
    if d < 1:
        d = 1
    k = 32 - clz(d - 1, 32)
    num = ((np.int64(1) << 30) + 1) << k
    return num // d, 30 + k


@njit(nogil=True, cache=True)
def rescale(acc, oc, mode, cfg, scales, shifts):
    """``rescale(acc, oc, rescale_mode)`` [U85-TRM: §3.6.6]::

        none -> acc; avpool+n -> built-in 1/(n+1) scale (avgpool_scale)
        per_channel (OFM_PRECISION.scale_mode 0) -> scales[oc], shifts[oc]
        else -> OFM_SCALE.scale / .shift
        result = mode == shift_only ? acc : acc * scale
        return rounded_shift_right(result, shift, OFM_SCALE.round_mode, OFM_SCALE.dbl_rnd)

    Round mode and dbl_rnd ALWAYS come from OFM_SCALE (G-R8). Per-channel with oc < 0 (the
    elementwise/resize path, assert [U85-TRM: §3.6.6], G-R9) falls back to OFM_SCALE. acc*scale fits
    int64 whenever the asserts hold (|acc| <= 2^31 and scale < 2^31, or |acc| <= 2^47 and scale <
    2^15).
    """
    if mode == RESCALE_NONE:
        return np.int64(acc)
    if mode >= RESCALE_AVPOOL:
        scale, shift = avgpool_scale(1 + (mode - RESCALE_AVPOOL))
    elif cfg[C_SCALE_MODE] == 0 and oc >= 0:
        scale = scales[oc]
        shift = shifts[oc]
    else:
        scale = cfg[C_SCALE]
        shift = cfg[C_SHIFT]
    if mode == RESCALE_SHIFT_ONLY:
        result = np.int64(acc)
    else:
        result = np.int64(acc) * scale
    return rounded_shift_right(result, shift, cfg[C_ROUND], cfg[C_DBL_RND])


# ------------------------------------------------------------------------------------------------
# LUT RAM reads (little-endian, [U85-TRM: §3.6.7])

@njit(nogil=True, cache=True)
def lut_u8(lut, i):
    """uint8 entry i of the LUT RAM."""
    return np.int64(lut[i & (LUT_BYTES - 1)])


@njit(nogil=True, cache=True)
def lut_s8(lut, i):
    """int8 entry i."""
    return sign_extend(lut[i & (LUT_BYTES - 1)], 8)


@njit(nogil=True, cache=True)
def lut_s16(lut, i):
    """int16 entry i (bytes 2i, 2i+1 little-endian)."""
    o = (2 * i) & (LUT_BYTES - 1)
    return sign_extend(np.int64(lut[o]) | (np.int64(lut[o + 1]) << 8), 16)


@njit(nogil=True, cache=True)
def lut_s32(lut, i):
    """int32 entry i (bytes 4i..4i+3 little-endian)."""
    o = (4 * i) & (LUT_BYTES - 1)
    v = (np.int64(lut[o]) | (np.int64(lut[o + 1]) << 8) | (np.int64(lut[o + 2]) << 16)
         | (np.int64(lut[o + 3]) << 24))
    return sign_extend(v, 32)


@njit(nogil=True, cache=True)
def activation(acc64, cfg, lut):
    """``activation(acc64)`` [U85-TRM: §3.6.7]::

        b64 OFM -> acc64 unchanged
        zp, lo, hi = OFM_ZERO_POINT, ACTIVATION_MIN, ACTIVATION_MAX as uint16 (unsigned OFM)
                     or int16 (signed OFM)
        acc = (int32)(acc64 + zp)                                    // wrap BEFORE the clamp
        tanh: clamp(acc, -0x10000, 0xffff); sigmoid: clamp(acc, -0x1f000, 0x1efff);
        else clip_range b16: clamp(acc, lo, hi)
        u8_u8: u8[(t<<8) + (acc & 0xFF)]            s8_s8:  s8[(t<<8) + ((acc+128) & 0xFF)]
        s8_s16: s16[(t<<8) + ((acc+128) & 0xFF)]    s8_s32: s32[(t<<8) + ((acc+128) & 0xFF)]
        s16_s16: i = 256 + (acc>>7); base, slope = s16[2i], s16[2i+1]
                 acc = (int16)(((base<<7) + (acc & 0x7F)*slope + 64) >> 7)
        s16_s32: acc = (base<<7) + (acc & 0x7F)*slope
        tanh:    i = 256 + (acc>>8);
                 acc = ((base<<8) + (acc & 0xFF)*slope + (acc >= 0 ? 0x80 : 0x7F)) >> 8
        sigmoid: i = 256 + (acc>>9); acc = ((base<<9) + (acc & 0x1FF)*slope
                                            + (acc >= 0 ? 0x1000200 : 0x10001FF)) >> 10

    Interpolation indices outside 0..511 (only possible with clip_range none: UNPREDICTABLE) wrap
    inside the 2 KiB LUT RAM; the table number is not range-checked here (asserts
    [U85-TRM: §3.6.7]).
    """
    if cfg[C_OFM_BITS] == 64:
        return np.int64(acc64)
    zp, lo, hi, clip = output_limits(cfg)
    acc = sign_extend(np.int64(acc64) + zp, 32)
    f = cfg[C_FUNC]
    if f == LUT_TANH:
        acc = clamp(acc, -0x10000, 0xFFFF)
    elif f == LUT_SIGMOID:
        acc = clamp(acc, -0x1F000, 0x1EFFF)
    elif clip:
        acc = clamp(acc, lo, hi)
    t = cfg[C_TABLE]
    if f == LUT_U8_U8:
        acc = lut_u8(lut, (t << 8) + (acc & 0xFF))
    elif f == LUT_S8_S8:
        acc = lut_s8(lut, (t << 8) + ((acc + 128) & 0xFF))
    elif f == LUT_S8_S16:
        acc = lut_s16(lut, (t << 8) + ((acc + 128) & 0xFF))
    elif f == LUT_S8_S32:
        acc = lut_s32(lut, (t << 8) + ((acc + 128) & 0xFF))
    elif f == LUT_S16_S16 or f == LUT_S16_S32:
        i = (256 + (acc >> 7)) & 511
        base = lut_s16(lut, 2 * i)
        slope = lut_s16(lut, 2 * i + 1)
        if f == LUT_S16_S16:
            acc = sign_extend(((base << 7) + (acc & 0x7F) * slope + 64) >> 7, 16)
        else:
            acc = sign_extend((base << 7) + (acc & 0x7F) * slope, 32)
    elif f == LUT_TANH:
        i = (256 + (acc >> 8)) & 511
        base = lut_s16(lut, 2 * i)
        slope = lut_s16(lut, 2 * i + 1)
        rnd = 0x80 if acc >= 0 else 0x7F
        acc = sign_extend(((base << 8) + (acc & 0xFF) * slope + rnd) >> 8, 32)
    elif f == LUT_SIGMOID:
        i = (256 + (acc >> 9)) & 511
        base = lut_s16(lut, 2 * i)
        slope = lut_s16(lut, 2 * i + 1)
        rnd = 0x1000200 if acc >= 0 else 0x10001FF
        acc = sign_extend(((base << 9) + (acc & 0x1FF) * slope + rnd) >> 10, 32)
    return acc


@njit(nogil=True, cache=True)
def output_limits(cfg):
    """The OFM zero point and ACTIVATION_MIN/MAX as activation reads them [U85-TRM: §3.6.7]
    (16-bit registers: int16 for a signed OFM, (x ^ 0x8000) - 0x8000 = sign_extend(x, 16);
    uint16 for an unsigned one), and whether clipping applies (clip_range b16). Plain
    arithmetic, so its Python function (``output_limits.py_func``) gives the same values to
    the Python-side output stages without a compile (issue 31 #5)."""
    if cfg[C_OFM_SIGNED] != 0:
        zp = ((cfg[C_ZP] & 0xFFFF) ^ 0x8000) - 0x8000
        lo = ((cfg[C_ACT_MIN] & 0xFFFF) ^ 0x8000) - 0x8000
        hi = ((cfg[C_ACT_MAX] & 0xFFFF) ^ 0x8000) - 0x8000
    else:
        zp = cfg[C_ZP] & 0xFFFF
        lo = cfg[C_ACT_MIN] & 0xFFFF
        hi = cfg[C_ACT_MAX] & 0xFFFF
    return zp, lo, hi, cfg[C_CLIP] == 0


@njit(nogil=True, cache=True)
def write_value(v, cfg):
    """The arithmetic part of ``write_ofm`` [U85-TRM: §3.6.5]: truncate (wrap) to the OFM width and
    type."""
    return truncate(v, cfg[C_OFM_BITS], cfg[C_OFM_SIGNED] != 0)


@njit(nogil=True, cache=True)
def finish(acc, oc, mode, cfg, bias, scales, shifts, lut):
    """``write_accumulator`` value path [U85-TRM: §3.6.5]::

        acc_output disable -> acc (raw accumulator, caller stores it)
        acc = accumulate(acc, bias[oc]); v = rescale(acc, oc, mode); v = activation(v);
        return truncate(v, OFM bits, OFM type)

    Bias is 0 with scale_mode global (G-R1) or oc < 0."""
    if cfg[C_ACC_OUTPUT] != 0:
        return np.int64(acc)
    if cfg[C_SCALE_MODE] == 0 and oc >= 0:
        acc = accumulate(acc, bias[oc], cfg[C_ACC_BITS])
    v = rescale(acc, oc, mode, cfg, scales, shifts)
    v = activation(v, cfg, lut)
    return write_value(v, cfg)


# ------------------------------------------------------------------------------------------------
# zero points [U85-TRM: §3.6.5, §3.6.7, §3.10.57]

def ifm_zero_point(raw: int, bits: int, signed: bool) -> tuple[int, bool]:
    """Interpret the untyped 16-bit IFM/IFM2_ZERO_POINT: (int16)raw for a signed tensor,
    (uint16)raw for an unsigned one [U85-TRM: §3.6.5]. Returns (zp, valid) where valid is the seed's
    assert: signed -> b8 and -128 <= zp < 128, or zp == 0; unsigned -> b8 and zp < 256,
    b16 and zp == 32768, or zp == 0."""
    raw &= 0xFFFF
    if signed:
        zp = raw - 0x10000 if raw & 0x8000 else raw
        ok = (bits == 8 and -128 <= zp < 128) or zp == 0
    else:
        zp = raw
        ok = (bits == 8 and zp < 256) or (bits == 16 and zp == 32768) or zp == 0
    return zp, ok


def ofm_zero_point(raw: int, signed: bool) -> tuple[int, bool]:
    """Interpret OFM_ZERO_POINT [U85-TRM: §3.6.7]; valid: unsigned < 256 or 32768, signed -128..127
    (the seed's `||` assert is a typo, G-R3, decided per [U85-TRM: §3.10.57])."""
    raw &= 0xFFFF
    if signed:
        zp = raw - 0x10000 if raw & 0x8000 else raw
        return zp, -128 <= zp <= 127
    return raw, raw < 256 or raw == 32768


def type_range(bits: int, signed: bool) -> tuple[int, int]:
    """Saturation range of an integer tensor type (int8/uint8/int16/uint16/int32/int64...)."""
    if signed:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def saturate(v, bits: int, signed: bool):
    """Clamp ``v`` (scalar or array) to the type range. The NPU itself never saturates at write
    (it wraps, [U85-TRM: §3.6.5]); saturation is what ACTIVATION_MIN/MAX set to the type range
    achieves."""
    lo, hi = type_range(bits, signed)
    return np.clip(v, lo, hi)
