"""A Python RSP client for the stub: used by the TUI, scripted sessions and the tests.

It negotiates no-ack mode and ``accelstub-notify+`` (so stops caused by other clients arrive as
``%Stop`` notifications), reads the target description to map register names to numbers, and
splits large memory accesses by the stub's PacketSize.
"""
from __future__ import annotations

import queue
import re
import socket
import threading
from typing import Callable

from .rsp_codec import INTERRUPT, PacketReader, escape, frame


class RspError(Exception):
    pass


class RspClient:
    def __init__(self, host: str = "127.0.0.1", port: int = 3333, timeout: float = 10.0,
                 on_stop: Callable[[str], None] | None = None) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(None)
        self.timeout = timeout
        self.on_stop = on_stop
        self.console: list[str] = []  # O-packet text received
        self._replies: queue.Queue[bytes | None] = queue.Queue()
        self._reader = PacketReader(1 << 20)
        self._noack = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read_loop, daemon=True, name="rsp-client")
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

    # -- plumbing ----------------------------------------------------------------------------
    def _read_loop(self) -> None:
        while True:
            try:
                data = self.sock.recv(1 << 18)
            except OSError:
                data = b""
            if not data:
                self._replies.put(None)
                return
            for ev in self._reader.feed(data):
                if ev.kind == "notification":
                    if ev.payload.startswith(b"Stop:") and self.on_stop is not None:
                        self.on_stop(ev.payload[5:].decode())
                elif ev.kind == "packet":
                    if not self._noack:
                        self.sock.sendall(b"+")
                    if ev.payload.startswith(b"O") and ev.payload != b"OK" and \
                            re.fullmatch(rb"O([0-9a-fA-F]{2})+", ev.payload):
                        self.console.append(bytes.fromhex(ev.payload[1:].decode()).decode())
                    else:
                        self._replies.put(ev.payload)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, payload: str | bytes, timeout: float | None = None) -> bytes:
        """Send one packet and wait for its reply."""
        if isinstance(payload, str):
            payload = payload.encode()
        with self._lock:
            self.sock.sendall(frame(payload))
            return self._wait(timeout)

    def _wait(self, timeout: float | None) -> bytes:
        try:
            reply = self._replies.get(timeout=timeout or self.timeout)
        except queue.Empty:
            raise RspError("no reply from the stub") from None
        if reply is None:
            raise RspError("connection closed by the stub")
        return reply

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def __enter__(self) -> "RspClient":
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

    def read_register(self, name: str) -> int:
        regnum, _ = self.registers()[name]
        reply = self.request(f"p{regnum:x}")
        if reply.startswith(b"E"):
            raise RspError(f"cannot read register {name} ({reply.decode()})")
        return int.from_bytes(bytes.fromhex(reply.decode()), "little")

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

    def start_continue(self) -> None:
        """Send ``c`` and return at once; collect the stop with :meth:`wait_stop`."""
        with self._lock:
            self.sock.sendall(frame(b"vCont;c"))

    def wait_stop(self, timeout: float | None = None) -> str:
        return self._wait(timeout).decode()

    def interrupt(self) -> None:
        self.sock.sendall(bytes((INTERRUPT,)))

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
