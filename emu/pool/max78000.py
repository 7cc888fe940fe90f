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
    """Integer average of ``total`` over ``n`` elements under ``policy`` (see AVG_*)."""
    if policy == AVG_TRUNC:
        q = abs(total) // n
        return q if total >= 0 else -q
    if policy == AVG_ROUND_AWAY:
        q = (2 * abs(total) + n) // (2 * n)
        return q if total >= 0 else -q
    if policy == AVG_FLOOR:
        return total // n
    return (2 * total + n) // (2 * n)  # floor(total/n + 1/2)


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
    _pool_into(x, ph, pw, stride, mode, avg_policy, out, np.empty(c_n, np.int32))
    return out


@njit(nogil=True, cache=True)
def _pool_into(x, pool_h, pool_w, stride, mode, avg_policy, out, acc):
    """:func:`pool_hwc` into ``out`` int8 ``[Ho, Wo, C]`` (its size decides Ho and Wo; a window
    of ``pool_h`` x ``pool_w``, 1x1 for POOL_NONE), with ``acc`` int32 ``[C]`` as the running
    sums (a 16x16 window of -128 sums to -32768: fits)."""
    ho, wo, c_n = out.shape
    n = pool_h * pool_w
    for oy in range(ho):
        for ox in range(wo):
            r0, c0 = oy * stride, ox * stride
            for c in range(c_n):
                acc[c] = x[r0, c0, c]
            for k in range(1, n):
                r, col = r0 + k // pool_w, c0 + k % pool_w
                if mode == POOL_MAX:
                    for c in range(c_n):
                        acc[c] = max(acc[c], np.int32(x[r, col, c]))
                else:
                    for c in range(c_n):
                        acc[c] += x[r, col, c]
            if mode == POOL_AVG:
                for c in range(c_n):
                    out[oy, ox, c] = min(max(_avg(np.int64(acc[c]), n, avg_policy), -128), 127)
            else:
                for c in range(c_n):
                    out[oy, ox, c] = acc[c]


@njit(nogil=True, cache=True)
def pool2d(x, pool_h, pool_w, stride, mode, avg_policy):
    """:func:`pool_hwc` of each channel of ``x`` int8 ``[C, H, W]``; returns int64
    ``[C, Ho, Wo]`` (the element-wise and pass-through stages, which hold CHW)."""
    c_n, h, w = x.shape
    ph, pw = (1, 1) if mode == POOL_NONE else (pool_h, pool_w)
    ho, wo = max((h - ph) // stride + 1, 0), max((w - pw) // stride + 1, 0)
    out = np.empty((c_n, ho, wo), dtype=np.int64)
    one = np.empty((ho, wo, 1), dtype=np.int8)
    acc = np.empty(1, dtype=np.int32)
    for c in range(c_n):
        _pool_into(x[c].reshape(h, w, 1), ph, pw, stride, mode, avg_policy, one, acc)
        out[c] = one[:, :, 0]
    return out


