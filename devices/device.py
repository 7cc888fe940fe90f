"""The Device contract (docs/design-notes.md "Device contract"): what every accelerator model
offers, and every optional capability with its default, so that stub/, tui/, the CLI and run control
never look for a feature with ``getattr`` or by device name.

A model subclasses :class:`Device` and implements the four required members: :attr:`Device.pc`,
:meth:`Device.finished`, :meth:`Device.execute_unit` and (for listings) :meth:`Device.units`.
Everything else has a default here:

=====================  ==========================================================================
capability             default
=====================  ==========================================================================
granularities          ``(unit_name,)``: a step runs one whole unit
set_pc                 refused (the next unit cannot be chosen)
run_block              ``None``: no fast path; run control runs unit by unit
host_read              the debugger's read (no host-visible side effects)
load_program           ``None``: no importer; a command script is the only program form
program_started        nothing (a device that lists its program from the driver's plan)
unit_tensors           none declared (no tensor view, diff or dataset run for the unit)
program_io             the first unit's inputs and the last unit's outputs
layer_references       the generic per-layer .npz (devices/layer_diff.py)
monitor_commands       none beyond the shared OpenOCD table
interrupts             no interrupt lines
interrupt_counts       no pulsed lines
counters               modelled cycles and units run
bank_index             refused: only devices whose description has ``bank_select = "device"``
unit_label             the listing's label of the unit at an address
idle_message           "no <unit> left to run"
done_message           "program complete after N <unit>s"
reset                  registers to reset values, memories kept, counters cleared
_state / _set_state    no model state beyond registers and memories (snapshots, history)
state_is_copy          False: the history deep-copies ``_state()`` at each recorded boundary
=====================  ==========================================================================

Running (step, continue, breakpoints, watchpoints, halt requests, host programs) is run
control's (:mod:`.runcontrol`); a device only executes one unit when asked, through
:meth:`Device.execute_unit` with a :class:`UnitContext`.
"""
from __future__ import annotations

import copy
import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .bus import Bus
from .description import Description, Register
from .errors import DeviceError
from .registers import RegisterFile

if TYPE_CHECKING:  # annotations only: host.py sits beside this module, not below it
    from .host import HostProgram
    from .layer_diff import LayerReference
    from .tensors import TensorSpec

SIGINT, SIGTRAP = 2, 5

#: The virtual host core of the gdb view (docs/design-notes.md "GDB view"): r0-r12, sp, lr are
#: scratch registers a debugger may use freely; pc is the device's pc; xpsr reads 0x01000000
#: (Thumb).
CORE_REGS = tuple(f"r{i}" for i in range(13)) + ("sp", "lr", "pc", "xpsr")


@dataclass(frozen=True)
class Stop:
    """Why the device halted. ``reason`` is one of: step, breakpoint, watchpoint, halt (a halt
    request, e.g. Ctrl-C), done (the program completed), fault (the model or the host program
    reported an error), idle (nothing to run)."""

    reason: str
    signal: int = SIGTRAP
    watch: tuple[str, int] | None = None  # ("watch" | "rwatch" | "awatch", first address)
    message: str = ""
    #: "begin": a reverse run reached the start of the recorded history (RSP ``replaylog:begin``)
    replaylog: str = ""

    #: OpenOCD's debug-reason names (debug_reason_name() in OpenOCD's src/target/target.c)
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
    """Address ranges ([start, end)) one unit read and wrote, for watchpoints and for naming the
    unit that wrote a mismatching address. ``partial``: the unit stopped before its end (a halt
    request, or a finer step granularity) and continues at the next execute_unit."""

    reads: list[tuple[int, int]] = field(default_factory=list)
    writes: list[tuple[int, int]] = field(default_factory=list)
    partial: bool = False


