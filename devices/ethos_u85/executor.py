"""The compiled executor of a block's replay (issue 32 #1): a block's steps that are kept runs
of the kinds MobileNet-like networks are made of, turned once into an operation table
(emu/executor/ethosu85.py: int64 rows, tensor boxes, stream checks, constants in
concatenated buffers) whose runs of consecutive rows go through one compiled call each.

What converts (each exactly as its kept run computes it; anything else stays the step's
closure, and breaks the run of rows): a DMA's kept copies; a convolution on the byte kernels
(the general one or the pointwise one; VNNI machines), on the int16-pair kernel where the CPU
has no byte kernel (issue 32 #3: int8 IFMs; Winograd F(2x2, 3x3) where conv_sums takes it), or
a depthwise convolution on the depthwise kernel, each with the fast output stage and 8-bit
tensors (an int8 IFM for depthwise; an int32 OFM too); an element-wise ADD/SUB of two 8-bit
tensors without broadcast on the fast add/sub body; since issue 32 #1/#3 the other element-wise
operations but DIV (8/32-bit operands, broadcast, scalar, unary; a LUT function reads the
device's LUT memory) on the general kernel, and a pooling without upscale on the pooling kernel
(OFMs of 1 or 4 bytes an element: the sizes the test networks have, so the equality tests cover
them). Tensors in memory are NHWC boxes (1 or 4 bytes an element) or NHCWB16 boxes (bytes)
stored as they are (no reverse or transpose); an OFM pushed into the chaining FIFO converts
with the next step popping it. An OFM of one element sets the result flag from the rows
(Table.run). The accounting of a replay is the block's (BlockReplay._materialize), so the rows
do none. Why: the closures cost ~2.4 ms of Python around ~0.9 ms of kernels per MobileNet v2
inference (design notes, issue 32 #1).
"""
from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

from ...emu.conv import ethosu85 as CE
from ...emu.conv import int_conv as IC
from ...emu.conv import winograd as WG
from ...emu.eltwise import ethosu85 as eltwise_k
from ...emu.executor import ethosu85 as X
from ...emu.numeric import ethosu85 as P
from ...emu.numeric.ethosu85_values import ofm_dtype
from ...emu.pool import ethosu85 as pool_k
from . import dma, kept, op_conv, op_pool

#: rows per compiled call: a halt request is seen between calls (a MobileNet v2 row takes
#: ~5 us on average, the largest ~80 us; each call costs ~3 us)
CHUNK_ROWS = 32

#: one step's rows: (row columns by index, boxes per tensor slot, stream checks, chaining:
#: {"push": (FIFO, values, signed)} for an OFM into the chaining FIFO, {"pops": [(column,
#: FIFO, values)]} for operands read from it)
Rows = list[tuple[dict[int, int], dict[int, list[tuple[Any, ...]]], list[tuple[Any, ...]],
                  dict[str, Any]]]


#: a push into the chaining FIFO in a run: (row, FIFO, chain offset, values, their type)
Push = tuple[int, int, int, int, "np.dtype[Any]"]


class _Pools:
    """The memories and constants the rows refer to, by index and offset."""

    def __init__(self, lut: np.ndarray | None = None) -> None:
        self.lut = lut  # the device's LUT memory (None: rows with a LUT function stay closures)
        self.mems: list[np.ndarray] = []
        self._mem_index: dict[int, int] = {}
        self.c64: list[np.ndarray] = []
        self.c32: list[np.ndarray] = []
        self.c8: list[np.ndarray] = []
        self.sizes = {"c64": 0, "c32": 0, "c8": 0}

    def place(self, view: np.ndarray) -> tuple[int, int] | None:
        """(memory index, byte offset) of ``view``'s first byte in the uint8 array it is a
        view of, or None where that is no writeable 1-D byte array holding the whole view."""
        root = view
        while isinstance(root.base, np.ndarray):
            root = root.base
        if root.dtype != np.uint8 or root.ndim != 1 or not root.flags.c_contiguous \
                or not root.flags.writeable:
            return None
        off = view.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        last = off + sum((n - 1) * st for n, st in zip(view.shape, view.strides)) \
            + view.itemsize
        if off < 0 or last > root.size or any(st < 0 for st in view.strides):
            return None
        k = self._mem_index.get(id(root))
        if k is None:
            k = self._mem_index[id(root)] = len(self.mems)
            self.mems.append(root)
        return k, off

    def const(self, pool: str, a: np.ndarray) -> int:
        """The offset of a copy of ``a`` (flattened) in the concatenated buffer ``pool``."""
        at = self.sizes[pool]
        getattr(self, pool).append(np.ascontiguousarray(a).ravel())
        self.sizes[pool] += a.size
        return at

    def buffer(self, pool: str, dtype: type) -> np.ndarray:
        parts = getattr(self, pool)
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(1, dtype)


