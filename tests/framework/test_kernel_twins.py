"""Serial twins of the parallel kernels (issue 31 #5): a launch below SERIAL_WORK runs a copy of
the kernel compiled without numba's parfor passes (half the compile time of a first run), a
larger one the parallel kernel; both give the same results, and they never share a cache entry."""
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


def test_every_parallel_kernel_has_a_serial_twin():
    """A parallel kernel without one would make every first run pay its parfor compile."""
    parallel = {name: d for _, name, d in emu_kernels() if d.targetoptions.get("parallel")}
    assert parallel
    twinned = {id(t.parallel): t for t in IC.TWINS}
    for name, d in parallel.items():
        assert id(d) in twinned, name
        serial = twinned[id(d)].serial
        assert not serial.targetoptions.get("parallel")
        assert serial.py_func.__code__ is d.py_func.__code__  # the same function, not a copy
        assert serial.py_func.__qualname__ == d.py_func.__qualname__ + "_serial"


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
