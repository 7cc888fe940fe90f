"""What a user waits for from the command line (figures for the closing note; nothing asserts).

    python benchmarks/bench_first_run.py [--runs N] [--breakdown-only | --compile-only]
                                         [--device DEV]...   (--help: the options)

(``--device``: only these devices' demos, and `accelstub compile DEV...` of them;
``--compile-only``: only 2., `accelstub compile` in an empty cache, ``--runs`` times.)

All in an empty numba cache (NUMBA_CACHE_DIR in a temporary directory), each command a fresh
process as a user starts it, each with its wall time and its CPU time (user + sys of the child,
from getrusage): on a machine shared with other jobs the CPU time is the figure contention
distorts least. The children run without PYTHONDONTWRITEBYTECODE (a machine that sets it
compiles every module from source in every process, ~0.19 s; a user's Python caches bytecode).
1. the first `accelstub run DEVICE` of each bundled demo with nothing compiled (what a first
   run cost before `accelstub compile`; the device's kernels compile in it), each device in a
   cache of its own, broken down: importing accelstub, each kernel numba compiled (top-level
   kernels, with the kernels they call compiled inside them; CPU seconds), those the device's
   kernel plan had compiled in a forked worker at the same time (wall seconds), and the rest;
2. in a second empty cache: `accelstub compile` (all devices), then the first run of each demo;
3. warm runs: each demo and a project with the shapes of the ai8x MNIST example (1x28x28 ->
   60 -> 60 -> 56 -> 12 -> 10, built by the project's builder), N runs each, best and median,
   after one run whose time is shown apart (the MNIST project's first run compiles what the
   demo did not need); `accelstub serve DEVICE --port 0` of each demo until its ready line
   (the server then stopped), N times;
4. the floor under every run: starting Python and importing numba and its implementation
   registry (numba loads it with the first cached kernel), with no accelstub code; and the
   same as `accelstub run` starts them (stub/numba_start.py start_numba_lean: SciPy, cffi and
   PyYAML hidden, the collector paused and what numba built frozen), which is the floor.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from accelstub.devices import DEVICES
from accelstub.testkit.max78000_build import build, mnist_shapes_network
from machine import bench_main

MNIST = mnist_shapes_network()

FLOOR = ("import numba; from numba.core.registry import cpu_target; "
         "cpu_target.target_context.refresh()")
#: numba as a run starts it (stub/numba_start.py start_numba_lean: the registry included, under
#: the collector pause, then frozen)
FLOOR_RUN = "from accelstub.stub.numba_start import start_numba_lean; start_numba_lean()"

#: the child of a breakdown: `accelstub run DEVICE` with each kernel's compile timed in CPU
#: seconds of the process (numba compiles on the calling thread), the figures as one JSON line
#: on stderr (the CompileNotice's per-kernel hook: top-level kernels only)
BREAKDOWN_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from accelstub.stub.cli import main
from accelstub.stub.compile_notice import CompileNotice
t_import = time.perf_counter() - t0
kernels, started = [], {}
def on_kernel(phase, module, name):
    if phase == "start":
        started[name] = time.process_time()
    else:
        kernels.append((module.removeprefix("accelstub.emu.") + "." + name,
                        time.process_time() - started.pop(name)))
worker = []  # the kernels of the device's plan its forked worker compiled (emu/kernel_plan.py)
from accelstub.stub.numba_start import collector_for_compiling, start_numba_lean
start_numba_lean()  # as the run does, before its plan (stub/cli.py)
with CompileNotice(out=lambda text: None, on_kernel=on_kernel), collector_for_compiling():
    from accelstub.devices import device_spec
    from accelstub.emu.kernel_plan import compile_plan
    compile_plan(device_spec(sys.argv[1]).kernel_plan, on_worker=lambda module, name, s:
                 worker.append((module.removeprefix("accelstub.emu.") + "." + name, s)))
    code = main(["run", sys.argv[1]])  # (its own plan call then finds everything compiled)
print("BREAKDOWN " + json.dumps(dict(code=code, import_s=t_import, kernels=kernels,
                                     worker=worker, total_s=time.perf_counter() - t0)),
      file=sys.stderr)
"""


def child_env(cache: str) -> dict[str, str]:
    """A child's environment: numba's cache in ``cache``, PYTHONDONTWRITEBYTECODE unset (as on
    a user's machine: Python caches bytecode)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def timed(args: list[str], cache: str) -> tuple[float, float, str, str]:
    """Wall and CPU time (user + sys) of one command in a fresh process with numba's cache in
    ``cache``; the first line of its output (the verdict) and its stderr."""
    env = child_env(cache)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(args, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    lines = (out.stdout.strip() or out.stderr.strip() or f"exit {out.returncode}").splitlines()
    return dt, cpu, lines[0] if lines else "", out.stderr


def accelstub(*args: str) -> list[str]:
    return [sys.executable, "-m", "accelstub.stub.cli", *args]


def spread(times: list[float]) -> str:
    return f"best {min(times):.2f} s, median {statistics.median(times):.2f} s"


def breakdown(device: str, cache: str) -> None:
    """The first run of ``device``'s demo in the empty ``cache``, and where its time went."""
    wall, cpu, verdict, err = timed([sys.executable, "-c", BREAKDOWN_CHILD, device], cache)
    print(f"first run, nothing compiled: accelstub run {device}: {wall:.2f} s wall, "
          f"{cpu:.2f} s CPU  ({verdict})")
    found = [line for line in err.splitlines() if line.startswith("BREAKDOWN ")]
    if not found:
        print(f"  no breakdown (the run failed):\n{err}")
        return
    b = json.loads(found[-1].removeprefix("BREAKDOWN "))
    compiled = sum(s for _, s in b["kernels"])
    print(f"  import accelstub {b['import_s']:.2f} s wall; {len(b['kernels'])} kernels compiled "
          f"in {compiled:.2f} s CPU; the rest {b['total_s'] - b['import_s'] - compiled:.2f} s"
          f" (run less compile, wall less CPU); Python start and exit {wall - b['total_s']:.2f}"
          " s wall")
    for name, s in sorted(b["kernels"], key=lambda k: -k[1]):
        print(f"    {s:5.2f} s  {name}")
    if b["worker"]:
        print(f"  meanwhile {len(b['worker'])} kernels compiled in a forked worker process "
              "(wall seconds there, emu/kernel_plan.py):")
        for name, s in sorted(b["worker"], key=lambda k: -k[1]):
            print(f"    {s:5.2f} s  {name}")


