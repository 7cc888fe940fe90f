"""`accelstub compile` names each kernel it compiled, with its time (issue 31 #5), and compiles
the parallel kernels of the demos' types beside the serial ones the demos ran."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from accelstub.emu.conv.vnni import HAVE_VNNI
from accelstub.stub import precompile


def test_each_kernel_compiled_gets_a_line_with_its_time(tmp_path):
    mark = precompile.KERNEL_MARK
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\n"
                    f"echo '{mark} start accelstub.emu.conv.max78000 conv2d' >&2\n"
                    f"echo '{mark} end accelstub.emu.conv.max78000 conv2d 0.71' >&2\n"
                    f"echo '{mark} start accelstub.emu.pool.max78000 pool_hwc' >&2\n"
                    f"echo '{mark} end accelstub.emu.pool.max78000 pool_hwc 1.25' >&2\n"
                    "echo PASS\n")
    fake.chmod(0o755)
    lines: list[str] = []
    assert precompile.compile_devices(["max78000"], python=str(fake), say=lines.append) == 0
    assert lines[1:3] == ["accelstub: max78000: compiled conv.max78000.conv2d in 0.7 s",
                          "accelstub: max78000: compiled pool.max78000.pool_hwc in 1.2 s"]
    assert lines[3].startswith("accelstub: max78000: done in ") and \
        lines[3].endswith("(2 kernels compiled)")
    assert lines[4].startswith("accelstub: kernels compiled in ")


@pytest.mark.slow
def test_compile_compiles_the_serial_kernels_the_demo_runs_and_their_parallel_twins(tmp_path):
    """In an empty cache: the NE16 demo's layers are small, so it runs (and compiles) the
    serial convolution kernel; compile then compiles the parallel one for the same types, so
    a larger job's first run finds it in the cache."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-m", "accelstub.stub.cli", "compile", "ne16"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    prefix = "accelstub: ne16: compiled "
    compiled = [line.removeprefix(prefix).split(" in ")[0]
                for line in out.stdout.splitlines() if line.startswith(prefix)]
    kernel = "_vnni_conv" if HAVE_VNNI else "_conv_blocks"
    assert f"conv.int_conv.{kernel}_serial" in compiled
    assert f"conv.int_conv.{kernel}" in compiled
    assert compiled.index(f"conv.int_conv.{kernel}_serial") < \
        compiled.index(f"conv.int_conv.{kernel}")


