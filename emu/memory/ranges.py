"""Byte-range kernels: the union of [start, end) ranges cut into pieces at segment bounds, and
the pieces' bytes swapped out of / put back into flat memories. Pure numba, no device
knowledge: reverse-execution history (devices/history.py) passes its memories' address table
and backing arrays.

Why kernels: a history boundary of the MAX78000 MNIST-shaped network is ~30 pieces; in Python
(merge_ranges, a bisect per piece, two numpy slices per piece) that cost ~0.1-0.17 ms against a
0.4 ms inference (docs/design-notes.md "Reverse execution"). Copy loops are written one array
at a time (a loop reading one array and writing another), which LLVM turns into wide copies; a
numba slice assignment of uint8 copies byte by byte (13x slower, measured)."""
from __future__ import annotations

import numpy as np

from ..jit import njit


@njit(nogil=True, cache=True)
def _argsort(keys):
    """The indices that sort ``keys`` (int64, C-contiguous), equal keys in their order: a
    bottom-up merge sort. Why not np.argsort: numba compiles its sort implementation into the
    caller, and range_pieces' two calls made its compile 3.0 s of CPU (~1.1 s now, this one's
    included), paid by the first stop of every session that records history where nothing
    compiled it before (a first `continue` took 5.4 s on the MAX78000 demo); the few dozen
    ranges of a boundary sort in no measurable time either way."""
    n = keys.shape[0]
    a = np.arange(n)
    b = np.empty(n, np.int64)
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j = lo, mid
            for k in range(lo, hi):
                if i < mid and (j >= hi or keys[a[i]] <= keys[a[j]]):
                    b[k] = a[i]
                    i += 1
                else:
                    b[k] = a[j]
                    j += 1
        a, b = b, a
        width *= 2
    return a


@njit(nogil=True, cache=True)
def range_pieces(ranges, segments):
    """The union of ``ranges`` ([R, 2] int64 [start, end), any order, may overlap or touch:
    joined as devices/ranges.py merge_ranges joins them) inside the segments, parts outside
    every segment dropped. ``segments`` is int64 [4, S]: start, end (sorted, disjoint), the
    flat array (store) the segment lies in and its offset there.

    Returns int64 [4, P]: segment, store, offset in the store and length of each piece,
    ordered by store, then offset (one store's pieces are one run). One table in, one out:
    as four arrays each way the call took 3.5 us instead of 2.1 (30 pieces; numba unboxes
    each argument and rebuilds each returned array's type on every call)."""
    starts, ends, stores, bases = segments[0], segments[1], segments[2], segments[3]
    n, n_seg = ranges.shape[0], starts.shape[0]
    order = _argsort(ranges[:, 0].copy())
    out = np.empty((4, n + n_seg), np.int64)  # a piece per joined range + per bound crossed
    m = 0
    k = 0
    i = 0
    while i < n:
        s, e = ranges[order[i], 0], ranges[order[i], 1]
        i += 1
        while i < n and ranges[order[i], 0] <= e:
            e = max(e, ranges[order[i], 1])
            i += 1
        while s < e:
            while k < n_seg and ends[k] <= s:
                k += 1
            if k == n_seg or starts[k] >= e:
                break
            lo, hi = max(s, starts[k]), min(e, ends[k])
            out[0, m], out[1, m] = k, stores[k]
            out[2, m], out[3, m] = bases[k] + lo - starts[k], hi - lo
            m += 1
            s = hi
    by_store = _argsort(out[1, :m] * (1 << 40) + out[2, :m])
    return out[:, by_store]


#: bytes compared as one: a piece is kept or skipped block by block (swap_out)
BLOCK = 64


@njit(nogil=True, cache=True)
def _differs(a, b):
    """Whether the byte arrays ``a`` and ``b`` (of one length) differ anywhere: a loop over
    slices without an early exit, which LLVM vectorises (26x faster than indexing the whole
    arrays, measured: 32 us per 512 KiB)."""
    acc = np.uint8(0)
    for t in range(a.shape[0]):
        acc |= a[t] ^ b[t]
    return acc != 0


