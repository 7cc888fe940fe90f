"""Work arrays reused by later calls in the same thread.

Why: a fresh multi-megabyte array costs a page fault per 4 KiB on first touch (measured: 1.5 ms
of a 4.5 ms 64->64 MAX78000 layer), more than filling it.
"""
from __future__ import annotations

import math
import threading

import numpy as np

_LOCAL = threading.local()


def scratch(key: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape``, the same memory for the same key in
    the same thread: its content is valid until that thread's next call with the key."""
    bufs = _LOCAL.__dict__.setdefault("bufs", {})
    size = math.prod(shape)
    buf = bufs.get(key)
    if buf is None or buf.size < size or buf.dtype != dtype:
        buf = bufs[key] = np.empty(size, dtype=dtype)
    return buf[:size].reshape(shape)
