"""Address decoding: which region, which populated range, which register or memory byte.

Accesses may be of any size and alignment and may span regions, as long as every byte lies in a
populated range; anything else raises :class:`BusError` naming the first bad address
(docs/design-notes.md: "never silent zeros").
"""
from __future__ import annotations

import bisect
import struct
from collections.abc import Callable

import numpy as np

from .description import Description, Region, Register
from .errors import BusError
from .registers import RegisterFile

MemWriteHook = Callable[[Region, int, bytes], bool]  # (region, address, data) -> handled
#: a little-endian 32-bit word from 4 bytes, as int.from_bytes(data, "little") without its
#: method lookup and keyword string on each of the word paths' accesses
_word = struct.Struct("<I").unpack
_word_bytes = struct.Struct("<I").pack


class Memory:
    """Backing store of one memory region (bytes); stores only the bits ``word_mask`` keeps.

    ``version`` changes whenever the contents may have changed (write, clear, restore; code that
    stores into ``data`` directly calls :meth:`touch`), so a device model can keep values derived
    from a memory (decoded weights) until it changes. A memory of a stack (:meth:`Bus.stack`)
    also counts its changes in the stack's shared counter: one number says whether any of the
    stack changed; a memory in no stack, in one counter shared by all of those
    (Bus.loose_version: the history's check at each stop, devices/history.py)."""

    def __init__(self, region: Region) -> None:
        self.region = region
        self.data = np.zeros(region.size, dtype=np.uint8)
        self.version = 0
        #: the change counter shared with its stack's memories or (Bus.loose_version) with all
        #: memories in no stack
        self.stack_version: list[int] | None = None
        period = 4 * len(region.word_mask)
        pattern = np.frombuffer(np.array(region.word_mask, dtype="<u4").tobytes(), dtype=np.uint8)
        self._full = bool(np.all(pattern == 0xFF))
        self._pattern, self._period = pattern, period

    def read(self, off: int, n: int) -> bytes:
        return self.data[off:off + n].tobytes()

    def write(self, off: int, data: bytes) -> None:
        buf = np.frombuffer(data, dtype=np.uint8)
        if not self._full:
            idx = (np.arange(off, off + len(buf)) % self._period)
            buf = buf & self._pattern[idx]
        self.data[off:off + len(buf)] = buf
        self.touch()

    def clear(self) -> None:
        self.data[:] = 0
        self.touch()

    def touch(self) -> None:
        """Record a change made to ``data`` directly."""
        self.version += 1
        if self.stack_version is not None:
            self.stack_version[0] += 1


