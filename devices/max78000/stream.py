"""MAX78000 streaming mode (CTRL.stream_en), emulated frame-at-once.

CTRL.stream_en [UG-CNN: Table 27-19] ("all 4 quadrants must be configured identically"),
CTRL.lilbuf [UG-CNN: Table 27-19], Sz_STRM0 [UG-CNN: Table 27-41], Sz_STRM1 [UG-CNN: Table 27-42],
Sz_FBUF [UG-CNN: Table 27-43], IFRM [UG-CNN: Table 27-44], TPTR [UG-CNN: Table 27-36]; streaming:
R§3.2, R7#28, R7#29, R7#30, R7#38.

What is modelled:
* The stream layers are layers 0..k-1 where layer k is the first (k <= 7) whose S<k>_STRM0
  start count is 0, or layer 8 ([izer] "Layers are processed up to the first layer with a zero
  start count value; standard processing follows for the remaining layers").
* **Results exactly, timing not**: on silicon the stream layers run interleaved, each one
  stride per delta count once its start count of input bytes has arrived, reading its input
  from a circular buffer (lilbuf: RPTR_BASE .. RPTR_BASE + FBUF words) that its producer
  overwrites. The emulator runs each stream layer over the whole frame, one layer per unit (so
  `step` still stops between layers), and hands the complete output of a stream layer to the
  next stream layer (a frame buffer inside the emulator). The outputs equal processing the
  whole frame once the input is complete -- which is what the interleaved hardware computes.
* The data memory is left as the hardware leaves it: a producer whose consumer streams through
  a circular buffer writes its output wrapped modulo the consumer's FBUF (izer's known-answer
  model: ``offs = (offs - out_offset) % (rollover*4) + out_offset``), so after the frame the
  buffer holds the last FBUF words of every channel. The last stream layer writes normally.
* Not modelled: the start/delta counters (isval, dsval1, dsval2), when each stride fires, stall
  cycles, the IFRM byte counter while input arrives (the layer waits for the whole frame in the
  FIFOs), TRAM contents. Cycle counts are those of frame-at-once layers.

Validation (warnings are messages, ``Max78000.warn``; impossible setups are faults):
* every quadrant that takes part (processors enabled in a stream layer, or cnn_en set) must have
  the same CTRL (ignoring cnn_en, cnn_irq, ext_sync), IFRM and stream registers S0-S7 as the
  master ([UG-CNN: Table 27-19] "unexpected behavior"; R7#38): warning per differing register;
* a stream layer > 0 needs strm_dsval1 != 0 [UG-CNN: Table 27-42]: warning;
* with lilbuf, FBUF of a stream layer > 0 must be != 0 and RPTR_BASE + FBUF must fit the 8192
  words of data memory (fault);
* stream layers run at the same time and share TRAM: their [tptr_sad, tptr_max] ranges must not
  overlap [UG-CNN: Table 27-36]: warning;
* with FIFO input, IFRM should equal the words per FIFO of the frame (the izer writes
  rows*cols, or (rows*cols+3)//4 for CHW, [UG-CNN: Table 27-44]): warning otherwise.
"""
from __future__ import annotations

import numpy as np

from ..device import Touched
from ..errors import DeviceError
from ..ranges import address_ranges, merge_ranges
from .datapath import compute_layer, scatter_output, sram_address

QUADRANTS = 4
MAX_STREAMS = 8
SRAM_WORDS = 8192
#: CTRL fields that may differ between the quadrants of a stream (start, interrupt, sync)
_CTRL_IGNORE = ("cnn_en", "cnn_irq", "ext_sync")


def stream_count(dev) -> int:
    """Number of stream layers (0 when CTRL.stream_en is clear on quadrant 0)."""
    regs = dev.regs
    if not regs.field("CNNx16_0_CTRL", "stream_en"):  # once per layer: the cached field read
        return 0
    for z in range(MAX_STREAMS):
        if not regs.field(f"CNNx16_0_S{z}_STRM0", "strm_isval"):
            return z
    return MAX_STREAMS


