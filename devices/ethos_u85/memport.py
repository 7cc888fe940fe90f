"""The Ethos-U85's memory port: what an operation reaches (ops.MemoryPort, implemented here).

Region-relative accesses (BASEP[region] + offset, [U85-TRM: §3.6.3]) to
the system memory windows of the description, element by element or as strided numpy views of
whole boxes, each recorded in the unit's :class:`~.accounting.UnitAccount` when made (Touched
ranges for watchpoints, AXI accesses and bytes for the PMU and the cycle model). The port also
holds what an operation keeps between operations: the internal LUT RAM, the chaining FIFOs
and accumulator storage (``npu``), the kept runs of operations and the block recorder's list.
Why a part of its own: the model decides when units run, the port only where bytes go, so an
executor of the command stream (issue 32) can use the same port.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..bus import Bus, Memory
from ..errors import BusError
from ..ranges import address_ranges, merge_ranges
from ..registers import RegisterFile
from .accounting import UnitAccount
from .ops import Access, NpuBusFault, NpuInternal, read_views, require, store_views

LUT_BYTES = 2048  # internal LUT RAM (G-C4: every LUT mode addresses 2 KiB)
ADDR_MASK = (1 << 40) - 1

#: per region (BASEP, port family)
Placement = tuple[tuple[int, int], ...]
#: a box: (offset, shape, byte strides)
Box = tuple[int, tuple[int, ...], tuple[int, ...]]


#: the registers that place the regions (``NpuPort.placement``: every access is keyed or
#: accounted by them)
PLACEMENT_REGS = (*(f"BASEP{r}_{h}" for r in range(8) for h in ("LO", "HI")), "REGIONCFG",
                  *(f"MEM_ATTR{i}" for i in range(4)))


def basep(regs: RegisterFile, region: int) -> int:
    return (regs.peek(f"BASEP{region}_HI") << 32 | regs.peek(f"BASEP{region}_LO")) & ADDR_MASK


def port_family(regs: RegisterFile, attr_index: int) -> int:
    """0 sram / 1 ext: MEM_ATTR[attr_index].axi_port [U85-TRM: Table 3-17]."""
    return regs.field(f"MEM_ATTR{attr_index}", "axi_port")


def region_family(regs: RegisterFile, region: int) -> int:
    return port_family(regs, regs.field("REGIONCFG", f"region{region}"))


def placement_of(regs: RegisterFile) -> Placement:
    """Per region (BASEP, port family) as the registers set them now."""
    return tuple((basep(regs, r), region_family(regs, r)) for r in range(8))


class NpuPort:
    """ops.MemoryPort over the device's bus, with the regions placed by BASEP, REGIONCFG and
    MEM_ATTR and COND_STATUS in ``regs``."""

    def __init__(self, bus: Bus, regs: RegisterFile) -> None:
        self.bus = bus
        self.regs = regs
        #: per region (BASEP, port family), kept with regs.derived
        self.placement: Callable[[], Placement] = regs.derived(
            PLACEMENT_REGS, lambda: placement_of(regs))
        self.lut = np.zeros(LUT_BYTES, dtype=np.uint8)
        self.npu = NpuInternal()  # chaining FIFOs, accumulator storage
        #: operations' kept runs per decode and region placement (ops._ConvRun, DMA copies);
        #: None keeps none (the general path every time)
        self.kept_runs: dict[Any, Any] | None = {}
        #: the block recorder's list of the current unit's data parts while it records
        #: (blocks.py; ops._traced), else None
        self.trace: list[Any] | None = None
        #: the unit being run (execute_unit sets it; accesses outside a unit are not allowed)
        self.account: UnitAccount | None = None
        self._windows: dict[tuple[int, int], tuple[Memory, int]] = {}  # [lo, hi) -> memory
        self._boxes: dict[tuple[Any, ...], Access | None] = {}  # box_access's memo

    def window(self, lo: int, hi: int, channel: int, region: int,
               what: str) -> tuple[Memory, int]:
        """The memory holding [lo, hi) or a bus fault: NPU accesses reach only the system
        memory windows of the description (kind not registers/pseudo). The bus map never
        changes, so a span found inside a window is remembered (a program's tensors and streams
        are the same spans on every run)."""
        hit = self._windows.get((lo, hi))
        if hit is not None:
            return hit
        try:
            mem, off = self.bus.memory_span(lo, hi - lo)
        except BusError as e:
            raise NpuBusFault(e.address, channel, region, f"bus fault: {what} access "
                              f"{lo:#x}-{hi - 1:#x} leaves the system memory windows at "
                              f"{e.address:#x}") from None
        if len(self._windows) >= 4096:
            self._windows.clear()
        self._windows[(lo, hi)] = mem, off
        return mem, off

    def record_ranges(self, family: int, channel: int, write: bool, ranges: Any,
                      nbytes: int | None = None) -> None:
        """Account an access of ``ranges`` (``nbytes`` in all, summed here when not given)."""
        acct = self.account
        assert acct is not None, "an NPU access outside a unit"
        t = acct.touched
        (t.writes if write else t.reads).extend(ranges)
        acct.axi.append((family, channel, write, ranges))
        acct.bytes += sum(e - s for s, e in ranges) if nbytes is None else nbytes

    # ops.MemoryPort ----------------------------------------------------------------------
    def gather(self, region: int, offsets: np.ndarray, size: int, signed: bool,
               channel: int) -> np.ndarray:
        require(0 <= region < 8, "0 <= region && region < 8", "[U85-TRM: §3.6.3]")
        base, family = self.placement()[region]
        addrs = (base + np.asarray(offsets, dtype=np.int64)) & ADDR_MASK
        if not addrs.size:
            return np.zeros(0, dtype=np.int64)
        lo, hi = int(addrs.min()), int(addrs.max()) + size
        mem, _ = self.window(lo, hi, channel, region, f"region {region} read")
        idx = (addrs - mem.region.base)[:, None] + np.arange(size)
        raw = np.ascontiguousarray(mem.data[idx])
        vals = raw.view(f"<{'i' if signed else 'u'}{size}").reshape(-1).astype(np.int64)
        self.record_ranges(family, channel, False, address_ranges(addrs, size))
        return vals

    def scatter(self, region: int, offsets: np.ndarray, size: int, values: np.ndarray,
                channel: int) -> None:
        require(0 <= region < 8, "0 <= region && region < 8", "[U85-TRM: §3.6.3]")
        base, family = self.placement()[region]
        addrs = (base + np.asarray(offsets, dtype=np.int64)) & ADDR_MASK
        if not addrs.size:
            return
        lo, hi = int(addrs.min()), int(addrs.max()) + size
        mem, _ = self.window(lo, hi, channel, region, f"region {region} write")
        raw = np.asarray(values, dtype=np.int64).astype("<i8").view(np.uint8).reshape(-1, 8)
        idx = (addrs - mem.region.base)[:, None] + np.arange(size)
        mem.data[idx] = raw[:, :size]
        self.record_ranges(family, channel, True, address_ranges(addrs, size))

    def box_access(self, region: int, boxes: list[Box], size: int, dtype: str, channel: int,
                   write: bool) -> Access | None:
        """The access of ``boxes`` ((offset, shape, strides): elements at offset +
        sum(i_k * strides[k]) of BASEP[region]) as strided views of the memory, window-checked
        as gather and scatter are, with the byte ranges of all the boxes' elements merged (as
        the element path's address_ranges gives them); not recorded (:meth:`record`). None when
        a box is not a plain view (or, for ``write``, writes a byte twice). Memoised on the
        boxes and the region's BASEP and port family (the bus map never changes, so the views
        stay views of the same memory; the access carries the family): a program's tensors
        are the same boxes on every run, and working the views out again cost ~10 us per
        access. The one memo of the box path: what :meth:`_box_views_of` calls runs on a miss
        only."""
        base, family = self.placement()[region]
        key = (region, base, family, tuple(boxes), size, dtype, channel, write)
        hit = self._boxes.get(key, False)
        if hit is False:
            hit = self._box_views_of(region, base, family, boxes, size, dtype, channel, write)
            if len(self._boxes) >= 4096:
                self._boxes.clear()
            self._boxes[key] = hit
        return hit  # type: ignore[return-value]  # (False is the miss marker only)

    def stream_access(self, region: int, offset: int, length: int, channel: int) -> Access:
        """The access of a stream read (weights, scale and bias): ``length`` > 0 bytes at
        BASEP[region] + offset as a uint8 view; not recorded (:meth:`record`)."""
        require(0 <= region < 8, "0 <= region && region < 8", "[U85-TRM: §3.6.3]")
        return self.span_access(region, offset, length, channel, False,
                                f"region {region} stream read")

    def span_access(self, region: int, offset: int, length: int, channel: int, write: bool,
                    what: str) -> Access:
        """The access of ``length`` > 0 bytes at BASEP[region] + offset (``what`` names it in a
        bus fault) as a uint8 view; not recorded."""
        base, family = self.placement()[region]
        a = (base + offset) & ADDR_MASK
        mem, moff = self.window(a, a + length, channel, region, what)
        # the range as a list: the AXI counts' memo keys lists by value (a new tuple on every
        # run would miss it)
        return Access(region, family, channel, write, (mem.data[moff:moff + length],),
                      [(a, a + length)], length)

    def record(self, access: Access) -> None:
        """Account ``access`` (Touched, AXI counts, bytes) as made now."""
        self.record_ranges(access.family, access.channel, access.write, access.ranges,
                           access.nbytes)

    def _box_views_of(self, region: int, base: int, family: int, boxes: list[Box], size: int,
                      dtype: str, channel: int, write: bool) -> Access | None:
        """:meth:`box_access` worked out (``base``, ``family``: the region's placement)."""
        views, runs = [], []
        for offset, shape, strides in boxes:
            span = _box_span(base, offset, shape, strides, size)
            if span is None or (write and not _injective(shape, strides, size)):
                return None
            lo, hi = span
            mem, moff = self.window(lo, hi, channel, region,
                                    f"region {region} {'write' if write else 'read'}")
            if not mem.data.flags.c_contiguous:
                return None
            view = np.ndarray(tuple(shape), dtype=dtype, buffer=mem.data, offset=moff,
                              strides=tuple(strides))
            # a read's view is read-only: an operation reads it before its OFM is written
            # (numpy's assignment copies first where the two overlap), and nothing may write
            # memory through it
            view.flags.writeable = write
            views.append(view)
            runs.append(_box_ranges(lo, shape, strides, size))
        if len(runs) == 1:
            ranges, nbytes = runs[0]
        else:
            ranges = tuple(merge_ranges([r for part, _ in runs for r in part]))
            nbytes = sum(e - s for s, e in ranges)
        return Access(region, family, channel, write, tuple(views), ranges, nbytes)

    def gather_boxes(self, region: int, boxes: list[Box], size: int, signed: bool,
                     channel: int) -> list[np.ndarray] | None:
        """:meth:`gather` of the elements of ``boxes`` (:meth:`box_access`), one strided view
        each: the stored integer type, int64 for 8-byte elements as gather gives. None when a
        box is not a plain view (the caller uses gather)."""
        require(0 <= region < 8, "0 <= region && region < 8", "[U85-TRM: §3.6.3]")
        acc = self.box_access(region, boxes, size, f"<{'i' if signed else 'u'}{size}", channel,
                              False)
        if acc is None:
            return None
        self.record(acc)
        return read_views(acc)

    def scatter_boxes(self, region: int, boxes: list[Box], size: int, values: list[Any],
                      channel: int) -> bool:
        """:meth:`scatter` of ``values`` (one box-shaped array per box) into ``boxes``: the low
        ``size`` bytes of each value, little-endian, through one strided view each. False
        (nothing written) when a box is not a plain injective view (the caller uses
        scatter)."""
        require(0 <= region < 8, "0 <= region && region < 8", "[U85-TRM: §3.6.3]")
        acc = self.box_access(region, boxes, size, f"<u{size}", channel, True)
        if acc is None:
            return False
        store_views(acc, values)
        self.record(acc)
        return True

    def read_bytes(self, region: int, offset: int, length: int, channel: int) -> bytes:
        """A stream read (weights, scale and bias): ``length`` bytes at BASEP[region] + offset."""
        require(0 <= region < 8, "0 <= region && region < 8", "[U85-TRM: §3.6.3]")
        if length <= 0:
            return b""
        acc = self.stream_access(region, offset, length, channel)
        self.record(acc)
        return bytes(acc.views[0].tobytes())

    def set_result_flag(self, value: int) -> None:
        self.regs.set_field("COND_STATUS", "result_flag", value & 1)


def _box_span(base: int, offset: int, shape: tuple[int, ...], strides: tuple[int, ...],
              size: int) -> tuple[int, int] | None:
    """[lo, hi) of a box with non-negative strides at region base ``base`` that does not
    wrap the address space; None for anything else (the element path handles it)."""
    if any(int(st) < 0 for st in strides) or min(shape) <= 0:
        return None
    lo = (base + int(offset)) & ADDR_MASK
    hi = lo + sum((int(n) - 1) * int(st) for n, st in zip(shape, strides)) + size
    if hi - 1 > ADDR_MASK:
        return None
    return lo, hi


def _box_ranges(lo: int, shape: tuple[int, ...], strides: tuple[int, ...],
                size: int) -> tuple[tuple[tuple[int, int], ...], int]:
    """(merged byte ranges of a box, identical to ``address_ranges`` of all its element
    addresses; their total bytes): the innermost dimensions that are contiguous (stride <=
    run length) fold into one run, the outer ones enumerate run starts."""
    dims = sorted((int(st), int(n)) for n, st in zip(shape, strides) if n > 1)
    run, outer = size, list[tuple[int, int]]()
    for st, n in dims:
        if not outer and st <= run:
            run += (n - 1) * st
        else:
            outer.append((st, n))
    starts = np.zeros(1, np.int64) + lo
    for st, n in outer:
        starts = (starts[:, None] + np.arange(n, dtype=np.int64)[None, :] * st).ravel()
    runs = tuple(address_ranges(starts, run))
    return runs, sum(e - s for s, e in runs)


def _injective(shape: tuple[int, ...], strides: tuple[int, ...], size: int) -> bool:
    """No two elements of the box share a byte (so one view assignment equals the element
    stores in any order)."""
    span = size
    for st, n in sorted((int(st), int(n)) for n, st in zip(shape, strides) if n > 1):
        if st < span:
            return False
        span += (n - 1) * st
    return True
