"""Issue 14 "Hardening": bounded files, bounded output buffers, bounded replies, fast
breakpoint/watchpoint removal and clean errors for bad user input (every test here failed
before its fix)."""
from __future__ import annotations

import os
import time

import pytest

from accelstub.devices import open_device
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.commands import CommandContext, CommandError, execute

SRAM = 0x50400000


@pytest.fixture
def ctx(rc, tmp_path):
    return CommandContext(targets=[rc], log=lambda s: None, cwd=tmp_path)


def err(ctx: CommandContext, line: str) -> str:
    with pytest.raises(CommandError) as e:
        execute(ctx, line)
    return str(e.value)


# -- 5: removing many watchpoints is linear, not quadratic --------------------------------------

def test_rwp_all_after_20000_watchpoints_is_fast(ctx, rc):
    for i in range(20000):
        rc.add_watchpoint("w", SRAM + 4 * i, 4)
        rc.add_breakpoint(SRAM + 4 * i)
    t0 = time.perf_counter()
    execute(ctx, "rwp all")
    execute(ctx, "rbp all")
    elapsed = time.perf_counter() - t0
    assert rc.watchpoints == [] and not rc.breakpoints
    assert execute(ctx, "wp") == "" and execute(ctx, "bp") == ""
    assert elapsed < 0.25, f"rwp/rbp all of 20000 took {elapsed:.2f}s"  # was 4.7 s


def test_rwp_one_by_one_is_linear(ctx, rc):
    n = 10000
    for i in range(n):
        rc.add_watchpoint("a" if i % 2 else "w", SRAM + 4 * i, 4)
    rc.add_watchpoint("r", SRAM, 8)  # a second watchpoint at one address goes with the first
    t0 = time.perf_counter()
    for i in range(n):
        execute(ctx, f"rwp {SRAM + 4 * i:#x}")
    elapsed = time.perf_counter() - t0
    assert rc.watchpoints == []
    assert err(ctx, f"rwp {SRAM:#x}") == f"no watchpoint at address 0x{SRAM:08x} found"
    assert elapsed < 1.0, f"removing {n} watchpoints one by one took {elapsed:.2f}s"  # was ~5 s


def test_gdb_style_removal_keeps_other_kinds_at_the_address(rc):
    rc.add_watchpoint("w", SRAM, 4)
    rc.add_watchpoint("r", SRAM, 4)
    assert rc.remove_watchpoint("w", SRAM, 4)
    assert not rc.remove_watchpoint("w", SRAM, 4)
    assert [(w.kind, w.start) for w in rc.watchpoints] == [("r", SRAM)]
    assert rc.remove_watchpoint(None, SRAM)
    assert rc.watchpoints == []


# -- 6: bad packets answer E.. without a traceback in the server log ---------------------------

@pytest.mark.parametrize("packet, reply", [
    (b"G0", b"E16"), (b"Gzz", b"E16"), (b"G" + b"00" * 3, b"E16"),
    (b"m50400000,-1", b"E16"), (b"m-50400000,4", b"E16"), (b"m50400000, 4", b"E16"),
    (b"m5040_0000,4", b"E16"), (b"x50400000,-1", b"E16"),
    (b"qXfer:features:read:target.xml:-10,20", b"E16"),
    (b"qXfer:memory-map:read::0,-1", b"E16"),
    (b"p-1", b"E16"), (b"P1a=zz", b"E16"), (b"M50400000,2:zzzz", b"E16"),
    (b"Z2,-50400000,4", b"E16"), (b"z0,+4,4", b"E16"), (b"qRcmd,6d6", b"E16"),
])
def test_bad_packet_answers_error_without_traceback(stub, caplog, packet, reply):
    from accelstub.stub.client import RspClient

    caplog.set_level("DEBUG", logger="accelstub")
    c = RspClient(port=stub.gdb[0].port)
    try:
        assert c.request(packet) == reply
        assert c.request(b"m50400000,4") == b"01020304"  # the session goes on
    finally:
        c.close()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


