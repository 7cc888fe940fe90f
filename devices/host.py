"""Host programs: the driver's side of a program, interleaved with the accelerator's units by run
control, so that ``continue`` in gdb behaves as the chip with its driver would.

A program the user brings (an ai8x-synthesis project, Vela's output, a pulp-nnx test, an NVDLA
trace) is more than register values: its driver writes registers, polls status until a value,
waits for an interrupt, runs an interrupt service routine, and finally checks the result. A
:class:`HostProgram` holds those steps in driver order. Time is the accelerator's: a host step
takes none. Run control (:mod:`.runcontrol`) advances the host program until it blocks (a poll
that does not hold yet, an interrupt not yet seen), then runs units until the host can go on:

* after every unit and every host step the interrupt lines are sampled; a line that rose, and
  every pulse of a pulsed line (Device.interrupt_counts), runs its ISR steps at once (as the CPU
  takes the interrupt) and counts one pending event for :class:`WaitIrq`;
* :class:`WaitIrq` consumes one pending event of its line (an event that came before the wait
  is not lost: the CPU's wait-for-interrupt returns at once when the event is pending);
* :class:`Poll` reads with :meth:`Device.host_read` (the driver's read, side effects included)
  until ``value & mask == expected``;
* when the accelerator has nothing to run and the host is blocked, the program is stuck: run
  control stops with a fault naming the step (file:line) and what it waits for.

Errors of a step (a bus error, a device fault) name the step's ``where`` (file:line).
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import BusError, DeviceError
from .ranges import merge_ranges

if TYPE_CHECKING:
    from .device import Device, Touched


@dataclass(frozen=True)
class CheckResult:
    """One check of a program's result: ``line`` is what ``accelstub run`` prints."""

    ok: bool
    line: str


class Step:
    """One driver action. :meth:`run` returns True when done, False when blocked (a blocked step
    changes nothing and is tried again later)."""

    where: str = ""
    #: the step changes no device state (it reads with the debugger's read at most), so the
    #: interrupt lines cannot have moved: HostProgram.advance does not sample them after it
    quiet: bool = False

    def run(self, hp: HostProgram) -> bool:
        raise NotImplementedError

    def waiting_for(self, hp: HostProgram) -> str:
        """What a blocked step waits for, for the stuck message."""
        return "nothing"


@dataclass
class Write(Step):
    """A store: ``op`` "=" writes ``data``; "|=" and "&=" read the word with the driver's read
    and store it combined with ``data``."""

    address: int
    data: bytes
    op: str = "="
    where: str = ""

    def run(self, hp: HostProgram) -> bool:
        dev = hp.device
        if self.op == "=":
            dev.write(self.address, self.data)
            return True
        old = int.from_bytes(dev.host_read(self.address, len(self.data)), "little")
        v = int.from_bytes(self.data, "little")
        new = old | v if self.op == "|=" else old & v
        dev.write(self.address, new.to_bytes(len(self.data), "little"))
        return True


@dataclass
class Poll(Step):
    """Read ``size`` bytes at ``address`` (the driver's read) until ``value & mask ==
    expected``."""

    address: int
    mask: int
    expected: int
    size: int = 4
    where: str = ""
    name: str = ""

    def _value(self, hp: HostProgram) -> int:
        return int.from_bytes(hp.device.host_read(self.address, self.size), "little")

    def run(self, hp: HostProgram) -> bool:
        return self._value(hp) & self.mask == self.expected

    def waiting_for(self, hp: HostProgram) -> str:
        what = self.name or f"{self.address:#010x}"
        return (f"{what} & {self.mask:#x} == {self.expected:#x} (reads "
                f"{self.device_value(hp):#x})")

    def device_value(self, hp: HostProgram) -> int:
        """The value as the debugger sees it (no side effects), for messages."""
        return int.from_bytes(hp.device.read(self.address, self.size), "little")


