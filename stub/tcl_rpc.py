"""Tcl RPC server (OpenOCD port 6666): the machine interface to the shared command table.

Framing as OpenOCD's tcl_server.c: a request is command text terminated by 0x1a, the response is
the result text terminated by 0x1a (a failing command answers its error message, as OpenOCD
does); any number of requests per connection. ``exit`` (and ``shutdown``) answer a bare 0x1a and
close. A request longer than 4 MiB is answered ``line too long`` and discarded up to its 0x1a.

After ``tcl notifications on`` (also ``tcl_notifications on``) the connection receives
``type target_event event resumed|halted\\r\\n\\x1a`` when a target starts or stops, followed by
``type target_state state running|halted\\r\\n\\x1a`` when the state differs from the last one
sent, as OpenOCD's tcl_target_callback_event_handler does. All output of a connection goes through
one writer thread (listener.OutputQueue), so a slow client never blocks a run-control worker;
a client that does not read its replies is no longer read once 1 MiB of them wait, and one
that lets 1 MiB of notifications pile up is disconnected.
"""
from __future__ import annotations

import logging
import socket
import threading

from .commands import CommandContext, CommandError, context_for, execute, split_words
from .listener import OutputQueue, TcpListener

log = logging.getLogger("accelstub.tcl")

EOM = b"\x1a"
MAX_LINE = 4 * 1024 * 1024


class _Connection:
    def __init__(self, server: TclRpcServer, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.ctx: CommandContext = context_for(server.context_source, lambda s: None)
        self.notify = False
        self.closed = False
        self._last_state: dict[int, str] = {}
        self._state_lock = threading.Lock()
        self._hooks: list = []
        self.out = OutputQueue.for_socket(sock, "tcl-writer")

    # -- output -----------------------------------------------------------------------------
    def send(self, data: bytes, unsolicited: bool = False) -> None:
        if not self.closed:
            self.out.put(data, unsolicited)

    def reply(self, text: str) -> None:
        """A result and its 0x1a, queued separately (a large result is not copied to append
        one byte)."""
        self.send(text.encode("utf-8", "replace"))
        self.send(EOM)

    # -- notifications --------------------------------------------------------------------------
    def _event(self, index: int, event: str, state: str) -> None:
        if not self.notify:
            return
        out = b"type target_event event %s\r\n\x1a" % event.encode()
        with self._state_lock:
            if self._last_state.get(index) != state:
                self._last_state[index] = state
                out += b"type target_state state %s\r\n\x1a" % state.encode()
        self.send(out, unsolicited=True)

    def _subscribe(self) -> None:
        for i, rc in enumerate(self.ctx.targets):
            on_stop = (lambda i: lambda stop: self._event(i, "halted", "halted"))(i)
            on_run = (lambda i: lambda: self._event(i, "resumed", "running"))(i)
            rc.add_stop_listener(on_stop)
            rc.add_run_listener(on_run)
            self._hooks.append((rc, on_stop, on_run))

    def _unsubscribe(self) -> None:
        for rc, on_stop, on_run in self._hooks:
            rc.remove_stop_listener(on_stop)
            rc.remove_run_listener(on_run)
        self._hooks = []

    # -- requests -----------------------------------------------------------------------------
    def serve(self) -> None:
        self._subscribe()
        buf = bytearray()
        discarding = False
        try:
            while not self.closed and self.out.wait_room():
                try:
                    data = self.sock.recv(65536)
                except OSError:
                    break
                if not data:
                    break
                buf += data
                while not self.closed and self.out.wait_room():
                    end = buf.find(EOM)
                    if end < 0:
                        if len(buf) > MAX_LINE:
                            if not discarding:
                                self.send(b"line too long" + EOM)
                                discarding = True
                            buf.clear()
                        break
                    request = bytes(buf[:end])
                    del buf[:end + 1]
                    if discarding:
                        discarding = False
                        continue
                    if len(request) > MAX_LINE:
                        self.send(b"line too long" + EOM)
                        continue
                    if not self.handle(request.decode("utf-8", "replace")):
                        self.closed = True
        finally:
            self.close()

    def handle(self, text: str) -> bool:
        """Answer one request; False closes the connection."""
        stripped = text.strip()
        try:
            words = split_words(stripped) if ";" not in stripped and "\n" not in stripped else None
        except CommandError as e:
            self.reply(str(e))
            return True
        if words is not None and words:
            head = words[0]
            if head == "exit":
                self.send(EOM)
                return False
            if (head == "tcl" and len(words) >= 2 and words[1] == "notifications") or \
                    head == "tcl_notifications":
                rest = words[2:] if head == "tcl" else words[1:]
                self.send(self._notifications(rest).encode() + EOM)
                return True
            if head == "shutdown":
                try:
                    execute(self.ctx, stripped)
                except CommandError as e:
                    self.reply(str(e))
                    return True
                self.send(EOM)
                return False
        try:
            result = execute(self.ctx, text)
        except CommandError as e:
            result = str(e)
        except Exception as e:  # never let a command kill the server
            log.exception("tcl command %r failed", text)
            result = f"internal error: {e!r}"
        self.ctx.reported_stops.clear()
        self.reply(result)
        return True

    def _notifications(self, args: list[str]) -> str:
        if len(args) > 1:
            return "usage: tcl notifications [on|off]"
        if args:
            value = args[0].lower()
            if value in ("on", "enable", "1", "true"):
                self.notify = True
            elif value in ("off", "disable", "0", "false"):
                self.notify = False
            else:
                return f"tcl notifications: argument '{args[0]}' is not valid"
            return ""
        return "Target Notification output is " + ("enabled" if self.notify else "disabled")

    def close(self) -> None:
        self.closed = True
        self._unsubscribe()
        self.out.close()  # sends what is queued (exit's reply) first
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
        self.server._ended(self)


class TclRpcServer(TcpListener):
    """``context`` is a CommandContext (copied per connection) or a factory ``f(log=...)``."""

    kind = "tcl"

    def __init__(self, context, host: str = "127.0.0.1", port: int = 6666) -> None:
        super().__init__(host, port)
        self.context_source = context

    def new_connection(self, sock, peer) -> _Connection:
        return _Connection(self, sock)
