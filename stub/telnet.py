"""Telnet command line (OpenOCD port 4444): one human per connection, the shared command table.

The server works in the client's line mode: it sends no option negotiation and discards every
IAC sequence the client sends (IAC IAC is a literal 0xff). Backspace/DEL edit the line for
clients in character mode. Each connection gets its own CommandContext (its own current target);
stops that no command of this connection reported (a ``resume`` that finished later, a halt from
gdb) are printed as OpenOCD prints them asynchronously. Output goes through a writer thread
(listener.OutputQueue): a stop message never blocks the run-control worker that reports it,
and a client that does not read is no longer read once 1 MiB of replies wait.
"""
from __future__ import annotations

import logging
import socket
import threading

from .commands import CommandContext, CommandError, context_for, execute, halted_message
from .listener import OutputQueue, TcpListener

log = logging.getLogger("accelstub.telnet")

IAC, SB, SE = 255, 250, 240
WILL, WONT, DO, DONT = 251, 252, 253, 254
PROMPT = "> "
BANNER = "accelstub telnet server (OpenOCD-compatible command set); 'help' lists commands"
MAX_LINE = 1 << 20


class _TelnetDecoder:
    """Strips telnet commands from a byte stream and yields complete lines."""

    def __init__(self) -> None:
        self.state = "data"
        self.line = bytearray()
        self.last_cr = False

    def feed(self, data: bytes) -> list[str]:
        lines: list[str] = []
        for b in data:
            st = self.state
            if st == "iac":
                if b == IAC:
                    self.state = "data"
                    self._char(b, lines)
                elif b in (WILL, WONT, DO, DONT):
                    self.state = "opt"
                elif b == SB:
                    self.state = "sb"
                else:
                    self.state = "data"  # NOP, IP, AYT, ...: discarded
                continue
            if st == "opt":
                self.state = "data"
                continue
            if st == "sb":
                if b == IAC:
                    self.state = "sb_iac"
                continue
            if st == "sb_iac":
                self.state = "data" if b == SE else "sb"
                continue
            if b == IAC:
                self.state = "iac"
                continue
            self._char(b, lines)
        return lines

    def _char(self, b: int, lines: list[str]) -> None:
        if b == 0 and self.last_cr:  # CR NUL
            self.last_cr = False
            return
        if b == 10 and self.last_cr:  # CR LF: the CR already ended the line
            self.last_cr = False
            return
        self.last_cr = b == 13
        if b in (10, 13):
            lines.append(self.line.decode("utf-8", "replace"))
            self.line.clear()
        elif b in (8, 127):
            if self.line:
                del self.line[-1]
        elif b >= 32 or b == 9:
            if len(self.line) < MAX_LINE:
                self.line.append(b)


class _Connection:
    def __init__(self, server: "TelnetServer", sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.out = OutputQueue(sock, "telnet-writer", self._overflow)
        self.busy_lock = threading.Lock()
        self.busy = False
        self.pending: list = []  # (rc, stop) seen while a command ran
        self.closed = False
        self.ctx: CommandContext = context_for(server.context_source, self.log_line)
        self._listeners = []

    # -- output -----------------------------------------------------------------------------
    def write(self, text: str, unsolicited: bool = False) -> None:
        data = text.replace("\r\n", "\n").replace("\n", "\r\n").encode("utf-8", "replace")
        self.out.put(data, unsolicited)

    def _overflow(self) -> None:
        """A stop message found 1 MiB of unsent stop messages: the client reads nothing. Close
        without blocking the caller (a run-control worker)."""
        if not self.closed:
            log.warning("telnet client does not read its output; closing the connection")
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def log_line(self, text: str) -> None:
        self.write(text.rstrip("\n") + "\n")

    # -- asynchronous stops -------------------------------------------------------------------
    def _listener(self, rc):
        def on_stop(stop) -> None:
            with self.busy_lock:
                if self.busy:
                    self.pending.append((rc, stop))
                    return
            self.write("\n" + halted_message(rc, stop) + "\n" + PROMPT, unsolicited=True)
        return on_stop

    # -- loop -------------------------------------------------------------------------------
    def serve(self) -> None:
        for rc in self.ctx.targets:
            fn = self._listener(rc)
            rc.add_stop_listener(fn)
            self._listeners.append((rc, fn))
        decoder = _TelnetDecoder()
        try:
            self.write(BANNER + "\n" + PROMPT)
            while not self.closed and self.out.wait_room():
                try:
                    data = self.sock.recv(4096)
                except OSError:
                    break
                if not data:
                    break
                for line in decoder.feed(data):
                    if not self.out.wait_room() or not self.handle(line):
                        self.closed = True
                        break
        finally:
            self.close()

    def handle(self, line: str) -> bool:
        """Run one line; False closes the connection."""
        text = line.strip()
        if text in ("exit", "quit"):
            return False
        if not text:
            self.write(PROMPT)
            return True
        with self.busy_lock:
            self.busy = True
        closing = False
        try:
            try:
                result = execute(self.ctx, text)
                if result:
                    self.write(result.rstrip("\n") + "\n")
                closing = text.split()[0] == "shutdown"
            except CommandError as e:
                self.write(str(e).rstrip("\n") + "\n")
            except Exception as e:  # never let a command kill the connection
                log.exception("telnet command %r failed", text)
                self.write(f"internal error: {e!r}\n")
        finally:
            with self.busy_lock:
                self.busy = False
                pending, self.pending = self.pending, []
                reported = list(self.ctx.reported_stops)
                self.ctx.reported_stops.clear()
        for rc, stop in pending:
            if not any(stop is s for s in reported):
                self.write(halted_message(rc, stop) + "\n")
        if closing:
            return False
        self.write(PROMPT)
        return True

    def close(self) -> None:
        self.closed = True
        for rc, fn in self._listeners:
            rc.remove_stop_listener(fn)
        self._listeners = []
        self.out.close()  # sends what is queued first
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
        self.server._ended(self)


class TelnetServer(TcpListener):
    """``context`` is a CommandContext (copied per connection) or a factory ``f(log=...)``."""

    kind = "telnet"

    def __init__(self, context, host: str = "127.0.0.1", port: int = 4444) -> None:
        super().__init__(host, port)
        self.context_source = context

    def new_connection(self, sock, peer) -> _Connection:
        return _Connection(self, sock)
