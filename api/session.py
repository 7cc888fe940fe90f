"""The Python API: one :class:`Session` for scripted debug sessions and CI tests, on either back
end (api/backends.py): in-process (``Session.open``: a device and a program here, no socket) or
remote (``Session.connect``: a running ``accelstub serve`` over the GDB remote protocol). The
verbs and their results are the same on both; the tests run every verb on both.

What it knows that a CPU debugger's session does not: the program's units (layers, commands,
jobs) by index and label, and each unit's input and output tensors as numpy arrays in the
layout of the toolchain that made the program (devices/device.py, unit_tensors).

Every call that can wait takes a timeout; a run that outlives it is halted and raises
:class:`~accelstub.errors.Timeout`; a connection that ends raises
:class:`~accelstub.errors.ConnectionLost` at once.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from accelstub.devices import DEFAULT_BUDGET_MIB
from accelstub.devices.errors import DeviceError, TargetError
from accelstub.devices.layer_diff import LayerDiff
from accelstub.devices.tensors import TensorSpec, read_tensor, write_tensor

from .backends import HALT_WAIT, InProcess, Remote, braced, register_or_raise
from .errors import Timeout

#: a unit: its index in the listing, its label ("Layer 1", "cmd 3", "job 0"), or its address
UnitRef = int | str
#: what a watchpoint watches: an address (one 32-bit word), (start, length), or (unit, tensor)
WatchTarget = int | tuple[int, int] | tuple[UnitRef, str]
#: bytes a watchpoint on a bare address covers (a word, as gdb's ``watch *(int *)ADDR``)
WORD = 4


@dataclass(frozen=True)
class StopInfo:
    """Why the target halted. ``reason``: step | breakpoint | watchpoint | halt | done | fault |
    idle; ``pc`` names the next unit; ``unit`` is its index (None past the last unit);
    ``watch`` is (kind, first address) for a watchpoint ("watch", "rwatch", "awatch");
    ``message`` is the device's text (done: the program's checks; fault: what went wrong)."""

    reason: str
    pc: int
    unit: int | None
    watch: tuple[str, int] | None = None
    message: str = ""
    #: going back reached the start of the recorded history (reverse_step/reverse_continue)
    history_begin: bool = False

    @classmethod
    def from_data(cls, d: dict) -> StopInfo:
        return cls(d["reason"], d["pc"], d["unit"],
                   tuple(d["watch"]) if d["watch"] else None,  # type: ignore[arg-type]
                   d["message"], bool(d.get("history_begin")))


@dataclass(frozen=True)
class UnitInfo:
    """One unit of the program: index in the listing, pc address, label, one-line summary."""

    index: int
    address: int
    label: str
    summary: str


@dataclass(frozen=True)
class DiffReport:
    """A per-layer diff (issue 27): one LayerDiff per compared unit (``line()`` gives the
    CLI's line), the first unit that diverges (None: none), and the stop the run ended with
    (None when the table was only read)."""

    layers: tuple[LayerDiff, ...]
    first_divergence: int | None
    stop: StopInfo | None = None

    @classmethod
    def from_data(cls, d: dict, stop: StopInfo | None = None) -> DiffReport:
        def one(x: dict) -> LayerDiff:
            fields = {k: v for k, v in x.items() if k != "diverges"}
            for k in ("shape", "first_index", "crc"):
                if fields[k] is not None:
                    fields[k] = tuple(fields[k])
            fields["part"] = fields.get("part") or ""  # JSON null: no part named
            return LayerDiff(**fields)
        return cls(tuple(one(x) for x in d["layers"]), d["first_divergence"], stop)


class Session:
    """A debug session on one device (see the module docstring). Use it as a context manager,
    or call :meth:`close`."""

    def __init__(self, backend: InProcess | Remote) -> None:
        self._b = backend
        self.program: Path | None = None  # the program loaded through this session, if any
        self._breakpoints: set[int] = set()
        self._watch: dict[object, list[tuple[str, int, int]]] = {}
        self._units: list[UnitInfo] | None = None
        self._changed()

    # -- opening -------------------------------------------------------------------------------
    @classmethod
    def open(cls, device: str, program: str | Path | None = None, *, input: str | None = None,
             history_mib: int = DEFAULT_BUDGET_MIB, **device_options: object) -> Session:
        """A device in this process (no socket) with ``program`` loaded; None loads the bundled
        demo program of ``device``. ``device_options`` are the device's construction options
        (Ethos-U85's ``macs``); the ones a program names itself are taken from it.
        ``history_mib``: the reverse-execution history's budget, as ``accelstub serve
        --history-mib`` (default 256); 0 records nothing, for sessions that never go back
        (recording costs each run: ``accelstub eval`` opens its sessions without it)."""
        from accelstub.stub.cli import demo_program

        if program is None:
            program = demo_program(device)
        s = cls(InProcess(device, program, input, dict(device_options), history_mib))
        s.program = Path(program) if program is not None else None
        return s

    @classmethod
    def connect(cls, address: str = "127.0.0.1:3333", *, timeout: float = 10.0) -> Session:
        """A running ``accelstub serve`` at ``address`` (its gdb port). ``timeout`` bounds every
        request that does not run the target; a stub that does not answer within it is
        ConnectionLost."""
        return cls(Remote(address, timeout))

    def close(self) -> None:
        """End the session: this session's breakpoints and watchpoints go, a run is halted
        (in-process) or the connection detached (remote). Safe to call twice."""
        b, self._b = self._b, None
        if b is not None:
            b.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def backend(self) -> InProcess | Remote:
        if self._b is None:
            raise TargetError("the session is closed")
        return self._b

    @property
    def device(self) -> str:
        """The device key ("max78000", "ethos-u85", "ne16", "nvdla")."""
        return self.backend.name

    @property
    def address(self) -> str | None:
        """HOST:PORT of the stub for a remote session, None in-process."""
        return self.backend.address

    # -- programs --------------------------------------------------------------------------------
    def load(self, program: str | Path, *, input: str | None = None) -> str:
        """Load a program (the format the device's toolchain writes, or a command script) and
        make ``reset()`` load it again; returns the loader's one-line summary. Raises
        ProgramError naming the file."""
        summary = self.backend.load(program, input)
        self.program = Path(program)
        self._changed()
        return summary

    def reset(self, kind: str = "init") -> StopInfo:
        """``monitor reset KIND``: init (default) loads the program again, so the session
        starts over before unit 0; halt resets the hardware only; run resets and runs."""
        if kind not in ("init", "halt", "run"):
            raise ValueError(f"reset kind {kind!r}: one of init, halt, run")
        self.monitor(f"reset {kind}")
        return self._stop

    def _changed(self) -> None:
        """Forget the listing and read the stop again (after anything that may change them)."""
        self._units = None
        self._stop = StopInfo.from_data(self.backend.data("stop"))  # type: ignore[arg-type]

    # -- running ---------------------------------------------------------------------------------
    def step(self, granularity: str | None = None, *, timeout: float = 60.0) -> StopInfo:
        """Run one unit (or one part of it: ``granularity`` is one of :meth:`granularities`,
        e.g. NE16's "subtile") and halt."""
        if granularity is not None:  # (a whole unit, the usual step, needs no check)
            grains = self.granularities()
            if granularity not in grains:
                raise DeviceError(f"{self.device} steps by {', '.join(grains)}, not "
                                  f"{granularity!r}")
            if granularity == grains[0]:
                granularity = None
        return self._run("step", True, granularity, timeout)

    def cont(self, *, timeout: float = 60.0) -> StopInfo:
        """Continue until a breakpoint, a watchpoint, the end of the program or a fault. After
        ``timeout`` seconds the target is halted and Timeout raised."""
        return self._run("cont", False, None, timeout)

    def run_to(self, unit: UnitRef, *, timeout: float = 60.0) -> StopInfo:
        """Run until the target halts before ``unit`` (index, label or address), through a
        breakpoint that goes again afterwards (one set by :meth:`add_breakpoint` stays). Where
        the target already is before that unit nothing runs. Another stop on the way (a
        breakpoint, a watchpoint, the end) is returned as it is: check ``.unit``."""
        address = self._unit_address(unit)
        if self.pc == address:
            return self._stop
        temporary = address not in self._breakpoints
        if temporary:
            self.backend.add_breakpoint(address)
        try:
            return self._run(f"run_to {unit!r}", False, None, timeout)
        finally:
            if temporary and self._b is not None:
                self._b.remove_breakpoint(address)

    def reverse_step(self, *, timeout: float = 60.0) -> StopInfo:
        """One unit back (gdb's reverse-stepi): the whole state as it was before that unit.
        At the start of the recorded history nothing moves and ``history_begin`` is set."""
        return self._run("reverse_step", True, None, timeout, reverse=True)

    def reverse_continue(self, *, timeout: float = 60.0) -> StopInfo:
        """Back until a breakpoint's unit, the last unit that touched a watchpoint (``pc``
        names it), or the start of the recorded history (``history_begin``)."""
        return self._run("reverse_continue", False, None, timeout, reverse=True)

    def snapshot_save(self, name: str) -> None:
        """Keep the whole state under ``name`` (``monitor snapshot save NAME``)."""
        self.monitor(f"snapshot save {name}")

    def snapshot_restore(self, name: str) -> StopInfo:
        """Back to snapshot ``name``; the reverse history starts again there."""
        self.monitor(f"snapshot restore {name}")
        self._changed()
        return self._stop

    def snapshots(self) -> list[str]:
        """Names of the saved snapshots, oldest first."""
        out = self.monitor("snapshot list").strip()
        return [] if out == "no snapshots" else [line.split(":")[0] for line in out.splitlines()]

    def snapshot_delete(self, name: str) -> None:
        self.monitor(f"snapshot delete {name}")

    def halt(self, *, timeout: float = HALT_WAIT) -> StopInfo:
        """Halt a run (one another client started); a halted target stays as it is."""
        self.monitor(f"halt {max(1, int(timeout * 1000))}")
        return self._stop

    def _run(self, verb: str, step: bool, granularity: str | None, timeout: float,
             reverse: bool = False) -> StopInfo:
        data = self.backend.run(step, granularity, timeout, reverse)
        timed_out = data is None
        if timed_out:
            data = self.backend.data("stop")  # type: ignore[assignment]
        self._stop = StopInfo.from_data(data)  # type: ignore[arg-type]
        if timed_out:
            raise Timeout(f"{verb}: no stop within {timeout:g} s; halted at pc "
                          f"{self._stop.pc:#010x} ({self._where()})")
        return self._stop

    @property
    def stop(self) -> StopInfo:
        """The last stop."""
        return self._stop

    @property
    def pc(self) -> int:
        """The address of the next unit (the end address once the program has ended)."""
        return self.read_register("pc")

    @property
    def unit(self) -> int | None:
        """Index of the unit at pc (the next to run), None past the last."""
        pc = self.pc
        return next((u.index for u in self.units() if u.address == pc), None)

    def _where(self) -> str:
        u = self._stop.unit
        return self.units()[u].label if u is not None else "no unit left"

    # -- breakpoints and watchpoints -------------------------------------------------------------
    def add_breakpoint(self, unit: UnitRef) -> int:
        """Stop before ``unit`` (index, label or address); returns its address."""
        address = self._unit_address(unit)
        self.backend.add_breakpoint(address)
        self._breakpoints.add(address)
        return address

    def remove_breakpoint(self, unit: UnitRef) -> None:
        address = self._unit_address(unit)
        self.backend.remove_breakpoint(address)
        self._breakpoints.discard(address)

    @property
    def breakpoints(self) -> list[int]:
        """Addresses of this session's breakpoints."""
        return sorted(self._breakpoints)

    def add_watchpoint(self, target: WatchTarget, *, kind: str = "w") -> list[tuple[int, int]]:
        """Stop after a unit that writes (kind "w"), reads ("r") or accesses ("a") ``target``:
        an address (its 32-bit word), (start, length), or (unit, tensor name) -- every address
        range the tensor occupies. Returns the [start, end) ranges watched."""
        if kind not in ("w", "r", "a"):
            raise ValueError(f"watchpoint kind {kind!r}: one of w, r, a")
        key = (self._watch_key(target), kind)
        ranges = self._watch_ranges(target)
        for start, end in ranges:
            self.backend.add_watchpoint(kind, start, end - start)
        self._watch.setdefault(key, []).extend((kind, s, e - s) for s, e in ranges)
        return ranges

    def remove_watchpoint(self, target: WatchTarget, *, kind: str = "w") -> None:
        for k, start, length in self._watch.pop((self._watch_key(target), kind), []):
            self.backend.remove_watchpoint(k, start, length)

    @property
    def watchpoints(self) -> list[tuple[str, int, int]]:
        """This session's watchpoints as (kind, start, length)."""
        return [w for ws in self._watch.values() for w in ws]

    def _watch_key(self, target: WatchTarget) -> object:
        if isinstance(target, tuple) and len(target) == 2 and isinstance(target[1], str):
            return ("tensor", self._unit_index(target[0]), target[1])
        return target

    def _watch_ranges(self, target: WatchTarget) -> list[tuple[int, int]]:
        if isinstance(target, int):
            return [(target, target + WORD)]
        if isinstance(target, tuple) and len(target) == 2:
            first, second = target
            if isinstance(second, str):
                return self._tensor_spec(first, second).ranges()
            if isinstance(first, int) and isinstance(second, int) and second > 0:
                return [(first, first + second)]
        raise ValueError(f"watchpoint target {target!r}: an address, (start, length) or "
                         "(unit, tensor name)")

    # -- units and tensors -----------------------------------------------------------------------
    def units(self) -> list[UnitInfo]:
        """The program's units in order, with index, address, label and summary."""
        if self._units is None:
            data: dict = self.backend.data("units")  # type: ignore[assignment]
            self._units = [UnitInfo(u["index"], u["address"], u["label"], u["summary"])
                           for u in data["units"]]
            self._grains = tuple(data["granularities"])
            self._unit_name = data["unit_name"]
        return self._units

    def granularities(self) -> tuple[str, ...]:
        """Step granularities, coarsest first; the first is a whole unit."""
        self.units()
        return self._grains

    def _unit_index(self, unit: UnitRef) -> int:
        units = self.units()
        if isinstance(unit, str):
            for u in units:
                if u.label == unit:
                    return u.index
        elif isinstance(unit, int) and not isinstance(unit, bool):
            if 0 <= unit < len(units):
                return unit
            for u in units:
                if u.address == unit:
                    return u.index
        known = (f"an index 0..{len(units) - 1}, a label such as {units[0].label!r} or a "
                 f"{self._unit_name}'s address" if units else "the program lists none")
        raise TargetError(f"no {self._unit_name} {unit!r} on {self.device} ({known})")

    def _unit_address(self, unit: UnitRef) -> int:
        return self.units()[self._unit_index(unit)].address

    def tensors(self, unit: UnitRef) -> tuple[TensorSpec, ...]:
        """The unit's declared input and output tensors (inputs first, then "output")."""
        return self.backend.tensors(self._unit_index(unit))

    def _tensor_spec(self, unit: UnitRef, name: str) -> TensorSpec:
        specs = self.tensors(unit)
        for s in specs:
            if s.name == name:
                return s
        label = self.units()[self._unit_index(unit)].label
        have = ", ".join(s.name for s in specs) or f"none declared on {self.device}"
        raise TargetError(f"{label} has no tensor {name!r} (it has {have})")

    def tensor(self, unit: UnitRef, name: str = "output") -> np.ndarray:
        """The tensor as a numpy array in the toolchain's layout (MAX78000 CHW, Ethos-U85 NHWC,
        NE16 HWC, NVDLA CHW), read from device memory now."""
        return read_tensor(self._tensor_spec(unit, name), self.read_memory)

    def set_tensor(self, unit: UnitRef, name: str, array: np.ndarray) -> None:
        """Write ``array`` (the tensor's shape and layout) into device memory."""
        write_tensor(self._tensor_spec(unit, name), np.asarray(array), self.write_memory,
                     self.read_memory)

    # -- registers and memory --------------------------------------------------------------------
    def register_names(self) -> list[str]:
        """Every register: the host core's (r0-r12, sp, lr, pc, xpsr), then the device's."""
        return self.backend.register_names()

    def read_register(self, name: str) -> int:
        """A debugger read (no side effects) of the register ``name``; RegisterNotFound with
        the close matches for a name the device lacks."""
        return self.backend.read_register(name)

    def read_registers(self, names: list[str]) -> dict[str, int]:
        """Several registers at once (debugger reads): remotely their ``p`` requests share one
        round trip, so a block of registers reads several times faster than one by one."""
        return dict(zip(names, self.backend.read_registers(list(names))))

    def write_register(self, name: str, value: int) -> None:
        """A bus write, with the hardware's side effects (start bits, write-1-to-clear)."""
        self.backend.write_register(name, value)

    def fields(self, name: str) -> dict[str, int]:
        """The register's fields by name, decoded from its value now (no side effects)."""
        return dict(register_or_raise(self.backend.data("register", name))["fields"])

    def read_memory(self, address: int, size: int) -> bytes:
        """The debugger's read (no side effects); BusError names an address that is not
        readable."""
        return self.backend.read_memory(address, size)

    def write_memory(self, address: int, data: bytes) -> None:
        """A bus write with the side effects of the host CPU's store."""
        self.backend.write_memory(address, bytes(data))

    # -- state -----------------------------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        """Performance counters (modelled cycles, units run, the device's own)."""
        return dict(self.backend.data("counters"))  # type: ignore[arg-type]

    def interrupts(self) -> dict[str, bool]:
        """Interrupt lines by name and level."""
        return dict(self.backend.data("interrupts"))  # type: ignore[arg-type]

    def status(self) -> dict:
        """device, state (halted|running), pc, unit, stop (reason), interrupts, counters."""
        return dict(self.backend.data("status"))  # type: ignore[arg-type]

    def diff(self, reference: str | Path | None = None, *, all: bool = False,
             timeout: float = 60.0) -> DiffReport:
        """The per-layer diff (``monitor diff load``): with ``reference`` (an .npz of per-unit
        tensors or the device's own reference format, see docs/diff.md), compare every unit
        run from here on with it and continue until the first unit that diverges (``all``:
        to the end); without, the table so far. Raises TargetError for a reference that
        cannot be used (one line naming the file)."""
        stop = None
        if reference is not None:
            path = str(Path(reference).absolute())
            self.monitor(f"diff load {braced(path)}" + (" all" if all else ""))
            stop = self.cont(timeout=timeout)
        return DiffReport.from_data(self.backend.data("diff"), stop)  # type: ignore[arg-type]

    def monitor(self, command: str, *, timeout: float = 60.0) -> str:
        """Any monitor command (OpenOCD's and accelstub's, ``help`` lists them): its output
        text. A failing command raises TargetError with its message."""
        out = self.backend.monitor(command, timeout)
        self._changed()  # the command may have loaded, reset, stepped or halted
        return out
