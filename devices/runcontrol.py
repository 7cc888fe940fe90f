"""Run control: the halted/running state of one device, its breakpoints and watchpoints, the host
program of the loaded program, the run loop, the device lock, and the worker thread that runs
the device so the server stays responsive (Ctrl-C, a second client's reads).

Every front end (each gdb connection, telnet, Tcl RPC, the TUI through gdb connections, the
``run`` command) shares one :class:`RunControl` per device, so a breakpoint set from gdb shows in
``bp`` on telnet, a stop is seen by all, and every change of the device goes through
:attr:`RunControl.lock` (:meth:`RunControl.halted_access`).

The run loop (:meth:`RunControl._loop`) owns what a run means for every device alike: the host
program advanced until it blocks, a breakpoint stops *before* its unit (not the first of a run),
one unit executed with a :class:`UnitContext` (halt request, breakpoints, granularity, touched
ranges), the interrupts it raised taken by the host program, a watchpoint stops *after* the unit
that touched it, and the end of the program (done, or a fault when the driver waits for
something the device will never do). Where no one looks at single units (no breakpoint,
watchpoint, unit listener or throttle, not a step; a host program only while it waits for an
interrupt) the device may run a block of units at once (:meth:`Device.run_block`), with the
same end state, the block ending at the latest after a unit that changed the interrupt lines.
"""
from __future__ import annotations

import contextlib
import copy
import queue
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator

import numpy as np

from .device import SIGINT, SIGTRAP, Device, Stop, Touched, UnitContext, Watchpoint
from .errors import BusError, DeviceError, TargetRunning
from .history import History
from .host import HostProgram

StopListener = Callable[[Stop], None]
#: the owner of breakpoints and watchpoints set by `bp`/`wp` (telnet, Tcl, monitor): OpenOCD's
#: target-level points, which no connection's end removes
TARGET_OWNER = "target"


