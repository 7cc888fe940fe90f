"""The Ethos-U85 command stream as the NPU fetches it: where it lies (QBASE, QSIZE, QCONFIG), its
words, each command decoded once, and the NPU_SET_* commands of a unit worked out once per stream
(segments). The decode side of decode -> operation -> execute: the model (model.py) executes what
this gives it; nothing here changes state but its memos. The command format itself is stream.py's.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..registers import RegisterFile
from . import ops
from . import stream as es
from .memport import ADDR_MASK, NpuPort, port_family

#: a unit's NPU_SET_* commands by name, their fetch ranges, those ranges' bytes, and the offset
#: of the operation that ends the unit (:func:`segment`)
Segment = tuple[dict[str, es.Command], tuple[tuple[int, int], ...], int, int]


class CommandStream:
    """The stream at QBASE over the device's registers and memory port."""

    #: the registers that place the command stream (``place``, kept with regs.derived: every
    #: unit needs them, and reading them by name cost ~5 us)
    REGS = ("QBASE_LO", "QBASE_HI", "QSIZE", "QCONFIG", *(f"MEM_ATTR{i}" for i in range(4)))

    def __init__(self, regs: RegisterFile, port: NpuPort) -> None:
        self.regs = regs
        self.port = port
        #: (QBASE, QSIZE, the command stream's port family)
        self.place = regs.derived(self.REGS, self._place_now)
        # (registers, not names: pc asks for QBASE several times a step, issue 26 #7)
        self._qbase_lo, self._qbase_hi = (regs.description.register(n)
                                          for n in ("QBASE_LO", "QBASE_HI"))
        self._words: tuple[Any, Any] = (None, None)  # ((QBASE, bytes), the words' view)

    def _place_now(self) -> tuple[int, int, int]:
        return (self.qbase, self.regs.peek("QSIZE"),
                port_family(self.regs, self.regs.field("QCONFIG", "cmd_region0")))

    @property
    def qbase(self) -> int:
        return (self.regs.peek(self._qbase_hi) << 32 | self.regs.peek(self._qbase_lo)) & ADDR_MASK

    def words(self) -> np.ndarray:
        """The words of [QBASE, QBASE+QSIZE) (a view; bus fault if not in system memory)."""
        qbase, qsize, _ = self.place()
        n = qsize & ~3
        if not n:
            return np.zeros(0, dtype="<u4")
        key = (qbase, n)
        if self._words[0] != key:  # a view of the same memory serves every unit of a stream
            mem, off = self.port.window(key[0], key[0] + n, ops.RD_CMD, -1, "command stream")
            self._words = key, mem.data[off:off + n].view("<u4")
        words: np.ndarray = self._words[1]
        return words

    def decoded(self) -> list[es.Command]:
        """The whole stream [0, QSIZE) decoded linearly ([] if not readable)."""
        try:
            words = self.words()
        except ops.NpuBusFault:
            return []
        return es.decode(words.tobytes())


_DECODE_CACHE_MAX = 1 << 14
_decode_cache: dict[tuple[int, ...], es.Command] = {}  # (offset, word, next word) -> Command


def decode_at(words: np.ndarray, offset: int) -> es.Command:
    """The command at byte ``offset``. Memoised on (offset, its two words): a command is a
    pure function of them (Command is frozen), and a program's commands repeat on every
    run, so decoding costs once per distinct command rather than per execution."""
    i = offset // 4
    ws = tuple(words[i:i + 2].tolist())
    key = (offset,) + ws
    cmd = _decode_cache.get(key)
    if cmd is None:
        cmd = es.decode_one(list(ws), 0, offset)
        if len(_decode_cache) >= _DECODE_CACHE_MAX:
            _decode_cache.clear()
        _decode_cache[key] = cmd
    return cmd


_SEGMENTS_MAX = 4096
#: (start, QSIZE, QBASE) -> (stream bytes to the operation's end, SET state, fetch ranges,
#: their bytes, that end, the operation's offset)
_segments: dict[tuple[int, int, int], tuple[Any, ...]] = {}


def segment(words: np.ndarray, q: int, qsize: int, qbase: int) -> Segment | None:
    """The NPU_SET_* commands from ``q`` up to the next operation, as (their state by name,
    the fetch ranges up to and including the operation's as one tuple, their bytes, the
    operation's offset), when the stream there holds the same words as when this was last
    worked out: a program's units repeat on every run, and setting each command of a unit
    one by one cost more than its convolution's output stage (and the kept tuple lets the
    unit's AXI counts be found by its identity). None where the walk must go command by
    command (no operation before the end, a reserved encoding)."""
    key = (q, qsize, qbase)
    hit = _segments.get(key)
    if hit is not None:
        data, sets, ranges, nbytes, end, op_q = hit
        if words[q // 4:end // 4].tobytes() == data:
            return sets, ranges, nbytes, op_q
    found: dict[str, es.Command] = {}
    fetches: list[tuple[int, int]] = []
    p = q
    while p < qsize:
        cmd = decode_at(words, p)
        if cmd.name == es.UNKNOWN:
            return None
        fetches.append((qbase + p, qbase + p + cmd.size))
        if cmd.is_operation:
            if len(_segments) >= _SEGMENTS_MAX:
                _segments.clear()
            end = p + cmd.size
            kept = tuple(fetches)
            nbytes = sum(b - a for a, b in kept)
            _segments[key] = (words[q // 4:end // 4].tobytes(), found, kept, nbytes, end, p)
            return found, kept, nbytes, p
        found[cmd.name] = cmd
        p += cmd.size
    return None
