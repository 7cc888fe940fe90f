"""Serial twins of the parallel kernels (issue 31 #5): a launch below SERIAL_WORK runs a wrapper
compiled without numba's parfor passes (half the compile time of a first run), a larger one the
parallel wrapper; both call one body over a range of the loop (emu/ranged.py), give the same
results, and never share a cache entry."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from accelstub.emu.conv import ethosu85 as E
from accelstub.emu.conv import int_conv as IC
from accelstub.emu.conv.vnni import HAVE_VNNI
from accelstub.emu.numeric import ethosu85 as P
from tests.helpers import emu_kernels

#: thin parallel wrappers (a prange over ranges, each range run by a serial kernel that small
#: work calls directly, so it needs no twin): (module, wrapper) -> its serial kernel
WRAPPERS = {("accelstub.emu.numeric.nvdla", "post_process_parallel"): "post_process",
            ("accelstub.emu.conv.ne16", "normquant_parallel"): "normquant"}


def test_every_parallel_kernel_has_a_serial_twin():
    """A parallel kernel without one would make every first run pay its parfor compile; a thin
    wrapper's serial kernel is the one it calls."""
    parallel = {(m, name): d for m, name, d in emu_kernels() if d.targetoptions.get("parallel")}
    assert parallel
    twinned = {id(t.parallel): t for t in IC.TWINS}
    for (module, name), d in parallel.items():
        if (module, name) in WRAPPERS:
            serial = getattr(sys.modules[module], WRAPPERS[module, name])
            assert not serial.targetoptions.get("parallel")
            assert serial in d.ranged_kernels  # it calls it, through its address
            continue
        assert id(d) in twinned, name
        t = twinned[id(d)]
        assert not t.serial.targetoptions.get("parallel")
        assert not t.body.targetoptions.get("parallel")
        assert t.serial.py_func.__qualname__ == d.py_func.__qualname__ + "_serial"
        # both wrap the one body (compiled once, called through its address)
        assert t.body in t.serial.ranged_kernels and t.body in d.ranged_kernels


def test_the_twins_are_cached_apart():
    """numba names a cache entry by module, qualified name and argument types, not by the
    parallel option: under one name a serial launch would load the parallel code or back."""
    for t in IC.TWINS:
        assert t.serial._cache._cache_file._index_path != t.parallel._cache._cache_file._index_path


def test_small_work_launches_the_serial_kernel_and_large_work_the_parallel_one():
    t = IC._VNNI_CONV_TWIN
    with IC.parallel(IC.SERIAL_WORK - 1) as par:
        assert par.kernel(t) is t.serial
    with IC.parallel(1 << 30) as par:
        assert par.kernel(t) is (t.parallel if par.threads > 1 else t.serial)


def _reference_sums(v, w, pad):
    """[K, Ho, Wo] int64 sums of a stride-1 convolution, written with numpy slicing."""
    c, h, wd = v.shape
    k, kh, kw, _ = w.shape
    x = np.zeros((c, h + 2 * pad, wd + 2 * pad), np.int64)
    x[:, pad:pad + h, pad:pad + wd] = v
    ho, wo = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.zeros((k, ho, wo), np.int64)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("kc,chw->khw", w[:, i, j, :].astype(np.int64),
                             x[:, i:i + ho, j:j + wo])
    return out


@pytest.mark.parametrize("kernel", ["int16", "int8"])
def test_serial_and_parallel_launches_give_the_same_sums(kernel, monkeypatch):
    if kernel == "int8" and not HAVE_VNNI:
        pytest.skip("the byte kernel needs AVX-512 VNNI")  # the int16 case runs everywhere
    rng = np.random.default_rng(31)
    v = rng.integers(-128, 128, (6, 11, 13), dtype=np.int8)
    w = rng.integers(-128, 128, (9, 3, 3, 6))
    want = _reference_sums(v, w, 1)
    got = {}
    for label, serial_work in (("serial", 1 << 62), ("parallel", 0)):
        monkeypatch.setattr(IC, "SERIAL_WORK", serial_work)
        got[label] = IC.conv_sums(v, IC.pack_weights(w), want.shape[1:], pad=(1, 1),
                                  kernel=kernel).copy()
    np.testing.assert_array_equal(got["serial"], want)
    np.testing.assert_array_equal(got["parallel"], want)


@pytest.mark.parametrize("acc_bits", [32, 48])  # 32: the fast output stage, 48: the general
def test_ethos_output_stage_twins_agree_with_the_loop(acc_bits, monkeypatch):
    """Ethos-U85's output stages (_finish_fast, _finish_general) serial and parallel, against
    method="loop" (the numba reference loop with its own output stage)."""
    rng = np.random.default_rng(5)
    ifm = rng.integers(-128, 128, (7, 9, 5))
    weights = rng.integers(-255, 256, (6, 3, 3, 5))
    cfg = P.out_config(scale=1 << 29, shift=36, acc_bits=acc_bits, zero_point=3)
    kw = dict(pad=(1, 1, 1, 1), ifm_bits=8, ifm_signed=True, cfg=cfg,
              bias=rng.integers(-999, 999, 6))
    want = E.conv2d(ifm, weights, method="loop", **kw)
    for serial_work in (1 << 62, 0):
        monkeypatch.setattr(IC, "SERIAL_WORK", serial_work)
        np.testing.assert_array_equal(E.conv2d(ifm, weights, **kw), want)


