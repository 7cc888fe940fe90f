"""The exact integer Winograd F(2x2, 3x3) kernel (accelstub.emu.conv.winograd, issue 31 #1
prototype) against plain integer numpy written here (explicit loops over the 3x3 window, int64;
no code shared with the kernel), and its bound check: where the check refuses, the direct
kernel's (int_conv.conv_sums) sums are the answer."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelstub.emu.conv import int_conv as IC
from accelstub.emu.conv import winograd as W


def reference(v, w, zp, out_hw, pad, in_hw=None):
    """out[k, y, x] = sum over i, j < 3 and c of (v[c, y + i - top, x + j - left] - zp) *
    w[k, i, j, c], reading 0 outside the used input; v [C, H, W], w [K, 3, 3, C]; int64."""
    c, h, wd = v.shape
    rows, cols = in_hw or (h, wd)
    rows, cols = min(rows, h), min(cols, wd)
    ho, wo = out_hw
    out = np.zeros((w.shape[0], ho, wo), np.int64)
    w64 = w.astype(np.int64)
    for y in range(ho):
        for x in range(wo):
            for i in range(3):
                for j in range(3):
                    r, q = y + i - pad[0], x + j - pad[1]
                    if 0 <= r < rows and 0 <= q < cols:
                        d = v[:, r, q].astype(np.int64) - zp
                        out[:, y, x] += np.einsum("kc,c->k", w64[:, i, j, :], d)
    return out


def wrapped(a):
    """``a`` modulo 2**32 as int32 (what the int32 kernels compute where sums overflow)."""
    return a.astype(np.int64).astype(np.uint32).view(np.int32)


def layout(rng, dtype, c, h, wd, channels_last, lo=None, hi=None):
    """A random input [C, H, W] of ``dtype`` (values in [lo, hi], default its whole range),
    channels-last in memory (an NHWC tensor seen as [C, H, W]) or not."""
    info = np.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    if channels_last:
        return rng.integers(lo, hi + 1, (h, wd, c)).astype(dtype).transpose(2, 0, 1)
    return rng.integers(lo, hi + 1, (c, h, wd)).astype(dtype)


def check(v, w, zp, pad, bottom_right, hwc, in_hw=None):
    """winograd_sums of ``v`` and ``w`` with padding ``pad`` (top, left) and ``bottom_right``,
    equal to the reference; the bound check must admit the case."""
    ho = v.shape[1] + pad[0] + bottom_right[0] - 2
    wo = v.shape[2] + pad[1] + bottom_right[1] - 2
    ww = W.winograd_weights(w)
    assert W.winograd_fits(*W.input_range(v.dtype, zp), ww)
    got = W.winograd_sums(v, ww, (ho, wo), zero_point=zp, pad=pad, hwc=hwc, in_hw=in_hw)
    ref = reference(v, w, zp, (ho, wo), pad, in_hw)
    assert got.dtype == np.int32
    assert np.array_equal(got, ref.transpose(1, 2, 0) if hwc else ref)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_winograd_sums_equal_the_reference_on_random_inputs(data):
    d = data.draw
    c, k = d(st.integers(1, 40)), d(st.integers(1, 40))
    h, wd = d(st.integers(1, 11)), d(st.integers(1, 11))
    pad = (d(st.integers(0, 1)), d(st.integers(0, 1)))
    bottom_right = (d(st.integers(0, 1)), d(st.integers(0, 1)))
    if h + pad[0] + bottom_right[0] < 3 or wd + pad[1] + bottom_right[1] < 3:
        return
    dtype = d(st.sampled_from([np.int8, np.uint8]))
    zp = d(st.integers(-128, 127)) if dtype == np.int8 else d(st.integers(0, 255))
    rng = np.random.default_rng(d(st.integers(0, 2**32 - 1)))
    v = layout(rng, dtype, c, h, wd, d(st.booleans()))
    w = rng.integers(-128, 128, (k, 3, 3, c))
    check(v, w, zp, pad, bottom_right, d(st.booleans()))


#: (H, W, (top, left), (bottom, right)): odd and even sizes down to 1, each side padded by 0
#: or 1, where the padded input holds the 3x3 kernel at least once
SIZES = [(h, wd, pad, br)
         for h, wd in [(1, 1), (1, 2), (2, 1), (2, 2), (3, 3), (4, 5), (5, 4), (7, 9), (8, 8),
                       (1, 17)]
         for pad, br in [((0, 0), (0, 0)), ((1, 1), (1, 1)), ((1, 0), (0, 1)), ((0, 1), (1, 0)),
                         ((1, 1), (0, 0)), ((0, 0), (1, 1))]
         if h + pad[0] + br[0] >= 3 and wd + pad[1] + br[1] >= 3]


@pytest.mark.parametrize("h,wd,pad,bottom_right", SIZES)
def test_odd_and_even_sizes_down_to_1_and_padding_on_each_side(h, wd, pad, bottom_right):
    rng = np.random.default_rng(h * 100 + wd)
    v = layout(rng, np.int8, 5, h, wd, True)
    w = rng.integers(-128, 128, (17, 3, 3, 5))  # 17 output channels: one past a whole block
    for hwc in (False, True):
        check(v, w, 3, pad, bottom_right, hwc)


@pytest.mark.parametrize("c", [1, 2, 15, 16, 33, 511, 512])
@pytest.mark.parametrize("weight", [-128, 127])
@pytest.mark.parametrize("dtype,value,zp", [(np.uint8, 255, 0), (np.uint8, 0, 255),
                                            (np.int8, -128, 127), (np.int8, 127, -128)])
def test_extreme_inputs_and_weights(c, weight, dtype, value, zp):
    """|x - zp| = 255 everywhere, every weight -128 or 127, C odd and even up to 512, K not a
    multiple of the block: the largest sums the bound admits for int8 data (255 * 128 * 9 *
    512 < 2^31 / 4)."""
    v = np.full((9, 7, c), value, dtype).transpose(2, 0, 1)
    w = np.full((19, 3, 3, c), weight, np.int64)
    check(v, w, zp, (1, 1), (1, 1), hwc=c % 2 == 1)


def test_channels_first_input_and_a_smaller_used_input():
    """An input whose channels are not contiguous (copied channels last) and ``in_hw`` smaller
    than the array (the rest reads 0), as conv_sums takes them."""
    rng = np.random.default_rng(7)
    v = layout(rng, np.uint8, 6, 9, 10, False)
    w = rng.integers(-128, 128, (4, 3, 3, 6))
    for hwc in (False, True):
        check(v, w, 200, (1, 1), (1, 1), hwc, in_hw=(6, 7))


def test_a_large_layer_runs_the_parallel_kernels_and_equals_the_direct_kernel():
    """Above int_conv.SERIAL_WORK the parallel twins run; the sums equal conv_sums' (the
    direct int16-pair kernel's) and the reference."""
    rng = np.random.default_rng(11)
    v = layout(rng, np.int8, 64, 24, 22, True)
    w = rng.integers(-128, 128, (40, 3, 3, 64))
    assert IC.parallel(24 * 22 * 40 * 64 * 9).threads == IC.parallel(1 << 40).threads
    got = W.winograd_sums(v, W.winograd_weights(w), (24, 22), zero_point=-5, pad=(1, 1))
    direct = IC.conv_sums(v, IC.pack_weights(w), (24, 22), zero_point=-5, pad=(1, 1),
                          kernel="int16")
    assert np.array_equal(got, direct)
    assert np.array_equal(got, reference(v, w, -5, (24, 22), (1, 1)))


