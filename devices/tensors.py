"""Unit tensors: where a unit's input and output tensors lie in device memory, and how to read
them as numpy arrays in the layout of the toolchain that made the program.

Why one declaration: the Python API (in-process and over the GDB remote protocol), the TUI's
tensor view, ``monitor tensor``, a per-layer comparison and dataset runs all read a layer's
output; each device states once where it is (devices/device.py, unit_tensors), and everything else
reads through :func:`read_tensor` with the memory access it has (a device's debugger read, or
``m`` packets), so no per-device case lives outside devices/.

A tensor has channels, rows and columns (C, H, W; a batch of 1 where the toolchain has N).
Every layout the four devices use places element (c, h, w) at a byte address that is a sum of
one term per axis -- ``channel[c] + row[h] + col[w]`` -- because each axis moves through memory
independently of the others:

- MAX78000 HWC: channel c sits in processor c's data memory (its own base, byte c % 4 of each
  word), pixels 4 bytes apart; CHW input: a channel's pixels are consecutive bytes;
- Ethos-U85 NHWC: ``base + c + w * C' + h * row_stride`` (C' the channel stride); NHCWB16:
  ``base + (c // 16) * W * 16 + c % 16 + w * 16 + h * row_stride``;
- NE16 HWC with its D0/D1 strides; NVDLA's feature cube: ``(c // atom) * surface_stride +
  c % atom + w * atom + h * line_stride``.

An element wider than a byte is ``itemsize`` consecutive bytes, little-endian.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: two address ranges closer than this are read as one (fewer reads over a remote link)
MERGE_GAP = 256
#: bytes between two elements that :func:`write_tensor` with a ``read`` writes back as they
#: are to make one write of both, and the dataset run's checkpoint puts back with them (small:
#: far below any memory's size and alignment, so a merged range stays in its elements' memory)
WRITE_MERGE_GAP = 16


@dataclass(frozen=True)
class TensorSpec:
    """One input or output tensor of a unit.

    ``layout`` names the axes of the array the toolchain uses, from the letters N (a batch of
    1), C, H, W: "CHW" (ai8x-training), "NHWC" (TFLite), "HWC" (pulp-nnx), "CHW" (NVDLA's
    cube). ``shape`` is in that layout. ``channel``, ``row``, ``col`` are the byte offsets of
    each index along C, H and W; their sum is the element's address. ``dtype`` is a numpy
    integer type name ("int8", "uint8", "int16", "int32"...). ``doc`` says where it lies in the
    device's own words (memory format, base register)."""

    name: str
    layout: str
    shape: tuple[int, ...]
    dtype: str
    channel: tuple[int, ...]
    row: tuple[int, ...]
    col: tuple[int, ...]
    doc: str = ""

    def __post_init__(self) -> None:
        if sorted(self.layout) != sorted(set(self.layout)) or not set("CHW") <= set(self.layout) \
                or not set(self.layout) <= set("NCHW"):
            raise ValueError(f"tensor {self.name}: layout {self.layout!r} is not an order of "
                             "C, H, W (and N)")
        if len(self.shape) != len(self.layout):
            raise ValueError(f"tensor {self.name}: shape {self.shape} does not match layout "
                             f"{self.layout}")
        dims = dict(zip(self.layout, self.shape))
        if dims.get("N", 1) != 1:
            raise ValueError(f"tensor {self.name}: a batch of {dims['N']}; only 1 is held")
        if (len(self.channel), len(self.row), len(self.col)) != (dims["C"], dims["H"], dims["W"]):
            raise ValueError(f"tensor {self.name}: {len(self.channel)} channel, {len(self.row)} "
                             f"row, {len(self.col)} column offsets for shape {self.shape} "
                             f"({self.layout})")

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    def addresses(self) -> np.ndarray:
        """The first byte address of every element, shape (C, H, W)."""
        c = np.asarray(self.channel, dtype=np.int64)[:, None, None]
        h = np.asarray(self.row, dtype=np.int64)[None, :, None]
        w = np.asarray(self.col, dtype=np.int64)[None, None, :]
        return c + h + w

    def ranges(self, gap: int = 0) -> list[tuple[int, int]]:
        """The [start, end) byte ranges the tensor occupies, merged where less than ``gap``
        bytes apart (0: only touching ranges): for watchpoints and for reading."""
        starts = np.unique(self.addresses().ravel())
        if starts.size == 0:
            return []
        size = self.itemsize
        last = np.nonzero(np.diff(starts) > size + gap)[0]  # the last element of each range
        firsts = np.concatenate([starts[:1], starts[last + 1]])
        ends = np.concatenate([starts[last], starts[-1:]]) + size
        return [(int(a), int(b)) for a, b in zip(firsts, ends)]

    def to_layout(self, chw: np.ndarray) -> np.ndarray:
        """A (C, H, W) array in this tensor's layout (N added as an axis of 1)."""
        arr = chw[None] if "N" in self.layout else chw
        axes = ("N" if "N" in self.layout else "") + "CHW"
        return np.ascontiguousarray(np.transpose(arr, [axes.index(a) for a in self.layout]))

    def from_layout(self, array: np.ndarray) -> np.ndarray:
        """The (C, H, W) view of an array given in this tensor's layout."""
        arr = np.asarray(array)
        if arr.shape != self.shape:
            raise ValueError(f"tensor {self.name}: an array of shape {arr.shape}, the tensor is "
                             f"{self.shape} ({self.layout})")
        order = [self.layout.index(a) for a in "CHW"]
        if "N" in self.layout:
            order = [self.layout.index("N")] + order
            return np.transpose(arr, order)[0]
        return np.transpose(arr, order)


