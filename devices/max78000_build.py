"""Build MAX78000 programs in the format ai8x-synthesis generates (cnn.c, cnn.h, weights.h,
main.c, sampledata.h, sampleoutput.h) from a small network description.

The project's own generator: tests and the bundled demo use it, since vendor-generated files are
never committed. It writes the statement forms that ai8xize.py emits (register stores, the
KERNELS record loop or KERNELS_n + memcpy32, memcpy_8to32 for bias, memcpy32 for the input, the
SAMPLE_OUTPUT block table of check_output), so the importer (max78000_import.py) reads both.

Register values are written from the seeds and digests, independently of the emulator's decoding
(nothing here imports devices/max78000_layer.py, max78000_datapath.py or emu/):

* register offsets: quadrant base 0x5010_0000 + q*0x40_0000, per-layer register R at
  ``base + R + 4*layer`` (S0 Table 27-18, digest registers section 2.2);
* fields: RCNT/CCNT = pad<<16 | (rows - 1 + 2*pad) (S0:L3056-3082); PRCNT/PCCNT = pool - 1,
  STRIDE = pool stride - 1 (S0:L3312-3392); WPTR_BASE bits 16:13 = data memory, 12:0 = word
  (R7#26); LCTRL0 master 5, pool_en 7, maxpl_en 8, act_en 9, sramlsrc 11, cnnsi_en 15:12,
  bigdwrt 16 (S0:L3657-3799); MCNT = sad<<16 | max (S0:L3838); EN = mask_en<<16 | pro_en
  (S0:L3934); POST bias 12 + bptr_sad 11:0, scale_reg 16:13, scale_shft 17 (1 = right),
  mask_size 23:22, out_abs 26 (S0:L3979-4122); LCTRL1 xpch_max 16:8, wptr_inc 7:4,
  inpchexp 3:0 (S0:L4159-4192); CTRL clk_en 3, oneshot 8, ext_sync 11:9, poolrnd 13,
  mexpress 20 (S0:L2109-2299);
* the values the public generator puts into them ([izer], ai8x-synthesis HEAD ab4f4c01, read for
  the facts only): mcnt_sad = 8*column (3x3) or 72*column (1x1), mcnt_max = sad + (steps-1)*bits
  with steps = output channels * input passes (mask step = out*passes + pass); xpch_max =
  (output processors per pass - 1)*bits; the first layer column of a layer is a multiple of 4
  (S3:L938); TPTR = output columns - 1 for 3x3 layers; LCTRL0 always has master and sramlsrc,
  maxpl_en unless average pooling; WPTR_TOFF = 1 and WPTR_CHOFF = 4 for 32-bit output; CTRL
  "Stop SM" = clk_en|mexpress, start = each used quadrant with ext_sync 0b100, the others with
  cnn_en, then quadrant 0 with cnn_en alone ("Master enable"); SRAM control 0x40e;
* memory layouts: HWC, channel c of a layer with P processors per pass is processor c % P in pass
  c // P, data memory p//4, byte lane p%4, word ``offset + pixel*passes + pass`` (S3:L681-691,
  L898); P = ceil(C / ceil(C/64)), rounded up to a multiple of 4 above 64 channels ([izer]);
  32-bit outputs take a word per channel, 4 channels of a quad in 4 consecutive words; MRAM
  72-bit words as k0..k8 (row-major 3x3; 1x1 kernels fill k8 down to k0; sub-8-bit weights at
  bit offset ``mask_counter & 7``), bias one byte per 32-bit BRAM word, added as bias*128.

The expected output (sampleoutput.h) comes from the independent integer reference in
max78000_reference.py.

Command line: ``python -m accelstub.devices.max78000_build --demo DIR`` writes the bundled
demo; ``python -m accelstub.devices.max78000_build --spec net.json DIR`` builds a network
described in JSON (``{"input": [C, H, W], "layers": [{...}, ...]}``, keys as in :class:`Layer`).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from . import max78000_reference as ref

QBASE = 0x5010_0000
QSTRIDE = 0x40_0000
SRAM = 0x5040_0000
MRAM = 0x5018_0000
BRAM = 0x5010_8000
AON = 0x5000_1000
MRAM_COLUMNS = 768
BIAS_ENTRIES = 512
HALF = 0x1000  # words: the two ping-pong buffers of every data memory at word 0 and 0x1000

# per-layer register offsets (S0 Table 27-18)
RCNT, CCNT, ONED, PRCNT, PCCNT, STRIDE = 0x010, 0x090, 0x110, 0x190, 0x210, 0x290
WPTR_BASE, WPTR_TOFF, WPTR_MOFF, WPTR_CHOFF = 0x310, 0x390, 0x410, 0x490
RPTR_BASE, LCTRL0, MCNT, TPTR, EN, POST, LCTRL1 = 0x510, 0x590, 0x610, 0x690, 0x710, 0x790, 0xA10
CTRL, SRAM_CTRL, LCNT_MAX = 0x000, 0x004, 0x008

WEIGHT_RANGE = {8: (-128, 127), 4: (-8, 7), 2: (-2, 1), 1: (-1, 0)}  # S3:L758-762
MASK_SIZE = {8: 0, 1: 1, 2: 2, 4: 3}  # POST.mask_size (S0:L4051)


class BuildError(ValueError):
    pass


@dataclass
class Layer:
    """One layer: optional pooling, then a 3x3 or 1x1 convolution (stride 1)."""

    out_channels: int
    kernel: int = 3  # 3 or 1
    pad: int = 1  # 0..2
    pool: str = "none"  # none | max | avg
    pool_size: int = 2
    pool_stride: int = 2
    shift: int = 0  # total output shift s of v = floor(acc * 2**s / 128 + 1/2), -15..15
    activation: str = "none"  # none | relu | abs
    weight_bits: int = 8  # 8, 4, 2, 1
    bias: bool = False
    wide: bool = False  # 32-bit output (last layer only, no activation)


@dataclass
class Network:
    in_channels: int
    in_rows: int
    in_cols: int
    layers: list[Layer]
    avg_pool_rounding: bool = False  # CTRL.poolrnd (global)
    name: str = "accelstub"

    @staticmethod
    def from_dict(d: dict) -> "Network":
        c, h, w = d["input"]
        names = {f.name for f in fields(Layer)}
        layers = []
        for i, ld in enumerate(d["layers"]):
            bad = set(ld) - names
            if bad:
                raise BuildError(f"layer {i}: unknown keys {sorted(bad)}")
            layers.append(Layer(**ld))
        return Network(c, h, w, layers, d.get("avg_pool_rounding", False),
                       d.get("name", "accelstub"))

    def to_dict(self) -> dict:
        return {"name": self.name, "input": [self.in_channels, self.in_rows, self.in_cols],
                "avg_pool_rounding": self.avg_pool_rounding,
                "layers": [asdict(lay) for lay in self.layers]}


def processors_per_pass(channels: int) -> tuple[int, int]:
    """(passes, processors per pass) for ``channels`` channels (S3:L685-691, L1668; [izer]
    in_expand = ceil(C/64), in_expand_thresh = ceil(C/in_expand) rounded up to 4 above 64)."""
    passes = -(-channels // 64)
    per = -(-channels // passes)
    if channels > 64:
        per = min(64, (per + 3) & ~3)
    return passes, per


def memory_address(m: int, word: int = 0) -> int:
    """CPU address of ``word`` of global data memory m = quadrant*4 + group (S3:L2391-2411)."""
    return SRAM + (m >> 2) * QSTRIDE + (m & 3) * 0x8000 + 4 * word


@dataclass
class _Plan:
    """Geometry of one layer, derived once."""

    index: int
    layer: Layer
    c_in: int
    rows: int
    cols: int
    passes_in: int
    per_in: int
    passes_out: int
    per_out: int
    pooled: tuple[int, int]
    out: tuple[int, int]
    in_word: int
    out_word: int
    column: int = 0  # first MRAM column
    columns: int = 0
    bias_offset: int = 0

    @property
    def steps(self) -> int:
        return self.layer.out_channels * self.passes_in

    @property
    def quadrants(self) -> list[int]:
        return sorted({p // 16 for p in range(self.per_in)})

    @property
    def mcnt_sad(self) -> int:
        return (8 if self.layer.kernel == 3 else 72) * self.column


@dataclass
class Project:
    """A generated program: file texts plus the arrays they encode."""

    network: Network
    files: dict[str, str]
    inputs: np.ndarray
    weights: list[np.ndarray]
    biases: list[np.ndarray | None]
    outputs: list[np.ndarray]  # reference output of every layer
    expected: list[tuple[int, int, int]]  # (address, value, mask)

    def write(self, directory: str | Path) -> Path:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        for name, text in self.files.items():
            (d / name).write_text(text, encoding="utf-8")
        return d


# -- planning ----------------------------------------------------------------------------------
def _plan(net: Network) -> list[_Plan]:
    if not 1 <= len(net.layers) <= 32:
        raise BuildError("a network has 1 to 32 layers (S3:L1024)")
    plans = []
    c, h, w = net.in_channels, net.in_rows, net.in_cols
    column = 0
    bias_offset = 0
    for i, lay in enumerate(net.layers):
        if lay.kernel not in (1, 3):
            raise BuildError(f"layer {i}: kernel must be 3 or 1")
        if not 0 <= lay.pad <= 2:
            raise BuildError(f"layer {i}: pad must be 0..2")
        if lay.weight_bits not in WEIGHT_RANGE:
            raise BuildError(f"layer {i}: weight_bits must be 8, 4, 2 or 1")
        if lay.activation not in ("none", "relu", "abs"):
            raise BuildError(f"layer {i}: activation must be none, relu or abs")
        if lay.pool not in ("none", "max", "avg"):
            raise BuildError(f"layer {i}: pool must be none, max or avg")
        if not -15 <= lay.shift <= 15:
            raise BuildError(f"layer {i}: total shift must be in [-15, 15] (S3:L1799)")
        if lay.wide and (i != len(net.layers) - 1 or lay.activation != "none"):
            raise BuildError(f"layer {i}: 32-bit output only on the last layer, without "
                             "activation (S3:L1708)")
        if not 1 <= lay.out_channels <= 1024 or not 1 <= c <= 1024:
            raise BuildError(f"layer {i}: 1..1024 channels (S3:L1022)")
        if lay.pool != "none":
            if not (1 <= lay.pool_size <= 16 and 1 <= lay.pool_stride <= 16):
                raise BuildError(f"layer {i}: pool size and stride 1..16")
            if lay.pool_size > min(h, w):
                raise BuildError(f"layer {i}: pool window larger than the input")
            ph = (h - lay.pool_size) // lay.pool_stride + 1
            pw = (w - lay.pool_size) // lay.pool_stride + 1
        else:
            ph, pw = h, w
        oh, ow = ph + 2 * lay.pad - lay.kernel + 1, pw + 2 * lay.pad - lay.kernel + 1
        if oh < 1 or ow < 1:
            raise BuildError(f"layer {i}: empty output")
        passes_in, per_in = processors_per_pass(c)
        passes_out, per_out = processors_per_pass(lay.out_channels)
        if passes_in > 16:
            raise BuildError(f"layer {i}: more than 16 input passes")
        in_word, out_word = (0, HALF) if i % 2 == 0 else (HALF, 0)
        if h * w * passes_in > HALF:
            raise BuildError(f"layer {i}: input {c}x{h}x{w} does not fit half a data memory")
        if oh * ow * passes_out * (4 if lay.wide else 1) > HALF:
            raise BuildError(f"layer {i}: output does not fit half a data memory")
        p = _Plan(i, lay, c, h, w, passes_in, per_in, passes_out, per_out, (ph, pw), (oh, ow),
                  in_word, out_word)
        nbits = p.steps * lay.weight_bits
        nbytes = -(-nbits // 8)
        p.column = column
        p.columns = nbytes if lay.kernel == 3 else -(-nbytes // 9)
        column += -(-p.columns // 4) * 4  # next layer starts at a multiple of 4 (S3:L938)
        if p.column + p.columns > MRAM_COLUMNS:
            raise BuildError(f"layer {i}: weights do not fit the 768 MRAM words")
        if lay.bias:
            p.bias_offset = bias_offset
            bias_offset += lay.out_channels
            if bias_offset > BIAS_ENTRIES:
                raise BuildError(f"layer {i}: bias does not fit quadrant 0's 512 bytes")
        plans.append(p)
        c, h, w = lay.out_channels, oh, ow
    return plans


# -- register values ---------------------------------------------------------------------------
def _layer_registers(net: Network, p: _Plan, used: list[int]) -> dict[int, list[tuple]]:
    """{quadrant: [(offset, value, comment)]} for one layer, zero values left out (as the
    generator does without --write-zero-registers)."""
    lay = p.layer
    bits = lay.weight_bits
    active = p.quadrants
    out: dict[int, list[tuple]] = {}
    pool_on = lay.pool != "none"
    wide = lay.wide
    for q in used:
        regs = []
        regs.append((RCNT, lay.pad << 16 | (p.rows - 1 + 2 * lay.pad), "Rows"))
        regs.append((CCNT, lay.pad << 16 | (p.cols - 1 + 2 * lay.pad), "Columns"))
        if pool_on:
            regs.append((PRCNT, lay.pool_size - 1, "Pooling rows"))
            regs.append((PCCNT, lay.pool_size - 1, "Pooling columns"))
            regs.append((STRIDE, lay.pool_stride - 1, "Stride"))
        regs.append((WPTR_BASE, p.out_word, "SRAM write ptr"))  # memory 0 (bits 16:13)
        if wide:
            regs.append((WPTR_TOFF, 1, "Write ptr time slot offs"))
        regs.append((WPTR_MOFF, 0x2000, "Write ptr mask offs"))  # next memory (+1 << 13)
        if p.passes_out > 1:
            regs.append((WPTR_CHOFF, 4 if wide else 1, "Write ptr multi-pass channel offs"))
        regs.append((RPTR_BASE, p.in_word, "SRAM read ptr"))
        lctrl0 = 0x20 | 0x800  # master, sramlsrc
        if pool_on:
            lctrl0 |= 0x80
        if lay.pool != "avg":
            lctrl0 |= 0x100
        if lay.activation == "relu":
            lctrl0 |= 0x200
        if wide:
            lctrl0 |= 1 << 16
        if q == active[0]:
            for other in active[1:]:
                lctrl0 |= 1 << (12 + other)
        regs.append((LCTRL0, lctrl0, "Layer control"))
        xpch = (p.per_out - 1) * bits
        regs.append((LCTRL1, xpch << 8 | (p.passes_out - 1) << 4 | (p.passes_in - 1),
                     "Layer control 2"))
        sad = p.mcnt_sad
        regs.append((MCNT, sad << 16 | (sad + (p.steps - 1) * bits), "Mask offset and count"))
        if lay.kernel == 3:
            regs.append((TPTR, p.out[1] - 1, "TRAM ptr max"))
        else:
            regs.append((ONED, 0x100, "1D"))
        post = MASK_SIZE[bits] << 22
        if not wide and lay.shift:
            post |= (abs(lay.shift) << 13) | ((1 << 17) if lay.shift < 0 else 0)
        if lay.activation == "abs":
            post |= 1 << 26
        if lay.bias and q == 0:
            post |= 1 << 12 | p.bias_offset
        regs.append((POST, post, "Post processing register"))
        if q in active:
            pro = sum(1 << (x % 16) for x in range(p.per_in) if x // 16 == q)
            regs.append((EN, pro << 16 | pro, "Mask and processor enables"))
        out[q] = [(off, v, c) for off, v, c in regs if v]
    return out


# -- memory images -----------------------------------------------------------------------------
def _kernel_columns(plans: list[_Plan], weights: list[np.ndarray]) -> dict[int, dict[int, bytes]]:
    """{processor: {column: 9 bytes k0..k8}} for every layer."""
    mem: dict[int, dict[int, bytearray]] = {}
    for p, w in zip(plans, weights):
        lay = p.layer
        bits = lay.weight_bits
        fmask = (1 << bits) - 1
        for j in range(p.per_in):
            cols = mem.setdefault(j, {})
            for c in range(p.column, p.column + p.columns):
                cols.setdefault(c, bytearray(9))
            for t in range(lay.out_channels):
                for e in range(p.passes_in):
                    ch = e * p.per_in + j
                    step = t * p.passes_in + e
                    cnt = p.mcnt_sad + step * bits  # mask counter: a bit address (R7#24)
                    off = cnt & 7
                    if ch >= p.c_in:
                        continue
                    if lay.kernel == 3:
                        k = cols[cnt >> 3]
                        flat = w[t, ch].reshape(9)
                        for i in range(9):
                            k[i] |= (int(flat[i]) & fmask) << off
                    else:
                        b = cnt >> 3  # byte address in the 9-byte words, filled k8 down to k0
                        cols[b // 9][8 - b % 9] |= (int(w[t, ch, 0, 0]) & fmask) << off
    return {p: {c: bytes(k) for c, k in cols.items()} for p, cols in mem.items()}


def _mram_block(p: int) -> int:
    return MRAM + (p // 16) * QSTRIDE + (p % 16) * 0x4000


def _pack(kernels: list[bytes]) -> list[int]:
    """9-byte kernels as a big-endian 32-bit word stream, last word left-aligned ([izer])."""
    raw = b"".join(kernels)
    raw += bytes(-len(raw) % 4)
    return [int.from_bytes(raw[i:i + 4], "big") for i in range(0, len(raw), 4)]


def _plain(k: bytes) -> list[int]:
    return [k[0], k[1] << 24 | k[2] << 16 | k[3] << 8 | k[4],
            k[5] << 24 | k[6] << 16 | k[7] << 8 | k[8], 0]


def _runs(columns: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for c in sorted(columns):
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return runs


# -- text helpers ------------------------------------------------------------------------------
HEADER = ("// {name}\n// This file was generated by accelstub (devices/max78000_build.py) in the "
          "format of ai8x-synthesis' ai8xize.py.\n\n")


def _define(name: str, values: list[int], fmt: str = "0x{:08x}", per_line: int = 8) -> str:
    items = [fmt.format(v) for v in values]
    lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    return f"#define {name} {{ \\\n" + ", \\\n".join(f"  {ln}" for ln in lines) + " \\\n}\n"


def _st(addr: int, value: int, comment: str = "", width: int = 32) -> str:
    c = f" // {comment}" if comment else ""
    if width == 8:
        return f"  *((volatile uint8_t *) 0x{addr:08x}) = 0x{value:02x};{c}\n"
    return f"  *((volatile uint32_t *) 0x{addr:08x}) = 0x{value:08x};{c}\n"


def _describe(p: _Plan) -> str:
    lay = p.layer
    pool = "no pooling" if lay.pool == "none" else (
        f"{lay.pool} pool {lay.pool_size}x{lay.pool_size} with stride "
        f"{lay.pool_stride}/{lay.pool_stride}")
    act = {"none": "no activation", "relu": "ReLU", "abs": "Abs"}[lay.activation]
    return (f"// Layer {p.index}: {p.c_in}x{p.rows}x{p.cols}, {pool}, conv2d with kernel size "
            f"{lay.kernel}x{lay.kernel}, stride 1/1, pad {lay.pad}/{lay.pad}, {act}, "
            f"{lay.out_channels}x{p.out[0]}x{p.out[1]} output"
            f"{' (32-bit)' if lay.wide else ''}\n")


# -- the build ---------------------------------------------------------------------------------
def random_arrays(net: Network, seed: int = 0):
    """Random int8 input, weights in each layer's range, biases (or None)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (net.in_channels, net.in_rows, net.in_cols), dtype=np.int64)
    ws, bs = [], []
    c = net.in_channels
    for lay in net.layers:
        lo, hi = WEIGHT_RANGE[lay.weight_bits]
        ws.append(rng.integers(lo, hi + 1, (lay.out_channels, c, lay.kernel, lay.kernel),
                               dtype=np.int64))
        bs.append(rng.integers(-128, 128, lay.out_channels, dtype=np.int64) if lay.bias
                  else None)
        c = lay.out_channels
    return x, ws, bs


