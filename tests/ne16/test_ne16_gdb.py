"""NE16 in gdb-multiarch: pc names the job registers, `monitor step subtile` runs one output
subtile, stepi one job, a watchpoint on the output stops after the job that wrote it, and the two
job contexts are registers of their own (`_C0` / `_C1`)."""
from __future__ import annotations

import re

import pytest

from accelstub.devices import open_device
from accelstub.devices.ne16.pulp_nnx import L1_BASE
from accelstub.stub.server import StubServer
from accelstub.testkit.ne16_build import DEMO
from tests.helpers import ROOT, run_gdb

OUT = L1_BASE + -(-DEMO.height * DEMO.width * DEMO.in_channels // 4) * 4  # the demo's output


@pytest.fixture
def stub():
    dev = open_device("ne16")
    server = StubServer([dev], gdb_port=0, telnet_port=None, tcl_port=None)
    server.load_program(ROOT / "configs" / "demo" / "ne16_demo", log=lambda s: None)
    server.start()
    yield server
    server.stop()


def test_step_a_subtile_then_the_job_and_read_both_contexts(stub):
    dev = stub.targets[0].device
    out = run_gdb(["p/x $pc", "monitor units", "monitor step subtile", "monitor ne16 queue",
                   "p/x $INFEAT_PTR_C0", "p/x $INFEAT_PTR_C1", "stepi", "p/x $STATUS",
                   "monitor ne16 queue"], stub.gdb[0].port)
    values = re.findall(r"\$\d+ = (0x[0-9a-f]+)", out)
    assert values[0] == "0xf0001000", out  # job 0: word 0 of the program window
    assert "=> 0xf0001000 job 0: 3x3, 24 -> 40 channels, 8x8 output" in out, out
    assert "(ID 0, C0)" in out, out
    assert "running, 1/18 subtiles done" in out, out  # Ko 2 x Ho 3 x Wo 3
    # the input at the start of L1, the pointer moved back to the padded origin (1 row, 1 pixel)
    row = DEMO.width * DEMO.in_channels
    assert int(values[1], 16) == L1_BASE - row - DEMO.in_channels, out
    assert values[2] == "0x0", out  # context 1 was never written
    assert values[3:] == ["0x0"], out  # both contexts free
    # the driver's steps after the job ran to its end: its check, then SOFT_CLEAR
    assert "PASS (2560 outputs checked, 1 jobs" in out, out
    assert "end-of-job events: 1" in out and dev.units_done == 1, out


def test_watch_on_the_output_stops_after_the_job_then_continue_passes(stub):
    out = run_gdb([f"watch *(int*){OUT:#x}", "continue", "monitor ne16 queue", "delete",
                   "continue"], stub.gdb[0].port)
    assert "Hardware watchpoint 1" in out and "New value" in out, out
    assert "queue: empty" in out, out
    assert "PASS (2560" in out, out