def _boxes(pools: _Pools, views: tuple[Any, ...], wide: bool = False
           ) -> list[tuple[int, ...]] | None:
    """A tensor's box views (byte elements: [H, W, n] NHWC or [H, n/16, W, 16] NHCWB16
    bricks, in channel order; ``wide``: also NHWC views of 4-byte elements, whose
    boxes count bytes, n * size, as channels) as box rows (emu/executor: memory, offset, c0,
    n, sy, sx, sc)."""
    out: list[tuple[int, ...]] = []
    c0 = 0
    for v in views:
        size = v.itemsize
        if v.strides[-1] != size or (size != 1 and not (wide and size == 4 and v.ndim == 3)):
            return None
        at = pools.place(v)
        if at is None:
            return None
        if v.ndim == 3:
            n, sy, sx, sc = v.shape[2] * size, v.strides[0], v.strides[1], 16
        elif v.ndim == 4 and v.shape[3] == 16:
            n, sy, sc, sx = v.shape[1] * 16, v.strides[0], v.strides[1], v.strides[2]
        else:
            return None
        out.append((at[0], at[1], c0, n, sy, sx, sc))
        c0 += n
    return out


def _ofm(pools: _Pools, o: tuple[Any, ...], shape: tuple[int, ...], signed: bool,
         size: int = 1) -> tuple[dict[int, list[tuple[int, ...]]], dict[str, Any]] | None:
    """(boxes, chaining) of a kept OFM write of ``shape`` with ``size``-byte elements: box
    views in memory stored as they are (no reverse, no transpose), or a push into the chaining
    FIFO; None for anything else. (An OFM of one element sets the result flag: the rows do,
    emu/executor.)"""
    n = int(np.prod(shape))
    if o[0] is None:
        t = o[1].tensor
        return ({}, {"push": (t.region, n, signed, size)}) if t.storage == 2 else None
    if o[1].flips or tuple(o[1].perm) != (0, 1, 2) or o[0].views[0].itemsize != size:
        return None
    bs = _boxes(pools, o[0].views, wide=size > 1)
    if bs is None or sum(b[3] for b in bs) != shape[2] * size:
        return None
    return {X.K_OFM: bs}, {}


def _byte_launch(p: Any) -> Any:
    """The byte kernel's one launch a kept convolution holds (int_conv.ByteLaunch: its
    layout is the kept IFM's, the same on every run), or None."""
    launches = list(p.launches.values())
    if len(launches) != 1 or not isinstance(launches[0], IC.ByteLaunch):
        return None
    return launches[0]


def _conv_rows(pools: _Pools, step: functools.partial[Any]) -> Rows | None:
    d, r = step.args
    hit = d.kernels.get(r.kernel)
    if hit is None or r.ifm[0] is None:
        return None
    p = hit[1]
    H, W = p.flat or p.out_hw
    K = p.channels if p.depthwise else p.weights.k
    fast, dtype = p.terms[-1], np.dtype(p.dtype)
    if not fast or dtype.itemsize not in (1, 4) or (dtype.itemsize == 4 and dtype.kind != "i"):
        return None
    out = _ofm(pools, r.ofm, (H, W, K), dtype.kind == "i", dtype.itemsize)
    acc, bricked, raw_shape = r.ifm
    ifm = _boxes(pools, acc.views)
    if ifm is None or out is None:
        return None
    checks = []
    for a, held in r.streams:
        at = pools.place(a.views[0])
        if at is None or a.views[0].dtype != np.uint8 or a.views[0].ndim != 1:
            return None
        checks.append((at[0], at[1], len(held),
                       pools.const("c8", np.frombuffer(held, np.uint8))))
    k = p.terms[-2]
    row = {X.K_H: H, X.K_W: W, X.K_C: p.channels, X.K_K: K,
           X.K_ROWS: pools.const("c64", p.rows), X.K_COLS: pools.const("c64", p.cols),
           X.K_TERMS: pools.const("c64", k), X.K_TERMS_W: k.shape[1],
           X.K_OUT32: int(dtype.itemsize == 4),
           X.K_PAR_FINISH: int(CE.stage_parallel(H * W * K).threads > 1)}  # as _launch_stage
    if p.depthwise:
        if acc.views[0].dtype != np.int8 or raw_shape[2] < p.channels:
            return None
        ih, iw = min(p.in_hw[0], raw_shape[0]), min(p.in_hw[1], raw_shape[1])
        kh, kw = p.weights.shape[:2]
        row.update({X.K_KIND: X.DEPTHWISE, X.K_IN_H: ih, X.K_IN_W: iw, X.K_ZP: p.zero_point,
                    X.K_WEIGHTS: pools.const("c32", p.weights), X.K_KH: kh, X.K_KW: kw,
                    X.K_PT: p.pad[0], X.K_PL: p.pad[1], X.K_SY: p.stride[0],
                    X.K_SX: p.stride[1], X.K_DY: p.dilation[0], X.K_DX: p.dilation[1]})
    elif not X.BYTE_KERNELS:
        cv16 = _conv16_columns(pools, p, acc.views[0].dtype, raw_shape)
        if cv16 is None:
            return None
        row.update(cv16)
    elif (b := _byte_launch(p)) is not None:
        (off, zb, rows_read, top, dst_col), (quads, wsum) = b.args, b.mid
        ho, wob, q4, kh, kw, kn, sy, row_words, plane, row_off, col_off, hwc = b.tail
        h, w = raw_shape[:2]
        if not hwc or ho != H or p.flat is not None or b.c != p.channels \
                or raw_shape[2] < p.channels or (b.copy is not None and b.copy != (h, w, 4 * q4)) \
                or (b.copy is None and 4 * q4 != p.channels) or b.acc != (ho, wob, kn * 8):
            return None
        row.update({X.K_KIND: X.CONV, X.K_CV_H: h, X.K_CV_W: w, X.K_CV_Q4: q4, X.K_CV_OFF: off,
                    X.K_CV_ZB: zb, X.K_CV_ROWS: rows_read, X.K_CV_TOP: top,
                    X.K_CV_DST: pools.const("c64", dst_col), X.K_CV_DST_N: dst_col.size,
                    X.K_CV_W4: pools.const("c32", quads), X.K_CV_W4_N: quads.size,
                    X.K_CV_WSUM: pools.const("c64", wsum), X.K_CV_WSUM_N: wsum.size,
                    X.K_CV_WOB: wob, X.K_CV_KH: kh, X.K_CV_KW: kw, X.K_CV_KN: kn, X.K_CV_SY: sy,
                    X.K_CV_ROW_WORDS: row_words, X.K_CV_PLANE: plane,
                    X.K_CV_ROW_OFF: pools.const("c64", row_off),
                    X.K_CV_COL_OFF: pools.const("c64", col_off), X.K_CV_KP: kn * 8,
                    X.K_CV_X4: b.buf, X.K_PAR: int(IC.parallel(b.work).threads > 1)})
    else:
        launches = list(p.launches.values())
        if not launches or not all(isinstance(b, IC.PointwiseLaunch) for b in launches) \
                or tuple(raw_shape) != (H, W, p.channels):
            return None
        b = launches[0]
        if b.n != H * W or b.c != p.channels:
            return None
        row.update({X.K_KIND: X.POINTWISE, X.K_Q4: b.q4, X.K_KV: b.kv, X.K_MASK: int(b.mask),
                    X.K_COLUMNS: pools.const("c32", b.columns), X.K_COLUMNS_N: b.columns.size,
                    X.K_INIT: pools.const("c32", b.init)})
    return [(row, {X.K_IFM: ifm, **out[0]}, checks, out[1])]


