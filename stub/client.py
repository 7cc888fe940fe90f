"""A Python RSP client for the stub: used by the TUI, scripted sessions and the tests.

It negotiates no-ack mode and ``accelstub-notify+`` (so stops caused by other clients arrive as
``%Stop`` notifications), reads the target description to map register names to numbers, and
splits large memory accesses by the stub's PacketSize.
"""
from __future__ import annotations

import binascii
import queue
import re
import socket
import threading
import time
from collections.abc import Callable

from .rsp_codec import INTERRUPT, PacketReader, checksum, escape, frame, rle_decode


class RspError(Exception):
    pass


class NoReply(RspError):
    """No reply within the timeout (the stub may still be working on the request)."""


class ConnectionClosed(RspError):
    """The stub closed the connection (or the socket failed): every later request raises this
    at once instead of waiting for a reply that cannot come."""


def lone_reply(data: bytes) -> bytes | None:
    """The decoded payload of ``data`` when it is exactly one whole reply packet
    (``$payload#xx``, a good checksum, not console output ``O...``), else None. What one recv
    brings back for one request almost always: taken here in a few slices instead of a pass of
    the general parser and a queue hand-off (issue 26 #7: the client's own Python per register
    read). Anything else (a notification, two packets, a part, a bad checksum) is None, for
    the general parser (PacketReader), which then treats it exactly as before."""
    end = len(data) - 3
    if end < 1 or data[0] != 0x24 or data.find(b"#") != end or data[1:2] == b"O":
        return None
    payload = data[1:end]
    try:
        if int(data[end + 1:], 16) != checksum(payload):
            return None
    except ValueError:
        return None
    return rle_decode(payload)


def _register_value(name: str, reply: bytes) -> int:
    """The value of a ``p`` reply (little-endian hex), or RspError for an ``Exx`` refusal."""
    if reply[:1] == b"E":
        raise RspError(f"cannot read register {name} ({reply.decode()})")
    return int.from_bytes(binascii.unhexlify(reply), "little")


