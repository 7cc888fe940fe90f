"""The Device interface (DESIGN.md "The Device interface") and what all models share.

A model subclasses :class:`Device` and implements :meth:`Device.execute_unit`, :attr:`pc`,
:meth:`units` and :meth:`finished`; stepping, running with breakpoints and watchpoints, halt
requests, the emulator pseudo-registers and snapshots are done here once for all accelerators.
"""
from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass, field

from .bus import Bus
from .description import Description
from .errors import DeviceError
from .registers import RegisterFile

SIGINT, SIGTRAP = 2, 5

#: The virtual host core of the gdb view (DESIGN.md "GDB view"): r0-r12, sp, lr are scratch
#: registers a debugger may use freely; pc is the device's pc; xpsr reads 0x01000000 (Thumb).
CORE_REGS = tuple(f"r{i}" for i in range(13)) + ("sp", "lr", "pc", "xpsr")


@dataclass(frozen=True)
class Stop:
    """Why the device halted. ``reason`` is one of: step, breakpoint, watchpoint, halt (a halt
    request, e.g. Ctrl-C), done (the program completed), fault (the model reported an error),
    idle (nothing to run)."""

    reason: str
    signal: int = SIGTRAP
    watch: tuple[str, int] | None = None  # ("watch" | "rwatch" | "awatch", first address)
    message: str = ""

    #: OpenOCD's debug-reason names (shared/reference/gdb-stub-anchors.md §3.1)
    @property
    def debug_reason(self) -> str:
        return {"step": "single-step", "breakpoint": "breakpoint", "watchpoint": "watchpoint",
                "halt": "debug-request", "done": "program-exit", "fault": "exception-catch",
                "idle": "debug-request"}.get(self.reason, "undefined")


@dataclass(frozen=True)
class Watchpoint:
    kind: str  # "w" (write), "r" (read), "a" (access)
    start: int
    length: int

    def hit(self, ranges: list[tuple[int, int]]) -> int | None:
        """First address of this watchpoint that one of ``ranges`` ([start, end)) touches."""
        end = self.start + self.length
        first = None
        for s, e in ranges:
            if s < end and self.start < e:
                a = max(s, self.start)
                first = a if first is None else min(first, a)
        return first


@dataclass
class Touched:
    """Address ranges ([start, end)) one unit read and wrote, for watchpoints."""

    reads: list[tuple[int, int]] = field(default_factory=list)
    writes: list[tuple[int, int]] = field(default_factory=list)
    interrupted: bool = False  # the unit saw a halt request and stopped early (resumable)


@dataclass(frozen=True)
class Unit:
    """One entry of the program listing: a layer, a command or a job."""

    address: int
    label: str
    summary: str


