"""The Device contract (devices/device.py), for every registered device and a tiny fake one
written against the contract alone (toy_device.py): what stub/, the TUI and run control rely on,
checked without knowing which accelerator it is."""
from __future__ import annotations

import pytest

from accelstub.devices import DEVICES, BusError, device_spec, open_device
from accelstub.devices.device import Device, MonitorCommand, ProgramOptions, Unit
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.cli import demo_program
from accelstub.stub.commands import CommandContext
from accelstub.stub.program import load_program, run_to_end
from accelstub.stub.svd import description_to_svd
from accelstub.stub.target_xml import target_xml

from .toy_device import Toy

FACTORIES = {name: (lambda name=name: open_device(name)) for name in DEVICES} | {"toy": Toy}


@pytest.fixture(params=sorted(FACTORIES))
def dev(request) -> Device:
    return FACTORIES[request.param]()


def _state(dev: Device) -> tuple:
    snap = dev.snapshot()
    return (snap["regs"], {k: v.tobytes() for k, v in snap["mem"].items()}, repr(snap["state"]),
            snap["cycles"], snap["units_done"])


def test_registered_devices_have_a_spec_and_a_description():
    for name in DEVICES:
        spec = device_spec(name)
        dev = open_device(name)
        assert spec.name == dev.name == dev.description.name == name
        assert set(spec.program_options) <= {"input", "output", "expect", "output_ops"}
    with pytest.raises(ValueError, match="unknown device 'nope'; known devices: max78000"):
        device_spec("nope")
    with pytest.raises(ValueError, match="max78000 takes no option macs"):
        open_device("max78000", macs=256)


def test_pc_is_a_32_bit_address_with_a_label(dev):
    """Before a program is loaded pc may name nothing (Ethos-U85's QBASE is 0 after reset);
    with a program it names a mapped register (test_bundled_demo_runs_to_its_end)."""
    assert 0 <= dev.pc < 1 << 32
    assert isinstance(dev.unit_label(dev.pc), str) and dev.unit_label(dev.pc)


def test_capabilities_have_their_declared_shapes(dev):
    grains = dev.granularities
    assert grains and all(isinstance(g, str) and g for g in grains)
    assert all(isinstance(c, MonitorCommand) and callable(c.handler)
               for c in dev.monitor_commands().values())
    assert all(isinstance(k, str) and isinstance(v, bool) for k, v in dev.interrupts().items())
    counters = dev.counters()
    assert {"cycles", "units"} <= set(counters) and all(isinstance(v, int)
                                                         for v in counters.values())
    assert all(isinstance(u, Unit) for u in dev.units())


def test_debugger_reads_change_nothing(dev):
    """Every register and a word of every memory read twice through the bus: no side effect
    (DESIGN.md: the debugger's read never pops a FIFO or clears on read)."""
    before = _state(dev)
    for _ in range(2):
        for reg in dev.description.registers:
            dev.read_register(reg.name)
            dev.read(reg.address, 4)
        for region in dev.description.regions:
            for s, e in region.populated:
                dev.read(s, min(4, e - s))
    assert _state(dev) == before


def test_out_of_map_accesses_are_bus_errors(dev):
    top = max(r.end for r in dev.description.regions)
    hole = next(a for a in (0x0, 0x4, top, 0xFFFF_FFF0) if not dev.bus.is_mapped(a, 4))
    with pytest.raises(BusError):
        dev.read(hole, 4)
    with pytest.raises(BusError):
        dev.write(hole, bytes(4))


def test_a_fresh_device_has_nothing_to_run(dev):
    stop = RunControl(dev).step(30)
    assert stop.reason == "idle" and stop.message


def test_importers_decline_files_that_are_not_theirs(dev, tmp_path):
    script = tmp_path / "setup.cfg"
    script.write_text("# nothing\n")
    assert dev.load_program(script, ProgramOptions()) is None


def test_reset_forgets_every_register_value(dev):
    """After a reset the registers hold what they hold after a reset of a fresh device,
    whatever they held before (reset values, or what the model's reset sequence leaves, as
    Ethos-U85's completed reset_status)."""
    fresh = FACTORIES[dev.name]()
    fresh.reset("halt")
    for reg in dev.description.registers:
        dev.regs.poke(reg, reg.reset ^ 1)
    dev.reset("halt")
    for reg in dev.description.registers:
        assert dev.regs.peek(reg) == fresh.regs.peek(reg), reg.name


def test_gdb_view_and_svd_name_every_register(dev):
    xml, svd = target_xml(dev.description), description_to_svd(dev.description)
    for reg in dev.description.registers:
        assert f'name="{reg.name}"' in xml
        assert f"<name>{reg.name}</name>" in svd


@pytest.mark.parametrize("name", [d for d in DEVICES if demo_program(d) is not None])
def test_bundled_demo_runs_to_its_end(name):
    rc = RunControl(open_device(name))
    load_program(CommandContext(targets=[rc]), demo_program(name))
    assert rc.device.bus.is_mapped(rc.device.pc, 4) and not rc.device.finished()
    outcome = run_to_end(rc)
    assert outcome.code == 0, outcome.lines
    assert rc.device.finished()
