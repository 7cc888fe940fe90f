"""MAX78000 (AI85) element-wise layers and pass-through (no convolution). Pure numba kernels.

Sources: [AI8X] and [UG-CNN] (docs/citations.md).
"""
from __future__ import annotations

import numpy as np

from ..jit import njit
from ..numeric.max78000 import ACT_NONE, requantize
from ..pool.max78000 import AVG_TRUNC, POOL_NONE, pool2d

# element-wise functions, ONED.ewise_func encoding ([UG-CNN: Table 27-25]: 00 subtract, 01 add, 10
# OR, 11 XOR)
EW_SUB = 0
EW_ADD = 1
EW_OR = 2
EW_XOR = 3


@njit(nogil=True, cache=True)
def ewise_combine(xs, fn):
    """Element-wise operation over the operands ``xs`` int64 ``[O,C,H,W]``: left fold
    ``((x0 op x1) op x2) ...`` at full resolution, then clipped to int8 (A§1.10: Sub =
    x0 - x1 - x2 ...; OR/XOR on the two's complement bytes). Returns int8 ``[C,H,W]``."""
    o_n, c_n, h, w = xs.shape
    out = np.empty((c_n, h, w), dtype=np.int8)
    for c in range(c_n):
        for y in range(h):
            for x in range(w):
                v = xs[0, c, y, x]
                for o in range(1, o_n):
                    b = xs[o, c, y, x]
                    if fn == EW_ADD:
                        v = v + b
                    elif fn == EW_SUB:
                        v = v - b
                    elif fn == EW_OR:
                        v = (v & 0xFF) | (b & 0xFF)
                        if v >= 128:
                            v -= 256
                    else:
                        v = (v & 0xFF) ^ (b & 0xFF)
                        if v >= 128:
                            v -= 256
                if v > 127:
                    v = 127
                elif v < -128:
                    v = -128
                out[c, y, x] = v
    return out


@njit(nogil=True, cache=True)
def ewise_prepool(xs, pool_h, pool_w, stride, mode, avg_policy):
    """Pool every operand of ``xs`` int8 ``[O,C,H,W]`` separately (ONED.prepool,
    [UG-CNN: Table 27-25]). Returns int64 ``[O,C,Ho,Wo]``."""
    o_n = xs.shape[0]
    first = pool2d(xs[0], pool_h, pool_w, stride, mode, avg_policy)
    out = np.empty((o_n,) + first.shape, dtype=np.int64)
    out[0] = first
    for o in range(1, o_n):
        out[o] = pool2d(xs[o], pool_h, pool_w, stride, mode, avg_policy)
    return out


def run_ewise_kernel(xs: np.ndarray, fn: int, *, prepool: bool = False,
                     pool: tuple[int, int] = (1, 1), pool_stride: int = 1,
                     pool_mode: int = POOL_NONE, avg_policy: int = AVG_TRUNC) -> np.ndarray:
    """Element-wise stage: with ``prepool`` the operands are pooled first (the caller then
    skips pooling), else combined at full size. Returns int8 ``[C,H',W']``."""
    xs = np.ascontiguousarray(xs, dtype=np.int8)
    if prepool:
        v = ewise_prepool(xs, int(pool[0]), int(pool[1]), int(pool_stride), int(pool_mode),
                          int(avg_policy))
    else:
        v = xs.astype(np.int64)
    return ewise_combine(np.ascontiguousarray(v, dtype=np.int64), int(fn))


@njit(nogil=True, cache=True)
def passthrough(x, pool_h, pool_w, pool_stride, pool_mode, avg_policy, pad_h, pad_w, shift,
                act):
    """Pass-through layer (no convolution, [AI8X: Per-Layer Configuration]; POST.onexone_en with no
    mask, [UG-CNN: Table 27-38]): pool2d, zero padding, then the post-processing of an accumulator
    ``v << 7`` (the pooled byte at weight 1 of a 1x1 kernel, bias << 7 convention of
    [UG-CNN: Table 27-38]), i.e. ``v`` itself for shift 0. ``x`` int8 ``[C,H,W]``; returns int64
    ``[C, Ho + 2*pad_h, Wo + 2*pad_w]``."""
    pooled = pool2d(x, pool_h, pool_w, pool_stride, pool_mode, avg_policy)
    c_n, h, w = pooled.shape
    acc = np.zeros((c_n, h + 2 * pad_h, w + 2 * pad_w), dtype=np.int64)
    for c in range(c_n):
        for y in range(h):
            for xx in range(w):
                acc[c, y + pad_h, xx + pad_w] = pooled[c, y, xx] * 128
    return requantize(acc, shift, act)


def run_passthrough_kernel(x: np.ndarray, *, pool: tuple[int, int] = (1, 1),
                           pool_stride: int = 1, pool_mode: int = POOL_NONE,
                           avg_policy: int = AVG_TRUNC, pad: tuple[int, int] = (0, 0),
                           shift: int = 0, act: int = ACT_NONE) -> np.ndarray:
    """Python wrapper of :func:`passthrough` (one numba signature)."""
    x = np.ascontiguousarray(x, dtype=np.int8)
    return passthrough(x, int(pool[0]), int(pool[1]), int(pool_stride), int(pool_mode),
                       int(avg_policy), int(pad[0]), int(pad[1]), int(shift), int(act))


