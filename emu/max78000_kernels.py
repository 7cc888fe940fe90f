"""MAX78000 (AI85) layer arithmetic: pooling, 2-D convolution, bias, output shift, rounding,
saturation and activation. Pure numba kernels on plain numpy arrays; no device knowledge.

Sources ("S3:Lnnnn" = seed 003_edc58f2c72aa640d.txt, "S0:Lnnnn" = seed 000_1c275a1c02640bee.txt,
digest = shared/devices/max78000-ai8x.md):

* pipeline order pooling -> convolution -> bias -> shift/round/saturate -> activation
  (S3:L618, L1753, L1847; digest 0.5);
* products and sums at full resolution, saturation only at the very end (S3:L800);
* bias enters as ``bias << 7`` (S0:L4118, digest A6);
* ``v = floor(acc * 2**s / 128 + 1/2)`` (S3:L770 "round half towards positive infinity",
  S3:L1797-1809 output shift; digest 1.8 canonical model), computed exactly in int64 (digest A5);
* clamp to [-128, 127] (S3:L798), then ReLU = clamp [0, 127] (S3:L1779) or Abs = min(|v|, 127)
  (digest T10, public fact: ai8x-synthesis izer/simulate.py clips abs to 2**(bits-1)-1);
* the 32-bit (bigdwrt) output is the raw accumulator: no shift, rounding, clamp or activation
  (S3:L756, L1809, S0:L3657).

Array layout: data ``[C, H, W]``, weights ``[K, C, kh, kw]`` (already sign-extended to int8),
bias ``[K]`` int64 holding the 8-bit bias values (zeros when the layer has none). The number of
distinct signatures is kept at one per kernel (C-contiguous int8/int64 arrays, int64 scalars).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from . import int_conv as IC

# pooling modes
POOL_NONE = 0  # 1x1 window: plain decimation by the stride (public fact: izer pooling_layer)
POOL_MAX = 1
POOL_AVG = 2

# average-pool rounding policies (digest A3; seed S3:L1015-1020 only covers non-negative sums)
AVG_TRUNC = 0       # izer HEAD "floor" mode: integer mean truncated toward zero (np.nanmean int64)
AVG_ROUND_AWAY = 1  # izer HEAD "rounding" mode: half away from zero (ceil(x-.5) for x<0)
AVG_FLOOR = 2       # seed literal floor(sum/N) for every sign
AVG_FLOOR_HALF = 3  # seed literal floor(sum/N + 1/2) for every sign (S0:L2171 wording)

ACT_NONE = 0
ACT_RELU = 1
ACT_ABS = 2


@njit(nogil=True, cache=True)
def field_value(raw, shift, bits):
    """The weight field ``bits`` wide at bit ``shift`` of the byte ``raw``, two's complement
    (digest 1.3, public fact: izer kernels.py ``& (2**bits-1)``); ranges 8-bit [-128,127], 4-bit
    [-8,7], 2-bit [-2,1], 1-bit [-1,0] (S3:L758-762)."""
    mask = (1 << bits) - 1
    v = (np.int64(raw) >> shift) & mask
    if v & (1 << (bits - 1)):
        v -= mask + 1
    return v


@njit(nogil=True, cache=True)
def sign_extend(raw, shift, bits):
    """:func:`field_value` of each byte of ``raw`` (uint8), as int8."""
    out = np.empty(raw.shape, dtype=np.int8)
    flat_in = raw.ravel()
    flat_out = out.ravel()
    for i in range(flat_in.size):
        flat_out[i] = field_value(flat_in[i], shift, bits)
    return out


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


@njit(nogil=True, cache=True)
def pool_hwc(x, pool_h, pool_w, stride, mode, avg_policy):
    """In-flight pooling before the convolution, no padding (S3:L1010-1014): output size
    ``(H - pool)//stride + 1`` per dimension; max = window maximum; average = window sum / N
    rounded per ``avg_policy`` (default AVG_TRUNC, or AVG_ROUND_AWAY when CTRL.poolrnd=1; digest
    1.9 and A3), clamped to int8 (digest A20). ``mode == POOL_NONE`` decimates (1x1 window).
    ``x`` int8 ``[H, W, C]`` (channels last, as the data memories hold them: the loops run
    along contiguous channels, which numba vectorises); returns int8 ``[Ho, Wo, C]``."""
    h, w, c_n = x.shape
    if mode == POOL_NONE:
        pool_h = 1
        pool_w = 1
    ho = max((h - pool_h) // stride + 1, 0)
    wo = max((w - pool_w) // stride + 1, 0)
    out = np.empty((ho, wo, c_n), dtype=np.int8)
    acc = np.empty(c_n, dtype=np.int32)  # a 16x16 window of -128 sums to -32768: fits
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
    return out


@njit(nogil=True, cache=True)
def pool2d(x, pool_h, pool_w, stride, mode, avg_policy):
    """:func:`pool_hwc` of each channel of ``x`` int8 ``[C, H, W]``; returns int64
    ``[C, Ho, Wo]`` (the element-wise and pass-through stages, which hold CHW)."""
    c_n, h, w = x.shape
    ph, pw = (1, 1) if mode == POOL_NONE else (pool_h, pool_w)
    out = np.empty((c_n, max((h - ph) // stride + 1, 0), max((w - pw) // stride + 1, 0)),
                   dtype=np.int64)
    for c in range(c_n):
        out[c] = pool_hwc(x[c].reshape(h, w, 1), pool_h, pool_w, stride, mode,
                          avg_policy)[:, :, 0]
    return out


@njit(nogil=True, cache=True)
def conv2d_acc(x, w, bias, pad_h, pad_w, stride):
    """Full-resolution accumulator ``acc[k,y,x] = sum_c sum_i sum_j w[k,c,i,j] *
    xpad[c, y*stride+i, x*stride+j] + 128*bias[k]`` (S3:L800 full resolution; bias << 7,
    S0:L4118). Zero padding ``pad_h``/``pad_w`` on both sides (S3:L1837). ``x`` int64
    ``[C,H,W]``, ``w`` int8 ``[K,C,kh,kw]``, ``bias`` int64 ``[K]``. Returns int64."""
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
def requantize(acc, shift, act):
    """8-bit output: ``v = floor(acc * 2**shift / 128 + 1/2)`` with ``t = 7 - shift``:
    ``(acc + 2**(t-1)) >> t`` for t > 0, else ``acc << -t`` (arithmetic shifts, exact in int64;
    S3:L770, L1797-1809, digest 1.8); saturate to [-128, 127] (S3:L798); then ReLU clamps to
    [0, 127] (S3:L1779) or Abs gives min(|v|, 127) (S0:L3998; abs wins over ReLU, S0:L4010).
    ``shift`` is the total shift held in POST.scale_reg/scale_shft, in [-15, 15] (S3:L1799).
    Returns int64 of the same shape."""
    out = np.empty(acc.shape, dtype=np.int64)
    fa = acc.ravel()
    fo = out.ravel()
    for i in range(fa.size):
        fo[i] = _requant1(fa[i], shift, act)
    return out


@njit(nogil=True, cache=True)
def _requant1(a, shift, act):
    """:func:`requantize` of one accumulator value."""
    t = 7 - shift
    if t > 0:
        v = (a + (np.int64(1) << (t - 1))) >> t
    else:
        v = a << (-t)
    if v > 127:
        v = 127
    elif v < -128:
        v = -128
    if act == ACT_RELU:
        if v < 0:
            v = 0
    elif act == ACT_ABS:
        if v < 0:
            v = -v
        if v > 127:
            v = 127
    return v


@njit(nogil=True, cache=True)
def _wrap32(a):
    """:func:`wide_output` of one accumulator value."""
    v = a & 0xFFFFFFFF
    if v >= 0x80000000:
        v -= 0x100000000
    return v


@njit(nogil=True, cache=True)
def wide_output(acc):
    """32-bit (bigdwrt) output: the accumulator's low 32 bits, two's complement (S3:L756 'Q17.14
    unclipped', S3:L1809 'no hardware shift'; S0:L3657 'write 32-bit accumulator output')."""
    out = np.empty(acc.shape, dtype=np.int64)
    fa = acc.ravel()
    fo = out.ravel()
    for i in range(fa.size):
        fo[i] = _wrap32(fa[i])
    return out


# element-wise functions, ONED.ewise_func encoding (S0:L3220: 00 subtract, 01 add, 10 OR, 11 XOR)
EW_SUB = 0
EW_ADD = 1
EW_OR = 2
EW_XOR = 3


@njit(nogil=True, cache=True)
def ewise_combine(xs, fn):
    """Element-wise operation over the operands ``xs`` int64 ``[O,C,H,W]``: left fold
    ``((x0 op x1) op x2) ...`` at full resolution, then clipped to int8 (digest 1.10: Sub =
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
    """Pool every operand of ``xs`` int8 ``[O,C,H,W]`` separately (ONED.prepool, S0:L3200).
    Returns int64 ``[O,C,Ho,Wo]``."""
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
    """Pass-through layer (no convolution, S3:L1730; POST.onexone_en with no mask, S0:L4014):
    pool2d, zero padding, then the post-processing of an accumulator ``v << 7`` (the pooled byte
    at weight 1 of a 1x1 kernel, bias << 7 convention of S0:L4118), i.e. ``v`` itself for
    shift 0. ``x`` int8 ``[C,H,W]``; returns int64 ``[C, Ho + 2*pad_h, Wo + 2*pad_w]``."""
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


@njit(nogil=True, cache=True)
def zero_stuff(x):
    """Deconvolution input: "a 0 after every byte shifted into TRAM and a row of 0s after every
    row" (S0:L3979-3988): ``[H,W,C]`` -> ``[2H,2W,C]`` with x at even positions."""
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
                     deconv: bool = False, packed: IC.PackedWeights | None = None
                     ) -> np.ndarray:
    """One layer: pool_hwc -> convolution (:func:`conv_int`, :func:`conv2d_acc` for empty
    shapes) -> requantize / wide_output. A transposed convolution (POST.deconv_en) convolves
    the zero-stuffed pooled input (:func:`zero_stuff`) with the stored kernel and the RCNT/CCNT
    padding. ``x`` [C, H, W]: a view of channels-last int8 memory (what the datapath gathers)
    is used as it is, anything else is copied channels last. ``packed``: ``w`` already in
    int_conv's layout (callers that keep it across runs). Returns int32 [K, Ho, Wo].
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
                   int(act), bool(wide))
    if out is None:  # empty shapes: the plain loop
        acc = conv2d_acc(np.ascontiguousarray(pooled, dtype=np.int64), w, b, int(pad[0]),
                         int(pad[1]), int(conv_stride))
        out = (wide_output(acc) if wide else requantize(acc, int(shift), int(act))
               ).astype(np.int32)
    return out


def conv_int(x: np.ndarray, w: IC.PackedWeights, bias: np.ndarray, pad_h: int, pad_w: int,
             stride: int, shift: int, act: int, wide: bool) -> np.ndarray | None:
    """:func:`conv2d_acc` followed by :func:`requantize` (or :func:`wide_output` if ``wide``),
    with the sums from the shared integer kernel (emu/int_conv.py): |data| <= 128 and |weight|
    <= 128 give at most 1024 x 9 products of 2**14 per output, below 2**28, so its int32 sums
    are exact. ``x`` int8 [C, H, W]. None if the output is empty (callers use conv2d_acc)."""
    c_n, h, wd = x.shape
    ho = (h + 2 * pad_h - w.kh) // stride + 1
    wo = (wd + 2 * pad_w - w.kw) // stride + 1
    if ho <= 0 or wo <= 0 or c_n == 0:
        return None
    sums = IC.conv_sums(x, w, (ho, wo), pad=(pad_h, pad_w), stride=(stride, stride),
                        padded=True)
    return _finish(sums, w.k, wo, bias, shift, act, wide)


@njit(nogil=True, cache=True)
def _finish(sums, k_n, wo, bias, shift, act, wide):
    """out[k] = requantize (or wrap to 32 bits) of sums[k, :, :wo] + 128*bias[k] (bias << 7,
    S0:L4118) for k < k_n, as int32 [k_n, Ho, wo]; ``sums`` is int_conv's padded C-contiguous
    int32 array.

    Why floats: for the usual right shift t = 7 - shift > 0, ``(a + 2**(t-1)) >> t`` equals
    ``floor((a + 2**(t-1)) * 2**-t)``, exact in float64 because |a| < 2**29 (conv_int). numba
    widens integer arithmetic to int64 and AVX2 has no 64-bit arithmetic shift, so the integer
    form ran one element at a time (4x slower); the float form is vectorised. Left shifts
    (t <= 0) keep :func:`_requant1`."""
    ho = sums.shape[1]
    out = np.empty((k_n, ho, wo), dtype=np.int32)
    t = 7 - shift
    scale = 2.0 ** -t
    lo = 0.0 if act == ACT_RELU else -128.0
    absolute = act == ACT_ABS
    for k in range(k_n):
        b = bias[k] * 128
        r = float(b + (1 << (t - 1))) if t > 0 else 0.0
        for y in range(ho):
            if wide:
                for x in range(wo):
                    out[k, y, x] = _wrap32(np.int64(sums[k, y, x]) + b)
            elif t > 0:
                for x in range(wo):
                    v = np.floor((float(sums[k, y, x]) + r) * scale)
                    if absolute:
                        v = abs(v)
                    out[k, y, x] = np.int32(min(max(v, lo), 127.0))
            else:
                for x in range(wo):
                    out[k, y, x] = _requant1(np.int64(sums[k, y, x]) + b, shift, act)
    return out