class RspClient:
    def __init__(self, host: str = "127.0.0.1", port: int = 3333, timeout: float = 10.0,
                 on_stop: Callable[[str], None] | None = None,
                 reader_thread: bool = True) -> None:
        """``reader_thread``: a thread reads the socket, so ``%Stop`` notifications reach
        ``on_stop`` while nothing is asked (the TUI). Without it the thread that waits for a
        reply reads the socket itself (notifications are handled while it waits): one thread
        hand-off less per request, for a client that only asks (the Python API)."""
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.on_stop = on_stop
        self.console: list[str] = []  # O-packet text received
        self._replies: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._reader = PacketReader(1 << 20)
        self._noack = False
        self._closed = False  # set when the stub closed the connection (EOF)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        if reader_thread:
            self.sock.settimeout(None)
            self._thread = threading.Thread(target=self._read_loop, daemon=True,
                                            name="rsp-client")
            self._thread.start()
        feats = self.request("qSupported:multiprocess-;accelstub-notify+;"
                             "accelstub-rcmd-errors+").decode()
        self.features = dict(f.split("=", 1) if "=" in f else (f.rstrip("+-"), f[-1])
                             for f in feats.split(";") if f)
        self.packet_size = int(self.features.get("PacketSize", "1000"), 16)
        if self.features.get("QStartNoAckMode") == "+":
            if self.request("QStartNoAckMode") == b"OK":
                self._noack = True
        self._regs: dict[str, tuple[int, int]] | None = None
        self._p_frames: dict[str, bytes] = {}  # register name -> its framed ``p`` request

    # -- plumbing ----------------------------------------------------------------------------
    def _read_loop(self) -> None:
        while True:
            try:
                data = self.sock.recv(1 << 18)
            except OSError:
                data = b""
            if not self._feed(data):
                return

    def _feed(self, data: bytes) -> bool:
        """Take what the socket gave (b"": the end): replies to the queue, notifications to
        on_stop, console text to :attr:`console`; False at the end."""
        if not data:
            self._closed = True
            self._replies.put(None)
            return False
        for ev in self._reader.feed(data):
            if ev.kind == "notification":
                if ev.payload.startswith(b"Stop:") and self.on_stop is not None:
                    self.on_stop(ev.payload[5:].decode())
            elif ev.kind == "packet":
                payload = rle_decode(ev.payload)  # the stub's m replies: rsp_codec.hex_rle
                if not self._noack:
                    try:
                        self.sock.sendall(b"+")
                    except OSError:  # the next recv sees the end and says so
                        pass
                if payload.startswith(b"O") and payload != b"OK" and \
                        re.fullmatch(rb"O([0-9a-fA-F]{2})+", payload):
                    self.console.append(bytes.fromhex(payload[1:].decode()).decode())
                else:
                    self._replies.put(payload)
        return True

    def _read_until_reply(self, timeout: float) -> bytes | None:
        """Without a reader thread: read the socket in this thread until a reply (or the end)
        is queued; queue.Empty when none came within ``timeout`` seconds. In no-ack mode, with
        nothing queued or half-read, a recv that is exactly one reply packet (:func:`lone_reply`)
        is returned as it is, without the queue; otherwise None (the reply is queued)."""
        deadline = time.monotonic() + timeout
        self._socket_timeout(timeout)  # each recv waits at most that; the loop counts the rest
        while self._replies.empty():
            if time.monotonic() >= deadline:
                raise queue.Empty
            try:
                data = self.sock.recv(1 << 18)
            except TimeoutError:
                raise queue.Empty from None
            except OSError:
                data = b""
            if self._noack and not self._reader.pending:
                reply = lone_reply(data)
                if reply is not None:
                    return reply
            self._feed(data)
        return None

    def _socket_timeout(self, seconds: float) -> None:
        """Set the socket's timeout, only when it changes (each change is a system call)."""
        if self.sock.gettimeout() != seconds:
            self.sock.settimeout(seconds)

    def send_raw(self, data: bytes) -> None:
        if self._closed:
            raise ConnectionClosed("connection closed by the stub")
        try:
            if self._thread is None:  # a short wait's timeout must not cut a long write
                self._socket_timeout(max(self.sock.gettimeout() or 0, self.timeout))
            self.sock.sendall(data)
        except OSError as e:
            raise ConnectionClosed(f"connection to the stub lost: {e}") from None

    def request(self, payload: str | bytes, timeout: float | None = None) -> bytes:
        """Send one packet and wait for its reply."""
        if isinstance(payload, str):
            payload = payload.encode()
        with self._lock:
            self.send_raw(frame(payload))
            return self._wait(timeout)

    def _wait(self, timeout: float | None) -> bytes:
        try:
            if self._thread is None:
                reply = self._read_until_reply(timeout or self.timeout)
                if reply is not None:
                    return reply
            reply = self._replies.get(timeout=timeout or self.timeout)
        except queue.Empty:
            raise NoReply("no reply from the stub") from None
        if reply is None:
            self._replies.put(None)  # every later wait sees the end too, at once
            raise ConnectionClosed("connection closed by the stub")
        return reply

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def __enter__(self) -> RspClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- memory ------------------------------------------------------------------------------
    def read_memory(self, addr: int, length: int) -> bytes:
        out = bytearray()
        chunk = max(1, self.packet_size // 2 - 16)
        while length > 0:
            n = min(chunk, length)
            reply = self.request(f"m{addr:x},{n:x}")
            if reply.startswith(b"E") and len(reply) == 3:
                raise RspError(f"cannot read memory at {addr:#010x} ({reply.decode()})")
            data = bytes.fromhex(reply.decode())
            if not data:
                raise RspError(f"cannot read memory at {addr:#010x}")
            out += data
            addr += len(data)
            length -= len(data)
        return bytes(out)

    def write_memory(self, addr: int, data: bytes) -> None:
        chunk = max(1, self.packet_size // 2 - 32)
        for i in range(0, len(data), chunk):
            piece = data[i:i + chunk]
            reply = self.request(b"X%x,%x:" % (addr + i, len(piece)) + escape(piece))
            if reply != b"OK":
                raise RspError(f"cannot write memory at {addr + i:#010x} ({reply.decode()})")

    # -- registers ---------------------------------------------------------------------------
    def target_xml(self) -> str:
        return self._xfer("features", "target.xml")

    def memory_map(self) -> str:
        return self._xfer("memory-map", "")

    def _xfer(self, obj: str, annex: str) -> str:
        out = b""
        while True:
            reply = self.request(f"qXfer:{obj}:read:{annex}:{len(out):x},8000")
            if not reply or reply[:1] not in (b"m", b"l"):
                raise RspError(f"qXfer {obj} failed: {reply!r}")
            out += reply[1:]
            if reply[:1] == b"l":
                return out.decode()

    def registers(self) -> dict[str, tuple[int, int]]:
        """name -> (regnum, bits), from target.xml."""
        if self._regs is None:
            self._regs = {m.group(1): (int(m.group(3)), int(m.group(2))) for m in re.finditer(
                r'<reg name="([^"]+)" bitsize="(\d+)" regnum="(\d+)"', self.target_xml())}
        return self._regs

    def _p_frame(self, name: str) -> bytes:
        """The framed ``p`` request of register ``name``, built once (KeyError: no such
        register in target.xml)."""
        packet = self._p_frames.get(name)
        if packet is None:
            packet = self._p_frames[name] = frame(b"p%x" % self.registers()[name][0])
        return packet

    def read_register(self, name: str) -> int:
        """One register by its target.xml name: one ``p`` request. The path a script's loop of
        reads takes, so it does no more than it must: the request is built once per register
        (:meth:`_p_frame`) and the reply usually taken as one recv (:func:`lone_reply`)."""
        packet = self._p_frame(name)
        with self._lock:
            self.send_raw(packet)
            reply = self._wait(None)
        return _register_value(name, reply)

    def read_registers(self, names: list[str]) -> list[int]:
        """Several registers in one round trip: the ``p`` requests go out in one write and the
        replies come back in order (the stub answers packets in the order they arrive), so a
        block of registers costs about one request's latency, not one per register."""
        packets = b"".join([self._p_frame(n) for n in names])
        with self._lock:
            self.send_raw(packets)
            replies = [self._wait(None) for _ in names]
        return [_register_value(n, r) for n, r in zip(names, replies)]

    def write_register(self, name: str, value: int) -> None:
        regnum, bits = self.registers()[name]
        reply = self.request(f"P{regnum:x}=" + value.to_bytes(bits // 8, "little").hex())
        if reply != b"OK":
            raise RspError(f"cannot write register {name} ({reply.decode()})")

    # -- run control -------------------------------------------------------------------------
    def stop_reason(self) -> str:
        return self.request("?").decode()

    def step(self, timeout: float | None = None) -> str:
        return self.request("vCont;s", timeout).decode()

    def cont(self, timeout: float | None = None) -> str:
        return self.request("vCont;c", timeout).decode()

    def step_back(self, timeout: float | None = None) -> str:
        """One unit back (``bs``, gdb's reverse-stepi)."""
        return self.request("bs", timeout).decode()

    def start_continue(self) -> None:
        """Send ``c`` and return at once; collect the stop with :meth:`wait_stop`."""
        self.start_packet("vCont;c")

    def start_packet(self, payload: str) -> None:
        """Send one packet and return at once (a resume: ``vCont;s``, ``vCont;c``); collect its
        reply with :meth:`wait_stop`, which may then time out and leave the target running."""
        with self._lock:
            self.send_raw(frame(payload.encode()))

    def wait_stop(self, timeout: float | None = None) -> str:
        return self._wait(timeout).decode()

    def interrupt(self) -> None:
        self.send_raw(bytes((INTERRUPT,)))

    def set_breakpoint(self, addr: int, kind: int = 0, length: int = 4) -> None:
        if self.request(f"Z{kind},{addr:x},{length:x}") != b"OK":
            raise RspError(f"cannot set breakpoint/watchpoint at {addr:#x}")

    def clear_breakpoint(self, addr: int, kind: int = 0, length: int = 4) -> None:
        self.request(f"z{kind},{addr:x},{length:x}")

    def monitor(self, command: str, timeout: float | None = None) -> str:
        """Run a monitor command; returns its console output and result text."""
        start = len(self.console)
        reply = self.request("qRcmd," + command.encode().hex(), timeout)
        text = "".join(self.console[start:])
        if reply.startswith(b"E"):
            raise RspError(text.strip() or f"monitor {command!r} failed")
        if reply != b"OK":
            text += bytes.fromhex(reply.decode()).decode()
        return text
