"""The pytest plugin (accelstub.pytest_plugin), run in pytester sandboxes: registered through
the pytest11 entry point, the accelstub_session fixture from a marker and from indirect
parameters, on both back ends, cleanup when a test fails, and the failure artifacts."""
from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import numpy as np
import pytest

pytest_plugins = ["pytester"]
#: cacheprovider would write into the sandbox; textual-snapshot has nothing to do there
QUIET = ("-p", "no:cacheprovider", "-p", "no:textual-snapshot")


def run(pytester, *args: str):
    """An inner pytest run in its own process: pytester's in-process runs restore
    sys.modules afterwards, which would leave this process with two copies of every device
    module first imported inside them."""
    return pytester.runpytest_subprocess(*args, timeout=240)


def test_registered_through_the_entry_point():
    eps = [e for e in importlib.metadata.entry_points(group="pytest11") if e.name == "accelstub"]
    assert [e.value for e in eps] == ["accelstub.pytest_plugin"]


def test_loading_the_plugin_imports_nothing_heavy():
    code = ("import sys, accelstub.pytest_plugin; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'numba') "
            "or m.startswith('accelstub.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "['accelstub.pytest_plugin']"


PASSING = """
import pytest

@pytest.mark.accelstub(device="nvdla")
def test_marker(accelstub_session):
    assert accelstub_session.device == "nvdla"
    assert accelstub_session.run_to(1).reason == "breakpoint"

@pytest.mark.accelstub(device="max78000", remote=True)
def test_remote(accelstub_session):
    assert accelstub_session.address.startswith("127.0.0.1:")
    assert accelstub_session.cont().reason == "done"

@pytest.mark.parametrize("accelstub_session", ["ne16", {"device": "nvdla", "remote": True}],
                         indirect=True)
def test_indirect(accelstub_session):
    assert accelstub_session.device in ("ne16", "nvdla")
    assert accelstub_session.units()
"""


def test_fixture_from_marker_and_indirect_parameters(pytester):
    pytester.makepyfile(test_it=PASSING)
    result = run(pytester, *QUIET)
    result.assert_outcomes(passed=4)
    assert not (pytester.path / "arts").exists()


FAILING = """
import socket
import pytest

SEEN = []

@pytest.mark.accelstub(device="nvdla", remote=REMOTE)
def test_fails(accelstub_session):
    SEEN.append(accelstub_session)
    accelstub_session.add_breakpoint(1)
    accelstub_session.cont()
    assert accelstub_session.tensor(0).sum() == -1, "deliberately wrong"

def test_cleaned_up():
    s, = SEEN
    assert s._b is None  # closed by the fixture although the test failed
"""


@pytest.mark.parametrize("remote", [False, True])
def test_failure_writes_artifacts_and_cleans_up(pytester, remote):
    pytester.makepyfile(test_it=FAILING.replace("REMOTE", str(remote)))
    arts = pytester.path / "arts"
    result = run(pytester, *QUIET, f"--accelstub-artifacts={arts}")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*failure artifacts: *arts*test_fails*"])
    (where,) = list(arts.iterdir())
    assert "test_fails" in where.name
    assert sorted(p.name for p in where.iterdir()) == sorted(
        ["stop.txt", "status.json", "registers.txt", "reproduce.gdb", "tensors.npz"])
    stop = (where / "stop.txt").read_text()
    assert stop.startswith("reason: breakpoint\npc: 0xf0001004 (layer 1)")
    assert json.loads((where / "status.json").read_text())["stop"] == "breakpoint"
    regs = (where / "registers.txt").read_text()
    assert "===== accelstub host core" in regs and "pc (/32): 0xf0001004" in regs
    gdb = (where / "reproduce.gdb").read_text().splitlines()
    assert "monitor reset init" in gdb
    assert gdb.index("tbreak *0xf0001004") < gdb.index("continue") < \
        gdb.index("break *0xf0001004  # layer 1")
    assert any(line.startswith("target remote 127.0.0.1:") for line in gdb)
    with np.load(where / "tensors.npz") as npz:
        names = sorted(npz.files)
        assert names and all(n.startswith(("unit0_", "unit1_")) for n in names)
        assert "unit0_output" in names and npz["unit0_output"].ndim == 3


def test_artifacts_default_to_pytests_tmp(pytester):
    pytester.makepyfile(test_it=FAILING.replace("REMOTE", "False"))
    result = run(pytester, *QUIET,
                                f"--basetemp={pytester.path / 'base'}")
    result.assert_outcomes(passed=1, failed=1)
    arts = pytester.path / "base" / "accelstub-artifacts"
    (where,) = list(arts.iterdir())
    assert (where / "reproduce.gdb").is_file()


def test_a_test_without_a_device_is_a_usage_error(pytester):
    pytester.makepyfile(test_it="def test_x(accelstub_session):\n    pass\n")
    result = run(pytester, *QUIET)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*accelstub_session needs a device*"])
