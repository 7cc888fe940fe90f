"""Issue 14 #15, small reads: the no-ack fast path answers exactly as the general parser does,
the checksum and transport changes keep their results, and the bus's one-range shortcut reads
what the general path reads."""
from __future__ import annotations

import os
import socket

import pytest

from accelstub.devices import BusError, open_device
from accelstub.stub.rsp_codec import checksum, frame
from accelstub.stub.transports import PipeConnection, SocketConnection

SRAM = 0x50400000


@pytest.mark.parametrize("payload", [
    b"m50400000,4", b"m50400001,3", b"m5041fffe,4", b"m60000000,4", b"m50400000,-1",
    b"m5040_0000,4", b"m,", b"m", b"p0", b"p1a", b"p19", b"pzz", b"p-1", b"p99999", b"g",
    b"x50400000,4", b"x70000000,4", b"mffffffff,10", b"m50400000,0",
])
def test_fast_path_answers_as_the_general_parser(session, payload):
    """The same request through _fast_packet and through the parser (PacketReader + _event)
    gets the same reply; reads that fail give the general path's error codes."""
    data = frame(payload)
    assert session._fast_packet(data)
    fast = session.conn.sent.pop()
    for ev in session.reader.feed(data):
        session._event(ev)
    general = session.conn.sent.pop()
    assert fast == general
    assert fast.startswith(b"$") and int(fast[-2:], 16) == sum(fast[1:-3]) & 0xFF


@pytest.mark.parametrize("data", [
    b"$m50400000,4#00",  # bad checksum: the general path answers E16 in no-ack mode
    b"$m50400000,4#5",  # truncated
    b"$M50400000,1:01#ff", b"$c#63", b"+$m50400000,4#56",  # not a read, or more than a packet
    b"$p1a#+2", b"$p1a# 2",  # checksum 0x02: int(b"+2", 16) took these
])
def test_fast_path_leaves_everything_else_to_the_parser(session, data):
    assert not session._fast_packet(data)
    assert session.conn.sent == []


def test_fast_path_takes_either_case_of_checksum_digits(session):
    assert checksum(b"p19") == 0xDA
    for data in (b"$p19#da", b"$p19#DA", b"$p19#Da", b"$p19#dA"):
        assert session._fast_packet(data)
    assert len(set(session.conn.sent)) == 1


def test_core_registers_g_reply_layout(session):
    """17 little-endian words: r0-r12, sp, lr, pc, xpsr (struct.pack replaced per-register
    formatting)."""
    session.device.write_core("r1", 0x11223344)
    reply = session.dispatch(b"g")
    assert len(reply) == 17 * 8
    assert reply[8:16] == b"44332211"
    assert reply[15 * 8:16 * 8] == session.device.pc.to_bytes(4, "little").hex().encode()


@pytest.mark.parametrize("n", [0, 1, 255, 256, 257, 4096, 0x20000, 0x20001])
def test_checksum_is_the_byte_sum_modulo_256(n):
    payload = bytes((i * 7 + 13) & 0xFF for i in range(n)) if n < 5000 else os.urandom(n)
    assert checksum(payload) == sum(payload) % 256


def test_bus_shortcut_reads_what_the_general_path_reads():
    d = open_device("max78000")
    d.write(SRAM, bytes(range(256)))
    bus = d.bus
    assert bus.read(SRAM + 3, 7) == bytes(range(3, 10))
    assert bus.read(SRAM, 0) == b""
    # across adjacent memories (sram_q0_g0 -> g1 at +0x8000): the general path joins them
    d.write(SRAM + 0x7FFE, b"\xaa\xbb\xcc\xdd")
    assert bus.read(SRAM + 0x7FFE, 4) == b"\xaa\xbb\xcc\xdd"
    # registers still go through the register file
    ctrl = d.description.register("CNNx16_0_CTRL").address
    assert bus.read(ctrl, 4) == d.regs.read("CNNx16_0_CTRL").to_bytes(4, "little")
    with pytest.raises(BusError):
        bus.read(0x60000000, 4)
    with pytest.raises(BusError):
        bus.read(-4, 4)


def test_socket_connection_returns_each_read_as_its_own_bytes():
    """The receive buffer is reused: a returned value must not change with the next read."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        a = socket.create_connection(srv.getsockname(), timeout=5)
        b, _ = srv.accept()
    conn = SocketConnection(b)
    try:
        a.sendall(b"$first#00")
        first = conn.recv()
        a.sendall(b"$SECOND#00")
        second = conn.recv()
        assert (first, second) == (b"$first#00", b"$SECOND#00")
        a.close()
        assert conn.recv() == b""
    finally:
        conn.close()


def test_pipe_connection_reads_into_its_buffer():
    r, w = os.pipe()
    conn = PipeConnection(r, w)
    try:
        os.write(w, b"+$g#67")
        first = conn.recv()
        os.write(w, b"xy")
        assert (first, conn.recv()) == (b"+$g#67", b"xy")
    finally:
        os.close(r)
        os.close(w)
