"""The shared machinery every device builds on, driven through the toy device: banked registers
(bus selection, named banks, locks ignored and counted, gdb/SVD names), host programs (writes,
host reads with side effects, interrupt waits with ISRs, polls, known answers, stuck drivers),
step granularities, halt requests inside a unit, breakpoints and watchpoints."""
from __future__ import annotations

import pytest

from accelstub.devices.device import SIGINT, ProgramOptions, UnitContext
from accelstub.devices.host import CheckWords, HostProgram, Poll, WaitIrq, Write
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.commands import CommandContext, execute
from accelstub.stub.program import load_program, run_to_end
from accelstub.stub.svd import description_to_svd
from accelstub.stub.target_xml import register_table

from .toy_device import BASE, RAM, Toy

POINTER, STATUS, SRC, DST, COUNT, ENABLE = (BASE + o for o in (0x08, 0x0C, 0x20, 0x24, 0x28,
                                                                0x2C))


def w32(dev, addr: int, value: int) -> None:
    dev.write(addr, value.to_bytes(4, "little"))


def r32(dev, addr: int) -> int:
    return int.from_bytes(dev.read(addr, 4), "little")


def job(dev, bank: int, src: int, dst: int, count: int) -> None:
    """The driver's steps for one job on context ``bank`` (bus writes only)."""
    w32(dev, POINTER, bank)
    for addr, v in ((SRC, src), (DST, dst), (COUNT, count), (ENABLE, 1)):
        w32(dev, addr, v)


@pytest.fixture
def dev() -> Toy:
    d = Toy()
    d.write(RAM, bytes(range(64)))
    return d


# -- banked registers ------------------------------------------------------------------------------
def test_bus_accesses_reach_the_bank_the_selector_names(dev):
    w32(dev, POINTER, 0)
    w32(dev, SRC, 0x111)
    w32(dev, POINTER, 1)
    assert r32(dev, SRC) == 0  # bank C1 untouched
    w32(dev, SRC, 0x222)
    assert (dev.read_register("SRC_C0"), dev.read_register("SRC_C1")) == (0x111, 0x222)
    w32(dev, POINTER, 0)
    assert r32(dev, SRC) == 0x111
    dev.write_register("SRC_C1", 0x333)  # a named bank is reached whatever the selector says
    assert dev.read_register("SRC_C1") == 0x333 and r32(dev, SRC) == 0x111


def test_writes_to_a_locked_bank_are_ignored_and_counted(dev):
    job(dev, 0, RAM, RAM + 0x100, 4)  # ENABLE_C0.en = 1 locks context 0 until the job is done
    w32(dev, SRC, 0xBAD)
    dev.write_register("DST_C0", 0xBAD)
    assert dev.read_register("SRC_C0") == RAM and dev.read_register("DST_C0") == RAM + 0x100
    assert dev.regs.ignored_writes == {"SRC_C0": 1, "DST_C0": 1}
    assert dev.counters()["ignored_writes"] == 2
    w32(dev, POINTER, 1)
    w32(dev, SRC, 0x44)  # the other context takes writes
    assert dev.read_register("SRC_C1") == 0x44
    RunControl(dev).step(30)
    w32(dev, POINTER, 0)
    w32(dev, SRC, 0x55)  # the job is done: the lock is gone
    assert dev.read_register("SRC_C0") == 0x55


def test_every_bank_has_its_own_gdb_register_and_svd_entry(dev):
    regs = {e.name: e for e in register_table(dev.description)}
    assert regs["SRC_C0"].regnum != regs["SRC_C1"].regnum
    assert regs["SRC_C0"].register.address == regs["SRC_C1"].register.address == SRC
    svd = description_to_svd(dev.description)
    c1 = svd[svd.index("<name>SRC_C1</name>"):]
    assert "<alternateRegister>SRC_C0</alternateRegister>" in c1[:c1.index("</register>")]
    assert "bank C1 of SRC" in c1[:c1.index("</register>")]


