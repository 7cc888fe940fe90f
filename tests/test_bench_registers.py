"""benchmarks/bench_registers.py (issue 31 #2) times what it names: on every device it finds a
register the bus's word path takes (a banked one where the device banks), and the writes it
times reach that register (the bank the bus selects)."""
from __future__ import annotations

import pytest

from accelstub.devices import DEVICES, open_device
from tests.helpers import load_benchmark

load_benchmark("machine")  # (the benchmark imports it)
bench_registers = load_benchmark("bench_registers")


@pytest.mark.parametrize("name", DEVICES)
def test_each_layer_is_timed_on_a_register_the_writes_reach(name):
    dev = open_device(name)
    regs = bench_registers.registers_to_time(dev)
    assert regs and all(r.address in dev.bus._word_regs for r in regs)
    assert any(r.bank is not None for r in regs) == (name in ("ne16", "nvdla"))
    rows = bench_registers.measure(dev, calls=3, rounds=1, value=0x1234_5678)
    for r in regs:
        target = dev.regs.selected(r)
        assert dev.regs.peek(target) == 0x1234_5678, target.name
        layers = [row[2] for row in rows if row[1] == target.name]
        assert layers[:2] == ["Device.write", "Bus.write"]
        assert ("RegisterFile.selected" in layers) == (r.bank is not None)
        assert all(row[3] > 0 and row[4] > 0 for row in rows)
