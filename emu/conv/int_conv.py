"""Exact integer 2-D convolution sums for int16-range operands, shared by the MAX78000,
Ethos-U85 and NE16 datapaths.

Why a kernel of our own: the accelerators multiply small integers and accumulate exactly. A
float32 BLAS GEMM is exact only while partial sums stay below 2**24 and reached ~70 GMAC/s on
the 2-core machine. Two integer kernels, chosen per call by :func:`conv_sums`:

* the byte kernel (:func:`_vnni_conv`), where the CPU has AVX-512 VNNI (``emu/conv/vnni.py``),
  the weights fit int8 and the input is int8 or uint8: ``vpdpbusd`` multiplies unsigned input
  bytes by signed weight bytes, 64 multiply-adds per instruction (~380 GMAC/s on the 64->64
  3x3 layer, 4x torch's float32 conv2d). Signed or zero-point-shifted input becomes unsigned by
  an offset (``v + off`` with ``off`` 128 for int8, 0 for uint8; padding holds
  ``zero_point + off``), and the accumulators start at ``-(zero_point + off) * sum(w[k])``, so
  the sums are those of ``(v - zero_point) * w``; 1x1 layers with stride 1, no padding and
  channels-last sums run its pointwise form (:func:`_pointwise8`: one pixel's input word
  broadcast against 16 output channels' weights, so neither input packing nor transpose);
* the int16-pair kernel (:func:`_conv_blocks`, ``vpmaddwd`` through ``emu/conv/simd.py``, plain
  LLVM vector IR: AVX2 where present, ordinary vector code elsewhere) for everything else
  (int16 data, int9 Ethos-U85 weights, CPUs without VNNI); hwc 1x1 sums where every output
  pixel reads its own input pixel run its pointwise form (:func:`_pointwise16`, as the byte
  kernel has :func:`_pointwise8`).

Both compute every sum exactly modulo 2**32 (int32 accumulators that wrap): vpdpbusd adds a
lane's four products (together below 2**17 in magnitude) with wrap-around, vpmaddwd's pair sums
cannot overflow (callers keep one operand above -32768), and the offset correction is an
identity modulo 2**32. So the two kernels agree bit for bit, and a sum is exact wherever the
true sum fits int32; callers use them only there, or want the wrap (MAX78000: |data| <= 128,
|weight| <= 128, at most 1024 x 9 products per output, so below 2**28; Ethos-U85: checked by
:func:`fits_int32`, wider sums keep the exact float GEMM; NE16: its accumulators are int32 and
wrap).

Layouts (chosen so the innermost loop reads contiguous memory):
* input, packed by :func:`_pack_input`: per padded row, per channel pair, per column phase
  (column ``c`` of the padded row lies in phase ``c % stride_x`` at position ``c // stride_x``,
  so the inputs of 8 consecutive outputs for one kernel column are 8 consecutive words with any
  stride), one int32 word per position holding channels (2p, 2p+1);
* weights, packed by :func:`pack_weights`: ``[K rounded up to 4, kh, kw, channel pairs]`` words;
  the pointwise form's input (:func:`_pack_pixels`): NHWC pixels of int16 pair words, its
  weights ``PackedWeights.pairs``: ``[channel pairs, K rounded up to 8]`` words;
* the byte kernel's input, packed by :func:`_pack_input8`, and weights (``PackedWeights.quads``):
  the same with one word per 4 channels (4 bytes), ``K`` rounded up to 8; the pointwise kernel
  reads NHWC words as they are and weights per input word (``PackedWeights.columns``), ``K``
  rounded up to 16;
* sums: ``[K rounded up to 4 (8), Ho, Wo rounded up to 16]`` int32 (or ``[Ho, Wo rounded up, K
  rounded up]`` for NHWC callers); callers get the ``[K, Ho, Wo]`` (``[Ho, Wo, K]``) view.

Work arrays are reused per thread (:func:`emu.scratch.scratch`): a result is valid until the
same thread's next call.
"""
from __future__ import annotations

import functools
import importlib
import math
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numba
import numpy as np
from numba import prange

from ..jit import njit
from ..ranged import call_ranged, ranged, ranged_wrapper
from ..scratch import scratch
from .simd import vbcast, vload, vmadd, vstore, vstore4, vstore_t4, vzero
from .vnni import (
    HAVE_VNNI,
    zadd,
    zbroadcast,
    zdot,
    zdotv,
    zload,
    zmul,
    zstore,
    zstore_t8,
    zsub,
)

if TYPE_CHECKING:  # annotations only: kernel_plan imports this module's VNNI probe
    from ..kernel_plan import Entry
    from .winograd import WinogradWeights  # it imports this module

KB = 4   # output channels per block (4 x 2 accumulator registers)
XB = 16  # output columns per block (two 8-lane vectors)
KB8 = 8  # output channels per block of the byte kernel (8 x one 16-lane accumulator register)
KV = 16  # output channels per register of the pointwise kernel (16 int32 lanes)
KV8 = 8  # output channels per register of the int16-pair pointwise kernel (8 int32 lanes)

#: numba's parallel kernels may not be entered by two threads at once under every threading
#: layer (workqueue aborts); a device's run thread and a test's thread could do that
PARALLEL = threading.Lock()

#: launches with less work than this (multiply-adds, or the equivalent) run on one thread: at
#: 2^22 the MNIST-shaped MAX78000 network lost ~15 % on a quiet machine (0.31 -> 0.36 ms), at
#: 2^20 MobileNet v2's small operations still run serially (40 ms either way)
SERIAL_WORK = 1 << 20


class parallel:
    """``with parallel(work):`` holds PARALLEL around a launch of numba parallel kernels, on one
    thread when ``work`` is below SERIAL_WORK. A launch hands its iterations to every thread and
    waits for the slowest: for a small tensor that costs more than the work, and far more when
    another process holds a core, since a descheduled worker holds up the whole barrier
    (MobileNet v2 0.35 at 96x96, 227 operations of at most ~1 M MACs each: 0.6-1 s per
    inference on a loaded 2-core machine with 2 threads, 37 ms with 1). A class rather than a
    generator: it is entered for every layer (~1 us instead of ~4). Every launch of the
    project's parallel kernels goes through it, so the calling thread's numba thread count is
    set only when it must change (numba keeps it per thread; 1 us per set_num_threads call).
    A launch on one thread runs the serial twins, which have no parfor: it takes neither the
    lock nor a thread count, so a run whose launches are all small (the bundled demos) never
    starts numba's thread pool (15-60 ms and an import of multiprocessing, issue 31 #5)."""

    __slots__ = ("threads",)
    _local = threading.local()

    def __init__(self, work: int) -> None:
        self.threads = 1 if work < SERIAL_WORK else numba.config.NUMBA_NUM_THREADS

    def kernel(self, twin: Twin):
        """The version of a kernel to launch: the parallel one only when it runs on more than
        one thread."""
        return twin.serial if self.threads == 1 else twin.parallel

    def __enter__(self) -> parallel:
        if self.threads == 1:
            return self
        PARALLEL.acquire()
        local = parallel._local
        if getattr(local, "threads", None) != self.threads:
            try:
                numba.set_num_threads(self.threads)
            except BaseException:
                PARALLEL.release()
                raise
            local.threads = self.threads
        return self

    def __exit__(self, *exc: object) -> None:
        if self.threads != 1:
            PARALLEL.release()


