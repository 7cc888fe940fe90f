"""Build MAX78000 programs in the format ai8x-synthesis generates (cnn.c, cnn.h, weights.h,
main.c, sampledata.h, sampleoutput.h) from a small network description.

The project's own generator: tests and the bundled demo use it, since vendor-generated files are
never committed. It writes the statement forms that ai8xize.py emits (register stores, the
KERNELS record loop or KERNELS_n + memcpy32, memcpy_8to32 for bias, memcpy32 for the input, the
SAMPLE_OUTPUT block table of check_output), so the importer (ai8x.py) reads both.

Register values are written from the documents (docs/citations.md), independently of the emulator's
decoding (nothing here imports devices/ or emu/):

* register offsets: quadrant base 0x5010_0000 + q*0x40_0000, per-layer register R at
  ``base + R + 4*layer`` (S0 Table 27-18, [UG-CNN: Table 27-18]);
* fields: RCNT/CCNT = pad<<16 | (rows - 1 + 2*pad) [UG-CNN: Table 27-23]; PRCNT/PCCNT = pool - 1,
  STRIDE = pool stride - 1 [UG-CNN: CNNx16_n Per Layer Registers (CNNx16_n_Ly)]; WPTR_BASE bits
  16:13 = data memory, 12:0 = word (R7#26); LCTRL0 master 5, pool_en 7, maxpl_en 8, act_en 9,
  sramlsrc 11, cnnsi_en 15:12, bigdwrt 16 [UG-CNN: Table 27-34]; MCNT = sad<<16 | max
  [UG-CNN: Table 27-35]; EN = mask_en<<16 | pro_en [UG-CNN: Table 27-37]; POST bias 12 + bptr_sad
  11:0, scale_reg 16:13, scale_shft 17 (1 = right), mask_size 23:22, out_abs 26
  [UG-CNN: Table 27-38]; LCTRL1 xpch_max 16:8, wptr_inc 7:4, inpchexp 3:0 [UG-CNN: Table 27-39];
  CTRL clk_en 3, oneshot 8, ext_sync 11:9, poolrnd 13, mexpress 20 [UG-CNN: Table 27-19];
* the values the public generator puts into them ([izer], ai8x-synthesis HEAD ab4f4c01, read for
  the facts only): mcnt_sad = 8*column (3x3) or 72*column (1x1), mcnt_max = sad + (steps-1)*bits
  with steps = output channels * input passes (mask step = out*passes + pass); xpch_max =
  (output processors per pass - 1)*bits; the first layer column of a layer is a multiple of 4
  [AI8X: Layers and Weight Memory]; TPTR = output columns - 1 for 3x3 layers; LCTRL0 always has
  master and sramlsrc, maxpl_en unless average pooling; WPTR_TOFF = 1 for 1x1 and linear layers;
  WPTR_CHOFF = 4 for 32-bit output (1 for 8-bit) with more than one output pass; CTRL
  "Stop SM" = clk_en|mexpress, start = each used quadrant with ext_sync 0b100, the others with
  cnn_en, then quadrant 0 with cnn_en alone ("Master enable"); SRAM control 0x40e;
* memory layouts: HWC, channel c of a layer with P processors per pass is processor c % P in pass
  c // P, data memory p//4, byte lane p%4, word ``offset + pixel*passes + pass``
  ([AI8X: Data Memory, Multi-Pass], [UG-CNN: Table 27-5]); P = ceil(C / ceil(C/64)), rounded up to a
  multiple of 4 above 64 channels ([izer]); 32-bit outputs take a word per channel, 4 channels of a
  quad in 4 consecutive words; MRAM 72-bit words as k0..k8 (row-major 3x3; 1x1 kernels fill k8 down
  to k0; sub-8-bit weights at bit offset ``mask_counter & 7``), bias one byte per 32-bit BRAM word,
  added as bias*128.

Layer kinds (``Layer.op``): conv2d, conv1d, deconv (transposed 3x3, stride 2), linear (with
flattening), passthrough; element-wise operations on the first layer (``Layer.operands``); CHW
input (``Network.chw``). The register fields of each are listed in :func:`_layer_registers`,
the mask byte stream shared by all kernel sizes in :func:`_kernel_columns`.

The expected output (sampleoutput.h) comes from the independent integer reference in
max78000_reference.py.

Command line: ``python -m accelstub.testkit.max78000_build --demo DIR`` writes the bundled
demo; ``python -m accelstub.testkit.max78000_build --spec net.json DIR`` builds a network
described in JSON (``{"input": [C, H, W], "layers": [{...}, ...]}``, keys as in :class:`Layer`).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field, fields
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

WEIGHT_RANGE = {8: (-128, 127), 4: (-8, 7), 2: (-2, 1), 1: (-1, 0)}  # [AI8X: Number Format]
MASK_SIZE = {8: 0, 1: 1, 2: 2, 4: 3}  # POST.mask_size [UG-CNN: Table 27-38]


class BuildError(ValueError):
    pass


@dataclass
class Layer:
    """One layer: optional element-wise operation and pooling, then the operation ``op``.

    * ``conv2d``: 3x3 or 1x1 kernel, pad 0..2, stride 1 [AI8X: Limitations of MAX78000 Networks];
    * ``conv1d``: a kernel of 1..9 taps along the rows of an H x 1 input, pad 0..3
      ([AI8X: Limitations of MAX78000 Networks], A A2; RCNT holds the length, CCNT 0:
      [UG-CNN: Table 27-25] "if rcnt_max is non-zero, the row count is used");
    * ``deconv``: transposed 3x3 convolution, stride 2 ([AI8X: Limitations of MAX78000 Networks],
      "ConvTranspose2d 3x3, stride 2"): the input is zero-stuffed to 2H x 2W (POST.deconv_en,
      [UG-CNN: Table 27-38]) and convolved with the kernel as stored, padded by ``pad`` (the
      hardware pad; PyTorch padding 1 with output padding 1 is ``pad=1`` and gives 2H x 2W).
      ``weights`` are the kernels the hardware applies (ai8x-synthesis flips a checkpoint's
      ConvTranspose2d weights before storing them);
    * ``linear``: fully connected over the flattened C*H*W input
      [AI8X: Limitations of MAX78000 Networks], kernel 1, pad 0, weights ``[out, C*H*W, 1, 1]`` in
      PyTorch's flatten order (c*H*W + pixel); with H*W > 1 the pixels become passes
      (POST.flatten_en, [UG-CNN: Table 27-38]);
    * ``passthrough``: no convolution (POST.onexone_en without mask_en, [UG-CNN: Table 27-38]); the
      output is the pooled input, so ``out_channels`` must equal the input channels, and like
      the public generator we refuse pad, shift, activation and bias there.

    ``operands`` > 1 (2..16, [AI8X: Limitations of MAX78000 Networks]; ONED.ewise_cnt
    [UG-CNN: Table 27-25]) makes the layer element-wise: the input holds ``operands`` tensors of C
    channels interleaved word by word [AI8X: Residual Connections] and they are combined with
    ``eltwise`` (add | sub | or | xor, ONED.ewise_func [UG-CNN: Table 27-25]) before the operation;
    ``pool_first`` pools each operand first (ONED.prepool, [UG-CNN: Table 27-25]), otherwise the sum
    is pooled. Only the first layer can have operands (its input is loaded interleaved, as the
    public generator's loader writes multi-operand input); the builder has no multi-producer (write
    gap) layers yet.
    """

    out_channels: int
    kernel: int = 3  # conv2d: 3 or 1; conv1d: 1..9; deconv: 3; linear: 1
    pad: int = 1  # 0..2 (conv1d 0..3)
    pool: str = "none"  # none | max | avg
    pool_size: int = 2  # square window (conv1d: size x 1)
    pool_stride: int = 2
    shift: int = 0  # total output shift s of v = floor(acc * 2**s / 128 + 1/2), -15..15
    activation: str = "none"  # none | relu | abs
    weight_bits: int = 8  # 8, 4, 2, 1
    bias: bool = False
    wide: bool = False  # 32-bit output (last layer only, no activation)
    op: str = "conv2d"  # conv2d | conv1d | deconv | linear | passthrough
    operands: int = 1  # element-wise operands, 1 (none) or 2..16 (first layer only)
    eltwise: str = "add"  # add | sub | or | xor
    pool_first: bool = True  # with operands > 1 and pooling: pool the operands, then combine


OPS = ("conv2d", "conv1d", "deconv", "linear", "passthrough")
# ONED.ewise_func [UG-CNN: Table 27-25]
ELTWISE_FN = {"sub": 0b00, "add": 0b01, "or": 0b10, "xor": 0b11}


@dataclass
class Network:
    in_channels: int  # channels of one operand
    in_rows: int
    in_cols: int
    layers: list[Layer]
    avg_pool_rounding: bool = False  # CTRL.poolrnd (global)
    name: str = "accelstub"
    # input in CHW ("big data", LCTRL0.parallel [UG-CNN: Table 27-34]) instead of HWC
    chw: bool = False

    @staticmethod
    def from_dict(d: dict) -> Network:
        c, h, w = d["input"]
        names = {f.name for f in fields(Layer)}
        layers = []
        for i, ld in enumerate(d["layers"]):
            bad = set(ld) - names
            if bad:
                raise BuildError(f"layer {i}: unknown keys {sorted(bad)}")
            layers.append(Layer(**ld))
        return Network(c, h, w, layers, d.get("avg_pool_rounding", False),
                       d.get("name", "accelstub"), d.get("chw", False))

    def to_dict(self) -> dict:
        return {"name": self.name, "input": [self.in_channels, self.in_rows, self.in_cols],
                "avg_pool_rounding": self.avg_pool_rounding, "chw": self.chw,
                "layers": [asdict(lay) for lay in self.layers]}


def processors_per_pass(channels: int) -> tuple[int, int]:
    """(passes, processors per pass) for ``channels`` channels
    ([AI8X: Multi-Pass, Per-Layer Configuration]; [izer] in_expand = ceil(C/64), in_expand_thresh =
    ceil(C/in_expand) rounded up to 4 above 64)."""
    passes = -(-channels // 64)
    per = -(-channels // passes)
    if channels > 64:
        per = min(64, (per + 3) & ~3)
    return passes, per


def memory_address(m: int, word: int = 0) -> int:
    """CPU address of ``word`` of global data memory m = quadrant*4 + group [AI8X: Data memory]."""
    return SRAM + (m >> 2) * QSTRIDE + (m & 3) * 0x8000 + 4 * word


@dataclass
class _Plan:
    """Geometry of one layer, derived once."""

    index: int
    layer: Layer
    c_in: int  # channels of one operand
    rows: int  # stored input rows/columns (before pooling)
    cols: int
    passes_in: int  # passes of the stored input (ceil(C/64))
    per_in: int
    passes_out: int
    per_out: int
    pooled: tuple[int, int]
    out: tuple[int, int]
    in_word: int
    out_word: int
    procs: list[int] = field(default_factory=list)  # input processors (global), one per j
    chw: bool = False
    column: int = 0  # first MRAM column
    columns: int = 0
    bias_offset: int = 0

    @property
    def op(self) -> str:
        return self.layer.op

    @property
    def conv(self) -> bool:
        """A layer with a convolution (mask memory); pass-through and element-wise-only
        layers have none ([izer] operator None)."""
        return self.layer.op != "passthrough"

    @property
    def flat(self) -> bool:
        """A linear layer over more than one pixel: the pixels become passes."""
        return self.layer.op == "linear" and self.rows * self.cols > 1

    @property
    def hw_passes(self) -> int:
        """The pass count the registers hold: with flattening in_expand * H * W ([izer]
        flatten_prod + 1, [UG-CNN: Table 27-38] "extended multi-pass count")."""
        return self.passes_in * (self.rows * self.cols if self.flat else 1)

    @property
    def pool_window(self) -> tuple[int, int]:
        lay = self.layer
        if lay.pool == "none":
            return 1, 1
        return (lay.pool_size, 1) if lay.op == "conv1d" else (lay.pool_size, lay.pool_size)

    @property
    def ksize(self) -> int:
        """Bytes of one 8-bit kernel in a processor's mask byte stream: 9 for 3x3, 1 for 1x1
        and linear, the width of a 1-D kernel ([UG-CNN: Table 27-25] oned_sad "offset within 9-byte
        mask width")."""
        lay = self.layer
        if lay.op == "conv1d":
            return lay.kernel
        if lay.op in ("conv2d", "deconv"):
            return lay.kernel * lay.kernel
        return 1

    @property
    def steps(self) -> int:
        return self.layer.out_channels * self.hw_passes

    @property
    def quadrants(self) -> list[int]:
        return sorted({p // 16 for p in self.procs})

    @property
    def koffs_sad(self) -> tuple[int, int]:
        """(kernel index, oned_sad) of the layer's first mask byte 9*column: [izer]
        ``koffs, oned_sad = divmod(9 * kern_offs, kernel bytes)`` [UG-CNN: Table 27-25]."""
        return divmod(9 * self.column, self.ksize)

    @property
    def mcnt_sad(self) -> int:
        return 8 * self.koffs_sad[0]  # MCNT is a bit address (R7#24)

    @property
    def mcnt_max(self) -> int:
        return self.mcnt_sad + (self.steps - 1) * self.layer.weight_bits

    def source(self, j: int, pass_: int) -> int | None:
        """Input-channel index (in the weights' second axis) that processor j sees in
        register pass ``pass_``, or None for an unused slot. Normally channel
        pass*per + j [AI8X: Multi-Pass]; a flattened linear layer reads pixel ``pass_`` of channel
        j (one pass per pixel, the input being single-pass), PyTorch index c*H*W + pixel."""
        if self.flat:
            return j * self.rows * self.cols + pass_ if j < self.c_in else None
        c = pass_ * self.per_in + j
        return c if c < self.c_in else None


@dataclass
class Project:
    """A generated program: file texts plus the arrays they encode."""

    network: Network
    files: dict[str, str]
    inputs: np.ndarray
    weights: list[np.ndarray | None]
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
def _check_layer(i: int, lay: Layer, net: Network, c: int, h: int, w: int) -> None:
    """Refuse what the hardware (seeds) or the public generator does not allow."""
    if lay.op not in OPS:
        raise BuildError(f"layer {i}: op must be one of {', '.join(OPS)}")
    if lay.op == "conv2d" and lay.kernel not in (1, 3):
        raise BuildError(f"layer {i}: kernel must be 3 or 1")
    if lay.op == "conv1d" and not 1 <= lay.kernel <= 9:
        raise BuildError(f"layer {i}: conv1d kernel must be 1..9 "
                         f"[AI8X: Limitations of MAX78000 Networks]")
    if lay.op == "deconv" and lay.kernel != 3:
        raise BuildError(f"layer {i}: deconv kernel must be 3 "
                         f"[AI8X: Limitations of MAX78000 Networks]")
    if lay.op == "linear" and (lay.kernel != 1 or lay.pad != 0):
        raise BuildError(f"layer {i}: linear layers have kernel 1 and pad 0")
    if not 0 <= lay.pad <= (3 if lay.op == "conv1d" else 2):
        raise BuildError(f"layer {i}: pad must be 0..2 (conv1d 0..3)")
    if lay.weight_bits not in WEIGHT_RANGE:
        raise BuildError(f"layer {i}: weight_bits must be 8, 4, 2 or 1")
    if lay.activation not in ("none", "relu", "abs"):
        raise BuildError(f"layer {i}: activation must be none, relu or abs")
    if lay.pool not in ("none", "max", "avg"):
        raise BuildError(f"layer {i}: pool must be none, max or avg")
    if not -15 <= lay.shift <= 15:
        raise BuildError(f"layer {i}: total shift must be in [-15, 15] "
                         f"[AI8X: Per-Layer Configuration]")
    if lay.wide and (i != len(net.layers) - 1 or lay.activation != "none"):
        raise BuildError(f"layer {i}: 32-bit output only on the last layer, without "
                         "activation [AI8X: Per-Layer Configuration]")
    if not 1 <= lay.out_channels <= 1024 or not 1 <= c <= 1024:
        raise BuildError(f"layer {i}: 1..1024 channels [AI8X: Limitations of MAX78000 Networks]")
    if lay.op == "conv1d" and w != 1:
        raise BuildError(f"layer {i}: conv1d needs an H x 1 input, not {h}x{w}")
    if lay.op == "passthrough":
        # [izer] max7800x.py refuses activation, padding and output_shift on passthrough
        # layers, and bias/32-bit output have no meaning without a convolution
        if lay.out_channels != c:
            raise BuildError(f"layer {i}: a pass-through layer keeps its {c} channels")
        if lay.pad or lay.shift or lay.activation != "none" or lay.bias or lay.wide:
            raise BuildError(f"layer {i}: pass-through layers have no pad, shift, activation, "
                             "bias or 32-bit output")
    if lay.op == "deconv" and lay.pool != "none":
        # [izer] writes STRIDE = 0 for ConvTranspose2d, so no pooling stride can be expressed
        raise BuildError(f"layer {i}: no pooling in a deconv layer")
    if lay.op == "linear" and lay.pool != "none" and h * w > 1:
        raise BuildError(f"layer {i}: flattening is not compatible with pooling ([izer])")
    if lay.op == "linear" and h * w > 1 and c > 64:
        # the flattened pass order (pixel, pass) of multi-pass input is not pinned down by the
        # seeds; the builder keeps to single-pass input here
        raise BuildError(f"layer {i}: flattening more than 64 channels is not supported")
    if lay.operands != 1:
        if not 2 <= lay.operands <= 16:
            raise BuildError(f"layer {i}: 2..16 element-wise operands "
                             f"[AI8X: Limitations of MAX78000 Networks]")
        if i != 0:
            raise BuildError(f"layer {i}: element-wise operands only on the first layer "
                             "(no multi-producer layers in the builder)")
        if lay.eltwise not in ELTWISE_FN:
            raise BuildError(f"layer {i}: eltwise must be add, sub, or or xor")
        if lay.op in ("conv1d", "linear", "deconv"):
            # [AI8X: MAX78000 Hardware and Resources / Overview] "1D convolutions (without
            # element-wise operations)"
            raise BuildError(f"layer {i}: element-wise operations with {lay.op}")
        if net.chw:
            raise BuildError(f"layer {i}: element-wise operations need HWC input")
        if lay.pool != "none" and not lay.pool_first and lay.operands > 2:
            # [izer] MAX_POOL_LAST_ELEMENTS = 2 on MAX78000
            raise BuildError(f"layer {i}: pooling after the operation supports 2 operands")
    if i == 0 and net.chw:
        if lay.op == "passthrough":
            raise BuildError("layer 0: CHW input needs a convolution")
        if c > 16:
            # one processor per data memory, single pass
            # ([AI8X: CHW Input Data Format and Consequences for Weight Memory Layout], A 1.2 CHW)
            raise BuildError("layer 0: CHW input has at most 16 channels")
        if lay.op == "linear" and h * w > 1:
            # flattening makes every pixel a pass: multi-pass CHW input ([izer] load.py:
            # "does not currently support multi-pass CHW input")
            raise BuildError("layer 0: CHW input cannot be flattened")


def _plan(net: Network) -> list[_Plan]:
    if not 1 <= len(net.layers) <= 32:
        raise BuildError("a network has 1 to 32 layers [AI8X: Limitations of MAX78000 Networks]")
    plans = []
    c, h, w = net.in_channels, net.in_rows, net.in_cols
    column = 0
    bias_offset = 0
    for i, lay in enumerate(net.layers):
        _check_layer(i, lay, net, c, h, w)
        chw = net.chw and i == 0
        if lay.pool != "none":
            if not (1 <= lay.pool_size <= 16 and 1 <= lay.pool_stride <= 16):
                raise BuildError(f"layer {i}: pool size and stride 1..16")
            pr, pc = (lay.pool_size, 1) if lay.op == "conv1d" else (lay.pool_size,) * 2
            if pr > h or pc > w:
                raise BuildError(f"layer {i}: pool window larger than the input")
            ph = (h - pr) // lay.pool_stride + 1
            pw = (w - pc) // lay.pool_stride + 1
        else:
            ph, pw = h, w
        if lay.op == "conv2d":
            oh, ow = ph + 2 * lay.pad - lay.kernel + 1, pw + 2 * lay.pad - lay.kernel + 1
        elif lay.op == "conv1d":
            oh, ow = ph + 2 * lay.pad - lay.kernel + 1, 1
        elif lay.op == "deconv":
            oh, ow = 2 * ph + 2 * lay.pad - 2, 2 * pw + 2 * lay.pad - 2
        elif lay.op == "linear":
            oh, ow = 1, 1
        else:
            oh, ow = ph, pw
        if oh < 1 or ow < 1:
            raise BuildError(f"layer {i}: empty output")
        passes_in, per_in = processors_per_pass(c)
        passes_out, per_out = processors_per_pass(lay.out_channels)
        if passes_in > 16:
            raise BuildError(f"layer {i}: more than 16 input passes")
        in_word, out_word = (0, HALF) if i % 2 == 0 else (HALF, 0)
        words_in = -(-h * w // 4) if chw else h * w * passes_in * lay.operands
        if words_in > HALF:
            raise BuildError(f"layer {i}: input {c}x{h}x{w} does not fit half a data memory")
        if oh * ow * passes_out * (4 if lay.wide else 1) > HALF:
            raise BuildError(f"layer {i}: output does not fit half a data memory")
        procs = [4 * j for j in range(c)] if chw else list(range(per_in))
        p = _Plan(i, lay, c, h, w, passes_in, per_in, passes_out, per_out, (ph, pw), (oh, ow),
                  in_word, out_word, procs, chw)
        if p.flat and p.hw_passes > 256:
            raise BuildError(f"layer {i}: flattening {c}x{h}x{w} needs more than 256 passes "
                             "[UG-CNN: Table 27-38]")
        if p.conv:
            p.column = column
            koffs, sad = p.koffs_sad
            last_byte = (p.mcnt_max >> 3) * p.ksize + sad + p.ksize - 1
            p.columns = last_byte // 9 + 1 - column
            # next layer starts at a multiple of 4 [AI8X: Layers and Weight Memory]
            column += -(-p.columns // 4) * 4
            if p.column + p.columns > MRAM_COLUMNS:
                raise BuildError(f"layer {i}: weights do not fit the 768 MRAM words")
            if p.mcnt_max >= 1 << 16:
                raise BuildError(f"layer {i}: mask count {p.mcnt_max:#x} beyond MCNT's 16 bits")
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
    generator does without --write-zero-registers).

    Layer kinds (fields per [UG-CNN], values as the public generator writes them):

    * CHW input: LCTRL0.parallel (bit 6, [UG-CNN: Table 27-34]), processors 0, 4, 8, ... ("the first
      processor in each group of 4").
    * conv1d: ONED oned_en 12 | oned_width 11:8 | oned_sad 7:4 [UG-CNN: Table 27-25], RCNT = length,
      CCNT = 0 (one column).
    * deconv: POST.deconv_en 28 [UG-CNN: Table 27-38]; RCNT/CCNT count the stuffed 2H x 2W input and
      STRIDE is 0 ([izer] in_row = stride*H, STRIDE 0 for ConvTranspose2d).
    * linear over H*W > 1 pixels: RCNT = CCNT = 0, pass count in_expand*H*W - 1 split over
      LCTRL1.inpchexp (3:0) and POST.xpmp_cnt (21:18) with POST.flatten_en 27 when it needs
      more than 4 bits ([UG-CNN: Table 27-38] "extended multi-pass count"); TPTR = n<<16 | 2n+1 then
      ([izer]).
    * pass-through: POST ts_en 24 | onexone_en 25 with EN.mask_en = 0 [UG-CNN: Table 27-38], ONED
      tscnt_max | 1<<8, MCNT = (passes-1)*8, WPTR_BASE per quadrant at its own first data
      memory, WPTR_TOFF = one data memory (0x2000) per timeslot when more than 4 processors
      ([izer] INSTANCE_SIZE*4; else INSTANCE_SIZE = 0x800), no WPTR_MOFF, no cnnsi_en.
    * element-wise: ONED ewise_en 13 | ewise_func 15:14 | prepool 16 | 2d_conv 17 |
      ewise_cnt 21:18 = operands-1 [UG-CNN: Table 27-25]; without a convolution POST.ts_en
      ([UG-CNN: Table 27-25]: "tscnt_max and ts_en must be set") and the pass-through output path.
    """
    lay = p.layer
    bits = lay.weight_bits if p.conv else 8
    active = p.quadrants
    out: dict[int, list[tuple]] = {}
    pool_on = lay.pool != "none"
    wide = lay.wide
    one_by_one = p.op == "linear" or (p.op == "conv2d" and lay.kernel == 1)
    # timeslots of a layer without convolution: ceil(processors of a quadrant / 4) ([izer])
    tscnt = 0 if p.conv else max((sum(1 for x in p.procs if x // 16 == q) - 1) // 4
                                 for q in active)
    if p.op == "linear":
        rows_hw = cols_hw = 1  # [izer] in_row = pool rows = 1 when flattening
    elif p.op == "deconv":
        rows_hw, cols_hw = 2 * p.rows, 2 * p.cols
    else:
        rows_hw, cols_hw = p.rows, p.cols
    pad_r = lay.pad
    pad_c = 0 if p.op == "conv1d" else lay.pad
    flat_n = p.hw_passes - 1
    for q in used:
        regs = []
        regs.append((RCNT, pad_r << 16 | (rows_hw - 1 + 2 * pad_r), "Rows"))
        regs.append((CCNT, pad_c << 16 | (cols_hw - 1 + 2 * pad_c), "Columns"))
        if pool_on:
            pr, pc = p.pool_window
            regs.append((PRCNT, pr - 1, "Pooling rows"))
            regs.append((PCCNT, pc - 1, "Pooling columns"))
            regs.append((STRIDE, lay.pool_stride - 1, "Stride"))
        mine = [x for x in p.procs if x // 16 == q]
        if p.conv:
            regs.append((WPTR_BASE, p.out_word, "SRAM write ptr"))  # memory 0 (bits 16:13)
            if one_by_one:
                regs.append((WPTR_TOFF, 1, "Write ptr time slot offs"))
            regs.append((WPTR_MOFF, 0x2000, "Write ptr mask offs"))  # next memory (+1 << 13)
        else:
            first_mem = mine[0] // 4 if mine else 0
            regs.append((WPTR_BASE, first_mem << 13 | p.out_word, "SRAM write ptr"))
            toff = 0x2000 if len(p.procs) > 4 or (lay.operands > 1 and p.passes_in > 1) \
                else 0x800
            regs.append((WPTR_TOFF, toff, "Write ptr time slot offs"))
        if p.passes_out > 1:
            regs.append((WPTR_CHOFF, 4 if wide else 1, "Write ptr multi-pass channel offs"))
        regs.append((RPTR_BASE, p.in_word, "SRAM read ptr"))
        lctrl0 = 0x20 | 0x800  # master, sramlsrc
        if p.chw:
            lctrl0 |= 0x40
        if pool_on:
            lctrl0 |= 0x80
        if lay.pool != "avg":
            lctrl0 |= 0x100
        if lay.activation == "relu":
            lctrl0 |= 0x200
        if wide:
            lctrl0 |= 1 << 16
        if p.conv and q == active[0]:
            for other in active[1:]:
                lctrl0 |= 1 << (12 + other)
        regs.append((LCTRL0, lctrl0, "Layer control"))
        xpch = (p.per_out - 1) * bits
        in_exp = flat_n & 0xF
        inc = (p.passes_out - 1) if p.conv else 0  # [izer] passthrough: write_gap only
        regs.append((LCTRL1, xpch << 8 | inc << 4 | in_exp, "Layer control 2"))
        if p.conv:
            regs.append((MCNT, p.mcnt_sad << 16 | p.mcnt_max, "Mask offset and count"))
        else:
            regs.append((MCNT, (p.passes_in - 1) * 8, "Mask offset and count"))
        if p.op in ("conv2d", "deconv") and not one_by_one:
            regs.append((TPTR, p.out[1] - 1, "TRAM ptr max"))
        elif p.flat and flat_n >= 16:
            regs.append((TPTR, flat_n << 16 | (2 * flat_n + 1), "TRAM ptr max"))
        oned = tscnt
        if p.op == "conv1d":
            oned |= 1 << 12 | lay.kernel << 8 | p.koffs_sad[1] << 4
        elif one_by_one or (not p.conv and lay.operands == 1):
            oned |= 0x100
        if lay.operands > 1:
            oned |= 1 << 13 | ELTWISE_FN[lay.eltwise] << 14 | (lay.operands - 1) << 18
            if pool_on and lay.pool_first:
                oned |= 1 << 16
            if p.conv:
                oned |= 1 << 17
        regs.append((ONED, oned, "1D"))
        post = MASK_SIZE[bits] << 22
        if not wide and lay.shift:
            post |= (abs(lay.shift) << 13) | ((1 << 17) if lay.shift < 0 else 0)
        if lay.activation == "abs":
            post |= 1 << 26
        if lay.bias and q == 0:
            post |= 1 << 12 | p.bias_offset
        if not p.conv:
            post |= (3 << 24) if lay.operands == 1 else (1 << 24)
        if p.flat and flat_n >= 16:
            post |= 1 << 27 | (flat_n >> 4) << 18
        if p.op == "deconv":
            post |= 1 << 28
        regs.append((POST, post, "Post processing register"))
        if mine:
            pro = sum(1 << (x % 16) for x in mine)
            regs.append((EN, (pro << 16 if p.conv else 0) | pro, "Mask and processor enables"))
        out[q] = [(off, v, c) for off, v, c in regs if v]
    return out


# -- memory images -----------------------------------------------------------------------------
def _kernel_elements(w: np.ndarray, t: int, ch: int) -> list[int]:
    """Elements 0..ksize-1 of the kernel of output t and input channel ch: row-major for 3x3
    (k0..k8 = w[0][0]..w[2][2], [izer] kernels.py), the taps for conv1d."""
    return [int(v) for v in w[t, ch].reshape(-1)]


def _kernel_columns(plans: list[_Plan], weights: list) -> dict[int, dict[int, bytes]]:
    """{processor: {column: 9 bytes k0..k8}} for every layer.

    Every kernel size is one byte stream per processor ([izer] kernels.py add_kernel_data
    fills each 72-bit word from k8 down to k0 and adds a kernel's elements last to first):
    stream byte B is k-position 8 - B%9 of word B//9; mask step s = t*passes + pass counts the
    bit address cnt = mcnt_sad + s*bits (R7#24), its kernel starts at stream byte
    (cnt >> 3)*ksize + oned_sad and element i sits at that start + ksize-1-i, sub-8-bit fields
    at bit ``cnt & 7`` [AI8X: Number Format]. For 3x3 kernels this is k_i = element i of word
    cnt>>3; for 1x1, 9 kernels per word from k8 down."""
    mem: dict[int, dict[int, bytearray]] = {}
    for p, w in zip(plans, weights):
        if not p.conv:
            continue
        lay = p.layer
        bits = lay.weight_bits
        fmask = (1 << bits) - 1
        ks = p.ksize
        sad_byte = p.koffs_sad[1]
        for j, proc in enumerate(p.procs):
            cols = mem.setdefault(proc, {})
            for c in range(p.column, p.column + p.columns):
                cols.setdefault(c, bytearray(9))
            for t in range(lay.out_channels):
                for e in range(p.hw_passes):
                    ch = p.source(j, e)
                    if ch is None:
                        continue
                    cnt = p.mcnt_sad + (t * p.hw_passes + e) * bits
                    off = cnt & 7
                    start = (cnt >> 3) * ks + sad_byte
                    for i, v in enumerate(_kernel_elements(w, t, ch)):
                        b = start + ks - 1 - i
                        cols[b // 9][8 - b % 9] |= (v & fmask) << off
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
HEADER = ("// {name}\n// This file was generated by accelstub (testkit/max78000_build.py) in the "
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
    """The layer's comment line in cnn.c, in the public generator's wording
    (``[Nx]CxHxW[ flattened to Kx1x1], [pool], [N-element fn, ]<op ...>, <act>, <out> output``;
    1-D sizes as one number)."""
    lay = p.layer
    one_d = p.op == "conv1d"
    dims = (lambda r, c: f"{r}") if one_d else (lambda r, c: f"{r}x{c}")
    head = f"{str(lay.operands) + 'x' if lay.operands > 1 else ''}{p.c_in}x{dims(p.rows, p.cols)}"
    if p.flat:
        head += f" flattened to {p.c_in * p.rows * p.cols}x1x1"
    parts = [head]
    elt = f"{lay.operands}-element {lay.eltwise}"
    if lay.operands > 1 and not lay.pool_first:
        parts.append(elt)
    if lay.pool == "none":
        parts.append("no pooling")
    else:
        pr, pc = p.pool_window
        stride = f"{lay.pool_stride}" if one_d else f"{lay.pool_stride}/{lay.pool_stride}"
        parts.append(f"{lay.pool} pool {dims(pr, pc)} with stride {stride}")
    if lay.operands > 1 and lay.pool_first:
        parts.append(elt)
    act = {"none": "no activation", "relu": "ReLU", "abs": "Abs"}[lay.activation]
    if p.op == "passthrough":
        parts.append("no convolution")
    elif p.op == "linear":
        parts += ["linear", act]
    elif p.op == "conv1d":
        parts += [f"conv1d with kernel size {lay.kernel}, stride 1, pad {lay.pad}", act]
    elif p.op == "deconv":
        tp = 2 - lay.pad  # the PyTorch padding the generator prints (hardware pad = 2 - it)
        parts += [f"convtranspose2d with kernel size 3x3, stride 2/2, pad {tp}/{tp}", act]
    else:
        parts += [f"conv2d with kernel size {lay.kernel}x{lay.kernel}, stride 1/1, "
                  f"pad {lay.pad}/{lay.pad}", act]
    parts.append(f"{lay.out_channels}x{dims(*p.out)} output")  # the izer marks no 32-bit output
    return f"// Layer {p.index}: " + ", ".join(parts) + "\n"


# -- the build ---------------------------------------------------------------------------------
def weight_shape(p: _Plan) -> tuple[int, ...] | None:
    """Shape of a layer's weights: [out, in, kh, kw]; conv1d [out, in, k, 1]; linear
    [out, C*H*W, 1, 1]; None for pass-through."""
    lay = p.layer
    if p.op == "passthrough":
        return None
    if p.op == "conv1d":
        return (lay.out_channels, p.c_in, lay.kernel, 1)
    if p.op == "linear":
        return (lay.out_channels, p.c_in * p.rows * p.cols, 1, 1)
    return (lay.out_channels, p.c_in, lay.kernel, lay.kernel)


def random_arrays(net: Network, seed: int = 0):
    """Random int8 input (``operands`` x C channels for an element-wise first layer), weights
    in each layer's range (None for pass-through), biases (or None)."""
    plans = _plan(net)
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (net.in_channels * net.layers[0].operands, net.in_rows,
                                 net.in_cols), dtype=np.int64)
    ws, bs = [], []
    for p in plans:
        lay = p.layer
        lo, hi = WEIGHT_RANGE[lay.weight_bits]
        shape = weight_shape(p)
        ws.append(None if shape is None else rng.integers(lo, hi + 1, shape, dtype=np.int64))
        bs.append(rng.integers(-128, 128, lay.out_channels, dtype=np.int64) if lay.bias
                  else None)
    return x, ws, bs


def reference_outputs(net: Network, x, ws, bs) -> list[np.ndarray]:
    """Every layer's output from the independent reference (max78000_reference.py): operands
    combined (pooled first with pool_first), pooled, then the operation."""
    policy = "away" if net.avg_pool_rounding else "trunc"  # A7#A3 (izer HEAD)
    outs = []
    for lay, w, b in zip(net.layers, ws, bs):
        if lay.pool != "none":
            win = (lay.pool_size, 1) if lay.op == "conv1d" else (lay.pool_size, lay.pool_size)

            def pool(v, win=win, lay=lay):
                return ref.pool(v, win[0], win[1], lay.pool_stride, lay.pool, policy)
        else:
            def pool(v):
                return np.asarray(v, dtype=np.int64)
        if lay.operands > 1:
            ops = np.split(np.asarray(x, dtype=np.int64), lay.operands)
            if lay.pool_first:
                x = ref.eltwise([pool(o) for o in ops], lay.eltwise)
            else:
                x = pool(ref.eltwise(ops, lay.eltwise))
        else:
            x = pool(x)
        if lay.op == "passthrough":
            outs.append(x)
            continue
        pad = (lay.pad, 0 if lay.op == "conv1d" else lay.pad)
        if lay.op == "deconv":
            x = ref.zero_stuff(x)
        elif lay.op == "linear":
            x = x.reshape(-1, 1, 1)
        x = ref.layer(x, w, b, pad=pad, shift=lay.shift, act=lay.activation, wide=lay.wide)
        outs.append(x)
    return outs


def build(net: Network, x=None, weights=None, biases=None, *, seed: int = 0,
          mexpress: bool = True, loader: str = "new", one_shot: bool = False, energy: int = 0,
          zero_sram: bool = False, stop_start: bool = False, fifo: bool = False) -> Project:
    """Generate the project files. Arrays not given are random (``seed``). ``loader``: "new"
    (the KERNELS record loop, ai8xize's default) or "old" (KERNELS_n + memcpy32 /
    memcpy_96to128). ``x`` is [operands*C, H, W] (operand o = channels o*C..o*C+C-1, the
    public generator's sample-data order); ``weights`` as :func:`weight_shape`.

    The main() flows of ai8xize.py's options (statement forms as it writes them; facts from
    ai8x-synthesis izer/toplevel.py, backend/max7800x.py, load.py): ``energy`` = N runs N
    measured inferences (--energy: cnn_disable first, loads in 100-fold loops, the inference
    loop); ``zero_sram`` runs the BIST of all four quadrants' memories in cnn_init and leaves
    all-zero kernels out of the weights (--zero-sram); ``stop_start`` adds ``cnn_stop();
    cnn_continue();`` after cnn_start(); ``fifo`` feeds HWC input of up to 4 channels through
    FIFO 0 after cnn_start() (--fifo)."""
    plans = _plan(net)
    rx, rw, rb = random_arrays(net, seed)
    x = np.asarray(rx if x is None else x, dtype=np.int64)
    weights = [None if w is None else np.asarray(w, dtype=np.int64)
               for w in (rw if weights is None else weights)]
    biases = [None if b is None else np.asarray(b, dtype=np.int64)
              for b in (rb if biases is None else biases)]
    want = (net.in_channels * net.layers[0].operands, net.in_rows, net.in_cols)
    if x.shape != want:
        raise BuildError(f"input shape {x.shape} != {want}")
    for p, w, b in zip(plans, weights, biases):
        lay = p.layer
        shape = weight_shape(p)
        if (None if w is None else w.shape) != shape:
            raise BuildError(f"layer {p.index}: weights shape "
                             f"{None if w is None else w.shape} != {shape}")
        lo, hi = WEIGHT_RANGE[lay.weight_bits]
        if w is not None and w.size and (w.min() < lo or w.max() > hi):
            raise BuildError(f"layer {p.index}: weights outside [{lo}, {hi}]")
        if lay.bias != (b is not None):
            raise BuildError(f"layer {p.index}: bias given/missing against the description")
    if np.any(x < -128) or np.any(x > 127):
        raise BuildError("input values outside int8")
    if fifo and (net.chw or plans[0].per_in > 4 or plans[0].passes_in > 1
                 or plans[0].layer.operands > 1):
        raise BuildError("fifo: HWC input of up to 4 channels in one pass (FIFO 0, processors "
                         "0-3) only")
    if fifo and one_shot:
        raise BuildError("fifo and one_shot together are not supported")
    outs = reference_outputs(net, x, weights, biases)
    last = plans[-1]

    used = sorted({q for p in plans for q in p.quadrants}
                  | {m // 4 for p in plans for m in range(-(-p.per_out // 4))})
    ctl = (1 << 3) | ((1 << 20) if mexpress else 0) | ((1 << 8) if one_shot else 0) \
        | ((1 << 13) if net.avg_pool_rounding else 0) | ((1 << 15) if fifo else 0)  # fifo_en
    qb = [QBASE + q * QSTRIDE for q in range(4)]
    files: dict[str, str] = {}
    name = net.name

    # -- weights.h: kernels and bias ----------------------------------------------------------
    kern = _kernel_columns(plans, weights)
    if zero_sram:  # the BIST leaves MRAM zeroed: all-zero kernels are not loaded
        kern = {proc: {col: k for col, k in cols.items() if any(k)}
                for proc, cols in kern.items()}
        kern = {proc: cols for proc, cols in kern.items() if cols}
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
    for _p, b in zip(plans, biases):
        if b is not None:
            bias_bytes += [int(v) & 0xFF for v in b]
    if bias_bytes:
        wh += _define("BIAS_0", bias_bytes, "0x{:02x}")
    files["weights.h"] = wh

    # -- cnn.c ---------------------------------------------------------------------------------
    c = (HEADER.format(name=name)
         + "// Regenerate with testkit/max78000_build.py rather than editing.\n\n")
    c += (f"// Configuring {len(plans)} layer{'s' if len(plans) > 1 else ''}\n"
          f"// Input data: {'CHW' if net.chw else 'HWC'}\n")
    c += "".join(_describe(p) for p in plans)
    c += ('\n#include <stdlib.h>\n#include <stdint.h>\n#include <string.h>\n#include <stdio.h>\n'
          '#include "mxc.h"\n#include "gcfr_regs.h"\n#include "cnn.h"\n#include "weights.h"\n\n')
    c += "void CNN_ISR(void)\n{\n  // Acknowledge interrupt to all quadrants\n"
    for q in used:
        c += f"  *((volatile uint32_t *) 0x{qb[q]:08x}) &= ~((1<<12) | 1);\n"
    c += ("\n" + ("" if energy else "  CNN_COMPLETE; // Signal that processing is complete\n")
          + "#ifdef CNN_INFERENCE_TIMER\n"
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
    if zero_sram:
        # every quadrant, each memory: run its BIST, wait for done, fail on error, stop
        # (TEST bits [UG-CNN: Table 27-22]: run bit, done bit + bistdone 27, fail bit)
        test = [qb[q] + 0xC for q in range(4)]
        for run, done, fail_bit, what in ((0, 18, 14, "Data SRAM"), (2, 19, 15, "Mask SRAM"),
                                          (4, 20, 16, "Tornado SRAM"), (6, 21, 17, "Bias Rfile")):
            c += "\n"
            c += "".join(_st(t, 1 << run, f"{what} BIST") for t in test)
            want = 1 << 27 | 1 << done
            c += "".join(f"  while ((*((volatile uint32_t *) 0x{t:08x}) & 0x{want:x}) != "
                         f"0x{want:x}); // Wait for BIST\n" for t in test)
            c += "".join(f"  if ((*((volatile uint32_t *) 0x{t:08x}) & 0x{1 << fail_bit:08x}) "
                         "!= 0x00000000) return CNN_FAIL; // Return on BIST error\n"
                         for t in test)
            c += "".join(_st(t, 0, "Reset BIST") for t in test)
    c += "\n  return CNN_OK;\n}\n\nint cnn_configure(void)\n{\n"
    for p in plans:
        for q, regs in _layer_registers(net, p, used).items():
            c += f"  // Layer {p.index} quadrant {q}\n"
            for off, v, what in regs:
                c += _st(qb[q] + off + 4 * p.index, v, what)
            c += "\n"
    if fifo:
        # one pixel per FIFO word (IFRM, [UG-CNN: Table 27-44]); FIFO 0 enabled, coupled, thresholds
        # 2 (CNN_FIF0_CTRL [UG-CNN: Table 27-10]; the izer's value for this map is 0x1908)
        for q in used:
            c += _st(qb[q] + 0x990, net.in_rows * net.in_cols, "Input frame size")
        c += _st(0x5000_0000, 1 << 12 | 1 << 11 | 2 << 7 | 2 << 2, "FIFO control")
    c += "\n  return CNN_OK;\n}\n\nint cnn_start(void)\n{\n  cnn_time = 0;\n\n"
    for q in used:
        c += _st(qb[q] + CTRL, ctl | (0x800 if q == 0 else 0x801), f"Enable quadrant {q}")
    c += ("\n#ifdef CNN_INFERENCE_TIMER\n  MXC_TMR_SW_Start(CNN_INFERENCE_TIMER);\n#endif\n\n"
          + ("" if energy else "  CNN_START; // Allow capture of processing time\n"))
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
    ops = p0.layer.operands
    if p0.chw:
        # CHW: channel c on processor 4c, alone in data memory c, 4 pixels per word, pixel i in
        # byte i%4 of word i//4 ([UG-CNN: Table 27-34] "read in byte order from byte 0 to byte 3 and
        # then by memory depth"; [izer] load.py shift = (row*W + col) % 4)
        for ch in range(net.in_channels):
            flat = [int(v) & 0xFF for v in x[ch].reshape(-1)]
            flat += [0] * (-len(flat) % 4)
            words = [flat[i] | flat[i + 1] << 8 | flat[i + 2] << 16 | flat[i + 3] << 24
                     for i in range(0, len(flat), 4)]
            proc = 4 * ch
            sd += _define(f"SAMPLE_INPUT_{proc}", words)
            decls += (f"// CHW {h}x{w}, channel {ch}\n"
                      f"static const uint32_t input_{proc}[] = SAMPLE_INPUT_{proc};\n\n")
            loads += (f"  memcpy32((uint32_t *) 0x{memory_address(ch, p0.in_word):08x}, "
                      f"input_{proc}, {len(words)});\n")
    for m in range(0 if p0.chw else -(-p0.per_in // 4)):
        # HWC: word (pixel*passes + pass)*operands + operand, lane = processor % 4
        # ([AI8X: Multi-Pass], [UG-CNN: Table 27-5]; operands interleaved,
        # [AI8X: Residual Connections]; [izer] load.py)
        words = []
        for pix in range(h * w):
            r, col = divmod(pix, w)
            for e in range(p0.passes_in):
                for o in range(ops):
                    v = 0
                    for lane in range(4):
                        proc = 4 * m + lane
                        ch = e * p0.per_in + proc
                        if proc < p0.per_in and ch < net.in_channels:
                            v |= (int(x[o * net.in_channels + ch, r, col]) & 0xFF) << (8 * lane)
                    words.append(v)
        first = 4 * m
        last_ch = min(4 * m + 3, p0.per_in - 1)
        sd += _define(f"SAMPLE_INPUT_{first}", words)
        decls += (f"// HWC {h}x{w}, channels {first} to {last_ch}\n"
                  f"static const uint32_t input_{first}[] = SAMPLE_INPUT_{first};\n\n")
        if fifo:  # izer load.py: FIFO 0 gets word i after its full flag is clear
            loads = ("  int i;\n  const uint32_t *in0 = input_0;\n\n"
                     f"  for (i = 0; i < {len(words)}; i++) {{\n"
                     "    while (((*((volatile uint32_t *) 0x50000004) & 1)) != 0); "
                     "// Wait for FIFO 0\n"
                     "    *((volatile uint32_t *) 0x50000008) = *in0++; // Write FIFO 0\n  }\n")
        else:
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
           + ("  int i;\n\n" if one_shot or energy else "")
           + "  MXC_ICC_Enable(MXC_ICC0); // Enable cache\n\n"
           "  // Switch to 100 MHz clock\n  MXC_SYS_Clock_Select(MXC_SYS_CLOCK_IPO);\n"
           "  SystemCoreClockUpdate();\n\n  printf(\"Waiting...\\n\");\n\n"
           "  // DO NOT DELETE THIS LINE:\n"
           "  MXC_Delay(SEC(2)); // Let debugger interrupt if needed\n\n"
           + ("  cnn_disable(); // Disable clock and power to CNN\n"
              "  MXC_SYS_ClockSourceEnable(MXC_SYS_CLOCK_IPO);\n"
              "  printf(\"Measuring system base (idle) power...\\n\");\n  SYS_START;\n"
              "  MXC_Delay(SEC(1));\n  SYS_COMPLETE;\n\n" if energy else "")
           + "  // Enable peripheral, enable CNN interrupt, turn on CNN clock\n"
           "  // CNN clock: APB (50 MHz) div 1\n"
           "  cnn_enable(MXC_S_GCR_PCLKDIV_CNNCLKSEL_PCLK, MXC_S_GCR_PCLKDIV_CNNCLKDIV_DIV1);\n\n"
           f"  printf(\"\\n*** CNN Inference Test {name} ***\\n\");\n\n"
           + ("  if (cnn_init() != CNN_OK) fail();\n" if zero_sram else
              "  cnn_init(); // Bring state machine into consistent state\n"))
    if energy:
        mc += ("  CNN_START;\n  for (i = 0; i < 100; i++)\n"
               "    cnn_load_weights(); // Load kernels\n  CNN_COMPLETE;\n\n"
               "  MXC_TMR_Delay(MXC_TMR0, 500000);\n")
        mc += ("  printf(\"Skipping input loading (using FIFO)...\\n\");\n  CNN_START;\n"
               "  MXC_TMR_Delay(MXC_TMR0, 10); // Dummy delay displays as 0\n  CNN_COMPLETE;\n\n"
               if fifo else
               "  CNN_START;\n  for (i = 0; i < 100; i++)\n    load_input(); // Load data input\n"
               "  CNN_COMPLETE;\n\n")
        mc += ("  cnn_load_bias();\n  cnn_configure(); // Configure state machine\n\n"
               "  MXC_TMR_Delay(MXC_TMR0, 500000);\n"
               "  printf(\"Measuring input load + inference...\\n\");\n"
               "  CNN_START; // Allow capture of processing time\n"
               f"  for (i = 0; i < {energy}; i++) {{\n"
               + ("    cnn_start(); // Run inference\n"
                  "    load_input(); // Load data input via FIFO\n" if fifo else
                  "    load_input(); // Load data input\n    cnn_start(); // Run inference\n")
               + "    while (cnn_time == 0)\n      MXC_LP_EnterSleepMode(); // Wait for CNN\n"
               "  }\n  CNN_COMPLETE;\n\n")
    else:
        mc += ("  cnn_load_weights(); // Load kernels\n  cnn_load_bias();\n"
               "  cnn_configure(); // Configure state machine\n"
               + ("  cnn_start(); // Start CNN processing\n"
                  "  load_input(); // Load data input via FIFO\n" if fifo else
                  "  load_input(); // Load data input\n  cnn_start(); // Start CNN processing\n")
               + ("  cnn_stop();\n  cnn_continue();\n" if stop_start else "")
               + "\n  while (cnn_time == 0)\n    MXC_LP_EnterSleepMode(); // Wait for CNN\n\n")
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


def mnist_shapes_network() -> Network:
    """The layer shapes of ai8x-synthesis' MNIST example (1x28x28 -> 60 -> 60 -> 56 -> 12 ->
    10), for the benchmarks."""
    return Network(1, 28, 28, [
        Layer(60, kernel=3, pad=1, activation="relu", shift=-1),
        Layer(60, kernel=3, pad=2, pool="max", activation="relu", shift=-1),
        Layer(56, kernel=3, pad=1, pool="max", activation="relu", shift=-1),
        Layer(12, kernel=3, pad=1, pool="avg", activation="relu", shift=-1),
        Layer(10, kernel=1, pad=0, wide=True),
    ], name="mnist_shapes")


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
    ap = argparse.ArgumentParser(prog="python -m accelstub.testkit.max78000_build",
                                 description="write a MAX78000 program in ai8xize.py's format")
    ap.add_argument("directory")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--demo", action="store_true", help="the bundled demo network")
    g.add_argument("--spec", help="JSON network description")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-mexpress", action="store_true")
    ap.add_argument("--old-kernel-loader", action="store_true")
    ap.add_argument("--one-shot", action="store_true")
    ap.add_argument("--energy", type=int, default=0, metavar="N",
                    help="main() measures N inferences as ai8xize.py --energy writes it")
    ap.add_argument("--zero-sram", action="store_true", help="cnn_init() runs the BIST of every "
                    "memory; all-zero kernels are not loaded")
    ap.add_argument("--stop-start", action="store_true")
    ap.add_argument("--fifo", action="store_true", help="HWC input (up to 4 channels) through "
                    "FIFO 0")
    args = ap.parse_args(argv)
    try:
        if args.demo:
            proj = build_demo()
        else:
            net = Network.from_dict(json.loads(Path(args.spec).read_text()))
            proj = build(net, seed=args.seed, mexpress=not args.no_mexpress,
                         loader="old" if args.old_kernel_loader else "new",
                         one_shot=args.one_shot, energy=args.energy,
                         zero_sram=args.zero_sram, stop_start=args.stop_start, fifo=args.fifo)
    except (BuildError, OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    d = proj.write(args.directory)
    print(f"wrote {d} ({len(proj.network.layers)} layers, {len(proj.expected)} expected words)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
