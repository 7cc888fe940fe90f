"""Telnet command line (OpenOCD port 4444): one human per connection, the shared command table.

Modes, as OpenOCD's telnet server: on connect the server offers character mode (IAC WILL ECHO,
IAC WILL SUPPRESS-GO-AHEAD, IAC DO SUPPRESS-GO-AHEAD, IAC DONT ECHO). A telnet client accepts
with IAC DO ECHO; from then on the server echoes and edits the line (:class:`LineEditor`:
backspace/delete, left/right/home/end, up/down history, Ctrl-C drops the line, Ctrl-D on an
empty line closes). A client that never answers (``nc``, scripts sending whole lines) stays in
line mode: nothing is echoed and lines are taken as they arrive, as before; the offer is the
only extra output (12 bytes before the banner, as OpenOCD sends them). Other options are
refused (DONT/WONT, once each). Each connection gets its own CommandContext (its own current
target); stops that no command of this connection reported (a ``resume`` that finished later,
a halt from gdb) are printed as OpenOCD prints them asynchronously, and in character mode the
line being typed is drawn again after them. Output goes through a writer thread
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

IAC, SB, SE, IP = 255, 250, 240, 244
WILL, WONT, DO, DONT = 251, 252, 253, 254
ECHO, SGA = 1, 3
PROMPT = "> "
BANNER = "accelstub telnet server (OpenOCD-compatible command set); 'help' lists commands"
MAX_LINE = 1 << 20
#: sent on connect: the server echoes and the client sends characters as typed (OpenOCD's)
NEGOTIATION = bytes([IAC, WILL, SGA, IAC, WILL, ECHO, IAC, DO, SGA, IAC, DONT, ECHO])
HISTORY_SIZE = 128  # lines kept per connection (OpenOCD: TELNET_LINE_HISTORY_SIZE)
_MAX_ESCAPE = 16  # longest escape sequence parsed; longer ones are dropped


class _TelnetDecoder:
    """Splits a byte stream into data and telnet commands. :meth:`feed` returns, in order,
    ``bytes`` of data and ``(command, option)`` tuples (WILL/WONT/DO/DONT with their option,
    ``(IP, 0)`` for an interrupt); subnegotiations and other commands are dropped and
    IAC IAC is a literal 0xff."""

    def __init__(self) -> None:
        self.state = "data"
        self.command = 0

    def feed(self, data: bytes) -> list:
        if self.state == "data" and IAC not in data:
            return [data] if data else []
        items: list = []
        chunk = bytearray()
        for b in data:
            st = self.state
            if st == "data":
                if b == IAC:
                    self.state = "iac"
                else:
                    chunk.append(b)
            elif st == "iac":
                self.state = "data"
                if b == IAC:
                    chunk.append(b)
                elif b in (WILL, WONT, DO, DONT):
                    self.state, self.command = "opt", b
                elif b == SB:
                    self.state = "sb"
                elif b == IP:
                    items += [bytes(chunk), (IP, 0)]
                    chunk.clear()
            elif st == "opt":
                self.state = "data"
                items += [bytes(chunk), (self.command, b)]
                chunk.clear()
            elif st == "sb":
                if b == IAC:
                    self.state = "sb_iac"
            else:  # sb_iac
                self.state = "data" if b == SE else "sb"
        items.append(bytes(chunk))
        return [i for i in items if i != b""]


class LineAssembler:
    """Line mode: lines as the client sends them (CR, LF, CR LF or CR NUL end a line);
    backspace/DEL still remove the last character for clients that send them."""

    def __init__(self) -> None:
        self.line = bytearray()
        self.last_cr = False

    def feed(self, data: bytes) -> list:
        """The complete lines (str), in order."""
        lines: list = []
        for b in data:
            if b == 0 and self.last_cr:  # CR NUL
                self.last_cr = False
                continue
            if b == 10 and self.last_cr:  # CR LF: the CR already ended the line
                self.last_cr = False
                continue
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
        return lines


class LineEditor:
    """Character mode: the line being typed, the cursor in it, the history, and what to echo
    for each key so the client's screen shows the line (the client does no local echo).

    Keys: printable bytes insert at the cursor; backspace (DEL or ^H) deletes before it and
    Delete (ESC [ 3 ~) or ^D under it; ESC [ D / C (or ESC O D / C) move left/right, Home/End
    (ESC [ H / F, ESC [ 1~ / 4~, ^A / ^E) to the ends; ESC [ A / B step through the history
    (the line being typed comes back after the newest entry); ^U clears the line; ^C drops it
    and prompts again; ^D on an empty line ends the session (:data:`EOF` in the lines); CR,
    LF, CR LF or CR NUL run it. Other control bytes and unknown escape sequences are ignored.
    The line is edited byte by byte: a typed multi-byte UTF-8 character moves the cursor by
    its bytes (commands are ASCII)."""

    EOF = None  # in the returned lines: the client asked to end the session

    def __init__(self, line: bytes = b"") -> None:
        self.line = bytearray(line)
        self.cursor = len(self.line)
        self.history: list[bytes] = []
        self._browse = 0  # index into history; len(history) = the line being typed
        self._typed = b""  # the line being typed, kept while browsing the history
        self._esc: bytearray | None = None  # an escape sequence being read
        self.last_cr = False

    def redraw(self) -> bytes:
        """The line and the cursor, to follow a prompt (after asynchronous output)."""
        return bytes(self.line) + b"\b" * (len(self.line) - self.cursor)

    def feed(self, data: bytes) -> list:
        """In order: bytes to echo, complete lines (str) and EOF."""
        out: list = []
        echo = bytearray()
        for b in data:
            if self._esc is not None:
                self._escape(b, echo)
                continue
            if self.last_cr and b in (0, 10):  # CR NUL / CR LF: the CR ended the line
                self.last_cr = False
                continue
            self.last_cr = b == 13
            if b in (10, 13):
                out += [bytes(echo) + b"\r\n", self._enter()]
                echo.clear()
            elif b == 27:
                self._esc = bytearray()
            elif b in (8, 127):
                if self.cursor:
                    self.cursor -= 1
                    echo += b"\b" + self._delete_at_cursor()
            elif b == 4:  # ^D
                if self.line:
                    echo += self._delete_at_cursor()
                else:
                    out += [bytes(echo), self.EOF]
                    return out
            elif b == 3:  # ^C
                echo += b"^C\r\n" + PROMPT.encode()
                self._reset(b"")
            elif b == 1:  # ^A
                echo += self._move(0)
            elif b == 5:  # ^E
                echo += self._move(len(self.line))
            elif b == 21:  # ^U
                echo += self._replace(b"")
            elif b >= 32 and len(self.line) < MAX_LINE:
                rest = bytes(self.line[self.cursor:])
                self.line.insert(self.cursor, b)
                self.cursor += 1
                echo += bytes((b,)) + rest + b"\b" * len(rest)
        if echo:
            out.append(bytes(echo))
        return out

    def interrupt(self) -> bytes:
        """IAC IP (a client's Ctrl-C in its own line mode): as ^C."""
        self._reset(b"")
        return b"^C\r\n" + PROMPT.encode()

    # -- editing ------------------------------------------------------------------------------
    def _reset(self, line: bytes) -> None:
        self.line = bytearray(line)
        self.cursor = len(line)
        self._browse = len(self.history)
        self._typed = b""

    def _enter(self) -> str:
        line = bytes(self.line)
        if line.strip() and (not self.history or self.history[-1] != line):
            self.history.append(line)
            del self.history[:-HISTORY_SIZE]
        self._reset(b"")
        return line.decode("utf-8", "replace")

    def _delete_at_cursor(self) -> bytes:
        """Remove the byte under the cursor; the echo that redraws the rest of the line."""
        if self.cursor >= len(self.line):
            return b""
        del self.line[self.cursor]
        rest = bytes(self.line[self.cursor:])
        return rest + b" " + b"\b" * (len(rest) + 1)

    def _move(self, to: int) -> bytes:
        to = max(0, min(to, len(self.line)))
        if to < self.cursor:
            out = b"\b" * (self.cursor - to)
        else:
            out = bytes(self.line[self.cursor:to])
        self.cursor = to
        return out

    def _replace(self, line: bytes) -> bytes:
        """Show ``line`` instead of the current one, the cursor at its end."""
        old = len(self.line)
        out = b"\b" * self.cursor + line
        if len(line) < old:  # blank what the old line had past the new one
            out += b" " * (old - len(line)) + b"\b" * (old - len(line))
        self.line = bytearray(line)
        self.cursor = len(line)
        return out

    def _history(self, step: int) -> bytes:
        to = self._browse + step
        if not 0 <= to <= len(self.history):
            return b""
        if self._browse == len(self.history):
            self._typed = bytes(self.line)
        self._browse = to
        return self._replace(self.history[to] if to < len(self.history) else self._typed)

    def _escape(self, b: int, echo: bytearray) -> None:
        """One byte of ``ESC [ params final`` or ``ESC O final``."""
        seq = self._esc
        assert seq is not None
        seq.append(b)
        if len(seq) == 1:
            if b not in (0x5B, 0x4F):  # ESC followed by anything else: ignored
                self._esc = None
            return
        if 0x40 <= b <= 0x7E:  # the final byte
            self._esc = None
            key = bytes(seq[1:])
            if key in (b"A", b"B"):
                echo += self._history(-1 if key == b"A" else 1)
            elif key == b"C":
                echo += self._move(self.cursor + 1)
            elif key == b"D":
                echo += self._move(self.cursor - 1)
            elif key in (b"H", b"1~", b"7~"):
                echo += self._move(0)
            elif key in (b"F", b"4~", b"8~"):
                echo += self._move(len(self.line))
            elif key == b"3~":
                echo += self._delete_at_cursor()
        elif len(seq) > _MAX_ESCAPE:
            self._esc = None


class _Connection:
    def __init__(self, server: TelnetServer, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.out = OutputQueue.for_socket(sock, "telnet-writer")
        self.busy_lock = threading.Lock()
        self.busy = False
        self.pending: list = []  # (rc, stop) seen while a command ran
        self.closed = False
        self.ctx: CommandContext = context_for(server.context_source, self.log_line)
        self._listeners = []
        #: LineAssembler until the client accepts character mode, then LineEditor; the lock
        #: keeps an asynchronous stop message from cutting into an echo or a redraw
        self.input: LineAssembler | LineEditor = LineAssembler()
        self.edit_lock = threading.Lock()
        self._refused: set[tuple[int, int]] = set()  # option answers sent (each once: no loops)

    # -- output -----------------------------------------------------------------------------
    @staticmethod
    def _encode(text: str) -> bytes:
        return text.replace("\r\n", "\n").replace("\n", "\r\n").encode("utf-8", "replace")

    def write(self, text: str) -> None:
        self.out.put(self._encode(text))

    def log_line(self, text: str) -> None:
        self.write(text.rstrip("\n") + "\n")

    # -- asynchronous stops -------------------------------------------------------------------
    def _listener(self, rc):
        def on_stop(stop) -> None:
            with self.busy_lock:
                if self.busy:
                    self.pending.append((rc, stop))
                    return
            with self.edit_lock:
                redraw = self.input.redraw() if isinstance(self.input, LineEditor) else b""
                self.out.put(self._encode("\n" + halted_message(rc, stop) + "\n" + PROMPT)
                             + redraw, unsolicited=True)
        return on_stop

    # -- telnet options ---------------------------------------------------------------------
    @property
    def char_mode(self) -> bool:
        return isinstance(self.input, LineEditor)

    def _option(self, command: int, option: int) -> None:
        """A client's answer or request. DO ECHO accepts character mode, DONT ECHO returns to
        line mode; requests for other options are refused once (a refusal that the client
        answers again is not answered, so no negotiation loops)."""
        if command == IP:
            if self.char_mode:
                with self.edit_lock:
                    self.out.put(self.input.interrupt())  # type: ignore[union-attr]
            return
        with self.edit_lock:
            if command == DO and option == ECHO and not self.char_mode:
                self.input = LineEditor(bytes(self.input.line))
            elif command == DONT and option == ECHO and self.char_mode:
                assembler = LineAssembler()
                assembler.line = self.input.line
                self.input = assembler
        answer = None
        if command == DO and option not in (ECHO, SGA):
            answer = WONT
        elif command == WILL and option != SGA:
            answer = DONT
        if answer is not None and (answer, option) not in self._refused:
            self._refused.add((answer, option))
            self.out.put(bytes([IAC, answer, option]))

    # -- loop -------------------------------------------------------------------------------
    def serve(self) -> None:
        for rc in self.ctx.targets:
            fn = self._listener(rc)
            rc.add_stop_listener(fn)
            self._listeners.append((rc, fn))
        decoder = _TelnetDecoder()
        try:
            self.out.put(NEGOTIATION)
            self.write(BANNER + "\n" + PROMPT)
            while not self.closed and self.out.wait_room():
                try:
                    data = self.sock.recv(4096)
                except OSError:
                    break
                if not data:
                    break
                for item in decoder.feed(data):
                    if isinstance(item, tuple):
                        self._option(*item)
                    elif not self._input(item):
                        self.closed = True
                        break
        finally:
            self.close()

    def _input(self, data: bytes) -> bool:
        """Typed data: echo it (character mode) and run the lines it completes; False
        closes the connection."""
        with self.edit_lock:
            events = self.input.feed(data)
        for ev in events:
            if isinstance(ev, bytes):
                self.out.put(ev)
            elif ev is LineEditor.EOF or not self.out.wait_room() or not self.handle(ev):
                return False
        return True

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
