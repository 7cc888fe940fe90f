"""Eight-lane int32 vectors for numba kernels, written as plain LLVM vector IR.

Why: numba's loop vectoriser turns an int16 dot product into ``vpmaddwd`` only for a single
reduction; with the several accumulators a register-blocked convolution needs it falls back to
widening multiplies (``vpmulld``, a quarter of the throughput). These intrinsics state the
operation directly: :func:`vmadd` is "multiply int16 pairs, add each pair into one int32 lane",
written as sign-extend, multiply, even/odd shuffle and add, which LLVM's x86 backend selects as
one ``vpmaddwd`` on AVX2 (and lowers to ordinary vector code elsewhere: on arm64 NEON ``smull``
and ``addp``, see :data:`NEON_PAIRS`). Every product of two
int16 values and every pair sum is exact in int32 unless both pairs are (-32768)*(-32768), which
callers exclude by keeping one operand above -32768.

Only used with 1-D C-contiguous int32 arrays; a "word" holds two int16 values, the even one in
the low half (little endian, as ``ndarray.view(np.int16)`` sees it).
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic, models, register_model

_I32 = ir.IntType(32)
_V8 = ir.VectorType(_I32, 8)
_V16_I16 = ir.VectorType(ir.IntType(16), 16)
_V16_I32 = ir.VectorType(_I32, 16)
_EVEN = ir.Constant(_V8, list(range(0, 16, 2)))
_ODD = ir.Constant(_V8, list(range(1, 16, 2)))
_V4 = ir.VectorType(_I32, 4)
_QUARTERS = [ir.Constant(_V4, list(range(q, q + 4))) for q in range(0, 16, 4)]
_V4_EVEN, _V4_ODD = ir.Constant(_V4, [0, 2, 4, 6]), ir.Constant(_V4, [1, 3, 5, 7])


def _compiles_for_arm64() -> bool:
    """numba compiles for this process's target (its triple: ``aarch64-...``, ``arm64-...``)."""
    import llvmlite.binding as llvm

    return llvm.get_process_triple().startswith(("aarch64", "arm64"))


#: :func:`vmadd` sums its pairs per 128-bit quarter (read when a kernel compiles). Why: on arm64
#: the whole-vector even/odd shuffles of the x86 form, once LLVM's combiner has seen the
#: broadcast weight word, became NEON ``smull`` + ``uzp1``/``uzp2`` + two ``add`` per 8 products
#: and spilled registers in the int16-pair kernel's inner loop (137 instructions per 128
#: multiply-adds); pairs of 4-lane shuffles stay NEON ``addp`` (pairwise add): 96 instructions,
#: no spill (benchmarks/arm64_codegen.py). Plain LLVM IR, not the ``addp`` intrinsic, so the
#: arm64 form compiles and runs on x86 too (CI checks it there); x86 keeps the whole-vector
#: form, which its backend selects as one ``vpmaddwd`` (the quarter form would not be).
NEON_PAIRS = _compiles_for_arm64()


class I32x8Type(types.Type):
    """Eight int32 lanes held in one vector register."""

    def __init__(self) -> None:
        super().__init__(name="I32x8")


i32x8 = I32x8Type()


@register_model(I32x8Type)
class _I32x8Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _V8)


def _is_words(arr) -> bool:
    return isinstance(arr, types.Array) and arr.dtype == types.int32 and arr.ndim == 1 \
        and arr.layout == "C"


def _address(context, builder, arrty, arr, idx):
    data = context.make_array(arrty)(context, builder, arr).data
    return builder.gep(data, [idx])


@intrinsic
def vzero(typingctx):
    """All lanes 0."""
    def codegen(context, builder, signature, args):
        return ir.Constant(_V8, None)
    return i32x8(), codegen