@njit(nogil=True, cache=True)
def _differing_runs(data, shadow, segs, offs, lens):
    """The runs of BLOCK-byte blocks (cut from each piece's start) where ``data`` and
    ``shadow`` differ, int64 [3, R] (segment, offset, length), and their total length."""
    blocks = 0
    for j in range(offs.shape[0]):
        blocks += (lens[j] + BLOCK - 1) // BLOCK
    runs = np.empty((3, blocks), np.int64)
    r = 0
    total = 0
    for j in range(offs.shape[0]):
        b, end = offs[j], offs[j] + lens[j]
        extend = False  # the block before this one (of this piece) differed
        while b < end:
            e = min(b + BLOCK, end)
            if _differs(data[b:e], shadow[b:e]):
                if extend:
                    runs[2, r - 1] += e - b
                else:
                    runs[0, r], runs[1, r], runs[2, r] = segs[j], b, e - b
                    r += 1
                total += e - b
                extend = True
            else:
                extend = False
            b = e
    return runs[:, :r].copy(), total


@njit(nogil=True, cache=True)
def _gather(src, runs, total):
    """The bytes of ``src`` at ``runs`` (rows 1 and 2: offset, length; ``total`` bytes in all)
    concatenated in order: what swap_out and diff_out keep, of the shadow or of the data."""
    saved = np.empty(total, np.uint8)
    p = 0
    for j in range(runs.shape[1]):
        o, n = runs[1, j], runs[2, j]
        a, s = saved[p:p + n], src[o:o + n]
        for t in range(n):
            a[t] = s[t]
        p += n
    return saved


@njit(nogil=True, cache=True)
def swap_out(data, shadow, segs, offs, lens):
    """For each piece (segment ``segs[j]``, ``offs[j]``, ``lens[j]``) of the flat arrays, cut
    into BLOCK-byte blocks from its start: the runs of blocks where ``data`` and ``shadow``
    differ. Returns the shadow's bytes of those runs (concatenated in order) and the runs,
    int64 [3, R] (segment, offset, length); then ``shadow`` takes ``data``'s bytes there.

    Why only what differs: the other bytes are the same in both, so nothing is lost, and a
    write that stores what was mostly there already costs a comparison, not a copy kept in
    the history. Measured on the MAX78000 MNIST-shaped network: its input reload, 512 KiB
    saved whole before, differs from the memory in 62 KiB (the bytes the layers wrote); the
    copies of the whole left the caches cold for the next continue (its first layer ~60 us
    slower, docs/design-notes.md "Reverse execution")."""
    runs, total = _differing_runs(data, shadow, segs, offs, lens)
    saved = _gather(shadow, runs, total)
    for j in range(runs.shape[1]):
        o, n = runs[1, j], runs[2, j]
        s, d = shadow[o:o + n], data[o:o + n]
        for t in range(n):
            s[t] = d[t]
    return saved, runs


@njit(nogil=True, cache=True)
def diff_out(data, shadow, segs, offs, lens):
    """:func:`swap_out` that leaves ``shadow`` as it is and returns ``data``'s bytes of the
    runs where they differ: a host change journaled between two checkpoints of the history
    (devices/history.py), kept as the bytes *after* that differ from the checkpoint's."""
    runs, total = _differing_runs(data, shadow, segs, offs, lens)
    return _gather(data, runs, total), runs


@njit(nogil=True, cache=True)
def put_back(data, shadow, offs, lens, saved):
    """The inverse of :func:`swap_out`: its ``saved`` bytes into ``data`` and ``shadow`` at its
    runs (``offs``, ``lens``: rows 1 and 2 of the runs it returned). ``shadow`` may be
    ``data`` itself: the bytes into one array (a journaled host change replayed)."""
    p = 0
    for j in range(offs.shape[0]):
        o, n = offs[j], lens[j]
        a, s, d = saved[p:p + n], shadow[o:o + n], data[o:o + n]
        for t in range(n):
            s[t] = a[t]
        for t in range(n):
            d[t] = a[t]
        p += n