@dataclass
class WaitIrq(Step):
    """Wait for interrupt line ``line`` (a name of :meth:`Device.interrupts`)."""

    line: str
    where: str = ""
    quiet = True  # only the program's pending count changes (not a dataclass field)

    def run(self, hp: HostProgram) -> bool:
        if hp.pending[self.line] > 0:
            hp.pending[self.line] -= 1
            return True
        return False

    def waiting_for(self, hp: HostProgram) -> str:
        return f"interrupt {self.line}"


@dataclass
class Check(Step):
    """Check the result (a known answer, a CRC): ``check(hp)`` returns a CheckResult, or None
    for a check that reports only failures (a driver's status check on the way). ``quiet``:
    the check reads only with the debugger's read (Step.quiet); a driver's read may have side
    effects, so a check is not quiet unless its importer says so."""

    check: Callable[[HostProgram], CheckResult | None]
    where: str = ""
    quiet: bool = False

    def run(self, hp: HostProgram) -> bool:
        result = self.check(hp)
        if result is not None:
            hp.results.append(result)
        return True


@dataclass
class Call(Step):
    """A driver action the step forms above do not express (a vendor runtime's setup of many
    registers and memories): ``action(hp)`` acts on ``hp.device``."""

    action: Callable[[HostProgram], None]
    where: str = ""

    def run(self, hp: HostProgram) -> bool:
        self.action(hp)
        return True


@dataclass
class CheckWords(Step):
    """Compare 32-bit words of memory with a known answer ``(address, value, mask)`` (the
    sampleoutput.h form); a mismatch names the unit that last wrote the address."""

    expected: list[tuple[int, int, int]]
    where: str = ""

    def run(self, hp: HostProgram) -> bool:
        dev = hp.device
        for addr, exp, mask in self.expected:
            got = int.from_bytes(dev.read(addr, 4), "little") & mask
            if got != exp:
                pc = hp.writer_of(addr, 4)
                by = (f"written by {dev.unit_label(pc)}" if pc is not None else
                      f"not written by any {dev.unit_name}")
                hp.results.append(CheckResult(False, f"FAIL at 0x{addr:08x}: expected "
                                              f"0x{exp:08x}, got 0x{got:08x} ({by})"))
                return True
        hp.results.append(CheckResult(True, f"PASS ({len(self.expected)} words checked, "
                                      f"{hp.units} {dev.unit_name}s, {hp.elapsed_ms():.0f} ms)"))
        return True


def _step_error(step: Step, e: Exception) -> DeviceError:
    where = f"{step.where}: " if step.where else ""
    return DeviceError(f"{where}{e}")


