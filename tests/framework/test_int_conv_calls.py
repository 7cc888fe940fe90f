"""The Python around the shared convolution kernels (issue 31 #1, #2): a kept launch's call
is worked out once per thread (emu/conv/int_conv.py run_byte_launch, run_int16_launch) and
gives the same sums as a launch worked out anew; kernels type plain ndarray arguments as
numba's typeof does without importing numpy.ma (emu/jit.py argument_type)."""
from __future__ import annotations

import subprocess
import sys
import threading

import numba
import numpy as np
import pytest

from accelstub.emu.conv import int_conv as IC
from accelstub.emu.jit import argument_type
from tests.framework.test_int_conv import reference


def _layers():
    """(input [C, H, W] of several layouts, weights [K, kh, kw, C], out_hw, pad, hwc): the
    byte conv kernel with and without the input copy (channels not a multiple of 4, a CHW
    array), on one thread and on all (work past SERIAL_WORK), the pointwise kernel; each
    also as int16 data, which the int16-pair kernels take (as every input where the CPU has
    no VNNI)."""
    rng = np.random.default_rng(31)
    out = []
    for c, h, k, kh, hwc, chw in ((1, 28, 60, 3, False, False), (60, 14, 60, 3, False, False),
                                  (12, 4, 10, 1, True, False), (3, 6, 8, 1, True, True),
                                  (64, 40, 64, 3, True, False), (8, 5, 20, 3, False, True)):
        nhwc = rng.integers(-128, 128, (h, h, c)).astype(np.int8)
        w = rng.integers(-128, 128, (k, kh, kh, c))
        for data in (nhwc, nhwc.astype(np.int16)):
            v = np.ascontiguousarray(data.transpose(2, 0, 1)) if chw else data.transpose(2, 0, 1)
            out.append((v, w, (h, h), (kh // 2, kh // 2), hwc))
    return out


def _want(v, w, out_hw, pad, hwc):
    """The independent plain-integer sums (test_int_conv.reference) in conv_sums' layout."""
    want = reference(v, w, 0, out_hw, v.shape[1:], pad, (1, 1), (1, 1))
    return want.transpose(1, 2, 0) if hwc else want


def _crop(sums, k, out_hw, hwc):
    """conv_sums' padded work array cut to its [Ho, Wo, K] / [K, Ho, Wo] sums (past them it is
    work space: Winograd's spare rows are never written)."""
    return sums[:out_hw[0], :out_hw[1], :k] if hwc else sums[:k, :out_hw[0], :out_hw[1]]


def test_a_kept_call_is_worked_out_once_per_thread_and_sums_as_a_new_launch():
    """Each layer: the first call with a ``launches`` dict keeps the launch (byte kernel or
    int16-pair kernels) and, in it, this thread's call; later calls (new input values each
    time) reuse that call object, and every call's sums equal those of conv_sums without kept
    launches. Another thread works out a call of its own with its own work arrays, and its
    sums are right too; each call's sums also equal the independent plain-integer reference
    (test_int_conv.reference). (The int16 pointwise kernel keeps no call: None is kept.)"""
    rng = np.random.default_rng(7)
    kinds = set()
    for v, w, out_hw, pad, hwc in _layers():
        pw, launches = IC.pack_weights(w), {}
        kw = dict(pad=pad, hwc=hwc, padded=True)
        IC.conv_sums(v, pw, out_hw, launches=launches, **kw)
        (launch,) = launches.values()
        kinds.add(type(launch).__name__)
        if launch is None:
            assert v.dtype == np.int16 or not IC.HAVE_VNNI
            assert IC.pixelwise(v.shape, out_hw, None, pad, (1, 1))
            continue
        call = launch.calls.call
        for _ in range(3):
            v[...] = rng.integers(-128, 128, v.shape)
            got = IC.conv_sums(v, pw, out_hw, launches=launches, **kw).copy()
            np.testing.assert_array_equal(_crop(got, w.shape[0], out_hw, hwc), _crop(
                IC.conv_sums(v, pw, out_hw, **kw), w.shape[0], out_hw, hwc))
            np.testing.assert_array_equal(_crop(got, w.shape[0], out_hw, hwc),
                                          _want(v, w, out_hw, pad, hwc))
            assert launch.calls.call is call
        seen = {}

        def other(v=v, pw=pw, out_hw=out_hw, kw=kw, launches=launches, launch=launch,
                  seen=seen):
            seen["sums"] = IC.conv_sums(v, pw, out_hw, launches=launches, **kw).copy()
            seen["call"] = launch.calls.call

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert seen["call"] is not call and seen["call"].acc is not call.acc
        np.testing.assert_array_equal(_crop(seen["sums"], w.shape[0], out_hw, hwc), _crop(
            IC.conv_sums(v, pw, out_hw, **kw), w.shape[0], out_hw, hwc))
        np.testing.assert_array_equal(_crop(seen["sums"], w.shape[0], out_hw, hwc),
                                      _want(v, w, out_hw, pad, hwc))
        assert launch.calls.call is call
    # without VNNI the int8 3x3 layers past SERIAL_WORK take Winograd (int_conv.winograd_for)
    byte = {"ByteLaunch", "PointwiseLaunch"} if IC.HAVE_VNNI else {"WinogradLaunch"}
    assert kinds == byte | {"Int16Launch", "NoneType"}


def test_a_kept_call_launches_the_kernel_version_parallel_chooses():
    """The kept call runs the serial twins below SERIAL_WORK and holds no parallel section;
    above it, on more than one thread, the parallel kernels inside a parallel section."""
    for v, w, out_hw, pad, hwc in _layers():
        launches = {}
        IC.conv_sums(v, IC.pack_weights(w), out_hw, pad=pad, hwc=hwc, launches=launches)
        (launch,) = launches.values()
        if launch is None:
            continue
        call = launch.calls.call
        if isinstance(launch, IC.PointwiseLaunch):
            assert call.kernel is IC._pointwise8 and call.par is None
            continue
        par = IC.parallel(launch.work)
        assert (call.par is None) == (par.threads == 1)
        if isinstance(launch, IC.Int16Launch):
            assert call.pack is par.kernel(IC._PACK_INPUT_TWIN)
            assert call.conv is par.kernel(IC._CONV_BLOCKS_TWIN)
        elif type(launch).__name__ == "WinogradLaunch":
            from accelstub.emu.conv import winograd
            assert call.gemm is par.kernel(winograd._WINO_GEMM_TWIN)
        else:
            assert call.kernel is par.kernel(IC._VNNI_CONV_TWIN)
    assert any(IC.parallel(v.size * w.size).threads > 1 for v, w, *_ in _layers()) \
        or numba.config.NUMBA_NUM_THREADS == 1


@pytest.mark.parametrize("make", [
    lambda a: a, lambda a: IC.read_only(a), lambda a: a.T, lambda a: IC.read_only(a[:, ::2]),
    lambda a: a.astype(np.uint16), lambda a: IC.read_only(a.astype(np.float64).T),
    lambda a: a.reshape(-1)[::3], lambda a: a[:0]])
def test_argument_type_is_numbas_type_of_a_plain_array(make):
    a = make(np.arange(48, dtype=np.int32).reshape(6, 8))
    assert argument_type(a) == numba.typeof(a)


class _Sub(np.ndarray):
    pass


def test_argument_type_leaves_other_values_to_numba():
    assert argument_type(np.zeros(3, ">i4")) is None  # a dtype numba does not take
    assert argument_type(np.zeros(3).view(_Sub)) is None  # a subclass
    assert argument_type(3) is None and argument_type((1, 2)) is None


FRESH = """
import sys, numpy as np
from accelstub.stub.numba_start import start_numba_lean
start_numba_lean()  # as a run starts: SciPy, which imports numpy.ma, hidden from numba
from accelstub.emu.conv import int_conv as IC
launches, rng = {}, np.random.default_rng(0)
v = IC.read_only(rng.integers(-128, 128, (5, 5, 8)).astype(np.int8)).transpose(2, 0, 1)
w = rng.integers(-128, 128, (4, 3, 3, 8))
got = IC.conv_sums(v, IC.pack_weights(w), (5, 5), pad=(1, 1), launches=launches)
print(type(next(iter(launches.values()))).__name__, "numpy.ma" in sys.modules)
"""


def test_a_read_only_input_reaches_the_byte_kernel_without_importing_numpy_ma():
    """A process's first call of a kernel with a read-only array (numba's C dispatcher hands
    it to typeof_pyval), numba started as `accelstub run` starts it, leaves numpy.ma
    unimported."""
    out = subprocess.run([sys.executable, "-c", FRESH], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    # the byte kernel's launch where the CPU has it, else the int16-pair kernels'
    want = "ByteLaunch" if IC.HAVE_VNNI else "Int16Launch"
    assert out.stdout.split() == [want, "False"]