def _conv16_columns(pools: _Pools, p: Any, dtype: np.dtype[Any], raw_shape: tuple[int, ...]
                    ) -> dict[int, int] | None:
    """A CONV16 row's columns: a general or pointwise convolution where the CPU has no byte
    kernel, as run_int_conv's conv_sums call runs it there (Winograd where
    int_conv.winograd_for says, :func:`_winograd_columns`; else the int16-pair kernel: its
    weight words, p.weights.words, packed when the layer was planned, into the table's c32; the
    geometry IC._geometry works out for the input as run_int_conv shapes it, a 1x1 layer's
    H*W pixels as one row where p.flat), or None: an IFM other than int8 (the ones the test
    networks have, so the equality tests cover what converts)."""
    c, w = p.channels, p.weights
    if dtype != np.int8 or raw_shape[2] < c or w.quads is not None:
        return None
    if p.flat is not None:  # run_int_conv's v[:H, :W] as one row of H*W pixels
        (h, wd), (vh, vw), tw = p.flat, (1, p.flat[0] * p.flat[1]), p.flat[1]
        if raw_shape[0] < h or raw_shape[1] < wd:
            return None
    else:
        (h, wd), (vh, vw) = raw_shape[:2], raw_shape[:2]
    g, plane, rows = IC._geometry((c, vh, vw), w, p.out_hw, p.in_hw, p.pad, p.stride,
                                  p.dilation)
    # the pointwise kernel wherever it applies (conv_sums takes it below SERIAL_WORK only,
    # where it would not run on one thread: rows are serial, and the sums are the same)
    pw = w.pairs is not None and IC.pixelwise((c, vh, vw), p.out_hw, p.in_hw, p.pad, p.stride)
    if not pw and p.flat is None:
        ww = IC.winograd_for(dtype, p.zero_point, w, p.out_hw, p.stride, p.dilation)
        if ww is not None:
            return _winograd_columns(pools, p, ww, (c, h, wd))
    words = w.pairs if pw else w.words
    return {X.K_KIND: X.CONV16, X.K_C16_PW: int(pw), X.K_CV_H: h, X.K_CV_W: wd,
            X.K_CV_ROWS: rows,
            X.K_CV_TOP: p.pad[0], X.K_CV_DST: pools.const("c64", g.dst_col),
            X.K_CV_DST_N: g.dst_col.size, X.K_CV_W4: pools.const("c32", words),
            X.K_CV_W4_N: words.size, X.K_CV_WOB: g.wob, X.K_CV_KH: w.kh, X.K_CV_KW: w.kw,
            X.K_CV_KN: w.kp // IC.KB, X.K_CV_SY: p.stride[0], X.K_CV_ROW_WORDS: g.c2 * plane,
            X.K_CV_PLANE: plane, X.K_CV_ROW_OFF: pools.const("c64", g.row_off),
            X.K_CV_COL_OFF: pools.const("c64", g.col_off), X.K_CV_KP: w.kp,
            X.K_CV_X4: g.hp * g.c2 * plane, X.K_C16_VH: vh, X.K_C16_VW: vw,
            X.K_C16_ZP: p.zero_point,
            X.K_C16_HO: p.out_hw[0], X.K_C16_C2: g.c2, X.K_C16_HP: g.hp,
            X.K_C16_TW: g.wob if p.flat is None else tw,
            # the parallel kernels where run_int16_launch takes them (Int16Launch.work)
            X.K_PAR: int(not pw and IC.parallel(IC.conv_work(p.out_hw, w, c)).threads > 1)}


