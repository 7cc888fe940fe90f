"""Issue 14 #12 (telnet): character mode with line editing and history, as OpenOCD's telnet
server; clients that never accept it (nc, scripts) keep line mode. Raw sockets on 127.0.0.1
send the bytes a terminal sends (escape sequences, DEL, ^C, ^D)."""
from __future__ import annotations

import socket
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelstub.stub.commands import CommandContext
from accelstub.stub.telnet import (
    BANNER,
    NEGOTIATION,
    PROMPT,
    LineEditor,
    TelnetServer,
    _TelnetDecoder,
)

from ..helpers import TelnetClient

IAC, DO, DONT, WILL, WONT = 255, 253, 254, 251, 252
ECHO, SGA = 1, 3
SRAM = 0x50400000
UP, DOWN, RIGHT, LEFT = b"\x1b[A", b"\x1b[B", b"\x1b[C", b"\x1b[D"
HOME, END, DELETE = b"\x1b[H", b"\x1b[F", b"\x1b[3~"


@pytest.fixture
def server(rc):
    srv = TelnetServer(CommandContext(targets=[rc], log=lambda s: None), "127.0.0.1", 0)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


class Raw(TelnetClient):
    """A socket that keeps everything received, and reads until a marker."""

    def __init__(self, port: int) -> None:
        super().__init__(port, timeout=5)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)


@pytest.fixture
def line_client(server):
    c = Raw(server.port)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def char_client(server):
    """A client that accepts character mode as telnet does (DO ECHO, DO SGA, WILL SGA)."""
    c = Raw(server.port)
    c.until(PROMPT.encode())
    c.send(bytes([IAC, DO, ECHO, IAC, DO, SGA, IAC, WILL, SGA]))
    try:
        yield c
    finally:
        c.close()


def run(c: Raw, keys: bytes) -> bytes:
    """Send keys ending in Enter; everything up to the next prompt."""
    c.send(keys)
    return c.until(b"\r\n" + PROMPT.encode())[:-len(PROMPT)]


# -- line mode: what scripts and nc see ------------------------------------------------------

def test_line_mode_client_sees_the_offer_then_exactly_the_old_transcript(line_client, rc):
    c = line_client
    assert c.until(PROMPT.encode()) == NEGOTIATION + BANNER.encode() + b"\r\n" + PROMPT.encode()
    c.send(b"mww 0x50400000 0xcafe\r\nmdw 0x50400000\nversion\r\n")
    assert c.until(PROMPT.encode()) == PROMPT.encode()  # no echo of the line
    assert c.until(PROMPT.encode()) == b"0x50400000: 0000cafe \r\n" + PROMPT.encode()
    assert c.until(PROMPT.encode()) == (b"accelstub 0.1.0 (OpenOCD-compatible command set)\r\n"
                                        + PROMPT.encode())
    # an escape sequence in line mode is not editing: ESC is dropped, "OP" stays (as before)
    c.send(b"\x1bOP\r\n")  # F1
    assert c.until(PROMPT.encode()) == b'invalid command name "OP"\r\n' + PROMPT.encode()
    c.sock.settimeout(0.3)
    with pytest.raises(socket.timeout):
        c.sock.recv(100)  # nothing else: no echo, no redraw
    assert rc.device.read(SRAM, 4) == b"\xfe\xca\0\0"


def test_backspace_still_edits_in_line_mode(line_client):
    line_client.until(PROMPT.encode())
    line_client.send(b"versionx\x7f\r\n")
    assert line_client.until(PROMPT.encode()).startswith(b"accelstub 0.1.0")


# -- character mode ---------------------------------------------------------------------------

def test_typed_characters_are_echoed_and_enter_runs_the_line(char_client):
    c = char_client
    for ch in b"mww 0x50400000 7":  # one key per segment, as a person types
        c.send(bytes((ch,)))
    assert c.until(b"7") == b"mww 0x50400000 7"
    assert run(c, b"\r\x00") == b"\r\n"  # CR NUL: Enter, echoed as CR LF
    assert run(c, b"mdw 0x50400000\r\n") == b"mdw 0x50400000\r\n0x50400000: 00000007 \r\n"


