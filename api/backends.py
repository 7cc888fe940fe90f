"""The two back ends of :class:`accelstub.session.Session`: the same small set of primitives,
in-process (a device and its run control in this process, no socket) and remote (a running
``accelstub serve`` over the GDB remote protocol and monitor commands).

Why so few primitives: everything the Session offers is built on them once (session.py), so
the two back ends cannot drift apart. Both read machine-readable state through the same
functions of stub/commands/ (``stop_data``, ``units_data``, ``status_data``,
``register_data``): the in-process back end calls them, the remote one gets their JSON from
``monitor json WHAT``; program loading is ``stub.program.load_for_reset`` on both sides. So
the results are equal by construction, and the remote back end knows nothing device-specific.

A run (``run``) returns the stop as ``stop_data`` gives it, or None when the timeout passed; the
back end has then halted the target (a Session never leaves it running behind a test's back).
"""
from __future__ import annotations

import json
import threading
import time
import weakref
from pathlib import Path

from accelstub.devices import DEFAULT_BUDGET_MIB, device_spec, open_device
from accelstub.devices.device import CORE_REGS, ProgramOptions
from accelstub.devices.errors import (
    BusError,
    ProgramError,
    RegisterNotFound,
    TargetError,
    TargetRunning,
)
from accelstub.devices.tensors import TensorSpec
from accelstub.stub import commands
from accelstub.stub.client import ConnectionClosed, NoReply, RspClient, RspError
from accelstub.stub.server import StubServer

from .errors import ConnectionLost, Timeout

#: seconds a back end waits for the halt it requests after a timeout
HALT_WAIT = 5.0
#: how often the in-process watchdog looks at a run's deadline (a timeout's precision)
WATCHDOG_S = 0.05
_WATCH_Z = {"w": 2, "r": 3, "a": 4}


class InProcess:
    """A device, its run control and the stub's command table in this process (no ports)."""

    def __init__(self, device: str, program: str | Path | None, input: str | None,
                 options: dict[str, object], history_mib: int = DEFAULT_BUDGET_MIB) -> None:
        if program is not None:  # the options the program names itself (Ethos-U85's MACs)
            options = device_spec(device).program_device_options(program) | options
        self.server = StubServer([open_device(device, **options)], gdb_port=None,
                                 telnet_port=None, tcl_port=None, history_mib=history_mib)
        self.rc = self.server.targets[0]
        self.device = self.rc.device
        self.name = self.device.name
        self.address: str | None = None
        self._deadline: float | None = None  # of the run in progress (the watchdog's)
        self._halted = False  # the watchdog halted the run in progress
        self._deadline_lock = threading.Lock()
        self._watchdog: threading.Thread | None = None
        self._closed = False
        if program is not None:
            self.load(program, input)

    # -- programs and commands ----------------------------------------------------------------
    def load(self, program: str | Path, input: str | None) -> str:
        options = ProgramOptions(input=str(input)) if input is not None else ProgramOptions()
        return self.server.load_program(program, log=lambda s: None, options=options)

    def monitor(self, command: str, timeout: float) -> str:
        """The command's log lines and result, as a gdb ``monitor`` shows them."""
        lines: list[str] = []
        ctx = self.server.context(log=lambda s: lines.append(s.rstrip("\n") + "\n"),
                                  rc=self.rc)
        try:
            result = commands.execute(ctx, command)
        except commands.CommandError as e:
            raise TargetError(str(e)) from None
        return "".join(lines) + (result.rstrip("\n") + "\n" if result else "")

    def data(self, what: str, *args: str) -> object:
        """What ``monitor json WHAT ARGS`` returns remotely, without the JSON round trip."""
        return commands.JSON_DATA[what](self.rc, *args)

    def tensors(self, index: int) -> tuple[TensorSpec, ...]:
        return tuple(self.device.unit_tensors(index))

    # -- running -----------------------------------------------------------------------------
    def run(self, step: bool, granularity: str | None, timeout: float,
            reverse: bool = False) -> dict | None:
        """Run in the calling thread (run control's run_here): no client but this session
        needs the run thread, and the hand-off to it cost ~0.07 ms per step, more than an
        Ethos-U85 command takes. A watchdog thread halts a run that outlives ``timeout``.
        ``reverse``: backwards through the history (reverse_here)."""
        with self._deadline_lock:
            self._halted = False
            self._deadline = time.monotonic() + timeout
        if self._watchdog is None:
            self._watch()
        try:
            if reverse:
                self.rc.reverse_here(step)
            else:
                self.rc.run_here(single=step, granularity=granularity)
        finally:
            with self._deadline_lock:
                self._deadline = None
        return None if self._halted else commands.stop_data(self.rc)

    def _watch(self) -> None:
        """Start the watchdog (the caller does, once: while ``_watchdog`` is None, which it
        checks itself so a step pays no call): it looks at the deadline every WATCHDOG_S (a
        step pays nothing to arm it) and halts a run past it."""
        def watch(ref: weakref.ref) -> None:
            while True:
                time.sleep(WATCHDOG_S)
                backend = ref()
                if backend is None or backend._closed:
                    return
                with backend._deadline_lock:  # the run it belongs to is still going
                    deadline = backend._deadline
                    if deadline is not None and time.monotonic() >= deadline:
                        backend._halted = True  # a timeout, whatever the run stops as
                        backend.rc.halt()
                del backend

        self._watchdog = threading.Thread(target=watch, args=(weakref.ref(self),),
                                          daemon=True, name=f"{self.name}-watchdog")
        self._watchdog.start()

    # -- breakpoints and watchpoints (owned by this session, as a gdb connection's are) ---------
    def add_breakpoint(self, address: int) -> None:
        self.rc.add_breakpoint(address, owner=self)

    def remove_breakpoint(self, address: int) -> None:
        self.rc.remove_breakpoint(address, owner=self)

    def add_watchpoint(self, kind: str, start: int, length: int) -> None:
        if not self.device.bus.is_mapped(start, max(1, length)):
            raise BusError(start, f"a watchpoint of {length} bytes here is not in the memory map")
        self.rc.add_watchpoint(kind, start, length, owner=self)

    def remove_watchpoint(self, kind: str, start: int, length: int) -> None:
        self.rc.remove_watchpoint(kind, start, length, owner=self)

    # -- registers and memory -----------------------------------------------------------------
    def register_names(self) -> list[str]:
        return list(CORE_REGS) + [r.name for r in self.device.description.registers]

    def read_register(self, name: str) -> int:
        if name in CORE_REGS:
            return self.device.read_core(name)
        return self.device.read_register(name)

    def read_registers(self, names: list[str]) -> list[int]:
        return [self.read_register(n) for n in names]

    def write_register(self, name: str, value: int) -> None:
        with self.rc.halted_access("register write"):
            if name in CORE_REGS:
                self.device.write_core(name, value)
            else:
                self.device.write_register(name, value)

    def read_memory(self, address: int, size: int) -> bytes:
        return self.device.read(address, size)

    def write_memory(self, address: int, data: bytes) -> None:
        with self.rc.halted_access("memory write"):
            self.device.write(address, data)

    def close(self) -> None:
        self._closed = True
        self.rc.drop_owner(self)
        self.server.stop()  # halts a run still going (no ports to close)


