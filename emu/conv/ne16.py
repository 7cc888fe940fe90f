"""GAP9 NE16 arithmetic: per-window (and depthwise) sums, and the normalisation/quantisation
stage. Pure kernels on numpy arrays; no device knowledge (the dense
convolutions run on the shared exact kernel, emu/conv/int_conv.py).

Sources: the NE16 register map ([NE16: ...], docs/citations.md),
[NE16: PADDING, CONFIG0, WEIGHTS_PTR], and pulp-nnx's functional model for the arithmetic the seed
does not give (test/NeuralEngineFunctionalModel.py: 64-bit scale product, 32-bit wrap before and
after the bias, ReLU, arithmetic shift, saturation).
"""
from __future__ import annotations

import numpy as np
from numba import prange

from ..jit import njit
from ..ranged import call_ranged, ranged, ranged_wrapper


@njit(nogil=True, cache=True)
def window_sums(img, w, rows_pad, cols_pad, pad_value, ho, wo):
    """The sums subtile by subtile, for jobs whose subtiles disagree about a row or column
    (one reads it as padding, another from memory): output (y, x) of subtile (y // 3, x // 3)
    reads its own window, where ``rows_pad`` / ``cols_pad`` [subtiles, window] mark padding.
    ``w`` int16 [K, kh, kw, Ki] (3x3 or 1x1)."""
    k_n, kh, kw, c_n = w.shape
    out = np.zeros((ho, wo, k_n), np.int32)
    for y in range(ho):
        sy, i = y // 3, y % 3
        for x in range(wo):
            sx, j = x // 3, x % 3
            for ty in range(kh):
                for tx in range(kw):
                    r, s = i + ty, j + tx
                    pad = rows_pad[sy, r] or cols_pad[sx, s]
                    yy, xx = sy * 3 + r, sx * 3 + s
                    for k in range(k_n):
                        acc = np.int32(0)
                        for c in range(c_n):
                            v = pad_value if pad else img[yy, xx, c]
                            acc += np.int32(v) * np.int32(w[k, ty, tx, c])
                        out[y, x, k] += acc
    return out


@njit(nogil=True, cache=True)
def window_sums_depthwise(img, w, rows_pad, cols_pad, pad_value, ho, wo):
    """:func:`window_sums` of the 3x3 depthwise mode (``w`` int16 [K, 3, 3])."""
    k_n = w.shape[0]
    out = np.zeros((ho, wo, k_n), np.int32)
    for y in range(ho):
        sy, i = y // 3, y % 3
        for x in range(wo):
            sx, j = x // 3, x % 3
            for ty in range(3):
                for tx in range(3):
                    r, s = i + ty, j + tx
                    pad = rows_pad[sy, r] or cols_pad[sx, s]
                    for k in range(k_n):
                        v = pad_value if pad else img[sy * 3 + r, sx * 3 + s, k]
                        out[y, x, k] += np.int32(v) * np.int32(w[k, ty, tx])
    return out


