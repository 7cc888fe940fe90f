"""MAX78000 (AI85) convolution layer: pooling -> 2-D convolution (plain or transposed) ->
bias -> requantize, on the shared exact integer convolution. Pure numba kernels.

The pipeline order and every arithmetic rule after the sums (bias, output shift, rounding,
saturation, activation, the 32-bit output) are emu/numeric/max78000.py's, with their sources
there; this module only orders pooling, the convolution and that requantization.

Array layout: data ``[C, H, W]``, weights ``[K, C, kh, kw]`` (already sign-extended to int8),
bias ``[K]`` int64 holding the 8-bit bias values (zeros when the layer has none). The number of
distinct signatures is kept at one per kernel (C-contiguous int8/int64 arrays, int64 scalars).
"""
from __future__ import annotations

import numpy as np

from ..jit import njit
from ..numeric.max78000 import (
    ACT_ABS,
    ACT_NONE,
    ACT_RELU,
    requantize,
    wide_output,
)
from ..pool.max78000 import AVG_TRUNC, POOL_NONE, pool_hwc
from . import int_conv as IC


@njit(nogil=True, cache=True)
def conv2d_acc(x, w, bias, pad_h, pad_w, stride):
    """Full-resolution accumulator ``acc[k,y,x] = sum_c sum_i sum_j w[k,c,i,j] *
    xpad[c, y*stride+i, x*stride+j] + 128*bias[k]`` ([AI8X: Saturation and Clipping] full
    resolution; bias << 7, [UG-CNN: Table 27-38]). Zero padding ``pad_h``/``pad_w`` on both sides
    [AI8X: Per-Layer Configuration]. ``x`` int64 ``[C,H,W]``, ``w`` int8 ``[K,C,kh,kw]``, ``bias``
    int64 ``[K]``. Returns int64."""
    c_n, h, wd = x.shape
    k_n, _, kh, kw = w.shape
    ho = (h + 2 * pad_h - kh) // stride + 1
    wo = (wd + 2 * pad_w - kw) // stride + 1
    if ho < 0:
        ho = 0
    if wo < 0:
        wo = 0
    out = np.zeros((k_n, ho, wo), dtype=np.int64)
    for k in range(k_n):
        b = bias[k] * 128
        for oy in range(ho):
            for ox in range(wo):
                acc = b
                for c in range(c_n):
                    for i in range(kh):
                        yy = oy * stride + i - pad_h
                        if yy < 0 or yy >= h:
                            continue
                        for j in range(kw):
                            xx = ox * stride + j - pad_w
                            if xx < 0 or xx >= wd:
                                continue
                            acc += np.int64(w[k, c, i, j]) * x[c, yy, xx]
                out[k, oy, ox] = acc
    return out


@njit(nogil=True, cache=True)
def zero_stuff(x):
    """Deconvolution input: "a 0 after every byte shifted into TRAM and a row of 0s after every
    row" [UG-CNN: Table 27-38]: ``[H,W,C]`` -> ``[2H,2W,C]`` with x at even positions."""
    h, w, c_n = x.shape
    out = np.zeros((2 * h, 2 * w, c_n), dtype=x.dtype)
    for y in range(h):
        for xx in range(w):
            for c in range(c_n):
                out[2 * y, 2 * xx, c] = x[y, xx, c]
    return out


