"""Ethos-U85 output stages on small tensors (issue 32 #2): below STAGE_PARALLEL elements the
serial kernel runs, called directly (no launch lock, no thread count); from it the parallel one;
1x1 layers whose sums run as one row keep their rows in the output stage; the fast stage's
packed terms hold what the stage reads. Results against the numba reference loop
(method="loop") and the Python-integer reference."""
from __future__ import annotations

import numba
import numpy as np
import pytest

from accelstub.emu.conv import ethosu85 as E
from accelstub.emu.conv import int_conv as IC
from accelstub.emu.numeric import ethosu85 as P
from tests.ethos_u85 import ethosu85_reference as ref

MULTI = numba.config.NUMBA_NUM_THREADS > 1


def _spy(monkeypatch, name: str) -> tuple[list, list]:
    """Record which of the twin ``name``'s kernels runs (with its ``tot`` shape) and the thread
    counts of every IC.parallel entered."""
    calls: list = []
    entered: list = []
    twin = getattr(E, name)

    def recording(kernel, label):
        def call(*args):
            calls.append((label, args[0].shape))
            return kernel(*args)
        return call

    monkeypatch.setattr(E, name, IC.Twin(recording(twin.parallel, "parallel"),
                                         recording(twin.serial, "serial")))

    class Parallel(IC.parallel):
        def __enter__(self):
            entered.append(self.threads)
            return super().__enter__()

    monkeypatch.setattr(IC, "parallel", Parallel)
    return calls, entered


def _stage(shape: tuple[int, int, int], rng) -> tuple:
    """A fast output stage's arguments for sums of ``shape``: (tot, rows, cols, cfg, terms)."""
    oc = shape[2]
    cfg = P.out_config(ofm_bits=8, ofm_signed=True, zero_point=-3, act_min=-100, act_max=120,
                       per_channel=True)
    terms = E._stage_terms(cfg, rng.integers(-5000, 5000, oc), rng.integers(1 << 29, 1 << 31, oc),
                           rng.integers(30, 40, oc), oc)
    tot = rng.integers(-(1 << 31), 1 << 31, shape).astype(np.int32)
    rows = (np.arange(shape[0]) % 5 != 2).astype(np.int64)  # some rows without a tap
    return tot, rows, np.ones(shape[1], np.int64), cfg, terms


def test_stages_below_the_bound_call_the_serial_kernel_directly(monkeypatch):
    """At STAGE_PARALLEL - 1 output elements... (as close as a [H, W, C] gets: one row less)
    the serial kernel, outside IC.parallel; at STAGE_PARALLEL the parallel kernel under it
    (where numba has more than one thread). Both give the same OFM."""
    rng = np.random.default_rng(32)
    c, w = 64, 64
    h = E.STAGE_PARALLEL // (c * w)
    assert h * w * c == E.STAGE_PARALLEL
    tot, rows, cols, cfg, terms = _stage((h, w, c), rng)
    calls, entered = _spy(monkeypatch, "_FINISH_FAST_TWIN")
    small = E._output_stage(tot[:h - 1], None, rows[:h - 1], cols, cfg, terms, None,
                            np.empty((h - 1, w, c), np.int8))
    assert calls == [("serial", (h - 1, w, c))] and entered == []
    calls.clear()
    large = E._output_stage(tot, None, rows, cols, cfg, terms, None, np.empty((h, w, c), np.int8))
    assert calls == [("parallel" if MULTI else "serial", (h, w, c))]
    assert entered == [numba.config.NUMBA_NUM_THREADS]
    np.testing.assert_array_equal(small, large[:h - 1])