def _winograd_columns(pools: _Pools, p: Any, ww: Any, shape: tuple[int, int, int]
                      ) -> dict[int, int]:
    """A CONV16 row's columns where int_conv.winograd_for says conv_sums runs Winograd
    F(2x2, 3x3) for the layer (no second rule): the launch conv_sums makes for the input
    [C, H, W] run_int_conv passes (winograd.winograd_launch, hwc sums), its arguments in c64
    (X.K_C16_WINO), its U words in c32; its work array [2 Ty, 2 Tx, K rounded up to 16] is the
    row's ``acc``, whose first H rows the output stage reads as [H, 2 Tx, K16], as
    run_int_conv's stage reads conv_sums' padded array."""
    b = WG.winograd_launch(shape, ww, p.out_hw, zero_point=p.zero_point, in_hw=p.in_hw,
                           pad=p.pad, hwc=True)
    args = np.array([*b.input, *b.p, *b.gemm], np.int64)
    assert args.size == X.WINO_ARGS
    rows, tw, kp = b.acc
    _, h, wd = shape
    return {X.K_KIND: X.CONV16, X.K_C16_WINO: pools.const("c64", args) + 1, X.K_CV_H: h,
            X.K_CV_W: wd, X.K_C16_VH: h, X.K_C16_VW: wd, X.K_CV_KH: 3, X.K_CV_KW: 3,
            X.K_CV_W4: pools.const("c32", b.words), X.K_CV_W4_N: b.words.size,
            X.K_C16_HO: rows, X.K_CV_WOB: tw, X.K_C16_TW: tw, X.K_CV_KP: kp,
            X.K_CV_X4: int(np.prod(b.p)) // 2,  # (int16 channels, rounded up to 16)
            # the parallel GEMM where WinogradLaunch.run takes it (its work)
            X.K_PAR: int(IC.parallel(b.work).threads > 1)}


def _values_rows(pools: _Pools, step: functools.partial[Any]) -> Rows | None:
    (r,) = step.args
    f = r.values
    if isinstance(f, functools.partial) and f.func is op_pool._pool_values:
        return _pool_rows(pools, r, f.args[0])
    if not isinstance(f, functools.partial) or f.func is not eltwise_k.run_elementwise:
        return None
    plan = f.args[0]
    ew, cfg = plan.ew, plan.cfg
    fast = len(ew) == 14 and len(cfg) == 15 and eltwise_k.takes_addsub_fast(ew, cfg)
    if not fast or np.dtype(plan.dtype).itemsize != 1 \
            or any(not isinstance(o, tuple) or o[1:] != (8, o[2], 0) for o in plan.operands):
        return _eltwise_rows(pools, r, plan, fast)
    H, W, D = plan.shape
    out = _ofm(pools, r.ofm, plan.shape, np.dtype(plan.dtype).kind == "i")
    if out is None:
        return None
    row = {X.K_KIND: X.ADDSUB, X.K_H: H, X.K_W: W, X.K_C: D, X.K_K: D,
           X.K_SUB: int(ew[0] == eltwise_k.EW_SUB), X.K_EW: pools.const("c64", ew),
           X.K_CFG: pools.const("c64", cfg)}
    boxes, chain = dict(out[0]), dict(out[1])
    pops = []
    for slot, zp_col, signed_col, fifo_col, read, operand in (
            (X.K_IFM, X.K_ZP1, X.K_SIGNED1, X.K_CHAIN_IN1, r.reads[0], plan.operands[0]),
            (X.K_IFM2, X.K_ZP2, X.K_SIGNED2, X.K_CHAIN_IN2, r.reads[1], plan.operands[1])):
        if read is None or not isinstance(operand, tuple):
            return None
        zp, bits, signed, bc = operand
        if bits != 8 or bc != 0 or tuple(read[2]) != (H, W, D):
            return None
        row[zp_col], row[signed_col] = zp, int(signed)
        if read[0] is None:  # the chaining FIFO
            pops.append((fifo_col, read[1], H * W * D, 1))
            continue
        bs = _boxes(pools, read[0].views)
        if bs is None:
            return None
        boxes[slot] = bs
    if pops:
        chain["pops"] = pops
    return [(row, boxes, [], chain)]


