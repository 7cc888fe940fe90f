"""Ethos-U85 operations: the tensors an operation reads and writes (IFM, IFM2, OFM from the
NPU_SET_* state), their addresses (element_address_in_region, [U85-TRM: §3.6.5]) or strided boxes,
and the gather through the device's memory port. :class:`MemoryPort` declares every member of the
port an operation calls back into (memport.NpuPort implements it)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np

from ...emu.memory import ethosu85 as L
from .setstate import PRECISION_BITS, NpuInternal, SetState, memo_on_commands, require


class Access(NamedTuple):
    """One memory access worked out: the numpy views of the memory it reads or writes (strided
    boxes, or a stream's bytes) and the byte ranges it accounts (Touched, AXI counts). Why
    apart from making it: a program's operations make the same accesses on every run."""
    region: int
    family: int              # the AXI port family its region uses (0 SRAM, 1 external)
    channel: int
    write: bool
    views: tuple[Any, ...]
    ranges: tuple[Any, ...] | list[Any]     # merged [start, end) byte ranges
    nbytes: int


def read_views(acc: Access) -> list[np.ndarray]:
    """The values of a read access's box views (read-only views, no copy): the stored integer
    type, int64 for 8-byte elements (as gather gives)."""
    return [view.astype(np.int64) if view.dtype.itemsize == 8 else view for view in acc.views]


def store_views(acc: Access, values: list[Any]) -> None:
    """Store ``values`` (one box-shaped array per view of a write access, whose views are
    unsigned little-endian integers of the element size): the low bytes of each value."""
    for view, v in zip(acc.views, values):
        v = np.asarray(v)
        size = view.dtype.itemsize
        if v.dtype.kind in "iu" and v.dtype.itemsize == size:
            if view.ndim == 4 and v.strides[-1] == size:  # bricks: whole bricks at a time
                np.copyto(_bricks(view), _bricks(v))
            else:
                view[...] = v.view(view.dtype)
        else:
            view[...] = v.astype(np.int64).astype(view.dtype)


def _bricks(a: np.ndarray) -> np.ndarray:
    """``a`` [..., 16] (the last axis contiguous) as [..., 1] of 16-element units. Why: numpy
    copies an NHCWB16 box element by element in its innermost loop of 16; as units the same
    copy is 2-4x faster (int8 48x48x48: 33 -> 5 us written, 36 -> 11 us read; 12x12x96: 7.5 ->
    2.1 us, 5.7 -> 2.0 us)."""
    return a.view(_UNITS[a.itemsize])


_UNITS = {n: np.dtype(f"V{16 * n}") for n in (1, 2, 4, 8)}


class MemoryPort(Protocol):
    """What an operation may touch: region-relative element gathers/scatters and byte reads (the
    device adds BASEP[region], checks the system memory windows and records Touched ranges and
    PMU bytes), the internal LUT RAM, the internal state between operations and COND_STATUS.
    Every member is required (memport.NpuPort implements them): a port that cannot take a box
    answers None / False from the box calls, one that keeps no runs has ``kept_runs`` None, and
    ``trace`` is None but while the block recorder records (blocks.py)."""

    lut: np.ndarray
    npu: NpuInternal
    #: operations' kept runs by (decode, placement); None: keep none
    kept_runs: dict[Any, Any] | None
    #: the block recorder's list of the unit's data parts while it records, else None
    trace: list[Any] | None

    def gather(self, region: int, offsets: np.ndarray, size: int, signed: bool,
               channel: int) -> np.ndarray: ...

    def scatter(self, region: int, offsets: np.ndarray, size: int, values: np.ndarray,
                channel: int) -> None: ...

    def read_bytes(self, region: int, offset: int, length: int, channel: int) -> bytes: ...

    # strided boxes (offset, shape, strides) of elements at offset + sum(i_k * strides[k]),
    # accessed as one; None / False = use the element path (read_raw / write_ofm)
    def gather_boxes(self, region: int, boxes: list[Any], size: int, signed: bool,
                     channel: int) -> list[np.ndarray] | None: ...

    def scatter_boxes(self, region: int, boxes: list[Any], size: int, values: list[Any],
                      channel: int) -> bool: ...

    def set_result_flag(self, value: int) -> None: ...

    # an operation keeps its accesses (:class:`_ConvRun`): the accesses worked out without
    # being made (None: not a plain view), their accounting when made, the regions' (BASEP,
    # port family) that key them
    def box_access(self, region: int, boxes: list[Any], size: int, dtype: str, channel: int,
                   write: bool) -> Access | None: ...

    def stream_access(self, region: int, offset: int, length: int, channel: int) -> Access: ...

    def record(self, access: Access) -> None: ...

    def placement(self) -> tuple[Any, ...]: ...


@dataclass
class Tensor:
    """IFM, IFM2 or OFM as the NPU_SET_* state describes it."""

    name: str
    region: int
    bases: tuple[int, ...]  # BASE0..BASE3
    stride_x: int
    stride_y: int
    stride_c: int
    width0: int
    heights: tuple[int, int]
    bits: int
    signed: bool
    fmt: int  # 0 nhwc, 1 nhcwb16
    storage: int  # 0 tile2x2, 1 tile3x1, 2 chained, 3 none

    @property
    def size(self) -> int:
        return self.bits // 8

    @property
    def type_text(self) -> str:
        return f"{'s' if self.signed else 'u'}{self.bits}"


#: per tensor, the NPU_SET_* commands :func:`tensor` reads
_TENSOR_CMDS = {which: tuple(SetState._key(f"{which}_{n}") for n in (
    "PRECISION", "REGION", "BASE0", "BASE1", "BASE2", "BASE3", "STRIDE_Y", "STRIDE_X",
    "STRIDE_C", "WIDTH0_M1", "HEIGHT0_M1", "HEIGHT1_M1")) for which in ("IFM", "IFM2", "OFM")}


def tensor(s: SetState, which: str) -> Tensor:
    """The IFM / IFM2 / OFM description from the state (the registers an access needs),
    memoised on the commands it reads (:func:`memo_on_commands`)."""
    return memo_on_commands("tensor", s, _TENSOR_CMDS[which], which,
                            lambda: _tensor(s, which))


def _tensor(s: SetState, which: str) -> Tensor:
    p = f"{which}_PRECISION"
    bits = PRECISION_BITS[s.get(p, "activation_precision")]
    storage = s.get(p, "activation_storage")
    fmt = s.get(p, "activation_format")
    require(fmt in (0, 1), f"{which} activation_format is not reserved", "[U85-TRM: Table 3-132]")
    t = Tensor(which, 0, (0, 0, 0, 0), 0, 0, 0, 0, (0, 0), bits,
               bool(s.get(p, "activation_type")), fmt, storage)
    if storage == 2:
        t.region = s.get(f"{which}_REGION", "region")
    if storage in (2, 3):  # chained / none: no memory geometry needed
        return t
    t.region = s.get(f"{which}_REGION", "region")
    t.bases = tuple(s.get(f"{which}_BASE{i}", "addr", 0 if i else None) for i in range(4))
    t.stride_y = s.get(f"{which}_STRIDE_Y", "addr")
    if t.fmt == 0:
        t.stride_x = s.get(f"{which}_STRIDE_X", "addr")
    else:
        t.stride_c = s.get(f"{which}_STRIDE_C", "addr")
    t.width0 = s.get(f"{which}_WIDTH0_M1", "width_m1") + 1
    t.heights = (s.get(f"{which}_HEIGHT0_M1", "height_m1") + 1,
                 s.get(f"{which}_HEIGHT1_M1", "height_m1", 0) + 1)
    return t


def check_addressable(t: Tensor) -> None:
    """element_address_in_region's storage and alignment asserts [U85-TRM: §3.6.5]."""
    # (the messages are formatted only for a failing check: this runs on every tensor access)
    if t.storage not in (0, 1):
        require(False, f"{t.name} storage is tile2x2 or tile3x1", "[U85-TRM: §3.6.5]")
    es = t.size
    if t.fmt == 0:
        if not (all(b % es == 0 for b in t.bases) and t.stride_x % es == 0
                and t.stride_y % es == 0):
            require(False, f"{t.name} base/stride_x/stride_y % element_size == 0",
                "[U85-TRM: §3.6.5]")
    elif not (all(b % 16 == 0 for b in t.bases) and t.stride_c % (16 * es) == 0
              and t.stride_y % (16 * es) == 0):
        require(False, f"{t.name} base % 16 == 0 && stride_c/stride_y % (16*element_size) == 0",
                "[U85-TRM: §3.6.5]")


def addresses(t: Tensor, shape: tuple[int, ...]) -> np.ndarray:
    """Region-relative byte offsets of a logical [H, W, C] tensor: element_address_in_region
    [U85-TRM: §3.6.5] through emu/memory/ethosu85.py, with the alignment asserts. NHWC adds
    ``c * element_size`` (G-A1: the literal ``+ c`` misaligns wide types)."""
    check_addressable(t)
    return L.element_addresses(shape, t.bases, t.stride_y, t.stride_x, t.stride_c, t.width0,
                               t.heights, t.storage, t.size, t.fmt)


#: a box of memory: (offset, box shape, byte strides, bricked)
Box = tuple[int, tuple[int, ...], tuple[int, ...], bool]


def boxes(t: Tensor, shape: tuple[int, ...]) -> list[Box] | None:
    """The tensor as strided boxes of memory, when it is: every element in tile 0 (the usual
    single-tile tensor), NHWC (one box), or NHCWB16: one box of whole bricks [H, C/16, W, 16]
    and, when the depth is not a multiple of 16, one of the last brick's channels [H, W, C % 16].
    Each is (offset, box shape, byte strides, bricked), the boxes in channel order; None
    otherwise (the element-address path runs). Why: a box is read and written as one numpy view
    instead of an address per element, with exactly the same addresses
    (element_address_in_region, [U85-TRM: §3.6.5])."""
    H, W, C = shape
    if min(shape) <= 0:
        return None
    if t.storage == 0:
        tile0 = W <= t.width0 and H <= t.heights[0]
    elif t.storage == 1:
        tile0 = H <= t.heights[0] and H <= t.heights[1]
    else:
        return None
    if not tile0:
        return None
    es, base = t.size, t.bases[0]
    if t.fmt == 0:
        return [(base, (H, W, C), (t.stride_y, t.stride_x, es), False)]
    full, rest = divmod(C, 16)
    out: list[Box] = [(base, (H, full, W, 16), (t.stride_y, t.stride_c, 16 * es, es), True)] \
        if full else []
    if rest:
        out.append((base + full * t.stride_c, (H, W, rest), (t.stride_y, 16 * es, es), False))
    return out


def read_raw(mem: MemoryPort, t: Tensor, shape: tuple[int, ...], channel: int) -> np.ndarray:
    """The stored integers of a [H, W, C] tensor (memory or chaining FIFO): int64, or the
    stored integer type when the tensor is boxes (:func:`boxes`, read through the port's
    ``gather_boxes``); read_ifm's value part (zero point, upscale) is the kernel's."""
    if t.storage == 2:
        return mem.npu.pop(t.region, math.prod(shape)).reshape(shape)
    check_addressable(t)
    bs = boxes(t, shape)
    if bs is not None:
        vals = mem.gather_boxes(t.region, [b[:3] for b in bs], t.size, t.signed, channel)
        if vals is not None:
            return joined(vals, tuple(b[3] for b in bs), shape)
    offs = addresses(t, shape)
    return mem.gather(t.region, offs.ravel(), t.size, t.signed, channel).reshape(shape)


def joined(vals: list[Any], bricked: tuple[Any, ...], shape: tuple[int, ...]) -> np.ndarray:
    """The [H, W, C] tensor from the values of its :func:`boxes` (``bricked`` per box)."""
    if bricked == (False,):  # NHWC: the box is the tensor
        whole: np.ndarray = vals[0]
        return whole
    parts = [np.ascontiguousarray(_bricks(v)[..., 0].transpose(0, 2, 1)).view(v.dtype)
             if b else v for b, v in zip(bricked, vals)]
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=2)


