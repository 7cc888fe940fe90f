"""Exact integer sums of a 3x3, stride-1, dilation-1 convolution by Winograd's minimal filtering
F(2x2, 3x3), for CPUs without AVX-512 VNNI (issue 31 #1): :func:`emu.conv.int_conv.conv_sums`'
int16 branch runs it where :func:`emu.conv.int_conv.winograd_for` says (its one rule).

Why: on AVX2 the int16-pair kernel (int_conv ``_conv_blocks``, ``vpmaddwd`` + ``vpaddd``) runs
near its measured peak, so a direct convolution cannot go much faster there. F(2x2, 3x3) (Lavin
& Gray 2016, "Fast Algorithms for Convolutional Neural Networks", the public fact used here)
computes each 2x2 output tile of one (input channel, output channel) from a 4x4 input tile with
16 multiplies instead of 36:

    Y = A^T [ (G g G^T) * (B^T d B) ] A,   B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0],
                                                   [0, 1, 0, -1]],
    G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]],  A^T = [[1, 1, 1, 0],
                                                                          [0, 1, -1, -1]]

(``*`` element-wise, summed over input channels before A). With ``2G`` (:data:`G2`, integers)
the weights' transform ``U = (2G) g (2G)^T`` is integer and the result is ``4 Y``; the input
transform ``V = B^T d B`` is additions only. All in integers, exactly:

* ``|V| <= 4 max|x - zp|`` (each V sums 4 inputs with signs +-1): int16 while that is <= 32767;
* ``|U|`` is computed from the weights (at most 9 * 128 for int8 weights); int16 where it fits;
* the 16 element-wise products summed over channels are 16 GEMMs [tiles x C] x [C x K] of int16
  pairs into int32 (``vpmaddwd``: a pair of products below 2 * 32767^2 < 2^31, accumulation
  wrapping modulo 2^32);
* the output transform adds those sums with coefficients +-1, so it yields ``4 Y`` modulo 2^32:
  exactly ``4 Y`` wherever ``|4 Y| < 2^31``; an arithmetic shift right by 2 then gives ``Y``.
  :func:`winograd_fits` proves that bound per call from the input range after the zero point
  and the weights' largest per-channel absolute sum (``|Y| <= max|x - zp| * max_k sum|w[k]|``).

Layouts (chosen so the innermost loops read contiguous memory):
* the padded input ``P`` [2 Ty + 2, 2 Tx + 2, C16] int16 of ``x - zp``, 0 outside the input
  and past C (:func:`_wino_input`, one thread), Ty and Tx the tile rows and columns (Tx rounded
  up to 4), C16 the channels rounded up to 16;
* ``V`` of one tile row [16, Tx, C16] int16 (its words: channel pairs), made by the GEMM's task
  for that row (:func:`_transform_row`), so it is still in L2 when the GEMM reads it;
* ``U`` [16, C pairs, K rounded up to 16] words (:class:`WinogradWeights`);
* sums: [2 Ty, 2 Tx, K rounded up to 16] int32 (``hwc``) or [K rounded up, 2 Ty + 1, 2 Tx]
  (:data:`SPARE_ROWS`), C-contiguous; the output rows and columns past Ho, Wo of the last tiles
  are computed and dropped (callers get a view).
"""
from __future__ import annotations

import threading
import weakref
from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic

from ..jit import njit
from ..ranged import call_ranged, ranged, ranged_wrapper
from ..scratch import scratch
from . import int_conv as IC
from .simd import vbcast, vload, vmadd, vstore, vzero
from .vnni import i32x16, zadd, zload, zstore, zsub

#: 2G of F(2x2, 3x3) (G's halves scaled away, so U is integer and the result is 4 Y)
G2 = np.array([[2, 0, 0], [1, 1, 1], [1, -1, 1], [0, 0, 2]], np.int64)
KW = 16  # output channels per block (two 8-lane registers)
TB = 4   # tiles per block (4 x 2 accumulators, as _pointwise16)
TG = 16  # tiles per group: a group's 16 x 16 sums wait in L1 for the output transform
#: rows past 2 Ty in each channel plane of channels-first sums (not written). Why: a 64x64
#: plane is 16 KB, so without them the 16 channels' stores of a tile fall into the same L1
#: sets (planes a multiple of 4 KB apart: 32 lines for 8 ways); one more row moves each plane
#: by a row (64->64 at 64x64 on one thread, AVX2: channels-first GEMM 1.33 -> ~1.1 ms, the
#: whole call then 1.19 ms against 1.10 channels last)
SPARE_ROWS = 1