def test_padded_gives_the_whole_c_contiguous_work_array():
    """``padded`` (as conv_sums'): the whole work array, C-contiguous (numba compiles one
    type for it), the sums at its start: [K rounded up to 16, 2 Ty + 1, 2 Tx rounded up to 8]
    or, channels last, [2 Ty, 2 Tx, K rounded up]."""
    rng = np.random.default_rng(13)
    v = layout(rng, np.int8, 6, 5, 7, True)
    w = rng.integers(-128, 128, (18, 3, 3, 6))
    ww = W.winograd_weights(w)
    ref = reference(v, w, 2, (5, 7), (1, 1))
    whole = W.winograd_sums(v, ww, (5, 7), zero_point=2, pad=(1, 1), padded=True)
    assert whole.flags.c_contiguous and whole.shape == (32, 7, 8)
    assert np.array_equal(whole[:18, :5, :7], ref)
    whole = W.winograd_sums(v, ww, (5, 7), zero_point=2, pad=(1, 1), hwc=True, padded=True)
    assert whole.flags.c_contiguous and whole.shape == (6, 8, 32)
    assert np.array_equal(whole[:5, :7, :18], ref.transpose(1, 2, 0))


def test_int16_data_within_the_bound():
    """int16 data whose values after the zero point stay within 8191 (4 * 8191 fits int16):
    the bound check admits that range, and the sums are exact."""
    rng = np.random.default_rng(3)
    v = layout(rng, np.int16, 7, 6, 6, True, -8000, 8000)
    w = rng.integers(-128, 128, (9, 3, 3, 7))
    ww = W.winograd_weights(w)
    assert W.winograd_fits(-8191, 8191, ww) and not W.winograd_fits(-8192, 8191, ww)
    got = W.winograd_sums(v, ww, (6, 6), zero_point=-100, pad=(1, 1))
    assert np.array_equal(got, reference(v, w, -100, (6, 6), (1, 1)))


