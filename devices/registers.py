"""The register file: values of every architected register, with the access rules of its fields.

Generated from a :class:`Description`; device models attach side effects with
:meth:`RegisterFile.on_write` (called after the access rules are applied) and computed values with
:meth:`RegisterFile.on_read` (pure: a debugger read never changes state, the Device
contract, devices/device.py).

Banked registers (several banks at one address, docs/description-format.md "Banks") keep one value
per bank; a bus access at the address reaches the bank the block's selector names now
(:meth:`RegisterFile.selected`), a named bank is reached directly. A write to a bank whose lock
field is set is ignored, as the hardware ignores it, and counted in :attr:`ignored_writes`.
"""
from __future__ import annotations

import functools
import operator
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TypeVar

from .description import BlockInstance, Description, Field, FieldView, Register
from .errors import DeviceError, RegisterNotFound

T = TypeVar("T")

WriteHook = Callable[[Register, int, int], None]  # (register, old value, new value)
ReadHook = Callable[[Register, int], int]  # (register, stored value) -> value seen
BankIndex = Callable[[Register], int]  # the device's selector for bank_select = "device"
#: a register's access rules as RegisterFile keeps them (RegisterFile._rules): (rw|wo mask, w1c
#: mask, w1s mask, readable mask, write hooks, lock field (key, lsb, width mask) or None, the
#: bits a whole-word write keeps or None) -- the last is ~rw for a register without w1c/w1s
#: bits, where the rule of RegisterFile.write is (old & ~rw) | (value & rw), and None otherwise
Rule = tuple[int, int, int, int, tuple[WriteHook, ...], tuple[int, int, int] | None, int | None]
FULL = 0xFFFFFFFF


@functools.lru_cache(maxsize=1024)
def _getter(addresses: tuple[int, ...]) -> Callable[[dict], tuple[int, ...]]:
    """operator.itemgetter over the addresses (a C loop: a layer's decode reads ~100)."""
    return operator.itemgetter(*addresses)


