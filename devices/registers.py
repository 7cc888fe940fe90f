"""The register file: values of every architected register, with the access rules of its fields.

Generated from a :class:`Description`; device models attach side effects with
:meth:`RegisterFile.on_write` (called after the access rules are applied) and computed values with
:meth:`RegisterFile.on_read` (pure: a debugger read never changes state, DESIGN.md "Device
interface").
"""
from __future__ import annotations

from typing import Callable

from .description import Description, Register

WriteHook = Callable[[Register, int, int], None]  # (register, old value, new value)
ReadHook = Callable[[Register, int], int]  # (register, stored value) -> value seen


class RegisterFile:
    def __init__(self, description: Description) -> None:
        self.description = description
        self._values: dict[int, int] = {}
        self._write_hooks: dict[int, list[WriteHook]] = {}
        self._read_hooks: dict[int, ReadHook] = {}
        # per address: (writable rw|wo, w1c, w1s, readable-mask) computed once
        self._masks: dict[int, tuple[int, int, int, int]] = {}
        for r in description.registers:
            full = (1 << r.bits) - 1
            self._masks[r.address] = (r.mask_of("rw", "wo"), r.mask_of("w1c"), r.mask_of("w1s"),
                                      full & ~r.mask_of("wo", "rsvd"))
        self.reset()

    def reset(self) -> None:
        for r in self.description.registers:
            self._values[r.address] = r.reset

    # -- hooks ------------------------------------------------------------------------------
    def on_write(self, reg: Register | str, hook: WriteHook) -> None:
        reg = self._reg(reg)
        self._write_hooks.setdefault(reg.address, []).append(hook)

    def on_read(self, reg: Register | str, hook: ReadHook) -> None:
        self._read_hooks[self._reg(reg).address] = hook

    def _reg(self, reg: Register | str) -> Register:
        return self.description.register(reg) if isinstance(reg, str) else reg

    # -- access -----------------------------------------------------------------------------
    def read(self, reg: Register | str) -> int:
        """The value a bus read returns (write-only and reserved bits read 0). No side effects."""
        reg = self._reg(reg)
        v = self._values[reg.address]
        hook = self._read_hooks.get(reg.address)
        if hook is not None:
            v = hook(reg, v)
        return v & self._masks[reg.address][3]

    def write(self, reg: Register | str, value: int, lanes: int = 0xFFFFFFFF) -> None:
        """A bus write of ``value``; ``lanes`` masks the bits the access covers (byte writes).

        rw/wo bits take the value, w1c bits clear where 1 is written, w1s bits set, ro and
        reserved bits keep their value. Then the write hooks run with (old, new)."""
        reg = self._reg(reg)
        rw, w1c, w1s, _ = self._masks[reg.address]
        old = self._values[reg.address]
        value &= lanes
        new = (old & ~(rw & lanes)) | (value & rw)
        new &= ~(value & w1c)
        new |= value & w1s
        self._values[reg.address] = new
        for hook in self._write_hooks.get(reg.address, ()):
            hook(reg, old, new)

    def peek(self, reg: Register | str) -> int:
        """The stored value, for device models (bypasses read hooks)."""
        return self._values[self._reg(reg).address]

    def peek_addresses(self, addresses: tuple[int, ...]) -> tuple[int, ...]:
        """Stored values of the registers at ``addresses`` (cheap change detection for memoised
        decodes)."""
        values = self._values
        return tuple([values[a] for a in addresses])

    def poke(self, reg: Register | str, value: int) -> None:
        """Set the stored value as the hardware does (status bits); no hooks, no access rules."""
        reg = self._reg(reg)
        self._values[reg.address] = value & ((1 << reg.bits) - 1)

    def field(self, reg: Register | str, name: str) -> int:
        reg = self._reg(reg)
        for f in reg.fields:
            if f.name == name:
                return f.extract(self._values[reg.address])
        raise KeyError(f"{reg.name} has no field {name!r}")

    def set_field(self, reg: Register | str, name: str, value: int) -> None:
        """Hardware-side update of one field (no hooks)."""
        reg = self._reg(reg)
        for f in reg.fields:
            if f.name == name:
                v = self._values[reg.address]
                self._values[reg.address] = (v & ~f.mask) | ((value << f.lsb) & f.mask)
                return
        raise KeyError(f"{reg.name} has no field {name!r}")

    def snapshot(self) -> dict[int, int]:
        return dict(self._values)

    def restore(self, snap: dict[int, int]) -> None:
        self._values.update(snap)
