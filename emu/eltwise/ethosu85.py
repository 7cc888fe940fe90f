"""Ethos-U85 NPU_OP_ELEMENTWISE (all 21 modes) on plain numpy tensors.

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

from typing import NamedTuple

import numpy as np

from .. import kernel_plan as KP
from ..jit import njit
from ..numeric import ethosu85 as P
from ..numeric.ethosu85 import (
    C_SCALE,
    C_SHIFT,
    C_ZP,
    RESCALE_GLOBAL,
    RESCALE_NONE,
    RESCALE_SHIFT_ONLY,
)
from ..numeric.ethosu85_values import (
    INT32_MIN,
    check,
    checked_zero_point,
    config_or_default,
    fit_hw,
    infer_type,
    lut_bytes,
    ofm_dtype,
    values_minus,
)

# elementwise_mode (Table 3-100, [U85-TRM: Table 3-100])
EW_MUL, EW_ADD, EW_SUB, EW_MIN, EW_MAX, EW_LRELU, EW_ABS, EW_CLZ, EW_SHR, EW_SHL, EW_LSHR, \
    EW_DIV = range(12)
EW_CMP_EQ, EW_CMP_NE, EW_CMP_GE, EW_CMP_GT = 16, 17, 18, 19
EW_AND, EW_OR, EW_XOR, EW_NOT, EW_AND_NOT = 33, 34, 35, 36, 42
EW_UNARY = (EW_LRELU, EW_ABS, EW_CLZ, EW_NOT)  # [U85-TRM: §3.10.6]
EW_MODES = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 33, 34, 35, 36, 42)
#: interpreted add/sub's cost per element (kernel_plan.tiered's estimate; ~1.5-2 us measured on
#: the 2-core AMD EPYC, Zen 4; issue 31 #5)
ADDSUB_S_PER_ELEMENT = 2e-6
# broadcast_mode bits [U85-TRM: Table 3-117, Table 3-124]
BC_H, BC_W, BC_C, BC_SCALAR = 1, 2, 4, 8


# ------------------------------------------------------------------------------------------------
# ELEMENTWISE [U85-TRM: §3.10.6]

@njit(nogil=True, cache=True)
def _scale_in(a, bits, signed, scale, shift, rnd, dbl):
    """scale_a / scale_b [U85-TRM: §3.6.6]: b8 or signed b16 -> (int32)rounded_shift_right(a*scale,
    shift, round_mode_ifm, dbl_rnd); b32 and unsigned b16 inputs pass unscaled."""
    if bits == 8 or (bits == 16 and signed):
        return P.sign_extend(P.rounded_shift_right(a * scale, shift, rnd, dbl), 32)
    return a


@njit(nogil=True, cache=True)
def _addsub_fast_applies(ew, cfg):
    """Whether :func:`_addsub_fast` computes add/sub exactly: both inputs scaled (b8 or signed
    b16: |value| <= 2**31 + 2**16 even for a scalar operand), input and output scales below
    2**31 and shifts 0..62 (so no product plus rounding addend leaves int64), no LUT function,
    OFM narrower than 64 bits."""
    for k in (1, 3):
        if not (ew[k] == 8 or (ew[k] == 16 and ew[k + 1] != 0)):
            return False
    for sc, sh in ((ew[5], ew[6]), (ew[9], ew[10]), (cfg[C_SCALE], cfg[C_SHIFT])):
        if sh < 0 or sh > 62 or abs(sc) >= np.int64(1) << 31:
            return False
    return cfg[P.C_FUNC] == P.LUT_NONE and cfg[P.C_OFM_BITS] != 64


@njit(nogil=True, cache=True)
def _addsub_fast(a, b, sub, ew, cfg, out):
    """The add/sub body of :func:`_ew_kernel` where :func:`_addsub_fast_applies`:
    sa = (int32)rounded_shift_right(a * scale_a, ...) (scale_b likewise), acc = (int32)(sa +/-
    sb), rescale with OFM_SCALE, activation clip, truncate: the same arithmetic without a
    per-element mode dispatch, so the loop vectorises (2-9 ns instead of ~28 ns per element on
    MobileNet v2's residual adds)."""
    s1, h1 = ew[5], ew[6]
    s2, h2 = ew[9], ew[10]
    p1, n1 = P.round_terms(h1, ew[7], ew[8])
    p2, n2 = P.round_terms(h2, ew[11], ew[12])
    sc, sh = cfg[C_SCALE], cfg[C_SHIFT]
    rp, rn = P.round_terms(sh, cfg[P.C_ROUND], cfg[P.C_DBL_RND])
    zp, lo, hi, clip = P.output_limits(cfg)
    oh = (np.int64(1) << (cfg[P.C_OFM_BITS] - 1)) if cfg[P.C_OFM_SIGNED] != 0 else np.int64(0)
    if not clip:
        lo, hi = -(np.int64(1) << 62), np.int64(1) << 62
    om = (np.int64(1) << cfg[P.C_OFM_BITS]) - 1
    sign = np.int64(-1) if sub else np.int64(1)
    fa, fb, fo = a.ravel(), b.ravel(), out.ravel()
    for i in range(fo.shape[0]):
        x = fa[i] * s1
        x = (x + p1 + ((n1 - p1) & (x >> 63))) >> h1
        y = fb[i] * s2
        y = (y + p2 + ((n2 - p2) & (y >> 63))) >> h2
        acc = (((((x + 0x80000000) & 0xFFFFFFFF) - 0x80000000)
                + sign * (((y + 0x80000000) & 0xFFFFFFFF) - 0x80000000) + 0x80000000)
               & 0xFFFFFFFF) - 0x80000000
        r = acc * sc
        r = (r + rp + ((rn - rp) & (r >> 63))) >> sh
        t = ((r + zp + 0x80000000) & 0xFFFFFFFF) - 0x80000000
        t = min(max(t, lo), hi)
        fo[i] = ((t + oh) & om) - oh


@njit(nogil=True, cache=True)
def _ew_kernel(a, b, ew, cfg, lut):
    """NPU_OP_ELEMENTWISE per-element body [U85-TRM: §3.10.6], acc int32 (wrapped, G-R7) except
    for mul, whose product is kept whole (64 bits) into rescale::

        mul: a*b (unscaled; b32 -> rescale shift_only)   add/sub/min/max: of sa, sb
        lrelu: a >= 0 ? sa : scale_b(a)   abs: |sa|   clz: clz(sa, 32)
        shr: rounded_shift_right(sa, sb & 31, OFM round) (no rescale)
        shl: sa << (sb & 31) (no rescale)  lshr: (uint32)(sa & type mask) >> (sb & 31) (no rescale)
        div: a / b truncating            cmp_*: -1 / 0   not/and/or/xor/and_not: bitwise
        acc = rescale(acc, -1, mode); activation; truncate

    a, b: [H, W, D] broadcast, zero-point-corrected (scalars too); ew: mode, ifm bits,
    ifm signed, ifm2 bits, ifm2 signed, ifm scale, shift, round, dbl_rnd, ifm2 scale, shift,
    round, dbl_rnd, 1 to keep add/sub off :func:`_addsub_fast` in :func:`_run` (the tests'
    reference). Every mode runs the loop here: the callers take :func:`_addsub_fast`
    themselves where it applies (:func:`_run`, the executor's ELEMENTWISE rows), since
    linking it in cost ~0.7 s of this kernel's ~3.4 s compile (issue 31 #5)."""
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
                if mode == 0:  # MUL keeps the whole product: |a|, |b| <= 2^31 (b32 is signed)
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
                        # UNPREDICTABLE (assert b != 0, [U85-TRM: §3.10.6]): 0
                        acc = np.int64(0)
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
                if mode != 0:
                    # int32_t acc ([U85-TRM: §3.10.6], G-R7)
                    acc = P.sign_extend(acc, 32)
                r = P.rescale(acc, -1, rm, cfg, empty, empty)
                r = P.activation(r, cfg, lut)
                out[y, x, c] = P.write_value(r, cfg)
    return out


def _scalar_value(scalar: int, zero_point: int, bits: int, signed: bool, diag, name: str) -> int:
    """A scalar operand: the signed 32-bit OP_SCALAR minus the operand's zero point.

    The pseudocode takes OP_SCALAR as it is [U85-TRM: §3.10.6], but compilers store the quantized
    constant and its zero point as for a tensor: Vela 5.2 (regor's EthosU85RCSGenerator
    GenerateIFM) and Mesa's ethosu driver emit the stored value in OP_SCALAR and the tensor's
    zero point in IFM2_ZERO_POINT (x * 0.37 becomes scalar 127 with zero point -128), and the
    results match LiteRT only with the zero point subtracted, as read_ifm does [U85-TRM: §3.6.5].
    The zero point is interpreted and checked as for a tensor of the operand's type.
    sign_extend's Python function: a compile for one scalar cost more than it (issue 31 #5)."""
    return int(P.sign_extend.py_func(scalar, 32)) - checked_zero_point(zero_point, bits, signed,
                                                                       diag, name)


def operand_shape(mode: int, shape: tuple[int, int, int]) -> tuple[int, int, int]:
    """The extent an operand is read with for the OFM ``shape``: 1 on each axis its
    broadcast_mode bits name (that axis reads coordinate 0 [U85-TRM: Table 3-117]), the OFM's
    on the others. One rule for the model's reads, the kernel and the executor's rows."""
    H, W, D = shape
    return (1 if mode & BC_H else H, 1 if mode & BC_W else W, 1 if mode & BC_C else D)


def _covers(vshape: tuple, mode: int, shape: tuple) -> bool:
    """Whether an operand of ``vshape`` covers the OFM ``shape`` on its non-broadcast axes
    (plan_elementwise reports it where not: UNPREDICTABLE)."""
    return all(n >= (1 if mode & bit else max(m, 1))
               for n, m, bit in zip(vshape, shape, (BC_H, BC_W, BC_C)))


def _broadcast(v, mode, shape):
    """The operand ``v`` as the OFM ``shape``: broadcast axes read coordinate 0, an operand
    short of the OFM on another axis padded with zeros (what the model does where the
    pseudocode is UNPREDICTABLE)."""
    H, W, D = shape
    if not mode & (BC_H | BC_W | BC_C) and v.shape == (H, W, D):  # nothing to broadcast or cut
        return np.ascontiguousarray(v)
    if not _covers(v.shape, mode, shape):
        v = fit_hw(v, max(v.shape[0], H), max(v.shape[1], W))
        if v.shape[2] < D:
            v = np.concatenate([v, np.zeros(v.shape[:2] + (D - v.shape[2],), np.int64)], axis=2)
    # a broadcast axis reads coordinate 0, the others the OFM's extent
    h, w, d = operand_shape(mode, shape)
    cut = v[:h, :w, :d]
    return np.ascontiguousarray(np.broadcast_to(cut, shape))


def elementwise(mode, ifm, ifm2=None, ofm_shape=None, *, ifm_zp=0, ifm2_zp=0, ifm_bits=None,
                ifm_signed=None, ifm2_bits=None, ifm2_signed=None, ifm_scale=(1, 0, 1, 0),
                ifm2_scale=(1, 0, 1, 0), broadcast=0, broadcast2=0, scalar=0, cfg=None, lut=None,
                diag=None):
    """NPU_OP_ELEMENTWISE ``mode`` (EW_*). ifm/ifm2 [H,W,C] raw stored integers (a broadcast axis
    is read at coordinate 0, BC_H|BC_W|BC_C bits); broadcast/broadcast2 == BC_SCALAR uses the
    signed 32-bit ``scalar`` (OP_SCALAR) minus that input's zero point (:func:`_scalar_value`).
    ifm_scale/ifm2_scale = (scale, shift, round_mode_ifm 0 double_symmetric / 1 natural,
    dbl_rnd). cfg must be global scale_mode (G-R9). ofm_shape (H, W, D) defaults to the
    non-broadcast input's shape."""
    cfg = config_or_default(cfg)
    ref = ifm if broadcast != BC_SCALAR else ifm2
    if ofm_shape is None:
        ofm_shape = np.asarray(ref).shape
    ofm_shape = tuple(int(s) for s in ofm_shape)
    if len(ofm_shape) == 4:
        outs = []
        for n in range(ofm_shape[0]):
            def pick(t, n=n):
                if t is None:
                    return None
                a = np.asarray(t)
                return a[min(n, a.shape[0] - 1)] if a.ndim == 4 else t
            outs.append(elementwise(mode, pick(ifm), pick(ifm2), ofm_shape[1:], ifm_zp=ifm_zp,
                                    ifm2_zp=ifm2_zp, ifm_bits=ifm_bits, ifm_signed=ifm_signed,
                                    ifm2_bits=ifm2_bits, ifm2_signed=ifm2_signed,
                                    ifm_scale=ifm_scale, ifm2_scale=ifm2_scale,
                                    broadcast=broadcast, broadcast2=broadcast2,
                                    scalar=scalar, cfg=cfg, lut=lut, diag=diag))
        return np.stack(outs)
    p = plan_elementwise(mode, ifm, ifm2, ofm_shape, ifm_zp=ifm_zp, ifm2_zp=ifm2_zp,
                         ifm_bits=ifm_bits, ifm_signed=ifm_signed, ifm2_bits=ifm2_bits,
                         ifm2_signed=ifm2_signed, ifm_scale=ifm_scale, ifm2_scale=ifm2_scale,
                         broadcast=broadcast, broadcast2=broadcast2, scalar=scalar, cfg=cfg,
                         diag=diag)
    a, b = _operand_values(p, ifm, ifm2)
    if mode == EW_DIV:  # the asserts on the values
        check(diag, not np.any(b == 0), "div by zero [U85-TRM: §3.10.6]: result 0")
        check(diag, not np.any((b == -1) & (a == INT32_MIN)), "div INT32_MIN / -1 "
                                                              "[U85-TRM: §3.10.6]: wraps")
    return _run(p, a, b, lut)


class Eltwise(NamedTuple):
    """An NPU_OP_ELEMENTWISE with everything but its operands' values worked out
    (:func:`plan_elementwise`): why: an operation is the same on every run, and its checks and
    parameters cost more than the kernel on MobileNet's small tensors (the device keeps one
    per operation)."""
    shape: tuple             # OFM [H, W, D]
    operands: tuple          # per input: a scalar's value (int), None (the unary zeros), or
    #                          (zero point as read, bits, signed, broadcast mode) of a tensor
    ew: np.ndarray           # the kernel's parameter vector
    cfg: np.ndarray
    dtype: np.dtype          # the OFM's


def plan_elementwise(mode, ifm, ifm2, ofm_shape, *, ifm_zp=0, ifm2_zp=0, ifm_bits=None,
                     ifm_signed=None, ifm2_bits=None, ifm2_signed=None, ifm_scale=(1, 0, 1, 0),
                     ifm2_scale=(1, 0, 1, 0), broadcast=0, broadcast2=0, scalar=0, cfg=None,
                     diag=None) -> Eltwise:
    """The :class:`Eltwise` of an [H, W, D] ``ofm_shape`` (the arguments as for
    :func:`elementwise`; ``ifm``/``ifm2`` only for their shapes and types), with the asserts
    that do not depend on the values reported to ``diag`` (DIV's on the values are
    :func:`elementwise`'s)."""
    cfg = config_or_default(cfg)
    unary = mode in EW_UNARY
    ref = ifm if broadcast != BC_SCALAR else ifm2
    none = np.zeros(1, np.int8)
    bits, signed = infer_type(ref if ref is not None else none, ifm_bits, ifm_signed)
    bits2, signed2 = (bits, signed) if (ifm2_bits is None and ifm2_signed is None) else \
        infer_type(ifm2 if ifm2 is not None else none, ifm2_bits, ifm2_signed)
    check(diag, (bits, signed) == (bits2, signed2),
          "IFM2 precision/type must match IFM [U85-TRM: §3.10.6, §3.10.26]")
    check(diag, bits in (8, 16) or (bits == 32 and signed),
          "ELEMENTWISE IFM b8, b16 or s32 [U85-TRM: §3.10.6]")
    check(diag, cfg[P.C_SCALE_MODE] == 1,
          "ELEMENTWISE needs OFM scale_mode global (G-R9, [U85-TRM: §3.6.6])")
    check(diag, not (broadcast == BC_SCALAR and broadcast2 == BC_SCALAR),
          "both inputs scalar [U85-TRM: §3.10.6]")
    operands = []
    for name, t, zp, b, s, bc in (("IFM", ifm, ifm_zp, bits, signed, broadcast),
                                  ("IFM2", ifm2, ifm2_zp, bits2, signed2, broadcast2)):
        if name == "IFM2" and unary:
            operands.append(None)
        elif bc == BC_SCALAR:
            operands.append(int(_scalar_value(scalar, zp, b, s, diag, name)))
        else:
            zpv = checked_zero_point(zp, b, s, diag, name)
            check(diag, _covers(np.shape(t), bc, ofm_shape),
                  f"{name} smaller than the OFM on a non-broadcast axis")
            operands.append((zpv, b, s, bc))
    if mode == EW_MUL:
        check(diag, bits == 8 or signed or (ifm_zp & 0xFFFF == 32768 and ifm2_zp & 0xFFFF == 32768),
              "uint16 mul needs zero points 32768 [U85-TRM: §3.10.6]")
    if mode == EW_DIV:
        check(diag, tuple(ifm_scale[:2]) == (1, 0) and tuple(ifm2_scale[:2]) == (1, 0)
              and ifm_zp == 0 and ifm2_zp == 0 and int(cfg[C_SCALE]) == 1 and int(cfg[C_SHIFT]) == 0
              and int(cfg[C_ZP]) == 0, "div: unit scales, zero points 0 [U85-TRM: §3.10.6]")
    check(diag, mode in EW_MODES, f"reserved elementwise mode {mode} [U85-TRM: Table 3-100]")
    ew = np.array([mode, bits, 1 if signed else 0, bits2, 1 if signed2 else 0, *ifm_scale,
                   *ifm2_scale, 0], np.int64)
    return Eltwise(tuple(ofm_shape), tuple(operands), ew, cfg, ofm_dtype(cfg))


def _operand_values(p: Eltwise, ifm, ifm2) -> tuple[np.ndarray, np.ndarray]:
    """Both operands as int64 [H, W, D] (zero point subtracted, broadcast)."""
    out = []
    for t, o in ((ifm, p.operands[0]), (ifm2, p.operands[1])):
        if o is None:
            out.append(np.zeros(p.shape, np.int64))
        elif isinstance(o, int):
            out.append(np.full(p.shape, o, np.int64))
        else:
            zp, bits, signed, bc = o
            out.append(_broadcast(values_minus(t, zp, bits, signed), bc, p.shape))
    return out[0], out[1]


def _mul_applies(ew: np.ndarray, cfg: np.ndarray) -> bool:
    """Whether :func:`_mul` computes the operation as :func:`_ew_kernel` does: MUL without a
    LUT function, accumulators not output raw, an OFM narrower than 64 bits."""
    return bool(ew[0] == EW_MUL and cfg[P.C_FUNC] == P.LUT_NONE and cfg[P.C_OFM_BITS] != 64
                and cfg[P.C_ACC_OUTPUT] == 0)


def _mul(a: np.ndarray, b: np.ndarray, ew: np.ndarray, cfg: np.ndarray) -> np.ndarray:
    """MUL where :func:`_mul_applies`, in numpy: the arithmetic of :func:`_ew_kernel`'s mul
    [U85-TRM: §3.10.6, §3.6.6, §3.6.7] on whole arrays: acc = a * b (the whole product),
    rescale global (b32 inputs: shift_only, no multiply), rounded_shift_right in its exact
    halving form with P.round_terms' addends, activation's 32-bit wrap of acc + zero point and
    clamp; the caller's cast to the OFM type truncates as write_ofm does. int64 arrays wrap
    as the kernel's int64 does. Why not the kernel: its compile (the general loop and every
    LUT mode, ~2.5 s) was a third of the Ethos-U85 demo's first run for a 4-element MUL
    (issue 31 #5)."""
    acc = a * b
    if ew[1] == 8 or ew[1] == 16:
        acc = acc * cfg[C_SCALE]
    shift = int(cfg[C_SHIFT])
    if shift > 0:
        rp, rn = P.round_terms.py_func(shift, cfg[P.C_ROUND], cfg[P.C_DBL_RND])
        r = np.where(acc >= 0, rp, rn)
        acc = ((acc >> 1) + (r >> 1) + (((acc & 1) + (r & 1)) >> 1)) >> (shift - 1)
    zp, lo, hi, clip = P.output_limits.py_func(cfg)
    acc = ((acc + zp + 0x80000000) & 0xFFFFFFFF) - 0x80000000
    return np.clip(acc, lo, hi) if clip else acc


def takes_addsub_fast(ew: np.ndarray, cfg: np.ndarray) -> bool:
    """Whether an operation's add/sub runs on :func:`_addsub_fast`: ADD or SUB, not kept off it
    (``ew[13]``, the tests' reference), and :func:`_addsub_fast_applies`, run as Python (its
    Python function: the same code, no compile). The one rule for :func:`_run` and the
    Ethos-U85 executor's rows (devices/ethos_u85/executor.py)."""
    return bool((ew[0] == EW_ADD or ew[0] == EW_SUB) and ew[13] == 0
                and _addsub_fast_applies.py_func(ew, cfg))


def _run(p: Eltwise, a: np.ndarray, b: np.ndarray, lut) -> np.ndarray:
    """The kernel's result for the operands ``a``, ``b``: add/sub on :func:`_addsub_fast`
    where it applies (what _ew_kernel would take), MUL in numpy where :func:`_mul_applies`,
    else :func:`_ew_kernel`. Why: a first run compiles only the kernel its operations take
    (the general kernel with every mode and LUT function took ~2.5 s to compile; issue 31 #5);
    _addsub_fast runs as Python while it is neither compiled nor cached and its elements are few
    (kernel_plan.tiered: the demo's 288-element add, ~0.5 ms, against ~0.6 s to compile)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    if takes_addsub_fast(p.ew, p.cfg):
        out = np.zeros(p.shape, np.int64)
        args = (a, b, bool(p.ew[0] == EW_SUB), p.ew, p.cfg, out)
        KP.tiered(_addsub_fast, ADDSUB_S_PER_ELEMENT * out.size, *args)(*args)
    elif _mul_applies(p.ew, p.cfg):
        out = _mul(a, b, p.ew, p.cfg)
    else:
        out = _ew_kernel(a, b, p.ew, p.cfg, lut_bytes(lut))
    return out.astype(p.dtype)


def run_elementwise(p: Eltwise, ifm, ifm2, lut=None) -> np.ndarray:
    """The operation of :func:`plan_elementwise` on raw ``ifm``/``ifm2`` of the planned
    shapes and types (not DIV: its asserts look at the values)."""
    return _run(p, *_operand_values(p, ifm, ifm2), lut)


