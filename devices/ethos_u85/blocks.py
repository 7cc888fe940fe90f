"""Blocks: the units of a run replayed at once (Device.run_block for the Ethos-U85).

A run from a state seen before replays the data parts the operations kept (ops.py's kept
runs, dma.py's kept copies) and then puts the state the recording left, instead of running
each unit through the model. Apart from the model: it decides nothing about what a command
does; it drives the model's ``execute_unit`` while recording and restores the model's state
through the members :class:`BlockHost` declares.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from ..content_cache import kept_for
from ..device import Touched, UnitContext
from ..registers import RegisterFile
from . import ops
from .cmdstream import CommandStream
from .executor import Table
from .memport import NpuPort
from .ops import NpuBusFault, NpuInternal, SetState

#: operations without data: a replay has nothing to do for them but what the block's state
#: after them says (BlockReplay.run)
NO_DATA_OPS = frozenset(("NPU_OP_STOP", "NPU_OP_IRQ", "NPU_OP_PMU_MASK", "NPU_OP_DMA_WAIT",
                         "NPU_OP_KERNEL_WAIT"))
NO_DATA = "no data"   # a step of a block: nothing to do
GENERAL = "general"   # a step of a block: the unit through the general path

#: a unit a run made: (pc, the ranges it wrote)
RanUnit = tuple[int, list[tuple[int, int]]]


class BlockHost(Protocol):
    """What the replay reads and puts back of the model (model.py's EthosU85)."""

    regs: RegisterFile
    sets: SetState
    npu: NpuInternal
    stats: dict[str, int]
    cycles: int
    units_done: int
    resumable: bool
    pmu_mask_enable: bool
    power_masked: bool
    stop_reason: str
    port: NpuPort
    stream: CommandStream
    granularities: tuple[str, ...]

    @property
    def running(self) -> bool: ...

    @property
    def pc(self) -> int: ...

    def interrupts(self) -> dict[str, bool]: ...

    def interrupt_counts(self) -> Any: ...

    def execute_unit(self, ctx: UnitContext) -> Touched: ...


def step_of(trace: list[Any]) -> Any:
    """A block's step for a unit that handed the recorder ``trace``: its one kept run's data
    part, NO_DATA, or GENERAL (nothing, or a run kept just now)."""
    if len(trace) == 1 and (trace[0] is NO_DATA or callable(trace[0])):
        return trace[0]
    return GENERAL


class Block(NamedTuple):
    """The units a run made from one start state (:meth:`BlockReplay.run`)."""
    words: bytes             # the command stream they ran
    steps: list[Any]         # per unit: NO_DATA, GENERAL or a kept run's data part
    states: list[tuple[Any, ...]]  # the state at each unit boundary (len(steps) + 1)
    units: list[RanUnit]     # per unit: (pc, the ranges it wrote)
    #: per unit: (the ranges it read, the ranges it wrote), as its Touched had them (step)
    touched: list[tuple[list[tuple[int, int]], list[tuple[int, int]]]]
    #: per unit boundary: what of the start key ``states`` lacks (the SET state's ids, the
    #: power mask) (step)
    marks: list[tuple[Any, ...]]


class BlockReplay:
    """The blocks of one device, by start state."""

    BLOCKS_MAX = 8
    #: stored recordings in a row that no replay used: the start states do not come again
    #: (the PMU's counters add up from run to run, say): no more recording (a recording costs
    #: ~50 % more than the run) until a stored block is replayed
    UNREPLAYED_MAX = 4

    def __init__(self, dev: BlockHost, cond_key: int) -> None:
        self.dev = dev
        self._cond_key = cond_key  # COND_STATUS's key in a register snapshot
        #: blocks by start state (None: that state is not replayed); None: no blocks at all
        self.stored: dict[tuple[Any, ...], tuple[Any, Block | None]] | None = {}
        self.unreplayed = 0
        #: replays run the blocks' operation tables (False: every step its closure)
        self.executor = True
        self._tables: dict[int, tuple[Block, Table]] = {}  # by id of the block
        #: table rows run so far (tests see the executor ran)
        self.rows_run = 0
        #: (block, unit index): where the last unit run one by one (:meth:`step`) left a
        #: stored block's recording; checked against the state before it is used
        self._at: tuple[Block, int] | None = None
        #: units :meth:`step` ran as their table's rows (tests see it did)
        self.units_stepped = 0
        self._changed: dict[int, Any] = {}  # _changes, per block (kept_for)

    def run(self, halt: threading.Event) -> list[RanUnit] | None:
        """Device.run_block. From a state (every register but COND_STATUS, the SET state, the
        chain bookkeeping, the stop state) and command stream seen before, the units that run
        made are replayed at once: each operation's kept run without its accounting (ops:
        reads, kernel, OFM write, FIFO pops and pushes, DMA copies), nothing for waits, and
        the state the recording left after the last unit (registers, SET state, chain
        bookkeeping, and the statistics and cycles it added). What the commands decide does
        not depend on the data (the kept runs check the weight and scale bytes they depend
        on), so the result is the units' one by one; a unit without a kept run (an operation
        not kept, a conditional branch, a kept run whose check fails) runs through the general
        path from the state after the units before it, and the replay ends there if that unit
        leaves other registers than recorded. A run from a new state is recorded, and stored if no
        operation kept its run just then (the first run of a program keeps them, the next
        one records), it ran to the NPU's stop or to a unit that changed the interrupt lines
        (a block ends there: a host program takes the interrupt after it), and it did not
        write its own command stream. The result flag (COND_STATUS) is the data's: left as
        the units set it. Why: a MobileNet inference spent most of its time in the per-unit
        path around its kernels (~8 ms of Python around ~2 ms of kernels)."""
        dev = self.dev
        if self.stored is None or dev.port.trace is not None or not dev.running:
            return None
        held, ids = dev.sets.held()
        key = self._key(ids)
        entry = self.stored.get(key)
        if entry is not None and entry[1] is None:
            return None
        try:
            words = dev.stream.words().tobytes()
        except NpuBusFault:
            return None
        blk = None if entry is None else entry[1]
        if blk is None or blk.words != words:
            if self.unreplayed >= self.UNREPLAYED_MAX:
                return None
            return self.record(key, held, words, halt)
        self.unreplayed = 0
        return self.replay(blk, halt)

    def _regs_but_flag(self) -> dict[int, int]:
        """Every register's value but COND_STATUS (the result flag is the data's: a block
        neither keys on it nor restores it)."""
        regs = self.dev.regs.snapshot()
        del regs[self._cond_key]
        return regs

    def _chain_state(self) -> tuple[int, int, frozenset[int]]:
        n = self.dev.npu
        return n.chain_length, n.num_ifm, frozenset(n.fifo_valid)

    def _key(self, set_ids: tuple[Any, ...]) -> tuple[Any, ...]:
        d = self.dev
        return (tuple(self._regs_but_flag().items()), set_ids, self._chain_state(),
                d.resumable, d.pmu_mask_enable, d.power_masked, d.stop_reason)

    def _state(self) -> tuple[Any, ...]:
        d = self.dev
        return (self._regs_but_flag(), d.sets.copy(), self._chain_state(), dict(d.stats),
                d.cycles, d.resumable, d.pmu_mask_enable, d.stop_reason)

    def _mark(self) -> tuple[Any, ...]:
        d = self.dev
        return d.sets.held()[1], d.power_masked

    def _execute(self, halt: threading.Event) -> Touched:
        d = self.dev
        return d.execute_unit(UnitContext(halt, frozenset(), d.granularities[0]))

    def record(self, key: tuple[Any, ...], held: tuple[Any, ...], words: bytes,
               halt: threading.Event) -> list[RanUnit]:
        """Run units one by one as run control does, recording the block; the units' (pc,
        written ranges)."""
        d = self.dev
        assert self.stored is not None
        states, steps = [self._state()], []
        units: list[RanUnit] = []
        touched: list[tuple[list[tuple[int, int]], list[tuple[int, int]]]] = []
        marks = [self._mark()]
        qbase = d.stream.qbase
        own_stream = interrupted = fresh = False
        lines = (d.interrupts(), d.interrupt_counts())
        trace: list[Any] = []
        d.port.trace = trace
        try:
            while d.running and not halt.is_set() and not interrupted:
                pc = d.pc
                t = self._execute(halt)
                if t.partial:
                    return units
                d.units_done += 1
                units.append((pc, t.writes))
                touched.append((list(t.reads), list(t.writes)))
                fresh |= ops.KEPT_NOW in trace
                steps.append(step_of(trace))
                trace.clear()
                states.append(self._state())
                marks.append(self._mark())
                own_stream |= any(s < qbase + len(words) and e > qbase for s, e in t.writes)
                interrupted = (d.interrupts(), d.interrupt_counts()) != lines
        finally:
            d.port.trace = None
        if (d.running and not interrupted) or fresh:  # halted; or runs kept just now
            return units
        if len(self.stored) >= self.BLOCKS_MAX:
            self.stored.clear()
        self.stored[key] = (held, None if own_stream else
                            Block(words, steps, states, units, touched, marks))
        self.unreplayed += 1
        return units

    def _table(self, blk: Block) -> Table | None:
        """The block's operation table (executor.py), made on its first replay and kept while
        the block's steps are the ones it was made from (a replay replaces a step whose kept
        run no longer applied; a test may too)."""
        if not self.executor:
            return None
        hit = self._tables.get(id(blk))
        if hit is not None and hit[0] is blk and hit[1].steps == blk.steps:
            return hit[1]
        if len(self._tables) >= self.BLOCKS_MAX:
            self._tables.clear()
        table = Table(blk.steps, NO_DATA, self.dev.port.lut)
        self._tables[id(blk)] = (blk, table)
        return table

    def replay(self, blk: Block, halt: threading.Event) -> list[RanUnit]:
        """The block's steps in order: runs of steps the operation table holds through its
        compiled calls (executor.py; a halt is seen between calls), the others through their
        closures or the general path."""
        d = self.dev
        base = (dict(d.stats), d.cycles)
        u0 = d.units_done
        port = d.port
        table = self._table(blk)
        k, n = 0, len(blk.steps)
        while k < n:
            step = blk.steps[k]
            if halt.is_set():
                self._materialize(blk, k, base)
                d.units_done = u0 + k
                return blk.units[:k]
            stop = None if table is None or k not in table.runs else \
                table.run(k, port, halt)
            if stop is not None:  # at the run's end, a halt, or a step whose streams changed
                assert table is not None  # (it ran)     (its closure finds out)
                self.rows_run += table.rows_run
                if stop != k:
                    k = stop
                    continue
            if step is NO_DATA or (step is not GENERAL and step(port)):
                k += 1
                continue
            # through the general path from the state after the units before it
            self._materialize(blk, k, base)
            d.units_done = u0 + k
            pc = d.pc
            trace: list[Any] = []
            port.trace = trace
            try:
                t = self._execute(halt)
                if callable(step_of(trace)):
                    blk.steps[k] = trace[0]  # a kept run now: the next replay takes it
                    table = None  # (and makes the block's table anew)
            finally:
                port.trace = None
            if t.partial:
                return blk.units[:k]
            d.units_done = u0 + k + 1
            if self._regs_but_flag() != blk.states[k + 1][0]:  # another path than recorded
                return blk.units[:k] + [(pc, t.writes)]         # (a branch)
            k += 1
        self._materialize(blk, n, base)
        d.units_done = u0 + n
        return blk.units

    # -- one unit at a time (issue 26 #7) --------------------------------------------------------
    def step(self, ctx: UnitContext) -> bool:
        """Run the next unit as its rows of a stored block's operation table, where the state
        before it is the state the block's recording had before that unit (every register
        but COND_STATUS, the SET state, the chain bookkeeping, the stop and mask state, the
        command stream: a block's start key, at that unit), and put the state the recording
        had after it: registers, SET state, chain bookkeeping, the statistics and cycles it
        added, and in ``ctx.touched`` the ranges it read and wrote. True: done so; False:
        nothing done (the model's per-operation path runs the unit). Why it is the unit's
        result: the rows are the same kernels with the same arguments as its kept run (the
        table's stream checks fail, doing nothing, where the weights changed), and what the
        commands decide does not depend on the data (:meth:`run`); a unit without data (a
        wait, NPU_OP_PMU_MASK) is its state after, as a replay has it. Only whole units with
        no breakpoint inside, outside a recording; never a block's last unit (the one that may
        change the interrupt lines), a unit through the general path (no kept run, a
        conditional branch), or one popping a chaining FIFO that does not hold what its pair
        pushed (Table.run_step). Why: a step through the per-operation path cost ~4x a unit
        of a continue (the bench_api demo: ~65 us against ~14 us)."""
        d = self.dev
        if (self.stored is None or not self.executor or d.port.trace is not None
                or ctx.breakpoints or ctx.granularity != d.granularities[0] or not d.running):
            self._at = None
            return False
        found = self._found()
        self._at = None if found is None else (found[0], found[1] + 1)  # checked next time
        if found is None:
            return False
        blk, k = found
        if k + 1 >= len(blk.steps):
            return False
        if blk.steps[k] is not NO_DATA:  # (a wait, PMU mask: nothing but the state after)
            table = self._table(blk)
            if table is None or not table.run_step(k, d.port):
                return False
        self._advance(blk, k)
        reads, writes = blk.touched[k]
        ctx.touched.reads.extend(reads)
        ctx.touched.writes.extend(writes)
        self.units_stepped += 1
        return True

    def _found(self) -> tuple[Block, int] | None:
        """(a stored block, the index of its unit the state is before), or None: the unit after
        the last one run (checked), else a block whose start state this is. The cheap checks
        first: a unit with no block to continue or start pays ~1 us."""
        d = self.dev
        assert self.stored is not None
        at = self._at
        if at is not None and at[1] < len(at[0].steps) and self._is_at(*at):
            blk: Block | None = at[0]
            k = at[1]
        else:
            pc = d.pc
            if not any(e[1] is not None and e[1].units and e[1].units[0][0] == pc
                       for e in self.stored.values()):
                return None  # (no block starts here: the start key's ~7 us not spent)
            entry = self.stored.get(self._key(d.sets.held()[1]))
            blk, k = (None, 0) if entry is None else (entry[1], 0)
        if blk is None:
            return None
        try:
            words = d.stream.words()
        except NpuBusFault:
            return None
        return (blk, k) if blk.words == words.tobytes() else None

    def _is_at(self, blk: Block, k: int) -> bool:
        """The state is the recording's before unit ``k`` (the block's key at that unit)."""
        d = self.dev
        regs, _, chain, _, _, resumable, pme, reason = blk.states[k]
        return ((d.sets.held()[1], d.power_masked) == blk.marks[k]
                and (d.resumable, d.pmu_mask_enable, d.stop_reason) == (resumable, pme, reason)
                and self._chain_state() == chain and self._regs_but_flag() == regs)

    def _advance(self, blk: Block, k: int) -> None:
        """The state after unit ``k`` as the recording left it (registers but COND_STATUS, SET
        state, chain bookkeeping, stop state), with the statistics and cycles that unit
        added to the live ones. Only the registers the unit changed are stored (and logged
        for the history, as the unit's own stores are): the state was checked to be the
        recording's before it (:meth:`_found`)."""
        d = self.dev
        _, sets, (chain, num_ifm, valid), _, _, resumable, pme, reason = blk.states[k + 1]
        regs, stats, cycles = self._changes(blk, k)
        d.regs.redo(regs)
        d.sets = sets.copy()
        n = d.npu
        n.chain_length, n.num_ifm, n.fifo_valid = chain, num_ifm, set(valid)
        live = d.stats
        for name, v in stats:
            live[name] = live.get(name, 0) + v
        d.cycles += cycles
        d.resumable, d.pmu_mask_enable, d.stop_reason = resumable, pme, reason

    def _changes(self, blk: Block, k: int) -> tuple[dict[int, int], list[tuple[str, int]], int]:
        """What unit ``k`` of ``blk`` changed: (the registers it changed, their values after;
        the statistics it added to or made; cycles), worked out once per block and unit
        (kept with the block: ``kept_for``)."""
        kept = kept_for(self._changed, id(blk), blk, self.BLOCKS_MAX)
        hit = kept.get(k)
        if hit is None:
            (r0, _, _, s0, c0, *_), (r1, _, _, s1, c1, *_) = blk.states[k], blk.states[k + 1]
            hit = kept[k] = ({a: v for a, v in r1.items() if r0.get(a) != v},
                             [(n, v - s0.get(n, 0)) for n, v in s1.items()
                              if n not in s0 or v != s0[n]], c1 - c0)
        return hit

    def _materialize(self, blk: Block, k: int, base: tuple[dict[str, int], int]) -> None:
        """The state after the block's first ``k`` units: registers but COND_STATUS, SET
        state, chain bookkeeping and stop state as recorded, statistics and cycles the live
        ones at the replay's start (``base``) plus what the recording added up to there."""
        d = self.dev
        regs, sets, (chain, num_ifm, valid), stats, cycles, resumable, pme, reason = \
            blk.states[k]
        _, _, _, stats0, cycles0, *_ = blk.states[0]
        d.regs.restore(regs)  # (all but COND_STATUS)
        d.sets = sets.copy()
        n = d.npu
        n.chain_length, n.num_ifm, n.fifo_valid = chain, num_ifm, set(valid)
        live = dict(base[0])
        for name, v in stats.items():
            live[name] = live.get(name, 0) + v - stats0.get(name, 0)
        d.stats = live
        d.cycles = base[1] + cycles - cycles0
        d.resumable, d.pmu_mask_enable, d.stop_reason = resumable, pme, reason


#: a kept run's data part as a block holds it: ``step(port)`` redoes it (False, having done
#: nothing, when it no longer applies)
Step = Callable[[NpuPort], bool]
