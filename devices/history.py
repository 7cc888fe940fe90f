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
(the contents *before*, only the 64-byte blocks that differ from memory now;
emu/memory/ranges.py's kernels, one call per memory stack or memory written); the shadow then
takes the new bytes. Besides the units' ranges, every
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

import itertools
import operator
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..emu.memory.ranges import put_back, range_pieces, swap_out

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
_version = operator.attrgetter("version")
#: range_pieces' table for no ranges
NO_PIECES = np.zeros((4, 0), np.int64)
#: how many range lists History.last_pieces keeps (lists of the tuples the devices keep with
#: their decoded units anyway: an Ethos-U85 continue's thousands of ranges hit too, 0.4 ms of
#: MobileNet's 3.3 ms when not kept)
PIECES_KEPT = 8


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


class Saved(NamedTuple):
    """Bytes before of one flat store (History.stores: a memory stack's backing array or a
    memory in no stack): the runs that changed (emu/memory/ranges.py swap_out: int64 [3, R],
    each run's segment -- the memory it lies in, touched when put back --, offset in the store
    and length) and their bytes concatenated in that order."""

    store: int
    runs: np.ndarray
    data: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + self.runs.nbytes


@dataclass
class Entry:
    """One transition between two boundaries.

    ``state``: the small state of the boundary *before* it (RunControl._boundary_state).
    ``regs``: the value before it of every register written during it (register key -> value).
    ``undo``: the bytes before of every range written during it. ``units``: the
    (pc at its start, ranges it wrote) of each unit it ran: one for a step, several for a block
    of the fast path, one with ``partial`` for a unit cut short. ``reads``: what a single unit
    read (for read watchpoints going back); None for a block, whose reads are not known."""

    state: State
    regs: dict[int, int]
    undo: list[Saved]
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
    #: (memory's flat array, its shadow) per store: one per memory stack (Bus.stack: the
    #: stack's backing array, flat) and one per memory in no stack; the memories by address
    #: (segments), and their start, end, store and offset in the store (int64 [4, segments])
    stores: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    seg_mems: list[Memory] = field(default_factory=list)
    segments: np.ndarray = field(default_factory=lambda: np.zeros((4, 0), np.int64))
    #: memory name -> its segment
    seg_of: dict[str, int] = field(default_factory=dict)
    #: the memories by shared change counter (Memory.stack_version): each stack's and the one
    #: of the memories in no stack (Bus.loose_version), so a stop looks only at the memories
    #: of a group whose counter moved (the MAX78000 has 148 memories): (members, their
    #: segments, counter); and per group the counter and the members' counters when last
    #: looked at
    groups: list[tuple[list[Memory], list[int], list[int]]] = field(default_factory=list)
    seen_versions: list[tuple[int, list[int]]] = field(default_factory=list)
    #: the ranges _take was given lately (the tuples themselves) and their pieces
    #: (range_pieces) and segments, by the id of the first tuple: a device that keeps a
    #: unit's write ranges with its configuration returns the same tuples each run (the
    #: MAX78000's layers, datapath._written), and a continue over the same units then skips
    #: the array and the join (~10 us of a 0.4 ms MNIST-shaped inference); checked by
    #: identity, so a tuple can be neither changed nor reused while it is held here. Up to
    #: PIECES_KEPT (an input reload's record comes between two continues); kept by a new
    #: history of the same memory layout (pieces depend only on ranges and segments)
    last_pieces: dict[int, tuple[list[tuple[int, int]], np.ndarray, set[int]]] = \
        field(default_factory=dict)
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
        self.pending, self.stores = None, []
        self.groups, self.seen_versions = [], []
        self.size = self.dropped = 0
        self.bus.write_log = None
        self.regs.log = None

    def begin(self, state: State) -> None:
        """Start recording at the current boundary, whose small state is ``state``: one copy of
        every memory (the shadow), the only whole-memory cost, paid once per history."""
        self.clear()
        self._shadow_stores()
        self._see_versions()
        self.pending = state
        self.bus.write_log = []
        self.regs.log = {}
        self.t_mark = time.perf_counter()

    def _shadow_stores(self) -> None:
        """The shadow, one flat copy per store, and the segment table that maps an address to
        its store and offset (the kernels' view: emu/memory/ranges.py). A stack is one store
        because its memories are rows of one contiguous array (Bus.stack): the ~30 pieces a
        MAX78000 layer sequence writes over 16 data memories are one kernel call."""
        bus, where = self.bus, {}
        for key, rows in bus.stacks.items():
            flat = rows.reshape(-1)  # np.stack's array is contiguous: a view
            for i, m in enumerate(bus.stack_members[key]):
                where[m.region.name] = (len(self.stores), i * rows.shape[1])
            self.stores.append((flat, _sparse_copy(flat)))
        for name, m in bus.memories.items():
            if name not in where:
                where[name] = (len(self.stores), 0)
                self.stores.append((m.data, _sparse_copy(m.data)))
        self.seg_mems = sorted(bus.memories.values(), key=lambda m: m.region.base)
        self.seg_of = {m.region.name: k for k, m in enumerate(self.seg_mems)}
        segments = np.array([(m.region.base, m.region.end, *where[m.region.name])
                             for m in self.seg_mems], np.int64).T.copy()
        if not np.array_equal(segments, self.segments):  # else last_pieces hold (a new
            self.last_pieces = {}  # history of the same device: a reset, a load)
        self.segments = segments
        loose = [m for m in bus.memories.values() if m.stack_version is bus.loose_version]
        self.groups = [(ms, [self.seg_of[m.region.name] for m in ms], counter) for ms, counter in
                       [(bus.stack_members[k], bus.stack_versions[k]) for k in bus.stacks]
                       + [(loose, bus.loose_version)]]

    def _see_versions(self) -> None:
        """Every memory's change counter as it is now: nothing changed since."""
        self.seen_versions = [(c[0], list(map(_version, ms))) for ms, _, c in self.groups]

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
        regs, self.regs.log = self.regs.log or {}, {}
        entry = Entry(self.pending, regs, [], units, reads, partial)
        entry.undo = undo = self._take(entry.writes + log)
        entry.size = ENTRY_OVERHEAD + REG_BYTES * len(regs) + sum(s.nbytes for s in undo)
        self.entries.append(entry)
        self.size += entry.size
        self.pending = state
        self.t_mark = time.perf_counter()
        while self.size > self.budget and len(self.entries) > 1:
            self.size -= self.entries.popleft().size
            self.dropped += 1

    def _take(self, ranges: list[tuple[int, int]]) -> list[Saved]:
        """For the memory parts of ``ranges`` (joined; register windows and unmapped gaps
        skipped: registers are in every entry's small state): the shadow's bytes (before),
        then the shadow updated to the memory's bytes now, one kernel call per store written,
        only the blocks that changed kept (swap_out); plus every memory whose change
        counter moved with no range recorded in it, compared with its shadow whole."""
        out: list[Saved] = []
        table, seen = self._pieces(ranges)
        segs, stores, offs, lens = table
        if segs.size and stores[0] == stores[-1]:  # one store (one run of pieces)
            out.append(self._swap(int(stores[0]), segs, offs, lens))
        elif segs.size:
            cuts = [0, *(np.flatnonzero(np.diff(stores)) + 1).tolist(), segs.size]
            for a, b in zip(cuts, cuts[1:]):
                out.append(self._swap(int(stores[a]), segs[a:b], offs[a:b], lens[a:b]))
        moved = self._changed()
        for k in moved:
            if k not in seen:  # the whole memory: swap_out keeps what differs
                out.append(self._swap(int(self.segments[2, k]), np.array([k], np.int64),
                                      self.segments[3, k:k + 1],
                                      self.segments[1, k:k + 1] - self.segments[0, k]))
        return [saved for saved in out if saved.data.size]

    def _pieces(self, ranges: list[tuple[int, int]]) -> tuple[np.ndarray, set[int]]:
        """range_pieces of ``ranges`` and the segments its pieces lie in: those kept from a
        recent call when ``ranges`` are the same tuples (last_pieces)."""
        if not ranges:
            return NO_PIECES, set()
        last = self.last_pieces.get(id(ranges[0]))
        if last is not None and len(last[0]) == len(ranges) and \
                all(map(operator.is_, ranges, last[0])):
            return last[1], last[2]
        flat = np.fromiter(itertools.chain.from_iterable(ranges), np.int64, 2 * len(ranges))
        table = range_pieces(flat.reshape(-1, 2), self.segments)
        segs = set(table[0].tolist())
        if len(self.last_pieces) >= PIECES_KEPT:
            del self.last_pieces[next(iter(self.last_pieces))]  # the oldest
        self.last_pieces[id(ranges[0])] = (ranges, table, segs)
        return table, segs

    def _swap(self, store: int, segs: np.ndarray, offs: np.ndarray, lens: np.ndarray) -> Saved:
        data, shadow = self.stores[store]
        saved, runs = swap_out(data, shadow, segs, offs, lens)
        return Saved(store, runs, saved)

    def _changed(self) -> list[int]:
        """The segments of the memories whose change counter moved since it was last looked
        at: one comparison per group (a stack, the memories in no stack) whose shared counter
        did not move."""
        out: list[int] = []
        for i, (members, segs, counter) in enumerate(self.groups):
            top, old = self.seen_versions[i]
            if counter[0] == top:
                continue
            now = list(map(_version, members))
            out += itertools.compress(segs, map(operator.ne, now, old))
            self.seen_versions[i] = (counter[0], now)
        return out

    # -- going back ------------------------------------------------------------------------
    def settle(self, apply_state: Callable[[State], None]) -> None:
        """Back to the current boundary exactly: what changed since it without a transition
        recorded (the debugger's writes while halted, a host step at the start of a run that
        ran no unit) is undone, as stepping back over the next unit would undo it too."""
        assert self.pending is not None, "settle() before begin()"
        self._put_back(self._take(self.bus.write_log or []), self.regs.log or {})
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

    def _put_back(self, undo: list[Saved], regs: dict[int, int]) -> None:
        """Bytes before (into memory and shadow) and registers' old values back; nothing is
        left logged since the current boundary, so every change counter as it is now is seen
        (settle took what changed before the first entry is undone)."""
        for saved in undo:
            data, shadow = self.stores[saved.store]
            put_back(data, shadow, saved.runs[1], saved.runs[2], saved.data)
            for k in sorted(set(saved.runs[0].tolist())):
                self.seg_mems[k].touch()
        self._see_versions()
        self.bus.write_log = []
        self.regs.put_back(regs)
        self.regs.log = {}

    def usage(self) -> str:
        """One line for `monitor history`: entries, units, bytes, budget, what was dropped."""
        units = sum(len(e.units) for e in self.entries if not e.partial)
        return (f"history: {len(self.entries)} boundaries back ({units} units), "
                f"{self.size / 2**20:.1f} MiB of {self.budget / 2**20:.0f} MiB"
                + (f", {self.dropped} oldest dropped" if self.dropped else ""))
