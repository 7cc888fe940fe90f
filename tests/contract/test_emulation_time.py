"""The PASS line's milliseconds are emulation time: the time run control spent running the
program's units, not the time the target sat halted between a step and a continue (issue 25:
63402 ms after a minute in the TUI). Driven through the toy device's host program."""
from __future__ import annotations

import re
import time

from accelstub.devices.device import ProgramOptions
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.commands import CommandContext
from accelstub.stub.program import load_program

from .toy_device import RAM, Toy

HALTED_S = 1.5


def test_pass_line_counts_running_time_not_halted_time(tmp_path):
    dev = Toy()
    words = [int.from_bytes(dev.read(RAM + 4 * i, 4), "little") for i in range(4)]
    prog = tmp_path / "copy.toyjob"
    prog.write_text(f"copy {RAM:#x} {RAM + 0x100:#x} 2\ncopy {RAM + 8:#x} {RAM + 0x200:#x} 2\n"
                    f"expect {RAM + 0x100:#x} {words[0]:#x}\nexpect {RAM + 0x204:#x} "
                    f"{words[3]:#x}\n")
    rc = RunControl(dev)
    load_program(CommandContext([rc]), prog, ProgramOptions())
    t0 = time.perf_counter()
    assert rc.step(30).reason == "step"
    running = time.perf_counter() - t0
    time.sleep(HALTED_S)  # halted at a debugger's prompt
    t1 = time.perf_counter()
    stop = rc.run(30)
    running += time.perf_counter() - t1
    assert stop.reason == "done", stop
    m = re.search(r"PASS \(2 words checked, 2 jobs, (\d+) ms\)", stop.message)
    assert m, stop.message
    ms = int(m.group(1))
    # the runs' own wall time bounds it (rounded to whole ms); the halted 1.5 s is not in it
    assert ms <= running * 1e3 + 1 < HALTED_S * 1e3, (ms, running)
    assert rc.host.elapsed_ms() == rc.host.elapsed_ms()  # the clock stopped at the end
