"""The Device contract (devices/device.py), for every registered device and a tiny fake one
written against the contract alone (toy_device.py): what stub/, the TUI and run control rely on,
checked without knowing which accelerator it is."""
from __future__ import annotations

import pytest

from accelstub.devices import DEVICES, BusError, device_spec, open_device
from accelstub.devices.device import Device, MonitorCommand, ProgramOptions, Unit
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.cli import demo_program
from accelstub.stub.commands import CommandContext, execute
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
    (devices/device.py: the debugger's read never pops a FIFO or clears on read)."""
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


# -- one debugger behaviour on every device (issue 25 #7, #8) ----------------------------------
DEMOS = [d for d in DEVICES if demo_program(d) is not None]


def _demo(name: str) -> tuple[RunControl, CommandContext]:
    """A run control with the device's bundled demo loaded, halted before its first unit, and
    `reset init` reloading it (as the stub sets it up)."""
    rc = RunControl(open_device(name))
    ctx = CommandContext(targets=[rc])
    rc.init_handler = lambda: load_program(ctx, demo_program(name))
    rc.reset("init")
    return rc, ctx


def _pcs_of_a_run(rc: RunControl) -> list[int]:
    """pc before each unit of a run stepped to its end."""
    pcs = []
    while not rc.device.finished():
        pcs.append(rc.device.pc)
        assert rc.step(120).reason in ("step", "done")
    return pcs


@pytest.mark.parametrize("name", DEMOS)
def test_every_unit_has_a_distinct_stable_pc(name):
    """`monitor units` lists the whole program before it runs; each unit's address is its own,
    mapped and readable (gdb reads it), is pc right before that unit runs, and is the same on the
    next run (`reset init`). A program-window word reads its unit's index."""
    rc, ctx = _demo(name)
    dev = rc.device
    units = dev.units()
    addresses = [u.address for u in units]
    assert len(units) >= 2 or name == "ne16", units  # (the NE16 demo is a single job)
    assert len(set(addresses)) == len(addresses), addresses
    for k, a in enumerate(addresses):
        assert dev.bus.is_mapped(a, 4)
        if dev.window_index(a) is not None:
            assert dev.window_index(a) == k and int.from_bytes(dev.read(a, 4), "little") == k
    assert _pcs_of_a_run(rc) == addresses
    rc.reset("init")
    assert [u.address for u in dev.units()] == addresses and dev.pc == addresses[0]
    assert _pcs_of_a_run(rc) == addresses


@pytest.mark.parametrize("name", DEMOS)
def test_a_breakpoint_on_unit_k_stops_before_unit_k(name):
    """`bp` on every unit's address: each continue stops before the next unit, with k units run
    (the first unit of a run is not stopped at: it is where the run starts)."""
    rc, ctx = _demo(name)
    dev = rc.device
    addresses = [u.address for u in dev.units()]
    for a in addresses:
        assert execute(ctx, f"bp {a:#x} 4 hw").startswith("breakpoint set at")
    for k in range(1, len(addresses)):
        stop = rc.run(120)
        assert stop.reason == "breakpoint" and dev.pc == addresses[k] and dev.units_done == k
    assert rc.run(120).reason == "done"


@pytest.mark.parametrize("name", DEMOS)
def test_the_end_of_a_program_has_its_own_pc_and_says_so(name):
    """At the end pc is the end address (EMU_END, the same word on every device), no unit's
    address, so gdb cannot report the end as a breakpoint on a unit; the stop says the program
    ended; a step there says so in one line and pc stays."""
    rc, ctx = _demo(name)
    dev = rc.device
    addresses = {u.address for u in dev.units()} | {dev.pc}
    end = dev.description.register("EMU_END").address
    assert end == 0xF000_001C and end not in addresses
    assert dev.read_register("EMU_END") == 0
    stop = rc.run(120)
    assert stop.reason == "done" and stop.debug_reason == "program-exit"
    assert dev.pc == end and dev.read_register("EMU_END") == 1
    assert dev.unit_label(dev.pc) == "end of program"
    stop = rc.step(30)
    assert stop.reason == "idle" and dev.pc == end
    assert stop.message.startswith(f"the program has ended: pc {end:#010x} is its end address")
    assert "\n" not in stop.message and "Traceback" not in stop.message


@pytest.mark.parametrize("name", DEMOS)
def test_monitor_units_lists_the_whole_program_with_pc_marked(name):
    rc, ctx = _demo(name)
    dev = rc.device
    units = dev.units()

    def marked() -> list[str]:
        lines = execute(ctx, "units").splitlines()
        assert len(lines) == len(units) + 1 and lines[-1].endswith("end: end of program (pc "
                                                                   f"once every {dev.unit_name}"
                                                                   " has run)")
        for u, line in zip(units, lines):
            assert line[3:] == f"0x{u.address:08x} {u.label}: {u.summary}"
        return [line for line in lines if line.startswith("=> ")]

    assert marked() == [f"=> 0x{units[0].address:08x} {units[0].label}: {units[0].summary}"]
    if len(units) > 1:
        rc.step(120)
        units = dev.units()  # (a summary may say more once its unit has started)
        assert marked()[0].startswith(f"=> 0x{units[1].address:08x} {units[1].label}:")
    rc.run(120)
    assert marked() == ["=> 0xf000001c end: end of program (pc once every "
                        f"{dev.unit_name} has run)"]


@pytest.mark.parametrize("name", DEMOS)
def test_gdb_breakpoints_on_unit_pcs_stop_there_and_the_end_is_not_a_breakpoint(name):
    """Through the gdb port: Z0 on the second unit (the last for a single-unit program) stops
    there with pc in the stop reply; the end's stop reply carries the end address and the
    console says the program ended."""
    from accelstub.stub.client import RspClient
    from accelstub.stub.server import StubServer

    server = StubServer([open_device(name)], gdb_port=0, telnet_port=None, tcl_port=None)
    server.load_program(demo_program(name), log=lambda s: None)
    server.start()
    try:
        dev = server.targets[0].device
        units = dev.units()
        target = units[min(1, len(units) - 1)].address
        with RspClient(port=server.ready_info()["gdb"][0], timeout=120) as c:
            assert c.read_register("pc") == units[0].address
            c.set_breakpoint(target)
            reply = c.cont(120)
            if len(units) > 1:
                assert f"0f:{target.to_bytes(4, 'little').hex()};" in reply, reply
                assert c.read_register("pc") == target
                c.clear_breakpoint(target)
                reply = c.cont(120)
            assert "0f:1c0000f0;" in reply, reply
            assert f"accelstub: {name} program ended: pc 0xf000001c is its end address " \
                "(EMU_END)\n" in "".join(c.console)
            assert c.read_register("pc") == 0xF000_001C
    finally:
        server.stop()


@pytest.mark.parametrize("name", DEMOS)
def test_unit_tensors_lie_in_mapped_memory_and_the_output_is_what_the_unit_wrote(name):
    """Unit tensors (issue 26 #3): every unit's declaration of the bundled demo is valid (inputs
    first, then "output" where the unit has one; shapes of at least one element; every byte
    range mapped), and after stepping unit k its output lies within what unit k wrote
    (Touched.writes) and reads back."""
    from accelstub.devices.ranges import merge_ranges
    from accelstub.devices.tensors import TensorSpec, read_tensor

    rc, ctx = _demo(name)
    dev = rc.device
    n = len(dev.units())
    declared = [dev.unit_tensors(k) for k in range(n)]
    if not any(declared):
        pytest.skip(f"{name}: unit_tensors declares no tensor yet")
    for k, specs in enumerate(declared):
        names = [s.name for s in specs]
        assert len(set(names)) == len(names), (k, names)
        inputs = names[:-1] if names[-1:] == ["output"] else names
        assert all(x.startswith("input") for x in inputs), (k, names)
        for s in specs:
            assert isinstance(s, TensorSpec) and min(s.shape) >= 1, (k, s)
            for a, b in s.ranges():
                assert dev.bus.is_mapped(a, b - a), f"unit {k} {s.name}: {a:#x}-{b:#x}"
    for k in range(n):
        specs = dev.unit_tensors(k)
        assert rc.step(120).reason in ("step", "done")
        if not specs or specs[-1].name != "output":
            continue
        out = specs[-1]
        writes = merge_ranges(rc.last_touched.writes)
        for a, b in out.ranges():
            assert any(s <= a and b <= e for s, e in writes), \
                f"unit {k} output {a:#x}-{b:#x} not written by it ({writes})"
        assert read_tensor(out, dev.read).shape == out.shape