@dataclass
class UnitContext:
    """What run control hands :meth:`Device.execute_unit`.

    ``halt`` is set by a halt request (Ctrl-C, ``halt``): a long unit checks it where it can stop
    and then returns with ``touched.partial`` set. ``breakpoints`` are the addresses a run stops
    before (empty for a step); a unit made of several commands stops before one of them.
    ``granularity`` is one of the device's :attr:`Device.granularities`: the first means the
    whole unit, a finer one means "stop after one such part" (partial). ``touched`` records what
    the unit read and wrote."""

    halt: threading.Event = field(default_factory=threading.Event)
    breakpoints: frozenset[int] = frozenset()
    granularity: str = ""
    touched: Touched = field(default_factory=Touched)

    def halt_requested(self) -> bool:
        return self.halt.is_set()

    def read(self, start: int, end: int) -> None:
        self.touched.reads.append((start, end))

    def wrote(self, start: int, end: int) -> None:
        self.touched.writes.append((start, end))


@dataclass(frozen=True)
class Unit:
    """One entry of the program listing: a layer, a command or a job."""

    address: int
    label: str
    summary: str


def unit_indices(units: list[Unit]) -> dict[int, int]:
    """address -> index of the FIRST unit at that address. Why the first: a listing may name one
    address twice, and every map from a pc to its unit (the stop data's ``unit_at_pc``, the
    layer differ's ``unit_index``, :meth:`Device.unit_label`) must pick the same unit."""
    index: dict[int, int] = {}
    for i, u in enumerate(units):
        index.setdefault(u.address, i)
    return index


@dataclass(frozen=True)
class ProgramOptions:
    """What a user gives with a program (``--input``, ``--output``, ``--expect``): file paths
    the device's importer reads or writes. A device declares which it takes in
    :attr:`DeviceSpec.program_options`; the CLI refuses the others."""

    input: str | None = None
    output: str | None = None
    expect: str | None = None
    #: write every operation's output bytes here (the per-operation reference format)
    output_ops: str | None = None
    verbose: bool = False


class UsageError(DeviceError):
    """A monitor command's words do not fit its declared grammar. The message is OpenOCD's
    whole reply, ``usage: NAME USAGE``, so the stub passes it on without the ``NAME: `` it puts
    before other device errors (a device command answers like the stub's own)."""


@dataclass(frozen=True)
class MonitorCommand:
    """A device's own monitor command: ``handler(ctx, args) -> text`` (ctx is the stub's
    command context; errors are DeviceError). The stub declares its own commands with this
    record too (stub/commands/table.py); ctx is typed Any because devices/ cannot import the
    stub's CommandContext (nothing imports upward)."""

    usage: str
    handler: Callable[[Any, list[str]], str]
    summary: str = ""

    def usage_error(self, name: str) -> UsageError:
        """The reply to a bad argument list, made from this declaration so the grammar is
        written once: ``help`` prints the same usage (OpenOCD's ``usage: NAME USAGE``)."""
        return UsageError(f"usage: {name} {self.usage}".rstrip())


@dataclass(frozen=True)
class DeviceOption:
    """A construction option of a device (``--macs 1024``): the CLI offers it as a flag."""

    name: str
    type: type = int
    choices: tuple = ()
    default: object = None
    help: str = ""


@dataclass(frozen=True)
class DeviceTool:
    """A command a device package adds to the ``accelstub`` CLI (Ethos-U85's ``disasm FILE``),
    as it adds monitor commands through its model: the CLI knows no device's file formats.
    ``run`` is "module:function", ``function(argument) -> exit code``, imported when used."""

    name: str
    help: str
    argument: str
    argument_help: str
    run: str

    def __call__(self, value: str) -> int:
        return _resolve(self.run)(value)


def numba_array(dtype: str, ndim: int, readonly: bool = False, layout: str = "C") -> str:
    """An array type as numba prints it, for a kernel plan's signatures (DeviceSpec.kernel_plan;
    numba parses the same spelling back, emu/kernel_plan.py)."""
    return f"Array({dtype}, {ndim}, '{layout}', {readonly}, aligned=True)"


