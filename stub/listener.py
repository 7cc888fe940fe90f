"""The TCP listener every server shares (gdb, telnet, Tcl RPC): accept connections on a
thread each, track them, and stop promptly (shutdown wakes accept())."""
from __future__ import annotations

import socket
import threading


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
