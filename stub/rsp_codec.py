"""GDB remote serial protocol framing: ``$payload#cs``, acks, 0x03, binary escaping.

Pure functions and one incremental parser, independent of sockets, so the framing can be tested
and fuzzed on its own. Parsing works on whole buffers (``bytes.find``), never byte by byte.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INTERRUPT = 0x03
_ESCAPED = frozenset(b"#$}*")


def checksum(payload: bytes) -> int:
    """The sum of the bytes modulo 256. Past a few hundred bytes numpy's sum is faster than
    sum(); summed in uint8 it wraps modulo 256 itself, which is the checksum and 18x faster
    than a uint64 sum (128 KiB: 3 us against 54 us)."""
    if len(payload) > 256:
        return int(np.frombuffer(payload, dtype=np.uint8).sum(dtype=np.uint8))
    return sum(payload) & 0xFF


def frame(payload: bytes, notification: bool = False) -> bytes:
    """``$payload#xx`` (or ``%payload#xx`` for an asynchronous notification)."""
    return (b"%" if notification else b"$") + payload + b"#%02x" % checksum(payload)


def escape(data: bytes) -> bytes:
    """Binary-data escaping for ``X``/``x``: ``#$}*`` become ``}`` followed by byte ^ 0x20."""
    if not any(b in _ESCAPED for b in data):
        return bytes(data)
    out = bytearray()
    for b in data:
        if b in _ESCAPED:
            out += bytes((0x7D, b ^ 0x20))
        else:
            out.append(b)
    return bytes(out)


def unescape(data: bytes) -> bytes:
    if b"}" not in data:
        return bytes(data)
    out = bytearray()
    it = iter(data)
    for b in it:
        if b == 0x7D:
            nxt = next(it, None)
            if nxt is None:
                raise ValueError("escape character at the end of binary data")
            out.append(nxt ^ 0x20)
        else:
            out.append(b)
    return bytes(out)


def rle_decode(payload: bytes) -> bytes:
    """Expand run-length encoding (``X*n``: repeat X n-29 more times)."""
    if b"*" not in payload:
        return payload
    out = bytearray()
    i = 0
    while i < len(payload):
        b = payload[i]
        if b == 0x2A and out and i + 1 < len(payload):
            out += bytes((out[-1],)) * (payload[i + 1] - 29)
            i += 2
        else:
            out.append(b)
            i += 1
    return bytes(out)


@dataclass(frozen=True)
class Event:
    """One thing read from the wire. kind: packet | notification | interrupt | ack | nack |
    bad_checksum | oversized."""

    kind: str
    payload: bytes = b""


class PacketReader:
    """Incremental parser: feed bytes, get events. Garbage between packets is dropped; a packet
    longer than ``max_size`` is reported once as ``oversized`` and skipped."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._buf = bytearray()
        self._skipping = False  # inside an oversized packet: drop until its '#xx'

    @property
    def pending(self) -> bool:
        """True while part of a packet is buffered."""
        return bool(self._buf) or self._skipping

    def feed(self, data: bytes) -> list[Event]:
        self._buf += data
        buf = self._buf
        events: list[Event] = []
        while buf:
            if self._skipping:
                h = buf.find(b"#")
                if h < 0:
                    del buf[:]
                    break
                if len(buf) < h + 3:
                    del buf[:h]
                    break
                del buf[:h + 3]
                self._skipping = False
                continue
            c = buf[0]
            if c == 0x2B:  # '+'
                events.append(Event("ack"))
                del buf[0]
            elif c == 0x2D:  # '-'
                events.append(Event("nack"))
                del buf[0]
            elif c == INTERRUPT:
                events.append(Event("interrupt"))
                del buf[0]
            elif c in (0x24, 0x25):  # '$' or '%'
                h = buf.find(b"#", 1)
                if h < 0:
                    if len(buf) > self.max_size + 1:
                        events.append(Event("oversized"))
                        self._skipping = True
                        del buf[:]
                    break
                if len(buf) < h + 3:
                    break
                payload = bytes(buf[1:h])
                cs = bytes(buf[h + 1:h + 3])
                del buf[:h + 3]
                if len(payload) > self.max_size:
                    events.append(Event("oversized"))
                    continue
                try:
                    ok = int(cs, 16) == checksum(payload)
                except ValueError:
                    ok = False
                if not ok:
                    events.append(Event("bad_checksum", payload))
                else:
                    events.append(Event("packet" if c == 0x24 else "notification", payload))
            else:  # noise between packets: skip to the next interesting byte
                nxt = min((i for i in (buf.find(b"$"), buf.find(b"%"), buf.find(b"+"),
                                       buf.find(b"-"), buf.find(bytes((INTERRUPT,))))
                           if i >= 0), default=len(buf))
                del buf[:max(nxt, 1)]
        return events
