"""The Python API (accelstub.Session): every verb on both back ends -- in-process and remote (a
StubServer on a free 127.0.0.1 port, stopped by the fixture) -- on all four devices with their
bundled demo programs, with the same results (test_same_results_on_both_back_ends compares
them directly). Tensor tests use whatever each device declares (Device.unit_tensors)."""
from __future__ import annotations

import dataclasses
import functools
import re
import threading
import time

import numpy as np
import pytest

from accelstub import (
    AccelstubError,
    BusError,
    ConnectionLost,
    DeviceError,
    ProgramError,
    RegisterNotFound,
    Session,
    StopInfo,
    TargetError,
    Timeout,
)
from accelstub.devices import DEVICES, open_device
from accelstub.stub.cli import demo_program
from accelstub.stub.server import StubServer
from accelstub.stub.target_xml import memory_ranges

BACKENDS = ("in-process", "remote")


@pytest.fixture(autouse=True)
def _warm(warm_kernels):
    pass


def serve(device: str) -> StubServer:
    """A started StubServer on a free loopback gdb port with the demo program loaded."""
    server = StubServer([open_device(device)], host="127.0.0.1", gdb_port=0, telnet_port=None,
                        tcl_port=None)
    server.load_program(demo_program(device), log=lambda s: None)
    server.start()
    return server


@pytest.fixture
def open_session():
    """``open_session(device, backend) -> Session``; every session closed and every server
    stopped at the end of the test, pass or fail."""
    opened: list = []

    def make(device: str, backend: str) -> Session:
        if backend == "in-process":
            s = Session.open(device)
        else:
            server = serve(device)
            opened.append(server)
            s = Session.connect(f"127.0.0.1:{server.gdb[0].port}", timeout=10.0)
        opened.append(s)
        return s

    yield make
    for thing in reversed(opened):
        thing.close() if isinstance(thing, Session) else thing.stop()


@pytest.fixture(params=[(d, b) for d in DEVICES for b in BACKENDS],
                ids=lambda p: f"{p[0]}-{p[1]}")
def session(request, open_session) -> Session:
    return open_session(*request.param)


@functools.cache
def first_write(device: str) -> tuple[int, tuple[int, int]]:
    """(k, (start, end)): the first unit of the demo that writes memory and the first range it
    writes, found by stepping the project's own run control (not hard-coded)."""
    server = StubServer([open_device(device)], gdb_port=None, telnet_port=None, tcl_port=None)
    server.load_program(demo_program(device), log=lambda s: None)
    rc = server.targets[0]
    for k in range(len(rc.device.units())):
        rc.step(30)
        if rc.last_touched and rc.last_touched.writes:
            return k, rc.last_touched.writes[0]
    raise AssertionError(f"no unit of the {device} demo writes memory")


def description(device: str):
    return open_device(device).description


# -- load / reset / step
def test_load_and_reset(session):
    units = session.units()
    assert units and session.stop.reason == "halt" and session.stop.unit == 0
    assert session.pc == units[0].address
    session.step()
    assert session.counters()["units"] == 1
    stop = session.reset()
    assert (stop.reason, stop.pc, stop.unit, stop.message) == ("halt", units[0].address, 0,
                                                               "reset init")
    assert session.counters()["units"] == 0
    summary = session.load(demo_program(session.device))
    assert isinstance(summary, str) and summary
    assert session.unit == 0 and [u.address for u in session.units()] == \
        [u.address for u in units]


def test_load_of_a_missing_file_is_a_program_error(session, tmp_path):
    missing = tmp_path / "nothing.cfg"
    with pytest.raises(ProgramError, match="nothing.cfg"):
        session.load(missing)


def test_step_runs_one_unit(session):
    units = session.units()
    stop = session.step()
    assert session.counters()["units"] == 1
    if len(units) > 1:
        assert (stop.reason, stop.unit, stop.pc) == ("step", 1, units[1].address)
    else:  # NE16's demo has one job: the step ends the program
        assert (stop.reason, stop.unit) == ("done", None)


@pytest.mark.parametrize("backend", BACKENDS)
def test_subtile_step_on_ne16(open_session, backend):
    s = open_session("ne16", backend)
    assert s.granularities() == ("job", "subtile")
    stop = s.step("subtile")
    assert (stop.reason, stop.unit) == ("step", 0)  # inside job 0: pc still names it
    assert s.counters()["units"] == 0  # a part of a job is not a job run
    for _ in range(100):
        stop = s.step("subtile")
        if stop.unit != 0:
            break
    assert stop.reason == "done" and s.counters()["units"] == 1
    with pytest.raises(DeviceError, match="steps by job, subtile, not 'row'"):
        s.step("row")


