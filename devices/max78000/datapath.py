"""MAX78000: execute one decoded layer (LayerConfig) on the bus's memories.

Gathers the input channels from data SRAM, the weights from MRAM and the bias from BRAM
(numpy views of the memory arrays, no per-byte bus calls), runs the pure kernels of
accelstub.emu.{conv,pool,eltwise,numeric}.max78000 and scatters the outputs to data SRAM
through the write-pointer formula documented in layer.py. Returns the address ranges read and
written.

Memory formats (public facts from ai8x-synthesis, R§1.3):

* MRAM, plain write: a 72-bit word takes 16 bytes; +0 bits 7:0 = k0, +4 = k1<<24|k2<<16|k3<<8|k4,
  +8 = k5<<24|k6<<16|k7<<8|k8 (izer apbaccess.write_kern). As little-endian bytes of the block:
  k0 = byte 0, k1..k4 = bytes 7,6,5,4, k5..k8 = bytes 11,10,9,8.
* 3x3 kernel: k0..k8 = row-major w[0][0]..w[2][2] (izer kernels.py stores element i at k[i]).
* 1x1 kernels: 9 per word, the first at k8 down to the ninth at k0 (izer kernels.py fills
  ``kernel_data[8 - used]``), so mask byte address B selects word B//9, element 8 - B%9.
* Sub-8-bit weights: field at bit offset ``mask_counter & 7`` of each byte (R7#24), two's
  complement [AI8X: Number Format].
* BRAM: one signed byte per 32-bit word, bits 7:0.
* Data SRAM: HWC, byte lane = processor % 4 ([AI8X: HWC], A7#A14), little-endian words; 32-bit
  outputs are little-endian words. CHW input (LCTRL0.parallel): one channel per data memory,
  4 consecutive pixels per word, pixel i in byte i%4 (A§1.2, [izer] load.py).
* Kernels of any size (3x3, 1x1, 1-D 1..9 taps) form one byte stream per processor: stream
  byte B is k-position 8 - B%9 of word B//9 (so 1x1 and 1-D kernels pack across words).

Values derived from a LayerConfig (index arrays, write pointers, decoded weights with the MRAM
versions they came from) are kept in ``cfg.extra``: Max78000.layer_config memoises the config,
so a layer run again finds them there.
"""
from __future__ import annotations

import numpy as np

from ...emu.conv import int_conv as IC
from ...emu.conv import max78000 as conv_k
from ...emu.eltwise import max78000 as eltwise_k
from ...emu.memory import max78000 as M
from ...emu.numeric import max78000 as numeric_k
from ...emu.pool import max78000 as pool_k
from ..device import Touched
from ..errors import DeviceError
from ..ranges import address_ranges, merge_ranges
from .layer import BRAM_BASE, QUAD_STRIDE, SRAM_BASE, LayerConfig

_POOL = {"none": pool_k.POOL_NONE, "max": pool_k.POOL_MAX, "avg": pool_k.POOL_AVG}
_ACT = {"none": numeric_k.ACT_NONE, "relu": numeric_k.ACT_RELU, "abs": numeric_k.ACT_ABS}


def sram_address(memory, word):
    """CPU address of ``word`` of data memory ``memory`` (0..15 = quadrant*4 + group); ints or
    numpy integer arrays."""
    return SRAM_BASE + (memory >> 2) * QUAD_STRIDE + (memory & 3) * 0x8000 + word * 4


