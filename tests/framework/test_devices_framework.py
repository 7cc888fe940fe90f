"""The device framework on a small description of its own and on the MAX78000 model: access
rules, address decoding, run control (step, run, halt, breakpoints, watchpoints), snapshots."""
import threading
import time
import tomllib

import pytest

from accelstub.devices import BusError, TargetRunning, open_device
from accelstub.devices.bus import Bus
from accelstub.devices.description import parse_description
from accelstub.devices.registers import RegisterFile
from accelstub.devices.runcontrol import RunControl
from tests.max78000 import programs

SMALL = """
[device]
name = "small"
[[block]]
name = "ctl"
base = 0x1000
size = 0x10
  [[block.register]]
  name = "STATUS"
  offset = 0
    [[block.register.field]]
    name = "done"
    bits = "0"
    access = "w1c"
    [[block.register.field]]
    name = "err"
    bits = "8"
    access = "w1c"
    [[block.register.field]]
    name = "set_me"
    bits = "4"
    access = "w1s"
    [[block.register.field]]
    name = "id"
    bits = "31:24"
    access = "ro"
    reset = 0xA5
  [[block.register]]
  name = "KEY"
  offset = 4
  access = "wo"
[[region]]
name = "ctl"
kind = "registers"
base = 0x1000
size = 0x100
populated = [[0, 8]]
block = "ctl"
[[region]]
name = "mem"
base = 0x2000
size = 0x100
populated = [[0, 0x80]]
word_mask = [0xFF, 0xFFFFFFFF]
"""


@pytest.fixture
def small():
    desc = parse_description(tomllib.loads(SMALL), "small.toml")
    regs = RegisterFile(desc)
    return desc, regs, Bus(desc, regs)


def test_w1c_w1s_ro_wo_rules(small):
    desc, regs, bus = small
    status = desc.register("STATUS")
    assert regs.read(status) == 0xA5000000
    regs.poke(status, 0xA5000101)  # hardware sets done and err
    bus.write(0x1000, (1).to_bytes(4, "little"))  # write 1 to done clears only done
    assert regs.read(status) == 0xA5000100
    bus.write(0x1000, (0x10 | 0xFF000000).to_bytes(4, "little"))  # w1s sets; ro id kept
    assert regs.read(status) == 0xA5000110
    bus.write(0x1004, b"\x11\x22\x33\x44")
    assert bus.read(0x1004, 4) == b"\x00\x00\x00\x00"  # write-only reads 0
    assert regs.peek("KEY") == 0x44332211


def test_derived_value_is_worked_out_again_only_when_its_registers_change(small):
    """RegisterFile.derived: the function runs on the first call and after a write to one of
    the named registers, and not for a register outside them."""
    desc, regs, bus = small
    calls = []
    get = regs.derived(("KEY",), lambda: calls.append(1) or regs.peek("KEY") * 2)
    assert get() == 0 and get() == 0 and len(calls) == 1
    bus.write(0x1004, (21).to_bytes(4, "little"))
    assert get() == 42 and len(calls) == 2
    regs.poke("STATUS", 0xA5000101)  # not one of them
    assert get() == 42 and len(calls) == 2


def test_byte_write_touches_only_its_lane(small):
    desc, regs, bus = small
    regs.poke("STATUS", 0xA5000101)
    bus.write(0x1000, b"\x00")  # byte 0 only: writing 0 clears nothing
    bus.write(0x1001, b"\x01")  # byte 1: clears err (bit 8) but not done (bit 0)
    assert regs.read("STATUS") == 0xA5000001


def test_word_mask_and_unpopulated_ranges(small):
    desc, regs, bus = small
    bus.write(0x2000, b"\xff" * 8)
    assert bus.read(0x2000, 8) == b"\xff\x00\x00\x00\xff\xff\xff\xff"
    with pytest.raises(BusError, match="not populated"):
        bus.read(0x2080, 4)
    with pytest.raises(BusError, match="not mapped"):
        bus.read(0x3000, 4)
    with pytest.raises(BusError, match="0x00001008"):
        bus.read(0x1004, 8)  # runs from KEY into the unpopulated part of the window
    with pytest.raises(BusError):
        bus.write(0x207c, b"\x00" * 8)  # straddles the end: nothing is written
    assert bus.read(0x207c, 4) == b"\x00\x00\x00\x00"


def make_program(dev, layers=4):
    programs.apply(dev, layers)


def test_step_run_breakpoint_watchpoint():
    dev = open_device("max78000")
    make_program(dev)
    rc = RunControl(dev)
    assert dev.pc == 0x50100010
    assert rc.step(5).reason == "step" and dev.pc == 0x50100014
    rc.add_breakpoint(0x5010001C)
    rc.resume()
    assert rc.wait(5).reason == "breakpoint" and dev.pc == 0x5010001C
    rc.add_watchpoint("w", 0x5040000C, 4)  # layer 3 writes 0x50400000-0x5040000f
    rc.resume()
    stop = rc.wait(5)
    assert stop.reason == "watchpoint" and stop.watch == ("watch", 0x5040000C)
    assert dev.finished() and dev.interrupts()["CNN"] is True
    assert rc.step(5).reason == "idle"


