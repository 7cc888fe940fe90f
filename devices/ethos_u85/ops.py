"""Ethos-U85 kernel operations behind one small interface (the device calls nothing else).

``run_operation(cmd, state, mem, cfg)`` executes one kernel command (NPU_OP_CONV, _DEPTHWISE,
_POOL, _ELEMENTWISE, _RESIZE) against the NPU_SET_* state captured at issue (L6025) and returns
an :class:`OpResult` (exact MAC/element counts and the modelled cycles of the MAC and AO units).

This module is the device side of an operation (seed 001, digested in
shared/devices/ethos-u85-command-stream.md; "Lnnnn" = seed line):

* the prologue of each operation's pseudocode: the extents derived from the NPU_SET_* state and
  the asserts (a failed ``assert()`` is UNPREDICTABLE: :class:`Unpredictable`, L6004-6014);
* the gather: tensor addresses from the IFM/IFM2 registers via :mod:`accelstub.emu.memory.ethosu85`
  (``element_address_in_region``, NHWC and NHCWB16, tiles), read through the device's
  :class:`MemoryPort` (which checks the memory windows and records Touched ranges and AXI bytes);
  the weight streams (WEIGHT_BASE/WEIGHT1-3_BASE) and the scale-and-bias stream the same way;
* the scatter: ``write_ofm`` (L6618-6757) with OFM reverse and transpose, chaining FIFOs, the
  accumulator storage (acc_input keep / ifm2, acc_output disable).

All arithmetic is the emu kernels' (``accelstub.emu.{conv,pool,eltwise,resize}.ethosu85``, weights
from
:mod:`accelstub.emu.weights.ethosu85`, output stage from :mod:`accelstub.emu.numeric.ethosu85`):
one implementation of each operation. The kernels report a violated assert in ``diag``; the device
turns the first one into :class:`Unpredictable` before anything is written.

sparse_2_4 weights are decoded like dense ones in their own order, the 2:4 rule checked
(:func:`accelstub.emu.weights.ethosu85.check_sparse_2_4`).
"""
from __future__ import annotations

import functools
import math
import weakref
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np

from ...emu.conv import ethosu85 as conv_k
from ...emu.eltwise import ethosu85 as eltwise_k
from ...emu.memory import ethosu85 as L
from ...emu.numeric import ethosu85 as P
from ...emu.numeric import ethosu85_values as values_k
from ...emu.pool import ethosu85 as pool_k
from ...emu.resize import ethosu85 as resize_k
from ...emu.weights import ethosu85 as Wt
from ..bits import sign_extend  # the seed's sign_extend(v, n) (L6201-6208)
from ..errors import DeviceError
from .stream import MATMUL_LAYOUT, Command, is_matmul

# ------------------------------------------------------------------------------------------------
# errors


class NotImplementedYet(DeviceError):
    """The emulator does not model this yet (no hardware state change)."""


class Unpredictable(DeviceError):
    """A pseudocode assert failed: the programming is UNPREDICTABLE (L6004-6014)."""


class NpuBusFault(DeviceError):
    """An NPU AXI access outside the system memory windows (STATUS.bus_status, L1267)."""

    def __init__(self, address: int, channel: int, region: int, message: str) -> None:
        self.address, self.channel, self.region = address, channel, region
        super().__init__(message)


def require(cond: bool, text: str, line: str) -> None:
    """The pseudocode's ``assert(cond)``; ``line`` cites the seed."""
    if not cond:
        raise Unpredictable(f"UNPREDICTABLE: assert({text}) fails ({line})")


def not_implemented(what: str) -> NotImplementedYet:
    return NotImplementedYet(f"{what} not implemented yet")


def _check_diag(diag: list[str], what: str) -> None:
    """The first assert the kernel found violated (kernels continue; the device stops)."""
    if diag:
        raise Unpredictable(f"UNPREDICTABLE: {what}: {diag[0]}")


# AXI channels (pmu_axi_channel_t, L1283) used for STATUS.faulting_channel and PMU events
RD_CMD, RD_IFM, RD_WEIGHTS, RD_SCALE_BIAS, RD_MEM2MEM, RD_IFM_STREAM, RD_MEM2MEM_IDX = range(7)
WR_OFM, WR_MEM2MEM = 8, 9

PRECISION_BITS = (8, 16, 32, 64)  # activation_precision_t b8..b64 (L10026)
_TRANSPOSE_PERM = {0: (0, 1, 2), 1: (1, 0, 2), 2: (0, 2, 1), 3: (1, 2, 0), 6: (2, 0, 1),
                   7: (2, 1, 0)}  # stored[...] = value[y, x, c] (L6700-6740)
_ACT_FUNCTIONS = (0, 1, 4, 5, 7, 8, 9, 10, 11)  # activation_function (L9257)


# ------------------------------------------------------------------------------------------------
# NPU_SET_* state


_SET_KEYS: dict[str, str] = {}  # "IFM_BASE0" -> "NPU_SET_IFM_BASE0" (names are few)


#: SET states: the interned (commands, ids) of each, and per (state, kept segment) the state
#: after it (the entries hold both, so their ids stay theirs). Why: rebuilding and hashing the
#: id tuple of ~100 commands after every unit's segment cost ~4 us per operation unit.
_HELD: dict = {}
_AFTER: dict = {}
_STATES_MAX = 16384


@dataclass
class SetState:
    """The NPU_SET_* state registers (L6016-6024): per mnemonic the last decoded command and the
    stream offset that wrote it. The registers have no reset value (Reset '-', e.g. L9342):
    using one that was never written is UNPREDICTABLE."""

    cmds: dict[str, Command] = field(default_factory=dict)
    _held: tuple | None = field(default=None, repr=False, compare=False)
    _from: tuple | None = field(default=None, repr=False, compare=False)  # (held, segment)

    def set(self, cmd: Command) -> None:
        self.cmds[cmd.name] = cmd
        self._held = self._from = None

    def update(self, cmds: dict[str, Command]) -> None:
        """:meth:`set` of each of ``cmds`` (name -> command; a kept segment: the same dict on
        every run, so the state after it is found from the state before it and its identity
        instead of being rebuilt)."""
        if cmds:
            old = self._held
            self.cmds.update(cmds)
            self._held = self._from = None
            if old is not None:
                hit = _AFTER.get((id(old), id(cmds)))
                if hit is not None:
                    self._held = hit[2]
                else:
                    self._from = (old, cmds)

    def held(self) -> tuple[tuple, tuple]:
        """(the commands set, their ids), one object per state (interned), kept until the next
        set: the operations' memos key on its identity (:func:`memo_on_state`)."""
        if self._held is None:
            cmds = tuple(self.cmds.values())
            ids = tuple(map(id, cmds))
            held = _HELD.get(ids)
            if held is None:
                if len(_HELD) >= _STATES_MAX:
                    _HELD.clear()
                held = _HELD[ids] = (cmds, ids)
            self._held = held
            if self._from is not None:
                if len(_AFTER) >= _STATES_MAX:
                    _AFTER.clear()
                old, seg = self._from
                _AFTER[(id(old), id(seg))] = (old, seg, held)
                self._from = None
        return self._held

    def has(self, name: str) -> bool:
        return self._key(name) in self.cmds

    @staticmethod
    def _key(name: str) -> str:
        key = _SET_KEYS.get(name)
        if key is None:
            key = _SET_KEYS[name] = name if name.startswith("NPU_SET_") else "NPU_SET_" + name
        return key

    def get(self, name: str, fld: str, default: int | None = None) -> int:
        """Field ``fld`` of NPU_SET_``name`` (stored integer: *_m1 as stored, enums as numbers)."""
        c = self.cmds.get(self._key(name))
        if c is None:
            if default is not None:
                return default
            raise Unpredictable(f"UNPREDICTABLE: {self._key(name)} is used but was never set "
                                f"(NPU_SET_* state has no reset value, L6024)")
        return c.fields[fld]

    def copy(self) -> SetState:
        return SetState(dict(self.cmds))


@dataclass
class NpuInternal:
    """Internal NPU state that lives between kernel operations: the chaining FIFOs and chain
    bookkeeping (L6288-6294) and the accumulator storage (read_/write_accumulator_storage,
    L6800-6854). Cleared by a soft reset."""

    fifo: dict[int, list] = field(default_factory=dict)  # region -> [values array, read index]
    fifo_valid: set = field(default_factory=set)
    chain_length: int = 0
    num_ifm: int = 0
    acc: np.ndarray | None = None  # [bh, bw, bd] int64, op-relative indices

    def copy(self) -> NpuInternal:
        return NpuInternal({k: [v[0], v[1]] for k, v in self.fifo.items()}, set(self.fifo_valid),
                           self.chain_length, self.num_ifm,
                           None if self.acc is None else self.acc.copy())

    # chaining (L6323-6419) ----------------------------------------------------------------
    def add_operation_to_chain(self, s: SetState, use_ifm: bool, use_ifm2: bool,
                               append: bool) -> None:
        require(self.chain_length == 0 or append, "g_chain_length == 0 || append", "L6325")
        if self.chain_length == 0:
            self.num_ifm = 0
            self.fifo_valid.clear()
        self.chain_length += 1
        require(self.chain_length <= 4, "g_chain_length <= 4", "L6331")
        chained = []
        for use, which in ((use_ifm, "IFM"), (use_ifm2, "IFM2")):
            if not use:
                continue
            if s.get(which + "_PRECISION", "activation_storage") == 2:
                region = s.get(which + "_REGION", "region")
                if region >= 3 or region not in self.fifo_valid:  # messages only on failure
                    require(region < 3, f"{which}_REGION.region < 3", "L6336")
                    require(False, f"g_fifo_valid[{which}_REGION.region]", "L6337")
                chained.append(region)
            else:
                self.num_ifm += 1
        if len(chained) == 2:
            require(chained[0] != chained[1], "IFM_REGION.region != IFM2_REGION.region", "L6352")
        require(self.num_ifm <= 3, "g_num_ifm <= 3", "L6356")
        if s.get("OFM_PRECISION", "activation_storage") == 2:
            region = s.get("OFM_REGION", "region")
            require(region < 3, "OFM_REGION.region < 3", "L6360")
            self.fifo_valid.add(region)
        else:
            self.chain_length = 0

    def push(self, region: int, values: np.ndarray) -> None:
        """write_chaining_fifo of every value, in (oy, ox, oc) order (L6386-6396)."""
        buf = self.fifo.get(region)
        new = values.astype(np.int64).ravel()
        rest = None if buf is None else buf[0][buf[1]:]
        self.fifo[region] = [new if rest is None or not len(rest) else
                             np.concatenate([rest, new]), 0]

    def pop(self, region: int, n: int) -> np.ndarray:
        """read_chaining_fifo n times (L6400-6419): assert(head >= tail)."""
        buf = self.fifo.get(region)
        have = 0 if buf is None else len(buf[0]) - buf[1]
        if have < n:
            require(False, f"g_fifo_head >= g_fifo_tail (FIFO {region} holds {have} values, "
                    f"{n} read)", "L6410")
        out = buf[0][buf[1]:buf[1] + n]
        buf[1] += n
        return out


# ------------------------------------------------------------------------------------------------
# configuration and results