def test_reg_command_shows_and_sets_each_bank(dev):
    ctx = CommandContext([RunControl(dev)])
    execute(ctx, "reg SRC_C1 0x1234")
    assert execute(ctx, "reg SRC_C1") == "SRC_C1 (/32): 0x00001234"
    assert execute(ctx, "reg SRC_C0") == "SRC_C0 (/32): 0x00000000"


# -- host programs ---------------------------------------------------------------------------------
def write_program(tmp_path, text: str):
    p = tmp_path / "copy.toyjob"
    p.write_text(text)
    return p


def test_a_host_program_runs_with_its_driver_and_checks_the_answer(dev, tmp_path):
    words = [r32(dev, RAM + 4 * i) for i in range(4)]
    p = write_program(tmp_path, f"copy {RAM:#x} {RAM + 0x100:#x} 2\n"
                      f"copy {RAM + 8:#x} {RAM + 0x200:#x} 2\n"
                      f"expect {RAM + 0x100:#x} {words[0]:#x}\n"
                      f"expect {RAM + 0x204:#x} {words[3]:#x}\n")
    rc = RunControl(dev)
    summary = load_program(CommandContext([rc]), p, ProgramOptions())
    assert summary == "copy.toyjob: toy job"
    # attach ran the driver up to its first wait: one ticket taken, job 1 queued on C0
    assert dev.ticket == 1 and list(dev.queue) == [0] and dev.pc == ENABLE
    outcome = run_to_end(rc)
    assert outcome.code == 0 and outcome.lines == ["PASS (2 words checked, 2 jobs, "
                                                   + outcome.lines[0].split("jobs, ")[1],
                                                   f"cycles: {dev.cycles} modelled"]
    assert dev.ticket == 2  # host reads of TICKET advance it; debugger reads never did
    assert dev.regs.field("STATUS", "done") == 0  # the ISR acknowledged each DONE
    assert rc.host.pending["DONE"] == 0 and dev.jobs == 2


def test_a_wrong_answer_names_the_unit_that_wrote_it(dev, tmp_path):
    p = write_program(tmp_path, f"copy {RAM:#x} {RAM + 0x100:#x} 2\n"
                      f"copy {RAM:#x} {RAM + 0x200:#x} 2\n"
                      f"expect {RAM + 0x204:#x} 0xdead\n")
    rc = RunControl(dev)
    load_program(CommandContext([rc]), p, ProgramOptions())
    outcome = run_to_end(rc)
    got = r32(dev, RAM + 4)
    assert outcome.code == 1
    assert outcome.lines == [f"FAIL at 0x{RAM + 0x204:08x}: expected 0x0000dead, got "
                             f"0x{got:08x} (written by job at 0x{ENABLE + 0:08x})",
                             f"cycles: {dev.cycles} modelled"]


def test_continue_in_the_debugger_runs_the_driver_between_units(dev, tmp_path):
    """stepi runs one job and the driver's reaction to it (ISR, the next job's writes), as the
    chip with its CPU would; the breakpoint on the second context's pc stops before its job."""
    p = write_program(tmp_path, f"copy {RAM:#x} {RAM + 0x100:#x} 1\n"
                      f"copy {RAM:#x} {RAM + 0x200:#x} 1\n"
                      f"copy {RAM:#x} {RAM + 0x300:#x} 1\n")
    rc = RunControl(dev)
    load_program(CommandContext([rc]), p, ProgramOptions())
    c1 = dev.description.register("ENABLE_C1").address
    assert rc.step(30).reason == "step" and dev.pc == c1 and list(dev.queue) == [1]
    assert dev.regs.field("STATUS", "done") == 0
    rc.add_breakpoint(ENABLE)  # context C0 again: the third job
    stop = rc.run(30)
    assert stop.reason == "breakpoint" and dev.pc == ENABLE and dev.jobs == 2
    stop = rc.run(30)
    assert stop.reason == "done" and stop.message.splitlines()[-1].startswith("PASS (0 words")
    assert rc.run(30).reason == "idle"


