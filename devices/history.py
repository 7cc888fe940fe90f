"""Reverse-execution history (issue 29): the device's state at the unit boundaries of its runs,
so that ``reverse-stepi``/``reverse-continue`` (RSP ``bs``/``bc``) go back exactly, bounded by a
memory budget (docs/design-notes.md "Reverse execution" and "History checkpoints and the
journal").

Checkpoints and a journal between them. A *shadow* copy of every memory holds the contents at
the last *checkpoint* (taken once when a history starts: the only whole-memory cost). A run
notes each unit's pc and write ranges (``Touched.writes``; a list append); at its stop only a
*leg* is journaled: those units, the bus writes and the registers' old values since the last
boundary (Bus.write_log, RegisterFile.log, handed over, not copied). What the debugger changed
while halted is journaled at the start of the next run as a leg of its own with *redo* data:
the small state after it, the registers' values after it, and of the memory it wrote the
64-byte blocks that differ from the shadow (emu/memory/ranges.py diff_out). Every
CHECKPOINT_EVERY legs (or CHECKPOINT_UNITS units, CHECKPOINT_S of run time, REDO_BYTES of redo
since the last one, a budget reached, or where a leg cannot be replayed: a unit cut part-way,
a change made outside the bus's logs) the legs since the last checkpoint are closed as one
:class:`Entry`: the small state of that checkpoint, the first old value of every register
written since, and the shadow's bytes of the union of every range written since (the contents
*before*, only the blocks that differ from memory now; one kernel call per memory stack or
memory written), then the shadow takes the new bytes. A journaled host change adds only the
blocks its redo keeps (the rest of what it wrote held the shadow's bytes). So the ~62 KiB a
MAX78000 inference rewrites are compared once per checkpoint (eight inferences, each an input
reload and a continue), not at every stop.

Going back undoes the newest entry: its bytes into memory and shadow, its registers' old
values and its small state back. Where a stop can fall inside it (several units or host
changes), it is first undone and replayed forward from its checkpoint (RunControl._refine):
each leg's redo applied and each unit run again, every boundary recorded whole, so the steps
back after it undo one unit each. A journal not yet closed is closed first (settle).

The oldest entries are dropped when the history exceeds the budget; :attr:`History.dropped`
counts the legs (boundaries) they held, and the stop at the start of history says so.
"""
from __future__ import annotations

import itertools
import operator
import time
from collections import deque
from collections.abc import Callable, Iterator, Set
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..emu.memory.ranges import diff_out, put_back, range_pieces, swap_out
from . import DEFAULT_BUDGET_MIB  # noqa: F401 (re-exported; defined in the light __init__)

if TYPE_CHECKING:
    from .bus import Bus, Memory
    from .device import Touched
    from .registers import RegisterFile

#: seconds of run time between two checkpoints: a run records each unit's pc and write ranges
#: only (a list append), and a checkpoint (small state, undo bytes) after the first unit that
#: ends this long after the last one. Going back into such a stretch replays it forward unit by
#: unit from its start (RunControl._refine), so this bounds that replay; measured in
#: benchmarks/bench_history.py.
CHECKPOINT_S = 0.05
#: legs (stops and host changes) journaled between two checkpoints; the checkpoint closing them
#: compares the union of their ranges once. Chosen from benchmarks/bench_history.py
#: (docs/design-notes.md "History checkpoints and the journal"): MAX78000 MNIST-shaped
#: continues within one history +30 % with a checkpoint at every stop, +16 % with one every 8
#: legs, +5..+6 % with one every 16 (median), the first step back 3-4 / 8-10 ms
CHECKPOINT_EVERY = 16
#: units journaled since the last checkpoint that make the next boundary one: going back
#: replays the journal one unit at a time with every boundary recorded whole (~0.1 ms a
#: command on the Ethos-U85, measured), so this bounds that replay where continues are long
#: (MobileNet v2: 227 commands, a checkpoint every fifth continue)
CHECKPOINT_UNITS = 1024
#: bytes of redo (host changes) journaled since the last checkpoint that make the next boundary
#: one: a history of many reloads should hold undo bytes that the budget can drop, not a
#: journal that grows until the next checkpoint
REDO_BYTES = 8 << 20
#: what one entry costs besides its memory bytes and registers (model state, host mark), and
#: what one logged register costs (a dict item): rough figures for the budget
ENTRY_OVERHEAD = 4096
LEG_OVERHEAD = 512
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


Unit = tuple[int, list[tuple[int, int]]]


