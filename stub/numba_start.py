"""Starting numba without the optional packages it probes and our kernels never use.

Why: `import numba` and its first kernel load import three optional packages only to learn
whether they are there: SciPy (a version check in numba's ``__init__``, and the BLAS probe for
``np.dot`` of floats, emu/jit.py ``load_numba_without_scipy``), PyYAML (numba.core.config,
only to read a ``.numba_config.yaml`` in the working folder) and cffi with pycparser
(numba.core.typing.cffi_utils, for jitted calls of cffi functions). No kernel of ours calls
BLAS or a cffi function, and together they were ~60-90 ms of every warm `accelstub run` (on the
shared machine, issue 31 #5). Hidden while numba starts, each is absent to numba for this
process only: a ``.numba_config.yaml`` in the working folder keeps PyYAML, and a package
imported before (a test run, a notebook) is left alone. Here and not in emu/: importing
accelstub.emu imports numba (kernel_cache.py), and this must run before the first `import numba`.
"""
from __future__ import annotations

import contextlib
import gc
import importlib
import os
import sys
from collections.abc import Iterator

#: what imports numba (and sets its cache folder), then numba's module that probes cffi
_PROBING = ("accelstub.emu.jit", "numba.core.typing.cffi_utils")


def start_numba_lean() -> None:
    """Import numba (and its cffi probe) with SciPy, cffi and (unless numba has a config file
    to read) PyYAML hidden, numba's BLAS probe without SciPy (emu/jit.py) and its
    implementation registry; a numba imported before gets only the latter two.

    The registry (``cpu_target.target_context.refresh``, ~0.15 s and tens of thousands of
    long-lived objects) is what numba loads with the first kernel it compiles or takes from
    the cache: every command that calls this runs a kernel. Loaded here it is built under the
    collector pause and frozen with the rest, not in the kernel plan or the run where the
    collector is on (issue 31 #5)."""
    hide = [] if "numba" in sys.modules else ["scipy", "cffi"]
    if hide and not os.path.isfile(os.path.join(os.getcwd(), ".numba_config.yaml")):
        hide.append("yaml")
    hide = [m for m in hide if m not in sys.modules]  # imported already: numba sees it
    for m in hide:
        sys.modules[m] = None  # type: ignore[assignment]  # its import fails at once
    try:
        with collector_paused():  # numba's registries: long-lived, never garbage
            for m in _PROBING:
                importlib.import_module(m)
            from accelstub.emu.jit import load_numba_without_scipy

            load_numba_without_scipy()
            from numba.core.registry import cpu_target

            cpu_target.target_context.refresh()
    finally:
        for m in hide:
            del sys.modules[m]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Start-up with CPython's cyclic garbage collector paused, then every object alive frozen.

    Why: a run's start-up (numba's typing and lowering registries, the cached kernels, the
    device's description and register tables) builds ~100 000 objects that live as long as the
    process and are never garbage. CPython's generational collector walked all of them in each
    full collection (~30 ms each: two during a warm MAX78000 demo run, and one more at the
    interpreter's exit, ~0.13 s CPU alone), and young collections on top: a warm demo run
    took ~0.3 s CPU less without them (issue 31 #5). Paused, nothing is collected while they
    are built; frozen (``gc.freeze``: every object tracked now, moved to the permanent
    generation), later collections and the one at exit skip them. Not for code that compiles
    kernels (numba's compile garbage must be collected): what is garbage at the freeze is
    never freed. The collector is on again afterwards if it was on before, so the cyclic
    garbage of the run itself (and of a test process calling the CLI) is collected as usual."""
    with collector_off():
        try:
            yield
        finally:
            gc.freeze()


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """CPython's cyclic collector off inside, on again afterwards if it was on: for
    :func:`collector_paused`, and for `accelstub compile`'s child and worker
    (stub/precompile.py), whose compile garbage is freed as they end, right after the queue:
    collecting it cost CPU both processes spent before their end (at CPython's threshold ~0.7 s
    CPU each in ~1 000 collections, ~0.35-0.45 s each at :data:`COMPILING_GEN0`, ~0 off), for
    ~50-90 MiB more peak memory per process (270-290 MiB instead of 190-245 MiB, issue 31 #5).
    Not for a run that compiles and lives on: that one has :func:`collector_for_compiling`."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


#: the collector's first-generation threshold while kernels may compile (CPython's is 700)
COMPILING_GEN0 = 20_000


@contextlib.contextmanager
def collector_for_compiling() -> Iterator[None]:
    """The collector on, with a first generation of :data:`COMPILING_GEN0` objects, restored
    afterwards. Why: numba's compile makes cyclic garbage (its IR, typing and lowering
    objects), so the collector must run while a first run compiles, but at CPython's 700 it
    ran ~190-310 young collections and 15-26 middle ones, which promoted enough to set off full
    collections of everything alive: ~0.1-0.15 s CPU of an Ethos-U85 or NVDLA first run;
    ~0.03 s with this threshold, for ~4 MiB more peak memory (issue 31 #5). A forked compile
    worker (emu/kernel_plan.py) inherits it."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], COMPILING_GEN0), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
