"""Ethos-U85 NPU_OP_POOL (all 8 modes) on plain numpy tensors.

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

import numpy as np

from ..conv import ethosu85 as CE
from ..jit import njit
from ..numeric import ethosu85 as P
from ..numeric.ethosu85 import C_ACC_BITS, RESCALE_AVPOOL, RESCALE_NORMAL
from ..numeric.ethosu85_values import (
    INT32_MAX,
    INT32_MIN,
    UPSCALE_NONE,
    check,
    config_or_default,
    fit_hw,
    infer_type,
    lut_bytes,
    ofm_dtype,
    per_channel,
    read_values,
    upscale,
)

# pooling_mode [U85-TRM: Table 3-104]
POOL_MAX, POOL_AVERAGE, POOL_REDUCE_SUM, POOL_SUM, POOL_NONE, POOL_MIN, POOL_ARGMAX_X, \
    POOL_ARGMAX_Y = range(8)


# ------------------------------------------------------------------------------------------------
# POOL [U85-TRM: §3.10.10]

@njit(nogil=True, cache=True)
def _pool_kernel(v, acc_in, geo, cfg, bias, scales, shifts, lut):
    """NPU_OP_POOL loop [U85-TRM: §3.10.10]::

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


#: the pooling modes :func:`_pool_on_output_stage` takes, with the value a padding position
#: reads [U85-TRM: §3.10.10]
_WINDOW_IDENTITY = {POOL_MAX: INT32_MIN, POOL_MIN: INT32_MAX, POOL_SUM: 0}


def _pool_on_output_stage(v, mode, geo_hw, D, cfg, bias, scales, shifts, lut):
    """Max, min or sum pooling without accumulator input, or None where the conv output stage
    cannot take it: the window's accumulators in numpy (one array operation per kernel
    position: acc = max/min/accumulate(acc, read_ifm or the mode's identity at padding)
    [U85-TRM: §3.10.10]), then write_accumulator with rescale_mode normal through the
    convolution's fast output stage (conv.ethosu85._output_stage: the same arithmetic as
    P.finish on a 32-bit accumulator, [U85-TRM: §3.6.5, §3.6.6, §3.6.7]) where it applies: no LUT
    function, acc_format i32, shifts 0..62 and accumulators that fit int32 (a sum wraps to
    32 bits as accumulate does at every step; a max or min of wider values is taken whole by
    rescale, so it goes to the kernel). Why: the pooling kernel with P.finish's every mode
    took ~2.2 s of a first run to compile (issue 31 #5), the fast stage is compiled for the
    convolutions already."""
    H, W, sy, sx, kh, kw, pt, pl = geo_hw
    terms = CE._stage_terms(cfg, bias, scales, shifts, D)
    if not terms[-1]:
        return None
    ident = _WINDOW_IDENTITY[mode]
    ih, iw = v.shape[0], v.shape[1]
    hp, wp = max((H - 1) * sy + kh, pt + ih), max((W - 1) * sx + kw, pl + iw)
    padded = np.full((hp, wp, D), ident, np.int64)
    padded[pt:pt + ih, pl:pl + iw] = v[:, :, :D]
    acc = np.full((H, W, D), ident, np.int64)
    for ky in range(kh):
        for kx in range(kw):
            win = padded[ky:ky + (H - 1) * sy + 1:sy, kx:kx + (W - 1) * sx + 1:sx]
            if mode == POOL_MAX:
                np.maximum(acc, win, out=acc)
            elif mode == POOL_MIN:
                np.minimum(acc, win, out=acc)
            else:
                acc += win
    if mode != POOL_SUM and (acc.min() < INT32_MIN or acc.max() > INT32_MAX):
        return None
    ones = np.ones(max(H, W), np.int64)
    ones.flags.writeable = False  # as the convolutions' tap masks: one kernel signature
    return CE._output_stage(acc.astype(np.int32), None, ones, ones, cfg, terms, lut,
                            np.empty((H, W, D), ofm_dtype(cfg)))


