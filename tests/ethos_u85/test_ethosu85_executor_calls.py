"""How the compiled executor (emu/executor/ethosu85.py) reaches its kernels: through their
addresses in numba's calling convention (``SLOTS``, ``_call``, ``addresses``), so that
compiling run_rows does not compile, link and optimise the kernels' code again (issue 32 #3).
Each slot's kernel is compiled for the very signature its call site passes; a call with
other argument types does not compile; an exception a kernel raises reaches the caller; the
CONV16 rows' channels-first view is numpy's transpose. (The whole-network equality of the
executor with the per-operation path is tests/ethos_u85/test_ethosu85_executor.py.)"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba.core.errors import TypingError

from accelstub.emu.executor import ethosu85 as X
from accelstub.emu.jit import njit
from accelstub.emu.kernel_plan import _args, kernel


@pytest.mark.parametrize("byte_kernels", [True, False])
def test_kernel_entries_name_each_slots_kernel_and_signature(byte_kernels):
    """`accelstub compile` queues kernel_entries(): each names the slot's kernel of that
    variant (as the kernel plan finds it) with the slot's argument types, in slot order."""
    slots = [(sig, k[0 if byte_kernels else 1]) for sig, *k in X.SLOTS[:X.F_VALUES + 1]]
    # (the parallel twins' slots: `accelstub compile` queues those as int_conv's twins)
    slots = [(sig, k) for sig, k in slots if k is not None]  # (rows this variant never makes)
    entries = X.kernel_entries(byte_kernels)
    assert len(entries) == len(slots)
    for (module, name, signature, _, needs), (sig, k) in zip(entries, slots):
        assert kernel(module, name) is k
        assert _args(signature) == sig.args and needs == ""


def test_addresses_are_the_slot_kernels_compiled_for_their_signatures():
    """This machine's addresses: one per slot, each of its kernel compiled for exactly the
    slot's argument types and result type; 0 where its variant has no kernel. (The Winograd
    slots only when asked: a table with such a row.)"""
    fps = X.addresses(winograd=True)
    assert fps.dtype == np.int64 and fps.shape == (len(X.SLOTS),)
    for (sig, *kernels), fp in zip(X.SLOTS, fps):
        k = kernels[0 if X.BYTE_KERNELS else 1]
        if k is None:
            assert fp == 0
            continue
        assert k.overloads[sig.args].signature == sig
        assert X.address(k, sig) == fp != 0


def test_a_table_resolves_only_the_slots_its_row_kinds_call():
    """addresses(kinds=...): the slots of those kinds' rows hold their kernels' addresses,
    every other slot 0, so a table of convolutions and adds compiles neither the general
    element-wise nor the pooling kernel. (A kind missing a slot it calls would raise in
    run_rows: the whole-network tables of test_ethosu85_executor.py would fail.)"""
    import inspect
    import re

    src = inspect.getsource(X.run_rows)
    called = {name for name in re.findall(r"_call\(fps, (F_[A-Z0-9_]+)", src)}
    assert {n for n in dir(X) if re.fullmatch(r"F_[A-Z0-9_]+", n)} == called  # each slot is called
    fps = X.addresses(kinds=[X.POINTWISE, X.DEPTHWISE, X.ADDSUB, X.COPY])
    full = X.addresses()
    for slot in (X.F_EW, X.F_POOL, X.F_CONV16, X.F_PACK16):
        assert fps[slot] == 0
    for slot in (X.F_DEPTHWISE, X.F_ADDSUB, X.F_FINISH):
        assert fps[slot] == full[slot] != 0
    assert fps[X.F_POINTWISE] == full[X.F_POINTWISE]  # (0 where the CPU has no byte kernel)
    assert not X.addresses(kinds=[X.COPY]).any()


def test_a_slot_whose_result_type_differs_is_refused():
    """address() checks the result type too: a call through a pointer to a kernel returning
    something else would read a wrong value."""
    sig = X.SLOTS[X.F_ADDSUB][0]
    wrong = X.SLOTS[X.F_EW][0].return_type(*sig.args)
    with pytest.raises(TypeError, match="_addsub_fast returns none"):
        X.address(X.SLOTS[X.F_ADDSUB][1], wrong)


_ADDSUB = X.F_ADDSUB  # a global: numba sees the constant, as in run_rows