def run_layer_kernel(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *,
                     pool: tuple[int, int] = (1, 1), pool_stride: int = 1,
                     pool_mode: int = POOL_NONE, avg_policy: int = AVG_TRUNC,
                     pad: tuple[int, int] = (0, 0), conv_stride: int = 1, shift: int = 0,
                     act: int = ACT_NONE, wide: bool = False,
                     deconv: bool = False, packed: IC.PackedWeights | None = None,
                     launches: dict | None = None) -> np.ndarray:
    """One layer: pool_hwc -> convolution (:func:`conv_int`, :func:`conv2d_acc` for empty
    shapes) -> requantize / wide_output. A transposed convolution (POST.deconv_en) convolves
    the zero-stuffed pooled input (:func:`zero_stuff`) with the stored kernel and the RCNT/CCNT
    padding. ``x`` [C, H, W]: a view of channels-last int8 memory (what the datapath gathers)
    is used as it is, anything else is copied channels last. ``packed``: ``w`` already in
    int_conv's layout (callers that keep it across runs); ``launches``: a dict kept with
    ``packed`` for this layer (int_conv.conv_sums: its kernel call worked out once, ~4 us a
    layer). Returns int32 [K, Ho, Wo].
    Normalises dtypes and contiguity so numba compiles (and caches) one signature per kernel."""
    hwc = x.transpose(1, 2, 0)  # the datapath gathers channels last (gather_hwc)
    if hwc.dtype != np.int8 or not hwc.flags.c_contiguous:
        hwc = np.ascontiguousarray(hwc, dtype=np.int8)
    w = np.ascontiguousarray(w, dtype=np.int8)
    b = np.zeros(w.shape[0], dtype=np.int64) if bias is None else \
        np.ascontiguousarray(bias, dtype=np.int64)
    if pool_mode != POOL_NONE or pool_stride != 1:  # a 1x1 window, stride 1: the identity
        hwc = pool_hwc(hwc, int(pool[0]), int(pool[1]), int(pool_stride), int(pool_mode),
                       int(avg_policy))
    if deconv:
        hwc, conv_stride = zero_stuff(hwc), 1
    if packed is None:
        packed = IC.pack_weights(w.transpose(0, 2, 3, 1))
    pooled = hwc.transpose(2, 0, 1)
    out = conv_int(pooled, packed, b, int(pad[0]), int(pad[1]), int(conv_stride), int(shift),
                   int(act), bool(wide), launches)
    if out is None:  # empty shapes: the plain loop
        acc = conv2d_acc(np.ascontiguousarray(pooled, dtype=np.int64), w, b, int(pad[0]),
                         int(pad[1]), int(conv_stride))
        out = (wide_output(acc) if wide else requantize(acc, int(shift), int(act))
               ).astype(np.int32)
    return out


def conv_int(x: np.ndarray, w: IC.PackedWeights, bias: np.ndarray, pad_h: int, pad_w: int,
             stride: int, shift: int, act: int, wide: bool, launches: dict | None = None
             ) -> np.ndarray | None:
    """:func:`conv2d_acc` followed by :func:`requantize` (or :func:`wide_output` if ``wide``),
    with the sums from the shared integer kernel (emu/int_conv.py): |data| <= 128 and |weight|
    <= 128 give at most 1024 x 9 products of 2**14 per output, below 2**28, so its int32 sums
    are exact. ``x`` int8 [C, H, W]. None if the output is empty (callers use conv2d_acc).
    ``launches``: see :func:`run_layer_kernel`."""
    c_n, h, wd = x.shape
    ho = (h + 2 * pad_h - w.kh) // stride + 1
    wo = (wd + 2 * pad_w - w.kw) // stride + 1
    if ho <= 0 or wo <= 0 or c_n == 0:
        return None
    sums = IC.conv_sums(x, w, (ho, wo), pad=(pad_h, pad_w), stride=(stride, stride),
                        padded=True, launches=launches)
    out = np.empty((w.k, ho, wo), np.int32)  # here: inside the kernel it costs compile time
    if wide:  # sums + bias << 7 to 32 bits (wrap32): an int32 numpy sum wraps the same way
        np.add(sums[:w.k, :ho, :wo], (bias * 128).astype(np.int32)[:, None, None], out=out)
    else:
        _finish(sums, bias, shift, act, out)
    return out


@njit(nogil=True, cache=True)
def _finish(sums, bias, shift, act, out):
    """out[k] = requantize of sums[k, :, :wo] + 128*bias[k] (bias << 7, [UG-CNN: Table 27-38])
    into ``out`` int32 [K, Ho, wo]; ``sums`` is int_conv's padded C-contiguous int32 array.
    (The 32-bit output is :func:`conv_int`'s numpy sum: a branch here cost compile time.)

    Why floats: for the usual right shift t = 7 - shift > 0, ``(a + 2**(t-1)) >> t`` equals
    ``floor((a + 2**(t-1)) * 2**-t)``, and for t <= 0 ``a << -t`` equals ``a * 2**-t``, both
    exact in float64 because |a| < 2**29 (conv_int) and 2**-t <= 2**8. numba widens integer
    arithmetic to int64 and AVX2 has no 64-bit arithmetic shift, so the integer form ran one
    element at a time (4x slower); the float form is vectorised. Saturation, then ReLU or Abs,
    as :func:`requant1`: clamping ``|v|`` (Abs) or ``v`` to [lo, 127] is the same as clamping
    to [-128, 127] first."""
    k_n, ho, wo = out.shape
    t = 7 - shift
    scale = 2.0 ** -t
    lo = 0.0 if act == ACT_RELU else -128.0
    absolute = act == ACT_ABS
    for k in range(k_n):
        b = bias[k] * 128
        r = float(b + (1 << (t - 1))) if t > 0 else float(b)
        for y in range(ho):
            for x in range(wo):
                v = np.floor((float(sums[k, y, x]) + r) * scale)
                if absolute:
                    v = abs(v)
                out[k, y, x] = np.int32(min(max(v, lo), 127.0))
