"""The servers: one gdb port per device (3333, 3334, ...), telnet 4444 and Tcl RPC 6666, all
bound to 127.0.0.1 unless told otherwise, all sharing one command table and one
:class:`RunControl` per device (OpenOCD's layout, docs/design-notes.md "OpenOCD commands").
"""
from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from accelstub.devices.device import CORE_REGS, Device, ProgramOptions
from accelstub.devices.history import DEFAULT_BUDGET_MIB
from accelstub.devices.runcontrol import RunControl

from .commands import CommandContext
from .heap import pin_mmap_threshold
from .listener import TcpListener
from .session import GdbSession
from .target_xml import memory_map_xml, register_table, target_xml
from .transports import SocketConnection

log = logging.getLogger("accelstub.server")


class GdbServer(TcpListener):
    """gdb connections to one device. The oldest connection controls run state; the others may
    read and write memory and registers, and a ``continue`` from them returns at the next stop."""

    def __init__(self, rc: RunControl, context_factory: Callable[..., CommandContext],
                 host: str = "127.0.0.1", port: int = 3333) -> None:
        super().__init__(host, port)
        self.kind = "gdb"
        self.rc = rc
        self._context_factory = context_factory
        desc = rc.device.description
        self.regnums = {e.regnum: e for e in register_table(desc)}
        self.core_names = sorted(CORE_REGS, key=lambda n: 25 if n == "xpsr" else CORE_REGS.index(n))
        self.target_xml = target_xml(desc).encode()
        self.memory_map = memory_map_xml(desc).encode()
        self.sessions: list[GdbSession] = []

    def command_context(self, log: Callable[[str], None]) -> CommandContext:
        return self._context_factory(log=log, rc=self.rc)

    # -- sessions ------------------------------------------------------------------------------
    def is_controller(self, session: GdbSession) -> bool:
        with self._lock:
            return bool(self.sessions) and self.sessions[0] is session

    def session_ended(self, session: GdbSession) -> None:
        with self._lock:
            if session in self.sessions:
                self.sessions.remove(session)
        log.info("gdb client %s detached", session.conn.peer)

    def serve_connection(self, conn) -> None:
        """Run one session on ``conn`` in the calling thread (stdio, serial, accepted sockets)."""
        session = GdbSession(self, conn)
        with self._lock:
            self.sessions.append(session)
        log.info("gdb client %s attached", conn.peer)
        session.serve()

    # -- TCP listener (TcpListener) -------------------------------------------------------------
    def new_connection(self, sock: socket.socket, peer) -> _Accepted:
        return _Accepted(self, sock)

    def stop(self) -> None:
        super().stop()
        with self._lock:
            sessions = list(self.sessions)
        for s in sessions:
            s.closed = True
            s.conn.close()


class _Accepted:
    """An accepted gdb socket, as TcpListener tracks it."""

    def __init__(self, server: GdbServer, sock: socket.socket) -> None:
        self.server, self.sock, self.closed = server, sock, False

    def serve(self) -> None:
        try:
            self.server.serve_connection(SocketConnection(self.sock))
        finally:
            self.server._ended(self)


class StubServer:
    """Everything ``accelstub serve`` runs: gdb ports, telnet and Tcl RPC over shared state."""

    def __init__(self, devices: list[Device], host: str = "127.0.0.1", gdb_port: int | None = 3333,
                 telnet_port: int | None = 4444, tcl_port: int | None = 6666,
                 cwd: Path | None = None, history_mib: int = DEFAULT_BUDGET_MIB) -> None:
        self.host = host
        self.targets = [RunControl(d) for d in devices]
        for rc in self.targets:  # clients can go back (reverse-stepi): record (history.py)
            rc.history.budget = history_mib << 20
        self.cwd = cwd or Path.cwd()
        self.shutdown_requested = threading.Event()
        self.gdb = [GdbServer(rc, self._context_factory, host,
                              0 if gdb_port in (0, None) else gdb_port + i)
                    for i, rc in enumerate(self.targets)]
        self._gdb_port = gdb_port
        self.telnet = self.tcl = None
        self._telnet_port, self._tcl_port = telnet_port, tcl_port

    def context(self, log: Callable[[str], None] = print, rc: RunControl | None = None
                ) -> CommandContext:
        current = self.targets.index(rc) if rc is not None else 0
        return CommandContext(targets=self.targets, current=current, log=log,
                              shutdown=self.shutdown_requested.set, cwd=self.cwd)

    _context_factory = context

    def load_program(self, path, target: int = 0, log: Callable[[str], None] = print,
                     options: ProgramOptions = ProgramOptions()) -> str:
        """Load ``path`` into a target and make `reset init` load it again. A program that
        became invalid on disk since is a user error of `reset init` (the one line `accelstub
        run` prints for it), not an internal error with a traceback."""
        from .program import load_for_reset

        return load_for_reset(self.context(log=log, rc=self.targets[target]), path, options)

    def start(self) -> None:
        pin_mmap_threshold()  # many connection threads: keep freed large buffers off the heaps
        if self._gdb_port is not None:
            for g in self.gdb:
                g.start()
        if self._telnet_port is not None:
            from .telnet import TelnetServer

            self.telnet = TelnetServer(self.context, self.host, self._telnet_port)
            self.telnet.start()
        if self._tcl_port is not None:
            from .tcl_rpc import TclRpcServer

            self.tcl = TclRpcServer(self.context, self.host, self._tcl_port)
            self.tcl.start()

    def ready_info(self) -> dict:
        info: dict = {"event": "ready", "host": self.host,
                      "devices": [rc.device.name for rc in self.targets]}
        if self._gdb_port is not None:
            info["gdb"] = [g.port for g in self.gdb]
        if self.telnet is not None:
            info["telnet"] = self.telnet.port
        if self.tcl is not None:
            info["tcl"] = self.tcl.port
        return info

    def ready_line(self) -> str:
        return "accelstub ready " + json.dumps(self.ready_info(), separators=(",", ":"))

    def stop(self) -> None:
        for g in self.gdb:
            g.stop()
        for srv in (self.telnet, self.tcl):
            if srv is not None:
                srv.stop()
        for rc in self.targets:
            if rc.running:
                rc.halt_and_wait(2)
