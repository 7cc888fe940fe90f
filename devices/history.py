"""Reverse-execution history (issue 29): the device's state at the unit boundaries of its runs,
so that ``reverse-stepi``/``reverse-continue`` (RSP ``bs``/``bc``) go back exactly, bounded by a
memory budget (docs/design-notes.md "Reverse execution").

An undo log. A *shadow* copy of every memory holds the contents at the current boundary (taken
once when a history starts: the only whole-memory cost). A run notes each unit's pc and write
ranges (``Touched.writes``; a list append) and records a whole boundary where it stops (and
every CHECKPOINT_S of a long run): an :class:`Entry` with the small state of the boundary before
(model state, counters, scratch core registers, the host program's position), the old value of
every register written since (RegisterFile.log: a boundary costs the registers that changed,
not a copy of the thousands a device has) and the shadow's bytes of every range written since
(the contents *before*); the shadow then takes the new bytes. Besides the units' ranges, every
bus write since the boundary counts (the host program's stores: ``Bus.write_log``), and a memory
whose change counter moved with no range recorded in it is compared with its shadow whole. What
the debugger changes while halted is recorded at the start of the next run as an entry without
units.

Going back undoes the newest entry: its bytes into memory and shadow, its registers' old
values and its small state back. An
entry of several units (a stepi has one; a continue has all of its units) is first replayed
forward one unit at a time from its start where a stop could fall inside it (RunControl._refine).

The oldest entries are dropped when the entries exceed the budget; :attr:`History.dropped`
counts them, and the stop at the start of history says so.
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .ranges import merge_ranges

if TYPE_CHECKING:
    from .bus import Bus, Memory
    from .device import Touched
    from .registers import RegisterFile

#: the default budget of ``--history-mib``
DEFAULT_BUDGET_MIB = 256
#: seconds of a run between two recorded boundaries: a run records each unit's pc and write
#: ranges only (a list append), and the whole boundary (small state, undo bytes) at its stop and
#: after the first unit that ends this long after the last boundary. Going back into such a
#: stretch replays it forward unit by unit from its start (RunControl._refine), so this bounds
#: that replay; measured in benchmarks/bench_history.py.
CHECKPOINT_S = 0.05
#: what one entry costs besides its memory bytes and registers (model state, host mark), and
#: what one logged register costs (a dict item): rough figures for the budget
ENTRY_OVERHEAD = 4096
REG_BYTES = 100
#: a boundary's small state (RunControl._boundary_state: model state, counters, core, host mark)
State = dict[str, Any]
#: bytes of the shadow's chunks that are copied only when not all zero (_sparse_copy)
SHADOW_CHUNK = 1 << 16


def _sparse_copy(data: np.ndarray) -> np.ndarray:
    """A copy of ``data`` whose all-zero chunks stay unwritten: np.zeros maps its pages only
    when written (calloc), so the shadow of NVDLA's 128 MiB of mostly empty DRAM costs the
    server the bytes a program placed, not 128 MiB more (measured: 110 -> 240 MiB RSS with a
    plain copy). Reading the source's untouched pages maps no memory either."""
    out = np.zeros(data.shape, data.dtype)
    whole = data.size - data.size % SHADOW_CHUNK
    used = np.flatnonzero(data[:whole].reshape(-1, SHADOW_CHUNK).any(axis=1))
    for i in used.tolist():
        chunk = slice(i * SHADOW_CHUNK, (i + 1) * SHADOW_CHUNK)
        out[chunk] = data[chunk]
    out[whole:] = data[whole:]
    return out


@dataclass
class Entry:
    """One transition between two boundaries.

    ``state``: the small state of the boundary *before* it (RunControl._boundary_state).
    ``regs``: the value before it of every register written during it (register key -> value).
    ``undo``: (memory, offset, bytes before) for every range written during it. ``units``: the
    (pc at its start, ranges it wrote) of each unit it ran: one for a step, several for a block
    of the fast path, one with ``partial`` for a unit cut short. ``reads``: what a single unit
    read (for read watchpoints going back); None for a block, whose reads are not known."""

    state: State
    regs: dict[int, int]
    undo: list[tuple[Memory, int, np.ndarray]]
    units: list[tuple[int, list[tuple[int, int]]]]
    reads: list[tuple[int, int]] | None
    partial: bool = False
    size: int = 0

    @property
    def writes(self) -> list[tuple[int, int]]:
        return [r for _, ws in self.units for r in ws]


