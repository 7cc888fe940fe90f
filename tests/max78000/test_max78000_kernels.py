"""MAX78000 kernels (accelstub.emu.{conv,pool,eltwise,numeric}.max78000) against hand-computed
numbers and against
the independent plain-numpy reference (tests/max78000_reference.py). Test vectors T1-T14 are
the worked examples A5#T1..A5#T14 (docs/citations.md)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from accelstub.emu.conv import max78000 as conv_k
from accelstub.emu.numeric import max78000 as numeric_k
from accelstub.emu.pool import max78000 as pool_k
from accelstub.testkit import max78000_reference as ref

POLICY = {pool_k.AVG_TRUNC: "trunc", pool_k.AVG_ROUND_AWAY: "away", pool_k.AVG_FLOOR: "floor",
          pool_k.AVG_FLOOR_HALF: "floor_half"}
POOLK = {pool_k.POOL_NONE: "none", pool_k.POOL_MAX: "max", pool_k.POOL_AVG: "avg"}
ACTS = {numeric_k.ACT_NONE: "none", numeric_k.ACT_RELU: "relu", numeric_k.ACT_ABS: "abs"}


# -- hand-computed ------------------------------------------------------------------------------
def test_ones_3x3_pad1_on_4x4_counts_taps():
    # every output = number of in-image taps; shift 7 makes v = acc (floor(acc*128/128 + .5))
    x = np.ones((1, 4, 4), np.int8)
    w = np.ones((1, 1, 3, 3), np.int8)
    out = conv_k.run_layer_kernel(x, w, None, pad=(1, 1), shift=7)
    assert out.tolist() == [[[4, 6, 6, 4], [6, 9, 9, 6], [6, 9, 9, 6], [4, 6, 6, 4]]]
    # the same with data 64 and shift 0: v = floor(64*n/128 + 1/2): n=4 -> 2, 6 -> 3, 9 -> 5
    out = conv_k.run_layer_kernel(np.full((1, 4, 4), 64, np.int8), w, None, pad=(1, 1))
    assert out.tolist() == [[[2, 3, 3, 2], [3, 5, 5, 3], [3, 5, 5, 3], [2, 3, 3, 2]]]
    # no padding: 2x2 output, all 9 taps
    out = conv_k.run_layer_kernel(x, w, None, pad=(0, 0), shift=7)
    assert out.tolist() == [[[9, 9], [9, 9]]]


def test_rounding_table_T1():
    # x*128 with s = 0 gives floor(x + 1/2) [AI8X: Rounding]
    xs = [3.5, 3.25, 2.5, 1.5, 0.5, 0.25, 0, -0.25, -0.5, -0.75, -1.5, -1.75, -2.5, -2.75, -3.5]
    want = [4, 3, 3, 2, 1, 0, 0, 0, 0, -1, -1, -2, -2, -3, -3]
    acc = np.array([int(v * 128) for v in xs], np.int64)
    assert numeric_k.requantize(acc, 0, numeric_k.ACT_NONE).tolist() == want
    assert ref.requant(acc, 0, "none").tolist() == want


@pytest.mark.parametrize("acc,s,want", [
    (128, 0, 1), (-64, 0, 0), (-128, 0, -1), (64, 0, 1),  # T4-T7 (T7 canonical, E1)
    (1000, 2, 31), (100, 4, 13), (1000, -1, 4), (-192, 0, -1),  # T11-T14
    (127 * 128 + 127 * 128, 0, 127), (-128 * 128 * 2, 0, -128),  # saturation T3
    (1, 15, 127), (-1, 15, -128), (1 << 20, -15, 0), (3 << 21, -15, 2),
])
def test_shift_round_saturate(acc, s, want):
    assert numeric_k.requantize(np.array([acc], np.int64), s, numeric_k.ACT_NONE)[0] == want


def test_activations_T9_T10():
    acc = np.array([200 * 128, -128 * 128, -5 * 128, 5 * 128], np.int64)
    assert numeric_k.requantize(acc, 0, numeric_k.ACT_RELU).tolist() == [127, 0, 0, 5]
    assert numeric_k.requantize(acc, 0, numeric_k.ACT_ABS).tolist() == [127, 127, 5, 5]


def test_avg_pool_T8_and_negative_policies():
    x = np.array([[[0, 0], [0, 3]]], np.int8)
    assert pool_k.pool2d(x, 2, 2, 2, pool_k.POOL_AVG, pool_k.AVG_TRUNC).item() == 0
    assert pool_k.pool2d(x, 2, 2, 2, pool_k.POOL_AVG, pool_k.AVG_ROUND_AWAY).item() == 1
    n = np.array([[[0, 0], [0, -3]]], np.int8)  # mean -0.75
    assert pool_k.pool2d(n, 2, 2, 2, pool_k.POOL_AVG, pool_k.AVG_TRUNC).item() == 0
    assert pool_k.pool2d(n, 2, 2, 2, pool_k.POOL_AVG, pool_k.AVG_ROUND_AWAY).item() == -1
    assert pool_k.pool2d(n, 2, 2, 2, pool_k.POOL_AVG, pool_k.AVG_FLOOR).item() == -1
    assert pool_k.pool2d(n, 2, 2, 2, pool_k.POOL_AVG, pool_k.AVG_FLOOR_HALF).item() == -1
    h = np.array([[[0, 0], [-1, -1]]], np.int8)  # mean -0.5
    assert pool_k.pool2d(h, 2, 2, 2, pool_k.POOL_AVG, pool_k.AVG_ROUND_AWAY).item() == -1
    assert pool_k.pool2d(h, 2, 2, 2, pool_k.POOL_AVG, pool_k.AVG_FLOOR_HALF).item() == 0


def test_max_pool_and_decimation():
    x = np.arange(16, dtype=np.int8).reshape(1, 4, 4) - 8
    assert pool_k.pool2d(x, 2, 2, 2, pool_k.POOL_MAX, 0).tolist() == [[[-3, -1], [5, 7]]]
    assert pool_k.pool2d(x, 3, 3, 1, pool_k.POOL_MAX, 0).tolist() == [[[2, 3], [6, 7]]]
    assert pool_k.pool2d(x, 1, 1, 2, pool_k.POOL_NONE, 0).tolist() == [[[-8, -6], [0, 2]]]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 70), st.integers(1, 12), st.integers(1, 12), st.integers(1, 16),
       st.integers(1, 16), st.integers(1, 3), st.sampled_from(list(POOLK)),
       st.sampled_from(list(POLICY)), st.sampled_from(["random", "low", "high", "halves"]),
       st.integers(0, 2**32 - 1))
def test_pool_hwc_matches_reference(c, h, w, ph, pw, stride, mode, policy, values, seed):
    """Channels last, any channel count (the MNIST-shaped network's 56 and 60 among them),
    windows up to 16x16 (all -128: the largest negative sum), overlapping windows (stride
    below the window), sums at half an integer (the rounding policies' edge), and the CHW form
    (pool2d) on the same data: issue 31 #1's separable pooling and float averages."""
    ph, pw = min(ph, h), min(pw, w)
    rng = np.random.default_rng(seed)
    if values == "random":
        x = rng.integers(-128, 128, (c, h, w))
    elif values == "halves":  # window sums k*n + n/2 or near it: every policy rounds apart
        x = rng.choice([-128, -127, -1, 0, 1, 127], (c, h, w))
    else:
        x = np.full((c, h, w), -128 if values == "low" else 127)
    x = x.astype(np.int8)
    want = ref.pool(x, ph, pw, stride, POOLK[mode], POLICY[policy])
    got = pool_k.pool_hwc(np.ascontiguousarray(x.transpose(1, 2, 0)), ph, pw, stride, mode,
                          policy)
    np.testing.assert_array_equal(got.transpose(2, 0, 1), want)
    np.testing.assert_array_equal(pool_k.pool2d(x, ph, pw, stride, mode, policy), want)


@pytest.mark.parametrize("policy", list(POLICY))
@pytest.mark.parametrize("n", [2, 3, 4])
def test_avg_pool_every_window_sum_and_policy(policy, n):
    """A 1 x n average window over every sum from -128 n to 127 n, one channel each: every
    quotient, the half-integers and values next to them among them, under each policy."""
    sums = np.arange(-128 * n, 127 * n + 1)
    x = np.zeros((len(sums), 1, n), np.int64)
    rest = sums.copy()
    for j in range(n):  # split each sum into n int8 values
        x[:, 0, j] = np.clip(rest, -128, 127)
        rest = rest - x[:, 0, j]
    assert not rest.any()
    x = x.astype(np.int8)
    want = ref.pool(x, 1, n, 1, "avg", POLICY[policy])
    got = pool_k.pool_hwc(np.ascontiguousarray(x.transpose(1, 2, 0)), 1, n, 1,
                          pool_k.POOL_AVG, policy)
    np.testing.assert_array_equal(got.transpose(2, 0, 1), want)


def test_avg_pool_float_quotient_matches_integer_division_for_every_window_size():
    """_avg's float64 quotient against integer division alone (not the testkit reference, whose
    trunc and away policies divide in floats too): for every window size the hardware allows
    (PRCNT/PCCNT up to 16 rows and columns, so every product n = rows * cols up to 256), every
    window sum that is a multiple of n, half a multiple (or the two sums either side of one for
    odd n), and their neighbours, from -128 n to 127 n, under each policy."""
    sizes = {}
    for rows in range(1, 17):
        for cols in range(1, 17):
            sizes.setdefault(rows * cols, (rows, cols))
    for n, (rows, cols) in sorted(sizes.items()):
        k = np.arange(-128, 128)[:, None] * n
        near = np.array([n // 2 + d for d in (-1, 0, 1)] + [(n + 1) // 2, -1, 0, 1])
        sums = np.unique(np.clip(k + near, -128 * n, 127 * n))
        x = np.zeros((rows * cols, len(sums)), np.int64)
        rest = sums.copy()
        for j in range(rows * cols):  # each sum split into n int8 values
            x[j] = np.clip(rest, -128, 127)
            rest = rest - x[j]
        assert not rest.any()
        x = np.ascontiguousarray(x.reshape(rows, cols, -1).astype(np.int8))
        mag, neg = np.abs(sums), sums < 0
        want = {pool_k.AVG_TRUNC: np.where(neg, -(mag // n), mag // n),
                pool_k.AVG_ROUND_AWAY: np.where(neg, -1, 1) * ((2 * mag + n) // (2 * n)),
                pool_k.AVG_FLOOR: sums // n,
                pool_k.AVG_FLOOR_HALF: (2 * sums + n) // (2 * n)}
        for policy, v in want.items():
            got = pool_k.pool_hwc(x, rows, cols, 1, pool_k.POOL_AVG, policy)
            np.testing.assert_array_equal(got.reshape(-1), np.clip(v, -128, 127),
                                          err_msg=f"n={n} policy={POLICY[policy]}")


def test_bias_is_shifted_by_7():
    x = np.zeros((1, 2, 2), np.int8)
    w = np.zeros((2, 1, 1, 1), np.int8)
    out = conv_k.run_layer_kernel(x, w, np.array([5, -7]), shift=0)
    assert out[:, 0, 0].tolist() == [5, -7]
    out = conv_k.run_layer_kernel(x, w, np.array([5, -7]), shift=-1)  # 2.5 -> 3, -3.5 -> -3
    assert out[:, 0, 0].tolist() == [3, -3]


def test_sign_extend():
    raw = np.array([0x0F, 0x08, 0x07, 0xF0, 0x80], np.uint8)
    assert numeric_k.sign_extend(raw, 0, 4).tolist() == [-1, -8, 7, 0, 0]
    assert numeric_k.sign_extend(raw, 4, 4).tolist() == [0, 0, 0, -1, -8]
    assert numeric_k.sign_extend(np.array([1, 0, 2, 3], np.uint8), 0, 1).tolist() == [-1, 0, 0, -1]
    assert numeric_k.sign_extend(np.array([0, 1, 2, 3], np.uint8), 0, 2).tolist() == [0, 1, -2, -1]
    assert numeric_k.sign_extend(np.array([0x80, 0x7F], np.uint8), 0, 8).tolist() == [-128, 127]


def test_wide_output_is_raw_accumulator():
    x = np.full((2, 1, 1), -128, np.int8)
    w = np.full((1, 2, 1, 1), -128, np.int8)
    out = conv_k.run_layer_kernel(x, w, np.array([3]), wide=True, act=numeric_k.ACT_RELU, shift=5)
    assert out.item() == 2 * 128 * 128 + 3 * 128
    assert numeric_k.wide_output(np.array([1 << 31, -(1 << 31) - 1], np.int64)).tolist() == \
        [-(1 << 31), (1 << 31) - 1]


# -- against the reference ----------------------------------------------------------------------
@st.composite
def layer_cases(draw):
    c = draw(st.integers(1, 5))
    k = draw(st.integers(1, 4))
    h = draw(st.integers(1, 9))
    w_ = draw(st.integers(1, 9))
    kern = draw(st.sampled_from([1, 3]))
    pool_mode = draw(st.sampled_from([pool_k.POOL_NONE, pool_k.POOL_MAX, pool_k.POOL_AVG]))
    ph = draw(st.integers(1, min(4, h)))
    pw = draw(st.integers(1, min(4, w_)))
    pstride = draw(st.integers(1, 3))
    pad = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    cstride = draw(st.integers(1, 2))
    bits = draw(st.sampled_from([1, 2, 4, 8]))
    shift = draw(st.integers(-15, 15))
    act = draw(st.sampled_from([numeric_k.ACT_NONE, numeric_k.ACT_RELU, numeric_k.ACT_ABS]))
    policy = draw(st.sampled_from(list(POLICY)))
    wide = draw(st.booleans())
    use_bias = draw(st.booleans())
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, size=(c, h, w_), dtype=np.int64).astype(np.int8)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    wt = rng.integers(lo, hi + 1, size=(k, c, kern, kern)).astype(np.int8)
    bias = rng.integers(-128, 128, size=k) if use_bias else None
    return dict(x=x, w=wt, bias=bias, pool=(ph, pw), pool_stride=pstride, pool_mode=pool_mode,
                avg_policy=policy, pad=pad, conv_stride=cstride, shift=shift, act=act, wide=wide)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layer_cases())
def test_layer_matches_reference(case):
    pm = case["pool_mode"]
    ph, pw = case["pool"] if pm != pool_k.POOL_NONE else (1, 1)
    h, w_ = case["x"].shape[1:]
    hp = (h - ph) // case["pool_stride"] + 1
    wp = (w_ - pw) // case["pool_stride"] + 1
    kern = case["w"].shape[2]
    assume(hp + 2 * case["pad"][0] >= kern and wp + 2 * case["pad"][1] >= kern)
    got = conv_k.run_layer_kernel(**case)
    want = ref.layer(case["x"], case["w"], case["bias"], pool_size=case["pool"],
                     pool_stride=case["pool_stride"], pool_kind=POOLK[pm],
                     avg_policy=POLICY[case["avg_policy"]], pad=case["pad"],
                     conv_stride=case["conv_stride"], shift=case["shift"],
                     act=ACTS[case["act"]], wide=case["wide"])
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(1 << 31), (1 << 31) - 1), min_size=1, max_size=20),
       st.integers(-15, 15),
       st.sampled_from([numeric_k.ACT_NONE, numeric_k.ACT_RELU, numeric_k.ACT_ABS]))
def test_requantize_matches_reference(accs, s, act):
    acc = np.array(accs, np.int64)
    np.testing.assert_array_equal(numeric_k.requantize(acc, s, act), ref.requant(acc, s, ACTS[act]))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 255), st.integers(0, 7), st.sampled_from([1, 2, 4, 8]))
def test_sign_extend_matches_reference(byte, shift, bits):
    assume(shift + bits <= 8)
    got = numeric_k.sign_extend(np.array([byte], np.uint8), shift, bits)[0]
    assert got == ref.sign_extend(byte >> shift, bits)


@pytest.mark.parametrize("c", [1023, 1024])
@pytest.mark.parametrize("fill", [None, -128])
def test_sums_exact_at_the_largest_accumulation(fill, c):
    # up to 1024 channels x 9 taps = 9216 products per output (the most a layer has: 16
    # passes of 64 processors); with every operand -128 the sum (151 M) is far past 2**24 and
    # near the int32 kernel's limit; an odd count leaves half a channel pair empty. The 32-bit
    # output shows the raw accumulator
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (c, 6, 5)).astype(np.int8)
    w = rng.integers(-128, 128, (3, c, 3, 3)).astype(np.int8)
    bias = rng.integers(-128, 128, 3)
    if fill is not None:
        x[:], w[:], bias[:] = fill, fill, fill
    got = conv_k.run_layer_kernel(x, w, bias, pad=(1, 1), wide=True)
    want = ref.layer(x, w, bias, pool_size=(1, 1), pool_stride=1, pool_kind="none",
                     avg_policy="trunc", pad=(1, 1), conv_stride=1, shift=0, act="none",
                     wide=True)
    np.testing.assert_array_equal(got, want)
    if fill is not None:
        assert got[0, 2, 2] == c * 9 * 128 * 128 - 128 * 128  # interior: every tap, bias -128
