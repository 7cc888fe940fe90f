"""The shared integer convolution kernel (accelstub.emu.conv.int_conv) and its vector intrinsics
(accelstub.emu.conv.simd), against plain integer numpy written here (no code shared)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from accelstub.emu.conv import int_conv as IC
from accelstub.emu.conv.simd import vbcast, vget, vload, vmadd, vstore, vstore4, vzero


def reference(v, w, zp, out_hw, in_hw, pad, stride, dilation):
    """out[k, y, x] = sum over taps and channels of (v - zp) * w, outside the used input 0;
    v [C, H, W], w [K, kh, kw, C]; int64 throughout."""
    c, h, wd = v.shape
    k, kh, kw, _ = w.shape
    rows, cols = min(in_hw[0], h), min(in_hw[1], wd)
    ho, wo = out_hw
    x = np.zeros((c, rows + 2 * kh * dilation[0] + ho * stride[0] + pad[0],
                  cols + 2 * kw * dilation[1] + wo * stride[1] + pad[1]), np.int64)
    x[:, pad[0]:pad[0] + rows, pad[1]:pad[1] + cols] = v[:, :rows, :cols].astype(np.int64) - zp
    out = np.zeros((k, ho, wo), np.int64)
    for i in range(kh):
        for j in range(kw):
            r0, c0 = i * dilation[0], j * dilation[1]
            patch = x[:, r0:r0 + ho * stride[0]:stride[0], c0:c0 + wo * stride[1]:stride[1]]
            out += np.einsum("kc,chw->khw", w[:, i, j, :].astype(np.int64), patch)
    return out


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_sums_match_reference_for_random_geometries(data):
    d = data.draw
    c, k = d(st.integers(1, 21)), d(st.integers(1, 13))
    h, wd = d(st.integers(1, 14)), d(st.integers(1, 40))
    kh, kw = d(st.integers(1, 4)), d(st.integers(1, 5))
    stride = (d(st.integers(1, 3)), d(st.integers(1, 3)))
    dilation = (d(st.integers(1, 3)), d(st.integers(1, 3)))
    pad = (d(st.integers(0, 3)), d(st.integers(0, 3)))
    in_hw = (d(st.integers(1, h)), d(st.integers(1, wd)))
    ho = (h + 2 * pad[0] - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    wo = (wd + 2 * pad[1] - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    if ho < 1 or wo < 1:
        return
    rng = np.random.default_rng(d(st.integers(0, 2**32 - 1)))
    dtype = d(st.sampled_from([np.int8, np.uint8, np.int16]))
    info = np.iinfo(dtype)
    zp = d(st.integers(-128, 127)) if dtype != np.int16 else 0
    channels_last = d(st.booleans())
    if channels_last:  # an NHWC tensor seen as [C, H, W], as the Ethos-U85 passes it
        v = rng.integers(info.min, info.max + 1, (h, wd, c)).astype(dtype).transpose(2, 0, 1)
    else:
        v = rng.integers(info.min, info.max + 1, (c, h, wd)).astype(dtype)
    w = rng.integers(-256, 256, (k, kh, kw, c))
    hwc, padded = d(st.booleans()), d(st.booleans())
    got = IC.conv_sums(v, IC.pack_weights(w), (ho, wo), zero_point=zp, in_hw=in_hw, pad=pad,
                       stride=stride, dilation=dilation, hwc=hwc, padded=padded)
    want = reference(v, w, zp, (ho, wo), in_hw, pad, stride, dilation)
    if padded:  # the whole C-contiguous work array, the sums in its leading corner
        assert got.flags.c_contiguous
        assert got.shape[0 if hwc else 1] == ho and got.shape[1 if hwc else 2] >= wo
        assert got.shape[2 if hwc else 0] >= k
        got = got[:, :wo, :k] if hwc else got[:k, :, :wo]
    if hwc:
        want = want.transpose(1, 2, 0)
    if IC.fits_int32(int(info.min) - zp, int(info.max) - zp, w):
        np.testing.assert_array_equal(got, want)
    else:  # outside the proven range the sums are still right modulo 2**32
        np.testing.assert_array_equal(got, want.astype(np.int32))


def test_sums_exact_at_the_int32_limit():
    # every product -128 * -128 = 2**14 over 64 channels x 9 taps, and int16 extremes: the
    # largest sums the proof admits, far past float32's 2**24
    v = np.full((64, 6, 6), -128, np.int8)
    w = np.full((4, 3, 3, 64), -128)
    got = IC.conv_sums(v, IC.pack_weights(w), (4, 4))
    assert (got == 64 * 9 * 2**14).all()
    v16 = np.full((2, 3, 3), -32768, np.int16)
    w16 = np.full((1, 1, 1, 2), 32767)
    assert IC.fits_int32(-32768, 32767, w16)
    got = IC.conv_sums(v16, IC.pack_weights(w16), (3, 3))
    assert (got == 2 * -32768 * 32767).all()


@pytest.mark.parametrize("lo, hi, w, fits", [
    (-128, 127, np.full((2, 3, 3, 64), 127), True),          # 128 * 73152 < 2**31
    (-32768, 32767, np.full((1, 1, 1, 2), 32767), True),
    (-32768, 32767, np.full((1, 1, 1, 2), -32768), False),   # the one vpmaddwd overflow pair
    (-32769, 100, np.ones((1, 1, 1, 1)), False),             # input does not fit int16
    (0, 32767, np.full((1, 3, 3, 8), 32767), False),         # sum past 2**31
])
def test_fits_int32_bounds(lo, hi, w, fits):
    assert IC.fits_int32(lo, hi, w) is fits


@njit
def _madd_lanes(x, w, acc):
    out = np.empty(16, np.int32)
    a = vmadd(vload(acc, 0), vload(x, 0), vbcast(w, 0))
    vstore(out, 0, a)
    b = vzero()
    for i in range(8):
        out[8 + i] = vget(b, i)
    return out


def test_vmadd_multiplies_int16_pairs_into_int32_lanes():
    halves = np.array([32767, -32768, -32768, -32768, 1, -1, 300, 7,
                       -5, 5, 0, 9, 12345, -12345, 2, 3], np.int16)
    w = np.array([-32768, 32767], np.int16)
    acc = np.arange(8, dtype=np.int32) * 1000
    got = _madd_lanes(halves.view(np.int32), w.view(np.int32), acc)
    pairs = halves.astype(np.int64).reshape(8, 2)
    want = (pairs[:, 0] * -32768 + pairs[:, 1] * 32767 + acc).astype(np.int32)
    np.testing.assert_array_equal(got[:8], want)
    assert (got[8:] == 0).all()


def test_packed_weights_kept_for_read_only_arrays_while_they_live():
    w = np.arange(-30, 42).reshape(2, 3, 3, 4)
    w.flags.writeable = False
    first = IC.packed_weights(w)
    assert IC.packed_weights(w) is first  # kept: the second run of a layer does not repack
    np.testing.assert_array_equal(first.words, IC.pack_weights(w).words)
    assert IC.fits_int32(-128, 127, w) == (128 * int(np.abs(w).reshape(2, -1).sum(1).max())
                                           < 1 << 31)
    key = id(w)
    assert key in IC._PACKED and key in IC._BOUNDS
    del w
    assert key not in IC._PACKED and key not in IC._BOUNDS  # freed with its array
    writable = np.ones((1, 1, 1, 2), np.int64)
    IC.packed_weights(writable)
    writable[...] = 5  # a writable array may change: never kept
    assert IC.packed_weights(writable).words.view(np.int16)[:2].tolist() == [5, 5]


def test_parallel_runs_small_work_on_one_thread_and_large_work_on_all():
    """The calling thread's numba thread count follows each parallel launch's work (set only
    when it changes, so it must be right after any sequence of launches); a launch on one
    thread runs the serial twin and touches neither the lock nor the thread count."""
    import numba

    every = numba.config.NUMBA_NUM_THREADS
    twin = IC.TWINS[0]
    for work, threads in ((1, 1), (IC.SERIAL_WORK, every), (IC.SERIAL_WORK - 1, 1),
                          (IC.SERIAL_WORK - 1, 1), (1 << 30, every)):
        before = numba.get_num_threads()
        with IC.parallel(work) as par:
            if threads == 1:
                assert par.kernel(twin) is twin.serial
                assert numba.get_num_threads() == before
                assert not IC.PARALLEL.locked()
            else:
                assert par.kernel(twin) is (twin.parallel if every > 1 else twin.serial)
                assert numba.get_num_threads() == threads
                assert IC.PARALLEL.locked()
    assert not IC.PARALLEL.locked()


def test_a_run_of_small_launches_never_starts_numbas_thread_pool():
    """The bundled MAX78000 demo's layers are all below SERIAL_WORK: its run launches only
    serial twins, so numba's threading layer is never started (issue 31 #5)."""
    import subprocess
    import sys

    code = ("import contextlib, io\n"
            "from accelstub.stub.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    code = main(['run', 'max78000'])\n"
            "from numba.np.ufunc import parallel\n"
            "print(code, parallel._is_initialized)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "False"]


def depthwise_reference(v, w, zp, out_hw, in_hw, pad, stride, dilation):
    """out[y, x, c] = sum over taps of (v[..., c] - zp) * w[c, i, j], 0 outside the used input;
    v [H, W, C], w [C, kh, kw]; one output element at a time in Python integers."""
    rows, cols = min(in_hw[0], v.shape[0]), min(in_hw[1], v.shape[1])
    c_n, kh, kw = w.shape
    out = np.zeros(out_hw + (c_n,), object)
    for y in range(out_hw[0]):
        for x in range(out_hw[1]):
            for c in range(c_n):
                total = 0
                for i in range(kh):
                    for j in range(kw):
                        r = y * stride[0] + i * dilation[0] - pad[0]
                        q = x * stride[1] + j * dilation[1] - pad[1]
                        if 0 <= r < rows and 0 <= q < cols:
                            total += (int(v[r, q, c]) - zp) * int(w[c, i, j])
                out[y, x, c] = total
    return out


def wrap32(a):
    return np.array([((int(t) + 2**31) % 2**32) - 2**31 for t in np.ravel(a)],
                    np.int64).reshape(np.shape(a))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_depthwise_sums_match_reference_for_random_geometries(data):
    """Every input type the Ethos-U85 reads (int8, uint8, int16, and int64 from the element
    path), zero points, strides, dilations, padding, a used input smaller than the stored one,
    strided (NHCWB16-like) views; weights up to int9 and int16; channel counts around the
    kernel's registers of 16 and pairs of them."""
    d = data.draw
    c_n, h, wd = d(st.integers(1, 70)), d(st.integers(1, 10)), d(st.integers(1, 12))
    kh, kw = d(st.integers(1, 4)), d(st.integers(1, 4))
    stride = (d(st.integers(1, 3)), d(st.integers(1, 3)))
    dilation = (d(st.integers(1, 3)), d(st.integers(1, 3)))
    pad = (d(st.integers(0, 3)), d(st.integers(0, 3)))
    in_hw = (d(st.integers(1, h)), d(st.integers(1, wd)))
    ho = (in_hw[0] + 2 * pad[0] - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    wo = (in_hw[1] + 2 * pad[1] - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    if ho < 1 or wo < 1:
        return
    rng = np.random.default_rng(d(st.integers(0, 2**32 - 1)))
    dtype = d(st.sampled_from([np.int8, np.uint8, np.int16, np.int64]))
    lo, hi = (-2000, 2000) if dtype in (np.int16, np.int64) else \
        (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
    zp = d(st.integers(-200, 200)) if dtype != np.uint8 else d(st.integers(0, 255))
    v = rng.integers(lo, hi + 1, (h, wd, c_n + 3)).astype(dtype)[:, :, 1:c_n + 1]  # strided
    wmax = d(st.sampled_from([1, 255, 32767]))
    w = rng.integers(-wmax, wmax + 1, (c_n, kh, kw))
    got = IC.depthwise_sums(v, w, (ho, wo), zero_point=zp, in_hw=in_hw, pad=pad, stride=stride,
                            dilation=dilation)
    assert got.dtype == np.int32
    want = wrap32(depthwise_reference(v, w, zp, (ho, wo), in_hw, pad, stride, dilation))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("value, zp, weight", [(2000, -2000, 32767), (-2000, 2000, 32767)])
def test_depthwise_sums_wrap_past_int32(value, zp, weight):
    """4000 * 32767 * 25 taps = 3.3e9: past 2**31 the sums wrap modulo 2**32 as int32
    accumulators do (the caller uses them only where it proved the sums fit, or wants the
    wrap)."""
    v = np.full((7, 7, 51), value, np.int16)  # 51 channels: a pair of registers, one, a tail
    w = np.full((51, 5, 5), weight)
    got = IC.depthwise_sums(v, w, (7, 7), zero_point=zp, pad=(2, 2))
    centre = (value - zp) * weight * 25
    assert abs(centre) >= 2**31
    assert int(got[3, 3, 0]) == int(wrap32([centre])[0])
    np.testing.assert_array_equal(got, wrap32(depthwise_reference(v, w, zp, (7, 7), (7, 7),
                                                                  (2, 2), (1, 1), (1, 1))))


@pytest.mark.parametrize("c_n", [16, 17, 48, 63, 144])
@pytest.mark.parametrize("stride, dilation, pad", [(1, 1, 1), (2, 1, 1), (1, 2, 2), (3, 1, 1),
                                                   (1, 1, 3)])
@pytest.mark.parametrize("wd", [1, 2, 5, 9])
def test_depthwise_pixel_pairs_match_reference(c_n, stride, dilation, pad, wd):
    """_depthwise_pixels' two-pixel step (channel counts with one 16-lane register left after
    the pairs of registers: 16, 48, 144 as MobileNet v2's depthwise layers, plus tails): pixels
    taken in pairs only where both read the same kernel columns; odd widths, a width of one,
    the left and right padding edges (where a pair would read different columns), strides and
    dilations, against the plain reference."""
    rng = np.random.default_rng(c_n * 1000 + wd * 10 + stride)
    h, kh, kw = 4, 3, 3
    wo = (wd + 2 * pad - (kw - 1) * dilation - 1) // stride + 1
    ho = (h + 2 * pad - (kh - 1) * dilation - 1) // stride + 1
    assert wo >= 1 and ho >= 1
    v = rng.integers(-128, 128, (h, wd, c_n)).astype(np.int8)
    w = rng.integers(-255, 256, (c_n, kh, kw))
    args = ((ho, wo), (h, wd), (pad, pad), (stride, stride), (dilation, dilation))
    got = IC.depthwise_sums(v, w, (ho, wo), zero_point=-7, in_hw=(h, wd), pad=(pad, pad),
                            stride=(stride, stride), dilation=(dilation, dilation))
    np.testing.assert_array_equal(got, wrap32(depthwise_reference(v, w, -7, *args)))


#: output channels that reach each of _pointwise16's block widths: 4 pixels x 2 whole
#: registers (16, 32), 4 x 2 with a half second register (12, 28), 8 pixels x 1 whole register
#: (8, 24: after a pair), 8 x 1 half (1-4, 20)
POINTWISE_K = [1, 3, 4, 8, 12, 16, 20, 24, 28, 32]


@pytest.mark.parametrize("k", POINTWISE_K)
@pytest.mark.parametrize("c", [1, 3, 8, 17])
def test_pointwise16_matches_reference_for_every_block_width(k, c):
    """The int16-pair pointwise kernel (1x1, stride 1, no padding) against plain numpy, on
    odd and even channel counts, each block width its output channel count reaches, and pixel
    counts that leave 0-7 pixels after the 4- and 8-pixel blocks, one and two rows, an int8
    NHWC input and a channels-first uint8 one; only the sums' leading corner of the work
    array counts (conv_sums' padded contract)."""
    rng = np.random.default_rng(k * 100 + c)
    for (h, wd), dtype, channels_last in [((1, 1), np.int8, True), ((1, 7), np.uint8, False),
                                          ((2, 9), np.int8, True), ((1, 13), np.int8, False),
                                          ((3, 5), np.uint8, True), ((1, 36), np.int8, True)]:
        info = np.iinfo(dtype)
        zp = int(rng.integers(-128, 128)) if dtype == np.int8 else int(rng.integers(0, 256))
        if channels_last:
            v = rng.integers(info.min, info.max + 1, (h, wd, c)).astype(dtype).transpose(2, 0, 1)
        else:
            v = rng.integers(info.min, info.max + 1, (c, h, wd)).astype(dtype)
        w = rng.integers(-32767, 32768, (k, 1, 1, c))
        pw = IC.pack_weights(w)
        got = IC._run_pointwise16(v, pw, (h, wd), zp)
        want = reference(v, w, zp, (h, wd), (h, wd), (0, 0), (1, 1), (1, 1)).transpose(1, 2, 0)
        assert got.shape == (h, -(-wd // IC.XB) * IC.XB, pw.kp)
        np.testing.assert_array_equal(got[:, :wd, :k], want.astype(np.int32))


def test_conv_sums_runs_the_pointwise_kernel_exactly_where_every_pixel_reads_its_own(
        monkeypatch):
    """conv_sums takes the int16-pair pointwise kernel for hwc 1x1 sums with stride 1, no
    padding and the whole input, below SERIAL_WORK (it runs on one thread), and the general
    kernel elsewhere; both give the reference's sums."""
    rng = np.random.default_rng(7)
    v = rng.integers(-128, 128, (6, 5, 9)).astype(np.int8).transpose(2, 0, 1)  # C=9, 6x5
    w1 = rng.integers(-256, 256, (12, 1, 1, 9))
    w3 = rng.integers(-256, 256, (12, 3, 3, 9))
    calls = []
    real = IC._run_pointwise16

    def spy(*args):
        calls.append(args[2])
        return real(*args)

    monkeypatch.setattr(IC, "_run_pointwise16", spy)
    cases = [(w1, {}, True), (w1, dict(hwc=False), False), (w1, dict(pad=(1, 1)), False),
             (w1, dict(stride=(2, 1)), False), (w1, dict(in_hw=(5, 5)), False),
             (w3, dict(pad=(1, 1)), False)]
    for w, kw, taken in cases:
        opts = dict(hwc=True, zero_point=-3) | kw
        ho = (6 + 2 * opts.get("pad", (0, 0))[0] - w.shape[1]) // opts.get("stride", (1, 1))[0] + 1
        wo = 5 + 2 * opts.get("pad", (0, 0))[1] - w.shape[2] + 1
        calls.clear()
        got = IC.conv_sums(v, IC.pack_weights(w), (ho, wo), kernel="int16", **opts)
        assert bool(calls) is taken, (kw, calls)
        want = reference(v, w, -3, (ho, wo), opts.get("in_hw", (6, 5)), opts.get("pad", (0, 0)),
                         opts.get("stride", (1, 1)), (1, 1))
        np.testing.assert_array_equal(got, want if kw.get("hwc") is False
                                      else want.transpose(1, 2, 0))


@njit
def _store_low_half(v):
    out = np.full(12, -1, np.int32)
    vstore4(out, 2, vload(v, 0))
    return out


def test_vstore4_writes_the_low_four_lanes_only():
    got = _store_low_half(np.arange(10, 18, dtype=np.int32))
    assert got.tolist() == [-1, -1, 10, 11, 12, 13, -1, -1, -1, -1, -1, -1]
