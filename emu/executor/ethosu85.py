"""One compiled call for a run of Ethos-U85 operations replayed from a block (issue 32 #1).

No device knowledge: the caller hands an operation table (int64 rows, layout below), the
strided boxes of the tensors (:data:`BOX_COLUMNS`), the stream checks, the memories as byte
arrays and the constants in concatenated buffers; :func:`run_rows` reads the IFMs from and
writes the OFMs into the memories directly and calls the existing kernels (the byte kernel
and the pointwise byte kernel (serial), or where the CPU has none the int16-pair kernel
(serial) or, where conv_sums takes it, Winograd F(2x2, 3x3), the depthwise kernel, the fast
output stage (serial), the add/sub body), the same calls with the same arguments the Python
path makes, so the bytes written are the same (a serial twin computes what its parallel
kernel does). It reaches them through their addresses (:data:`SLOTS`), an argument, rather
than linking their code.

A tensor is a list of boxes of one byte per element (int8/uint8): element (y, x, c) of a box
holding channels [c0, c0 + n) is at ``offset + y*sy + x*sx + ((c-c0)//16)*sc + (c-c0)%16``
of its memory (NHWC: sc = 16; an NHCWB16 brick box: sx the brick's 16, sc the brick stride),
element_address_in_region's addresses [U85-TRM: §3.6.5] as the device's box views have them.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.core.errors import TypingError
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic
from numba.np.arrayobj import populate_array

from ..conv import ethosu85 as CE
from ..conv import int_conv as IC
from ..conv import winograd as WG
from ..conv.vnni import HAVE_VNNI
from ..eltwise import ethosu85 as EE
from ..jit import njit
from ..pool import ethosu85 as PK


def _a(dtype, ndim: int, readonly: bool = False, layout: str = "C") -> types.Array:
    return types.Array(dtype, ndim, layout, readonly=readonly)


_I, _I32, _B = types.int64, types.int32, types.boolean
_FINISH = (_a(_I32, 3), _a(_I, 1, True), _a(_I, 1, True), _a(_I, 2))

@intrinsic
def _move(typingctx, dst, d, src, s, n):
    """dst[d:d+n] = src[s:s+n] of two byte arrays as one llvm.memmove (the caller keeps both
    in bounds). Why: numba's byte loops (any form: element by element, 16 at a time,
    unsigned indices, slices) moved 0.3-1.7 ns a byte, 10-70x numpy's copy; the memory's
    tensors are a few 16-byte runs per pixel."""
    def codegen(context, builder, sig, args):
        da, do, sa, so, nn = args
        dp = builder.gep(context.make_array(sig.args[0])(context, builder, da).data, [do])
        sp = builder.gep(context.make_array(sig.args[2])(context, builder, sa).data, [so])
        cgutils.raw_memmove(builder, dp, sp, nn, 1)
        return context.get_dummy_value()
    return types.void(dst, types.int64, src, types.int64, types.int64), codegen


@njit(nogil=True, cache=True)
def _tensor(mems, boxes, b0, nb, rows, cols, cmax, buf, pix, store):
    """Between a tensor's boxes ``b0`` .. ``b0+nb`` and ``buf`` (byte (y, x, c) at
    ``(y*cols + x)*pix + c``), for y < rows, x < cols, c < cmax: read into ``buf``, or
    (``store``) written from it. One function for both ways: each compiled function costs
    ~0.3 s of a first compile."""
    for b in range(b0, b0 + nb):
        mem = mems[boxes[b, 0]]
        off, c0, n = boxes[b, 1], boxes[b, 2], boxes[b, 3]
        sy, sx, sc = boxes[b, 4], boxes[b, 5], boxes[b, 6]
        n = min(n, cmax - c0)
        if n <= 0:
            continue
        whole_rows = sc == 16 and sx == n and pix == n  # NHWC rows as they are
        for y in range(rows):
            for j in range(0, n if not whole_rows else 1, 16):
                m = cols * n if whole_rows else min(16, n - j)
                at = off + y * sy + (j // 16) * sc
                d = y * cols * pix + c0 + j
                if not whole_rows and sx == m and pix == m:
                    # a brick's pixels back to back in memory and in ``buf`` (16 channels of
                    # NHCWB16 [U85-TRM: §3.6.5]): the row's pixels in one move, not one each
                    if store:
                        _move(mem, at, buf, d, cols * m)
                    else:
                        _move(buf, d, mem, at, cols * m)
                    continue
                for x in range(1 if whole_rows else cols):
                    if store:
                        _move(mem, at + x * sx, buf, d + x * pix, m)
                    else:
                        _move(buf, d + x * pix, mem, at + x * sx, m)


@njit(nogil=True, cache=True)
def _values(xw, rh, rw, rc, size, signed, zp, v, H, W, K):
    """read_ifm's values [U85-TRM: §3.6.5] as values_minus gives them, from the [rh, rw, rc]
    tensor of ``size``-byte little-endian integers in ``xw``: as the type reads them, minus
    the zero point, into ``v`` as [H, W, K]; an axis of extent 1 read at coordinate 0 (a
    broadcast axis, eltwise _broadcast). Strides of 0 for those axes and the sign by
    ``(e ^ h) - h`` (h the top bit: two's complement of ``size`` bytes, size <= 4) rather than
    per-element conditions: LLVM made ~4900 lines of IR of those, ~960 of this (0.79 -> 0.54 s
    to compile, and less for run_rows to link; issue 31 #5)."""
    sy = 0 if rh == 1 else rw * rc * size
    sx = 0 if rw == 1 else rc * size
    sc = 0 if rc == 1 else size
    h = (np.int64(1) << (8 * size - 1)) if signed else np.int64(0)
    i = 0
    for y in range(H):
        for x in range(W):
            j = y * sy + x * sx
            for _ in range(K):
                e = np.int64(0)
                for b in range(size):
                    e |= np.int64(xw[j + b]) << (8 * b)
                v[i] = ((e ^ h) - h) - zp
                i += 1
                j += sc


#: memories a table may refer to (:func:`memories`)
MEMORIES = 8


#: the kernels the rows call, each through its address (:func:`_call`), by slot: the
#: signature :func:`run_rows` calls it with, then the kernel of each variant (byte kernels
#: (VNNI), int16-pair kernel; None: that variant makes no such rows, its address is 0 and a
#: call raises AssertionError). Why not a plain call: numba links a callee's code into its
#: caller and has LLVM optimise and emit it all again with the caller; with these kernels
#: linked, run_rows took ~2.6 s more CPU to compile (issue 32 #3), for calls that cost a few
#: ns each at run time (a row takes 1-80 us). The signatures are checked where they are used:
#: the typing of a call whose argument types differ fails (:func:`_call`), and
#: :func:`addresses` compiles each kernel for exactly its signature and checks its result type.
SLOTS = (
    (types.none(_a(_I32, 1, True), _I32, *[_a(_I32, 1)] * 3, _I, _I, _I),
     IC._pointwise8, None),
    (types.none(_a(_I32, 3, True), _I, _I, _I, _I, _a(_I, 1), _a(_I32, 1), _a(_I32, 1),
                _a(_I, 1), _a(_I32, 1), *[_I] * 9, _a(_I, 1), _a(_I, 1), _B),
     IC._VNNI_CONV_TWIN.serial, None),
    (types.none(_a(types.int8, 3, True, "A"), _I, _I, _I, _a(_I, 1), _B, _a(types.int16, 4)),
     None, IC._PACK_INPUT_TWIN.serial),
    (types.none(*[_a(_I32, 1)] * 3, *[_I] * 9, _a(_I, 1), _a(_I, 1), _B),
     None, IC._CONV_BLOCKS_TWIN.serial),
    (types.none(_a(types.int8, 3, True), _I32, _a(_I32, 3), _a(_I32, 3), *[_I] * 6),
     IC._depthwise_pixels, IC._depthwise_pixels),
    (types.none(*_FINISH, _a(types.int8, 3)), CE._FINISH_FAST_TWIN.serial,
     CE._FINISH_FAST_TWIN.serial),  # every OFM type as its bytes (one signature, issue 31 #5)
    (types.none(*[_a(_I, 3)] * 2, _B, _a(_I, 1), _a(_I, 1), _a(_I, 3)), EE._addsub_fast,
     EE._addsub_fast),
    (_a(_I, 3)(*[_a(_I, 3)] * 2, _a(_I, 1), _a(_I, 1), _a(types.uint8, 1)), EE._ew_kernel,
     EE._ew_kernel),
    (_a(_I, 3)(*[_a(_I, 3)] * 2, *[_a(_I, 1)] * 5, _a(types.uint8, 1)), PK._pool_kernel,
     PK._pool_kernel),
    (types.none(_a(types.int8, 1, True), _I32, _I, _I, _a(types.int16, 1)),
     None, IC._pack_pixels),
    (types.none(*[_a(_I32, 1)] * 3, *[_I] * 5), None, IC._pointwise16),
    # run_rows' own helpers: linked in, they were compiled in its typing, then optimised again
    # with it (run_rows ~4.7 s CPU with them, ~3.5 s without; they ~0.6 s apart): through their
    # addresses they are queue jobs of their own, compiled once (issue 31 #5)
    (types.none(types.UniTuple(_a(types.uint8, 1), MEMORIES), _a(_I, 2), *[_I] * 5,
                _a(types.uint8, 1), _I, _B), _tensor, _tensor),
    (types.none(_a(types.uint8, 1), *[_I] * 4, _B, _I, _a(_I, 1), _I, _I, _I), _values,
     _values),
)
(F_POINTWISE, F_CONV, F_PACK16, F_CONV16, F_DEPTHWISE, F_FINISH, F_ADDSUB, F_EW,
 F_POOL, F_PACK_PIXELS, F_POINTWISE16, F_TENSOR, F_VALUES) = range(len(SLOTS))
#: the parallel twins of the convolution kernels and the output stage, same signatures: a
#: row whose work is at or above int_conv.SERIAL_WORK (the rule int_conv's launches take,
#: :class:`IC.parallel`; the table sets K_PAR / K_PAR_FINISH) calls these, as the
#: per-operation path does; MobileNet's small rows stay serial (issue 31 #1)
SLOTS += ((SLOTS[F_CONV][0], IC._VNNI_CONV_TWIN.parallel, None),
          (SLOTS[F_PACK16][0], None, IC._PACK_INPUT_TWIN.parallel),
          (SLOTS[F_CONV16][0], None, IC._CONV_BLOCKS_TWIN.parallel),
          (SLOTS[F_FINISH][0], CE._FINISH_FAST_TWIN.parallel, CE._FINISH_FAST_TWIN.parallel))
F_CONV_PAR, F_PACK16_PAR, F_CONV16_PAR, F_FINISH_PAR = range(F_VALUES + 1, len(SLOTS))
#: the Winograd F(2x2, 3x3) kernels (emu/conv/winograd.py: _wino_input, then _wino_gemm or
#: its parallel twin) a CONV16 row calls instead of the int16-pair kernels where
#: int_conv.winograd_for says conv_sums runs them (K_C16_WINO; the int16 variant only).
#: Resolved only for a table with such a row (:func:`addresses`' ``winograd``), so no other
#: table compiles them; not in :func:`kernel_entries`: they compile on first use, as
#: conv_sums' do (design notes, "Exact integer Winograd", "Wired")
SLOTS += ((types.none(_a(types.int8, 3, True), _I32, *[_I] * 4, _a(types.int16, 3)),
           None, WG._wino_input),
          (types.none(_a(types.int16, 1), *[_a(_I32, 1)] * 2, *[_I] * 6, _B, _I),
           None, WG._WINO_GEMM_TWIN.serial))
SLOTS += ((SLOTS[-1][0], None, WG._WINO_GEMM_TWIN.parallel),)
F_WINO_INPUT, F_WINO_GEMM, F_WINO_GEMM_PAR = range(F_FINISH_PAR + 1, len(SLOTS))
WINO_SLOTS = (F_WINO_INPUT, F_WINO_GEMM, F_WINO_GEMM_PAR)
#: each serial slot's parallel one
PAR_SLOTS = {F_CONV: F_CONV_PAR, F_PACK16: F_PACK16_PAR, F_CONV16: F_CONV16_PAR,
             F_FINISH: F_FINISH_PAR, F_WINO_GEMM: F_WINO_GEMM_PAR}


@intrinsic(prefer_literal=True)
def _call(typingctx, fps, slot, args):
    """The kernel of slot ``slot`` (a constant, :data:`SLOTS`) called with the tuple ``args``
    through its address ``fps[slot]``, in numba's own calling convention (an exception it
    raises propagates as from a plain call); address 0 (no such kernel in this machine's
    variant) raises AssertionError."""
    if not isinstance(slot, types.IntegerLiteral):
        return None  # (numba tries the literal first: the slot must be a constant)
    sig = SLOTS[slot.literal_value][0]
    got = tuple(types.unliteral(t) for t in args)
    if got != sig.args:
        raise TypingError(f"_call: slot {slot.literal_value} takes {sig.args}, not {got}")

    def codegen(context, builder, call_sig, values):
        cc = context.call_conv
        table = context.make_array(call_sig.args[0])(context, builder, values[0])
        fnty = cc.get_function_type(sig.return_type, sig.args)
        addr = builder.load(builder.gep(table.data, [context.get_constant(types.intp,
                                                                          slot.literal_value)]))
        with cgutils.if_unlikely(builder, cgutils.is_null(builder, addr)):
            cc.return_user_exc(builder, AssertionError,
                               (f"executor: slot {slot.literal_value} has no kernel here",))
        fn = builder.inttoptr(addr, fnty.as_pointer())
        items = [context.cast(builder, v, t0, t1) for v, t0, t1 in zip(
            cgutils.unpack_tuple(builder, values[2], len(sig.args)), args, sig.args)]
        retty = cc.get_return_type(sig.return_type).pointee
        ret = cgutils.alloca_once_value(builder, cgutils.get_null_value(retty))
        exc = cgutils.alloca_once(builder, fnty.args[1].pointee, name="excinfo")
        code = builder.call(fn, [ret, exc] + list(cc._get_arg_packer(sig.args)
                                                  .as_arguments(builder, items)))
        status = cc._get_return_status(builder, code, builder.load(exc))
        with cgutils.if_unlikely(builder, status.is_error):
            cc.return_status_propagate(builder, status)
        return context.get_returned_value(builder, sig.return_type, builder.load(ret))
    return sig.return_type(fps, slot, args), codegen


def address(kernel, sig) -> int:
    """The address of ``kernel`` compiled (or loaded from the disk cache) for the argument
    types of ``sig``, in numba's calling convention: what :func:`_call` calls. Raises
    TypeError where its result type is not ``sig``'s (a stale slot: a call through it would
    not be sound)."""
    kernel.compile(sig.args)
    cres = kernel.overloads[sig.args]
    if cres.signature.return_type != sig.return_type:
        raise TypeError(f"executor: {kernel.py_func.__name__} returns "
                        f"{cres.signature.return_type}, not {sig.return_type}")
    return cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)


_ADDRESS: dict[tuple[bool, int], int] = {}


def addresses(byte_kernels: bool | None = None, kinds=None, parallel: bool = False,
              winograd: bool = False) -> np.ndarray:
    """The address of each slot's kernel (:data:`SLOTS`, :func:`address`) for the byte
    kernels' variant or the int16-pair one (default: this machine's, :data:`BYTE_KERNELS`):
    :func:`run_rows`'s ``fps``. ``kinds``: only the slots rows of these kinds call
    (:data:`KIND_SLOTS`; default every kind), the others 0 (a call raises): a table without
    element-wise or pooling rows compiles neither general kernel, which a first run of the
    per-operation path avoids too (issue 31 #5); their parallel twins (:data:`PAR_SLOTS`)
    only where ``parallel`` (a table with rows at or above SERIAL_WORK), so a table of small
    rows compiles no parfor kernel; the Winograd slots (:data:`WINO_SLOTS`) only where
    ``winograd`` (a table with a CONV16 row on them), whatever ``kinds``."""
    byte_kernels = BYTE_KERNELS if byte_kernels is None else byte_kernels
    wanted = set(range(len(SLOTS))) - set(WINO_SLOTS) if kinds is None else \
        {s for k in kinds for s in KIND_SLOTS.get(int(k), ())}
    if winograd:
        wanted |= {F_WINO_INPUT, F_WINO_GEMM}
    if parallel or kinds is None:
        wanted |= {PAR_SLOTS[s] for s in wanted if s in PAR_SLOTS}
    out = np.zeros(len(SLOTS), np.int64)
    for slot in wanted:
        sig, *kernels = SLOTS[slot]
        k = kernels[0 if byte_kernels else 1]
        if k is not None:
            key = (byte_kernels, slot)
            if key not in _ADDRESS:
                _ADDRESS[key] = address(k, sig)
            out[slot] = _ADDRESS[key]
    return out


# row kinds
COPY, POINTWISE, DEPTHWISE, ADDSUB, CONV, ELEMENTWISE, POOL, CONV16 = 1, 2, 3, 4, 5, 6, 7, 8
#: the slots each row kind calls (:func:`run_rows`): a convolution's kernels and the output
#: stage, the element-wise and pooling rows their general kernels (and the fast add/sub);
#: every kind but COPY its tensors' reads and stores (:func:`_tensor`)
KIND_SLOTS = {POINTWISE: (F_POINTWISE, F_FINISH, F_TENSOR), CONV: (F_CONV, F_FINISH, F_TENSOR),
              CONV16: (F_PACK16, F_CONV16, F_PACK_PIXELS, F_POINTWISE16, F_FINISH, F_TENSOR),
              DEPTHWISE: (F_DEPTHWISE, F_FINISH, F_TENSOR), ADDSUB: (F_ADDSUB, F_TENSOR),
              ELEMENTWISE: (F_EW, F_ADDSUB, F_TENSOR, F_VALUES),
              POOL: (F_POOL, F_TENSOR, F_VALUES)}

# row columns
K_KIND, K_STEP, K_H, K_W, K_C, K_K = 0, 1, 2, 3, 4, 5
K_IFM, K_IFM_N, K_OFM, K_OFM_N, K_IFM2, K_IFM2_N, K_CHECK, K_CHECK_N = range(6, 14)
# COPY: source memory, offset, destination memory, offset, bytes, overlap step
K_SRC_MEM, K_SRC_OFF, K_DST_MEM, K_DST_OFF, K_BYTES, K_OVERLAP = range(14, 20)
# POINTWISE / DEPTHWISE: the output stage's tap masks and terms (c64 offsets, terms width)
K_ROWS, K_COLS, K_TERMS, K_TERMS_W = range(14, 18)
# POINTWISE: q4, kv, mask, columns and init (c32 offsets), the columns' length
K_Q4, K_KV, K_MASK, K_COLUMNS, K_INIT, K_COLUMNS_N = range(18, 24)
# DEPTHWISE: input rows and columns read, zero point, weights (c32), kh, kw, pads, strides,
# dilations
K_IN_H, K_IN_W, K_ZP, K_WEIGHTS, K_KH, K_KW, K_PT, K_PL, K_SY, K_SX, K_DY, K_DX = range(18, 30)
# ADDSUB: sub, the zero points and signedness of both inputs, ew and cfg (c64w offsets)
K_SUB, K_ZP1, K_ZP2, K_SIGNED1, K_SIGNED2, K_EW, K_CFG = range(18, 25)
# any row: where its OFM goes into the chaining FIFO (an offset in ``chain`` + 1; 0: memory);
# ADDSUB: where each operand comes from the FIFO (the same offset + 1 as the row that pushed it)
K_CHAIN_OUT, K_CHAIN_IN1, K_CHAIN_IN2 = 30, 31, 32
# ELEMENTWISE (also K_ZP1, K_ZP2, K_SIGNED1, K_SIGNED2, K_EW, K_CFG; each pair: IFM, IFM2):
# the operands' bits and broadcast modes, the OFM's bytes per element, then per operand where
# it comes from (OPERAND_*) and a scalar's value
K_BITS1, K_BITS2, K_BC1, K_BC2, K_OE = range(25, 30)
K_SRC1, K_SRC2, K_SCALAR1, K_SCALAR2 = range(33, 37)
# ELEMENTWISE: the LUT memory's memory and offset (rows without a LUT function: 0, 0, unread)
K_LUT_MEM, K_LUT_OFF = 37, 38
# POOL (also K_ZP1, K_SIGNED1, K_BITS1: the IFM's; K_OE, K_CFG, K_LUT_MEM, K_LUT_OFF): the
# kernel's geo and K zeros (c64w offsets), the IFM rows and columns read (K_C: its channels)
K_GEO, K_ZEROS, K_PIN_H, K_PIN_W = 39, 40, 41, 42
#: an ELEMENTWISE operand: a tensor (boxes or the chaining FIFO), a scalar, zeros (unary)
OPERAND_TENSOR, OPERAND_SCALAR, OPERAND_NONE = 0, 1, 2
# CONV (the byte kernel's launch, emu/conv/int_conv.py ByteLaunch): the input's rows, columns
# and words per pixel, its byte offset and padding byte, rows read, top padding, dst_col,
# weight quads and sums (offsets and lengths), output columns computed, kh, kw, channel
# blocks, stride, row words, plane, row_off and col_off (c64w offsets), channels computed,
# packed input words
(K_CV_H, K_CV_W, K_CV_Q4, K_CV_OFF, K_CV_ZB, K_CV_ROWS, K_CV_TOP, K_CV_DST, K_CV_DST_N,
 K_CV_W4, K_CV_W4_N, K_CV_WSUM, K_CV_WSUM_N, K_CV_WOB, K_CV_KH, K_CV_KW, K_CV_KN, K_CV_SY,
 K_CV_ROW_WORDS, K_CV_PLANE, K_CV_ROW_OFF, K_CV_COL_OFF, K_CV_KP, K_CV_X4) = range(33, 57)
# POINTWISE / DEPTHWISE / CONV / CONV16: 1 where the OFM is int32 (the output stage stores
# four bytes a value into ``out8``)
K_OUT32 = 57
# CONV16 (conv_sums' int16-pair call, emu/conv/int_conv.py: _pack_input, _conv_blocks; a
# general or pointwise convolution where the CPU has no byte kernel): K_CV_H, K_CV_W the IFM's
# rows and columns read (K_C channels, packed), K_CV_ROWS, K_CV_TOP, K_CV_DST(_N),
# K_CV_W4(_N) the int16-pair weight words (c32), K_CV_WOB, K_CV_KH, K_CV_KW, K_CV_KN,
# K_CV_SY, K_CV_ROW_WORDS, K_CV_PLANE, K_CV_ROW_OFF, K_CV_COL_OFF, K_CV_KP and K_CV_X4 (the
# packed input's words) as for CONV; then the input's shape as the kernel reads it (a 1x1
# layer's H*W pixels as one row: IntConv.flat), its zero point (an int8 IFM), the sums' rows,
# channel pairs, padded rows and the sums' columns per OFM row (``wob``, or W where the H*W
# pixels are one row)
K_C16_VH, K_C16_VW, K_C16_ZP, K_C16_HO, K_C16_C2, K_C16_HP, K_C16_TW = range(58, 65)
# CONV16: 1 where every output pixel reads its own input pixel (int_conv.pixelwise): the
# pointwise int16-pair kernel, conv_sums' _run_pointwise16 (K_CV_W4: PackedWeights.pairs)
K_C16_PW = 65
# ELEMENTWISE: 1 where the operation is an add/sub that eltwise._addsub_fast computes
# (_addsub_fast_applies, as eltwise._run takes it; K_SUB: sub): its slot, not _ew_kernel's
K_EW_FAST = 66
# CONV / CONV16 (not pointwise): 1 where the convolution kernels' work is at or above
# SERIAL_WORK (their parallel slots); POINTWISE / DEPTHWISE / CONV / CONV16: 1 where the
# output stage's is (CE.stage_parallel): :data:`PAR_SLOTS`
K_PAR, K_PAR_FINISH = 67, 68
# CONV16 (not pointwise): 0, or where int_conv.winograd_for says conv_sums runs Winograd
# F(2x2, 3x3) for the layer, 1 + the c64 offset of the WinogradLaunch's arguments
# (emu/conv/winograd.py winograd_launch: its ``input``, ``p`` and ``gemm`` in that order,
# :data:`WINO_ARGS` values); then K_CV_W4(_N) are its U words, K_CV_X4 the padded input's
# words, and K_C16_HO, K_CV_WOB, K_CV_KP its work array [2 Ty, 2 Tx, K rounded up to 16]
# (``acc``), whose first H rows the output stage reads (K_C16_TW = 2 Tx)
K_C16_WINO = 69
WINO_ARGS = 16
COLUMNS = 70

#: the convolution rows this machine's :func:`run_rows` runs: those of the byte kernels (CONV,
#: POINTWISE; AVX-512 VNNI), else those of the int16-pair kernel (CONV16)
BYTE_KERNELS = HAVE_VNNI

#: a box: memory, offset, first channel, channels, sy, sx, sc
BOX_COLUMNS = 7
#: a stream check: memory, offset, length, offset of the bytes it must hold in c8
CHECK_COLUMNS = 4


@intrinsic
def _same(typingctx, a, i, b, j, n):
    """a[i:i+n] == b[j:j+n] of two byte arrays, through the C library's memcmp (as
    :func:`_move`: a byte loop compared a 140 KiB weight stream in ~140 us)."""
    def codegen(context, builder, sig, args):
        aa, ai, ba, bj, nn = args
        ap = builder.gep(context.make_array(sig.args[0])(context, builder, aa).data, [ai])
        bp = builder.gep(context.make_array(sig.args[2])(context, builder, ba).data, [bj])
        vp = cgutils.voidptr_t
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.IntType(32), [vp, vp, nn.type]), "memcmp")
        r = builder.call(fn, [builder.bitcast(ap, vp), builder.bitcast(bp, vp), nn])
        return builder.icmp_signed("==", r, ir.Constant(ir.IntType(32), 0))
    return types.boolean(a, types.int64, b, types.int64, types.int64), codegen


