"""NVDLA's in-memory data formats for nv_small (memory atom 8 bytes, atomic C = atomic K = 8; facts
from the hardware repository's spec/defs/nv_small.spec and the "In-memory data formats" chapter
of its documentation):

* feature data (int8): surfaces of 8 channels; element (c, y, x) of batch n at
  ``base + n*batch_stride + (c // 8)*surface_stride + y*line_stride + x*8 + c % 8`` (the last
  surface of a cube whose channels are not a multiple of 8 keeps its 8-byte atoms);
* weights of a direct convolution (uncompressed int8): kernel groups of 8 kernels (the last may
  hold fewer); inside a group channel blocks of 8 (the last may hold fewer), then kernel rows,
  then columns, then the group's kernels, each contributing its block's channels: the scan
  order C' -> K -> W -> H -> C of the documentation, kernel after kernel group. No padding: a
  kernel takes R*S*C bytes (CDMA D_WEIGHT_SIZE_0 BYTE_PER_KERNEL);
* weights of an image convolution: R rows of kc values a kernel (conv.py), as above with width
  1, or grouped by CSC's post extension (:func:`read_image_weights`).

Every function takes the memory as a flat uint8 array and an offset in it; the caller has made
sure the whole range lies in that memory (:func:`feature_span`).
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from ..description import FieldView
from ..ranges import merge_ranges

ATOM = 8  # bytes of a memory atom = channels of an int8 surface (nv_small)
ATOM_K = 8  # kernels of a weight group (nv_small MAC_ATOMIC_K_SIZE_8)

#: reads a register of a unit's consumer group by field name: (unit, register) -> FieldView
Reg = Callable[[str, str], FieldView]


def cube_address(reg: Reg, unit: str, kind: str) -> tuple[int, int, int]:
    """(base address, line stride, surface stride) of the cube ``unit`` reads or writes as
    ``kind`` ("src", "dst", or an SDP_RDMA operand "bs"/"bn"): its D_<KIND>_BASE_ADDR_HIGH/LOW,
    D_<KIND>_LINE_STRIDE and D_<KIND>_SURFACE_STRIDE, read by field name (<kind>_base_addr_high,
    ...), the same in every unit of configs/nvdla.toml."""
    k, up = kind.lower(), kind.upper()
    high = getattr(reg(unit, f"D_{up}_BASE_ADDR_HIGH"), f"{k}_base_addr_high")
    low = getattr(reg(unit, f"D_{up}_BASE_ADDR_LOW"), f"{k}_base_addr_low")
    return (high << 32 | low, getattr(reg(unit, f"D_{up}_LINE_STRIDE"), f"{k}_line_stride"),
            getattr(reg(unit, f"D_{up}_SURFACE_STRIDE"), f"{k}_surface_stride"))


def feature_span(c: int, h: int, w: int, line: int, surf: int) -> int:
    """Bytes from the first to one past the last byte of a feature cube."""
    surfaces = -(-c // ATOM)
    return (surfaces - 1) * surf + (h - 1) * line + w * ATOM


@functools.lru_cache(maxsize=32)
def _feature_index(c: int, h: int, w: int, line: int, surf: int) -> np.ndarray:
    cc = np.arange(c, dtype=np.int64)[:, None, None]
    yy = np.arange(h, dtype=np.int64)[None, :, None]
    xx = np.arange(w, dtype=np.int64)[None, None, :]
    idx = (cc // ATOM) * surf + yy * line + xx * ATOM + cc % ATOM
    idx.flags.writeable = False
    return idx


def _surfaces(data: np.ndarray, offset: int, c: int, h: int, w: int, line: int, surf: int
              ) -> tuple[np.ndarray, np.ndarray | None]:
    """The cube's bytes in memory as strided views (no copy): its whole surfaces [S, H, W, 8]
    and the last surface's channels [H, W, C % 8] (None when C is a multiple of 8)."""
    full, rest = divmod(c, ATOM)
    base = data[offset:offset + feature_span(c, h, w, line, surf)]
    strided = np.lib.stride_tricks.as_strided
    whole = strided(base, (full, h, w, ATOM), (surf, line, ATOM, 1))
    last = strided(base[full * surf:], (h, w, rest), (line, ATOM, 1)) if rest else None
    return whole, last