def test_a_call_with_other_argument_types_does_not_compile():
    """_call checks the arguments against the slot's signature while typing (here a 2-D
    array where the slot takes 1-D ones), and takes only a constant slot."""
    @njit(nogil=True)
    def wrong(fps, a):
        X._call(fps, _ADDSUB, (a, a, True, a[0], a[0], a))

    @njit(nogil=True)
    def right(fps, a):
        X._call(fps, _ADDSUB, (a, a, True, a[0, 0], a[0, 0], a))

    @njit(nogil=True)
    def variable(fps, a, slot):
        X._call(fps, slot, (a, a, True, a[0, 0], a[0, 0], a))

    a = np.zeros((1, 1, 1), np.int64)
    with pytest.raises(TypingError, match=f"slot {X.F_ADDSUB} takes"):
        wrong(X.addresses(), a)
    with pytest.raises(TypingError, match="_call"):
        variable(X.addresses(), a, X.F_ADDSUB)
    right.compile((X.types.int64[::1], X.types.int64[:, :, ::1]))  # (compiles; not run)


@njit(nogil=True)
def _raising(x, mask, w, init, acc, n, q4, kv):
    raise ValueError("a kernel's own error")


def _pointwise_row() -> np.ndarray:
    ops = np.zeros((1, X.COLUMNS), np.int64)
    ops[0, [X.K_KIND, X.K_H, X.K_W, X.K_C, X.K_K, X.K_Q4, X.K_KV]] = X.POINTWISE, 1, 1, 1, 1, 1, 1
    return ops


def test_an_exception_a_kernel_raises_reaches_the_caller():
    """A POINTWISE row whose slot holds a kernel that raises (as a kernel raises on a bad
    argument) raises in run_rows' caller, with the kernel's message: the status goes back
    through the call."""
    args = X.blank(64)
    args[-1][X.F_TENSOR] = X.addresses()[X.F_TENSOR]  # (the row's IFM read comes first)
    args[-1][X.F_POINTWISE] = X.address(_raising, X.SLOTS[X.F_POINTWISE][0])
    with pytest.raises(ValueError, match="a kernel's own error"):
        X.run_rows(_pointwise_row(), 0, 1, *args)


def test_a_row_whose_variant_has_no_kernel_raises_rather_than_calling_address_0():
    """A slot whose address is 0 (a row kind this machine's variant never makes: the byte
    kernels where the CPU has none, the int16-pair ones where it has them) raises
    AssertionError naming the slot instead of jumping to address 0."""
    args = X.blank(64)  # (all addresses 0 but the IFM read's, which comes first)
    args[-1][X.F_TENSOR] = X.addresses()[X.F_TENSOR]
    with pytest.raises(AssertionError, match=f"slot {X.F_POINTWISE} has no kernel here"):
        X.run_rows(_pointwise_row(), 0, 1, *args)


@njit(nogil=True)
def _first(x, h, w, c):
    return X._channels_first(x.reshape((h, w, c)))


@settings(max_examples=40, deadline=None)
@given(h=st.integers(1, 5), w=st.integers(1, 5), c=st.integers(1, 5), skip=st.integers(0, 3))
def test_channels_first_is_numpys_transpose(h, w, c, skip):
    """The CONV16 rows' view of an (H, W, C) tensor as (C, H, W): numpy's transpose((2, 0, 1)),
    the same elements without a copy (the x8 scratch read from an offset)."""
    buf = np.arange(skip + h * w * c, dtype=np.int64).astype(np.int8)
    got = _first(X.read_only(buf[skip:]), h, w, c)
    want = buf[skip:].reshape((h, w, c)).transpose((2, 0, 1))
    assert got.shape == want.shape and got.strides == want.strides
    assert (got == want).all() and np.shares_memory(got, buf)


