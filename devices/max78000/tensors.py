"""MAX78000: where a layer's input and output tensors lie in data SRAM (Device.unit_tensors).

Read from the decoded layer (layer.py's LayerConfig, datapath.py's write pointers), never from
the registers again, so a tensor lies exactly where the datapath reads and writes it. Shapes are
CHW as ai8x-training has them ("A§n" = a section of the project's notes on [AI8X],
docs/citations.md):

* input (before the layer's pooling, [AI8X: Per-Layer Configuration]): channel c = pass*P + j is
  processor j's byte lane of word ``read_word + ((r*W + col)*passes + pass)*operands + o`` of its
  data memory (HWC, 4 channels per word, [AI8X: Data Memory, Multi-Pass, HWC], A§1.2); CHW input
  (LCTRL0.parallel): one channel per data memory, pixel i at byte i of the channel's stream (4
  pixels per word, LSB first, A§1.2). Element-wise operands (ONED.ewise_cnt) are interleaved per
  word [AI8X: Residual Connections]: operand 0 is "input", operand o is "input<o+1>";
* a flattened linear layer reads its input pixel by pixel as passes (RCNT = CCNT = 0; the pass
  count in LCTRL1.inpchexp, with POST.xpmp_cnt and flatten_en above 16 passes,
  [UG-CNN: Table 27-38]): the input is PyTorch's flattened vector, ``(C*H*W, 1, 1)``, element c*H*W
  + pixel at processor c, word ``read_word + pixel`` (the order ai8x-training's ``view(N, -1)``
  makes). Below 17 passes the registers do not say whether passes are pixels or channels; they are
  pixels when fewer passes would hold the channels (P*passes <= 64*(passes-1)), since the public
  generator uses ceil(C/64) passes for channels ([izer] in_expand, [AI8X: Multi-Pass]);
* output (after pooling and convolution; pooling comes first on this engine): slot t at
  datapath's write pointer + pixel * pixel_step
  [UG-CNN: CNNx16_n Per Layer Registers (CNNx16_n_Ly)]; int8 in byte lane t % 4, or int32 words for
  a 32-bit "wide" layer (LCTRL0.bigdwrt [UG-CNN: Table 27-34]; the 4 channels of a quad in 4
  consecutive words, A§1.2);
* 1-D layers are ``(C, L, 1)`` (the rows carry the length, [UG-CNN: Table 27-25]).

The hardware reads whole passes: a layer of P processors over ``passes`` passes reads
P*passes channels even where its producer wrote fewer (ai8x rounds P up to a multiple of 4
above 64 channels). When the previous layer's output is exactly the first channels of this
input (same addresses), the input is cut to those channels, the tensor ai8x-training has.

Layer 0 fed from the FIFOs (CTRL.fifo_en) and streaming layers take their input from no data
memory, so they declare only an output.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import DeviceError
from ..tensors import TensorSpec
from .datapath import _write_pointers, sram_address
from .layer import LayerConfig
from .stream import stream_count

if TYPE_CHECKING:
    from .model import Max78000


def layer_tensors(dev: Max78000, y: int) -> tuple[TensorSpec, ...]:
    """The tensors of layer ``y``: inputs (none for FIFO or streamed input), then "output".
    Raises DeviceError (naming the layer and register) for a layer that cannot be decoded."""
    cfg = dev.layer_config(y)
    out = output_spec(cfg)
    fed = (y == 0 and dev.input_from_fifo()) or y < stream_count(dev)
    if fed:
        return (out,)
    ins = input_specs(cfg)
    if y > 0:
        ins[0] = _cut_to_producer(dev, y, ins[0])
    return (*ins, out)


def input_specs(cfg: LayerConfig) -> list[TensorSpec]:
    """One spec per element-wise operand (one for a plain layer), CHW before pooling."""
    procs = cfg.processors
    h, w = cfg.in_rows, cfg.in_cols
    start = [int(sram_address(p.memory, p.read_word)) for p in procs]
    if cfg.chw:  # a channel's pixels are consecutive bytes of its own memory
        return [TensorSpec("input", "CHW", (len(procs), h, w), "int8", tuple(start),
                           tuple(r * w for r in range(h)), tuple(range(w)),
                           "CHW input (LCTRL0.parallel): one channel per data memory, "
                           "4 pixels per word from RPTR_BASE")]
    n, passes, ops = len(procs), cfg.in_passes, cfg.operands
    if cfg.flatten or (h == w == 1 and 1 < passes and n * passes <= 64 * (passes - 1)):
        # element j*passes + e: processor j, pixel e (= pass e)
        channel = tuple(start[j] + procs[j].lane + 4 * e
                        for j in range(n) for e in range(passes))
        return [TensorSpec("input", "CHW", (n * passes, 1, 1), "int8", channel, (0,), (0,),
                           "flattened input: PyTorch's C*H*W vector, pixel e of channel j "
                           "in processor j's word RPTR_BASE + e")]
    pixel = 4 * passes * ops  # bytes between two pixels of one channel
    specs = []
    for o in range(ops):
        channel = tuple(start[j] + procs[j].lane + 4 * (e * ops + o)
                        for e in range(passes) for j in range(n))
        name = "input" if o == 0 else f"input{o + 1}"
        what = f"operand {o} of {ops}, " if ops > 1 else ""
        specs.append(TensorSpec(name, "CHW", (n * passes, h, w), "int8", channel,
                                tuple(r * w * pixel for r in range(h)),
                                tuple(c * pixel for c in range(w)),
                                f"HWC input, {what}{passes} pass(es) of {n} processors "
                                "from RPTR_BASE"))
    return specs


def output_spec(cfg: LayerConfig) -> TensorSpec:
    """The layer's output, CHW after pooling and convolution, int8 or int32 (bigdwrt)."""
    base, lanes = _write_pointers(cfg)
    rows, cols, step = cfg.out_rows, cfg.out_cols, cfg.pixel_step
    last = base + (rows * cols - 1) * step
    bad = np.flatnonzero((base >> 15) != (last >> 15))  # word bits 16:15 = quadrant
    if bad.size:
        raise DeviceError(f"layer {cfg.layer}: CNNx16_{cfg.master}_L{cfg.layer}_WPTR_BASE: "
                          f"output channel {int(bad[0])} crosses from one quadrant's data "
                          "memory into the next; it has no tensor address")
    channel = sram_address(base >> 13, base & 0x1FFF) + np.maximum(lanes, 0)
    kind = "int32 words (bigdwrt)" if cfg.wide else "int8, byte lane = channel % 4"
    return TensorSpec("output", "CHW", (len(base), rows, cols), "int32" if cfg.wide else "int8",
                      tuple(int(a) for a in channel),
                      tuple(4 * r * cols * step for r in range(rows)),
                      tuple(4 * c * step for c in range(cols)),
                      f"HWC output from WPTR_BASE, {kind}, {step} word(s) per pixel")


def _cut_to_producer(dev: Max78000, y: int, spec: TensorSpec) -> TensorSpec:
    """``spec`` cut to the channels layer y-1 wrote when its output is exactly this input's
    first channels (module doc), else unchanged."""
    try:
        prev = output_spec(dev.layer_config(y - 1))
    except DeviceError:
        return spec
    k = prev.shape[0]
    if (k < spec.shape[0] and prev.dtype == spec.dtype and prev.channel == spec.channel[:k]
            and prev.row == spec.row and prev.col == spec.col):
        return TensorSpec(spec.name, spec.layout, (k,) + spec.shape[1:], spec.dtype,
                          spec.channel[:k], spec.row, spec.col,
                          spec.doc + f" ({k} channels of layer {y - 1}'s output)")
    return spec
