"""`accelstub compile` names each kernel it compiled, with its time (issue 31 #5), and compiles
the parallel kernels of the demos' types beside the serial ones the demos ran."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

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
    serial convolution kernel; compile also compiles the parallel one for the same types, so
    a larger job's first run finds it in the cache. The serial one first: the pair is one
    queue job (stub/precompile.py TOGETHER), whose serial twin compiles the body both call
    (emu/ranged.py)."""
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


def test_queued_kernels_that_share_a_ranged_body_are_one_together_set():
    """Two queued kernels that call one emu/ranged.py body (a parallel twin and its serial
    twin; a thin parallel wrapper and the body it calls, itself a plan entry: NVDLA's
    post_process, NE16's normquant) are one TOGETHER set, the one that compiles the body
    (the serial one) first: queued apart, both processes would compile the body (~0.5-2 s
    each). TOGETHER lists the sets by hand; this keeps it complete."""
    from accelstub.emu.kernel_plan import kernel

    names = {(e[0], e[1]) for e in precompile.queue_for(["max78000", "ethos-u85", "ne16",
                                                           "nvdla"])
             if not e[1].startswith("demo ")} - {e[:2] for e in precompile.AHEAD["ethos-u85"]}
    by_body: dict = {}
    for m, n in names:
        d = kernel(m, n)
        for body in getattr(d, "ranged_kernels", ()) or (d,):
            by_body.setdefault(body, []).append((bool(d.targetoptions.get("parallel")), (m, n)))
    sets = {f: (name, i) for name, (functions, _) in precompile.TOGETHER.items()
            for i, f in enumerate(functions)}
    shared = [sorted(users) for users in by_body.values() if len(users) > 1]
    assert len(shared) >= 6  # 4 twins (the byte one: 2 bodies), post_process, normquant
    for users in shared:
        (_, first), *rest = users  # the serial one first
        for _, other in rest:
            assert first in sets and other in sets, (first, other)
            assert sets[first][0] == sets[other][0] and sets[first][1] < sets[other][1]


def test_the_queue_holds_each_kernel_once_longest_first_then_every_demo(monkeypatch):
    """queue_for: the executor (AHEAD) first, every device's plan, the executor's kernels and
    the plans' parallel twins once each, longest first (a TOGETHER set at its own figure, its
    kernels side by side in its order), then every device's demo run, each once, after all
    kernels: those of devices without a plan (whose kernels only a run names) first, then by
    the place of the last kernel their run needs, earliest first."""
    import dataclasses

    from accelstub import devices
    from accelstub.devices import device_spec
    from accelstub.emu.kernel_plan import CALL

    every = ["max78000", "ethos-u85", "ne16", "nvdla"]
    queue = precompile.queue_for(every)
    assert queue[0][:3] == precompile.AHEAD["ethos-u85"][0][:3]
    demos = [e for e in queue if e[1].startswith("demo ")]
    kernels = queue[1:len(queue) - len(demos)]
    assert queue[len(queue) - len(demos):] == demos
    assert len({e[:3] for e in kernels}) == len(kernels)
    sets = {f: seconds for functions, seconds in precompile.TOGETHER.values()
            for f in functions}
    figures = [sets.get((e[0], e[1]), e[3]) for e in kernels]
    assert figures == sorted(figures, reverse=True)
    names = [(e[0], e[1]) for e in kernels]
    for functions, _ in precompile.TOGETHER.values():  # side by side, a function's
        at = names.index(functions[0])                  # signatures together, in set order
        block = [n for n in names if n in functions]
        assert names[at:at + len(block)] == sorted(block, key=functions.index)
    for device in every:
        assert {e[:3] for e in device_spec(device).kernel_plan} <= {e[:3] for e in kernels}
    assert not any(e[2].startswith(CALL) for e in kernels)
    assert sorted(e[2] for e in demos) == sorted(f"{CALL}demo_when_ready {d}" for d in every)
    place = {e[:3]: i for i, e in enumerate(queue)}
    last = [max(place[e[:3]] for e in precompile._run_plan(e[1].removeprefix("demo ")))
            for e in demos]
    assert last == sorted(last)
    planless = dataclasses.replace(device_spec("nvdla"), kernel_plan=())
    monkeypatch.setattr(devices, "device_spec",
                        lambda d: planless if d == "nvdla" else device_spec(d))
    queue = precompile.queue_for(["max78000", "nvdla", "ne16"])
    assert queue[-3][2] == f"{CALL}demo_when_ready nvdla"  # planless: first of the demos
    assert {e[1] for e in queue[-2:]} == {"demo max78000", "demo ne16"}


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
missing = [e[:2] for e in for_this_machine(queue_for(sys.argv[1:]))
           if not e[2].startswith(CALL) and not load_cached(kernel(e[0], e[1]), e[2])]