def _weights(bus, cfg: LayerConfig
             ) -> tuple[np.ndarray, IC.PackedWeights, list[tuple[int, int]]]:
    """W[slot, pass*n_procs + j, kh, kw] int8 from each processor's MRAM (and the same in the
    convolution kernel's layout, kept with it for later runs).

    Mask counter (R7#24): one step of ``weight_bits`` per (output slot t, input pass e), a bit
    address. Kernel A = cnt >> 3 of ksize bytes starts at byte A*ksize + oned_sad of the layer's
    byte stream; element i sits at stream byte start + ksize-1-i, stream byte B at word B//9,
    k-position 8 - B%9 ([izer] kernels.py add_kernel_data fills k8 down to k0 and adds
    k[ksize-1-i] in order; for 3x3 this is k_i = element i, for 1x1 one byte each)."""
    mems = bus.stack_members["mram"]
    stack_version = bus.stack_versions["mram"][0]
    hit = cfg.extra.get("weights")  # cfg is memoised per device (Max78000.layer_config)
    if hit is not None and hit[0] is mems and hit[5] == stack_version:  # no MRAM write since
        return hit[2], hit[3], hit[4]
    versions = [mems[p.index].version for p in cfg.processors]
    if hit is not None and hit[0] is mems and hit[1] == versions:  # its processors' unchanged
        cfg.extra["weights"] = hit[:5] + (stack_version,)
        return hit[2], hit[3], hit[4]
    procs = np.array([p.index for p in cfg.processors], dtype=np.int64)
    mcnt = np.array([p.mcnt_sad for p in cfg.processors], dtype=np.int64)
    w, used, bad = M.gather_weights(bus.stacks["mram"], procs, mcnt, cfg.out_slots,
                                    cfg.in_passes, cfg.weight_bits, cfg.kernel_bytes,
                                    cfg.oned_sad)
    if bad >= 0:
        p = cfg.processors[bad]
        raise DeviceError(f"layer {cfg.layer}: CNNx16_{p.quadrant}_L{cfg.layer}_MCNT: the mask "
                          f"counter of processor {p.index} runs past MRAM word 767")
    base = np.array([p.mram_base for p in cfg.processors], dtype=np.int64)
    n_p = len(procs)
    reads = M.mask_ranges(used, base, 16, np.zeros(n_p, np.int64),
                          np.full(n_p, M.MRAM_WORDS, np.int64))
    w = w.reshape(cfg.out_slots, cfg.in_passes * n_p, cfg.kernel_rows, cfg.kernel_cols)
    w.flags.writeable = False  # shared by later runs of the layer
    reads = list(map(tuple, reads.tolist()))
    packed = IC.pack_weights(w.transpose(0, 2, 3, 1))
    cfg.extra["weights"] = (mems, versions, w, packed, reads, stack_version)
    return w, packed, reads


