"""The first run after install: the demos ship in the package, `run` defaults to them, and
`accelstub compile` runs them so their kernels are compiled before a user waits for them."""
from __future__ import annotations

import glob
import tomllib
from pathlib import Path

import pytest

import accelstub.configs
from accelstub.stub.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = Path(accelstub.configs.__file__).parent


def test_every_demo_file_is_package_data():
    """A non-editable install copies only what pyproject's package-data globs match (as
    setuptools expands them, with glob): NE16's demo keeps its files two folders down
    (gen/inc, gen/src) and was left out of installed packages."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["accelstub.configs"]
    shipped = {p for pat in patterns for p in glob.glob(pat, root_dir=CONFIGS)
               if (CONFIGS / p).is_file()}
    demo_files = {str(p.relative_to(CONFIGS)) for p in (CONFIGS / "demo").rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts}
    assert demo_files and demo_files <= shipped, sorted(demo_files - shipped)


def test_run_without_program_runs_the_bundled_demo(capsys):
    assert main(["run", "nvdla"]) == 0
    out = capsys.readouterr().out
    assert "check_crc(sync_id_0)" in out and "PASS" in out and "FAIL" not in out


@pytest.mark.slow
def test_compile_runs_the_named_devices_demos(capsys):
    assert main(["compile", "nvdla", "ne16"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "accelstub: compiling kernels for nvdla, ne16 (one process and a worker)"
    done = [line for line in out if ": done in " in line]
    assert [line.split(":")[1].strip() for line in done] == ["nvdla, ne16"]
    assert out[-1].startswith("accelstub: kernels compiled in ") and "failed" not in out[-1]


def test_compile_refuses_an_unknown_device(capsys):
    with pytest.raises(SystemExit) as e:
        main(["compile", "nvdla", "tpu"])
    assert e.value.code == 2
    assert "compile: unknown device 'tpu' (choose from max78000, ethos-u85, ne16, nvdla)" in \
        capsys.readouterr().err


def test_compile_reports_a_demo_that_fails_with_its_output(tmp_path, capsys):
    from accelstub.stub.precompile import compile_devices

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'accelstub: error: something broke'\nexit 3\n")
    fake.chmod(0o755)
    assert compile_devices(["nvdla"], python=str(fake)) == 1
    captured = capsys.readouterr()
    assert ("accelstub: nvdla: a bundled demo failed (exit 3):\n"
            "accelstub: error: something broke") in captured.err
    assert captured.out.splitlines()[-1].endswith("; a device failed")


def test_the_compile_child_names_the_device_whose_demo_failed(monkeypatch, capsys):
    """One child compiles for every device given: its own line says which demo failed."""
    from accelstub.emu import kernel_plan
    from accelstub.stub import cli, precompile

    monkeypatch.setattr(kernel_plan, "compile_plan", lambda *a, **k: [])
    monkeypatch.setattr(cli, "main", lambda argv: 3 if argv == ["run", "ne16"] else 0)
    monkeypatch.setattr(precompile, "_DEMOS", {})
    assert precompile._child(["nvdla", "ne16"]) == 1
    err = capsys.readouterr().err
    assert "accelstub: ne16: the bundled demo failed (exit 3)" in err
    assert "nvdla: the bundled demo failed" not in err


def test_a_demo_that_fails_in_the_compile_worker_raises_there_and_not_in_the_child(
        monkeypatch):
    """In the forked worker a failed demo raises (the worker then reports no such job, and
    compile_plan runs it again in the child); in the child it is recorded, to be named."""
    from accelstub.emu import kernel_plan
    from accelstub.stub import cli, precompile

    monkeypatch.setattr(cli, "main", lambda argv: 3 if argv == ["run", "ne16"] else 0)
    monkeypatch.setattr(precompile, "_DEMOS", {})
    monkeypatch.setattr(kernel_plan, "_WORKER", [True])
    precompile.demo("nvdla")  # passed: no error, in a worker too
    with pytest.raises(RuntimeError, match="ne16: the bundled demo failed"):
        precompile.demo("ne16")
    monkeypatch.setattr(precompile, "_DEMOS", {})
    monkeypatch.setattr(kernel_plan, "_WORKER", [False])
    precompile.demo("ne16")
    assert precompile._DEMOS == {"ne16": 3}


def test_a_plan_that_compiled_has_its_garbage_collected_before_the_start_up_freeze(
        monkeypatch):
    """stub/cli.py _compile_plan: where the kernel plan compiled anything (compile_plan names
    what was not cached), numba's cyclic garbage is collected before the run's or the server's
    start-up freezes all that is alive (numba_start.collector_paused); a warm plan (nothing
    compiled) pays no collection."""
    from accelstub.emu import kernel_plan
    from accelstub.stub import cli

    collected = []
    monkeypatch.setattr(cli.gc, "collect", lambda *a: collected.append(a) or 0)
    for compiled, want in (([("m", "f", "()", 1.0, "")], 1), ([], 0)):
        collected.clear()
        monkeypatch.setattr(kernel_plan, "compile_plan", lambda plan, compiled=compiled: compiled)
        cli._compile_plan("max78000")
        assert len(collected) == want, compiled


@pytest.mark.parametrize("mib, history", [(None, True), ("0", False)])
def test_serve_compiles_the_history_kernels_with_its_plan_where_it_records(monkeypatch, mib,
                                                                          history):
    """`accelstub serve` records reverse-execution history (--history-mib, default 256), so
    the plan it has compiled before it says it is ready holds the history's kernels
    (device.HISTORY_PLAN) beside the device's: a first `continue` then compiles none (5.4 s on
    the MAX78000 demo before). With --history-mib 0 it records nothing and they are left out."""
    from accelstub.devices import device_spec
    from accelstub.devices.device import HISTORY_PLAN
    from accelstub.emu import kernel_plan
    from accelstub.stub import cli

    plans = []
    monkeypatch.setattr(kernel_plan, "compile_plan", lambda plan: plans.append(plan) or [])
    monkeypatch.setattr(cli, "_serve_until_stopped", lambda args: 0)
    assert cli.main(["serve", "max78000", *(["--history-mib", mib] if mib else [])]) == 0
    want = device_spec("max78000").kernel_plan + (HISTORY_PLAN if history else ())
    assert plans == [want]