def ofm_shape(s: SetState) -> tuple[int, int, int]:
    return (s.get("OFM_HEIGHT_M1", "height_m1") + 1, s.get("OFM_WIDTH_M1", "width_m1") + 1,
            s.get("OFM_DEPTH_M1", "depth_m1") + 1)


def kernel_stride(s: SetState) -> tuple[int, int, int, int, int, int]:
    """(stride_y, stride_x, dilation_y, dilation_x, weight_order, decomposition)
    [U85-TRM: §3.10.2]."""
    ks = s.cmds.get("NPU_SET_KERNEL_STRIDE")
    if ks is None:
        s.get("KERNEL_STRIDE", "stride_x_lsb")  # raises: never set
    assert ks is not None
    f = ks.fields
    return (2 * f["stride_y_msb"] + f["stride_y_lsb"] + 1,
            2 * f["stride_x_msb"] + f["stride_x_lsb"] + 1,
            f["dilation_y"] + 1, f["dilation_x"] + 1, f["weight_order"], f["decomposition"])


def pads(s: SetState) -> tuple[int, int, int, int]:
    """(top, left, bottom, right)."""
    return (s.get("IFM_PAD_TOP", "pad"), s.get("IFM_PAD_LEFT", "pad"),
            s.get("IFM_PAD_BOTTOM", "pad"), s.get("IFM_PAD_RIGHT", "pad"))


def upscale_mode(s: SetState, ifm: Tensor, sy: int, sx: int) -> int:
    mode = s.get("IFM_UPSCALE", "mode")
    require(mode in (0, 1, 2), "IFM_UPSCALE.mode is not reserved", "[U85-TRM: §3.10.40]")
    if mode:
        require(sy == 1 and sx == 1, "kernel x/y stride == 1 with upscale", "[U85-TRM: §3.6.5]")
        require(ifm.storage != 2, "IFM storage != chained with upscale", "[U85-TRM: §3.6.5]")
    return mode


def ifm_extent(upscale: int, ih: int, iw: int) -> tuple[int, int]:
    """Stored IFM rows/columns behind a derived (upscaled) extent (read_ifm halves y, x)."""
    return ((ih + 1) // 2, (iw + 1) // 2) if upscale else (ih, iw)