# -- 6: command-line mistakes are usage errors, IPv6 binds work --------------------------------

@pytest.mark.parametrize("flag", ["--port", "--telnet-port", "--tcl-port"])
@pytest.mark.parametrize("value", ["70000", "-1", "65536", "3x"])
def test_bad_port_is_a_usage_error(capsys, flag, value):
    from accelstub.stub.cli import main

    with pytest.raises(SystemExit) as e:
        main(["serve", "max78000", "--no-demo", flag, value])
    assert e.value.code == 2
    msg = capsys.readouterr().err
    assert f"accelstub serve: error: argument {flag}:" in msg and value in msg
    assert "Traceback" not in msg


def _ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_bind_ipv6_loopback_serves_every_port():
    """``--bind ::1``: the IPv6 loopback (the one non-127.0.0.1 bind in the tests, loopback
    too)."""
    import socket

    from accelstub.stub.client import RspClient
    from accelstub.stub.server import StubServer
    from accelstub.stub.telnet import NEGOTIATION

    server = StubServer([open_device("max78000")], host="::1", gdb_port=0, telnet_port=0,
                        tcl_port=0)
    server.start()
    try:
        info = server.ready_info()
        assert info["host"] == "::1"
        c = RspClient(host="::1", port=info["gdb"][0])
        try:
            assert c.request(b"qAttached") == b"1"
        finally:
            c.close()
        with socket.create_connection(("::1", info["tcl"]), timeout=5) as s:
            s.sendall(b"targets 0\x1a")
            assert s.recv(100) == b"\x1a"
        with socket.create_connection(("::1", info["telnet"]), timeout=5) as s:
            data = b""
            while b"> " not in data:
                data += s.recv(200)
            assert data.startswith(NEGOTIATION + b"accelstub telnet server")
    finally:
        server.stop()


# -- 1: image files are bounded and never block -------------------------------------------------

def _in_thread(fn, timeout: float = 5.0):
    """Run ``fn`` in a daemon thread; fail (instead of hanging the suite) if it does not end."""
    import threading

    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"still running after {timeout}s (blocked or reading forever)"
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.mark.parametrize("cmd", ["load_image", "verify_image"])
def test_image_from_dev_zero_is_refused_at_once(ctx, cmd):
    msg = _in_thread(lambda: err(ctx, f"{cmd} /dev/zero {SRAM:#x}"))
    assert msg == f"{cmd}: /dev/zero is a character device; only regular files are read"
    msg = _in_thread(lambda: err(ctx, f"{cmd} /dev/zero {SRAM:#x} bin"))
    assert "/dev/zero is a character device" in msg


@pytest.mark.parametrize("cmd", ["load_image", "verify_image", "dump_image"])
def test_fifo_without_peer_does_not_block(ctx, tmp_path, cmd):
    import os

    os.mkfifo(tmp_path / "fifo")
    line = f"{cmd} fifo {SRAM:#x}" + (" 16" if cmd == "dump_image" else "")
    msg = _in_thread(lambda: err(ctx, line))
    assert msg.startswith(f"{cmd}: fifo is a FIFO; only regular files are")


def test_svd_into_a_fifo_does_not_block(ctx, tmp_path):
    import os

    os.mkfifo(tmp_path / "out.svd")
    msg = _in_thread(lambda: err(ctx, "svd out.svd"))
    assert msg.startswith("svd: ") and "is a FIFO; only regular files are written" in msg


def test_bin_image_larger_than_the_memory_it_goes_to_is_refused_unread(ctx, rc, tmp_path):
    """A sparse 4 GiB file: refused from its size (the old code read all of it)."""
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(4 << 30)
    msg = _in_thread(lambda: err(ctx, f"load_image big.bin {SRAM:#x} bin"), timeout=2)
    # sram_q0_g0..g3 are adjacent: 128 KiB from 0x50400000
    assert msg == (f"load_image: big.bin is {4 << 30} bytes; at most 131072 bytes fit in "
                   "memory from 0x50400000 (sram_q0_g0, sram_q0_g1, sram_q0_g2, sram_q0_g3)")
    msg = _in_thread(lambda: err(ctx, "load_image big.bin 0x50400000"), timeout=2)
    assert msg == f"load_image: big.bin is {4 << 30} bytes; at most {64 << 20} bytes per image file"


