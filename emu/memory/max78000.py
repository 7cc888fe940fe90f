"""MAX78000 memory traffic of one layer: gather the input channels from data SRAM, the kernels
from MRAM, scatter the outputs back, and turn a mask of used MRAM words into address ranges.
numba loops for the usual layouts, numpy for what runs rarely or once per weight load (each
numba kernel costs 0.3-0.5 s of a first run to compile, issue 31 #5).

Pure kernels on 2-D uint8 arrays (one row per memory: ``sram[16, 0x8000]`` for the 16 data
memories, ``mram[64, 0x4000]`` for the 64 processors' MRAM blocks); the address formulas and
their sources are documented in devices/max78000/datapath.py, which computes the per-processor
and per-slot parameters and calls these. Every kernel checks its indices and returns an error
code instead of reading or writing outside the memory (numba does not bounds-check).
"""
from __future__ import annotations

import numpy as np

from ..jit import njit
from ..numeric.max78000 import sign_extend

#: MRAM byte positions of k0..k8 inside one 16-byte word (devices/max78000/datapath.py)
K_BYTES = np.array([0, 7, 6, 5, 4, 11, 10, 9, 8], dtype=np.int64)

SRAM_WORDS = 8192
MRAM_WORDS = 768


def hwc_index(memory: np.ndarray, lane: np.ndarray, read_word: np.ndarray, h: int, w: int,
              passes: int, ops: int) -> tuple[np.ndarray, int]:
    """Where :func:`gather_hwc` reads: (int32 ``[h*w, ops*passes*n]`` byte offsets into the
    data memories as one flat array, -1 or the first processor index j whose words run past
    its memory). Channel ``(o*passes + e)*n + j`` of pixel ``pix`` is byte ``lane[j]`` of word
    ``read_word[j] + (pix*passes + e)*ops + o`` of data memory ``memory[j]`` (a memory is
    ``4*SRAM_WORDS`` bytes of the flat array)."""
    n = memory.shape[0]
    over = np.flatnonzero(read_word + h * w * passes * ops > SRAM_WORDS)
    if over.size:
        return np.zeros((0, 0), np.int32), int(over[0])
    o, e, j = np.unravel_index(np.arange(ops * passes * n), (ops, passes, n))
    first = 4 * (memory[j] * SRAM_WORDS + read_word[j] + e * ops + o) + lane[j]
    pixel = 4 * passes * ops * np.arange(h * w)
    return (pixel[:, None] + first[None, :]).astype(np.int32), -1


def take_hwc(sram: np.ndarray, index: np.ndarray, h: int, w: int) -> np.ndarray:
    """The int8 ``[h, w, C]`` input at :func:`hwc_index`'s ``index`` of the data memories
    ``sram`` (uint8 ``[16, 4*SRAM_WORDS]``).

    Why numpy and not a numba loop: this general layout (processors not in groups of four on
    lanes 0-3, e.g. a 1- or 3-channel first layer) is the rare one and small; its kernel cost
    ~0.5 s of a first run to compile (issue 31 #5), the one fancy index ~2 us on MNIST's first
    layer. The usual layout keeps its kernel (:func:`gather_hwc_words`)."""
    return sram.reshape(-1).view(np.int8)[index].reshape(h, w, index.shape[1])


def gather_hwc(sram: np.ndarray, memory: np.ndarray, lane: np.ndarray, read_word: np.ndarray,
               h: int, w: int, passes: int, ops: int) -> tuple[np.ndarray, int]:
    """HWC input of the data memories ``sram`` (uint8): (int8 ``[h, w, ops*passes*n]``, -1 or
    the first processor index j whose words run past the memory), read at :func:`hwc_index`:
    the channels of a pixel side by side, as the memories hold them, so pooling and the
    convolution's input packing run along contiguous channels. (The datapath keeps the index
    per layer and calls :func:`take_hwc`.)"""
    index, bad = hwc_index(memory, lane, read_word, h, w, passes, ops)
    if bad >= 0:
        return np.zeros((h, w, ops * passes * memory.shape[0]), np.int8), bad
    return take_hwc(sram, index, h, w), -1