def test_one_child_compiles_for_every_device(tmp_path, monkeypatch):
    """compile_devices starts one child process for all the devices given (not one per
    device: each would start Python, numba and accelstub and compile the shared kernels
    again), which it names in its lines."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho PASS\n")
    fake.chmod(0o755)
    started = []
    popen = subprocess.Popen

    def recording(args, **kwargs):
        started.append(args[args.index("accelstub.stub.precompile") + 1:])
        return popen(args, **kwargs)

    monkeypatch.setattr(precompile.subprocess, "Popen", recording)
    devices = ["nvdla", "max78000", "ne16", "ethos-u85"]
    lines: list[str] = []
    assert precompile.compile_devices(devices, python=str(fake), say=lines.append) == 0
    assert started == [devices]
    assert lines[-2].startswith("accelstub: all devices: done in ")


def test_the_queue_holds_each_kernel_once_longest_first_then_the_planless_demos(monkeypatch):
    """queue_for: the executor (AHEAD) first, every device's plan, the executor's kernels and
    the plans' parallel twins once each, longest first (a TOGETHER set at its own figure, its
    kernels side by side in its order), then the demos of the devices without a plan (whose
    kernels only a run names): every bundled device has a plan, so none by default."""
    import dataclasses

    from accelstub import devices
    from accelstub.devices import device_spec
    from accelstub.emu.kernel_plan import CALL

    queue = precompile.queue_for(["max78000", "ethos-u85", "ne16", "nvdla"])
    assert queue[0][:3] == precompile.AHEAD["ethos-u85"][0][:3]
    kernels = queue[1:]
    assert len({e[:3] for e in kernels}) == len(kernels)
    sets = {f: seconds for functions, seconds in precompile.TOGETHER.values()
            for f in functions}
    figures = [sets.get((e[0], e[1]), e[3]) for e in kernels]
    assert figures == sorted(figures, reverse=True)
    names = [(e[0], e[1]) for e in kernels]
    for functions, _ in precompile.TOGETHER.values():
        at = names.index(functions[0])
        assert names[at:at + len(functions)] == list(functions)
    for device in ("max78000", "ethos-u85", "ne16", "nvdla"):
        assert {e[:3] for e in device_spec(device).kernel_plan} <= {e[:3] for e in kernels}
    assert not any(e[2].startswith(CALL) for e in kernels)
    planless = dataclasses.replace(device_spec("nvdla"), kernel_plan=())
    monkeypatch.setattr(devices, "device_spec",
                        lambda d: planless if d == "nvdla" else device_spec(d))
    queue = precompile.queue_for(["max78000", "nvdla", "ne16"])
    assert [e[2] for e in queue if e[2].startswith(CALL)] == [f"{CALL}demo nvdla"]
    assert queue[-1][2] == f"{CALL}demo nvdla"


def test_the_compile_child_queues_the_together_sets(monkeypatch):
    """The child gives compile_plan its queue and TOGETHER (each set one job)."""
    from accelstub.emu import kernel_plan
    from accelstub.stub import cli

    got = {}
    monkeypatch.setattr(kernel_plan, "compile_plan",
                        lambda plan, **kw: got.setdefault("first", kw) and [])
    monkeypatch.setattr(cli, "main", lambda argv: 0)
    monkeypatch.setattr(precompile, "_DEMOS", {})
    assert precompile._child(["ethos-u85"]) == 0
    assert got["first"]["together"] == {
        f: name for name, (functions, _) in precompile.TOGETHER.items() for f in functions}
    assert got["first"]["then"] == precompile.queue_for(["ethos-u85"])


@pytest.mark.slow
def test_after_one_compile_of_all_devices_a_later_process_loads_every_kernel(tmp_path):
    """`accelstub compile`'s child for every device in an empty cache, with its one worker:
    every demo passes, and a later process finds every kernel of the queue (plans, the
    executor's kernels, parallel twins) for this machine in the disk cache: no miss."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    devices = ["max78000", "ethos-u85", "ne16", "nvdla"]
    out = subprocess.run([sys.executable, "-m", "accelstub.stub.precompile", *devices],
                         env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("PASS") >= len(devices)
    later = subprocess.run([sys.executable, "-c", LOADS, *devices], env=env,
                           capture_output=True, text=True, timeout=600)
    assert later.returncode == 0, later.stderr
    assert later.stdout.splitlines()[-1] == "missing: []", later.stdout


#: loads each non-CALL entry of the queue this machine calls from the cache; prints misses
LOADS = """
import sys
from accelstub.emu.kernel_plan import CALL, for_this_machine, kernel, load_cached
from accelstub.stub.precompile import queue_for
print("missing:", [e[:2] for e in for_this_machine(queue_for(sys.argv[1:]))
                   if not e[2].startswith(CALL) and not load_cached(kernel(e[0], e[1]), e[2])])
"""


@pytest.mark.slow
def test_compile_compiles_the_ethos_u85_executor_once_and_names_it(tmp_path):
    """`accelstub compile`'s Ethos-U85 child in an empty cache: the block executor (run_rows,
    which its demo never calls) is compiled once, by one of its two processes, with its line;
    so is each kernel of the plan that nothing compiled inside another one first."""
    from accelstub.devices import device_spec
    from accelstub.emu.kernel_plan import for_this_machine

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-m", "accelstub.stub.precompile", "ethos-u85"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("PASS")
    ended = [tuple(line.split()[2:4]) for line in out.stderr.splitlines()
             if line.startswith(f"{precompile.KERNEL_MARK} end ")]
    assert ended.count(("accelstub.emu.executor.ethosu85", "run_rows")) == 1
    # the largest kernels of the plan call none of the others: each has its line
    assert {(e[0], e[1]) for e in for_this_machine(device_spec("ethos-u85").kernel_plan)
            if e[3] >= 1.0 and e[4] != "vnni"} <= set(ended)
    # a later process (a first replay) finds the executor and every kernel it calls through
    # their addresses in the cache: nothing compiles (issue 32 #3: they are queued, not
    # compiled inside run_rows)
    later = subprocess.run([sys.executable, "-c", READY], env=env, capture_output=True,
                           text=True, timeout=600)
    assert later.returncode == 0, later.stderr
    assert later.stdout.split()[-1] == "0", later.stdout


#: the executor's compiled code as a first replay loads it; prints the cache misses
READY = """
from accelstub.emu.executor import ethosu85 as X
X.compile_ahead()
X.addresses()
used = [X.run_rows] + [k[0 if X.BYTE_KERNELS else 1] for _, *k in X.SLOTS]
print(sum(sum(d.stats.cache_misses.values()) for d in used if d is not None))
"""