def test_bin_image_past_its_memory_is_refused_before_writing(ctx, rc, tmp_path):
    (tmp_path / "img.bin").write_bytes(b"\x11" * 0x101)
    end = 0x50420000 - 0x100  # 0x100 bytes before the end of sram_q0_g3
    msg = err(ctx, f"load_image img.bin {end:#x}")
    assert msg == ("load_image: img.bin is 257 bytes; at most 256 bytes fit in memory from "
                   f"0x{end:08x} (sram_q0_g3)")
    assert rc.device.read(end, 4) == b"\0" * 4  # nothing written
    msg = err(ctx, "load_image img.bin 0x70000000 bin")
    assert msg == ("load_image: img.bin is 257 bytes; at most nothing fits at 0x70000000 (not "
                   "populated memory of max78000)")
    (tmp_path / "ok.bin").write_bytes(b"\x22" * 0x100)
    assert execute(ctx, f"load_image ok.bin {end:#x}").startswith("256 bytes written")
    assert execute(ctx, f"verify_image ok.bin {end:#x}").startswith("verified 256 bytes")


def test_verify_image_diffs_still_listed(ctx, tmp_path):
    (tmp_path / "img.bin").write_bytes(bytes(range(200)))
    msg = err(ctx, f"verify_image img.bin {SRAM:#x}")
    lines = msg.splitlines()
    assert lines[0] == f"diff 0 address 0x{SRAM + 1:08x}. Was 0x00 instead of 0x01"
    assert lines[127] == f"diff 127 address 0x{SRAM + 128:08x}. Was 0x00 instead of 0x80"
    assert lines[128] == "More than 128 errors, the rest are not printed."
    assert lines[129] == (f"verify_image: 199 byte(s) differ; first at 0x{SRAM + 1:08x}: "
                          "expected 0x01, got 0x00")


# -- 6: accelstub disasm of a huge file: bounded, listed in pieces -----------------------------

def test_disasm_refuses_a_file_over_the_limit_without_reading_it(tmp_path, capsys):
    from accelstub.devices.ethos_u85.disasm import MAX_DISASM_BYTES
    from accelstub.stub.cli import main

    big = tmp_path / "huge.bin"
    with open(big, "wb") as f:
        f.truncate(8 << 30)  # sparse: 8 GiB of zeros, which the old code read and decoded
    assert _in_thread(lambda: main(["disasm", str(big)]), timeout=2) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == (f"accelstub: error: {big} is {8 << 30} bytes; at most {MAX_DISASM_BYTES} "
                       "bytes (16 MiB) are disassembled\n")


def test_disasm_of_an_endless_device_stops_at_the_limit(capsys):
    from accelstub.stub.cli import main

    assert _in_thread(lambda: main(["disasm", "/dev/zero"])) == 2
    assert "/dev/zero has more than 16777216 bytes" in capsys.readouterr().err


def test_listing_in_pieces_equals_the_whole_listing():
    import random

    from accelstub.devices.ethos_u85.stream import disassemble, encode, listing_lines

    rng = random.Random(14)
    words = [rng.getrandbits(32) for _ in range(3000)]
    words[999:1001] = encode("NPU_SET_IFM_BASE0", addr=0x1234)  # a 2-word command across a cut
    data = b"".join(w.to_bytes(4, "little") for w in words) + b"\x01\x02"
    whole = disassemble(data).splitlines()
    assert whole[-1].startswith("0x2edc: ")  # the 3000th word; the 2 trailing bytes are no word
    for chunk in (1, 2, 7, 1000, 4096):
        assert list(listing_lines(data, chunk)) == whole


