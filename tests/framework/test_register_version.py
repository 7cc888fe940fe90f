"""RegisterFile.version counts the changes of stored values: every write path bumps it, so a
memoised decode that saw a version has seen every register as it is while the version holds
(Nvdla._memoised, issue 31 #2); RegisterFile.peeker reads the same values as peek_keys."""
from __future__ import annotations

import inspect
import re

import pytest

from accelstub.devices import DEVICES
from accelstub.devices.description import load_description
from accelstub.devices.registers import RegisterFile

#: a statement that stores into the value table: the write paths the test must cover
_STORES = re.compile(r"self\._values(\[[^\]]*\]\s*=|\.update\()")


def _bumps(rf: RegisterFile, action) -> bool:
    before = rf.version
    action()
    return rf.version > before


@pytest.mark.parametrize("device", DEVICES)
def test_every_write_path_of_the_register_file_bumps_its_version(device):
    desc = load_description(device)
    rf = RegisterFile(desc)
    reg = next(r for r in desc.registers if r.bank is None and r.mask_of("rw"))
    field = next(f for f in reg.fields if f.access == "rw")
    snap = rf.snapshot()
    paths = {
        "write": lambda: rf.write(reg, 0x5A5A5A5A),
        "poke": lambda: rf.poke(reg, 3),
        "set_field": lambda: rf.set_field(reg, field.name, 1),
        "restore": lambda: rf.restore(snap),
        "put_back": lambda: rf.put_back({reg.key: 7}),
        "redo": lambda: rf.redo({reg.key: 9}),
        "reset": rf.reset,
    }
    for name, action in paths.items():
        assert _bumps(rf, action), name
    # every method that stores a value is one of the paths above (a new one needs its bump
    # and a line here)
    storing = {name for name, fn in inspect.getmembers(RegisterFile, inspect.isfunction)
               if name != "__init__" and _STORES.search(inspect.getsource(fn))}
    assert storing and storing <= set(paths), storing - set(paths)
    # reads change nothing
    version = rf.version
    rf.read(reg), rf.peek(reg), rf.field(reg, field.name), rf.snapshot()
    rf.peek_keys((reg.key,)), rf.values([reg.key])
    assert rf.version == version


def test_a_bus_write_and_a_device_reset_bump_the_version():
    """The paths a device takes: the bus's word fast path and its general path, and reset."""
    from accelstub.devices import open_device

    dev = open_device("nvdla")
    reg = dev.description.register("GLB_S_INTR_MASK")
    for action in (lambda: dev.write(reg.address, (1).to_bytes(4, "little")),  # word path
                   lambda: dev.write(reg.address, b"\x02"),  # one byte: the general path
                   lambda: dev.reset("halt")):
        assert _bumps(dev.regs, action)


def test_peeker_reads_what_peek_keys_reads_and_follows_later_writes():
    desc = load_description("nvdla")
    rf = RegisterFile(desc)
    plain = [r for r in desc.registers if r.bank is None and r.mask_of("rw")][:40]
    keys = tuple(r.key for r in plain)
    many, one = rf.peeker(keys), rf.peeker(keys[:1])
    assert many() == rf.peek_keys(keys)
    assert one() == rf.peek_keys(keys[:1])[0]  # one key: the value itself
    assert rf.peeker(())() == ()
    for i, r in enumerate(plain):
        rf.write(r, i * 0x01010101)
    assert many() == rf.peek_keys(keys) == tuple(rf.peek(r) for r in plain)
