"""Byte transports a gdb session runs over: TCP sockets, stdio pipes and serial ports.

Each offers ``recv() -> bytes`` (b"" at end of stream), ``send(data)`` (one write per call) and
``close()``.
"""
from __future__ import annotations

import os
import socket
import threading
import time

#: largest read from a transport: one gdb packet (PacketSize 0x20000) arrives in one or two
RECV_SIZE = 1 << 18


class SocketConnection:
    """Reads go into one buffer kept for the connection: ``sock.recv(256 KiB)`` allocates 256 KiB
    per call, which glibc maps and unmaps each time (mmap + mremap + munmap, ~15 us, more than
    the rest of a small request's server time)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = bytearray(RECV_SIZE)
        self._view = memoryview(self._buf)
        try:  # one small reply must not wait for Nagle + delayed ack (as QEMU's gdbstub)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        try:
            self.peer = "%s:%d" % sock.getpeername()[:2]
        except OSError:
            self.peer = "socket"

    #: after a reply, recv() polls this long for the next request before it blocks (s)
    spin_s = 200e-6
    #: a pause this long between two polls means the thread was descheduled: its CPU is
    #: shared (maybe with the client itself), so polling bought nothing there. Not less: on
    #: the quiet VM pauses of 20-50 us come and go (host interrupts) while polling pays
    preempted_s = 100e-6
    #: replies answered without polling after a poll that did not pay; doubled on each
    #: further one, up to backoff_max, reset by one that paid
    backoff, backoff_max = 128, 8192

    _sent_at = 0.0  # perf_counter() at the last reply recv() polls after; 0.0: block at once
    _skip = 0  # replies still to answer without polling
    _skip_next = 0  # _skip after the next poll that does not pay

    def recv(self) -> bytes:
        sent, self._sent_at = self._sent_at, 0.0
        try:
            n = self._poll(sent) if sent else None
            if n is None:
                n = self.sock.recv_into(self._buf)
        except OSError:
            return b""
        return self._view[:n].tobytes()

    def _poll(self, sent: float) -> int | None:
        """Bytes of the next request if it comes within ``spin_s`` of the reply ``sent``
        (perf_counter), else None (recv then blocks, as it did before).

        Why (issue 31 #6): gdb sends its next request ~15 us after our reply. A thread blocked
        in recv() lets its CPU idle, and on a VM without guest halt-polling the idle CPU's
        wake-up costs tens of us: a 4-byte read went from ~44 k/s with gdb on the same CPU to
        ~12 k/s with gdb on the other one. Polling keeps the CPU awake for the next request,
        as the guest kernel's halt-poll would. It costs CPU: the gap to the next request,
        ``spin_s`` at most per reply, none while a client is silent. Where polling does not
        pay (the window passed, or the thread lost its CPU meanwhile, to the client or any
        other process), it stops for ``_skip`` replies, doubling each time until one pays (a
        request that is there at the first poll proves nothing: a blocking recv would have
        returned at once too)."""
        sock, buf, clock = self.sock, self._buf, time.perf_counter
        last = sent
        while True:
            try:
                n = sock.recv_into(buf, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                n = None
            now = clock()
            if now - last > self.preempted_s or (n is None and now - sent > self.spin_s):
                self._skip = self._skip_next or self.backoff
                self._skip_next = min(2 * self._skip, self.backoff_max)
                return n
            if n is not None:
                if last != sent:  # it came after a poll found nothing: polling paid
                    self._skip_next = 0
                return n
            last = now

    def send(self, data: bytes) -> None:
        """One reply; recv() then polls for the next request (_poll) unless polling is off."""
        self.sock.sendall(data)
        if self._skip:
            self._skip -= 1
        elif self.spin_s:
            self._sent_at = time.perf_counter()

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class PipeConnection:
    """stdin/stdout (``target remote | accelstub serve max78000 --stdio``)."""

    peer = "stdio"

    def __init__(self, rfd: int = 0, wfd: int = 1) -> None:
        self.rfd, self.wfd = rfd, wfd
        self._closed = False
        self._buf = bytearray(RECV_SIZE)  # as SocketConnection: no 256 KiB allocation per read
        self._view = memoryview(self._buf)

    def recv(self) -> bytes:
        if self._closed:
            return b""
        try:
            n = os.readv(self.rfd, [self._buf])
        except OSError:
            return b""
        return self._view[:n].tobytes()

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.wfd, view)
            view = view[n:]

    def close(self) -> None:
        self._closed = True


class SerialConnection:
    """A serial port or a pyserial URL (``/dev/ttyUSB0``, ``/dev/pts/3``, ``loop://``,
    ``socket://host:port``)."""

    def __init__(self, port_or_url: str, baudrate: int = 115200) -> None:
        import serial  # pyserial

        self.ser = serial.serial_for_url(port_or_url, baudrate=baudrate, timeout=0.2)
        self.peer = port_or_url
        self._closed = threading.Event()

    def recv(self) -> bytes:
        while not self._closed.is_set():
            try:
                data = self.ser.read(max(1, self.ser.in_waiting))
            except Exception:
                return b""
            if data:
                return data
        return b""

    def send(self, data: bytes) -> None:
        try:
            self.ser.write(data)
            self.ser.flush()
        except Exception as e:  # pyserial raises its own types (or TypeError once closed)
            raise OSError(f"serial port {self.peer}: {e}") from e

    def close(self) -> None:
        self._closed.set()
        try:
            self.ser.close()
        except Exception:
            pass
