"""Ethos-U85 fast paths against the reference paths they replace, bit for bit:

* the exact float BLAS GEMM of CONV / DEPTHWISE / matmul (emu/conv/ethosu85.py, method "auto")
  against the numba loop (method "loop") on random shapes, zero points, strides, dilations,
  pads, IFM types (int8 / uint8 / int16), accumulator inputs, 32/48-bit accumulators, raw
  accumulator output, LUT functions, and against an independent numpy integer computation of the
  accumulator sums;
* the strided-box gather/scatter of the device (gather_boxes / scatter_boxes) against the
  element-address path (gather / scatter): values, memory, Touched ranges and PMU counters;
* the memoised weight decoder against the plain one;
* the kept operation runs (accesses and kernel kept per decode and region placement) against
  the general path: memory, Touched, statistics, cycles and PMU counters.
"""
from __future__ import annotations

import numpy as np
import pytest

from accelstub.devices import DeviceError, open_device
from accelstub.devices.device import Touched, UnitContext
from accelstub.devices.ethos_u85 import stream as es
from accelstub.devices.ethos_u85.accounting import UnitAccount
from accelstub.emu.conv import ethosu85 as conv_k
from accelstub.emu.conv import int_conv as IC
from accelstub.emu.numeric import ethosu85 as P
from accelstub.emu.numeric import ethosu85_values as values_k
from accelstub.emu.weights import ethosu85 as Wt
from tests.ethos_u85 import ethosu85_reference as ref
from tests.ethos_u85.test_ethosu85_device import BUF, BUF2, SRAM, Host
from tests.ethos_u85.test_ethosu85_ops_device import (
    STOP,
    acc_format,
    ifm,
    kernel,
    ofm,
    out,
    scale_cmds,
    tensor_bytes,
    weight_cmds,
)

ITYPES = [(8, True), (8, False), (16, True)]


def random_cfg(rng, acc_bits: int, raw: bool) -> tuple[np.ndarray, bool]:
    """A random output stage; LUT functions now and then (they take P.finish per element)."""
    bits, signed = [(8, True), (8, False), (16, True), (32, True)][int(rng.integers(0, 4))]
    func = int(rng.choice([0, 0, 0, 1, 4, 8, 10]))
    per_channel = bool(rng.integers(0, 2))
    lo, hi = P.type_range(min(bits, 16), signed)
    amin = int(rng.integers(lo, hi + 1))
    amax = int(rng.integers(amin, hi + 1))
    cfg = P.out_config(ofm_bits=bits, ofm_signed=signed,
                       zero_point=(int(rng.integers(-128, 128)) if signed
                                   else int(rng.integers(0, 256))),
                       act_min=amin, act_max=amax,
                       scale=int(rng.integers(0, 1 << (15 if acc_bits == 48 else 31))),
                       shift=int(rng.integers(0, 64)), round_mode=int(rng.integers(0, 6)),
                       dbl_rnd=int(rng.integers(0, 31)), per_channel=per_channel,
                       acc_bits=acc_bits, function=func, table=0,
                       clip_none=bool(rng.integers(0, 2)) and bits == 8, acc_output_disable=raw)
    return cfg, per_channel


def conv_problem(rng, depthwise: bool):
    while True:
        prob = _conv_problem(rng, depthwise)
        if prob is not None:
            return prob


def _conv_problem(rng, depthwise: bool):
    bits, signed = ITYPES[int(rng.integers(0, 3))]
    lo, hi = P.type_range(bits, signed)
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    sy, sx = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    dy, dx = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    H, W = int(rng.integers(1, 9)), int(rng.integers(1, 9))
    pad = tuple(int(p) for p in rng.integers(0, 3, 4))
    dh, dw = (kh - 1) * dy + 1, (kw - 1) * dx + 1
    ih, iw = (H - 1) * sy + dh - pad[0] - pad[2], (W - 1) * sx + dw - pad[1] - pad[3]
    if ih < 1 or iw < 1:
        return None
    c = int(rng.integers(1, 40))
    oc = c if depthwise else int(rng.integers(1, 20))
    # stored IFM a little larger / smaller than the derived extent now and then (_fit)
    sh = (max(1, ih + int(rng.integers(-1, 2))), max(1, iw + int(rng.integers(-1, 2))), c)
    x = rng.integers(lo, hi + 1, sh).astype({(8, True): np.int8, (8, False): np.uint8,
                                             (16, True): np.int16}[(bits, signed)])
    if rng.integers(0, 4) == 0:
        x = x.astype(np.int64)           # raw int64 storage (the element-gather path gives that)
    zp = int(rng.integers(lo, hi + 1)) if bits == 8 else 0
    wmax = int(rng.choice([9, 255, 300]))
    w = rng.integers(-wmax, wmax + 1, (oc, kh, kw, 1 if depthwise else c))
    acc_bits = 48 if (bits == 16 or rng.integers(0, 2)) else 32
    raw = bool(rng.integers(0, 4) == 0)
    cfg, _ = random_cfg(rng, acc_bits, raw)
    acc_in = None
    if rng.integers(0, 3) == 0:    # acc_input keep/ifm2: also values outside the accumulator range
        acc_in = rng.integers(-(1 << 62), 1 << 62, (H, W, oc))
    lb = 1 << (acc_bits - 1)
    kw_ = dict(stride=(sy, sx), dilation=(dy, dx), pad=pad, ifm_zp=zp, ifm_bits=bits,
               ifm_signed=signed, cfg=cfg, bias=rng.integers(-lb, lb, oc),
               scales=rng.integers(0, 1 << (15 if acc_bits == 48 else 31), oc),
               shifts=rng.integers(0, 64, oc), lut=rng.integers(0, 256, 2048).astype(np.uint8),
               acc_in=acc_in)
    return x, w, (H, W), kw_


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("depthwise", [False, True])
def test_gemm_path_equals_loop(seed, depthwise):
    rng = np.random.default_rng(1000 * seed + depthwise)
    x, w, hw, kw_ = conv_problem(rng, depthwise)
    fn = conv_k.depthwise2d if depthwise else conv_k.conv2d
    d1, d2 = [], []
    got = fn(x, w, hw, diag=d1, **kw_)
    exp = fn(x, w, hw, diag=d2, method="loop", **kw_)
    assert got.dtype == exp.dtype
    np.testing.assert_array_equal(got, exp)
    assert d1 == d2


@pytest.mark.parametrize("seed", range(40))
def test_usual_output_stage_equals_loop(seed):
    """The branch-free output stage (32-bit accumulator, no LUT, no accumulator input, shifts
    <= 62): every rounding mode, double rounding, clip on and off, each OFM type, biases and
    scales up to the field limits, against the loop's per-element pseudocode."""
    rng = np.random.default_rng(7000 + seed)
    bits, signed = [(8, True), (8, False), (16, True), (32, True)][seed % 4]
    lo, hi = P.type_range(min(bits, 16), signed)
    amin = int(rng.integers(lo, hi + 1))
    per_channel = bool(seed % 3)
    cfg = P.out_config(ofm_bits=bits, ofm_signed=signed,
                       zero_point=(int(rng.integers(-128, 128)) if signed
                                   else int(rng.integers(0, 256))),
                       act_min=amin, act_max=int(rng.integers(amin, hi + 1)),
                       scale=int(rng.integers(0, 1 << 31)), shift=int(rng.integers(0, 63)),
                       round_mode=seed % 6, dbl_rnd=int(rng.integers(0, 31)),
                       per_channel=per_channel, acc_bits=32, clip_none=seed % 5 == 0 and bits == 8)
    oc, c = int(rng.integers(1, 40)), int(rng.integers(1, 30))
    x = rng.integers(-128, 128, (6, 7, c)).astype(np.int8)
    w = rng.integers(-255, 256, (oc, 3, 3, c))
    kw_ = dict(pad=(1, 1, 1, 1), ifm_zp=int(rng.integers(-128, 128)), ifm_bits=8,
               ifm_signed=True, cfg=cfg, bias=rng.integers(-(1 << 31), 1 << 31, oc),
               scales=rng.integers(0, 1 << 31, oc), shifts=rng.integers(0, 63, oc))
    got = conv_k.conv2d(x, w, (6, 7), **kw_)
    np.testing.assert_array_equal(got, conv_k.conv2d(x, w, (6, 7), method="loop", **kw_))
    # and against the output stage written here from the seed (Python integers, no overflow)
    tot = numpy_sums(x, w, (6, 7), (1, 1), (1, 1), kw_["pad"], kw_["ifm_zp"], False)
    if per_channel:
        bias, scales, shifts = kw_["bias"], kw_["scales"], kw_["shifts"]
    else:  # OFM_SCALE for every channel, no bias (G-R1)
        bias, scales, shifts = np.zeros(oc, int), [int(cfg[P.C_SCALE])] * oc, \
            [int(cfg[P.C_SHIFT])] * oc
    zp = int(cfg[P.C_ZP]) - (0x10000 if signed and cfg[P.C_ZP] & 0x8000 else 0)
    act = [int(cfg[c]) - (0x10000 if signed and cfg[c] & 0x8000 else 0)
           for c in (P.C_ACT_MIN, P.C_ACT_MAX)]
    want = np.array([[[output_stage(int(tot[y, x_, k]), int(bias[k]), int(scales[k]),
                                    int(shifts[k]), seed % 6, int(cfg[P.C_DBL_RND]), zp, act,
                                    not cfg[P.C_CLIP], bits, signed)
                       for k in range(oc)] for x_ in range(7)] for y in range(6)])
    np.testing.assert_array_equal(got.astype(np.int64), want)


