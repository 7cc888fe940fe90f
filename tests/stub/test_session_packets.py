"""Packet transcripts against a running stub over raw sockets: every packet the stub serves,
error replies for bad input, Ctrl-C, several clients, and a fuzzed stream that must not crash it."""
import socket
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelstub.stub.client import RspClient, RspError
from accelstub.stub.rsp_codec import PacketReader, frame

SRAM = 0x50400000
PC0 = 0x50100010  # CNNx16_0_L0_RCNT: the test program halts before layer 0


def raw(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    return s


def exchange(sock, payload: bytes, reader=None) -> bytes:
    """Send one packet (ack mode), return the reply payload."""
    sock.sendall(frame(payload))
    reader = reader or PacketReader(1 << 20)
    while True:
        for ev in reader.feed(sock.recv(65536)):
            if ev.kind == "packet":
                sock.sendall(b"+")
                return ev.payload


def test_qsupported_advertises_large_packets_and_features(stub):
    with raw(stub.gdb[0].port) as s:
        reply = exchange(s, b"qSupported:multiprocess+;swbreak+")
    feats = reply.split(b";")
    assert b"PacketSize=20000" in feats
    for f in (b"QStartNoAckMode+", b"qXfer:features:read+", b"qXfer:memory-map:read+",
              b"vContSupported+"):
        assert f in feats


def test_ack_and_reply_arrive_in_one_segment(stub):
    with raw(stub.gdb[0].port) as s:
        s.sendall(frame(b"?"))
        time.sleep(0.2)
        data = s.recv(65536)
    assert data.startswith(b"+$T05")


def test_no_ack_mode_stops_acks(stub):
    with raw(stub.gdb[0].port) as s:
        assert exchange(s, b"QStartNoAckMode") == b"OK"
        s.sendall(frame(b"?"))
        time.sleep(0.2)
        assert s.recv(65536).startswith(b"$T05")


def test_bad_checksum_gets_nack_and_garbage_is_ignored(stub):
    with raw(stub.gdb[0].port) as s:
        s.sendall(b"garbage$g#00")
        time.sleep(0.2)
        assert s.recv(100) == b"-"
        assert exchange(s, b"?").startswith(b"T05")


def test_oversized_packet_gets_error(stub):
    with raw(stub.gdb[0].port) as s:
        s.sendall(b"$M0,1:" + b"0" * 0x30000 + b"#00")
        r = PacketReader(1 << 20)
        got = []
        deadline = time.time() + 5
        while not got and time.time() < deadline:
            got = [e for e in r.feed(s.recv(65536)) if e.kind == "packet"]
        assert got[0].payload.startswith(b"E")
        assert exchange(s, b"?").startswith(b"T05")


def test_unknown_packets_get_empty_replies(stub):
    with raw(stub.gdb[0].port) as s:
        assert exchange(s, b"vMustReplyEmpty") == b""
        assert exchange(s, b"qTStatus") == b""
        assert exchange(s, b"jUnknown") == b""
        assert exchange(s, b"qAttached") == b"1"
        assert exchange(s, b"qOffsets") == b"Text=0;Data=0;Bss=0"
        assert exchange(s, b"vCont?") == b"vCont;c;C;s;S;t"


def test_memory_read_write_and_errors(stub):
    with RspClient(port=stub.gdb[0].port) as c:
        assert c.read_memory(SRAM, 4) == bytes([1, 2, 3, 4])
        c.write_memory(SRAM + 0x100, b"\x00#$}*\xff" * 100)
        assert c.read_memory(SRAM + 0x100, 600) == b"\x00#$}*\xff" * 100
        assert c.request("M50400200,2:beef") == b"OK"
        assert c.read_memory(0x50400200, 2) == b"\xbe\xef"
        assert c.request("m0,4") == b"E0e"  # unmapped
        assert c.request("m50183000,4") == b"E0e"  # MRAM block tail: not populated
        assert c.request("mzz,4") == b"E16"
        assert c.request("M50400000,2:00") == b"E16"  # length mismatch
        assert c.request("X0,0:") == b"OK"  # gdb's probe for X support


def test_read_running_into_a_hole_returns_the_populated_part(stub):
    with RspClient(port=stub.gdb[0].port) as c:
        end = 0x50420000  # end of quadrant 0's data SRAM
        reply = c.request(f"m{end - 8:x},10")
        assert len(bytes.fromhex(reply.decode())) == 8


def test_large_read_is_one_packet(stub):
    with RspClient(port=stub.gdb[0].port) as c:
        reply = c.request("m50400000,10000")
        assert len(reply) == 2 * 0x10000


def test_registers_g_p_P(stub):
    with RspClient(port=stub.gdb[0].port) as c:
        g = c.request("g")
        assert len(g) == 17 * 8
        assert int.from_bytes(bytes.fromhex(g[15 * 8:16 * 8].decode()), "little") == PC0
        assert c.read_register("pc") == PC0
        assert c.read_register("CNNx16_0_LCNT_MAX") == 3
        c.write_register("r3", 0x1234)
        assert c.read_register("r3") == 0x1234
        c.write_register("CNNx16_1_LCNT_MAX", 0xFFFFFFFF)
        assert c.read_register("CNNx16_1_LCNT_MAX") == 0x1F  # reserved bits read 0
        assert c.request("p9999") == b"E16"
        assert c.request("P1a=00") == b"E16"


def test_target_xml_and_memory_map(stub):
    with RspClient(port=stub.gdb[0].port) as c:
        xml = c.target_xml()
        mm = c.memory_map()
    assert "<architecture>arm</architecture>" in xml
    assert 'org.gnu.gdb.arm.m-profile' in xml
    assert 'org.accelstub.max78000.q0' in xml
    assert '<flags id=' in xml and 'group="cnn_q0"' in xml
    assert '<memory type="ram" start="0x50400000"' in mm


def test_step_break_watch_continue(stub):
    with RspClient(port=stub.gdb[0].port) as c:
        assert c.step().startswith("T05")
        assert c.read_register("pc") == PC0 + 4
        c.set_breakpoint(PC0 + 12)
        stop = c.cont()
        assert stop.startswith("T05") and c.read_register("pc") == PC0 + 12
        c.clear_breakpoint(PC0 + 12)
        c.set_breakpoint(0x5040000c, kind=2, length=8)  # crosses the end of layer 3's output
        stop = c.cont()
        assert "watch:5040000c;" in stop and c.read_register("pc") == 0xF000_001C  # the end
        assert c.read_memory(0x5040000c, 4) == bytes([127] * 4)  # 13..16 x16, saturated


def test_interrupt_stops_a_long_run(stub):
    stub.targets[0].device.regs.poke("EMU_THROTTLE_US", 2_000_000)
    with RspClient(port=stub.gdb[0].port) as c:
        c.start_continue()
        time.sleep(0.3)
        t0 = time.perf_counter()
        c.interrupt()
        stop = c.wait_stop(5)
        assert stop.startswith("T02")
        assert time.perf_counter() - t0 < 1.0


def test_second_client_reads_while_first_runs_and_is_told_of_the_stop(stub):
    stub.targets[0].device.regs.poke("EMU_THROTTLE_US", 300_000)
    stops = []
    with RspClient(port=stub.gdb[0].port) as ctl, \
            RspClient(port=stub.gdb[0].port, on_stop=stops.append) as obs:
        ctl.start_continue()
        time.sleep(0.1)
        assert obs.read_memory(SRAM, 4) == bytes([1, 2, 3, 4])  # while running
        assert obs.request("vCont;s") == b"E01"  # only the controller runs the target
        assert ctl.wait_stop(10).startswith("T05")
        time.sleep(0.2)
    assert stops and stops[0].startswith("T05")


def test_question_mark_of_the_controller_halts_a_running_target(stub):
    """gdb attaching to a target that runs with no other gdb (resumed from telnet): its first
    packet is `?`; the target halts, as OpenOCD halts it on attach, and the reply is that stop
    with the pc of now."""
    stub.targets[0].device.regs.poke("EMU_THROTTLE_US", 1_000_000)
    stub.targets[0].resume()
    time.sleep(0.2)
    with RspClient(port=stub.gdb[0].port) as first:
        assert stub.targets[0].running
        reply = first.request("?", 5).decode()
        assert reply.startswith("T02") and not stub.targets[0].running, reply
        pc = int.from_bytes(bytes.fromhex(reply.split("0f:")[1][:8]), "little")
        assert pc == stub.targets[0].device.pc == first.read_register("pc")


def test_question_mark_of_a_second_client_leaves_the_run_going(stub):
    """A second gdb attaching while the first one's continue runs: its `?` must not halt the
    target (issue 25: the first gdb got SIGINT); it gets signal 0 at the pc of now, and the
    first gdb's continue goes on to its own stop."""
    stub.targets[0].device.regs.poke("EMU_THROTTLE_US", 300_000)
    with RspClient(port=stub.gdb[0].port) as ctl, RspClient(port=stub.gdb[0].port) as late:
        ctl.start_continue()
        time.sleep(0.2)
        assert stub.targets[0].running
        reply = late.request("?", 5).decode()
        assert reply.startswith("T00") and stub.targets[0].running, reply
        stop = ctl.wait_stop(10)
        assert stop.startswith("T05") and stub.targets[0].last_stop.reason == "done", stop


def test_observer_interrupt_ends_only_its_own_wait(stub):
    """Ctrl-C of a client that did not start the run: its continue ends (SIGINT), the
    controller's run goes on to the end of the program."""
    stub.targets[0].device.regs.poke("EMU_THROTTLE_US", 300_000)
    with RspClient(port=stub.gdb[0].port) as ctl, RspClient(port=stub.gdb[0].port) as obs:
        ctl.start_continue()
        time.sleep(0.1)
        obs.start_continue()
        obs.interrupt()
        assert obs.wait_stop(5).startswith("T02") and stub.targets[0].running
        assert ctl.wait_stop(10).startswith("T05")
        assert stub.targets[0].last_stop.reason == "done"


def test_write_while_running_is_refused(stub):
    stub.targets[0].device.regs.poke("EMU_THROTTLE_US", 500_000)
    with RspClient(port=stub.gdb[0].port) as ctl, RspClient(port=stub.gdb[0].port) as obs:
        ctl.start_continue()
        time.sleep(0.1)
        assert obs.request("M50400000,1:00") == b"E10"
        ctl.interrupt()
        ctl.wait_stop(5)


def test_monitor_command_and_error(stub):
    with RspClient(port=stub.gdb[0].port) as c:
        assert c.monitor("mdw 0x50400000").startswith("0x50400000: 04030201")
        with pytest.raises(RspError, match="invalid command name"):
            c.monitor("frobnicate")


def test_detach_then_reattach(stub):
    with RspClient(port=stub.gdb[0].port) as c:
        assert c.request("D") == b"OK"
    with RspClient(port=stub.gdb[0].port) as c:
        assert c.read_register("pc") == PC0


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(
    st.binary(max_size=64),
    st.builds(lambda p: frame(p), st.binary(max_size=64).filter(
        lambda b: b[:1] not in (b"D", b"k", b"c", b"s", b"v"))),
), max_size=8))
def test_fuzzed_input_never_kills_the_server(stub, chunks):
    with raw(stub.gdb[0].port) as s:
        for c in chunks:
            s.sendall(c)
    with RspClient(port=stub.gdb[0].port) as c:
        assert c.request("?").startswith(b"T")
