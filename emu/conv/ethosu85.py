"""Ethos-U85 NPU_OP_CONV (incl. the IFM2 "matmul" form) and NPU_OP_DEPTHWISE on plain numpy
tensors.

Source: the TRM's pseudocode [U85-TRM: §3.10] (docs/citations.md; C§4). No device knowledge: tensors
are numpy arrays in HWC (or NHWC, batches are independent), already read from memory; register
values come in as arguments. The numba kernels (``_*_kernel``) take int64 arrays plus packed int64
parameter vectors only, so each compiles exactly one signature; the Python wrappers do
read_ifm's value part (zero-point subtraction, upscale), derive the IFM extent and check the
pseudocode's asserts. A violated assert is UNPREDICTABLE in the [U85-TRM: §3.5.4]: the wrappers
append a message to ``diag`` (a list, when given) and continue with the literal result.

Every wrapper returns the OFM values truncated to the OFM type (dtype from ``cfg``; see
:func:`ofm_dtype`), or the raw int64 accumulators when ``cfg`` has acc_output = disable.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from numba import prange

from ..jit import njit
from ..numeric import ethosu85 as P
from ..numeric.ethosu85 import (
    C_ACC_BITS,
    C_ACC_OUTPUT,
    C_OFM_BITS,
    C_OFM_SIGNED,
    C_SCALE,
    C_SHIFT,
    RESCALE_NORMAL,
)
from ..numeric.ethosu85_values import (
    UPSCALE_NONE,
    batched,
    check,
    checked_zero_point,
    config_or_default,
    fit_hw,
    infer_type,
    lut_bytes,
    native,
    ofm_dtype,
    per_channel,
    read_values,
    upscale,
)
from ..ranged import call_ranged, ranged, ranged_wrapper
from . import int_conv as IC

# ------------------------------------------------------------------------------------------------
# CONV / DEPTHWISE [U85-TRM: §3.10.2, §3.10.3]

@njit(nogil=True, cache=True)
def _conv_kernel(v, w, acc_in, geo, cfg, bias, scales, shifts, lut):
    """NPU_OP_CONV / NPU_OP_DEPTHWISE loop [U85-TRM: §3.10.2, §3.10.3]::

        for oy, ox, oc: acc = read_accumulator(oy, ox, oc, 0)
            for ky, kx (ky*dil_y < dilated_h ...), ic:
                iy = -pad_y + oy*stride_y + ky*dil_y; ix = -pad_x + ox*stride_x + kx*dil_x
                v = outside [0, ifm_h) x [0, ifm_w) ? 0 : read_ifm(iy, ix, depthwise ? oc : ic)
                acc = accumulate(acc, v * W[oc][ky][kx][ic])
            write_accumulator(oy, ox, oc, acc, rescale_mode_normal)

    v: [ifm_h, ifm_w, C] zero-point-corrected; w: [OC, KHu, KWu, IC] undilated (IC = 1 for
    depthwise); acc_in: [H, W, OC] start values (zeros for acc_input reset);
    geo: H, W, stride_y, stride_x, dil_y, dil_x, pad_top, pad_left, dilated_h, dilated_w,
    depthwise. Sums are wrapped per kernel position (wrapping commutes with addition)."""
    H, W = geo[0], geo[1]
    sy, sx, dy, dx, pt, pl, dh, dw, dwise = geo[2], geo[3], geo[4], geo[5], geo[6], geo[7], \
        geo[8], geo[9], geo[10]
    ih, iw = v.shape[0], v.shape[1]
    oc_n, kh, kw, ic_n = w.shape[0], w.shape[1], w.shape[2], w.shape[3]
    bits = cfg[C_ACC_BITS]
    out = np.zeros((H, W, oc_n), np.int64)
    for oy in range(H):
        for ox in range(W):
            for oc in range(oc_n):
                acc = acc_in[oy, ox, oc]
                for ky in range(kh):
                    if ky * dy >= dh:
                        break
                    iy = -pt + oy * sy + ky * dy
                    if iy < 0 or iy >= ih:
                        continue
                    for kx in range(kw):
                        if kx * dx >= dw:
                            break
                        ix = -pl + ox * sx + kx * dx
                        if ix < 0 or ix >= iw:
                            continue
                        s = np.int64(0)
                        if dwise:
                            s = v[iy, ix, oc] * w[oc, ky, kx, 0]
                        else:
                            for ic in range(ic_n):
                                s += v[iy, ix, ic] * w[oc, ky, kx, ic]
                        acc = P.accumulate(acc, s, bits)
                out[oy, ox, oc] = P.finish(acc, oc, RESCALE_NORMAL, cfg, bias, scales, shifts, lut)
    return out


# Exact BLAS path. float32 represents every integer of magnitude <= 2**24 and float64 every one
# <= 2**53, so a product-sum is exact in any summation order when the bound
# max|v| * max_oc sum|w[oc]| of every partial sum stays below that; the GEMM then gives the
# integer sum of the pseudocode's products, and the accumulator wrap (mod 2**acc_bits) commutes
# with addition. Beyond float64 the numba loop runs.
F32_EXACT = 1 << 24
F64_EXACT = 1 << 53


def _gemm_dtype(vmax: int, w: np.ndarray) -> type | None:
    """float32 / float64 when every partial sum of v * w is exactly representable (see above);
    None when not even float64 is (the loop kernel runs)."""
    if w.size == 0:
        return np.float32
    bound = int(vmax) * IC.weight_sum_bound(w)
    if bound < F32_EXACT:
        return np.float32
    if bound < F64_EXACT:
        return np.float64
    return None


def _padded(v: np.ndarray, zp: int, hp: int, wp: int, pt: int, pl: int, ih: int, iw: int,
            dt) -> np.ndarray:
    """The IFM in the padded frame as float ``dt``: rows [pt, pt+ih), columns [pl, pl+iw) hold
    v - zp (v cut or zero-extended to ih x iw as fit_hw does), everything else 0 (padding reads 0,
    [U85-TRM: §3.10.2]). One spare row so the flattened tap slices of the stride-1 path stay in
    bounds."""
    c = v.shape[2]
    xp = np.zeros((hp + 1, wp, c), dt)
    hh, ww = min(ih, v.shape[0]), min(iw, v.shape[1])
    region = xp[pt:pt + hh, pl:pl + ww]
    region[...] = v[:hh, :ww]
    if zp:
        region -= zp
    return xp


def _conv_sums(xp: np.ndarray, w: np.ndarray, H: int, W: int, sy: int, sx: int, dy: int,
               dx: int, depthwise: bool) -> np.ndarray:
    """sum over kernel positions and input channels of xp * w, float, exact (the caller chose
    the dtype with :func:`_gemm_dtype`). Returns [H, Wc, OC] with Wc >= W (columns >= W are
    scratch). Stride 1: no im2col; each kernel position (ky, kx) is the contiguous slice of the
    flattened padded IFM that starts ky*dy*Wp + kx*dx, and the output is computed on the padded
    width. Other strides: one strided copy of the IFM per kernel position."""
    dt = xp.dtype
    oc_n, kh, kw = w.shape[0], w.shape[1], w.shape[2]
    wp, c = xp.shape[1], xp.shape[2]
    wf = np.ascontiguousarray(w.transpose(1, 2, 3, 0), dt)          # [KH, KW, IC, OC]
    flat = xp.reshape(-1, c)
    if sy == 1 and sx == 1:
        rows, wc = H * wp, wp
    else:
        rows, wc = H * W, W
    acc = np.empty((rows, oc_n), dt)
    tmp = np.empty((rows, oc_n), dt)
    first = True
    for ky in range(kh):
        for kx in range(kw):
            if sy == 1 and sx == 1:
                o = ky * dy * wp + kx * dx
                a = flat[o:o + rows]
            else:
                a = xp[ky * dy:ky * dy + (H - 1) * sy + 1:sy,
                       kx * dx:kx * dx + (W - 1) * sx + 1:sx].reshape(rows, c)
            dst = acc if first else tmp
            if depthwise:
                np.multiply(a[:, :oc_n], wf[ky, kx, 0], out=dst)
            else:
                np.matmul(a, wf[ky, kx], out=dst)
            if not first:
                acc += tmp
            first = False
    return acc.reshape(H, wc, oc_n)


@functools.lru_cache(maxsize=256)
def _tap_mask(n: int, stride: int, dil: int, k: int, pad: int, extent: int) -> np.ndarray:
    """1 where output row (column) n has at least one kernel row (column) inside the IFM: the
    pseudocode calls accumulate() there at all (an output of padding only keeps its start
    value unwrapped). Memoised (read-only): a layer has the same geometry on every run."""
    o = np.arange(n)[:, None] * stride - pad + np.arange(k)[None, :] * dil
    mask = ((o >= 0) & (o < extent)).any(axis=1).astype(np.int64)
    mask.flags.writeable = False
    return mask


def _finish_terms(cfg, bias, scales, shifts, oc_n: int) -> tuple:
    """Per output channel: scale, shift, bias and the rounding addends of the output stage
    (global scale_mode: cfg's scale and shift, bias 0), and whether the fast output stage
    applies: no LUT function, OFM narrower than 64 bits, shifts 0..62, |scale| < 2**31, so
    acc * scale + R of a 32-bit accumulator cannot overflow and needs no halving. Last, the
    OFM zero point and the clip bounds as the fast stage takes them (+-2**62 without
    clipping). numpy, not a kernel: it runs once per layer (kept by _stage_terms) and its
    compile was 0.5 s of every first run (issue 31 #5); the rounding addends are
    P.round_terms' own Python function, once per distinct shift (a set: np.unique imports
    numpy.ma on its first call, ~7 ms of a warm run, issue 31 #5)."""
    if cfg[P.C_SCALE_MODE] == 0:
        sc, sh, bi = (np.array(a[:oc_n], np.int64) for a in (scales, shifts, bias))
    else:
        sc, sh = np.full(oc_n, cfg[C_SCALE], np.int64), np.full(oc_n, cfg[C_SHIFT], np.int64)
        bi = np.zeros(oc_n, np.int64)
    ok = (sh >= 0) & (sh <= 62) & (np.abs(sc) < np.int64(1) << 31)
    rp, rn = np.zeros(oc_n, np.int64), np.zeros(oc_n, np.int64)
    for s in sorted(set(sh[ok].tolist())):
        at = ok & (sh == s)
        rp[at], rn[at] = P.round_terms.py_func(s, cfg[P.C_ROUND], cfg[P.C_DBL_RND])
    fast = bool(cfg[P.C_FUNC] == P.LUT_NONE and cfg[C_OFM_BITS] != 64 and ok.all())
    zp, lo, hi, clip = P.output_limits.py_func(cfg)
    if not clip:
        lo, hi = -(np.int64(1) << 62), np.int64(1) << 62
    return sc, sh, bi, rp, rn, fast, zp, lo, hi


@njit(nogil=True, cache=True, inline="always")
def _fast_value(t32, keep, sc, sh, bi, rp, dr, zp, lo, hi):
    """One output of :func:`_finish_fast` (its arithmetic, written once for its two loops):
    acc = sign_extend(sum + bias, 32); r = rounded_shift_right(acc * scale, shift)
    [U85-TRM: §3.6.6]; wrap32(r + zp), clipped [U85-TRM: §3.6.7]. Written so that AVX2 (no
    64-bit vector multiply, vpmullq is AVX-512) vectorises it (issue 31 #1): the accumulator
    and the scale (|scale| < 2**31 here, _finish_terms) are visibly sign-extended int32, so
    LLVM multiplies with vpmuldq (32x32 -> 64) instead of three vpmuludq; exact, as both fit
    int32 and the product (< 2**62) int64. After the shift only the low 32 bits are kept
    (wrap32), so the zero point, the clip and the result run in int32 lanes: np.int32 is
    that wrap, and ``lo``/``hi`` are the clip bounds limited to int32 (the caller's; the same
    clip of an int32 value). The 64-bit arithmetic shift stays (LLVM's AVX2 form: two vpsrlvq)."""
    a = np.int64(np.int32((np.int64(t32) & keep) + bi))
    r = a * np.int64(np.int32(sc))
    r = (r + rp + (dr & (r >> 63))) >> sh
    return min(max(np.int32(r + zp), lo), hi)


@ranged
def _finish_fast_rows(tot, rows, cols, k, out, start, stop):
    """The usual output stage (32-bit accumulator from reset, TFLite-style scales; ``k``: the
    terms array of _stage_terms): written without branches or a ternary, so numba vectorises
    the channel loop (2-4x faster); output rows start..stop-1 (emu/ranged.py: rows in
    parallel in :func:`_finish_fast`). Five arguments, not ten: numba unboxes
    each one on every call (~60 ns an array), a third of a small layer's stage. ``out``: the
    OFM's bytes (an int8 view of [H, W, OC] of its 8-, 16- or 32-bit type, ``k[5, 3]`` = OC),
    each value's low bytes stored little-endian as numpy views them on the hosts we run (x86,
    arm64): the store truncates to OFM bits [U85-TRM: §3.6.7]. One compiled signature for
    every OFM type: an int8 and an int32 form of this kernel and of its serial twin took
    ~2 s of `accelstub compile`'s CPU (issue 31 #5). The 16/32-bit loop stores each value's
    bytes at constant offsets (2*oc.., 4*oc..) under a loop-invariant width test: LLVM splits
    the loop per width and vectorises both as the 8-bit one (32x32x64, serial: 16-bit 154 ->
    26 us, 32-bit 42 -> 26 us, 8-bit 25 us); offsets oc*nb (nb unknown) did not vectorise. An
    int16/int32 ``view`` of ``out`` was slower and compiled ~0.13 s longer per view."""
    W = out.shape[1]
    sc, sh, bi, rp, dr = k[0], k[1], k[2], k[3], k[4]
    zp, oc_n = k[5, 0], k[5, 3]
    lo, hi = np.int32(max(k[5, 1], -0x80000000)), np.int32(min(k[5, 2], 0x7FFFFFFF))
    nb = out.shape[2] // oc_n  # bytes per value: 1, 2 or 4
    for oy in range(start, stop):
        for ox in range(W):
            keep = -np.int64(rows[oy] != 0 and cols[ox] != 0)  # all ones, or 0: no tap
            if nb == 1:
                for oc in range(oc_n):
                    out[oy, ox, oc] = _fast_value(tot[oy, ox, oc], keep, sc[oc], sh[oc],
                                                  bi[oc], rp[oc], dr[oc], zp, lo, hi)
            else:
                for oc in range(oc_n):
                    v = _fast_value(tot[oy, ox, oc], keep, sc[oc], sh[oc], bi[oc], rp[oc],
                                    dr[oc], zp, lo, hi)
                    if nb == 2:
                        out[oy, ox, 2 * oc] = v
                        out[oy, ox, 2 * oc + 1] = v >> 8
                    else:
                        out[oy, ox, 4 * oc] = v
                        out[oy, ox, 4 * oc + 1] = v >> 8
                        out[oy, ox, 4 * oc + 2] = v >> 16
                        out[oy, ox, 4 * oc + 3] = v >> 24


@ranged_wrapper(_finish_fast_rows, nogil=True, cache=True)
def _finish_fast_serial(tot, rows, cols, k, out):
    """:func:`_finish_fast_rows` over every output row."""
    call_ranged(_finish_fast_rows, (tot, rows, cols, k, out, 0, out.shape[0]))


@ranged_wrapper(_finish_fast_rows, parallel=True, cache=True)
def _finish_fast(tot, rows, cols, k, out):
    """:func:`_finish_fast_rows` over every output row, in parallel (IC.CHUNKS)."""
    n = out.shape[0]
    m = min(n, IC.CHUNKS)
    for c in prange(m):
        call_ranged(_finish_fast_rows, (tot, rows, cols, k, out, c * n // m, (c + 1) * n // m))


_FINISH_FAST_TWIN = IC.twin(_finish_fast, _finish_fast_serial, _finish_fast_rows)


@ranged
def _finish_general_rows(tot, acc_in, rows, cols, use_acc, cfg, bias, scales, shifts, lut, sc,
                         sh, bi, rp, rn, inline, out, start, stop):
    """Every other output stage: accumulator start values, 48-bit accumulators, raw
    accumulator output, and (``inline`` False) LUT functions, 64-bit OFMs or unusual shifts
    through P.finish (~70 ns per element through nested calls, hence inline where it can);
    output rows start..stop-1 (emu/ranged.py)."""
    W, oc_n = out.shape[1], out.shape[2]
    bits = cfg[C_ACC_BITS]
    per_ch = cfg[P.C_SCALE_MODE] == 0
    raw_out = cfg[C_ACC_OUTPUT] != 0
    obits = cfg[C_OFM_BITS]
    zp, lo, hi, clip = P.output_limits(cfg)
    # branch-free forms of sign_extend/truncate (x + h) & m - h
    ah, am = np.int64(1) << (bits - 1), (np.int64(1) << bits) - 1
    oh = (np.int64(1) << (obits - 1)) if cfg[C_OFM_SIGNED] != 0 else np.int64(0)
    om = (np.int64(1) << obits) - 1
    pos = sh > 0
    sm1 = np.maximum(sh - 1, 0)
    for oy in range(start, stop):
        a = np.empty(oc_n, np.int64)
        for ox in range(W):
            tap = rows[oy] != 0 and cols[ox] != 0
            for oc in range(oc_n):
                a[oc] = acc_in[oy, ox, oc] if use_acc else np.int64(0)
            if tap:
                for oc in range(oc_n):
                    a[oc] = ((a[oc] + np.int64(tot[oy, ox, oc]) + ah) & am) - ah
            if raw_out:
                for oc in range(oc_n):
                    out[oy, ox, oc] = a[oc]
            elif not inline:
                for oc in range(oc_n):
                    out[oy, ox, oc] = P.finish(a[oc], oc, RESCALE_NORMAL, cfg, bias, scales,
                                               shifts, lut)
            else:
                if per_ch:
                    for oc in range(oc_n):
                        a[oc] = ((a[oc] + bi[oc] + ah) & am) - ah
                for oc in range(oc_n):
                    r = a[oc] * sc[oc]
                    rr = rp[oc] if r >= 0 else rn[oc]
                    q = ((r >> 1) + (rr >> 1) + (((r & 1) + (rr & 1)) >> 1)) >> sm1[oc]
                    r = q if pos[oc] else r
                    t = ((r + zp + 0x80000000) & 0xFFFFFFFF) - 0x80000000
                    if clip:
                        t = lo if t < lo else (hi if t > hi else t)
                    out[oy, ox, oc] = ((t + oh) & om) - oh


@ranged_wrapper(_finish_general_rows, nogil=True, cache=True)
def _finish_general_serial(tot, acc_in, rows, cols, use_acc, cfg, bias, scales, shifts, lut,
                           sc, sh, bi, rp, rn, inline, out):
    """:func:`_finish_general_rows` over every output row."""
    call_ranged(_finish_general_rows, (tot, acc_in, rows, cols, use_acc, cfg, bias, scales,
                                       shifts, lut, sc, sh, bi, rp, rn, inline, out, 0,
                                       out.shape[0]))


@ranged_wrapper(_finish_general_rows, parallel=True, cache=True)
def _finish_general(tot, acc_in, rows, cols, use_acc, cfg, bias, scales, shifts, lut, sc, sh,
                    bi, rp, rn, inline, out):
    """:func:`_finish_general_rows` over every output row, in parallel (IC.CHUNKS)."""
    n = out.shape[0]
    m = min(n, IC.CHUNKS)
    for c in prange(m):
        call_ranged(_finish_general_rows, (tot, acc_in, rows, cols, use_acc, cfg, bias, scales,
                                           shifts, lut, sc, sh, bi, rp, rn, inline, out,
                                           c * n // m, (c + 1) * n // m))


_FINISH_GENERAL_TWIN = IC.twin(_finish_general, _finish_general_serial, _finish_general_rows)


class IntConv(NamedTuple):
    """A convolution on the shared integer kernels (emu/int_conv.py) with everything but its
    input worked out: the kernel's weight layout, the geometry, the tap masks and the output
    stage's per-channel terms. Why: a layer has the same ones on every run, and working them
    out (with the wrapper's checks) cost more than the smaller layers' kernels; the device
    keeps one per layer (:func:`plan_int_conv`), the wrappers build one per call."""
    depthwise: bool
    weights: object            # PackedWeights (conv), IC.depthwise_layout (depthwise): not
    #                            the decoded weights themselves (a kept IntConv must not keep them)
    channels: int              # input channels read
    out_hw: tuple
    in_hw: tuple               # derived IFM extent
    pad: tuple                 # (top, left)
    stride: tuple
    dilation: tuple
    zero_point: int            # subtracted by the kernel
    rows: np.ndarray           # _tap_mask of the output rows / columns
    cols: np.ndarray
    cfg: np.ndarray
    terms: tuple               # _stage_terms
    dtype: np.dtype            # the OFM's integer type
    launches: dict             # IC.conv_sums' byte-kernel calls kept for this layer
    flat: tuple | None = None  # (H, W) of a 1x1, stride 1, unpadded convolution whose sums
    #                            run as one row of H*W (out_hw and in_hw are that row's): the
    #                            kernel computes blocks of 16 columns, so a 6x6 or 3x3 layer
    #                            did 2.7x or 5.3x the work it needs. The masks and the output
    #                            stage keep the H rows (a parallel stage shares out rows)


def int_conv(w: np.ndarray, depthwise: bool, ofm_hw: tuple, in_hw: tuple, pad: tuple,
             stride: tuple, dilation: tuple, zero_point: int, cfg: np.ndarray, bias, scales,
             shifts) -> IntConv:
    """The :class:`IntConv` of ``w`` [OC, KHu, KWu, IC] (IC = 1 for depthwise) and the
    geometry; the caller has checked that the sums are exact (IC.fits_int32)."""
    oc_n, kh, kw = w.shape[0], w.shape[1], w.shape[2]
    (H, W), (ih, iw), (pt, pl) = ofm_hw, in_hw, pad[:2]
    (sy, sx), (dy, dx) = stride, dilation
    rows, cols = _tap_mask(H, sy, dy, kh, pt, ih), _tap_mask(W, sx, dx, kw, pl, iw)
    flat = None
    if not depthwise and kh == kw == 1 and (sy, sx) == (1, 1) and not any(pad) \
            and (ih, iw) == (H, W) and H > 1:  # every output one input pixel's: one row
        flat, (H, W), (ih, iw) = (H, W), (1, H * W), (1, H * W)
    return IntConv(depthwise, IC.depthwise_layout(w) if depthwise else IC.packed_weights(w),
                   oc_n if depthwise else w.shape[3], (H, W), (ih, iw), (pt, pl), (sy, sx),
                   (dy, dx), zero_point, rows, cols, cfg,
                   _stage_terms(cfg, bias, scales, shifts, oc_n), ofm_dtype(cfg), {}, flat)


def plan_int_conv(raw: np.ndarray, w: np.ndarray, ofm_hw: tuple, stride: tuple,
                  dilation: tuple, pad: tuple, ifm_zp: int, bits: int, signed: bool, cfg,
                  bias, scales, shifts, depthwise: bool, dilated: tuple) -> IntConv | None:
    """The :class:`IntConv` of a convolution (no upscale) whose input is ``raw`` [H, W, C],
    the stored integers in the IFM's own type (as the device reads them), or None where the
    integer kernels' exact path does not take it as it is or one of the pseudocode's asserts
    that :func:`_conv_common` reports would fail (it then runs as before)."""
    if not (bits == 8 or (bits == 16 and signed)) or raw.ndim != 3 \
            or not native(raw, bits, signed):
        return None
    zp, ok = P.ifm_zero_point(ifm_zp, bits, signed)
    oc_n = w.shape[0]
    (H, W), (sy, sx), (dh, dw) = ofm_hw, stride, dilated
    pt, pl, pb, pr = pad
    ih, iw = (H - 1) * sy + dh - (pt + pb), (W - 1) * sx + dw - (pl + pr)
    if not ok or min(H, W, ih, iw) < 1 or min(pad) < 0 or dh * dw > 4096 \
            or (dh > 64 and dw > 64) or raw.shape[0] < ih or raw.shape[1] < iw \
            or raw.shape[2] < (oc_n if depthwise else w.shape[3]) \
            or (depthwise and w.shape[3] != 1):
        return None
    lo, hi = P.type_range(bits, signed)
    if not IC.fits_int32(lo - zp, hi - zp, w):
        return None
    return int_conv(w, depthwise, (H, W), (ih, iw), pad, stride, dilation, zp,
                    config_or_default(cfg), bias, scales, shifts)


def run_int_conv(p: IntConv, v: np.ndarray, acc_in: np.ndarray | None = None,
                 lut=None) -> np.ndarray:
    """The convolution of ``v`` [H, W, >= p.channels] (integers whose values after
    p.zero_point fit int16): the integer kernels' exact sums, then per output
    acc = read_accumulator(...) (0 for reset); if any kernel position was inside the IFM
    (rows[oy] and cols[ox]): acc = sign_extend(acc + sum, acc_bits) (= the chain of wrapping
    accumulate() calls); write_accumulator(acc, rescale_mode_normal) = P.finish. Returns the
    OFM [H, W, OC] in its integer type (stores truncate, as astype does)."""
    (H, W), v = p.out_hw, v[:, :, :p.channels]
    if p.flat is not None:  # (a view where the rows are contiguous, else a copy)
        v = v[:p.flat[0], :p.flat[1]].reshape(1, H * W, v.shape[2])
    if p.depthwise:
        tot = IC.depthwise_sums(v, p.weights, (H, W), zero_point=p.zero_point, in_hw=p.in_hw,
                                pad=p.pad, stride=p.stride, dilation=p.dilation, laid_out=True)
    else:
        tot = IC.conv_sums(v.transpose(2, 0, 1), p.weights, (H, W), zero_point=p.zero_point,
                           in_hw=p.in_hw, pad=p.pad, stride=p.stride, dilation=p.dilation,
                           hwc=True, padded=True, launches=p.launches)
    if p.flat is not None:  # the sums of the H*W pixels lead the row: its rows as a view
        (H, W) = p.flat
        tot = tot[0, :H * W].reshape(H, W, tot.shape[2])
    return _output_stage(tot, acc_in, p.rows, p.cols, p.cfg, p.terms, lut,
                         np.empty((H, W, p.channels if p.depthwise else p.weights.k), p.dtype))


def _output_stage(tot, acc_in, rows, cols, cfg, terms, lut, out):
    """The accumulator and output stage of exact sums ``tot`` [>= H, >= W, >= OC] (int32 from the
    integer kernels, float from the BLAS path; a C-contiguous array, not a view of one: numba
    vectorises the channel loop only then) into ``out`` [H, W, OC]; ``terms`` from
    :func:`_stage_terms`. Two kernels, so a first run compiles the one its layers need (the
    general one alone took ~5 s per type)."""
    bias, scales, shifts, sc, sh, bi, rp, rn, inline, k, fast = terms
    if fast and acc_in is None:
        _launch_stage(_FINISH_FAST_TWIN, out.size, tot, rows, cols, k, out.view(np.int8))
        return out
    use_acc = acc_in is not None
    acc = np.ascontiguousarray(acc_in, np.int64) if use_acc else np.zeros((1, 1, 1), np.int64)
    _launch_stage(_FINISH_GENERAL_TWIN, out.size, tot, acc, rows, cols, use_acc, cfg, bias,
                  scales, shifts, lut_bytes(lut), sc, sh, bi, rp, rn, inline, out)
    return out


#: output stages of fewer elements run the serial kernel. Measured on the 2-core EPYC (int8,
#: 48 channels, us serial / parallel on 2 threads, best of 200): 3072 elements 1.9 / 4.3,
#: 27648 11.2 / 9.5, 110592 43 / 25, 442368 172 / 91, and a parallel launch waits for every
#: thread: while another process held a core, one launch in ten took 16-20 ms whatever its
#: size (at 768 and 786432 elements; serial ones stayed under 5 ms), and MobileNet v2's one
#: stage above the old bound (16 x elements >= SERIAL_WORK: 110592 elements, in one row) took
#: 10 ms median of an 18 ms inference. So parallel only where halving the stage saves ~0.1 ms.
STAGE_PARALLEL = 1 << 19


def stage_parallel(size: int) -> IC.parallel:
    """The launch of an output stage on ``size`` elements, parallel from STAGE_PARALLEL on (the
    executor's rows take the same choice, emu/executor/ethosu85.py K_PAR_FINISH)."""
    return IC.parallel_for_elements(size, STAGE_PARALLEL)


def _launch_stage(twin: IC.Twin, size: int, *args) -> None:
    """Run an output stage kernel on ``size`` elements: below STAGE_PARALLEL elements its
    serial version, called directly (a kernel without parfor needs neither IC.PARALLEL nor a
    thread count: ~0.8 us saved per stage), else through IC.parallel (:func:`stage_parallel`)."""
    par = stage_parallel(size)
    if par.threads == 1:
        twin.serial(*args)
        return
    with par:
        par.kernel(twin)(*args)


_TERMS: dict = {}  # (cfg bytes, ids of bias/scales/shifts, channels) -> (those arrays, terms)


def _stage_terms(cfg, bias, scales, shifts, oc_n: int) -> tuple:
    """(bias, scales, shifts as int64[oc_n], sc, sh, bi, rp, rn, inline of
    :func:`_finish_terms`, then :func:`_finish_fast`'s terms in one array and whether it
    applies without accumulator input), kept for read-only (decoded) scale arrays and the same
    cfg: a layer passes the same ones on every run, and working them out again cost ~15 us per
    operation. The entry holds the arrays, so their ids stay theirs while it lives. The array
    (``k``): rows scale, shift, bias, rp, rn - rp per channel, then the OFM zero point, the
    clip bounds and the channel count (packed here, not in _finish_terms: array slices there
    compiled for 6 s)."""
    keep = all(a is None or (isinstance(a, np.ndarray) and not a.flags.writeable)
               for a in (bias, scales, shifts))
    key = (cfg.tobytes(), id(bias), id(scales), id(shifts), oc_n)
    hit = _TERMS.get(key) if keep else None
    if hit is None:
        pc = (per_channel(bias, oc_n), per_channel(scales, oc_n), per_channel(shifts, oc_n))
        sc, sh, bi, rp, rn, inline, *limits = _finish_terms(cfg, *pc, oc_n)
        k = np.zeros((6, max(oc_n, 4)), np.int64)
        k[:5, :oc_n] = sc, sh, bi, rp, rn - rp
        k[5, :4] = *limits, oc_n
        fast = bool(inline and cfg[C_ACC_OUTPUT] == 0 and cfg[C_ACC_BITS] == 32)
        hit = ((bias, scales, shifts), pc + (sc, sh, bi, rp, rn, inline, k, fast))
        if keep:
            if len(_TERMS) >= 1024:
                _TERMS.clear()
            _TERMS[key] = hit
    return hit[1]


def _conv_common(ifm, weights, ofm_hw, stride, dilation, pad, ifm_zp, ifm_bits, ifm_signed,
                 upscale_mode, cfg, bias, scales, shifts, lut, acc_in, diag, depthwise,
                 method="auto", dilated=None):
    cfg = config_or_default(cfg)
    bits, signed = infer_type(ifm, ifm_bits, ifm_signed)
    check(diag, bits == 8 or (bits == 16 and signed),
          "CONV/DEPTHWISE IFM must be b8 or signed b16 [U85-TRM: §3.10.2]")
    raw = np.asarray(ifm)
    w = np.asarray(weights, np.int64)
    if depthwise and w.ndim == 3:
        w = w[..., None]
    oc_n, kh, kw = w.shape[0], w.shape[1], w.shape[2]
    H, W = int(ofm_hw[0]), int(ofm_hw[1])
    dilated = dilated or ((kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1)
    if method != "loop" and upscale_mode == UPSCALE_NONE:  # the usual case: no assert to report
        p = plan_int_conv(raw, w, (H, W), stride, dilation, pad, ifm_zp, bits, signed, cfg,
                          bias, scales, shifts, depthwise, dilated)
        if p is not None:
            return run_int_conv(p, raw, acc_in, lut)
    sy, sx = stride
    dy, dx = dilation
    pt, pl, pb, pr = pad
    # KERNEL_*_M1 + 1 [U85-TRM: §3.10.2]; with dilation x2 it may be even, one more than the taps
    # reach (ky*dil < dilated size, [U85-TRM: §3.10.2]), and still counts in the IFM extent
    dh, dw = dilated
    ih = (H - 1) * sy + dh - (pt + pb)  # derived IFM extent [U85-TRM: §3.10.2]
    iw = (W - 1) * sx + dw - (pl + pr)
    zp = P.ifm_zero_point(ifm_zp, bits, signed)[0]
    gemm = None
    if method != "loop" and bits <= 16 and ih >= 1 and iw >= 1 and H >= 1 and W >= 1 \
            and min(pt, pl, pb, pr) >= 0 and raw.ndim == 3 \
            and ((depthwise and w.shape[3] == 1) or (not depthwise and raw.shape[2] >= w.shape[3])):
        lo, hi = P.type_range(bits, signed)
        # the integer kernel (emu/int_conv.py) where its int32 sums are exact, else float BLAS
        gemm = "int" if IC.fits_int32(lo - zp, hi - zp, w) else \
            _gemm_dtype(max(abs(lo - zp), abs(hi - zp)), w)
    if gemm is not None and upscale_mode == UPSCALE_NONE:
        # read_values without the int64 round trip: native stored integers go straight into
        # the padded float frame, the zero point is subtracted there
        checked_zero_point(ifm_zp, bits, signed, diag)
        v, vzp = (raw, zp) if native(raw, bits, signed) else (read_values(raw, zp, bits, signed), 0)
    else:
        v, vzp = upscale(read_values(raw, ifm_zp, bits, signed, diag), upscale_mode), 0
    check(diag, ih >= 1 and iw >= 1, "derived IFM extent < 1 [U85-TRM: §3.10.2]")
    check(diag, dh * dw <= 4096 and (dh <= 64 or dw <= 64), "kernel too large [U85-TRM: §3.10.2]")
    check(diag, upscale_mode == UPSCALE_NONE or (sy == 1 and sx == 1),
          "upscale needs stride 1 [U85-TRM: §3.6.5]")
    check(diag, v.shape[0] >= ih and v.shape[1] >= iw,
          f"IFM {v.shape[:2]} smaller than derived extent {(ih, iw)}")
    if depthwise:
        check(diag, v.shape[2] >= oc_n, "DEPTHWISE IFM depth < OFM depth")
    if gemm is not None:
        if depthwise and v.shape[2] < oc_n:
            v = np.concatenate([v, np.zeros(v.shape[:2] + (oc_n - v.shape[2],), v.dtype)], axis=2)
        elif not depthwise:
            v = v[:, :, :w.shape[3]]                                 # the loop reads ic < IC only
        if gemm == "int":
            return run_int_conv(int_conv(w, depthwise, (H, W), (ih, iw), pad, stride, dilation,
                                         vzp, cfg, bias, scales, shifts), v, acc_in, lut)
        hp, wp = (H - 1) * sy + dh, (W - 1) * sx + dw
        tot = _conv_sums(_padded(v, vzp, hp, wp, pt, pl, ih, iw, gemm), w, H, W, sy, sx, dy, dx,
                         depthwise)
        return _output_stage(tot, acc_in, _tap_mask(H, sy, dy, kh, pt, ih),
                             _tap_mask(W, sx, dx, kw, pl, iw), cfg,
                             _stage_terms(cfg, bias, scales, shifts, oc_n), lut,
                             np.empty((H, W, oc_n), ofm_dtype(cfg)))
    v = fit_hw(v, max(ih, 0), max(iw, 0))
    if depthwise and v.shape[2] < oc_n:
        v = np.concatenate([v, np.zeros(v.shape[:2] + (oc_n - v.shape[2],), np.int64)], axis=2)
    acc = np.zeros((H, W, oc_n), np.int64) if acc_in is None \
        else np.ascontiguousarray(acc_in, np.int64)
    geo = np.array([H, W, sy, sx, dy, dx, pt, pl, dh, dw, 1 if depthwise else 0], np.int64)
    out = _conv_kernel(np.ascontiguousarray(v), np.require(w, requirements=["C", "W"]), acc, geo,
                       cfg, per_channel(bias, oc_n), per_channel(scales, oc_n),
                       per_channel(shifts, oc_n), lut_bytes(lut))
    return out.astype(ofm_dtype(cfg))


def conv2d(ifm, weights, ofm_hw=None, *, stride=(1, 1), dilation=(1, 1), pad=(0, 0, 0, 0),
           ifm_zp=0, ifm_bits=None, ifm_signed=None, upscale_mode=UPSCALE_NONE, cfg=None,
           bias=None, scales=None, shifts=None, lut=None, acc_in=None, diag=None,
           method: str = "auto", dilated: tuple[int, int] | None = None) -> np.ndarray:
    """NPU_OP_CONV (weights_ifm2 = 0). ifm [H,W,C] or [N,H,W,C] raw stored integers;
    weights [OC, KH, KW, IC] int9 with UNDILATED kernel indices (as decoded from the weight
    stream); pad = (top, left, bottom, right); ofm_hw defaults to the TFLite-style full output.
    bias/scales/shifts per OFM channel (decoded scale stream, used when cfg is per_channel).
    method "auto" sums with an exact float BLAS GEMM whenever exactness is provable (see
    _gemm_dtype), else with the numba loop; "loop" always runs the loop (the reference the GEMM
    path is tested against). Both give identical results. ``dilated`` = KERNEL_HEIGHT/WIDTH_M1
    + 1 when it is not (k-1)*dilation + 1 (an even size with dilation x2)."""
    ifm = np.asarray(ifm)
    if ofm_hw is None:
        w = np.asarray(weights)
        up = 2 if upscale_mode else 1
        ih, iw = ifm.shape[-3] * up, ifm.shape[-2] * up
        dh, dw = (w.shape[1] - 1) * dilation[0] + 1, (w.shape[2] - 1) * dilation[1] + 1
        ofm_hw = ((ih + pad[0] + pad[2] - dh) // stride[0] + 1,
                  (iw + pad[1] + pad[3] - dw) // stride[1] + 1)
    return batched(_conv_common, ifm, weights, ofm_hw, stride, dilation, pad, ifm_zp, ifm_bits,
                    ifm_signed, upscale_mode, cfg, bias, scales, shifts, lut, acc_in, diag, False,
                    method, dilated)


def depthwise2d(ifm, weights, ofm_hw=None, *, stride=(1, 1), dilation=(1, 1), pad=(0, 0, 0, 0),
                ifm_zp=0, ifm_bits=None, ifm_signed=None, upscale_mode=UPSCALE_NONE, cfg=None,
                bias=None, scales=None, shifts=None, lut=None, acc_in=None, diag=None,
                method: str = "auto", dilated: tuple[int, int] | None = None) -> np.ndarray:
    """NPU_OP_DEPTHWISE (channel multiplier 1): weights [C, KH, KW] or [C, KH, KW, 1];
    ``method`` and ``dilated`` as for :func:`conv2d` (the exact path is a float multiply-add
    per position)."""
    w = np.asarray(weights)
    if w.ndim == 3:
        w = w[..., None]
    ifm = np.asarray(ifm)
    if ofm_hw is None:
        up = 2 if upscale_mode else 1
        ih, iw = ifm.shape[-3] * up, ifm.shape[-2] * up
        dh, dw = (w.shape[1] - 1) * dilation[0] + 1, (w.shape[2] - 1) * dilation[1] + 1
        ofm_hw = ((ih + pad[0] + pad[2] - dh) // stride[0] + 1,
                  (iw + pad[1] + pad[3] - dw) // stride[1] + 1)
    return batched(_conv_common, ifm, w, ofm_hw, stride, dilation, pad, ifm_zp, ifm_bits,
                    ifm_signed, upscale_mode, cfg, bias, scales, shifts, lut, acc_in, diag, True,
                    method, dilated)


def matmul(ifm, ifm2, *, ifm_zp=0, ifm2_zp=0, ifm_bits=None, ifm_signed=None, cfg=None,
           bias=None, scales=None, shifts=None, lut=None, acc_in=None, diag=None,
           method: str = "auto") -> np.ndarray:
    """NPU_OP_CONV with weights_ifm2 = 1 [U85-TRM: §3.10.2]: OFM [1, W, D] = IFM [1, W, IC] times
    the transpose of IFM2 [1, D, IC] (y = 0, x = oc, c = ic), both zero-point corrected; kernel
    1x1, stride 1, no padding (asserts [U85-TRM: §3.10.2]). Why x = oc: the TRM's performance
    chapter [U85-TRM: §4.1] says the 1x1 convolution multiplies A "by the transpose of a second
    matrix B", and Vela 5.2 programs IFM2 so (width = OFM depth, depth = IFM depth); the
    pseudocode's ``read_ifm2(0, ic, oc)`` [U85-TRM: §3.10.2] swaps the two and is not what the
    compiler relies on."""
    ifm = np.asarray(ifm)
    if ifm.ndim == 4:
        return np.stack([matmul(ifm[n], np.asarray(ifm2)[min(n, np.asarray(ifm2).shape[0] - 1)]
                                if np.asarray(ifm2).ndim == 4 else ifm2, ifm_zp=ifm_zp,
                                ifm2_zp=ifm2_zp, ifm_bits=ifm_bits, ifm_signed=ifm_signed, cfg=cfg,
                                bias=bias, scales=scales, shifts=shifts, lut=lut, acc_in=acc_in,
                                diag=diag, method=method) for n in range(ifm.shape[0])])
    bits, signed = infer_type(ifm, ifm_bits, ifm_signed)
    check(diag, ifm.shape[0] == 1, "matmul needs OFM height 1 [U85-TRM: §3.10.2]")
    # IFM2 precision == IFM's [U85-TRM: §3.10.2]
    b = read_values(ifm2, ifm2_zp, bits, signed, diag, "IFM2")
    if b.ndim == 3:
        b = b[0]
    w = np.ascontiguousarray(b[:, None, None, :])  # W[oc][0][0][ic] = ifm2[0][oc][ic]
    return _conv_common(ifm, w, (ifm.shape[0], ifm.shape[1]), (1, 1), (1, 1), (0, 0, 0, 0),
                        ifm_zp, bits, signed, UPSCALE_NONE, cfg, bias, scales, shifts, lut, acc_in,
                        diag, False, method)