def test_disasm_memory_does_not_grow_with_the_file(tmp_path):
    """1 MiB of commands (NPU_SET_IFM_BASE0 with random addresses: random words are refused as
    no command stream): the old listing held ~130 k Command objects at once (+150 MB;
    5 MB took 750 MB). VmHWM is the child's own peak (ru_maxrss can carry the parent's)."""
    import os
    import subprocess
    import sys

    import numpy as np

    words = np.frombuffer(os.urandom(1 << 20), dtype="<u4").copy()
    words[0::2] = 0x4000  # cmd1 opcode 0: NPU_SET_IFM_BASE0, addr_hi 0; the data word random
    f = tmp_path / "stream.bin"
    f.write_bytes(words.tobytes())
    code = ("import sys\n"
            "from accelstub.stub.cli import main\n"
            "def hwm():\n"
            "    for line in open('/proc/self/status'):\n"
            "        if line.startswith('VmHWM:'):\n"
            "            return int(line.split()[1])\n"
            "before = hwm()\n"
            "sys.stdout = open(os.devnull, 'w')\n"
            f"assert main(['disasm', {str(f)!r}]) == 0\n"
            "print(hwm() - before, file=sys.stderr)\n")
    res = subprocess.run([sys.executable, "-c", "import os\n" + code], capture_output=True,
                         text=True, timeout=60)
    grown_kb = int(res.stderr.strip().splitlines()[-1])
    assert grown_kb < 50_000, f"disasm of a 1 MiB stream grew the peak RSS by {grown_kb} KB"


# -- 2: backpressure: a client that does not read is no longer read ---------------------------

EOM = b"\x1a"
MDW = f"mdw {SRAM:#x} 2048"  # a ~21 KB reply


def _small_receiver(port: int):
    """A client socket with a small receive buffer (set before connect, so the window is small
    too): the server's kernel buffers hold little for it, and a server that keeps writing shows."""
    import socket

    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    return s


def _small_server_buffers(server) -> None:
    """Shrink the send buffer of the server's socket for the one client (a slow link): on
    loopback the kernel would otherwise absorb megabytes before the server notices anything."""
    import socket

    t_end = time.monotonic() + 2
    while not server._conns and time.monotonic() < t_end:
        time.sleep(0.01)
    server._conns[0].sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)


def _count_calls(monkeypatch, module, name: str) -> list:
    calls: list = []
    real = getattr(module, name)

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def _settle(calls: list, quiet: float = 0.3, timeout: float = 3.0) -> int:
    """Wait until ``calls`` stops growing; its length."""
    t_end = time.monotonic() + timeout
    n = -1
    while n != len(calls) and time.monotonic() < t_end:
        n = len(calls)
        time.sleep(quiet)
    return len(calls)


def _read_frames(s, want: int) -> list[bytes]:
    buf, frames = b"", []
    while len(frames) < want:
        data = s.recv(1 << 20)
        assert data, "connection closed"
        buf += data
        *done, buf = buf.split(EOM)
        frames += done
    return frames


def test_tcl_stops_reading_a_client_that_reads_no_replies(ctx, monkeypatch):
    """3000 pipelined requests whose 63 MB of replies are not read: the server answers what fits
    in 1 MiB (plus the kernel's socket buffers) and then waits; the old one answered all 3000,
    queueing every reply in memory. Reading afterwards gets every reply, in order."""
    from accelstub.stub import tcl_rpc

    calls = _count_calls(monkeypatch, tcl_rpc, "execute")
    server = tcl_rpc.TclRpcServer(ctx, "127.0.0.1", 0)
    server.start()
    try:
        with _small_receiver(server.port) as s:
            s.sendall((MDW.encode() + EOM) * 3000)
            answered = _settle(calls)
            assert answered < 600, f"{answered} of 3000 requests answered with nobody reading"
            conn = server._conns[0]
            assert conn.out.queued <= conn.out.limit + 25_000
            frames = _read_frames(s, 3000)
        assert len(calls) == 3000
        assert all(f.startswith(b"0x50400000: 00000000 ") for f in frames)
    finally:
        server.stop()