def _eltwise_rows(pools: _Pools, r: Any, plan: Any, fast: bool) -> Rows | None:
    """An element-wise operation that is not an ADDSUB row's as one ELEMENTWISE row: operands
    of 8 or 32 bits (NHWC boxes for 32, also NHCWB16 for 8), broadcast, scalar or none,
    from memory or the chaining FIFO; the general kernel (_ew_kernel; a LUT function reads
    the device's LUT memory, live, as the closure's mem.lut is), or an add/sub that
    _addsub_fast computes on it, as eltwise._run takes it (``fast``, K_EW_FAST);
    OFM of 1 or 4 bytes per element."""
    ew, cfg, dtype = plan.ew, plan.cfg, np.dtype(plan.dtype)
    lut = (0, 0) if cfg[P.C_FUNC] == P.LUT_NONE or pools.lut is None else pools.place(pools.lut)
    if len(ew) != 14 or len(cfg) != 15 or lut is None \
            or dtype.itemsize not in (1, 4) or ew[0] == eltwise_k.EW_DIV:
        return None
    H, W, D = plan.shape
    out = _ofm(pools, r.ofm, plan.shape, dtype.kind == "i", dtype.itemsize)
    if out is None:
        return None
    row = {X.K_KIND: X.ELEMENTWISE, X.K_H: H, X.K_W: W, X.K_C: D, X.K_K: D,
           X.K_OE: dtype.itemsize, X.K_LUT_MEM: lut[0], X.K_LUT_OFF: lut[1],
           X.K_EW: pools.const("c64", ew), X.K_EW_FAST: int(fast),
           X.K_SUB: int(ew[0] == eltwise_k.EW_SUB), X.K_CFG: pools.const("c64", cfg)}
    boxes, chain = dict(out[0]), dict(out[1])
    pops = []
    for q, slot, read, operand in ((0, X.K_IFM, r.reads[0], plan.operands[0]),
                                   (1, X.K_IFM2, r.reads[1], plan.operands[1])):
        if operand is None or isinstance(operand, int):
            if read is not None:
                return None
            row[X.K_SRC1 + q] = X.OPERAND_NONE if operand is None else X.OPERAND_SCALAR
            row[X.K_SCALAR1 + q] = operand or 0
            continue
        zp, bits, signed, bc = operand
        shape = eltwise_k.operand_shape(bc, plan.shape)
        if read is None or bits not in (8, 32) or bc & ~7 or tuple(read[2]) != shape:
            return None
        row.update({X.K_SRC1 + q: X.OPERAND_TENSOR, X.K_ZP1 + q: zp,
                    X.K_SIGNED1 + q: int(signed), X.K_BITS1 + q: bits, X.K_BC1 + q: bc})
        if read[0] is None:  # the chaining FIFO (no broadcast from it [U85-TRM: §3.6.4])
            pops.append((X.K_CHAIN_IN1 + q, read[1], H * W * D, bits // 8))
            continue
        bs = _boxes(pools, read[0].views, wide=True)
        if bs is None or sum(b[3] for b in bs) != shape[2] * bits // 8 \
                or read[0].views[0].itemsize != bits // 8:
            return None
        boxes[slot] = bs
    if pops:
        chain["pops"] = pops
    return [(row, boxes, [], chain)]


def _pool_rows(pools: _Pools, r: Any, d: Any) -> Rows | None:
    """A kept pooling (op_pool: no accumulator input or output, no scale stream) as one POOL
    row: its IFM of 8 or 32 bits read as _pool_one reads it where no upscale or fitting
    applies (the read's extent is the kernel's input: [ih, iw, D], reduce_sum [H, W, C]),
    _pool_kernel with no bias, scales or shifts (per_channel's zeros), the OFM as the OFM
    type stores it."""
    t, kcfg, dtype = d.ifm, d.kcfg, np.dtype(ofm_dtype(d.kcfg))
    lut = (0, 0) if kcfg[P.C_FUNC] == P.LUT_NONE or pools.lut is None else pools.place(pools.lut)
    if t is None or d.mode == pool_k.POOL_NONE or d.upscale != 0 or d.scaled or lut is None \
            or len(kcfg) != 15 or dtype.itemsize not in (1, 4) or t.bits not in (8, 32):
        return None
    (H, W, D), (kh, kw), (sy, sx), (pt, pl, _, _) = d.ofm, d.kernel, d.stride, d.pad
    ih, iw, ic = d.ifm_shape  # (pool_decode derived it: no upscale, [ih, iw, D] or [H, W, C])
    read, out = r.reads[0], _ofm(pools, r.ofm, d.ofm, dtype.kind == "i", dtype.itemsize)
    if out is None or read is None or read[0] is None or tuple(read[2]) != (ih, iw, ic) \
            or read[0].views[0].itemsize != t.bits // 8:
        return None
    bs = _boxes(pools, read[0].views, wide=True)
    if bs is None or sum(b[3] for b in bs) != ic * t.bits // 8:
        return None
    zp, ok = P.ifm_zero_point(d.zp, t.bits, t.signed)
    if not ok:  # (the closure's check_diag reports it)
        return None
    geo = np.array([H, W, sy, sx, kh, kw, pt, pl, d.mode, 0, D], np.int64)
    row = {X.K_KIND: X.POOL, X.K_H: H, X.K_W: W, X.K_C: ic, X.K_K: D, X.K_OE: dtype.itemsize,
           X.K_ZP1: zp, X.K_SIGNED1: int(t.signed), X.K_BITS1: t.bits,
           X.K_CFG: pools.const("c64", kcfg), X.K_GEO: pools.const("c64", geo),
           X.K_ZEROS: pools.const("c64", np.zeros(D, np.int64)), X.K_PIN_H: ih,
           X.K_PIN_W: iw, X.K_LUT_MEM: lut[0], X.K_LUT_OFF: lut[1]}
    return [(row, {X.K_IFM: bs, **out[0]}, [], out[1])]


def _dma_rows(pools: _Pools, step: functools.partial[Any]) -> Rows | None:
    rows: Rows = []
    for src, dst, overlap in step.keywords["copies"]:
        s, d = src.views[0], dst.views[0]
        if s.dtype != np.uint8 or d.dtype != np.uint8 or s.ndim != 1 or d.ndim != 1 \
                or s.strides != (1,) or d.strides != (1,) or s.size != d.size:
            return None
        a, b = pools.place(s), pools.place(d)
        if a is None or b is None:
            return None
        rows.append(({X.K_KIND: X.COPY, X.K_SRC_MEM: a[0], X.K_SRC_OFF: a[1],
                      X.K_DST_MEM: b[0], X.K_DST_OFF: b[1], X.K_BYTES: s.size,
                      X.K_OVERLAP: overlap}, {}, [], {}))
    return rows


def step_rows(pools: _Pools, step: Any) -> Rows | None:
    """The rows of one block step, or None where it stays its closure."""
    if not isinstance(step, functools.partial) or step.keywords.get("account", True):
        return None
    if step.func is op_conv._run_kept_conv:
        return _conv_rows(pools, step)
    if step.func is kept.run_values:
        return _values_rows(pools, step)
    if step.func is dma.copy_kept:
        return _dma_rows(pools, step)
    return None


def _paired(got: list[Rows | None], steps: list[Any], no_data: Any) -> None:
    """Keep a push into the chaining FIFO only with the next data step popping exactly those
    values, and that pop only with it (``got`` edited in place): the pair then passes the
    values through the executor's ``chain`` buffer, the FIFO holding them as the closures
    leave it (Table.run). Anything else through the FIFO stays closures."""
    pending: tuple[int, int, int, int] | None = None  # (step, FIFO, values, bytes each)
    for k, step in enumerate(steps):
        if step is no_data:
            continue
        rows = got[k]
        chain = rows[0][3] if rows and len(rows) == 1 else {}
        pops = chain.get("pops", [])
        if pending is not None:
            ok = len(pops) == 1 and pops[0][1:] == pending[1:]
            if not ok:
                got[pending[0]] = None
                if pops:
                    got[k] = None
            pending = None
        elif pops:
            got[k] = None
        if got[k] is not None and "push" in chain:
            fifo, n, _, size = chain["push"]
            pending = (k, fifo, n, size)
    if pending is not None:
        got[pending[0]] = None


class Table:
    """A block's operation table: the rows of its convertible steps, and its runs: consecutive
    steps each convertible or without data, from a convertible one to the last such."""

    def __init__(self, steps: list[Any], no_data: Any, lut: np.ndarray | None = None) -> None:
        self.steps = list(steps)  # as converted: the table applies while the block has these
        pools = _Pools(lut)
        rows: list[np.ndarray] = []
        boxes: list[tuple[int, ...]] = []
        checks: list[tuple[int, ...]] = []
        got = [None if s is no_data else step_rows(pools, s) for s in self.steps]
        _paired(got, self.steps, no_data)
        #: start step -> (end step, first row, end row, pushes)
        self.runs: dict[int, tuple[int, int, int, list[Push]]] = {}
        chain_size = 0
        start = None
        last = r0 = 0
        pushes: list[Push] = []
        at: dict[int, int] = {}  # the FIFO's pending push: its chain offset
        for k, step in enumerate(self.steps + [None]):
            got_k = got[k] if k < len(got) else None
            if got_k:
                if start is None:
                    start, r0, pushes = k, len(rows), []
                last = k
                for cols, bx, ck, chain in got_k:
                    row = np.zeros(X.COLUMNS, np.int64)
                    row[X.K_STEP] = k
                    for c, v in cols.items():
                        row[c] = v
                    for slot, bs in bx.items():
                        row[slot], row[slot + 1] = len(boxes), len(bs)
                        boxes.extend(bs)
                    row[X.K_CHECK], row[X.K_CHECK_N] = len(checks), len(ck)
                    checks.extend(ck)
                    for col, fifo, *_ in chain.get("pops", []):
                        row[col] = at.pop(fifo) + 1
                    if "push" in chain:
                        fifo, n, signed, size = chain["push"]
                        at[fifo] = chain_size
                        row[X.K_CHAIN_OUT] = chain_size + 1
                        pushes.append((len(rows), fifo, chain_size, n,
                                       np.dtype(f"{'i' if signed else 'u'}{size}")))
                        chain_size += n * size
                    rows.append(row)
            elif step is not no_data and start is not None:
                self.runs[start] = (last + 1, r0, len(rows), pushes)
                start = None
        self.rows = len(rows)
        self.ops = np.array(rows, np.int64).reshape(-1, X.COLUMNS)
        self.boxes = np.array(boxes, np.int64).reshape(-1, X.BOX_COLUMNS)
        self.checks = np.array(checks, np.int64).reshape(-1, X.CHECK_COLUMNS)
        self.mems = X.memories(pools.mems)
        if self.mems is None:  # more memories than a table refers to: no rows
            self.runs.clear()
        self.c64w = pools.buffer("c64", np.int64)
        self.c64 = X.read_only(self.c64w)
        self.c32 = pools.buffer("c32", np.int32)
        self.c8 = pools.buffer("c8", np.uint8)
        self.chain = np.zeros(max(chain_size, 1), np.uint8)
        self.rows_run = 0  # by the last run
        self._single: dict[int, tuple[int, int, Any, list[Any]]] | None = None  # _step_rows
        self._scratch()

    def _scratch(self) -> None:
        """Work arrays as large as the largest row needs."""
        o = self.ops
        hw = o[:, X.K_H] * o[:, X.K_W]
        # (operands and OFM up to 4 bytes an element)
        ew = (o[:, X.K_KIND] == X.ELEMENTWISE) | (o[:, X.K_KIND] == X.POOL)
        pin = np.where(o[:, X.K_KIND] == X.POOL, o[:, X.K_PIN_H] * o[:, X.K_PIN_W] * o[:, X.K_C],
                       0)
        x = np.concatenate([[16], hw * 4 * o[:, X.K_Q4], np.where(ew, hw * o[:, X.K_K] * 4, 0),
                            pin * 4, o[:, X.K_IN_H] * o[:, X.K_IN_W]
                            * o[:, X.K_C], hw * o[:, X.K_K], o[:, X.K_BYTES],
                            o[:, X.K_CV_H] * o[:, X.K_CV_W] * 4 * o[:, X.K_CV_Q4],
                            o[:, X.K_CV_H] * o[:, X.K_CV_W] * o[:, X.K_C]])
        words = int(x.max()) // 4 + 1
        buf = np.zeros(words, np.int32)
        self.xw = buf.view(np.uint8)
        self.x32 = X.read_only(buf)
        self.x8 = X.read_only(buf.view(np.int8))
        self.acc = np.zeros(int(np.concatenate([[16], hw * o[:, X.K_KV] * 16, hw * o[:, X.K_C],
                                                o[:, X.K_H] * o[:, X.K_CV_WOB] * o[:, X.K_CV_KP],
                                                o[:, X.K_C16_HO] * o[:, X.K_CV_WOB]
                                                * o[:, X.K_CV_KP]]).max()), np.int32)
        self.x4 = np.zeros(int(np.concatenate([[16], o[:, X.K_CV_X4]]).max()), np.int32)
        conv = np.isin(o[:, X.K_KIND], (X.POINTWISE, X.DEPTHWISE, X.CONV, X.CONV16))
        size = np.where(ew, o[:, X.K_OE], np.where(conv & (o[:, X.K_OUT32] != 0), 4, 1))
        out = np.zeros(int(np.concatenate([[16], hw * o[:, X.K_K] * size]).max()) // 4 + 1,
                       np.int32)
        self.out8, self.outu = out.view(np.int8), out.view(np.uint8)
        n = int(np.concatenate([[1], pin, np.where((o[:, X.K_KIND] == X.ADDSUB) | ew,
                                                   hw * o[:, X.K_K], 0)]).max())
        self.ea, self.eb, self.eo = (np.zeros(n, np.int64) for _ in range(3))
        self.flag = np.zeros(1, np.int64)
        big = bool(o[:, X.K_PAR].any() or o[:, X.K_PAR_FINISH].any())
        # the kernels its rows call (parallel twins only where a row is big, issue 31 #1;
        # Winograd's only where a CONV16 row runs it)
        self.fps = X.addresses(kinds=np.unique(o[:, X.K_KIND]), parallel=big,
                               winograd=bool(o[:, X.K_C16_WINO].any()))
        # held around each run of rows where some row launches a parallel kernel, as
        # int_conv's launches hold it (PARALLEL and this thread's numba thread count)
        self.par = IC.parallel(IC.SERIAL_WORK if big else 0)

    def run(self, start: int, port: Any, halt: threading.Event) -> int | None:
        """The run of rows from step ``start``, :data:`CHUNK_ROWS` rows (whole steps) per
        compiled call, a halt request seen between calls: the step it stopped at (the run's
        end: all ran; else a halt, or a step whose streams changed, nothing of it done), or
        None where it does not apply now (a chaining FIFO it pushes into holds values: the
        closures then run). The FIFOs it pushed into are left as the closures leave them:
        the last push's values, all read; the result flag as the last 1x1x1 OFM set it (the
        port's set_result_flag)."""
        npu = port.npu
        end, r0, r1, pushes = self.runs[start]
        for fifo in {p[1] for p in pushes}:
            buf = npu.fifo.get(fifo)
            if buf is not None and buf[1] != len(buf[0]):
                return None
        r = r0
        self.flag[0] = -1
        while r < r1:
            upto = self._chunk_end(r, r1)
            with self.par:
                done = int(X.run_rows(self.ops, r, upto, self.boxes, self.checks, self.mems,
                                      self.c64, self.c64w, self.c32, self.c8, self.xw,
                                      self.x32, self.x8, self.acc, self.out8, self.outu,
                                      self.ea, self.eb, self.eo, self.chain, self.x4,
                                      self.flag, self.fps))
            r = done
            if done < upto or halt.is_set():
                break
        self.rows_run = r - r0
        if self.flag[0] >= 0:
            port.set_result_flag(int(self.flag[0]))
        left: set[int] = set()  # only each FIFO's last push stays (a MobileNet run: 11 pushes)
        for row, fifo, at, n, dtype in reversed(pushes):
            if row < r and fifo not in left:
                left.add(fifo)
                values = self.chain[at:at + n * dtype.itemsize].view(dtype)
                npu.fifo[fifo] = [values.astype(np.int64), n]
        return end if r == r1 else int(self.ops[r, X.K_STEP])

    def run_step(self, k: int, port: Any) -> bool:
        """Step ``k``'s rows alone (a unit run one by one, BlockReplay.step): True when they
        ran; False, nothing done, where the step has no rows, its streams changed (a step's
        later rows have no stream checks: only its first row can stop it), or the chaining
        FIFO does not hold what its pair left there. A step popping the FIFO takes the
        values the FIFO holds (pushed by its pair's step, as rows or not) into the ``chain``
        buffer, and leaves them read; a step pushing leaves its values unread, as the
        per-operation path's push and pop leave the FIFO (NpuInternal.push/pop)."""
        found = self._step_rows().get(k)
        if found is None:
            return False
        r0, r1, push, pops = found
        fifos = port.npu.fifo
        for fifo, _, n, _ in pops:  # exactly the pushed values, none read yet
            buf = fifos.get(fifo)
            if buf is None or buf[1] != 0 or len(buf[0]) != n:
                return False
        if push is not None:  # (a push onto unread values concatenates: the closures do it)
            buf = fifos.get(push[0])
            if buf is not None and buf[1] != len(buf[0]):
                return False
        for fifo, at, n, dtype in pops:
            self.chain[at:at + n * dtype.itemsize] = fifos[fifo][0].astype(dtype).view(np.uint8)
        self.flag[0] = -1
        with self.par:
            done = int(X.run_rows(self.ops, r0, r1, self.boxes, self.checks, self.mems,
                                  self.c64, self.c64w, self.c32, self.c8, self.xw, self.x32,
                                  self.x8, self.acc, self.out8, self.outu, self.ea, self.eb,
                                  self.eo, self.chain, self.x4, self.flag, self.fps))
        if done != r1:
            return False
        if self.flag[0] >= 0:
            port.set_result_flag(int(self.flag[0]))
        for fifo, _, n, _ in pops:
            fifos[fifo][1] = n
        if push is not None:
            fifo, at, n, dtype = push
            fifos[fifo] = [self.chain[at:at + n * dtype.itemsize].view(dtype).astype(np.int64),
                           0]
        return True

    def _step_rows(self) -> dict[int, tuple[int, int, Any, list[Any]]]:
        """Step -> (its rows [r0, r1), its push into the chaining FIFO or None, its pops), each
        push or pop as (FIFO, chain offset, values, their type), for the steps :meth:`run_step`
        runs (made once)."""
        if self._single is None:
            o = self._single = {}
            if self.runs:  # (none: the table's memories could not be placed)
                by_row = {p[0]: p[1:] for run in self.runs.values() for p in run[3]}
                by_at = {p[1]: p for p in by_row.values()}
                steps = self.ops[:, X.K_STEP]
                for k in np.unique(steps).tolist():
                    r0, r1 = np.searchsorted(steps, [k, k + 1]).tolist()
                    rows = self.ops[r0:r1]
                    if rows[1:, X.K_CHECK_N].any():
                        continue
                    pops = [by_at.get(int(at) - 1) for at in
                            rows[:, X.K_CHAIN_IN1:X.K_CHAIN_IN2 + 1].ravel() if at > 0]
                    chained = rows[:, X.K_CHAIN_OUT].any() or pops
                    if chained and (r1 - r0 != 1 or None in pops
                                    or (rows[0, X.K_CHAIN_OUT] and r0 not in by_row)):
                        continue
                    o[k] = (r0, r1, by_row.get(r0), pops)
        return self._single

    def _chunk_end(self, r: int, r1: int) -> int:
        """The end of the chunk of rows from ``r``: CHUNK_ROWS rows, then on to the next
        step's first row (a step's rows run in one call)."""
        e = min(r + CHUNK_ROWS, r1)
        steps = self.ops[:, X.K_STEP]
        while e < r1 and steps[e] == steps[e - 1]:
            e += 1
        return e
