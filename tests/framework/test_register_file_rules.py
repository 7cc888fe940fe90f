"""The register file's access rules and reset values, register by register, on every bundled
description: RegisterFile works them out once per register definition (devices/registers.py,
issue 31 #5: the warm `run`), and each register must still get its own definition's."""
from __future__ import annotations

import pytest

from accelstub.devices import DEVICES
from accelstub.devices.description import load_description
from accelstub.devices.registers import RegisterFile

ONES = 0xFFFFFFFF


def _expected_after_write(reg, old: int, value: int) -> int:
    """A bus write of ``value`` over ``old`` from the register's own fields: rw/wo bits take
    the value, w1c bits clear where 1 is written, w1s bits set, the others keep their value."""
    rw, w1c, w1s = reg.mask_of("rw", "wo"), reg.mask_of("w1c"), reg.mask_of("w1s")
    return (((old & ~rw) | (value & rw)) & ~(value & w1c)) | (value & w1s)


@pytest.mark.parametrize("device", DEVICES)
def test_each_register_has_its_own_definitions_reset_value_and_access_rules(device):
    desc = load_description(device)  # configs/<device>.toml
    rf = RegisterFile(desc)
    plain = [r for r in desc.registers if r.bank is None]  # banks: selector and lock rules
    assert len({id(r.definition) for r in plain}) > 1
    for r in plain:
        assert rf.peek(r) == r.reset, r.name
        readable = ((1 << r.bits) - 1) & ~r.mask_of("wo", "rsvd")
        assert rf.read(r) == r.reset & readable, r.name
    for value in (ONES, 0x5A5A5A5A, 0):
        for r in plain:
            old = rf.peek(r)
            rf.write(r, value)
            assert rf.peek(r) == _expected_after_write(r, old, value), (r.name, hex(value))
    for r in desc.registers:
        rf.poke(r, 0xA5A5A5A5 & ((1 << r.bits) - 1))
    rf.reset()
    assert [rf.peek(r) for r in desc.registers] == [r.reset for r in desc.registers]