@intrinsic
def _channels_first(typingctx, a):
    """``a.transpose((2, 0, 1))`` of a 3-D array: a view, its shape and strides permuted.
    Why not numba's transpose with axes: it compiles its axis checks with their error message
    formatting (str, repr, join), ~2 s of CPU in every process that compiles a caller."""
    view = a.copy(layout="A")

    def codegen(context, builder, sig, args):
        src = context.make_array(sig.args[0])(context, builder, args[0])
        out = context.make_array(view)(context, builder)
        shape = cgutils.unpack_tuple(builder, src.shape, 3)
        strides = cgutils.unpack_tuple(builder, src.strides, 3)
        populate_array(out, data=src.data, shape=[shape[i] for i in (2, 0, 1)],
                       strides=[strides[i] for i in (2, 0, 1)], itemsize=src.itemsize,
                       meminfo=src.meminfo, parent=src.parent)
        return impl_ret_borrowed(context, builder, view, out._getvalue())
    return view(a), codegen


@intrinsic
def _view(typingctx, a, start, shape):
    """``a[start:start + n].reshape(shape)`` of a 1-D C array (n the product of ``shape``, a
    tuple): a C-contiguous view, raising ValueError where it would reach outside ``a``. Why
    not numba's slice and reshape: each site compiles its slice fixing, reshape checks and
    their error formatting; run_rows' 45 such sites took ~1.5 s of its ~6.4 s compile
    (issue 31 #5)."""
    if not (isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C"
            and isinstance(start, types.Integer) and isinstance(shape, types.BaseTuple)
            and all(isinstance(t, types.Integer) for t in shape)):
        return None
    view = types.Array(a.dtype, len(shape), "C", readonly=not a.mutable)

    def codegen(context, builder, sig, args):
        src = context.make_array(sig.args[0])(context, builder, args[0])
        at = context.cast(builder, args[1], sig.args[1], types.intp)
        dims = [context.cast(builder, d, t, types.intp) for d, t in
                zip(cgutils.unpack_tuple(builder, args[2], len(shape)), sig.args[2])]
        zero = context.get_constant(types.intp, 0)
        n, bad = context.get_constant(types.intp, 1), builder.icmp_signed("<", at, zero)
        for d in dims:
            n = builder.mul(n, d)
            bad = builder.or_(bad, builder.icmp_signed("<", d, zero))
        bad = builder.or_(bad, builder.icmp_signed(">", builder.add(at, n),
                                                   builder.extract_value(src.shape, 0)))
        with cgutils.if_unlikely(builder, bad):
            context.call_conv.return_user_exc(builder, ValueError,
                                              ("executor: a view outside its array",))
        strides, step = [], src.itemsize
        for d in reversed(dims):
            strides.insert(0, step)
            step = builder.mul(step, d)
        out = context.make_array(view)(context, builder)
        populate_array(out, data=builder.gep(src.data, [at]), shape=dims, strides=strides,
                       itemsize=src.itemsize, meminfo=src.meminfo, parent=src.parent)
        return impl_ret_borrowed(context, builder, view, out._getvalue())
    return view(a, start, shape), codegen


