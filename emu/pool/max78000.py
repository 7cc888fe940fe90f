"""MAX78000 (AI85) pooling: max and average over HWC or CHW int8 data. Pure numba kernels.

Sources: [AI8X] and [UG-CNN] (docs/citations.md).
"""
from __future__ import annotations

import numpy as np

from ..jit import njit

# pooling modes
POOL_NONE = 0  # 1x1 window: plain decimation by the stride (public fact: izer pooling_layer)
POOL_MAX = 1
POOL_AVG = 2

# average-pool rounding policies (A7#A3; [AI8X: Limitations of MAX78000 Networks] only covers
# non-negative sums)
AVG_TRUNC = 0       # izer HEAD "floor" mode: integer mean truncated toward zero (np.nanmean int64)
AVG_ROUND_AWAY = 1  # izer HEAD "rounding" mode: half away from zero (ceil(x-.5) for x<0)
AVG_FLOOR = 2       # seed literal floor(sum/N) for every sign
AVG_FLOOR_HALF = 3  # seed literal floor(sum/N + 1/2) for every sign ([UG-CNN: Table 27-19] wording)


@njit(nogil=True, cache=True)
def _avg(total, n, policy):
    """Integer average of ``total`` over ``n`` elements under ``policy`` (see AVG_*), as a
    float64. Exact: the quotient ``total / n`` is rounded correctly, |total| <= 2**15 and
    n <= 256, so it is exact where it is an integer or half an integer and otherwise at least
    1/(2n) from both, far more than its rounding error; trunc, floor and floor(q + 1/2) of it
    are the integer formulas' results (AVG_FLOOR_HALF = floor((2 total + n) / 2n)). Why
    floats: there is a vector divide for them, not for integers (integer division ran one
    element at a time)."""
    q = total / n
    if policy == AVG_TRUNC:
        return np.trunc(q)
    if policy == AVG_ROUND_AWAY:
        m = np.floor(abs(q) + 0.5)
        return m if q >= 0 else -m
    if policy == AVG_FLOOR:
        return np.floor(q)
    return np.floor(q + 0.5)


def pool_hwc(x: np.ndarray, pool_h: int, pool_w: int, stride: int, mode: int,
             avg_policy: int) -> np.ndarray:
    """In-flight pooling before the convolution, no padding
    [AI8X: Limitations of MAX78000 Networks]: output size ``(H - pool)//stride + 1`` per dimension;
    max = window maximum; average = window sum / N rounded per ``avg_policy`` (default AVG_TRUNC, or
    AVG_ROUND_AWAY when CTRL.poolrnd=1; A§1.9, A7#A3), clamped to int8 (A7#A20). ``mode ==
    POOL_NONE`` decimates (1x1 window). ``x`` int8 ``[H, W, C]`` (channels last, as the data
    memories hold them: the loops run along contiguous channels, which numba vectorises); returns
    int8 ``[Ho, Wo, C]``. The arrays are allocated here, the loops are :func:`_pool_into`'s: an
    allocation inside the kernel costs ~0.1 s more of a first run to compile."""
    h, w, c_n = x.shape
    ph, pw = (1, 1) if mode == POOL_NONE else (pool_h, pool_w)
    out = np.empty((max((h - ph) // stride + 1, 0), max((w - pw) // stride + 1, 0), c_n), np.int8)
    _pool_into(x, ph, pw, stride, mode, avg_policy, out, np.empty(w * c_n, np.int32))
    return out


@njit(nogil=True, cache=True)
def _pool_into(x, pool_h, pool_w, stride, mode, avg_policy, out, acc):
    """:func:`pool_hwc` into ``out`` int8 ``[Ho, Wo, C]`` (its size decides Ho and Wo; a window
    of ``pool_h`` x ``pool_w``, 1x1 for POOL_NONE), with ``acc`` int32 ``[>= W * C]`` as the
    running sums (a 16x16 window of -128 sums to -32768: fits). Max and sum are separable:
    per output row, the window's rows are reduced first, one loop along the whole input row
    (W * C); then, per output pixel, its columns (loops of C). The window's first column of
    ``acc`` takes its sums; every later window starts further right. Indexes are unsigned
    (uint64). Numba wraps a negative signed index around, and an index built from a run-time
    stride may be negative as far as LLVM knows, so signed loops stayed scalar. Why: the
    per-pixel form ran five short loops of C per pixel: the MNIST-shaped network's three pools
    took 18.3 us, 10.7 us now (thread CPU, Zen 4)."""
    ho, wo, c_n = out.shape
    n = pool_h * pool_w
    flat, dst = x.reshape(-1), out.reshape(-1)
    cu = np.uint64(c_n)
    row = np.uint64(x.shape[1] * c_n)
    m = np.uint64(((wo - 1) * stride + pool_w) * c_n if wo > 0 else 0)  # columns covered
    for oy in range(ho):
        r0 = np.uint64(oy * stride)
        for i in range(m):
            acc[i] = flat[r0 * row + i]
        for r in range(1, pool_h):
            base = (r0 + np.uint64(r)) * row
            if mode == POOL_MAX:
                for i in range(m):
                    acc[i] = max(acc[i], np.int32(flat[base + i]))
            else:
                for i in range(m):
                    acc[i] += flat[base + i]
        for ox in range(wo):
            b = np.uint64(ox * stride) * cu
            d = np.uint64(oy * wo + ox) * cu
            for j in range(1, pool_w):
                bj = b + np.uint64(j) * cu
                if mode == POOL_MAX:
                    for c in range(cu):
                        acc[b + c] = max(acc[b + c], acc[bj + c])
                else:
                    for c in range(cu):
                        acc[b + c] += acc[bj + c]
            if mode == POOL_AVG:
                for c in range(cu):
                    dst[d + c] = np.int8(min(max(_avg(np.float64(acc[b + c]), n, avg_policy),
                                                 -128.0), 127.0))
            else:
                for c in range(cu):
                    dst[d + c] = acc[b + c]


@njit(nogil=True, cache=True)
def pool2d(x, pool_h, pool_w, stride, mode, avg_policy):
    """:func:`pool_hwc` of each channel of ``x`` int8 ``[C, H, W]``; returns int64
    ``[C, Ho, Wo]`` (the element-wise and pass-through stages, which hold CHW)."""
    c_n, h, w = x.shape
    ph, pw = (1, 1) if mode == POOL_NONE else (pool_h, pool_w)
    ho, wo = max((h - ph) // stride + 1, 0), max((w - pw) // stride + 1, 0)
    out = np.empty((c_n, ho, wo), dtype=np.int64)
    one = np.empty((ho, wo, 1), dtype=np.int8)
    acc = np.empty(w, dtype=np.int32)
    for c in range(c_n):
        _pool_into(x[c].reshape(h, w, 1), ph, pw, stride, mode, avg_policy, one, acc)
        out[c] = one[:, :, 0]
    return out