@dataclass
class Redo:
    """What the debugger (or a host) changed while halted, as it was *after* the change: replayed
    forward from the checkpoint before it. ``state``: the small state after; ``regs``: the value
    after of every register changed; ``pieces``: range_pieces of the memory it wrote; ``mem``:
    of those pieces, the blocks that differed from the shadow (the checkpoint's bytes) -- the
    other blocks held the checkpoint's bytes (diff_out). ``full``: per store (store, segments,
    offsets, lengths, bytes), the bytes after of every piece, made from the shadow while it
    holds the checkpoint (History.prepare), kept only during a replay."""

    state: State
    regs: dict[int, int]
    pieces: np.ndarray
    mem: list[Saved]
    full: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] | None = None
    #: the segments of ``pieces`` (what the checkpoint closing it needs, not worked out again)
    segs: Set[int] = frozenset()

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.mem) + REG_BYTES * len(self.regs) + self.pieces.nbytes


@dataclass
class Leg:
    """One journaled transition between two boundaries: a run's units (pc at each start, ranges
    written), what a single unit read, whether the last stopped part-way; or, with no units, a
    change made while halted (``redo``; None where it cannot be replayed: see History.hidden).
    ``log``: the bus writes during it (the host program's stores, or the debugger's);
    ``regs``: the value before it of every register written during it."""

    units: list[Unit]
    reads: list[tuple[int, int]] | None
    partial: bool
    log: list[tuple[int, int]]
    regs: dict[int, int]
    redo: Redo | None = None

    @property
    def steps(self) -> int:
        """Units, or 1 for a change made while halted."""
        return len(self.units) or 1

    @property
    def replayable(self) -> bool:
        return not self.partial and (bool(self.units) or self.redo is not None)

    @property
    def size(self) -> int:
        return LEG_OVERHEAD + REG_BYTES * len(self.regs) + \
            (self.redo.nbytes if self.redo is not None else 0)


@dataclass
class Entry:
    """The transition from one checkpoint to the next.

    ``state``: the small state of the checkpoint *before* it (RunControl._boundary_state).
    ``regs``: the value before it of every register written during it. ``undo``: the bytes
    before of every range written during it. ``legs``: what it is made of (one for a step, a
    continue or a host change recorded whole; up to CHECKPOINT_EVERY journaled ones), replayed
    forward where a stop falls inside it. ``units``: the units of its legs in order. ``reads``:
    what its only unit read (for read watchpoints going back); None for several."""

    state: State
    regs: dict[int, int]
    undo: list[Saved]
    legs: list[Leg]
    units: list[Unit] = field(default_factory=list)
    reads: list[tuple[int, int]] | None = None
    partial: bool = False
    size: int = 0

    def __post_init__(self) -> None:
        self.units = [u for leg in self.legs for u in leg.units]
        only = self.legs[0] if len(self.legs) == 1 else None
        self.reads = only.reads if only is not None and len(only.units) == 1 else None
        self.partial = bool(self.legs) and self.legs[-1].partial

    @property
    def writes(self) -> list[tuple[int, int]]:
        return [r for _, ws in self.units for r in ws]

    @property
    def steps(self) -> int:
        """Boundaries inside it plus one: where going back could stop."""
        return sum(leg.steps for leg in self.legs)

    def inner_pcs(self) -> set[int]:
        """The pcs of its units that start at a boundary inside it (a breakpoint there stops
        going back inside it)."""
        pcs = [pc for pc, _ in self.units]
        return set(pcs[1:] if self.legs and self.legs[0].units else pcs)


