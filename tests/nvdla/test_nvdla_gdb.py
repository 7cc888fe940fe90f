"""NVDLA in gdb-multiarch with the bundled demo (a convolution layer, then an SDP layer on its
output): pc is word k of the program window for layer k, stepi runs one hardware layer
(the trace's driver steps in between), a watchpoint on the output stops after the layer that
wrote it, `monitor nvdla groups` shows both register groups of every unit."""
from __future__ import annotations

import re

import pytest

from accelstub.devices import open_device
from accelstub.stub.server import StubServer
from accelstub.testkit.nvdla_build import DEMO, OUT_BASE, build
from tests.helpers import ROOT, run_gdb


@pytest.fixture
def stub():
    server = StubServer([open_device("nvdla")], gdb_port=0, telnet_port=None, tcl_port=None)
    server.load_program(ROOT / "configs" / "demo" / "nvdla_demo", log=lambda s: None)
    server.start()
    yield server
    server.stop()


def test_stepi_runs_one_layer_and_groups_alternate(stub):
    out = run_gdb(["p/x $pc", "monitor units", "stepi", "monitor nvdla groups", "p/x $pc",
                   "p/x $SDP_S_POINTER", "stepi", "p/x $GLB_S_INTR_STATUS"], stub.gdb[0].port)
    values = re.findall(r"\$\d+ = (0x[0-9a-f]+)", out)
    assert values[0] == "0xf0001000" and values[1] == "0xf0001004", out  # layers 0 and 1
    assert "=> 0xf0001000 layer 0: conv (SDP G0): conv 3x3, 16x8x8 -> 16x8x8" in out, out
    assert "   0xf0001004 layer 1: sdp (SDP G1): SDP from memory" in out, out  # listed already
    # after the first layer CACC and SDP consume group 1; SDP_RDMA, which did not run in it,
    # still consumes group 0, where the driver armed the second layer's SDP_RDMA
    assert re.search(r"CACC\s+G0\s+G1\s+idle\s+idle", out), out
    assert re.search(r"SDP_RDMA\s+G0\s+G0\s+running\s+idle", out), out
    assert re.search(r"\nSDP\s+G1\s+G1\s+idle\s+running", out), out
    assert values[2] == "0x10001", out  # SDP: producer G1 (the driver's), consumer G1
    assert "0xf000001c in ?? ()" in out, out  # the second stepi ends the program
    assert "PASS" in out and stub.targets[0].device.units_done == 2, out


def test_watch_on_the_output_stops_after_the_layer_that_wrote_it(stub):
    out = run_gdb([f"watch *(int*){OUT_BASE:#x}", "continue", "monitor status"],
                  stub.gdb[0].port)
    first = int.from_bytes(build(DEMO, "nvdla_demo", 1).outputs[0][1][:4], "little",
                           signed=True)
    assert "Hardware watchpoint 1" in out and f"New value = {first}" in out, out
    assert re.search(r"units: 1\b", out), out  # stopped after the convolution layer
