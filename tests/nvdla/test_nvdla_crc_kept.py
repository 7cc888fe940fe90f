"""check_crc keeps the bytes that last passed (devices/nvdla/trace.py _check_crc, issue 31 #2):
the same bytes again pass without computing their CRC; any other bytes are checked by their CRC,
with the same PASS and FAIL lines as before; spans over CRC_KEPT_MAX are never kept."""
from __future__ import annotations

import tempfile
import zlib
from pathlib import Path

import pytest

from accelstub.devices import open_device
from accelstub.devices.nvdla import trace as T
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.commands import CommandContext
from accelstub.stub.program import load_program
from accelstub.testkit.nvdla_build import Conv, build


def _armed() -> RunControl:
    trace = build([Conv(9, 7, 16, 16, clip=3)], "crc_kept", seed=8).write(
        Path(tempfile.mkdtemp()) / "t")
    rc = RunControl(open_device("nvdla"))
    load_program(CommandContext([rc]), trace)
    return rc


def _crc_step(rc: RunControl):
    steps = [s for s in rc.host.steps if getattr(s, "check", None) is not None
             and getattr(s.check, "func", None) is T._check_crc]
    assert len(steps) == 1
    return steps[0]


@pytest.fixture
def crc_calls(monkeypatch) -> list[int]:
    """The sizes of the CRCs computed through trace.zlib.crc32 while the test runs."""
    calls: list[int] = []
    real = zlib.crc32

    def counting(data, *rest):
        calls.append(len(data))
        return real(data, *rest)

    monkeypatch.setattr(T.zlib, "crc32", counting)
    return calls


def test_the_bytes_that_passed_pass_again_without_their_crc_and_others_are_checked(crc_calls):
    rc = _armed()
    crc_calls.clear()  # the trace builder's own CRC
    step = _crc_step(rc)
    size, address = step.check.keywords["size"], step.check.keywords["address"]
    armed = rc.checkpoint()
    lines = []
    for run in range(3):
        rc.rewind(armed)
        assert rc.run_here().reason == "done" and rc.host.ok
        lines.append([r.line for r in rc.host.results])
        assert crc_calls == [size], f"run {run}: CRCs computed {crc_calls}"  # the first only
    assert lines[0] == lines[1] == lines[2]
    assert any(line.startswith("check_crc(") and ": PASS" in line for line in lines[0])
    good = zlib.crc32(rc.device.read(address, size)) & 0xFFFFFFFF
    first = rc.device.read(address, 1)[0]
    rc.device.write(address, bytes([first ^ 1]))  # other bytes: their CRC, and a FAIL
    bad = zlib.crc32(rc.device.read(address, size)) & 0xFFFFFFFF
    crc_calls.clear()
    result = step.check(rc.host)
    assert len(crc_calls) == 1 and not result.ok
    assert f"FAIL (expected {good:#010x}, got {bad:#010x})" in result.line
    assert result == step.check(rc.host)  # a FAIL is not kept: computed again
    assert len(crc_calls) == 2
    rc.device.write(address, bytes([first]))  # the bytes that passed: no CRC
    crc_calls.clear()
    assert step.check(rc.host).ok and crc_calls == []


def test_a_span_over_the_kept_limit_computes_its_crc_on_every_run(crc_calls, monkeypatch):
    monkeypatch.setattr(T, "CRC_KEPT_MAX", 0)
    rc = _armed()
    crc_calls.clear()  # the trace builder's own CRC
    step = _crc_step(rc)
    armed = rc.checkpoint()
    for run in range(1, 3):
        rc.rewind(armed)
        assert rc.run_here().reason == "done" and rc.host.ok
        assert len(crc_calls) == run
    assert step.check.keywords["kept"] == [None]
