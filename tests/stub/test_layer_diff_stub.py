"""The per-layer diff's front ends (issue 27 points 1 and 3): ``accelstub diff`` (lines, exit
codes, --json, --all), ``monitor diff load|clear`` and ``diff`` through the one command table,
and Session.diff on both back ends (remote: a StubServer on a free 127.0.0.1 port, over the GDB
remote protocol's qRcmd and continue), on a MAX78000 network the project builds."""
from __future__ import annotations

import json

import numpy as np
import pytest

from accelstub import Session
from accelstub.devices import open_device
from accelstub.stub import commands
from accelstub.stub.cli import main
from accelstub.stub.server import StubServer
from accelstub.testkit import max78000_build as mb

NET = mb.Network(3, 8, 8, [mb.Layer(8, activation="relu", shift=-1, bias=True),
                           mb.Layer(6, kernel=1, pad=0, shift=-2, bias=True),
                           mb.Layer(4, kernel=1, pad=0, wide=True)])


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    root = tmp_path_factory.mktemp("diffnet")
    x, ws, bs = mb.random_arrays(NET, seed=2)
    proj = mb.build(NET, x, ws, bs)
    proj.write(root / "clean")
    np.savez(root / "ref.npz", **{str(i): o for i, o in enumerate(proj.outputs)})
    bs = [b.copy() for b in bs[:2]] + bs[2:]
    bs[1][0] = 127 if bs[1][0] != 127 else -128  # layer 1's bias corrupted
    mb.build(NET, x, ws, bs).write(root / "bad")
    return root


def test_cli_clean_exit_0_with_json(net, tmp_path, capsys):
    out = tmp_path / "d.json"
    assert main(["diff", "max78000", "--program", str(net / "clean"), "--reference",
                 str(net / "ref.npz"), "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and all(line.endswith("equal") for line in lines[:3])
    data = json.loads(out.read_text())
    assert data["first_divergence"] is None and [d["index"] for d in data["layers"]] == [0, 1, 2]
    assert set(data["layers"][0]) >= {"index", "label", "reference", "shape", "differing",
                                      "max_abs_diff", "first_index"}


def test_cli_divergence_exit_1_stops_unless_all(net, capsys):
    args = ["diff", "max78000", "--program", str(net / "bad"), "--reference",
            str(net / "ref.npz")]
    assert main(args) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and "DIVERGES" in lines[1] and lines[1].split()[0] == "1"
    assert main(args + ["--all"]) == 1
    assert len(capsys.readouterr().out.splitlines()) == 4


def test_cli_bad_reference_exit_2_one_line(net, tmp_path, capsys):
    bad = tmp_path / "x.npz"
    np.savez(bad, **{"7": np.zeros(3)})
    assert main(["diff", "max78000", "--program", str(net / "clean"), "--reference",
                 str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "x.npz" in err and "key '7'" in err


@pytest.mark.parametrize("cmd", ["run", "diff"])
def test_cli_without_program_and_without_a_demo_exit_2_one_line(cmd, net, monkeypatch, capsys):
    """run and diff take the bundled demo when no --program is given (stub/cli.py
    _dispatch); a device without one is one line naming the device, exit 2, nothing run."""
    from accelstub.stub import cli

    monkeypatch.setattr(cli, "demo_program", lambda device: None)
    extra = ["--reference", str(net / "ref.npz")] if cmd == "diff" else []
    assert main([cmd, "max78000", *extra]) == 2
    out = capsys.readouterr()
    assert out.err == "accelstub: error: max78000 has no bundled demo: give --program\n"
    assert out.out == ""


def test_monitor_diff_load_continue_stops_at_divergence_and_table(net):
    server = StubServer([open_device("max78000")], gdb_port=None, telnet_port=None,
                        tcl_port=None)
    server.load_program(net / "bad", log=lambda s: None)
    rc = server.targets[0]
    ctx = server.context(log=lambda s: None, rc=rc)
    with pytest.raises(commands.CommandError, match="no reference loaded"):
        commands.execute(ctx, "diff")
    assert "3 layers referenced" in commands.execute(ctx, f"diff load {net / 'ref.npz'}")
    stop = rc.run_here()
    assert stop.reason == "breakpoint" and "DIVERGES" in stop.message
    table = commands.execute(ctx, "diff")
    assert "first divergence at layer 1" in table
    assert json.loads(commands.execute(ctx, "json diff"))["first_divergence"] == 1
    assert commands.execute(ctx, "diff clear") == "diff: cleared"
    assert json.loads(commands.execute(ctx, "json diff"))["loaded"] is False


@pytest.mark.parametrize("backend", ["in-process", "remote"])
def test_session_diff_on_both_back_ends(net, backend):
    server = None
    if backend == "in-process":
        s = Session.open("max78000", net / "bad")
    else:
        server = StubServer([open_device("max78000")], host="127.0.0.1", gdb_port=0,
                            telnet_port=None, tcl_port=None)
        server.load_program(net / "bad", log=lambda s: None)
        server.start()
        s = Session.connect(f"127.0.0.1:{server.gdb[0].port}", timeout=10.0)
    try:
        report = s.diff(net / "ref.npz")
        assert report.first_divergence == 1 and report.stop.reason == "breakpoint"
        assert [d.index for d in report.layers] == [0, 1] and report.layers[1].diverges
        assert report.layers[1].first_index is not None
        assert s.diff().first_divergence == 1  # the table so far, nothing run
    finally:
        s.close()
        if server is not None:
            server.stop()


def test_gdb_monitor_diff_load_then_continue_stops_at_the_divergence(net):
    """A real gdb-multiarch: ``monitor diff load`` then ``continue`` halts after layer 1 (its
    bias corrupted) with the diff line printed, and ``monitor diff`` prints the table."""
    from tests.helpers import require_gdb, run_gdb

    require_gdb()
    server = StubServer([open_device("max78000")], host="127.0.0.1", gdb_port=0,
                        telnet_port=None, tcl_port=None)
    server.load_program(net / "bad", log=lambda s: None)
    server.start()
    try:
        layer2 = server.targets[0].device.units()[2].address
        out = run_gdb([f"monitor diff load {net / 'ref.npz'}", "continue", "p/x $pc",
                       "monitor diff"], server.gdb[0].port)
        assert "accelstub: diff: Layer 1 diverges from ref.npz:" in out, out
        assert "DIVERGES" in out and "Program received signal SIGTRAP" in out, out
        assert f"$1 = {layer2:#x}" in out, out  # halted after layer 1, before layer 2
        assert "first divergence at layer 1" in out, out
    finally:
        server.stop()
