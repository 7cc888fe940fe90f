"""The register file's per-register rule table (RegisterFile._rules: masks, write hooks and bank
lock in one entry, issue 31 #2) and the bus's word read path: every register of every bundled
description, written and read through the bus, against the access rules worked out here again
from each field of configs/ (not from the table), with banks selected and locked as the
description says; the table follows hooks added later."""
from __future__ import annotations

import random

import pytest

from accelstub.devices import DEVICES, BusError, open_device
from accelstub.devices.bus import Bus
from accelstub.devices.description import load_description
from accelstub.devices.errors import DeviceError
from accelstub.devices.registers import RegisterFile

ONES = 0xFFFFFFFF


def _reference(reg, old: int, value: int, lanes: int) -> int:
    """A bus write of ``value`` over ``old`` on the byte lanes ``lanes``, field by field as
    docs/description-format.md states the access kinds; bits outside every field keep."""
    new = old
    for f in reg.fields:
        bits = f.mask & lanes
        if f.access in ("rw", "wo"):
            new = (new & ~bits) | (value & bits)
        elif f.access == "w1c":
            new &= ~(value & bits)
        elif f.access == "w1s":
            new |= value & bits
    return new


def _readable(reg, stored: int) -> int:
    """What a bus read shows of ``stored``: write-only and reserved fields read 0."""
    shown = 0
    for f in reg.fields:
        if f.access not in ("wo", "rsvd"):
            shown |= stored & f.mask
    return shown


class _Banks:
    """Reaches a chosen bank of each banked slot as the description says a bus access does:
    its selector field (or the device's choice), and its lock field cleared."""

    def __init__(self, desc) -> None:
        self.desc = desc
        self.device_choice = 0
        self.blocks = {r.address: blk for blk in desc.blocks if blk.banks
                       for r in blk.registers}

    def _field(self, spec: str, bank: int | None):
        reg_name, fname = spec.split(".")
        reg = self.desc.register(reg_name) if bank is None else \
            self.desc.banks_at(self.desc.slot_address(reg_name))[bank]
        return reg, fname

    def reach(self, rf: RegisterFile, reg) -> None:
        if reg.bank is None:
            return
        blk = self.blocks[reg.address]
        if blk.bank_select == "device":
            self.device_choice = reg.bank
        else:
            rf.set_field(*self._field(blk.bank_select, None), reg.bank)
        if blk.bank_lock:
            rf.set_field(*self._field(blk.bank_lock, reg.bank), 0)

    def lock(self, rf: RegisterFile, reg) -> bool:
        """Set ``reg``'s bank's lock field (False: its slot has none)."""
        blk = self.blocks.get(reg.address)
        if reg.bank is None or not blk.bank_lock:
            return False
        rf.set_field(*self._field(blk.bank_lock, reg.bank), 1)
        return True


def _bare(device: str) -> tuple[RegisterFile, Bus, _Banks, list]:
    """A register file and bus of ``device``'s description with no device model (no hooks),
    and every register a bus word access reaches (each bank of a banked slot)."""
    desc = load_description(device)
    banks = _Banks(desc)
    rf = RegisterFile(desc, lambda reg: banks.device_choice)
    bus = Bus(desc, rf)
    reachable = [r for r in desc.registers if bus.is_mapped(r.address, 4)]
    return rf, bus, banks, reachable


@pytest.mark.parametrize("device", DEVICES)
def test_every_register_written_through_the_bus_follows_its_fields_access_rules(device):
    """Whole words (the word path) and single bytes (the general path, with byte lanes) to
    every register and bank, several values each: the register written holds what the
    field-by-field rules say, no other register changes, a read shows the readable fields.
    Each register holds a random value before (read-only bits that must keep)."""
    rf, bus, banks, regs = _bare(device)
    assert any(r.bank is not None for r in regs) == (device in ("ne16", "nvdla"))
    rnd = random.Random(312)
    for fixed in (ONES, 0, 0x5A5A5A5A, None, None):
        for r in regs:
            # None: a value of each register's own, so two banks written one after the other
            # hold different values (a read reaching the wrong bank shows)
            value = rnd.getrandbits(32) if fixed is None else fixed
            # read-only and reserved fields set too (bits outside every field stay 0: no
            # write reaches them, and they are no field a read would show)
            rf.poke(r, rnd.getrandbits(32) & sum(f.mask for f in r.fields))
            banks.reach(rf, r)
            before = rf.snapshot()
            old = before[r.key]
            bus.write(r.address, value.to_bytes(4, "little"))
            expected = _reference(r, old, value, ONES)
            assert rf.peek(r) == expected, (r.name, hex(value))
            assert {k: v for k, v in rf.snapshot().items() if k != r.key} == \
                {k: v for k, v in before.items() if k != r.key}, r.name
            assert bus.read(r.address, 4) == _readable(r, expected).to_bytes(4, "little"), r.name
            lane = rnd.randrange(4)
            old = rf.peek(r)
            byte = (value >> 8 * lane) & 0xFF
            bus.write(r.address + lane, bytes([byte]))
            assert rf.peek(r) == _reference(r, old, byte << 8 * lane, 0xFF << 8 * lane), \
                (r.name, lane, hex(byte))


