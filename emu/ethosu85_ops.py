"""Ethos-U85 kernel operations on plain numpy tensors: CONV (incl. the IFM2 "matmul" form),
DEPTHWISE, POOL (all 8 modes), ELEMENTWISE (all 21 modes), RESIZE (bilinear/replicate/nearest).

Source: TRM 3.10 pseudocode (seed 001_f249bc9cdd166610.txt, "Lnnnn"; digest
shared/devices/ethos-u85-command-stream.md section 4). No device knowledge: tensors are numpy
arrays in HWC (or NHWC, batches are independent), already read from memory; register values
come in as arguments. The numba kernels (``_*_kernel``) take int64 arrays plus packed int64
parameter vectors only, so each compiles exactly one signature; the Python wrappers do
read_ifm's value part (zero-point subtraction, upscale), derive the IFM extent and check the
pseudocode's asserts. A violated assert is UNPREDICTABLE in the TRM (L6004-6014): the wrappers
append a message to ``diag`` (a list, when given) and continue with the literal result.

Every wrapper returns the OFM values truncated to the OFM type (dtype from ``cfg``; see
:func:`ofm_dtype`), or the raw int64 accumulators when ``cfg`` has acc_output = disable.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import njit, prange

from . import ethosu85_primitives as P
from . import int_conv as IC
from .ethosu85_primitives import (C_ACC_BITS, C_OFM_BITS, C_OFM_SIGNED, C_ACC_OUTPUT, C_SHIFT,
                                  C_SCALE, C_ZP, RESCALE_AVPOOL, RESCALE_GLOBAL, RESCALE_NONE,
                                  RESCALE_NORMAL, RESCALE_SHIFT_ONLY)

# pooling_mode (L9011)
POOL_MAX, POOL_AVERAGE, POOL_REDUCE_SUM, POOL_SUM, POOL_NONE, POOL_MIN, POOL_ARGMAX_X, \
    POOL_ARGMAX_Y = range(8)
# elementwise_mode (Table 3-100, L8670-8698)
EW_MUL, EW_ADD, EW_SUB, EW_MIN, EW_MAX, EW_LRELU, EW_ABS, EW_CLZ, EW_SHR, EW_SHL, EW_LSHR, \
    EW_DIV = range(12)
EW_CMP_EQ, EW_CMP_NE, EW_CMP_GE, EW_CMP_GT = 16, 17, 18, 19
EW_AND, EW_OR, EW_XOR, EW_NOT, EW_AND_NOT = 33, 34, 35, 36, 42
EW_UNARY = (EW_LRELU, EW_ABS, EW_CLZ, EW_NOT)  # L8499
EW_MODES = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 33, 34, 35, 36, 42)
# resize_mode (L9140)
RESIZE_BILINEAR, RESIZE_REPLICATE, RESIZE_NEAREST = 0, 1, 2
# IFM_UPSCALE.mode (L10097)
UPSCALE_NONE, UPSCALE_NEAREST, UPSCALE_ZEROS = 0, 1, 2
# broadcast_mode bits (L9538, L9781)
BC_H, BC_W, BC_C, BC_SCALAR = 1, 2, 4, 8

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1


def ofm_dtype(cfg: np.ndarray) -> np.dtype:
    """numpy dtype of the OFM values a wrapper returns for this ``cfg`` (int64 for raw
    accumulators)."""
    if cfg[C_ACC_OUTPUT]:
        return np.dtype(np.int64)
    bits, signed = int(cfg[C_OFM_BITS]), bool(cfg[C_OFM_SIGNED])
    return np.dtype(("i" if signed else "u") + str(bits // 8))


def _diag(diag, cond, msg):
    if not cond and diag is not None:
        diag.append(msg)


def _lut(lut):
    if lut is None:
        return np.zeros(P.LUT_BYTES, np.uint8)
    b = np.frombuffer(bytes(lut), np.uint8) if not isinstance(lut, np.ndarray) else lut
    out = np.zeros(P.LUT_BYTES, np.uint8)
    b = b.view(np.uint8).ravel()[:P.LUT_BYTES]
    out[:b.size] = b
    return out


def _chan(a, d, default=0):
    out = np.full(d, default, np.int64)
    if a is not None:
        a = np.asarray(a, np.int64).ravel()
        out[:min(d, a.size)] = a[:d]
    return out


def _cfg(cfg):
    return P.out_config() if cfg is None else np.ascontiguousarray(cfg, np.int64)


def _infer_type(arr, bits, signed):
    dt = np.asarray(arr).dtype
    if bits is None:
        bits = dt.itemsize * 8 if dt.kind in "iu" else 8
    if signed is None:
        signed = dt.kind != "u"
    return int(bits), bool(signed)


def read_values(raw, zero_point: int, bits: int, signed: bool, diag=None, name="IFM") -> np.ndarray:
    """read_ifm's value part (L6540-6558): reinterpret the stored integers as the tensor type
    (bits/signed) and subtract the zero point, interpreted as int16 or uint16 by the type.
    Returns int64."""
    raw = np.asarray(raw)
    v = raw.astype(np.int64)
    if bits < 64:
        v = v & ((1 << bits) - 1)
        if signed:
            v = np.where(v >= (1 << (bits - 1)), v - (1 << bits), v)
    zp, ok = P.ifm_zero_point(zero_point, bits, signed)
    _diag(diag, ok, f"{name} zero point {zp} invalid for {'s' if signed else 'u'}{bits} (L6550-6556)")
    return v - zp


def upscale(v: np.ndarray, mode: int) -> np.ndarray:
    """IFM_UPSCALE (L6518-6526) applied to zero-point-corrected HWC values: nearest doubles H
    and W by replication, zeros puts v at even (y, x) and 0 (= the zero point) elsewhere."""
    if mode == UPSCALE_NONE:
        return v
    h, w, c = v.shape
    if mode == UPSCALE_NEAREST:
        return np.repeat(np.repeat(v, 2, axis=0), 2, axis=1)
    out = np.zeros((2 * h, 2 * w, c), np.int64)
    out[0::2, 0::2] = v
    return out


def _fit(v, h, w):
    """Return an (h, w, C) view/extension of v: positions beyond the stored array read 0."""
    if v.shape[0] >= h and v.shape[1] >= w:
        return np.ascontiguousarray(v[:h, :w])
    out = np.zeros((h, w, v.shape[2]), np.int64)
    hh, ww = min(h, v.shape[0]), min(w, v.shape[1])
    out[:hh, :ww] = v[:hh, :ww]
    return out


def _batched(fn, ifm, *args, **kw):
    ifm = np.asarray(ifm)
    if ifm.ndim == 4:
        return np.stack([fn(ifm[n], *args, **kw) for n in range(ifm.shape[0])])
    return fn(ifm, *args, **kw)


# ------------------------------------------------------------------------------------------------
# CONV / DEPTHWISE (L8147-8228, L8256-8315)

@njit(nogil=True, cache=True)
def _conv_kernel(v, w, acc_in, geo, cfg, bias, scales, shifts, lut):
    """NPU_OP_CONV / NPU_OP_DEPTHWISE loop (L8185-8226, L8295-8313)::

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
    wsum = int(np.abs(w).reshape(w.shape[0], -1).sum(axis=1).max())
    bound = int(vmax) * wsum
    if bound < F32_EXACT:
        return np.float32
    if bound < F64_EXACT:
        return np.float64
    return None