def parallel_for_elements(n: int, threshold: int) -> parallel:
    """:class:`parallel` for a pass over ``n`` elements that pays on more than one thread from
    ``threshold`` elements on: its work in SERIAL_WORK's units (the Ethos-U85 output stage's
    STAGE_PARALLEL, NVDLA SDP's PARALLEL_ELEMENTS)."""
    return parallel(n * SERIAL_WORK // threshold)


def launch_rows(body, wrapper, args: tuple, rows: int, elements: int, threshold: int):
    """A pass of ``elements`` elements over ``rows`` rows: ``body`` (an emu/ranged.py kernel
    over rows, taking ``args``, its wrapper's part count, then the row range) over every row on
    one thread, or from ``threshold`` elements on (:func:`parallel_for_elements`) its thin
    ``parallel=True`` ``wrapper`` with a part per thread of the launch; what the call returns.
    The one launch of NVDLA's post_process and NE16's normquant."""
    par = parallel_for_elements(elements, threshold)
    if par.threads == 1:
        return body(*args, 1, 0, rows)
    with par:
        return wrapper(*args, par.threads)


class Twin(NamedTuple):
    """A ``parallel=True`` kernel and its serial twin, launched by :meth:`parallel.kernel` for
    work below SERIAL_WORK; both thin wrappers of one serial ``body`` over a range of the
    loop (emu/ranged.py), which the serial twin calls once over the whole loop and the
    parallel one from a ``prange`` over at most :data:`CHUNKS` parts.

    Why: numba's parfor passes double a kernel's compile time (the byte kernel: 1.5 s against
    0.66 s; Ethos-U85's output stage: 0.9 s against 0.38 s per OFM type), paid on a first run.
    The bundled demos' layers are all below SERIAL_WORK, so their first run compiles only
    serial versions; a program with a larger layer compiles the parallel one when it first
    runs one (`accelstub compile` compiles both for the demos' types, stub/precompile.py).
    With the body apart, the parallel wrapper's parfor is a few lines: ~0.3 s instead of
    ~1.3 s for the output stage (design notes, "Parallel twins that compile cheaply")."""
    parallel: object
    serial: object
    body: object = None


#: the parts a parallel twin's ``prange`` splits its loop into (fewer where the loop has
#: fewer iterations): numba hands each thread an equal run of them, so up to 16 threads get
#: work. Each part is a call of the body (~80 ns of arguments and set-up): with 64 parts the
#: 60->60 16x16 byte convolution on 2 threads took 43-44 us against 41.5 with the old parfor,
#: with 16 parts 41.7 (thread counts that numba cannot read in a cached kernel)
CHUNKS = 16


#: every Twin, for `accelstub compile`
TWINS: list[Twin] = []


def parallel_twin_plan() -> list[Entry]:
    """Each twin's parallel kernel for every argument type its serial one has in this process
    (loaded or compiled), as emu/kernel_plan.py entries: `accelstub compile` runs the demos,
    whose launches are all serial, then compiles these (in two processes, kernel_plan), so
    that a larger program's first run finds both in the cache. None where numba has one
    thread (every launch is serial there)."""
    if numba.config.NUMBA_NUM_THREADS == 1:
        return []
    return [(t.parallel.py_func.__module__, t.parallel.py_func.__name__, str(tuple(sig)), 1.0,
             "") for t in TWINS for sig in t.serial.signatures]


def parallel_twins_of(plan: Sequence[Entry]) -> list[Entry]:
    """The parallel kernel of each serial twin a kernel plan names, for the same argument types
    and machines, as plan entries: known before anything is compiled (parallel_twin_plan asks
    the process), so `accelstub compile` can queue them beside a device's plan. None where
    numba has one thread."""
    if numba.config.NUMBA_NUM_THREADS == 1:
        return []
    for module in {e[0] for e in plan}:  # a module's twins are made as it is imported
        importlib.import_module(module)
    parallel = {(t.serial.py_func.__module__, t.serial.py_func.__name__): t.parallel.py_func
                for t in TWINS}
    return [(m, parallel[m, n].__name__, sig, 1.0, needs) for m, n, sig, _, needs in plan
            if (m, n) in parallel]


def twin(parallel_kernel, serial_kernel, body) -> Twin:
    """The :class:`Twin` of a ``parallel=True`` wrapper and its serial twin ``<name>_serial``
    (numba files its disk cache by module, name and argument types, not by the parallel
    option, so under one name the two would load each other's code), both
    emu/ranged.py ``ranged_wrapper``s of ``body``; recorded in :data:`TWINS`."""
    t = Twin(parallel_kernel, serial_kernel, body)
    TWINS.append(t)
    return t


class PackedWeights(NamedTuple):
    words: np.ndarray   # int32 [kp * kh * kw * c2]: int16 pairs
    k: int              # output channels
    c: int              # input channels
    kh: int
    kw: int
    quads: np.ndarray | None = None  # int32 [kp8 * kh * kw * q4]: int8 quads (byte kernel)
    wsum: np.ndarray | None = None   # int64 [kp8]: sum of each output channel's weights
    columns: np.ndarray | None = None  # int32 [q4 * kv16]: 1x1 quads, quad-major (pointwise)
    pairs: np.ndarray | None = None  # int32 [c2 * kv8]: 1x1 int16 pairs, pair-major (_pointwise16)

    @property
    def kp(self) -> int:
        """Output channels rounded up to whole blocks."""
        return -(-self.k // KB) * KB

    @property
    def kp8(self) -> int:
        """Output channels rounded up to whole blocks of the byte kernel."""
        return -(-self.k // KB8) * KB8


def pack_weights(w: np.ndarray) -> PackedWeights:
    """``w`` [K, kh, kw, C] integers in int16 range -> the kernel's word layout (zero-filled to
    a multiple of 4 output channels and of 2 input channels); where the byte kernel runs
    (:data:`HAVE_VNNI`) and every weight fits int8, also its layout (int8 quads, zero-filled to
    a multiple of 8 output channels and of 4 input channels) and the per-channel sums, and for
    a 1x1 kernel the pointwise kernel's layout of the same quads (``columns``: per input quad,
    the output channels rounded up to 16); for a 1x1 kernel also the int16-pair pointwise
    kernel's layout of the words (``pairs``: per input pair, the output channels rounded up to
    8)."""
    k, kh, kw, c = w.shape
    kp, c2 = -(-k // KB) * KB, (c + 1) // 2
    half = np.zeros((kp, kh, kw, 2 * c2), np.int16)
    half[:k, :, :, :c] = w
    quads = wsum = columns = pairs = None
    if kh == kw == 1:
        p = np.zeros((-(-k // KV8) * KV8, c2), np.int32)
        p[:kp] = half.view(np.int32).reshape(kp, c2)
        pairs = np.ascontiguousarray(p.T).reshape(-1)
    if HAVE_VNNI and (w.size == 0 or (w.min() >= -128 and w.max() <= 127)):
        kp8, q4 = -(-k // KB8) * KB8, (c + 3) // 4
        b = np.zeros((kp8, kh, kw, 4 * q4), np.int8)
        b[:k, :, :, :c] = w
        quads = b.view(np.int32).reshape(-1)
        wsum = b.reshape(kp8, -1).sum(axis=1, dtype=np.int64)
        if kh == kw == 1:
            cols = np.zeros((-(-k // KV) * KV, q4), np.int32)
            cols[:kp8] = quads.reshape(kp8, q4)
            columns = np.ascontiguousarray(cols.T).reshape(-1)
    return PackedWeights(half.view(np.int32).reshape(-1), k, c, kh, kw, quads, wsum, columns,
                         pairs)


def fits_int32(lo: int, hi: int, w: np.ndarray) -> bool:
    """Input values in [lo, hi] (after the zero point) and weights ``w`` [K, ...] fit the
    kernel's int16 operands (weights above -32768, so no vpmaddwd pair reaches 2**31) and
    every partial sum stays inside int32: the sums are then exact."""
    w_max, w_sum = _kept(_BOUNDS, w, _bounds)
    if lo < -32768 or hi > 32767 or w_max > 32767:
        return False
    return max(-lo, hi) * w_sum < 1 << 31


def weight_sum_bound(w: np.ndarray) -> int:
    """max over K of sum |w[k]| of ``w`` [K, ...], kept while a read-only ``w`` lives."""
    return _kept(_BOUNDS, w, _bounds)[1]


def packed_weights(w: np.ndarray) -> PackedWeights:
    """:func:`pack_weights` of ``w`` [K, kh, kw, C], kept while a read-only ``w`` lives."""
    return _kept(_PACKED, w, pack_weights)


def _bounds(w: np.ndarray) -> tuple[int, int]:
    """(max |w|, max over K of sum |w[k]|)."""
    a = np.abs(w.reshape(w.shape[0], -1).astype(np.int64))
    return (int(a.max()), int(a.sum(axis=1).max())) if a.size else (0, 0)


#: per table, id of a read-only weight array -> what was computed from it; an entry goes when
#: its array is freed. Why: decoded weights are read-only and every run of a layer passes the
#: same array, and packing and bounding them cost ~0.1 ms per run.
_PACKED: dict[int, PackedWeights] = {}
_BOUNDS: dict[int, tuple[int, int]] = {}
_DEPTHWISE: dict[int, np.ndarray] = {}


def _kept(table: dict, w: np.ndarray, compute):
    """``compute(w)``, kept in ``table`` while a read-only ``w`` lives (a writable one may
    change: computed on every call)."""
    if w.flags.writeable:
        return compute(w)
    hit = table.get(id(w))
    if hit is None:
        hit = table[id(w)] = compute(w)
        weakref.finalize(w, table.pop, id(w), None)
    return hit


@ranged
def _pack_input_rows(v, zp, rows, top, dst_col, channels_last, x16, start, stop):
    """x16[padded row, pair, dst_col[col], half] = v[c, row, col] - zp at padded row
    ``row + top``; zero elsewhere (padding reads 0). ``v`` is indexed [C, H, W] (any strides;
    ``channels_last``: C varies fastest in memory, as in an NHWC tensor); rows >= ``rows`` and
    columns with dst_col < 0 are not used. Padded rows in parallel. A channels-last input of
    fewer than 8 channels is read channel by channel too: its pixel loop of a few channels
    cost ~3.5 cycles an element (MobileNet v2's 96x96x3 stem 30 -> 17 us in the AVX2
    approximation; from 8 channels on the pixel loop is faster: 48x48x8 10.8 against 11.8
    us, x16 16.6 against 23.0). (Loops over whole pairs without ``//`` and ``%`` measured no
    faster: the stores through dst_col cost, not the arithmetic.)"""
    c_n = v.shape[0]
    for pr in range(start, stop):  # padded rows start..stop-1 (emu/ranged.py)
        x16[pr] = 0
        r = pr - top
        if r < 0 or r >= rows:
            continue
        dst = x16[pr]
        if channels_last and c_n >= 8:
            for col in range(dst_col.shape[0]):
                d = dst_col[col]
                if d >= 0:
                    for c in range(c_n):
                        dst[c // 2, d, c % 2] = v[c, r, col] - zp
        else:
            for c in range(c_n):
                for col in range(dst_col.shape[0]):
                    d = dst_col[col]
                    if d >= 0:
                        dst[c // 2, d, c % 2] = v[c, r, col] - zp


@ranged_wrapper(_pack_input_rows, nogil=True, cache=True)
def _pack_input_serial(v, zp, rows, top, dst_col, channels_last, x16):
    """:func:`_pack_input_rows` over every padded row."""
    call_ranged(_pack_input_rows, (v, zp, rows, top, dst_col, channels_last, x16, 0,
                                   x16.shape[0]))


@ranged_wrapper(_pack_input_rows, parallel=True, cache=True)
def _pack_input(v, zp, rows, top, dst_col, channels_last, x16):
    """:func:`_pack_input_rows` over every padded row, in parallel (:data:`CHUNKS`)."""
    n = x16.shape[0]
    m = min(n, CHUNKS)
    for c in prange(m):
        call_ranged(_pack_input_rows, (v, zp, rows, top, dst_col, channels_last, x16,
                                       c * n // m, (c + 1) * n // m))


_PACK_INPUT_TWIN = twin(_pack_input, _pack_input_serial, _pack_input_rows)


@ranged
def _conv_blocks_tasks(x2, w2, acc, ho, wob, c2, kh, kw, kn, sy, row_words, plane, row_off,
                       col_off, hwc, start, stop):
    """acc[k, y, x] (or acc[y, x, k] if ``hwc``) = sum over (i, j, pair) of vpmaddwd(input
    words, weight word) for blocks of 4 output channels x 16 output columns, one (row, channel
    block) per task ``t`` (y = t // kn), tasks start..stop-1 (emu/ranged.py)."""
    ws = kh * kw * c2
    kp = kn * KB
    s = ho * wob
    for t in range(start, stop):  # (signed: here unsigned was 3 % slower, AVX2)
        y = t // kn
        k0 = (t % kn) * KB
        for x0 in range(0, wob, XB):
            a0 = vzero()
            a1 = vzero()
            b0 = vzero()
            b1 = vzero()
            c0 = vzero()
            c1 = vzero()
            d0 = vzero()
            d1 = vzero()
            for i in range(kh):
                rbase = (y * sy + row_off[i]) * row_words + x0
                for j in range(kw):
                    xi = rbase + col_off[j]
                    wi = ((k0 * kh + i) * kw + j) * c2
                    for _cp in range(c2):
                        lo = vload(x2, xi)
                        hi = vload(x2, xi + 8)
                        wv = vbcast(w2, wi)
                        a0 = vmadd(a0, lo, wv)
                        a1 = vmadd(a1, hi, wv)
                        wv = vbcast(w2, wi + ws)
                        b0 = vmadd(b0, lo, wv)
                        b1 = vmadd(b1, hi, wv)
                        wv = vbcast(w2, wi + 2 * ws)
                        c0 = vmadd(c0, lo, wv)
                        c1 = vmadd(c1, hi, wv)
                        wv = vbcast(w2, wi + 3 * ws)
                        d0 = vmadd(d0, lo, wv)
                        d1 = vmadd(d1, hi, wv)
                        xi += plane
                        wi += 1
            if hwc:  # acc[y, x, k]: each 4 x 8 half transposed
                o = (y * wob + x0) * kp + k0
                vstore_t4(acc, o, kp, a0, b0, c0, d0)
                vstore_t4(acc, o + 8 * kp, kp, a1, b1, c1, d1)
            else:  # acc[k, y, x]
                o = (k0 * ho + y) * wob + x0
                vstore(acc, o, a0)
                vstore(acc, o + 8, a1)
                vstore(acc, o + s, b0)
                vstore(acc, o + s + 8, b1)
                vstore(acc, o + 2 * s, c0)
                vstore(acc, o + 2 * s + 8, c1)
                vstore(acc, o + 3 * s, d0)
                vstore(acc, o + 3 * s + 8, d1)


@ranged_wrapper(_conv_blocks_tasks, nogil=True, cache=True)
def _conv_blocks_serial(x2, w2, acc, ho, wob, c2, kh, kw, kn, sy, row_words, plane, row_off,
                        col_off, hwc):
    """:func:`_conv_blocks_tasks` over every task."""
    call_ranged(_conv_blocks_tasks, (x2, w2, acc, ho, wob, c2, kh, kw, kn, sy, row_words,
                                     plane, row_off, col_off, hwc, 0, ho * kn))


@ranged_wrapper(_conv_blocks_tasks, parallel=True, cache=True)
def _conv_blocks(x2, w2, acc, ho, wob, c2, kh, kw, kn, sy, row_words, plane, row_off, col_off,
                 hwc):
    """:func:`_conv_blocks_tasks` over every task, in parallel (:data:`CHUNKS`)."""
    n = ho * kn
    m = min(n, CHUNKS)
    for c in prange(m):
        call_ranged(_conv_blocks_tasks, (x2, w2, acc, ho, wob, c2, kh, kw, kn, sy, row_words,
                                         plane, row_off, col_off, hwc, c * n // m,
                                         (c + 1) * n // m))


_CONV_BLOCKS_TWIN = twin(_conv_blocks, _conv_blocks_serial, _conv_blocks_tasks)


@njit(nogil=True, cache=True)
def _pack_pixels(src, zp, n, c, x16):
    """x16[p * 2 * c2 + ch] = src[p * c + ch] - zp for ``n`` pixels of ``c`` channels (``src``
    a pixel-major, channels-last tensor), a pair-aligned pixel's last half 0 where ``c`` is
    odd: :func:`_pointwise16`'s input words (c2 = (c + 1) // 2 per pixel). An even ``c`` is
    one contiguous loop that LLVM vectorises (int8 -> int16, 16 lanes a turn); ``zp`` an int32
    (int64 arithmetic would halve the lanes). The sum's low 16 bits are the same whatever the
    width, and callers keep the difference inside int16."""
    if c % 2 == 0:
        for j in range(n * c):
            x16[j] = src[j] - zp
        return
    ce = c + 1
    for p in range(n):
        for ch in range(c):
            x16[p * ce + ch] = src[p * c + ch] - zp
        x16[p * ce + c] = 0


@njit(nogil=True, cache=True)
def _vput(acc, o, v, whole):
    """acc[o:o+8] = ``v``, or its low 4 lanes only where the register's upper 4 channels do not
    exist (``whole`` False: :func:`vstore4`); :func:`_pointwise16`'s stores, inlined by LLVM."""
    if whole:
        vstore(acc, o, v)
    else:
        vstore4(acc, o, v)


@njit(nogil=True, cache=True)
def _pointwise16(x, w, acc, ho, wo, wob, c2, kp):
    """acc[(y * wob + p) * kp + k] = sum over pairs q of vpmaddwd(x[(y * wo + p) * c2 + q],
    w[q * kw8 + k]) modulo 2**32 for output rows y < ``ho``, pixels p < ``wo`` and channels
    k < ``kp`` (``x``: :func:`_pack_pixels`' words; ``w``: PackedWeights.pairs, kw8 = ``kp``
    rounded up to 8; ``acc``: :func:`_conv_blocks`' hwc work array [ho, wob, kp]): the
    int16-pair kernel for 1x1 convolutions with stride 1 and no padding, where every output
    pixel reads one input pixel. One pixel's input word is broadcast against 8 output
    channels' weights, so a register holds 8 channels of one pixel and is stored channels last
    as it is: neither :func:`_pack_input`'s transposing pack nor the lane-by-lane hwc stores
    of :func:`_conv_blocks`, which for few input channels (MobileNet v2's 48x48 8 -> 48 layer:
    4 pairs, 32 multiply-adds per 64 scalar stores) cost more than the multiply-adds.
    Block widths by shape (8 accumulators, as :func:`_conv_blocks`): 4 pixels x 2 registers
    (2 weight loads and 4 broadcasts per 8 vpmaddwd) while 2 registers are left, else 8
    pixels x 1 register (a layer of 8 or 4 output channels: 4 x 1 ran at ~55 GMAC/s), then
    the last pixels one at a time (4 at a time, the missing ones read again, was slower:
    18.5 -> 21.7 us on the 9-pixel 112 -> 1280 layer); a register of which only 4 channels
    exist stores 4 lanes
    (:func:`_vput`). Channel blocks outermost, so a block's weights stay in L1 over all
    pixels (the 9-pixel 112 -> 1280 layer streams 287 KB of weights). One thread, as
    :func:`_pointwise8`."""
    kw8 = -(-kp // KV8) * KV8
    for y in range(ho):
        xb, ob = y * wo, y * wob
        k0 = 0
        while k0 < kp:
            two = k0 + KV8 < kp  # a second register (maybe half)
            p = 0
            if two:
                while p + 4 <= wo:
                    xi = (xb + p) * c2
                    o = (ob + p) * kp + k0
                    a0 = vzero()
                    a1 = a0
                    a2 = a0
                    a3 = a0
                    b0 = a0
                    b1 = a0
                    b2 = a0
                    b3 = a0
                    for wi in range(k0, k0 + c2 * kw8, kw8):
                        w0 = vload(w, wi)
                        w1 = vload(w, wi + KV8)
                        s = vbcast(x, xi)
                        a0 = vmadd(a0, s, w0)
                        b0 = vmadd(b0, s, w1)
                        s = vbcast(x, xi + c2)
                        a1 = vmadd(a1, s, w0)
                        b1 = vmadd(b1, s, w1)
                        s = vbcast(x, xi + 2 * c2)
                        a2 = vmadd(a2, s, w0)
                        b2 = vmadd(b2, s, w1)
                        s = vbcast(x, xi + 3 * c2)
                        a3 = vmadd(a3, s, w0)
                        b3 = vmadd(b3, s, w1)
                        xi += 1
                    vstore(acc, o, a0)
                    vstore(acc, o + kp, a1)
                    vstore(acc, o + 2 * kp, a2)
                    vstore(acc, o + 3 * kp, a3)
                    whole = k0 + 2 * KV8 <= kp
                    _vput(acc, o + KV8, b0, whole)
                    _vput(acc, o + KV8 + kp, b1, whole)
                    _vput(acc, o + KV8 + 2 * kp, b2, whole)
                    _vput(acc, o + KV8 + 3 * kp, b3, whole)
                    p += 4
            else:
                while p + 8 <= wo:
                    xi = (xb + p) * c2
                    a0 = vzero()
                    a1 = a0
                    a2 = a0
                    a3 = a0
                    a4 = a0
                    a5 = a0
                    a6 = a0
                    a7 = a0
                    for wi in range(k0, k0 + c2 * kw8, kw8):
                        w0 = vload(w, wi)
                        a0 = vmadd(a0, vbcast(x, xi), w0)
                        a1 = vmadd(a1, vbcast(x, xi + c2), w0)
                        a2 = vmadd(a2, vbcast(x, xi + 2 * c2), w0)
                        a3 = vmadd(a3, vbcast(x, xi + 3 * c2), w0)
                        a4 = vmadd(a4, vbcast(x, xi + 4 * c2), w0)
                        a5 = vmadd(a5, vbcast(x, xi + 5 * c2), w0)
                        a6 = vmadd(a6, vbcast(x, xi + 6 * c2), w0)
                        a7 = vmadd(a7, vbcast(x, xi + 7 * c2), w0)
                        xi += 1
                    o = (ob + p) * kp + k0
                    whole = k0 + KV8 <= kp
                    _vput(acc, o, a0, whole)
                    _vput(acc, o + kp, a1, whole)
                    _vput(acc, o + 2 * kp, a2, whole)
                    _vput(acc, o + 3 * kp, a3, whole)
                    _vput(acc, o + 4 * kp, a4, whole)
                    _vput(acc, o + 5 * kp, a5, whole)
                    _vput(acc, o + 6 * kp, a6, whole)
                    _vput(acc, o + 7 * kp, a7, whole)
                    p += 8
            k1 = min(k0 + (2 * KV8 if two else KV8), kp)
            for r in range(p, wo):  # the last pixels, one at a time
                xi = (xb + r) * c2
                for kk in range(k0, k1, KV8):
                    a0 = vzero()
                    for q in range(c2):
                        a0 = vmadd(a0, vbcast(x, xi + q), vload(w, q * kw8 + kk))
                    _vput(acc, (ob + r) * kp + kk, a0, kk + KV8 <= kp)
            k0 = k1


@ranged
def _pack_input8(src, off, zb, rows, top, dst_col, x4, w4, wsum, acc, ho, wob, q4, kh, kw, kn,
                 sy, row_words, plane, row_off, col_off, hwc, start, stop):
    """x4[padded row, quad, dst_col[col]] = src[row, col, quad] ^ mask at padded row
    ``row + top``; the zero point's byte form ``zb`` in every byte elsewhere, so padding reads 0
    after the zero point; padded rows start..stop-1 of ``x4`` viewed [rows, q4, plane]: the
    byte kernel's input, packed before :func:`_vnni_conv_tasks` runs (its arguments, so that
    its twins call it as they call that one, emu/ranged.py). ``src``: int32 words [H, W,
    quads] of an NHWC byte tensor (four channels a word); mask 0x80808080 adds 128 to every
    byte of int8 data (``off`` 128: their unsigned byte form), 0 keeps uint8 data. Rows >=
    ``rows`` and columns with dst_col < 0 are not used. One thread (a few percent of a
    64-channel layer's call, but up to 40 % of a 4-channel one: rows in parallel would pay
    there)."""
    mask = np.int32(-0x7F7F7F80) if off else np.int32(0)
    pad = np.int32(zb * 0x01010101)
    x3 = x4.reshape(-1, q4, plane)
    for pr in range(start, stop):
        x3[pr] = pad
        r = pr - top
        if r < 0 or r >= rows:
            continue
        dst = x3[pr]
        for col in range(dst_col.shape[0]):
            d = dst_col[col]
            if d >= 0:
                for q in range(q4):
                    dst[q, d] = src[r, col, q] ^ mask


@ranged
def _vnni_conv_tasks(src, off, zb, rows, top, dst_col, x4, w4, wsum, acc, ho, wob, q4, kh, kw,
                     kn, sy, row_words, plane, row_off, col_off, hwc, start, stop):
    """acc[k, y, x] (or acc[y, x, k] if ``hwc``) = -zb * wsum[k] + sum over (i, j, quad) of
    vpdpbusd(input words, weight word), modulo 2**32: the byte kernel, for blocks of 8 output
    channels x 16 output columns (one 16-lane accumulator register per channel), one (row,
    channel block) per task ``t`` (y = t // kn), tasks start..stop-1 (emu/ranged.py). ``x4``:
    :func:`_pack_input8`'s words, packed before (:func:`_vnni_conv`); ``w4``:
    PackedWeights.quads. Generated (8 channels x 1 vector was the fastest of 1-4 vectors x
    4-16 channels on the 64->64 3x3 layer);"""
    # the accumulators start at -zb * sum(w) (wrapped to int32 by zbroadcast; not an array
    # worked out per call: the parallel twin calls this once per part, and allocating it in
    # each made the MNIST-shaped network ~8 % slower)
    ws = kh * kw * q4
    kp = kn * 8
    s = ho * wob
    for t in range(start, stop):
        # t >= 0: unsigned division (numba's signed floor division of a loop index LLVM
        # cannot prove non-negative made a 1->60 28x28 layer 16 -> 23 us)
        y = np.int64(np.uint64(t) // np.uint64(kn))
        k0 = np.int64(np.uint64(t) % np.uint64(kn)) * 8
        for x0 in range(0, wob, 16):
            a0_0 = zbroadcast(-zb * wsum[k0 + 0])
            a1_0 = zbroadcast(-zb * wsum[k0 + 1])
            a2_0 = zbroadcast(-zb * wsum[k0 + 2])
            a3_0 = zbroadcast(-zb * wsum[k0 + 3])
            a4_0 = zbroadcast(-zb * wsum[k0 + 4])
            a5_0 = zbroadcast(-zb * wsum[k0 + 5])
            a6_0 = zbroadcast(-zb * wsum[k0 + 6])
            a7_0 = zbroadcast(-zb * wsum[k0 + 7])
            for i in range(kh):
                rbase = (y * sy + row_off[i]) * row_words + x0
                for j in range(kw):
                    xi = rbase + col_off[j]
                    wi = ((k0 * kh + i) * kw + j) * q4
                    for _q in range(q4):
                        l0 = zload(x4, xi + 0)
                        a0_0 = zdot(a0_0, l0, w4, wi)
                        a1_0 = zdot(a1_0, l0, w4, wi + ws)
                        a2_0 = zdot(a2_0, l0, w4, wi + 2 * ws)
                        a3_0 = zdot(a3_0, l0, w4, wi + 3 * ws)
                        a4_0 = zdot(a4_0, l0, w4, wi + 4 * ws)
                        a5_0 = zdot(a5_0, l0, w4, wi + 5 * ws)
                        a6_0 = zdot(a6_0, l0, w4, wi + 6 * ws)
                        a7_0 = zdot(a7_0, l0, w4, wi + 7 * ws)
                        xi += plane
                        wi += 1
            if hwc:  # acc[y, x, k]: the block transposed
                zstore_t8(acc, (y * wob + x0) * kp + k0, kp, a0_0, a1_0, a2_0, a3_0, a4_0, a5_0,
                          a6_0, a7_0)
            else:  # acc[k, y, x]
                o = (k0 * ho + y) * wob + x0
                zstore(acc, o, a0_0)
                zstore(acc, o + s, a1_0)
                zstore(acc, o + 2 * s, a2_0)
                zstore(acc, o + 3 * s, a3_0)
                zstore(acc, o + 4 * s, a4_0)
                zstore(acc, o + 5 * s, a5_0)
                zstore(acc, o + 6 * s, a6_0)
                zstore(acc, o + 7 * s, a7_0)


@ranged_wrapper(_pack_input8, _vnni_conv_tasks, nogil=True, cache=True)
def _vnni_conv_serial(src, off, zb, rows, top, dst_col, x4, w4, wsum, acc, ho, wob, q4, kh, kw,
                      kn, sy, row_words, plane, row_off, col_off, hwc):
    """:func:`_pack_input8`, then :func:`_vnni_conv_tasks` over every task."""
    call_ranged(_pack_input8, (src, off, zb, rows, top, dst_col, x4, w4, wsum, acc, ho, wob, q4,
                               kh, kw, kn, sy, row_words, plane, row_off, col_off, hwc, 0,
                               x4.size // (q4 * plane)))
    call_ranged(_vnni_conv_tasks, (src, off, zb, rows, top, dst_col, x4, w4, wsum, acc, ho,
                                   wob, q4, kh, kw, kn, sy, row_words, plane, row_off, col_off,
                                   hwc, 0, ho * kn))


@ranged_wrapper(_pack_input8, _vnni_conv_tasks, parallel=True, cache=True)
def _vnni_conv(src, off, zb, rows, top, dst_col, x4, w4, wsum, acc, ho, wob, q4, kh, kw, kn,
               sy, row_words, plane, row_off, col_off, hwc):
    """:func:`_pack_input8` (one thread), then :func:`_vnni_conv_tasks` over every task, in
    parallel (:data:`CHUNKS`)."""
    call_ranged(_pack_input8, (src, off, zb, rows, top, dst_col, x4, w4, wsum, acc, ho, wob, q4,
                               kh, kw, kn, sy, row_words, plane, row_off, col_off, hwc, 0,
                               x4.size // (q4 * plane)))
    n = ho * kn
    m = min(n, CHUNKS)
    for c in prange(m):
        call_ranged(_vnni_conv_tasks, (src, off, zb, rows, top, dst_col, x4, w4, wsum, acc, ho,
                                       wob, q4, kh, kw, kn, sy, row_words, plane, row_off,
                                       col_off, hwc, c * n // m, (c + 1) * n // m))


_VNNI_CONV_TWIN = twin(_vnni_conv, _vnni_conv_serial, _vnni_conv_tasks)


@njit(nogil=True, cache=True)
def _pointwise8(x, mask, w, init, acc, n, q4, kv):
    """acc[p, k] = init[k] + sum over quads q of vpdpbusd(x[p, q] ^ ``mask``, w[q, k]) modulo
    2**32, for ``n`` pixels of ``q4`` input words each (``x``: NHWC words, four channels a word)
    and ``kv`` registers of 16 output channels (``w``: PackedWeights.columns; ``acc``: int32
    [n, 16 kv], channels last). The byte kernel for 1x1 convolutions with stride 1 and no
    padding, where every output pixel reads one input pixel: the input word is broadcast and
    a register holds 16 output channels of one pixel, so the sums are stored channels last as
    they are, with neither the input packing nor the 8 x 16 transpose of :func:`_vnni_conv`
    (MobileNet v2 0.35's pointwise layers, each shape alone: 0.38 -> 0.11 ms per inference,
    in place 0.63 -> 0.41 ms for all its byte-kernel calls; a 64 -> 64 1x1 layer on 64x64:
    311 -> 83 us). Blocks of 4 pixels x 2 registers (6 x 2, 4 x 4, 8 x 1 and 3 x 4 were within
    a few percent). One thread: it compiles in ~0.5 s, a prange kernel in ~2 s, and on one
    thread it is faster than the conv kernel on two at the pointwise shapes measured but deep
    ones with few pixels (256 pixels 512 -> 512: ~300 against 263 us; 1024 pixels 128 -> 128:
    best 87 against 75 us, though median 123 against 196)."""
    kp = kv * KV
    p = 0
    while p + 4 <= n:
        v = 0
        while v < kv:
            k0 = v * KV
            xi = p * q4
            a0 = zload(init, k0)
            a1 = a0
            a2 = a0
            a3 = a0
            if v + 2 <= kv:  # two registers per pixel
                b0 = zload(init, k0 + KV)
                b1 = b0
                b2 = b0
                b3 = b0
                for wi in range(k0, k0 + q4 * kp, kp):
                    w0 = zload(w, wi)
                    w1 = zload(w, wi + KV)
                    s = zbroadcast(x[xi] ^ mask)
                    a0 = zdotv(a0, s, w0)
                    b0 = zdotv(b0, s, w1)
                    s = zbroadcast(x[xi + q4] ^ mask)
                    a1 = zdotv(a1, s, w0)
                    b1 = zdotv(b1, s, w1)
                    s = zbroadcast(x[xi + 2 * q4] ^ mask)
                    a2 = zdotv(a2, s, w0)
                    b2 = zdotv(b2, s, w1)
                    s = zbroadcast(x[xi + 3 * q4] ^ mask)
                    a3 = zdotv(a3, s, w0)
                    b3 = zdotv(b3, s, w1)
                    xi += 1
                o = p * kp + k0 + KV
                zstore(acc, o, b0)
                zstore(acc, o + kp, b1)
                zstore(acc, o + 2 * kp, b2)
                zstore(acc, o + 3 * kp, b3)
                v += 2
            else:  # the last register
                for wi in range(k0, k0 + q4 * kp, kp):
                    w0 = zload(w, wi)
                    a0 = zdotv(a0, zbroadcast(x[xi] ^ mask), w0)
                    a1 = zdotv(a1, zbroadcast(x[xi + q4] ^ mask), w0)
                    a2 = zdotv(a2, zbroadcast(x[xi + 2 * q4] ^ mask), w0)
                    a3 = zdotv(a3, zbroadcast(x[xi + 3 * q4] ^ mask), w0)
                    xi += 1
                v += 1
            o = p * kp + k0
            zstore(acc, o, a0)
            zstore(acc, o + kp, a1)
            zstore(acc, o + 2 * kp, a2)
            zstore(acc, o + 3 * kp, a3)
        p += 4
    for r in range(p, n):  # the last pixels, one at a time
        for k0 in range(0, kp, KV):
            a0 = zload(init, k0)
            for q in range(q4):
                a0 = zdotv(a0, zbroadcast(x[r * q4 + q] ^ mask), zload(w, q * kp + k0))
            zstore(acc, r * kp + k0, a0)


class _Plan(NamedTuple):
    hp: int               # padded rows read
    c2: int               # channel pairs
    wq: int               # positions per column phase
    wob: int              # output columns computed (a multiple of XB)
    dst_col: np.ndarray   # input column -> phase * wq + position, -1 if not read
    row_off: np.ndarray   # kernel row -> padded row offset
    col_off: np.ndarray   # kernel column -> phase * wq + position offset


@functools.lru_cache(maxsize=256)
def _plan(c: int, cols: int, kh: int, kw: int, ho: int, wo: int, left: int, sy: int, sx: int,
          dy: int, dx: int) -> _Plan:
    """The index arithmetic of one convolution geometry (a layer runs the same one each time:
    computing it per call cost more than the smallest layers' kernels)."""
    wob = -(-wo // XB) * XB
    hp = (ho - 1) * sy + (kh - 1) * dy + 1
    wq = wob + ((kw - 1) * dx) // sx        # the last position a block's loads reach, + 1
    pc = np.arange(cols, dtype=np.int64) + left
    dst_col = np.where((pc >= 0) & (pc // sx < wq), (pc % sx) * wq + pc // sx, -1)
    row_off = np.arange(kh, dtype=np.int64) * dy
    col_off = np.array([((j * dx) % sx) * wq + (j * dx) // sx for j in range(kw)], np.int64)
    return _Plan(hp, (c + 1) // 2, wq, wob, dst_col, row_off, col_off)


def byte_offset(dtype, zero_point: int) -> int | None:
    """The ``off`` that makes every value of ``dtype`` and the zero point unsigned bytes (the
    byte kernel's activations), or None if there is none: int8 128 (zero points -128..127),
    uint8 0 (zero points 0..255)."""
    dtype = np.dtype(dtype)
    off = 128 if dtype == np.int8 else 0 if dtype == np.uint8 else None
    return off if off is not None and 0 <= zero_point + off <= 255 else None


def conv_sums(v: np.ndarray, w: PackedWeights, out_hw: tuple[int, int], *, zero_point: int = 0,
              in_hw: tuple[int, int] | None = None, pad: tuple[int, int] = (0, 0),
              stride: tuple[int, int] = (1, 1), dilation: tuple[int, int] = (1, 1),
              hwc: bool = False, padded: bool = False, kernel: str = "auto",
              launches: dict | None = None) -> np.ndarray:
    """int32 [K, Ho, Wo] (``hwc``: [Ho, Wo, K]): out[k, y, x] = sum over c, i, j of
    (v[c, y*sy + i*dy - top, x*sx + j*dx - left] - zero_point) * w[k, i, j, c], positions
    outside the input (or outside ``in_hw``, the rows and columns of ``v`` to use) reading 0.
    ``v`` is indexed [C, H, W] with any strides and int16-range values after the zero point;
    the sums wrap modulo 2**32 (see the module docstring for when they are exact).
    ``padded``: the whole C-contiguous work array instead ([K rounded up, Ho, Wo rounded up],
    with ``hwc`` [Ho, Wo rounded up, K rounded up]): numba vectorises loops over a
    C-contiguous array, not over the view (an output stage over the view ran ~5x slower).

    ``kernel``: "auto" runs the byte kernel (``vpdpbusd``) where it applies: the CPU has it
    (:data:`HAVE_VNNI`), the weights fit int8 (``w.quads``) and ``v`` is int8 or uint8 with a
    zero point that :func:`byte_offset` admits; else the int16-pair kernel. "int16" always
    runs the int16 branch, "int8" the byte kernel (ValueError where it does not apply). Both give
    the same int32 sums (each exact modulo 2**32). The int16 branch ("auto" without a byte
    launch, and "int16") takes emu/conv/winograd.py's F(2x2, 3x3) where :func:`winograd_for`
    says it applies (the same exact sums; its ``padded`` array is [K rounded up to 16, >= Ho,
    >= Wo], hwc [>= Ho, >= Wo, K rounded up to 16]); "direct" is the int16 branch without it.

    ``launches``: a dict the caller keeps for one layer (these weights and every argument
    but ``v`` the same on each call), where the kernels' call is kept per input layout
    (:func:`byte_launch`, else :func:`int16_launch`), and in it per thread its arguments and
    work arrays (:func:`run_byte_launch`): why: a layer runs the same one on every run, and
    working it out cost about as much as a small layer's kernel."""
    if launches is not None and kernel == "auto":  # a kept call: its layout was checked
        launch = launches.get((v.dtype, v.shape, v.strides))
        if launch is not None:
            acc = launch.run(v)  # each kind of launch runs its own kernels
            return acc if padded else _sums_view(acc, out_hw, w.k, hwc, padded)
    c, h, wd = v.shape
    if c != w.c:
        raise ValueError(f"input has {c} channels, weights {w.c}")
    if kernel in ("int16", "direct"):
        launch = None
    else:
        key = (v.dtype, v.shape, v.strides)
        launch = False if launches is None else launches.get(key, False)
        # none kept yet (False), or an int16-branch one: whether the byte kernel applies
        if launch is not None and type(launch) not in (ByteLaunch, PointwiseLaunch):
            launch = byte_launch(v, w, out_hw, zero_point=zero_point, in_hw=in_hw, pad=pad,
                                 stride=stride, dilation=dilation, hwc=hwc)
            if launches is not None:
                if len(launches) >= 8:
                    launches.clear()
                launches[key] = launch
    if kernel == "int8" and launch is None:
        raise ValueError("the byte kernel does not apply (no VNNI, weights past int8, or an "
                         "input type/zero point without an unsigned byte form)")
    if launch is not None:
        return _sums_view(launch.run(v), out_hw, w.k, hwc, padded)
    ho, wo = out_hw
    if hwc and w.pairs is not None and pixelwise(v.shape, out_hw, in_hw, pad, stride) \
            and parallel(ho * wo * w.k * c).threads == 1:
        return _sums_view(_run_pointwise16(v, w, out_hw, zero_point), out_hw, w.k, hwc, padded)
    ww = None if kernel == "direct" else winograd_for(v.dtype, zero_point, w, out_hw, stride,
                                                        dilation)
    if ww is not None:
        from . import winograd  # here: it imports this module
        b = winograd.winograd_launch(v.shape, ww, out_hw, zero_point=zero_point, in_hw=in_hw,
                                     pad=pad, hwc=hwc)
    else:
        b = int16_launch(v, w, out_hw, zero_point=zero_point, in_hw=in_hw, pad=pad,
                         stride=stride, dilation=dilation, hwc=hwc)
    if launches is not None and kernel == "auto":
        launches[key] = b
    return _sums_view(b.run(v), out_hw, w.k, hwc, padded)


def winograd_for(dtype: np.dtype, zero_point: int, w: PackedWeights, out_hw: tuple[int, int],
                 stride: tuple[int, int], dilation: tuple[int, int]) -> WinogradWeights | None:
    """The Winograd weights (emu/conv/winograd.py WinogradWeights) where :func:`conv_sums`'
    int16 branch runs F(2x2, 3x3) instead of the int16-pair kernel, else None: the one rule,
    for every caller that asks. Where: a 3x3 kernel, stride 1, dilation 1, at least 16 input
    channels (fewer are padded to 16: MNIST's C = 1 layer ran 28 -> 66 us), work at least
    SERIAL_WORK (smaller launches, the bundled demos' among them, keep the direct kernel, so
    their first run compiles nothing more), and ``winograd_fits`` for ``dtype``'s whole range
    after ``zero_point`` (exact sums). Why: without VNNI the int16-pair kernel runs near its
    measured ``vpmaddwd`` peak; F(2x2, 3x3) does 16 multiplies per 2x2 tile where it does 36
    (64->64 3x3 64x64 under the AVX2 approximation: 1.5-1.8x faster; design notes, "Exact
    integer Winograd")."""
    if (w.kh, w.kw) != (3, 3) or tuple(stride) != (1, 1) or tuple(dilation) != (1, 1) \
            or w.c < 16 or conv_work(out_hw, w, w.c) < SERIAL_WORK:
        return None
    from . import winograd  # here: it imports this module
    ww = winograd.packed_winograd_weights(w)
    return ww if winograd.winograd_fits(*winograd.input_range(dtype, zero_point), ww) else None


def conv_work(out_hw: tuple[int, int], w: PackedWeights, c: int) -> int:
    """A convolution's multiply-adds: the work :class:`parallel` weighs for its launch (the
    Ethos-U85 executor's rows take the same choice)."""
    return out_hw[0] * out_hw[1] * w.k * c * w.kh * w.kw


class Int16Launch(NamedTuple):
    """The int16-pair kernels' call (:func:`_pack_input`, :func:`_conv_blocks`) for one input
    layout, worked out once as :class:`ByteLaunch` is the byte kernel's (kept in
    :func:`conv_sums`' ``launches`` where the byte kernel does not apply: AVX2-only CPUs,
    int16 data)."""
    pack: tuple              # _pack_input's arguments after the input, before its words
    packed: tuple            # the shape of its words as int16: (hp, c2, plane, 2)
    conv: tuple              # _conv_blocks' arguments after the packed words and the weights
    words: np.ndarray        # PackedWeights.words
    buf: int                 # words of the packed input
    acc: tuple               # the work array's shape
    work: int                # multiply-adds (parallel's threshold)
    calls: threading.local   # as ByteLaunch.calls

    def run(self, v: np.ndarray) -> np.ndarray:
        """The whole work array for ``v`` (:func:`run_int16_launch`)."""
        return run_int16_launch(self, v)


def int16_launch(v: np.ndarray, w: PackedWeights, out_hw: tuple[int, int], *, zero_point: int,
                 in_hw: tuple[int, int] | None, pad: tuple, stride: tuple, dilation: tuple,
                 hwc: bool) -> Int16Launch:
    """:class:`Int16Launch` of :func:`conv_sums`' int16-pair kernels for ``v`` [C, H, W] (its
    layout only)."""
    c = v.shape[0]
    ho, wo = out_hw
    p, plane, rows = _geometry(v.shape, w, out_hw, in_hw, pad, stride, dilation)
    return Int16Launch((zero_point, rows, pad[0], p.dst_col, v.strides[0] < v.strides[2]),
                       (p.hp, p.c2, plane, 2),
                       (ho, p.wob, p.c2, w.kh, w.kw, w.kp // KB, stride[0], p.c2 * plane,
                        plane, p.row_off, p.col_off, hwc),
                       w.words, p.hp * p.c2 * plane,
                       (ho, p.wob, w.kp) if hwc else (w.kp, ho, p.wob),
                       conv_work(out_hw, w, c), threading.local())


class _Int16Call(NamedTuple):
    """An :class:`Int16Launch`'s call in one thread, as :class:`_ByteCall` is a byte launch's."""
    pack: object             # _pack_input's version to call with the input, then ``pack_rest``
    pack_rest: tuple
    conv: object             # _conv_blocks' version, called with ``conv_args``
    conv_args: tuple
    par: parallel | None     # held around the calls where they run on more than one thread
    acc: np.ndarray          # the whole work array, shaped ``b.acc``


def run_int16_launch(b: Int16Launch, v: np.ndarray) -> np.ndarray:
    """The int16-pair kernels' whole work array (``b.acc``) for ``v`` [C, H, W] of the
    launch's layout; the call worked out once per thread, as :func:`run_byte_launch`'s."""
    call = getattr(b.calls, "call", None)
    if call is None:
        acc = scratch("int_conv.acc", (math.prod(b.acc),), np.int32)
        buf = scratch("int_conv.x", (b.buf,), np.int32)
        par = parallel(b.work)
        call = b.calls.call = _Int16Call(
            par.kernel(_PACK_INPUT_TWIN), (*b.pack, buf.view(np.int16).reshape(b.packed)),
            par.kernel(_CONV_BLOCKS_TWIN), (buf, b.words, acc, *b.conv),
            None if par.threads == 1 else par, acc.reshape(b.acc))
    x = read_only(v)  # the kernels take their input read-only
    if call.par is None:
        call.pack(x, *call.pack_rest)
        call.conv(*call.conv_args)
    else:
        with call.par:
            call.pack(x, *call.pack_rest)
            call.conv(*call.conv_args)
    return call.acc


def pixelwise(v_shape: tuple, out_hw: tuple, in_hw: tuple | None, pad: tuple,
              stride: tuple) -> bool:
    """Every output pixel of a 1x1 convolution of an input [C, H, W] reads its own input
    pixel (stride 1, no padding, the whole input): where the pointwise kernels apply."""
    h, wd = v_shape[1:]
    return (tuple(stride) == (1, 1) and tuple(pad) == (0, 0) and tuple(out_hw) == (h, wd)
            and (in_hw is None or (in_hw[0] >= h and in_hw[1] >= wd)))


def _run_pointwise16(v: np.ndarray, w: PackedWeights, out_hw: tuple, zero_point: int
                     ) -> np.ndarray:
    """:func:`_pointwise16`'s hwc work array [Ho, Wo rounded up to XB, K rounded up to KB]
    for ``v`` [C, H, W] where :func:`pixelwise` holds (the same shape as :func:`_conv_blocks`'
    hwc array; its columns past Wo are not written)."""
    c, h, wd = v.shape
    nhwc = v.transpose(1, 2, 0)
    if not nhwc.flags.c_contiguous:
        nhwc = np.ascontiguousarray(nhwc)
    n, c2, wob = h * wd, (c + 1) // 2, -(-wd // XB) * XB
    x = scratch("int_conv.x", (n * c2,), np.int32)
    _pack_pixels(read_only(nhwc.reshape(-1)), np.int32(zero_point), n, c, x.view(np.int16))
    acc = scratch("int_conv.acc", (h * wob * w.kp,), np.int32)
    _pointwise16(x, w.pairs, acc, h, wd, wob, c2, w.kp)
    return acc.reshape(h, wob, w.kp)


def _geometry(v_shape: tuple, w: PackedWeights, out_hw: tuple, in_hw: tuple | None, pad: tuple,
              stride: tuple, dilation: tuple) -> tuple[_Plan, int, int]:
    """(:func:`_plan`, words per padded row's channel group, input rows read) of a
    convolution of an input [C, H, W]."""
    c, h, wd = v_shape
    rows, cols = in_hw or (h, wd)
    p = _plan(c, min(cols, wd), w.kh, w.kw, out_hw[0], out_hw[1], pad[1], stride[0], stride[1],
              dilation[0], dilation[1])
    return p, stride[1] * p.wq, min(rows, h)


def _sums_view(acc: np.ndarray, out_hw: tuple, k: int, hwc: bool, padded: bool) -> np.ndarray:
    """The sums [K, Ho, Wo] ([Ho, Wo, K] with ``hwc``) of the whole work array ``acc``, or it
    whole (``padded``)."""
    if padded:
        return acc
    ho, wo = out_hw  # Winograd's arrays have rows past Ho too
    return acc[:ho, :wo, :k] if hwc else acc[:k, :ho, :wo]


class ByteLaunch(NamedTuple):
    """The byte kernel's call for one input layout (shape, strides, type), worked out once
    (:func:`byte_launch`, kept in :func:`conv_sums`' ``launches``)."""
    args: tuple              # _vnni_conv's arguments after the input words, before x4
    mid: tuple               # ... between x4 and acc (quads, wsum)
    tail: tuple              # ... after acc
    copy: tuple | None       # (h, wd, 4 * q4): the input is copied into whole words first
    c: int                   # input channels
    buf: int                 # words of the packed input
    acc: tuple               # the work array's shape
    work: int                # multiply-adds (parallel's threshold)
    calls: threading.local   # per thread, the call worked out for it (run_byte_launch)

    def run(self, v: np.ndarray) -> np.ndarray:
        """The whole work array for ``v`` (:func:`run_byte_launch`)."""
        return run_byte_launch(self, v)


class PointwiseLaunch(NamedTuple):
    """:func:`_pointwise8`'s call for one input layout, as :class:`ByteLaunch` is the conv
    kernel's."""
    mask: np.int32           # 0x80808080 for int8 input (its unsigned byte form), else 0
    columns: np.ndarray      # PackedWeights.columns
    init: np.ndarray         # int32 [16 kv]: the accumulators' start values
    copy: tuple | None       # as ByteLaunch.copy
    c: int                   # input channels
    acc: tuple               # the work array's shape (Ho, Wo, 16 kv)
    n: int                   # pixels (Ho * Wo)
    q4: int                  # input words per pixel
    kv: int                  # registers of 16 output channels
    calls: threading.local   # as ByteLaunch.calls

    def run(self, v: np.ndarray) -> np.ndarray:
        """The whole work array for ``v`` (:func:`run_byte_launch`)."""
        return run_byte_launch(self, v)


def byte_launch(v: np.ndarray, w: PackedWeights, out_hw: tuple[int, int], *, zero_point: int,
                in_hw: tuple[int, int] | None, pad: tuple, stride: tuple, dilation: tuple,
                hwc: bool) -> ByteLaunch | PointwiseLaunch | None:
    """:class:`ByteLaunch` of :func:`conv_sums`' byte kernel for ``v`` [C, H, W] (its layout
    only), :class:`PointwiseLaunch` where the output is ``hwc`` and every output pixel reads
    its own input pixel (1x1, stride 1, no padding, the whole input), or None where neither
    applies (``w`` has no byte form, or :func:`byte_offset` admits no unsigned byte form of
    ``v``'s type and the zero point)."""
    c, h, wd = v.shape
    off = byte_offset(v.dtype, zero_point) if w.quads is not None else None
    if off is None:
        return None
    ho, wo = out_hw
    q4 = (c + 3) // 4
    # sum of (v + off) * w minus (zero_point + off) * sum(w) per channel (the accumulators'
    # start value), all modulo 2**32: the same sums; padding holds zero_point + off. The input
    # as NHWC words of 4 channels: a copy unless it is one (the bytes of channels >= c are
    # left as they were: their weights are 0)
    copy = (h, wd, 4 * q4) if c % 4 or not v.transpose(1, 2, 0).flags.c_contiguous else None
    if hwc and w.columns is not None and pixelwise(v.shape, out_hw, in_hw, pad, stride):
        kv = -(-w.k // KV)
        init = np.zeros(kv * KV, np.int64)
        init[:w.kp8] = -(zero_point + off) * w.wsum
        return PointwiseLaunch(np.int32(-0x7F7F7F80 if off else 0), w.columns,
                               init.astype(np.int32), copy, c, (ho, wo, kv * KV), ho * wo, q4, kv,
                               threading.local())
    p, plane, rows = _geometry(v.shape, w, out_hw, in_hw, pad, stride, dilation)
    kp = w.kp8
    return ByteLaunch((off, zero_point + off, rows, pad[0], p.dst_col), (w.quads, w.wsum),
                      (ho, p.wob, q4, w.kh, w.kw, kp // KB8, stride[0], q4 * plane, plane,
                       p.row_off, p.col_off, hwc), copy, c, p.hp * q4 * plane,
                      (ho, p.wob, kp) if hwc else (kp, ho, p.wob),
                      conv_work(out_hw, w, c), threading.local())


def run_byte_launch(b: ByteLaunch | PointwiseLaunch, v: np.ndarray) -> np.ndarray:
    """The byte kernel's whole work array (``b.acc``) for ``v`` [C, H, W] of the launch's
    layout."""
    call = getattr(b.calls, "call", None)
    if call is None:
        call = b.calls.call = _byte_call(b, v.dtype)
    if call.copy is None:  # the input's NHWC words as they are
        words = v.transpose(1, 2, 0).view(np.int32)
        if call.flat:
            words = words.reshape(-1)
        words = read_only(words)  # the kernels take their input read-only
    else:
        nhwc, copy = v.transpose(1, 2, 0), call.copy
        if b.c < 8 and b.copy[0] * b.copy[1] >= 4096:  # channel by channel: numpy copies a
            for k in range(b.c):                        # few channels per pixel slowly (96x96x3
                copy[:, :, k] = nhwc[:, :, k]           # into 4: 40 -> 10 us)
        else:
            copy[:, :, :b.c] = nhwc
        words = call.words
    if call.par is None:
        call.kernel(words, *call.rest)
    else:
        with call.par:
            call.kernel(words, *call.rest)
    return call.acc


class _ByteCall(NamedTuple):
    """A launch's call in one thread (:func:`_byte_call`)."""
    kernel: object               # the kernel to call with the input words, then ``rest``
    rest: tuple                  # its other arguments
    par: parallel | None         # held around the call where it runs on more than one thread
    acc: np.ndarray              # the whole work array, shaped ``b.acc``
    flat: bool                   # the kernel takes the input words flat (_pointwise8)
    copy: np.ndarray | None      # where the input is copied into whole words first (``b.copy``)
    words: np.ndarray | None     # ... its words, read-only, as the kernel takes them


def _byte_call(b: ByteLaunch | PointwiseLaunch, dtype: np.dtype) -> _ByteCall:
    """``b``'s call in this thread, worked out once (kept in ``b.calls``, a ``threading.local``
    that forgets it when the thread ends): the work arrays (this thread's :func:`scratch`,
    viewed once), the kernel version for ``b.work`` (:class:`parallel`: SERIAL_WORK and
    numba's thread count are fixed for a process) and the argument tuple. Why: a layer runs
    the same launch on every run, and the views, the thread decision and the tuple cost ~3 us
    of Python per call, more than the small layers' kernels (issue 31 #1: the MNIST-shaped
    MAX78000 network, 5 layers in ~0.28 ms)."""
    acc = scratch("int_conv.acc", (math.prod(b.acc),), np.int32)
    copy = words = None
    if b.copy is not None:  # the bytes of channels >= c stay as the first copy left them
        copy = scratch("int_conv.nhwc8", b.copy, dtype)
        words = read_only(copy.view(np.int32))
    if isinstance(b, PointwiseLaunch):
        if words is not None:
            words = words.reshape(-1)
        return _ByteCall(_pointwise8, (b.mask, b.columns, b.init, acc, b.n, b.q4, b.kv), None,
                         acc.reshape(b.acc), True, copy, words)
    buf = scratch("int_conv.x8", (b.buf,), np.int32)
    par = parallel(b.work)
    return _ByteCall(par.kernel(_VNNI_CONV_TWIN), (*b.args, buf, *b.mid, acc, *b.tail),
                     None if par.threads == 1 else par, acc.reshape(b.acc), False, copy, words)


def read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a``. Why: numba compiles a kernel once for read-only and once
    for writeable array arguments (~1.4 s for the byte kernel); inputs read from the device's
    memory views are read-only, copies are not, so the kernels that only read an input take it
    read-only every time (one type)."""
    v = a.view()
    v.flags.writeable = False
    return v


@njit(nogil=True, cache=True)
def _depthwise_pixels(x, zp, w, out, top, left, sy, sx, dy, dx):
    """out[y, x, c] = sum over taps inside ``x`` of (x[y*sy + i*dy - top, x*sx + j*dx - left, c]
    - zp) * w[i, j, c], modulo 2**32 (``zp`` an int32; ``x`` int8, uint8 or int16, ``w`` int32,
    ``out`` int32, all C-contiguous). Per output pixel, the taps inside the input worked out
    once, then 32 channels at a time in two 16-lane registers (then 16, then one by one), each
    summed over the taps and stored once. Why registers: numba's own vectorisation of the
    channel loop ran MobileNet v2's 16- and 48-channel layers scalar (its vector loop takes 64
    channels a turn) at 4-9 GMAC/s; its 18 depthwise layers, each alone, 0.19 -> 0.13 ms.
    Two output pixels at a time where the next one reads the same kernel columns: each weight
    load serves both and the two sums are independent chains (48x48x16 38.7 -> 27.2 us,
    12x12x96 9.6 -> 5.9 us on the AVX2 code); the products and their order per pixel are
    the same, so the sums are too.
    One thread: depthwise layers are small (MobileNet's ~0.1-1 M multiply-adds, below
    SERIAL_WORK), and a prange kernel would add seconds of compilation to the first run of every
    program with a depthwise layer (the Ethos-U85 demo has one)."""
    rows, cols, c_n = x.shape
    kh, kw = w.shape[0], w.shape[1]
    ho, wo = out.shape[0], out.shape[1]
    xf, wf, of = x.reshape(-1), w.reshape(-1), out.reshape(-1)
    z = zbroadcast(zp)
    c16 = c_n - c_n % 16
    for oy in range(ho):
        i0, i1 = 0, kh  # the kernel rows inside the input
        while i0 < kh and oy * sy + i0 * dy - top < 0:
            i0 += 1
        while i1 > i0 and oy * sy + (i1 - 1) * dy - top >= rows:
            i1 -= 1
        ox = 0
        while ox < wo:
            j0, j1 = 0, kw
            while j0 < kw and ox * sx + j0 * dx - left < 0:
                j0 += 1
            while j1 > j0 and ox * sx + (j1 - 1) * dx - left >= cols:
                j1 -= 1
            # two pixels at once where the next one reads the same kernel columns (inside the
            # input): each weight load serves both, and their accumulators are independent
            npx = 1
            if ox + 1 < wo and (ox + 1) * sx + (j1 - 1) * dx - left < cols \
                    and (j0 == 0 or (ox + 1) * sx + (j0 - 1) * dx - left < 0):
                npx = 2
            o = (oy * wo + ox) * c_n
            xn = sx * c_n  # the second pixel's input, from the first's
            c0 = 0
            while c0 + 32 <= c16:
                a0 = zbroadcast(0)
                a1 = a0
                b0 = a0
                b1 = a0
                if npx == 2:
                    for i in range(i0, i1):
                        row = (oy * sy + i * dy - top) * cols + ox * sx - left
                        for j in range(j0, j1):
                            xi = (row + j * dx) * c_n + c0
                            wi = (i * kw + j) * c_n + c0
                            w0 = zload(wf, wi)
                            w1 = zload(wf, wi + 16)
                            a0 = zadd(a0, zmul(zsub(zload(xf, xi), z), w0))
                            a1 = zadd(a1, zmul(zsub(zload(xf, xi + 16), z), w1))
                            b0 = zadd(b0, zmul(zsub(zload(xf, xi + xn), z), w0))
                            b1 = zadd(b1, zmul(zsub(zload(xf, xi + xn + 16), z), w1))
                    zstore(of, o + c_n + c0, b0)
                    zstore(of, o + c_n + c0 + 16, b1)
                else:
                    for i in range(i0, i1):
                        row = (oy * sy + i * dy - top) * cols + ox * sx - left
                        for j in range(j0, j1):
                            xi = (row + j * dx) * c_n + c0
                            wi = (i * kw + j) * c_n + c0
                            a0 = zadd(a0, zmul(zsub(zload(xf, xi), z), zload(wf, wi)))
                            a1 = zadd(a1, zmul(zsub(zload(xf, xi + 16), z), zload(wf, wi + 16)))
                zstore(of, o + c0, a0)
                zstore(of, o + c0 + 16, a1)
                c0 += 32
            if c0 < c16:  # one register left
                a0 = zbroadcast(0)
                b0 = a0
                if npx == 2:
                    for i in range(i0, i1):
                        row = (oy * sy + i * dy - top) * cols + ox * sx - left
                        for j in range(j0, j1):
                            xi = (row + j * dx) * c_n + c0
                            w0 = zload(wf, (i * kw + j) * c_n + c0)
                            a0 = zadd(a0, zmul(zsub(zload(xf, xi), z), w0))
                            b0 = zadd(b0, zmul(zsub(zload(xf, xi + xn), z), w0))
                    zstore(of, o + c_n + c0, b0)
                else:
                    for i in range(i0, i1):
                        row = (oy * sy + i * dy - top) * cols + ox * sx - left
                        for j in range(j0, j1):
                            a0 = zadd(a0, zmul(zsub(zload(xf, (row + j * dx) * c_n + c0), z),
                                               zload(wf, (i * kw + j) * c_n + c0)))
                zstore(of, o + c0, a0)
            for q in range(npx):
                for c in range(c16, c_n):
                    s = np.int32(0)
                    for i in range(i0, i1):
                        for j in range(j0, j1):
                            s += (np.int32(x[oy * sy + i * dy - top,
                                             (ox + q) * sx + j * dx - left, c]) - zp) * w[i, j, c]
                    of[o + q * c_n + c] = s
            ox += npx


def depthwise_sums(v: np.ndarray, w: np.ndarray, out_hw: tuple[int, int], *,
                   zero_point: int = 0, in_hw: tuple[int, int] | None = None,
                   pad: tuple[int, int] = (0, 0), stride: tuple[int, int] = (1, 1),
                   dilation: tuple[int, int] = (1, 1), laid_out: bool = False) -> np.ndarray:
    """int32 [Ho, Wo, C]: out[y, x, c] = sum over i, j of (v[y*sy + i*dy - top, x*sx + j*dx -
    left, c] - zero_point) * w[c, i, j], positions outside the input (or outside ``in_hw``)
    reading 0; modulo 2**32 like :func:`conv_sums` (exact where :func:`fits_int32` holds for
    ``w``). ``v`` [H, W, C] integers whose values after the zero point fit int16, any strides;
    ``w`` [C, kh, kw] (or [C, kh, kw, 1]) integers in int16 range, its kernel layout kept while
    a read-only ``w`` lives (``laid_out``: ``w`` is that layout, :func:`depthwise_layout`).
    Why its own kernel: a depthwise convolution has one input channel per output channel, so
    neither GEMM layout applies; the float multiply-add pass per tap it replaces took about
    twice as long over MobileNet v2's 18 depthwise layers (1.7-2.1x with the output stage, two
    measurements). A byte input is read as it is where it is C-contiguous, else copied once
    (the kernel subtracts the zero point: an NHCWB16 join or an NHWC tensor is not copied
    again); an input of any other type is copied once as int16 with the zero point
    subtracted."""
    rows, cols = in_hw or v.shape[:2]
    rows, cols = min(rows, v.shape[0]), min(cols, v.shape[1])
    c_n = v.shape[2]
    if v.dtype in (np.int8, np.uint8):
        x, zp = np.ascontiguousarray(v[:rows, :cols]), zero_point
    else:
        x, zp = scratch("int_conv.dw_in", (rows, cols, c_n), np.int16), 0
        # in int16 (numpy would subtract in int8 for int8 data): wraps modulo 2**16 only where
        # the true difference does not fit int16, which the caller excludes
        np.subtract(v[:rows, :cols], zero_point, out=x, dtype=np.int16, casting="unsafe")
    wt = w if laid_out else depthwise_layout(w)
    out = scratch("int_conv.dw_out", (out_hw[0], out_hw[1], c_n), np.int32)
    _depthwise_pixels(read_only(x), np.int32(zp), wt, out, pad[0], pad[1], stride[0],
                      stride[1], dilation[0], dilation[1])
    return out


def depthwise_layout(w: np.ndarray) -> np.ndarray:
    """:func:`_depthwise_layout` of ``w``, kept while a read-only ``w`` lives."""
    return _kept(_DEPTHWISE, w, _depthwise_layout)


def _depthwise_layout(w: np.ndarray) -> np.ndarray:
    """``w`` [C, kh, kw] (or [C, kh, kw, 1]) as the kernel's int32 [kh, kw, C]."""
    return np.ascontiguousarray(np.moveaxis(w.reshape(w.shape[:3]), 0, -1), np.int32)