def read_feature(data: np.ndarray, offset: int, c: int, h: int, w: int, line: int,
                 surf: int, channels_last: bool = False) -> np.ndarray:
    """int8 cube [C, H, W] stored at ``offset``: a new array, whose memory is [H, W, C] when
    ``channels_last`` (the convolution kernel's input layout: then it is not copied again).
    Copied surface by surface through strided views (issue 31 #2: a gather through an index
    array cost ~3x more)."""
    if channels_last and c % ATOM == 0 and (offset | line | surf) % ATOM == 0:
        # whole aligned atoms (the convolution's input): one 8-byte move per atom through a
        # view made by the ndarray constructor, not as_strided, whose Python wrapper cost
        # 2.5 us a call, three calls a third of this copy (issue 31 #2)
        hwc = np.empty((h, w, c), np.uint8)
        hwc.view(np.uint64)[...] = np.ndarray((h, w, c // ATOM), np.uint64, data, offset,
                                              (line, ATOM, surf))
        return hwc.transpose(2, 0, 1).view(np.int8)
    whole, last = _surfaces(data, offset, c, h, w, line, surf)
    full = whole.shape[0] * ATOM
    if channels_last:
        hwc = np.empty((h, w, -(-c // ATOM) * ATOM), np.uint8)
        atoms = hwc.view(np.uint64)[:, :, :whole.shape[0]]
        if (offset | line | surf) % ATOM == 0:  # aligned atoms: one 8-byte move per atom
            base = data[offset:offset + feature_span(c, h, w, line, surf)].view(np.uint64)
            atoms[...] = np.lib.stride_tricks.as_strided(
                base, (h, w, whole.shape[0]), (line, ATOM, surf))
        else:
            hwc.reshape(h, w, -1, ATOM)[:, :, :whole.shape[0]] = whole.transpose(1, 2, 0, 3)
        cube = hwc.transpose(2, 0, 1)[:c]
    else:
        cube = np.empty((c, h, w), np.uint8)
        cube[:full].reshape(-1, ATOM, h, w)[...] = whole.transpose(0, 3, 1, 2)
    if last is not None:
        cube[full:] = last.transpose(2, 0, 1)
    return cube.view(np.int8)


def write_feature(data: np.ndarray, offset: int, cube: np.ndarray, line: int, surf: int) -> None:
    """Store the int8 cube [C, H, W] at ``offset`` (bytes between atoms keep their values).
    Through strided views where no two elements share a byte (the usual layouts); else through
    the index array, whose order decides which element a shared byte keeps."""
    c, h, w = cube.shape
    if not unique_bytes(c, h, w, line, surf):
        idx = _feature_index(c, h, w, line, surf)
        data[offset:offset + feature_span(c, h, w, line, surf)][idx] = cube.view(np.uint8)
        return
    whole, last = _surfaces(data, offset, c, h, w, line, surf)
    src = cube.view(np.uint8)
    full = whole.shape[0] * ATOM
    whole[...] = src[:full].reshape(-1, ATOM, h, w).transpose(0, 2, 3, 1)
    if last is not None:
        last[...] = src[full:].transpose(1, 2, 0)


@functools.lru_cache(maxsize=32)
def unique_bytes(c: int, h: int, w: int, line: int, surf: int) -> bool:
    """Whether every element of the cube has a byte of its own (then the order of its stores
    does not matter: sdp.process stores in place). No two equal neighbours once sorted: not
    np.unique, which imports numpy.ma on its first call (~7 ms of a warm run, issue 31 #5)."""
    idx = np.sort(_feature_index(c, h, w, line, surf), axis=None)
    return bool((idx[1:] != idx[:-1]).all())


def written_ranges(addr: int, c: int, h: int, w: int, line: int, surf: int
                   ) -> list[tuple[int, int]]:
    """The [start, end) bus ranges a feature cube's atoms occupy (one per line of a surface,
    merged where lines touch or overlap); kept per cube placement (a layer writes the same one
    on every run: building them took ~70 us, more than storing the cube)."""
    return list(_written_ranges(addr, c, h, w, line, surf))


@functools.lru_cache(maxsize=64)
def _written_ranges(addr: int, c: int, h: int, w: int, line: int, surf: int
                    ) -> tuple[tuple[int, int], ...]:
    starts = (addr + s * surf + y * line for s in range(-(-c // ATOM)) for y in range(h))
    return tuple(merge_ranges([(a, a + w * ATOM) for a in starts]))


@functools.lru_cache(maxsize=32)
def _weight_index(k: int, c: int, r: int, s: int) -> np.ndarray:
    """Byte offset of w[k, r, s, c] in the direct-convolution weight format."""
    kk = np.arange(k, dtype=np.int64)[:, None, None, None]
    rr = np.arange(r, dtype=np.int64)[None, :, None, None]
    ss = np.arange(s, dtype=np.int64)[None, None, :, None]
    cc = np.arange(c, dtype=np.int64)[None, None, None, :]
    group, kin = kk // ATOM_K, kk % ATOM_K
    kg = np.minimum(ATOM_K, k - group * ATOM_K)  # kernels in this group
    cb, ci = cc // ATOM, cc % ATOM
    csz = np.minimum(ATOM, c - cb * ATOM)  # channels in this block
    idx = (group * ATOM_K * r * s * c + cb * ATOM * r * s * kg + (rr * s + ss) * kg * csz
           + kin * csz + ci)
    idx.flags.writeable = False
    return idx


def read_weights(data: np.ndarray, offset: int, k: int, c: int, r: int, s: int) -> np.ndarray:
    """int8 weights [K, R, S, C] of a direct convolution stored at ``offset``."""
    return data[offset:offset + k * r * s * c][_weight_index(k, c, r, s)].view(np.int8)


@functools.lru_cache(maxsize=32)
def _image_weight_index(k: int, r: int, kc: int, ext: int) -> np.ndarray:
    """Byte offset of row value w[k, r, j] of an image convolution's weights. Rows are grouped
    ``ext`` to an atom (CSC POST_Y_EXTENSION): in a kernel group, group of rows after group of
    rows, each kernel's rows of the group together; with ext 1 this is a direct kernel of width
    1 and ``kc`` channels ([EXT] cmod csc/NV_NVDLA_csc.cpp, the weight sequencer's strides)."""
    if ext == 1:
        return _weight_index(k, kc, r, 1)[:, :, 0, :]
    kk = np.arange(k, dtype=np.int64)[:, None, None]
    rr = np.arange(r, dtype=np.int64)[None, :, None]
    jj = np.arange(kc, dtype=np.int64)[None, None, :]
    group, kin = kk // ATOM_K, kk % ATOM_K
    kg = np.minimum(ATOM_K, k - group * ATOM_K)
    t, i = rr // ext, rr % ext
    rows = np.minimum(ext, r - t * ext)  # rows in this group of rows
    idx = group * ATOM_K * r * kc + t * ext * kc * kg + kin * rows * kc + i * kc + jj
    idx.flags.writeable = False
    return idx


def read_image_weights(data: np.ndarray, offset: int, k: int, r: int, kc: int,
                       ext: int) -> np.ndarray:
    """int8 weight rows [K, R, kc] of an image convolution stored at ``offset``."""
    return data[offset:offset + k * r * kc][_image_weight_index(k, r, kc, ext)].view(np.int8)
