"""Run control: the halted/running state of one device, its breakpoints and watchpoints, and the
worker thread that runs it so the server stays responsive (Ctrl-C, a second client's reads).

Every front end (each gdb connection, telnet, Tcl RPC, the TUI) shares one :class:`RunControl`
per device, so a breakpoint set from gdb shows in ``bp`` on telnet and a stop is seen by all.
"""
from __future__ import annotations

import queue
import threading
import traceback
import weakref
from typing import Callable

from .device import SIGTRAP, Device, Stop, Watchpoint
from .errors import DeviceError, TargetRunning

StopListener = Callable[[Stop], None]


class RunControl:
    #: seconds an idle worker thread waits for the next run before it ends
    IDLE_EXIT_S = 60.0

    def __init__(self, device: Device) -> None:
        self.device = device
        self.breakpoints: set[int] = set()
        self.watchpoints: list[Watchpoint] = []
        self.last_stop: Stop = Stop("halt", SIGTRAP, message="halted at start")
        self._halt = threading.Event()
        self._lock = threading.Lock()  # guards state transitions
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
        #: what `reset init` runs after the reset (OpenOCD's reset-init event): the stub sets it
        #: to reload the program, so `monitor reset init` starts the program over
        self.init_handler: Callable[[], object] | None = None

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

    def require_halted(self, what: str) -> None:
        if self.running:
            raise TargetRunning(what)

    # -- breakpoints and watchpoints (unlimited) ---------------------------------------------
    def add_breakpoint(self, addr: int) -> None:
        self.breakpoints.add(addr)

    def remove_breakpoint(self, addr: int) -> bool:
        if addr in self.breakpoints:
            self.breakpoints.discard(addr)
            return True
        return False

    def add_watchpoint(self, kind: str, addr: int, length: int) -> None:
        wp = Watchpoint(kind, addr, max(1, length))
        if wp not in self.watchpoints:
            self.watchpoints.append(wp)

    def remove_watchpoint(self, kind: str | None, addr: int, length: int | None = None) -> bool:
        before = len(self.watchpoints)
        self.watchpoints = [w for w in self.watchpoints
                            if not (w.start == addr and (kind is None or w.kind == kind)
                                    and (length is None or w.length == max(1, length)))]
        return len(self.watchpoints) != before

    # -- execution ---------------------------------------------------------------------------
    def resume(self) -> None:
        """Start running in the worker thread; returns at once."""
        self._start(lambda: self.device.run(set(self.breakpoints), list(self.watchpoints),
                                            self._halt))

    def start_step(self) -> None:
        """Start one unit in the worker thread; returns at once."""
        self._start(lambda: self.device.step(self._halt, list(self.watchpoints)))

    def step(self, timeout: float | None = None) -> Stop:
        self.start_step()
        return self.wait(timeout)

    def _start(self, job: Callable[[], Stop]) -> None:
        with self._lock:
            if self.running:
                raise TargetRunning("resume")
            self._halt.clear()
            self._idle.clear()
            if self._worker is None:
                self._worker = threading.Thread(target=RunControl._serve_jobs,
                                                args=(weakref.ref(self), self._jobs),
                                                daemon=True, name=f"{self.device.name}-run")
                self._worker.start()
            for fn in list(self._run_listeners):
                fn()
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
                with rc._lock:  # _start puts jobs under this lock: none can be left behind
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
        except Exception as e:  # a model bug must not kill the server: report it as a fault
            stop = Stop("fault", SIGTRAP, message=f"internal error: {e!r}\n"
                        + traceback.format_exc(limit=3))
        with self._lock:
            self.last_stop = stop
            self._idle.set()
        for fn in list(self._listeners):
            try:
                fn(stop)
            except Exception:
                pass

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
        """Reset the device. A running device is halted first. ``kind``: run | halt | init."""
        if self.running:
            self.halt_and_wait()
        self.device.reset(kind)
        if kind == "init" and self.init_handler is not None:
            self.init_handler()
        self.last_stop = Stop("halt", SIGTRAP, message=f"reset {kind}")
        if kind == "run":
            self.resume()
