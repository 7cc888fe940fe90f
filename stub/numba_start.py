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

import importlib
import os
import sys

#: what imports numba (and sets its cache folder), then numba's module that probes cffi
_PROBING = ("accelstub.emu.jit", "numba.core.typing.cffi_utils")


def start_numba_lean() -> None:
    """Import numba (and its cffi probe) with SciPy, cffi and (unless numba has a config file
    to read) PyYAML hidden, and numba's BLAS probe without SciPy (emu/jit.py); a numba
    imported before gets only the latter."""
    hide = [] if "numba" in sys.modules else ["scipy", "cffi"]
    if hide and not os.path.isfile(os.path.join(os.getcwd(), ".numba_config.yaml")):
        hide.append("yaml")
    hide = [m for m in hide if m not in sys.modules]  # imported already: numba sees it
    for m in hide:
        sys.modules[m] = None  # type: ignore[assignment]  # its import fails at once
    try:
        for m in _PROBING:
            importlib.import_module(m)
        from accelstub.emu.jit import load_numba_without_scipy

        load_numba_without_scipy()
    finally:
        for m in hide:
            del sys.modules[m]
