"""The TCP listener every server shares (gdb, telnet, Tcl RPC): accept connections on a
thread each, track them, and stop promptly (shutdown wakes accept()); and the bounded output
queue of the telnet and Tcl connections."""
from __future__ import annotations

import collections
import logging
import socket
import threading
from collections.abc import Callable

log = logging.getLogger("accelstub.server")

#: bytes of replies a telnet/Tcl connection may have unsent before the server stops reading its
#: requests (then TCP stops the client): pipelined requests whose replies are never read cost
#: at most this plus one reply
OUTPUT_LIMIT = 1 << 20
#: bytes of unsolicited output (Tcl notifications, telnet stop messages) a connection may have
#: unsent; past it the client reads nothing and the connection is closed
UNSOLICITED_LIMIT = 1 << 20


def address_family(host: str) -> socket.AddressFamily:
    """AF_INET6 for an IPv6 address or a name that resolves to one first (``--bind ::1``),
    else AF_INET: socket.create_server() assumes IPv4 unless told. Raises OSError (gaierror)
    for a name that does not resolve."""
    if not host:
        return socket.AF_INET  # "" = every IPv4 interface, as before
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return infos[0][0]


class TcpListener:
    """Subclasses implement :meth:`new_connection`, returning an object with ``serve()`` (run in
    its own thread), ``closed`` and ``sock``; it calls :meth:`_ended` when it finishes."""

    kind = "tcp"

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._conns: list = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    def new_connection(self, sock: socket.socket, peer):
        raise NotImplementedError

    def start(self) -> None:
        self._sock = socket.create_server((self.host, self.port), family=address_family(self.host))
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept_loop, daemon=True,
                                        name=f"{self.kind}-{self.port}")
        self._thread.start()

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                sock, peer = self._sock.accept()
            except OSError:
                break
            if self._stopping.is_set():
                sock.close()
                break
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = self.new_connection(sock, peer)
            t = threading.Thread(target=conn.serve, daemon=True, name=f"{self.kind}-{peer}")
            with self._lock:
                self._conns.append(conn)
                self._threads = [x for x in self._threads if x.is_alive()] + [t]
            t.start()

    def _ended(self, conn) -> None:
        with self._lock:
            if conn in self._conns:
                self._conns.remove(conn)

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._conns)

    def stop(self) -> None:
        self._stopping.set()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)  # wakes accept() on Linux
            except OSError:
                pass
            try:
                self._sock.close()
            except OSError:
                pass
        with self._lock:
            conns, threads = list(self._conns), list(self._threads)
        for c in conns:
            c.closed = True
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=2)
        for t in threads:
            if t is not threading.current_thread():
                t.join(timeout=2)


class OutputQueue:
    """One connection's output, sent by a thread of its own, with bounded memory.

    Why a thread: a run-control worker announcing a stop must never block on a client that does
    not read (the worker would stop running the device for every client). Why bounds: a client
    that pipelines requests and never reads the replies made the server queue replies without
    end. Replies are queued with :meth:`put` and the request loop calls :meth:`wait_room` before
    it reads or handles the next request, so at most ``limit`` plus one reply waits and such a
    client is simply no longer read. Unsolicited output (``put(..., unsolicited=True)``) never
    waits; when more than ``unsolicited_limit`` of it is unsent the client reads nothing: the
    socket is shut down (which ends the connection's threads) instead of queueing more.
    """

    def __init__(self, send: Callable[[bytes], None], cut: Callable[[], None], name: str,
                 limit: int | None = None, unsolicited_limit: int | None = None) -> None:
        """``send`` writes to the client (may block; OSError ends the output), ``cut`` ends the
        connection from another thread (its reader sees the end)."""
        self._send, self._cut = send, cut
        self._name = name
        self.limit = OUTPUT_LIMIT if limit is None else limit
        self.unsolicited_limit = UNSOLICITED_LIMIT if unsolicited_limit is None \
            else unsolicited_limit
        self._items: collections.deque[tuple[bytes, bool]] = collections.deque()
        self.queued = 0  # bytes not yet sent
        self._unsolicited = 0
        self._cond = threading.Condition()
        self.closed = False  # no more output: closing, or the client went away
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._thread.start()

    @classmethod
    def for_socket(cls, sock: socket.socket, name: str) -> OutputQueue:
        def cut() -> None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return cls(sock.sendall, cut, name)

    def put(self, data: bytes, unsolicited: bool = False) -> None:
        """Queue ``data``; never blocks."""
        if not data:
            return
        with self._cond:
            if self.closed:
                return
            overflow = unsolicited and self._unsolicited + len(data) > self.unsolicited_limit
            if not overflow:
                self._items.append((data, unsolicited))
                self.queued += len(data)
                if unsolicited:
                    self._unsolicited += len(data)
                self._cond.notify_all()
        if overflow:
            self._overflow()

    def _overflow(self) -> None:
        """Close without blocking the caller (a run-control worker announcing a stop)."""
        with self._cond:
            first, self.closed = not self.closed, True
            self._cond.notify_all()
        if first:
            log.warning("%s: the client does not read its output; closing the connection",
                        self._name)
        self._cut()

    def wait_room(self) -> bool:
        """Block while more than ``limit`` bytes wait; False once the output is closed."""
        with self._cond:
            while not self.closed and self.queued > self.limit:
                self._cond.wait()
            return not self.closed

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self.closed:
                    self._cond.wait()
                if not self._items:
                    return
                data, unsolicited = self._items[0]
            try:
                self._send(data)
            except OSError:
                with self._cond:
                    self.closed = True
                    self._items.clear()
                    self._cond.notify_all()
                return
            with self._cond:
                self._items.popleft()
                self.queued -= len(data)
                if unsolicited:
                    self._unsolicited -= len(data)
                self._cond.notify_all()

    def close(self, flush_timeout: float = 2.0) -> None:
        """No more output; what is queued is still sent (``exit``'s reply) for up to
        ``flush_timeout`` seconds, then the thread ends (shut the socket down to cut it short)."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(flush_timeout)
