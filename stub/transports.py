"""Byte transports a gdb session runs over: TCP sockets, stdio pipes and serial ports.

Each offers ``recv() -> bytes`` (b"" at end of stream), ``send(data)`` (one write per call) and
``close()``.
"""
from __future__ import annotations

import os
import socket
import threading

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

    def recv(self) -> bytes:
        try:
            n = self.sock.recv_into(self._buf)
        except OSError:
            return b""
        return self._view[:n].tobytes()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

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
