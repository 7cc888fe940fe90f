"""Issue 31 #6, the GDB side of reads: ``m`` replies run-length encode uniform blocks (decoded
here by the protocol's rule, written out independently of rsp_codec), the no-ack fast path
splits ``m`` requests with one regular expression and answers as the general parser does, and
gdb-multiarch itself negotiates no-ack mode, reads 64 KiB per ``m`` and decodes the codes into
the device's exact bytes."""
from __future__ import annotations

import os
import re
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelstub.stub.client import RspClient
from accelstub.stub.rsp_codec import RLE_BLOCK, PacketReader, frame, hex_rle, rle_decode
from accelstub.stub.session import PACKET_SIZE
from tests.helpers import run_gdb

SRAM = 0x50400000  # quadrant 0 data SRAM: 128 KiB, contiguous


def gdb_expand(payload: bytes) -> bytes:
    """What gdb's remote.c read_frame does with a reply: ``X*n`` is X and n - 29 more X."""
    out = bytearray()
    i = 0
    while i < len(payload):
        if payload[i] == ord("*"):
            out += out[-1:] * (payload[i + 1] - 29)
            i += 2
        else:
            out.append(payload[i])
            i += 1
    return bytes(out)


def test_a_uniform_block_is_one_code():
    assert hex_rle(bytes(RLE_BLOCK)) == b"0*~"
    assert hex_rle(b"\xff" * RLE_BLOCK * 2) == b"f*~f*~"
    assert hex_rle(b"\x77" * RLE_BLOCK + b"\x01") == b"7*~01"
    assert len(gdb_expand(b"0*~")) == 2 * RLE_BLOCK  # '~' is 126: 97 more
    # a block of one byte whose nibbles differ is no run of one digit: sent as hex
    assert hex_rle(b"\x12" * RLE_BLOCK) == b"12" * RLE_BLOCK
    assert hex_rle(bytes(RLE_BLOCK - 1)) == b"00" * (RLE_BLOCK - 1)


def test_a_64k_zero_read_is_under_a_thirtieth_of_its_hex():
    assert len(hex_rle(bytes(0x10000))) < 2 * 0x10000 // 30


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0x00, 0xFF, 0x55, 0x12, None]),
                          st.integers(0, 3 * RLE_BLOCK + 5)), max_size=12))
def test_hex_rle_expands_to_the_hex_of_the_data(pieces):
    data = b"".join(os.urandom(n) if v is None else bytes([v]) * n for v, n in pieces)
    encoded = hex_rle(data)
    assert gdb_expand(encoded) == data.hex().encode()
    assert rle_decode(encoded) == data.hex().encode()
    counts = [encoded[m.end()] for m in re.finditer(rb"\*", encoded)]
    assert all(c not in b"#$" and 32 <= c <= 126 for c in counts)


def test_rle_decode_keeps_a_star_without_character_or_count():
    assert rle_decode(b"*0") == b"*0" and rle_decode(b"0*") == b"0*"
    assert rle_decode(b"0*~*~") == b"0" * 195  # a code after a code repeats the same digit
    assert rle_decode(b"ab* c") == b"abbbbc"


@pytest.mark.parametrize("payload", [
    b"m5040000A,4", b"m5040000a,10", b"m0050400000,4", b"m50400000,10000", b"m50400000,30000",
    b"m5041fff0,20", b"m50400000,", b"m,4", b"x50400000,100",
])
def test_fast_path_splits_m_as_the_general_parser_does(session, payload):
    data = frame(payload)
    assert session._fast_packet(data)
    fast = session.conn.sent.pop()
    for ev in session.reader.feed(data):
        session._event(ev)
    assert fast == session.conn.sent.pop()


def test_a_read_larger_than_the_packet_gets_what_one_packet_holds(stub):
    """gdb asks for at most PacketSize/2 bytes per m; a longer request is answered with that
    much (gdb reads on from where the reply ends), never with more than a packet holds."""
    dev = stub.targets[0].device
    dev.write(SRAM, os.urandom(0x20000))
    with RspClient(port=stub.gdb[0].port) as c:
        reply = c.request("m50400000,20000")
    assert bytes.fromhex(reply.decode()) == dev.read(SRAM, PACKET_SIZE // 2)


def test_m_reply_on_the_wire_is_run_length_encoded(stub):
    dev = stub.targets[0].device
    dev.write(SRAM, bytes(0x1000))
    with socket.create_connection(("127.0.0.1", stub.gdb[0].port), timeout=10) as sock:
        sock.sendall(frame(b"m50400000,1000"))
        reader, events = PacketReader(1 << 20), []
        while not events:
            events = [e for e in reader.feed(sock.recv(65536)) if e.kind == "packet"]
    wire = events[0].payload
    assert wire.startswith(b"0*~") and len(wire) < 0x1000 // 10
    assert gdb_expand(wire) == b"00" * 0x1000


def test_gdb_dumps_mixed_memory_exactly_in_64k_packets_without_acks(stub, tmp_path):
    """A 128 KiB dump of quadrant 0's data SRAM holding zero and 0xff blocks (some not aligned
    to a code block), repeated bytes and random data: gdb-multiarch negotiates no-ack mode,
    reads it in two m packets, gets run-length codes and writes the device's exact bytes."""
    dev = stub.targets[0].device
    content = (bytes(5000) + os.urandom(3001) + b"\xff" * 20000 + b"\x55" * 777 +
               os.urandom(40000) + bytes(12345) + b"\x12" * 999)
    content += os.urandom(0x20000 - len(content))
    dev.write(SRAM, content)
    out_file = tmp_path / "sram.bin"
    out = run_gdb(["show remote noack-packet", "set debug remote 1",
                   f"dump binary memory {out_file} {SRAM:#x} {SRAM + 0x20000:#x}"],
                  stub.gdb[0].port)
    assert out_file.read_bytes() == content
    reads = re.findall(r"Sending packet: \$m([0-9a-f]+),([0-9a-f]+)#", out)
    assert reads == [("50400000", "10000"), ("50410000", "10000")], out[-2000:]
    # gdb's log shows replies expanded; the codes it decoded were these
    assert all(hex_rle(content[i:i + 0x10000]).count(b"*~") > 200 for i in (0, 0x10000))
    assert "`QStartNoAckMode' packet is auto-detected, currently enabled" in out, out
    assert "Received Ack" not in out
