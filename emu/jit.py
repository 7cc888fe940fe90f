"""``njit`` for the emulator's kernels: numba's, except that a kernel called from another kernel
is compiled for the types of its arguments, never for the constants a caller passes.

Why: numba types a constant argument of a call between jitted functions as a literal
(``sign_extend(v, 16)`` passes ``Literal[int](16)``) and compiles the callee once per distinct
constant, each a full compile: the Ethos-U85 demo's first run compiled the weight decoder's
``_bits`` six times, ``sign_extend`` three, ``finish`` and its callees twice. Compiled for
``int64`` instead, each callee compiles once; LLVM still sees the constant once it inlines the
callee into its caller, so the machine code is the same. Measured on the Ethos-U85 demo's first
run: 14.1 s -> 12.5 s CPU. No kernel of ours asks numba for literal types (``literally``).
"""
from __future__ import annotations

import types as types_
from collections.abc import Callable

import numpy as np
from numba import njit as _numba_njit
from numba.core import types
from numba.core.dispatcher import Dispatcher
from numba.core.errors import NumbaNotImplementedError
from numba.np import numpy_support


def _nonliteral(dispatcher):
    """``dispatcher``, whose calls from other jitted code are typed without literals: numba
    resolves such a call through the dispatcher's ``get_call_template``, which compiles the
    callee for the argument types it is given."""
    typed = dispatcher.get_call_template

    def get_call_template(args, kws):
        return typed(tuple(types.unliteral(a) for a in args),
                     {k: types.unliteral(v) for k, v in kws.items()})

    dispatcher.get_call_template = get_call_template
    return dispatcher


def argument_type(val: object) -> types.Type | None:
    """numba's type of a plain ndarray argument (``types.Array``: dtype, ndim, layout, read-only
    flag), the one numba's ``typeof`` gives, or None for anything else (other values, ndarray
    subclasses, dtypes numba does not take: ask numba).

    Why: numba's ``typeof`` of an array first asks whether it is a ``numpy.ma.MaskedArray``,
    and numpy imports ``numpy.ma`` on that first use (~7 ms of a warm ``accelstub run``,
    issue 31 #5); a plain ndarray never is one."""
    if type(val) is not np.ndarray:
        return None
    try:
        dtype = numpy_support.from_dtype(val.dtype)
    except NumbaNotImplementedError:
        return None
    return types.Array(dtype, val.ndim, numpy_support.map_layout(val),
                       readonly=not val.flags.writeable)


def _ndarray_typeof(dispatcher):
    """``dispatcher``, which types plain ndarray arguments by :func:`argument_type`. Why: numba's
    C dispatcher types writeable aligned arrays itself and passes the others (our read-only
    inputs, int_conv.read_only) to ``typeof_pyval`` once per layout, whose ``typeof`` would
    import ``numpy.ma``."""
    typed = dispatcher.typeof_pyval

    def typeof_pyval(val):
        tp = argument_type(val)
        if tp is None:
            return typed(val)
        dispatcher._types_active_call.add(tp)  # as numba's typeof_pyval records it
        return tp

    dispatcher.typeof_pyval = typeof_pyval
    return dispatcher


#: every kernel made by :func:`njit`, by (module, function name): what a compile plan names
#: (emu/kernel_plan.py; a parallel kernel's serial twin is ``<name>_serial``, int_conv.twin)
KERNELS: dict[tuple[str, str], object] = {}


def njit(**options) -> Callable:
    """``@njit(nogil=True, cache=True)`` as numba's, for functions of accelstub.emu."""
    compile_ = _numba_njit(**options)

    def make(func):
        dispatcher = _ndarray_typeof(_nonliteral(compile_(func)))
        KERNELS[func.__module__, func.__name__] = dispatcher
        return dispatcher

    return make


_INTERPRETED: dict = {}


def interpreted(dispatcher) -> Callable:
    """``dispatcher``'s Python function run by the interpreter, the kernels it calls by a
    global name interpreted too: the same code, nothing compiled. Why: where a program gives a
    kernel little work, interpreting it costs less than numba's compile on a first run (the
    Ethos-U85 weight decoder: ~1 s to compile, ~0.1 s to interpret the demo's weights; issue 31
    #5). Its integers are numpy's int64 scalars and arrays, which wrap as the kernel's do. A
    kernel reached through a module of accelstub.emu (``P.round_terms``) is interpreted too
    (:class:`_InterpretedModule`): a helper's compile (~0.1-0.3 s each) would cost more than
    the interpreted call it serves."""
    func = dispatcher.py_func
    got = _INTERPRETED.get(func)
    if got is None:
        names = dict(func.__globals__)
        got = _INTERPRETED[func] = types_.FunctionType(func.__code__, names, func.__name__,
                                                       func.__defaults__, func.__closure__)
        for name in func.__code__.co_names:
            value = names.get(name)
            if isinstance(value, Dispatcher):
                names[name] = interpreted(value)
            elif isinstance(value, types_.ModuleType) \
                    and value.__name__.startswith(__package__ + "."):
                names[name] = _InterpretedModule(value)
    return got


class _InterpretedModule:
    """A module of accelstub.emu as an interpreted kernel sees it: its kernels interpreted
    (:func:`interpreted`), everything else as the module has it."""

    def __init__(self, module: types_.ModuleType) -> None:
        self._module = module

    def __getattr__(self, name: str) -> object:
        value = getattr(self._module, name)
        return interpreted(value) if isinstance(value, Dispatcher) else value


def is_nonliteral(dispatcher) -> bool:
    """Whether ``dispatcher`` was made by :func:`njit` (tests check every kernel is)."""
    return getattr(dispatcher.get_call_template, "__qualname__", "").startswith("_nonliteral.")


def load_numba_without_scipy() -> None:
    """Import numba's array implementations now, with SciPy hidden from numba's BLAS probe.

    Why: numba imports them with the first kernel it compiles or loads from the cache, and
    with them ``scipy.linalg.cython_blas``, only to know whether ``np.dot`` of floats in jitted
    code may call BLAS. No kernel of ours does, yet importing SciPy was a quarter of the floor
    under every warm run (0.25 of ~1 s CPU). Without SciPy numba's float inner products are
    plain loops, for this process only; SciPy itself imports as usual afterwards. For
    processes that will run kernels (`accelstub run`, `serve`, ...), not for the ones that
    never call one (the TUI), which would pay the import for nothing."""
    import sys

    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return
    sys.modules["scipy.linalg"] = None  # type: ignore[assignment]  # its import fails at once
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        del sys.modules["scipy.linalg"]