class HostProgram:
    """The driver's steps of one loaded program, and its state while it runs."""

    def __init__(self, name: str, steps: list[Step], isr: dict[str, list[Step]] | None = None,
                 summary: str = "", total_units: int | None = None) -> None:
        self.name = name
        self.steps = steps
        self.isr = isr or {}
        self.summary = summary or f"{name}: {len(steps)} host steps"
        #: units the program runs in all (for progress lines), when the importer knows it
        self.total_units = total_units
        #: one-line summaries of the program's units in program order, when the importer found
        #: them (plan_units): the whole listing before the driver has queued the units
        self.plan: list[str] | None = None
        #: the vendor tool's cycle estimate when the program carries one: (where it comes
        #: from, total, per unit or empty), printed beside the modelled cycles by `run`
        self.vendor_cycles: tuple[str, int, list[int]] | None = None
        self.device: Device | None = None
        self.pos = 0
        self.pending: Counter[str] = Counter()
        self.levels: dict[str, bool] = {}
        self.pulses: dict[str, int] = {}
        #: values a step leaves for a later one (a job ID the driver acquired)
        self.vars: dict[str, object] = {}
        self.results: list[CheckResult] = []
        self.units = 0
        #: (pc of the unit, address ranges it wrote), every unit since the program started
        self.history: list[tuple[int, list[tuple[int, int]]]] = []
        #: seconds of emulation: time spent inside run control's runs (not time spent halted
        #: in a debugger), up to the program's end; ``t0``: start of the current run
        self.run_s = 0.0
        self.t0: float | None = None
        self.reported = False  # run control has reported the program's end
        #: called after every whole unit with (this program, the unit's Touched): an importer's
        #: per-unit check, which must read what the unit wrote before a later unit reuses it
        self.on_unit: Callable[[HostProgram, Touched], None] | None = None

    # -- run control's side ---------------------------------------------------------------------
    def start(self, device: Device) -> None:
        """Bind to ``device`` (interrupt levels now are the baseline: a line already high is not
        an event)."""
        self.device = device
        self.levels = dict(device.interrupts())
        self.pulses = dict(device.interrupt_counts())
        device.program_started(self)

    @property
    def finished(self) -> bool:
        return self.pos >= len(self.steps)

    def advance(self) -> bool:
        """Run steps until one blocks or the program ends; True if any step ran."""
        ran = False
        while self.pos < len(self.steps):
            step = self.steps[self.pos]
            if not self._run(step):
                return ran
            self.pos += 1
            ran = True
            if not step.quiet:  # a quiet step cannot have moved an interrupt line
                self._take_interrupts()
            if self.pos == len(self.steps):
                self.run_ended()  # the clock of the PASS line stops at the program's end
        return ran

    def waits_for_interrupt(self) -> bool:
        """Whether the program can do nothing before an interrupt event (its step waits for one
        that is not pending, or it has ended) and nothing after each unit (no on_unit): run
        control may then run units in blocks, which end at the latest after a unit that
        changed the interrupt lines."""
        if self.on_unit is not None:
            return False
        if self.pos >= len(self.steps):
            return True
        step = self.steps[self.pos]
        return isinstance(step, WaitIrq) and self.pending[step.line] == 0

    def units_ran(self, units: list[tuple[int, list]]) -> None:
        """:meth:`unit_ran` of a block of whole units, each (pc, ranges it wrote): only the last
        can have changed the interrupt lines."""
        self.units += len(units)
        self.history.extend(units)
        self._take_interrupts()

    def unit_ran(self, pc: int, touched: Touched) -> None:
        """After a unit: record what it wrote, then take the interrupts that rose (ISR steps
        run at once, one pending event per rise)."""
        if not touched.partial:
            self.units += 1
        self.history.append((pc, touched.writes))
        if self.on_unit is not None and not touched.partial:
            self.on_unit(self, touched)
        self._take_interrupts()

    def _take_interrupts(self) -> None:
        """Lines that rose since the last sample, and each pulse of a pulsed line, run their ISR
        and count one pending event. A sample where no line moved and none pulsed (most of
        them) costs two C comparisons of dicts (issue 31 #2)."""
        dev = self.device
        now = dev.interrupts()
        counts = dev.interrupt_counts()
        levels, pulses = self.levels, self.pulses
        if now == levels and counts == pulses:
            return
        events = [line for line, level in now.items() if level and not levels.get(line, False)]
        for line, n in counts.items():  # (none for a count that went back: a rewind)
            events += [line] * (n - pulses.get(line, 0))
        pulses.update(counts)
        taken = False
        for line in events:
            for step in self.isr.get(line, ()):
                if not self._run(step):
                    raise _step_error(step, f"the ISR of {line} blocks at a step that "
                                      f"waits for {step.waiting_for(self)}")
                taken = True
            self.pending[line] += 1
        # levels after the ISRs: an ISR that clears its line makes the next rise an event
        self.levels = dict(dev.interrupts()) if taken else now

    def stuck_message(self) -> str:
        step = self.steps[self.pos]
        where = f"{step.where}: " if step.where else ""
        dev = self.device
        return (f"{where}the driver waits for {step.waiting_for(self)}, but the {dev.name} has "
                f"no {dev.unit_name} to run")

    # -- reverse execution (devices/history.py) -------------------------------------------------
    def mark(self) -> dict:
        """The driver's position at a unit boundary, for stepping back to it: a few small
        copies, never the steps or the per-unit write list (which only grow: their lengths are
        kept), so recording it after every unit costs the same at unit 1 and at unit 1000."""
        return {"pos": self.pos, "pending": self.pending.copy(), "levels": dict(self.levels),
                "pulses": dict(self.pulses), "vars": dict(self.vars),
                "results": len(self.results), "units": self.units,
                "history": len(self.history), "reported": self.reported}

    def back_to(self, mark: dict) -> None:
        """The position of :meth:`mark` again (what was appended since is dropped)."""
        self.pos, self.units, self.reported = mark["pos"], mark["units"], mark["reported"]
        self.pending, self.levels = mark["pending"].copy(), dict(mark["levels"])
        self.pulses, self.vars = dict(mark["pulses"]), dict(mark["vars"])
        del self.results[mark["results"]:]
        del self.history[mark["history"]:]

    # -- for checks --------------------------------------------------------------------------
    def writer_of(self, address: int, size: int = 1) -> int | None:
        """pc of the last unit since the start that wrote any of ``address``..+size."""
        for pc, writes in reversed(self.history):
            if any(s < address + size and address < e for s, e in writes):
                return pc
        return None

    def run_started(self) -> None:
        """Run control starts a run (continue, step): the emulation clock runs."""
        if self.t0 is None and not self.finished:
            self.t0 = time.perf_counter()

    def run_ended(self) -> None:
        """A run ended (a stop) or the program did: the clock stops until the next run."""
        if self.t0 is not None:
            self.run_s += time.perf_counter() - self.t0
            self.t0 = None

    def elapsed_ms(self) -> float:
        """Emulation time so far: the runs' time, not the time halted between them (a minute
        in the TUI or at a gdb prompt is not the program's time)."""
        now = time.perf_counter() - self.t0 if self.t0 is not None else 0.0
        return (self.run_s + now) * 1e3

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def _run(self, step: Step) -> bool:
        try:
            return step.run(self)
        except (BusError, DeviceError) as e:
            raise _step_error(step, e) from None


