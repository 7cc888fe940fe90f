"""The byte kernel of the shared integer convolution (int_conv.conv_sums(kernel="int8"), VNNI
vpdpbusd through emu/conv/vnni.py) against plain integer numpy written here (no code shared):
sums exact modulo 2**32 for every geometry, int8/uint8 input, zero point and int8 weight, past
float32's 2**24 and past int32's 2**31 (where they wrap as int32 accumulators do)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from accelstub.emu.conv import int_conv as IC
from accelstub.emu.conv.vnni import HAVE_VNNI, zdot, zload, zsplat, zstore

pytestmark = pytest.mark.skipif(not HAVE_VNNI, reason="the CPU has no AVX-512 VNNI")


def reference(v, w, zp, out_hw, in_hw, pad, stride, dilation):
    """out[k, y, x] = sum over taps and channels of (v - zp) * w, 0 outside the used input;
    v [C, H, W], w [K, kh, kw, C]; exact Python-size integers (object arrays)."""
    c, h, wd = v.shape
    k, kh, kw, _ = w.shape
    rows, cols = min(in_hw[0], h), min(in_hw[1], wd)
    ho, wo = out_hw
    x = np.zeros((c, pad[0] + (ho - 1) * stride[0] + (kh - 1) * dilation[0] + 1 + rows,
                  pad[1] + (wo - 1) * stride[1] + (kw - 1) * dilation[1] + 1 + cols), object)
    x[:, pad[0]:pad[0] + rows, pad[1]:pad[1] + cols] = v[:, :rows, :cols].astype(object) - zp
    wo_ = w.astype(object)
    out = np.zeros((k, ho, wo), object)
    for i in range(kh):
        for j in range(kw):
            r0, c0 = i * dilation[0], j * dilation[1]
            patch = x[:, r0:r0 + (ho - 1) * stride[0] + 1:stride[0],
                      c0:c0 + (wo - 1) * stride[1] + 1:stride[1]]
            out += np.tensordot(wo_[:, i, j, :], patch, axes=(1, 0))
    return out


def wrap32(a):
    """Integers modulo 2**32 as int32 (two's complement), as the accumulators keep them."""
    return np.array([((int(t) + 2**31) % 2**32) - 2**31 for t in np.ravel(a)],
                    np.int64).reshape(np.shape(a)).astype(np.int32)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_byte_kernel_matches_reference_for_random_geometries(data):
    d = data.draw
    c, k = d(st.integers(1, 37)), d(st.integers(1, 21))
    h, wd = d(st.integers(1, 12)), d(st.integers(1, 40))
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
    dtype = d(st.sampled_from([np.int8, np.uint8]))
    info = np.iinfo(dtype)
    zp = d(st.integers(int(info.min), int(info.max)))   # every zero point the byte form admits
    if d(st.booleans()):  # an NHWC tensor seen as [C, H, W], as the Ethos-U85 and NE16 pass it
        v = rng.integers(info.min, info.max + 1, (h, wd, c)).astype(dtype).transpose(2, 0, 1)
    else:
        v = rng.integers(info.min, info.max + 1, (c, h, wd)).astype(dtype)
    if d(st.booleans()):  # the extremes of the operands, which random draws rarely reach
        v[...] = d(st.sampled_from([int(info.min), int(info.max)]))
    wbits = d(st.integers(1, 8))  # narrower weights too (MAX78000's 1/2/4-bit, NE16's bits)
    w = rng.integers(-(1 << (wbits - 1)), 1 << (wbits - 1), (k, kh, kw, c))
    if d(st.booleans()):
        w[...] = d(st.sampled_from([-128, 127]))
    hwc = d(st.booleans())
    pw = IC.pack_weights(w)
    assert pw.quads is not None
    got = IC.conv_sums(v, pw, (ho, wo), zero_point=zp, in_hw=in_hw, pad=pad, stride=stride,
                       dilation=dilation, hwc=hwc, kernel="int8")
    want = wrap32(reference(v, w, zp, (ho, wo), in_hw, pad, stride, dilation))
    if hwc:
        want = want.transpose(1, 2, 0)
    np.testing.assert_array_equal(got, want)
    if abs(zp) < 128 or dtype == np.uint8:  # the int16-pair kernel agrees (int16 operands)
        old = IC.conv_sums(v, pw, (ho, wo), zero_point=zp, in_hw=in_hw, pad=pad, stride=stride,
                           dilation=dilation, hwc=hwc, kernel="int16")
        np.testing.assert_array_equal(old, want)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_pointwise_kernel_matches_reference(data):
    """1x1, stride 1, no padding, channels-last sums: the pointwise kernel (_pointwise8), for
    pixel counts around its blocks of 4 and output channels around its registers of 16."""
    d = data.draw
    c, k = d(st.integers(1, 70)), d(st.integers(1, 70))
    h, wd = d(st.integers(1, 6)), d(st.integers(1, 11))
    rng = np.random.default_rng(d(st.integers(0, 2**32 - 1)))
    dtype = d(st.sampled_from([np.int8, np.uint8]))
    info = np.iinfo(dtype)
    zp = d(st.integers(int(info.min), int(info.max)))
    nhwc = rng.integers(info.min, info.max + 1, (h, wd, c)).astype(dtype)
    v = nhwc.transpose(2, 0, 1) if d(st.booleans()) else np.ascontiguousarray(
        nhwc.transpose(2, 0, 1))                      # NHWC words as they are, or a copy
    if d(st.booleans()):
        v[...] = d(st.sampled_from([int(info.min), int(info.max)]))
    w = rng.integers(-128, 128, (k, 1, 1, c))
    if d(st.booleans()):
        w[...] = d(st.sampled_from([-128, 127]))
    in_hw = d(st.sampled_from([None, (h, wd), (h + 2, wd + 1)]))
    pw = IC.pack_weights(w)
    launch = IC.byte_launch(v, pw, (h, wd), zero_point=zp, in_hw=in_hw, pad=(0, 0),
                            stride=(1, 1), dilation=(1, 1), hwc=True)
    assert isinstance(launch, IC.PointwiseLaunch)
    got = IC.conv_sums(v, pw, (h, wd), zero_point=zp, in_hw=in_hw, hwc=True, kernel="int8")
    want = wrap32(reference(v, w, zp, (h, wd), (h, wd), (0, 0), (1, 1), (1, 1)))
    np.testing.assert_array_equal(got, want.transpose(1, 2, 0))


def test_pointwise_kernel_only_where_each_output_reads_its_own_pixel():
    v = np.zeros((8, 4, 5), np.int8)
    pw, p3 = IC.pack_weights(np.ones((3, 1, 1, 8))), IC.pack_weights(np.ones((3, 3, 3, 8)))
    geometry = dict(zero_point=0, in_hw=None, pad=(0, 0), stride=(1, 1), dilation=(1, 1))

    def launch(w, out_hw=(4, 5), hwc=True, **kw):
        return type(IC.byte_launch(v, w, out_hw, hwc=hwc, **(geometry | kw))).__name__

    assert launch(pw) == "PointwiseLaunch"
    assert launch(pw, hwc=False) == "ByteLaunch"              # sums [K, H, W]
    assert launch(pw, (2, 3), stride=(2, 2)) == "ByteLaunch"
    assert launch(pw, (6, 7), pad=(1, 1)) == "ByteLaunch"
    assert launch(pw, in_hw=(3, 5)) == "ByteLaunch"           # rows past in_hw read 0
    assert launch(pw, (3, 5)) == "ByteLaunch"                 # fewer outputs than pixels
    assert launch(p3, (2, 3)) == "ByteLaunch"
    assert p3.columns is None


@pytest.mark.parametrize("dtype, value, zp, weight, channels", [
    (np.uint8, 255, 0, -128, 512),      # 9 * 512 * -32640: -1.5e8, far past 2**24
    (np.int8, -128, 127, -128, 512),    # (-255) * (-128) per product: +1.5e8
    (np.uint8, 255, 0, -128, 8192),     # -2.4e9: past -2**31, wraps
    (np.uint8, 255, 0, 127, 8192),      # +2.4e9: past 2**31 - 1, wraps
    (np.int8, -128, 127, -128, 8192),   # +2.4e9 with the zero point's correction itself large
])
def test_sums_past_float32_and_int32(dtype, value, zp, weight, channels):
    v = np.full((channels, 5, 5), value, dtype)
    w = np.full((9, 3, 3, channels), weight)
    got = IC.conv_sums(v, IC.pack_weights(w), (5, 5), zero_point=zp, pad=(1, 1), kernel="int8")
    want = wrap32(reference(v, w, zp, (5, 5), (5, 5), (1, 1), (1, 1), (1, 1)))
    np.testing.assert_array_equal(got, want)
    centre = (value - zp) * weight * 9 * channels
    assert got[0, 2, 2] == wrap32(np.array([centre]))[0]
    assert abs(centre) >= 2**24
    w1 = np.full((17, 1, 1, channels), weight)  # the pointwise kernel: 2**24 < |sum| < 2**31
    got = IC.conv_sums(v, IC.pack_weights(w1), (5, 5), zero_point=zp, hwc=True, kernel="int8")
    want = wrap32(reference(v, w1, zp, (5, 5), (5, 5), (0, 0), (1, 1), (1, 1)))
    np.testing.assert_array_equal(got, want.transpose(1, 2, 0))


@pytest.mark.parametrize("kh", [1, 3])
def test_kept_launches_follow_the_input_layout(kh):
    """conv_sums with a ``launches`` dict kept for one layer: inputs of one shape but other
    layouts (NHWC words, a CHW array, a view with reversed columns) and types (int8, uint8)
    each get their own launch, and every call's sums are the reference's."""
    rng = np.random.default_rng(9)
    w = rng.integers(-128, 128, (20, kh, kh, 8))
    pw, launches = IC.pack_weights(w), {}
    pad = (kh // 2, kh // 2)
    nhwc = rng.integers(-128, 128, (5, 7, 8)).astype(np.int8)
    inputs = [nhwc.transpose(2, 0, 1), np.ascontiguousarray(nhwc.transpose(2, 0, 1)),
              nhwc[:, ::-1].transpose(2, 0, 1), (nhwc.astype(np.int16) + 128).astype(
                  np.uint8).transpose(2, 0, 1)]
    for v in inputs * 2:
        got = IC.conv_sums(v, pw, (5, 7), zero_point=3, pad=pad, hwc=True, launches=launches)
        want = wrap32(reference(v, w, 3, (5, 7), (5, 7), pad, (1, 1), (1, 1)))
        np.testing.assert_array_equal(got, want.transpose(1, 2, 0))
    assert len(launches) == len(inputs)


def test_pointwise_sums_wrap_modulo_2_32():
    """Accumulators that start near +-2**31 (as -(zero point + 128) x sum(w) does for deep
    layers) and pass it wrap as int32 lanes do."""
    rng = np.random.default_rng(5)
    n, q4, kv = 7, 3, 2
    x = rng.integers(0, 256, (n, 4 * q4)).astype(np.uint8)
    x[:2] = 255
    w = rng.integers(-128, 128, (kv * 16, 4 * q4)).astype(np.int8)
    w[:4] = 127
    w[4:8] = -128
    init = np.where(np.arange(kv * 16) % 2, 2**31 - 1000, -2**31 + 1000).astype(np.int32)
    acc = np.empty(n * kv * 16, np.int32)
    cols = np.ascontiguousarray(w.view(np.int32).T).reshape(-1)
    words = IC.read_only(x.view(np.int32).reshape(-1))
    IC._pointwise8(words, np.int32(0), cols, init, acc, n, q4, kv)
    exact = init.astype(object) + x.astype(object) @ w.T.astype(object)
    assert (np.abs(exact) >= 2**31).any()
    np.testing.assert_array_equal(acc.reshape(n, kv * 16), wrap32(exact))


def test_dispatch_runs_the_byte_kernel_only_where_it_applies(monkeypatch):
    calls = []
    real = IC._VNNI_CONV_TWIN

    def counted(kernel):
        return lambda *a: calls.append(1) or kernel(*a)
    monkeypatch.setattr(IC, "_VNNI_CONV_TWIN", IC.Twin(counted(real.parallel),
                                                       counted(real.serial)))
    v8 = np.arange(2 * 4 * 4, dtype=np.int8).reshape(2, 4, 4)
    w8 = np.arange(-9, 9).reshape(1, 3, 3, 2)
    want = IC.conv_sums(v8, IC.pack_weights(w8), (2, 2), kernel="int16")
    assert not calls
    np.testing.assert_array_equal(IC.conv_sums(v8, IC.pack_weights(w8), (2, 2)), want)
    assert len(calls) == 1                                    # auto: int8 input, int8 weights
    w9 = w8 * 20                                              # weights past int8: int16 kernel
    assert IC.pack_weights(w9).quads is None
    IC.conv_sums(v8, IC.pack_weights(w9), (2, 2))
    IC.conv_sums(v8.astype(np.int16), IC.pack_weights(w8), (2, 2))   # int16 input
    IC.conv_sums(v8, IC.pack_weights(w8), (2, 2), zero_point=200)    # no byte form of v - 200
    assert len(calls) == 1
    with pytest.raises(ValueError):
        IC.conv_sums(v8, IC.pack_weights(w9), (2, 2), kernel="int8")
    assert IC.byte_offset(np.int8, -128) == 128 and IC.byte_offset(np.int8, 128) is None
    assert IC.byte_offset(np.uint8, 255) == 0 and IC.byte_offset(np.uint8, -1) is None
    assert IC.byte_offset(np.int16, 0) is None


@njit
def _dot_lanes(acc, x, w):
    out = np.empty(16, np.int32)
    zstore(out, 0, zdot(zload(acc, 0), zload(x, 0), w, 1))
    return out


@njit
def _splat(w):
    out = np.empty(16, np.int32)
    zstore(out, 0, zsplat(w, 2))
    return out


@pytest.mark.parametrize("byte", [-128, 127, -1])
def test_zdot_multiplies_unsigned_by_signed_bytes_and_wraps(byte):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, 64).astype(np.uint8)
    x[:8] = 255
    wb = np.array([byte, byte, -128, 127], np.int8)
    w = np.array([7, wb.view(np.int32)[0], 9], np.int32)
    acc = rng.integers(-2**31, 2**31, 16).astype(np.int32)
    acc[0], acc[1] = -2**31, 2**31 - 1            # a lane sum wraps one way or the other
    got = _dot_lanes(acc, x.view(np.int32), w)
    prods = x.reshape(16, 4).astype(np.int64) * wb.astype(np.int64)
    np.testing.assert_array_equal(got, wrap32(acc.astype(np.int64) + prods.sum(1)))
    assert (_splat(np.array([1, 2, -5], np.int32)) == -5).all()