def test_halt_request_stops_a_running_device_and_server_stays_responsive():
    dev = open_device("max78000")
    make_program(dev, 32)
    dev.regs.poke("EMU_THROTTLE_US", 500_000)
    rc = RunControl(dev)
    stops = []
    rc.add_stop_listener(stops.append)
    rc.resume()
    time.sleep(0.1)
    assert rc.running and rc.state == "running"
    assert dev.read(0x50400000, 4) == b"\x01\x02\x03\x04"  # reads while running
    with pytest.raises(TargetRunning):
        rc.resume()
    t0 = time.perf_counter()
    stop = rc.halt_and_wait(5)
    assert stop.reason == "halt" and stop.signal == 2
    assert time.perf_counter() - t0 < 0.5
    assert stops == [stop] and rc.state == "halted"


def test_snapshot_restore_round_trip():
    dev = open_device("max78000")
    make_program(dev)
    snap = dev.snapshot()
    rc = RunControl(dev)
    rc.resume()
    rc.wait(5)
    assert dev.finished() and dev.read(0x50400000, 4) == bytes([16, 32, 48, 64])
    dev.restore(snap)
    assert not dev.finished() and dev.pc == 0x50100010
    assert dev.read(0x50400000, 4) == bytes([1, 2, 3, 4])
    assert dev.read(0x50400100, 4) == b"\x00" * 4
    assert dev.read_register("CNNx16_0_CTRL") & (1 << 12) == 0


def test_model_exception_becomes_a_fault_stop_not_a_dead_thread(monkeypatch):
    dev = open_device("max78000")
    make_program(dev)
    rc = RunControl(dev)
    monkeypatch.setattr(dev, "execute_unit", lambda h: 1 / 0)
    stop = rc.step(5)
    assert stop.reason == "fault" and "ZeroDivisionError" in stop.message
    assert not rc.running


def test_reset_restores_reset_values():
    dev = open_device("max78000")
    make_program(dev)
    rc = RunControl(dev)
    rc.reset("halt")
    assert dev.read_register("CNNx16_0_CTRL") == 0x6
    assert dev.finished()


def _run_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "max78000-run"]


def test_run_thread_is_reused_then_ends_and_frees_the_device(monkeypatch):
    import gc
    import weakref

    monkeypatch.setattr(RunControl, "IDLE_EXIT_S", 0.3)
    before = set(_run_threads())
    dev = open_device("max78000")
    programs.apply(dev, 4)
    rc = RunControl(dev)
    rc.step(30)
    worker = set(_run_threads()) - before
    assert len(worker) == 1
    rc.step(30)
    assert set(_run_threads()) - before == worker  # the same thread ran the second step
    deadline = time.monotonic() + 10
    while set(_run_threads()) & worker and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not set(_run_threads()) & worker        # idle: the thread ended
    assert rc.step(30).reason == "step"             # and a new one runs the next step
    ref = weakref.ref(dev)
    del dev, rc
    gc.collect()
    assert ref() is None                            # no thread keeps a dropped device alive


def test_memory_span_names_the_first_address_outside_the_memory():
    """Bus.memory_span, the one check device models use before reaching memory directly."""
    bus = open_device("nvdla").bus
    mem, off = bus.memory_span(0x8000_0010, 0x20)
    assert mem.region.name == "sysmem_8000" and off == 0x10
    for addr, size, bad in ((0x83FF_FFF0, 0x20, 0x8400_0000),   # runs past its end
                            (0x7FFF_FFF0, 0x20, 0x7FFF_FFF0),   # starts outside any memory
                            (0x0000_3000, 4, 0x0000_3000),      # a register window
                            (0x8000_0000, -1, 0x8000_0000)):
        with pytest.raises(BusError) as e:
            bus.memory_span(addr, size)
        assert e.value.address == bad, (hex(addr), hex(e.value.address))


def test_a_failed_read_names_its_first_unreadable_byte():
    """A read across a reserved register word and, later, an unpopulated byte fails at the
    register word (the first byte that cannot be read): gdb's partial reads stop there. (The
    bundled descriptions have no reserved word left: SMALL with 0x1008 populated.)"""
    desc = parse_description(tomllib.loads(SMALL.replace("populated = [[0, 8]]",
                                                         "populated = [[0, 12]]")), "small.toml")
    bus = Bus(desc, RegisterFile(desc))
    for size in (5, 8):
        with pytest.raises(BusError) as e:
            bus.read(0x1007, size)
        assert e.value.address == 0x1008
    assert len(bus.read(0x1007, 1)) == 1