@dataclass
class History:
    """The recorded boundaries of one device (owned by its RunControl)."""

    bus: Bus
    regs: RegisterFile
    #: bytes; 0: recording off (a bare RunControl: `accelstub run`, eval, benchmarks); the
    #: server turns it on (StubServer, ``--history-mib``), where a client can go back
    budget: int = 0
    entries: deque[Entry] = field(default_factory=deque)
    #: the small state of the last checkpoint (the ``state`` of the next entry)
    pending: State | None = None
    #: legs journaled since the last checkpoint (the shadow holds that checkpoint's bytes)
    legs: list[Leg] = field(default_factory=list)
    #: legs per checkpoint; 1: every boundary is one (also while a replay records, ``fine``)
    every: int = CHECKPOINT_EVERY
    fine: bool = False
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
    units: list[Unit] = field(default_factory=list)
    reads: list[tuple[int, int]] | None = None
    partial: bool = False
    #: perf_counter() of the current boundary or of the start of the run since; run time since
    #: the last checkpoint before it (CHECKPOINT_S counts run time, not time halted)
    t_mark: float = 0.0
    run_s: float = 0.0
    #: the sum of the memories' change counters and Bus.write_touches at the current boundary
    #: (hidden)
    counters: tuple[int, int] = (0, 0)
    #: units and redo bytes of the legs journaled since the last checkpoint, kept as the legs
    #: are added (record's checks at every stop: no sum over the journal)
    journal_units: int = 0
    journal_redo: int = 0

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
        self.legs = []
        self._new_journal()
        self.units, self.reads, self.partial = [], None, False
        self.pending, self.stores = None, []
        self.groups, self.seen_versions = [], []
        self.size = self.dropped = 0
        self.run_s = 0.0
        self.bus.write_log = None
        self.regs.log = None

    def begin(self, state: State) -> None:
        """Start recording at the current boundary, whose small state is ``state``: one copy of
        every memory (the shadow), the only whole-memory cost, paid once per history."""
        self.clear()
        self._shadow_stores()
        self._see_versions()
        self.pending = state
        self._fresh_logs()
        self.t_mark = time.perf_counter()
        self.counters = self._counters()

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
        """Whether the run has gone on CHECKPOINT_S since the last checkpoint."""
        return self.run_s + time.perf_counter() - self.t_mark >= CHECKPOINT_S

    def _counters(self) -> tuple[int, int]:
        return sum(c[0] for _, _, c in self.groups), self.bus.write_touches

    def hidden(self) -> bool:
        """Whether memory changed since the current boundary other than through Bus.write's
        stores (each moves one counter once): a write hook, a command storing into an array.
        Such a change cannot be journaled as redo (its ranges are not known), so it is
        recorded whole (a checkpoint, compared memory by memory: _take)."""
        total, touches = self._counters()
        return total - self.counters[0] != touches - self.counters[1]

    def record(self, state: State | Callable[[], State], host: bool = False) -> None:
        """Close the transition from the current boundary (the units noted since, or with
        ``host`` what changed while halted) at the new boundary, whose small state is
        ``state`` (or what it returns: only a checkpoint needs it, a journaled leg does not):
        a leg of the journal, or a checkpoint closing the journal (see the module's
        docstring)."""
        assert self.pending is not None, "record() before begin()"
        now = time.perf_counter()
        self.run_s += now - self.t_mark
        self.t_mark = now
        leg = Leg(self.units, self.reads, self.partial, self.bus.write_log or [],
                  self.regs.log or {})
        self.units, self.reads, self.partial = [], None, False
        self._fresh_logs()
        if host and not (self.fine or self.every <= 1 or self.hidden()):
            leg.redo = self._redo(state, leg)  # else this leg is a checkpoint's last
        self.legs.append(leg)
        self.journal_units += len(leg.units)
        if leg.redo is not None:
            self.journal_redo += leg.redo.nbytes
        size = leg.size
        if self.fine or not leg.replayable or len(self.legs) >= self.every \
                or self.run_s >= CHECKPOINT_S or self.journal_redo >= REDO_BYTES \
                or self.journal_units >= CHECKPOINT_UNITS or self.size + size > self.budget:
            self._checkpoint(state() if callable(state) else state)
        else:
            self.size += size
        self.counters = self._counters()

    def _new_journal(self) -> None:
        """The journal's running totals for no legs."""
        self.journal_units = self.journal_redo = 0

    def _fresh_logs(self) -> None:
        """Empty logs of bus writes and registers from here."""
        self.bus.write_log, self.regs.log = [], {}

    def _redo(self, state: State | Callable[[], State], leg: Leg) -> Redo:
        """The redo of a change made while halted (``leg``'s bus writes and registers): its
        small state and registers after, and of the memory it wrote the blocks that differ
        from the shadow."""
        table, written = self._pieces(leg.log, keep=False)
        mem = [Saved(store, runs, saved) for store, segs, offs, lens in self._by_store(table)
               for saved, runs in [diff_out(*self.stores[store], segs, offs, lens)]]
        return Redo(state() if callable(state) else state, self.regs.values(leg.regs), table,
                    [m for m in mem if m.data.size], segs=written)

    def _journal(self, legs: list[Leg]) -> tuple[list[tuple[int, int]],
                                                 list[tuple[int, int]], set[int]]:
        """What ``legs`` wrote: the units' ranges (a device's kept lists, the MAX78000's
        layers' tuples run after run, each list once), the logs (the bus's, and of a host
        change the blocks its redo keeps: new tuples each time), and the segments the host
        changes wrote."""
        logs: list[tuple[int, int]] = []
        written: set[int] = set()
        for leg in legs:
            if leg.redo is None:
                logs += leg.log
            else:
                logs += self._redo_ranges(leg.redo)
                written |= leg.redo.segs
        lists = {id(ws): ws for leg in legs for _, ws in leg.units}  # in order of first use
        return list(itertools.chain.from_iterable(lists.values())), logs, written

    def _checkpoint(self, state: State) -> None:
        """Close the journal: one entry from the last checkpoint over every leg since, its
        undo the union of their ranges (compared with the shadow once), and the first old
        value of every register they wrote."""
        assert self.pending is not None, "a checkpoint before begin()"
        legs, self.legs = self.legs, []
        self._new_journal()
        regs: dict[int, int] = {}
        for leg in reversed(legs):  # the first old value of each register: the earliest leg's
            regs.update(leg.regs)
        ranges, logs, written = self._journal(legs)
        entry = Entry(self.pending, regs, self._take(ranges, written, logs), legs)
        sizes = [leg.size for leg in legs]
        entry.size = ENTRY_OVERHEAD + REG_BYTES * len(regs) + \
            sum(s.nbytes for s in entry.undo) + sum(sizes)
        self.size += entry.size - sum(sizes[:-1])  # those legs were counted
        self.entries.append(entry)
        self.pending = state
        self.run_s = 0.0
        while self.size > self.budget and len(self.entries) > 1:
            old = self.entries.popleft()
            self.size -= old.size
            self.dropped += len(old.legs)

    def _redo_ranges(self, redo: Redo) -> list[tuple[int, int]]:
        """What a journaled host change can have left different from the shadow: the blocks
        its redo keeps (the rest of what it wrote held the shadow's bytes, and what wrote
        there later has ranges of its own). So a checkpoint compares those, not all the host
        wrote: a driver's setup that stores the same megabytes of weights each inference
        (Ethos-U85) or the same input (MAX78000) is compared once, by its redo."""
        out: list[tuple[int, int]] = []
        for saved in redo.mem:
            segs, offs, lens = saved.runs
            starts = self.segments[0, segs] + offs - self.segments[3, segs]
            out += zip(starts.tolist(), (starts + lens).tolist())
        return out

    def _by_store(self, table: np.ndarray) -> Iterator[tuple[int, np.ndarray, np.ndarray,
                                                                  np.ndarray]]:
        """range_pieces' table cut into its runs of one store: (store, segments, offsets,
        lengths)."""
        segs, stores, offs, lens = table
        if segs.size and stores[0] == stores[-1]:  # one store (one run of pieces)
            yield int(stores[0]), segs, offs, lens
        elif segs.size:
            cuts = [0, *(np.flatnonzero(np.diff(stores)) + 1).tolist(), segs.size]
            for a, b in zip(cuts, cuts[1:]):
                yield int(stores[a]), segs[a:b], offs[a:b], lens[a:b]

    def _take(self, ranges: list[tuple[int, int]], written: Set[int] = frozenset(),
              logs: list[tuple[int, int]] | None = None) -> list[Saved]:
        """For the memory parts of ``ranges`` and ``logs`` (each joined; register windows and
        unmapped gaps skipped: registers are in every entry's small state): the shadow's bytes
        (before), then the shadow updated to the memory's bytes now, one kernel call per store
        written, only the blocks that changed kept (swap_out); plus every memory whose change
        counter moved with no range recorded in it, nor in ``written`` (segments whose
        changes the ranges hold already: a journaled host change's), compared with its
        shadow whole. ``logs`` apart: a run's few bus writes are new tuples each time, and
        joined with the units' ranges they made the pieces kept for those (last_pieces) miss
        at every checkpoint (0.4 ms of MobileNet v2's 3809 ranges); where both overlap, the
        second swap keeps the shadow's bytes as the first left them, so the undo goes last
        first (_put_back)."""
        table, seen = self._pieces(ranges)
        out = [self._swap(*piece) for piece in self._by_store(table)]
        if logs:
            table, more = self._pieces(logs, keep=False)
            out += [self._swap(*piece) for piece in self._by_store(table)]
            seen = seen | more
        moved = self._changed()
        for k in moved:
            if k not in seen and k not in written:  # the whole memory: what differs
                out.append(self._swap(int(self.segments[2, k]), np.array([k], np.int64),
                                      self.segments[3, k:k + 1],
                                      self.segments[1, k:k + 1] - self.segments[0, k]))
        return [saved for saved in out if saved.data.size]

    def _pieces(self, ranges: list[tuple[int, int]], keep: bool = True
                ) -> tuple[np.ndarray, set[int]]:
        """range_pieces of ``ranges`` and the segments its pieces lie in: those kept from a
        recent call when ``ranges`` are the same tuples (last_pieces). ``keep``: False for
        logs (new tuples each run, never met again), so that an input reload's record
        between two continues does not push the units' pieces out of last_pieces (the
        MAX78000's eight reloads per checkpoint did: its checkpoint then joined the units'
        ranges anew, ~50 us of ~140)."""
        if not ranges:
            return NO_PIECES, set()
        last = self.last_pieces.get(id(ranges[0])) if keep else None
        if last is not None and len(last[0]) == len(ranges) and \
                all(map(operator.is_, ranges, last[0])):
            return last[1], last[2]
        flat = np.fromiter(itertools.chain.from_iterable(ranges), np.int64, 2 * len(ranges))
        table = range_pieces(flat.reshape(-1, 2), self.segments)
        segs = set(table[0].tolist())
        if not keep:
            return table, segs
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
    def settle(self, state: Callable[[], State], apply_state: Callable[[State], None]) -> None:
        """Make the newest entry end where going back starts. With legs journaled since the
        last checkpoint: they are closed as an entry (what changed since the last boundary
        with it, as a last leg that is not replayed: going back over it undoes it, as stepping
        back over the next unit would). Else back to the current boundary exactly: what
        changed since it without a transition recorded (the debugger's writes while halted,
        a host step at the start of a run that ran no unit) is undone."""
        assert self.pending is not None, "settle() before begin()"
        if self.legs:
            if self.bus.write_log or self.regs.log or self.hidden():
                self.legs.append(Leg([], None, False, self.bus.write_log or [],
                                     self.regs.log or {}))
                self._fresh_logs()
            else:
                self.size -= self.legs[-1].size  # _checkpoint counts the last leg anew
            self._checkpoint(state())
            self.counters = self._counters()
            return
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
        (settle took what changed before the first entry is undone). Last taken first: two
        swaps of one entry may overlap (_take's logs after the units' ranges: a 64-byte block of
        the second holds bytes the first had swapped already), as an undo log is undone."""
        for saved in reversed(undo):
            data, shadow = self.stores[saved.store]
            put_back(data, shadow, saved.runs[1], saved.runs[2], saved.data)
            for k in sorted(set(saved.runs[0].tolist())):
                self.seg_mems[k].touch()
        self._see_versions()
        self.regs.put_back(regs)
        self._fresh_logs()
        self.counters = self._counters()

    def prepare(self, legs: list[Leg]) -> None:
        """Before ``legs`` are replayed from their checkpoint (just undone to: the shadow holds
        its bytes): each redo's bytes after, for every piece it wrote (the shadow's, overlaid
        with the blocks that differed), since the shadow moves on as the replay records."""
        for leg in legs:
            redo = leg.redo
            if redo is None:
                continue
            mem = {m.store: m for m in redo.mem}
            redo.full = []
            for store, segs, offs, lens in self._by_store(redo.pieces):
                shadow = self.stores[store][1]
                full = np.concatenate([shadow[o:o + n] for o, n in zip(offs, lens)])
                if store in mem:  # each run lies in one piece: its place in ``full``
                    runs = mem[store].runs
                    at = np.searchsorted(offs, runs[1], side="right") - 1
                    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
                    put_back(full, full, starts[at] + runs[1] - offs[at], runs[2],
                             mem[store].data)
                redo.full.append((store, segs, offs, lens, full))

    def apply_redo(self, leg: Leg, apply_state: Callable[[State], None]) -> None:
        """A journaled change made while halted, again (:meth:`prepare` first): its memory
        bytes, registers and small state after, its bus writes logged as they were, so the
        replay records it as a boundary of its own."""
        redo = leg.redo
        assert redo is not None and redo.full is not None, "apply_redo() before prepare()"
        for store, segs, offs, lens, full in redo.full:
            data = self.stores[store][0]
            put_back(data, data, offs, lens, full)
            for k in sorted(set(segs.tolist())):
                self.bus.stored_into(self.seg_mems[k])
        redo.full = None
        assert self.bus.write_log is not None
        self.bus.write_log += leg.log
        self.regs.redo(redo.regs)
        apply_state(redo.state)

    def usage(self) -> str:
        """One line for `monitor history`: entries, units, bytes, budget, what was dropped."""
        units = sum(len(e.units) for e in self.entries if not e.partial) + \
            sum(len(leg.units) for leg in self.legs if not leg.partial)
        back = sum(len(e.legs) for e in self.entries) + len(self.legs)
        return (f"history: {back} boundaries back ({units} units), "
                f"{self.size / 2**20:.1f} MiB of {self.budget / 2**20:.0f} MiB"
                + (f", {self.dropped} oldest dropped" if self.dropped else ""))