@pytest.mark.parametrize("bound", [1 << 62, 1])  # every stage serial / parallel
def test_stages_serial_and_parallel_agree_with_the_reference(bound, monkeypatch):
    """The fast and the general stage (accumulator input, 48-bit accumulators) through either
    kernel, against the numba loop and the Python-integer reference."""
    monkeypatch.setattr(E, "STAGE_PARALLEL", bound)
    rng = np.random.default_rng(320)
    x = rng.integers(-128, 128, (9, 7, 5)).astype(np.int8)
    w = rng.integers(-255, 256, (6, 3, 3, 5))
    for acc_bits, acc_in in ((32, None), (48, rng.integers(-(1 << 40), 1 << 40, (9, 7, 6)))):
        cfg = P.out_config(acc_bits=acc_bits, zero_point=3, per_channel=True)
        kw = dict(pad=(1, 1, 1, 1), ifm_zp=2, ifm_bits=8, ifm_signed=True, cfg=cfg,
                  bias=rng.integers(-999, 999, 6), acc_in=acc_in,
                  scales=rng.integers(1 << 10, 1 << (15 if acc_bits == 48 else 31), 6),
                  shifts=rng.integers(20, 40, 6))
        got = E.conv2d(x, w, **kw)
        np.testing.assert_array_equal(got, E.conv2d(x, w, method="loop", **kw))
        o = dict(bits=8, signed=True, zp=3, amin=-128, amax=127, rnd=P.RND_DOUBLE_SYMMETRIC,
                 acc_bits=acc_bits, per_channel=True)
        want = ref.conv(ref.values(x, 2, 8, True), w, 9, 7, (1, 1), (1, 1), (1, 1), o,
                        bytes(2048), kw["bias"], kw["scales"], kw["shifts"], acc0=acc_in)
        np.testing.assert_array_equal(got, want.astype(np.int64))


@pytest.mark.parametrize("with_acc", [False, True])
def test_a_one_row_1x1_layer_keeps_its_rows_in_the_output_stage(with_acc, monkeypatch):
    """A 1x1, stride 1, unpadded convolution's sums run as one row of H*W pixels; its output
    stage runs on the layer's H rows (so a parallel stage has rows to share), with and without
    an accumulator input, and gives the loop's OFM."""
    monkeypatch.setattr(E, "STAGE_PARALLEL", 1)
    rng = np.random.default_rng(3202)
    x = rng.integers(-128, 128, (6, 10, 8)).astype(np.int8)
    w = rng.integers(-127, 128, (24, 1, 1, 8))
    cfg = P.out_config(acc_bits=48 if with_acc else 32, zero_point=-1, per_channel=True)
    acc_in = rng.integers(-(1 << 40), 1 << 40, (6, 10, 24)) if with_acc else None
    kw = dict(ifm_zp=-5, ifm_bits=8, ifm_signed=True, cfg=cfg, bias=rng.integers(-999, 999, 24),
              scales=rng.integers(1 << 10, 1 << 15, 24), shifts=rng.integers(15, 30, 24))
    plan = E.plan_int_conv(x, w, (6, 10), (1, 1), (1, 1), (0, 0, 0, 0), -5, 8, True, cfg,
                           kw["bias"], kw["scales"], kw["shifts"], False, (1, 1))
    assert plan is not None and plan.flat == (6, 10) and plan.out_hw == (1, 60)
    calls, _ = _spy(monkeypatch, "_FINISH_GENERAL_TWIN" if with_acc else "_FINISH_FAST_TWIN")
    got = E.run_int_conv(plan, x, acc_in)
    assert [shape[:2] for _, shape in calls] == [(6, 10)]
    assert calls[0][0] == ("parallel" if MULTI else "serial")
    np.testing.assert_array_equal(got, E.conv2d(x, w, acc_in=acc_in, method="loop", **kw))


