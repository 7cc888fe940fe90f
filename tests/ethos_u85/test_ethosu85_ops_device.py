"""Ethos-U85 kernel operations through the device, driven as the driver does (bus writes of a
command stream, BASEP, QBASE/QSIZE, CMD), OFM bytes checked against the independent reference
tests/ethosu85_reference.py. Weight and scale streams come from the test encoders of
emu/weights/ethosu85.py. "[U85-TRM: ...]" cites the TRM; "C§n", "C9#n" and
"G-xx" are project ids (docs/citations.md)."""
from __future__ import annotations

import numpy as np
import pytest

from accelstub.devices import DeviceError, open_device
from accelstub.devices.device import UnitContext
from accelstub.devices.ethos_u85 import stream as es
from accelstub.emu.memory import ethosu85 as L
from accelstub.emu.weights import ethosu85 as Wt
from tests.ethos_u85 import ethosu85_reference as ref
from tests.ethos_u85.test_ethosu85_device import BUF, BUF2, Host, run_to_irq
from tests.helpers import step

STOP = [("NPU_OP_STOP", dict(mask=0xFFFF))]
RNG = np.random.default_rng(85)
DT = {(8, True): np.int8, (8, False): np.uint8, (16, True): np.int16, (16, False): np.uint16,
      (32, True): np.int32, (64, True): np.int64}


@pytest.fixture
def dev():
    d = open_device("ethos-u85")
    Host(d).boot()
    return d


@pytest.fixture
def host(dev):
    return Host(dev)


# ---------------------------------------------------------------------------------------------
# stream building


def tensor_bytes(a: np.ndarray, bits: int, signed: bool, fmt: str = "nhwc") -> bytes:
    a = np.asarray(a).astype(DT[(bits, signed)])
    return (L.nhwc_to_nhcwb16(a) if fmt == "nhcwb16" else a).tobytes()