class WinogradWeights(NamedTuple):
    """The weights' Winograd transform, laid out for :func:`_wino_gemm`."""
    words: np.ndarray | None  # int32 [16 * c2 * kp]: U int16 pairs; None where |U| > 32767
    k: int                    # output channels
    c: int                    # input channels
    u_max: int                # max |U|
    w_sum: int                # max over K of sum |w[k]| (bounds |Y| with max |x - zp|)

    @property
    def kp(self) -> int:
        """Output channels rounded up to whole blocks."""
        return -(-self.k // KW) * KW


def winograd_weights(w: np.ndarray) -> WinogradWeights:
    """``w`` [K, 3, 3, C] integers -> U = (2G) g (2G)^T per (k, c), as int16 pair words
    [16 positions, C pairs, K rounded up to 16] (zero-filled), with its bounds; ``words`` None
    where some |U| exceeds 32767 (int16, one operand of every vpmaddwd pair above -32768)."""
    k, kh, kw, c = w.shape
    if (kh, kw) != (3, 3):
        raise ValueError(f"Winograd F(2x2, 3x3) needs a 3x3 kernel, got {kh}x{kw}")
    u = np.einsum("ai,kijc,bj->abkc", G2, w.astype(np.int64), G2).reshape(16, k, c)
    u_max = int(np.abs(u).max()) if u.size else 0
    w_sum = IC.weight_sum_bound(w)
    if u_max > 32767:
        return WinogradWeights(None, k, c, u_max, w_sum)
    kp, c2 = -(-k // KW) * KW, (c + 1) // 2
    half = np.zeros((16, c2, kp, 2), np.int16)
    t = np.zeros((16, kp, 2 * c2), np.int64)
    t[:, :k, :c] = u
    half[:] = t.reshape(16, kp, c2, 2).transpose(0, 2, 1, 3)
    return WinogradWeights(half.view(np.int32).reshape(-1), k, c, u_max, w_sum)


#: id of a PackedWeights' words -> its WinogradWeights, while the words live. Why not
#: int_conv._kept: it recomputes for writable arrays, since they may change; pack_weights' words
#: are writable but written by nobody after it, and the MAX78000 keeps its PackedWeights (not
#: the raw weights) across runs
_OF_PACKED: dict[int, WinogradWeights] = {}


def packed_winograd_weights(w: IC.PackedWeights) -> WinogradWeights:
    """:func:`winograd_weights` of the 3x3 weights packed in ``w`` (its int16 words), kept while
    ``w.words`` lives: computed once per layer by int_conv.winograd_for, where conv_sums can
    take them."""
    key = id(w.words)
    hit = _OF_PACKED.get(key)
    if hit is None:
        half = w.words.view(np.int16).reshape(w.kp, w.kh, w.kw, -1)[:w.k, :, :, :w.c]
        hit = _OF_PACKED[key] = winograd_weights(half)
        weakref.finalize(w.words, _OF_PACKED.pop, key, None)
    return hit


def winograd_fits(lo: int, hi: int, ww: WinogradWeights) -> bool:
    """Whether :func:`winograd_sums` is exact for inputs in [lo, hi] after the zero point: U
    fits int16, V does (4 max|x - zp| <= 32767) and 4 Y fits int32 (4 max|x - zp| *
    max_k sum|w[k]| < 2^31), so the wrapped int32 output transform is 4 Y itself."""
    m = max(-lo, hi, 0)
    return ww.words is not None and 4 * m <= 32767 and 4 * m * ww.w_sum < 1 << 31


def input_range(dtype, zero_point: int) -> tuple[int, int]:
    """[lo, hi] of ``x - zero_point`` for every ``x`` of the integer ``dtype``."""
    info = np.iinfo(dtype)
    return int(info.min) - zero_point, int(info.max) - zero_point


@intrinsic
def zstore16(typingctx, arr, idx, v):
    """arr[idx:idx+16] = the low 16 bits of each lane of ``v`` (``arr`` 1-D C-contiguous
    int16). Why: :func:`_transform_row` computes V in vnni's 16-lane int32 vectors (plain LLVM
    IR: two ymm registers on AVX2) and stores it as int16; vnni's stores write int32 words."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.int16 and arr.ndim == 1
            and arr.layout == "C" and isinstance(idx, types.Integer) and v == i32x16):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        p = builder.gep(data, [args[1]])
        vt = ir.VectorType(ir.IntType(16), 16)
        builder.store(builder.trunc(args[2], vt), builder.bitcast(p, vt.as_pointer()), align=2)
        return context.get_dummy_value()
    return types.void(arr, idx, v), codegen


@intrinsic
def zsra2(typingctx, v):
    """``v`` >> 2 per lane, arithmetic (exact division by 4 of a multiple of 4): the output
    transform's 4 Y back to Y."""
    if v != i32x16:
        return None

    def codegen(context, builder, signature, args):
        return builder.ashr(args[0], ir.Constant(args[0].type, [2] * 16))
    return i32x16(v), codegen


@njit(nogil=True, cache=True)
def _wino_input(x, zp, rows, cols, top, left, p):
    """p[r, q, c] = x[r - top, q - left, c] - zp inside the input (``rows`` x ``cols``), 0
    elsewhere and for channels past C: the tiles' padded input. ``x`` [H, W, C] C-contiguous;
    ``p`` [2 Ty + 2, 2 Tx + 2, C16] int16, C16 = C rounded up to 16 (the caller keeps
    |x - zp| within 8191, :func:`winograd_fits`). One thread: 12 us for a 64x64x64 int8 input
    on AVX2, the same as a parallel version took on two (its launch costs what it saves)."""
    c_n = x.shape[2]
    cw = p.shape[2]
    for r in range(p.shape[0]):
        xr = r - top
        for q in range(p.shape[1]):
            xc = q - left
            if 0 <= xr < rows and 0 <= xc < cols:
                for c in range(c_n):
                    p[r, q, c] = x[xr, xc, c] - zp
                for c in range(c_n, cw):
                    p[r, q, c] = 0
            else:
                for c in range(cw):
                    p[r, q, c] = 0


@njit(nogil=True, cache=True)
def _bt(d0, d1, d2, d3):
    """B^T's combination of four vectors (F(2x2, 3x3): d0 - d2, d1 + d2, d2 - d1, d1 - d3): the
    rows of a tile make B^T d, then the columns of that make (B^T d) B."""
    return zsub(d0, d2), zadd(d1, d2), zsub(d2, d1), zsub(d1, d3)


@njit(nogil=True, cache=True)
def _transform_row(pf, ty, wp, cw, txb, vf):
    """vf[e, tx, c] = (B^T d B)[i, j] (e = 4 i + j) of the 4x4 tile d = p[2 ty : 2 ty + 4,
    2 tx : 2 tx + 4, c] for the tiles of row ``ty`` (``pf``: :func:`_wino_input`'s p flat,
    ``wp`` columns of ``cw`` channels; ``vf`` flat [16, txb, cw] int16), 16 channels at a
    time in vnni's int32 vectors. Why explicit vectors: LLVM left the 16 loads and 16 stores
    per channel scalar in the serial kernel (it could not prove the arrays apart): 3.6 ms
    against 0.2 for the 64x64x64 input on one thread."""
    row = wp * cw
    s = txb * cw  # from one tile position e to the next
    for tx in range(txb):
        for c0 in range(0, cw, 16):
            b = (2 * ty * wp + 2 * tx) * cw + c0
            # B^T d, column j of the tile: t[i][j]
            t0 = _bt(zload(pf, b), zload(pf, b + row), zload(pf, b + 2 * row),
                     zload(pf, b + 3 * row))
            t1 = _bt(zload(pf, b + cw), zload(pf, b + row + cw), zload(pf, b + 2 * row + cw),
                     zload(pf, b + 3 * row + cw))
            t2 = _bt(zload(pf, b + 2 * cw), zload(pf, b + row + 2 * cw),
                     zload(pf, b + 2 * row + 2 * cw), zload(pf, b + 3 * row + 2 * cw))
            t3 = _bt(zload(pf, b + 3 * cw), zload(pf, b + row + 3 * cw),
                     zload(pf, b + 2 * row + 3 * cw), zload(pf, b + 3 * row + 3 * cw))
            o = tx * cw + c0  # v[e, tx, c0] at o + e * s
            for i in range(4):  # then (.) B: row i of B^T d, the same combination
                y = _bt(t0[i], t1[i], t2[i], t3[i])
                zstore16(vf, o + 4 * i * s, y[0])
                zstore16(vf, o + (4 * i + 1) * s, y[1])
                zstore16(vf, o + (4 * i + 2) * s, y[2])
                zstore16(vf, o + (4 * i + 3) * s, y[3])


@ranged
def _wino_gemm_rows(pf, uw, acc, tyn, txb, wp, cw, c2, kp, hwc, plane, start, stop):
    """Per tile row start..stop-1 (emu/ranged.py; in parallel in :func:`_wino_gemm`): its V
    (:func:`_transform_row`, kept in L2 for the row), then per 16 output channels and group
    of :data:`TG` tiles: for each of the 16 tile
    positions e, m[e] = sum over channel pairs of vpmaddwd(V word, U words) (one tile's V word
    broadcast against 16 channels' U words, 4 tiles x 2 registers, as int_conv's
    ``_pointwise16``; the group's tiles share each position's weight slice in L1), then the
    output transform A^T m A in wrapping int32, which is 4 Y modulo 2^32, shifted right by 2
    (exact where :func:`winograd_fits` holds).
    ``pf``: :func:`_wino_input`'s p flat (``wp`` columns of ``cw`` channels); ``uw``: U's words
    [16, c2, kp]; ``acc``: [2 tyn, 2 txb, kp] (``hwc``) or per channel a [2 tyn, 2 txb]
    plane every ``plane`` words (:data:`SPARE_ROWS` spare rows after each)."""
    wo2 = 2 * txb
    for ty in range(start, stop):
        m = np.empty(16 * TG * KW, np.int32)
        vf = np.empty(16 * txb * cw, np.int16)
        _transform_row(pf, ty, wp, cw, txb, vf)
        vw = vf.view(np.int32)  # V words [16, txb, cs]: c2 <= cs channel pairs of a tile used
        cs = cw // 2
        ys = np.empty(4 * KW, np.int32)
        for k0 in range(0, kp, KW):
            for tx0 in range(0, txb, TG):
                tn = min(TG, txb - tx0)
                for et in range(16 * tn // TB):
                    e = et // (tn // TB)
                    t4 = (et % (tn // TB)) * TB
                    xi = (e * txb + tx0 + t4) * cs
                    a0 = vzero()
                    a1 = a0
                    a2 = a0
                    a3 = a0
                    b0 = a0
                    b1 = a0
                    b2 = a0
                    b3 = a0
                    for wi in range(e * c2 * kp + k0, (e + 1) * c2 * kp + k0, kp):
                        w0 = vload(uw, wi)
                        w1 = vload(uw, wi + 8)
                        t = vbcast(vw, xi)
                        a0 = vmadd(a0, t, w0)
                        b0 = vmadd(b0, t, w1)
                        t = vbcast(vw, xi + cs)
                        a1 = vmadd(a1, t, w0)
                        b1 = vmadd(b1, t, w1)
                        t = vbcast(vw, xi + 2 * cs)
                        a2 = vmadd(a2, t, w0)
                        b2 = vmadd(b2, t, w1)
                        t = vbcast(vw, xi + 3 * cs)
                        a3 = vmadd(a3, t, w0)
                        b3 = vmadd(b3, t, w1)
                        xi += 1
                    o = (e * TG + t4) * KW
                    vstore(m, o, a0)
                    vstore(m, o + 8, b0)
                    vstore(m, o + KW, a1)
                    vstore(m, o + KW + 8, b1)
                    vstore(m, o + 2 * KW, a2)
                    vstore(m, o + 2 * KW + 8, b2)
                    vstore(m, o + 3 * KW, a3)
                    vstore(m, o + 3 * KW + 8, b3)
                s = TG * KW  # m[e] of tile i's 16 channels is m[e * s + i * KW:][:16]
                for i in range(tn):
                    o = i * KW
                    x = 2 * (tx0 + i)
                    # rows of A^T m: m0 + m1 + m2, m1 - m2 - m3, per column j (wrapping int32)
                    r00 = zadd(zadd(zload(m, o), zload(m, 4 * s + o)), zload(m, 8 * s + o))
                    r10 = zsub(zsub(zload(m, 4 * s + o), zload(m, 8 * s + o)),
                               zload(m, 12 * s + o))
                    r01 = zadd(zadd(zload(m, s + o), zload(m, 5 * s + o)), zload(m, 9 * s + o))
                    r11 = zsub(zsub(zload(m, 5 * s + o), zload(m, 9 * s + o)),
                               zload(m, 13 * s + o))
                    r02 = zadd(zadd(zload(m, 2 * s + o), zload(m, 6 * s + o)),
                               zload(m, 10 * s + o))
                    r12 = zsub(zsub(zload(m, 6 * s + o), zload(m, 10 * s + o)),
                               zload(m, 14 * s + o))
                    r03 = zadd(zadd(zload(m, 3 * s + o), zload(m, 7 * s + o)),
                               zload(m, 11 * s + o))
                    r13 = zsub(zsub(zload(m, 7 * s + o), zload(m, 11 * s + o)),
                               zload(m, 15 * s + o))
                    # then (.) A: 4 Y, exact in int32 (winograd_fits), then / 4 exactly
                    y00 = zsra2(zadd(zadd(r00, r01), r02))
                    y01 = zsra2(zsub(zsub(r01, r02), r03))
                    y10 = zsra2(zadd(zadd(r10, r11), r12))
                    y11 = zsra2(zsub(zsub(r11, r12), r13))
                    if hwc:
                        a = (2 * ty * wo2 + x) * kp + k0
                        zstore(acc, a, y00)
                        zstore(acc, a + kp, y01)
                        zstore(acc, a + wo2 * kp, y10)
                        zstore(acc, a + wo2 * kp + kp, y11)
                    else:  # channels first: lane by lane, through ys
                        zstore(ys, 0, y00)
                        zstore(ys, KW, y01)
                        zstore(ys, 2 * KW, y10)
                        zstore(ys, 3 * KW, y11)
                        for k in range(KW):
                            a = (k0 + k) * plane + 2 * ty * wo2 + x
                            acc[a] = ys[k]
                            acc[a + 1] = ys[KW + k]
                            acc[a + wo2] = ys[2 * KW + k]
                            acc[a + wo2 + 1] = ys[3 * KW + k]


@ranged_wrapper(_wino_gemm_rows, nogil=True, cache=True)
def _wino_gemm_serial(pf, uw, acc, tyn, txb, wp, cw, c2, kp, hwc, plane):
    """:func:`_wino_gemm_rows` over every tile row."""
    call_ranged(_wino_gemm_rows, (pf, uw, acc, tyn, txb, wp, cw, c2, kp, hwc, plane, 0, tyn))


@ranged_wrapper(_wino_gemm_rows, parallel=True, cache=True)
def _wino_gemm(pf, uw, acc, tyn, txb, wp, cw, c2, kp, hwc, plane):
    """:func:`_wino_gemm_rows` over every tile row, in parallel (IC.CHUNKS)."""
    m = min(tyn, IC.CHUNKS)
    for c in prange(m):
        call_ranged(_wino_gemm_rows, (pf, uw, acc, tyn, txb, wp, cw, c2, kp, hwc, plane,
                                      c * tyn // m, (c + 1) * tyn // m))


_WINO_GEMM_TWIN = IC.twin(_wino_gemm, _wino_gemm_serial, _wino_gemm_rows)


class _WinogradCall(NamedTuple):
    """A :class:`WinogradLaunch`'s call in one thread, as int_conv's _Int16Call is."""
    p: np.ndarray            # this thread's padded input (_wino_input's output)
    gemm: object             # _wino_gemm's version, called with ``args``
    args: tuple
    par: object              # int_conv.parallel held around the call, None on one thread
    acc: np.ndarray          # the whole work array, shaped ``WinogradLaunch.acc``


class WinogradLaunch(NamedTuple):
    """:func:`_wino_input`'s and :func:`_wino_gemm`'s call for one input layout, worked out once
    as int_conv's Int16Launch is (kept in conv_sums' ``launches``)."""
    input: tuple             # _wino_input's arguments after the input, before p
    p: tuple                 # the padded input's shape (int16)
    gemm: tuple              # _wino_gemm's arguments after pf, uw and acc
    words: np.ndarray        # WinogradWeights.words
    acc: tuple               # the work array's shape
    work: int                # the direct convolution's multiply-adds (parallel's threshold)
    calls: threading.local   # per thread, the call worked out for it

    def run(self, v: np.ndarray) -> np.ndarray:
        """The whole work array (``self.acc``) for ``v`` [C, H, W] of the launch's layout."""
        call = getattr(self.calls, "call", None)
        if call is None:
            p = scratch("winograd.p", self.p, np.int16)
            acc = scratch("winograd.acc", (int(np.prod(self.acc)),), np.int32)
            par = IC.parallel(self.work)
            call = self.calls.call = _WinogradCall(
                p, par.kernel(_WINO_GEMM_TWIN), (p.reshape(-1), self.words, acc, *self.gemm),
                None if par.threads == 1 else par, acc.reshape(self.acc))
        x = v.transpose(1, 2, 0)
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        _wino_input(IC.read_only(x), *self.input, call.p)
        if call.par is None:
            call.gemm(*call.args)
        else:
            with call.par:
                call.gemm(*call.args)
        return call.acc


def winograd_launch(shape: tuple[int, int, int], ww: WinogradWeights, out_hw: tuple[int, int],
                    *, zero_point: int = 0, in_hw: tuple[int, int] | None = None,
                    pad: tuple[int, int] = (0, 0), hwc: bool = False) -> WinogradLaunch:
    """:class:`WinogradLaunch` of :func:`winograd_sums` for an input of ``shape`` [C, H, W]:
    its layout only, no input array, so the Ethos-U85 block-replay executor works out its rows'
    calls (the launch's ``input``, ``p``, ``gemm`` and ``acc``) where it builds them
    (emu/executor/ethosu85.py, a CONV16 row's Winograd slots)."""
    c, h, wd = shape
    if c != ww.c:
        raise ValueError(f"input has {c} channels, weights {ww.c}")
    if ww.words is None:
        raise ValueError(f"Winograd weights past int16 (max |U| {ww.u_max})")
    ho, wo = out_hw
    rows, cols = in_hw or (h, wd)
    tyn, txn = -(-ho // 2), -(-wo // 2)
    txb = -(-txn // TB) * TB
    c16, kp = -(-c // 16) * 16, ww.kp
    plane = (2 * tyn + (0 if hwc else SPARE_ROWS)) * 2 * txb
    return WinogradLaunch((np.int32(zero_point), min(rows, h), min(cols, wd), pad[0], pad[1]),
                          (2 * tyn + 2, 2 * txb + 2, c16),
                          (tyn, txb, 2 * txb + 2, c16, (c + 1) // 2, kp, hwc, plane), ww.words,
                          (2 * tyn, 2 * txb, kp) if hwc else (kp, 2 * tyn + SPARE_ROWS, 2 * txb),
                          ho * wo * ww.k * c * 9, threading.local())


def winograd_sums(v: np.ndarray, ww: WinogradWeights, out_hw: tuple[int, int], *,
                  zero_point: int = 0, in_hw: tuple[int, int] | None = None,
                  pad: tuple[int, int] = (0, 0), hwc: bool = False,
                  padded: bool = False) -> np.ndarray:
    """int32 [K, Ho, Wo] (``hwc``: [Ho, Wo, K]): out[k, y, x] = sum over c, i, j of
    (v[c, y + i - top, x + j - left] - zero_point) * w[k, i, j, c], positions outside the input
    (or outside ``in_hw``) reading 0: :func:`emu.conv.int_conv.conv_sums` of a 3x3 kernel with
    stride 1 and dilation 1, by F(2x2, 3x3). Exact only where :func:`winograd_fits` holds for
    the input's range after the zero point (callers check, as int_conv.winograd_for does).
    ``v`` indexed [C, H, W], any strides (an input whose channels are not contiguous is copied
    channels last first); ``padded``: the whole C-contiguous work array instead (see the
    module docstring), as conv_sums' ``padded``."""
    acc = winograd_launch(v.shape, ww, out_hw, zero_point=zero_point, in_hw=in_hw, pad=pad,
                          hwc=hwc).run(v)
    return acc if padded else IC._sums_view(acc, out_hw, ww.k, hwc, False)