def test_a_driver_waiting_for_what_never_comes_is_a_fault_naming_its_step(dev):
    rc = RunControl(dev)
    rc.attach(HostProgram("stuck", [Write(POINTER, bytes(4), where="drv.c:3"),
                                    Poll(STATUS, 1, 1, where="drv.c:4", name="STATUS.busy")]))
    stop = rc.run(30)
    assert stop.reason == "fault"
    assert stop.message == ("drv.c:4: the driver waits for STATUS.busy & 0x1 == 0x1 (reads 0x0), "
                            "but the toy has no job to run")


def test_an_interrupt_before_the_wait_is_not_lost(dev):
    """The job finishes while the driver polls; its DONE is pending when the driver waits."""
    job(dev, 0, RAM, RAM + 0x100, 1)
    rc = RunControl(dev)
    rc.attach(HostProgram("early", [Poll(STATUS, 1, 0, where="drv.c:5", name="STATUS.busy"),
                                    WaitIrq("DONE", "drv.c:6"),
                                    CheckWords([(RAM + 0x100, r32(dev, RAM), 0xFFFFFFFF)])]))
    stop = rc.run(30)
    assert stop.reason == "done" and stop.message.splitlines()[-1].startswith("PASS")


def test_a_blocking_step_in_an_isr_is_reported(dev):
    job(dev, 0, RAM, RAM + 0x100, 1)
    rc = RunControl(dev)
    rc.attach(HostProgram("isr", [WaitIrq("DONE", "main.c:9")],
                          {"DONE": [Poll(STATUS, 1, 1, where="isr.c:2", name="STATUS.busy")]}))
    stop = rc.run(30)
    assert stop.reason == "fault" and stop.message.startswith(
        "isr.c:2: the ISR of DONE blocks at a step that waits for STATUS.busy")


# -- granularity, halt requests, breakpoints, watchpoints -----------------------------------------
def test_a_finer_granularity_stops_inside_the_unit(dev):
    job(dev, 0, RAM, RAM + 0x100, 3)
    rc = RunControl(dev)
    stop = rc.step(30, granularity="word")
    assert stop.reason == "step" and dev.word == 1 and dev.units_done == 0 and dev.pc == ENABLE
    assert r32(dev, RAM + 0x100) == r32(dev, RAM) and r32(dev, RAM + 0x104) == 0
    assert rc.step(30).reason == "done" and dev.units_done == 1 and dev.word == 0
    assert r32(dev, RAM + 0x108) == r32(dev, RAM + 8)
    with pytest.raises(Exception, match="toy steps by job, word, not 'tile'"):
        rc.start_step("tile")


def test_step_command_takes_a_granularity(dev):
    job(dev, 0, RAM, RAM + 0x100, 3)
    ctx = CommandContext([RunControl(dev)])
    execute(ctx, "step word")
    assert dev.word == 1
    with pytest.raises(Exception, match="toy steps by job, word; 'tile' is neither"):
        execute(ctx, "step tile")


def test_a_halt_request_inside_a_long_unit_stops_it_where_it_can(dev):
    class Interrupted(Toy):
        def read(self, addr, size):
            if addr == RAM + 8:  # Ctrl-C arrives while the third word is copied
                self.ctx.halt.set()
            return super().read(addr, size)

        def execute_unit(self, ctx: UnitContext):
            self.ctx = ctx
            return super().execute_unit(ctx)

    d = Interrupted()
    job(d, 0, RAM, RAM + 0x100, 8)
    rc = RunControl(d)
    stop = rc.run(30)
    assert (stop.reason, stop.signal) == ("halt", SIGINT) and d.word == 3 and d.units_done == 0
    assert rc.run(30).reason == "done" and d.word == 0 and d.units_done == 1


def test_a_watchpoint_stops_after_the_unit_that_wrote_it(dev):
    job(dev, 0, RAM, RAM + 0x100, 2)
    job(dev, 1, RAM, RAM + 0x200, 2)
    rc = RunControl(dev)
    rc.add_watchpoint("w", RAM + 0x204, 4)
    stop = rc.run(30)
    assert stop.reason == "watchpoint" and stop.watch == ("watch", RAM + 0x204)
    assert dev.jobs == 2
