"""Running a numba kernel over parts of a range on all cores.

Why not numba's ``parallel=True``: compiling a prange kernel took 2-6 s per function on a cold
cache (the first ``accelstub run`` went from 9 to 22 s), its thread pool belongs to the thread
that launches it, and its workqueue layer aborts the process when two threads launch at once.
Kernels compiled with ``nogil=True`` release the GIL, so plain Python threads run them side by
side; each call gets a part of the range.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

CORES = os.cpu_count() or 1
_POOL: ThreadPoolExecutor | None = None


def run_split(kernel, n: int, *args, min_part: int = 1) -> None:
    """``kernel(*args, lo, hi)`` for consecutive parts [lo, hi) of range(n), one per core (no
    more than n // min_part parts); the caller's thread runs the first part."""
    global _POOL
    parts = max(1, min(CORES, n // max(1, min_part)))
    if parts == 1:
        kernel(*args, 0, n)
        return
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=CORES - 1, thread_name_prefix="accelstub-kernel")
    bounds = [n * i // parts for i in range(parts + 1)]
    others = [_POOL.submit(kernel, *args, bounds[i], bounds[i + 1]) for i in range(1, parts)]
    try:
        kernel(*args, bounds[0], bounds[1])
    finally:
        for f in others:
            f.result()