def plan_units(host: HostProgram, device: Device, retire: Callable[[Device], str | None],
               limit: int) -> list[str]:
    """The summaries of the units ``host`` makes ``device`` run, in program order, at most
    ``limit``: the driver's register steps played on ``device`` (a fresh one, thrown away), each
    unit retired by ``retire`` (its summary, the device's state moved on as after the unit,
    nothing computed; None: nothing to run). Memory writes and checks are skipped. Why: NE16
    and NVDLA reuse two register contexts, so only the driver knows what comes after the units
    queued now, and ``monitor units`` lists the whole program (issue 25 #7). The plan ends
    early where a step waits for a value only the data gives."""
    def plans(step: Step) -> bool:
        if isinstance(step, Write):
            region = device.bus.region_at(step.address)
            return region is not None and region.kind in ("registers", "pseudo")
        return not isinstance(step, (Check, CheckWords, Call))

    hp = HostProgram(host.name, [s for s in host.steps if plans(s)],
                     {line: [s for s in steps if plans(s)] for line, steps in host.isr.items()})
    out: list[str] = []
    try:
        hp.start(device)
        while len(out) < limit:
            hp.advance()
            summary = retire(device)
            if summary is None:
                break
            out.append(summary)
            hp._take_interrupts()
    except (BusError, DeviceError):
        pass  # the real run reports it; the plan is what came before
    return out


def apply_steps(device: Device, steps: list[Step]) -> None:
    """Run steps that cannot block (writes) on ``device`` outside a program: the benchmarks'
    and tests' way to re-arm a loaded program."""
    hp = HostProgram("steps", steps)
    hp.start(device)
    hp.advance()
    if not hp.finished:
        raise _step_error(steps[hp.pos], f"blocks: waits for {steps[hp.pos].waiting_for(hp)}")


def unit_output(device: Device, writes: list[tuple[int, int]]) -> bytes:
    """The bytes a unit wrote (its Touched.writes, merged, in address order), read back right
    after it: what ``run -v`` checksums and the per-operation reference holds. Read at once,
    since a later unit may reuse the memory (Vela's arena)."""
    return b"".join(device.read(s, e - s) for s, e in merge_ranges(writes))
