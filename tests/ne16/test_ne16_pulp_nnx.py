"""pulp-nnx NE16 test applications (the format of its test generator, written here by the
project's own testkit/ne16_build.py with a layer-level golden output) imported, run through the
pulp-nnx driver's steps and checked: `accelstub run ne16 --program DIR`."""
from __future__ import annotations

import re

import pytest

from accelstub.devices import open_device
from accelstub.devices.ne16 import pulp_nnx
from accelstub.devices.ne16.job import JOB_REGISTERS
from accelstub.devices.ne16.pulp_nnx import L1_BASE, driver_tasks, load_test_app
from accelstub.stub.cli import main as cli_main
from accelstub.stub.server import StubServer
from accelstub.testkit.ne16_build import DEMO, Layer, build
from tests.helpers import ROOT

from .jobs import APP_LAYERS

LAYERS = APP_LAYERS


@pytest.mark.parametrize("layer", LAYERS, ids=lambda lay: lay.name)
def test_test_apps_pass(tmp_path, layer, capsys):
    app = build(layer, seed=7).write(tmp_path / layer.name)
    assert cli_main(["run", "ne16", "--program", str(app)]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"PASS \(\d+ outputs checked, \d+ jobs, \d+ ms\)\ncycles: \d+ modelled\n",
                        out), out


def test_a_wrong_output_names_the_position_the_job_and_the_subtile(tmp_path, capsys):
    layer = Layer(7, 8, 20, 40, padding=(1, 1, 1, 1), name="bad")
    app = build(layer, seed=3).write(tmp_path / "bad")
    src = app / "gen" / "src" / "output.c"
    text = src.read_text()
    head, body = text.split("golden_output[GOLDEN_OUTPUT_SIZE] = {")
    values = body.split(",")
    i = (4 * 8 + 1) * 40 + 35  # row 4, column 1, channel 35 of the 7x8x40 output
    right = int(values[i], 0)  # the generator's answer, which the emulator computes
    values[i] = " 0x55" if values[i].strip() != "0x55" else " 0x56"
    src.write_text(head + "golden_output[GOLDEN_OUTPUT_SIZE] = {" + ",".join(values))
    assert cli_main(["run", "ne16", "--program", str(app)]) == 1
    out = capsys.readouterr().out
    out_addr = L1_BASE + 7 * 8 * 20  # the output array follows the input in L1
    # row 4 is in output-row subtile 1, column 1 in subtile 0, channel 35 in Ko subtile 1
    assert out.splitlines()[0] == (
        f"FAIL at 0x{out_addr + i:08x}: output[{i}] (row 4, column 1, channel 35) "
        f"expected {int(values[i], 0)}, got {right} "
        "(job 0, subtile ko=1 ho=1 wo=0); 1 of 2240 differ")


def test_driver_registers_of_the_digests_same_padding_example():
    """Worked example N§5.5: 3x3 'same' padding, Ki 16, Ko 32, 3x3 -> 3x3: PADDING
    0x11110000, REM2 0x00040004 (3 + 2 - 1), INFEAT_PTR = data - (1*3 + 1)*16, D0/D1 16/48,
    output strides 32/32/96, weights 18/144."""
    d = {"INPUT_HEIGHT": 3, "INPUT_WIDTH": 3, "INPUT_CHANNEL": 16, "OUTPUT_HEIGHT": 3,
         "OUTPUT_WIDTH": 3, "OUTPUT_CHANNEL": 32, "OUTPUT_BITS": 8, "INPUT_BITS": 8,
         "WEIGHT_HEIGHT": 3, "WEIGHT_BITS": 8, "WEIGHT_OFFSET": -128, "PADDING_TOP": 1,
         "PADDING_BOTTOM": 1, "PADDING_LEFT": 1, "PADDING_RIGHT": 1, "STRIDE_HEIGHT": 1,
         "GROUPS": 1, "HAS_NORM_QUANT": 1, "HAS_RELU": 1, "OUTSHIFT": 0, "SCALE_BITS": 8,
         "HAS_BIAS": 0}
    (job,) = driver_tasks(d, {"input": 0x10000400, "output": 0x10003000, "weight": 0x10001000,
                              "scale": 0x10004000})
    r = dict(zip(JOB_REGISTERS, job))
    assert r["PADDING"] == 0x11110000 and r["SUBTILE_REM2"] == 0x00040004
    assert r["INFEAT_PTR"] == 0x10000400 - 64
    assert (r["INFEAT_D0_STRIDE"], r["INFEAT_D1_STRIDE"]) == (16, 48)
    assert (r["OUTFEAT_D0_STRIDE"], r["OUTFEAT_D1_STRIDE"], r["OUTFEAT_D2_STRIDE"]) == (32, 32, 96)
    assert (r["WEIGHTS_D0_STRIDE"], r["WEIGHTS_D1_STRIDE"]) == (18, 144)
    assert r["SUBTILE_NB0"] == r["SUBTILE_NB1"] == 0x00010001
    assert r["SUBTILE_REM0"] == 0x00200010 and r["SUBTILE_REM1"] == 0x00030003
    assert r["WEIGHT_OFFSET"] == 0xFFFFFF80
    assert r["CONFIG0"] == 0x00008017  # "ReLU, shift 0, no bias" (N§5.5)