def validate(dev, cfgs: dict) -> list[str]:
    """Warnings for the stream configuration (module doc); raises DeviceError for impossible
    ones. ``cfgs`` maps stream layer -> LayerConfig."""
    regs = dev.regs
    warn: list[str] = []
    n = len(cfgs)
    quads = sorted({q for c in cfgs.values() for q in c.quadrants}
                   | {q for q in range(QUADRANTS) if regs.view(f"CNNx16_{q}_CTRL").cnn_en})
    ref = 0
    ctrl_fields = regs.instances("CTRL")[0].definition.view.fields
    ctrl_ignore = sum(ctrl_fields[f].mask for f in _CTRL_IGNORE)
    names = ["CTRL", "IFRM"] + [f"S{z}_{r}" for z in range(MAX_STREAMS)
                                for r in ("STRM0", "STRM1", "FBUF")]
    for name in names:
        want = regs.peek(f"CNNx16_{ref}_{name}")
        for q in quads:
            got = regs.peek(f"CNNx16_{q}_{name}")
            if name == "CTRL":
                want_, got_ = want & ~ctrl_ignore, got & ~ctrl_ignore
            else:
                want_, got_ = want, got
            if got_ != want_:
                warn.append(f"streaming: CNNx16_{q}_{name} = {got:#010x} differs from quadrant "
                            f"{ref} ({want:#010x}); all quadrants must be configured "
                            "identically [UG-CNN: Table 27-19], the hardware's behaviour is "
                            "undefined")
    lilbuf = bool(regs.view("CNNx16_0_CTRL").lilbuf)
    for y, cfg in cfgs.items():
        m = cfg.master
        if y > 0 and not regs.view(f"CNNx16_{m}_S{y}_STRM1").strm_dsval1:
            warn.append(f"streaming: layer {y}: CNNx16_{m}_S{y}_STRM1.strm_dsval1 = 0 "
                        "(a stream layer after the first needs an in-row delta count, "
                        "[UG-CNN: Table 27-42])")
        if y > 0 and lilbuf:
            fbuf = regs.view(f"CNNx16_{m}_S{y}_FBUF").fbuf_max
            if not fbuf:
                raise DeviceError(f"layer {y}: CNNx16_{m}_S{y}_FBUF = 0 with CTRL.lilbuf: the "
                                  "circular input buffer has no length [UG-CNN: Table 27-43]")
            for p in cfg.processors:
                if p.read_word + fbuf > SRAM_WORDS:
                    raise DeviceError(
                        f"layer {y}: CNNx16_{p.quadrant}_L{y}_RPTR_BASE {p.read_word:#x} + "
                        f"FBUF {fbuf:#x} runs past the 8192 words of data memory")
        elif y > 0:
            words = cfg.in_rows * cfg.in_cols * cfg.in_passes
            for p in cfg.processors:
                if p.read_word + words > SRAM_WORDS:
                    raise DeviceError(
                        f"layer {y}: stream input of {words} words from RPTR_BASE "
                        f"{p.read_word:#x} does not fit data memory and CTRL.lilbuf is clear "
                        "(no circular buffer)")
    spans = sorted((c.tptr_sad, c.tptr_max, y) for y, c in cfgs.items())
    for (s0, e0, y0), (s1, e1, y1) in zip(spans, spans[1:]):
        if s1 <= e0:
            warn.append(f"streaming: TRAM ranges of layers {y0} ({s0}..{e0}) and {y1} "
                        f"({s1}..{e1}) overlap (Ly_TPTR); stream layers run at the same time")
    if n and dev.input_from_fifo():
        cfg = cfgs[0]
        chw = cfg.extra.get("chw", False) if isinstance(cfg.extra, dict) else False
        chw = chw or dev.chw_input(cfg)
        want = -(-cfg.in_rows * cfg.in_cols // 4) if chw else cfg.in_rows * cfg.in_cols
        ifrm = regs.view(f"CNNx16_{cfg.master}_IFRM").ifrm_reg
        if ifrm != want:
            warn.append(f"streaming: CNNx16_{cfg.master}_IFRM = {ifrm} but the {cfg.in_rows}x"
                        f"{cfg.in_cols} input frame is {want} words per FIFO [UG-CNN: Table 27-44]")
    return warn


class FrameBuffer:
    """The complete output of a stream layer, addressed as its consumer reads it (unwrapped):
    memory index -> uint8 [words, 4]."""

    def __init__(self) -> None:
        self.mem: dict[int, np.ndarray] = {}


def slot_addresses(cfg) -> tuple[np.ndarray, np.ndarray]:
    """(slot base address [slots], word offset [slots, pixels]) of an 8-bit output, from the
    write-pointer formula of (layer.py)."""
    slots = np.arange(cfg.out_slots)
    e, k = np.divmod(slots, cfg.slots_per_pass)
    base = cfg.wptr_base + (k // 4) * cfg.wptr_moff + e * cfg.wptr_choff
    pix = np.arange(cfg.out_rows * cfg.out_cols)
    return base, np.broadcast_to(pix[None, :] * cfg.pixel_step, (cfg.out_slots, pix.size))


def scatter_stream(bus, cfg, out: np.ndarray, fbuf: int | None) -> tuple[FrameBuffer, list]:
    """Write a stream producer's output: into a FrameBuffer (unwrapped, for the consumer) and
    into data SRAM wrapped modulo ``fbuf`` words (None: not wrapped). Returns the frame buffer
    and the written address ranges."""

    if cfg.wide:
        raise DeviceError(f"layer {cfg.layer}: 32-bit output (bigdwrt) cannot feed a stream layer")
    base, offs = slot_addresses(cfg)
    flat = (out.reshape(cfg.out_slots, -1) & 0xFF).astype(np.uint8)
    lanes = np.arange(cfg.out_slots) % 4
    fb = FrameBuffer()
    addrs = []
    for t in range(cfg.out_slots):
        memory, word0 = int(base[t]) >> 13, int(base[t]) & 0x1FFF
        if memory > 15:
            raise DeviceError(f"layer {cfg.layer}: write pointer {int(base[t]):#x} beyond the "
                              "last data memory")
        words = word0 + offs[t]
        buf = fb.mem.get(memory)
        need = int(words.max()) + 1
        if buf is None or buf.shape[0] < need:
            nb = np.zeros((need, 4), dtype=np.uint8)
            if buf is not None:
                nb[:buf.shape[0]] = buf
            fb.mem[memory] = buf = nb
        buf[words, lanes[t]] = flat[t]
        wrapped = word0 + (offs[t] % fbuf if fbuf else offs[t])
        if int(wrapped.max()) >= SRAM_WORDS:
            raise DeviceError(f"layer {cfg.layer}: stream output runs past the end of data "
                              f"memory {memory} (no circular buffer, CTRL.lilbuf / FBUF)")
        mem, off = bus.memory_at(sram_address(memory, 0))
        view = mem.data[off:off + SRAM_WORDS * 4].reshape(SRAM_WORDS, 4)
        # in order: the last write of each wrapped word wins, as on the hardware
        view[wrapped, lanes[t]] = flat[t]
        mem.touch()
        addrs.append(sram_address(memory, 0) + 4 * np.unique(wrapped) + lanes[t])
    writes = merge_ranges(address_ranges(np.concatenate(addrs), 1)) if addrs else []
    return fb, writes


def gather_stream(fb: FrameBuffer, cfg) -> np.ndarray:
    """X of a stream consumer from its producer's FrameBuffer (HWC, passes innermost)."""
    n_p = len(cfg.processors)
    h, w = cfg.in_rows, cfg.in_cols
    x = np.zeros((cfg.in_passes * n_p, h, w), dtype=np.int8)
    n_words = h * w * cfg.in_passes
    for j, p in enumerate(cfg.processors):
        buf = fb.mem.get(p.memory)
        if buf is None or buf.shape[0] < p.read_word + n_words:
            raise DeviceError(f"layer {cfg.layer}: stream input of processor {p.index} (data "
                              f"memory {p.memory}, word {p.read_word:#x}) was not written by "
                              f"stream layer {cfg.layer - 1}")
        lane = buf[p.read_word:p.read_word + n_words, p.lane].view(np.int8)
        lane = lane.reshape(h, w, cfg.in_passes)
        for e in range(cfg.in_passes):
            x[e * n_p + j] = lane[:, :, e]
    return x


def run_stream_layer(dev, cfg, x, n_streams: int) -> Touched:
    """Run stream layer ``cfg.layer`` frame-at-once (x: its input or None = from memory)."""

    y = cfg.layer
    if y > 0 and x is None:
        fb = dev.stream_frames.get(y - 1)
        if fb is None:
            raise DeviceError(f"layer {y}: stream layer without the output of stream layer "
                              f"{y - 1} (run the frame from layer 0)")
        x = gather_stream(fb, cfg)
    out, touched = compute_layer(dev.bus, cfg, x)
    if y + 1 < n_streams:
        nxt = dev.layer_config(y + 1)
        lilbuf = dev.regs.view("CNNx16_0_CTRL").lilbuf
        fbuf = dev.regs.view(f"CNNx16_{nxt.master}_S{y + 1}_FBUF").fbuf_max if lilbuf else None
        fb, writes = scatter_stream(dev.bus, cfg, out, fbuf)
        dev.stream_frames[y] = fb
        touched.writes = writes
    else:
        touched.writes = scatter_output(dev.bus, cfg, out)
    return touched
