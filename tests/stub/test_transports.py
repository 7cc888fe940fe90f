"""Transports other than TCP: pyserial URLs (loop://, socket://) and the stdio pipe."""
import socket
import subprocess
import threading

from accelstub.stub.rsp_codec import PacketReader, frame
from accelstub.stub.transports import SerialConnection
from tests.helpers import serve_cmd


def test_serial_loop_url_carries_bytes_both_ways():
    conn = SerialConnection("loop://")
    try:
        conn.send(b"$g#67")
        assert conn.recv() == b"$g#67"
    finally:
        conn.close()


def _ask(sock_file_read, send, payload: bytes) -> bytes:
    send(frame(payload))
    r = PacketReader(1 << 20)
    while True:
        for ev in r.feed(sock_file_read()):
            if ev.kind == "packet":
                send(b"+")
                return ev.payload


def test_gdb_session_over_a_pyserial_socket_url(stub):
    """The stub speaks RSP through pyserial (socket:// URL) to a peer listening on loopback."""
    lsock = socket.create_server(("127.0.0.1", 0))
    port = lsock.getsockname()[1]
    conn = SerialConnection(f"socket://127.0.0.1:{port}")
    t = threading.Thread(target=stub.gdb[0].serve_connection, args=(conn,), daemon=True)
    t.start()
    peer, _ = lsock.accept()
    try:
        peer.settimeout(5)
        assert _ask(lambda: peer.recv(65536), peer.sendall, b"m50400000,4") == b"01020304"
        assert _ask(lambda: peer.recv(65536), peer.sendall, b"?").startswith(b"T05")
    finally:
        peer.close()
        lsock.close()
        conn.close()
        t.join(5)
    assert not t.is_alive()


def test_stdio_pipe_speaks_rsp():
    proc = subprocess.Popen(serve_cmd("--stdio"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        import os
        reply = _ask(lambda: os.read(proc.stdout.fileno(), 65536),
                     lambda b: (proc.stdin.write(b), proc.stdin.flush()), b"m50400000,4")
        assert reply == b"01020304"
    finally:
        proc.stdin.close()
        proc.wait(10)
    assert proc.returncode == 0