if "ethos-u85" in sys.argv[1:]:  # the executor's CALL entry (compiled at kernel_plan.OPT_LEVELS')
    from accelstub.emu.executor import ethosu85 as X
    X.compile_ahead()
    missing += [("executor", "run_rows")] * sum(X.run_rows.stats.cache_misses.values())
print("missing:", missing)
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


def test_a_queued_demo_runs_when_its_kernels_are_cached_and_else_waits_for_the_child(
        monkeypatch):
    """demo_when_ready, a demo as a job of the queue: it runs when its run's plan is all in
    the cache (or the device has no plan); when a kernel it needs is still compiling (not in
    the cache), the child leaves it for its loop after the queue and the forked worker
    raises (it then stops and does not report the job, which compile_plan leaves to the
    child)."""
    import dataclasses

    from accelstub import devices
    from accelstub.devices import device_spec
    from accelstub.emu import kernel_plan
    from accelstub.stub import cli

    ran = []
    monkeypatch.setattr(cli, "main", lambda argv: ran.append(argv[1]) or 0)
    monkeypatch.setattr(precompile, "_DEMOS", {})
    cached = {"nvdla": True, "ne16": False}
    monkeypatch.setattr(precompile, "_plan_ready", cached.__getitem__)
    for worker in (False, True):
        monkeypatch.setattr(kernel_plan, "_WORKER", [worker])
        precompile.demo_when_ready("nvdla")
        if worker:
            with pytest.raises(precompile._NotReady, match="ne16"):
                precompile.demo_when_ready("ne16")
        else:
            precompile.demo_when_ready("ne16")
    assert ran == ["nvdla"] and precompile._DEMOS == {"nvdla": 0}
    planless = dataclasses.replace(device_spec("ne16"), kernel_plan=())
    monkeypatch.setattr(devices, "device_spec",
                        lambda d: planless if d == "ne16" else device_spec(d))
    precompile.demo_when_ready("ne16")  # no plan: its run compiles what it needs
    assert ran == ["nvdla", "ne16"]


def test_a_demos_kernels_are_ready_only_when_all_its_runs_plan_loads(monkeypatch):
    """_plan_ready asks the disk cache (or this process) for every entry of the run's plan
    for this machine, AHEAD entries left out (a run interprets or compiles those itself)."""
    from accelstub.emu import kernel_plan

    plan = precompile._run_plan("ethos-u85")
    assert plan and all(e[4] != kernel_plan.AHEAD for e in plan)
    asked = []
    monkeypatch.setattr(kernel_plan, "kernel", lambda m, n: (m, n))
    monkeypatch.setattr(kernel_plan, "load_cached", lambda k, sig: asked.append((*k, sig)) or True)
    assert precompile._plan_ready("ethos-u85")
    assert asked == [e[:3] for e in plan]
    missing = plan[-1][:3]
    monkeypatch.setattr(kernel_plan, "load_cached", lambda k, sig: (*k, sig) != missing)
    assert not precompile._plan_ready("ethos-u85")