def test_backspace_and_delete_edit_the_line(char_client):
    c = char_client
    out = run(c, b"mdx\x7fw 0x50400000\r")
    assert out.startswith(b"mdx\b \bw 0x50400000\r\n0x50400000: ")
    # ^H too; Delete removes the character under the cursor (here after Home)
    out = run(c, b"xversionn\x08" + HOME + DELETE + b"\r")
    assert out.endswith(b"\r\naccelstub 0.1.0 (OpenOCD-compatible command set)\r\n")


def test_left_arrow_inserts_in_the_middle(char_client):
    c = char_client
    c.send(b"mww 0x50400000 0x42\r")
    c.until(b"\r\n" + PROMPT.encode())
    out = run(c, b"md 0x50400000" + LEFT * 11 + b"w" + RIGHT + END + b"\r")
    # inserting "w" before " 0x50400000" echoes it with the rest and moves back
    assert b"\b" * 11 + b"w 0x50400000" + b"\b" * 11 in out
    assert out.endswith(b"0x50400000: 00000042 \r\n")


def test_history_up_and_down(char_client):
    c = char_client
    run(c, b"mww 0x50400000 0x11\r")
    run(c, b"mdw 0x50400000\r")
    c.send(b"mww 0x50400000 0x2")  # being typed when the history is browsed
    c.until(b"0x2")
    c.send(UP + UP)  # back to the first line
    out = run(c, b"2\r")  # edit it: mww 0x50400000 0x112
    assert out.endswith(b"mww 0x50400000 0x112\r\n")
    out = run(c, UP + UP + b"\r")  # the mdw line again
    assert out.endswith(b"0x50400000: 00000112 \r\n")
    c.send(UP + DOWN + DOWN)  # down past the newest: the (empty) typed line
    out = run(c, b"version\r")
    assert out.endswith(b"accelstub 0.1.0 (OpenOCD-compatible command set)\r\n")
    # the line typed before browsing comes back below the newest entry
    c.send(b"vers")
    c.until(b"vers")
    c.send(UP + DOWN)
    assert run(c, b"ion\r").endswith(b"accelstub 0.1.0 (OpenOCD-compatible command set)\r\n")


def test_ctrl_c_drops_the_line_and_ctrl_d_closes_on_an_empty_line(char_client, server):
    c = char_client
    c.send(b"resume now\x03")
    assert c.until(b"^C\r\n" + PROMPT.encode()) == b"resume now^C\r\n" + PROMPT.encode()
    assert run(c, b"version\r").endswith(b"accelstub 0.1.0 (OpenOCD-compatible command set)\r\n")
    c.send(b"vx" + LEFT + b"\x04ersion\r")  # ^D with text: deletes under the cursor
    assert c.until(b"(OpenOCD-compatible command set)\r\n")
    c.until(PROMPT.encode())
    c.send(b"\x04")
    c.sock.settimeout(5)
    assert c.sock.recv(100) == b""  # closed
    t_end = time.monotonic() + 3
    while server.connections and time.monotonic() < t_end:
        time.sleep(0.02)
    assert server.connections == 0


def test_iac_ip_interrupts_like_ctrl_c(char_client):
    c = char_client
    c.send(b"garbage" + bytes([IAC, 244]))
    assert c.until(b"^C\r\n" + PROMPT.encode()).startswith(b"garbage")


def test_async_stop_redraws_the_line_being_typed(char_client, rc):
    from tests.max78000 import programs

    c = char_client
    c.send(b"mdw 0x504")
    c.until(b"0x504")
    programs.apply(rc.device, 2)
    rc.resume()
    assert rc.wait(10) is not None
    text = c.until(b"halted due to ")
    text += c.until(PROMPT.encode() + b"mdw 0x504")
    assert b"\r\n" + PROMPT.encode() + b"mdw 0x504" in text
    out = run(c, b"00000\r")  # the line goes on where it was
    assert out.startswith(b"00000\r\n0x50400000: ")


