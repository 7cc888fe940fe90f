"""Ethos-U85 AXI accounting kernel: the bursts of a unit's byte ranges per port (PMU AXI events,
U8#18). Pure numba, no device knowledge: the device passes the
ranges, the burst alignment, the port hash masks and the port count."""
from __future__ import annotations

import numpy as np

from ..jit import njit


@njit(nogil=True, cache=True)
def _parity(v):
    v ^= v >> 32
    v ^= v >> 16
    v ^= v >> 8
    v ^= v >> 4
    v ^= v >> 2
    v ^= v >> 1
    return v & 1


@njit(nogil=True, cache=True)
def burst_counts(ranges, align, hashes, n):
    """Split every [start, end) of ``ranges`` ([R, 2] int64, non-negative) into bursts at the
    ``align`` boundaries (the first burst starts at start, the next ones at multiples of align,
    each ends at min(end, next boundary)); burst at address a goes to port
    (sum_bit parity(a & hashes[bit]) << bit) % n.

    Returns (transactions[n], 16-byte beats[n] = ceil(b/16) - floor(a/16) per burst,
    bytes[n], total bursts), int64. Why a kernel: the device did this with ~20 numpy calls per
    access group, which cost more than a small operation itself."""
    trans = np.zeros(n, np.int64)
    beats = np.zeros(n, np.int64)
    nbytes = np.zeros(n, np.int64)
    total = np.int64(0)
    for r in range(ranges.shape[0]):
        s0, e0 = ranges[r, 0], ranges[r, 1]
        nb = (e0 - 1) // align - s0 // align + 1
        for k in range(nb):
            a = s0 if k == 0 else (s0 // align + k) * align
            b = min(e0, (a // align + 1) * align)
            port = np.int64(0)
            for bit in range(hashes.shape[0]):
                port |= _parity(a & hashes[bit]) << bit
            port %= n
            trans[port] += 1
            beats[port] += (b + 15) // 16 - a // 16
            nbytes[port] += b - a
            total += 1
    return trans, beats, nbytes, total
