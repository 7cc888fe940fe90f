"""Telnet (4444) and Tcl RPC (6666) servers over real sockets on 127.0.0.1, free ports."""
from __future__ import annotations

import socket
import time

import pytest

from accelstub.devices.runcontrol import RunControl
from accelstub.stub.commands import CommandContext
from accelstub.stub.tcl_rpc import TclRpcServer
from accelstub.stub.telnet import TelnetServer
from tests.helpers import TelnetClient
from tests.max78000 import programs

EOM = b"\x1a"


@pytest.fixture
def shutdowns():
    return []


@pytest.fixture
def ctx(rc, shutdowns, tmp_path):
    return CommandContext(targets=[rc], log=lambda s: None,
                          shutdown=lambda: shutdowns.append(1), cwd=tmp_path)


@pytest.fixture
def tcl(ctx):
    server = TclRpcServer(ctx, "127.0.0.1", 0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def telnet(ctx):
    server = TelnetServer(ctx, "127.0.0.1", 0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def start_program(rc: RunControl, last_layer: int = 3) -> None:
    programs.apply(rc.device, last_layer + 1)  # LCNT_MAX = last_layer, cnn_en 0->1


class TclClient:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""
        self.notes: list[bytes] = []

    def frame(self) -> bytes:
        while EOM not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("connection closed")
            self.buf += data
        frame, _, self.buf = self.buf.partition(EOM)
        return frame

    def send(self, text: str | bytes) -> None:
        self.sock.sendall((text.encode() if isinstance(text, str) else text) + EOM)

    def call(self, text: str) -> str:
        """Send a request; return its response, keeping notifications aside."""
        self.send(text)
        while True:
            f = self.frame()
            if f.startswith(b"type target_"):
                self.notes.append(f)
                continue
            return f.decode()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def client(tcl):
    c = TclClient(tcl.port)
    try:
        yield c
    finally:
        c.close()


# -- Tcl RPC ----------------------------------------------------------------------------------

def test_tcl_framing_several_requests(client):
    assert client.call("mww 0x50400000 0x01020304") == ""
    assert client.call("mdw 0x50400000 2") == "0x50400000: 01020304 00000000 "
    assert client.call("read_memory 0x50400000 8 4") == "0x4 0x3 0x2 0x1"
    assert client.call("write_memory 0x50400004 16 {0xbeef 0xdead}") == ""
    assert client.call("read_memory 0x50400004 32 1") == "0xdeadbeef"


def test_tcl_two_requests_in_one_segment(client):
    client.sock.sendall(b"version" + EOM + b"mdb 0x50400000 2" + EOM)
    assert client.frame() == b"accelstub 0.1.0 (OpenOCD-compatible command set)"
    assert client.frame() == b"0x50400000: 00 00 "


def test_tcl_errors_are_results(client):
    assert client.call("xyz") == 'invalid command name "xyz"'
    assert client.call("mdw zz") == "mdw: invalid address 'zz'"
    assert client.call("mdw [expr 1]").startswith("command substitution")
    assert client.call("version") == "accelstub 0.1.0 (OpenOCD-compatible command set)"


def test_tcl_capture(client, rc):
    start_program(rc)
    assert client.call('capture "step"') == (
        "[max78000.cnn] halted due to single-step, layer: Layer 1\npc: 0x50100014\n")


def test_tcl_notifications_on_run(client, rc):
    start_program(rc)
    assert client.call("tcl notifications on") == ""
    assert client.call("resume") == ""
    deadline = time.monotonic() + 10
    expected = [b"type target_event event resumed\r\n", b"type target_state state running\r\n",
                b"type target_event event halted\r\n", b"type target_state state halted\r\n"]
    while len(client.notes) < 4 and time.monotonic() < deadline:
        client.notes.append(client.frame())
    assert client.notes == expected
    assert not rc.running


def test_tcl_notifications_off_by_default_and_legacy_name(client, rc):
    start_program(rc)
    assert client.call("step") == ""
    assert client.notes == []
    assert client.call("tcl_notifications on") == ""
    assert client.call("tcl notifications") == "Target Notification output is enabled"
    assert client.call("tcl notifications off") == ""
    assert client.call("step") == ""
    assert client.call("version").startswith("accelstub")
    assert client.notes == []


def test_tcl_listeners_removed_on_disconnect(tcl, rc):
    before_stop, before_run = len(rc._listeners), len(rc._run_listeners)
    c = TclClient(tcl.port)
    assert c.call("tcl notifications on") == ""
    assert len(rc._listeners) == before_stop + 1
    c.close()
    deadline = time.monotonic() + 5
    while tcl.connections and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tcl.connections == 0
    assert len(rc._listeners) == before_stop and len(rc._run_listeners) == before_run


def test_tcl_line_too_long(client):
    client.sock.sendall(b"x" * (4 * 1024 * 1024 + 10))
    client.send(b"y")  # ends the over-long request
    assert client.frame() == b"line too long"
    assert client.call("version").startswith("accelstub")


def test_tcl_exit_closes(client):
    client.send("exit")
    assert client.frame() == b""
    assert client.sock.recv(10) == b""


def test_tcl_shutdown(client, shutdowns):
    client.send("shutdown")
    assert client.frame() == b""
    assert shutdowns == [1]


# -- telnet -----------------------------------------------------------------------------------

@pytest.fixture
def tclient(telnet):
    c = TelnetClient(telnet.port)
    c.until(b"> ")  # banner + prompt
    try:
        yield c
    finally:
        c.close()


def test_telnet_prompt_and_command(tclient):
    assert tclient.command("mww 0x50400000 0xcafe") == ""
    assert tclient.command("mdw 0x50400000") == "0x50400000: 0000cafe \r\n"
    assert tclient.command("xyz") == 'invalid command name "xyz"\r\n'


def test_telnet_empty_line_and_options_refused(tclient):
    # IAC DO SGA (accepts the offer: no answer), IAC WILL NAWS (refused once: IAC DONT NAWS),
    # a subnegotiation (dropped), then a command: no echo (the client did not accept ECHO)
    tclient.sock.sendall(bytes([255, 253, 3, 255, 251, 31, 255, 250, 31, 0, 80, 0, 24, 255, 240]))
    assert tclient.command("version").encode("latin-1") == (
        bytes([255, 254, 31]) + b"accelstub 0.1.0 (OpenOCD-compatible command set)\r\n")
    tclient.sock.sendall(bytes([255, 251, 31]))  # asked again: not answered again (no loop)
    assert tclient.command("version") == "accelstub 0.1.0 (OpenOCD-compatible command set)\r\n"
    tclient.sock.sendall(b"\r\n")
    assert tclient.until(b"> ") == b"> "


def test_telnet_log_lines_and_async_stop(tclient, rc):
    start_program(rc)
    out = tclient.command("step")
    assert out == "[max78000.cnn] halted due to single-step, layer: Layer 1\r\npc: 0x50100014\r\n"
    # a stop that no command of this connection waited for is printed asynchronously
    text = tclient.command("resume")
    rc.wait(5)
    deadline = time.monotonic() + 5
    tclient.sock.settimeout(0.2)
    while "program-exit" not in text + tclient.buf.decode() and time.monotonic() < deadline:
        try:
            tclient.buf += tclient.sock.recv(65536)
        except TimeoutError:
            pass
    text += tclient.buf.decode()
    assert "[max78000.cnn] halted due to program-exit, layer: none\r\npc: 0xf000001c\r\n" in text


def test_telnet_exit_closes(tclient, telnet):
    tclient.sock.sendall(b"exit\r\n")
    assert tclient.sock.recv(10) == b""


def test_telnet_shutdown(tclient, shutdowns):
    tclient.sock.sendall(b"shutdown\r\n")
    assert tclient.until(b"shutdown command invoked\r\n")
    assert tclient.sock.recv(10) == b""
    assert shutdowns == [1]


def test_servers_accept_a_context_factory(rc):
    made = []

    def factory(log):
        made.append(log)
        return CommandContext(targets=[rc], log=log)

    tel, tcl = TelnetServer(factory, "127.0.0.1", 0), TclRpcServer(factory, "127.0.0.1", 0)
    tel.start()
    tcl.start()
    try:
        c = TclClient(tcl.port)
        assert c.call("targets").endswith(" 0* max78000.cnn       max78000   little "
                                          "max78000.cnn       halted")
        c.close()
        t = TelnetClient(tel.port)
        t.until(b"> ")
        assert t.command("init") == ""
        t.close()
        assert len(made) == 2
    finally:
        tel.stop()
        tcl.stop()