# -- continue, timeouts, run_to, breakpoints
def test_cont_runs_to_the_end_then_idle(session):
    stop = session.cont(timeout=60)
    assert (stop.reason, stop.unit) == ("done", None)
    assert session.counters()["units"] == len(session.units())
    assert session.status()["stop"] == "done"
    assert session.cont(timeout=10).reason == "idle"


def test_cont_timeout_halts_the_target(session):
    # EMU_THROTTLE_US: the emulator waits this long after each unit (a bus write the run obeys)
    session.write_register("EMU_THROTTLE_US", 2_000_000)
    assert session.read_register("EMU_THROTTLE_US") == 2_000_000
    t0 = time.monotonic()
    with pytest.raises(Timeout, match=r"cont: no stop within 0.3 s; halted at pc 0x"):
        session.cont(timeout=0.3)
    assert time.monotonic() - t0 < 5
    assert session.stop.reason == "halt"
    assert session.status()["state"] == "halted"
    assert session.counters()["units"] == 1  # the first unit ran, then the throttle wait
    session.write_register("EMU_THROTTLE_US", 0)
    assert session.cont(timeout=60).reason == "done"


def test_step_and_run_to_time_out_too(session):
    session.write_register("EMU_THROTTLE_US", 2_000_000)
    with pytest.raises(Timeout, match="step: no stop within 0.2 s"):
        session.step(timeout=0.2)
    # the unit itself ran (NE16's one job: the program's end); the halt cut the throttle's
    # wait after it short
    units = session.units()
    assert session.stop.reason == ("step" if len(units) > 1 else "done")
    assert session.status()["state"] == "halted" and session.counters()["units"] == 1
    if len(units) > 2:
        with pytest.raises(Timeout, match=r"run_to '.*': no stop within 0.2 s"):
            session.run_to(units[-1].label, timeout=0.2)
        assert session.breakpoints == []  # the temporary breakpoint went anyway


def test_halt_on_a_halted_target_keeps_its_stop(session):
    before = session.step()
    assert session.halt(timeout=1) == before and session.status()["state"] == "halted"


def test_run_to_by_index_and_label(session):
    units = session.units()
    last = units[-1]
    stop = session.run_to(last.index)
    if last.index == 0:  # already before it: nothing runs
        assert session.counters()["units"] == 0 and stop.unit == 0
    else:
        assert (stop.reason, stop.unit, stop.pc) == ("breakpoint", last.index, last.address)
        assert session.counters()["units"] == last.index
    assert session.breakpoints == []  # run_to's breakpoint went again
    session.reset()
    stop = session.run_to(last.label)
    assert stop.unit == last.index and session.pc == last.address
    with pytest.raises(TargetError, match="no .* 'no such unit'"):
        session.run_to("no such unit")


def test_breakpoints_by_index_label_and_address(session):
    units = session.units()
    if len(units) == 1:  # a breakpoint on the unit a run starts at does not stop that run
        session.add_breakpoint(0)
        assert session.cont().reason == "done"
        return
    later = units[1:]
    forms = [(u.label, u.address, u.index)[u.index % 3] for u in later]  # every form in turn
    assert [session.add_breakpoint(f) for f in forms] == [u.address for u in later]
    assert session.breakpoints == sorted(u.address for u in later)
    for u in later:  # stops before each, in program order
        stop = session.cont()
        assert (stop.reason, stop.unit, stop.pc) == ("breakpoint", u.index, u.address)
        assert session.counters()["units"] == u.index
    for f in forms:
        session.remove_breakpoint(f)
    assert session.breakpoints == []
    session.reset()
    assert session.cont().reason == "done"


# -- watchpoints
def test_watchpoint_on_an_address_range(session):
    k, (start, end) = first_write(session.device)
    watched = session.add_watchpoint((start, end - start))
    assert watched == [(start, end)]
    stop = session.cont()
    assert stop.reason == "watchpoint" and stop.watch[0] == "watch"
    assert start <= stop.watch[1] < end
    assert session.counters()["units"] == k + 1  # stops after the unit that wrote
    session.remove_watchpoint((start, end - start))
    assert session.watchpoints == []
    assert session.cont().reason == "done"