@intrinsic
def vload(typingctx, arr, idx):
    """arr[idx:idx+8] (no bounds check: callers size their arrays)."""
    if not (_is_words(arr) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        p = _address(context, builder, signature.args[0], args[0], args[1])
        return builder.load(builder.bitcast(p, _V8.as_pointer()), align=4)
    return i32x8(arr, idx), codegen


@intrinsic
def vbcast(typingctx, arr, idx):
    """arr[idx] in every lane."""
    if not (_is_words(arr) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        s = builder.load(_address(context, builder, signature.args[0], args[0], args[1]), align=4)
        v = builder.insert_element(ir.Constant(_V8, ir.Undefined), s, ir.Constant(_I32, 0))
        return builder.shuffle_vector(v, ir.Constant(_V8, ir.Undefined), ir.Constant(_V8, None))
    return i32x8(arr, idx), codegen


@intrinsic
def vmadd(typingctx, acc, x, w):
    """acc + (x.lo16 * w.lo16 + x.hi16 * w.hi16) per lane, products and sums in int32 (the
    accumulation wraps modulo 2**32)."""
    if not (acc == i32x8 and x == i32x8 and w == i32x8):
        return None

    def codegen(context, builder, signature, args):
        a, xv, wv = args
        x32 = builder.sext(builder.bitcast(xv, _V16_I16), _V16_I32)
        w32 = builder.sext(builder.bitcast(wv, _V16_I16), _V16_I32)
        m = builder.mul(x32, w32)
        undef = ir.Constant(_V16_I32, ir.Undefined)
        if NEON_PAIRS:  # words 4h..4h+3 from the products of quarters 2h and 2h+1
            q = [builder.shuffle_vector(m, undef, mask) for mask in _QUARTERS]
            half = [builder.add(builder.shuffle_vector(q[2 * h], q[2 * h + 1], _V4_EVEN),
                                builder.shuffle_vector(q[2 * h], q[2 * h + 1], _V4_ODD))
                    for h in range(2)]
            pairs = builder.shuffle_vector(half[0], half[1], ir.Constant(_V8, list(range(8))))
        else:
            pairs = builder.add(builder.shuffle_vector(m, undef, _EVEN),
                                builder.shuffle_vector(m, undef, _ODD))
        return builder.add(a, pairs)
    return i32x8(acc, x, w), codegen


@intrinsic
def vstore(typingctx, arr, idx, v):
    """arr[idx:idx+8] = v."""
    if not (_is_words(arr) and isinstance(idx, types.Integer) and v == i32x8):
        return None

    def codegen(context, builder, signature, args):
        p = _address(context, builder, signature.args[0], args[0], args[1])
        builder.store(args[2], builder.bitcast(p, _V8.as_pointer()), align=4)
        return context.get_dummy_value()
    return types.void(arr, idx, v), codegen


@intrinsic
def vstore4(typingctx, arr, idx, v):
    """arr[idx:idx+4] = lanes 0..3 of ``v``. Why: a channels-last row of sums whose channel
    count is 4 more than a multiple of 8 ends in half a register; its lanes 4..7 would
    overwrite the next pixel's first channels."""
    if not (_is_words(arr) and isinstance(idx, types.Integer) and v == i32x8):
        return None

    def codegen(context, builder, signature, args):
        p = _address(context, builder, signature.args[0], args[0], args[1])
        low = builder.shuffle_vector(args[2], ir.Constant(_V8, ir.Undefined), _QUARTERS[0])
        builder.store(low, builder.bitcast(p, _V4.as_pointer()), align=4)
        return context.get_dummy_value()
    return types.void(arr, idx, v), codegen


_LO_PAIRS = ir.Constant(_V8, [0, 8, 1, 9, 4, 12, 5, 13])   # unpacklo per 128-bit half
_HI_PAIRS = ir.Constant(_V8, [2, 10, 3, 11, 6, 14, 7, 15])
#: lane p of a, b, c, d as 4 words, from the pair-interleaved (lo or hi) vectors of (a, b)
#: and (c, d): lanes p = 0, 1, 4, 5 from the lo ones, 2, 3, 6, 7 from the hi ones
_COLUMN = {p: ([0, 1, 8, 9], [2, 3, 10, 11], [4, 5, 12, 13], [6, 7, 14, 15])[
    (p % 2) + 2 * (p // 4)] for p in range(8)}


@intrinsic
def vstore_t4(typingctx, arr, idx, stride, a, b, c, d):
    """arr[idx + p*stride : idx + p*stride + 4] = (a[p], b[p], c[p], d[p]) for lanes p = 0..7:
    a block of 4 channels x 8 columns stored channels last (the transpose as pair and quad
    interleaves, 8 shuffles and 8 4-word stores). Why: lane by lane it took 32 extracts and
    scalar stores per block, as many as a 3-channel 3x3 layer's multiply-adds."""
    if not (_is_words(arr) and isinstance(idx, types.Integer)
            and isinstance(stride, types.Integer) and a == b == c == d == i32x8):
        return None

    def codegen(context, builder, signature, args):
        va, vb, vc, vd = args[3:]
        ab = (builder.shuffle_vector(va, vb, _LO_PAIRS), builder.shuffle_vector(va, vb, _HI_PAIRS))
        cd = (builder.shuffle_vector(vc, vd, _LO_PAIRS), builder.shuffle_vector(vc, vd, _HI_PAIRS))
        step = context.cast(builder, args[2], signature.args[2], types.intp)
        at = context.cast(builder, args[1], signature.args[1], types.intp)
        for p in range(8):
            half = (p // 2) % 2  # lanes 2, 3, 6, 7 are in the hi interleaves
            col = builder.shuffle_vector(ab[half], cd[half], ir.Constant(_V4, _COLUMN[p]))
            i = builder.add(at, builder.mul(step, ir.Constant(step.type, p)))
            ptr = _address(context, builder, signature.args[0], args[0], i)
            builder.store(col, builder.bitcast(ptr, _V4.as_pointer()), align=4)
        return context.get_dummy_value()
    return types.void(arr, idx, stride, a, b, c, d), codegen


@intrinsic
def vget(typingctx, v, i):
    """Lane ``i`` of ``v`` (int32)."""
    if not (v == i32x8 and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        return builder.extract_element(args[0], builder.trunc(args[1], _I32)
                                       if args[1].type.width > 32 else args[1])
    return types.int32(v, i), codegen