def _padded(v: np.ndarray, zp: int, hp: int, wp: int, pt: int, pl: int, ih: int, iw: int,
            dt) -> np.ndarray:
    """The IFM in the padded frame as float ``dt``: rows [pt, pt+ih), columns [pl, pl+iw) hold
    v - zp (v cut or zero-extended to ih x iw as _fit does), everything else 0 (padding reads 0,
    L8201). One spare row so the flattened tap slices of the stride-1 path stay in bounds."""
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


@njit(nogil=True, cache=True)
def _round_terms(shift, mode, dbl_rnd):
    """The rounding addends R of rounded_shift_right (L6906-6934) for acc >= 0 and acc < 0,
    so the output loop needs no per-element mode dispatch (same arithmetic as
    P.rounded_shift_right; shift 1..63)."""
    half = np.int64(1) << (shift - 1)
    d = np.int64(0)
    if dbl_rnd <= 30 and shift > 31 - dbl_rnd:
        d = np.int64(1) << (30 - dbl_rnd)
    rp = half
    rn = half
    if mode == P.RND_DOUBLE_SYMMETRIC:
        rp, rn = half + d, half - d
    elif mode == P.RND_DOUBLE_ASYMMETRIC:
        rp, rn = half + d, half + d
    elif mode == P.RND_TRUNCATE_TO_ZERO:
        rp, rn = np.int64(0), (half - 1) + half
    elif mode == P.RND_TRUNCATE_TO_LOWER:
        rp, rn = np.int64(0), np.int64(0)
    elif mode == P.RND_SYMMETRIC:
        rp, rn = half, half - 1
    return rp, rn


@njit(parallel=True, cache=True)
def _conv_finish_kernel(tot, acc_in, rows, cols, geo, cfg, bias, scales, shifts, lut, out):
    """The accumulator and output stage of the GEMM path: per output
    acc = read_accumulator(...) (0 for reset); if any kernel position was inside the IFM:
    acc = sign_extend(acc + sum, acc_bits) (= the chain of wrapping accumulate() calls);
    write_accumulator(acc, rescale_mode_normal) = P.finish. tot: [H, Wc, OC] exact integer
    sums (float from the BLAS path, int32 from emu/int_conv.py); geo: H, W, use acc_in;
    ``out`` [H, W, OC] of the OFM's integer type (stores truncate, as astype does). Rows in parallel (numba prange): per element this stage costs
    about a third of the GEMM.

    P.finish per element costs ~70 ns here (array arguments through nested calls); the common
    output stage (no LUT function, OFM narrower than 64 bits, shifts 0..63) is therefore
    inlined with the per-channel scale, shift and rounding addends hoisted out of the loop.
    Everything else calls P.finish."""
    H, W, use_acc = geo[0], geo[1], geo[2]
    oc_n = tot.shape[2]
    bits = cfg[C_ACC_BITS]
    per_ch = cfg[P.C_SCALE_MODE] == 0
    raw_out = cfg[C_ACC_OUTPUT] != 0
    obits = cfg[C_OFM_BITS]
    osigned = cfg[C_OFM_SIGNED] != 0
    inline = cfg[P.C_FUNC] == P.LUT_NONE and obits != 64
    sc = np.empty(oc_n, np.int64)
    sh = np.empty(oc_n, np.int64)
    bi = np.zeros(oc_n, np.int64)
    rp = np.zeros(oc_n, np.int64)
    rn = np.zeros(oc_n, np.int64)
    for oc in range(oc_n):
        if per_ch:
            sc[oc], sh[oc], bi[oc] = scales[oc], shifts[oc], bias[oc]
        else:
            sc[oc], sh[oc] = cfg[C_SCALE], cfg[C_SHIFT]
        if sh[oc] < 0 or sh[oc] > 63:
            inline = False
        elif sh[oc] > 0:
            rp[oc], rn[oc] = _round_terms(sh[oc], cfg[P.C_ROUND], cfg[P.C_DBL_RND])
    if osigned:
        zp = P.sign_extend(cfg[C_ZP], 16)
        lo = P.sign_extend(cfg[P.C_ACT_MIN], 16)
        hi = P.sign_extend(cfg[P.C_ACT_MAX], 16)
    else:
        zp = cfg[C_ZP] & 0xFFFF
        lo = cfg[P.C_ACT_MIN] & 0xFFFF
        hi = cfg[P.C_ACT_MAX] & 0xFFFF
    clip = cfg[P.C_CLIP] == 0
    # branch-free forms of sign_extend/truncate (x + h) & m - h, loop-invariant choices outside
    ah, am = np.int64(1) << (bits - 1), (np.int64(1) << bits) - 1
    oh, om = (np.int64(1) << (obits - 1)) if osigned else np.int64(0), (np.int64(1) << obits) - 1
    if inline and not use_acc and not raw_out and bits == 32 and oc_n and sh.max() <= 62 \
            and np.abs(sc).max() < 1 << 31:
        # the usual case (32-bit accumulator, TFLite-style scales): |acc * scale| < 2**62 and
        # shift <= 62, so acc * scale + R cannot overflow and needs no halving; written without
        # branches or a ternary (numba then vectorises the channel loop: 2-4x faster)
        if not clip:
            lo, hi = -(np.int64(1) << 62), np.int64(1) << 62
        for oy in prange(H):
            for ox in range(W):
                keep = -np.int64(rows[oy] != 0 and cols[ox] != 0)  # all ones, or 0: no tap
                for oc in range(oc_n):
                    a = (((np.int64(tot[oy, ox, oc]) & keep) + bi[oc] + 0x80000000)
                         & 0xFFFFFFFF) - 0x80000000
                    r = a * sc[oc]
                    r = (r + rp[oc] + ((rn[oc] - rp[oc]) & (r >> 63))) >> sh[oc]
                    t = ((r + zp + 0x80000000) & 0xFFFFFFFF) - 0x80000000
                    out[oy, ox, oc] = min(max(t, lo), hi)  # the store truncates to OFM bits
        return out
    pos = sh > 0
    sm1 = np.maximum(sh - 1, 0)
    for oy in prange(H):
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
    return out