def serve_ready(device: str, cache: str) -> tuple[float, float]:
    """Wall seconds from starting `accelstub serve DEVICE --port 0` (127.0.0.1, free ports) to
    its ready line, and the CPU time (user + sys) of the whole process, stopped by SIGTERM
    right after that line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    server = subprocess.Popen(accelstub("serve", device, "--port", "0"), env=child_env(cache),
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ready = float("nan")
    try:
        for line in server.stdout or ():
            if line.startswith("accelstub ready "):
                ready = time.perf_counter() - t0
                break
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ready, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def compile_empty(folder: Path, chosen: list[str]) -> None:
    """`accelstub compile` of ``chosen`` (all devices if none) in the empty cache ``folder``
    (made here), its times printed."""
    folder.mkdir()
    dt, cpu, _, _ = timed(accelstub("compile", *chosen), str(folder))
    print(f"accelstub compile ({', '.join(chosen) or 'all devices'}, empty cache): "
          f"{dt:.2f} s wall, {cpu:.2f} s CPU")


def options() -> argparse.Namespace:
    """The command line; ``--help`` lists it, an unknown option is an error (not a full run)."""
    ap = argparse.ArgumentParser(description="What a user waits for from the command line: "
                                 "first run, accelstub compile, warm runs, serve, the floor.")
    ap.add_argument("--runs", type=int, default=5, help="warm runs (and compiles) each")
    ap.add_argument("--device", action="append", choices=list(DEVICES), default=[],
                    help="only this device's demo (repeatable; default: all)")
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--breakdown-only", action="store_true",
                      help="only 1.: the first run with nothing compiled, broken down")
    only.add_argument("--compile-only", action="store_true",
                      help="only 2.: `accelstub compile` in an empty cache, --runs times")
    return ap.parse_args()


def main() -> int:
    opts = options()
    print("children run without PYTHONDONTWRITEBYTECODE (Python caches their bytecode, as on a "
          "user's machine)" + (": this shell sets it" if "PYTHONDONTWRITEBYTECODE" in os.environ
                               else ""), flush=True)
    runs, chosen = opts.runs, opts.device
    devices = chosen or list(DEVICES)
    with tempfile.TemporaryDirectory() as tmp:
        if opts.compile_only:
            for i in range(runs):
                compile_empty(Path(tmp, f"compiled-{i}"), chosen)
            return 0
        for dev in devices:
            cold = Path(tmp, "cold-" + dev)
            cold.mkdir()
            breakdown(dev, str(cold))
        if opts.breakdown_only:
            return 0
        mnist = build(MNIST, seed=1).write(Path(tmp) / MNIST.name)
        compiled = Path(tmp, "compiled")
        compile_empty(compiled, chosen)
        for dev in devices:
            dt, cpu, verdict, _ = timed(accelstub("run", dev), str(compiled))
            print(f"first run after accelstub compile: accelstub run {dev}: {dt:.2f} s wall, "
                  f"{cpu:.2f} s CPU  ({verdict})")
        jobs = [(f"run {dev}", accelstub("run", dev)) for dev in devices]
        if "max78000" in devices:
            jobs.append(("run max78000 --program <MNIST-shaped project>",
                         accelstub("run", "max78000", "--program", str(mnist))))
        jobs.append(("floor: python + import numba + its registry", [sys.executable, "-c", FLOOR]))
        jobs.append(("floor: python + numba as a run starts them (start_numba_lean)",
                     [sys.executable, "-c", FLOOR_RUN]))
        for label, args in jobs:
            first, _, verdict, _ = timed(args, str(compiled))
            walls, cpus = [], []
            for _ in range(runs):
                wall, cpu, _, _ = timed(args, str(compiled))
                walls.append(wall)
                cpus.append(cpu)
            print(f"warm {label}: {spread(walls)} wall, CPU median {statistics.median(cpus):.2f}"
                  f" s over {runs} (the run before them: {first:.2f} s)  ({verdict})")
        for dev in devices:
            serve_ready(dev, str(compiled))  # as the runs above: one before those timed
            got = [serve_ready(dev, str(compiled)) for _ in range(runs)]
            print(f"warm accelstub serve {dev} --port 0 to its ready line: "
                  f"{spread([w for w, _ in got])} wall, CPU median (with its stop) "
                  f"{statistics.median(c for _, c in got):.2f} s over {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(main, kernels_here=False))
