"""Kernels over a range of their loop, called by thin serial and parallel wrappers through their
address: the one body of a parallel kernel and its serial twin (emu/conv/int_conv.py Twin).

Why: a ``parallel=True`` kernel costs numba's parfor passes on its whole body, about twice the
compile of the same body without them (the byte convolution 1.80 s against 0.95 s, the fast
output stage 1.50 against 0.65, issue 31 #5). Here the body is compiled once, as a serial
kernel over the iterations ``start <= i < stop`` (:func:`ranged`); the serial twin calls it once
over every iteration and the parallel one is a small ``prange`` over chunks, each calling it.
The calls go through the kernel's address (:func:`call_ranged`): a plain call would have numba
link the kernel's code into each wrapper and have LLVM optimise and emit it again there (the
fast output stage's parallel wrapper 0.95 s that way, 0.3 s through the address).

The address is looked up at each call in a small table of the kernel's (argument types, address)
pairs, which this process fills as the kernel gets each compiled signature (compiled or loaded
from numba's disk cache). The wrappers reach the table by a fixed symbol name, registered with
LLVM before any wrapper is compiled or loaded, so a wrapper in the disk cache links in any later
process; a kernel's own symbol name carries a per-process number and could not. A wrapper that
gets a compiled signature has its kernels compiled (or loaded) for the same argument types and
two ``intp`` bounds (:func:`ranged_wrapper`): a kernel takes its wrapper's arguments unchanged,
then ``start`` and ``stop`` (a prologue too: the byte convolution's input packing). A call
whose kernel is missing from the table raises RuntimeError naming it (never a jump to a null
address).
"""
from __future__ import annotations

import hashlib

import llvmlite.binding as ll
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .jit import njit

#: compiled signatures a ranged kernel may have in one process (a table row each)
TABLE_ROWS = 32

#: each ranged kernel's table, by symbol name: int64 [TABLE_ROWS, 2] rows (key, address), key 0
#: a free row; kept for the life of the process (LLVM holds their addresses)
_TABLES: dict[str, np.ndarray] = {}


def _symbol(kernel) -> str:
    """The fixed name of ``kernel``'s table, the same in every process."""
    f = kernel.py_func
    return f"accelstub.ranged.{f.__module__}.{f.__qualname__}"


def _key(args: tuple) -> int:
    """A signature's key in a table: a hash of numba's spelling of the argument types, the
    same in every process (Python's own hash of a string is not), never 0 (a free row)."""
    digest = hashlib.blake2b(str(tuple(args)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True) or 1


def _enter(table: np.ndarray, key: int, address: int, name: str) -> None:
    """Record ``address`` for ``key`` in ``table`` (again: the same row)."""
    for row in range(TABLE_ROWS):
        if table[row, 0] in (0, key):
            table[row, 1] = address
            table[row, 0] = key
            return
    raise RuntimeError(f"ranged kernel {name}: more than {TABLE_ROWS} compiled signatures")


def ranged(func=None, /, **options):
    """``@ranged`` (or ``@ranged(**options)``, more of numba's options: NVDLA's post_process
    has ``fastmath``): ``func`` as a ``@njit(nogil=True, cache=True)`` kernel that
    :func:`call_ranged` can call through its address: its last two arguments are the range of
    iterations it runs (``start``, ``stop``: ``intp``), the others those of the wrappers that call
    it."""
    if func is None:
        return lambda f: ranged(f, **options)
    kernel = njit(nogil=True, cache=True, **options)(func)
    name = _symbol(kernel)
    table = _TABLES.get(name)
    if table is None:  # (a module imported again keeps its table: LLVM has its address)
        table = _TABLES[name] = np.zeros((TABLE_ROWS, 2), np.int64)
        ll.add_symbol(name, table.ctypes.data)
    add_overload = kernel.add_overload

    def add_and_enter(cres) -> None:
        add_overload(cres)
        _enter(table, _key(cres.signature.args),
               cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name), name)

    kernel.add_overload = add_and_enter
    return kernel


def ranged_wrapper(*kernels, **options):
    """``@ranged_wrapper(kernel, ..., **options)``: numba's ``njit(**options)`` (the emulator's,
    emu/jit.py) of a wrapper that calls the :func:`ranged` ``kernels`` with its own arguments
    and a range: each signature the wrapper gets (compiled, or loaded from the disk cache,
    whose code does not compile the kernels), the kernels get too, so the wrapper's calls find
    them in their tables."""
    def make(func):
        wrapper = njit(**options)(func)
        add_overload = wrapper.add_overload

        def add_with_kernels(cres) -> None:
            for kernel in kernels:
                kernel.compile(tuple(cres.signature.args) + (types.intp, types.intp))
            add_overload(cres)

        wrapper.add_overload = add_with_kernels
        wrapper.ranged_kernels = kernels  # (what tests check)
        return wrapper

    return make


@intrinsic
def call_ranged(typingctx, kernel, args):
    """``kernel(*args)`` for a :func:`ranged` ``kernel`` (a global), through the address its
    table holds for the argument types (the last two, the range, as ``intp``: a ``prange``
    index is unsigned). Compiles the kernel for them as it types the call, as a plain call
    would, but links none of its code into the caller."""
    if not (isinstance(kernel, types.Dispatcher) and isinstance(args, types.BaseTuple)):
        return None
    argtys = tuple(types.unliteral(a) for a in args)
    argtys = argtys[:-2] + (types.intp, types.intp)
    disp = kernel.dispatcher
    disp.compile(argtys)
    sig = disp.overloads[argtys].signature
    name, key = _symbol(disp), _key(argtys)

    def codegen(context, builder, call_sig, values):
        i64 = ir.IntType(64)
        try:
            table = builder.module.get_global(name)
        except KeyError:
            table = ir.GlobalVariable(builder.module, ir.ArrayType(i64, 2 * TABLE_ROWS), name)
            table.linkage = "external"
        rows = builder.bitcast(table, i64.as_pointer())
        found = cgutils.alloca_once_value(builder, i64(0))
        with cgutils.for_range(builder, i64(TABLE_ROWS)) as loop:
            at = builder.mul(loop.index, i64(2))
            hit = builder.icmp_signed("==", builder.load(builder.gep(rows, [at])), i64(key))
            with builder.if_then(hit):
                builder.store(builder.load(builder.gep(rows, [builder.add(at, i64(1))])),
                              found)
        addr = builder.load(found)
        cc = context.call_conv
        with cgutils.if_unlikely(builder, cgutils.is_null(builder, addr)):
            cc.return_user_exc(builder, RuntimeError,
                               (f"{name}: not compiled for {argtys} in this process",))
        fnty = cc.get_function_type(sig.return_type, sig.args)
        items = [context.cast(builder, v, t0, t1) for v, t0, t1 in zip(
            cgutils.unpack_tuple(builder, values[1], len(argtys)), args, argtys)]
        status, res = cc.call_function(builder, builder.inttoptr(addr, fnty.as_pointer()),
                                       sig.return_type, sig.args, items)
        with cgutils.if_unlikely(builder, status.is_error):
            cc.return_status_propagate(builder, status)
        return res

    return sig.return_type(kernel, args), codegen
