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
    slots = [(sig, k[0 if byte_kernels else 1]) for sig, *k in X.SLOTS]
    slots = [(sig, k) for sig, k in slots if k is not None]  # (rows this variant never makes)
    entries = X.kernel_entries(byte_kernels)
    assert len(entries) == len(slots)
    for (module, name, signature, _, needs), (sig, k) in zip(entries, slots):
        assert kernel(module, name) is k
        assert _args(signature) == sig.args and needs == ""


def test_addresses_are_the_slot_kernels_compiled_for_their_signatures():
    """This machine's addresses: one per slot, each of its kernel compiled for exactly the
    slot's argument types and result type; 0 where its variant has no kernel."""
    fps = X.addresses()
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
    for slot in (X.F_DEPTHWISE, X.F_ADDSUB, X.F_FINISH8, X.F_FINISH32):
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
    args[-1][X.F_POINTWISE] = X.address(_raising, X.SLOTS[X.F_POINTWISE][0])
    with pytest.raises(ValueError, match="a kernel's own error"):
        X.run_rows(_pointwise_row(), 0, 1, *args)


def test_a_row_whose_variant_has_no_kernel_raises_rather_than_calling_address_0():
    """A slot whose address is 0 (a row kind this machine's variant never makes: the byte
    kernels where the CPU has none, the int16-pair ones where it has them) raises
    AssertionError naming the slot instead of jumping to address 0."""
    args = X.blank(64)  # (all addresses 0)
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