def test_watchpoint_on_an_address_word(session):
    k, (start, _) = first_write(session.device)
    session.add_watchpoint(start)
    stop = session.cont()
    assert (stop.reason, stop.watch) == ("watchpoint", ("watch", start))


def test_watchpoint_outside_the_memory_map_is_a_bus_error(session):
    hole = memory_ranges(description(session.device))[-1][1]
    with pytest.raises(BusError, match=f"{hole:#010x}"):
        session.add_watchpoint((hole, 16))


def declared(session: Session) -> list[tuple[int, object]]:
    """(unit index, spec) of every declared output tensor; fails if the device declares none."""
    out = [(u.index, s) for u in session.units() for s in session.tensors(u.index)
           if s.name == "output"]
    assert out, f"{session.device} declares no unit tensors (Device.unit_tensors)"
    return out


def test_watchpoint_on_a_tensor(session):
    index, spec = declared(session)[-1]
    watched = session.add_watchpoint((index, "output"))
    assert watched == spec.ranges()
    stop = session.cont()
    assert stop.reason == "watchpoint"
    assert any(s <= stop.watch[1] < e for s, e in spec.ranges())
    assert session.counters()["units"] <= index + 1  # at the latest after the unit itself
    session.remove_watchpoint((index, "output"))
    assert session.watchpoints == []


# -- tensors
def test_tensors_read_the_declared_addresses(session):
    session.cont()
    for index, spec in declared(session):
        arr = session.tensor(index, "output")
        assert arr.shape == spec.shape and arr.dtype == np.dtype(spec.dtype)
        # element (c, h, w) from its own bytes, read one by one
        chw = spec.from_layout(arr)
        c, h, w = (n - 1 for n in chw.shape)
        raw = session.read_memory(int(spec.addresses()[c, h, w]), spec.itemsize)
        assert chw[c, h, w] == int.from_bytes(raw, "little", signed=spec.dtype.startswith("int"))


def test_set_tensor_writes_what_tensor_reads(session):
    index, spec = declared(session)[0]
    info = np.iinfo(spec.dtype)
    values = np.arange(int(np.prod(spec.shape)), dtype=np.int64).reshape(spec.shape)
    values = (values % min(100, info.max)).astype(spec.dtype)
    session.set_tensor(index, "output", values)
    assert np.array_equal(session.tensor(index, "output"), values)
    with pytest.raises(TargetError, match="no tensor 'nope'"):
        session.tensor(index, "nope")


# -- registers and memory
def test_registers_and_fields(session):
    desc = description(session.device)
    names = session.register_names()
    assert names[:16] == ["r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10",
                          "r11", "r12", "sp", "lr", "pc"]
    assert {r.name for r in desc.registers} <= set(names)
    reg = next(r for r in desc.registers if len(r.fields) >= 2)
    value = session.read_register(reg.name)
    assert session.fields(reg.name) == {f.name: f.extract(value) for f in reg.fields}
    assert session.read_register("pc") == session.units()[0].address
    assert session.read_register("EMU_UNITS") == len(session.units())


def test_read_registers_equals_one_by_one(session):
    """The block read (one round trip remotely) gives what each single read gives, in order,
    aliases and core registers included; an unknown name is RegisterNotFound."""
    names = [n for n in session.register_names() if n not in ("sp", "lr")][:40] + ["pc"]
    assert session.read_registers(names) == {n: session.read_register(n) for n in names}
    with pytest.raises(RegisterNotFound):
        session.read_registers(["pc", "NO_SUCH_REGISTER"])


def test_register_write_is_a_bus_write(session):
    # EMU_UNITS is read-only: a bus write leaves it (a raw store would not)
    before = session.read_register("EMU_UNITS")
    try:
        session.write_register("EMU_UNITS", before + 5)
    except (BusError, TargetError):
        pass
    assert session.read_register("EMU_UNITS") == before
    session.write_register("r3", 0x1234)
    assert session.read_register("r3") == 0x1234