#: the child's queue of demo jobs (its kernels left out), run by _child in a fresh process (no
#: thread but the main one: compile_plan forks its worker) with each demo run faked: it
#: sleeps (so the other process takes the next job meanwhile) and records its device and
#: process; the last queued demo's kernels are never ready while the queue runs
DEMO_QUEUE = """
import json, os, sys, time
from accelstub.emu.conv import int_conv
from accelstub.stub import cli, precompile
every, log = ["max78000", "ethos-u85", "ne16", "nvdla"], sys.argv[1]
demos = [e for e in precompile.queue_for(every) if e[1].startswith("demo ")]
late = demos[-1][1].removeprefix("demo ")
def run(argv):
    time.sleep(0.5)
    with open(log, "a") as f:
        f.write(f"{argv[1]} {os.getpid()}\\n")
    return 0
cli.main = run
precompile.queue_for = lambda devices: demos
precompile._plan_ready = lambda d: d != late
int_conv.parallel_twin_plan = lambda: []
code = precompile._child(every)
print(json.dumps(dict(code=code, late=late, pid=os.getpid(), demos=precompile._DEMOS)))
"""


def test_queued_demos_run_in_both_processes_once_each_one_not_ready_in_the_child_after(
        tmp_path):
    """The child's queue of demo jobs in its process and the forked worker: each demo runs
    once; the one whose kernels are not ready while the queue runs (the last queued) runs in
    the child after the queue, whichever process took it; the worker runs others (both
    processes take jobs); every demo is recorded as passed and the child's code is 0."""
    from accelstub.emu import kernel_plan

    if kernel_plan.cores() < 2:
        pytest.fail("this test needs a second core: on one, compile_plan forks no worker")
    log = tmp_path / "ran"
    out = subprocess.run([sys.executable, "-c", DEMO_QUEUE, str(log)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    every = ["max78000", "ethos-u85", "ne16", "nvdla"]
    runs = [line.split() for line in log.read_text().splitlines()]
    assert sorted(device for device, _ in runs) == sorted(every)  # each once
    ran = dict(runs)
    assert ran[got["late"]] == str(got["pid"])
    assert len(set(ran.values())) == 2  # the worker ran some
    assert got["code"] == 0 and got["demos"] == dict.fromkeys(every, 0)


def test_the_child_compiles_with_the_collector_off_and_turns_it_back_on(monkeypatch):
    """The child's queue and demos run with CPython's cyclic collector off (its processes end
    right after: their compile garbage is freed then); on again afterwards, also when a step
    fails."""
    import gc

    from accelstub.emu import kernel_plan
    from accelstub.stub import cli

    seen = []
    monkeypatch.setattr(kernel_plan, "compile_plan",
                        lambda plan, **kw: seen.append(gc.isenabled()) and [])
    monkeypatch.setattr(cli, "main", lambda argv: seen.append(gc.isenabled()) and 0)
    monkeypatch.setattr(precompile, "_DEMOS", {})
    assert gc.isenabled()
    assert precompile._child(["nvdla"]) == 0
    assert seen == [False, False, False]  # the queue, the demo, the parallel twins
    assert gc.isenabled()

    def broken(argv):
        raise ValueError("a broken demo")

    monkeypatch.setattr(cli, "main", broken)
    monkeypatch.setattr(precompile, "_DEMOS", {})
    with pytest.raises(ValueError):
        precompile._child(["nvdla"])
    assert gc.isenabled()


def test_the_child_ends_with_its_output_flushed_and_its_code(monkeypatch):
    """precompile._exit: both streams flushed, then os._exit with the child's code (no
    interpreter exit: nothing is left to do)."""
    flushed = []

    class Stream:
        def __init__(self, name):
            self.name = name

        def flush(self):
            flushed.append(self.name)

    class Exited(Exception):
        pass

    def exit_now(code):
        raise Exited(code)

    monkeypatch.setattr(sys, "stdout", Stream("stdout"))
    monkeypatch.setattr(sys, "stderr", Stream("stderr"))
    monkeypatch.setattr(precompile.os, "_exit", exit_now)
    with pytest.raises(Exited) as e:
        precompile._exit(3)
    assert e.value.args == (3,) and sorted(flushed) == ["stderr", "stdout"]


def test_the_parent_returns_as_the_child_exits_not_a_look_later(tmp_path, monkeypatch):
    """compile_devices waits on the child between its looks at the output: with a look only
    every 60 s, a child that exits at once is still seen at once, its lines all printed."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\n"
                    f"echo '{precompile.KERNEL_MARK} end accelstub.emu.conv.ne16 normquant "
                    "0.40' >&2\necho PASS\n")
    fake.chmod(0o755)
    monkeypatch.setattr(precompile, "POLL_S", 60.0)
    lines: list[str] = []
    t0 = time.monotonic()
    assert precompile.compile_devices(["ne16"], python=str(fake), say=lines.append) == 0
    assert time.monotonic() - t0 < 30.0
    assert lines[1] == "accelstub: ne16: compiled conv.ne16.normquant in 0.4 s"


#: compile_devices in a fresh `accelstub`-like process (numba not imported, one thread) with
#: _child faked (it prints what the real one prints and returns the code given) and no new
#: process allowed: its lines, code and the child's pid as JSON; its messages on stderr
FORKED = """
import json, os, sys, subprocess
from accelstub.stub import precompile
mode = sys.argv[1]
def fake_child(devices):
    print(f"{precompile.KERNEL_MARK} end accelstub.emu.conv.ne16 normquant 0.40", file=sys.stderr)
    print(f"PASS {os.getpid()} {' '.join(devices)}")
    if mode == "raise":
        raise ValueError("a broken child")
    return 3 if mode == "fail" else 0
def no_exec(*args, **kwargs):
    raise AssertionError("a new process was started")
precompile._child = fake_child
subprocess.Popen = no_exec
assert precompile._can_fork_child()
lines = []
code = precompile.compile_devices(["ne16"], say=lines.append)
print(json.dumps(dict(code=code, lines=lines, pid=os.getpid(), numba="numba" in sys.modules)))
"""


@pytest.mark.parametrize("mode", ["pass", "fail", "raise"])
def test_the_compile_child_is_forked_from_the_command_where_it_may_be(mode):
    """`accelstub compile` (numba not imported, one thread) forks its child rather than start
    a new Python: the child runs _child in another process; its kernel lines are printed as a
    started child's; an exit code or an error there fails the command with the device named
    and the child's output (the traceback for an error)."""
    out = subprocess.run([sys.executable, "-c", FORKED, mode], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["lines"][1] == "accelstub: ne16: compiled conv.ne16.normquant in 0.4 s"
    assert not got["numba"]  # the parent never started numba itself
    if mode == "pass":
        assert got["code"] == 0 and got["lines"][-2].endswith("(1 kernel compiled)")
        return
    assert got["code"] == 1 and got["lines"][-1].endswith("; a device failed")
    exit_code = 3 if mode == "fail" else 1
    assert f"accelstub: ne16: a bundled demo failed (exit {exit_code}):" in out.stderr
    child_pid = int(out.stderr.split("\nPASS ")[1].split()[0])
    assert child_pid != got["pid"]
    if mode == "raise":
        assert "ValueError: a broken child" in out.stderr


def test_a_process_with_numba_or_other_threads_starts_a_new_python_for_the_child(
        monkeypatch):
    """Where numba is imported (a test process, a notebook: the child must start it lean)
    or another thread runs (a fork keeps only this one), the child is a new Python on
    this module, as before."""
    import threading

    assert "numba" in sys.modules and not precompile._can_fork_child()
    monkeypatch.delitem(sys.modules, "numba")
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    assert precompile._can_fork_child()
    monkeypatch.setattr(threading, "active_count", lambda: 2)
    assert not precompile._can_fork_child()
    started = []
    popen = subprocess.Popen

    def recording(args, **kwargs):
        started.append(args)
        return popen(["/bin/sh", "-c", "echo PASS"], **kwargs)

    monkeypatch.setattr(precompile.subprocess, "Popen", recording)
    assert precompile.compile_devices(["nvdla"], say=lambda s: None) == 0
    assert started == [[sys.executable, "-m", "accelstub.stub.precompile", "nvdla"]]