class Remote:
    """A connection to a running ``accelstub serve`` (its gdb port)."""

    def __init__(self, address: str, timeout: float) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        try:
            # no reader thread: the session only asks, and reading the replies in the
            # asking thread saves a thread hand-off per request
            self.client = RspClient(host or "127.0.0.1", int(port), timeout=timeout,
                                    reader_thread=False)
        except ValueError:
            raise ValueError(f"{address!r} is not HOST:PORT") from None
        except (OSError, RspError) as e:
            raise ConnectionLost(f"cannot connect to the stub at {address}: {e}") from None
        self._call(self.client.stop_reason)  # gdb's first question: halts a running target
        self.name = self.data("status")["device"]  # type: ignore[index]
        self._regs = self._call(self.client.registers)

    def _call(self, fn, *args):
        """``fn(*args)`` with the client's errors as the API's: a closed connection, or one
        that stopped answering (the reply stream is then out of step), is ConnectionLost (no
        RspError, so callers' ``except RspError`` turn only the stub's refusals into theirs)."""
        try:
            return fn(*args)
        except (ConnectionClosed, NoReply) as e:
            raise self._lost(e) from None

    def _lost(self, e: ConnectionClosed | NoReply) -> ConnectionLost:
        """The API's error for a connection that ended (``e``: ConnectionClosed) or stopped
        answering (NoReply: the reply stream is out of step, so the connection is closed)."""
        if isinstance(e, NoReply):
            self.client.close()
            return ConnectionLost(f"the stub at {self.address} stopped answering; the "
                                  "connection was closed")
        return ConnectionLost(f"lost the connection to the stub at {self.address}: {e}")

    # -- programs and commands ----------------------------------------------------------------
    def load(self, program: str | Path, input: str | None) -> str:
        words = ["json", "load", braced(str(Path(program).absolute()))]
        if input is not None:
            words.append(braced(str(Path(input).absolute())))
        try:
            out = self.monitor(" ".join(words), self.client.timeout)
        except TargetError as e:
            raise ProgramError(str(e).strip().removeprefix("json load: ")) from None
        return json.loads(out)["summary"]

    def monitor(self, command: str, timeout: float) -> str:
        try:
            return self._call(self.client.monitor, command, timeout)
        except RspError as e:
            raise TargetError(str(e).strip()) from None

    def data(self, what: str, *args: str) -> object:
        return json.loads(self.monitor(" ".join(["json", what, *map(braced, args)]),
                                       self.client.timeout))

    def tensors(self, index: int) -> tuple[TensorSpec, ...]:
        return tuple(commands.tensor_from_data(d)
                     for d in self.data("tensors", str(index)))  # type: ignore[union-attr]

    # -- running -----------------------------------------------------------------------------
    def run(self, step: bool, granularity: str | None, timeout: float,
            reverse: bool = False) -> dict | None:
        if granularity is not None:  # finer steps are a monitor command (no RSP packet)
            # not through _call: a step that outlives its timeout is a Timeout, not a lost
            # connection (the stub's session is busy in the command, so the connection must go)
            try:
                self.client.monitor(f"step {granularity}", timeout)
            except ConnectionClosed as e:
                raise ConnectionLost(f"lost the connection to the stub at {self.address}: "
                                     f"{e}") from None
            except NoReply:
                self.client.close()
                raise Timeout(f"step {granularity}: no stop within {timeout:g} s; the "
                              "connection was closed (the stub was still in the step)") from None
            except RspError as e:
                raise TargetError(str(e).strip()) from None
            return self.data("stop")  # type: ignore[return-value]
        packet = ("bs" if step else "bc") if reverse else ("vCont;s" if step else "vCont;c")
        self._call(self.client.start_packet, packet)
        try:
            reply = self.client.wait_stop(timeout)
        except ConnectionClosed as e:
            raise ConnectionLost(f"lost the connection to the stub at {self.address}: {e}") \
                from None
        except NoReply:
            self._call(self.client.interrupt)
            self._call(self.client.wait_stop, HALT_WAIT)  # the halt's stop reply
            return None
        if reply.startswith("E"):
            if reply == "E10":
                raise TargetRunning("resume")
            raise TargetError(f"the stub refused to run the target ({reply}): another client "
                              "controls run state")
        return self.data("stop")  # type: ignore[return-value]

    # -- breakpoints and watchpoints ------------------------------------------------------------
    def add_breakpoint(self, address: int) -> None:
        self._z("Z0", address, 4)

    def remove_breakpoint(self, address: int) -> None:
        self._z("z0", address, 4)

    def add_watchpoint(self, kind: str, start: int, length: int) -> None:
        self._z(f"Z{_WATCH_Z[kind]}", start, length)

    def remove_watchpoint(self, kind: str, start: int, length: int) -> None:
        self._z(f"z{_WATCH_Z[kind]}", start, length)

    def _z(self, op: str, address: int, length: int) -> None:
        reply = self._call(self.client.request, f"{op},{address:x},{length:x}")
        if reply == b"E0e":
            raise BusError(address, f"a {'watchpoint' if op[1] != '0' else 'breakpoint'} of "
                           f"{length} bytes here is not in the memory map")
        if reply != b"OK":
            raise TargetError(f"{op} at {address:#010x}: the stub replied {reply.decode()!r}")

    # -- registers and memory -----------------------------------------------------------------
    def register_names(self) -> list[str]:
        # regnum order: the core's, then the description's (target.xml lists by group)
        return sorted(self._regs, key=lambda n: self._regs[n][0])

    def read_register(self, name: str) -> int:
        if name not in self._regs:  # an alias, or no such register: the stub says which
            return self._register(name)["value"]
        try:  # _call's handling written out: a loop of reads pays no extra call per read
            return self.client.read_register(name)
        except (ConnectionClosed, NoReply) as e:
            raise self._lost(e) from None
        except RspError as e:
            raise TargetError(str(e)) from None

    def read_registers(self, names: list[str]) -> list[int]:
        known = [n for n in names if n in self._regs]
        try:
            values = dict(zip(known, self._call(self.client.read_registers, known)))
        except RspError as e:
            raise TargetError(str(e)) from None
        return [values[n] if n in values else self.read_register(n) for n in names]

    def _register(self, name: str) -> dict:
        return register_or_raise(self.data("register", name))

    def write_register(self, name: str, value: int) -> None:
        if name not in self._regs:
            name = self._register(name)["name"]
        bits = self._regs[name][1]
        try:
            self._call(self.client.write_register, name, value & ((1 << bits) - 1))
        except RspError as e:
            if "(E10)" in str(e):
                raise TargetRunning("register write") from None
            raise TargetError(str(e)) from None

    def read_memory(self, address: int, size: int) -> bytes:
        try:
            return self._call(self.client.read_memory, address, size)
        except RspError as e:
            raise BusError(address, f"cannot read {size} bytes: {e}") from None

    def write_memory(self, address: int, data: bytes) -> None:
        try:
            self._call(self.client.write_memory, address, data)
        except RspError as e:
            if "(E10)" in str(e):
                raise TargetRunning("memory write") from None
            raise BusError(address, f"cannot write {len(data)} bytes: {e}") from None

    def close(self) -> None:
        """Detach (the stub drops this connection's breakpoints and watchpoints)."""
        try:
            self.client.request("D", timeout=1.0)
        except RspError:
            pass
        self.client.close()


def register_or_raise(data: object) -> dict:
    """``register_data``'s answer, or the RegisterNotFound it describes (same message on both
    back ends: the stub's description lookup made it)."""
    assert isinstance(data, dict)
    if data.get("error") == "RegisterNotFound":
        raise RegisterNotFound(data["name"], data["device"], data["close"])
    return data


def braced(word: str) -> str:
    """A word for the command line: Tcl braces keep spaces and specials literal."""
    if word and not any(c in word for c in " \t\n;{}\\\"[]$"):
        return word
    if "{" in word or "}" in word:
        raise ValueError(f"{word!r}: braces cannot be passed to a monitor command")
    return "{" + word + "}"