def test_unknown_register_names_the_close_match(session):
    real = next(r.name for r in description(session.device).registers
                if "_" in r.name and not r.name.startswith("EMU"))
    typo = real[:-1]
    with pytest.raises(RegisterNotFound) as err:
        session.read_register(typo)
    e = err.value
    assert isinstance(e, KeyError) and isinstance(e, AccelstubError) and e.name == typo
    assert real in e.close
    assert str(e).startswith(f"no register '{typo}' on {session.device}; did you mean ")
    with pytest.raises(RegisterNotFound, match="did you mean"):
        session.fields(typo)
    with pytest.raises(RegisterNotFound):
        session.write_register(typo, 1)


def test_memory_read_write_and_bus_error(session):
    k, (start, end) = first_write(session.device)
    data = bytes(range(1, 9))[: end - start]
    session.write_memory(start, data)
    assert session.read_memory(start, len(data)) == data
    hole = memory_ranges(description(session.device))[-1][1]
    with pytest.raises(BusError):
        session.read_memory(hole, 4)


# -- state
def test_counters_interrupts_status_units(session):
    dev = open_device(session.device)
    units = session.units()
    assert [u.index for u in units] == list(range(len(units)))
    assert len({u.label for u in units}) == len(units)
    assert len({u.address for u in units}) == len(units)
    assert set(session.interrupts()) == set(dev.interrupts())
    assert all(isinstance(v, bool) for v in session.interrupts().values())
    assert session.counters()["units"] == 0
    session.cont()
    status = session.status()
    assert (status["device"], status["state"], status["stop"], status["unit"]) == \
        (session.device, "halted", "done", None)
    assert status["counters"] == session.counters()
    assert status["counters"]["units"] == len(units) and status["counters"]["cycles"] > 0
    assert status["interrupts"] == session.interrupts()


def test_monitor_commands(session):
    assert session.monitor("units").count("\n") >= len(session.units())
    with pytest.raises(TargetError, match="invalid command name"):
        session.monitor("nonsense")


# -- both back ends give the same results
def script(s: Session) -> list:
    """A session's worth of verbs, recorded."""
    out: list = [s.units(), s.stop, s.granularities()]
    out.append(s.step())
    out.append(s.status())
    k, (start, end) = first_write(s.device)
    s.reset()
    s.add_watchpoint((start, end - start))
    out.append(s.cont())
    out.append(s.read_memory(start, end - start))
    s.remove_watchpoint((start, end - start))
    out.append(s.run_to(s.units()[-1].label))
    out.append(s.cont())
    out.append((s.counters(), s.interrupts()))
    out.append({n: s.read_register(n) for n in s.register_names()[::7]})
    for u in s.units():
        for spec in s.tensors(u.index):
            out.append((u.index, spec, s.tensor(u.index, spec.name).tolist()))
    try:
        s.read_register("NO_SUCH_REGISTER_X")
    except RegisterNotFound as e:
        out.append(str(e))
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_same_results_on_both_back_ends(open_session, device):
    here, there = (script(open_session(device, b)) for b in BACKENDS)
    assert [timeless(x) for x in here] == [timeless(x) for x in there]


def timeless(x):
    """A done stop's message ends with the run's wall time ("..., 340 ms)"): drop it."""
    if isinstance(x, StopInfo):
        return dataclasses.replace(x, message=re.sub(r", \d+ ms\)", ")", x.message))
    return x


# -- a lost connection
@pytest.mark.timeout(30)
@pytest.mark.parametrize("device", DEVICES)
def test_connection_lost_mid_run_raises_at_once(device):
    server = serve(device)
    try:
        s = Session.connect(f"127.0.0.1:{server.gdb[0].port}", timeout=10.0)
        s.write_register("EMU_THROTTLE_US", 5_000_000)
        threading.Timer(0.5, server.stop).start()
        t0 = time.monotonic()
        with pytest.raises(ConnectionLost, match="lost the connection"):
            s.cont(timeout=20)
        assert time.monotonic() - t0 < 8  # not the cont's timeout
        t0 = time.monotonic()
        with pytest.raises(ConnectionLost):
            s.read_register("pc")
        with pytest.raises(ConnectionLost):
            s.units()
        assert time.monotonic() - t0 < 1
        s.close()  # closing a lost session is fine
    finally:
        server.stop()


def test_connect_to_nothing_is_connection_lost():
    server = serve("nvdla")
    port = server.gdb[0].port
    server.stop()
    with pytest.raises(ConnectionLost, match=f"127.0.0.1:{port}"):
        Session.connect(f"127.0.0.1:{port}", timeout=2.0)