def test_import_errors_name_the_file_and_line(tmp_path):
    app = build(Layer(4, 4, 16, 16, name="e"), seed=1).write(tmp_path / "e")
    conf = app / "gen" / "inc" / "layer_conf.h"
    conf.write_text(conf.read_text().replace("#define GROUPS (1)\n", ""))
    with pytest.raises(pulp_nnx.TestAppError, match=r"^layer_conf.h:1: GROUPS is not defined"):
        load_test_app(app)
    app = build(Layer(4, 4, 16, 16, name="e"), seed=1).write(tmp_path / "f")
    src = app / "gen" / "src" / "input.c"
    lines = src.read_text().splitlines()
    n = next(i for i, line in enumerate(lines) if "= {" in line) + 2
    lines[n] = lines[n].replace("0x", "0q", 1)
    src.write_text("\n".join(lines))
    with pytest.raises(pulp_nnx.TestAppError, match=r"^input.c:\d+: input: invalid literal"):
        load_test_app(app)
    big = build(Layer(40, 40, 64, 64, name="big"), seed=1).write(tmp_path / "big")
    with pytest.raises(pulp_nnx.TestAppError, match=r"take \d+ bytes, more than the 128 KiB of L1"):
        load_test_app(big)
    # the device's L1 window, not GAP9's 128 KiB, bounds what an app may place (--l1_kib)
    assert cli_main(["run", "ne16", "--l1_kib", "512", "--program", str(big)]) == 0
    assert cli_main(["run", "ne16", "--program", str(tmp_path / "none")]) == 2


def test_bundled_demo_is_current(tmp_path):
    fresh = build(DEMO, seed=1).write(tmp_path / "demo")
    demo = ROOT / "configs" / "demo" / "ne16_demo"
    for f in sorted(fresh.rglob("*.*")):
        rel = f.relative_to(fresh)
        assert (demo / rel).read_text() == f.read_text(), \
            f"{rel}: regenerate with python -m accelstub.testkit.ne16_build --demo " \
            "configs/demo/ne16_demo"


def test_in_the_debugger_stepi_runs_a_job_and_continue_runs_the_driver():
    """serve --program: the driver has placed the arrays and submitted the first job; stepi
    runs it (pc = the job registers); a watchpoint on the output stops after the job that wrote
    it; continue runs the driver to its check."""
    dev = open_device("ne16")
    server = StubServer([dev], gdb_port=None, telnet_port=None, tcl_port=None)
    server.load_program(ROOT / "configs" / "demo" / "ne16_demo", log=lambda s: None)
    rc = server.targets[0]
    assert dev.pc == 0xF000_1000 and [u.label for u in dev.units()] == ["job 0"]
    out_addr = L1_BASE + -(-DEMO.height * DEMO.width * DEMO.in_channels // 4) * 4
    rc.add_watchpoint("w", out_addr, 4)
    stop = rc.run(60)
    assert stop.reason == "watchpoint" and stop.watch == ("watch", out_addr)
    assert dev.units_done == 1 and dev.finished()
    rc.clear_watchpoints()
    stop = rc.run(60)
    assert stop.reason == "done" and stop.message.splitlines()[-1].startswith("PASS (2560")
    rc.reset("init")  # the program again: its first job submitted, the outputs cleared
    assert not dev.finished() and not dev.read(out_addr, 4).strip(b"\0")
    assert rc.step(60).reason == "done" and dev.units_done == 1  # its only job, then its check


def test_every_job_of_a_program_has_its_own_pc_and_the_listing_is_whole(tmp_path):
    """A stride-2 layer is 9 jobs, of which the driver queues 2 at a time (two contexts): all 9
    are listed from the start, job k's pc is word k of the program window (0xF0001000 + 4k,
    reading k), a breakpoint there stops before job k, and the end is EMU_END (issue 25 #7, #8)."""
    from accelstub.stub.commands import execute

    app = build(LAYERS[3], seed=7).write(tmp_path / "s2")
    dev = open_device("ne16")
    server = StubServer([dev], gdb_port=None, telnet_port=None, tcl_port=None)
    server.load_program(app, log=lambda s: None)
    rc = server.targets[0]
    units = dev.units()
    assert len(dev.queue) == 2 and [u.label for u in units] == [f"job {k}" for k in range(9)]
    assert [u.address for u in units] == [0xF000_1000 + 4 * k for k in range(9)]
    assert all(f"(ID {k}, C{k % 2})" in u.summary for k, u in enumerate(units))
    assert [int.from_bytes(dev.read(u.address, 4), "little") for u in units] == list(range(9))
    rc.add_breakpoint(units[4].address)
    assert rc.run(60).reason == "breakpoint" and dev.units_done == 4 and dev.pc == 0xF000_1010
    lines = execute(server.context(rc=rc), "units").splitlines()
    assert [line for line in lines if line.startswith("=>")] == [
        f"=> 0xf0001010 job 4: {units[4].summary}"]
    stop = rc.run(60)
    assert stop.reason == "done" and dev.units_done == 9 and dev.pc == 0xF000_001C
    assert [u.address for u in dev.units()] == [u.address for u in units]