def test_a_first_small_launch_compiles_only_the_serial_kernel(tmp_path):
    """In an empty kernel cache, a small convolution compiles the serial twin and leaves the
    parallel kernel uncompiled (what a demo's first run saves)."""
    code = ("import numpy as np\n"
            "from accelstub.emu.conv import int_conv as IC\n"
            "v = np.ones((2, 5, 5), np.int16); w = np.ones((3, 3, 3, 2), np.int64)\n"
            "IC.conv_sums(v, IC.pack_weights(w), (3, 3), kernel='int16')\n"
            "for t in (IC._PACK_INPUT_TWIN, IC._CONV_BLOCKS_TWIN):\n"
            "    print(len(t.serial.signatures), len(t.parallel.signatures))\n")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "0", "1", "0"]


#: the child of the test below: each twin's launch, serial (SERIAL_WORK above the work) and
#: parallel (SERIAL_WORK 0), on loops whose iteration counts do not divide by 2 threads or
#: by IC.CHUNKS, or are fewer than the threads; prints each case that ran
UNEVEN_CHILD = """
import numba
import numpy as np
from accelstub.emu.conv import ethosu85 as E
from accelstub.emu.conv import int_conv as IC
from accelstub.emu.conv import winograd as W
from accelstub.emu.numeric import ethosu85 as P

assert numba.config.NUMBA_NUM_THREADS == 2
rng = np.random.default_rng(7)


def both(run):
    got = []
    for serial_work in (1 << 62, 0):
        IC.SERIAL_WORK = serial_work
        got.append(np.array(run(), copy=True))
    assert got[0].any(), "a case of zeros proves nothing"
    np.testing.assert_array_equal(got[1], got[0])


kernels = ["int16"] + (["int8"] if IC.HAVE_VNNI else [])
for kernel in kernels:
    for k, h in ((6, 1), (6, 3), (20, 5), (6, 67)):  # tasks: 1, 3, 15 (int8), 67 (> CHUNKS)
        v = rng.integers(-128, 128, (5, h, 9), dtype=np.int8)
        w = IC.pack_weights(rng.integers(-128, 128, (k, 3, 3, 5)))
        both(lambda: IC.conv_sums(v, w, (h, 9), pad=(1, 1), kernel=kernel))
        print(kernel, k, h)
for acc_bits in (32, 48):  # the fast and the general output stage
    for h in (1, 3, 67):
        ifm = rng.integers(-128, 128, (h, 9, 5))
        weights = rng.integers(-255, 256, (6, 3, 3, 5))
        kw = dict(pad=(1, 1, 1, 1), ifm_bits=8, ifm_signed=True, bias=rng.integers(-999, 999, 6),
                  cfg=P.out_config(scale=1 << 29, shift=30, acc_bits=acc_bits, zero_point=3))
        both(lambda: E.conv2d(ifm, weights, **kw))
        print("stage", acc_bits, h)
for ho in (2, 6, 134):  # tile rows: 1, 3, 67
    v = rng.integers(-100, 100, (16, ho, 6), dtype=np.int16)
    ww = W.winograd_weights(rng.integers(-100, 100, (6, 3, 3, 16)))
    both(lambda: W.winograd_sums(v, ww, (ho, 6), pad=(1, 1)))
    print("winograd", ho)
for t in IC.TWINS:  # every twin's parallel wrapper ran (the byte kernel's: with VNNI)
    if t is IC._VNNI_CONV_TWIN and not IC.HAVE_VNNI:
        continue
    assert t.parallel.signatures, t.parallel.py_func.__name__
    # and each kernel a wrapper calls has exactly the wrapper's argument types and a range:
    # the types a wrapper loaded from the disk cache has its kernels loaded for (emu/ranged.py)
    for kernel in t.parallel.ranged_kernels:
        want = {tuple(s) + (numba.intp, numba.intp)
                for s in t.serial.signatures + t.parallel.signatures}
        assert set(map(tuple, kernel.signatures)) == want, kernel.py_func.__name__
"""


def test_parallel_twins_on_two_threads_give_the_serial_result_on_uneven_splits():
    """The parallel wrappers split their loop into min(iterations, IC.CHUNKS) parts over the
    threads (emu/ranged.py): on 2 threads, loops of 1 iteration (fewer than the threads), odd
    counts and more than CHUNKS give the serial twins' results, for every twin (the int8
    cases where the byte kernel runs: AVX-512 VNNI)."""
    env = dict(os.environ, NUMBA_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", UNEVEN_CHILD], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    cases = out.stdout.split("\n")
    convs = 8 if HAVE_VNNI else 4
    assert len([c for c in cases if c.startswith("int")]) == convs
    assert len([c for c in cases if c.startswith(("stage", "winograd"))]) == 9