def geometry(which: str, shape, off: int, bits: int, fmt: str, region: int = 1) -> list:
    """BASE0, tiles (one tile covering the tensor), strides of a dense tensor."""
    H, W, C = shape
    es_ = bits // 8
    if fmt == "nhwc":
        sx, sc, sy = C * es_, es_, W * C * es_
    else:
        sc = W * 16 * es_
        sx, sy = 16 * es_, -(-C // 16) * sc
    return [(f"NPU_SET_{which}_REGION", dict(region=region)),
            (f"NPU_SET_{which}_BASE0", dict(addr=off)),
            (f"NPU_SET_{which}_WIDTH0_M1", dict(width_m1=W - 1)),
            (f"NPU_SET_{which}_HEIGHT0_M1", dict(height_m1=H - 1)),
            (f"NPU_SET_{which}_HEIGHT1_M1", dict(height_m1=H - 1)),
            (f"NPU_SET_{which}_STRIDE_X", dict(addr=sx)),
            (f"NPU_SET_{which}_STRIDE_Y", dict(addr=sy)),
            (f"NPU_SET_{which}_STRIDE_C", dict(addr=sc))]


def ifm(which: str, shape, off: int, *, bits=8, signed=True, fmt="nhwc", zp=0, storage="tile2x2",
        broadcast="none", region=1) -> list:
    cmds = [(f"NPU_SET_{which}_PRECISION",
             dict(activation_type=int(signed), activation_precision=f"b{bits}",
                  activation_format=fmt, activation_storage=storage)),
            (f"NPU_SET_{which}_ZERO_POINT", dict(zero_point=zp)),
            (f"NPU_SET_{which}_BROADCAST", dict(broadcast_mode=broadcast))]
    if storage == "chained":
        return cmds + [(f"NPU_SET_{which}_REGION", dict(region=region))]
    if storage == "none":
        return cmds
    return cmds + geometry(which, shape, off, bits, fmt, region)


def ofm(shape, off: int, o: dict, *, fmt="nhwc", storage="tile2x2", reverse="none",
        transpose="HWC", stored=None, region=1, blk=None) -> list:
    H, W, D = shape
    bh, bw, bd = blk or shape
    cmds = [("NPU_SET_OFM_PRECISION",
             dict(activation_type=int(o["signed"]), activation_precision=f"b{o['bits']}",
                  activation_format=fmt,
                  scale_mode="per_channel" if o.get("per_channel") else "global",
                  activation_reverse=reverse, activation_transpose=transpose,
                  activation_storage=storage)),
            ("NPU_SET_OFM_ZERO_POINT", dict(zero_point=o["zp"])),
            ("NPU_SET_OFM_HEIGHT_M1", dict(height_m1=H - 1)),
            ("NPU_SET_OFM_WIDTH_M1", dict(width_m1=W - 1)),
            ("NPU_SET_OFM_DEPTH_M1", dict(depth_m1=D - 1)),
            ("NPU_SET_OFM_BLK_HEIGHT_M1", dict(height_m1=bh - 1)),
            ("NPU_SET_OFM_BLK_WIDTH_M1", dict(width_m1=bw - 1)),
            ("NPU_SET_OFM_BLK_DEPTH_M1", dict(depth_m1=bd - 1)),
            ("NPU_SET_OFM_SCALE", dict(scale=o["scale"], shift=o["shift"], round_mode=o["rnd"],
                                       dbl_rnd=o.get("dbl", 0))),
            ("NPU_SET_ACTIVATION", dict(activation_function=o.get("func", 0),
                                        table=o.get("table", 0),
                                        activation_clip_range=int(o.get("clip_none", False)))),
            ("NPU_SET_ACTIVATION_MIN", dict(clip_boundary=o["amin"])),
            ("NPU_SET_ACTIVATION_MAX", dict(clip_boundary=o["amax"]))]
    if storage == "chained":
        return cmds + [("NPU_SET_OFM_REGION", dict(region=region))]
    return cmds + geometry("OFM", stored or shape, off, o["bits"], fmt, region)


def out(bits=8, signed=True, zp=0, scale=1, shift=0, rnd=1, **kw) -> dict:
    lo, hi = (-(1 << (min(bits, 16) - 1)), (1 << (min(bits, 16) - 1)) - 1) if signed else \
        (0, (1 << min(bits, 16)) - 1)
    o = dict(bits=bits, signed=signed, zp=zp, amin=lo, amax=hi, scale=scale, shift=shift, rnd=rnd)
    o.update(kw)
    return o


def kernel(kh: int, kw: int, stride=(1, 1), dilation=(1, 1), pad=(0, 0, 0, 0),
           order="depth_first", extra=0) -> list:
    """``extra`` adds to the dilated sizes (an even dilated size with dilation 2)."""
    sy, sx = stride[0] - 1, stride[1] - 1
    return [("NPU_SET_KERNEL_HEIGHT_M1", dict(height_m1=(kh - 1) * dilation[0] + extra)),
            ("NPU_SET_KERNEL_WIDTH_M1", dict(width_m1=(kw - 1) * dilation[1] + extra)),
            ("NPU_SET_KERNEL_STRIDE", dict(stride_y_lsb=sy & 1, stride_y_msb=sy >> 1,
                                           stride_x_lsb=sx & 1, stride_x_msb=sx >> 1,
                                           dilation_y=dilation[0] - 1, dilation_x=dilation[1] - 1,
                                           weight_order=order)),
            ("NPU_SET_IFM_PAD_TOP", dict(pad=pad[0])),
            ("NPU_SET_IFM_PAD_LEFT", dict(pad=pad[1])),
            ("NPU_SET_IFM_PAD_BOTTOM", dict(pad=pad[2])),
            ("NPU_SET_IFM_PAD_RIGHT", dict(pad=pad[3])),
            ("NPU_SET_IFM_UPSCALE", {})]


def acc_format(acc48=False, acc_input="reset", acc_output="enable", microblock="u1x4") -> list:
    return [("NPU_SET_ACC_FORMAT", dict(acc_format=int(acc48), acc_input=acc_input,
                                        acc_output=acc_output, microblock=microblock))]


def weight_cmds(dev, W: np.ndarray, *, ofm_blk_depth: int, kernel_hw, dilation=(1, 1),
                stride=(1, 1), depthwise=False, ifm16=False, microblock=2, off=0,
                part_kernel_first=False, fwd=False, sparse=False) -> list:
    """Encode W[oc][ky][kx][ic] into SWD stream(s) at BUF2+off and the commands pointing at them
    (or, with ``fwd``, the decoder streams merged into one raw-mode FWD stream,
    [U85-TRM: §3.9.2])."""
    p = Wt.ordering_params(ofm_depth=W.shape[0],
                           ifm_depth=W.shape[3] if not depthwise else W.shape[0],
                           kernel_hw=kernel_hw, dilation=dilation, stride=stride,
                           ofm_block_depth=ofm_blk_depth, macs_per_cc=dev.macs,
                           microblock=microblock, depthwise=depthwise, ifm16bit=ifm16,
                           part_kernel_first=part_kernel_first, sparse=sparse)
    fmt = dict(weight_format="fwd") if fwd else {}
    if sparse:
        fmt["weight_sparsity"] = "sparse_2_4"
    cmds = [("NPU_SET_WEIGHT_FORMAT", fmt),
            ("NPU_SET_WEIGHT_REGION", dict(region=2))]
    names = ("", "1", "2", "3")
    streams = Wt.order_weights(W, p)
    if fwd:
        streams = [Wt.fwd_merge(streams, p)]
    for k, vals in enumerate(streams):
        blob = Wt.encode_fwd(vals, "raw") if fwd else Wt.encode_swd(vals, zdiv=0, wdiv=5)
        dev.write(BUF2 + off, blob)
        cmds += [(f"NPU_SET_WEIGHT{names[k]}_BASE", dict(addr=off)),
                 (f"NPU_SET_WEIGHT{names[k]}_LENGTH", dict(length=len(blob)))]
        off += -(-len(blob) // 16) * 16
    return cmds


def scale_cmds(dev, bias, scale, shift, *, off=0x4000, acc48=False, microblock=2) -> list:
    blob = Wt.encode_scale_stream(bias, scale, shift, acc48=acc48,
                                  set_size=Wt.channels_in_set(dev.macs, microblock))
    dev.write(BUF2 + off, blob)
    return [("NPU_SET_SCALE_REGION", dict(region=2)), ("NPU_SET_SCALE_BASE", dict(addr=off)),
            ("NPU_SET_SCALE_LENGTH", dict(length=len(blob)))]


def run(dev, host, *parts):
    host.start(es.encode_stream([c for p in parts for c in p] + STOP))
    stop = run_to_irq(dev)
    assert host.field("STATUS", "cmd_parse_error") == 0, stop
    assert not host.field("STATUS", "state")
    return stop


def read_ofm(dev, shape, off, o, fmt="nhwc") -> np.ndarray:
    H, W, D = shape
    dt = DT[(o["bits"], o["signed"])]
    if fmt == "nhwc":
        return np.frombuffer(dev.read(BUF + off, H * W * D * o["bits"] // 8), dt).reshape(H, W, D)
    n = H * -(-D // 16) * W * 16
    b = np.frombuffer(dev.read(BUF + off, n * o["bits"] // 8), dt).reshape(H, -(-D // 16), W, 16)
    return L.nhcwb16_to_nhwc(b, D)


def check(got, exp):
    np.testing.assert_array_equal(np.asarray(got, np.int64), np.asarray(exp, np.int64))


LUT0 = bytes(2048)

# ---------------------------------------------------------------------------------------------
# NPU_OP_CONV


def conv_case(dev, host, *, ishape, oc, k, stride=(1, 1), dil=(1, 1), pad=(0, 0, 0, 0), bits=8,
              zp=3, fmt="nhwc", ofmt="nhwc", acc48=False, o=None, seed=0, fwd=False, extra=0):
    rng = np.random.default_rng(seed)
    IH, IW, IC = ishape
    signed = True
    lo, hi = (-128, 127) if bits == 8 else (-3000, 3000)
    x = rng.integers(lo, hi + 1, ishape)
    W = rng.integers(-128, 128, (oc, k, k, IC)) if fwd else rng.integers(-255, 256, (oc, k, k, IC))
    dh, dw = (k - 1) * dil[0] + 1 + extra, (k - 1) * dil[1] + 1 + extra
    H = (IH + pad[0] + pad[2] - dh) // stride[0] + 1
    Wd = (IW + pad[1] + pad[3] - dw) // stride[1] + 1
    bias = rng.integers(-5000, 5000, oc)
    if acc48:
        scales, shifts = rng.integers(1 << 13, 1 << 15, oc), rng.integers(20, 30, oc)
    else:
        scales, shifts = rng.integers(1 << 29, 1 << 31, oc), rng.integers(36, 42, oc)
    o = o or out(bits=bits, zp=-2 if bits == 8 else 0, rnd=0, per_channel=True,
                 acc_bits=48 if acc48 else 32)
    blk = 8
    dev.write(BUF, tensor_bytes(x, bits, signed, fmt))
    ofm_off = 0x8000 - 0x1000 - 0x2000
    cmds = (ifm("IFM", ishape, 0, bits=bits, fmt=fmt, zp=zp if bits == 8 else 0)
            + [("NPU_SET_IFM_DEPTH_M1", dict(depth_m1=IC - 1))]
            + ofm((H, Wd, oc), ofm_off, o, fmt=ofmt, blk=(H, Wd, blk))
            + kernel(k, k, stride, dil, pad, extra=extra) + acc_format(acc48)
            + weight_cmds(dev, W, ofm_blk_depth=blk, kernel_hw=(dh, dw), dilation=dil,
                          stride=stride, ifm16=bits == 16, fwd=fwd)
            # raw FWD weights are not compressed: the scale stream goes past them
            + scale_cmds(dev, bias, scales, shifts, acc48=acc48, off=0x20000 if fwd else 0x4000)
            + [("NPU_OP_CONV", {})])
    run(dev, host, cmds)
    v = ref.values(x, zp if bits == 8 else 0, bits, signed)
    ih = (H - 1) * stride[0] + dh - pad[0] - pad[2]
    iw = (Wd - 1) * stride[1] + dw - pad[1] - pad[3]
    exp = ref.conv(v[:ih, :iw], W, H, Wd, stride, dil, pad[:2], o, LUT0, bias, scales, shifts)
    check(read_ofm(dev, (H, Wd, oc), ofm_off, o, ofmt), exp)
    return H * Wd * oc * k * k * IC


@pytest.mark.parametrize("stride, dil, pad", [((1, 1), (1, 1), (1, 1, 1, 1)),
                                              ((2, 2), (1, 1), (1, 0, 1, 1)),
                                              ((1, 2), (2, 2), (2, 1, 0, 2)),
                                              ((3, 1), (1, 1), (0, 0, 0, 0))])
def test_conv3x3_stride_pad_dilation(dev, host, stride, dil, pad):
    macs = conv_case(dev, host, ishape=(9, 8, 5), oc=6, k=3, stride=stride, dil=dil, pad=pad)
    assert dev.counters()["macs"] == macs


def test_conv_dilation2_with_an_even_dilated_size(dev, host):
    """Dilated size 6 with dilation x2: taps ky*2 < 6 are 0, 2, 4 [U85-TRM: §3.10.2], the undilated
    kernel is (6+1)>>1 = 3 [U85-TRM: §3.9.1], and the IFM extent counts the full dilated size
    [U85-TRM: §3.10.2]."""
    conv_case(dev, host, ishape=(10, 9, 5), oc=6, k=3, dil=(2, 2), pad=(1, 1, 0, 1), extra=1)


def test_conv_nhcwb16_ifm_and_ofm(dev, host):
    conv_case(dev, host, ishape=(5, 4, 20), oc=18, k=3, pad=(1, 1, 1, 1), fmt="nhcwb16",
              ofmt="nhcwb16", seed=1)


def test_conv_int16_ifm_int16_ofm(dev, host):
    conv_case(dev, host, ishape=(5, 5, 3), oc=4, k=3, pad=(1, 1, 1, 1), bits=16, seed=2)


def test_conv_48bit_accumulator(dev, host):
    conv_case(dev, host, ishape=(4, 4, 40), oc=3, k=3, bits=16, acc48=True, seed=3)


def test_conv_several_weight_decoders():
    d = open_device("ethos-u85", macs=1024)  # num_wd = 4 (Table 3-90)
    h = Host(d)
    h.boot()
    conv_case(d, h, ishape=(4, 5, 9), oc=20, k=3, pad=(1, 1, 1, 1), seed=4)


@pytest.mark.parametrize("macs", [256, 1024])
def test_conv_fast_weight_decoder_stream(macs):
    d = open_device("ethos-u85", macs=macs)  # num_wd 1 and 4: one merged FWD stream
    h = Host(d)
    h.boot()
    conv_case(d, h, ishape=(4, 5, 9), oc=20, k=3, pad=(1, 1, 1, 1), seed=5, fwd=True)


#: C§10.2, word for word
CONV_EXAMPLE_WORDS = [int(w, 16) for w in """
00010105 00020109 0001010f 00004000 00000000 0001010a 0000010b 0000010c 00004004 00000002
00004005 00000004 00004006 00000001 00010104 00000107 00000100 00000101 00000103 00000102
00010114 fffd0118 0001011f 00004010 00000020 00000112 00010111 00010113 0001011a 0000011b
0000011c 00004014 00000002 00004015 00000004 00004016 00000001 00000116 00010115 00070117
00000121 00000120 00000122 0000012e 00020128 00004020 00000000 00004021 00000020 00020129
00004022 00000100 00004023 000000a0 00004024 00000000 00000125 ff800126 007f0127 02000124
00000002 ffff0000""".split()]
V3 = bytes.fromhex("10005c318456c20ff90000e7ff9fffffffffff1fffffffffffffffffffffffff")


def test_conv_1x1_is_the_digests_worked_example(dev, host):
    dev.write(BUF, bytes.fromhex("0aecfb07"))
    dev.write(BUF2, V3)
    records = (bytes.fromhex("640000009a79825a2000") + bytes.fromhex("ceffffff000000401e00")
               + bytes(140))
    dev.write(BUF2 + 0x100, records)
    host.start(CONV_EXAMPLE_WORDS)
    run_to_irq(dev)
    assert dev.read(BUF + 0x20, 4) == bytes.fromhex("398016d8")
    assert dev.counters()["macs"] == 1 * 2 * 2 * 2
    # the same through this file's builders (checks the builders against C§10.2)
    o = out(zp=-3, rnd=0, scale=0, per_channel=True)
    x = np.array([[[10, -20], [-5, 7]]])
    v = ref.values(x, 2, 8, True)
    exp = ref.conv(v, np.array([[[[3, -2]]], [[[1, 4]]]]), 1, 2, (1, 1), (1, 1), (0, 0), o, LUT0,
                   [100, -50], [1518500250, 1 << 30], [32, 30])
    assert bytes(np.asarray(exp, np.int64).astype(np.int8).ravel()) == bytes.fromhex("398016d8")


def test_conv_touched_ranges_and_watchpoint(dev, host):
    """Touched: reads of the IFM, the weight stream and the scale stream; writes of the OFM."""
    x = RNG.integers(-128, 128, (3, 3, 2))
    W = RNG.integers(-9, 10, (2, 1, 1, 2))
    dev.write(BUF, tensor_bytes(x, 8, True))
    o = out(rnd=0, per_channel=True)
    cmds = (ifm("IFM", (3, 3, 2), 0) + [("NPU_SET_IFM_DEPTH_M1", dict(depth_m1=1))]
            + ofm((3, 3, 2), 0x100, o, blk=(3, 3, 8)) + kernel(1, 1) + acc_format()
            + weight_cmds(dev, W, ofm_blk_depth=8, kernel_hw=(1, 1), off=0x200)
            + scale_cmds(dev, [0, 0], [1 << 30, 1 << 30], [30, 30], off=0x400)
            + [("NPU_OP_CONV", {})])
    host.start(es.encode_stream(cmds + STOP))
    t = dev.execute_unit(UnitContext())
    wlen = [c[1]["length"] for c in cmds if c[0] == "NPU_SET_WEIGHT_LENGTH"][0]
    assert (BUF, BUF + 18) in t.reads
    assert (BUF2 + 0x200, BUF2 + 0x200 + wlen) in t.reads
    assert (BUF2 + 0x400, BUF2 + 0x400 + 160) in t.reads
    assert t.writes == [(BUF + 0x100, BUF + 0x100 + 18)]
    assert dev.counters()["macs"] == 3 * 3 * 2 * 2


def test_matmul_weights_from_ifm2(dev, host):
    """IFM2 holds the second matrix transposed, [1][OFM depth][IFM depth] ([U85-TRM: §4.1], the
    layout Vela programs)."""
    IC, D, Wd = 7, 5, 4
    a = RNG.integers(-128, 128, (1, Wd, IC))
    b = RNG.integers(-128, 128, (1, D, IC))
    dev.write(BUF, tensor_bytes(a, 8, True))
    dev.write(BUF + 0x100, tensor_bytes(b, 8, True))
    o = out(scale=1 << 30, shift=36, rnd=0, zp=4)
    cmds = (ifm("IFM", (1, Wd, IC), 0, zp=-5) + [("NPU_SET_IFM_DEPTH_M1", dict(depth_m1=IC - 1))]
            + ifm("IFM2", (1, D, IC), 0x100, zp=9)
            + ofm((1, Wd, D), 0x200, o, blk=(1, Wd, 8)) + kernel(1, 1) + acc_format()
            + [("NPU_OP_CONV", dict(weights_ifm2=1))])
    run(dev, host, cmds)
    va, vb = ref.values(a, -5, 8, True), ref.values(b, 9, 8, True)
    w = vb[0][:, None, None, :]
    exp = ref.conv(va, w, 1, Wd, (1, 1), (1, 1), (0, 0), o, LUT0)
    check(read_ofm(dev, (1, Wd, D), 0x200, o), exp)
    assert dev.counters()["macs"] == Wd * D * IC


# ---------------------------------------------------------------------------------------------
# NPU_OP_DEPTHWISE


@pytest.mark.parametrize("stride, dil, pad", [((1, 1), (1, 1), (1, 1, 1, 1)),
                                              ((2, 2), (2, 1), (2, 1, 1, 0))])
def test_depthwise3x3(dev, host, stride, dil, pad):
    C, IH, IW = 11, 7, 6
    x = RNG.integers(-128, 128, (IH, IW, C))
    W = RNG.integers(-255, 256, (C, 3, 3, 1))
    dh, dw = 2 * dil[0] + 1, 2 * dil[1] + 1
    H = (IH + pad[0] + pad[2] - dh) // stride[0] + 1
    Wd = (IW + pad[1] + pad[3] - dw) // stride[1] + 1
    bias, sc, sh = RNG.integers(-900, 900, C), RNG.integers(1 << 29, 1 << 31, C), RNG.integers(
        33, 38, C)
    o = out(zp=7, rnd=0, per_channel=True)
    dev.write(BUF, tensor_bytes(x, 8, True))
    cmds = (ifm("IFM", (IH, IW, C), 0, zp=-1) + ofm((H, Wd, C), 0x800, o, blk=(H, Wd, 16))
            + kernel(3, 3, stride, dil, pad) + acc_format()
            + weight_cmds(dev, W, ofm_blk_depth=16, kernel_hw=(dh, dw), dilation=dil,
                          stride=stride, depthwise=True)
            + scale_cmds(dev, bias, sc, sh) + [("NPU_OP_DEPTHWISE", {})])
    run(dev, host, cmds)
    v = ref.values(x, -1, 8, True)
    ih = (H - 1) * stride[0] + dh - pad[0] - pad[2]
    iw = (Wd - 1) * stride[1] + dw - pad[1] - pad[3]
    exp = ref.conv(v[:ih, :iw], W, H, Wd, stride, dil, pad[:2], o, LUT0, bias, sc, sh,
                   depthwise=True)
    check(read_ofm(dev, (H, Wd, C), 0x800, o), exp)
    assert dev.counters()["macs"] == H * Wd * C * 9


# ---------------------------------------------------------------------------------------------
# NPU_OP_POOL, all modes


POOLS = {  # mode: (ifm shape, kernel, stride, pad(t,l,b,r), output params, ofm depth)
    "max": ((6, 6, 3), (3, 3), (2, 2), (1, 1, 1, 1), out(), 3),
    "average": ((5, 6, 4), (3, 3), (1, 2), (1, 1, 1, 0), out(rnd=1, zp=3), 4),
    "reduce_sum": ((3, 4, 9), (1, 1), (1, 1), (0, 0, 0, 0), out(bits=16, scale=3, shift=1), 1),
    "sum": ((4, 5, 2), (2, 3), (1, 1), (0, 1, 1, 1), out(bits=16, scale=5, shift=2, rnd=3), 2),
    "none": ((3, 3, 2), (1, 1), (1, 1), (0, 0, 0, 0), out(zp=9), 2),
    "min": ((5, 5, 3), (2, 2), (1, 1), (1, 1, 0, 0), out(), 3),
    "argmax_x": ((1, 7, 4), (1, 7), (1, 1), (0, 0, 0, 0), out(scale=1, shift=16, rnd=1), 4),
    "argmax_y": ((6, 1, 4), (6, 1), (1, 1), (0, 0, 0, 0), out(scale=1, shift=16, rnd=1), 4),
}


@pytest.mark.parametrize("mode", list(POOLS))
def test_pool_modes(dev, host, mode):
    ishape, (kh, kw), stride, pad, o, D = POOLS[mode]
    zp = 0 if mode == "reduce_sum" else -4
    x = RNG.integers(-128, 128, ishape)
    if mode.startswith("argmax"):
        x[..., 1] = 17  # ties: the first position wins
    H = (ishape[0] + pad[0] + pad[2] - kh) // stride[0] + 1
    Wd = (ishape[1] + pad[1] + pad[3] - kw) // stride[1] + 1
    dev.write(BUF, tensor_bytes(x, 8, True))
    cmds = (ifm("IFM", ishape, 0, zp=zp) + [("NPU_SET_IFM_DEPTH_M1", dict(depth_m1=ishape[2] - 1))]
            + ofm((H, Wd, D), 0x400, o) + kernel(kh, kw, stride, (1, 1), pad) + acc_format()
            + [("NPU_OP_POOL", dict(pooling_mode=mode))])
    run(dev, host, cmds)
    v = ref.values(x, zp, 8, True)
    ih = (H - 1) * stride[0] + kh - pad[0] - pad[2]  # the derived IFM extent [U85-TRM: §3.10.10]
    iw = (Wd - 1) * stride[1] + kw - pad[1] - pad[3]
    exp = ref.pool(v[:ih, :iw], es.E_POOL.index(mode), H, Wd, (kh, kw), stride, pad[:2], o, LUT0)
    check(read_ofm(dev, (H, Wd, D), 0x400, o), exp)
    if mode.startswith("argmax"):
        axis = 1 if mode == "argmax_x" else 0
        check(read_ofm(dev, (H, Wd, D), 0x400, o).squeeze(),
              np.argmax(x, axis=axis).squeeze())


def test_pool_sum_to_accumulators_then_none_with_keep(dev, host):
    """acc_output disable stores raw accumulators; pooling none + acc_input keep rescales them
    [U85-TRM: §3.6.5]."""
    x = RNG.integers(-128, 128, (4, 4, 3))
    dev.write(BUF, tensor_bytes(x, 8, True))
    o1 = out(bits=16)
    o2 = out(scale=3, shift=3, rnd=1, zp=2)
    common = ifm("IFM", (4, 4, 3), 0) + [("NPU_SET_IFM_DEPTH_M1", dict(depth_m1=2))]
    cmds = (common + ofm((3, 3, 3), 0x400, o1) + kernel(2, 2)
            + acc_format(acc_output="disable") + [("NPU_OP_POOL", dict(pooling_mode="sum"))]
            + ofm((3, 3, 3), 0x400, o2) + acc_format(acc_input="keep")
            + [("NPU_OP_POOL", dict(pooling_mode="none"))])
    run(dev, host, cmds)
    v = ref.values(x, 0, 8, True)
    acc = ref.pool(v, 3, 3, 3, (2, 2), (1, 1), (0, 0), dict(o1, raw=True), LUT0)
    exp = ref.pool(np.zeros((3, 3, 3), object), 4, 3, 3, (1, 1), (1, 1), (0, 0), o2, LUT0,
                   acc0=acc)
    check(read_ofm(dev, (3, 3, 3), 0x400, o2), exp)


def test_pool_int16_ifm(dev, host):
    x = RNG.integers(-30000, 30000, (4, 6, 2))
    o = out(bits=16)
    dev.write(BUF, tensor_bytes(x, 16, True))
    cmds = (ifm("IFM", (4, 6, 2), 0, bits=16) + ofm((2, 3, 2), 0x400, o) + kernel(2, 2, (2, 2))
            + acc_format() + [("NPU_OP_POOL", dict(pooling_mode="max"))])
    run(dev, host, cmds)
    check(read_ofm(dev, (2, 3, 2), 0x400, o), x.reshape(2, 2, 3, 2, 2).max(axis=(1, 3)))


# ---------------------------------------------------------------------------------------------
# NPU_OP_ELEMENTWISE


def ew_run(dev, host, mode, *, shape=(2, 3, 5), bcast2="none", bits=8, signed=True, zp=(3, -2),
           sc1=(3, 1, 1, 0), sc2=(5, 2, 0, 0), o=None, scalar=None, lut=None, func=0, seed=0):
    rng = np.random.default_rng(seed)
    H, W, D = shape
    lo, hi = {8: (-128, 127), 16: (-32768, 32767), 32: (-(1 << 31), (1 << 31) - 1)}[bits]
    if not signed:
        lo, hi = 0, (1 << bits) - 1
    a = rng.integers(lo, hi + 1, shape)
    bshape = (1 if "h" in bcast2 else H, 1 if "w" in bcast2 else W, 1 if "c" in bcast2 else D)
    b = rng.integers(lo, hi + 1, bshape)
    if mode == "div":
        b[b == 0] = 3
    if mode in ("shr", "shl", "lshr"):
        b = rng.integers(0, 40, bshape)
    o = o or out(scale=5, shift=2, rnd=0, zp=5)
    if func:
        o = dict(o, func=func)
    dev.write(BUF, tensor_bytes(a, bits, signed))
    dev.write(BUF + 0x200, tensor_bytes(b, bits, signed))
    unary = mode in ("lrelu", "abs", "clz", "not")
    cmds = (ifm("IFM", shape, 0, bits=bits, signed=signed, zp=zp[0]) + [("NPU_SET_IFM_UPSCALE", {})]
            + [("NPU_SET_IFM_SCALE", dict(scale=sc1[0], shift=sc1[1], round_mode=sc1[2],
                                          dbl_rnd=sc1[3])),
               ("NPU_SET_IFM2_SCALE", dict(scale=sc2[0], shift=sc2[1], round_mode=sc2[2],
                                           dbl_rnd=sc2[3]))]
            + (ifm("IFM2", bshape, 0x200, bits=bits, signed=signed, zp=zp[1], broadcast=bcast2)
               if scalar is None else
               ifm("IFM2", None, 0, bits=bits, signed=signed, storage="none", broadcast="scalar")
               + [("NPU_SET_OP_SCALAR", dict(scalar=scalar))])
            + ofm(shape, 0x400, o) + acc_format(microblock="u2x2")
            + [("NPU_OP_ELEMENTWISE", dict(elementwise_mode=mode))])
    prefix = []
    if lut is not None:
        dev.write(BUF + 0x1000, lut)
        prefix = [("NPU_SET_DMA0_SRC_REGION", dict(region=1)),
                  ("NPU_SET_DMA0_DST_REGION", dict(region_mode="internal")),
                  ("NPU_SET_DMA0_SRC", dict(addr=0x1000)), ("NPU_SET_DMA0_DST", dict(addr=0)),
                  ("NPU_SET_DMA0_LEN", dict(addr=2048)), ("NPU_OP_DMA_START", {}),
                  ("NPU_OP_DMA_WAIT", {})]
    run(dev, host, prefix + cmds)
    va = ref.values(a, zp[0], bits, signed)
    if scalar is not None:
        vb = np.full(shape, scalar, object)
    else:
        vb = np.broadcast_to(ref.values(b, zp[1], bits, signed), shape)
    if unary:
        vb = np.zeros(shape, object)
    code = {v: k for k, v in es.E_ELEMENTWISE.items()}[mode]
    exp = ref.elementwise(code, va, vb, bits, signed, sc1, sc2, o, lut or LUT0)
    check(read_ofm(dev, shape, 0x400, o), exp)


ARITH = ["mul", "add", "sub", "min", "max", "lrelu", "abs", "clz", "cmp_eq", "cmp_ne", "cmp_ge",
         "cmp_gt", "and", "or", "xor", "not", "and_not"]


@pytest.mark.parametrize("mode", ARITH)
def test_elementwise_modes_with_input_rescale(dev, host, mode):
    o = out(scale=5, shift=2, rnd=0, zp=5)
    if mode == "mul":
        o = out(scale=3, shift=6, rnd=0, zp=5)
    ew_run(dev, host, mode, o=o)


@pytest.mark.parametrize("mode", ["shr", "shl", "lshr"])
def test_elementwise_shifts(dev, host, mode):
    ew_run(dev, host, mode, sc1=(1, 0, 1, 0), sc2=(1, 0, 1, 0), o=out(bits=32, rnd=1))


def test_elementwise_div(dev, host):
    ew_run(dev, host, "div", zp=(0, 0), sc1=(1, 0, 1, 0), sc2=(1, 0, 1, 0), o=out(bits=16))


@pytest.mark.parametrize("bcast", ["h", "w", "c", "hw", "cwh"])
def test_elementwise_broadcast(dev, host, bcast):
    ew_run(dev, host, "add", bcast2=bcast, seed=5)


def test_elementwise_scalar(dev, host):
    ew_run(dev, host, "sub", scalar=-77, seed=6)


def test_elementwise_int16_and_int32(dev, host):
    ew_run(dev, host, "add", bits=16, zp=(0, 0), sc1=(3, 2, 0, 0), sc2=(7, 3, 1, 0),
           o=out(bits=16, scale=9, shift=3, rnd=0), seed=7)
    host.clear_irq()
    ew_run(dev, host, "mul", bits=32, zp=(0, 0), o=out(bits=32, shift=20, rnd=1), seed=8)


def test_elementwise_uint8(dev, host):
    ew_run(dev, host, "max", signed=False, zp=(7, 200), o=out(signed=False, scale=3, shift=1,
                                                              zp=10), seed=9)


@pytest.mark.parametrize("func", [1, 4, 5, 8])
def test_lut_activation_loaded_by_dma(dev, host, func):
    """The LUT RAM is filled by NPU_OP_DMA_START (internal destination), then an elementwise op
    looks its results up (activation(), [U85-TRM: §3.6.7])."""
    lut = RNG.integers(0, 256, 2048).astype(np.uint8).tobytes()
    o = out(scale=5, shift=2, rnd=0, zp=5)
    if func == 5:
        o = dict(out(bits=16, scale=5, shift=2, rnd=0), amin=-128, amax=127)
    if func == 8:
        o = out(bits=16, scale=5, shift=2, rnd=0)
    ew_run(dev, host, "add", o=o, lut=lut, func=func, seed=10 + func)


def test_ifm_tiles_2x2(dev, host):
    """IFM stored as four tiles [U85-TRM: §3.6.5]: width0 2, height0 1, height1 2."""
    H, W, D = 3, 4, 2
    a = RNG.integers(-100, 100, (H, W, D))
    b = RNG.integers(-100, 100, (H, W, D))
    bases = [0x000, 0x100, 0x200, 0x300]
    tiles = {0: a[:1, :2], 1: a[:2, 2:], 2: a[1:, :2], 3: a[2:, 2:]}
    for t, arr in tiles.items():  # every tile stored with the same strides: stride_y 16
        for y in range(arr.shape[0]):
            dev.write(BUF + bases[t] + 16 * y, tensor_bytes(arr[y], 8, True))
    dev.write(BUF + 0x400, tensor_bytes(b, 8, True))
    o = out()
    cmds = (ifm("IFM", (H, W, D), 0) + [("NPU_SET_IFM_UPSCALE", {})]
            + [(f"NPU_SET_IFM_BASE{i}", dict(addr=bases[i])) for i in range(4)]
            + [("NPU_SET_IFM_WIDTH0_M1", dict(width_m1=1)),
               ("NPU_SET_IFM_HEIGHT0_M1", dict(height_m1=0)),
               ("NPU_SET_IFM_HEIGHT1_M1", dict(height_m1=1)),
               ("NPU_SET_IFM_STRIDE_Y", dict(addr=16)),
               ("NPU_SET_IFM_SCALE", dict(scale=1, round_mode=1)),
               ("NPU_SET_IFM2_SCALE", dict(scale=1, round_mode=1))]
            + ifm("IFM2", (H, W, D), 0x400) + ofm((H, W, D), 0x500, o) + acc_format()
            + [("NPU_OP_ELEMENTWISE", dict(elementwise_mode="add"))])
    run(dev, host, cmds)
    check(read_ofm(dev, (H, W, D), 0x500, o), np.clip(a + b, -128, 127))


# ---------------------------------------------------------------------------------------------
# OFM reverse / transpose, chaining


@pytest.mark.parametrize("reverse, transpose", [("H", "HWC"), ("W", "HWC"), ("C", "HWC"),
                                                ("none", "WHC"), ("none", "HCW"), ("none", "CHW"),
                                                ("none", "CWH"), ("none", "WCH")])
def test_ofm_reverse_and_transpose(dev, host, reverse, transpose):
    H, W, D = 3, 4, 5
    x = RNG.integers(-128, 128, (H, W, D))
    dev.write(BUF, tensor_bytes(x, 8, True))
    v = {"H": x[::-1], "W": x[:, ::-1], "C": x[:, :, ::-1]}.get(reverse, x)
    perm = {"HWC": (0, 1, 2), "WHC": (1, 0, 2), "HCW": (0, 2, 1), "CHW": (2, 0, 1),
            "CWH": (2, 1, 0), "WCH": (1, 2, 0)}[transpose]
    exp = np.transpose(v, perm)
    o = out()
    cmds = (ifm("IFM", (H, W, D), 0) + ofm((H, W, D), 0x400, o, reverse=reverse,
                                            transpose=transpose, stored=exp.shape, blk=(H, W, 16))
            + kernel(1, 1) + acc_format() + [("NPU_OP_POOL", dict(pooling_mode="max"))])
    run(dev, host, cmds)
    check(read_ofm(dev, exp.shape, 0x400, o), exp)


def test_chained_conv_into_elementwise(dev, host):
    """CONV with a chained OFM (FIFO 0) feeding an ELEMENTWISE add with a memory IFM2
    (chaining [U85-TRM: §3.6.4]): one head + one elementwise, the OFM written once."""
    x = RNG.integers(-128, 128, (3, 3, 4))
    y = RNG.integers(-128, 128, (3, 3, 2))
    W = RNG.integers(-20, 21, (2, 1, 1, 4))
    dev.write(BUF, tensor_bytes(x, 8, True))
    dev.write(BUF + 0x100, tensor_bytes(y, 8, True))
    o1 = out(scale=1 << 30, shift=33, rnd=0)
    o2 = out(scale=1, shift=0, rnd=1, zp=1)
    cmds = (ifm("IFM", (3, 3, 4), 0) + [("NPU_SET_IFM_DEPTH_M1", dict(depth_m1=3))]
            + ofm((3, 3, 2), 0, o1, storage="chained", region=0, blk=(3, 3, 8)) + kernel(1, 1)
            + acc_format() + weight_cmds(dev, W, ofm_blk_depth=8, kernel_hw=(1, 1))
            + [("NPU_OP_CONV", {})]
            + ifm("IFM", None, 0, storage="chained", region=0, zp=0)
            + ifm("IFM2", (3, 3, 2), 0x100, zp=0)
            + [("NPU_SET_IFM_SCALE", dict(scale=1, round_mode=1)),
               ("NPU_SET_IFM2_SCALE", dict(scale=1, round_mode=1))]
            + ofm((3, 3, 2), 0x200, o2) + [("NPU_OP_ELEMENTWISE", dict(elementwise_mode="add"))])
    run(dev, host, cmds)
    c = ref.conv(ref.values(x, 0, 8, True), W, 3, 3, (1, 1), (1, 1), (0, 0), o1, LUT0)
    exp = ref.elementwise(1, c, ref.values(y, 0, 8, True), 8, True, (1, 0, 1, 0), (1, 0, 1, 0),
                          o2, LUT0)
    check(read_ofm(dev, (3, 3, 2), 0x200, o2), exp)
    assert dev.npu.chain_length == 0


def test_chain_without_consumer_is_unpredictable_at_stop(dev, host):
    x = RNG.integers(-128, 128, (2, 2, 2))
    dev.write(BUF, tensor_bytes(x, 8, True))
    cmds = (ifm("IFM", (2, 2, 2), 0) + ofm((2, 2, 2), 0, out(), storage="chained", region=1)
            + kernel(1, 1) + acc_format() + [("NPU_OP_POOL", dict(pooling_mode="max"))])
    host.start(es.encode_stream(cmds + STOP))
    step(dev)
    assert dev.npu.chain_length == 1
    with pytest.raises(DeviceError, match=r"NPU_OP_STOP.*g_chain_length == 0"):
        step(dev)
    assert host.field("STATUS", "cmd_parse_error") == 1


# ---------------------------------------------------------------------------------------------
# NPU_OP_RESIZE


@pytest.mark.parametrize("mode", ["bilinear", "replicate", "nearest"])
def test_resize_2x(dev, host, mode):
    IH, IW, D = 3, 4, 3
    OH, OW = 6, 8
    x = RNG.integers(-128, 128, (IH, IW, D))
    dev.write(BUF, tensor_bytes(x, 8, True))
    n, off, step = (2, 2), (-1, -1) if mode == "bilinear" else (0, 0), ((0, 1), (0, 1))
    o = out(shift=18 if mode == "bilinear" else 16, rnd=1)
    cmds = (ifm("IFM", (IH, IW, D), 0) + [("NPU_SET_IFM_UPSCALE", {}),
                                          ("NPU_SET_IFM2_ZERO_POINT", dict(zero_point=0))]
            + ofm((OH, OW, D), 0x400, o)
            + [("NPU_SET_KERNEL_HEIGHT_M1", dict(height_m1=IH - 1)),
               ("NPU_SET_KERNEL_WIDTH_M1", dict(width_m1=IW - 1)),
               ("NPU_SET_RESIZE_Y_SCALE_N_M1", dict(resize_y_scale_n_m1=n[0] - 1)),
               ("NPU_SET_RESIZE_X_SCALE_N_M1", dict(resize_x_scale_n_m1=n[1] - 1)),
               ("NPU_SET_RESIZE_Y_OFFSET", dict(resize_y_offset=off[0])),
               ("NPU_SET_RESIZE_X_OFFSET", dict(resize_x_offset=off[1])),
               ("NPU_SET_RESIZE_Y_STEP", dict(one_step_int=step[0][0], one_step_mod=step[0][1])),
               ("NPU_SET_RESIZE_X_STEP", dict(one_step_int=step[1][0], one_step_mod=step[1][1]))]
            + acc_format() + [("NPU_OP_RESIZE", dict(resize_mode=mode))])
    run(dev, host, cmds)
    exp = ref.resize(ref.values(x, 0, 8, True), es.E_RESIZE.index(mode), OH, OW, n, off, step,
                     o, LUT0)
    check(read_ofm(dev, (OH, OW, D), 0x400, o), exp)
    if mode == "replicate":
        check(read_ofm(dev, (OH, OW, D), 0x400, o), np.repeat(np.repeat(x, 2, 0), 2, 1))


# ---------------------------------------------------------------------------------------------
# errors


def test_bad_weight_stream_is_unpredictable(dev, host):
    dev.write(BUF2, bytes([0x04]) + bytes(15))  # zdiv 4: reserved
    cmds = (ifm("IFM", (2, 2, 2), 0) + [("NPU_SET_IFM_DEPTH_M1", dict(depth_m1=1))]
            + ofm((2, 2, 2), 0x100, out(), blk=(2, 2, 8)) + kernel(1, 1) + acc_format()
            + [("NPU_SET_WEIGHT_FORMAT", {}), ("NPU_SET_WEIGHT_REGION", dict(region=2)),
               ("NPU_SET_WEIGHT_BASE", dict(addr=0)), ("NPU_SET_WEIGHT_LENGTH", dict(length=16)),
               ("NPU_OP_CONV", {})])
    host.start(es.encode_stream(cmds + STOP))
    with pytest.raises(DeviceError, match="UNPREDICTABLE: weight stream"):
        step(dev)
    assert host.field("STATUS", "cmd_parse_error") == 1


def test_sparse_weights(dev, host):
    """sparse_2_4 (WEIGHT_FORMAT, [U85-TRM: Table 3-157]): the same convolution as dense weights, in
    the sparse order; weights breaking the 2:4 rule are UNPREDICTABLE (cmd_parse_error, nothing
    written)."""
    x = RNG.integers(-128, 128, (3, 3, 6))
    W = RNG.integers(-127, 128, (3, 1, 2, 6))
    W[..., [1, 2, 4]] = 0          # ic 0-3 keep two values, ic 4-5 (a partial group) one
    dev.write(BUF, tensor_bytes(x, 8, True))
    o = out(rnd=0, per_channel=True)
    got = []
    for sparse in (False, True):
        cmds = (ifm("IFM", (3, 3, 6), 0) + [("NPU_SET_IFM_DEPTH_M1", dict(depth_m1=5))]
                + ofm((3, 2, 3), 0x100, o, blk=(3, 2, 8)) + kernel(1, 2) + acc_format()
                + weight_cmds(dev, W, ofm_blk_depth=8, kernel_hw=(1, 2), off=0x200,
                              sparse=sparse)
                + scale_cmds(dev, [0] * 3, [1 << 30] * 3, [41] * 3, off=0x600)
                + [("NPU_OP_CONV", {})])
        run(dev, host, cmds)
        got.append(dev.read(BUF + 0x100, 18))
    v = ref.values(x, 0, 8, True)
    exp = ref.conv(v, W, 3, 2, (1, 1), (1, 1), (0, 0, 0, 0), o, LUT0, [0] * 3, [1 << 30] * 3,
                   [41] * 3)
    assert got[0] == got[1] == bytes(np.asarray(exp, np.int64).astype(np.int8).ravel())
    W[0, 0, 0, :4] = (3, 5, 0, 7)  # three values in ic 0-3
    dev.write(BUF + 0x100, bytes(18))
    cmds = (ifm("IFM", (3, 3, 6), 0) + [("NPU_SET_IFM_DEPTH_M1", dict(depth_m1=5))]
            + ofm((3, 2, 3), 0x100, o, blk=(3, 2, 8)) + kernel(1, 2) + acc_format()
            + weight_cmds(dev, W, ofm_blk_depth=8, kernel_hw=(1, 2), off=0x200, sparse=True)
            + scale_cmds(dev, [0] * 3, [1 << 30] * 3, [41] * 3, off=0x600)
            + [("NPU_OP_CONV", {})])
    host.start(es.encode_stream(cmds + STOP))
    with pytest.raises(DeviceError, match="UNPREDICTABLE: weight stream.*group of 4"):
        step(dev)
    assert host.field("STATUS", "cmd_parse_error") == 1 and dev.read(BUF + 0x100, 18) == bytes(18)


@pytest.mark.parametrize("region, message", [
    # FIFO 0 unwritten
    (0, r"assert\(g_fifo_valid\[IFM_REGION.region\]\) fails \[U85-TRM: §3\.6\.4\]"),
    (3, r"assert\(IFM_REGION.region < 3\) fails \[U85-TRM: §3\.6\.4\]"),
])
def test_chained_ifm_without_its_fifo_is_unpredictable(dev, host, region, message):
    """read of a chained IFM whose FIFO no chained OFM filled, or a FIFO that does not exist:
    the chaining asserts [U85-TRM: §3.6.4] name the register."""
    y = RNG.integers(-128, 128, (2, 2, 2))
    dev.write(BUF + 0x100, tensor_bytes(y, 8, True))
    cmds = (ifm("IFM", None, 0, storage="chained", region=region) + ifm("IFM2", (2, 2, 2), 0x100)
            + [("NPU_SET_IFM_SCALE", dict(scale=1, round_mode=1)),
               ("NPU_SET_IFM2_SCALE", dict(scale=1, round_mode=1))]
            + ofm((2, 2, 2), 0x200, out()) + [("NPU_OP_ELEMENTWISE", dict(elementwise_mode="add"))])
    host.start(es.encode_stream(cmds + STOP))
    with pytest.raises(DeviceError, match=message):
        step(dev)
    assert host.field("STATUS", "cmd_parse_error") == 1