@pytest.mark.parametrize("signed, clip", [(True, True), (False, True), (True, False)])
def test_the_fast_stage_terms_hold_what_the_stage_reads(signed, clip):
    """_stage_terms' packed array for the fast stage: per channel scale, shift, bias, the
    rounding addend and the negative one's difference; then the OFM zero point and the clip
    bounds as the OFM's signedness reads the 16-bit registers (+-2**62 with
    activation_clip_range none), and the channel count (the stage's OFM is bytes)."""
    rng = np.random.default_rng(7)
    oc = 2  # fewer channels than the three limits and the count: the array is 4 wide
    cfg = P.out_config(ofm_bits=8, ofm_signed=signed, zero_point=-7 if signed else 200,
                       act_min=-50 if signed else 10, act_max=90, per_channel=True,
                       clip_none=not clip)
    bias, scales, shifts = (rng.integers(-999, 999, oc), rng.integers(1, 1 << 31, oc),
                            rng.integers(1, 60, oc))
    *_, sc, sh, bi, rp, rn, inline, k, fast = E._stage_terms(cfg, bias, scales, shifts, oc)
    assert inline and fast and k.shape == (6, 4)
    for row, want in zip(k[:5, :oc], (scales, shifts, bias, rp, rn - rp)):
        np.testing.assert_array_equal(row, want)
    for i in range(oc):
        assert (rp[i], rn[i]) == P.round_terms(shifts[i], int(cfg[P.C_ROUND]),
                                               int(cfg[P.C_DBL_RND]))
    limits = ((-50, 90) if signed else (10, 90)) if clip else (-(1 << 62), 1 << 62)
    assert tuple(k[5]) == (-7 if signed else 200, *limits, oc)


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("ofm_bits, ofm_signed, clip_none",
                         [(8, True, False), (8, False, True), (16, True, True),
                          (16, False, False), (32, True, False), (32, True, True)])
def test_the_fast_stage_writes_every_ofm_type_as_bytes(ofm_bits, ofm_signed, clip_none,
                                                       parallel, monkeypatch):
    """The fast output stage takes the OFM as its bytes (an int8 view): 8-, 16- and 32-bit
    OFMs, clipped or wrapping (the store truncates to OFM bits [U85-TRM: §3.6.7]), serial and
    parallel, equal the reference loop's, and the kernel is compiled for an int8 OFM only
    (one signature for every OFM type, issue 31 #5)."""
    from numba import types

    monkeypatch.setattr(E, "STAGE_PARALLEL", 1 if parallel else 1 << 62)
    rng = np.random.default_rng(ofm_bits + 3 * ofm_signed + 7 * clip_none)
    x = rng.integers(-128, 128, (5, 7, 6)).astype(np.int8)
    w = rng.integers(-127, 128, (9, 3, 3, 6))
    shift = {8: 30, 16: 24, 32: 12 if clip_none else 26}[ofm_bits]  # values across the type
    cfg = P.out_config(ofm_bits=ofm_bits, ofm_signed=ofm_signed, zero_point=3,
                       per_channel=True, clip_none=clip_none)
    kw = dict(pad=(1, 1, 1, 1), ifm_bits=8, ifm_signed=True, cfg=cfg,
              bias=rng.integers(-999, 999, 9), scales=rng.integers(1 << 20, 1 << 21, 9),
              shifts=rng.integers(-1, 2, 9) + shift)
    twin = E._FINISH_FAST_TWIN
    calls, _ = _spy(monkeypatch, "_FINISH_FAST_TWIN")
    got = E.conv2d(x, w, **kw)
    assert calls and calls[0][0] == ("parallel" if parallel and MULTI else "serial")
    want = E.conv2d(x, w, method="loop", **kw)
    assert got.dtype == want.dtype and got.dtype.itemsize * 8 == ofm_bits
    assert len(np.unique(want)) > 20  # (values that use the OFM's bytes, not one clip bound)
    np.testing.assert_array_equal(got, want)
    for kernel in (twin.serial, twin.parallel):
        assert {sig[-1] for sig in kernel.signatures} <= {types.Array(types.int8, 3, "C")}
    assert twin.serial.signatures if calls[0][0] == "serial" else twin.parallel.signatures
