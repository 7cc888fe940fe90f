"""Sixteen-lane int32 vectors and the VNNI byte dot product for numba kernels.

Why: ``vpdpbusd`` (AVX-512 VNNI) multiplies four unsigned bytes by four signed bytes and adds
the four products into one int32 lane: 64 multiply-adds per instruction on a 512-bit register,
four times a float32 FMA and twice ``vpmaddwd`` (``emu/conv/simd.py``). LLVM does not select it
from plain IR inside a register-blocked kernel, so :func:`zdot` calls the intrinsic
``llvm.x86.avx512.vpdpbusd.512`` and loads the signed operand as a broadcast word, which the
backend folds into the instruction (``vpdpbusd (mem){1to16}, zmm, zmm``).

Exactness: a lane's four products sum to at most 4 * 255 * 128 < 2**17 in magnitude and the sum
into the lane wraps modulo 2**32 (``vpdpbusd``, not the saturating ``vpdpbusds``), so a kernel
built from it computes every sum exactly modulo 2**32, whatever the number of terms.

The instructions exist only where :data:`HAVE_VNNI` is true: kernels using :func:`zdot` or
:func:`zdotv` must not be compiled (called) elsewhere (LLVM cannot select the intrinsic without
the feature). The others (loads, stores, splats, lane-wise arithmetic) are plain LLVM vector IR,
lowered to whatever vectors the CPU has, so any kernel may use them.

Only used with 1-D C-contiguous arrays (int32 words but for :func:`zload`, which also reads 8-
and 16-bit integers); a word holds four bytes, byte ``b`` the channel ``4q + b`` (little
endian, as ``ndarray.view(np.uint8)`` sees it).
"""
from __future__ import annotations

import os

from llvmlite import ir
from numba import config, types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

_I32 = ir.IntType(32)
_V16 = ir.VectorType(_I32, 16)
_DPBUSD = "llvm.x86.avx512.vpdpbusd.512"


def _vnni_available() -> bool:
    """The CPU numba compiles for has AVX-512 VNNI (and F/BW for the 512-bit registers).
    ``ACCELSTUB_VNNI=0`` turns the kernel off (the int16 kernel runs everywhere)."""
    if os.environ.get("ACCELSTUB_VNNI", "1") == "0":
        return False
    name = (config.CPU_NAME or "host").lower()
    if name == "host":
        import llvmlite.binding as llvm

        try:
            feats = llvm.get_host_cpu_features()
        except RuntimeError:  # the host's features are unknown
            return False
        have = {k for k, v in feats.items() if v}
    else:  # NUMBA_CPU_NAME / NUMBA_CPU_FEATURES name a target (a portable cache): its features
        have = {f[1:] for f in (config.CPU_FEATURES or "").split(",") if f.startswith("+")}
    return {"avx512f", "avx512bw", "avx512vnni"} <= have


#: whether the kernels of this module may run on this machine (read once at import)
HAVE_VNNI = _vnni_available()


class I32x16Type(types.Type):
    """Sixteen int32 lanes held in one vector register."""

    def __init__(self) -> None:
        super().__init__(name="I32x16")


i32x16 = I32x16Type()


@register_model(I32x16Type)
class _I32x16Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _V16)


def _is_words(arr) -> bool:
    return isinstance(arr, types.Array) and arr.dtype == types.int32 and arr.ndim == 1 \
        and arr.layout == "C"


def _address(context, builder, arrty, arr, idx):
    data = context.make_array(arrty)(context, builder, arr).data
    return builder.gep(data, [idx])


def _splat(builder, s):
    v = builder.insert_element(ir.Constant(_V16, ir.Undefined), s, ir.Constant(_I32, 0))
    return builder.shuffle_vector(v, ir.Constant(_V16, ir.Undefined), ir.Constant(_V16, None))


