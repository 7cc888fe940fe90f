"""Ethos-U85 tensor values as the kernel wrappers read them: the stored integers as the
tensor type minus the zero point (read_ifm), IFM upscaling, OFM dtypes, and the small
helpers every wrapper shares (assert notes, per-channel vectors, LUT bytes).

Source: the TRM's pseudocode [U85-TRM: §3.10] (docs/citations.md).
"""
from __future__ import annotations

import numpy as np

from . import ethosu85 as P
from .ethosu85 import C_ACC_OUTPUT, C_OFM_BITS, C_OFM_SIGNED

# IFM_UPSCALE.mode [U85-TRM: §3.10.40]
UPSCALE_NONE, UPSCALE_NEAREST, UPSCALE_ZEROS = 0, 1, 2

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1




def ofm_dtype(cfg: np.ndarray) -> np.dtype:
    """numpy dtype of the OFM values a wrapper returns for this ``cfg`` (int64 for raw
    accumulators)."""
    if cfg[C_ACC_OUTPUT]:
        return np.dtype(np.int64)
    bits, signed = int(cfg[C_OFM_BITS]), bool(cfg[C_OFM_SIGNED])
    return np.dtype(("i" if signed else "u") + str(bits // 8))


def check(diag, cond, msg):
    if not cond and diag is not None:
        diag.append(msg)


def lut_bytes(lut):
    """The LUT as the kernels' uint8[LUT_BYTES]: the array itself when it is one they take
    as it is (they only read it; a copy per operation cost ~2 us)."""
    if lut is None:
        return np.zeros(P.LUT_BYTES, np.uint8)
    if isinstance(lut, np.ndarray) and lut.dtype == np.uint8 and lut.shape == (P.LUT_BYTES,) \
            and lut.flags.c_contiguous and lut.flags.writeable:  # (read-only: another compile)
        return lut
    b = np.frombuffer(bytes(lut), np.uint8) if not isinstance(lut, np.ndarray) else lut
    out = np.zeros(P.LUT_BYTES, np.uint8)
    b = b.view(np.uint8).ravel()[:P.LUT_BYTES]
    out[:b.size] = b
    return out


def per_channel(a, d, default=0):
    out = np.full(d, default, np.int64)
    if a is not None:
        a = np.asarray(a, np.int64).ravel()
        out[:min(d, a.size)] = a[:d]
    return out


def config_or_default(cfg):
    return P.out_config() if cfg is None else np.ascontiguousarray(cfg, np.int64)


def infer_type(arr, bits, signed):
    dt = np.asarray(arr).dtype
    if bits is None:
        bits = dt.itemsize * 8 if dt.kind in "iu" else 8
    if signed is None:
        signed = dt.kind != "u"
    return int(bits), bool(signed)


def native(raw: np.ndarray, bits: int, signed: bool) -> bool:
    """The stored integers already have the tensor's type (no reinterpretation needed)."""
    return raw.dtype == np.dtype(("i" if signed else "u") + str(bits // 8))


def read_values(raw, zero_point: int, bits: int, signed: bool, diag=None, name="IFM") -> np.ndarray:
    """read_ifm's value part [U85-TRM: §3.6.5]: reinterpret the stored integers as the tensor type
    (bits/signed) and subtract the zero point, interpreted as int16 or uint16 by the type.
    Returns int64."""
    return values_minus(raw, checked_zero_point(zero_point, bits, signed, diag, name), bits,
                        signed)


def values_minus(raw, zp: int, bits: int, signed: bool) -> np.ndarray:
    """The stored integers of ``raw`` as the tensor type (``bits`` a precision: 8, 16, 32 or
    64; signed or not) reads them, minus the zero point ``zp`` as :func:`checked_zero_point`
    interprets it; int64."""
    raw = np.asarray(raw)
    if bits != 64:  # numpy's narrowing cast keeps the low bits (no copy where it is the type)
        raw = raw.astype(f"{'i' if signed else 'u'}{bits // 8}", copy=False)
    v = raw.astype(np.int64)
    if zp:
        v -= zp
    return v


def checked_zero_point(raw: int, bits: int, signed: bool, diag=None, name="IFM") -> int:
    """read_ifm's zero point [U85-TRM: §3.6.5]: the 16-bit register as the tensor's type reads it,
    with the seed's assert reported to ``diag`` when it fails."""
    zp, ok = P.ifm_zero_point(raw, bits, signed)
    check(diag, ok,
          f"{name} zero point {zp} invalid for {'s' if signed else 'u'}{bits} [U85-TRM: §3.6.5]")
    return zp


def upscale(v: np.ndarray, mode: int) -> np.ndarray:
    """IFM_UPSCALE [U85-TRM: §3.6.5] applied to zero-point-corrected HWC values: nearest doubles H
    and W by replication, zeros puts v at even (y, x) and 0 (= the zero point) elsewhere."""
    if mode == UPSCALE_NONE:
        return v
    h, w, c = v.shape
    if mode == UPSCALE_NEAREST:
        return np.repeat(np.repeat(v, 2, axis=0), 2, axis=1)
    out = np.zeros((2 * h, 2 * w, c), np.int64)
    out[0::2, 0::2] = v
    return out


def fit_hw(v, h, w):
    """Return an (h, w, C) view/extension of v: positions beyond the stored array read 0."""
    if v.shape[0] >= h and v.shape[1] >= w:
        return np.ascontiguousarray(v[:h, :w])
    out = np.zeros((h, w, v.shape[2]), np.int64)
    hh, ww = min(h, v.shape[0]), min(w, v.shape[1])
    out[:hh, :ww] = v[:hh, :ww]
    return out


def batched(fn, ifm, *args, **kw):
    ifm = np.asarray(ifm)
    if ifm.ndim == 4:
        return np.stack([fn(ifm[n], *args, **kw) for n in range(ifm.shape[0])])
    return fn(ifm, *args, **kw)


