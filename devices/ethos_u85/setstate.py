"""Ethos-U85 operations: the NPU_SET_* state an operation is issued with [U85-TRM: §3.5.5], the
internal state that lives between operations (chaining FIFOs, accumulator storage), the
configuration and result of an operation, the errors an operation raises, and the memo that decodes
an operation once per command state. The part of ops.py that every other part reads; it reads none
of them."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from ...emu.weights import ethosu85 as Wt
from ..errors import DeviceError
from .stream import Command


class NotImplementedYet(DeviceError):
    """The emulator does not model this yet (no hardware state change)."""


class Unpredictable(DeviceError):
    """A pseudocode assert failed: the programming is UNPREDICTABLE [U85-TRM: §3.5.4]."""


class NpuBusFault(DeviceError):
    """An NPU AXI access outside the system memory windows (STATUS.bus_status,
    [U85-TRM: Table 3-5])."""

    def __init__(self, address: int, channel: int, region: int, message: str) -> None:
        self.address, self.channel, self.region = address, channel, region
        super().__init__(message)


def require(cond: bool, text: str, line: str) -> None:
    """The pseudocode's ``assert(cond)``; ``line`` cites the TRM (``[U85-TRM: ...]``)."""
    if not cond:
        raise Unpredictable(f"UNPREDICTABLE: assert({text}) fails {line}")


def not_implemented(what: str) -> NotImplementedYet:
    return NotImplementedYet(f"{what} not implemented yet")


def check_diag(diag: list[str], what: str) -> None:
    """The first assert the kernel found violated (kernels continue; the device stops)."""
    if diag:
        raise Unpredictable(f"UNPREDICTABLE: {what}: {diag[0]}")


# AXI channels (pmu_axi_channel_t, [U85-TRM: Table 3-5]) used for STATUS.faulting_channel and PMU
# events
RD_CMD, RD_IFM, RD_WEIGHTS, RD_SCALE_BIAS, RD_MEM2MEM, RD_IFM_STREAM, RD_MEM2MEM_IDX = range(7)
WR_OFM, WR_MEM2MEM = 8, 9

PRECISION_BITS = (8, 16, 32, 64)  # activation_precision_t b8..b64 [U85-TRM: Table 3-132]


_SET_KEYS: dict[str, str] = {}  # "IFM_BASE0" -> "NPU_SET_IFM_BASE0" (names are few)


#: SET states: the interned (commands, ids) of each, and per (state, kept segment) the state
#: after it (the entries hold both, so their ids stay theirs). Why: rebuilding and hashing the
#: id tuple of ~100 commands after every unit's segment cost ~4 us per operation unit.
_HELD: dict[Any, Any] = {}
_AFTER: dict[Any, Any] = {}
_STATES_MAX = 16384


@dataclass
class SetState:
    """The NPU_SET_* state registers [U85-TRM: §3.5.5]: per mnemonic the last decoded command and
    the stream offset that wrote it. The registers have no reset value (Reset '-', e.g.
    [U85-TRM: §3.10.17]): using one that was never written is UNPREDICTABLE."""

    cmds: dict[str, Command] = field(default_factory=dict)
    _held: tuple[Any, ...] | None = field(default=None, repr=False, compare=False)
    #: (held, segment)
    _from: tuple[Any, ...] | None = field(default=None, repr=False, compare=False)

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

    def held(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
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
                                f"(NPU_SET_* state has no reset value, [U85-TRM: §3.5.5])")
        return c.fields[fld]

    def copy(self) -> SetState:
        return SetState(dict(self.cmds))


