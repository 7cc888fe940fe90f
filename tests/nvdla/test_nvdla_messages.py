"""NVDLA messages: the hardware version register reads as the ASCII it holds ("1", "00") in
every view (describe, target.xml for gdb and the TUI, gdb's `info registers`), and a trace
directory whose .cfg is empty, only comments or unreadable is refused naming the .cfg's problem,
not as "is a directory"."""
from __future__ import annotations

import os
import re

import pytest

from accelstub.devices import open_device
from accelstub.stub.cli import describe, main
from accelstub.stub.server import StubServer
from accelstub.stub.target_xml import target_xml
from accelstub.tui.target import parse_target_xml
from tests.helpers import run_gdb

REG = "GLB_S_NVDLA_HW_VERSION"


def test_hw_version_fields_are_ascii_in_the_description_describe_and_the_tui():
    """Reset 0x00303031 (V§4.3): bytes "1", "0", "0" in address order."""
    desc = open_device("nvdla").description
    reg = desc.register(REG)
    assert reg.reset == 0x00303031
    fields = {f.name: f for f in reg.fields}
    assert fields["major"].text_of(reg.reset) == '"1"'
    assert fields["minor"].text_of(reg.reset) == '"00"'
    line = next(ln for ln in describe(desc).splitlines() if REG in ln)
    assert line.endswith('minor[23:8] ro "00", major[7:0] ro "1"'), line
    tui = parse_target_xml(target_xml(desc)).register(REG)
    assert {f.name: f.describe(reg.reset) for f in tui.fields} == {"minor": '"00"', "major": '"1"'}


def test_gdb_info_registers_shows_the_version_characters():
    server = StubServer([open_device("nvdla")], gdb_port=0, telnet_port=None, tcl_port=None)
    server.start()
    try:
        out = run_gdb([f"info registers {REG}"], server.gdb[0].port)
    finally:
        server.stop()
    assert re.search(rf'{REG}\s+0x303031\s+\[ minor="00" major="1" \]', out), out


@pytest.mark.parametrize("kind, why", [
    ("empty", "empty file, not a trace (no reg_write, mem_init or mem_load command)"),
    ("comments", "only comments, not a trace (no reg_write, mem_init or mem_load command)"),
    ("dangling", "cannot read: No such file or directory"),
    ("fifo", None),
    ("directory", None),
])
def test_trace_directory_names_its_cfgs_problem(tmp_path, capsys, kind, why):
    d = tmp_path / "t1"
    d.mkdir()
    cfg = d / "t1.cfg"
    if kind == "empty":
        cfg.write_text("")
    elif kind == "comments":
        cfg.write_text("// a trace that lost its commands\n\n")
    elif kind == "dangling":
        cfg.symlink_to(tmp_path / "missing.cfg")
    elif kind == "fifo":
        os.mkfifo(cfg)
    else:
        cfg.mkdir()
    assert main(["run", "nvdla", "--program", str(d)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a directory, and" not in err[0], err
    if why is None:  # the shared reader's refusal of what is not a regular file, named
        assert err[0].startswith(f"accelstub: error: {cfg}") and \
            ("FIFO" if kind == "fifo" else "directory") in err[0], err
    else:
        assert err[0] == f"accelstub: error: {cfg}: {why}"