def _native(raw: np.ndarray, bits: int, signed: bool) -> bool:
    """The stored integers already have the tensor's type (no reinterpretation needed)."""
    return raw.dtype == np.dtype(("i" if signed else "u") + str(bits // 8))


def _conv_common(ifm, weights, ofm_hw, stride, dilation, pad, ifm_zp, ifm_bits, ifm_signed,
                 upscale_mode, cfg, bias, scales, shifts, lut, acc_in, diag, depthwise,
                 method="auto", dilated=None):
    cfg = _cfg(cfg)
    bits, signed = _infer_type(ifm, ifm_bits, ifm_signed)
    _diag(diag, bits == 8 or (bits == 16 and signed), "CONV/DEPTHWISE IFM must be b8 or signed b16 (L8180)")
    raw = np.asarray(ifm)
    w = np.asarray(weights, np.int64)
    if depthwise and w.ndim == 3:
        w = w[..., None]
    oc_n, kh, kw = w.shape[0], w.shape[1], w.shape[2]
    H, W = int(ofm_hw[0]), int(ofm_hw[1])
    sy, sx = stride
    dy, dx = dilation
    pt, pl, pb, pr = pad
    # KERNEL_*_M1 + 1 (L8150-8151); with dilation x2 it may be even, one more than the taps
    # reach (ky*dil < dilated size, L8188), and still counts in the IFM extent
    dh, dw = dilated or ((kh - 1) * dy + 1, (kw - 1) * dx + 1)
    ih = (H - 1) * sy + dh - (pt + pb)                              # derived IFM extent (L8168-8169)
    iw = (W - 1) * sx + dw - (pl + pr)
    zp, zp_ok = P.ifm_zero_point(ifm_zp, bits, signed)
    gemm = None
    if method != "loop" and bits <= 16 and ih >= 1 and iw >= 1 and H >= 1 and W >= 1 \
            and min(pt, pl, pb, pr) >= 0 and raw.ndim == 3 \
            and ((depthwise and w.shape[3] == 1) or (not depthwise and raw.shape[2] >= w.shape[3])):
        lo, hi = P.type_range(bits, signed)
        # the integer kernel (emu/int_conv.py) where its int32 sums are exact, else float BLAS
        gemm = "int" if not depthwise and IC.fits_int32(lo - zp, hi - zp, w) else \
            _gemm_dtype(max(abs(lo - zp), abs(hi - zp)), w)
    if gemm is not None and upscale_mode == UPSCALE_NONE:
        # read_values without the int64 round trip: native stored integers go straight into
        # the padded float frame, the zero point is subtracted there
        _diag(diag, zp_ok, f"IFM zero point {zp} invalid for {'s' if signed else 'u'}{bits} (L6550-6556)")
        v, vzp = (raw, zp) if _native(raw, bits, signed) else (read_values(raw, zp, bits, signed), 0)
    else:
        v, vzp = upscale(read_values(raw, ifm_zp, bits, signed, diag), upscale_mode), 0
    _diag(diag, ih >= 1 and iw >= 1, "derived IFM extent < 1 (L8174)")
    _diag(diag, dh * dw <= 4096 and (dh <= 64 or dw <= 64), "kernel too large (L8175-8176)")
    _diag(diag, upscale_mode == UPSCALE_NONE or (sy == 1 and sx == 1), "upscale needs stride 1 (L6519)")
    _diag(diag, v.shape[0] >= ih and v.shape[1] >= iw, f"IFM {v.shape[:2]} smaller than derived extent {(ih, iw)}")
    if depthwise:
        _diag(diag, v.shape[2] >= oc_n, "DEPTHWISE IFM depth < OFM depth")
    acc = np.zeros((1, 1, 1), np.int64) if acc_in is None else np.ascontiguousarray(acc_in, np.int64)
    if gemm is not None:
        if depthwise and v.shape[2] < oc_n:
            v = np.concatenate([v, np.zeros(v.shape[:2] + (oc_n - v.shape[2],), v.dtype)], axis=2)
        elif not depthwise:
            v = v[:, :, :w.shape[3]]                                 # the loop reads ic < IC only
        if gemm == "int":
            tot = IC.conv_sums(v.transpose(2, 0, 1), IC.packed_weights(w), (H, W),
                               zero_point=vzp, in_hw=(ih, iw), pad=(pt, pl), stride=(sy, sx),
                               dilation=(dy, dx), hwc=True)
        else:
            hp, wp = (H - 1) * sy + dh, (W - 1) * sx + dw
            tot = _conv_sums(_padded(v, vzp, hp, wp, pt, pl, ih, iw, gemm), w, H, W, sy, sx,
                             dy, dx, depthwise)
        geo = np.array([H, W, 0 if acc_in is None else 1], np.int64)
        out = np.empty((H, W, oc_n), ofm_dtype(cfg))
        with IC.PARALLEL:
            _conv_finish_kernel(tot, acc, _tap_mask(H, sy, dy, kh, pt, ih),
                                _tap_mask(W, sx, dx, kw, pl, iw), geo, cfg, _chan(bias, oc_n),
                                _chan(scales, oc_n), _chan(shifts, oc_n), _lut(lut), out)
        return out
    v = _fit(v, max(ih, 0), max(iw, 0))
    if depthwise and v.shape[2] < oc_n:
        v = np.concatenate([v, np.zeros(v.shape[:2] + (oc_n - v.shape[2],), np.int64)], axis=2)
    if acc_in is None:
        acc = np.zeros((H, W, oc_n), np.int64)
    geo = np.array([H, W, sy, sx, dy, dx, pt, pl, dh, dw, 1 if depthwise else 0], np.int64)
    out = _conv_kernel(np.ascontiguousarray(v), np.require(w, requirements=["C", "W"]), acc, geo, cfg,
                       _chan(bias, oc_n), _chan(scales, oc_n), _chan(shifts, oc_n), _lut(lut))
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
        ih, iw = ifm.shape[-3] * (2 if upscale_mode else 1), ifm.shape[-2] * (2 if upscale_mode else 1)
        dh, dw = (w.shape[1] - 1) * dilation[0] + 1, (w.shape[2] - 1) * dilation[1] + 1
        ofm_hw = ((ih + pad[0] + pad[2] - dh) // stride[0] + 1, (iw + pad[1] + pad[3] - dw) // stride[1] + 1)
    return _batched(_conv_common, ifm, weights, ofm_hw, stride, dilation, pad, ifm_zp, ifm_bits,
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
        ih, iw = ifm.shape[-3] * (2 if upscale_mode else 1), ifm.shape[-2] * (2 if upscale_mode else 1)
        dh, dw = (w.shape[1] - 1) * dilation[0] + 1, (w.shape[2] - 1) * dilation[1] + 1
        ofm_hw = ((ih + pad[0] + pad[2] - dh) // stride[0] + 1, (iw + pad[1] + pad[3] - dw) // stride[1] + 1)
    return _batched(_conv_common, ifm, w, ofm_hw, stride, dilation, pad, ifm_zp, ifm_bits,
                    ifm_signed, upscale_mode, cfg, bias, scales, shifts, lut, acc_in, diag, True,
                    method, dilated)


def matmul(ifm, ifm2, *, ifm_zp=0, ifm2_zp=0, ifm_bits=None, ifm_signed=None, cfg=None,
           bias=None, scales=None, shifts=None, lut=None, acc_in=None, diag=None,
           method: str = "auto") -> np.ndarray:
    """NPU_OP_CONV with weights_ifm2 = 1 (L8178-8189, L8208): OFM [1, W, D] =
    IFM [1, W, IC] x IFM2 read as [1][IC][D] (y = 0, x = ic, c = oc), both zero-point corrected;
    kernel 1x1, stride 1, no padding (asserts L8181-8186)."""
    ifm = np.asarray(ifm)
    if ifm.ndim == 4:
        return np.stack([matmul(ifm[n], np.asarray(ifm2)[min(n, np.asarray(ifm2).shape[0] - 1)]
                                if np.asarray(ifm2).ndim == 4 else ifm2, ifm_zp=ifm_zp,
                                ifm2_zp=ifm2_zp, ifm_bits=ifm_bits, ifm_signed=ifm_signed, cfg=cfg,
                                bias=bias, scales=scales, shifts=shifts, lut=lut, acc_in=acc_in,
                                diag=diag, method=method) for n in range(ifm.shape[0])])
    bits, signed = _infer_type(ifm, ifm_bits, ifm_signed)
    _diag(diag, ifm.shape[0] == 1, "matmul needs OFM height 1 (L8181)")
    b = read_values(ifm2, ifm2_zp, bits, signed, diag, "IFM2")     # IFM2 precision == IFM's (L8183)
    if b.ndim == 3:
        b = b[0]
    w = np.ascontiguousarray(b.T[:, None, None, :])                  # W[oc][0][0][ic] = ifm2[0][ic][oc]
    return _conv_common(ifm, w, (ifm.shape[0], ifm.shape[1]), (1, 1), (1, 1), (0, 0, 0, 0), ifm_zp,
                        bits, signed, UPSCALE_NONE, cfg, bias, scales, shifts, lut, acc_in, diag, False,
                        method)


# ------------------------------------------------------------------------------------------------
# POOL (L8815-8993)

@njit(nogil=True, cache=True)
def _pool_kernel(v, acc_in, geo, cfg, bias, scales, shifts, lut):
    """NPU_OP_POOL loop (L8900-8990)::

        reduce_sum: acc = read_accumulator(oy, ox, 0, 0) + sum_c read_ifm(oy, ox, c)
        else for c: identity = max/argmax -> -(1<<31), min -> (1<<31)-1, else 0
            acc = read_accumulator(oy, ox, c, identity); count = 0
            for ky, kx: iy = -pad_y + oy*stride_y + ky, ix likewise; pad = outside IFM extent
                count += !pad; v = (use_ifm && !pad) ? read_ifm(iy, ix, c) : identity
                max/min: acc = max/min(acc, v); average/sum: acc = accumulate(acc, v); none: -
                argmax_x/_y: if v > sign_extend(acc, 16): acc = v + 65536*kx (ky)
            write_accumulator(..., average ? avpool + count - 1 : normal)

    geo: H, W, stride_y, stride_x, kh, kw, pad_top, pad_left, mode, use_acc_in, D."""
    H, W, sy, sx, kh, kw, pt, pl = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6], geo[7]
    mode, use_acc, D = geo[8], geo[9], geo[10]
    ih, iw = v.shape[0], v.shape[1]
    bits = cfg[C_ACC_BITS]
    out = np.zeros((H, W, D), np.int64)
    for oy in range(H):
        for ox in range(W):
            if mode == 2:  # reduce_sum
                acc = acc_in[oy, ox, 0] if use_acc else np.int64(0)
                for c in range(v.shape[2]):
                    acc = P.accumulate(acc, v[oy, ox, c], bits)
                out[oy, ox, 0] = P.finish(acc, 0, RESCALE_NORMAL, cfg, bias, scales, shifts, lut)
                continue
            for c in range(D):
                ident = np.int64(0)
                if mode == 0 or mode == 6 or mode == 7:
                    ident = np.int64(INT32_MIN)
                elif mode == 5:
                    ident = np.int64(INT32_MAX)
                acc = acc_in[oy, ox, c] if use_acc else ident
                count = 0
                for ky in range(kh):
                    for kx in range(kw):
                        iy = -pt + oy * sy + ky
                        ix = -pl + ox * sx + kx
                        pad = iy < 0 or iy >= ih or ix < 0 or ix >= iw
                        if not pad:
                            count += 1
                        x = ident
                        if mode != 4 and not pad:
                            x = v[iy, ix, c]
                        if mode == 0:
                            acc = max(acc, x)
                        elif mode == 5:
                            acc = min(acc, x)
                        elif mode == 1 or mode == 3:
                            acc = P.accumulate(acc, x, bits)
                        elif mode == 6:
                            if x > P.sign_extend(acc, 16):
                                acc = P.sign_extend(x + 65536 * kx, bits)
                        elif mode == 7:
                            if x > P.sign_extend(acc, 16):
                                acc = P.sign_extend(x + 65536 * ky, bits)
                rmode = RESCALE_NORMAL
                if mode == 1:
                    rmode = RESCALE_AVPOOL + (count - 1 if count > 0 else 0)
                out[oy, ox, c] = P.finish(acc, c, rmode, cfg, bias, scales, shifts, lut)
    return out


def _pool_one(ifm, mode, kernel, ofm_hw, stride, pad, ifm_zp, ifm_bits, ifm_signed, upscale_mode,
              cfg, bias, scales, shifts, lut, acc_in, diag, depth):
    cfg = _cfg(cfg)
    kh, kw = kernel
    sy, sx = stride
    pt, pl, pb, pr = pad
    H, W = int(ofm_hw[0]), int(ofm_hw[1])
    ih = (H - 1) * sy + kh - (pt + pb)                                # L8831-8832
    iw = (W - 1) * sx + kw - (pl + pr)
    if mode == POOL_NONE or ifm is None:
        D = depth if depth is not None else np.asarray(acc_in).shape[2]
        v = np.zeros((max(ih, 1), max(iw, 1), D), np.int64)
    else:
        bits, signed = _infer_type(ifm, ifm_bits, ifm_signed)
        _diag(diag, bits == 8 or (signed and bits in (16, 32)), "POOL IFM must be b8, s16 or s32 (L8849)")
        v = upscale(read_values(ifm, ifm_zp, bits, signed, diag), upscale_mode)
        if mode == POOL_REDUCE_SUM:
            D = 1
            _diag(diag, kh == 1 and kw == 1 and sy == 1 and sx == 1 and ifm_zp == 0,
                  "reduce_sum: 1x1 kernel, stride 1, zero point 0 (L8870-8876)")
            ih, iw = H, W
        else:
            D = v.shape[2] if depth is None else depth
        v = _fit(v, max(ih, 0), max(iw, 0))
        if v.shape[2] < D:
            v = np.concatenate([v, np.zeros(v.shape[:2] + (D - v.shape[2],), np.int64)], axis=2)
        if mode == POOL_AVERAGE:
            _diag(diag, kh <= 8 and kw <= 8 and max(pt, pb) < kh and max(pl, pr) < kw and bits != 32,
                  "average pool: kernel <= 8x8, pads < kernel, not b32 (L8863-8868)")
    _diag(diag, ih >= 1 and iw >= 1, "derived IFM extent < 1 (L8848)")
    _diag(diag, mode in (POOL_SUM, POOL_REDUCE_SUM, POOL_NONE) or cfg[C_ACC_BITS] == 32,
          "pooling mode needs acc_format i32 (L8896)")
    use_acc = acc_in is not None
    acc = (np.zeros((H, W, D), np.int64) if acc_in is None
           else np.ascontiguousarray(acc_in, np.int64).reshape(H, W, D))
    geo = np.array([H, W, sy, sx, kh, kw, pt, pl, mode, 1 if use_acc else 0, D], np.int64)
    out = _pool_kernel(np.ascontiguousarray(v), acc, geo, cfg, _chan(bias, D), _chan(scales, D),
                       _chan(shifts, D), _lut(lut))
    return out.astype(ofm_dtype(cfg))


def pool2d(ifm, mode, kernel=(1, 1), ofm_hw=None, *, stride=(1, 1), pad=(0, 0, 0, 0), ifm_zp=0,
           ifm_bits=None, ifm_signed=None, upscale_mode=UPSCALE_NONE, cfg=None, bias=None,
           scales=None, shifts=None, lut=None, acc_in=None, depth=None, diag=None):
    """NPU_OP_POOL with pooling_mode ``mode`` (POOL_*): max, average (built-in 1/count scale,
    OFM_SCALE round mode), reduce_sum (over channels, OFM depth 1), sum (scaled), none
    (passes acc_in), min, argmax_x, argmax_y (acc = value + 65536*position). Pad positions read
    the mode's identity; kernel is (kh, kw) undilated; pad = (top, left, bottom, right)."""
    if ofm_hw is None:
        a = np.asarray(ifm if ifm is not None else acc_in)
        ih, iw = a.shape[-3] * (2 if upscale_mode else 1), a.shape[-2] * (2 if upscale_mode else 1)
        ofm_hw = ((ih + pad[0] + pad[2] - kernel[0]) // stride[0] + 1,
                  (iw + pad[1] + pad[3] - kernel[1]) // stride[1] + 1)
    if ifm is not None and np.asarray(ifm).ndim == 4:
        return np.stack([_pool_one(np.asarray(ifm)[n], mode, kernel, ofm_hw, stride, pad, ifm_zp,
                                   ifm_bits, ifm_signed, upscale_mode, cfg, bias, scales, shifts, lut,
                                   None if acc_in is None else np.asarray(acc_in)[n], diag, depth)
                         for n in range(np.asarray(ifm).shape[0])])
    return _pool_one(ifm, mode, kernel, ofm_hw, stride, pad, ifm_zp, ifm_bits, ifm_signed,
                     upscale_mode, cfg, bias, scales, shifts, lut, acc_in, diag, depth)


# ------------------------------------------------------------------------------------------------
# ELEMENTWISE (L8493-8648)

@njit(nogil=True, cache=True)
def _scale_in(a, bits, signed, scale, shift, rnd, dbl):
    """scale_a / scale_b (L7008-7048): b8 or signed b16 -> (int32)rounded_shift_right(a*scale,
    shift, round_mode_ifm, dbl_rnd); b32 and unsigned b16 inputs pass unscaled."""
    if bits == 8 or (bits == 16 and signed):
        return P.sign_extend(P.rounded_shift_right(a * scale, shift, rnd, dbl), 32)
    return a


@njit(nogil=True, cache=True)
def _ew_kernel(a, b, ew, cfg, lut):
    """NPU_OP_ELEMENTWISE per-element body (L8549-8646), acc int32 (wrapped, G-R7)::

        mul: a*b (unscaled; b32 -> rescale shift_only)   add/sub/min/max: of sa, sb
        lrelu: a >= 0 ? sa : scale_b(a)   abs: |sa|   clz: clz(sa, 32)
        shr: rounded_shift_right(sa, sb & 31, OFM round) (no rescale)
        shl: sa << (sb & 31) (no rescale)  lshr: (uint32)(sa & type mask) >> (sb & 31) (no rescale)
        div: a / b truncating            cmp_*: -1 / 0   not/and/or/xor/and_not: bitwise
        acc = rescale(acc, -1, mode); activation; truncate

    a, b: [H, W, D] broadcast, zero-point-corrected (or the raw scalar); ew: mode, ifm bits,
    ifm signed, ifm2 bits, ifm2 signed, ifm scale, shift, round, dbl_rnd, ifm2 scale, shift,
    round, dbl_rnd."""
    mode, ab, asg, bb, bsg = ew[0], ew[1], ew[2] != 0, ew[3], ew[4] != 0
    s1, h1, r1, d1, s2, h2, r2, d2 = ew[5], ew[6], ew[7], ew[8], ew[9], ew[10], ew[11], ew[12]
    H, W, D = a.shape[0], a.shape[1], a.shape[2]
    out = np.zeros((H, W, D), np.int64)
    empty = np.zeros(0, np.int64)
    for y in range(H):
        for x in range(W):
            for c in range(D):
                av = a[y, x, c]
                bv = b[y, x, c]
                rm = RESCALE_GLOBAL
                acc = np.int64(0)
                if mode == 0:
                    acc = av * bv
                    if not (ab == 8 or ab == 16):
                        rm = RESCALE_SHIFT_ONLY
                elif mode == 5:
                    if av >= 0:
                        acc = _scale_in(av, ab, asg, s1, h1, r1, d1)
                    else:
                        acc = _scale_in(av, bb, bsg, s2, h2, r2, d2)
                elif mode == 11:
                    if bv == 0:
                        acc = np.int64(0)      # UNPREDICTABLE (assert b != 0, L8613): 0
                    else:
                        q = abs(av) // abs(bv)
                        acc = q if (av < 0) == (bv < 0) else -q
                else:
                    sa = _scale_in(av, ab, asg, s1, h1, r1, d1)
                    sb = _scale_in(bv, bb, bsg, s2, h2, r2, d2)
                    if mode == 1:
                        acc = sa + sb
                    elif mode == 2:
                        acc = sa - sb
                    elif mode == 3:
                        acc = min(sa, sb)
                    elif mode == 4:
                        acc = max(sa, sb)
                    elif mode == 6:
                        acc = abs(sa)
                    elif mode == 7:
                        acc = P.clz(sa, 32)
                    elif mode == 8:
                        acc = P.rounded_shift_right(sa, sb & 31, cfg[P.C_ROUND], cfg[P.C_DBL_RND])
                        rm = RESCALE_NONE
                    elif mode == 9:
                        acc = sa << (sb & 31)        # ACTIVATION_MASK = 32-bit wrap (G-R4)
                        rm = RESCALE_NONE
                    elif mode == 10:
                        t = sa
                        if ab == 8:
                            t = t & 0xFF
                        elif ab == 16:
                            t = t & 0xFFFF
                        acc = (t & 0xFFFFFFFF) >> (sb & 31)
                        rm = RESCALE_NONE
                    elif mode == 16:
                        acc = -1 if sa == sb else 0
                    elif mode == 17:
                        acc = -1 if sa != sb else 0
                    elif mode == 18:
                        acc = -1 if sa >= sb else 0
                    elif mode == 19:
                        acc = -1 if sa > sb else 0
                    elif mode == 33:
                        acc = sa & sb
                    elif mode == 34:
                        acc = sa | sb
                    elif mode == 35:
                        acc = sa ^ sb
                    elif mode == 36:
                        acc = ~sa
                    elif mode == 42:
                        acc = sa & ~sb
                acc = P.sign_extend(acc, 32)                  # int32_t acc (L8524)
                r = P.rescale(acc, -1, rm, cfg, empty, empty)
                r = P.activation(r, cfg, lut)
                out[y, x, c] = P.write_value(r, cfg)
    return out


def _broadcast(v, mode, shape, diag, name):
    H, W, D = shape
    ys = np.zeros(H, np.intp) if mode & BC_H else np.arange(H)
    xs = np.zeros(W, np.intp) if mode & BC_W else np.arange(W)
    cs = np.zeros(D, np.intp) if mode & BC_C else np.arange(D)
    ok = v.shape[0] > ys.max(initial=0) and v.shape[1] > xs.max(initial=0) and v.shape[2] > cs.max(initial=0)
    _diag(diag, ok, f"{name} smaller than the OFM on a non-broadcast axis")
    if not ok:
        v = _fit(v, max(v.shape[0], H), max(v.shape[1], W))
        if v.shape[2] < D:
            v = np.concatenate([v, np.zeros(v.shape[:2] + (D - v.shape[2],), np.int64)], axis=2)
    return np.ascontiguousarray(v[ys][:, xs][:, :, cs])


def elementwise(mode, ifm, ifm2=None, ofm_shape=None, *, ifm_zp=0, ifm2_zp=0, ifm_bits=None,
                ifm_signed=None, ifm2_bits=None, ifm2_signed=None, ifm_scale=(1, 0, 1, 0),
                ifm2_scale=(1, 0, 1, 0), broadcast=0, broadcast2=0, scalar=0, cfg=None, lut=None,
                diag=None):
    """NPU_OP_ELEMENTWISE ``mode`` (EW_*). ifm/ifm2 [H,W,C] raw stored integers (a broadcast axis
    is read at coordinate 0, BC_H|BC_W|BC_C bits); broadcast/broadcast2 == BC_SCALAR uses the raw
    signed 32-bit ``scalar`` (OP_SCALAR, no zero point) for that input. ifm_scale/ifm2_scale =
    (scale, shift, round_mode_ifm 0 double_symmetric / 1 natural, dbl_rnd). cfg must be global
    scale_mode (G-R9). ofm_shape (H, W, D) defaults to the non-broadcast input's shape."""
    cfg = _cfg(cfg)
    unary = mode in EW_UNARY
    ref = ifm if broadcast != BC_SCALAR else ifm2
    if ofm_shape is None:
        ofm_shape = np.asarray(ref).shape
    ofm_shape = tuple(int(s) for s in ofm_shape)
    if len(ofm_shape) == 4:
        outs = []
        for n in range(ofm_shape[0]):
            pick = (lambda t: None if t is None else (np.asarray(t)[min(n, np.asarray(t).shape[0] - 1)]
                                                      if np.asarray(t).ndim == 4 else t))
            outs.append(elementwise(mode, pick(ifm), pick(ifm2), ofm_shape[1:], ifm_zp=ifm_zp,
                                    ifm2_zp=ifm2_zp, ifm_bits=ifm_bits, ifm_signed=ifm_signed,
                                    ifm2_bits=ifm2_bits, ifm2_signed=ifm2_signed, ifm_scale=ifm_scale,
                                    ifm2_scale=ifm2_scale, broadcast=broadcast, broadcast2=broadcast2,
                                    scalar=scalar, cfg=cfg, lut=lut, diag=diag))
        return np.stack(outs)
    bits, signed = _infer_type(ref if ref is not None else np.zeros(1, np.int8), ifm_bits, ifm_signed)
    bits2, signed2 = (bits, signed) if (ifm2_bits is None and ifm2_signed is None) else \
        _infer_type(ifm2 if ifm2 is not None else np.zeros(1, np.int8), ifm2_bits, ifm2_signed)
    _diag(diag, (bits, signed) == (bits2, signed2), "IFM2 precision/type must match IFM (L8497, L9616)")
    _diag(diag, bits in (8, 16) or (bits == 32 and signed), "ELEMENTWISE IFM b8, b16 or s32 (L8500)")
    _diag(diag, cfg[P.C_SCALE_MODE] == 1, "ELEMENTWISE needs OFM scale_mode global (G-R9, L6968)")
    _diag(diag, not (broadcast == BC_SCALAR and broadcast2 == BC_SCALAR), "both inputs scalar (L8538)")
    if broadcast == BC_SCALAR:
        a = np.full(ofm_shape, int(P.sign_extend(scalar, 32)), np.int64)
    else:
        a = _broadcast(read_values(ifm, ifm_zp, bits, signed, diag), broadcast, ofm_shape, diag, "IFM")
    if unary:
        b = np.zeros(ofm_shape, np.int64)
    elif broadcast2 == BC_SCALAR:
        b = np.full(ofm_shape, int(P.sign_extend(scalar, 32)), np.int64)
    else:
        b = _broadcast(read_values(ifm2, ifm2_zp, bits2, signed2, diag, "IFM2"), broadcast2,
                       ofm_shape, diag, "IFM2")
    if mode == EW_MUL:
        _diag(diag, bits == 8 or signed or (ifm_zp & 0xFFFF == 32768 and ifm2_zp & 0xFFFF == 32768),
              "uint16 mul needs zero points 32768 (L8559)")
    if mode == EW_DIV:
        _diag(diag, tuple(ifm_scale[:2]) == (1, 0) and tuple(ifm2_scale[:2]) == (1, 0)
              and ifm_zp == 0 and ifm2_zp == 0 and int(cfg[C_SCALE]) == 1 and int(cfg[C_SHIFT]) == 0
              and int(cfg[C_ZP]) == 0, "div: unit scales, zero points 0 (L8606-8619)")
        _diag(diag, not np.any(b == 0), "div by zero (L8613): result 0")
        _diag(diag, not np.any((b == -1) & (a == INT32_MIN)), "div INT32_MIN / -1 (L8614): wraps")
    _diag(diag, mode in EW_MODES, f"reserved elementwise mode {mode} (L8670-8698)")
    ew = np.array([mode, bits, 1 if signed else 0, bits2, 1 if signed2 else 0, *ifm_scale,
                   *ifm2_scale], np.int64)
    out = _ew_kernel(np.ascontiguousarray(a), np.ascontiguousarray(b), ew, cfg, _lut(lut))
    return out.astype(ofm_dtype(cfg))


# ------------------------------------------------------------------------------------------------
# RESIZE (L9029-9126)

@njit(nogil=True, cache=True)
def _resize_kernel(v, rz, cfg, lut):
    """NPU_OP_RESIZE loop (L9070-9124)::

        y_int = y_off < 0 ? -1 : 0; y_mod = y_off < 0 ? y_off + scale_y_n : y_off
        per oy: iy0 = max(y_int, 0); iy1 = min(y_int+1, ifm_h-1); per ox likewise ix0, ix1
          bilinear: acc = (ny - y_mod)*((nx - x_mod)*v00 + x_mod*v01) + y_mod*((nx - x_mod)*v10 + x_mod*v11)
          nearest:  acc = v[2*y_mod < ny ? iy0 : iy1][2*x_mod < nx ? ix0 : ix1];  replicate: v00
          acc2 = rescale(acc << 16, -1, shift_only); activation; truncate
          x_mod += step_x_mod; x_int += step_x_int; if x_mod >= nx: x_mod -= nx, x_int++  (same for y)

    rz: OH, OW, D, ifm_h_m1, ifm_w_m1, ny, nx, y_off, x_off, y_step_int, y_step_mod,
    x_step_int, x_step_mod, mode. Indices beyond the IFM (assert L9078, L9085) are clamped."""
    OH, OW, D, ihm1, iwm1 = rz[0], rz[1], rz[2], rz[3], rz[4]
    ny, nx, yoff, xoff = rz[5], rz[6], rz[7], rz[8]
    ysi, ysm, xsi, xsm, mode = rz[9], rz[10], rz[11], rz[12], rz[13]
    out = np.zeros((OH, OW, D), np.int64)
    empty = np.zeros(0, np.int64)
    y_int = np.int64(-1) if yoff < 0 else np.int64(0)
    y_mod = yoff + ny if yoff < 0 else yoff
    for oy in range(OH):
        iy0 = min(max(y_int, 0), ihm1)
        iy1 = max(min(y_int + 1, ihm1), 0)
        x_int = np.int64(-1) if xoff < 0 else np.int64(0)
        x_mod = xoff + nx if xoff < 0 else xoff
        for ox in range(OW):
            ix0 = min(max(x_int, 0), iwm1)
            ix1 = max(min(x_int + 1, iwm1), 0)
            for oc in range(D):
                if mode == 0:
                    acc = ((ny - y_mod) * ((nx - x_mod) * v[iy0, ix0, oc] + x_mod * v[iy0, ix1, oc])
                           + y_mod * ((nx - x_mod) * v[iy1, ix0, oc] + x_mod * v[iy1, ix1, oc]))
                elif mode == 2:
                    iy = iy0 if 2 * y_mod < ny else iy1
                    ix = ix0 if 2 * x_mod < nx else ix1
                    acc = v[iy, ix, oc]
                else:
                    acc = v[iy0, ix0, oc]
                r = P.rescale(acc << 16, -1, RESCALE_SHIFT_ONLY, cfg, empty, empty)
                r = P.activation(r, cfg, lut)
                out[oy, ox, oc] = P.write_value(r, cfg)
            x_mod += xsm
            x_int += xsi
            if x_mod >= nx:
                x_mod -= nx
                x_int += 1
        y_mod += ysm
        y_int += ysi
        if y_mod >= ny:
            y_mod -= ny
            y_int += 1
    return out


def resize_step(scale_n: int, scale_d: int) -> tuple[int, int]:
    """(one_step_int, one_step_mod) of NPU_SET_RESIZE_*_STEP for the input step scale_d/scale_n
    per output (L10665-10667, L12189-12193)."""
    return scale_d // scale_n, scale_d % scale_n


def resize(ifm, mode, ofm_hw, *, scale_n=(1, 1), offset=(0, 0), step=((1, 0), (1, 0)),
           ifm_hw_m1=None, ifm_zp=0, ifm_bits=None, ifm_signed=None, cfg=None, lut=None, diag=None):
    """NPU_OP_RESIZE ``mode`` (RESIZE_BILINEAR / REPLICATE / NEAREST). scale_n = (y, x)
    numerators (RESIZE_*_SCALE_N_M1 + 1); offset = (y, x) signed RESIZE_*_OFFSET;
    step = ((y_int, y_mod), (x_int, x_mod)) one_step fields; ifm_hw_m1 = (KERNEL_HEIGHT_M1,
    KERNEL_WIDTH_M1), default IFM shape - 1. cfg's OFM_SCALE shift (>= 16) normalises."""
    ifm = np.asarray(ifm)
    if ifm.ndim == 4:
        return np.stack([resize(ifm[n], mode, ofm_hw, scale_n=scale_n, offset=offset, step=step,
                                ifm_hw_m1=ifm_hw_m1, ifm_zp=ifm_zp, ifm_bits=ifm_bits,
                                ifm_signed=ifm_signed, cfg=cfg, lut=lut, diag=diag)
                         for n in range(ifm.shape[0])])
    cfg = _cfg(cfg)
    bits, signed = _infer_type(ifm, ifm_bits, ifm_signed)
    _diag(diag, bits == 8 or (bits == 16 and signed), "RESIZE IFM b8 or signed b16 (L9062-9069)")
    _diag(diag, ifm_zp == 0, "RESIZE needs IFM zero point 0 (L9057)")
    _diag(diag, int(cfg[C_SHIFT]) >= 16, "RESIZE needs OFM shift >= 16 (L9103)")
    ny, nx = scale_n
    yo, xo = offset
    _diag(diag, -ny <= yo < ny and -nx <= xo < nx, "resize offset out of range (L9044-9045)")
    _diag(diag, step[0][1] < ny and step[1][1] < nx, "resize step_mod >= scale_n (L9046-9047)")
    v = read_values(ifm, ifm_zp, bits, signed, diag)
    if ifm_hw_m1 is None:
        ifm_hw_m1 = (v.shape[0] - 1, v.shape[1] - 1)
    v = _fit(v, ifm_hw_m1[0] + 1, ifm_hw_m1[1] + 1)
    rz = np.array([ofm_hw[0], ofm_hw[1], v.shape[2], ifm_hw_m1[0], ifm_hw_m1[1], ny, nx, yo, xo,
                   step[0][0], step[0][1], step[1][0], step[1][1], mode], np.int64)
    out = _resize_kernel(np.ascontiguousarray(v), rz, cfg, _lut(lut))
    return out.astype(ofm_dtype(cfg))
