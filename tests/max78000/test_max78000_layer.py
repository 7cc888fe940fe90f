"""MAX78000 layer datapath driven only through bus writes, as a driver would: registers from the
seed's field definitions ([UG-CNN] cited), data/weights/bias in the layouts the ai8x tools
use (R§1.3,
A§1.2, A§1.3, A§1.4), then
decode_layer + run_layer, and data SRAM compared with the independent reference."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelstub.devices import DeviceError, open_device
from accelstub.devices.max78000.datapath import run_layer
from accelstub.devices.max78000.layer import decode_layer
from accelstub.testkit import max78000_reference as ref

# quadrant register bases [UG-CNN: Table 27-17]
QB = [0x5010_0000 + q * 0x40_0000 for q in range(4)]
# per-layer register offsets, Table 27-18 [UG-CNN: Table 27-18]: addr = QB + off + 4*layer
OFF = dict(RCNT=0x010, CCNT=0x090, ONED=0x110, PRCNT=0x190, PCCNT=0x210, STRIDE=0x290,
           WPTR_BASE=0x310, WPTR_TOFF=0x390, WPTR_MOFF=0x410, WPTR_CHOFF=0x490,
           RPTR_BASE=0x510, LCTRL0=0x590, MCNT=0x610, TPTR=0x690, EN=0x710, POST=0x790,
           LCTRL1=0xA10)
SRAM = 0x5040_0000  # data memory m = q*4+g at SRAM + q*0x40_0000 + g*0x8000 [AI8X: Data memory]
MRAM = 0x5018_0000  # processor block at MRAM + q*0x40_0000 + l*0x4000 [UG-CNN: Table 27-5]
BRAM = 0x5010_8000  # + q*0x40_0000, one byte per 32-bit word


def mem_addr(m: int) -> int:
    return SRAM + (m // 4) * 0x40_0000 + (m % 4) * 0x8000


@dataclass
class Spec:
    """A layer the way a network description states it (izer YAML-like)."""

    in_procs: list[int]  # global processor numbers (input channel c -> in_procs[c % n])
    in_passes: int
    rows: int
    cols: int
    out_channels: int
    out_first_proc: int  # output processor of channel 0 (channels go to consecutive procs)
    out_passes: int = 1
    pad: int = 1
    kernel: int = 3
    bits: int = 8
    pool: tuple[int, int] = (1, 1)
    pool_kind: str = "none"
    pool_stride: int = 1
    pool_round: bool = False
    shift: int = 0
    act: str = "none"
    wide: bool = False
    bias_quadrant: int | None = None
    bias_offset: int = 0
    in_offset: int = 0
    out_offset: int = 0x400
    kern_col: int = 4  # first MRAM column (multiple of 4, [AI8X: Layers and Weight Memory])
    layer: int = 0
    seed: int = 0
    chw: bool = False  # LCTRL0.parallel: channel c on in_procs[c] (first of a quad), 4 px/word
    oned: int = 0  # 1-D kernel width (ONED.oned_en): rows = length, cols must be 1
    flatten: bool = False  # POST.flatten_en + xpmp_cnt: in_passes may exceed 16 (1x1 data)
    sum_quadrant: int | None = None  # quadrant holding cnnsi_en (may have no processors)
    deconv: bool = False  # POST.deconv_en: RCNT/CCNT count the zero-stuffed 2H x 2W input
    tensors: dict = field(default_factory=dict)

    @property
    def kshape(self) -> tuple[int, int]:
        return (self.oned, 1) if self.oned else (self.kernel, self.kernel)


def w32(dev, addr: int, value: int) -> None:
    dev.write(addr, (value & 0xFFFFFFFF).to_bytes(4, "little"))


def program(dev, s: Spec) -> None:
    rng = np.random.default_rng(s.seed)
    n = len(s.in_procs)
    cin = n * s.in_passes
    x = rng.integers(-128, 128, size=(cin, s.rows, s.cols))
    lo, hi = -(1 << (s.bits - 1)), (1 << (s.bits - 1))
    wt = rng.integers(lo, hi, size=(s.out_channels, cin) + s.kshape)
    bias = rng.integers(-128, 128, size=s.out_channels) if s.bias_quadrant is not None else None
    s.tensors.update(x=x, w=wt, bias=bias)

    # ---- input data, HWC: channel c on processor in_procs[c % n], pass c // n; one word per
    # pixel per pass, byte lane = processor % 4 [AI8X: Multi-Pass, HWC]
    words: dict[int, int] = {}
    for c in range(cin):
        p, e = s.in_procs[c % n], c // n
        base = mem_addr(p // 4) + s.in_offset
        for r in range(s.rows):
            for col in range(s.cols):
                # CHW: pixel i in byte i%4 of word i//4 (izer load.py, [UG-CNN: Table 27-34])
                if s.chw:
                    i = r * s.cols + col
                    a = base + 4 * (i // 4)
                    words[a] = words.get(a, 0) | (int(x[c, r, col]) & 0xFF) << 8 * (i % 4)
                    continue
                a = base + 4 * ((r * s.cols + col) * s.in_passes + e)
                words[a] = words.get(a, 0) | (int(x[c, r, col]) & 0xFF) << 8 * (p % 4)
    for a, v in words.items():
        w32(dev, a, v)

    # ---- output slots: channel k -> slot t = start + k (start = first proc % 4); passes of
    # `per_pass` slots (xpch_max = (per_pass-1)*bits, izer LCTL2)
    start = s.out_first_proc % 4
    if s.out_passes == 1:
        per_pass = start + s.out_channels
        slot_of = {k: start + k for k in range(s.out_channels)}
    else:
        assert start == 0
        per_pass = -(-s.out_channels // s.out_passes)
        slot_of = {k: k for k in range(s.out_channels)}
    slots = per_pass * s.out_passes
    steps = slots * s.in_passes
    # mask counter: bit address, steps of `bits`; >>3 counts kernels of ksize bytes, the layer
    # starting at byte 9*kern_col = koffs*ksize + oned_sad ([izer] max7800x.py divmod)
    ksize = s.kshape[0] * s.kshape[1]
    koffs, oned_sad = divmod(9 * s.kern_col, ksize)
    sad = koffs * 8
    mmax = sad + (steps - 1) * s.bits
    qf = 8 // s.bits
    for j, p in enumerate(s.in_procs):
        elems = np.zeros((768, 9), dtype=np.int64)  # k0..k8 of each 72-bit word
        kslot = {t: k for k, t in slot_of.items()}
        for t in range(slots):
            for e in range(s.in_passes):
                cnt = sad + (t * s.in_passes + e) * s.bits
                if t not in kslot:
                    continue
                kern = wt[kslot[t], e * n + j].reshape(-1) & ((1 << s.bits) - 1)
                # byte stream: the izer adds k[ksize-1-i] in order, each at k-position
                # 8 - used of the current word (kernels.py add_kernel_data)
                first = (cnt >> 3) * ksize + oned_sad
                for i in range(ksize):
                    b = first + i
                    elems[b // 9, 8 - b % 9] |= int(kern[ksize - 1 - i]) << (cnt & 7)
        assert qf >= 1
        blk = MRAM + (p // 16) * 0x40_0000 + (p % 16) * 0x4000
        used = range(s.kern_col, ((mmax >> 3) * ksize + oned_sad + ksize - 1) // 9 + 1)
        for col in used:
            k = elems[col]
            a = blk + 16 * col
            w32(dev, a + 0, int(k[0]))
            w32(dev, a + 4, int(k[1] << 24 | k[2] << 16 | k[3] << 8 | k[4]))
            w32(dev, a + 8, int(k[5] << 24 | k[6] << 16 | k[7] << 8 | k[8]))
            w32(dev, a + 12, 0)  # "execute write"
    if bias is not None:
        for k in range(s.out_channels):
            w32(dev, BRAM + s.bias_quadrant * 0x40_0000 + 4 * (s.bias_offset + slot_of[k]),
                int(bias[k]) & 0xFF)

    # ---- registers, fields per [UG-CNN]
    quads = sorted({p // 16 for p in s.in_procs})
    used_quads = sorted(set(quads) | ({s.bias_quadrant} if s.bias_quadrant is not None else set())
                        | ({s.sum_quadrant} if s.sum_quadrant is not None else set()))
    master = quads[0] if s.sum_quadrant is None else s.sum_quadrant
    out_mem = s.out_first_proc // 4
    for q in used_quads:
        def lreg(name, v, q=q):
            w32(dev, QB[q] + OFF[name] + 4 * s.layer, v)
        # CTRL: clk_en bit 3 [UG-CNN: Table 27-19], poolrnd bit 13 [UG-CNN: Table 27-19]
        w32(dev, QB[q], 1 << 3 | (1 << 13 if s.pool_round else 0))
        f = 2 if s.deconv else 1  # [izer] in_row = stride*H for ConvTranspose2d
        lreg("RCNT", s.pad << 16 | (2 * s.pad + f * s.rows - 1))  # [UG-CNN: Table 27-23]
        if s.oned:  # 1-D along the rows: CCNT 0 (one column, no pad) as the izer writes it
            assert s.cols == 1
            lreg("CCNT", 0)
            # oned_en/width/sad [UG-CNN: Table 27-25]
            lreg("ONED", 1 << 12 | s.oned << 8 | oned_sad << 4)
        else:
            lreg("CCNT", s.pad << 16 | (2 * s.pad + f * s.cols - 1))  # [UG-CNN: Table 27-24]
            lreg("ONED", (1 << 8) if s.kernel == 1 else 0)  # oned_width 11:8 [UG-CNN: Table 27-25]
        lreg("PRCNT", s.pool[0] - 1)  # [UG-CNN: Table 27-26]
        lreg("PCCNT", s.pool[1] - 1)  # [UG-CNN: Table 27-27]
        lreg("STRIDE", s.pool_stride - 1)  # [UG-CNN: Table 27-28]
        # [UG-CNN: Table 27-29] (bits 16:13 memory)
        lreg("WPTR_BASE", out_mem << 13 | s.out_offset // 4)
        lreg("WPTR_TOFF", 0)
        lreg("WPTR_MOFF", 1 << 13)  # next data memory per 4 output channels [UG-CNN: Table 27-31]
        lreg("WPTR_CHOFF", (4 if s.wide else 1) if s.out_passes > 1 else 0)  # [UG-CNN: Table 27-32]
        lreg("RPTR_BASE", s.in_offset // 4)  # [UG-CNN: Table 27-33]
        lctrl0 = 1 << 11 | 1 << 5  # sramlsrc, master [UG-CNN: Table 27-34]
        if s.act == "relu":
            lctrl0 |= 1 << 9  # act_en [UG-CNN: Table 27-34]
        if s.pool_kind != "none":
            lctrl0 |= 1 << 7  # pool_en [UG-CNN: Table 27-34]
        if s.pool_kind == "max":
            lctrl0 |= 1 << 8  # maxpl_en [UG-CNN: Table 27-34]
        if s.wide:
            lctrl0 |= 1 << 16  # bigdwrt [UG-CNN: Table 27-34]
        if s.chw:
            lctrl0 |= 1 << 6  # parallel [UG-CNN: Table 27-34]
        if q == master:
            for t in used_quads:
                if t != master:
                    lctrl0 |= 1 << (12 + t)  # cnnsi_en [UG-CNN: Table 27-34]
        lreg("LCTRL0", lctrl0)
        # LCTRL1: xpch_max 16:8, wptr_inc 7:4, inpchexp 3:0 [UG-CNN: Table 27-39]
        lreg("LCTRL1", ((per_pass - 1) * s.bits) << 8 | (s.out_passes - 1) << 4
             | ((s.in_passes - 1) & 15))
        lreg("MCNT", sad << 16 | mmax)  # [UG-CNN: Table 27-35]
        lreg("TPTR", 0)
        pro = sum(1 << (p % 16) for p in s.in_procs if p // 16 == q)
        lreg("EN", pro << 16 | pro)  # mask_en 31:16, pro_en 15:0 [UG-CNN: Table 27-37]
        if s.flatten:
            # flatten_en, xpmp_cnt [UG-CNN: Table 27-38]
            post_f = 1 << 27 | ((s.in_passes - 1) >> 4) << 18
        else:
            post_f = 0
        post = {8: 0, 1: 1, 2: 2, 4: 3}[s.bits] << 22  # mask_size [UG-CNN: Table 27-38]
        post |= (abs(s.shift) << 13) | ((1 << 17) if s.shift < 0 else 0)  # [UG-CNN: Table 27-38]
        if s.act == "abs":
            post |= 1 << 26  # out_abs [UG-CNN: Table 27-38]
        if q == s.bias_quadrant:
            post |= 1 << 12 | s.bias_offset  # bptr_en, bptr_sad [UG-CNN: Table 27-38]
        # deconv_en [UG-CNN: Table 27-38]
        lreg("POST", post | post_f | (1 << 28 if s.deconv else 0))


def expected(s: Spec) -> np.ndarray:
    t = s.tensors
    if s.deconv:  # zero after every byte and a zero row after every row [UG-CNN: Table 27-38]
        x = t["x"]
        st = np.zeros((x.shape[0], 2 * x.shape[1], 2 * x.shape[2]), dtype=np.int64)
        st[:, ::2, ::2] = x
        return ref.layer(st, t["w"], t["bias"], pad=(s.pad, s.pad), shift=s.shift, act=s.act,
                         wide=s.wide)
    return ref.layer(t["x"], t["w"], t["bias"], pool_size=s.pool, pool_stride=s.pool_stride,
                     pool_kind=s.pool_kind, avg_policy="away" if s.pool_round else "trunc",
                     pad=(s.pad, 0 if s.oned else s.pad), shift=s.shift, act=s.act,
                     wide=s.wide)


def out_address(s: Spec, proc: int, e: int, pix: int) -> tuple[int, int]:
    """(address, bytes) of output pass e, pixel pix of processor proc: word per pixel (x
    out_passes), lane = processor % 4; 32-bit outputs take 4 consecutive words per quad."""
    base = mem_addr(proc // 4) + s.out_offset
    if s.wide:
        return base + 4 * ((pix * s.out_passes + e) * 4 + proc % 4), 4
    return base + 4 * (pix * s.out_passes + e) + proc % 4, 1


def unload(dev, s: Spec, shape) -> np.ndarray:
    """Read the outputs back like the izer's unload: channel k on processor first+k (pass
    k // per_pass when multi-pass)."""
    k_n, h, w_ = shape
    out = np.zeros(shape, dtype=np.int64)
    per_pass = -(-k_n // s.out_passes)
    for k in range(k_n):
        e, kk = divmod(k, per_pass) if s.out_passes > 1 else (0, k)
        for pix in range(h * w_):
            a, n = out_address(s, s.out_first_proc + kk, e, pix)
            out[k, pix // w_, pix % w_] = int.from_bytes(dev.read(a, n), "little", signed=True)
    return out


def written_ranges(s: Spec, pixels: int) -> list[tuple[int, int]]:
    """The byte ranges a layer writes: every output slot (those before the first channel's
    processor in its group of four and the unused ones of a pass too), merged."""
    start = s.out_first_proc % 4
    per_pass = start + s.out_channels if s.out_passes == 1 else -(-s.out_channels // s.out_passes)
    written = set()
    for t in range(per_pass * s.out_passes):
        e, kk = divmod(t, per_pass)
        for pix in range(pixels):
            a, n = out_address(s, s.out_first_proc - start + kk, e, pix)
            written.update(range(a, a + n))
    ranges: list[list[int]] = []
    for a in sorted(written):
        if ranges and ranges[-1][1] == a:
            ranges[-1][1] += 1
        else:
            ranges.append([a, a + 1])
    return [(a, b) for a, b in ranges]


def run(s: Spec):
    dev = open_device("max78000")
    program(dev, s)
    cfg = decode_layer(dev.regs.view, range(4), s.layer)
    touched = run_layer(dev.bus, cfg)
    want = expected(s)
    got = unload(dev, s, want.shape)
    np.testing.assert_array_equal(got, want)
    return dev, cfg, touched


def test_maxpool_conv3x3_relu_bias_to_other_quadrant():
    s = Spec(in_procs=list(range(8)), in_passes=1, rows=6, cols=6, out_channels=5,
             out_first_proc=16, pool=(2, 2), pool_kind="max", pool_stride=2, pad=1,
             shift=-3, act="relu", bias_quadrant=0, bias_offset=7, layer=3, seed=1)
    dev, cfg, touched = run(s)
    assert (cfg.in_rows, cfg.pooled_rows, cfg.out_rows, cfg.out_slots) == (6, 3, 3, 5)
    # channels 0-3 -> data memory 4, channel 4 -> memory 5 (quadrant 1, groups 0-1) only
    assert touched.writes and all(0x5080_0000 <= a < e <= 0x5081_0000 for a, e in touched.writes)
    assert any(a <= 0x5080_8400 < e for a, e in touched.writes)
    assert any(a <= 0x5040_0000 < e for a, e in touched.reads)  # input read recorded
    assert any(a <= 0x5018_0040 < e for a, e in touched.reads)  # MRAM column 4 of proc 0


def test_multiquadrant_1x1_4bit_avgpool_round_abs_unaligned_output():
    s = Spec(in_procs=list(range(12, 20)), in_passes=1, rows=5, cols=4, out_channels=6,
             out_first_proc=33, kernel=1, pad=0, bits=4, pool=(3, 2), pool_kind="avg",
             pool_stride=1, pool_round=True, shift=0, act="abs", bias_quadrant=1,
             bias_offset=20, seed=2)
    _, cfg, _ = run(s)
    assert cfg.weight_bits == 4 and cfg.quadrants == (0, 1) and cfg.kernel_rows == 1


def test_multipass_in_and_out_8bit_pad2():
    s = Spec(in_procs=[4, 5, 6, 7, 8, 9], in_passes=2, rows=4, cols=5, out_channels=10,
             out_first_proc=8, out_passes=2, pad=2, shift=-3, bias_quadrant=0, seed=3)
    _, cfg, _ = run(s)
    assert (cfg.in_passes, cfg.out_passes, cfg.slots_per_pass) == (2, 2, 5)


def test_2bit_3x3_multipass_relu():
    s = Spec(in_procs=[0, 1, 2, 3, 16, 17], in_passes=3, rows=3, cols=3, out_channels=7,
             out_first_proc=40, bits=2, pad=1, shift=0, act="relu", bias_quadrant=1, seed=4)
    run(s)


def test_wide_output_1bit_1x1_with_bias():
    s = Spec(in_procs=list(range(0, 12)), in_passes=1, rows=2, cols=2, out_channels=6,
             out_first_proc=4, kernel=1, pad=0, bits=1, wide=True, bias_quadrant=0, seed=5)
    _, cfg, touched = run(s)
    assert cfg.wide and cfg.pixel_step == 4
    assert all((e - a) % 4 == 0 for a, e in touched.writes)


def test_decimation_without_pool_enable():
    s = Spec(in_procs=[0, 1, 2], in_passes=1, rows=7, cols=6, out_channels=4,
             out_first_proc=0, pool_stride=2, pad=1, shift=-2, seed=6)
    _, cfg, _ = run(s)
    assert cfg.pool_kind == "none" and (cfg.pooled_rows, cfg.pooled_cols) == (4, 3)


def test_cnnsi_in_quadrant_without_processors():
    # the vendor generator keeps cnnsi_en in quadrant 0's LCTRL0 although the layer runs on
    # quadrants 2-3 only, bias on quadrant 3 (ai8x-synthesis cifar-10 layer 4: q0 LCTRL0 =
    # 0xcb20, q3 POST = 0x1080)
    s = Spec(in_procs=list(range(32, 64, 3)), in_passes=2, rows=4, cols=4, out_channels=6,
             out_first_proc=8, kernel=1, pad=0, act="relu", shift=-2, bias_quadrant=3,
             bias_offset=0x80, sum_quadrant=0, layer=4, seed=11)
    dev, cfg, _ = run(s)
    assert cfg.sum_quadrant == 0 and cfg.quadrants == (2, 3) and cfg.bias == ((3, 0x80),)


@pytest.mark.parametrize("procs,rows,cols,pool", [([0], 28, 28, "none"), ([0, 4, 8], 7, 5, "max"),
                                                  ([16, 36], 9, 3, "avg")])
def test_chw_input(procs, rows, cols, pool):
    s = Spec(in_procs=procs, in_passes=1, rows=rows, cols=cols, out_channels=5,
             out_first_proc=1, chw=True, pool_kind=pool,
             pool=(1, 1) if pool == "none" else (2, 2), pool_stride=1 if pool == "none" else 2,
             act="relu", shift=-1, seed=rows)
    _, cfg, touched = run(s)
    assert cfg.chw
    # CHW reads ceil(H*W/4) words of each channel's own memory
    data = [(b, e) for b, e in touched.reads if b >= SRAM and (b - SRAM) % 0x40_0000 < 0x2_0000]
    assert sum(e - b for b, e in data) == 4 * len(procs) * -(-rows * cols // 4)


def test_chw_rejects_processor_that_is_not_first_of_its_quad():
    dev = open_device("max78000")
    program(dev, Spec(in_procs=[1], in_passes=1, rows=4, cols=4, out_channels=1,
                      out_first_proc=0, chw=True))
    with pytest.raises(DeviceError, match=r"CNNx16_0_L0_EN: processor 1 enabled in parallel"):
        decode_layer(dev.regs.view, range(4), 0)


@pytest.mark.parametrize("k", range(1, 10))
def test_conv1d_kernel_widths(k):
    pad = k % 3
    s = Spec(in_procs=[0, 1, 2, 5, 17], in_passes=2, rows=12 + k, cols=1, out_channels=7,
             out_first_proc=4, oned=k, pad=pad, bits=(8, 4, 2, 1)[k % 4], kern_col=4 * k,
             pool=(2, 1), pool_kind="max" if k % 2 else "avg", pool_stride=2 if k > 4 else 1,
             act="relu", shift=-3, bias_quadrant=0, seed=k, layer=k)
    _, cfg, _ = run(s)
    assert cfg.oned and (cfg.kernel_rows, cfg.kernel_cols) == (k, 1)
    assert cfg.oned_sad == (9 * 4 * k) % k


def test_conv1d_with_oned_sad_and_32bit_output():
    # kernel column 4 with 7-tap kernels: koffs, oned_sad = divmod(36, 7) = (5, 1)
    s = Spec(in_procs=list(range(8)), in_passes=1, rows=10, cols=1, out_channels=4,
             out_first_proc=0, oned=7, pad=2, kern_col=4, wide=True, seed=3)
    _, cfg, _ = run(s)
    assert cfg.oned_sad == 1


@pytest.mark.parametrize("passes,bits", [(16, 8), (40, 8), (200, 4), (256, 2)])
def test_flatten_pass_count_with_xpmp(passes, bits):
    s = Spec(in_procs=list(range(12)), in_passes=passes, rows=1, cols=1, out_channels=10,
             out_first_proc=0, kernel=1, pad=0, bits=bits, flatten=passes > 16, wide=True,
             bias_quadrant=0, kern_col=0, seed=passes)
    _, cfg, _ = run(s)
    assert cfg.in_passes == passes and cfg.flatten == (passes > 16)


@pytest.mark.parametrize("pad", [0, 1, 2])
def test_transposed_convolution(pad):
    s = Spec(in_procs=[0, 1, 2, 20], in_passes=1, rows=5, cols=7, out_channels=4,
             out_first_proc=0, pad=pad, deconv=True, shift=-1, act="relu", bias_quadrant=1,
             seed=pad)
    _, cfg, _ = run(s)
    assert cfg.deconv and (cfg.out_rows, cfg.out_cols) == (10 + 2 * pad - 2, 14 + 2 * pad - 2)


def _ewise_ref(xs, fn):
    """Left fold over operands at full resolution, then clip (A§1.10), plain numpy."""
    v = xs[0].astype(np.int64)
    for b in xs[1:]:
        if fn == "add":
            v = v + b
        elif fn == "sub":
            v = v - b
        else:
            u = (v & 0xFF) | (b & 0xFF) if fn == "or" else (v & 0xFF) ^ (b & 0xFF)
            v = np.where(u >= 128, u - 256, u)
    return np.clip(v, -128, 127)


@pytest.mark.parametrize("procs,ops,fn,pool,prepool,passes", [
    ([0, 1, 2], 1, None, "none", False, 1),          # plain pass-through
    ([0, 4, 8, 12, 16], 1, None, "max", False, 1),   # packed output lanes, two quadrants
    (list(range(16)), 1, None, "avg", False, 2),     # 4 timeslots, multi-pass
    (list(range(7)), 2, "add", "none", False, 1),
    (list(range(6)), 3, "sub", "max", True, 1),      # pool each operand, then subtract
    (list(range(5)), 4, "xor", "avg", False, 1),     # xor, then pool
    ([0, 1, 2, 3, 17], 2, "or", "none", False, 2),
])
def test_passthrough_and_elementwise(procs, ops, fn, pool, prepool, passes):
    dev = open_device("max78000")
    rng = np.random.default_rng(len(procs) * ops)
    n, rows, cols = len(procs), 6, 5
    x = rng.integers(-128, 128, size=(ops, n * passes, rows, cols))
    # input: word ((pixel*passes + e)*ops + o), lane p%4 (operands interleaved,
    # [AI8X: Residual Connections])
    words: dict[int, int] = {}
    for o in range(ops):
        for c in range(n * passes):
            p, e = procs[c % n], c // n
            for pix in range(rows * cols):
                a = mem_addr(p // 4) + 4 * ((pix * passes + e) * ops + o)
                words[a] = words.get(a, 0) | (int(x[o, c].flat[pix]) & 0xFF) << 8 * (p % 4)
    for a, v in words.items():
        w32(dev, a, v)
    psz, pstride = ((1, 1), 1) if pool == "none" else ((2, 2), 2)
    fcode = {None: 0, "sub": 0, "add": 1, "or": 2, "xor": 3}[fn]
    for q in sorted({p // 16 for p in procs}):
        mine = [p for p in procs if p // 16 == q]
        def lreg(name, v, q=q):
            w32(dev, QB[q] + OFF[name], v)
        w32(dev, QB[q], 1 << 3)
        lreg("RCNT", rows - 1)
        lreg("CCNT", cols - 1)
        lreg("PRCNT", psz[0] - 1)
        lreg("PCCNT", psz[1] - 1)
        lreg("STRIDE", pstride - 1)
        lreg("WPTR_BASE", (4 * q + 2) << 13 | 0x100)  # this quadrant's memory 2 (R7#26)
        lreg("WPTR_TOFF", 1 << 13)  # timeslot -> next data memory [UG-CNN: Table 27-30]
        lreg("WPTR_CHOFF", 1)
        lctrl0 = 1 << 11 | 1 << 5 | (1 << 7 if pool != "none" else 0) \
            | (1 << 8 if pool == "max" else 0)
        lreg("LCTRL0", lctrl0)
        lreg("LCTRL1", passes - 1)
        lreg("MCNT", (passes - 1) * 8)  # [izer] (out_expand-1)*8 for operation None
        tsc = (len(mine) - 1) // 4
        if ops == 1:  # tscnt_max, 1x1; POST ts_en|onexone_en [UG-CNN: Table 27-25, Table 27-38]
            lreg("ONED", tsc | 1 << 8)
            lreg("POST", 3 << 24)
        else:  # ewise_en, func, prepool, count [UG-CNN: Table 27-25]; POST ts_en
            lreg("ONED", tsc | 1 << 13 | fcode << 14 | (1 << 16 if prepool else 0)
                 | (ops - 1) << 18)
            lreg("POST", 1 << 24)
        lreg("EN", sum(1 << (p % 16) for p in mine))  # pro_en only, no mask_en
    cfg = decode_layer(dev.regs.view, range(4), 0)
    run_layer(dev.bus, cfg)
    pooled_first = [ref.pool(x[o], *psz, pstride, pool) for o in range(ops)]
    if ops == 1:
        want = pooled_first[0]
    elif prepool:
        want = _ewise_ref(pooled_first, fn)
    else:
        want = ref.pool(_ewise_ref(list(x), fn), *psz, pstride, pool)
    h, w_ = want.shape[1:]
    for c in range(n * passes):
        j, e = c % n, c // n
        q = procs[j] // 16
        k = [p for p in procs if p // 16 == q].index(procs[j])  # packed per quadrant
        base = mem_addr(4 * q + 2 + k // 4) + 4 * 0x100
        for pix in range(h * w_):
            a = base + 4 * (pix * passes + e) + k % 4
            got = int.from_bytes(dev.read(a, 1), "little", signed=True)
            assert got == want[c].flat[pix], (c, pix)


def test_unsupported_raises_device_error_naming_register():
    dev = open_device("max78000")
    s = Spec(in_procs=[0], in_passes=1, rows=3, cols=3, out_channels=1, out_first_proc=0)
    program(dev, s)
    # ewise_en with oned_en [AI8X: MAX78000 Hardware and Resources / Overview]
    w32(dev, QB[0] + OFF["ONED"], 1 << 13 | 1 << 12 | 3 << 8)
    with pytest.raises(DeviceError, match=r"layer 0: CNNx16_0_L0_ONED"):
        decode_layer(dev.regs.view, range(4), 0)
    w32(dev, QB[0] + OFF["ONED"], 0)
    w32(dev, QB[0] + OFF["EN"] + 4 * 5, 0)
    with pytest.raises(DeviceError, match=r"layer 5: CNNx16_0_L5_EN"):
        decode_layer(dev.regs.view, range(4), 5)


# -- random layers programmed through registers ---------------------------------------------------


@st.composite
def specs(draw):
    procs = sorted(draw(st.sets(st.integers(0, 63), min_size=1, max_size=10)))
    rows, cols = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    pool_kind = draw(st.sampled_from(["none", "max", "avg"]))
    pool = (1, 1) if pool_kind == "none" else (draw(st.integers(1, rows)),
                                               draw(st.integers(1, cols)))
    pool_stride = draw(st.integers(1, 3))
    kernel = draw(st.sampled_from([1, 3]))
    pr = (rows - pool[0]) // pool_stride + 1
    pc = (cols - pool[1]) // pool_stride + 1
    pad = draw(st.integers(0 if min(pr, pc) >= kernel else 1, 2))
    k_n = draw(st.integers(1, 8))
    out_passes = draw(st.sampled_from([1, 1, 2]))
    first = draw(st.integers(0, 64 - k_n)) if out_passes == 1 else \
        4 * draw(st.integers(0, (64 - k_n) // 4))
    quads = sorted({p // 16 for p in procs})
    bias_q = draw(st.sampled_from([None] + quads))
    return Spec(in_procs=procs, in_passes=draw(st.integers(1, 3)), rows=rows, cols=cols,
                out_channels=k_n, out_first_proc=first, out_passes=out_passes, pad=pad,
                kernel=kernel, bits=draw(st.sampled_from([1, 2, 4, 8])), pool=pool,
                pool_kind=pool_kind, pool_stride=pool_stride,
                pool_round=draw(st.booleans()), shift=draw(st.integers(-15, 15)),
                act=draw(st.sampled_from(["none", "relu", "abs"])), wide=draw(st.booleans()),
                bias_quadrant=bias_q, bias_offset=draw(st.integers(0, 100)),
                layer=draw(st.integers(0, 31)), seed=draw(st.integers(0, 2**31)))


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(specs())
def test_random_layers_through_registers(s):
    dev, cfg, touched = run(s)
    assert touched.writes == written_ranges(s, cfg.out_rows * cfg.out_cols)
    # again with other data: the bytes a layer writes are kept with it after its first run
    s2 = replace(s, seed=s.seed + 1, tensors={})
    program(dev, s2)
    again = run_layer(dev.bus, cfg)
    want = expected(s2)
    np.testing.assert_array_equal(unload(dev, s2, want.shape), want)
    assert again.writes == touched.writes


def test_rerun_sees_every_kind_of_mram_change():
    # decoded weights are kept between runs of a layer (Memory.version): a gdb write to MRAM,
    # a snapshot restore and a zeroize must each be seen by the next run
    s = Spec(in_procs=[0, 1], in_passes=1, rows=3, cols=3, out_channels=2, out_first_proc=4,
             wide=True, seed=5)
    dev, cfg, _ = run(s)
    first = unload(dev, s, expected(s).shape)
    snap = dev.snapshot()
    # processor 0, kernel of output 0 at column 4: set k0 (byte 0) to w+1 -> output changes
    col = MRAM + 4 * 16
    old = dev.read(col, 1)[0]
    dev.write(col, bytes([(old + 1) & 0xFF]))
    run_layer(dev.bus, cfg)
    after_write = unload(dev, s, first.shape)
    x = s.tensors["x"]
    delta = int(np.uint8(old + 1 & 0xFF).view(np.int8)) - int(np.uint8(old).view(np.int8))
    want = first.copy()
    want[0, 1:, 1:] += delta * x[0, :-1, :-1]  # tap (0, 0) of a 3x3 pad-1 kernel
    np.testing.assert_array_equal(after_write, want)
    dev.restore(snap)
    run_layer(dev.bus, cfg)
    np.testing.assert_array_equal(unload(dev, s, first.shape), first)
    for p in range(64):  # what a zeroize does to each block
        dev.bus.memory_at(MRAM + (p // 16) * 0x40_0000 + (p % 16) * 0x4000)[0].clear()
    run_layer(dev.bus, cfg)
    assert not unload(dev, s, first.shape).any()  # no weights, no bias: all zero
