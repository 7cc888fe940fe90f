"""Ethos-U85 AXI accounting kernel: the bursts of a unit's byte ranges per port (PMU AXI events,
U8#18). Pure numba, no device knowledge: the device passes the
ranges, the burst alignment, the port hash masks and the port count."""
from __future__ import annotations

import numpy as np

from .. import kernel_plan as KP
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
def _burst_counts(ranges, align, hashes, n):
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


#: what :func:`_burst_counts` costs interpreted per burst (about a range's bytes / align + 1),
#: measured on the 2-core AMD EPYC (Zen 4): the bundled Ethos-U85 demo's 64 calls take ~15 ms,
#: the kernel's compile ~0.5 s of CPU (issue 31 #5)
BURST_S = 13e-6


def burst_counts(ranges: np.ndarray, align: int, hashes: np.ndarray,
                 n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """:func:`_burst_counts`, compiled, or interpreted while a program's accounting is small
    (kernel_plan.tiered: a first run of a small program needs no compile of it)."""
    if _burst_counts.overloads:
        return _burst_counts(ranges, align, hashes, n)
    spans = ranges.reshape(-1, 2)
    cost = BURST_S * (spans.shape[0] + int((spans[:, 1] - spans[:, 0]).sum()) // align)
    return KP.tiered(_burst_counts, cost, ranges, align, hashes, n)(ranges, align, hashes, n)
