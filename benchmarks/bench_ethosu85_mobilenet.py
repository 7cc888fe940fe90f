"""Ethos-U85 emulation speed on a whole network (issue 11, point 4): MobileNet v2 alpha 0.35 at
96x96x3 (testkit/ethosu85_networks.py builds it, int8 as TFLite's converter quantizes it),
compiled by Vela for ethos-u85-256, run through the command stream in the device, warm, against
LiteRT's optimized kernels (the interpreter's default OpResolverType) on the same model and
input in the same run, alternating one device inference with one LiteRT inference.

    python benchmarks/bench_ethosu85_mobilenet.py [--repeat N] [--macs M] [--profile] [--kernels]
        [--no-executor]

Timed per device inference: CMD.transition_to_running_state to the IRQ (run control's loop in
this thread); the driver's setup before it (soft reset, payload, weights, arena cleared, input
written) is not timed, as LiteRT's set_tensor is not. Two device runs alternate: with blocks
(a continue with no breakpoint, watchpoint or host program: the units replayed at once,
Device.run_block; their kept runs through the compiled executor, issue 32 #1, unless
--no-executor), and unit by unit (blocks off: as `accelstub run` and a debugger session with
a host program run it).
Ratio = LiteRT time / device time (1.0: as fast as LiteRT; the goal is >= 0.5). The device's
output is checked against LiteRT's reference kernels (BUILTIN_REF, bit-exact) and compared with
the optimized kernels' output (which may differ by 1 LSB). --profile prints where the device's
time goes (cProfile over a few warm inferences). --kernels records every call into a numba
kernel (accelstub.emu) that one inference with blocks makes, with copies of its arguments, and
times those calls alone back to back: the floor that faster glue between the kernels (a
compiled plan of the whole block) could reach with today's kernels, and the ratio LiteRT/floor
that bounds it. Not a test: nothing here asserts a speed.
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import importlib
import io
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
from numba.core.registry import CPUDispatcher

from accelstub.devices import open_device
from accelstub.devices.ethos_u85.vela import place_vela_program, read_output, read_vela
from accelstub.devices.runcontrol import RunControl
from accelstub.emu.conv.int_conv import Twin
from accelstub.testkit.ethosu85_models import compile_with_vela, litert_reference, sample_inputs
from accelstub.testkit.ethosu85_networks import build_network
from machine import bench_main

NETWORK = "mobilenet_v2_035"


def compile_network(tmp: Path, macs: int) -> tuple[Path, Path]:
    """(the int8 .tflite, Vela's *_vela.tflite for ethos-u85-<macs>)."""
    src = tmp / f"{NETWORK}.tflite"
    src.write_bytes(build_network(NETWORK))
    return src, compile_with_vela(src, tmp, macs=macs)


class Device:
    """The device with the program's parts read once; each inference re-places it (untimed)
    and runs it to the IRQ (timed)."""

    def __init__(self, path: Path, macs: int, x: np.ndarray, blocks: bool = True,
                 executor: bool = True) -> None:
        self.dev = open_device("ethos-u85", macs=macs)
        if not blocks:
            self.dev.blocks.stored = None
        self.dev.blocks.executor = executor
        self.rc = RunControl(self.dev)
        self.prog = read_vela(path)
        self.x = x

    def infer(self) -> float:
        place_vela_program(self.dev, self.prog, [self.x])  # the driver's setup: not timed
        t0 = time.perf_counter()
        stop = self.rc.run_here()
        dt = time.perf_counter() - t0
        if stop.reason != "done" or self.dev.regs.field("STATUS", "cmd_parse_error"):
            raise RuntimeError(f"the NPU did not finish: {stop}")
        return dt

    def output(self) -> np.ndarray:
        return read_output(self.dev, self.prog)


class LiteRT:
    def __init__(self, model: Path, x: np.ndarray) -> None:
        from ai_edge_litert.interpreter import Interpreter

        self.it = Interpreter(model_path=str(model))
        self.it.allocate_tensors()
        self.inp = self.it.get_input_details()[0]["index"]
        self.out = self.it.get_output_details()[0]["index"]
        self.x = x

    def infer(self) -> float:
        self.it.set_tensor(self.inp, self.x)  # not timed, as the device's input write
        t0 = time.perf_counter()
        self.it.invoke()
        return time.perf_counter() - t0

    def output(self) -> np.ndarray:
        return self.it.get_tensor(self.out)


def profile(device: Device, runs: int = 5, top: int = 25) -> str:
    pr = cProfile.Profile()
    for _ in range(runs):
        place_vela_program(device.dev, device.prog, [device.x])
        pr.enable()
        device.rc.run_here()
        pr.disable()
    out = io.StringIO()
    st = pstats.Stats(pr, stream=out)
    st.sort_stats("tottime").print_stats(top)
    return out.getvalue()


KERNEL_MODULES = ("conv.ethosu85", "conv.int_conv", "eltwise.ethosu85",
                  "numeric.ethosu85", "pool.ethosu85", "resize.ethosu85", "weights.ethosu85")


def record_kernels(device: Device) -> list[tuple[str, object, list, int]]:
    """(name, kernel, copies of its arguments, numba thread count) of every call one inference
    makes into a numba kernel from Python (module attributes wrapped for that inference)."""
    calls: list[tuple[str, object, list, int]] = []

    def copy(a: object) -> object:
        if not isinstance(a, np.ndarray):
            return a
        c = a.copy()
        c.flags.writeable = a.flags.writeable  # read-only views keep their kernel type
        return c

    def wrap(name: str, kernel: CPUDispatcher):
        def call(*args):
            calls.append((name, kernel, [copy(a) for a in args], numba.get_num_threads()))
            return kernel(*args)
        return call

    patched = []
    for mod in (importlib.import_module("accelstub.emu." + m) for m in KERNEL_MODULES):
        for name, obj in list(vars(mod).items()):
            if isinstance(obj, CPUDispatcher):
                patched.append((mod, name, obj))
                setattr(mod, name, wrap(name, obj))
            elif isinstance(obj, Twin):  # a parallel kernel and its serial copy (int_conv.twin)
                patched.append((mod, name, obj))
                base = obj.parallel.py_func.__name__
                setattr(mod, name, Twin(wrap(base, obj.parallel), wrap(base + "_serial",
                                                                         obj.serial)))
    try:
        device.infer()
    finally:
        for mod, name, obj in patched:
            setattr(mod, name, obj)
    return calls


def time_kernels(calls: list, repeat: int) -> tuple[list[float], dict[str, float]]:
    """Each run's time for ``calls`` back to back, and each kernel's median share."""
    totals, per = [], collections.defaultdict(list)
    for _ in range(repeat):
        share = collections.Counter()
        t_all = time.perf_counter()
        for name, kernel, args, threads in calls:
            if numba.get_num_threads() != threads:
                numba.set_num_threads(threads)
            t0 = time.perf_counter()
            kernel(*args)
            share[name] += time.perf_counter() - t0
        totals.append(time.perf_counter() - t_all)
        for name, t in share.items():
            per[name].append(t)
    return totals, {name: float(np.median(ts)) for name, ts in per.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--macs", type=int, default=256)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--no-executor", action="store_true",
                    help="replay blocks through the steps' closures (the compiled executor off: "
                         "the figure before issue 32 #1)")
    ap.add_argument("--kernels", action="store_true",
                    help="also time the numba kernels alone (the floor of faster glue)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src, out = compile_network(Path(tmp), args.macs)
        (x,) = sample_inputs(src.read_bytes())
        device = Device(out, args.macs, x, executor=not args.no_executor)
        lite = LiteRT(src, x)
        units = Device(out, args.macs, x, blocks=False)
        first = device.infer()
        for _ in range(3):  # warm all
            device.infer()
            units.infer()
            lite.infer()
        t_dev, t_units, t_lite = [], [], []
        for _ in range(args.repeat):  # alternating
            t_dev.append(device.infer())
            t_units.append(units.infer())
            t_lite.append(lite.infer())
        fast = lite.output()
        (want,) = litert_reference(src, [x])
        counters = device.dev.counters()  # of the last inference (the setup's reset clears them)
        lite_t, lb = float(np.median(t_lite)), min(t_lite)
        print(f"{NETWORK} 96x96x3 int8, Vela ethos-u85-{args.macs}: {device.prog.command_words} "
              f"command words, {counters['operations']} operations, "
              f"{counters['macs'] / 1e6:.1f} M MACs per inference; "
              f"{os.cpu_count()} cores")
        print(f"  LiteRT {_litert_version()} default kernels: {lite_t * 1e3:8.2f} ms median, best "
              f"{lb * 1e3:.2f} ms")
        for name, dev, ts in (("blocks", device, t_dev), ("unit by unit", units, t_units)):
            d, db = float(np.median(ts)), min(ts)
            got = dev.output()
            print(f"  device, {name + ':':13s} {d * 1e3:8.2f} ms median of {args.repeat}, best "
                  f"{db * 1e3:.2f} ms; ratio LiteRT/device {lite_t / d:.3f} (medians), "
                  f"{lb / db:.3f} (best of each)")
            print(f"    output: bit-exact with LiteRT BUILTIN_REF {np.array_equal(got, want)}; "
                  f"differs from the default kernels in "
                  f"{int(np.count_nonzero(got.astype(int) != fast.astype(int)))}/{got.size} "
                  f"elements")
        print(f"  (first device run incl. JIT/cache load {first * 1e3:.0f} ms)")
        if args.kernels:
            calls = record_kernels(device)
            totals, per = time_kernels(calls, args.repeat)
            k, kb = float(np.median(totals)), min(totals)
            print(f"  kernels alone: {len(calls)} calls, {k * 1e3:.2f} ms median, best "
                  f"{kb * 1e3:.2f} ms ({k / float(np.median(t_dev)):.0%} of the blocks run); "
                  f"ratio LiteRT/kernels {lite_t / k:.3f} (medians), {lb / kb:.3f} (best of each)")
            for name, t in sorted(per.items(), key=lambda kv: -kv[1]):
                n = sum(c[0] == name for c in calls)
                print(f"    {name:20s} {n:3d} calls {t * 1e3:6.3f} ms")
        if args.profile:
            print(profile(device))
    return 0


def _litert_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("ai-edge-litert")
    except metadata.PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    sys.exit(bench_main(main))