class Device:
    """Base of every accelerator model."""

    #: device key, e.g. "max78000"
    name = "device"
    #: word used in listings: layer / command / job
    unit_name = "unit"

    def __init__(self, description: Description) -> None:
        self.description = description
        self.regs = RegisterFile(description)
        self.bus = Bus(description, self.regs)
        self.cycles = 0
        self.units_done = 0
        self.core = {name: 0 for name in CORE_REGS if name != "pc"}
        self.core["xpsr"] = 0x01000000
        self._emu_regs = {r.name: r for r in description.registers if r.block == "emu"}
        if self._emu_regs:
            for name in self._emu_regs:
                self.regs.on_read(name, self._read_emu)

    # -- debugger view of memory --------------------------------------------------------------
    def read(self, addr: int, size: int) -> bytes:
        """The debugger's read: no side effects (no FIFO pop, no clear-on-read)."""
        return self.bus.read(addr, size)

    def write(self, addr: int, data: bytes) -> None:
        """A bus write with the side effects of the host CPU's store."""
        self.bus.write(addr, data)

    def read_register(self, name: str) -> int:
        return self.regs.read(name)

    def write_register(self, name: str, value: int) -> None:
        reg = self.description.register(name)
        self.bus.write(reg.address, (value & ((1 << reg.bits) - 1)).to_bytes(reg.bits // 8,
                                                                             "little"))

    def read_core(self, name: str) -> int:
        return self.pc if name == "pc" else self.core[name]

    def write_core(self, name: str, value: int) -> None:
        if name == "pc":
            if value != self.pc:
                self.set_pc(value)
        else:
            self.core[name] = value & 0xFFFFFFFF

    # -- to implement -----------------------------------------------------------------------
    @property
    def pc(self) -> int:
        raise NotImplementedError

    def set_pc(self, address: int) -> None:
        raise DeviceError(f"{self.name}: the next {self.unit_name} cannot be chosen by writing pc")

    def units(self) -> list[Unit]:
        return []

    def finished(self) -> bool:
        """True when there is no next unit to execute."""
        raise NotImplementedError

    def execute_unit(self, halt_requested: threading.Event) -> Touched:
        """Run exactly one unit and return what it touched."""
        raise NotImplementedError

    def interrupts(self) -> dict[str, bool]:
        """Interrupt lines by name and their level, for `poll`, the TUI and stop messages."""
        return {}

    def counters(self) -> dict[str, int]:
        return {"cycles": self.cycles, "units": self.units_done}

    def reset(self, kind: str = "halt") -> None:
        """Hardware reset: registers to their reset values, memories kept (as on silicon)."""
        self.regs.reset()
        self.cycles = 0
        self.units_done = 0

    # -- run control ------------------------------------------------------------------------
    def _unit(self, halt_requested: threading.Event) -> Touched:
        throttle = self.throttle_us
        t0 = time.perf_counter()
        touched = self.execute_unit(halt_requested)
        if not touched.interrupted:
            self.units_done += 1
        if throttle:
            left = throttle / 1e6 - (time.perf_counter() - t0)
            if left > 0:
                halt_requested.wait(left)
        return touched

    def step(self, halt_requested: threading.Event | None = None,
             watchpoints: list[Watchpoint] = ()) -> Stop:
        """Run exactly one unit and halt."""
        if self.finished():
            return Stop("idle", message=self.idle_message())
        touched = self._unit(halt_requested or threading.Event())
        if touched.interrupted:
            return Stop("halt", SIGINT)
        hit = self._watch_hit(watchpoints, touched)
        if hit is not None:
            return hit
        if self.finished():
            return Stop("done", message=self.done_message())
        return Stop("step")

    def run(self, breakpoints: set[int], watchpoints: list[Watchpoint],
            halt_requested: threading.Event) -> Stop:
        """Run until done, a breakpoint (before its unit), a watchpoint (after the unit that
        touched it), a fault or a halt request (checked between units and inside long ones)."""
        if self.finished():
            return Stop("idle", message=self.idle_message())
        first = True
        while True:
            if halt_requested.is_set():
                return Stop("halt", SIGINT)
            if not first and self.pc in breakpoints:
                return Stop("breakpoint")
            first = False
            touched = self._unit(halt_requested)
            if touched.interrupted:
                return Stop("halt", SIGINT)
            hit = self._watch_hit(watchpoints, touched)
            if hit is not None:
                return hit
            if self.finished():
                return Stop("done", message=self.done_message())

    def idle_message(self) -> str:
        return f"no {self.unit_name} left to run"

    def done_message(self) -> str:
        return f"program complete after {self.units_done} {self.unit_name}s"

    @staticmethod
    def _watch_hit(watchpoints: list[Watchpoint], t: Touched) -> Stop | None:
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

    # -- emulator pseudo-registers (block "emu", outside the hardware map) --------------------
    @property
    def throttle_us(self) -> int:
        if "EMU_THROTTLE_US" in self._emu_regs:
            return self.regs.peek("EMU_THROTTLE_US")
        return 0

    def _read_emu(self, reg, stored: int) -> int:
        name = reg.name
        if name == "EMU_PC":
            return self.pc
        if name == "EMU_UNIT":
            return self.units_done
        if name == "EMU_UNITS":
            return len(self.units())
        if name == "EMU_CYCLES_LO":
            return self.cycles & 0xFFFFFFFF
        if name == "EMU_CYCLES_HI":
            return (self.cycles >> 32) & 0xFFFFFFFF
        if name == "EMU_STATE":
            return 2 if self.finished() else 0
        return stored

    # -- snapshots ---------------------------------------------------------------------------
    def snapshot(self) -> dict:
        return {"regs": self.regs.snapshot(), "mem": self.bus.snapshot(),
                "state": copy.deepcopy(self._state()), "cycles": self.cycles,
                "units_done": self.units_done}

    def restore(self, snap: dict) -> None:
        self.regs.restore(snap["regs"])
        self.bus.restore(snap["mem"])
        self._set_state(copy.deepcopy(snap["state"]))
        self.cycles, self.units_done = snap["cycles"], snap["units_done"]

    def _state(self) -> dict:
        """Model state that is not in registers or memories (override)."""
        return {}

    def _set_state(self, state: dict) -> None:
        pass