def test_the_bound_check_refuses_a_case_winograd_would_get_wrong():
    """|x - zp| = 255, weights -128, C = 1900: the centre output's sum, 255 * 128 * 9 * 1900,
    fits int32 but 4 times it does not. The Winograd output transform then loses the top bits
    (it would be wrong), and winograd_fits refuses (so int_conv.winograd_for does: the case
    "int16 data: the bound fails" of test_conv_sums_takes_winograd_exactly_where_the_rule_says
    shows conv_sums' direct kernel taken there)."""
    c = 1900
    v = np.full((3, 3, c), 255, np.uint8).transpose(2, 0, 1)
    w = np.full((1, 3, 3, c), -128, np.int64)
    w.flags.writeable = False
    ref = reference(v, w, 0, (3, 3), (1, 1))
    assert 1 << 29 < abs(int(ref[0, 1, 1])) < 1 << 31
    ww = W.winograd_weights(w)
    assert ww.words is not None and not W.winograd_fits(*W.input_range(np.uint8, 0), ww)
    unchecked = W.winograd_sums(v, ww, (3, 3), pad=(1, 1))
    assert unchecked[0, 1, 1] != ref[0, 1, 1]  # what the check prevents


def test_weights_whose_transform_passes_int16_are_refused():
    """Weights of 4000: U reaches 9 * 4000 > 32767, no int16 form; winograd_fits refuses them
    and winograd_sums will not run them."""
    rng = np.random.default_rng(5)
    v = layout(rng, np.int8, 3, 5, 5, True)
    w = np.full((2, 3, 3, 3), 4000, np.int64)
    ww = W.winograd_weights(w)
    assert ww.words is None and ww.u_max == 36000
    assert not W.winograd_fits(-1, 1, ww)
    with pytest.raises(ValueError, match="past int16"):
        W.winograd_sums(v, ww, (5, 5), pad=(1, 1))


def test_a_kernel_other_than_3x3_is_an_error():
    with pytest.raises(ValueError, match="3x3 kernel, got 1x1"):
        W.winograd_weights(np.ones((2, 1, 1, 3), np.int64))