@njit(nogil=True, cache=True)
def run_rows(ops, r0, r1, boxes, checks, mems, c64, c64w, c32, c8, xw, x32, x8, acc, out8,
             outu, ea, eb, eo, chain, x4, flag, fps):
    """Rows ``r0`` .. ``r1`` of the table ``ops``, in order; the row it stopped at (``r1``:
    all ran; an earlier one: that row's streams no longer hold the bytes it was kept from,
    nothing of it done). Scratch: ``xw`` bytes, ``x32``/``x8`` read-only int32/int8 views of
    the same memory (the kernels' input types), ``acc`` int32 sums, ``out8``/``outu`` an
    OFM's bytes (int8 for the output stage of every OFM type, uint8 for the stores: one
    memory), ``ea``/``eb``/``eo`` int64 operands and result, ``chain`` the
    OFMs pushed into the chaining FIFO (each popped by the next row that reads it), ``x4`` the
    byte kernel's (CONV16: the int16-pair kernel's) packed input, ``flag[0]`` the result flag
    the last 1x1x1 OFM set (bit 0 of a single-element OFM [U85-TRM: Table 3-14]; rows without
    one leave it); ``fps`` the kernels' addresses (:func:`addresses`: this machine's variant).
    One compiled function for both variants: the kernels are reached through ``fps``."""
    for r in range(r0, r1):
        kind = ops[r, K_KIND]
        H, W, C, K = ops[r, K_H], ops[r, K_W], ops[r, K_C], ops[r, K_K]
        kb = K  # the OFM's bytes per pixel
        if kind == COPY:  # copy_bytes [U85-TRM: §3.6.3]: the source as it was, then upwards
            src, dst = mems[ops[r, K_SRC_MEM]], mems[ops[r, K_DST_MEM]]
            so, do, n, step = ops[r, K_SRC_OFF], ops[r, K_DST_OFF], ops[r, K_BYTES], \
                ops[r, K_OVERLAP]
            _move(xw, 0, src, so, n)
            if step == 0:
                step = n
            for i in range(0, n, step):
                _move(dst, do + i, xw, 0, min(step, n - i))
            continue
        for k in range(ops[r, K_CHECK], ops[r, K_CHECK] + ops[r, K_CHECK_N]):
            # its streams still hold the bytes its kept run was worked out from
            if not _same(mems[checks[k, 0]], checks[k, 1], c8, checks[k, 3], checks[k, 2]):
                return r
        if kind == POINTWISE or kind == DEPTHWISE or kind == CONV or kind == CONV16:
            tw = ops[r, K_TERMS_W]
            rows = _view(c64, ops[r, K_ROWS], (H,))
            cols = _view(c64, ops[r, K_COLS], (W,))
            terms = _view(c64w, ops[r, K_TERMS], (6, tw))
            if kind == POINTWISE:
                q4, kv, n = ops[r, K_Q4], ops[r, K_KV], H * W
                _call(fps, F_TENSOR, (mems, boxes, ops[r, K_IFM], ops[r, K_IFM_N], H, W, C, xw,
                                      4 * q4, False))
                _call(fps, F_POINTWISE, (
                    _view(x32, 0, (n * q4,)), np.int32(ops[r, K_MASK]),
                    _view(c32, ops[r, K_COLUMNS], (ops[r, K_COLUMNS_N],)),
                    _view(c32, ops[r, K_INIT], (kv * 16,)), _view(acc, 0, (n * kv * 16,)),
                    n, q4, kv))
                tot = _view(acc, 0, (H, W, kv * 16))
            elif kind == CONV:  # run_byte_launch's call, its serial kernel
                h, w, q4, kp = ops[r, K_CV_H], ops[r, K_CV_W], ops[r, K_CV_Q4], ops[r, K_CV_KP]
                wob, kh, kw = ops[r, K_CV_WOB], ops[r, K_CV_KH], ops[r, K_CV_KW]
                _call(fps, F_TENSOR, (mems, boxes, ops[r, K_IFM], ops[r, K_IFM_N], h, w, C, xw,
                                      4 * q4, False))
                cv = (_view(x32, 0, (h, w, q4)), ops[r, K_CV_OFF], ops[r, K_CV_ZB],
                      ops[r, K_CV_ROWS], ops[r, K_CV_TOP],
                      _view(c64w, ops[r, K_CV_DST], (ops[r, K_CV_DST_N],)),
                      _view(x4, 0, (ops[r, K_CV_X4],)),
                      _view(c32, ops[r, K_CV_W4], (ops[r, K_CV_W4_N],)),
                      _view(c64w, ops[r, K_CV_WSUM], (ops[r, K_CV_WSUM_N],)),
                      _view(acc, 0, (H * wob * kp,)), H,
                      wob, q4, kh, kw, ops[r, K_CV_KN], ops[r, K_CV_SY], ops[r, K_CV_ROW_WORDS],
                      ops[r, K_CV_PLANE], _view(c64w, ops[r, K_CV_ROW_OFF], (kh,)),
                      _view(c64w, ops[r, K_CV_COL_OFF], (kw,)), True)
                if ops[r, K_PAR] != 0:
                    _call(fps, F_CONV_PAR, cv)
                else:
                    _call(fps, F_CONV, cv)
                tot = _view(acc, 0, (H, wob, kp))
            elif kind == CONV16:  # run_int_conv's conv_sums without byte kernel
                h, wd, vh, vw = ops[r, K_CV_H], ops[r, K_CV_W], ops[r, K_C16_VH], ops[r, K_C16_VW]
                ho, wob, kp, tw = ops[r, K_C16_HO], ops[r, K_CV_WOB], ops[r, K_CV_KP], \
                    ops[r, K_C16_TW]
                c2, plane, kh = ops[r, K_C16_C2], ops[r, K_CV_PLANE], ops[r, K_CV_KH]
                _call(fps, F_TENSOR, (mems, boxes, ops[r, K_IFM], ops[r, K_IFM_N], h, wd, C, xw,
                                      C, False))
                w4 = _view(c32, ops[r, K_CV_W4], (ops[r, K_CV_W4_N],))
                a = _view(acc, 0, (ho * wob * kp,))
                if ops[r, K_C16_WINO] != 0:  # WinogradLaunch.run's calls (winograd.py)
                    g = _view(c64, ops[r, K_C16_WINO] - 1, (WINO_ARGS,))
                    pf = _view(x4.view(np.int16), 0, (g[5] * g[6] * g[7],))
                    _call(fps, F_WINO_INPUT, (_view(x8, 0, (vh, vw, C)), np.int32(g[0]), g[1],
                                              g[2], g[3], g[4], _view(pf, 0, (g[5], g[6], g[7]))))
                    wg = (pf, w4, a, g[8], g[9], g[10], g[11], g[12], g[13], g[14] != 0, g[15])
                    if ops[r, K_PAR] != 0:
                        _call(fps, F_WINO_GEMM_PAR, wg)
                    else:
                        _call(fps, F_WINO_GEMM, wg)
                elif ops[r, K_C16_PW] != 0:  # _run_pointwise16's calls (ho = vh)
                    x2 = _view(x4, 0, (vh * vw * c2,))
                    _call(fps, F_PACK_PIXELS, (_view(x8, 0, (vh * vw * C,)),
                                               np.int32(ops[r, K_C16_ZP]), vh * vw, C,
                                               x2.view(np.int16)))
                    _call(fps, F_POINTWISE16, (x2, w4, a, vh, vw, wob, c2, kp))
                else:
                    x2 = _view(x4, 0, (ops[r, K_CV_X4],))
                    x16 = _view(x2.view(np.int16), 0, (ops[r, K_C16_HP], c2, plane, 2))
                    dst = _view(c64w, ops[r, K_CV_DST], (ops[r, K_CV_DST_N],))
                    pk = (_channels_first(_view(x8, 0, (vh, vw, C))),
                          ops[r, K_C16_ZP], ops[r, K_CV_ROWS], ops[r, K_CV_TOP], dst, True, x16)
                    cv = (x2, w4, a, ho, wob, c2, kh, ops[r, K_CV_KW], ops[r, K_CV_KN],
                          ops[r, K_CV_SY], ops[r, K_CV_ROW_WORDS], plane,
                          _view(c64w, ops[r, K_CV_ROW_OFF], (kh,)),
                          _view(c64w, ops[r, K_CV_COL_OFF], (ops[r, K_CV_KW],)), True)
                    if ops[r, K_PAR] != 0:
                        _call(fps, F_PACK16_PAR, pk)
                        _call(fps, F_CONV16_PAR, cv)
                    else:
                        _call(fps, F_PACK16, pk)
                        _call(fps, F_CONV16, cv)
                tot = _view(acc, 0, (H, tw, kp))
            else:
                ih, iw = ops[r, K_IN_H], ops[r, K_IN_W]
                _call(fps, F_TENSOR, (mems, boxes, ops[r, K_IFM], ops[r, K_IFM_N], ih, iw, C, xw,
                                      C, False))
                kh, kw = ops[r, K_KH], ops[r, K_KW]
                w = _view(c32, ops[r, K_WEIGHTS], (kh, kw, C))
                tot = _view(acc, 0, (H, W, C))
                _call(fps, F_DEPTHWISE, (_view(x8, 0, (ih, iw, C)),
                                         np.int32(ops[r, K_ZP]), w, tot, ops[r, K_PT],
                                         ops[r, K_PL], ops[r, K_SY], ops[r, K_SX],
                                         ops[r, K_DY], ops[r, K_DX]))
            if ops[r, K_OUT32] != 0:
                kb = 4 * K  # (an int32 OFM: the stage stores each value's four bytes)
            if ops[r, K_PAR_FINISH] != 0:
                _call(fps, F_FINISH_PAR, (tot, rows, cols, terms, _view(out8, 0, (H, W, kb))))
            else:
                _call(fps, F_FINISH, (tot, rows, cols, terms, _view(out8, 0, (H, W, kb))))
        elif kind == ADDSUB:
            n = H * W * K
            a3, b3, o3 = _view(ea, 0, (H, W, K)), _view(eb, 0, (H, W, K)), _view(eo, 0, (H, W, K))
            for q in range(2):
                v = ea if q == 0 else eb
                slot, sg = (K_IFM, K_SIGNED1) if q == 0 else (K_IFM2, K_SIGNED2)
                zp, fifo = (K_ZP1, K_CHAIN_IN1) if q == 0 else (K_ZP2, K_CHAIN_IN2)
                # read_ifm's values [U85-TRM: §3.10.6]: the stored byte as the tensor's type
                # reads it, minus the zero point (values_minus); from its boxes or from the
                # bytes the row before pushed into the chaining FIFO, in (y, x, c) order
                # [U85-TRM: §3.6.4]
                if ops[r, fifo] > 0:
                    _move(xw, 0, chain, ops[r, fifo] - 1, n)
                else:
                    _call(fps, F_TENSOR, (mems, boxes, ops[r, slot], ops[r, slot + 1], H, W, K,
                                          xw, K, False))
                signed, z = ops[r, sg] != 0, ops[r, zp]
                for i in range(n):
                    e = np.int64(xw[i])
                    if signed and e >= 128:
                        e -= 256
                    v[i] = e - z
            _call(fps, F_ADDSUB, (a3, b3, ops[r, K_SUB] != 0, _view(c64w, ops[r, K_EW], (14,)),
                                  _view(c64w, ops[r, K_CFG], (15,)), o3))
            for i in range(n):
                outu[i] = eo[i]  # the store truncates to the OFM's byte
        elif kind == ELEMENTWISE:  # run_elementwise's operands, _ew_kernel, the store
            n = H * W * K
            for q in range(2):
                v = ea if q == 0 else eb
                src = ops[r, K_SRC1 + q]
                if src != OPERAND_TENSOR:  # a scalar's value (zero point subtracted), or 0
                    v[:n] = ops[r, K_SCALAR1 + q] if src == OPERAND_SCALAR else 0
                    continue
                # read_ifm's values [U85-TRM: §3.10.6] as values_minus gives them: the
                # stored little-endian integer as the operand's type reads it, minus the
                # zero point; a broadcast axis read at coordinate 0 (_broadcast)
                bc, eb_ = ops[r, K_BC1 + q], ops[r, K_BITS1 + q] // 8
                rh = 1 if bc & EE.BC_H else H
                rw = 1 if bc & EE.BC_W else W
                rc = 1 if bc & EE.BC_C else K
                if ops[r, K_CHAIN_IN1 + q] > 0:
                    _move(xw, 0, chain, ops[r, K_CHAIN_IN1 + q] - 1, rh * rw * rc * eb_)
                else:
                    slot = K_IFM if q == 0 else K_IFM2
                    _call(fps, F_TENSOR, (mems, boxes, ops[r, slot], ops[r, slot + 1], rh, rw,
                                          rc * eb_, xw, rc * eb_, False))
                _call(fps, F_VALUES, (xw, rh, rw, rc, eb_, ops[r, K_SIGNED1 + q] != 0,
                                      ops[r, K_ZP1 + q], v, H, W, K))
            a3, b3 = _view(ea, 0, (H, W, K)), _view(eb, 0, (H, W, K))
            ew, cfg = _view(c64w, ops[r, K_EW], (14,)), _view(c64w, ops[r, K_CFG], (15,))
            if ops[r, K_EW_FAST] != 0:  # _run's add/sub on _addsub_fast (_ew_kernel's values)
                out = _view(eo, 0, (n,))
                _call(fps, F_ADDSUB, (a3, b3, ops[r, K_SUB] != 0, ew, cfg, _view(eo, 0, (H, W, K))))
            else:
                out = _call(fps, F_EW, (a3, b3, ew, cfg,
                                        mems[ops[r, K_LUT_MEM]][ops[r, K_LUT_OFF]:ops[r, K_LUT_OFF]
                                                                + EE.P.LUT_BYTES])).ravel()
        elif kind == POOL:  # _pool_one's values (no upscale, none fitted), _pool_kernel, store
            ih, iw, ic, eb_ = ops[r, K_PIN_H], ops[r, K_PIN_W], ops[r, K_C], ops[r, K_BITS1] // 8
            _call(fps, F_TENSOR, (mems, boxes, ops[r, K_IFM], ops[r, K_IFM_N], ih, iw, ic * eb_,
                                  xw, ic * eb_, False))
            _call(fps, F_VALUES, (xw, ih, iw, ic, eb_, ops[r, K_SIGNED1] != 0, ops[r, K_ZP1], ea,
                                  ih, iw, ic))
            zeros = _view(c64w, ops[r, K_ZEROS], (K,))  # no bias, scales, shifts
            out = _call(fps, F_POOL, (_view(ea, 0, (ih, iw, ic)), _view(eb, 0, (H, W, K)),
                                      _view(c64w, ops[r, K_GEO], (11,)),
                                      _view(c64w, ops[r, K_CFG], (15,)), zeros, zeros, zeros,
                                      mems[ops[r, K_LUT_MEM]][ops[r, K_LUT_OFF]:ops[r, K_LUT_OFF]
                                                              + EE.P.LUT_BYTES])).ravel()
        else:
            return r
        if kind == ELEMENTWISE or kind == POOL:
            # the OFM values as stored: each one's low bytes, little-endian (the OFM type's
            # astype, then the store)
            oe = ops[r, K_OE]
            kb = K * oe
            for i in range(H * W * K):
                for b in range(oe):
                    outu[i * oe + b] = (out[i] >> (8 * b)) & 0xFF
        if H * W * K == 1:  # result_flag: the low bit of a 1x1x1 OFM
            flag[0] = outu[0] & 1
        if ops[r, K_CHAIN_OUT] > 0:
            _move(chain, ops[r, K_CHAIN_OUT] - 1, outu, 0, H * W * kb)
        else:
            _call(fps, F_TENSOR, (mems, boxes, ops[r, K_OFM], ops[r, K_OFM_N], H, W, kb, outu,
                                  kb, True))
    return r1