def _inputs(bus, cfg: LayerConfig) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """X[(o*passes + pass)*n_procs + j, H, W] int8 (HWC input: a view of channels-last
    memory, see gather_hwc): pixel (r, c) pass e operand o of processor
    p is byte ``lane`` of word ``read_word + ((r*W + c)*passes + e)*operands + o`` of its data
    memory ([AI8X: Multi-Pass, HWC]; operands interleaved, "each machine fetch gathers one operand",
    [AI8X: Residual Connections], A§1.2 address formula). CHW: pixel i of the channel is byte i%4 of
    word read_word + i//4 (module doc)."""
    h, w_ = cfg.in_rows, cfg.in_cols
    if "inputs" not in cfg.extra:
        memory, read_word, lane = (np.array([getattr(p, f) for p in cfg.processors],
                                            dtype=np.int64)
                                   for f in ("memory", "read_word", "lane"))
        words = _word_groups(lane, memory, read_word)
        index = None if cfg.chw or words is not None else \
            M.hwc_index(memory, lane, read_word, h, w_, cfg.in_passes, cfg.operands)
        cfg.extra["inputs"] = (memory, read_word, lane, words, index)
    memory, read_word, lane, words, index = cfg.extra["inputs"]
    if cfg.chw:
        x, bad = M.gather_chw(bus.stacks["sram"], memory, read_word, h, w_)
        n_words = -(-h * w_ // 4)
    else:
        sram = bus.stacks["sram"]
        if words is not None:
            x, bad = M.gather_hwc_words(sram, *words, h, w_, cfg.in_passes, cfg.operands,
                                        len(memory))
        else:  # the general layout: a fancy index kept with the layer
            at, bad = index
            x = M.take_hwc(sram, at, h, w_) if bad < 0 else None
        if bad < 0:
            x = x.transpose(2, 0, 1)  # [C, H, W] order over channels-last memory
        n_words = h * w_ * cfg.in_passes * cfg.operands
    if bad >= 0:
        p = cfg.processors[bad]
        raise DeviceError(f"layer {cfg.layer}: CNNx16_{p.quadrant}_L{cfg.layer}_RPTR_BASE: the "
                          f"input of processor {p.index} runs past the end of data memory "
                          f"{p.memory}")
    if "input_reads" not in cfg.extra:
        start = sram_address(memory, read_word)
        cfg.extra["input_reads"] = list(zip(start.tolist(), (start + 4 * n_words).tolist()))
    return x, cfg.extra["input_reads"]


def _word_groups(lane: np.ndarray, *fields: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """Each of ``fields`` (memory, word: per processor or output slot) once per group of four,
    when every group has lanes 0-3 in order and one value of each field: then the group's four
    bytes are one 32-bit word (M.gather_hwc_words, M.scatter_words). Else None."""
    n = len(lane)
    if n == 0 or n % 4 or not (lane.reshape(-1, 4) == np.arange(4)).all():
        return None
    groups = [f.reshape(-1, 4) for f in fields]
    if not all((g == g[:, :1]).all() for g in groups):
        return None
    return tuple(np.ascontiguousarray(g[:, 0]) for g in groups)


def _bias(bus, cfg: LayerConfig) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Sum over the quadrants with bptr_en of BRAM byte ``bptr_sad + slot``
    [UG-CNN: Table 27-38]."""
    b = np.zeros(cfg.out_slots, dtype=np.int64)
    reads = []
    for q, sad in cfg.bias:
        addr = BRAM_BASE + q * QUAD_STRIDE + 4 * sad
        mem, off = bus.memory_at(addr)
        entries = mem.data[off:off + 4 * cfg.out_slots].reshape(cfg.out_slots, 4)[:, 0]
        b += entries.view(np.int8).astype(np.int64)
        reads.append((addr, addr + 4 * cfg.out_slots))
    return b, reads


def _write_pointers(cfg: LayerConfig) -> tuple[np.ndarray, np.ndarray]:
    """Global word of pixel 0 and byte lane (-1: whole word, 32-bit output) of every slot:
    ``wptr_base + (k//4)*moff + e*choff`` (slot = e*slots_per_pass + k), lane k%4 (8-bit) or
    word +k%4 (32-bit)."""
    if cfg.passthrough:
        # channel e*n_procs + j: processor j's (word, lane) + pass e * CHOFF (layer doc)
        n_p = len(cfg.processors)
        e, j = np.divmod(np.arange(n_p * cfg.in_passes), n_p)
        k = np.array([ln for _, ln in cfg.pt_out], dtype=np.int64)[j]
        base = np.array([w for w, _ in cfg.pt_out], dtype=np.int64)[j] + e * cfg.wptr_choff
    else:
        e, k = np.divmod(np.arange(cfg.out_slots), cfg.slots_per_pass)
        base = cfg.wptr_base + (k // 4) * cfg.wptr_moff + e * cfg.wptr_choff
    if cfg.wide:
        base, lanes = base + k % 4, np.full(len(k), -1, dtype=np.int64)
    else:
        lanes = k % 4
    n_pix = cfg.out_rows * cfg.out_cols
    if len(base) and n_pix and int(base.max()) + (n_pix - 1) * cfg.pixel_step >= 1 << 17:
        raise DeviceError(f"layer {cfg.layer}: CNNx16_{cfg.master}_L{cfg.layer}_WPTR_BASE: "
                          "write pointer runs past the last data memory")
    return (np.ascontiguousarray(base, dtype=np.int64),
            np.ascontiguousarray(lanes, dtype=np.int64))


def scatter_output(bus, cfg: LayerConfig, out: np.ndarray) -> list[tuple[int, int]]:
    """Write out[slot, y, x] at the slot's write pointer (_write_pointers) + pixel*pixel_step;
    the byte ranges written, merged and sorted. Which bytes a layer writes depends only on its
    configuration, so they are worked out once and kept with it (_written)."""
    out = np.ascontiguousarray(out.reshape(out.shape[0], -1), dtype=np.int32)
    if "scatter" not in cfg.extra:
        base, lanes = _write_pointers(cfg)
        words = _word_groups(lanes, base)
        at = None if words is not None else \
            M.scatter_index(base, lanes, out.shape[1], cfg.pixel_step)
        cfg.extra["scatter"] = (words, at, _written(base, lanes, out.shape[1], cfg.pixel_step,
                                                    cfg.wide))
    words, at, (writes, memories) = cfg.extra["scatter"]
    sram = bus.stacks["sram"]
    if words is not None:
        M.scatter_words(sram.view(np.uint32), out, words[0], cfg.pixel_step)
    else:  # the general layout: a fancy index kept with the layer
        M.scatter_at(sram, out, at, cfg.wide)
    bus.touch_rows("sram", memories)
    return list(writes)


def _written(base: np.ndarray, lanes: np.ndarray, pixels: int, pixel_step: int, wide: bool
             ) -> tuple[list[tuple[int, int]], list[int]]:
    """The byte ranges M.scatter writes (``pixels`` per slot; merged, sorted) and the data
    memories they lie in (sorted, each once: by np.sort, as np.unique would, which imports
    numpy.ma on its first call, ~7 ms of a warm run, issue 31 #5)."""
    words = base[:, None] + np.arange(pixels) * pixel_step
    addrs = sram_address(words >> 13, words & 0x1FFF)
    if not wide:
        addrs = addrs + lanes[:, None]
    memories = np.sort(words >> 13, axis=None)
    first = np.ones(memories.size, bool)  # (none for no words, as np.unique)
    first[1:] = memories[1:] != memories[:-1]
    return address_ranges(addrs.ravel(), 4 if wide else 1), memories[first].tolist()


def _merged_reads(cfg: LayerConfig, from_memory: bool, *reads: list[tuple[int, int]]
                  ) -> list[tuple[int, int]]:
    """merge_ranges of the ``reads`` lists, kept with the layer: the ranges change only with
    the decoded weights (their MRAM words) and with where the input comes from."""
    weights = cfg.extra.get("weights")
    hit = cfg.extra.get("merged_reads")
    if hit is None or hit[0] is not weights or hit[1] != from_memory:
        hit = cfg.extra["merged_reads"] = (weights, from_memory,
                                           merge_ranges([r for part in reads for r in part]))
    return list(hit[2])


def compute_layer(bus, cfg: LayerConfig, x: np.ndarray | None = None
                  ) -> tuple[np.ndarray, Touched]:
    """Compute the layer's output [slots, out_rows, out_cols] (int32) without writing it, and
    the ranges it read (merged, sorted). ``x`` (int8 [in_channels, H, W], the order of
    _inputs) replaces the gather from data SRAM for input that does not come from memory (FIFO
    input, frame-at-once streaming)."""
    from_memory = x is None
    if from_memory:
        x, r_in = _inputs(bus, cfg)
    else:
        r_in = []
    pool_mode, pool, pool_stride = _POOL[cfg.pool_kind], (cfg.pool_rows, cfg.pool_cols), \
        cfg.pool_stride
    if cfg.operands > 1:
        # element-wise stage before the convolution; prepool pools each operand first, else
        # the layer's pooling follows the operation [UG-CNN: Table 27-25],
        # [AI8X: Per-Layer Configuration]
        xs = x.reshape((cfg.operands, -1) + x.shape[1:])
        x = eltwise_k.run_ewise_kernel(xs, cfg.ewise_func, prepool=cfg.prepool, pool=pool,
                               pool_stride=pool_stride, pool_mode=pool_mode,
                               avg_policy=cfg.avg_policy)
        if cfg.prepool:
            pool_mode, pool, pool_stride = pool_k.POOL_NONE, (1, 1), 1
    if cfg.passthrough:
        out = eltwise_k.run_passthrough_kernel(
            x, pool=pool, pool_stride=pool_stride,
            pool_mode=pool_mode, avg_policy=cfg.avg_policy,
            pad=(cfg.pad_rows, cfg.pad_cols), shift=cfg.shift, act=_ACT[cfg.activation])
        return out.astype(np.int32), Touched(reads=_merged_reads(cfg, from_memory, r_in))
    w, packed, r_w = _weights(bus, cfg)
    b, r_b = _bias(bus, cfg)
    launches = cfg.extra.get("launches")  # the kernel's call, kept with these weights
    if launches is None or launches[0] is not packed:
        launches = cfg.extra["launches"] = (packed, {})
    out = conv_k.run_layer_kernel(
        x, w, b, pool=pool, pool_stride=pool_stride,
        pool_mode=pool_mode, avg_policy=cfg.avg_policy,
        pad=(cfg.pad_rows, cfg.pad_cols), conv_stride=cfg.conv_stride, shift=cfg.shift,
        act=_ACT[cfg.activation], wide=cfg.wide, deconv=cfg.deconv, packed=packed,
        launches=launches[1])
    return out, Touched(reads=_merged_reads(cfg, from_memory, r_in, r_w, r_b))


def run_layer(bus, cfg: LayerConfig, x: np.ndarray | None = None) -> Touched:
    """Run one layer: gather, compute, scatter. Returns the ranges read and written (merged,
    sorted; reads happen before writes, as the whole input is gathered first). ``x``: see
    compute_layer."""
    out, touched = compute_layer(bus, cfg, x)
    touched.writes = scatter_output(bus, cfg, out)
    return touched