@ranged
def normquant(acc, scale, bias, shift, has_bias, relu, out_bits, h, w, k_n, mem, origin, d2,
              d1, parts, start, stop):
    """Output rows ``start`` to ``stop`` (all of them: 0 to ``h``; :func:`normquant_parallel`
    gives each of its ``parts`` a range: ``parts`` is its argument, unused here, since a body
    takes its wrapper's arguments, emu/ranged.py) of
    N§3.5 over int32 sums ``acc`` [>= Ho, >= Wo, >= K] (wrapped as the accumulators wrap;
    C-contiguous: the shared kernel's whole work array, conv_sums ``padded``), each output
    stored as ``out_bits // 8`` little-endian two's complement bytes (N§3.1) into the flat
    uint8 ``mem``: output (y, x, k) at ``origin + y*d2 + x*d1 + k*bytes``: p = acc * scale[k]
    in 64 bits; with a bias (``has_bias``), p wrapped to 32 bits plus bias[k] wrapped again;
    ReLU (``relu``, QUANT_RECT = 0); arithmetic shift right by shift[k]; saturation to
    ``out_bits``, unsigned under ReLU.
    Why bytes into a flat array: the job's store is this pass (``mem`` is L1 itself where
    the job's channels are contiguous bytes, else a buffer the device scatters), with one
    argument type for every output width and layout (one compilation, ~0.8 s CPU); the int64
    array it replaced, and the store's pass over it, took ~0.04 ms of a 64->64 3x3 job on
    32x32 (issue 31 #2). The channel loop runs without calls or data-dependent branches (bias
    and ReLU are the job's), so LLVM vectorises it, variable 64-bit shifts included."""
    if relu:
        lo, hi = 0, (1 << out_bits) - 1
    else:
        lo, hi = -(1 << (out_bits - 1)), (1 << (out_bits - 1)) - 1
    floor = 0 if relu else np.iinfo(np.int64).min  # max(p, floor): ReLU or nothing
    half = np.int64(1) << 31
    nb = out_bits // 8
    row = np.empty(k_n, np.int64)  # one pixel's outputs, before their bytes are stored
    # with a bias and 8-bit outputs (the usual job) in 32-bit lanes, twice as many a vector
    # (25 -> 12.5 us, 64->64 3x3 on 32x32, issue 31 #2): the product's and the sum's low 32
    # bits depend only on their operands' low 32 bits, so wrapping int32 arithmetic is the
    # 64-bit product wrapped, plus the bias, wrapped; an int32 value shifted right by 31 or
    # more is its sign, as in 64 bits; np.int32() of a wider integer keeps its low 32 bits
    fast = has_bias and nb == 1
    n32 = k_n if fast else 0
    sc32, bi32, sh32 = np.empty(n32, np.int32), np.empty(n32, np.int32), np.empty(n32, np.int32)
    for k in range(n32):
        sc32[k], bi32[k], sh32[k] = np.int32(scale[k]), np.int32(bias[k]), min(shift[k], 31)
    # (min: a 32-bit output's unsigned bound does not fit an int32; this path has 8 bits)
    floor32, lo32, hi32 = np.int32(max(floor, -half)), np.int32(lo), np.int32(min(hi, 255))
    for y in range(start, stop):
        for x in range(w):
            a = acc[y, x]
            o = origin + y * d2 + x * d1
            dst = mem[o:o + k_n * nb]  # a view: indices from a range vectorise, o + k did not
            if fast:
                for k in range(k_n):
                    p = np.int32(np.int32(a[k] * sc32[k]) + bi32[k])
                    v = np.int32(max(p, floor32) >> sh32[k])
                    dst[k] = np.uint8(min(max(v, lo32), hi32) & 0xFF)
                continue
            if has_bias:
                for k in range(k_n):
                    p = ((np.int64(a[k]) * scale[k] + half) & 0xFFFFFFFF) - half
                    p = ((p + bias[k] + half) & 0xFFFFFFFF) - half
                    row[k] = min(max(max(p, floor) >> shift[k], lo), hi)
            else:
                for k in range(k_n):
                    p = np.int64(a[k]) * scale[k]
                    row[k] = min(max(max(p, floor) >> shift[k], lo), hi)
            if nb == 1:
                for k in range(k_n):
                    dst[k] = np.uint8(row[k] & 0xFF)
            else:
                for k in range(k_n):
                    for b in range(nb):
                        dst[k * nb + b] = np.uint8((row[k] >> (8 * b)) & 0xFF)


@ranged_wrapper(normquant, nogil=True, parallel=True, cache=True)
def normquant_parallel(acc, scale, bias, shift, has_bias, relu, out_bits, h, w, k_n, mem, origin,
                       d2, d1, parts):
    """:func:`normquant` of every output row, the rows split into ``parts`` even ranges (the
    launch's numba threads, an argument as in emu/numeric/nvdla.py post_process_parallel; a
    part per thread because each call fills its per-channel operands first), each range's
    outputs stored by its own call (the ranges write disjoint bytes). Why: the pass over a
    64->64 3x3 job's 32x32x64 sums took 22 us on one thread under the AVX2 approximation and
    13 us with AVX-512, beside a 200 us (AVX2) convolution whose sums are spread over both
    cores' caches; on two threads the job took 15 us (AVX2) and 6 us (AVX-512) less
    (devices/ne16/job.py PARALLEL_ELEMENTS; design notes "NE16 normquant on two threads").
    A wrapper calling normquant through its address, not a prange in it: emu/conv/int_conv.py
    Twin."""
    for p in prange(parts):
        call_ranged(normquant, (acc, scale, bias, shift, has_bias, relu, out_bits, h, w, k_n,
                                mem, origin, d2, d1, parts, h * p // parts,
                                h * (p + 1) // parts))