@dataclass(frozen=True)
class NpuConfig:
    macs: int = 256  # MACs per cycle: 128 .. 2048

    @property
    def num_su(self) -> int:  # scaling units (L12830, L12886)
        return {128: 2, 256: 4, 512: 8, 1024: 16, 2048: 32}[self.macs]

    @property
    def num_wd(self) -> int:  # weight decoders (Table 3-90 L7349-7355)
        return Wt.WD_CONFIG[self.macs][0]

    @property
    def ofm_data_w(self) -> int:  # AO_DMA_OFM_IF bits per cycle (Table 4-13 L12884-12892)
        return 256 if self.macs == 2048 else 128

    def depthwise_macs(self, ifm_bits: int) -> int:
        """MACs/cycle of DepthwiseConv2D (the tables of L12562-12790), used for pooling."""
        if ifm_bits == 8:
            return {128: 16, 256: 32, 512: 64, 1024: 128, 2048: 256}[self.macs]
        return {128: 8, 256: 16, 512: 16, 1024: 64, 2048: 128}[self.macs]


@dataclass(frozen=True)
class OpResult:
    """What an operation did (frozen: an operation's decode hands the same one to every run)."""
    macs: int = 0  # multiply-accumulates the pseudocode performs (accumulate() calls), exact
    elements: int = 0  # OFM elements produced, exact
    mac_cycles: int = 0  # MODELLED cycles of the MAC unit
    ao_cycles: int = 0  # MODELLED cycles of the activation-output unit
    summary: str = ""


class Access(NamedTuple):
    """One memory access worked out: the numpy views of the memory it reads or writes (strided
    boxes, or a stream's bytes) and the byte ranges it accounts (Touched, AXI counts). Why
    apart from making it: a program's operations make the same accesses on every run."""
    region: int
    family: int              # the AXI port family its region uses (0 SRAM, 1 external)
    channel: int
    write: bool
    views: tuple
    ranges: tuple | list     # merged [start, end) byte ranges
    nbytes: int


def read_views(acc: Access) -> list[np.ndarray]:
    """The values of a read access's box views (read-only views, no copy): the stored integer
    type, int64 for 8-byte elements (as gather gives)."""
    return [view.astype(np.int64) if view.dtype.itemsize == 8 else view for view in acc.views]


def store_views(acc: Access, values: list) -> None:
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
    PMU bytes), the internal LUT RAM, the internal state between operations and COND_STATUS."""

    lut: np.ndarray
    npu: NpuInternal

    def gather(self, region: int, offsets: np.ndarray, size: int, signed: bool,
               channel: int) -> np.ndarray: ...

    def scatter(self, region: int, offsets: np.ndarray, size: int, values: np.ndarray,
                channel: int) -> None: ...

    def read_bytes(self, region: int, offset: int, length: int, channel: int) -> bytes: ...

    # optional (read_raw / write_ofm use them when present, else gather / scatter): strided
    # boxes (offset, shape, strides) of elements at offset + sum(i_k * strides[k]), accessed
    # as one; None / False = use the element path
    def gather_boxes(self, region: int, boxes: list, size: int, signed: bool,
                     channel: int) -> list[np.ndarray] | None: ...

    def scatter_boxes(self, region: int, boxes: list, size: int, values: list,
                      channel: int) -> bool: ...

    def set_result_flag(self, value: int) -> None: ...

    # optional (an operation keeps its accesses where present, :class:`_ConvRun`): the
    # accesses worked out without being made, their accounting when made, the regions'
    # (BASEP, port family) that key them, where they are kept, the block recorder's list
    # (:func:`_traced`)
    def box_access(self, region: int, boxes: list, size: int, dtype: str, channel: int,
                   write: bool) -> Access | None: ...

    def stream_access(self, region: int, offset: int, length: int, channel: int) -> Access: ...

    def record(self, access: Access) -> None: ...

    def placement(self) -> tuple: ...

    kept_runs: dict | None
    trace: list | None


# ------------------------------------------------------------------------------------------------
# tensors: the gather (L6448-6614)


@dataclass
class Tensor:
    """IFM, IFM2 or OFM as the NPU_SET_* state describes it."""

    name: str
    region: int
    bases: tuple[int, int, int, int]
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


_MEMO: dict = {}  # (kind, ids of the commands read, extra) -> (the commands, result)
#: a few entries per operation of a program must fit (clearing them all on every run of a
#: bigger program would decode every operation afresh each time)
_MEMO_MAX = 16384


def memo_on_commands(kind: str, s: SetState, keys: tuple[str, ...], extra, compute):
    """``compute()``, memoised on the identity of the NPU_SET_* commands ``keys`` it reads and
    ``extra``: decoded commands are shared, frozen objects (the entry holds them, so their ids
    stay theirs), so an operation's decode is the same on every run of a stream. Errors are
    not memoised. Callers treat the result as read-only."""
    cmds = tuple(map(s.cmds.get, keys))
    return _memo((kind, tuple(map(id, cmds)), extra), cmds, compute)


def memo_on_state(kind: str, cmd: Command | None, s: SetState, extra, compute):
    """:func:`memo_on_commands` over the operation command ``cmd`` and every NPU_SET_* command
    set: for an operation's whole decode, which reads more commands than are worth listing."""
    held = s.held()
    return _memo((kind, id(cmd), id(held), extra), (cmd, held), compute)


def _memo(key: tuple, held: tuple, compute):
    """``compute()`` kept under ``key`` (ids of the commands in ``held``, which the entry
    holds so that the ids stay theirs)."""
    hit = _MEMO.get(key)
    if hit is None:
        result = compute()
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()
        hit = _MEMO[key] = (held, result)
    return hit[1]


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
    require(fmt in (0, 1), f"{which} activation_format is not reserved", "L10030")
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


def _check_addressable(t: Tensor) -> None:
    """element_address_in_region's storage and alignment asserts (L6462, L6487, L6492)."""
    # (the messages are formatted only for a failing check: this runs on every tensor access)
    if t.storage not in (0, 1):
        require(False, f"{t.name} storage is tile2x2 or tile3x1", "L6462")
    es = t.size
    if t.fmt == 0:
        if not (all(b % es == 0 for b in t.bases) and t.stride_x % es == 0
                and t.stride_y % es == 0):
            require(False, f"{t.name} base/stride_x/stride_y % element_size == 0", "L6487")
    elif not (all(b % 16 == 0 for b in t.bases) and t.stride_c % (16 * es) == 0
              and t.stride_y % (16 * es) == 0):
        require(False, f"{t.name} base % 16 == 0 && stride_c/stride_y % (16*element_size) == 0",
                "L6492")


def addresses(t: Tensor, shape: tuple[int, int, int]) -> np.ndarray:
    """Region-relative byte offsets of a logical [H, W, C] tensor: element_address_in_region
    (L6448-6498) through emu/memory/ethosu85.py, with the alignment asserts. NHWC adds
    ``c * element_size`` (digest gap G-A1: the literal ``+ c`` misaligns wide types)."""
    _check_addressable(t)
    return L.element_addresses(shape, t.bases, t.stride_y, t.stride_x, t.stride_c, t.width0,
                               t.heights, t.storage, t.size, t.fmt)


def boxes(t: Tensor, shape: tuple[int, int, int]) -> list[tuple[int, tuple, tuple, bool]] | None:
    """The tensor as strided boxes of memory, when it is: every element in tile 0 (the usual
    single-tile tensor), NHWC (one box), or NHCWB16: one box of whole bricks [H, C/16, W, 16]
    and, when the depth is not a multiple of 16, one of the last brick's channels [H, W, C % 16].
    Each is (offset, box shape, byte strides, bricked), the boxes in channel order; None
    otherwise (the element-address path runs). Why: a box is read and written as one numpy view
    instead of an address per element, with exactly the same addresses
    (element_address_in_region, L6448-6498)."""
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
    out = [(base, (H, full, W, 16), (t.stride_y, t.stride_c, 16 * es, es), True)] if full else []
    if rest:
        out.append((base + full * t.stride_c, (H, W, rest), (t.stride_y, 16 * es, es), False))
    return out


def read_raw(mem: MemoryPort, t: Tensor, shape: tuple[int, int, int], channel: int) -> np.ndarray:
    """The stored integers of a [H, W, C] tensor (memory or chaining FIFO): int64, or the
    stored integer type when the tensor is boxes (:func:`boxes`, read through the port's
    ``gather_boxes``); read_ifm's value part (zero point, upscale) is the kernel's."""
    if t.storage == 2:
        return mem.npu.pop(t.region, math.prod(shape)).reshape(shape)
    _check_addressable(t)
    bs = boxes(t, shape)
    gather_boxes = getattr(mem, "gather_boxes", None)
    if bs is not None and gather_boxes is not None:
        vals = gather_boxes(t.region, [b[:3] for b in bs], t.size, t.signed, channel)
        if vals is not None:
            return _joined(vals, tuple(b[3] for b in bs), shape)
    offs = addresses(t, shape)
    return mem.gather(t.region, offs.ravel(), t.size, t.signed, channel).reshape(shape)


def _joined(vals: list, bricked: tuple, shape: tuple[int, int, int]) -> np.ndarray:
    """The [H, W, C] tensor from the values of its :func:`boxes` (``bricked`` per box)."""
    if bricked == (False,):  # NHWC: the box is the tensor
        return vals[0]
    parts = [np.ascontiguousarray(_bricks(v)[..., 0].transpose(0, 2, 1)).view(v.dtype)
             if b else v for b, v in zip(bricked, vals)]
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=2)


def ofm_shape(s: SetState) -> tuple[int, int, int]:
    return (s.get("OFM_HEIGHT_M1", "height_m1") + 1, s.get("OFM_WIDTH_M1", "width_m1") + 1,
            s.get("OFM_DEPTH_M1", "depth_m1") + 1)


def kernel_stride(s: SetState) -> tuple[int, int, int, int, int, int]:
    """(stride_y, stride_x, dilation_y, dilation_x, weight_order, decomposition) (L8157-8163)."""
    ks = s.cmds.get("NPU_SET_KERNEL_STRIDE")
    if ks is None:
        s.get("KERNEL_STRIDE", "stride_x_lsb")  # raises: never set
    f = ks.fields
    return (2 * f["stride_y_msb"] + f["stride_y_lsb"] + 1,
            2 * f["stride_x_msb"] + f["stride_x_lsb"] + 1,
            f["dilation_y"] + 1, f["dilation_x"] + 1, f["weight_order"], f["decomposition"])


def pads(s: SetState) -> tuple[int, int, int, int]:
    """(top, left, bottom, right)."""
    return (s.get("IFM_PAD_TOP", "pad"), s.get("IFM_PAD_LEFT", "pad"),
            s.get("IFM_PAD_BOTTOM", "pad"), s.get("IFM_PAD_RIGHT", "pad"))


def _upscale(s: SetState, ifm: Tensor, sy: int, sx: int) -> int:
    mode = s.get("IFM_UPSCALE", "mode")
    require(mode in (0, 1, 2), "IFM_UPSCALE.mode is not reserved", "L10097")
    if mode:
        require(sy == 1 and sx == 1, "kernel x/y stride == 1 with upscale", "L6519")
        require(ifm.storage != 2, "IFM storage != chained with upscale", "L6520")
    return mode


