"""Issue 31 #6, the server's wake-up: after each reply a gdb connection polls its socket for the
next request for at most ``spin_s`` (SocketConnection._poll), then blocks as before. A silent
client costs the server no CPU, a request that comes during or after the window is answered,
and polling stops for a while (doubling) where it did not pay."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from accelstub.stub.client import RspClient
from accelstub.stub.transports import SocketConnection

POLL, BLOCK = "poll", "block"


class RecordingSocket:
    """A connected socket that records each recv_into: polled (MSG_DONTWAIT) or blocking, and
    what it returned (None: nothing was there)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.calls = sock, []

    def recv_into(self, buf, nbytes: int = 0, flags: int = 0) -> int:
        n = None
        try:
            n = self.sock.recv_into(buf, nbytes, flags)
            return n
        finally:
            self.calls.append((POLL if flags & socket.MSG_DONTWAIT else BLOCK, n))

    def __getattr__(self, name: str):
        return getattr(self.sock, name)


@pytest.fixture
def pair():
    """(client socket, SocketConnection over a RecordingSocket) on loopback TCP."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        client = socket.create_connection(srv.getsockname(), timeout=5)
        server_side, _ = srv.accept()
    conn = SocketConnection(RecordingSocket(server_side))
    try:
        yield client, conn
    finally:
        client.close()
        conn.close()


def send_later(sock: socket.socket, data: bytes, delay: float) -> threading.Thread:
    t = threading.Thread(target=lambda: (time.sleep(delay), sock.sendall(data)))
    t.start()
    return t


def kinds(conn: SocketConnection) -> list[str]:
    calls, conn.sock.calls = conn.sock.calls, []
    return [kind for kind, _ in calls]


def test_a_request_during_the_window_is_taken_by_the_poll(pair):
    client, conn = pair
    conn.spin_s, conn.preempted_s = 2.0, 2.0  # wide: a loaded test machine must not end it
    conn.send(b"$OK#9a")
    assert client.recv(64) == b"$OK#9a"
    t = send_later(client, b"$m50400000,4#56", 0.02)
    assert conn.recv() == b"$m50400000,4#56"
    t.join()
    calls = conn.sock.calls
    assert calls[-1] == (POLL, 15) and {k for k, _ in calls} == {POLL}, calls


def test_a_request_after_the_window_is_taken_by_the_blocking_recv(pair):
    client, conn = pair
    conn.spin_s = 0.001
    conn.send(b"$OK#9a")
    t = send_later(client, b"$p21#d3", 0.05)
    assert conn.recv() == b"$p21#d3"
    t.join()
    calls = kinds(conn)
    assert calls[0] == POLL and calls[-1] == BLOCK and calls.count(BLOCK) == 1, calls


def test_a_client_that_hangs_up_during_the_window_ends_the_session(pair):
    client, conn = pair
    conn.spin_s, conn.preempted_s = 2.0, 2.0
    conn.send(b"$OK#9a")
    client.close()
    t0 = time.monotonic()
    assert conn.recv() == b""  # end of stream, seen by the poll: no 2 s wait, no block
    assert time.monotonic() - t0 < 1.0 and kinds(conn)[-1] == POLL


def test_no_poll_before_the_first_reply_nor_after_polling_is_off(pair):
    client, conn = pair
    client.sendall(b"$?#3f")
    assert conn.recv() == b"$?#3f" and kinds(conn) == [BLOCK]  # nothing sent yet
    conn.spin_s = 0.0
    conn.send(b"$S05#b8")
    client.sendall(b"$g#67")
    assert conn.recv() == b"$g#67" and kinds(conn) == [BLOCK]


def test_polling_stops_where_it_does_not_pay_doubling_until_one_pays(pair):
    """A window that passes without a request: the next ``backoff`` replies are followed by
    a blocking recv; the next such window doubles that (up to backoff_max). A request already
    there at the first poll changes nothing; one that comes while polling resets it."""
    client, conn = pair
    conn.spin_s, conn.backoff, conn.backoff_max = 0.001, 2, 6
    conn.preempted_s = 1.0  # here only a window that passes fails (the next test: a lost CPU)

    def exchange(delay: float | None) -> list[str]:
        """A reply, then a request ``delay`` s later (None: before recv is called)."""
        conn.send(b"$OK#9a")
        client.recv(64)
        if delay is None:
            client.sendall(b"$g#67")
        t = send_later(client, b"$g#67", delay) if delay is not None else None
        assert conn.recv() == b"$g#67"
        if t is not None:
            t.join()
        return sorted(set(kinds(conn)))

    assert exchange(0.03) == [BLOCK, POLL]  # window passed: off for 2 replies
    assert [exchange(0.0) for _ in range(2)] == [[BLOCK]] * 2
    assert exchange(None) == [POLL]  # there at the first poll: neither paid nor failed
    assert exchange(0.03) == [BLOCK, POLL]  # failed again: off for 4
    assert [exchange(0.0) for _ in range(4)] == [[BLOCK]] * 4
    assert exchange(0.03) == [BLOCK, POLL]  # and again: off for 6 (8, capped)
    assert [exchange(0.0) for _ in range(6)] == [[BLOCK]] * 6
    conn.spin_s = 2.0
    assert exchange(0.02) == [POLL]  # paid: the next failure is off for 2 again
    conn.spin_s = 0.001
    assert exchange(0.03) == [BLOCK, POLL]
    assert [exchange(0.0) for _ in range(2)] == [[BLOCK]] * 2
    assert exchange(0.03) == [BLOCK, POLL]


def test_a_poll_that_loses_its_cpu_counts_as_not_paying(pair, monkeypatch):
    """Two polls more than preempted_s apart: the thread was descheduled (the CPU it polls
    on is shared), so polling is turned off although the request came in the window."""
    client, conn = pair
    conn.spin_s, conn.preempted_s, conn.backoff = 2.0, 0.005, 1
    real = conn.sock.recv_into

    def slow_poll(buf, nbytes=0, flags=0):
        time.sleep(0.01)  # as if another process had the CPU
        return real(buf, nbytes, flags)

    monkeypatch.setattr(conn.sock, "recv_into", slow_poll)
    conn.send(b"$OK#9a")
    client.sendall(b"$g#67")
    assert conn.recv() == b"$g#67"
    assert kinds(conn) == [POLL]  # it got the request, 10 ms after the poll began
    monkeypatch.setattr(conn.sock, "recv_into", real)
    conn.send(b"$OK#9a")  # the one reply without polling
    client.sendall(b"$g#67")
    assert conn.recv() == b"$g#67" and kinds(conn) == [BLOCK]


def test_a_silent_client_costs_the_server_no_cpu(stub):
    """No client, then a client that made requests and went silent: over a second each, the
    whole process (the server's threads are in it) uses almost no CPU, and the client's next
    requests, in the window and long after it, are answered."""
    def cpu_over_a_second() -> float:
        c0 = time.process_time()
        time.sleep(1.0)
        return time.process_time() - c0

    assert cpu_over_a_second() < 0.05
    with RspClient(port=stub.gdb[0].port) as c:
        first = c.request("m50400000,4")
        assert first == b"01020304"
        assert c.request("m50400000,4") == first  # right after a reply: in the window
        assert cpu_over_a_second() < 0.05
        assert c.request("m50400000,4") == first  # long after it
