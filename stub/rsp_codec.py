"""GDB remote serial protocol framing: ``$payload#cs``, acks, 0x03, binary escaping.

Pure functions and one incremental parser, independent of sockets, so the framing can be tested
and fuzzed on its own. Parsing works on whole buffers (``bytes.find``), never byte by byte.
"""
from __future__ import annotations

import binascii
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


#: bytes per run-length code of hex_rle: 98 equal hex digits, ``X*~`` ('~' is 126: X and
#: 126 - 29 = 97 more), the longest run one code holds
RLE_BLOCK = 49


def hex_rle(data: bytes) -> bytes:
    """``data`` hex-encoded for an ``m`` reply, each RLE_BLOCK-byte block of one byte value with
    equal nibbles (zero-filled or erased memory: 00, ff, ...) as one run-length code ``X*~``.

    Why: gdb reads a reply character by character (~20 ns each), which bounds a hex dump at
    ~25 MB/s however fast the stub is; a zero block costs it 3 characters instead of 98. gdb
    decodes run-length codes in every reply (gdb manual, "Remote Protocol > Overview"), and
    gdbserver's putpkt_binary_1 sends every reply so.
    Blocks are aligned to ``data``'s start (a run that starts mid-block is sent as hex up to
    the next block): numpy finds them at 0.2-2 ns a byte, where a byte-exact search costs
    more than gdb saves. Runs stop at '~', so the count is never '#' or '$'."""
    hexed = binascii.hexlify(data)
    k = len(data) // RLE_BLOCK
    if k == 0:
        return hexed
    blocks = np.frombuffer(data, np.uint8, k * RLE_BLOCK).reshape(k, RLE_BLOCK)
    first = blocks[:, 0]
    # candidates first (first byte = last, equal nibbles): random data has ~1 in 4000, so it
    # costs ~15 us per 64 KiB instead of comparing every byte
    cand = np.flatnonzero((first == blocks[:, -1]) & (first >> 4 == first & 15))
    cand = cand[(blocks[cand] == first[cand, None]).all(1)]
    if not cand.size:
        return hexed
    digit = np.full(k, 16, np.uint8)  # 16: a block sent as hex
    digit[cand] = first[cand] & 15
    edges = (np.flatnonzero(digit[1:] != digit[:-1]) + 1).tolist()
    parts = []
    for s, e in zip([0, *edges], [*edges, k]):
        d = int(digit[s])
        parts.append(hexed[2 * RLE_BLOCK * s:2 * RLE_BLOCK * e] if d == 16
                     else b"%x*~" % d * (e - s))
    parts.append(hexed[2 * RLE_BLOCK * k:])
    return b"".join(parts)


def rle_decode(payload: bytes) -> bytes:
    """Expand run-length encoding (``X*n``: repeat X n-29 more times); a ``*`` with no
    character before it or no count after it stays as it is."""
    if b"*" not in payload:
        return payload
    parts = payload.split(b"*")
    out, last = [parts[0]], parts[0][-1:]
    for part in parts[1:]:
        if not last or not part:
            out += [b"*", part]
        else:
            out += [last * (part[0] - 29), part[1:]]
        last = out[-1][-1:] or last
    return b"".join(out)


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
