"""Register access speed through the path a driver's store takes (issue 31 #2): nanoseconds per
Device.write and Device.read of one register word, per device, for a plain register and, where
the device banks registers, a banked one, and per layer of the call chain (Bus, the bank
selection, RegisterFile.write/read). Medians and best of R rounds of N calls. Not a test:
nothing here asserts a speed.

    python benchmarks/bench_registers.py [--calls N] [--rounds R]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

from accelstub.devices import DEVICES, open_device
from machine import bench_main


def ns_per_call(f: Callable[[], object], calls: int, rounds: int) -> tuple[float, float]:
    """(median, best) over ``rounds`` of the nanoseconds one call of ``f`` takes."""
    per = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        per.append((time.perf_counter() - t0) / calls * 1e9)
    return statistics.median(per), min(per)


def registers_to_time(dev) -> list:
    """The first hardware register without write hooks whose whole word is read-write (a
    driver's configuration store), unbanked and, where the device banks, banked (bank 0 of
    its slot: the bus selects the bank), as the bus's word path finds them."""
    hooked = dev.regs._write_hooks
    words = [r for r in dev.bus._word_regs.values() if r.key not in hooked
             and r.mask_of("rw") == (1 << r.bits) - 1
             and dev.bus.region_at(r.address).kind == "registers"]
    plain = next((r for r in words if r.bank is None), None)
    banked = next((r for r in words if r.bank is not None), None)
    return [r for r in (plain, banked) if r is not None]


def measure(dev, calls: int, rounds: int, value: int = 0x5A5A5A5A) -> list[tuple]:
    """Rows (device, register, layer, median ns, best ns) for device ``dev``, whose timed
    registers hold ``value`` afterwards (the bank the bus reaches, for a banked one)."""
    name, bus, regs = dev.name, dev.bus, dev.regs
    rows = []
    data = value.to_bytes(4, "little")
    for reg in registers_to_time(dev):
        addr = reg.address
        target = regs.selected(reg)
        layers = {
            "Device.write": lambda: dev.write(addr, data),
            "Bus.write": lambda: bus.write(addr, data),
            "RegisterFile.selected": lambda: regs.selected(reg),
            "RegisterFile.write": lambda: regs.write(target, value),
            "Device.read": lambda: dev.read(addr, 4),
            "RegisterFile.read": lambda: regs.read(target),
        }
        for layer, f in layers.items():
            if layer == "RegisterFile.selected" and reg.bank is None:
                continue  # the bus takes an unbanked register as it is
            rows.append((name, target.name, layer, *ns_per_call(f, calls, rounds)))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    empty = ns_per_call(lambda: None, args.calls, args.rounds)
    print(f"an empty call through the same loop: {empty[0]:.0f} ns median, {empty[1]:.0f} best")
    for name in DEVICES:
        for dev_name, reg, layer, med, best in measure(open_device(name), args.calls,
                                                        args.rounds):
            print(f"{dev_name:10s} {reg:28s} {layer:22s} {med:7.0f} ns median {best:7.0f} best")
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(main, kernels_here=False))