def _plain_gather(mem, box, rows, cols, cmax, pix, buf):
    """_tensor's mapping element by element: byte (y, x, c) of the box at
    off + y*sy + (c // 16)*sc + x*sx + c % 16, at (y*cols + x)*pix + c0 + c in ``buf``."""
    _, off, c0, n, sy, sx, sc = box
    for y in range(rows):
        for x in range(cols):
            for c in range(min(n, cmax - c0)):
                buf[(y * cols + x) * pix + c0 + c] = mem[off + y * sy + (c // 16) * sc
                                                         + x * sx + c % 16]


@pytest.mark.parametrize("layout", ["nhwc", "nhcwb16"])
@pytest.mark.parametrize("c_n", [8, 16, 20, 32])
@pytest.mark.parametrize("cmax_less", [0, 3])
def test_tensor_reads_and_writes_boxes_as_the_plain_mapping(layout, c_n, cmax_less):
    """_tensor both ways against the element-by-element mapping, on NHWC and NHCWB16 boxes;
    16 channels of NHCWB16 (and 32: whole bricks) take the one-move-per-row path, 8 and 20
    (a part brick) and NHWC the others; a ``cmax`` below the box's channels cuts it."""
    rng = np.random.default_rng(c_n * 10 + cmax_less)
    rows, cols = 5, 7
    bricks = -(-c_n // 16)
    if layout == "nhwc":
        sy, sx, sc = cols * c_n, c_n, 16
    else:
        sy, sx, sc = bricks * cols * 16, 16, cols * 16
    off = 5
    mem = rng.integers(0, 256, off + rows * sy + 64).astype(np.uint8)
    boxes = np.array([[0, off, 0, c_n, sy, sx, sc]], np.int64)
    mems = X.memories([mem])
    cmax = c_n - cmax_less
    got = np.zeros(rows * cols * c_n, np.uint8)
    X._tensor(mems, boxes, 0, 1, rows, cols, cmax, got, c_n, False)
    want = np.zeros_like(got)
    _plain_gather(mem, boxes[0], rows, cols, cmax, c_n, want)
    np.testing.assert_array_equal(got, want)
    # the store: the buffer's bytes go where the read took them from, nothing else changes
    before = mem.copy()
    src = rng.integers(0, 256, got.size).astype(np.uint8)
    X._tensor(mems, boxes, 0, 1, rows, cols, cmax, src, c_n, True)
    back = np.zeros_like(got)
    _plain_gather(mem, boxes[0], rows, cols, cmax, c_n, back)
    np.testing.assert_array_equal(back, np.where(np.arange(got.size) % c_n < cmax, src, 0))
    touched = np.zeros(mem.size, bool)
    for y in range(rows):
        for x in range(cols):
            for c in range(cmax):
                touched[off + y * sy + (c // 16) * sc + x * sx + c % 16] = True
    np.testing.assert_array_equal(mem[~touched], before[~touched])


@pytest.mark.parametrize("mode", ["add", "sub"])
def test_an_elementwise_add_sub_row_takes_the_fast_kernel_with_the_general_kernels_values(mode):
    """An ELEMENTWISE row (here an 8-bit add/sub whose IFM2 is broadcast along W, which the
    ADDSUB rows do not take) marked K_EW_FAST calls _addsub_fast and never _ew_kernel (its
    address 0 would raise), unmarked the reverse; both store what eltwise.run_elementwise
    gives (issue 31 #5: _ew_kernel no longer takes the fast body itself)."""
    from accelstub.emu.eltwise import ethosu85 as E
    from accelstub.emu.numeric import ethosu85 as P

    rng = np.random.default_rng(7)
    ifm = rng.integers(-128, 128, (2, 3, 5)).astype(np.int8)
    ifm2 = rng.integers(-128, 128, (2, 1, 5)).astype(np.int8)
    p = E.plan_elementwise(E.EW_ADD if mode == "add" else E.EW_SUB, ifm, ifm2, (2, 3, 5),
                           ifm_zp=3, ifm2_zp=-9, ifm_scale=(1 << 30, 30, 0, 0),
                           ifm2_scale=(3 << 28, 29, 1, 0), broadcast2=E.BC_W,
                           cfg=P.out_config(scale=1 << 30, shift=33, zero_point=-3))
    assert E._addsub_fast_applies.py_func(p.ew, p.cfg)
    want = E.run_elementwise(p, ifm, ifm2).astype(np.int8)
    ops = np.zeros((1, X.COLUMNS), np.int64)
    cols = {X.K_KIND: X.ELEMENTWISE, X.K_H: 2, X.K_W: 3, X.K_C: 5, X.K_K: 5, X.K_IFM: 0,
            X.K_IFM_N: 1, X.K_IFM2: 1, X.K_IFM2_N: 1, X.K_OFM: 2, X.K_OFM_N: 1,
            X.K_ZP1: p.operands[0][0], X.K_ZP2: p.operands[1][0], X.K_SIGNED1: 1,
            X.K_SIGNED2: 1, X.K_BITS1: 8, X.K_BITS2: 8, X.K_BC2: E.BC_W, X.K_OE: 1,
            X.K_EW: 0, X.K_CFG: 14, X.K_SUB: int(mode == "sub")}
    for k, v in cols.items():
        ops[0, k] = v
    # the memory: IFM at 0 (NHWC), IFM2 at 64, the OFM at 128
    boxes = np.array([[0, 0, 0, 5, 15, 5, 16], [0, 64, 0, 5, 5, 5, 16],
                      [0, 128, 0, 5, 15, 5, 16]], np.int64)
    c64w = np.concatenate([p.ew, p.cfg]).astype(np.int64)
    fps = X.addresses()
    for fast, unused in ((1, X.F_EW), (0, X.F_ADDSUB)):
        mem = np.zeros(4096, np.uint8)
        mem[0:30] = ifm.view(np.uint8).ravel()
        mem[64:74] = ifm2.view(np.uint8).ravel()
        ops[0, X.K_EW_FAST] = fast
        args = list(X.blank(64))
        args[0], args[2], args[3], args[4] = boxes, X.memories([mem]), X.read_only(c64w), c64w
        args[-1] = fps.copy()
        args[-1][unused] = 0
        assert X.run_rows(ops, 0, 1, *args) == 1
        np.testing.assert_array_equal(mem[128:158].view(np.int8).reshape(2, 3, 5), want)


@settings(max_examples=60, deadline=None)
@given(shape=st.tuples(*[st.integers(1, 4)] * 3), bc=st.integers(0, 7),
       size=st.sampled_from([1, 2, 4]), signed=st.booleans(), zp=st.integers(-300, 300),
       seed=st.integers(0, 2**32 - 1))
def test_values_reads_what_values_minus_and_broadcast_give(shape, bc, size, signed, zp, seed):
    """The rows' operand read (_values, issue 31 #5: strides and the sign by xor) gives
    read_ifm's values as the model's wrappers give them: the stored little-endian integers as
    the type reads them minus the zero point (values_minus), each broadcast axis read at
    coordinate 0 (eltwise _broadcast)."""
    from accelstub.emu.eltwise import ethosu85 as E
    from accelstub.emu.numeric.ethosu85_values import values_minus

    rshape = E.operand_shape(bc, shape)
    raw = np.random.default_rng(seed).integers(0, 256, int(np.prod(rshape)) * size, np.uint8)
    want = E._broadcast(values_minus(raw.view(f"<u{size}").reshape(rshape), zp, 8 * size,
                                     signed), bc, shape)
    got = np.zeros(int(np.prod(shape)), np.int64)
    X._values(raw, *rshape, size, signed, zp, got, *shape)
    np.testing.assert_array_equal(got.reshape(shape), want)


@njit(nogil=True)
def _viewed(a, start, h, w):
    return X._view(a, start, (h, w))


def test_a_view_is_the_slice_reshaped_and_refuses_to_reach_outside():
    """_view(a, start, shape) (run_rows' views of its scratch and constants, issue 31 #5) is
    a[start:start + n].reshape(shape), writes through to ``a``, keeps a read-only array
    read-only, and raises ValueError where it would reach outside ``a`` rather than read
    past it."""
    a = np.arange(20, dtype=np.int64)
    v = _viewed(a, 3, 4, 4)
    np.testing.assert_array_equal(v, a[3:19].reshape(4, 4))
    v[1, 2] = -1
    assert a[3 + 6] == -1
    ro = X.read_only(a)
    assert not _viewed(ro, 0, 2, 10).flags.writeable
    for start, h, w in ((5, 4, 4), (-1, 1, 1), (0, -2, -2), (20, 1, 1)):
        with pytest.raises(ValueError, match="a view outside its array"):
            _viewed(a, start, h, w)
    assert _viewed(a, 20, 0, 3).shape == (0, 3)


def test_run_rows_reaches_its_helpers_through_addresses_not_their_linked_code():
    """_tensor and _values are slots of their own (F_TENSOR, F_VALUES; issue 31 #5): run_rows'
    compiled module defines neither (linked, they were compiled and optimised again with it)
    and the kernel entries that `accelstub compile` queues name both. Compiled afresh from
    run_rows' source for its signature: numba shows no code of a function loaded from the
    disk cache."""
    import re

    X.compile_ahead()
    fresh = njit(nogil=True)(X.run_rows.py_func)
    for sig in X.run_rows.signatures:
        fresh.compile(sig)
        code = fresh.inspect_llvm(sig)
        assert re.search(r"define [^\n]*run_rows", code)  # (the module is run_rows')
        for helper in ("_tensor", "_values"):
            assert not re.search(rf"define [^\n]*{len(helper)}{helper}", code), helper
    names = {name for _, name, *_ in X.kernel_entries()}
    assert {"_tensor", "_values"} <= names