def wrap(v: int, bits: int, signed: bool = True) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if signed and v >> (bits - 1) else v


def output_stage(acc: int, bias: int, scale: int, shift: int, mode: int, dbl: int, zp: int,
                 act: list[int], clip: bool, bits: int, signed: bool) -> int:
    """write_accumulator for a 32-bit accumulator and no LUT ([U85-TRM: §3.6.5, §3.6.6],
    [U85-TRM: §3.6.6, §3.6.7, §3.6.5]): wrap(acc + bias), times scale, rounded shift right,
    + zero point wrapped to 32 bits, clip, truncate to the OFM type."""
    r = wrap(acc + bias, 32) * scale
    if shift > 0:
        half = 1 << (shift - 1)
        d = 1 << (30 - dbl) if dbl <= 30 and shift > 31 - dbl else 0
        rnd = {0: half + d if r >= 0 else half - d, 1: half, 2: half + d,
               3: half if r >= 0 else half - 1, 4: 0 if r >= 0 else (1 << shift) - 1,
               5: 0}[mode]
        r = (r + rnd) >> shift
    v = wrap(r + zp, 32)
    if clip:
        v = min(max(v, act[0]), act[1])
    return wrap(v, bits, signed)


def numpy_sums(x, w, hw, stride, dilation, pad, zp, depthwise):
    """Independent accumulator sums in int64 numpy (no wrap): zero-padded IFM, one slice per
    kernel position, einsum over input channels."""
    H, W = hw
    kh, kw = w.shape[1], w.shape[2]
    v = x.astype(np.int64) - zp
    dh, dw = (kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1
    ih = (H - 1) * stride[0] + dh - pad[0] - pad[2]
    iw = (W - 1) * stride[1] + dw - pad[1] - pad[3]
    frame = np.zeros((ih + pad[0] + pad[2], iw + pad[1] + pad[3], v.shape[2]), np.int64)
    hh, ww = min(ih, v.shape[0]), min(iw, v.shape[1])
    frame[pad[0]:pad[0] + hh, pad[1]:pad[1] + ww] = v[:hh, :ww]
    tot = np.zeros((H, W, w.shape[0]), np.int64)
    for ky in range(kh):
        for kx in range(kw):
            a = frame[ky * dilation[0]:ky * dilation[0] + (H - 1) * stride[0] + 1:stride[0],
                      kx * dilation[1]:kx * dilation[1] + (W - 1) * stride[1] + 1:stride[1]]
            if depthwise:
                tot += a[:, :, :w.shape[0]] * w[:, ky, kx, 0]
            else:
                tot += np.einsum("hwc,oc->hwo", a, w[:, ky, kx, :].astype(np.int64))
    return tot


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("depthwise", [False, True])
def test_gemm_sums_equal_numpy_integers(seed, depthwise):
    """Raw 48-bit accumulators out (acc_output disable) = the integer sums wrapped to 48 bits."""
    rng = np.random.default_rng(7000 + seed)
    x, w, hw, kw_ = conv_problem(rng, depthwise)
    bits, signed = kw_["ifm_bits"], kw_["ifm_signed"]
    kw_.update(cfg=P.out_config(acc_bits=48, acc_output_disable=True), acc_in=None)
    fn = conv_k.depthwise2d if depthwise else conv_k.conv2d
    got = fn(x, w, hw, **kw_)
    raw = values_k.read_values(x, 0, bits, signed)
    tot = numpy_sums(raw, w, hw, kw_["stride"], kw_["dilation"], kw_["pad"], kw_["ifm_zp"],
                     depthwise)
    exp = np.vectorize(lambda t: int(P.sign_extend(int(t), 48)))(tot) if tot.size else tot
    # positions with no kernel tap inside the IFM keep the reset value 0 either way
    np.testing.assert_array_equal(got, exp)


@pytest.mark.parametrize("seed", range(20))
def test_matmul_gemm_equals_loop(seed):
    rng = np.random.default_rng(300 + seed)
    bits = 8 if seed % 2 else 16
    lo, hi = P.type_range(bits, True)
    Wd, ic, d = int(rng.integers(1, 40)), int(rng.integers(1, 70)), int(rng.integers(1, 30))
    a = rng.integers(lo, hi + 1, (1, Wd, ic)).astype(np.int8 if bits == 8 else np.int16)
    b = rng.integers(lo, hi + 1, (1, d, ic)).astype(np.int8 if bits == 8 else np.int16)
    zp, zp2 = (int(rng.integers(-128, 128)), int(rng.integers(-128, 128))) if bits == 8 else (0, 0)
    cfg, _ = random_cfg(rng, 48 if bits == 16 else 32, bool(seed % 5 == 0))
    kw_ = dict(ifm_zp=zp, ifm2_zp=zp2, ifm_bits=bits, ifm_signed=True, cfg=cfg,
               bias=rng.integers(-999, 999, d), scales=rng.integers(0, 1 << 15, d),
               shifts=rng.integers(0, 50, d), lut=rng.integers(0, 256, 2048).astype(np.uint8))
    np.testing.assert_array_equal(conv_k.matmul(a, b, **kw_),
                                  conv_k.matmul(a, b, method="loop", **kw_))


def test_gemm_dtype_bounds():
    """float32 only while max|v| * max_oc sum|w| < 2**24, float64 below 2**53, else the loop."""
    w = np.full((2, 1, 1, 64), 255)
    assert conv_k._gemm_dtype(255, w) is np.float32                  # 255*255*64 < 2**24
    assert conv_k._gemm_dtype(255, np.full((1, 3, 3, 64), 255)) is np.float64
    assert conv_k._gemm_dtype(1 << 16, np.full((1, 1, 1, 1), 1 << 40)) is None


def test_large_sums_use_float64_and_stay_exact():
    """A 1x1 conv over 2048 channels of extreme int8 values: partial sums beyond 2**24."""
    rng = np.random.default_rng(5)
    x = rng.choice([-128, -127], (3, 5, 2048)).astype(np.int8)
    w = -256 + rng.integers(0, 2, (4, 1, 1, 2048))
    assert conv_k._gemm_dtype(255, w) is np.float64
    cfg = P.out_config(acc_bits=48, acc_output_disable=True)
    got = conv_k.conv2d(x, w, ifm_zp=127, cfg=cfg)
    np.testing.assert_array_equal(got, conv_k.conv2d(x, w, ifm_zp=127, cfg=cfg, method="loop"))
    assert np.abs(got).max() > 1 << 24


def test_padding_only_outputs_keep_unwrapped_start_value():
    """No tap inside the IFM: no accumulate() call, the start value is not wrapped
    [U85-TRM: §3.10.2]."""
    x = np.ones((1, 1, 1), np.int8)
    w = np.ones((1, 1, 1, 1))
    acc_in = np.full((3, 3, 1), 1 << 60)
    cfg = P.out_config(acc_bits=32, acc_output_disable=True)
    got = conv_k.conv2d(x, w, (3, 3), pad=(1, 1, 1, 1), cfg=cfg, acc_in=acc_in)
    exp = conv_k.conv2d(x, w, (3, 3), pad=(1, 1, 1, 1), cfg=cfg, acc_in=acc_in, method="loop")
    np.testing.assert_array_equal(got, exp)
    assert got[0, 0, 0] == 1 << 60 and got[1, 1, 0] == P.sign_extend((1 << 60) + 1, 32)


# ---------------------------------------------------------------------------------------------
# device: strided boxes against element addresses


def fresh(kept_runs: bool = True):
    """A booted device; ``kept_runs`` False: every operation through the general path."""
    d = open_device("ethos-u85")
    Host(d).boot()
    if not kept_runs:
        d.kept_runs = None
    return d


def without_boxes(d):
    d.port.gather_boxes = lambda *a, **k: None
    d.port.scatter_boxes = lambda *a, **k: False
    d.port.box_access = lambda *a, **k: None  # (the kept operation runs take their views from it)
    return d


def _axi(acct: UnitAccount) -> list:
    """The unit's AXI accesses with each access's ranges as a list (paths may keep tuples)."""
    return [(f, ch, w, [tuple(r) for r in ranges]) for f, ch, w, ranges in acct.axi]


def test_box_gather_scatter_equal_element_path():
    d = fresh()
    Host(d).w("BASEP1_LO", BUF)
    Host(d).w("BASEP1_HI", 0)
    rng = np.random.default_rng(11)
    d.write(BUF, rng.integers(0, 256, 0x4000).astype(np.uint8).tobytes())
    base = d.basep(1)
    for _ in range(40):
        size = int(rng.choice([1, 2, 4, 8]))
        shape = tuple(int(n) for n in rng.integers(1, 6, 3))
        strides = [size]
        for n in shape[:0:-1]:
            strides.insert(0, strides[0] * n + size * int(rng.integers(0, 3)))
        strides = tuple(strides)
        perm = rng.permutation(3)                    # also boxes in non-C order
        shape = tuple(shape[i] for i in perm)
        strides = tuple(strides[i] for i in perm)
        off = int(rng.integers(0, 64)) * size
        idx = np.indices(shape).reshape(3, -1).T
        offs = off + idx @ np.array(strides)
        signed = bool(rng.integers(0, 2))
        ctx = UnitAccount(Touched())
        d.port.account = ctx
        (a,) = d.port.gather_boxes(1, [(off, shape, strides)], size, signed, 1)
        ctx2 = UnitAccount(Touched())
        d.port.account = ctx2
        b = d.port.gather(1, offs, size, signed, 1).reshape(shape)
        np.testing.assert_array_equal(np.asarray(a, np.int64), b)
        assert ctx.touched.reads == ctx2.touched.reads and ctx.bytes == ctx2.bytes
        assert _axi(ctx) == _axi(ctx2)
        vals = rng.integers(-(1 << 40), 1 << 40, shape)
        before = d.read(BUF, 0x4000)
        d.port.account = ctx
        assert d.port.scatter_boxes(1, [(off, shape, strides)], size, [vals], 8)
        after_box = d.read(BUF, 0x4000)
        d.write(BUF, before)
        d.port.account = ctx2
        d.port.scatter(1, offs, size, vals.ravel(), 8)
        assert d.read(BUF, 0x4000) == after_box
        assert ctx.touched.writes == ctx2.touched.writes and _axi(ctx) == _axi(ctx2)
    d.port.account = None
    assert base == d.basep(1)
    # a self-overlapping box is left to the element path
    assert not d.port.scatter_boxes(1, [(0, (2, 3), (1, 1))], 1, [np.zeros((2, 3))], 8)


def test_box_views_follow_memory_and_basep():
    """The box views are kept per box and BASEP: a second read sees memory written since, and
    after BASEP moves, the new place, with the same values and ranges as the element path."""
    d = fresh()
    h = Host(d)
    h.w("BASEP1_HI", 0)
    rng = np.random.default_rng(3)
    d.write(BUF, rng.integers(0, 256, 0x400).astype(np.uint8).tobytes())
    box = (8, (3, 4, 5), (40, 10, 2))
    offs = 8 + np.indices(box[1]).reshape(3, -1).T @ np.array(box[2])
    for base, write in ((BUF, None), (BUF, bytes(range(100, 200))), (BUF + 0x100, None)):
        h.w("BASEP1_LO", base)
        if write:
            d.write(base, write)
        ctx = UnitAccount(Touched())
        d.port.account = ctx
        (a,) = d.port.gather_boxes(1, [box], 2, True, 1)
        ctx2 = UnitAccount(Touched())
        d.port.account = ctx2
        b = d.port.gather(1, offs, 2, True, 1).reshape(box[1])
        np.testing.assert_array_equal(np.asarray(a, np.int64), b)
        assert ctx.touched.reads == ctx2.touched.reads and _axi(ctx) == _axi(ctx2)
    d.port.account = None


def conv_program(d, rng, fmt, ofmt, transpose, shape, oc, k=3):
    IH, IW, IC = shape
    x = rng.integers(-128, 128, shape)
    W = rng.integers(-255, 256, (oc, k, k, IC))
    d.write(BUF, tensor_bytes(x, 8, True, fmt))
    o = out(zp=-2, rnd=0, per_channel=True)
    pad = (1, 1, 1, 1)
    stored = {"HWC": None, "WHC": (IW, IH, oc), "HCW": (IH, oc, IW), "CHW": (oc, IH, IW),
              "WCH": (IW, oc, IH), "CWH": (oc, IW, IH)}[transpose]
    blk = (16, 16, 16) if ofmt == "nhcwb16" else (IH, IW, 16)
    return (ifm("IFM", shape, 0, fmt=fmt, zp=3) + [("NPU_SET_IFM_DEPTH_M1", dict(depth_m1=IC - 1))]
            + ofm((IH, IW, oc), 0x4000, o, fmt=ofmt, transpose=transpose, stored=stored, blk=blk)
            + kernel(k, k, pad=pad) + acc_format()
            + weight_cmds(d, W, ofm_blk_depth=16, kernel_hw=(k, k))
            + scale_cmds(d, rng.integers(-5000, 5000, oc), rng.integers(1 << 29, 1 << 31, oc),
                         rng.integers(36, 42, oc))
            + [("NPU_OP_CONV", {})])


@pytest.mark.parametrize("fmt, ofmt, transpose, shape, oc, used", [
    ("nhwc", "nhwc", "HWC", (6, 7, 5), 9, (True, True)),
    ("nhcwb16", "nhcwb16", "HWC", (5, 4, 32), 16, (True, True)),    # whole bricks: 4-D boxes
    ("nhcwb16", "nhcwb16", "HWC", (5, 4, 20), 18, (True, True)),    # a partial brick: 2 boxes
    ("nhcwb16", "nhcwb16", "HWC", (3, 5, 40), 24, (True, True)),
    ("nhcwb16", "nhwc", "HWC", (4, 5, 12), 7, (True, True)),        # one brick
    ("nhwc", "nhwc", "WHC", (5, 6, 3), 4, (True, True)),
    ("nhwc", "nhwc", "CHW", (4, 6, 3), 5, (True, True)),
    ("nhwc", "nhcwb16", "HCW", (3, 16, 3), 16, (True, True)),
])
def test_device_box_path_equals_element_path(fmt, ofmt, transpose, shape, oc, used):
    """The same conv through both paths: OFM memory, Touched ranges, PMU counters identical."""
    results = []
    for boxes in (True, False):
        d = fresh() if boxes else without_boxes(fresh())
        calls = []
        if boxes:
            def spy(fn, tag):
                def call(*a):
                    r = fn(*a)
                    calls.append((tag, r is not None and r is not False))
                    return r
                return call
            d.port.gather_boxes = spy(d.port.gather_boxes, "g")
            d.port.scatter_boxes = spy(d.port.scatter_boxes, "s")
        rng = np.random.default_rng(42)
        cmds = conv_program(d, rng, fmt, ofmt, transpose, shape, oc)
        Host(d).start(es.encode_stream(cmds + STOP))
        t = d.execute_unit(UnitContext())
        assert not Host(d).field("STATUS", "cmd_parse_error")
        results.append((d.read(BUF, 0x8000), t.reads, t.writes, d.counters()))
        if boxes:
            assert (("g", True) in calls) == used[0] and (("s", True) in calls) == used[1]
    assert results[0] == results[1]


def test_weight_decode_memo():
    rng = np.random.default_rng(3)
    W = rng.integers(-255, 256, (20, 3, 3, 9))
    p = Wt.ordering_params(ofm_depth=20, ifm_depth=9, kernel_hw=(3, 3), ofm_block_depth=16,
                           macs_per_cc=256, microblock=2)
    streams = [Wt.encode_swd(s, zdiv=0, wdiv=5) for s in Wt.order_weights(W, p)]
    a = Wt.decode_weights_memo(streams, p)
    b = Wt.decode_weights_memo(list(streams), p)
    assert a is b and not a.flags.writeable
    np.testing.assert_array_equal(a, Wt.decode_weights(streams, p))
    np.testing.assert_array_equal(a, W)
    # a changed stream decodes afresh; diag messages are replayed on a hit
    bad = [streams[0][:16]]
    d1, d2 = [], []
    Wt.decode_weights_memo(bad, p, diag=d1)
    Wt.decode_weights_memo(bad, p, diag=d2)
    ref_diag: list[str] = []
    Wt.decode_weights(bad, p, diag=ref_diag)
    assert d1 == d2 == ref_diag and d1


def test_axi_burst_counts_equal_vectorised_split():
    """The numba burst kernel against the vectorised numpy split it replaced (per range:
    bursts at the alignment, port = hash parities % ports)."""
    from accelstub.emu.memory.ethosu85_axi import burst_counts

    rng = np.random.default_rng(9)
    for _ in range(50):
        s0 = rng.integers(0, 1 << 40, int(rng.integers(1, 30)))
        e0 = s0 + rng.integers(1, 5000, s0.size)
        align = int(rng.choice([64, 128, 256, 32]))
        hashes = [int(h) for h in rng.integers(0, 1 << 47, int(rng.integers(0, 3)))]
        n = int(rng.choice([1, 2, 4]))
        nb = (e0 - 1) // align - s0 // align + 1
        idx = np.repeat(np.arange(s0.size), nb)
        k = np.arange(int(nb.sum())) - np.repeat(np.cumsum(nb) - nb, nb)
        a = np.where(k == 0, s0[idx], (s0[idx] // align + k) * align)
        b = np.minimum(e0[idx], (a // align + 1) * align)
        port = np.zeros(a.shape, np.int64)
        for bit, h in enumerate(hashes):
            port |= np.array([bin(int(x) & h).count("1") & 1 for x in a], np.int64) << bit
        port %= n
        trans, beats, nbytes, total = burst_counts(np.stack([s0, e0], 1), align,
                                                   np.asarray(hashes, np.int64), n)
        np.testing.assert_array_equal(trans, np.bincount(port, minlength=n))
        np.testing.assert_array_equal(beats, np.bincount(port, weights=(b + 15) // 16 - a // 16,
                                                         minlength=n).astype(np.int64))
        np.testing.assert_array_equal(nbytes, np.bincount(port, weights=b - a, minlength=n))
        assert total == a.size


def test_weight_decode_memo_evicts_the_least_recently_used(monkeypatch):
    """A repeat run finds its entry by the probe; that use still counts for the eviction order,
    so a busy layer's weights stay while one used once goes."""
    monkeypatch.setattr(Wt, "_DECODED_MAX_ENTRIES", 2)
    monkeypatch.setattr(Wt, "_DECODED", type(Wt._DECODED)())
    monkeypatch.setattr(Wt, "_PROBES", {})
    p = Wt.ordering_params(ofm_depth=4, ifm_depth=4, kernel_hw=(1, 1), ofm_block_depth=16,
                           macs_per_cc=256, microblock=2)
    rng = np.random.default_rng(5)
    a, b, c = ([Wt.encode_swd(s, zdiv=0, wdiv=5)
                for s in Wt.order_weights(rng.integers(-99, 100, (4, 1, 1, 4)), p)]
               for _ in range(3))
    first = Wt.decode_weights_memo(a, p)
    Wt.decode_weights_memo(b, p)
    for _ in range(5):
        assert Wt.decode_weights_memo(list(a), p) is first  # the busy one, through the probe
    Wt.decode_weights_memo(c, p)  # the memo is full: the least recently used (b) goes
    assert Wt.decode_weights_memo(a, p) is first
    assert len(Wt._DECODED) == 2 and all(k[0] != tuple(b) for k in Wt._DECODED)


def test_depthwise_sums_on_the_integer_kernel_where_exact(monkeypatch):
    """DEPTHWISE accumulates on the shared integer kernel (int_conv.depthwise_sums) where
    fits_int32 proves its int32 sums exact, and keeps the float GEMM past that bound; both give
    the loop's result and the Python-integer reference's."""
    calls = []
    real = IC.depthwise_sums
    monkeypatch.setattr(IC, "depthwise_sums", lambda *a, **k: calls.append(1) or real(*a, **k))
    rng = np.random.default_rng(5)
    cfg = P.out_config(acc_bits=48, acc_output_disable=True)
    x8 = rng.integers(-128, 128, (6, 7, 5)).astype(np.int8)
    x16 = np.full((6, 7, 5), -32768, np.int16)
    for x, w, used in ((x8, rng.integers(-255, 256, (5, 3, 3, 1)), True),
                       (x16, np.full((5, 3, 3, 1), 32767), False)):  # 2^15 * 9 * 32767 > 2^31
        calls.clear()
        kw_ = dict(pad=(1, 1, 1, 1), ifm_zp=0, cfg=cfg)
        got = conv_k.depthwise2d(x, w, (6, 7), **kw_)
        assert bool(calls) == used
        np.testing.assert_array_equal(got, conv_k.depthwise2d(x, w, (6, 7), method="loop", **kw_))
        exp = ref.conv(ref.values(x, 0, 8 * x.itemsize, True), w, 6, 7, (1, 1), (1, 1), (1, 1),
                       dict(raw=True, acc_bits=48), bytes(2048), depthwise=True)
        np.testing.assert_array_equal(got, exp.astype(np.int64))  # Python integers


def test_output_stage_terms_follow_the_config_and_writable_scale_arrays():
    """The output stage's per-channel terms are kept for read-only (decoded) scale arrays: a
    second configuration with the same arrays, and a writable array changed between two runs,
    each still give the loop's result and the Python-integer reference's."""
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, (5, 6, 7)).astype(np.int8)
    w = rng.integers(-127, 128, (9, 3, 3, 7))
    bias, scales, shifts = (rng.integers(-999, 999, 9), rng.integers(1 << 20, 1 << 30, 9),
                            rng.integers(20, 40, 9))
    for a in (bias, scales, shifts):
        a.flags.writeable = False
    v = ref.values(x, 3, 8, True)

    def reference(rnd, scales):  # the Python-integer reference
        o = dict(bits=8, signed=True, zp=0, amin=-128, amax=127, scale=1, shift=0, rnd=rnd,
                 per_channel=True)
        return ref.conv(v, w, 5, 6, (1, 1), (1, 1), (1, 1), o, bytes(2048), bias, scales,
                        shifts).astype(np.int64)

    for rnd in (P.RND_DOUBLE_SYMMETRIC, P.RND_TRUNCATE_TO_ZERO):
        kw_ = dict(pad=(1, 1, 1, 1), ifm_zp=3, bias=bias, scales=scales, shifts=shifts,
                   cfg=P.out_config(ofm_bits=8, ofm_signed=True, act_min=-128, act_max=127,
                                    round_mode=rnd, per_channel=True))
        got = conv_k.conv2d(x, w, (5, 6), **kw_)
        np.testing.assert_array_equal(got, conv_k.conv2d(x, w, (5, 6), method="loop", **kw_))
        np.testing.assert_array_equal(got, reference(rnd, scales))
    scales = scales.copy()  # writable
    kw_["scales"] = scales
    first = conv_k.conv2d(x, w, (5, 6), **kw_)
    scales[:] //= 2
    again = conv_k.conv2d(x, w, (5, 6), **kw_)
    np.testing.assert_array_equal(again, conv_k.conv2d(x, w, (5, 6), method="loop", **kw_))
    np.testing.assert_array_equal(again, reference(P.RND_TRUNCATE_TO_ZERO, scales))
    assert not np.array_equal(first, again)


def test_axi_counts_memo_keys_tuples_by_identity_and_lists_by_value():
    """A unit's AXI counts are memoised with tuples of ranges keyed by identity (the entry
    holds them) and lists by value: a new tuple or list with other ranges gets its own counts,
    equal ones the same counts."""
    d = fresh()
    Host(d).w("PMCR", 1)
    counts = []
    for ranges in ((0x100, 0x180),), ((0x100, 0x180),), [(0x100, 0x180)], ((0x100, 0x1000),), \
            [(0x100, 0x1000)]:
        d.stats.clear()
        ev = d.pmu.axi_events([(0, 1, False, ranges), (0, 2, True, [(0x40, 0x44)])], 10, True,
                              d.stats)
        counts.append((ev, dict(d.stats)))
    assert counts[0] == counts[1] == counts[2] and counts[3] == counts[4]
    assert counts[0] != counts[3]
    assert sum(v for k, v in counts[3][1].items() if k.endswith("read_bytes")) == 0x1000 - 0x100


def test_weight_and_scale_memos_hold_more_layers_than_a_network_has(monkeypatch):
    """An inference uses every layer's weights once: 100 distinct streams (more than MobileNet
    v2's 61 weighted operations) decoded in turn are all still held for the next inference."""
    monkeypatch.setattr(Wt, "_DECODED", type(Wt._DECODED)())
    monkeypatch.setattr(Wt, "_PROBES", {})
    p = Wt.ordering_params(ofm_depth=4, ifm_depth=4, kernel_hw=(1, 1), ofm_block_depth=16,
                           macs_per_cc=256, microblock=2)
    rng = np.random.default_rng(6)
    streams = [[Wt.encode_swd(s, zdiv=0, wdiv=5)
                for s in Wt.order_weights(rng.integers(-99, 100, (4, 1, 1, 4)), p)]
               for _ in range(100)]
    first = [Wt.decode_weights_memo(st, p) for st in streams]
    assert all(Wt.decode_weights_memo(list(st), p) is w for st, w in zip(streams, first))
    scales = [Wt.encode_scale_stream(rng.integers(-99, 99, 4), rng.integers(1, 1 << 20, 4),
                                     rng.integers(1, 30, 4)) for _ in range(100)]
    kept = [Wt.decode_scale_stream(b, 4) for b in scales]
    assert all(Wt.decode_scale_stream(b, 4)[0] is k[0] for b, k in zip(scales, kept))


def test_conv_decode_is_kept_per_command_state_and_the_kernel_per_weights(monkeypatch):
    """An operation's decode is memoised on its commands (ops.memo_on_state) and its integer
    kernel setup on the decoded weights and scales: a rerun decodes nothing again; weights or
    scales rewritten in memory under the same commands, or one command changed, give what a
    device with empty memos gives, and the last two what the Python-integer reference gives."""
    from accelstub.devices.ethos_u85 import op_conv, setstate

    monkeypatch.setattr(setstate, "_MEMO", {})  # (other tests may have run the same commands)
    decodes = []
    real = op_conv.conv_decode
    monkeypatch.setattr(op_conv, "conv_decode", lambda *a: decodes.append(a) or real(*a))

    def run(cmds, fresh_memos=False):
        if fresh_memos:
            monkeypatch.setattr(setstate, "_MEMO", {})
        d.write(BUF + 0x4000, bytes(0x400))
        Host(d).start(es.encode_stream(cmds + STOP))
        t = d.execute_unit(UnitContext())
        assert not Host(d).field("STATUS", "cmd_parse_error")
        d.execute_unit(UnitContext())  # the STOP: the next start runs from the beginning
        return d.read(BUF + 0x4000, 6 * 7 * 9), t.reads, t.writes

    d = fresh()
    rng = np.random.default_rng(5)
    cmds = conv_program(d, rng, "nhwc", "nhwc", "HWC", (6, 7, 5), 9)
    first = run(cmds)
    assert len(decodes) == 1
    assert run(cmds) == first and len(decodes) == 1           # a rerun: the kept decode
    wcmds = [c for c in cmds if c[0].startswith("NPU_SET_WEIGHT")]
    for _ in range(200):  # other weights whose stream has the same length: same commands
        w2 = rng.integers(-255, 256, (9, 3, 3, 5))
        if weight_cmds(d, w2, ofm_blk_depth=16, kernel_hw=(3, 3)) == wcmds:
            break
    else:
        pytest.fail("no weights of the same stream length")
    new_weights = run(cmds)
    assert len(decodes) == 1 and new_weights[0] != first[0]
    assert run(cmds, fresh_memos=True) == new_weights
    bias, sc, sh = (rng.integers(-5000, 5000, 9), rng.integers(1 << 29, 1 << 31, 9),
                    rng.integers(36, 42, 9))
    scale_cmds(d, bias, sc, sh)                                 # same length: same commands
    new_scales = run(cmds)
    assert new_scales[0] != new_weights[0] and run(cmds, fresh_memos=True) == new_scales
    changed = [("NPU_SET_IFM_ZERO_POINT", dict(zero_point=-7)) if c[0] == "NPU_SET_IFM_ZERO_POINT"
               else c for c in cmds]
    n = len(decodes)
    other = run(changed)
    assert len(decodes) == n + 1 and other[0] != new_scales[0]
    assert run(changed, fresh_memos=True) == other
    # the last two against the Python-integer reference (every input is the test's by now)
    x = np.frombuffer(d.read(BUF, 6 * 7 * 5), np.int8).reshape(6, 7, 5)
    for zp, got in ((3, new_scales), (-7, other)):
        exp = ref.conv(ref.values(x, zp, 8, True), w2, 6, 7, (1, 1), (1, 1), (1, 1),
                       out(zp=-2, rnd=0, per_channel=True), bytes(2048), bias, sc, sh)
        assert got[0] == exp.astype(np.int8).tobytes()


def test_kept_set_segment_equals_the_command_by_command_walk():
    """A unit's NPU_SET_* commands taken at once from the kept segment (first run and rerun)
    leave what the walk command by command (a breakpoint elsewhere forces it) leaves: QREAD,
    the fetches in Touched, the statistics, the cycles and the PMU counters."""
    def units(bp):
        d = fresh()
        cmds = conv_program(d, np.random.default_rng(8), "nhwc", "nhwc", "HWC", (4, 5, 6), 7)
        out = []
        for _ in range(2):
            Host(d).start(es.encode_stream(cmds + STOP))
            while not d.finished():
                t = d.execute_unit(UnitContext(breakpoints=bp))
                out.append((d.regs.peek("QREAD"), t.reads, t.writes, dict(d.stats), d.cycles,
                            d.counters()))
        return out

    kept = units(frozenset())
    assert kept == units(frozenset({0xFFFF_FFF0}))
    assert len(kept) == 4 and kept[0][1][0] == kept[2][1][0]


def test_elementwise_decode_is_kept_per_command_state(monkeypatch):
    """NPU_OP_ELEMENTWISE's decode is memoised on its commands like the convolution's: a
    rerun decodes nothing again and reads the operands afresh; a changed command decodes
    again and gives what a device with empty memos gives; so does the OFM write's layout. Each
    result is also the Python-integer reference's (ethosu85_reference)."""
    from accelstub.devices.ethos_u85 import op_eltwise, setstate

    monkeypatch.setattr(setstate, "_MEMO", {})
    decodes = []
    real = op_eltwise.eltwise_decode
    monkeypatch.setattr(op_eltwise, "eltwise_decode", lambda *a: decodes.append(a) or real(*a))
    rng = np.random.default_rng(9)
    d = fresh()

    def program(scale, at=0x200):
        return (ifm("IFM", (3, 4, 5), 0, zp=3) + ifm("IFM2", (3, 4, 5), 0x100, zp=-2)
                + [("NPU_SET_IFM_UPSCALE", {}),
                   ("NPU_SET_IFM_SCALE", dict(scale=scale, shift=3, round_mode=1)),
                   ("NPU_SET_IFM2_SCALE", dict(scale=5, shift=2, round_mode=1))]
                + ofm((3, 4, 5), at, out(zp=1)) + acc_format()
                + [("NPU_OP_ELEMENTWISE", dict(elementwise_mode="add"))])

    def run(cmds, fresh_memos=False):
        if fresh_memos:
            monkeypatch.setattr(setstate, "_MEMO", {})
        Host(d).start(es.encode_stream(cmds + STOP))
        while not d.finished():
            d.execute_unit(UnitContext())
        assert not Host(d).field("STATUS", "cmd_parse_error")
        return d.read(BUF + 0x200, 60)

    def operands():
        d.write(BUF, rng.integers(0, 256, 0x200).astype(np.uint8).tobytes())

    def expected(scale):  # the Python-integer reference on the operands in memory
        x, y = (np.frombuffer(d.read(BUF + off, 60), np.int8).reshape(3, 4, 5)
                for off in (0, 0x100))
        exp = ref.elementwise(1, ref.values(x, 3, 8, True), ref.values(y, -2, 8, True), 8, True,
                              (scale, 3, 1, 0), (5, 2, 1, 0), out(zp=1), bytes(P.LUT_BYTES))
        return exp.astype(np.int8).tobytes()

    operands()
    first = run(program(7))
    assert first == expected(7)
    assert len(decodes) == 1 and run(program(7)) == first and len(decodes) == 1
    operands()
    again = run(program(7))
    assert len(decodes) == 1 and again != first and run(program(7), fresh_memos=True) == again
    assert again == expected(7)
    n = len(decodes)
    other = run(program(9))
    assert len(decodes) == n + 1 and other != again and other == expected(9)
    assert run(program(9), fresh_memos=True) == other
    run(program(9, at=0x280))  # the OFM write's layout is kept per command state too
    assert d.read(BUF + 0x280, 60) == other


def test_port_families_follow_regioncfg_and_mem_attr():
    """The command stream's place and port family are kept between units (EthosU85._stream)
    and worked out again when one of their registers changes: pointing region 1's memory
    attributes (shared with the command stream's region here) at the other AXI port family
    between two runs moves their bytes there, as on a device set up that way from the start."""
    def axi_bytes(d, before):
        return {k: v - before.get(k, 0) for k, v in d.stats.items()
                if k.startswith("axi.") and v != before.get(k, 0)}

    def run(d, flip_before, flip_between):
        idx = d.regs.field("REGIONCFG", "region1")
        assert idx == d.regs.field("QCONFIG", "cmd_region0")
        def flip() -> None:  # axi_port, bit 2
            Host(d).w(f"MEM_ATTR{idx}", Host(d).r(f"MEM_ATTR{idx}") ^ 0x4)
        if flip_before:
            flip()
        cmds = conv_program(d, np.random.default_rng(4), "nhwc", "nhwc", "HWC", (5, 6, 7), 8)
        out = []
        for k in range(2):
            if k and flip_between:
                flip()
            before = dict(d.stats)
            Host(d).start(es.encode_stream(cmds + STOP))
            while not d.finished():
                d.execute_unit(UnitContext())
            out.append(axi_bytes(d, before))
        return out

    same = run(fresh(), False, False)
    moved = run(fresh(), False, True)
    flipped = run(fresh(), True, False)
    assert same[0] == same[1] == moved[0] and flipped[0] == flipped[1]
    assert moved[1] == flipped[0] != same[0]


@pytest.mark.parametrize("seed", range(40))
def test_elementwise_add_sub_fast_path_equals_the_general_loop(seed):
    """eltwise _addsub_fast (taken by add/sub where _addsub_fast_applies) against the
    per-element loop of _ew_kernel (every mode's loop): input types, scales up to 2**31 - 1 of
    either sign, shifts 0..62, every round mode and dbl_rnd, scalar-sized operands, OFM types,
    clipping on and off; and, where the seed defines the rounding (modes 0-5, dbl_rnd <= 30),
    against the Python-integer reference written from the pseudocode (ethosu85_reference)."""
    from accelstub.emu.eltwise import ethosu85 as E

    rng = np.random.default_rng(seed)
    bits, signed = ITYPES[seed % 3]
    shape = tuple(int(n) for n in rng.integers(1, 7, 3))
    lo, hi = (-(1 << 31) - (1 << 16), (1 << 31) + (1 << 16)) if seed % 5 == 0 else \
        (-(1 << 17), 1 << 17)
    a, b = (rng.integers(lo, hi, shape) for _ in range(2))

    def scale():
        return (int(rng.integers(-(1 << 31) + 1, 1 << 31)), int(rng.integers(0, 63)),
                int(rng.integers(0, 8)), int(rng.integers(0, 32)))

    obits, osigned = [(8, True), (8, False), (16, True), (32, True)][seed % 4]
    lo16, hi16 = P.type_range(min(obits, 16), osigned)
    o = dict(bits=obits, signed=osigned, zp=int(rng.integers(-300, 300)), amin=lo16, amax=hi16,
             scale=int(rng.integers(-(1 << 31) + 1, 1 << 31)), shift=int(rng.integers(0, 63)),
             rnd=int(rng.integers(0, 6)), dbl=int(rng.integers(0, 32)), clip_none=bool(seed % 2))
    cfg = P.out_config(ofm_bits=obits, ofm_signed=osigned, zero_point=o["zp"], act_min=lo16,
                       act_max=hi16, scale=o["scale"], shift=o["shift"], round_mode=o["rnd"],
                       dbl_rnd=o["dbl"], clip_none=o["clip_none"])
    for mode in (E.EW_ADD, E.EW_SUB):
        sc1, sc2 = scale(), scale()
        ew = np.array([mode, bits, int(signed), bits, int(signed), *sc1, *sc2, 0], np.int64)
        assert E._addsub_fast_applies(ew, cfg)
        lut = np.zeros(P.LUT_BYTES, np.uint8)
        got = np.zeros(shape, np.int64)
        E._addsub_fast(a, b, mode == E.EW_SUB, ew, cfg, got)
        np.testing.assert_array_equal(got, E._ew_kernel(a, b, ew, cfg, lut))
        if max(sc1[2], sc2[2]) <= 5 and max(sc1[3], sc2[3], o["dbl"]) <= 30:
            exp = ref.elementwise(mode, a.astype(object), b.astype(object), bits, signed, sc1,
                                  sc2, o, bytes(P.LUT_BYTES))
            np.testing.assert_array_equal(got, exp.astype(np.int64))


@pytest.mark.parametrize("depthwise", [False, True])
def test_kept_kernel_setup_goes_with_its_decoded_weights(monkeypatch, depthwise):
    """A convolution's kept integer-kernel setup does not keep its decoded weights alive (the
    weight memo's byte bound bounds it): when the memo lets them go, the setup goes too, and the
    next run decodes and sets up again with the same result."""
    import gc

    from accelstub.devices.ethos_u85 import op_conv, setstate

    monkeypatch.setattr(setstate, "_MEMO", {})
    d = fresh()
    rng = np.random.default_rng(12)
    C = 6
    x = rng.integers(-128, 128, (5, 5, C))
    d.write(BUF, tensor_bytes(x, 8, True, "nhwc"))
    W = rng.integers(-255, 256, (C, 3, 3, 1 if depthwise else C))
    o = out(zp=-1, rnd=0, per_channel=True)
    bias, sc, sh = (rng.integers(-900, 900, C), rng.integers(1 << 29, 1 << 31, C),
                    rng.integers(33, 38, C))
    cmds = (ifm("IFM", (5, 5, C), 0, zp=2) + [("NPU_SET_IFM_DEPTH_M1", dict(depth_m1=C - 1))]
            + ofm((5, 5, C), 0x400, o, blk=(5, 5, 16))
            + kernel(3, 3, pad=(1, 1, 1, 1)) + acc_format()
            + weight_cmds(d, W, ofm_blk_depth=16, kernel_hw=(3, 3), depthwise=depthwise)
            + scale_cmds(d, bias, sc, sh)
            + [("NPU_OP_DEPTHWISE" if depthwise else "NPU_OP_CONV", {})])
    exp = ref.conv(ref.values(x, 2, 8, True), W, 5, 5, (1, 1), (1, 1), (1, 1), o, bytes(2048),
                   bias, sc, sh, depthwise=depthwise)

    def run():
        Host(d).start(es.encode_stream(cmds + STOP))
        while not d.finished():
            d.execute_unit(UnitContext())
        assert not Host(d).field("STATUS", "cmd_parse_error")
        return d.read(BUF + 0x400, 5 * 5 * C)

    first = run()
    assert first == exp.astype(np.int8).tobytes()  # the Python-integer reference
    (decode,) = [r for _, r in setstate._MEMO.values() if isinstance(r, op_conv._ConvDecode)]
    assert len(decode.kernels) == 1
    Wt._DECODED.clear()  # (a memo: emptying it changes nothing but speed; monkeypatch would
    Wt._PROBES.clear()   # keep the old one, and the weights with it, until the test ends)
    gc.collect()
    assert len(decode.kernels) == 0
    assert run() == first and len(decode.kernels) == 1


@pytest.mark.parametrize("fmt, ofmt, transpose, shape, oc", [
    ("nhwc", "nhwc", "HWC", (6, 7, 5), 9),
    ("nhcwb16", "nhcwb16", "HWC", (5, 4, 20), 18),   # a partial brick: two boxes each side
    ("nhcwb16", "nhwc", "HWC", (4, 5, 12), 7),
    ("nhwc", "nhwc", "CHW", (4, 6, 3), 5),
])
def test_kept_conv_run_equals_the_general_path(monkeypatch, fmt, ofmt, transpose, shape, oc):
    """A convolution's kept run (op_conv._ConvRun: its accesses and kernel kept per decode and
    region placement) leaves what the general path leaves, run after run: memory, Touched,
    statistics (AXI byte counts among them), cycles, PMU counters. Where the scale stream was
    rewritten under the same commands, or BASEP moved the tensors, the general path runs and
    keeps a new run."""
    from accelstub.devices.ethos_u85 import op_conv

    used = []
    real = op_conv._run_kept_conv
    monkeypatch.setattr(op_conv, "_run_kept_conv", lambda *a: used.append(real(*a)) or used[-1])
    moved = SRAM + 0x20000

    def runs(kept: bool) -> list:
        d = fresh(kept)
        rng = np.random.default_rng(42)
        cmds = conv_program(d, rng, fmt, ofmt, transpose, shape, oc)
        out, basep = [], {1: BUF, 2: BUF2}
        for step in range(6):
            if step == 2:  # new scales, the same stream length: the same commands
                scale_cmds(d, rng.integers(-5000, 5000, oc), rng.integers(1 << 29, 1 << 31, oc),
                           rng.integers(36, 42, oc))
            if step == 4:  # region 1 (IFM and OFM) moved
                d.write(moved, d.read(BUF, 0x6000))
                basep = {1: moved, 2: BUF2}
            Host(d).start(es.encode_stream(cmds + STOP), basep=basep)
            t = d.execute_unit(UnitContext())
            assert not Host(d).field("STATUS", "cmd_parse_error")
            out.append((d.read(SRAM, 0x28000), t.reads, t.writes, dict(d.stats), d.cycles,
                        d.counters()))
            d.execute_unit(UnitContext())  # the STOP: the next start runs from the beginning
        return out

    general = runs(False)
    assert used == []
    kept = runs(True)
    # a rerun, new scales (the general path), a rerun; moved: another key (the general path),
    # then its rerun
    assert used == [True, False, True, True]
    assert kept == general
    assert general[2][0] != general[1][0] and general[4][0] != general[3][0]
    if transpose == "HWC":  # and the Python-integer reference, run by run (the same draws)
        rng = np.random.default_rng(42)
        IH, IW, C = shape
        x = rng.integers(-128, 128, shape)
        W = rng.integers(-255, 256, (oc, 3, 3, C))
        scales = [tuple(rng.integers(lo, hi, oc) for lo, hi in
                        ((-5000, 5000), (1 << 29, 1 << 31), (36, 42))) for _ in range(2)]
        o = out(zp=-2, rnd=0, per_channel=True)
        for step, (mem, *_) in enumerate(kept):
            base = (moved if step >= 4 else BUF) - SRAM + 0x4000
            exp = ref.conv(ref.values(x, 3, 8, True), W, IH, IW, (1, 1), (1, 1), (1, 1), o,
                           bytes(2048), *scales[step >= 2])
            got = ofm_from_bytes(mem[base:], (IH, IW, oc), ofmt)
            np.testing.assert_array_equal(got, exp.astype(np.int8))


def ofm_from_bytes(mem: bytes, shape: tuple, fmt: str) -> np.ndarray:
    """An int8 [H, W, D] tensor stored NHWC or NHCWB16 at the start of ``mem``."""
    H, W, D = shape
    if fmt == "nhwc":
        return np.frombuffer(mem[:H * W * D], np.int8).reshape(H, W, D)
    b = np.frombuffer(mem[:H * -(-D // 16) * W * 16], np.int8).reshape(H, -(-D // 16), W, 16)
    return b.transpose(0, 2, 1, 3).reshape(H, W, -1)[:, :, :D]


def test_kept_dma_copies_equal_the_general_path():
    """A DMA's copies kept per decode and region placement (the same views on every run) leave
    what the general path leaves, run after run: memory, Touched, statistics (AXI byte counts
    among them), cycles, the LUT RAM; with a destination that starts inside its source
    (copy_bytes repeats the first bytes), with the LUT RAM as the destination, with a copy that
    leaves memory and one that leaves the LUT RAM (the fault comes after the copies before it,
    which are made)."""
    from tests.ethos_u85.test_ethosu85_device import dma_cmds, stream

    good = stream(dma_cmds(16, 0, 0), dma_cmds(4, 0x20, 0x100, "d2", size0=3, strides=(8, 16)),
                  dma_cmds(2, 0x40, 0x200, "d3", size0=2, size1=2, strides=(4, -2, 32, 8)),
                  dma_cmds(40, 0x10, 0x10),  # region 2 is region 1 + 8: an overlap
                  dma_cmds(32, 0x30, 0x40, "d2", size0=2, strides=(64, 32), internal=True), STOP)
    bad = stream(dma_cmds(4, 0, 0x40, "d2", size0=3, strides=(4, 0x7FFF_0000)), STOP)
    bad_lut = stream(dma_cmds(16, 0x50, 2032, "d2", size0=2, strides=(16, 16), internal=True),
                     STOP)

    def runs(kept: bool) -> list:
        d = fresh(kept)
        d.write(BUF, bytes(range(256)) * 2)
        out = []
        for words, dst in ((good, 8), (good, 8), (good, 0x24), (good, 0x24), (bad, 8),
                           (bad, 8), (bad_lut, 8), (bad_lut, 8)):  # region 2 moved: 3rd, 4th
            Host(d).start(words, basep={1: BUF, 2: BUF + dst})
            err = None
            while not d.finished() and err is None:
                ctx = UnitContext()
                try:
                    d.execute_unit(ctx)
                except DeviceError as e:
                    err = str(e)
                out.append((d.read(BUF, 0x400), ctx.touched.reads, ctx.touched.writes,
                            dict(d.stats), d.cycles, d.lut.tobytes(), err))
            Host(d).boot()  # (after the fault)
        return out, len(d.kept_runs or ())

    general, _ = runs(False)
    kept, n = runs(True)
    assert kept == general and n == 10  # the five good DMAs twice; the faulting ones not kept
    fault = next(u for u in general if u[-1] is not None and "DMA destination" in u[-1])
    assert fault[0][0x48:0x4C] == fault[0][0:4]  # the copy before it was made
    assert "LUT RAM write" in general[-1][-1]
    mem, lut = general[-1][0], general[-1][-2]
    assert lut[2032:2048] == mem[0x50:0x60]  # the copy before the fault was made
    # the good stream's LUT copies (boot clears the LUT RAM after each run)
    assert any(u[-2][0x40:0x60] == u[0][0x30:0x50] and u[-2][0x60:0x80] == u[0][0x70:0x90]
               and any(u[-2][0x40:0x80]) for u in general)


def chained_add(H: int, W: int, D: int) -> list:
    """An add of the chaining FIFO 0 ([H, W, D]) and a row of BUF+0x100 broadcast over H into
    an NHCWB16 OFM at BUF+0x200."""
    return (ifm("IFM", None, 0, storage="chained", region=0, zp=0)
            + ifm("IFM2", (1, W, D), 0x100, zp=-3, broadcast="h")
            + [("NPU_SET_IFM_SCALE", dict(scale=3, shift=1, round_mode=1)),
               ("NPU_SET_IFM2_SCALE", dict(scale=5, shift=2, round_mode=0))]
            + ofm((H, W, D), 0x200, out(zp=1), fmt="nhcwb16", blk=(H, W, 32))
            + [("NPU_OP_ELEMENTWISE", dict(elementwise_mode="add"))])


def test_kept_elementwise_and_chained_runs_equal_the_general_path(monkeypatch):
    """Elementwise operations keep their accesses as convolutions do, chained operands
    included (the run pops and pushes the chaining FIFO as read_raw and write_ofm do): a
    convolution into the FIFO, an add of it and a row-broadcast memory operand into an NHCWB16
    OFM with a partial brick, a multiply of that by a scalar, a 1x1x1 subtraction (the result
    flag), an average pool of the add's NHCWB16 OFM with padding. Run after run, with the
    operands rewritten between runs and region 1 moved, memory, Touched, statistics, cycles,
    PMU counters and the result flag equal the general path's, and every operation takes its
    kept run when it runs again under the same placement."""
    from accelstub.devices.ethos_u85 import kept, op_conv

    used = []
    real = kept.kept_read

    def spy(*a):
        used.append((a[1][0] is None, a[1][2]))
        return real(*a)
    for module in (kept, op_conv):  # (the two that read through kept read accesses)
        monkeypatch.setattr(module, "kept_read", spy)
    H, W, C, D = 3, 4, 6, 18
    moved = SRAM + 0x20000

    def runs(kept: bool) -> list:
        d = fresh(kept)
        rng = np.random.default_rng(21)
        wts = rng.integers(-20, 21, (D, 1, 1, C))
        cmds = (ifm("IFM", (H, W, C), 0) + [("NPU_SET_IFM_DEPTH_M1", dict(depth_m1=C - 1))]
                + ofm((H, W, D), 0, out(scale=1 << 30, shift=33, rnd=0), storage="chained",
                      region=0, blk=(H, W, 32))
                + kernel(1, 1) + acc_format() + weight_cmds(d, wts, ofm_blk_depth=32,
                                                             kernel_hw=(1, 1))
                + [("NPU_OP_CONV", {})] + chained_add(H, W, D)
                + ifm("IFM", (H, W, D), 0x200, fmt="nhcwb16", zp=1)
                + ifm("IFM2", None, 0, storage="none", broadcast="scalar")
                + [("NPU_SET_OP_SCALAR", dict(scalar=-7))]
                + ofm((H, W, D), 0x800, out(zp=-1, scale=3, shift=2))
                + [("NPU_OP_ELEMENTWISE", dict(elementwise_mode="mul"))]
                + ifm("IFM", (1, 1, 1), 0x180) + [("NPU_SET_OP_SCALAR", dict(scalar=1))]
                + ofm((1, 1, 1), 0xC00, out())  # a 1x1x1 OFM: its low bit is the result flag
                + [("NPU_OP_ELEMENTWISE", dict(elementwise_mode="sub"))]
                + ifm("IFM", (H, W, D), 0x200, fmt="nhcwb16", zp=1)
                + ofm((H, W, D), 0xE00, out(zp=2, rnd=0)) + kernel(2, 2, pad=(1, 1, 0, 0))
                + [("NPU_OP_POOL", dict(pooling_mode="average"))])
        out_ = []
        for n in range(5):
            d.write(BUF, rng.integers(0, 256, 0x181).astype(np.uint8).tobytes())  # operands
            if n == 3:  # region 1 moved (the operands with it)
                d.write(moved, d.read(BUF, 0x1000))
            Host(d).boot()  # the driver's soft reset: the same command state on every run
            Host(d).start(es.encode_stream(cmds + STOP),
                          basep={1: moved if n >= 3 else BUF, 2: BUF2})
            while not d.finished():
                t = d.execute_unit(UnitContext())
                assert not Host(d).field("STATUS", "cmd_parse_error")
                out_.append((d.read(SRAM, 0x28000), t.reads, t.writes, dict(d.stats), d.cycles,
                             d.counters(), Host(d).field("COND_STATUS", "result_flag")))
            assert d.npu.chain_length == 0
        return out_

    general = runs(False)
    assert used == []
    kept = runs(True)
    # the second, third and fifth run (the fourth moved region 1: other keys): the
    # convolution's IFM, the add's chained IFM and its IFM2, the multiply's IFM, the
    # subtraction's, the pool's (as the kept reads take them: chained or not, shape)
    assert used == [(False, (H, W, C)), (True, (H, W, D)), (False, (1, W, D)),
                    (False, (H, W, D)), (False, (1, 1, 1)), (False, (H, W, D))] * 3
    assert {u[-1] for u in general} == {0, 1}  # the flag changed
    assert kept == general


@pytest.mark.parametrize("case", range(12))
def test_a_1x1_convolution_runs_as_one_row(case):
    """A 1x1, stride 1, unpadded convolution runs as one row of H*W outputs (IntConv.flat):
    the same OFM as the per-element loop and the Python-integer reference for int8 (byte
    kernel, int8 and int9 weights) and int16 inputs, an input that is a strided view (its rows
    not contiguous: copied into the row), more input rows and columns than the derived extent,
    and a 48-bit accumulator input."""
    rng = np.random.default_rng(300 + case)
    H, W = int(rng.integers(2, 9)), int(rng.integers(1, 9))
    c, oc = int(rng.integers(1, 40)), int(rng.integers(1, 30))
    itype = [np.int8, np.int16][case % 2]
    info = np.iinfo(itype)
    x = rng.integers(info.min, info.max + 1, (H + case % 3, W + 2, c + 1)).astype(itype)
    if case % 4 == 1:
        x = x[:, ::-1]  # negative column strides
    wmax = 256 if case % 3 == 0 else 128
    w = rng.integers(-wmax + 1, wmax, (oc, 1, 1, c))
    # (a 48-bit accumulator takes a 16-bit scale, [U85-TRM: §3.6.6]); shifts that keep most outputs
    # inside int8 rather than clipped
    acc48 = case % 5 == 0
    wide = 8 if itype == np.int16 else 0
    o = out(zp=int(rng.integers(-128, 128)),
            scale=int(rng.integers(1 << 13, 1 << 15) if acc48 else rng.integers(1 << 29, 1 << 31)),
            shift=int(rng.integers(30, 33) if acc48 else rng.integers(40, 43)) + wide,
            rnd=case % 2, acc_bits=48 if acc48 else 32)
    cfg = P.out_config(ofm_bits=8, ofm_signed=True, zero_point=o["zp"], act_min=-128,
                       act_max=127, scale=o["scale"], shift=o["shift"], round_mode=o["rnd"],
                       per_channel=False, acc_bits=o["acc_bits"])
    kw_ = dict(ifm_zp=int(rng.integers(-100, 100)) if itype == np.int8 else 0, cfg=cfg,
               ifm_bits=8 if itype == np.int8 else 16, ifm_signed=True)
    if acc48:
        kw_["acc_in"] = rng.integers(-(1 << (24 + wide)), 1 << (24 + wide), (H, W, oc))
    p = conv_k.plan_int_conv(x[:, :, :c], w, (H, W), (1, 1), (1, 1), (0, 0, 0, 0), kw_["ifm_zp"],
                             kw_["ifm_bits"], True, cfg, None, None, None, False, (1, 1))
    assert p is not None and p.flat == (H, W) and p.out_hw == (1, H * W)
    got = conv_k.conv2d(x[:, :, :c], w, (H, W), **kw_)
    exp = conv_k.conv2d(x[:, :, :c], w, (H, W), method="loop", **kw_)
    assert got.shape == (H, W, oc)
    np.testing.assert_array_equal(got, exp)
    want = ref.conv(ref.values(x[:H, :W, :c], kw_["ifm_zp"], kw_["ifm_bits"], True), w, H, W,
                    (1, 1), (1, 1), (0, 0), o, bytes(2048), acc0=kw_.get("acc_in"))
    np.testing.assert_array_equal(got, want.astype(np.int8))  # the Python-integer reference


def test_set_state_after_a_kept_segment_is_the_state_built_command_by_command():
    """SetState.update of a kept segment (the same dict on every run) finds the state after
    it from the state before it and the segment's identity; it is the same interned
    (commands, ids) that setting the commands one by one gives, so the operation memos key on
    one object per state; the same segment after another state, or after a command set in
    between, gives that state's successor."""
    from accelstub.devices.ethos_u85.ops import SetState

    c = es.decode(es.encode_stream([("NPU_SET_IFM_ZERO_POINT", dict(zero_point=z))
                                    for z in range(3)] + [("NPU_SET_OFM_ZERO_POINT", {}),
                                                          ("NPU_SET_IFM2_ZERO_POINT", {})]))
    seg1 = {c[0].name: c[0], c[3].name: c[3]}
    seg2 = {c[1].name: c[1]}

    def walked(*cmds) -> tuple:
        s = SetState()
        for cmd in cmds:
            s.set(cmd)
        return s.held()

    for _ in range(2):  # the transitions are kept on the first pass and found on the second
        for start in ((), (c[4],)):  # the same segments after two states
            s = SetState()
            for cmd in start:
                s.set(cmd)
            s.held()
            s.update(seg1)
            assert s.held() is walked(*start, c[0], c[3])
            s.update(seg2)
            assert s.held() is walked(*start, c[0], c[3], c[1])
            s.set(c[2])
            s.update(seg1)
            assert s.held() is walked(*start, c[0], c[3])
            assert s.held()[0] == tuple(s.cmds.values())