def _ifm_extent(upscale: int, ih: int, iw: int) -> tuple[int, int]:
    """Stored IFM rows/columns behind a derived (upscaled) extent (read_ifm halves y, x)."""
    return ((ih + 1) // 2, (iw + 1) // 2) if upscale else (ih, iw)


# ------------------------------------------------------------------------------------------------
# output stage, weights, scales, accumulators


def microblock(s: SetState) -> int:
    mb = s.get("ACC_FORMAT", "microblock")
    require(mb <= 5, "ACC_FORMAT.microblock is not reserved", "L9223")
    return mb


#: the NPU_SET_* commands :func:`out_config` reads
_OUT_CMDS = tuple(SetState._key(n) for n in (
    "OFM_PRECISION", "ACTIVATION", "ACTIVATION_MIN", "ACTIVATION_MAX", "OFM_ZERO_POINT",
    "OFM_SCALE", "ACC_FORMAT"))


def out_config(s: SetState, *, accumulator_path: bool) -> np.ndarray:
    """:func:`_out_config` memoised on the commands it reads (:func:`memo_on_commands`); the
    kernels only read the array."""
    return memo_on_commands("out", s, _OUT_CMDS, accumulator_path,
                            lambda: _out_config(s, accumulator_path=accumulator_path))


def _out_config(s: SetState, *, accumulator_path: bool) -> np.ndarray:
    """Pack OFM_PRECISION / OFM_SCALE / OFM_ZERO_POINT / ACTIVATION* / ACC_FORMAT into the
    kernels' ``cfg`` (emu/numeric/ethosu85.py: out_config) with the asserts of rescale and
    activation (L6955-7000, L7075-7173). ``accumulator_path``: write_accumulator ops (conv,
    depthwise, pool) honour ACC_FORMAT (acc_format, acc_output) and per-channel scaling.
    Decision: ELEMENTWISE and RESIZE have their own int32/int64 accumulator (L8524, L9060), so
    ACC_FORMAT.acc_format = i48 does not bring rescale's 16-bit scale assert (L6982) to them
    (Vela's int16 ADD programs i48 with a 31-bit OFM scale)."""
    p = "OFM_PRECISION"
    bits = PRECISION_BITS[s.get(p, "activation_precision")]
    signed = bool(s.get(p, "activation_type"))
    per_channel = s.get(p, "scale_mode") == 0
    fn = s.get("ACTIVATION", "activation_function")
    require(fn in _ACT_FUNCTIONS, f"activation_function {fn} is not reserved", "L9257")
    table = s.get("ACTIVATION", "table")
    clip_none = s.get("ACTIVATION", "activation_clip_range") == 1
    need_clip = bits != 64 and not clip_none and fn not in (P.LUT_TANH, P.LUT_SIGMOID)
    lo = s.get("ACTIVATION_MIN", "clip_boundary", None if need_clip else 0)
    hi = s.get("ACTIVATION_MAX", "clip_boundary", None if need_clip else 0)
    zp = s.get("OFM_ZERO_POINT", "zero_point", None if bits != 64 else 0)
    if bits != 64:
        z, ok = P.ofm_zero_point(zp, signed)
        require(ok, f"OFM zero point {z} valid for {'s' if signed else 'u'}{bits}", "L7083-7093")
    if fn == P.LUT_S8_S16:
        require(table < 4, "table < 4 (s8_s16)", "L7125")
    elif fn == P.LUT_S8_S32:
        require(table < 2, "table < 2 (s8_s32)", "L7132")
    elif fn in (P.LUT_S16_S16, P.LUT_S16_S32, P.LUT_TANH, P.LUT_SIGMOID):
        require(table == 0, "table == 0 (interpolating LUT uses all 2 KiB)", "L7140")
    rnd = s.get("OFM_SCALE", "round_mode")
    require(rnd < 6, "OFM_SCALE.round_mode is not reserved", "L12067")
    dbl = s.get("OFM_SCALE", "dbl_rnd")
    require(dbl <= 30, "0 <= dbl_rnd && dbl_rnd <= 30", "L6912")
    scale = s.get("OFM_SCALE", "scale")
    acc_format = s.get("ACC_FORMAT", "acc_format", 0) if accumulator_path else 0
    require(acc_format in (0, 1), "ACC_FORMAT.acc_format is not reserved", "L9215")
    if acc_format == 1 and not per_channel:
        require(scale == sign_extend(scale, 16), "scale == sign_extend(scale, 16)", "L6982")
    acc_out = s.get("ACC_FORMAT", "acc_output", 0) if accumulator_path else 0
    return P.out_config(ofm_bits=bits, ofm_signed=signed, zero_point=zp, act_min=lo, act_max=hi,
                        scale=scale, shift=s.get("OFM_SCALE", "shift"), round_mode=rnd,
                        dbl_rnd=dbl, per_channel=per_channel and accumulator_path,
                        acc_bits=48 if acc_format == 1 else 32, function=fn, table=table,
                        clip_none=clip_none, acc_output_disable=bool(acc_out))


def scale_stream(s: SetState, mem: MemoryPort, cfg: NpuConfig, depth: int, acc48: bool):
    """(bias, scale, shift) per OFM channel from the scale-and-bias stream (section 5,
    L7211-7299) at BASEP[SCALE_REGION] + SCALE_BASE, SCALE_LENGTH bytes."""
    return read_scales(mem, scale_read(s, cfg, depth, acc48))


def scale_read(s: SetState, cfg: NpuConfig, depth: int, acc48: bool) -> tuple:
    """What :func:`scale_stream` reads and how it decodes it (region, base, length, decode
    arguments), with its asserts: the part the commands decide."""
    region = s.get("SCALE_REGION", "region")
    base = s.get("SCALE_BASE", "addr")
    length = s.get("SCALE_LENGTH", "length")
    require(length % 16 == 0, "SCALE_LENGTH % 16 == 0", "L12304")
    cs = Wt.channels_in_set(cfg.macs, microblock(s))
    reverse_c = s.get("OFM_PRECISION", "activation_reverse") == 3
    nsets = -(-depth // cs)
    if reverse_c:
        require(depth <= 16 or depth % cs == 0,
                "ofm_depth <= 16 || ofm_depth % channels_in_set == 0 (reverse C)", "L7247")
        need = 10 * ((nsets - 1) * cs + min(cs, depth))
    else:
        need = 10 * depth
    require(length >= need, f"SCALE_LENGTH {length} holds the {depth} channel records "
            f"({need} bytes)", "L7211-7273")
    return region, base, length, (depth, acc48, cs, reverse_c)


def read_scales(mem: MemoryPort, read: tuple):
    """The stream of :func:`scale_read` read and decoded."""
    region, base, length, args = read
    return Wt.decode_scale_stream(mem.read_bytes(region, base, length, RD_SCALE_BIAS), *args)


_WEIGHT_STREAMS = (("WEIGHT_BASE", "WEIGHT_LENGTH"), ("WEIGHT1_BASE", "WEIGHT1_LENGTH"),
                   ("WEIGHT2_BASE", "WEIGHT2_LENGTH"), ("WEIGHT3_BASE", "WEIGHT3_LENGTH"))


def weight_read(s: SetState, cfg: NpuConfig, *, depth: int, ifm_depth: int,
                dilated: tuple[int, int], dilation: tuple[int, int], stride: tuple[int, int],
                order: int, decomposition: int, depthwise: bool, ifm16: bool) -> tuple:
    """What the weight stream(s) of an operation are (WEIGHT_BASE/WEIGHT1-3_BASE, section 6)
    and how they decode into W[oc][ky][kx][ic] (undilated): (region, ((base, length) per
    stream), ordering parameters, fwd), with the asserts: the part the commands decide."""
    fwd = s.get("WEIGHT_FORMAT", "weight_format") == 1
    sparse = bool(s.get("WEIGHT_FORMAT", "weight_sparsity"))
    if depthwise:
        require(not fwd, "WEIGHT_FORMAT.weight_format != fwd", "L8291")
        require(not sparse, "WEIGHT_FORMAT.weight_sparsity == none", "L8292")
    mb = microblock(s)
    require(Wt.microblock_depth(cfg.macs, mb) >= 1, "microblock legal for CONFIG.macs_per_cc",
            "L9223")
    p = Wt.ordering_params(ofm_depth=depth, ifm_depth=ifm_depth, kernel_hw=dilated,
                           dilation=dilation, stride=stride,
                           ofm_block_depth=s.get("OFM_BLK_DEPTH_M1", "depth_m1") + 1,
                           macs_per_cc=cfg.macs, microblock=mb, depthwise=depthwise,
                           part_kernel_first=bool(order), decomposition_d4x4=bool(decomposition),
                           sparse=sparse, ifm16bit=ifm16)
    if p[17] and not depthwise:  # mb_i16only; decision: a conv rule (it only changes the
        # ifm_block_depth of depth-first conv; Vela's 8-bit depthwise uses u1x2 at 256 MACs)
        require(ifm16 and dilated == (1, 1), "!mb_i16only || (ifm16bit && kernel 1x1)", "L7385")
    region = s.get("WEIGHT_REGION", "region")
    streams = []
    for k in range(1 if fwd else cfg.num_wd):
        bname, lname = _WEIGHT_STREAMS[k]
        base, length = s.get(bname, "addr"), s.get(lname, "length")
        require(base % 16 == 0, f"{bname} % 16 == 0", "L12329")
        align = 32 if fwd else 16
        require(length % align == 0, f"{lname} % {align} == 0", "L12501")
        streams.append((base, length))
    return region, tuple(streams), p, fwd


def read_weights(mem: MemoryPort, read: tuple) -> np.ndarray:
    """The streams of :func:`weight_read` read and decoded (memoised on their bytes)."""
    region, streams, p, fwd = read
    data = [mem.read_bytes(region, base, length, RD_WEIGHTS) for base, length in streams]
    diag: list[str] = []
    w = Wt.decode_weights_memo(data, p, fwd=fwd, diag=diag)
    _check_diag(diag, "weight stream")
    return w


def acc_input(s: SetState, mem: MemoryPort, shape: tuple[int, int, int],
              acc48: bool) -> np.ndarray | None:
    """read_accumulator's source (L6800-6826): None for reset (the op's reset value)."""
    mode = s.get("ACC_FORMAT", "acc_input")
    require(mode in (0, 1, 2), "ACC_FORMAT.acc_input is not reserved", "L9217")
    H, W, D = shape
    if mode == 0:
        return None
    if mode == 1:
        blk = (s.get("OFM_BLK_HEIGHT_M1", "height_m1") + 1,
               s.get("OFM_BLK_WIDTH_M1", "width_m1") + 1,
               s.get("OFM_BLK_DEPTH_M1", "depth_m1") + 1)
        require(H <= blk[0] and W <= blk[1] and D <= blk[2], "oy < bh && ox < bw && oc < bd",
                "L6811")
        acc = mem.npu.acc
        require(acc is not None and all(a >= b for a, b in zip(acc.shape, shape)),
                "accumulator storage written before acc_input keep", "L6811")
        return acc[:H, :W, :D].copy()
    t = tensor(s, "IFM2")
    require(t.signed and t.bits == (64 if acc48 else 32),
            f"IFM2 precision == {'b64' if acc48 else 'b32'} && signed (acc_input ifm2)",
            "L6572-6580")
    diag: list[str] = []
    v = values_k.read_values(read_raw(mem, t, shape, RD_IFM_STREAM),
                      s.get("IFM2_ZERO_POINT", "zero_point"), t.bits, True, diag, "IFM2")
    _check_diag(diag, "read_ifm2")
    return v


def store_accumulators(s: SetState, mem: MemoryPort, acc: np.ndarray) -> None:
    """write_accumulator with acc_output disable (L6845-6852)."""
    H, W, D = acc.shape
    blk = (s.get("OFM_BLK_HEIGHT_M1", "height_m1") + 1, s.get("OFM_BLK_WIDTH_M1", "width_m1") + 1,
           s.get("OFM_BLK_DEPTH_M1", "depth_m1") + 1)
    require(H <= blk[0] and W <= blk[1] and D <= blk[2], "oy < bh && ox < bw && oc < bd", "L6850")
    old = mem.npu.acc
    shape = tuple(max(a, b) for a, b in zip(acc.shape, (0, 0, 0) if old is None else old.shape))
    new = np.zeros(shape, np.int64)
    if old is not None:
        new[:old.shape[0], :old.shape[1], :old.shape[2]] = old
    new[:H, :W, :D] = acc
    mem.npu.acc = new


class _OfmWrite(NamedTuple):
    """Where and how write_ofm stores an OFM of one shape (:func:`_ofm_write`)."""
    tensor: Tensor
    flips: tuple             # the index that reverses (OFM reverse)
    perm: tuple              # the transpose
    boxes: list | None       # :func:`boxes` of the stored tensor
    parts: tuple             # per box: (channels, bricked)


def write_ofm(mem: MemoryPort, s: SetState, cfg: NpuConfig, value: np.ndarray,
              all_perms: bool) -> None:
    """write_ofm (L6618-6757) of the whole [H, W, D] OFM (values already truncated by the
    kernel): result flag, chaining FIFO, storage none, reverse, transpose, tiles. The layout is
    decoded once per command state and shape (memoised as an operation's decode)."""
    _result_flag(mem, value)
    w = ofm_write_layout(s, cfg, value.shape, all_perms)
    if w is None:  # storage none
        return
    t = w.tensor
    if t.storage == 2:
        mem.npu.push(t.region, value)
        return
    scatter_boxes = getattr(mem, "scatter_boxes", None)
    if w.boxes is not None and scatter_boxes is not None:
        if scatter_boxes(t.region, w.boxes, t.size, _ofm_parts(w, value), WR_OFM):
            return
    stored = np.transpose(value[w.flips], w.perm)
    offs = addresses(t, stored.shape)
    mem.scatter(t.region, offs.ravel(), t.size, np.ascontiguousarray(stored).ravel(), WR_OFM)


def _result_flag(mem: MemoryPort, value: np.ndarray) -> None:
    """write_ofm's result flag: the low bit of a 1x1x1 OFM (both write paths)."""
    if value.shape == (1, 1, 1):
        mem.set_result_flag(int(value.ravel()[0]) & 1)


def ofm_write_layout(s: SetState, cfg: NpuConfig, shape: tuple,
                     all_perms: bool) -> _OfmWrite | None:
    """:func:`_ofm_write`, decoded once per command state and shape (as an operation)."""
    return memo_on_state("ofm", None, s, (cfg, shape, all_perms),
                         lambda: _ofm_write(s, cfg, shape, all_perms))


def _ofm_parts(w: _OfmWrite, value: np.ndarray) -> list[np.ndarray]:
    """The OFM ``value`` [H, W, D] as stored (reversed, transposed), one array per box of
    ``w.boxes``."""
    as_is = not w.flips and w.perm == (0, 1, 2)
    if as_is and w.parts == ((value.shape[2], False),):
        return [value]  # NHWC as it is
    stored = value if as_is else np.transpose(value[w.flips], w.perm)
    h, wd, _ = stored.shape
    parts, c0 = [], 0
    for n, bricked in w.parts:
        part = stored[:, :, c0:c0 + n]
        parts.append(part.reshape(h, wd, n // 16, 16).transpose(0, 2, 1, 3) if bricked
                     else part)
        c0 += n
    return parts


def _ofm_write(s: SetState, cfg: NpuConfig, shape: tuple, all_perms: bool) -> _OfmWrite | None:
    """write_ofm's layout and asserts for an OFM of ``shape`` from the commands alone; None for
    storage none."""
    t = tensor(s, "OFM")
    rev = s.get("OFM_PRECISION", "activation_reverse")
    tr = s.get("OFM_PRECISION", "activation_transpose")
    require(tr in _TRANSPOSE_PERM, f"OFM transpose {tr} is not reserved", "L10529")
    if t.storage == 2:
        require(rev == 0 and tr == 0, "reverse == none && transpose == HWC (chained OFM)",
                "L6666-6667")
        return _OfmWrite(t, (), (0, 1, 2), None, ())
    if t.storage == 3:
        return None
    bh = s.get("OFM_BLK_HEIGHT_M1", "height_m1", 0) + 1
    bw = s.get("OFM_BLK_WIDTH_M1", "width_m1", 0) + 1
    bd = s.get("OFM_BLK_DEPTH_M1", "depth_m1", 0) + 1
    flips = ()
    if rev:
        require(tr == 0, "transpose == HWC (with reverse)", "L6677")
        require(all_perms, "allowed_perms == allowed_perms_all (reverse)", "L6678")
        require(t.bits != 64, "precision != b64 (reverse)", "L6679")
        if rev == 3:
            mbd = max(16, Wt.microblock_depth(cfg.macs, microblock(s)))
            if shape[2] % mbd:
                require(t.fmt == 0 and bd <= 16, "format == nhwc && ofm_blk_depth <= 16 "
                        "(reverse C, depth not a multiple of the microblock)", "L6686-6688")
        flips = (slice(None),) * (rev - 1) + (slice(None, None, -1),)
    if t.fmt == 1:
        if tr in (2, 6):
            require(bw % 16 == 0, "ofm_blk_width % 16 == 0 (NHCWB16 HCW/CHW)", "L6700")
        if tr in (3, 7):
            require(bh % 16 == 0, "ofm_blk_height % 16 == 0 (NHCWB16 CWH/WCH)", "L6702")
    require(tr in (0, 2, 6) or all_perms, "transpose in {HWC, HCW, CHW} || allowed_perms_all",
            "L6705")
    require(tr == 0 or t.bits != 64, "transpose == HWC || precision != b64", "L6706")
    lim = {1: (bw <= 128 and bh <= 128), 2: (bd <= 128 and bw <= 1024),
           7: (bd <= 128 and bh <= 1024), 6: (bd <= 128 and bh <= 128 and bw <= 1024),
           3: (bw <= 128 and bd <= 128 and bh <= 1024)}
    require(lim.get(tr, True), "OFM block fits the transpose limits (128 / 1024)", "L6710-6740")
    perm = _TRANSPOSE_PERM[tr]
    _check_addressable(t)
    bs = boxes(t, tuple(shape[i] for i in perm))
    if bs is None:
        return _OfmWrite(t, flips, perm, None, ())
    return _OfmWrite(t, flips, perm, [b[:3] for b in bs],
                     tuple((b[1][1] * 16 if b[3] else b[1][2], b[3]) for b in bs))


# ------------------------------------------------------------------------------------------------
# performance model (MODELLED; digest ethos-u85-registers.md section 5)


def ao_cycles(cfg: NpuConfig, n: int, ofm_bits: int, in_bits: int, binary: bool,
              from_cb: bool) -> int:
    """AO cycles for ``n`` output elements: per scaling unit min(1, P, CB, DMA) elements/cycle
    (closed form of Tables 4-11/4-12, digest 5.2), NUM_SU units in parallel."""
    p = 0.5 if ofm_bits == 64 else 1.0
    cb = 0.5 if from_cb and in_bits == 32 and binary else 1.0
    dma = cfg.ofm_data_w / (cfg.num_su * ofm_bits)
    per_su = min(1.0, p, cb, dma)
    return int(np.ceil(n / (per_su * cfg.num_su))) if n else 0


def _finish(mem: MemoryPort, s: SetState, cfg: NpuConfig, out: np.ndarray, kcfg: np.ndarray,
            all_perms: bool) -> None:
    """The accumulator or OFM write of a kernel result."""
    if kcfg[P.C_ACC_OUTPUT]:
        store_accumulators(s, mem, out.astype(np.int64))
    else:
        write_ofm(mem, s, cfg, out, all_perms)


def _ofm_bits(s: SetState) -> int:
    return PRECISION_BITS[s.get("OFM_PRECISION", "activation_precision")]


# ------------------------------------------------------------------------------------------------
# NPU_OP_CONV (L8147-8228) and NPU_OP_DEPTHWISE (L8256-8315)


class _ConvDecode(NamedTuple):
    """What the commands decide about an NPU_OP_CONV / _DEPTHWISE: extents, tensors, output
    stage, the streams to read, the counts (:func:`_conv_decode`)."""
    matmul: bool
    ofm: tuple               # H, W, D
    stride: tuple
    dilation: tuple
    dilated: tuple           # KERNEL_HEIGHT/WIDTH_M1 + 1
    pad: tuple               # top, left, bottom, right
    ifm: Tensor
    ifm_shape: tuple         # the stored extent read
    ifm2: Tensor | None      # matmul
    zp: int                  # IFM_ZERO_POINT as stored
    upscale: int
    kcfg: np.ndarray
    acc48: bool
    scales: tuple | None     # scale_read
    weights: tuple | None    # weight_read (not matmul)
    result: OpResult
    kernels: dict            # _int_conv's


def _conv_like(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig,
               depthwise: bool) -> OpResult:
    """The operation: its decode (memoised on the commands: a program's operations are the
    same on every run, and decoding them again cost more than the smaller ones' kernels),
    then the reads, the kernel and the OFM write, in the pseudocode's order."""
    matmul = not depthwise and cmd.fields.get("weights_ifm2", 0) == 1
    ain = s.get("ACC_FORMAT", "acc_input")
    mem.npu.add_operation_to_chain(s, True, matmul or ain == 2, False)
    d = memo_on_state("conv", cmd, s, (cfg, depthwise),
                      lambda: _conv_decode(s, cfg, depthwise, matmul))
    key, kept = kept_run(mem, d)
    if kept is not None and _run_kept_conv(d, kept, mem):
        return d.result
    H, W, D = d.ofm
    acc_in = acc_input(s, mem, d.ofm, d.acc48) if ain else None
    raw = read_raw(mem, d.ifm, d.ifm_shape, RD_IFM)
    zp = d.zp
    bias = scales = shifts = None
    if d.scales is not None:
        bias, scales, shifts = read_scales(mem, d.scales)
    diag: list[str] = []
    if matmul:
        raw2 = read_raw(mem, d.ifm2, matmul_ifm2_shape(d), RD_IFM_STREAM)
        out = conv_k.matmul(raw, raw2, ifm_zp=zp, ifm2_zp=s.get("IFM2_ZERO_POINT", "zero_point"),
                            ifm_bits=d.ifm.bits, ifm_signed=d.ifm.signed, cfg=d.kcfg, bias=bias,
                            scales=scales, shifts=shifts, lut=mem.lut, acc_in=acc_in, diag=diag)
    else:
        w = read_weights(mem, d.weights)
        k, kkey = _int_conv(d, raw, zp, w, bias, scales, shifts, depthwise)
        if k is not None:
            if key is not None and not ain and kkey is not None:  # before the OFM write: the
                kept = _kept_conv(d, s, cfg, mem, kkey)           # streams as decoded
                if kept is not None:
                    keep_run(mem, key, d, kept)
            out = conv_k.run_int_conv(k, raw, acc_in, mem.lut)
        else:
            fn = conv_k.depthwise2d if depthwise else conv_k.conv2d
            out = fn(raw, w, (H, W), stride=d.stride, dilation=d.dilation, pad=d.pad,
                     ifm_zp=zp, ifm_bits=d.ifm.bits, ifm_signed=d.ifm.signed,
                     upscale_mode=d.upscale, cfg=d.kcfg, bias=bias, scales=scales,
                     shifts=shifts, lut=mem.lut, acc_in=acc_in, diag=diag, dilated=d.dilated)
    _check_diag(diag, cmd.name)
    _finish(mem, s, cfg, out, d.kcfg, True)
    return d.result


class _ConvRun(NamedTuple):
    """A convolution's accesses and integer kernel for one decode and placement of the regions
    (:func:`_kept_conv`): the same on every run while the weight and scale streams hold the
    bytes they were decoded from. Why: working them out through the general reads and writes
    cost ~40 us per operation, several times a MobileNet layer's kernel."""
    ifm: tuple               # _kept_read_access
    streams: tuple           # (Access, the bytes it held): scale stream, weight streams
    kernel: tuple            # the integer kernel's key in the decode's kernels (not the
    #                          kernel: a kept run must not keep the packed weights alive)
    ofm: tuple               # _kept_write_access


def _kept_read_access(mem: MemoryPort, t: Tensor, shape: tuple, channel: int) -> tuple | None:
    """(the Access, bricked per box, shape) of :func:`read_raw` of ``t`` as kept box views,
    (None, the region, shape) for a chained tensor (the chaining FIFO), or None where it is
    neither (not boxes, not a plain view)."""
    if t.storage == 2:
        return None, t.region, shape
    bs = boxes(t, shape)
    acc = bs and mem.box_access(t.region, [b[:3] for b in bs], t.size,
                                f"<{'i' if t.signed else 'u'}{t.size}", channel, False)
    return (acc, tuple(b[3] for b in bs), shape) if acc else None


def _kept_write_access(mem: MemoryPort, w: _OfmWrite | None) -> tuple | None:
    """(the Access, ``w``) of :func:`write_ofm`'s store through ``w`` as kept box views, (None,
    ``w``) for a chained OFM, or None where it is neither (storage none, not boxes, not a
    plain injective view)."""
    if w is None or (w.tensor.storage != 2 and w.boxes is None):
        return None
    if w.tensor.storage == 2:
        return None, w
    t = w.tensor
    acc = mem.box_access(t.region, w.boxes, t.size, f"<u{t.size}", WR_OFM, True)
    return (acc, w) if acc is not None else None


def _kept_accesses(mem: MemoryPort, s: SetState, cfg: NpuConfig, reads: list, shape: tuple,
                   all_perms: bool) -> tuple[tuple, tuple] | None:
    """(per read (tensor, shape, channel) or None: its :func:`_kept_read_access` or None, the
    :func:`_kept_write_access` of the OFM of ``shape``), or None where one of them is not a
    kept view."""
    kept = tuple(None if r is None else _kept_read_access(mem, *r) for r in reads)
    ofm = _kept_write_access(mem, ofm_write_layout(s, cfg, shape, all_perms))
    if ofm is None or any((k is None) != (r is None) for k, r in zip(kept, reads)):
        return None
    return kept, ofm


class _ValuesRun(NamedTuple):
    """An operation whose OFM is a function of its tensor reads alone (ELEMENTWISE but DIV,
    POOL without accumulators or scale stream): its reads and write kept as a convolution's
    (:class:`_ConvRun`), and that function."""
    reads: tuple             # per input: _kept_read_access, or None
    ofm: tuple               # _kept_write_access
    values: object           # values(*raw inputs, LUT) -> OFM values


def _run_values(r: _ValuesRun, mem: MemoryPort, account: bool = True) -> bool:
    """The operation through its kept reads, function and write; its asserts depend on the
    commands only, so they passed when it was kept."""
    raws = [None if a is None else _kept_read(mem, a, account) for a in r.reads]
    if account:
        _traced(mem, functools.partial(_run_values, r, account=False))
    _kept_write(mem, r.ofm, r.values(*raws, mem.lut), account)
    return True


def _kept_read(mem: MemoryPort, r: tuple, account: bool = True) -> np.ndarray:
    """:func:`read_raw` through a kept read access (accounted unless a replay, which accounts
    the whole block at once: EthosU85.run_block)."""
    if r[0] is None:
        return mem.npu.pop(r[1], math.prod(r[2])).reshape(r[2])
    if account:
        mem.record(r[0])
    return _joined(read_views(r[0]), r[1], r[2])


def _kept_write(mem: MemoryPort, o: tuple, value: np.ndarray, account: bool = True) -> None:
    """:func:`write_ofm` through a kept write access."""
    _result_flag(mem, value)
    if o[0] is None:
        mem.npu.push(o[1].tensor.region, value)
        return
    store_views(o[0], _ofm_parts(o[1], value))
    if account:
        mem.record(o[0])


#: what an operation hands the block recorder when it has just kept a run (the recording
#: would replay it through the general path: the next run records the kept run)
KEPT_NOW = "kept now"


def _traced(mem: MemoryPort, step) -> None:
    """Hand a kept run's data part (``step(mem)``: False, having done nothing, when it no
    longer applies), or KEPT_NOW, to the device's block recorder while it records."""
    trace = getattr(mem, "trace", None)
    if trace is not None:
        trace.append(step)


def kept_run(mem: MemoryPort, d) -> tuple[tuple | None, tuple | None]:
    """(key, kept run or None) of the operation decoded as ``d`` under the regions' present
    placement; (None, None) where the port keeps no runs."""
    runs = getattr(mem, "kept_runs", None)
    if runs is None:
        return None, None
    key = (id(d), mem.placement())
    hit = runs.get(key)
    return key, None if hit is None else hit[1]


def keep_run(mem: MemoryPort, key: tuple, d, run) -> None:
    """Keep ``run`` of the operation decoded as ``d`` (the entry holds ``d``, so its id stays
    its own) under ``key``; the table is cleared whole past 4096 entries."""
    runs = mem.kept_runs
    if len(runs) >= 4096:
        runs.clear()
    runs[key] = (d, run)
    _traced(mem, KEPT_NOW)


def _kept_conv(d: _ConvDecode, s: SetState, cfg: NpuConfig, mem: MemoryPort,
               kernel: tuple) -> _ConvRun | None:
    """The :class:`_ConvRun` of an operation that has just read its streams and chosen the
    integer kernel kept under ``kernel`` (no accumulator input, not matmul), or None where one
    of its accesses is not a kept view (:func:`_kept_read_access`,
    :func:`_kept_write_access`), with accumulator output, or with an empty stream."""
    if d.kcfg[P.C_ACC_OUTPUT]:
        return None
    acc = _kept_accesses(mem, s, cfg, [(d.ifm, d.ifm_shape, RD_IFM)], d.ofm, True)
    reads = [] if d.scales is None else [(d.scales[0], d.scales[1], d.scales[2], RD_SCALE_BIAS)]
    reads += [(d.weights[0], base, length, RD_WEIGHTS) for base, length in d.weights[1]]
    if acc is None or any(length <= 0 for _, _, length, _ in reads):
        return None
    streams = tuple((a, a.views[0].tobytes())
                    for a in (mem.stream_access(*r) for r in reads))
    return _ConvRun(acc[0][0], streams, kernel, acc[1])


def _run_kept_conv(d: _ConvDecode, r: _ConvRun, mem: MemoryPort, account: bool = True) -> bool:
    """The operation through its kept run, as the general path does it (reads, kernel, OFM
    write, each access accounted in the same order unless ``account`` is False); False,
    having done nothing, when a stream no longer holds the bytes the run was worked out from
    or the kernel has gone with its weights."""
    k = d.kernels.get(r.kernel)
    if k is None:
        return False
    for a, held in r.streams:
        if a.views[0].tobytes() != held:
            return False
    raw = _kept_read(mem, r.ifm, account)
    if account:
        for a, _ in r.streams:
            mem.record(a)
        _traced(mem, functools.partial(_run_kept_conv, d, r, account=False))
    _kept_write(mem, r.ofm, conv_k.run_int_conv(k[1], raw, None, mem.lut), account)
    return True


def _int_conv(d: _ConvDecode, raw: np.ndarray, zp: int, w: np.ndarray, bias, scales, shifts,
              depthwise: bool) -> tuple[conv_k.IntConv | None, tuple | None]:
    """(conv_k.plan_int_conv of the operation, its key in ``d.kernels``): kept in its decode
    for read-only (decoded) weights and scale arrays and the input's type (the key None
    otherwise); None where the integer kernels do not take it as it is. The entry holds the
    scale arrays (so their ids stay theirs) but not the weights: it goes when they are freed
    (the weight memo's bound then bounds this too)."""
    scale_arrays = (bias, scales, shifts)
    keep = not w.flags.writeable and all(a is None or not a.flags.writeable
                                         for a in scale_arrays)
    key = (id(w), *map(id, scale_arrays), raw.dtype.str)
    hit = d.kernels.get(key) if keep else None
    if hit is None:
        k = None if d.upscale else conv_k.plan_int_conv(
            raw, w, d.ofm[:2], d.stride, d.dilation, d.pad, zp, d.ifm.bits, d.ifm.signed,
            d.kcfg, bias, scales, shifts, depthwise, d.dilated)
        hit = (scale_arrays, k)
        if keep:
            if len(d.kernels) >= 8:  # weights rewritten between runs: a few at a time
                d.kernels.clear()
            d.kernels[key] = hit
            weakref.finalize(w, d.kernels.pop, key, None)
    return hit[1], key if keep else None


def matmul_ifm2_shape(d: _ConvDecode) -> tuple[int, int, int]:
    """The [H, W, C] extent of IFM2 that a weights_ifm2 NPU_OP_CONV reads: [1, OFM depth, IFM
    depth], the second matrix transposed (x = output column, c = reduction index; TRM L12794,
    and the layout Vela 5.2 programs: see emu/conv/ethosu85.py ``matmul``)."""
    return (1, d.ofm[2], d.ifm_shape[2])


def _conv_decode(s: SetState, cfg: NpuConfig, depthwise: bool, matmul: bool) -> _ConvDecode:
    """The prologue of NPU_OP_CONV (L8147-8228) / NPU_OP_DEPTHWISE (L8256-8315): extents and
    asserts from the commands alone."""
    H, W, D = ofm_shape(s)
    sy, sx, dy, dx, order, decomp = kernel_stride(s)
    dh = s.get("KERNEL_HEIGHT_M1", "height_m1") + 1
    dw = s.get("KERNEL_WIDTH_M1", "width_m1") + 1
    pt, pl, pb, pr = pads(s)
    ifm_depth = D if depthwise else s.get("IFM_DEPTH_M1", "depth_m1") + 1
    ain = s.get("ACC_FORMAT", "acc_input")
    acc48 = s.get("ACC_FORMAT", "acc_format") == 1
    ih = (H - 1) * sy + dh - (pt + pb)
    iw = (W - 1) * sx + dw - (pl + pr)
    line = "L8283-8292" if depthwise else "L8172-8189"
    require(ih >= 1 and iw >= 1, "ifm_height >= 1 && ifm_width >= 1", line)
    require(dh * dw <= 64 * 64 and (dh <= 64 or dw <= 64),
            "dilated_height*dilated_width <= 64*64 && "
            "(dilated_height <= 64 || dilated_width <= 64)",
            line)
    ifm = tensor(s, "IFM")
    require(ifm.bits == 8 or (ifm.bits == 16 and ifm.signed),
            "IFM precision == b8 || (b16 && signed)", line)
    if depthwise:
        require(s.get("WEIGHT_FORMAT", "weight_sparsity") == 0, "weight_sparsity == none",
                "L8292")
    up = _upscale(s, ifm, sy, sx)
    kh_u, kw_u = (dh + dy - 1) // dy, (dw + dx - 1) // dx
    kcfg = out_config(s, accumulator_path=True)
    require(ain in (0, 1, 2), "ACC_FORMAT.acc_input is not reserved", "L9217")
    scales = None
    if not kcfg[P.C_ACC_OUTPUT] and kcfg[P.C_SCALE_MODE] == 0:
        scales = scale_read(s, cfg, D, acc48)
    ifm2 = wts = None
    if matmul:
        require(dh == 1 and dw == 1 and H == 1 and pl == 0 and pt == 0,
                "dilated 1x1 && ofm_height == 1 && pad_x == 0 && pad_y == 0 (weights_ifm2)",
                "L8181")
        require(dy == 1 and dx == 1 and sy == 1 and sx == 1, "dilation 1x1 && stride 1x1",
                "L8182")
        ifm2 = tensor(s, "IFM2")
        require(ifm2.bits == ifm.bits and ifm2.signed == ifm.signed,
                "IFM precision == IFM2 precision", "L8183")
        require(ain != 2, "acc_input != ifm2 (weights_ifm2)", "L8184")
        require(s.get("WEIGHT_FORMAT", "weight_sparsity", 0) == 0, "weight_sparsity == none",
                "L8185")
        require(order == 0, "weight_order == depth_first (weights_ifm2)", "L8186")
    else:
        wts = weight_read(s, cfg, depth=D, ifm_depth=ifm_depth, dilated=(dh, dw),
                          dilation=(dy, dx), stride=(sy, sx), order=order,
                          decomposition=decomp, depthwise=depthwise, ifm16=ifm.bits == 16)
    n = H * W * D
    macs = n * kh_u * kw_u * (1 if depthwise else ifm_depth)
    rate = cfg.depthwise_macs(ifm.bits) if depthwise else cfg.macs
    result = OpResult(macs=macs, elements=n, mac_cycles=-(-macs // rate),
                      ao_cycles=ao_cycles(cfg, n, _ofm_bits(s), 64 if acc48 else 32, False,
                                          False))
    return _ConvDecode(matmul, (H, W, D), (sy, sx), (dy, dx), (dh, dw), (pt, pl, pb, pr), ifm,
                       (*_ifm_extent(up, ih, iw), ifm_depth), ifm2,
                       s.get("IFM_ZERO_POINT", "zero_point"), up, kcfg, acc48, scales, wts,
                       result, {})


def conv(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    return _conv_like(cmd, s, mem, cfg, depthwise=False)


def depthwise(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    return _conv_like(cmd, s, mem, cfg, depthwise=True)


# ------------------------------------------------------------------------------------------------
# NPU_OP_POOL (L8815-8993)


class _PoolDecode(NamedTuple):
    """What the commands decide about an NPU_OP_POOL (:func:`_pool_decode`)."""
    mode: int
    ofm: tuple               # H, W, D
    kernel: tuple            # kh, kw
    stride: tuple
    pad: tuple               # top, left, bottom, right
    ifm: Tensor | None       # None: pooling mode none
    ifm_shape: tuple | None  # the stored extent read
    zp: int
    upscale: int
    kcfg: np.ndarray
    acc48: bool
    acc_in: int              # ACC_FORMAT.acc_input
    scaled: bool             # per-channel scales from the scale stream
    result: OpResult
    error: str | None        # an assert after the chain bookkeeping (raised there)


def pool(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    """The operation: its decode (memoised on the commands, as NPU_OP_CONV's), then the reads,
    the kernel and the OFM write; its run kept as a convolution's (:class:`_ConvRun`) when it
    reads no accumulators and no scale stream and writes an OFM."""
    d = memo_on_state("pool", cmd, s, cfg, lambda: _pool_decode(cmd, s, cfg))
    mem.npu.add_operation_to_chain(s, d.mode != pool_k.POOL_NONE, d.acc_in == 2, False)
    if d.error is not None:
        raise Unpredictable(d.error)
    key, kept = kept_run(mem, d)
    if kept is not None:
        _run_values(kept, mem)
        return d.result
    acc_in = acc_input(s, mem, d.ofm, d.acc48)
    raw = None if d.ifm is None else read_raw(mem, d.ifm, d.ifm_shape, RD_IFM)
    bias = scales = shifts = None
    if d.scaled:
        bias, scales, shifts = scale_stream(s, mem, cfg, d.ofm[2], d.acc48)
    _finish(mem, s, cfg, _pool_values(d, raw, mem.lut, acc_in, bias, scales, shifts), d.kcfg,
            True)
    if key is not None and raw is not None and acc_in is None and not d.scaled \
            and not d.kcfg[P.C_ACC_OUTPUT]:
        acc = _kept_accesses(mem, s, cfg, [(d.ifm, d.ifm_shape, RD_IFM)], d.ofm, True)
        if acc is not None:
            keep_run(mem, key, d, _ValuesRun(*acc, functools.partial(_pool_values, d)))
    return d.result


def _pool_values(d: _PoolDecode, raw, lut, acc_in=None, bias=None, scales=None,
                 shifts=None) -> np.ndarray:
    """The pooling kernel on the operation's reads (both paths)."""
    diag: list[str] = []
    H, W, D = d.ofm
    out = pool_k.pool2d(raw, d.mode, d.kernel, (H, W), stride=d.stride, pad=d.pad, ifm_zp=d.zp,
                        ifm_bits=d.ifm.bits if d.ifm else 8,
                        ifm_signed=d.ifm.signed if d.ifm else True, upscale_mode=d.upscale,
                        cfg=d.kcfg, bias=bias, scales=scales, shifts=shifts, lut=lut,
                        acc_in=acc_in, depth=D, diag=diag)
    _check_diag(diag, "NPU_OP_POOL")
    return out


def _pool_decode(cmd: Command, s: SetState, cfg: NpuConfig) -> _PoolDecode:
    """The prologue of NPU_OP_POOL (L8815-8993) from the commands alone: the dilation assert
    raises (before the chain bookkeeping, as in the pseudocode), the later ones are kept as
    the decode's error."""
    mode = cmd.fields["pooling_mode"]
    ofm = ofm_shape(s)
    kernel = (s.get("KERNEL_HEIGHT_M1", "height_m1") + 1, s.get("KERNEL_WIDTH_M1", "width_m1") + 1)
    sy, sx, dy, dx, order, decomp = kernel_stride(s)
    pad = pads(s)
    acc = (s.get("ACC_FORMAT", "acc_input"), s.get("ACC_FORMAT", "acc_format") == 1)
    require(dy == 1 and dx == 1, "dilation_y == 1 && dilation_x == 1", "L8830")
    try:
        return _pool_prologue(s, cfg, mode, ofm, kernel, (sy, sx, order, decomp), pad, acc)
    except Unpredictable as e:
        return _PoolDecode(mode, (), (), (), (), None, None, 0, 0, None, False, acc[0], False,
                           OpResult(), str(e))


def _pool_prologue(s: SetState, cfg: NpuConfig, mode: int, ofm: tuple, kernel: tuple,
                   stride: tuple, pad: tuple, acc: tuple) -> _PoolDecode:
    (H, W, D), (kh, kw), (sy, sx, order, decomp), (pt, pl, pb, pr) = ofm, kernel, stride, pad
    ain, acc48 = acc
    ih = (H - 1) * sy + kh - (pt + pb)
    iw = (W - 1) * sx + kw - (pl + pr)
    use_ifm = mode != pool_k.POOL_NONE
    if mode == pool_k.POOL_NONE:
        require(s.get("OFM_PRECISION", "activation_storage") != 2, "OFM storage != chained "
                "(pooling none)", "L8842-8845")
    require(ih >= 1 and iw >= 1, "ifm_height >= 1 && ifm_width >= 1", "L8850")
    ifm = tensor(s, "IFM") if use_ifm else None
    up = 0
    if use_ifm:
        require(ifm.bits == 8 or (ifm.signed and ifm.bits in (16, 32)),
                "IFM precision == b8 || (b16 && signed) || (b32 && signed)", "L8852")
        up = _upscale(s, ifm, sy, sx)
    b32 = ifm is not None and ifm.bits == 32
    if mode in (pool_k.POOL_MAX, pool_k.POOL_MIN):
        require(kh * kw <= 65536 and (kh <= 256 or kw <= 256),
                "kh*kw <= 65536 && (kh <= 256 || kw <= 256)", "L8858")
        require(up != 2, "upscale != zeros", "L8859")
    elif mode == pool_k.POOL_AVERAGE:
        require(kh <= 8 and kw <= 8, "kh <= 8 && kw <= 8", "L8863")
        require(max(pt, pb) < kh and max(pl, pr) < kw, "pads < kernel", "L8865")
        require(decomp == 0, "decomposition == d8x8", "L8866")
        require(not b32, "IFM precision != b32", "L8867")
    elif mode == pool_k.POOL_REDUCE_SUM:
        require(kh == 1 and kw == 1 and sy == 1 and sx == 1 and up == 0 and order == 0
                and s.get("IFM_ZERO_POINT", "zero_point") == 0 and D == 1,
                "reduce_sum: 1x1 kernel, stride 1, no upscale, depth_first, IFM zero point 0, "
                "ofm_depth == 1", "L8870-8876")
    elif mode == pool_k.POOL_SUM:
        require(not b32 and kh <= 65536 and kw <= 65536, "!b32 && kh, kw <= 65536", "L8877")
    elif mode in (pool_k.POOL_ARGMAX_X, pool_k.POOL_ARGMAX_Y):
        xm = mode == pool_k.POOL_ARGMAX_X
        require(not b32 and decomp == 0 and sy == 1 and sx == 1 and up == 0
                and (kh == 1 and W == 1 if xm else kw == 1 and H == 1),
                f"argmax_{'x' if xm else 'y'}: !b32, d8x8, stride 1x1, no upscale, "
                f"{'kh == 1 && W == 1' if xm else 'kw == 1 && H == 1'}", "L8878-8879")
    require(mode in (pool_k.POOL_SUM, pool_k.POOL_REDUCE_SUM, pool_k.POOL_NONE) or not acc48,
            "pooling_mode in {sum, reduce_sum, none} || acc_format == i32", "L8880")
    kcfg = out_config(s, accumulator_path=True)
    shape = None
    if use_ifm:
        shape = (H, W, s.get("IFM_DEPTH_M1", "depth_m1") + 1) if mode == pool_k.POOL_REDUCE_SUM \
            else _ifm_extent(up, ih, iw) + (D,)
    n = H * W * D
    if mode == pool_k.POOL_REDUCE_SUM:
        macs = H * W * shape[2]
    elif mode == pool_k.POOL_NONE:
        macs = 0
    else:
        macs = n * kh * kw
    result = OpResult(macs=macs, elements=n,
                      mac_cycles=-(-macs // cfg.depthwise_macs(ifm.bits if ifm else 8)),
                      ao_cycles=ao_cycles(cfg, n, _ofm_bits(s), 64 if acc48 else 32, False,
                                          False))
    return _PoolDecode(mode, ofm, kernel, (sy, sx), pad, ifm, shape,
                       s.get("IFM_ZERO_POINT", "zero_point") if use_ifm else 0, up, kcfg,
                       acc48, ain,
                       not kcfg[P.C_ACC_OUTPUT] and kcfg[P.C_SCALE_MODE] == 0, result, None)


# ------------------------------------------------------------------------------------------------
# NPU_OP_ELEMENTWISE (L8493-8648)


def _operand_shape(bm: int, shape: tuple[int, int, int]) -> tuple[int, int, int]:
    H, W, D = shape
    return (1 if bm & 1 else H, 1 if bm & 2 else W, 1 if bm & 4 else D)


def _in_scale(s: SetState, which: str, needed: bool) -> tuple[int, int, int, int]:
    if not needed:
        return (1, 0, 1, 0)
    return (s.get(f"{which}_SCALE", "scale"), s.get(f"{which}_SCALE", "shift"),
            s.get(f"{which}_SCALE", "round_mode"), s.get(f"{which}_SCALE", "dbl_rnd"))


class _EltwiseDecode(NamedTuple):
    """What the commands decide about an NPU_OP_ELEMENTWISE (:func:`_eltwise_decode`)."""
    mode: int
    chain: tuple             # add_operation_to_chain's use_ifm, use_ifm2
    shape: tuple             # OFM H, W, D
    reads: tuple             # per input: (tensor, shape read) or None (unary or scalar)
    kwargs: dict             # eltwise_k.elementwise's keywords but lut and diag
    result: OpResult
    error: str | None = None  # an assert that fails after the chain bookkeeping


def elementwise(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    """The operation: its decode (memoised on the commands, as NPU_OP_CONV's), then the reads,
    the kernel and the OFM write. The asserts fail in the pseudocode's order around the chain
    bookkeeping; the later ones all before anything is read (the device stops before the
    operation's reads, where the pseudocode may have read an operand first)."""
    d = memo_on_state("eltwise", cmd, s, cfg, lambda: _eltwise_decode(cmd, s, cfg))
    mem.npu.add_operation_to_chain(s, *d.chain, True)
    if d.error is not None:
        raise Unpredictable(d.error)
    key, kept = kept_run(mem, d)
    if kept is not None:
        _run_values(kept, mem)
        return d.result
    raws = [None if r is None else read_raw(mem, r[0], r[1], RD_IFM_STREAM) for r in d.reads]
    diag: list[str] = []
    out = eltwise_k.elementwise(d.mode, raws[0], raws[1], d.shape, lut=mem.lut, diag=diag,
                                **d.kwargs)
    _check_diag(diag, "NPU_OP_ELEMENTWISE")
    write_ofm(mem, s, cfg, out, all_perms=False)
    # kept unless DIV, whose asserts depend on the data (every other one on the commands)
    if key is not None and d.mode != eltwise_k.EW_DIV:
        acc = _kept_accesses(mem, s, cfg, [None if r is None else (*r, RD_IFM_STREAM)
                                           for r in d.reads], out.shape, False)
        if acc is not None:
            plan = eltwise_k.plan_elementwise(d.mode, raws[0], raws[1], d.shape, **d.kwargs)
            keep_run(mem, key, d,
                     _ValuesRun(*acc, functools.partial(eltwise_k.run_elementwise, plan)))
    return d.result


def _eltwise_decode(cmd: Command, s: SetState, cfg: NpuConfig) -> _EltwiseDecode:
    """The prologue of NPU_OP_ELEMENTWISE (L8490-8698): operands, scales and asserts from the
    commands alone."""
    mode = cmd.fields["elementwise_mode"]
    require(mode in eltwise_k.EW_MODES, f"elementwise_mode {mode} is not reserved", "L8670-8698")
    unary = mode in eltwise_k.EW_UNARY
    ifm = tensor(s, "IFM")
    bm1 = s.get("IFM_BROADCAST", "broadcast_mode")
    bm2 = 0 if unary else s.get("IFM2_BROADCAST", "broadcast_mode")
    ifm2 = None if unary else tensor(s, "IFM2")
    if ifm2 is not None:  # digest G-R12: only checked when IFM2 is used
        require(ifm.bits == ifm2.bits and ifm.signed == ifm2.signed,
                "IFM precision == IFM2 precision", "L8497")
    chain = (bm1 != eltwise_k.BC_SCALAR, not (unary or bm2 == eltwise_k.BC_SCALAR))
    try:
        return _eltwise_operands(s, cfg, mode, unary, ifm, ifm2, bm1, bm2, chain)
    except Unpredictable as e:  # raised after add_operation_to_chain, as the pseudocode does
        return _EltwiseDecode(mode, chain, (), (), {}, OpResult(), str(e))


def _eltwise_operands(s: SetState, cfg: NpuConfig, mode: int, unary: bool, ifm: Tensor,
                      ifm2: Tensor | None, bm1: int, bm2: int, chain: tuple) -> _EltwiseDecode:
    """The rest of :func:`_eltwise_decode`: the asserts after the chain bookkeeping."""
    require(ifm.bits in (8, 16) or (ifm.bits == 32 and ifm.signed),
            "IFM precision == b8 || b16 || (b32 && signed)", "L8509")
    require(s.get("OFM_PRECISION", "activation_reverse") == 0, "OFM reverse == none", "L8512")
    require(s.get("IFM_UPSCALE", "mode") == 0, "IFM_UPSCALE.mode == none", "L8514")
    kcfg = out_config(s, accumulator_path=False)
    require(s.get("OFM_PRECISION", "scale_mode") == 1,
            "mode == normal in rescale: elementwise needs OFM scale_mode global", "L6968, G-R9")
    shape = ofm_shape(s)
    scalar = 0
    reads = []
    for which, t, bm in (("IFM", ifm, bm1), ("IFM2", ifm2, bm2)):
        if t is None:
            reads.append(None)
        elif bm == eltwise_k.BC_SCALAR:
            require(t.storage == 3, f"{which} storage == none for a scalar operand", "L9645")
            scalar = s.get("OP_SCALAR", "scalar")
            reads.append(None)
        else:
            require(bm <= 7, f"{which} broadcast_mode {bm} is not reserved", "L9538")
            if t.storage == 2:
                require(bm == 0, "no broadcast from a chaining FIFO", "L6429-6434")
            reads.append((t, _operand_shape(bm, shape)))
    if bm1 == eltwise_k.BC_SCALAR and bm2 == eltwise_k.BC_SCALAR:
        require(False, "IFM_BROADCAST != scalar when IFM2 is scalar", "L8535")
    # scale_a / scale_b read IFM_SCALE / IFM2_SCALE for b8 and signed b16 inputs (L7008-7048);
    # div asserts on both (L8606-8619); mul never scales; lrelu scales a with IFM2_SCALE too
    scaled = (ifm.bits == 8 or (ifm.bits == 16 and ifm.signed)) and mode != eltwise_k.EW_MUL
    sc1 = _in_scale(s, "IFM", scaled or mode == eltwise_k.EW_DIV)
    sc2 = _in_scale(s, "IFM2", (scaled and (not unary or mode == eltwise_k.EW_LRELU))
                    or mode == eltwise_k.EW_DIV)
    for sc, which in ((sc1, "IFM"), (sc2, "IFM2")):
        require(sc[2] in (0, 1), f"{which}_SCALE.round_mode is not reserved", "L11814")
        require(0 <= sc[3] <= 30, "0 <= dbl_rnd && dbl_rnd <= 30", "L6912")
    kwargs = dict(ifm_zp=s.get("IFM_ZERO_POINT", "zero_point", 0 if bm1 == 8 else None),
                  ifm2_zp=0 if unary else s.get("IFM2_ZERO_POINT", "zero_point",
                                                0 if bm2 == 8 else None),
                  ifm_bits=ifm.bits, ifm_signed=ifm.signed,
                  ifm2_bits=ifm2.bits if ifm2 else ifm.bits,
                  ifm2_signed=ifm2.signed if ifm2 else ifm.signed, ifm_scale=sc1,
                  ifm2_scale=sc2, broadcast=bm1, broadcast2=bm2, scalar=scalar, cfg=kcfg)
    n = math.prod(shape)
    result = OpResult(macs=0, elements=n, mac_cycles=0,
                      ao_cycles=ao_cycles(cfg, n, _ofm_bits(s), ifm.bits, not unary, True))
    return _EltwiseDecode(mode, chain, shape, tuple(reads), kwargs, result)


# ------------------------------------------------------------------------------------------------
# NPU_OP_RESIZE (L9029-9126)


def resize(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    mode = cmd.fields["resize_mode"]
    require(mode in (0, 1, 2), f"resize_mode {mode} is not reserved", "L9140")
    H, W, D = ofm_shape(s)
    ihm1 = s.get("KERNEL_HEIGHT_M1", "height_m1")
    iwm1 = s.get("KERNEL_WIDTH_M1", "width_m1")
    ny = s.get("RESIZE_Y_SCALE_N_M1", "resize_y_scale_n_m1") + 1
    nx = s.get("RESIZE_X_SCALE_N_M1", "resize_x_scale_n_m1") + 1
    yo = s.get("RESIZE_Y_OFFSET", "resize_y_offset")
    xo = s.get("RESIZE_X_OFFSET", "resize_x_offset")
    ysi, ysm = s.get("RESIZE_Y_STEP", "one_step_int"), s.get("RESIZE_Y_STEP", "one_step_mod")
    xsi, xsm = s.get("RESIZE_X_STEP", "one_step_int"), s.get("RESIZE_X_STEP", "one_step_mod")
    require(-ny <= yo < ny and -nx <= xo < nx, "-scale_n <= offset < scale_n", "L9044-9045")
    require(ysm < ny and xsm < nx, "step_mod < scale_n", "L9046-9047")
    require(mem.npu.chain_length == 0, "g_chain_length == 0", "L9053")
    require(s.get("OFM_PRECISION", "activation_storage") != 2, "OFM storage != chained", "L9054")
    require(s.get("OFM_PRECISION", "activation_transpose") == 0, "OFM transpose == HWC", "L9055")
    require(s.get("IFM_UPSCALE", "mode") == 0, "IFM_UPSCALE.mode == none", "L9056")
    require(s.get("IFM_ZERO_POINT", "zero_point") == 0, "IFM_ZERO_POINT == 0", "L9057")
    require(s.get("IFM2_ZERO_POINT", "zero_point", 0) == 0, "IFM2_ZERO_POINT == 0", "L9058")
    ifm = tensor(s, "IFM")
    require(ifm.storage != 2, "IFM storage != chained", "L9053")
    require(ifm.bits == 8 or (ifm.bits == 16 and ifm.signed), "IFM b8 || (b16 && signed)",
            "L9062-9069")
    kcfg = out_config(s, accumulator_path=False)
    require(s.get("OFM_PRECISION", "scale_mode") == 1,
            "mode == normal in rescale: resize needs OFM scale_mode global", "L6968, G-R9")
    require(int(kcfg[P.C_SHIFT]) >= 16, "OFM_SCALE.shift >= 16", "L9103")
    raw = read_raw(mem, ifm, (ihm1 + 1, iwm1 + 1, D), RD_IFM)
    diag: list[str] = []
    out = resize_k.resize(raw, mode, (H, W), scale_n=(ny, nx), offset=(yo, xo),
                   step=((ysi, ysm), (xsi, xsm)), ifm_hw_m1=(ihm1, iwm1), ifm_zp=0,
                   ifm_bits=ifm.bits, ifm_signed=ifm.signed, cfg=kcfg, lut=mem.lut, diag=diag)
    _check_diag(diag, "NPU_OP_RESIZE")
    write_ofm(mem, s, cfg, out, all_perms=True)
    n = H * W * D
    return OpResult(macs=0, elements=n, mac_cycles=0,
                    ao_cycles=ao_cycles(cfg, n, _ofm_bits(s), 32, False, False))


OPERATIONS = {"NPU_OP_CONV": conv, "NPU_OP_DEPTHWISE": depthwise, "NPU_OP_POOL": pool,
              "NPU_OP_ELEMENTWISE": elementwise, "NPU_OP_RESIZE": resize}
_UNARY = set(eltwise_k.EW_UNARY)


def run_operation(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    """Execute kernel command ``cmd`` (one of :data:`OPERATIONS`). A NotImplementedYet leaves
    the internal state (chain, FIFOs, accumulators) as it was."""
    saved = mem.npu.copy()
    try:
        return OPERATIONS[cmd.name](cmd, s, mem, cfg)
    except NotImplementedYet:
        mem.npu = saved
        raise


# ------------------------------------------------------------------------------------------------
# one-line summaries for the program listing (no memory access)


def _shape(h: int, w: int, c: int) -> str:
    return f"{h}x{w}x{c}"


def summarize(cmd: Command, s: SetState) -> str:
    """``op, IFM/OFM shapes, kernel, activation`` from the state an operation would use; never
    raises (missing state shows as '?')."""
    def g(name, fld, default=None):
        try:
            return s.get(name, fld, default)
        except DeviceError:
            return None

    def ttype(which):
        p, t = g(f"{which}_PRECISION", "activation_precision"), g(f"{which}_PRECISION",
                                                                   "activation_type")
        return "?" if p is None else f"{'s' if t else 'u'}{PRECISION_BITS[p]}"

    op = cmd.name[len("NPU_OP_"):]
    text = f"{op} {cmd.field_text()}".rstrip()
    matmul = is_matmul(cmd)
    if matmul:
        text += f" ({MATMUL_LAYOUT})"
    if cmd.name not in OPERATIONS:
        return text
    H, W, D = (g("OFM_HEIGHT_M1", "height_m1"), g("OFM_WIDTH_M1", "width_m1"),
               g("OFM_DEPTH_M1", "depth_m1"))
    ofm = "?" if None in (H, W, D) else _shape(H + 1, W + 1, D + 1)
    kh, kw = g("KERNEL_HEIGHT_M1", "height_m1"), g("KERNEL_WIDTH_M1", "width_m1")
    ks = s.cmds.get("NPU_SET_KERNEL_STRIDE")
    sy = sx = 1
    if ks is not None:
        sy = 2 * ks.fields["stride_y_msb"] + ks.fields["stride_y_lsb"] + 1
        sx = 2 * ks.fields["stride_x_msb"] + ks.fields["stride_x_lsb"] + 1
    pads = [g(f"IFM_PAD_{p}", "pad", 0) for p in ("TOP", "BOTTOM", "LEFT", "RIGHT")]
    parts = [text]
    if cmd.name == "NPU_OP_ELEMENTWISE":
        ifm = ofm
        if None not in (H, W, D):
            bm = g("IFM_BROADCAST", "broadcast_mode", 0)
            ifm = "scalar" if bm == 8 else _shape(1 if bm & 1 else H + 1, 1 if bm & 2 else W + 1,
                                                  1 if bm & 4 else D + 1)
        parts.append(f"ifm {ifm} {ttype('IFM')}")
        if cmd.fields["elementwise_mode"] not in _UNARY:
            bm2 = g("IFM2_BROADCAST", "broadcast_mode", 0)
            ifm2 = "scalar" if bm2 == 8 else ("?" if None in (H, W, D) else _shape(
                1 if bm2 & 1 else H + 1, 1 if bm2 & 2 else W + 1, 1 if bm2 & 4 else D + 1))
            parts.append(f"ifm2 {ifm2} {ttype('IFM2')}")
    elif cmd.name == "NPU_OP_RESIZE":
        ih = "?" if kh is None or kw is None else _shape(kh + 1, kw + 1, (D or 0) + 1)
        parts.append(f"ifm {ih} {ttype('IFM')}")
    else:
        ifm = "?"
        if None not in (H, W, D, kh, kw):
            ih = H * sy + kh + 1 - pads[0] - pads[1]  # (OH-1)*sy + KH - pad (L8168), *_M1 here
            iw = W * sx + kw + 1 - pads[2] - pads[3]
            idepth = g("IFM_DEPTH_M1", "depth_m1") if cmd.name == "NPU_OP_CONV" else D
            ifm = _shape(ih, iw, (idepth if idepth is not None else -1) + 1)
        parts.append(f"ifm {ifm} {ttype('IFM')}")
        if matmul:  # IFM2 as matmul_ifm2_shape: [1, OFM depth, IFM depth]
            idepth = g("IFM_DEPTH_M1", "depth_m1")
            ifm2 = "?" if None in (D, idepth) else _shape(1, D + 1, idepth + 1)
            parts.append(f"ifm2 {ifm2} {ttype('IFM2')}")
    parts.append(f"-> ofm {ofm} {ttype('OFM')}")
    if cmd.name != "NPU_OP_ELEMENTWISE":
        k = "?" if kh is None or kw is None else f"{kh + 1}x{kw + 1}"
        parts.append(f"kernel {k} stride {sy}x{sx}")
        if any(pads):
            parts.append("pad t{} b{} l{} r{}".format(*pads))
    fn = g("ACTIVATION", "activation_function")
    lo, hi = g("ACTIVATION_MIN", "clip_boundary"), g("ACTIVATION_MAX", "clip_boundary")
    if fn is not None:
        from .stream import E_ACT_FUNCTION

        act = E_ACT_FUNCTION.get(fn, str(fn))
        if lo is not None and hi is not None and g("ACTIVATION", "activation_clip_range") == 0:
            signed = g("OFM_PRECISION", "activation_type")
            lo, hi = (sign_extend(lo, 16), sign_extend(hi, 16)) if signed else (lo, hi)
            act += f" clip [{lo},{hi}]"
        parts.append(f"act {act}")
    return ", ".join(parts)


# ------------------------------------------------------------------------------------------------
# the operands an operation reads and writes in memory (unit tensors; no memory access)


def operand_offsets(cmd: Command, s: SetState,
                    cfg: NpuConfig) -> list[tuple[str, Tensor, np.ndarray]]:
    """("input" / "input2" / "output", the tensor, its region-relative byte offsets as a logical
    [H, W, C] array) of every operand of kernel command ``cmd`` that lies in memory, from the
    same decodes the operation runs (the extents it reads, the OFM write's reverse and
    transpose), so a declared tensor is exactly what the operation touches. Left out: chained
    operands (the chaining FIFO, L6429), storage none (a scalar, L9645), an accumulator output
    (acc_output disable: no OFM write, L6845), and any operand whose decode fails an assert
    (the operation itself would fault). Raises nothing but for a command that is no kernel."""
    reads: list[tuple[str, Tensor | None, tuple | None]] = []
    name = cmd.name
    try:
        if name in ("NPU_OP_CONV", "NPU_OP_DEPTHWISE"):
            dw = name == "NPU_OP_DEPTHWISE"
            mm = not dw and cmd.fields.get("weights_ifm2", 0) == 1
            d = _conv_decode(s, cfg, dw, mm)
            reads = [("input", d.ifm, d.ifm_shape)]
            if mm:  # weights_ifm2: the IFM2 stream as _conv_like reads it
                reads.append(("input2", d.ifm2, matmul_ifm2_shape(d)))
            to_acc = bool(d.kcfg[P.C_ACC_OUTPUT])
        elif name == "NPU_OP_POOL":
            d = _pool_decode(cmd, s, cfg)
            reads = [("input", d.ifm, d.ifm_shape)] if d.error is None else []
            to_acc = d.error is None and bool(d.kcfg[P.C_ACC_OUTPUT])
        elif name == "NPU_OP_ELEMENTWISE":
            d = _eltwise_decode(cmd, s, cfg)
            reads = [(n, *r) for n, r in zip(("input", "input2"), d.reads) if r is not None]
            to_acc = False
        elif name == "NPU_OP_RESIZE":
            reads = [("input", tensor(s, "IFM"), (s.get("KERNEL_HEIGHT_M1", "height_m1") + 1,
                                                   s.get("KERNEL_WIDTH_M1", "width_m1") + 1,
                                                   ofm_shape(s)[2]))]
            to_acc = False
        else:
            raise ValueError(f"{name} is not a kernel operation")
    except DeviceError:
        return []
    out: list[tuple[str, Tensor, np.ndarray]] = []
    for which, t, shape in reads:
        if t is not None and t.storage in (0, 1):
            try:
                out.append((which, t, addresses(t, shape)))
            except DeviceError:
                pass
    if not to_acc:
        try:
            shape = ofm_shape(s)
            w = _ofm_write(s, cfg, shape, name != "NPU_OP_ELEMENTWISE")
            if w is not None and w.tensor.storage in (0, 1):
                stored = addresses(w.tensor, tuple(shape[i] for i in w.perm))
                logical = np.transpose(stored, np.argsort(w.perm))  # stored = value.T(perm)
                out.append(("output", w.tensor, logical[w.flips] if w.flips else logical))
        except DeviceError:
            pass
    return out