class RunControl:
    #: seconds an idle worker thread waits for the next run before it ends
    IDLE_EXIT_S = 60.0

    def __init__(self, device: Device) -> None:
        self.device = device
        #: the device lock: taken by every front end to change the device (writes, loads,
        #: resets) and by the start of a run, so a change never lands inside a unit
        self.lock = threading.RLock()
        self.breakpoints: set[int] = set()
        #: who set each breakpoint: TARGET_OWNER (`bp`) or a gdb connection (``Z0``/``Z1``)
        self._bp_owners: dict[int, set[object]] = {}
        #: watchpoints in insertion order (a dict: O(1) insert and remove), with who set them
        self._watch: dict[Watchpoint, set[object]] = {}
        #: the same watchpoints by start address, so removing by address is O(1)
        self._watch_at: dict[int, dict[Watchpoint, None]] = {}
        self.host: HostProgram | None = None
        self.last_stop: Stop = Stop("halt", SIGTRAP, message="halted at start")
        self._halt = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        #: one worker thread reused by later runs, fed through _jobs: numba's thread pool and
        #: the kernels' per-thread work arrays (emu/scratch.py) belong to the thread that runs
        #: them, and a new thread per run paid for both again (page faults of megabytes of work
        #: arrays, a new OpenMP team) on every continue. It holds the RunControl only while a
        #: job runs and ends after IDLE_EXIT_S without one, so a dropped device is freed.
        self._worker: threading.Thread | None = None
        self._jobs: queue.SimpleQueue[Callable[[], Stop]] = queue.SimpleQueue()
        self._listeners: list[StopListener] = []
        self._run_listeners: list[Callable[[], None]] = []
        self._unit_listeners: list[Callable[[int], Stop | None]] = []
        self.last_unit_label = ""  # label of the unit that ran last (kept for unit listeners)
        self.last_unit_pc = 0  # pc the unit that ran last started at (kept for unit listeners)
        #: a stop a unit listener asked for (the per-layer diff's divergence breakpoint)
        self._unit_stop: Stop | None = None
        #: what the last unit read and wrote
        self.last_touched: Touched | None = None
        #: what `reset init` runs after the reset (OpenOCD's reset-init event): the stub sets it
        #: to reload the program, so `monitor reset init` starts the program over
        self.init_handler: Callable[[], object] | None = None
        #: reverse execution (devices/history.py): every unit boundary of the runs since the
        #: last reset, load or rewind, within ``history.budget`` bytes
        self.history = History(device.bus, device.regs)
        #: the scratch core registers and pc at the history's current boundary (_moved)
        self._at: tuple[dict, int] | None = None
        #: named whole-state snapshots (`monitor snapshot save NAME`), as :meth:`checkpoint`s
        self.snapshots: dict[str, dict] = {}

    # -- state ------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return not self._idle.is_set()

    @property
    def state(self) -> str:
        """OpenOCD's state names: "running" or "halted"."""
        return "running" if self.running else "halted"

    def add_stop_listener(self, fn: StopListener) -> None:
        self._listeners.append(fn)

    def remove_stop_listener(self, fn: StopListener) -> None:
        if fn in self._listeners:
            self._listeners.remove(fn)

    def add_run_listener(self, fn: Callable[[], None]) -> None:
        self._run_listeners.append(fn)

    def remove_run_listener(self, fn: Callable[[], None]) -> None:
        if fn in self._run_listeners:
            self._run_listeners.remove(fn)

    def add_unit_listener(self, fn: Callable[[int], Stop | None]) -> None:
        """``fn(units_done)`` after every unit, in the worker thread (progress lines). A Stop
        it returns ends the run after that unit, like a watchpoint (the per-layer diff's
        divergence breakpoint, devices/layer_diff.py)."""
        self._unit_listeners.append(fn)

    def remove_unit_listener(self, fn: Callable[[int], Stop | None]) -> None:
        if fn in self._unit_listeners:
            self._unit_listeners.remove(fn)

    def require_halted(self, what: str) -> None:
        if self.running:
            raise TargetRunning(what)

    @contextlib.contextmanager
    def halted_access(self, what: str) -> Iterator[Device]:
        """Hold the device lock for a change that needs the target halted (a write, a load, a
        reset); raises TargetRunning while it runs."""
        with self.lock:
            self.require_halted(what)
            yield self.device

    # -- programs --------------------------------------------------------------------------
    def attach(self, host: HostProgram | None) -> None:
        """Make ``host`` the driver of the device (None: no driver) and run its steps up to the
        first that waits, so the device sits armed before its first unit."""
        with self.halted_access("program load"):
            self.host = host
            self.history.clear()
            if host is not None:
                host.start(self.device)
                host.advance()
            self._start_history()

    def checkpoint(self, ranges: list[tuple[int, int]] | None = None) -> dict:
        """The halted state to come back to with :meth:`rewind`: registers, model state,
        counters, the host program's position (its steps are shared, not copied), and memory
        -- all of it, or only ``ranges`` ([start, end), e.g. what a run of the program writes;
        register windows in them are skipped, the registers are saved whole anyway). Why:
        ``accelstub eval`` runs the loaded program once per sample without loading it again;
        a whole-memory copy of NVDLA's or Ethos-U85's map costs 0.1-0.3 s, the ranges a run
        writes a fraction of a millisecond."""
        with self.halted_access("checkpoint"):
            dev, host = self.device, self.host
            snap = dev.snapshot(memory=ranges is None)
            snap["ranges"] = [(s, dev.read(s, e - s)) for s, e in self._memory(ranges or [])]
            keep = {id(dev): dev}
            if host is not None:
                keep |= {id(host.steps): host.steps, id(host.isr): host.isr}
            snap["host"] = copy.deepcopy(host, keep)
            snap["core"] = dict(dev.core)  # the scratch core registers (r0-r12, sp, lr, xpsr)
            return snap

    def _memory(self, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
        out = []
        for s, e in ranges:
            try:
                self.device.bus.memory_span(s, e - s)
            except BusError:
                continue  # a register window (restored whole) or outside the memories
            out.append((s, e))
        return out

    def rewind(self, snap: dict) -> None:
        """Back to a :meth:`checkpoint`: the device and its driver as they were then (memory
        outside a partial checkpoint's ranges stays as it is)."""
        with self.halted_access("rewind"):
            dev = self.device
            dev.restore(snap)
            for start, data in snap["ranges"]:
                mem, off = dev.bus.memory_span(start, len(data))
                mem.data[off:off + len(data)] = np.frombuffer(data, dtype=np.uint8)
                mem.touch()
            keep = {id(dev): dev}
            host = snap["host"]
            if host is not None:
                keep |= {id(host.steps): host.steps, id(host.isr): host.isr}
            self.host = copy.deepcopy(host, keep)
            dev.core = dict(snap["core"])  # every checkpoint keeps it
            self.history.clear()  # memory changed outside any recorded transition
            self._start_history()
            self.last_stop = Stop("halt", SIGTRAP, message="rewound")

    # -- named snapshots (`monitor snapshot`) ----------------------------------------------------
    def save_snapshot(self, name: str) -> None:
        """Keep the whole halted state (a full :meth:`checkpoint`) under ``name``, with the pc
        and units done for the listing; a name saved again is replaced."""
        snap = self.checkpoint()
        self.snapshots[name] = {"snap": snap, "pc": self.device.pc,
                                "units": self.device.units_done}

    def restore_snapshot(self, name: str) -> None:
        """Back to snapshot ``name`` (:meth:`rewind`: the reverse history starts again here,
        since nothing recorded leads from the state before to this one)."""
        self.rewind(self._snapshot(name)["snap"])
        self.last_stop = Stop("halt", SIGTRAP, message=f"restored snapshot {name}")

    def delete_snapshot(self, name: str) -> None:
        self._snapshot(name)
        del self.snapshots[name]

    def _snapshot(self, name: str) -> dict:
        if name not in self.snapshots:
            saved = ", ".join(self.snapshots) or "none"
            raise DeviceError(f"no snapshot named {name!r} (saved: {saved})")
        return self.snapshots[name]

    def _boundary_state(self) -> dict:
        """The small state of a unit boundary for the history: model state, counters, scratch
        core registers, the host program and its position (HostProgram.mark); memory and
        registers are the history's undo logs (Bus.write_log, RegisterFile.log)."""
        dev, host = self.device, self.host
        state = dev._state() if dev.state_is_copy else copy.deepcopy(dev._state())
        return {"state": state, "cycles": dev.cycles, "units_done": dev.units_done,
                "core": dict(dev.core),
                "pc": dev.pc, "host": host, "mark": host.mark() if host is not None else None}

    def _start_history(self) -> None:
        """A new history from here, where a program was loaded or a state restored: its shadow
        copy of every memory (0.2 s for NVDLA's 128 MiB) is paid by the load, not by the
        first continue (whose timeout it would eat)."""
        if self.history.enabled:
            self.history.begin(self._boundary_state())
            self._at = self._mark()

    def _mark(self) -> tuple[dict, int]:
        return dict(self.device.core), self.device.pc

    def _record(self, host: bool = False) -> None:
        """Close the history's transition at this boundary (History.record: a journaled leg,
        or a checkpoint that takes the small state)."""
        self.history.record(self._boundary_state, host)
        self._at = self._mark()

    def _sync_history(self) -> None:
        """At the start of a run: start the history, or record what changed while halted (the
        debugger's writes, a reload of the input) as a transition of its own, so going back
        over the next unit returns to the state the run started from."""
        h = self.history
        if not h.started:
            h.begin(self._boundary_state())
            self._at = self._mark()
        elif h.bus.write_log or self._moved() or h.hidden():
            self._record(host=True)
        else:  # CHECKPOINT_S counts run time, not the time halted since the last stop
            h.t_mark = time.perf_counter()

    def _moved(self) -> bool:
        """Whether registers, the scratch core registers or pc changed since the history's
        current boundary (memory writes are in Bus.write_log)."""
        dev = self.device
        return bool(dev.regs.log) or self._at != (dev.core, dev.pc)

    def _apply_boundary(self, b: dict) -> None:
        dev = self.device
        dev._set_state(copy.deepcopy(b["state"]))
        dev.cycles, dev.units_done = b["cycles"], b["units_done"]
        dev.core = dict(b["core"])
        self.host = b["host"]
        if self.host is not None:
            self.host.back_to(b["mark"])
        self._at = self._mark()

    # -- breakpoints and watchpoints (unlimited, O(1) insert and remove) -----------------------
    # Each point remembers who set it: TARGET_OWNER for OpenOCD's target-level `bp`/`wp`
    # (they stay until removed), or the gdb connection whose Z packet set it, so that a
    # connection's points go with it (drop_owner) and its ``z`` never removes a `bp` that
    # happens to sit at the same address. Removing with owner None removes whoever set it
    # (`rbp`/`rwp`, as OpenOCD's).
    def add_breakpoint(self, addr: int, owner: object = None) -> None:
        self._bp_owners.setdefault(addr, set()).add(TARGET_OWNER if owner is None else owner)
        self.breakpoints.add(addr)

    def remove_breakpoint(self, addr: int, owner: object = None) -> bool:
        owners = self._bp_owners.get(addr)
        if owners is None or (owner is not None and owner not in owners):
            return False
        if owner is None:
            owners.clear()
        else:
            owners.discard(owner)
        if not owners:
            del self._bp_owners[addr]
            self.breakpoints.discard(addr)
        return True

    def clear_breakpoints(self) -> None:
        self.breakpoints.clear()
        self._bp_owners.clear()

    def _breakpoint_pcs(self) -> frozenset[int]:
        """The breakpoints as the run loops compare them with a unit's pc (32-bit: gdb may
        send a sign-extended address), going forward and back alike."""
        return frozenset(b & 0xFFFFFFFF for b in self.breakpoints)

    @property
    def watchpoints(self) -> list[Watchpoint]:
        return list(self._watch)

    def watchpoints_of(self, owner: object) -> list[Watchpoint]:
        return [w for w, owners in self._watch.items() if owner in owners]

    def add_watchpoint(self, kind: str, addr: int, length: int, owner: object = None) -> None:
        w = Watchpoint(kind, addr, max(1, length))
        self._watch.setdefault(w, set()).add(TARGET_OWNER if owner is None else owner)
        self._watch_at.setdefault(addr, {})[w] = None

    def remove_watchpoint(self, kind: str | None, addr: int, length: int | None = None,
                          owner: object = None) -> bool:
        """Remove the watchpoints at ``addr`` matching ``kind`` and ``length`` (None: any), or
        only ``owner``'s hold on them. Looks only at the watchpoints starting at ``addr`` (the
        per-address index), so removing all of n watchpoints one by one (``rwp`` per address,
        gdb's ``z``) costs O(n), not O(n^2)."""
        here = self._watch_at.get(addr)
        if not here:
            return False
        found = False
        for w in [w for w in here if (kind is None or w.kind == kind)
                  and (length is None or w.length == max(1, length))]:
            owners = self._watch[w]
            if owner is None:
                owners.clear()
            elif owner in owners:
                owners.discard(owner)
            else:
                continue
            found = True
            if not owners:
                del self._watch[w]
                del here[w]
        if not here:
            del self._watch_at[addr]
        return found

    def clear_watchpoints(self) -> None:
        self._watch.clear()
        self._watch_at.clear()

    def drop_owner(self, owner: object) -> None:
        """Remove every breakpoint and watchpoint ``owner`` (a gdb connection that ended) set,
        except where someone else also set it."""
        for addr in [a for a, owners in self._bp_owners.items() if owner in owners]:
            self.remove_breakpoint(addr, owner)
        for w in self.watchpoints_of(owner):
            self.remove_watchpoint(w.kind, w.start, w.length, owner)

    # -- execution ---------------------------------------------------------------------------
    def resume(self) -> None:
        """Start running in the worker thread; returns at once."""
        self._start(lambda: self._loop(single=False))

    def start_step(self, granularity: str | None = None) -> None:
        """Start one unit (or one part of it at a finer ``granularity``) in the worker thread;
        returns at once."""
        if granularity is not None and granularity not in self.device.granularities:
            raise DeviceError(f"{self.device.name} steps by "
                              f"{', '.join(self.device.granularities)}, not {granularity!r}")
        self._start(lambda: self._loop(single=True, granularity=granularity))

    def step(self, timeout: float | None = None, granularity: str | None = None) -> Stop | None:
        self.start_step(granularity)
        return self.wait(timeout)

    def run(self, timeout: float | None = None) -> Stop | None:
        """Resume and wait for the stop (scripts, tests)."""
        self.resume()
        return self.wait(timeout)

    def start_reverse(self, single: bool) -> None:
        """Run backwards through the history in the worker thread (gdb's ``bs``/``bc``):
        one unit (``single``), or until a breakpoint, a watchpoint a unit going back touched,
        or the start of the history; returns at once."""
        self._start(lambda: self._back(single))

    def reverse(self, single: bool, timeout: float | None = None) -> Stop | None:
        """:meth:`start_reverse` and wait for the stop (scripts, tests, the Python API)."""
        self.start_reverse(single)
        return self.wait(timeout)

    def _back(self, single: bool) -> Stop:
        """The reverse run loop. A breakpoint stops at the boundary before its unit (as going
        forward), a watchpoint at the boundary before the unit that touched it: that unit is
        the next one, ``pc`` names it ("who wrote this tensor"). A block of the fast path is
        first replayed unit by unit (:meth:`_refine`) where a stop could fall inside it."""
        h, dev, halt = self.history, self.device, self._halt
        bps = self._breakpoint_pcs()
        wps = list(self._watch)
        if not (h.enabled and h.started):
            return Stop("step", replaylog="begin", message=self._begin_message())
        h.settle(self._boundary_state, self._apply_boundary)
        while True:
            if halt.is_set():
                return Stop("halt", SIGINT)
            if not h.entries:
                return Stop("step", replaylog="begin", message=self._begin_message())
            e = h.entries[-1]
            if e.steps > 1 and (single or wps or bps & e.inner_pcs()):
                gone = self._refine()
                if gone is None:
                    continue  # a host change at its end, if any, is gone back over
                reads, writes = [], gone[1]  # a unit cut part-way at its end
            else:
                h.undo_last(self._apply_boundary)
                if not e.units:
                    continue  # what changed while halted: not a unit, go on to the one before
                reads, writes = e.reads or [], e.writes
            self.last_touched = Touched(reads, writes)
            hit = watch_hit(wps, self.last_touched) if wps else None
            if hit is not None:
                return hit
            if single:
                return Stop("step")
            if dev.pc in bps:
                return Stop("breakpoint")

    def _refine(self) -> tuple[int, list[tuple[int, int]]] | None:
        """Replace the newest entry (legs of several units or host changes: journaled, a
        block of the fast path) by one entry per unit and per host change: back to its
        checkpoint, then forward again, each host change's redo applied and each unit run
        alone (the same end state: run_block's contract, and a run is deterministic), every
        boundary recorded whole, so going back can stop between them. A last leg that cannot
        be replayed is left out: a change made outside the bus's logs (going back passes
        it), or a unit cut part-way, returned as (pc, ranges written): going back has just
        passed it."""
        h = self.history
        e = h.undo_last(self._apply_boundary)
        legs = e.legs if e.legs[-1].replayable else e.legs[:-1]
        h.prepare(legs)
        h.fine = True
        try:
            for leg in legs:
                if leg.redo is not None:
                    h.apply_redo(leg, self._apply_boundary)
                    self._record(host=True)
                for _ in leg.units:
                    self._loop(single=True)
            if e.partial:
                last = e.legs[-1].units
                for _ in last[:-1]:
                    self._loop(single=True)
        finally:
            h.fine = False
        self._unit_stop = None
        return e.units[-1] if e.partial else None

    def _begin_message(self) -> str:
        h = self.history
        if not h.enabled:
            return "accelstub: no reverse-execution history: recording is off (--history-mib 0)"
        lost = (f"; {h.dropped} older boundaries were dropped for the history budget "
                f"({h.budget >> 20} MiB, --history-mib)" if h.dropped else "")
        return (f"accelstub: start of the recorded history, {self.device.units_done} "
                f"{self.device.unit_name}s done{lost}")

    def run_here(self, single: bool = False, granularity: str | None = None) -> Stop:
        """Run (or step) in the calling thread, with the same state, listeners and stop as a
        run in the worker: ``accelstub run`` and benchmarks, where no other client needs the
        server to stay responsive and a thread hand-off per unit would only cost time."""
        self._start(None)
        self._work(lambda: self._loop(single, granularity))
        return self.last_stop

    def reverse_here(self, single: bool) -> Stop:
        """:meth:`start_reverse` in the calling thread (the in-process Python API)."""
        self._start(None)
        self._work(lambda: self._back(single))
        return self.last_stop

    def _start(self, job: Callable[[], Stop] | None) -> None:
        """Mark running and hand ``job`` to the worker (None: the caller runs it)."""
        with self.lock:
            if self.running:
                raise TargetRunning("resume")
            self._halt.clear()
            self._idle.clear()
            for fn in list(self._run_listeners):
                fn()
            if job is None:
                return
            if self._worker is None:
                self._worker = threading.Thread(target=RunControl._serve_jobs,
                                                args=(weakref.ref(self), self._jobs),
                                                daemon=True, name=f"{self.device.name}-run")
                self._worker.start()
            self._jobs.put(job)

    @staticmethod
    def _serve_jobs(ref: weakref.ref, jobs: queue.SimpleQueue) -> None:
        while True:
            try:
                job = jobs.get(timeout=RunControl.IDLE_EXIT_S)
            except queue.Empty:
                rc = ref()
                if rc is None:
                    return
                with rc.lock:  # _start puts jobs under this lock: none can be left behind
                    if jobs.empty():
                        rc._worker = None
                        return
                continue
            rc = ref()
            if rc is not None:
                rc._work(job)
            del rc, job

    def _work(self, job: Callable[[], Stop]) -> None:
        try:
            stop = job()
        except DeviceError as e:
            stop = Stop("fault", SIGTRAP, message=str(e))
            self.history.clear()  # a unit that failed half-way recorded nothing it wrote
        except Exception as e:  # a model bug must not kill the server: report it as a fault
            stop = Stop("fault", SIGTRAP, message=f"internal error: {e!r}\n"
                        + traceback.format_exc(limit=3))
            self.history.clear()
        if self.host is not None:
            self.host.run_ended()
        with self.lock:
            self.last_stop = stop
            self._idle.set()
        for fn in list(self._listeners):
            try:
                fn(stop)
            except Exception:
                pass

    # -- the run loop --------------------------------------------------------------------------
    def _loop(self, single: bool, granularity: str | None = None) -> Stop:
        """Run one unit (``single``) or until a stop (:meth:`_run_loop`), and close the
        history's transition at the stop, a boundary a client may come back to."""
        stop = self._run_loop(single, granularity)
        if self.history.units:
            self._record()
        return stop

    def _run_loop(self, single: bool, granularity: str | None = None) -> Stop:
        """Run one unit (``single``) or until a stop; see the module docstring."""
        dev, host, halt = self.device, self.host, self._halt
        bps = frozenset() if single else self._breakpoint_pcs()
        wps = list(self._watch)
        grain = granularity or dev.granularities[0]
        # whole blocks of units where no one looks at single ones (Device.run_block); a host
        # program only while it waits for an interrupt (HostProgram.waits_for_interrupt)
        blocks = not (single or bps or wps or self._unit_listeners
                      or grain != dev.granularities[0] or dev.throttle_us)
        progressed = False
        rec = self.history.enabled
        if rec:
            self._sync_history()
        elif self.history.started:  # turned off since it began: what runs now is not recorded
            self.history.clear()
        if host is not None:
            host.run_started()
            # a program that ended during the last stop (after a watchpoint's unit, say) still
            # owes its done stop and its checks' lines
            progressed = host.advance() or (host.finished and not host.reported)
        first = True
        while True:
            if halt.is_set():
                return Stop("halt", SIGINT)
            if dev.finished():
                return self._end(progressed)
            if not first and bps and dev.pc in bps:
                return Stop("breakpoint")
            first = False
            if blocks and (host is None or host.waits_for_interrupt()):
                units = dev.run_block(halt)
                if units is not None:
                    progressed = progressed or bool(units)
                    if host is not None:
                        host.units_ran(units)
                        host.advance()
                    if rec and units:
                        self.history.note_block(units)
                        if self.history.due():
                            self._record()
                    continue
                blocks = False
            # (asked once: the history, the host program and unit listeners name the unit by it)
            unit_pc = dev.pc if rec or host is not None or self._unit_listeners else 0
            touched = self._unit(UnitContext(halt, bps, grain), unit_pc)
            progressed = True
            if touched.partial:
                if rec:
                    self.history.note(unit_pc, touched, partial=True)
                return Stop("halt", SIGINT) if halt.is_set() else Stop("step")
            hit = watch_hit(wps, touched)
            if hit is None and self._unit_stop is not None:  # a unit listener asked for it
                hit = self._unit_stop
            self._unit_stop = None
            if host is not None:
                host.advance()
            if rec:
                self.history.note(unit_pc, touched)
                if self.history.due():
                    self._record()
            if hit is not None:
                return hit
            if single:
                return self._end(True) if dev.finished() else Stop("step")

    def _unit(self, ctx: UnitContext, pc: int) -> Touched:
        """Run one unit at ``pc`` (the device's pc, read by the caller where the history, a
        host program or a unit listener needs it, else 0)."""
        dev, host = self.device, self.host
        throttle = dev.throttle_us
        t0 = time.perf_counter()
        if self._unit_listeners:  # their lines name the unit as it was when it started
            self.last_unit_label = dev.unit_label(pc)
            self.last_unit_pc = pc
        touched = dev.execute_unit(ctx)
        self.last_touched = touched  # for unit listeners (run -v checksums what a unit wrote)
        if not touched.partial:
            dev.units_done += 1
        if host is not None:
            host.unit_ran(pc, touched)
        for fn in list(self._unit_listeners):
            said = fn(dev.units_done)
            if isinstance(said, Stop) and self._unit_stop is None:
                self._unit_stop = said
        if throttle:
            left = throttle / 1e6 - (time.perf_counter() - t0)
            if left > 0:
                ctx.halt.wait(left)
        return touched

    def _end(self, progressed: bool) -> Stop:
        """The device has nothing to run: the program is done, stuck, or there was nothing."""
        dev, host = self.device, self.host
        if host is not None and not host.finished:
            return Stop("fault", message=host.stuck_message())
        if not progressed:
            if dev.at_end():  # a step or continue after the end: say so, pc stays there
                again = "; 'reset init' loads it again" if self.init_handler else ""
                return Stop("idle", message=f"the program has ended: pc {dev.pc:#010x} is its "
                            f"end address (EMU_END), no {dev.unit_name} left to run{again}")
            return Stop("idle", message=dev.idle_message())
        lines = [dev.done_message()] + [r.line for r in (host.results if host else ())]
        if host is not None:
            host.reported = True
        return Stop("done", message="\n".join(lines))

    # -- halting and resetting ------------------------------------------------------------------
    def halt(self) -> None:
        """Request a halt; the worker stops at the next check (between units or inside one)."""
        if self.running:
            self._halt.set()

    def wait(self, timeout: float | None = None) -> Stop | None:
        """Wait until halted; returns the last stop, or None on timeout."""
        if not self._idle.wait(timeout):
            return None
        return self.last_stop

    def halt_and_wait(self, timeout: float = 5.0) -> Stop | None:
        self.halt()
        return self.wait(timeout)

    def reset(self, kind: str = "halt") -> None:
        """Reset the device. A running device is halted first. ``kind``: run | halt | init. The
        loaded program's driver is dropped (the hardware forgot its setup); ``init`` loads the
        program again through :attr:`init_handler`.

        A reset that fails (the program became invalid on disk, a device error) leaves a state
        that says so and mixes nothing stale in: halted, no driver, the stop of a reset
        (debug-request, "reset KIND failed") -- never the last run's program-exit beside the
        reset's zeroed counters. The error goes on to the caller."""
        if self.running:
            self.halt_and_wait()
        with self.halted_access("reset"):
            self.host = None
            self.history.clear()
            self.last_stop = Stop("halt", SIGTRAP, message=f"reset {kind} failed")
            self.device.reset(kind)
            if kind == "init" and self.init_handler is not None:
                try:
                    self.init_handler()
                except Exception:
                    self.host = None  # a load that failed half-way drives nothing
                    raise
            self.last_stop = Stop("halt", SIGTRAP, message=f"reset {kind}")
        if kind == "run":
            self.resume()


def watch_hit(watchpoints: list[Watchpoint], t: Touched) -> Stop | None:
    """The stop the first of ``watchpoints`` that ``t`` touched causes (None: none)."""
    for wp in watchpoints:
        addr = None
        kind = "watch"
        if wp.kind in ("w", "a"):
            addr = wp.hit(t.writes)
        if addr is None and wp.kind in ("r", "a"):
            addr = wp.hit(t.reads)
            kind = "rwatch" if wp.kind == "r" else "awatch"
        elif addr is not None and wp.kind == "a":
            kind = "awatch"
        if addr is not None:
            return Stop("watchpoint", watch=(kind, addr))
    return None
