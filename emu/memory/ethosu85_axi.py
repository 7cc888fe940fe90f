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
def _burst_counts(ranges, align, hashes, out):
    """Split every [start, end) of ``ranges`` ([R, 2] int64, non-negative) into bursts at the
    ``align`` boundaries (the first burst starts at start, the next ones at multiples of align,
    each ends at min(end, next boundary)); burst at address a goes to port
    (sum_bit parity(a & hashes[bit]) << bit) % n, n = out.shape[1].

    Adds to ``out`` ([3, n] int64, zeros): transactions, 16-byte beats = ceil(b/16) -
    floor(a/16) per burst, and bytes, per port; returns the total bursts. Why a kernel: the
    device did this with ~20 numpy calls per access group, which cost more than a small
    operation itself. Why ``out`` is given: allocating and returning three arrays made its
    compile 0.55 s CPU in a fresh process, 0.38 where np.zeros was compiled already; now 0.32
    (issue 31 #5)."""
    n = out.shape[1]
    total = 0
    for r in range(ranges.shape[0]):
        s0, e0 = ranges[r, 0], ranges[r, 1]
        first = s0 // align
        for k in range((e0 - 1) // align - first + 1):
            a = s0 if k == 0 else (first + k) * align
            b = min(e0, (a // align + 1) * align)
            port = 0
            for bit in range(hashes.shape[0]):
                port |= _parity(a & hashes[bit]) << bit
            port %= n
            out[0, port] += 1
            out[1, port] += (b + 15 >> 4) - (a >> 4)
            out[2, port] += b - a
            total += 1
    return total


#: what :func:`_burst_counts` costs interpreted per burst (about a range's bytes / align + 1),
#: measured on the 2-core AMD EPYC (Zen 4): the bundled Ethos-U85 demo's 64 calls take ~15 ms,
#: the kernel's compile ~0.3 s of CPU (issue 31 #5)
BURST_S = 13e-6


def burst_counts(ranges: np.ndarray, align: int, hashes: np.ndarray,
                 n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """:func:`_burst_counts`' (transactions[n], beats[n], bytes[n], total bursts), compiled,
    or interpreted while a program's accounting is small (kernel_plan.tiered: a first run of
    a small program needs no compile of it)."""
    out = np.zeros((3, n), np.int64)
    if _burst_counts.overloads:
        return out[0], out[1], out[2], _burst_counts(ranges, align, hashes, out)
    spans = ranges.reshape(-1, 2)
    cost = BURST_S * (spans.shape[0] + int((spans[:, 1] - spans[:, 0]).sum()) // align)
    total = KP.tiered(_burst_counts, cost, ranges, align, hashes, out)(ranges, align, hashes,
                                                                        out)
    return out[0], out[1], out[2], total