def memories(arrays: list) -> tuple | None:
    """The memories (uint8 byte arrays) as the tuple :func:`run_rows` takes: always
    MEMORIES of them (padded with a 1-byte array: one type for every device, and a tuple
    compiles in a fraction of a typed list's time), or None where there are more."""
    if len(arrays) > MEMORIES:
        return None
    pad = np.zeros(1, np.uint8)
    return tuple(arrays) + (pad,) * (MEMORIES - len(arrays))


#: a read-only view: the arrays :func:`run_rows` only reads are passed so (numba types them
#: apart from writeable ones), by a table and by :func:`compile_ahead` alike, so both make the
#: one signature (the shared convolution's own helper)
read_only = IC.read_only


def kernel_entries(byte_kernels: bool | None = None) -> list[tuple[str, str, str, float, str]]:
    """The kernels of :func:`addresses` (this machine's variant by default) as kernel-plan
    entries (emu/kernel_plan.py Entry: module, function, signature as numba prints it, CPU
    seconds (a rough share-out figure), for every machine): `accelstub compile` queues them
    beside the device's plan, so the first replay finds them in the disk cache, compiled in
    whichever of its two processes was free (:func:`compile_ahead` compiles run_rows alone)."""
    byte_kernels = BYTE_KERNELS if byte_kernels is None else byte_kernels
    out = []
    # (parallel twins: int_conv.parallel_twins_of; the Winograd slots compile on first use)
    for sig, *kernels in SLOTS[:F_VALUES + 1]:
        if kernels[0 if byte_kernels else 1] is None:
            continue
        f = kernels[0 if byte_kernels else 1].py_func
        out.append((f.__module__, f.__name__, "(" + ", ".join(map(repr, sig.args)) + ")", 0.3, ""))
    return list(dict.fromkeys(out))