def _pool_one(ifm, mode, kernel, ofm_hw, stride, pad, ifm_zp, ifm_bits, ifm_signed, upscale_mode,
              cfg, bias, scales, shifts, lut, acc_in, diag, depth):
    cfg = config_or_default(cfg)
    kh, kw = kernel
    sy, sx = stride
    pt, pl, pb, pr = pad
    H, W = int(ofm_hw[0]), int(ofm_hw[1])
    ih = (H - 1) * sy + kh - (pt + pb)                                # [U85-TRM: §3.10.10]
    iw = (W - 1) * sx + kw - (pl + pr)
    if mode == POOL_NONE or ifm is None:
        D = depth if depth is not None else np.asarray(acc_in).shape[2]
        v = np.zeros((max(ih, 1), max(iw, 1), D), np.int64)
    else:
        bits, signed = infer_type(ifm, ifm_bits, ifm_signed)
        check(diag, bits == 8 or (signed and bits in (16, 32)),
              "POOL IFM must be b8, s16 or s32 [U85-TRM: §3.10.10]")
        v = upscale(read_values(ifm, ifm_zp, bits, signed, diag), upscale_mode)
        if mode == POOL_REDUCE_SUM:
            D = 1
            check(diag, kh == 1 and kw == 1 and sy == 1 and sx == 1 and ifm_zp == 0,
                  "reduce_sum: 1x1 kernel, stride 1, zero point 0 [U85-TRM: §3.10.10]")
            ih, iw = H, W
        else:
            D = v.shape[2] if depth is None else depth
        v = fit_hw(v, max(ih, 0), max(iw, 0))
        if v.shape[2] < D:
            v = np.concatenate([v, np.zeros(v.shape[:2] + (D - v.shape[2],), np.int64)], axis=2)
        if mode == POOL_AVERAGE:
            check(diag,
                  kh <= 8 and kw <= 8 and max(pt, pb) < kh and max(pl, pr) < kw and bits != 32,
                  "average pool: kernel <= 8x8, pads < kernel, not b32 [U85-TRM: §3.10.10]")
    check(diag, ih >= 1 and iw >= 1, "derived IFM extent < 1 [U85-TRM: §3.10.10]")
    check(diag, mode in (POOL_SUM, POOL_REDUCE_SUM, POOL_NONE) or cfg[C_ACC_BITS] == 32,
          "pooling mode needs acc_format i32 [U85-TRM: §3.10.10]")
    use_acc = acc_in is not None
    if not use_acc and mode in _WINDOW_IDENTITY:
        out = _pool_on_output_stage(v, mode, geo_hw=(H, W, sy, sx, kh, kw, pt, pl), D=D,
                                    cfg=cfg, bias=bias, scales=scales, shifts=shifts, lut=lut)
        if out is not None:
            return out
    acc = (np.zeros((H, W, D), np.int64) if acc_in is None
           else np.ascontiguousarray(acc_in, np.int64).reshape(H, W, D))
    geo = np.array([H, W, sy, sx, kh, kw, pt, pl, mode, 1 if use_acc else 0, D], np.int64)
    out = _pool_kernel(np.ascontiguousarray(v), acc, geo, cfg, per_channel(bias, D),
                       per_channel(scales, D), per_channel(shifts, D), lut_bytes(lut))
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
                                   ifm_bits, ifm_signed, upscale_mode, cfg, bias, scales, shifts,
                                   lut, None if acc_in is None else np.asarray(acc_in)[n], diag,
                                   depth)
                         for n in range(np.asarray(ifm).shape[0])])
    return _pool_one(ifm, mode, kernel, ofm_hw, stride, pad, ifm_zp, ifm_bits, ifm_signed,
                     upscale_mode, cfg, bias, scales, shifts, lut, acc_in, diag, depth)