def tensor_gather(spec: TensorSpec) -> tuple[list[tuple[int, int]], np.ndarray]:
    """How :func:`read_tensor` reads ``spec``: the merged ranges and, per element (C, H, W),
    the index of its first byte in their concatenation. Kept by a caller that reads the same
    tensor after every unit (the per-layer diff), since finding the ranges costs more than
    reading them."""
    addr = spec.addresses()
    ranges = spec.ranges(MERGE_GAP)
    starts = np.array([s for s, _ in ranges], dtype=np.int64)
    offsets = np.cumsum([0] + [e - s for s, e in ranges[:-1]], dtype=np.int64)
    which = np.searchsorted(starts, addr, side="right") - 1
    return ranges, addr - starts[which] + offsets[which]


def read_tensor(spec: TensorSpec, read: Callable[[int, int], bytes],
                gather: tuple[list[tuple[int, int]], np.ndarray] | None = None) -> np.ndarray:
    """The tensor as an array in its layout, read with ``read(address, size) -> bytes`` (a
    device's debugger read, or a remote client's memory read), one read per merged range,
    then one gather of every element's bytes (``gather``: :func:`tensor_gather` of ``spec``,
    when the caller kept it)."""
    ranges, first = gather if gather is not None else tensor_gather(spec)
    buf = np.frombuffer(b"".join(read(s, e - s) for s, e in ranges), dtype=np.uint8)
    raw = buf[first[..., None] + np.arange(spec.itemsize)]
    values = raw.view(np.dtype(spec.dtype).newbyteorder("<"))[..., 0]
    return spec.to_layout(values.astype(spec.dtype))


def write_tensor(spec: TensorSpec, array: np.ndarray, write: Callable[[int, bytes], None],
                 read: Callable[[int, int], bytes] | None = None) -> None:
    """Write ``array`` (in the tensor's layout and dtype range) into memory with
    ``write(address, data)``, one write per contiguous run of elements; with ``read`` (the
    debugger's read of the same memory), runs less than WRITE_MERGE_GAP bytes apart are one
    write, the bytes between them read and written back unchanged. Why: the MAX78000 demo's
    3-channel input (a pixel's channels in a 4-byte word) took 256 writes, 1.8 ms of the 4.9
    ms a dataset run's sample took (issue 31 #2)."""
    chw = spec.from_layout(array)
    info = np.iinfo(spec.dtype)
    if chw.size and (chw.min() < info.min or chw.max() > info.max):
        raise ValueError(f"tensor {spec.name}: values {chw.min()}..{chw.max()} do not fit "
                         f"{spec.dtype}")
    data = chw.astype(np.dtype(spec.dtype).newbyteorder("<"))
    addr = spec.addresses().ravel()
    order = np.argsort(addr, kind="stable")
    addr, raw = addr[order], data.ravel()[order]
    size = spec.itemsize
    step = np.diff(addr)
    runs = np.nonzero(step != size)[0] + 1
    if read is None or not runs.size:
        for idx in np.split(np.arange(addr.size), runs):
            if idx.size:
                write(int(addr[idx[0]]), raw[idx].tobytes())
        return
    octets = raw.view(np.uint8).reshape(-1, size)
    for idx in np.split(np.arange(addr.size), np.nonzero(step > size + WRITE_MERGE_GAP)[0] + 1):
        start = int(addr[idx[0]])
        buf = np.frombuffer(read(start, int(addr[idx[-1]]) + size - start), np.uint8).copy()
        buf[(addr[idx] - start)[:, None] + np.arange(size)] = octets[idx]
        write(start, buf.tobytes())
