"""Breakpoints and watchpoints belong to who set them (issue 25 #9): a gdb connection's Z points
end with the connection (a disconnect or a detach), a `z` never removes a target-level `bp`/`wp`
at the same address, `bp`/`wp` from telnet, Tcl or monitor persist as OpenOCD's target-level
points do, and a Z range must lie inside one region of the memory map. The stub fixture: the
4-layer MAX78000 program, layers 1 and 3 write 0x50400000-0x5040000f."""
import socket
import time

import pytest

from accelstub.stub.client import RspClient
from accelstub.stub.commands import execute
from accelstub.stub.rsp_codec import PacketReader, frame

from .test_session_packets import exchange

SRAM = 0x50400000
PC0 = 0x50100010


def _wait_sessions(stub, n: int) -> None:
    deadline = time.monotonic() + 5
    while len(stub.gdb[0].sessions) != n and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(stub.gdb[0].sessions) == n


def test_watchpoint_of_a_disconnected_client_no_longer_fires(stub):
    rc = stub.targets[0]
    with RspClient(port=stub.gdb[0].port) as first:
        first.set_breakpoint(SRAM + 4, kind=2, length=4)
        first.set_breakpoint(PC0 + 8)
        assert rc.watchpoints and rc.breakpoints == {PC0 + 8}
    _wait_sessions(stub, 0)
    assert rc.watchpoints == [] and rc.breakpoints == set()
    with RspClient(port=stub.gdb[0].port) as second:
        second.cont(10)
    assert rc.last_stop.reason == "done", rc.last_stop


def test_a_dropped_connection_loses_its_points_too(stub):
    """No D, no clean close: the socket just goes (a killed gdb)."""
    rc = stub.targets[0]
    s = socket.create_connection(("127.0.0.1", stub.gdb[0].port), timeout=5)
    assert exchange(s, b"Z2,%x,4" % (SRAM + 4)) == b"OK"
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()  # linger 0: a reset
    _wait_sessions(stub, 0)
    assert rc.watchpoints == []


def test_detach_removes_the_connections_points(stub):
    rc = stub.targets[0]
    with socket.create_connection(("127.0.0.1", stub.gdb[0].port), timeout=5) as s:
        assert exchange(s, b"Z0,%x,2" % (PC0 + 4)) == b"OK"
        assert exchange(s, b"Z3,%x,4" % SRAM) == b"OK"
        assert exchange(s, b"D") == b"OK"
    _wait_sessions(stub, 0)
    assert rc.breakpoints == set() and rc.watchpoints == []


def test_target_level_points_outlive_every_connection(stub):
    """`bp`/`wp` (telnet, Tcl, monitor) are OpenOCD's target-level points: no connection's end
    and no gdb `z` at the same address removes them; `rbp`/`rwp` do."""
    rc = stub.targets[0]
    ctx = stub.context(log=lambda s: None)
    execute(ctx, f"bp {PC0 + 8:#x} 4")
    execute(ctx, f"wp {SRAM:#x} 4 w")
    with RspClient(port=stub.gdb[0].port) as c:
        c.monitor(f"bp {PC0 + 12:#x} 4")
        c.set_breakpoint(PC0 + 8)  # gdb's own breakpoint at the same address ...
        c.clear_breakpoint(PC0 + 8)  # ... removed: the `bp` stays
        c.set_breakpoint(SRAM, kind=2, length=4)
        c.clear_breakpoint(SRAM, kind=2, length=4)
    _wait_sessions(stub, 0)
    assert rc.breakpoints == {PC0 + 8, PC0 + 12}
    assert [(w.kind, w.start, w.length) for w in rc.watchpoints] == [("w", SRAM, 4)]
    execute(ctx, f"rbp {PC0 + 8:#x}")
    execute(ctx, "rwp all")
    assert rc.breakpoints == {PC0 + 12} and rc.watchpoints == []


def test_two_connections_at_one_address_each_keep_theirs(stub):
    rc = stub.targets[0]
    with RspClient(port=stub.gdb[0].port) as a:
        with RspClient(port=stub.gdb[0].port) as b:
            a.set_breakpoint(SRAM, kind=2, length=4)
            b.set_breakpoint(SRAM, kind=2, length=4)
        _wait_sessions(stub, 1)
        assert len(rc.watchpoints) == 1  # b's went, a's stays
    _wait_sessions(stub, 0)
    assert rc.watchpoints == []


@pytest.mark.parametrize("packet", [
    b"Z2,60000000,4",  # outside every region
    b"Z2,50400000,ffffffffffffffff",  # a length beyond the region (was accepted)
    b"Z3,50400000,10000000000000000",  # 2^64
    b"Z4,ffffffffffffffff,1",
    b"Z0,60000000,2",  # a breakpoint where no pc can be
    b"Z1,50100010,ffffffff",
])
def test_z_range_outside_the_memory_map_is_refused(stub, packet):
    rc = stub.targets[0]
    with socket.create_connection(("127.0.0.1", stub.gdb[0].port), timeout=5) as s:
        assert exchange(s, packet) == b"E0e"
        assert rc.breakpoints == set() and rc.watchpoints == []
        assert exchange(s, b"Z2,%x,10" % SRAM) == b"OK"  # inside one region: fine
        assert exchange(s, b"Z0,%x,2" % PC0) == b"OK"
        assert rc.breakpoints == {PC0}
        assert [(w.start, w.length) for w in rc.watchpoints] == [(SRAM, 16)]


def _stop_after_console(sock) -> tuple[str, bytes]:
    """Read a stop reply (ack mode); returns (console text before it, the reply)."""
    reader, text = PacketReader(1 << 20), ""
    while True:
        for ev in reader.feed(sock.recv(65536)):
            if ev.kind == "packet":
                sock.sendall(b"+")
                if ev.payload[:1] == b"O" and ev.payload != b"OK":
                    text += bytes.fromhex(ev.payload[1:].decode()).decode()
                else:
                    return text, ev.payload


def test_a_watchpoint_gdb_did_not_set_stops_it_as_a_plain_sigtrap(stub):
    """gdb steps over a watch:ADDR stop that none of its watchpoints explains: a stop caused by a
    target-level `wp` goes to it as T05 without watch:, after a console line; a stop its own Z2
    explains keeps watch: with that watchpoint's address. Layer 0 writes 0x50400100-0x5040010f,
    layer 1 0x50400000-0x5040000f."""
    execute(stub.context(log=lambda s: None), f"wp {SRAM + 0x100:#x} 4 w")
    with socket.create_connection(("127.0.0.1", stub.gdb[0].port), timeout=5) as s:
        assert exchange(s, b"Z2,%x,4" % (SRAM + 8)) == b"OK"
        s.sendall(frame(b"c"))
        text, reply = _stop_after_console(s)
        assert reply == b"T050f:14001050;", reply  # after layer 0: not gdb's watchpoint
        assert "(monitor wp or another client): write to 0x50400100" in text, text
        s.sendall(frame(b"c"))
        text, reply = _stop_after_console(s)
        assert reply == b"T050f:18001050;watch:50400008;" and text == "", (text, reply)