@dataclass
class NpuInternal:
    """Internal NPU state that lives between kernel operations: the chaining FIFOs and chain
    bookkeeping [U85-TRM: §3.6.4] and the accumulator storage (read_/write_accumulator_storage,
    [U85-TRM: §3.6.5]). Cleared by a soft reset."""

    fifo: dict[int, list[Any]] = field(default_factory=dict)  # region -> [values array, read index]
    fifo_valid: set[Any] = field(default_factory=set)
    chain_length: int = 0
    num_ifm: int = 0
    acc: np.ndarray | None = None  # [bh, bw, bd] int64, op-relative indices

    def copy(self) -> NpuInternal:
        return NpuInternal({k: [v[0], v[1]] for k, v in self.fifo.items()}, set(self.fifo_valid),
                           self.chain_length, self.num_ifm,
                           None if self.acc is None else self.acc.copy())

    # chaining [U85-TRM: §3.6.4] ----------------------------------------------------------------
    def add_operation_to_chain(self, s: SetState, use_ifm: bool, use_ifm2: bool,
                               append: bool) -> None:
        require(self.chain_length == 0 or append, "g_chain_length == 0 || append",
            "[U85-TRM: §3.6.4]")
        if self.chain_length == 0:
            self.num_ifm = 0
            self.fifo_valid.clear()
        self.chain_length += 1
        require(self.chain_length <= 4, "g_chain_length <= 4", "[U85-TRM: §3.6.4]")
        chained = []
        for use, which in ((use_ifm, "IFM"), (use_ifm2, "IFM2")):
            if not use:
                continue
            if s.get(which + "_PRECISION", "activation_storage") == 2:
                region = s.get(which + "_REGION", "region")
                if region >= 3 or region not in self.fifo_valid:  # messages only on failure
                    require(region < 3, f"{which}_REGION.region < 3", "[U85-TRM: §3.6.4]")
                    require(False, f"g_fifo_valid[{which}_REGION.region]", "[U85-TRM: §3.6.4]")
                chained.append(region)
            else:
                self.num_ifm += 1
        if len(chained) == 2:
            require(chained[0] != chained[1], "IFM_REGION.region != IFM2_REGION.region",
                "[U85-TRM: §3.6.4]")
        require(self.num_ifm <= 3, "g_num_ifm <= 3", "[U85-TRM: §3.6.4]")
        if s.get("OFM_PRECISION", "activation_storage") == 2:
            region = s.get("OFM_REGION", "region")
            require(region < 3, "OFM_REGION.region < 3", "[U85-TRM: §3.6.4]")
            self.fifo_valid.add(region)
        else:
            self.chain_length = 0

    def push(self, region: int, values: np.ndarray) -> None:
        """write_chaining_fifo of every value, in (oy, ox, oc) order [U85-TRM: §3.6.4]."""
        buf = self.fifo.get(region)
        new = values.astype(np.int64).ravel()
        rest = None if buf is None else buf[0][buf[1]:]
        self.fifo[region] = [new if rest is None or not len(rest) else
                             np.concatenate([rest, new]), 0]

    def pop(self, region: int, n: int) -> np.ndarray:
        """read_chaining_fifo n times [U85-TRM: §3.6.4]: assert(head >= tail)."""
        buf = self.fifo.get(region)
        have = 0 if buf is None else len(buf[0]) - buf[1]
        if buf is None or have < n:
            require(False, f"g_fifo_head >= g_fifo_tail (FIFO {region} holds {have} values, "
                    f"{n} read)", "[U85-TRM: §3.6.4]")
        assert buf is not None  # (require raised otherwise)
        out: np.ndarray = buf[0][buf[1]:buf[1] + n]
        buf[1] += n
        return out


@dataclass(frozen=True)
class NpuConfig:
    macs: int = 256  # MACs per cycle: 128 .. 2048

    @property
    def num_su(self) -> int:  # scaling units [U85-TRM: Table 4-12, Table 4-13]
        return {128: 2, 256: 4, 512: 8, 1024: 16, 2048: 32}[self.macs]

    @property
    def num_wd(self) -> int:  # weight decoders [U85-TRM: Table 3-90]
        return Wt.WD_CONFIG[self.macs][0]

    @property
    def ofm_data_w(self) -> int:  # AO_DMA_OFM_IF bits per cycle [U85-TRM: Table 4-13]
        return 256 if self.macs == 2048 else 128

    def depthwise_macs(self, ifm_bits: int) -> int:
        """MACs/cycle of DepthwiseConv2D (the tables of [U85-TRM: §4.1]), used for pooling."""
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


T = TypeVar("T")

_MEMO: dict[Any, Any] = {}  # (kind, ids of the commands read, extra) -> (the commands, result)
#: a few entries per operation of a program must fit (clearing them all on every run of a
#: bigger program would decode every operation afresh each time)
_MEMO_MAX = 16384


def memo_on_commands(kind: str, s: SetState, keys: tuple[str, ...], extra: object,
                     compute: Callable[[], T]) -> T:
    """``compute()``, memoised on the identity of the NPU_SET_* commands ``keys`` it reads and
    ``extra``: decoded commands are shared, frozen objects (the entry holds them, so their ids
    stay theirs), so an operation's decode is the same on every run of a stream. Errors are
    not memoised. Callers treat the result as read-only."""
    cmds = tuple(map(s.cmds.get, keys))
    return _memo((kind, tuple(map(id, cmds)), extra), cmds, compute)


def memo_on_state(kind: str, cmd: Command | None, s: SetState, extra: object,
                  compute: Callable[[], T]) -> T:
    """:func:`memo_on_commands` over the operation command ``cmd`` and every NPU_SET_* command
    set: for an operation's whole decode, which reads more commands than are worth listing."""
    held = s.held()
    return _memo((kind, id(cmd), id(held), extra), (cmd, held), compute)


def _memo(key: tuple[Any, ...], held: tuple[Any, ...], compute: Callable[[], T]) -> T:
    """``compute()`` kept under ``key`` (ids of the commands in ``held``, which the entry
    holds so that the ids stay theirs)."""
    hit = _MEMO.get(key)
    if hit is None:
        result = compute()
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()
        hit = _MEMO[key] = (held, result)
    found: T = hit[1]
    return found