def blank(n: int = 4) -> tuple:
    """:func:`run_rows`'s arguments after ``r1`` for a table of no rows: ``n``-byte scratch
    (read-only where a table's are), one memory; ``fps`` all zero (no kernel is called)."""
    i64, i32, u8 = np.zeros(n, np.int64), np.zeros(n, np.int32), np.zeros(4 * n, np.uint8)
    return (np.zeros((0, BOX_COLUMNS), np.int64), np.zeros((0, CHECK_COLUMNS), np.int64),
            memories([u8.copy()]), read_only(i64), i64, i32, u8, u8.copy(),
            read_only(u8.view(np.int32)), read_only(u8.view(np.int8)), i32.copy(),
            np.zeros(4 * n, np.int8), np.zeros(4 * n, np.uint8), i64.copy(), i64.copy(),
            i64.copy(), np.zeros(4 * n, np.uint8), i32.copy(), np.zeros(1, np.int64),
            np.zeros(len(SLOTS), np.int64))


def compile_ahead() -> None:
    """Compile (or load from the cache) :func:`run_rows` for the one set of argument types a
    table passes (devices/ethos_u85/executor.py), running no row: `accelstub compile` calls
    it, so that the first replay of a program does not wait for it (a few seconds). The
    kernels it calls are not needed for that (their addresses are an argument; no row runs
    here): :func:`kernel_entries` has them compiled meanwhile."""
    run_rows(np.zeros((0, COLUMNS), np.int64), 0, 0, *blank())
