"""MAX78000 memory traffic of one layer as numba loops: gather the input channels from data SRAM,
the kernels from MRAM, scatter the outputs back, and turn a mask of used MRAM words into address
ranges.

Pure kernels on 2-D uint8 arrays (one row per memory: ``sram[16, 0x8000]`` for the 16 data
memories, ``mram[64, 0x4000]`` for the 64 processors' MRAM blocks); the address formulas and
their sources are documented in devices/max78000/datapath.py, which computes the per-processor
and per-slot parameters and calls these. Every kernel checks its indices and returns an error
code instead of reading or writing outside the memory (numba does not bounds-check).
"""
from __future__ import annotations

import numpy as np

from ..jit import njit
from ..numeric.max78000 import field_value

#: MRAM byte positions of k0..k8 inside one 16-byte word (devices/max78000/datapath.py)
K_BYTES = np.array([0, 7, 6, 5, 4, 11, 10, 9, 8], dtype=np.int64)

SRAM_WORDS = 8192
MRAM_WORDS = 768


def gather_hwc(sram: np.ndarray, memory: np.ndarray, lane: np.ndarray, read_word: np.ndarray,
               h: int, w: int, passes: int, ops: int) -> tuple[np.ndarray, int]:
    """:func:`_gather_hwc` of the data memories ``sram`` (uint8). The int8 view is taken here:
    inside numba, ``view`` costs a second of compilation."""
    return _gather_hwc(sram.view(np.int8), memory, lane, read_word, h, w, passes, ops)


def gather_hwc_words(sram: np.ndarray, memory: np.ndarray, read_word: np.ndarray, h: int,
                     w: int, passes: int, ops: int, n: int) -> tuple[np.ndarray, int]:
    """:func:`_gather_hwc_words` of the data memories ``sram`` (uint8), as int8 [h, w, C]."""
    x32, bad = _gather_hwc_words(sram.view(np.uint32), memory, read_word, h, w, passes, ops, n)
    return x32.view(np.int8).reshape(h, w, 4 * x32.shape[1]), bad


@njit(nogil=True, cache=True)
def _gather_hwc(s8, memory, lane, read_word, h, w, passes, ops):
    """HWC input: channel ``(o*passes + e)*n + j`` pixel (r, c) is byte ``lane[j]`` of word
    ``read_word[j] + ((r*w + c)*passes + e)*ops + o`` of data memory ``memory[j]``. Returns
    (int8 ``[h, w, ops*passes*n]``, -1 or the first processor index j whose words run past the
    memory): the channels of a pixel side by side, as the memories hold them, so pooling and
    the convolution's input packing run along contiguous channels."""
    n = memory.shape[0]
    c_n = ops * passes * n
    x = np.zeros((h, w, c_n), dtype=np.int8)
    n_words = h * w * passes * ops
    for j in range(n):
        if read_word[j] + n_words > SRAM_WORDS:
            return x, j
    hw = h * w
    flat = x.reshape(hw, c_n)
    step = 4 * passes * ops
    for j in range(n):
        m = memory[j]
        for e in range(passes):
            for o in range(ops):
                src = 4 * (read_word[j] + e * ops + o) + lane[j]
                c = (o * passes + e) * n + j
                for pix in range(hw):  # one constant stride: the loop numba compiles best
                    flat[pix, c] = s8[m, src + pix * step]
    return x, -1


@njit(nogil=True, cache=True)
def _gather_hwc_words(sram32, memory, read_word, h, w, passes, ops, n):
    """:func:`gather_hwc` when the ``n`` processors come in groups of four that share a data
    memory and a read pointer and take lanes 0-3 in order (the usual layout: processor p reads
    lane p % 4 of memory p // 4): then the four channels of a group are one 32-bit word of the
    memory and one aligned word of the output row. ``sram32`` is the data memories as uint32
    words; ``memory``, ``read_word`` per group. Returns (uint32 ``[h*w, ops*passes*n/4]``, -1
    or the first processor index whose words run past the memory)."""
    g_n = memory.shape[0]
    c4 = ops * passes * n // 4
    x32 = np.zeros((h * w, c4), dtype=np.uint32)
    n_words = h * w * passes * ops
    for g in range(g_n):
        if read_word[g] + n_words > SRAM_WORDS:
            return x32, 4 * g
    step = passes * ops
    for g in range(g_n):
        m = memory[g]
        for e in range(passes):
            for o in range(ops):
                src = read_word[g] + e * ops + o
                dst = (o * passes + e) * n // 4 + g
                for pix in range(h * w):
                    x32[pix, dst] = sram32[m, src + pix * step]
    return x32, -1


