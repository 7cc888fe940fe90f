"""NVDLA fixed-point primitives, as the hardware repository's C model computes them (cmod/hls
include/nvdla_int.h: IntShiftRight with ac_fixed AC_RND_INF and AC_SAT; facts, written here in
numpy over int64 arrays): every right shift in the data paths rounds half away from zero and the
result saturates to the stage's width; the line buffers and int8 stores of some stages wrap."""
from __future__ import annotations

import numpy as np


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