def test_telnet_stops_reading_a_client_that_reads_no_replies(ctx, monkeypatch):
    from accelstub.stub import telnet

    calls = _count_calls(monkeypatch, telnet, "execute")
    server = telnet.TelnetServer(ctx, "127.0.0.1", 0)
    server.start()
    try:
        with _small_receiver(server.port) as s:
            s.sendall((MDW + "\n").encode() * 1500)
            answered = _settle(calls)
            assert answered < 600, f"{answered} of 1500 requests answered with nobody reading"
            seen, tail = 0, b""
            while seen < 1500:
                data = s.recv(1 << 20)
                assert data, "connection closed"
                seen += (tail + data).count(b"0x50400000: ")
                tail = data[-11:]
        assert len(calls) == 1500
    finally:
        server.stop()


def test_telnet_client_that_reads_nothing_never_blocks_run_control(ctx, rc):
    """Stop messages to a telnet client that reads nothing: the old server wrote them from the
    run-control worker and blocked it once the socket buffers were full, so the next resume
    never ran (for every client). Now they queue, and the connection is closed past 1 MiB."""
    from accelstub.stub import listener
    from accelstub.stub.telnet import TelnetServer

    server = TelnetServer(ctx, "127.0.0.1", 0)
    server.start()
    try:
        with _small_receiver(server.port):
            _small_server_buffers(server)
            time.sleep(0.1)
            for i in range(1500):  # nothing to run: every resume is an immediate idle stop
                rc.resume()
                assert rc.wait(2) is not None, f"run control blocked after {i} stops"
            conn = server._conns[0]
            assert 50_000 < conn.out.queued < listener.UNSOLICITED_LIMIT  # waiting, not lost
    finally:
        server.stop()


def _stop_until_cut(rc, server) -> None:
    """Resume and stop until the server cuts the connection that reads nothing (each stop
    queues a notification for it): run control never blocks, and the cut comes within 3 s."""
    for i in range(3000):
        rc.resume()
        assert rc.wait(2) is not None, f"run control blocked after {i} stops"
        if server.connections == 0:
            break
    t_end = time.monotonic() + 3
    while server.connections and time.monotonic() < t_end:
        time.sleep(0.05)
    assert server.connections == 0, "the connection that reads nothing is still open"


@pytest.mark.parametrize("kind", ["telnet", "tcl"])
def test_unread_unsolicited_output_past_the_limit_closes_the_connection(ctx, rc, monkeypatch,
                                                                        kind):
    from accelstub.stub import listener
    from accelstub.stub.tcl_rpc import TclRpcServer
    from accelstub.stub.telnet import TelnetServer

    monkeypatch.setattr(listener, "UNSOLICITED_LIMIT", 20_000)
    server = (TelnetServer if kind == "telnet" else TclRpcServer)(ctx, "127.0.0.1", 0)
    server.start()
    try:
        with _small_receiver(server.port) as s:
            _small_server_buffers(server)
            if kind == "tcl":
                s.sendall(b"tcl notifications on" + EOM)
            time.sleep(0.2)
            _stop_until_cut(rc, server)
            s.settimeout(5)
            data = b""
            while True:  # what was queued before the cut, then the end of the stream
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            assert len(data) < 20_000 + 2 * 65536
    finally:
        server.stop()


def test_gdb_notifications_to_a_client_that_reads_nothing_never_block_run_control(
        stub, monkeypatch):
    """%Stop notifications are written by the run-control worker's stops: to a gdb client (the
    TUI's, say) that reads nothing they queue instead of blocking the worker (which blocked it
    after ~480 stops for every client), and past the unsolicited limit the connection is cut."""
    from accelstub.stub import listener
    from accelstub.stub.rsp_codec import frame

    monkeypatch.setattr(listener, "UNSOLICITED_LIMIT", 20_000)
    rc = stub.targets[0]
    server = stub.gdb[0]
    with _small_receiver(server.port) as s:
        s.sendall(frame(b"qSupported:accelstub-notify+"))
        _small_server_buffers(server)
        time.sleep(0.2)
        _stop_until_cut(rc, server)