@njit(nogil=True, cache=True)
def gather_chw(sram, memory, read_word, h, w):
    """CHW input: pixel i of processor j's channel is byte ``i`` of the words from
    ``read_word[j]`` of its data memory (4 pixels per word). Returns (int8 ``[n, h, w]``, -1 or
    the first j that runs past the memory)."""
    n = memory.shape[0]
    x = np.zeros((n, h, w), dtype=np.int8)
    n_words = (h * w + 3) // 4
    for j in range(n):
        if read_word[j] + n_words > SRAM_WORDS:
            return x, j
    for j in range(n):
        row = sram[memory[j]]
        start = 4 * read_word[j]
        for i in range(h * w):
            v = np.int64(row[start + i])
            x[j, i // w, i % w] = v if v < 128 else v - 256
    return x, -1


@njit(nogil=True, cache=True)
def gather_weights(mram, proc, mcnt_sad, slots, passes, bits, ks, oned_sad):
    """Kernels of every (output slot t, input pass e, processor j): mask counter
    ``cnt = mcnt_sad[j] + (t*passes + e)*bits`` (a bit address), kernel start byte
    ``(cnt >> 3)*ks + oned_sad`` of processor ``proc[j]``'s stream, element i at stream byte
    ``start + ks-1-i`` = word ``B//9``, k-position ``8 - B%9``, field at bit ``cnt & 7``,
    sign-extended from ``bits``. Returns (int8 ``[slots, passes*n, ks]``, uint8 ``[n, 768]``
    words used, -1 or the first j whose counter runs past MRAM word 767)."""
    n = proc.shape[0]
    w = np.zeros((slots, passes * n, ks), dtype=np.int8)
    used = np.zeros((n, MRAM_WORDS), dtype=np.uint8)
    for j in range(n):
        row = mram[proc[j]]
        for t in range(slots):
            for e in range(passes):
                cnt = mcnt_sad[j] + (t * passes + e) * bits
                shift = cnt & 7
                start = (cnt >> 3) * ks + oned_sad
                for i in range(ks):
                    byte = start + ks - 1 - i
                    col = byte // 9
                    if col >= MRAM_WORDS or byte < 0:
                        return w, used, j
                    used[j, col] = 1
                    w[t, e * n + j, i] = field_value(row[16 * col + K_BYTES[8 - byte % 9]],
                                                     shift, bits)
    return w, used, -1


@njit(nogil=True, cache=True)
def scatter(sram, out, slot_word, slot_lane, pixel_step):
    """Write ``out[slot, pixel]`` at global word ``slot_word[slot] + pixel*pixel_step`` (bits
    16:13 = data memory, 12:0 = word): byte lane ``slot_lane[slot]`` of the low byte (8-bit
    output), or the whole little-endian word when the lane is -1 (32-bit output). The caller
    checks the pointers' range (and knows which bytes this writes: they depend only on the
    arguments, devices/max78000/datapath.py keeps them per layer)."""
    s_n, p_n = out.shape
    for s in range(s_n):
        lane, g0 = slot_lane[s], slot_word[s]
        if p_n and pixel_step >= 0 and (g0 + (p_n - 1) * pixel_step) >> 13 == g0 >> 13:
            # the slot stays in one data memory: a constant byte stride (half the time of the
            # per-pixel address split below)
            row, b0 = sram[g0 >> 13], 4 * (g0 & 0x1FFF)
            for p in range(p_n):
                _store(row, b0 + 4 * p * pixel_step, out[s, p], lane)
            continue
        for p in range(p_n):
            g = g0 + p * pixel_step
            _store(sram[g >> 13], 4 * (g & 0x1FFF), out[s, p], lane)


@njit(nogil=True, cache=True)
def _store(row, b, v, lane):
    """Byte ``lane`` of the word at byte ``b`` of ``row`` = the low byte of v, or (lane -1) the
    whole little-endian word = v."""
    if lane < 0:
        for i in range(4):
            row[b + i] = (v >> (8 * i)) & 0xFF
    else:
        row[b + lane] = v & 0xFF


@njit(nogil=True, cache=True)
def _word(out, k, p):
    """The little-endian word of output slots k..k+3 (low bytes) at pixel p."""
    return ((out[k, p] & 0xFF) | (out[k + 1, p] & 0xFF) << 8 | (out[k + 2, p] & 0xFF) << 16
            | (out[k + 3, p] & 0xFF) << 24)


@njit(nogil=True, cache=True)
def scatter_words(sram32, out, group_word, pixel_step):
    """:func:`scatter` of 8-bit output when the slots come in groups of four that
    share a write pointer and take lanes 0-3 in order: slots 4g..4g+3 of a pixel are one
    little-endian word at global word ``group_word[g] + pixel*pixel_step`` (bits 16:13 = data
    memory). ``sram32`` is the data memories as uint32 words; ``out`` int32 [4G, pixels]."""
    p_n = out.shape[1]
    for g in range(group_word.shape[0]):
        g0, k = group_word[g], 4 * g
        if pixel_step == 1 and (g0 + p_n - 1) >> 13 == g0 >> 13:
            # consecutive words of one memory: a plain loop, which numba vectorises
            row, w0 = sram32[g0 >> 13], g0 & 0x1FFF
            for p in range(p_n):
                row[w0 + p] = _word(out, k, p)
            continue
        for p in range(p_n):
            a = g0 + p * pixel_step
            sram32[a >> 13, a & 0x1FFF] = _word(out, k, p)


def mask_ranges(mask: np.ndarray, row_base: np.ndarray, unit: int, lo: np.ndarray,
                hi: np.ndarray) -> np.ndarray:
    """Runs of 1 in the 0/1 ``mask[row, i]`` for ``lo[row] <= i < hi[row]`` as ``[start, end)``
    byte addresses ``row_base[row] + i*unit``; int64 ``[k, 2]`` sorted by row then address
    (runs that touch across rows are merged by the caller). Plain numpy, not a kernel: it runs
    once per layer and weight load (~50 us either way), and the numba kernel it was cost 0.5 s
    of every first run to compile (issue 31 #5)."""
    rows, n = mask.shape
    edged = np.zeros((rows, n + 2), np.int8)  # a 0 either side: every run has both edges
    edged[:, 1:-1] = mask == 1
    if np.any(lo > 0) or np.any(hi < n):
        cols = np.arange(n)
        edged[:, 1:-1] &= (cols >= lo[:, None]) & (cols < hi[:, None])
    step = np.diff(edged.ravel())  # row by row: each row's last step is into its final 0
    at = np.flatnonzero(step)  # by row, then address: starts (+1) and ends (-1) alternate
    r, first = np.divmod(at[0::2], n + 2)
    end = at[1::2] - r * (n + 2)
    base = np.asarray(row_base, np.int64)[r]
    return np.stack([base + first * unit, base + end * unit], axis=1)