def numba_signature(*args: str) -> str:
    """The argument types of a kernel plan's entry as numba prints them."""
    return "(" + ", ".join(args) + ")"


def conv_plan(input_dtype: str = "int8", byte_kernel_s: float = 0.65) -> tuple:
    """The kernel-plan entries of the shared convolution (emu/conv/int_conv.py) a device's
    demo calls, for every device's plan (DeviceSpec.kernel_plan): the byte kernel with AVX-512
    VNNI, elsewhere the int16-pair kernel and its packing of the ``input_dtype`` elements (the
    NE16's are unsigned); the CPU seconds each took to compile on the 2-core AMD EPYC (Zen 4)."""
    i = "int64"
    module = "accelstub.emu.conv.int_conv"
    return (
        (module, "_vnni_conv_serial",
         numba_signature(numba_array("int32", 3, True), i, i, i, i, numba_array(i, 1),
                         numba_array("int32", 1), numba_array("int32", 1), numba_array(i, 1),
                         numba_array("int32", 1), *[i] * 9, numba_array(i, 1),
                         numba_array(i, 1), "bool"), byte_kernel_s, "vnni"),
        (module, "_conv_blocks_serial",
         numba_signature(*[numba_array("int32", 1)] * 3, *[i] * 9, numba_array(i, 1),
                         numba_array(i, 1), "bool"), 0.5, "int16"),
        (module, "_pack_input_serial",
         numba_signature(numba_array(input_dtype, 3, True, "A"), i, i, i, numba_array(i, 1),
                         "bool", numba_array("int16", 4)), 0.3, "int16"),
    )


_RANGES, _U8, _I64 = "accelstub.emu.memory.ranges", numba_array("uint8", 1), numba_array("int64", 1)
#: the kernel-plan entries a session that records reverse-execution history adds to a run's
#: (devices/history.py, emu/memory/ranges.py; the same for every device), with their CPU
#: seconds (callees included): `accelstub serve` compiles them with the device's plan before it
#: is ready and `accelstub compile` queues them, so that a first `continue` does not compile
#: them one after the other (tests/contract/test_kernel_plan.py: what a recording session calls)
HISTORY_PLAN = (
    (_RANGES, "range_pieces", numba_signature(*[numba_array("int64", 2)] * 2), 1.0, ""),
    (_RANGES, "swap_out", numba_signature(_U8, _U8, _I64, _I64, _I64), 0.8, ""),
    (_RANGES, "diff_out", numba_signature(_U8, _U8, _I64, _I64, _I64), 0.3, ""),
    (_RANGES, "put_back", numba_signature(_U8, _U8, _I64, _I64, _U8), 0.2, ""),
)


@dataclass(frozen=True)
class DeviceSpec:
    """The registry entry of a device, importable without the model (the CLI builds its flags
    from it): ``factory`` is "module:Class", imported when a device is opened."""

    name: str
    title: str
    factory: str
    options: tuple[DeviceOption, ...] = ()
    program_help: str = "a command script (mww/mwb/load_image lines)"
    program_options: tuple[str, ...] = ()  # subset of ("input", "output", "expect", "output_ops")
    #: "module:function": ``function(path) -> {option: value}``, the construction options a
    #: program file names itself (the MACs an Ethos-U85 stream was compiled for), used for the
    #: options not given on the command line; raises ValueError naming the file for a value the
    #: device cannot take
    options_from_program: str = ""
    #: commands this device adds to the CLI
    tools: tuple[DeviceTool, ...] = ()
    #: the kernels a run of the bundled demo calls, as (module, function, numba signature, CPU
    #: seconds to compile, the machines that use it: emu/kernel_plan.py NEEDS): `accelstub run`
    #: has the uncached ones compiled in two processes at once before it starts
    #: (emu/kernel_plan.py); tests/contract/test_kernel_plan.py checks it against a demo run
    kernel_plan: tuple[tuple[str, str, str, float, str], ...] = ()

    def create(self, **options: object) -> Device:
        return _resolve(self.factory)(**options)

    def program_device_options(self, path: str | Path) -> dict[str, object]:
        """The options ``path`` names (options_from_program), {} for a device without them."""
        if not self.options_from_program:
            return {}
        return _resolve(self.options_from_program)(Path(path))