def test_gdb_session_stops_reading_a_client_that_reads_no_replies(stub, monkeypatch):
    """RSP replies are written by the session's own thread: a client that does not read them
    stops the session reading (checked, no change needed)."""
    from accelstub.stub import session
    from accelstub.stub.rsp_codec import frame

    # random data: zero memory goes as run-length codes (rsp_codec.hex_rle), 64 KiB of hex
    # would be ~2 KiB; every m request is counted, by the fast path or the parser's
    stub.targets[0].device.write(0x50400000, os.urandom(0x8000))
    calls = _count_calls(monkeypatch, session.GdbSession, "_mem_hex")
    with _small_receiver(stub.gdb[0].port) as s:
        s.sendall(frame(b"QStartNoAckMode"))
        time.sleep(0.1)
        s.sendall(frame(b"m50400000,8000") * 3000)  # 3000 x 64 KiB of hex
        answered = _settle(calls)
        assert answered < 300, f"{answered} of 3000 packets answered with nobody reading"


# -- 3: listings are bounded and cost a few times their size ------------------------------------

@pytest.mark.parametrize("line", ["read_memory 0x60000000 8 33554432", "mdb 0x60000000 1048577",
                                  "mdw 0x10000000 2000000", "host mdw 0x10000000 1048577"])
def test_listing_more_than_the_limit_is_refused_before_reading(line):
    from accelstub.stub.commands import MAX_LISTED

    rc = RunControl(open_device("ethos-u85"))
    ctx = CommandContext(targets=[rc], log=lambda s: None)
    count = int(line.split()[-1])
    cmd = line.split()[0]
    t0 = time.perf_counter()
    assert err(ctx, line) == (f"{cmd}: {count} values are too many for one command (at most "
                              f"{MAX_LISTED}; dump_image writes memory to a file)")
    assert time.perf_counter() - t0 < 0.5


def test_read_memory_peak_memory_is_a_few_times_its_reply():
    """read_memory of 1 Mi bytes of random data: the reply is ~5 MB; the old list of one Python
    string per value peaked at ~14x the reply (2.5 GB for 32 MiB)."""
    import os
    import tracemalloc

    rc = RunControl(open_device("ethos-u85"))
    ctx = CommandContext(targets=[rc], log=lambda s: None)
    data = os.urandom(1 << 20)
    rc.device.write(0x10000000, data)
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        reply = execute(ctx, "read_memory 0x10000000 8 1048576")
        elapsed = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    values = reply.split(" ")
    assert values[:3] == ["0x%x" % b for b in data[:3]] and len(values) == 1 << 20
    assert bytes(int(v, 16) for v in values) == data
    assert peak < 6 * len(reply), f"peak {peak / 1e6:.1f} MB for a {len(reply) / 1e6:.1f} MB reply"
    assert elapsed < 2.0


@pytest.mark.parametrize("width", [1, 2, 4, 8])
def test_listings_match_openocd_formats_for_every_width(width):
    """The numpy formatters against the per-value formats (OpenOCD's md and read_memory)."""
    import random

    from accelstub.stub.commands import md_output, value_list

    rng = random.Random(width)
    for n in (0, 1, 2, 31 // width, 32 // width, 33 // width + 1, 100):
        data = bytes(rng.choice([0, 0, 1, 0x10, 0xFF, rng.randrange(256)])
                     for _ in range(n * width))
        addr = rng.randrange(1 << 31) & ~7
        ints = [int.from_bytes(data[i:i + width], "little") for i in range(0, len(data), width)]
        per_line = 32 // width
        rows = [ints[k:k + per_line] for k in range(0, n, per_line)]
        lines = ["0x%08x: " % (addr + 32 * k) + "".join("%0*x " % (2 * width, v) for v in row)
                 for k, row in enumerate(rows)]
        assert md_output(addr, width, data) == "\n".join(lines)
        assert value_list(data, width) == " ".join("0x%x" % v for v in ints)