class RegisterFile:
    def __init__(self, description: Description, bank_index: BankIndex | None = None) -> None:
        self.description = description
        self._values: dict[int, int] = {}
        self._write_hooks: dict[int, list[WriteHook]] = {}
        self._read_hooks: dict[int, ReadHook] = {}
        # per register key: everything an access needs, in one entry looked up once per access
        # (issue 31 #2: a driver's word write spent ~0.5 us in five lookups): (writable rw|wo,
        # w1c, w1s, readable-mask, write hooks, lock) -- see _rule. Masks and reset value depend
        # on the definition's fields only, so they are worked out once per definition (the
        # MAX78000's 2311 registers have 41: ~5 ms of each `accelstub run`); on_write and
        # _add_slots replace the entries of the registers that have hooks or a lock field
        self._rules: dict[int, Rule] = {}
        self._resets: dict[int, int] = {}
        per_definition: dict[int, tuple[Rule, int]] = {}
        for r in description.registers:
            rule_reset = per_definition.get(id(r.definition))
            if rule_reset is None:
                full = (1 << r.bits) - 1
                rw, w1c, w1s = r.mask_of("rw", "wo"), r.mask_of("w1c"), r.mask_of("w1s")
                rule_reset = per_definition[id(r.definition)] = (
                    (rw, w1c, w1s, full & ~r.mask_of("wo", "rsvd"), (), None,
                     None if w1c | w1s else FULL & ~rw), r.reset)
            self._rules[r.key], self._resets[r.key] = rule_reset
        #: banked slots: address -> (banks, selector) with the selector resolved; None: the
        #: device's bank_index selects (a bank's lock field is in its registers' _rules)
        self._bank_index = bank_index
        self._slots: dict[int, tuple[tuple[Register, ...], tuple[int, int, int] | None]] = {}
        for blk in description.blocks:
            if blk.banks:
                self._add_slots(blk)
        #: writes ignored because their bank was locked, by register name
        self.ignored_writes: Counter[str] = Counter()
        #: register name -> key, and (name, field) -> (key, lsb, width mask): device models
        #: peek and read fields by name thousands of times per unit
        self._key_of = {r.name: r.key for r in description.registers}
        self._fields: dict[tuple[str, str], tuple[int, int, int]] = {}
        self._instances: dict[str, tuple[Register, ...]] = {}  # definition name -> registers
        #: reverse-execution history (devices/history.py): while not None, the value each
        #: register had at the history's current boundary, for every register changed since
        #: (its first old value), so a boundary costs what changed, not a copy of every register
        self.log: dict[int, int] | None = None
        #: bumped by every change of a stored value (each write path below): a memoised
        #: decode that saw this number has seen every register as it is now (Nvdla._memoised
        #: asks this before it compares the ~90 values it read, issue 31 #2)
        self.version = 0
        self.reset()

    def _add_slots(self, blk: BlockInstance) -> None:
        d = self.description

        def field_of(spec: str, bank: int | None) -> tuple[Register, Field]:
            reg_name, fname = spec.split(".")
            reg = d.register(reg_name) if bank is None else \
                d.banks_at(d.slot_address(reg_name))[bank]
            return reg, next(f for f in reg.fields if f.name == fname)

        select: tuple[int, int, int] | None
        if blk.bank_select == "device":
            select = None
        else:  # (register key, lsb, width mask): selected() runs on every bus access
            sel_reg, f = field_of(blk.bank_select, None)
            select = (sel_reg.key, f.lsb, (1 << f.width) - 1)
        for r in blk.registers:
            if r.bank == 0:
                banks = d.banks_at(r.address)
                self._slots[r.address] = (banks, select)
                for bank in range(len(banks)) if blk.bank_lock else ():
                    lock_reg, f = field_of(blk.bank_lock, bank)
                    self._rules[banks[bank].key] = self._rule(
                        banks[bank], lock=(lock_reg.key, f.lsb, (1 << f.width) - 1))

    def _rule(self, reg: Register, lock: tuple[int, int, int] | None = None) -> Rule:
        """``reg``'s entry of :attr:`_rules` with its write hooks as registered now (a tuple:
        on_write makes a new entry) and its bank's lock field (key, lsb, width mask), if any;
        the masks are the definition's, as __init__ worked them out."""
        rw, w1c, w1s, readable, _, old_lock, keep = self._rules[reg.key]
        return (rw, w1c, w1s, readable, tuple(self._write_hooks.get(reg.key, ())),
                lock if lock is not None else old_lock, keep)

    def reset(self) -> None:
        self._log_all()
        self._values.update(self._resets)
        self.version += 1

    # -- hooks ------------------------------------------------------------------------------
    def on_write(self, reg: Register | str, hook: WriteHook) -> None:
        reg = self._reg(reg)
        self._write_hooks.setdefault(reg.key, []).append(hook)
        self._rules[reg.key] = self._rule(reg)

    def on_read(self, reg: Register | str, hook: ReadHook) -> None:
        self._read_hooks[self._reg(reg).key] = hook

    def on_write_each(self, definition: str, hook: WriteHook) -> None:
        """``hook`` on every instance of the register ``definition`` as the description names
        it (``"CTRL"``: CNNx16_0_CTRL .. CNNx16_3_CTRL), so a grep for the name in configs/
        finds its hooks (issue 33 #1); the hook tells instances apart by ``reg.instance``."""
        for r in self.instances(definition):
            self.on_write(r, hook)

    def on_read_each(self, definition: str, hook: ReadHook) -> None:
        """:meth:`on_write_each` for read hooks."""
        for r in self.instances(definition):
            self.on_read(r, hook)

    def instances(self, definition: str) -> tuple[Register, ...]:
        """Every register of the definition named ``definition`` (every block instance, array
        index and bank); an unknown name raises at once, naming the description."""
        found = self._instances.get(definition)
        if found is not None:
            return found
        found = tuple(r for r in self.description.registers if r.definition.name == definition)
        if not found:  # not kept: a second lookup of the name raises as well
            names = {r.definition.name for r in self.description.registers}
            raise RegisterNotFound.among(definition, f"{self.description.source} (register "
                                         "definitions)", names)
        self._instances[definition] = found
        return found

    def _reg(self, reg: Register | str) -> Register:
        return self.description.register(reg) if isinstance(reg, str) else reg

    # -- banks ------------------------------------------------------------------------------
    def selected(self, reg: Register) -> Register:
        """The register a bus access at ``reg``'s address reaches now: ``reg`` itself, or for a
        banked slot the bank its selector names."""
        slot = self._slots.get(reg.address)
        if slot is None:
            return reg
        banks, select = slot
        if select is None:  # the device selects
            index = self._bank_index
            if index is None:
                raise DeviceError(f"{reg.slot} is banked by device state, and no device selects")
            i = index(banks[0])
        else:
            i = (self._values[select[0]] >> select[1]) & select[2]
        if 0 <= i < len(banks):
            return banks[i]
        raise DeviceError(f"{reg.slot}: the bank selector names bank {i}, which does not exist "
                          f"({len(banks)} banks)")

    # -- access -----------------------------------------------------------------------------
    def read(self, reg: Register | str) -> int:
        """The value a bus read returns (write-only and reserved bits read 0). No side effects."""
        if isinstance(reg, str):
            reg = self.description.register(reg)
        key = reg.key
        v = self._values[key]
        hook = self._read_hooks.get(key)
        if hook is not None:
            v = hook(reg, v)
        return v & self._rules[key][3]

    def write(self, reg: Register | str, value: int, lanes: int = FULL) -> None:
        """A bus write of ``value``; ``lanes`` masks the bits the access covers (byte writes).

        rw/wo bits take the value, w1c bits clear where 1 is written, w1s bits set, ro and
        reserved bits keep their value. Then the write hooks run with (old, new). A write to a
        locked bank is ignored and counted.

        Every bus write of a register comes here (Bus.write's word path and its general path,
        Device.write_register), so the rules have this one implementation; its entry in
        :attr:`_rules` gives masks, hooks and lock in one lookup (issue 31 #2)."""
        if isinstance(reg, str):
            reg = self.description.register(reg)
        key = reg.key
        rw, w1c, w1s, _, hooks, lock, keep = self._rules[key]
        values = self._values
        if lock is not None and (values[lock[0]] >> lock[1]) & lock[2]:
            self.ignored_writes[reg.name] += 1
            return
        old = values[key]
        if keep is not None and lanes == FULL:  # the rule below with w1c = w1s = 0, lanes = ~0
            new = (old & keep) | (value & rw)
        else:
            value &= lanes
            new = (((old & ~(rw & lanes)) | (value & rw)) & ~(value & w1c)) | (value & w1s)
        log = self.log
        if log is not None and key not in log:
            log[key] = old
        values[key] = new
        self.version += 1
        if hooks:
            for hook in hooks:
                hook(reg, old, new)

    def peek(self, reg: Register | str) -> int:
        """The stored value, for device models (bypasses read hooks)."""
        if isinstance(reg, str):
            key = self._key_of.get(reg)
            return self._values[self._reg(reg).key if key is None else key]  # None: raises
        return self._values[reg.key]

    def view(self, reg: Register | str) -> FieldView:
        """The stored value of ``reg`` read by field name (``regs.view(name).rcnt_max``): what
        decoders use instead of shifts and masks of their own (issue 33 #1)."""
        reg = self._reg(reg)
        return reg.definition.view(self._values[reg.key])

    def peek_addresses(self, addresses: tuple[int, ...]) -> tuple[int, ...]:
        """Stored values of the (unbanked) registers at ``addresses`` (cheap change detection
        for memoised decodes)."""
        if len(addresses) == 1:
            return (self._values[addresses[0]],)
        return _getter(addresses)(self._values) if addresses else ()

    def peeker(self, keys: tuple[int, ...]) -> Callable[[], object]:
        """A function giving the stored values of the registers whose storage keys are
        ``keys``, as a tuple (the one value itself for one key): :meth:`peek_keys` without
        looking its itemgetter up by the key tuple on every call (a hash of ~90 keys), for a
        caller that asks the same keys again and again (Nvdla._memoised)."""
        if not keys:
            return tuple
        return functools.partial(operator.itemgetter(*keys), self._values)

    #: stored values of the registers whose storage keys (Register.key, banks included) are
    #: the tuple given, in one C loop: a device model taking a whole register context at once
    #: (NE16's 25 job registers at TRIGGER). An unbanked register's key is its address, so
    #: this is :meth:`peek_addresses` itself (no second call on the way)
    peek_keys = peek_addresses

    def derived(self, names: tuple[str, ...], compute: Callable[[], T]) -> Callable[[], T]:
        """A function giving ``compute()``, worked out again only when one of the (unbanked)
        registers ``names`` holds another value than the last time (compared with
        :meth:`peek_addresses`): for device state derived from registers that every unit needs,
        where reading them by name each time costs more than the comparison."""
        addrs = tuple(self.description.register(n).address for n in names)
        last: list = [None, None]  # register values, result

        def get() -> T:
            raw = self.peek_addresses(addrs)
            if last[0] != raw:
                last[1] = compute()
                last[0] = raw
            return last[1]
        return get

    def poke(self, reg: Register | str, value: int) -> None:
        """Set the stored value as the hardware does (status bits); no hooks, no access rules."""
        if isinstance(reg, str):
            reg = self.description.register(reg)
        key = reg.key
        log = self.log
        if log is not None and key not in log:
            log[key] = self._values[key]
        self._values[key] = value & ((1 << reg.bits) - 1)
        self.version += 1

    def _field_spec(self, reg: Register | str, name: str) -> tuple[int, int, int]:
        """(register key, lsb, width mask) of a field, looked up once per name."""
        spec = self._fields.get((reg if isinstance(reg, str) else reg.name, name))
        if spec is None:
            r = self._reg(reg)
            f = next((f for f in r.fields if f.name == name), None)
            if f is None:
                raise KeyError(f"{r.name} has no field {name!r}")
            spec = self._fields[(r.name, name)] = (r.key, f.lsb, (1 << f.width) - 1)
        return spec

    def field(self, reg: Register | str, name: str) -> int:
        key, lsb, mask = self._field_spec(reg, name)
        return (self._values[key] >> lsb) & mask

    def set_field(self, reg: Register | str, name: str, value: int) -> None:
        """Hardware-side update of one field (no hooks)."""
        key, lsb, mask = self._field_spec(reg, name)
        if self.log is not None and key not in self.log:
            self.log[key] = self._values[key]
        self._values[key] = (self._values[key] & ~(mask << lsb)) | ((value & mask) << lsb)
        self.version += 1

    def snapshot(self) -> dict[int, int]:
        return dict(self._values)

    def restore(self, snap: dict[int, int]) -> None:
        self._log_all()
        self._values.update(snap)
        self.version += 1

    def put_back(self, old: dict[int, int]) -> None:
        """Values of :attr:`log` back (going back in the history; not itself logged)."""
        self._values.update(old)
        self.version += 1

    def values(self, keys: Iterable[int]) -> dict[int, int]:
        """The stored values of the registers ``keys`` (a history's journal keeps what the
        debugger wrote while halted as the values after, devices/history.py)."""
        return {key: self._values[key] for key in keys}

    def redo(self, values: dict[int, int]) -> None:
        """Stored values of :meth:`values` set again (a journaled change replayed forward),
        their old values logged like any write's."""
        if self.log is not None:
            for key in values:
                self.log.setdefault(key, self._values[key])
        self._values.update(values)
        self.version += 1

    def _log_all(self) -> None:
        if self.log is not None:
            for key, value in self._values.items():
                self.log.setdefault(key, value)
