"""Samples per second of ``accelstub.evaluate`` (issue 30 #5): each device's bundled demo, the
MAX78000 MNIST-shaped network and Ethos-U85 MobileNet v2 0.35 (96x96, Vela for ethos-u85-256),
with 1 and 2 workers and their ratio (goal: >= 1.8x on 2 cores), and, when Ray is installed,
Ray's overhead against the local pool on this machine (goal: <= 15 %).

    python benchmarks/bench_eval.py [--seconds S] [--no-ray]

Two rates per run: "wall" is samples / the run's seconds, start-up included (spawning the
workers, each loading the program and its warm-up run: what a user waits for); "steady" counts
from the first finished chunk to the last, the rate once every worker is warm, which is what
the scaling goal is about (with 1 worker the run happens in the calling process, already warm).
CPU ms per sample (this process and its pool workers, start-up included) says whether a worker
costs more per sample than the single process: on a machine others share, 2 workers cannot get
2 cores, and equal CPU cost per sample is then the evidence that they would scale.
Samples per case are chosen so one worker takes about ``--seconds``. The machine is shared:
the first line names its CPU (machine.py).
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from accelstub.evaluation import Evaluator, evaluate
from accelstub.testkit import max78000_build as mb
from accelstub.testkit.ethosu85_models import compile_with_vela
from accelstub.testkit.ethosu85_networks import build_network
from machine import bench_main


def cases(tmp: Path) -> list[tuple[str, str, Path | None]]:
    """(label, device, program): the four demos, MNIST shapes, MobileNet v2 0.35."""
    mb.build(mb.mnist_shapes_network(), seed=1).write(tmp / "mnist")
    src = tmp / "mobilenet_v2_035.tflite"
    src.write_bytes(build_network("mobilenet_v2_035"))
    mobilenet = compile_with_vela(src, tmp / "vela", macs=256)
    return [("max78000 demo", "max78000", None), ("ethos-u85 demo", "ethos-u85", None),
            ("ne16 demo", "ne16", None), ("nvdla demo", "nvdla", None),
            ("max78000 MNIST shapes", "max78000", tmp / "mnist"),
            ("ethos-u85 MobileNet v2 0.35", "ethos-u85", mobilenet)]


def dataset(tmp: Path, label: str, device: str, program: Path | None,
            seconds: float) -> tuple[Path, int]:
    """Random samples of the program's input, as many as one worker runs in ``seconds``."""
    ev = Evaluator(device, program)
    try:
        spec = ev.input
        x = np.zeros(spec.shape, spec.dtype)
        t0 = time.perf_counter()
        for _ in range(3):
            ev.run(x)
        per = (time.perf_counter() - t0) / 3
    finally:
        ev.close()
    n = int(min(2000, max(24, seconds / per)))
    info = np.iinfo(spec.dtype)
    xs = np.random.default_rng(0).integers(max(info.min, -128), min(info.max, 127) + 1,
                                           (n,) + spec.shape).astype(spec.dtype)
    path = tmp / (label.replace(" ", "_") + ".npy")
    np.save(path, xs)
    return path, n


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the pool's workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def measure(device: str, program: Path | None, data: Path,
            **kw) -> tuple[float, float, float, object]:
    """(wall samples/s, steady samples/s, CPU ms per sample, results)."""
    marks: list[tuple[float, int]] = []
    cpu0 = cpu_seconds()
    res = evaluate(device, data, program, progress=lambda d, t: marks.append(
        (time.perf_counter(), d)), **kw)
    cpu = (cpu_seconds() - cpu0) / res.count * 1000
    wall = res.count / res.seconds
    (t0, d0), (t1, d1) = marks[0], marks[-1]
    steady = (d1 - d0) / (t1 - t0) if t1 > t0 and d1 > d0 else wall
    return wall, steady, cpu, res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="one worker's time per case")
    ap.add_argument("--no-ray", action="store_true", help="leave out Ray's overhead")
    args = ap.parse_args(argv)
    print("load average (1, 5, 15 min) at start: {:.2f} {:.2f} {:.2f} (other processes share "
          "the cores: a busy machine lowers the 2-worker rates)".format(*os.getloadavg()),
          flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as t:
        tmp = Path(t)
        rows = []
        print(f"{'case':<30} {'N':>5} {'1 worker':>9} {'2 wall':>8} {'2 steady':>9} "
              f"{'ratio':>6} {'cpu ms 1':>9} {'cpu ms 2':>9}  (samples/s; ratio = 2 steady / "
              "1; CPU ms per sample, the workers' start-up included)", flush=True)
        for label, device, program in cases(tmp):
            data, n = dataset(tmp, label, device, program, args.seconds)
            w1, _, c1, one = measure(device, program, data, workers=1)
            w2, s2, c2, two = measure(device, program, data, workers=2)
            if not np.array_equal(one.outputs, two.outputs):
                print(f"{label}: 1 and 2 workers disagree", file=sys.stderr)
                return 1
            rows.append((label, device, program, data))
            print(f"{label:<30} {n:>5} {w1:>9.1f} {w2:>8.1f} {s2:>9.1f} {s2 / w1:>5.2f}x "
                  f"{c1:>9.2f} {c2:>9.2f}", flush=True)
        print("load average at the end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()),
              flush=True)
        if args.no_ray:
            return 0
        # Ray's servers on 127.0.0.1 only (read when ray is imported) and no usage report, as
        # in tests/api/test_evaluate_ray.py
        os.environ.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0")
        try:
            import ray
        except ImportError:
            print("Ray: not installed (pip install 'accelstub[cluster]'): overhead not measured")
            return 0
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _node_ip_address="127.0.0.1")
        try:
            print("Ray (a local cluster of 2 CPUs, started before timing) against the local "
                  "pool, 2 workers each, steady samples/s:")
            for label, device, program, data in rows:
                _, local, _, res = measure(device, program, data, workers=2)
                wall, steady, _, rres = measure(device, program, data, workers=2, ray=True)
                same = np.array_equal(res.outputs, rres.outputs)
                print(f"{label:<30} pool {local:>8.1f}  ray {steady:>8.1f} (wall {wall:>7.1f})"
                      f"  overhead {100 * (local / steady - 1):>5.1f} %"
                      + ("" if same else "  OUTPUTS DIFFER"), flush=True)
        finally:
            ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(main, kernels_here=False))