def _resolve(ref: str) -> Any:
    """The object a "module:name" reference of the registry names, imported only now: the
    registry must stay importable without the models (DeviceSpec)."""
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


class Device:
    """Base of every accelerator model."""

    #: device key, e.g. "max78000"
    name: ClassVar[str] = "device"
    #: word used in listings and messages: layer / command / job
    unit_name: ClassVar[str] = "unit"
    #: whether :meth:`_state` returns copies that later units never change, so reverse-execution
    #: history (recording it at every stop) need not deep-copy it; False: it is deep-copied
    state_is_copy: ClassVar[bool] = False

    def __init__(self, description: Description) -> None:
        self.description = description
        self.regs = RegisterFile(description, self.bank_index)
        self.bus = Bus(description, self.regs)
        self.cycles = 0
        self.units_done = 0
        self.core = {name: 0 for name in CORE_REGS if name != "pc"}
        self.core["xpsr"] = 0x01000000
        self._emu_regs = {r.name: r for r in description.registers if r.block == "emu"}
        for name in self._emu_regs:
            self.regs.on_read(name, self._read_emu)
        self._program_window = next((r for r in description.regions if r.name == "emu_program"),
                                    None)
        # word k reads k (docs/design-notes.md "One pc per unit")
        if self._program_window is not None:
            mem = self.bus.memories[self._program_window.name]
            mem.data.view("<u4")[:] = np.arange(self._program_window.size // 4, dtype="<u4")

    # -- required ----------------------------------------------------------------------------
    @property
    def pc(self) -> int:
        """A real address in the map that names the next unit uniquely and stably
        (docs/design-notes.md "One pc per unit"), :attr:`end_address` once the program has ended."""
        raise NotImplementedError

    def finished(self) -> bool:
        """True when there is no next unit to execute."""
        raise NotImplementedError

    def execute_unit(self, ctx: UnitContext) -> Touched:
        """Run exactly one unit (or, with a finer ``ctx.granularity`` or a halt request, a part of
        it, marking ``ctx.touched.partial``) and return ``ctx.touched``."""
        raise NotImplementedError

    def units(self) -> list[Unit]:
        """The program listing."""
        return []

    # -- optional capabilities (defaults) ------------------------------------------------------
    def unit_tensors(self, index: int) -> tuple[TensorSpec, ...]:
        """The input and output tensors of unit ``index`` of :meth:`units` (docs/design-notes.md,
        unit tensors): names, shapes in the layout of the toolchain that made the program, and
        where each element lies (:mod:`.tensors`). Inputs first ("input", "input2" for a second
        operand), then "output". ``()`` where the device cannot say (a unit not decoded yet);
        an index outside the program raises DeviceError (:meth:`check_unit`)."""
        self.check_unit(index)
        return ()

    def program_io(self) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
        """(inputs, outputs) of the whole program, where a dataset run (api/evaluation.py)
        writes a sample and reads the result. Default: the "input" of the first unit that
        declares tensors and the "output" of the last (a unit declaring none, a weight DMA, is
        passed over; a first unit without an "input", fed another way, gives no input). A
        device whose program format names its graph's tensors (Vela's) overrides this, since
        a first unit may cover only part of the input (a stripe)."""
        units = self.units()

        def find(name: str, order) -> tuple[TensorSpec, ...]:
            for i in order:
                specs = self.unit_tensors(i)
                if specs:
                    return tuple(s for s in specs if s.name == name)
            return ()
        return (find("input", range(len(units))),
                find("output", range(len(units) - 1, -1, -1)))

    def check_unit(self, index: int) -> None:
        """Refuse a unit index outside :meth:`units`, naming the program's range."""
        count = len(self.units())
        if not 0 <= index < count:
            raise DeviceError(f"no {self.unit_name} {index}: the program has "
                              + (f"{self.unit_name}s 0..{count - 1}" if count else
                                 f"no {self.unit_name}"))

    #: step granularities, coarsest first; the first is one whole unit
    @property
    def granularities(self) -> tuple[str, ...]:
        return (self.unit_name,)

    def set_pc(self, address: int) -> None:
        raise DeviceError(f"{self.name}: the next {self.unit_name} cannot be chosen by writing pc")

    def run_block(self, halt: threading.Event) -> list[tuple[int, list]] | None:
        """Run as many whole units as the device can at once, when no one looks at single
        units (run control calls it only without breakpoints, watchpoints, unit listeners or
        a throttle, and with a host program only while it waits for an interrupt): the same
        end state as that many execute_unit calls, ``units_done`` counted here, ending at the
        latest after a unit that changed the interrupt lines. Returns each unit's (pc at its
        start, ranges it wrote), fewer when ``halt`` is set, or None when it cannot (run
        control then runs unit by unit until the run ends). Why: where a unit is short, the
        per-unit path costs more than the unit."""
        return None

    def host_read(self, addr: int, size: int) -> bytes:
        """A read by the driver's CPU, with the side effects the debugger's read never has (a
        FIFO pop, a queue acquire); host programs poll through it."""
        return self.read(addr, size)

    def load_program(self, path: Path, options: ProgramOptions) -> HostProgram | None:
        """Import a program the user brings (a vendor tool's output) as a host program, or None
        when ``path`` is not this device's format (the stub then reads a command script)."""
        return None

    def layer_references(self, path: Path, inputs: list[np.ndarray]) -> list[LayerReference]:
        """The user's reference file ``path`` as per-unit references for the per-layer diff
        (issue 27, devices/layer_diff.py). Default: the generic .npz (layer_diff.npz_references:
        keys are unit indexes or labels, arrays in the unit tensor's layout or the one a
        ``layout`` entry states). ``inputs``: the program's input tensors (program_io) as
        they were before the run, for readers that run the framework themselves. A device
        overrides this for its toolchain's own formats and falls back to this one; errors are
        one line naming the file (layer_diff.ReferenceFileError)."""
        from .layer_diff import npz_references

        return npz_references(self, path)

    def program_started(self, host: HostProgram) -> None:
        """``host`` now drives the device (HostProgram.start): a device that lists its program
        from the driver's plan (HostProgram.plan) takes it here."""

    def monitor_commands(self) -> dict[str, MonitorCommand]:
        return {}

    def usage_error(self, name: str) -> UsageError:
        """What the handler of this device's command ``name`` raises for a bad argument list:
        the usage it declares in :meth:`monitor_commands`, never a second copy of it."""
        return self.monitor_commands()[name].usage_error(name)

    def interrupts(self) -> dict[str, bool]:
        """Interrupt lines by name and their level, for `poll`, the TUI and host programs."""
        return {}

    def interrupt_counts(self) -> dict[str, int]:
        """Pulsed interrupt lines (an event that is never a level, NE16's end of job) by name:
        how many pulses so far. Host programs count one event per pulse."""
        return {}

    def counters(self) -> dict[str, int]:
        out = {"cycles": self.cycles, "units": self.units_done}
        if self.regs.ignored_writes:
            out["ignored_writes"] = sum(self.regs.ignored_writes.values())
        return out

    def bank_index(self, reg: Register) -> int:
        """The bank a bus access to banked register ``reg`` reaches now, for descriptions whose
        selector is the device's state (``bank_select = "device"``)."""
        raise DeviceError(f"{self.name}: {reg.name} is banked by device state, but the model "
                          "does not select banks")

    # -- the end of a program and the program window (docs/design-notes.md "One pc per unit") -
    @property
    def end_address(self) -> int:
        """pc once the program has ended: the EMU_END word of the emulator block, the one rule of
        every device. It names no unit, so gdb never reports the end as a breakpoint on one
        (issue 25 #8: MAX78000's pc went back to layer 0's address)."""
        return self._emu_regs["EMU_END"].address

    def at_end(self) -> bool:
        """Whether pc is the end address (the program ended)."""
        return "EMU_END" in self._emu_regs and self.pc == self.end_address

    def window_pc(self, k: int) -> int:
        """pc of unit ``k`` of the program (program order) in the program window, for devices
        whose register contexts are reused by every unit (NE16, NVDLA): a context address cannot
        tell units apart, a window word can. Units past the window share its last word."""
        w = self._program_window
        return w.base + 4 * min(k, w.size // 4 - 1)

    def window_index(self, address: int) -> int | None:
        """The unit index of program-window word ``address``, None outside the window."""
        w = self._program_window
        if w is None or not w.base <= address < w.end or address % 4:
            return None
        return (address - w.base) // 4

    def unit_label(self, address: int) -> str:
        """How messages name the unit at ``address`` ("layer 2", "command 5"; word k of a
        program window is unit k: "job 3")."""
        if "EMU_END" in self._emu_regs and address == self.end_address:
            return "end of program"
        k = self.window_index(address)
        if k is not None:
            return f"{self.unit_name} {k}"
        for u in self.units():
            if u.address == address:
                return u.label
        return f"{self.unit_name} at {address:#010x}"

    def idle_message(self) -> str:
        return f"no {self.unit_name} left to run"

    def done_message(self) -> str:
        return f"program complete after {self.units_done} {self.unit_name}s"

    def reset(self, kind: str = "halt") -> None:
        """Hardware reset: registers to their reset values, memories kept (as on silicon)."""
        self.regs.reset()
        self.cycles = 0
        self.units_done = 0

    # -- the debugger's view (no side effects) ---------------------------------------------------
    def read(self, addr: int, size: int) -> bytes:
        """The debugger's read: no side effects (no FIFO pop, no clear-on-read)."""
        return self.bus.read(addr, size)

    def write(self, addr: int, data: bytes) -> None:
        """A bus write with the side effects of the host CPU's store."""
        self.bus.write(addr, data)

    def read_register(self, name: str) -> int:
        return self.regs.read(name)

    def write_register(self, name: str, value: int) -> None:
        """A bus write of register ``name``; a bank named explicitly is written directly, with
        the rules of a bus write to that bank."""
        reg = self.description.register(name)
        value &= (1 << reg.bits) - 1
        if reg.bank is None:
            self.bus.write(reg.address, value.to_bytes(reg.bits // 8, "little"))
        else:
            self.regs.write(reg, value)

    def read_core(self, name: str) -> int:
        return self.pc if name == "pc" else self.core[name]

    def write_core(self, name: str, value: int) -> None:
        if name == "pc":
            if value != self.pc:
                self.set_pc(value)
        else:
            self.core[name] = value & 0xFFFFFFFF

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
        if name == "EMU_END":
            return int(self.pc == reg.address)
        return stored

    # -- snapshots ---------------------------------------------------------------------------
    def snapshot(self, memory: bool = True) -> dict:
        """The whole state; without ``memory`` (``"mem"`` None) all but the memories, for a
        caller that keeps only the ranges it needs (RunControl.checkpoint)."""
        return {"regs": self.regs.snapshot(), "mem": self.bus.snapshot() if memory else None,
                "state": copy.deepcopy(self._state()), "cycles": self.cycles,
                "units_done": self.units_done}

    def restore(self, snap: dict) -> None:
        """Back to :meth:`snapshot` ``snap`` (memories kept as they are if it has none)."""
        self.regs.restore(snap["regs"])
        if snap["mem"] is not None:
            self.bus.restore(snap["mem"])
        self._set_state(copy.deepcopy(snap["state"]))
        self.cycles, self.units_done = snap["cycles"], snap["units_done"]

    def _state(self) -> dict:
        """Model state that is not in registers or memories (override)."""
        return {}

    def _set_state(self, state: dict) -> None:
        pass
