"""Ethos-U85 tensor layouts: NHWC <-> NHCWB16 conversion and the TRM's element addressing with
tiles (``element_address_in_region``, [U85-TRM: §3.6.5]; [U85-TRM: §3.6.5, §3.8]). Plain numpy, no
device knowledge: the caller passes the register values.

NHCWB16 [U85-TRM: §3.6.5, §3.11.18]: channels in bricks of 16; element (y, x, c) at
``base + y*stride_y + (c >> 4)*stride_c + (16*x + (c & 15))*element_size``; a dense tensor has
stride_c = W*16*es and stride_y = ceil(C/16)*stride_c, i.e. array shape [H, C/16, W, 16].
"""
from __future__ import annotations

import numpy as np

NHWC, NHCWB16 = 0, 1
TILE2X2, TILE3X1, CHAINED, NONE = 0, 1, 2, 3


def nhwc_to_nhcwb16(t: np.ndarray) -> np.ndarray:
    """[H, W, C] (or [N, H, W, C]) -> dense NHCWB16 [H, ceil(C/16), W, 16] (or with N);
    channels past C are zero."""
    t = np.asarray(t)
    if t.ndim == 4:
        return np.stack([nhwc_to_nhcwb16(x) for x in t])
    h, w, c = t.shape
    cb = (c + 15) // 16
    pad = np.zeros((h, w, cb * 16), t.dtype)
    pad[:, :, :c] = t
    return np.ascontiguousarray(pad.reshape(h, w, cb, 16).transpose(0, 2, 1, 3))


def nhcwb16_to_nhwc(b: np.ndarray, depth: int) -> np.ndarray:
    """Dense NHCWB16 [H, C/16, W, 16] (or [N, ...]) -> [H, W, depth]."""
    b = np.asarray(b)
    if b.ndim == 5:
        return np.stack([nhcwb16_to_nhwc(x, depth) for x in b])
    h, cb, w, _ = b.shape
    return np.ascontiguousarray(b.transpose(0, 2, 1, 3).reshape(h, w, cb * 16)[:, :, :depth])


def element_addresses(shape, bases, stride_y, stride_x, stride_c, width0, heights, storage=TILE2X2,
                      element_size=1, fmt=NHWC, nhwc_c_times_element_size=True) -> np.ndarray:
    """Byte offsets (within the region) of every element of a logical [H, W, C] tensor, as
    ``element_address_in_region`` [U85-TRM: §3.6.5]::

        tile2x2: x >= width0 -> tile 1, x -= width0; then y >= height[tile] -> tile += 2,
                 y -= height[tile]            (height = (HEIGHT0, HEIGHT1), represented values)
        tile3x1: y >= height[1] -> tile 2, y -= height[1]; elif y >= height[0] -> tile 1 (G-A2)
        addr = bases[tile] + y*stride_y
               + (nhwc ? x*stride_x + c*es : (c>>4)*stride_c + (16x + (c&15))*es)

    G-A1: the seed adds ``c`` (not c*es) for NHWC; ``nhwc_c_times_element_size=False`` selects
    that literal reading. ``storage`` CHAINED/NONE have no address (ValueError)."""
    H, W, C = shape
    if storage not in (TILE2X2, TILE3X1):
        raise ValueError("chained/none storage has no memory address")
    y = np.arange(H, dtype=np.int64)[:, None, None] + np.zeros((1, W, C), np.int64)
    x = np.arange(W, dtype=np.int64)[None, :, None] + np.zeros((H, 1, C), np.int64)
    c = np.arange(C, dtype=np.int64)[None, None, :] + np.zeros((H, W, 1), np.int64)
    tile = np.zeros_like(y)
    if storage == TILE2X2:
        right = x >= width0
        x = np.where(right, x - width0, x)
        tile = np.where(right, 1, 0)
        hsel = np.where(tile == 1, heights[1], heights[0])
        down = y >= hsel
        y = np.where(down, y - hsel, y)
        tile = tile + np.where(down, 2, 0)
    else:
        t2 = y >= heights[1]
        t1 = ~t2 & (y >= heights[0])
        y = np.where(t2, y - heights[1], np.where(t1, y - heights[0], y))
        tile = np.where(t2, 2, np.where(t1, 1, 0))
    base = np.asarray([int(b) for b in bases] + [0] * (4 - len(bases)), np.int64)[tile]
    addr = base + y * stride_y
    es = int(element_size)
    if fmt == NHWC:
        addr = addr + x * stride_x + c * (es if nhwc_c_times_element_size else 1)
    else:
        addr = addr + (c >> 4) * stride_c + (16 * x + (c & 15)) * es
    return addr


def read_elements(mem, addrs: np.ndarray, bits: int, signed: bool) -> np.ndarray:
    """Little-endian loads of ``bits``-wide elements at byte offsets ``addrs`` of ``mem``
    (bytes-like or uint8 array), sign- or zero-extended to int64."""
    m = (np.frombuffer(mem, np.uint8) if not isinstance(mem, np.ndarray)
         else mem.view(np.uint8).ravel())
    es = bits // 8
    v = np.zeros(addrs.shape, np.uint64)
    for i in range(es):
        v |= m[addrs + i].astype(np.uint64) << np.uint64(8 * i)
    if bits == 64:
        return v.view(np.int64) if signed else v.astype(np.int64)
    v = v.astype(np.int64)
    if signed:
        v = np.where(v >= (1 << (bits - 1)), v - (1 << bits), v)
    return v


def write_elements(mem: np.ndarray, addrs: np.ndarray, values, bits: int) -> None:
    """Little-endian stores of the low ``bits`` of ``values`` at byte offsets ``addrs`` into the
    writable uint8 array ``mem``."""
    es = bits // 8
    v = np.asarray(values)
    if v.dtype != np.uint64:
        v = v.astype(np.int64).view(np.uint64)
    v = np.broadcast_to(v, addrs.shape)
    for i in range(es):
        mem[addrs + i] = ((v >> np.uint64(8 * i)) & np.uint64(0xFF)).astype(np.uint8)