#: the child: compiles the Winograd kernels for numba's target (one small call) and prints
#: the GEMM's instructions: its body's, which both twins call through its address
#: (emu/ranged.py)
ASM_CHILD = """
import numpy as np
from accelstub.emu.conv import winograd as W
v = np.zeros((2, 5, 5), np.int8)
W.winograd_sums(v, W.winograd_weights(np.ones((3, 3, 3, 2), np.int64)), (3, 3))
k = W._WINO_GEMM_TWIN.body
print(k.inspect_asm(k.signatures[0]))
"""


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="names x86 instructions")
def test_the_gemm_is_vpmaddwd_on_avx2_without_vnni_or_512_bit_registers(tmp_path):
    """Under the AVX2 approximation (haswell's instruction set, its own empty cache: numba
    shows no assembly for cached code) the GEMM's step is vpmaddwd + vpaddd on ymm registers:
    neither vpdpwssd (AVX-512 VNNI) nor zmm registers, which an AVX2-only CPU lacks."""
    env = dict(os.environ, ACCELSTUB_VNNI="0", NUMBA_CPU_NAME="haswell",
               NUMBA_CPU_FEATURES="+avx2,+fma", NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", ASM_CHILD], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    asm = out.stdout
    assert "vpmaddwd" in asm and "ymm" in asm
    assert "vpdpwssd" not in asm and "zmm" not in asm


# -- conv_sums' int16 branch: where it takes Winograd (int_conv.winograd_for) --------------------

def _launch_kind(monkeypatch, v, w, out_hw, vnni=False, **kw):
    """conv_sums' sums of ``v`` and ``w`` with a ``launches`` dict, and the name of the launch
    it kept there (HAVE_VNNI as ``vnni``: the weights are packed under it)."""
    monkeypatch.setattr(IC, "HAVE_VNNI", vnni)
    packed = IC.pack_weights(w)
    launches = {}
    out = IC.conv_sums(IC.read_only(v), packed, out_hw, launches=launches, **kw)
    (launch,) = launches.values()
    return np.array(out), type(launch).__name__, packed


RULE_CASES = {  # name: (C, K, H, W, kernel, stride, dilation, dtype, zero point, Winograd?)
    "3x3 C16 above SERIAL_WORK": (16, 16, 32, 32, 3, 1, 1, np.int8, 0, True),
    "uint8, zero point, odd sizes": (24, 20, 31, 27, 3, 1, 1, np.uint8, 7, True),
    "below SERIAL_WORK": (16, 16, 15, 16, 3, 1, 1, np.int8, 0, False),
    "C below 16": (15, 64, 32, 32, 3, 1, 1, np.int8, 0, False),
    "stride 2": (16, 32, 64, 64, 3, 2, 1, np.int8, 0, False),
    "dilation 2": (16, 32, 34, 34, 3, 1, 2, np.int8, 0, False),
    "5x5": (16, 16, 32, 32, 5, 1, 1, np.int8, 0, False),
    "int16 data: the bound fails": (16, 16, 32, 32, 3, 1, 1, np.int16, 0, False),
}


@pytest.mark.parametrize("name", RULE_CASES)
def test_conv_sums_takes_winograd_exactly_where_the_rule_says(monkeypatch, name):
    """Without VNNI: Winograd for a 3x3, stride-1, dilation-1 layer of C >= 16 whose work
    reaches SERIAL_WORK and whose input type passes the bound, else the direct kernel; the
    sums equal the direct kernel's and the reference either way."""
    c, k, h, wd, kk, s, d, dtype, zp, want = RULE_CASES[name]
    rng = np.random.default_rng(len(name))
    v = layout(rng, dtype, c, h, wd, channels_last=True)
    w = rng.integers(-128, 128, (k, kk, kk, c))
    pad = d * (kk - 1) // 2
    ho, wo = (h + 2 * pad - d * (kk - 1) - 1) // s + 1, (wd + 2 * pad - d * (kk - 1) - 1) // s + 1
    kw = dict(zero_point=zp, pad=(pad, pad), stride=(s, s), dilation=(d, d))
    out, kind, packed = _launch_kind(monkeypatch, v, w, (ho, wo), **kw)
    assert kind == ("WinogradLaunch" if want else "Int16Launch")
    assert (IC.winograd_for(v.dtype, zp, packed, (ho, wo), (s, s), (d, d)) is not None) == want
    direct = IC.conv_sums(v, packed, (ho, wo), kernel="direct", **kw)
    np.testing.assert_array_equal(out, direct)
    if kk == 3 and s == d == 1:
        np.testing.assert_array_equal(out, wrapped(reference(v, w, zp, (ho, wo), (pad, pad))))


def test_kernel_int16_takes_winograd_and_direct_does_not(monkeypatch):
    """``kernel="int16"`` is the int16 branch, Winograd included (also with VNNI: no byte
    launch is asked for); ``kernel="direct"`` never runs it. Both give the reference's sums."""
    rng = np.random.default_rng(5)
    v = layout(rng, np.int8, 32, 24, 24, channels_last=False)
    w = rng.integers(-128, 128, (24, 3, 3, 32))
    packed = IC.pack_weights(w)
    calls = []
    real = W.winograd_launch
    monkeypatch.setattr(W, "winograd_launch", lambda *a, **k: calls.append(1) or real(*a, **k))
    want = wrapped(reference(v, w, 0, (24, 24), (1, 1)))
    np.testing.assert_array_equal(IC.conv_sums(v, packed, (24, 24), pad=(1, 1), kernel="int16"),
                                  want)
    assert calls == [1]
    np.testing.assert_array_equal(IC.conv_sums(v, packed, (24, 24), pad=(1, 1),
                                               kernel="direct"), want)
    assert calls == [1]


@pytest.mark.skipif(not IC.HAVE_VNNI, reason="a byte launch needs AVX-512 VNNI")
def test_a_byte_launch_keeps_the_byte_kernel(monkeypatch):
    """With VNNI, int8 data and int8 weights: the byte kernel, not Winograd, for a layer the
    rule would otherwise take."""
    rng = np.random.default_rng(6)
    v = layout(rng, np.int8, 16, 32, 32, channels_last=True)
    w = rng.integers(-128, 128, (16, 3, 3, 16))
    out, kind, _ = _launch_kind(monkeypatch, v, w, (32, 32), vnni=True, pad=(1, 1))
    assert kind == "ByteLaunch"
    np.testing.assert_array_equal(out, wrapped(reference(v, w, 0, (32, 32), (1, 1))))


@pytest.mark.parametrize("hwc", [False, True])
def test_a_kept_winograd_launch_and_its_padded_array(monkeypatch, hwc):
    """The Winograd call kept in ``launches`` runs again for a new input of the same layout;
    ``padded`` gives its whole C-contiguous work array, K rounded up to 16 and at least Ho x
    Wo, holding the sums at [k, y, x] ([y, x, k] with ``hwc``), as the devices index it."""
    monkeypatch.setattr(IC, "HAVE_VNNI", False)
    rng = np.random.default_rng(7)
    w = rng.integers(-128, 128, (20, 3, 3, 16))
    packed = IC.pack_weights(w)
    launches = {}
    for seed in range(2):
        v = IC.read_only(layout(np.random.default_rng(seed), np.int8, 16, 33, 35, True))
        acc = IC.conv_sums(v, packed, (33, 35), pad=(1, 1), hwc=hwc, padded=True,
                           launches=launches)
        assert type(next(iter(launches.values()))).__name__ == "WinogradLaunch"
        assert acc.flags.c_contiguous and acc.dtype == np.int32
        want = wrapped(reference(v, w, 0, (33, 35), (1, 1)))
        if hwc:
            assert acc.shape[0] >= 33 and acc.shape[1] >= 35 and acc.shape[2] == 32
            np.testing.assert_array_equal(acc[:33, :35, :20], want.transpose(1, 2, 0))
        else:
            assert acc.shape[0] == 32 and acc.shape[1] >= 33 and acc.shape[2] >= 35
            np.testing.assert_array_equal(acc[:20, :33, :35], want)
    assert len(launches) == 1


def test_winograd_weights_of_packed_weights_are_kept_per_packing():
    """packed_winograd_weights reads the 3x3 weights back from the packed words (the same
    transform as of the raw weights) and keeps them while the words live."""
    w = np.random.default_rng(8).integers(-128, 128, (5, 3, 3, 7))
    packed = IC.pack_weights(w)
    ww = W.packed_winograd_weights(packed)
    assert W.packed_winograd_weights(packed) is ww
    raw = W.winograd_weights(w)
    np.testing.assert_array_equal(ww.words, raw.words)
    assert (ww.k, ww.c, ww.u_max, ww.w_sum) == (raw.k, raw.c, raw.u_max, raw.w_sum)
    key = id(packed.words)
    del packed
    assert key not in W._OF_PACKED