@dataclass
class History:
    """The recorded boundaries of one device (owned by its RunControl)."""

    bus: Bus
    regs: RegisterFile
    #: bytes; 0: recording off (a bare RunControl: `accelstub run`, eval, benchmarks); the
    #: server turns it on (StubServer, ``--history-mib``), where a client can go back
    budget: int = 0
    entries: deque[Entry] = field(default_factory=deque)
    #: the small state of the current boundary (the ``state`` of the next entry)
    pending: State | None = None
    #: memory contents at the current boundary, by memory name (empty until begin())
    shadow: dict[str, np.ndarray] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    #: each memory stack's change counter when last looked at (Bus.stack_versions): a stack
    #: whose counter did not move has no memory to look at (the MAX78000 has 148 memories)
    stack_seen: dict[str, int] = field(default_factory=dict)
    #: the memories in no stack
    loose: list[Memory] = field(default_factory=list)
    size: int = 0
    #: transitions dropped from the old end for the budget since the history began
    dropped: int = 0
    #: the units run since the current boundary: (pc, ranges written), what one read (kept for
    #: a single unit), and whether the last stopped part-way
    units: list[tuple[int, list[tuple[int, int]]]] = field(default_factory=list)
    reads: list[tuple[int, int]] | None = None
    partial: bool = False
    #: perf_counter() of the current boundary
    t_mark: float = 0.0

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    @property
    def started(self) -> bool:
        return self.pending is not None

    def clear(self) -> None:
        """Forget everything (a reset, a program load, a rewind, a restored snapshot: the
        device changed in a way no entry records); the next run starts a new history."""
        self.entries.clear()
        self.units, self.reads, self.partial = [], None, False
        self.pending, self.shadow = None, {}
        self.versions = {}
        self.size = self.dropped = 0
        self.bus.write_log = None
        self.regs.log = None

    def begin(self, state: State) -> None:
        """Start recording at the current boundary, whose small state is ``state``: one copy of
        every memory (the shadow), the only whole-memory cost, paid once per history."""
        self.clear()
        self.shadow = {k: _sparse_copy(m.data) for k, m in self.bus.memories.items()}
        self.versions = {k: m.version for k, m in self.bus.memories.items()}
        self.stack_seen = {k: v[0] for k, v in self.bus.stack_versions.items()}
        self.loose = [m for m in self.bus.memories.values() if m.stack_version is None]
        self.pending = state
        self.bus.write_log = []
        self.regs.log = {}
        self.t_mark = time.perf_counter()

    # -- recording ---------------------------------------------------------------------------
    def note(self, pc: int, touched: Touched, partial: bool = False) -> None:
        """A unit that started at ``pc`` ran (``partial``: it stopped part-way)."""
        self.units.append((pc, touched.writes))
        self.reads = touched.reads if len(self.units) == 1 else None
        self.partial = self.partial or partial

    def note_block(self, units: list[tuple[int, list[tuple[int, int]]]]) -> None:
        """A block of the fast path ran (Device.run_block: each unit's pc and writes)."""
        self.units += units
        self.reads = None

    def due(self) -> bool:
        """Whether the run has gone on CHECKPOINT_S since the current boundary."""
        return time.perf_counter() - self.t_mark >= CHECKPOINT_S

    def record(self, state: State) -> None:
        """Close the transition from the current boundary over the units noted since, at the
        new boundary whose small state is ``state``."""
        assert self.pending is not None, "record() before begin()"
        units, reads, partial = self.units, self.reads, self.partial
        self.units, self.reads, self.partial = [], None, False
        log = self.bus.write_log or []
        self.bus.write_log = []
        ranges = [r for _, ws in units for r in ws] + log
        undo = self._take(merge_ranges(ranges))
        regs, self.regs.log = self.regs.log or {}, {}
        entry = Entry(self.pending, regs, undo, units, reads, partial)
        entry.size = ENTRY_OVERHEAD + REG_BYTES * len(regs) + sum(b.nbytes for _, _, b in undo)
        self.entries.append(entry)
        self.size += entry.size
        self.pending = state
        self.t_mark = time.perf_counter()
        while self.size > self.budget and len(self.entries) > 1:
            self.size -= self.entries.popleft().size
            self.dropped += 1

    def _take(self, ranges: list[tuple[int, int]]) -> list[tuple[Memory, int, np.ndarray]]:
        """For each memory piece of ``ranges``: its shadow bytes (before), then the shadow
        updated to the memory's bytes now; plus every memory whose change counter moved with
        no range recorded in it, compared with its shadow whole."""
        out: list[tuple[Memory, int, np.ndarray]] = []
        seen: set[str] = set()
        for mem, off, n in self._pieces(ranges):
            name = mem.region.name
            old = self.shadow[name][off:off + n].copy()
            self.shadow[name][off:off + n] = mem.data[off:off + n]
            out.append((mem, off, old))
            seen.add(name)
        for mem in self._changed():
            name = mem.region.name
            self.versions[name] = mem.version
            if name not in seen:
                out += self._diff(mem)
        return out

    def _changed(self) -> list[Memory]:
        """The memories whose change counter moved since it was last looked at."""
        bus, versions, out = self.bus, self.versions, []
        for key, members in bus.stack_members.items():
            v = bus.stack_versions[key][0]
            if v != self.stack_seen.get(key):
                self.stack_seen[key] = v
                out += [m for m in members if m.version != versions[m.region.name]]
        return out + [m for m in self.loose if m.version != versions[m.region.name]]

    def _diff(self, mem: Memory) -> list[tuple[Memory, int, np.ndarray]]:
        name = mem.region.name
        changed = np.flatnonzero(self.shadow[name] != mem.data)
        if not changed.size:
            return []
        lo, hi = int(changed[0]), int(changed[-1]) + 1
        old = self.shadow[name][lo:hi].copy()
        self.shadow[name][lo:hi] = mem.data[lo:hi]
        return [(mem, lo, old)]

    def _pieces(self, ranges: list[tuple[int, int]]) -> Iterator[tuple[Memory, int, int]]:
        """(memory, offset, length) of the memory parts of ``ranges`` (register windows and
        unmapped gaps skipped: registers are in every entry's small state)."""
        bus, region = self.bus, None
        for s, e in ranges:
            while s < e:
                if region is None or not region.base <= s < region.end:
                    region = bus.region_at(s)  # sorted ranges: mostly the region before
                if region is None:
                    break
                stop = min(e, region.end)
                mem = bus.memories.get(region.name)
                if mem is not None:
                    yield mem, s - region.base, stop - s
                s = stop

    # -- going back ------------------------------------------------------------------------
    def settle(self, apply_state: Callable[[State], None]) -> None:
        """Back to the current boundary exactly: what changed since it without a transition
        recorded (the debugger's writes while halted, a host step at the start of a run that
        ran no unit) is undone, as stepping back over the next unit would undo it too."""
        log = self.bus.write_log or []
        self._put_back(self._take(merge_ranges(log)), self.regs.log or {})
        assert self.pending is not None, "settle() before begin()"
        apply_state(self.pending)

    def undo_last(self, apply_state: Callable[[State], None]) -> Entry:
        """Undo the newest transition: its memory bytes back, the boundary's small state
        through ``apply_state``; returns the entry."""
        entry = self.entries.pop()
        self.size -= entry.size
        self._put_back(entry.undo, entry.regs)
        apply_state(entry.state)
        self.pending = entry.state
        return entry

    def _put_back(self, undo: list[tuple[Memory, int, np.ndarray]],
                  regs: dict[int, int]) -> None:
        """Bytes before (into memory and shadow) and registers' old values back; nothing is
        left logged since the current boundary."""
        for mem, off, old in undo:
            n = old.nbytes
            mem.data[off:off + n] = old
            self.shadow[mem.region.name][off:off + n] = old
            mem.touch()
            self.versions[mem.region.name] = mem.version
        self.bus.write_log = []
        self.regs.put_back(regs)
        self.regs.log = {}

    def usage(self) -> str:
        """One line for `monitor history`: entries, units, bytes, budget, what was dropped."""
        units = sum(len(e.units) for e in self.entries if not e.partial)
        return (f"history: {len(self.entries)} boundaries back ({units} units), "
                f"{self.size / 2**20:.1f} MiB of {self.budget / 2**20:.0f} MiB"
                + (f", {self.dropped} oldest dropped" if self.dropped else ""))
