"""Keep the server's C heap from growing under many clients at once (issue 25 #6).

Why: `accelstub serve` runs one thread per connection (and a writer thread per telnet/Tcl
connection) and handles requests of up to megabytes (4 MiB Tcl lines, 1 MiB telnet lines,
64 KiB memory reads hex-encoded, the device's layer arrays). glibc's malloc serves a buffer of
128 KiB or more with mmap and returns it to the system when freed, but it then raises that
threshold to the freed buffer's size (up to 32 MiB): from there on, multi-megabyte buffers come
from the per-thread heaps (up to 8 per core), and a heap whose top still holds a small live
object keeps the freed megabytes. Measured with benchmarks/soak_ports.py --fuzz (all four client
kinds at once, two cores): RSS grew 238 -> 368 MiB in 60 s on max78000 and reached 1.2 GiB on
nvdla; no Python object grew (tracemalloc: a few MiB). Each client kind alone used one or two
threads, so one heap reused its own holes and stayed flat.

Setting the threshold explicitly turns glibc's adjustment off: buffers of :data:`MMAP_THRESHOLD`
or more always go to mmap and back to the system when freed, so the heaps hold only smaller
objects. 1 MiB keeps the common large buffers (64 KiB reads, their 128 KiB hex) in the heaps, where
reusing them costs no page faults; a reset-and-run of each demo took the same time either way.
"""
from __future__ import annotations

import ctypes
import ctypes.util

#: glibc's mallopt parameter number for the mmap threshold (malloc.h M_MMAP_THRESHOLD)
M_MMAP_THRESHOLD = -3
#: bytes from which a buffer is mmapped (and unmapped when freed)
MMAP_THRESHOLD = 1 << 20


def _libc():
    """The C library when it has glibc's mallopt, else None (macOS, Windows, musl)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        _ = libc.gnu_get_libc_version  # glibc only: another libc's mallopt means other numbers
        return libc
    except (OSError, AttributeError):
        return None


def pin_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for this process (see the module
    docstring for why); True if set, False where the C library is not glibc."""
    libc = _libc()
    if libc is None:
        return False
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))