def gather_hwc_words(sram: np.ndarray, memory: np.ndarray, read_word: np.ndarray, h: int,
                     w: int, passes: int, ops: int, n: int) -> tuple[np.ndarray, int]:
    """:func:`_gather_hwc_words` of the data memories ``sram`` (uint8), as int8 [h, w, C].
    The output is allocated here: an allocation inside the kernel costs ~0.1 s more to compile
    (numba compiles its np.zeros for each type)."""
    x32 = np.empty((h * w, ops * passes * n // 4), np.uint32)
    bad = _gather_hwc_words(sram.view(np.uint32), memory, read_word, h, w, passes, ops, x32)
    return x32.view(np.int8).reshape(h, w, 4 * x32.shape[1]), bad


@njit(nogil=True, cache=True)
def _gather_hwc_words(sram32, memory, read_word, h, w, passes, ops, x32):
    """:func:`gather_hwc` when the ``n`` processors come in groups of four that share a data
    memory and a read pointer and take lanes 0-3 in order (the usual layout: processor p reads
    lane p % 4 of memory p // 4): then the four channels of a group are one 32-bit word of the
    memory and one aligned word of the output row. ``sram32`` is the data memories as uint32
    words; ``memory``, ``read_word`` per group; fills ``x32`` (uint32 ``[h*w,
    ops*passes*n/4]``). Returns -1, or the first processor index whose words run past the
    memory (``x32`` then unfilled)."""
    g_n = memory.shape[0]
    n = 4 * g_n
    n_words = h * w * passes * ops
    for g in range(g_n):
        if read_word[g] + n_words > SRAM_WORDS:
            return 4 * g
    step = passes * ops
    for g in range(g_n):
        m = memory[g]
        for e in range(passes):
            for o in range(ops):
                src = read_word[g] + e * ops + o
                dst = (o * passes + e) * n // 4 + g
                for pix in range(h * w):
                    x32[pix, dst] = sram32[m, src + pix * step]
    return -1


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


def gather_weights(mram: np.ndarray, proc: np.ndarray, mcnt_sad: np.ndarray, slots: int,
                   passes: int, bits: int, ks: int, oned_sad: int
                   ) -> tuple[np.ndarray, np.ndarray, int]:
    """Kernels of every (output slot t, input pass e, processor j): mask counter
    ``cnt = mcnt_sad[j] + (t*passes + e)*bits`` (a bit address), kernel start byte
    ``(cnt >> 3)*ks + oned_sad`` of processor ``proc[j]``'s stream, element i at stream byte
    ``start + ks-1-i`` = word ``B//9``, k-position ``8 - B%9``, field at bit ``cnt & 7``,
    sign-extended from ``bits``. Returns (int8 ``[slots, passes*n, ks]``, uint8 ``[n, 768]``
    words used, -1 or the first j whose counter runs past MRAM word 767).

    Why numpy and not a numba loop: it runs once per weight load (the datapath keeps the
    result until MRAM changes), ~0.3 ms for 64 processors x 64 slots; its kernel cost ~0.5 s
    of every first run to compile (issue 31 #5)."""
    n = proc.shape[0]
    cnt = mcnt_sad[:, None] + np.arange(slots * passes) * bits  # [j, t*passes + e]
    byte = ((cnt >> 3) * ks + oned_sad)[:, :, None] + (ks - 1 - np.arange(ks))  # [j, te, i]
    col = byte // 9
    outside = ((col >= MRAM_WORDS) | (byte < 0)).reshape(n, -1).any(axis=1)
    if outside.any():
        return (np.zeros((slots, passes * n, ks), np.int8), np.zeros((n, MRAM_WORDS), np.uint8),
                int(np.flatnonzero(outside)[0]))
    rows = np.asarray(proc)[:, None, None]
    w = sign_extend(mram[rows, 16 * col + K_BYTES[8 - byte % 9]], (cnt & 7)[:, :, None], bits)
    used = np.zeros((n, MRAM_WORDS), np.uint8)
    used[np.arange(n)[:, None, None], col] = 1
    # [j, t, e, i] -> [t, e*n + j, i], C-contiguous (with one pass the reshape is a strided
    # view, which every later use of the weights would copy)
    w = w.reshape(n, slots, passes, ks).transpose(1, 2, 0, 3).reshape(slots, passes * n, ks)
    return np.ascontiguousarray(w), used, -1


def scatter_index(slot_word: np.ndarray, slot_lane: np.ndarray, pixels: int,
                  pixel_step: int) -> np.ndarray:
    """Where :func:`scatter` writes ``out[slot, pixel]``: int64 ``[slots, pixels]`` byte offsets
    into the data memories as one flat array, ``4*g + lane`` (8-bit output) or ``4*g`` (lane
    -1: a whole word, 32-bit output) for global word ``g = slot_word[slot] + pixel*pixel_step``
    (bits 16:13 = data memory, 12:0 = word; a memory is ``4*SRAM_WORDS`` bytes)."""
    words = slot_word[:, None] + np.arange(pixels) * pixel_step
    return 4 * words + np.maximum(slot_lane, 0)[:, None]


def scatter_at(sram: np.ndarray, out: np.ndarray, at: np.ndarray, wide: bool) -> None:
    """Write int32 ``out[slot, pixel]`` at the flat byte offsets ``at`` (:func:`scatter_index`)
    of the data memories ``sram`` (uint8, C-contiguous): its low byte, or if ``wide`` the whole
    little-endian word (``at`` then word aligned). Where two outputs share a byte the later one
    (slot-major order) stays, as numpy assigns a 1-D fancy index in order.

    Why numpy and not a numba loop: this general layout (32-bit output, or slots not in groups
    of four on lanes 0-3) is the rare one, usually a network's small last layer; its kernel
    cost ~0.4 s of a first run to compile (issue 31 #5). The usual layout keeps its kernel
    (:func:`scatter_words`)."""
    flat = sram.reshape(-1)
    if wide:
        flat.view(np.uint32)[at >> 2] = out.view(np.uint32)
    else:
        flat[at] = out.astype(np.uint8)  # the low byte: integer casts wrap


def scatter(sram: np.ndarray, out: np.ndarray, slot_word: np.ndarray, slot_lane: np.ndarray,
            pixel_step: int) -> None:
    """Write int32 ``out[slot, pixel]`` at global word ``slot_word[slot] + pixel*pixel_step``:
    byte lane ``slot_lane[slot]`` of the low byte (8-bit output), or the whole little-endian
    word when every lane is -1 (32-bit output); :func:`scatter_index`, :func:`scatter_at`. The
    caller checks the pointers' range (and knows which bytes this writes: they depend only on
    the arguments, devices/max78000/datapath.py keeps them per layer)."""
    wide = bool(len(slot_lane)) and bool(slot_lane[0] < 0)
    if len(slot_lane) and bool((slot_lane < 0).any()) != bool((slot_lane < 0).all()):
        raise ValueError("scatter: 8-bit and 32-bit slots mixed")
    scatter_at(sram, out, scatter_index(slot_word, slot_lane, out.shape[1], pixel_step), wide)


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