class Bus:
    """Decodes addresses of one device onto its register file and memories."""

    def __init__(self, description: Description, regs: RegisterFile) -> None:
        self.description = description
        self.regs = regs
        self.regions = list(description.regions)
        self._bases = [r.base for r in self.regions]
        self.memories: dict[str, Memory] = {
            r.name: Memory(r) for r in self.regions if r.kind not in ("registers", "pseudo")}
        self._write_hooks: dict[str, MemWriteHook] = {}
        #: 2-D views over groups of equal memories, and those memories in row order (stack)
        self.stacks: dict[str, np.ndarray] = {}
        self.stack_members: dict[str, list[Memory]] = {}
        self.stack_versions: dict[str, list[int]] = {}
        #: the change counter shared by the memories in no stack (Memory.stack_version)
        self.loose_version = [0]
        for m in self.memories.values():
            m.stack_version = self.loose_version
        #: work arrays a device model keeps with this bus between units (owned by that model)
        self.derived: dict[str, object] = {}
        #: every bus write's [start, end) while reverse-execution history records
        #: (devices/history.py): the host program's and the debugger's writes between units,
        #: which no unit's Touched names; None while nothing records
        self.write_log: list[tuple[int, int]] | None = None
        #: how many stores bus writes made through Memory.write (each moves its memory's
        #: change counter once): the history compares it with the counters' sum, so a change
        #: made another way while halted (a write hook, a command storing into an array) is
        #: seen and recorded whole (devices/history.py History.hidden)
        self.write_touches = 0
        #: (start, end) ranges flattened and sorted, with their region, for fast decoding
        pops = sorted((s, e, r) for r in self.regions for s, e in r.populated)
        self._pop_starts = [p[0] for p in pops]
        self._pops = pops
        self._pop_memories = [self.memories.get(r.name) for _, _, r in pops]
        #: register address -> its register, for every whole word of a register window: the
        #: driver's usual store (one aligned word) decoded once per register, not per write
        self._word_regs = dict(self._register_words())

    def _register_words(self) -> list[tuple[int, Register]]:
        """(address, register) of every register whose word lies whole in one populated range
        of a register or pseudo-register region: where :meth:`write`'s word path applies."""
        out = []
        for reg in self.description.registers:
            a = reg.address
            if self.description.register_at(a) is not reg:
                continue  # a bank other than bank 0: the bus reaches it through bank 0
            try:
                _, e, r = self._populated(a)
            except BusError:
                continue  # (the general path names the error)
            if a + 4 <= e and r.kind in ("registers", "pseudo"):
                out.append((a, reg))
        return out

    def stack(self, key: str, names: list[str]) -> np.ndarray:
        """Give the memories ``names`` (all of one size) a single 2-D backing array, row i =
        ``names[i]``, so that a kernel indexes all of them at once (the MAX78000's 64 MRAM
        blocks); each Memory keeps a view of its row, so every other access path is unchanged."""
        rows = np.stack([self.memories[n].data for n in names])
        for i, n in enumerate(names):
            self.memories[n].data = rows[i]
        self.stacks[key] = rows
        self.stack_members[key] = [self.memories[n] for n in names]
        self.stack_versions[key] = counter = [0]
        for m in self.stack_members[key]:
            m.stack_version = counter
        return rows

    def touch_rows(self, key: str, rows: list[int]) -> None:
        """:meth:`Memory.touch` of rows ``rows`` of stack ``key`` (a kernel wrote into the
        stack's array directly), with one step of the stack's counter."""
        members = self.stack_members[key]
        for i in rows:
            members[i].version += 1
        self.stack_versions[key][0] += 1

    def on_memory_write(self, region_name: str, hook: MemWriteHook) -> None:
        """Route bus writes to a memory region through ``hook`` (e.g. MRAM staging)."""
        self._write_hooks[region_name] = hook

    def region_at(self, addr: int) -> Region | None:
        i = bisect.bisect_right(self._bases, addr) - 1
        if i >= 0 and addr < self.regions[i].end:
            return self.regions[i]
        return None

    def _populated(self, addr: int) -> tuple[int, int, Region]:
        i = bisect.bisect_right(self._pop_starts, addr) - 1
        if i >= 0:
            s, e, r = self._pops[i]
            if addr < e:
                return s, e, r
        region = self.region_at(addr)
        if region is None:
            raise BusError(addr, f"not mapped in {self.description.name}")
        raise BusError(addr, f"not populated (inside region {region.name})")

    def is_mapped(self, addr: int, size: int = 1) -> bool:
        try:
            self._chunks(addr, size)
        except BusError:
            return False
        return True

    def _chunks(self, addr: int, size: int) -> list[tuple[int, int, Region]]:
        out = []
        end = addr + size
        if addr < 0 or end > 1 << 32:
            raise BusError(addr & 0xFFFFFFFF, "outside the 32-bit address space")
        while addr < end:
            s, e, r = self._populated(addr)
            n = min(e, end) - addr
            out.append((addr, n, r))
            addr += n
        return out

    def read(self, addr: int, size: int) -> bytes:
        # the common debugger read lies inside one populated memory range: one bisect and a
        # slice (gdb's 4-byte reads spent half their server time in the general path below)
        i = bisect.bisect_right(self._pop_starts, addr) - 1
        if i >= 0:
            s, e, r = self._pops[i]
            mem = self._pop_memories[i]
            if mem is not None:
                if addr + size <= e and size >= 0:
                    off = addr - r.base
                    return mem.data[off:off + size].tobytes()
            elif size == 4 and not addr & 3:
                # one whole register word (a driver's poll, gdb's 4-byte read): _read_regs'
                # loop for one word, the register taken from the word path's table
                reg = self._word_regs.get(addr)
                if reg is not None:
                    regs = self.regs
                    if reg.bank is not None:
                        reg = regs.selected(reg)
                    return _word_bytes(regs.read(reg))
        # range by range in address order (a read has no side effects), so the BusError raised
        # names the first byte that cannot be read: not _chunks, which finds an unpopulated byte
        # before a reserved register word earlier in the read fails
        end = addr + size
        if addr < 0 or end > 1 << 32:
            raise BusError(addr & 0xFFFFFFFF, "outside the 32-bit address space")
        parts = []
        while addr < end:
            _, e, r = self._populated(addr)
            n = min(e, end) - addr
            if r.kind in ("registers", "pseudo"):
                parts.append(self._read_regs(addr, n))
            else:
                parts.append(self.memories[r.name].read(addr - r.base, n))
            addr += n
        return b"".join(parts)

    def write(self, addr: int, data: bytes) -> None:
        if len(data) == 4 and not addr & 3:
            # the driver's usual store, one whole register word: the decode below done once
            # per register in __init__ (an NE16 job's 25 writes spent 70 us in it); a bank-0
            # register is a banked slot's (RegisterFile.selected picks the bank), any other
            # register is what the access reaches
            reg = self._word_regs.get(addr)
            if reg is not None:
                if self.write_log is not None:
                    self.write_log.append((addr, addr + 4))
                regs = self.regs
                if reg.bank is not None:
                    reg = regs.selected(reg)
                regs.write(reg, _word(data)[0])
                return
        chunks = self._chunks(addr, len(data))  # check all before writing any
        for a, _, r in chunks:
            if r.kind == "rom":
                raise BusError(a, f"{r.name} is read-only (the emulator fills it)")
        if self.write_log is not None:
            self.write_log.append((addr, addr + len(data)))
        pos = 0
        for a, n, r in chunks:
            piece = bytes(data[pos:pos + n])
            pos += n
            if r.kind in ("registers", "pseudo"):
                self._write_regs(a, piece)
            else:
                hook = self._write_hooks.get(r.name)
                if hook is None or not hook(r, a, piece):
                    self.memories[r.name].write(a - r.base, piece)
                    self.write_touches += 1

    def stored_into(self, mem: Memory) -> None:
        """Count a store into ``mem`` made outside :meth:`write` (History.apply_redo replaying
        a host write) as a bus write's: its change counter and :attr:`write_touches` move
        together, so History.hidden does not take it for a change made another way."""
        mem.touch()
        self.write_touches += 1

    def memory_at(self, addr: int) -> tuple[Memory, int]:
        """The memory holding ``addr`` and the offset in it (for device models and kernels)."""
        _, _, r = self._populated(addr)
        if r.name not in self.memories:
            raise BusError(addr, f"{r.name} is a register window, not memory")
        return self.memories[r.name], addr - r.base

    def memory_span(self, addr: int, size: int) -> tuple[Memory, int]:
        """The memory holding all of [addr, addr + size) and the offset of ``addr`` in it, for
        device models that reach memory directly (DMA, tensors, streams); BusError at the first
        address outside that memory's populated ranges (or at ``addr`` for a negative size)."""
        mem, off = self.memory_at(addr)
        if size < 0:
            raise BusError(addr, f"negative size {size}")
        a, end = addr, addr + size
        while a < end:
            _, e, r = self._populated(a)
            if r is not mem.region:
                raise BusError(a, f"leaves {mem.region.name}")
            a = e
        return mem, off

    # -- registers: word-wise, any byte lanes -------------------------------------------------
    def _reg_at(self, word: int):
        reg = self.description.register_at(word)
        if reg is None:
            raise BusError(word, "no register at this address (reserved)")
        return reg

    def _read_regs(self, addr: int, n: int) -> bytes:
        out = bytearray()
        end = addr + n
        word = addr & ~3
        while word < end:
            value = self.regs.read(self.regs.selected(self._reg_at(word)))
            raw = value.to_bytes(4, "little")
            lo, hi = max(addr, word) - word, min(end, word + 4) - word
            out += raw[lo:hi]
            word += 4
        return bytes(out)

    def _write_regs(self, addr: int, data: bytes) -> None:
        if len(data) == 4 and not addr & 3:  # the usual access: one whole word
            self.regs.write(self.regs.selected(self._reg_at(addr)), int.from_bytes(data, "little"))
            return
        end = addr + len(data)
        # check every word first so a bad access writes nothing
        words = list(range(addr & ~3, end, 4))
        regs = [self._reg_at(w) for w in words]
        for word, reg in zip(words, regs):
            lo, hi = max(addr, word) - word, min(end, word + 4) - word
            raw = bytearray(4)
            raw[lo:hi] = data[word + lo - addr:word + hi - addr]
            lanes = int.from_bytes(bytes(0xFF if lo <= i < hi else 0 for i in range(4)), "little")
            self.regs.write(self.regs.selected(reg), int.from_bytes(raw, "little"), lanes)

    def snapshot(self) -> dict[str, np.ndarray]:
        return {k: m.data.copy() for k, m in self.memories.items()}

    def restore(self, snap: dict[str, np.ndarray]) -> None:
        for k, arr in snap.items():
            self.memories[k].data[:] = arr
            self.memories[k].touch()