@intrinsic
def zsplat(typingctx, arr, idx):
    """arr[idx] in every lane."""
    if not (_is_words(arr) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        p = _address(context, builder, signature.args[0], args[0], args[1])
        return _splat(builder, builder.load(p, align=4))
    return i32x16(arr, idx), codegen


@intrinsic
def zload(typingctx, arr, idx):
    """arr[idx:idx+16] (no bounds check: callers size their arrays); 8- and 16-bit integers
    extended to int32 as their type says (sign or zero)."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C"
            and isinstance(arr.dtype, types.Integer) and arr.dtype.bitwidth in (8, 16, 32)
            and isinstance(idx, types.Integer)):
        return None
    bits, signed = arr.dtype.bitwidth, arr.dtype.signed

    def codegen(context, builder, signature, args):
        p = _address(context, builder, signature.args[0], args[0], args[1])
        vt = ir.VectorType(ir.IntType(bits), 16)
        v = builder.load(builder.bitcast(p, vt.as_pointer()), align=bits // 8)
        if bits == 32:
            return v
        return builder.sext(v, _V16) if signed else builder.zext(v, _V16)
    return i32x16(arr, idx), codegen


def _lanewise(op: str, doc: str):
    @intrinsic
    def f(typingctx, a, b):
        if not (a == i32x16 and b == i32x16):
            return None

        def codegen(context, builder, signature, args):
            return getattr(builder, op)(args[0], args[1])
        return i32x16(a, b), codegen
    f.__doc__ = doc
    return f


zadd = _lanewise("add", "a + b per lane (wraps modulo 2**32).")
zsub = _lanewise("sub", "a - b per lane (wraps modulo 2**32).")
zmul = _lanewise("mul", "a * b per lane, the low 32 bits (wraps modulo 2**32).")


@intrinsic
def zstore(typingctx, arr, idx, v):
    """arr[idx:idx+16] = v."""
    if not (_is_words(arr) and isinstance(idx, types.Integer) and v == i32x16):
        return None

    def codegen(context, builder, signature, args):
        p = _address(context, builder, signature.args[0], args[0], args[1])
        builder.store(args[2], builder.bitcast(p, _V16.as_pointer()), align=4)
        return context.get_dummy_value()
    return types.void(arr, idx, v), codegen


@intrinsic
def zdot(typingctx, acc, x, arr, idx):
    """acc + per lane the sum over bytes b of u8(x, b) * s8(arr[idx], b) (``vpdpbusd`` with the
    word arr[idx] broadcast; wraps modulo 2**32)."""
    if not (acc == i32x16 and x == i32x16 and _is_words(arr) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        p = _address(context, builder, signature.args[2], args[2], args[3])
        w = _splat(builder, builder.load(p, align=4))
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V16, [_V16] * 3),
                                            _DPBUSD)
        return builder.call(fn, [args[0], args[1], w])
    return i32x16(acc, x, arr, idx), codegen


@intrinsic
def zbroadcast(typingctx, s):
    """The integer ``s``, as an int32 (truncated), in every lane."""
    if not isinstance(s, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        v = args[0]
        if v.type.width != 32:
            v = builder.trunc(v, _I32) if v.type.width > 32 else builder.sext(v, _I32)
        return _splat(builder, v)
    return i32x16(s), codegen


@intrinsic
def zdotv(typingctx, acc, u, s):
    """acc + per lane the sum over bytes b of u8(u, b) * s8(s, b) (``vpdpbusd`` of two
    registers; wraps modulo 2**32)."""
    if not (acc == i32x16 and u == i32x16 and s == i32x16):
        return None

    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V16, [_V16] * 3),
                                            _DPBUSD)
        return builder.call(fn, list(args))
    return i32x16(acc, u, s), codegen


_V8 = ir.VectorType(_I32, 8)


@intrinsic
def zstore_t8(typingctx, arr, idx, step, a0, a1, a2, a3, a4, a5, a6, a7):
    """The 8 x 16 block transposed: arr[idx + p*step + m] = lane p of a<m> for p < 16, m < 8
    (channels-last stores of 8 channels x 16 columns, as 16 eight-lane stores; the shuffles
    are LLVM's)."""
    vs = (a0, a1, a2, a3, a4, a5, a6, a7)
    if not (_is_words(arr) and isinstance(idx, types.Integer)
            and isinstance(step, types.Integer) and all(v == i32x16 for v in vs)):
        return None

    def codegen(context, builder, signature, args):
        arr_, idx_, step_ = args[:3]
        regs = args[3:]
        # the 8 registers concatenated (128 lanes), then one shuffle per output column
        cat01 = [builder.shuffle_vector(regs[2 * i], regs[2 * i + 1],
                                        ir.Constant(ir.VectorType(_I32, 32), list(range(32))))
                 for i in range(4)]
        cat0123 = [builder.shuffle_vector(cat01[2 * i], cat01[2 * i + 1],
                                          ir.Constant(ir.VectorType(_I32, 64), list(range(64))))
                   for i in range(2)]
        whole = builder.shuffle_vector(cat0123[0], cat0123[1],
                                       ir.Constant(ir.VectorType(_I32, 128), list(range(128))))
        for p in range(16):
            col = builder.shuffle_vector(whole, ir.Constant(whole.type, ir.Undefined),
                                         ir.Constant(_V8, [16 * m + p for m in range(8)]))
            off = builder.add(idx_, builder.mul(step_, ir.Constant(step_.type, p)))
            ptr = _address(context, builder, signature.args[0], arr_, off)
            builder.store(col, builder.bitcast(ptr, _V8.as_pointer()), align=4)
        return context.get_dummy_value()
    return types.void(arr, idx, step, a0, a1, a2, a3, a4, a5, a6, a7), codegen