def test_dont_echo_returns_to_line_mode(char_client):
    c = char_client
    c.send(b"ver")
    c.until(b"ver")
    c.send(bytes([IAC, DONT, ECHO]) + b"sion\r\n")
    # no echo any more; the line typed so far is kept
    assert c.until(PROMPT.encode()) == (b"accelstub 0.1.0 (OpenOCD-compatible command set)\r\n"
                                        + PROMPT.encode())


def test_other_options_are_refused_once(char_client):
    c = char_client
    c.send(bytes([IAC, DO, 24, IAC, WILL, 31, IAC, DO, 24]))  # DO TTYPE, WILL NAWS, DO TTYPE
    got = b""
    c.sock.settimeout(0.5)
    try:
        while True:  # the answers may arrive in pieces; then nothing more
            data = c.sock.recv(100)
            if not data:
                break
            got += data
    except TimeoutError:
        pass
    assert got == bytes([IAC, WONT, 24, IAC, DONT, 31])


# -- the editor against a screen ------------------------------------------------------------

class Screen:
    """The current row of a dumb terminal: printable bytes overwrite, BS moves left, CR to
    column 0, LF starts a new row."""

    def __init__(self) -> None:
        self.row: list[int] = []
        self.col = 0

    def show(self, data: bytes) -> None:
        for b in data:
            if b == 8:
                self.col = max(0, self.col - 1)
            elif b == 13:
                self.col = 0
            elif b == 10:
                self.row, self.col = [], 0
            else:
                if self.col < len(self.row):
                    self.row[self.col] = b
                else:
                    self.row += [32] * (self.col - len(self.row)) + [b]
                self.col += 1


KEYS = [b"a", b"b", b" ", b"0", b"\x7f", b"\x08", b"\x04", b"\x01", b"\x05", b"\x15", LEFT,
        RIGHT, UP, DOWN, HOME, END, DELETE, b"\x1bOD", b"\x1b[1~", b"\x1b[4~", b"\x1b[99Z"]


#: history holds lines that were typed, so printable characters only (control keys edit)
TYPED = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(KEYS), max_size=40),
       st.lists(TYPED.map(str.encode), max_size=3))
def test_the_screen_always_shows_the_line_and_the_cursor(keys, history):
    """Whatever is typed (no Enter), the terminal row reads prompt + line (then blanks) and its
    cursor sits at the editor's cursor."""
    ed = LineEditor()
    ed.history = [h.replace(b"\r", b"").replace(b"\n", b"") or b"x" for h in history]
    ed._browse = len(ed.history)
    screen = Screen()
    screen.show(PROMPT.encode())
    for k in keys:
        if k == b"\x04" and not ed.line:
            continue  # ^D on an empty line ends the session
        for ev in ed.feed(k):
            assert isinstance(ev, bytes)
            screen.show(ev)
    text = bytes(screen.row)
    assert text[:len(PROMPT)] == PROMPT.encode()
    assert text[len(PROMPT):].rstrip(b" ") == bytes(ed.line).rstrip(b" ")
    assert len(text) - len(PROMPT) >= len(ed.line)
    assert screen.col == len(PROMPT) + ed.cursor


def test_decoder_splits_data_and_options_in_order():
    d = _TelnetDecoder()
    assert d.feed(b"ab" + bytes([IAC, DO, ECHO]) + b"c" + bytes([IAC, IAC]) + b"d") == [
        b"ab", (DO, ECHO), b"c\xffd"]
    # an option split across reads, and a subnegotiation
    assert d.feed(bytes([IAC])) == []
    assert d.feed(bytes([WILL])) == []
    assert d.feed(bytes([31, IAC, 250, 31, 0, 80, IAC, 240]) + b"x") == [(WILL, 31), b"x"]


def test_history_is_bounded_and_skips_repeats():
    from accelstub.stub.telnet import HISTORY_SIZE

    ed = LineEditor()
    for i in range(HISTORY_SIZE + 10):
        ed.feed(b"cmd%d\r" % i)
        ed.feed(b"cmd%d\r" % i)  # a repeat is kept once
        ed.feed(b"   \r")  # blank lines are not kept
    assert len(ed.history) == HISTORY_SIZE
    assert ed.history[-1] == b"cmd%d" % (HISTORY_SIZE + 9)
    assert ed.history[0] == b"cmd10"