def reference_outputs(net: Network, x, ws, bs) -> list[np.ndarray]:
    policy = "away" if net.avg_pool_rounding else "trunc"  # digest A3 (izer HEAD)
    outs = []
    for lay, w, b in zip(net.layers, ws, bs):
        x = ref.layer(x, w, b, pool_size=(lay.pool_size, lay.pool_size) if lay.pool != "none"
                      else (1, 1), pool_stride=lay.pool_stride if lay.pool != "none" else 1,
                      pool_kind=lay.pool, avg_policy=policy, pad=(lay.pad, lay.pad),
                      shift=lay.shift, act=lay.activation, wide=lay.wide)
        outs.append(x)
    return outs


def build(net: Network, x=None, weights=None, biases=None, *, seed: int = 0,
          mexpress: bool = True, loader: str = "new", one_shot: bool = False) -> Project:
    """Generate the project files. Arrays not given are random (``seed``). ``loader``: "new"
    (the KERNELS record loop, ai8xize's default) or "old" (KERNELS_n + memcpy32 /
    memcpy_96to128)."""
    plans = _plan(net)
    rx, rw, rb = random_arrays(net, seed)
    x = np.asarray(rx if x is None else x, dtype=np.int64)
    weights = [np.asarray(w, dtype=np.int64) for w in (rw if weights is None else weights)]
    biases = [None if b is None else np.asarray(b, dtype=np.int64)
              for b in (rb if biases is None else biases)]
    if x.shape != (net.in_channels, net.in_rows, net.in_cols):
        raise BuildError(f"input shape {x.shape} != {(net.in_channels, net.in_rows, net.in_cols)}")
    for p, w, b in zip(plans, weights, biases):
        lay = p.layer
        shape = (lay.out_channels, p.c_in, lay.kernel, lay.kernel)
        if w.shape != shape:
            raise BuildError(f"layer {p.index}: weights shape {w.shape} != {shape}")
        lo, hi = WEIGHT_RANGE[lay.weight_bits]
        if w.size and (w.min() < lo or w.max() > hi):
            raise BuildError(f"layer {p.index}: weights outside [{lo}, {hi}]")
        if lay.bias != (b is not None):
            raise BuildError(f"layer {p.index}: bias given/missing against the description")
    if np.any(x < -128) or np.any(x > 127):
        raise BuildError("input values outside int8")
    outs = reference_outputs(net, x, weights, biases)
    last = plans[-1]

    used = sorted({q for p in plans for q in p.quadrants}
                  | {m // 4 for p in plans for m in range(-(-p.per_out // 4))})
    ctl = (1 << 3) | ((1 << 20) if mexpress else 0) | ((1 << 8) if one_shot else 0) \
        | ((1 << 13) if net.avg_pool_rounding else 0)
    qb = [QBASE + q * QSTRIDE for q in range(4)]
    files: dict[str, str] = {}
    name = net.name

    # -- weights.h: kernels and bias ----------------------------------------------------------
    kern = _kernel_columns(plans, weights)
    wh = HEADER.format(name=name)
    kernel_decl = ""
    load_weights = ""
    if loader == "new":
        recs: list[int] = []
        for proc in sorted(kern):
            block = _mram_block(proc)
            for run in _runs(list(kern[proc])):
                ks = [kern[proc][c] for c in run]
                if mexpress:
                    words = _pack(ks)
                    recs += [block + run[0] * 4, len(words)] + words
                else:
                    words = [v for k in ks for v in _plain(k)]
                    recs += [block + run[0] * 16, len(words)] + words
        recs.append(0)
        wh += _define("KERNELS", recs)
        kernel_decl = "static const uint32_t kernels[] = KERNELS;\n\n"
        load_weights = ("int cnn_load_weights(void)\n{\n  uint32_t len;\n"
                        "  volatile uint32_t *addr;\n  const uint32_t *ptr = kernels;\n\n"
                        "  while ((addr = (volatile uint32_t *) *ptr++) != 0) {\n"
                        + ("    *((volatile uint8_t *) ((uint32_t) addr | 1)) = 0x01; "
                           "// Set address\n" if mexpress else "")
                        + "    len = *ptr++;\n    while (len-- > 0)\n      *addr++ = *ptr++;\n"
                        "  }\n\n  return CNN_OK;\n}\n\n")
    elif loader == "old":
        kernel_decl = "// Kernels:\n"
        body = ""
        for proc in sorted(kern):
            block = _mram_block(proc)
            lo, hi = min(kern[proc]), max(kern[proc])
            ks = [kern[proc].get(c, bytes(9)) for c in range(lo, hi + 1)]
            if mexpress:
                words = _pack(ks)
                body += _st(block + lo * 4 | 1, 1, "Set address", 8)
                body += f"  memcpy32((uint32_t *) 0x{block:08x}, kernels_{proc}, {len(words)});\n"
            else:
                words = [v for k in ks for v in _plain(k)[:3]]
                body += (f"  memcpy_96to128((uint32_t *) 0x{block + lo * 16:08x}, "
                         f"kernels_{proc}, {len(ks)});\n")
            wh += _define(f"KERNELS_{proc}", words)
            kernel_decl += f"static const uint32_t kernels_{proc}[] = KERNELS_{proc};\n"
        kernel_decl += "\n"
        if not mexpress:
            kernel_decl += ("void memcpy_96to128(uint32_t *dst, const uint32_t *src, int n)\n{\n"
                            "  while (n-- > 0) {\n    *dst++ = *src++;\n    *dst++ = *src++;\n"
                            "    *dst++ = *src++;\n    *dst++ = 0;  // Execute write\n  }\n}\n\n")
        load_weights = f"int cnn_load_weights(void)\n{{\n{body}\n  return CNN_OK;\n}}\n\n"
    else:
        raise BuildError(f"loader must be 'new' or 'old', not {loader!r}")
    bias_bytes = []
    for p, b in zip(plans, biases):
        if b is not None:
            bias_bytes += [int(v) & 0xFF for v in b]
    if bias_bytes:
        wh += _define("BIAS_0", bias_bytes, "0x{:02x}")
    files["weights.h"] = wh

    # -- cnn.c ---------------------------------------------------------------------------------
    c = HEADER.format(name=name) + "// Regenerate with devices/max78000_build.py rather than editing.\n\n"
    c += f"// Configuring {len(plans)} layer{'s' if len(plans) > 1 else ''}\n// Input data: HWC\n"
    c += "".join(_describe(p) for p in plans)
    c += ('\n#include <stdlib.h>\n#include <stdint.h>\n#include <string.h>\n#include <stdio.h>\n'
          '#include "mxc.h"\n#include "gcfr_regs.h"\n#include "cnn.h"\n#include "weights.h"\n\n')
    c += "void CNN_ISR(void)\n{\n  // Acknowledge interrupt to all quadrants\n"
    for q in used:
        c += f"  *((volatile uint32_t *) 0x{qb[q]:08x}) &= ~((1<<12) | 1);\n"
    c += ("\n  CNN_COMPLETE; // Signal that processing is complete\n#ifdef CNN_INFERENCE_TIMER\n"
          "  cnn_time = MXC_TMR_SW_Stop(CNN_INFERENCE_TIMER);\n#else\n  cnn_time = 1;\n"
          "#endif\n}\n\n")
    c += ("int cnn_continue(void)\n{\n  cnn_time = 0;\n\n"
          f"  *((volatile uint32_t *) 0x{qb[0]:08x}) |= 1; // Re-enable quadrant 0\n\n"
          "  return CNN_OK;\n}\n\n")
    c += ("int cnn_stop(void)\n{\n"
          f"  *((volatile uint32_t *) 0x{qb[0]:08x}) &= ~1; // Disable quadrant 0\n\n"
          "  return CNN_OK;\n}\n\n")
    c += ("void memcpy32(uint32_t *dst, const uint32_t *src, int n)\n{\n  while (n-- > 0) {\n"
          "    *dst++ = *src++;\n  }\n}\n\n")
    c += kernel_decl + load_weights
    if bias_bytes:
        c += ("static const uint8_t bias_0[] = BIAS_0;\n\n"
              "static void memcpy_8to32(uint32_t *dst, const uint8_t *src, int n)\n{\n"
              "  while (n-- > 0) {\n    *dst++ = *src++;\n  }\n}\n\n"
              "int cnn_load_bias(void)\n{\n"
              f"  memcpy_8to32((uint32_t *) 0x{BRAM:08x}, bias_0, sizeof(uint8_t) * "
              f"{len(bias_bytes)});\n\n  return CNN_OK;\n}}\n\n")
    else:
        c += "int cnn_load_bias(void)\n{\n  // Not used in this network\n  return CNN_OK;\n}\n\n"
    c += "int cnn_init(void)\n{\n" + _st(AON, 0, "AON control")
    for q in used:
        c += _st(qb[q] + CTRL, ctl, "Stop SM")
        c += _st(qb[q] + SRAM_CTRL, 0x40E, "SRAM control")
        c += _st(qb[q] + LCNT_MAX, len(plans) - 1, "Layer count")
    c += "\n  return CNN_OK;\n}\n\nint cnn_configure(void)\n{\n"
    for p in plans:
        for q, regs in _layer_registers(net, p, used).items():
            c += f"  // Layer {p.index} quadrant {q}\n"
            for off, v, what in regs:
                c += _st(qb[q] + off + 4 * p.index, v, what)
            c += "\n"
    c += "\n  return CNN_OK;\n}\n\nint cnn_start(void)\n{\n  cnn_time = 0;\n\n"
    for q in used:
        c += _st(qb[q] + CTRL, ctl | (0x800 if q == 0 else 0x801), f"Enable quadrant {q}")
    c += ("\n#ifdef CNN_INFERENCE_TIMER\n  MXC_TMR_SW_Start(CNN_INFERENCE_TIMER);\n#endif\n\n"
          "  CNN_START; // Allow capture of processing time\n")
    c += _st(qb[0] + CTRL, ctl | 1, "Master enable quadrant 0")
    c += "\n  return CNN_OK;\n}\n\n"
    c += _unload_text(last)
    c += ("int cnn_enable(uint32_t clock_source, uint32_t clock_divider)\n{\n"
          "  // Reset all domains, restore power to CNN\n"
          "  MXC_GCFR->reg3 = 0xf; // Reset\n  MXC_GCFR->reg1 = 0xf; // Mask memory\n"
          "  MXC_GCFR->reg0 = 0xf; // Power\n  MXC_GCFR->reg2 = 0x0; // Iso\n"
          "  MXC_GCFR->reg3 = 0x0; // Reset\n\n"
          "  MXC_GCR->pclkdiv = (MXC_GCR->pclkdiv & ~(MXC_F_GCR_PCLKDIV_CNNCLKDIV | "
          "MXC_F_GCR_PCLKDIV_CNNCLKSEL))\n                     | clock_divider | clock_source;\n"
          "  MXC_SYS_ClockEnable(MXC_SYS_PERIPH_CLOCK_CNN); // Enable CNN clock\n\n"
          "  MXC_NVIC_SetVector(CNN_IRQn, CNN_ISR); // Set CNN complete vector\n\n"
          "  return CNN_OK;\n}\n\n"
          "int cnn_disable(void)\n{\n  // Disable CNN clock\n"
          "  MXC_SYS_ClockDisable(MXC_SYS_PERIPH_CLOCK_CNN);\n\n  // Disable power to CNN\n"
          "  MXC_GCFR->reg3 = 0xf; // Reset\n  MXC_GCFR->reg2 |= 0xf; // Iso\n"
          "  MXC_GCFR->reg0 = 0x0; // Power\n  MXC_GCFR->reg1 = 0x0; // Mask memory\n"
          "  MXC_GCFR->reg3 = 0x0; // Reset\n\n  return CNN_OK;\n}\n")
    files["cnn.c"] = c

    # -- sampledata.h and load_input -------------------------------------------------------------
    p0 = plans[0]
    sd = HEADER.format(name=name)
    decls, loads = "", ""
    h, w = net.in_rows, net.in_cols
    for m in range(-(-p0.per_in // 4)):
        words = []
        for pix in range(h * w):
            r, col = divmod(pix, w)
            for e in range(p0.passes_in):
                v = 0
                for lane in range(4):
                    proc = 4 * m + lane
                    ch = e * p0.per_in + proc
                    if proc < p0.per_in and ch < net.in_channels:
                        v |= (int(x[ch, r, col]) & 0xFF) << (8 * lane)
                words.append(v)
        first = 4 * m
        last_ch = min(4 * m + 3, p0.per_in - 1)
        sd += _define(f"SAMPLE_INPUT_{first}", words)
        decls += (f"// HWC {h}x{w}, channels {first} to {last_ch}\n"
                  f"static const uint32_t input_{first}[] = SAMPLE_INPUT_{first};\n\n")
        loads += (f"  memcpy32((uint32_t *) 0x{memory_address(m, p0.in_word):08x}, "
                  f"input_{first}, {len(words)});\n")
    files["sampledata.h"] = sd

    # -- expected output (sampleoutput.h) ------------------------------------------------------
    y = outs[-1]
    expected = _expected(last, y)
    data = sorted((mask, addr, val) for addr, val, mask in expected)
    table: list[int] = []
    block: list[int] = []
    b_addr = b_mask = nxt = None
    for mask, addr, val in data:
        if mask != b_mask or addr != nxt:
            if block:
                table += [b_addr, b_mask, len(block)] + block
            block, b_addr, b_mask = [], addr, mask
            nxt = addr
        block.append(val)
        nxt += 4
    if block:
        table += [b_addr, b_mask, len(block)] + block
    table.append(0)
    files["sampleoutput.h"] = HEADER.format(name=name) + _define("SAMPLE_OUTPUT", table)

    n_out = last.layer.out_channels * last.out[0] * last.out[1]
    files["cnn.h"] = (HEADER.format(name=name) + "#ifndef __CNN_H__\n#define __CNN_H__\n\n"
                      "#include <stdint.h>\n\n#define CNN_FAIL 0\n#define CNN_OK 1\n\n"
                      "/* Number of outputs for this network */\n"
                      f"#define CNN_NUM_OUTPUTS {n_out}\n\n"
                      "extern volatile uint32_t cnn_time;\n\n"
                      "void memcpy32(uint32_t *dst, const uint32_t *src, int n);\n"
                      "int cnn_enable(uint32_t clock_source, uint32_t clock_divider);\n"
                      "int cnn_disable(void);\nint cnn_init(void);\nint cnn_configure(void);\n"
                      "int cnn_load_weights(void);\nint cnn_load_bias(void);\n"
                      "int cnn_start(void);\nint cnn_stop(void);\nint cnn_continue(void);\n"
                      "int cnn_unload(uint32_t *out_buf);\n\n#endif // __CNN_H__\n")

    mc = HEADER.format(name=name)
    mc += ('#include <stdlib.h>\n#include <stdint.h>\n#include <string.h>\n#include <stdio.h>\n'
           '#include "mxc.h"\n#include "cnn.h"\n#include "sampledata.h"\n'
           '#include "sampleoutput.h"\n\nvolatile uint32_t cnn_time; // Stopwatch\n\n'
           'void fail(void)\n{\n  printf("\\n*** FAIL ***\\n\\n");\n  while (1);\n}\n\n')
    mc += decls
    mc += ("void load_input(void)\n{\n  // This function loads the sample data input -- "
           "replace with actual data\n\n" + loads + "}\n\n")
    mc += (f"// Expected output of layer {last.index} for {name} given the sample input "
           "(known-answer test)\n// Delete this function for production code\n"
           "static const uint32_t sample_output[] = SAMPLE_OUTPUT;\nint check_output(void)\n{\n"
           "  int i;\n  uint32_t mask, len;\n  volatile uint32_t *addr;\n"
           "  const uint32_t *ptr = sample_output;\n\n"
           "  while ((addr = (volatile uint32_t *) *ptr++) != 0) {\n    mask = *ptr++;\n"
           "    len = *ptr++;\n    for (i = 0; i < len; i++)\n"
           "      if ((*addr++ & mask) != *ptr++) {\n"
           '        printf("Data mismatch (%d/%d) at address 0x%08x: Expected 0x%08x, read '
           '0x%08x.\\n",\n               i + 1, len, addr - 1, *(ptr - 1), *(addr - 1) & mask);\n'
           "        return CNN_FAIL;\n      }\n  }\n\n  return CNN_OK;\n}\n\n")
    mc += ("int main(void)\n{\n"
           + ("  int i;\n\n" if one_shot else "")
           + "  MXC_ICC_Enable(MXC_ICC0); // Enable cache\n\n"
           "  // Switch to 100 MHz clock\n  MXC_SYS_Clock_Select(MXC_SYS_CLOCK_IPO);\n"
           "  SystemCoreClockUpdate();\n\n  printf(\"Waiting...\\n\");\n\n"
           "  // DO NOT DELETE THIS LINE:\n"
           "  MXC_Delay(SEC(2)); // Let debugger interrupt if needed\n\n"
           "  // Enable peripheral, enable CNN interrupt, turn on CNN clock\n"
           "  // CNN clock: APB (50 MHz) div 1\n"
           "  cnn_enable(MXC_S_GCR_PCLKDIV_CNNCLKSEL_PCLK, MXC_S_GCR_PCLKDIV_CNNCLKDIV_DIV1);\n\n"
           f"  printf(\"\\n*** CNN Inference Test {name} ***\\n\");\n\n"
           "  cnn_init(); // Bring state machine into consistent state\n"
           "  cnn_load_weights(); // Load kernels\n  cnn_load_bias();\n"
           "  cnn_configure(); // Configure state machine\n  load_input(); // Load data input\n"
           "  cnn_start(); // Start CNN processing\n\n"
           "  while (cnn_time == 0)\n    MXC_LP_EnterSleepMode(); // Wait for CNN\n\n")
    if one_shot and len(plans) > 1:
        mc += (f"  for (i = 0; i < {len(plans) - 1}; i++) {{\n    cnn_continue();\n"
               "    while (cnn_time == 0)\n      MXC_LP_EnterSleepMode(); // Wait for CNN\n"
               "  }\n\n")
    mc += ("  if (check_output() != CNN_OK) fail();\n\n  printf(\"\\n*** PASS ***\\n\\n\");\n\n"
           "  cnn_disable(); // Shut down CNN clock, disable peripheral\n\n  return 0;\n}\n")
    files["main.c"] = mc
    return Project(net, files, x, weights, biases, outs, expected)


def _out_location(p: _Plan, ch: int, pix: int) -> tuple[int, int, int]:
    """(address, byte lane or -1 for a whole word) of output channel ``ch`` at pixel ``pix``."""
    e, k = divmod(ch, p.per_out)
    m = k // 4
    if p.layer.wide:
        word = p.out_word + (pix * p.passes_out + e) * 4 + k % 4
        return memory_address(m, word), -1
    word = p.out_word + pix * p.passes_out + e
    return memory_address(m, word), k % 4


def _expected(p: _Plan, y: np.ndarray) -> list[tuple[int, int, int]]:
    words: dict[int, list[int]] = {}
    for ch in range(y.shape[0]):
        for pix in range(y.shape[1] * y.shape[2]):
            r, col = divmod(pix, y.shape[2])
            addr, lane = _out_location(p, ch, pix)
            v = int(y[ch, r, col])
            if lane < 0:
                words[addr] = [v & 0xFFFFFFFF, 0xFFFFFFFF]
            else:
                ent = words.setdefault(addr, [0, 0])
                ent[0] |= (v & 0xFF) << (8 * lane)
                ent[1] |= 0xFF << (8 * lane)
    return [(a, v, m) for a, (v, m) in sorted(words.items())]


def _unload_text(p: _Plan) -> str:
    """cnn_unload(): read the last layer's output words, as the generator's custom unload."""
    lay = p.layer
    s = ("int cnn_unload(uint32_t *out_buf)\n{\n  volatile uint32_t *addr;\n\n"
         f"  // Custom unload for this network, layer {p.index}: "
         f"{'32' if lay.wide else '8'}-bit data, shape: ({lay.out_channels}, {p.out[0]}, "
         f"{p.out[1]})\n")
    for m in range(-(-p.per_out // 4)):
        n = p.out[0] * p.out[1] * p.passes_out * (4 if lay.wide else 1)
        s += f"  addr = (volatile uint32_t *) 0x{memory_address(m, p.out_word):08x};\n"
        s += "  *out_buf++ = *addr++;\n" * min(n, 4)
        if n > 4:
            s += f"  // ... {n - 4} more words\n"
    return s + "\n  return CNN_OK;\n}\n\n"


# -- the bundled demo --------------------------------------------------------------------------
def demo_network() -> Network:
    """3x16x16 -> conv 3x3 16 ch ReLU -> maxpool 2/2 + conv 3x3 8 ch ReLU -> 1x1 4 ch 32-bit."""
    return Network(3, 16, 16, [
        Layer(16, kernel=3, pad=1, activation="relu", shift=-1, bias=True),
        Layer(8, kernel=3, pad=1, pool="max", pool_size=2, pool_stride=2, activation="relu",
              shift=-1, bias=True),
        Layer(4, kernel=1, pad=0, wide=True, bias=True),
    ], name="max78000_demo")


def build_demo() -> Project:
    net = demo_network()
    rng = np.random.default_rng(78000)
    x = rng.integers(-128, 128, (3, 16, 16), dtype=np.int64)
    ws, bs = [], []
    c = 3
    for lay in net.layers:
        # small weights keep the 8-bit activations inside the clamp range for a readable demo
        ws.append(rng.integers(-24, 25, (lay.out_channels, c, lay.kernel, lay.kernel),
                               dtype=np.int64))
        bs.append(rng.integers(-16, 17, lay.out_channels, dtype=np.int64))
        c = lay.out_channels
    return build(net, x, ws, bs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m accelstub.devices.max78000_build",
                                 description="write a MAX78000 program in ai8xize.py's format")
    ap.add_argument("directory")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--demo", action="store_true", help="the bundled demo network")
    g.add_argument("--spec", help="JSON network description")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-mexpress", action="store_true")
    ap.add_argument("--old-kernel-loader", action="store_true")
    ap.add_argument("--one-shot", action="store_true")
    args = ap.parse_args(argv)
    try:
        if args.demo:
            proj = build_demo()
        else:
            net = Network.from_dict(json.loads(Path(args.spec).read_text()))
            proj = build(net, seed=args.seed, mexpress=not args.no_mexpress,
                         loader="old" if args.old_kernel_loader else "new",
                         one_shot=args.one_shot)
    except (BuildError, OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    d = proj.write(args.directory)
    print(f"wrote {d} ({len(proj.network.layers)} layers, {len(proj.expected)} expected words)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
