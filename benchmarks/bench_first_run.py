"""What a user waits for from the command line (figures for the closing note; nothing asserts).

    python benchmarks/bench_first_run.py [--runs N]

All in an empty numba cache (NUMBA_CACHE_DIR in a temporary directory), each command a fresh
process as a user starts it:
1. the first `accelstub run DEVICE` of each bundled demo with nothing compiled (what a first
   run cost before `accelstub compile`; the device's kernels compile in it);
2. in a second empty cache: `accelstub compile` (all devices), then the first run of each demo;
3. warm runs: each demo and a project with the shapes of the ai8x MNIST example (1x28x28 ->
   60 -> 60 -> 56 -> 12 -> 10, built by the project's builder), N runs each, best and median,
   after one run whose time is shown apart (the MNIST project's first run compiles what the
   demo did not need);
4. the floor under every run: starting Python and importing numba and its implementation
   registry (numba loads it with the first cached kernel), with no accelstub code.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from accelstub.devices import DEVICES
from accelstub.testkit.max78000_build import build, mnist_shapes_network
from machine import machine_line

MNIST = mnist_shapes_network()

FLOOR = ("import numba; from numba.core.registry import cpu_target; "
         "cpu_target.target_context.refresh()")


def timed(args: list[str], cache: str) -> tuple[float, str]:
    """Wall time of one command in a fresh process with numba's cache in ``cache``; its last
    line of output (the verdict)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as on a user's machine: Python caches bytecode
    t0 = time.perf_counter()
    out = subprocess.run(args, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    lines = (out.stdout.strip() or out.stderr.strip() or f"exit {out.returncode}").splitlines()
    return dt, lines[0] if lines else ""


def accelstub(*args: str) -> list[str]:
    return [sys.executable, "-m", "accelstub.stub.cli", *args]


def spread(times: list[float]) -> str:
    return f"best {min(times):.2f} s, median {statistics.median(times):.2f} s"


def main() -> int:
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 5
    print(machine_line(), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        mnist = build(MNIST, seed=1).write(Path(tmp) / MNIST.name)
        cold, compiled = Path(tmp, "cold"), Path(tmp, "compiled")
        for d in (cold, compiled):
            d.mkdir()
        for dev in DEVICES:
            dt, verdict = timed(accelstub("run", dev), str(cold))
            print(f"first run, nothing compiled: accelstub run {dev}: {dt:.2f} s  ({verdict})")
        dt, _ = timed(accelstub("compile"), str(compiled))
        print(f"accelstub compile (all devices, empty cache): {dt:.2f} s")
        for dev in DEVICES:
            dt, verdict = timed(accelstub("run", dev), str(compiled))
            print(f"first run after accelstub compile: accelstub run {dev}: {dt:.2f} s  "
                  f"({verdict})")
        jobs = [(f"run {dev}", accelstub("run", dev)) for dev in DEVICES]
        jobs.append(("run max78000 --program <MNIST-shaped project>",
                     accelstub("run", "max78000", "--program", str(mnist))))
        jobs.append(("floor: python + import numba + its registry", [sys.executable, "-c", FLOOR]))
        for label, args in jobs:
            first, verdict = timed(args, str(compiled))
            times = [timed(args, str(compiled))[0] for _ in range(runs)]
            print(f"warm {label}: {spread(times)} over {runs} (the run before them: "
                  f"{first:.2f} s)  ({verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