@pytest.mark.parametrize("device", ("nvdla", "toy"))
def test_a_locked_bank_ignores_bus_and_named_writes_and_counts_them(device):
    """A bank whose lock field is set keeps its value for a word write through the bus and a
    direct write of the bank by name; unlocked again, it takes the next write."""
    if device == "toy":
        from pathlib import Path

        desc = load_description(str(Path(__file__).parents[1] / "contract" / "toy.toml"))
    else:
        desc = load_description(device)
    banks = _Banks(desc)
    rf = RegisterFile(desc)
    bus = Bus(desc, rf)
    locked = [r for r in desc.registers if r.bank is not None and bus.is_mapped(r.address, 4)
              and r.mask_of("rw", "wo")]
    checked = 0
    for r in locked:
        banks.reach(rf, r)
        if not banks.lock(rf, r):
            continue
        stored = rf.peek(r)
        ignored = rf.ignored_writes[r.name]
        bus.write(r.address, (~stored & ONES).to_bytes(4, "little"))
        rf.write(r, ~stored & ONES)
        if rf.peek(r) != stored:  # the register is its own bank's lock field: it unlocked
            assert "lock" in r.name.lower() or "enable" in r.name.lower(), r.name
            continue
        assert rf.ignored_writes[r.name] == ignored + 2, r.name
        banks.reach(rf, r)  # unlocked
        bus.write(r.address, (~stored & ONES).to_bytes(4, "little"))
        assert rf.peek(r) == _reference(r, stored, ~stored & ONES, ONES), r.name
        checked += 1
    assert checked >= 4  # both contexts of two job registers at least


def test_hooks_added_after_writes_run_on_later_writes_in_order_with_old_and_new():
    """The rule table takes a hook added at any time (on_write makes the register's entry
    again): none before, the first after it is added, both in the order added, with (old,
    new) after the rules; a hook on another register or another bank does not run."""
    dev = open_device("ne16")
    reg = dev.description.register("SOFT_CLEAR")
    bank1 = dev.description.banks_at(dev.description.register("WEIGHTS_PTR_C0").address)[1]
    seen: list = []
    dev.write(reg.address, (0).to_bytes(4, "little"))
    dev.regs.on_write(reg, lambda r, old, new: seen.append(("first", r.name, old, new)))
    dev.regs.on_write(bank1, lambda r, old, new: seen.append(("bank 1", r.name, old, new)))
    dev.write(reg.address, (1).to_bytes(4, "little"))
    assert seen == [("first", "SOFT_CLEAR", 0, 1)]
    dev.regs.on_write(reg, lambda r, old, new: seen.append(("second", r.name, old, new)))
    seen.clear()
    dev.write(reg.address, (0).to_bytes(4, "little"))
    assert seen == [("first", "SOFT_CLEAR", 1, 0), ("second", "SOFT_CLEAR", 1, 0)]
    seen.clear()
    assert dev.bank_index(bank1) == 0  # the bus reaches context 0: bank 1's hook stays quiet
    dev.write(bank1.address, (0x40).to_bytes(4, "little"))
    assert seen == []
    dev.write_register(bank1.name, 0x80)  # the bank by name
    assert seen == [("bank 1", bank1.name, 0, 0x80)]


def test_the_device_hooks_that_existed_keep_running_through_the_rule_table():
    """NE16's TRIGGER hook (registered by the model at construction) still runs for a word
    write: a job acquired and committed is queued, STATUS shows its context busy."""
    from accelstub.devices.ne16.model import BASE

    dev = open_device("ne16")
    assert dev.host_read(BASE + 0x04, 4) == bytes(4)  # ACQUIRE: job ID 0
    dev.write(BASE, bytes(4))  # TRIGGER
    assert [j.job_id for j in dev.queue] == [0]
    assert dev.read(dev.description.register("STATUS").address, 4) == (1).to_bytes(4, "little")


@pytest.mark.parametrize("name", DEVICES)
def test_word_reads_match_the_general_path_on_every_register_word(name):
    """A 4-byte aligned read of a register word (the bus's word read path) returns what the
    general path returns, or the same error, with read hooks seen and nothing changed."""
    fast, slow = open_device(name), open_device(name)
    slow.bus._word_regs = {}
    words = [a for r in fast.description.regions if r.kind in ("registers", "pseudo")
             for s, e in r.populated for a in range(s & ~3, e, 4)]

    def outcome(dev, addr):
        before = dev.regs.version, dev.regs.snapshot()
        try:
            got = dev.read(addr, 4)
        except (BusError, DeviceError) as e:
            got = f"{type(e).__name__}: {e}"
        assert (dev.regs.version, dev.regs.snapshot()) == before, hex(addr)
        return got

    for addr in words:
        assert outcome(fast, addr) == outcome(slow, addr), hex(addr)
