"""NVDLA emulator speed: the largest direct-convolution trace test of the nv_small suite
(dc_35x22x54_6x8x54x29: a 35x22x54 input, 29 kernels of 6x8 (width x height), padding 2/4/4/5 ->
36x24x29)
as one hardware layer through CDMA..CACC and SDP, warm, in MACs per second against torch's float32
conv2d of the same shape in the same run (torch is imported here only). The trace is the
project's own (testkit/nvdla_build.py, same shape, checked by CRC against the independent
reference); --trace DIR times a trace of the hardware repository instead. Not a test: nothing
here asserts a speed.

The trace is loaded once; each run goes back to the armed layer as `accelstub eval` does per
sample (RunControl.checkpoint/rewind, not timed) and times the layer and the trace's checks.
Runs of ours and of torch alternate in blocks of five (a shared machine's load then falls on
both); wall time (medians, best) and CPU time of the process (medians) are printed.

    python benchmarks/bench_nvdla.py [--repeat N] [--trace DIR] [--conv3x3] [--breakdown N]

--conv3x3 times the layer issue 31 compares on every device instead: 64 -> 64 channels, 3x3,
on a 32x32 input with 'same' padding. --breakdown N then times N more runs part by part
(:func:`breakdown`): the kernel call, CACC + SDP, the operands' staging, the trace's checks.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from accelstub.devices import open_device
from accelstub.devices.ranges import merge_ranges
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.commands import CommandContext
from accelstub.stub.program import load_program
from accelstub.testkit.nvdla_build import Conv, build
from machine import bench_main

LAYER = Conv(35, 22, 54, 29, r=8, s=6, pad=(4, 5, 2, 4), clip=6)
CONV3X3 = Conv(32, 32, 64, 64)  # --conv3x3


def armed_layer(trace: Path) -> tuple[RunControl, dict, int]:
    """The trace loaded and run once (the kernels compiled or loaded, what the run writes
    learnt), then back at the armed layer: (run control, the checkpoint to rewind to, MACs)."""
    rc = RunControl(open_device("nvdla"))
    load_program(CommandContext([rc]), trace)
    from accelstub.devices.nvdla import conv as C

    cfg = C.decode(rc.device.view)
    macs = cfg.k * cfg.out_h * cfg.out_w * cfg.r * cfg.s * cfg.c
    armed = rc.checkpoint()
    rc.run_here()
    written = [r for _, writes in rc.host.history for r in writes]
    rc.rewind(armed)
    return rc, rc.checkpoint(merge_ranges(written)), macs


def run_once(rc: RunControl, armed: dict) -> tuple[float, float, bool]:
    """Back to the armed layer (not timed), then the layer and the trace's checks: (wall
    seconds, CPU seconds of the process, all checks passed)."""
    rc.rewind(armed)
    t0, c0 = time.perf_counter(), time.process_time()
    stop = rc.run_here()
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    ok = stop.reason == "done" and rc.host.ok and any("PASS" in r.line for r in rc.host.results)
    return dt, dc, ok


def breakdown(parts: dict[str, tuple[object, str]], run: Callable[[], float], n: int
              ) -> list[str]:
    """Where a run's time goes (issue 31 #2): ``run()`` (returning its wall seconds) ``n``
    times, each part (name -> (its owner: module, class or object; the attribute)) wrapped
    meanwhile with a clock, its calls' seconds summed per run. Lines of the medians per part
    and of the rest (the run minus its parts, per run), each with its share of the run's
    median. Parts must not call each other (they would be counted twice); the wrappers add
    ~0.3 us a call. Everything wrapped is put back, even on an error."""
    spent: dict[str, list[float]] = {name: [] for name in parts}
    undo = []
    for name, (owner, attr) in parts.items():
        original = getattr(owner, attr)
        undo.append((owner, attr, vars(owner).get(attr)))  # None: found on its class

        def timed(*args, _f=original, _spent=spent[name], **kwargs):
            t0 = time.perf_counter()
            try:
                return _f(*args, **kwargs)
            finally:
                _spent[-1] += time.perf_counter() - t0
        setattr(owner, attr, timed)
    total = []
    try:
        for _ in range(n):
            for v in spent.values():
                v.append(0.0)
            total.append(run())
    finally:
        for owner, attr, before in reversed(undo):
            if before is None:
                delattr(owner, attr)  # an attribute found on the class: its own again
            else:
                setattr(owner, attr, before)
    whole = float(np.median(total))
    rest = float(np.median(np.array(total) - np.sum(list(spent.values()), axis=0)))
    lines = [f"  {name}: {np.median(v) * 1e6:.1f} us ({np.median(v) / whole:.0%})"
             for name, v in spent.items()]
    return [f"breakdown, medians of {n} runs: {whole * 1e6:.1f} us a run", *lines,
            f"  the rest (run control, registers, Python): {rest * 1e6:.1f} us "
            f"({rest / whole:.0%})"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--trace", help="a dc_* trace directory of the NVDLA hardware repository")
    ap.add_argument("--conv3x3", action="store_true",
                    help="the 64->64 3x3 layer on 32x32 instead of the dc trace's shape")
    ap.add_argument("--breakdown", type=int, default=0, metavar="N",
                    help="then time N runs part by part")
    args = ap.parse_args()
    global LAYER
    if args.conv3x3:
        LAYER = CONV3X3
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(args.trace) if args.trace else \
            build([LAYER], "bench", seed=1).write(Path(tmp) / "bench")
        t0 = time.perf_counter()
        rc, armed, macs = armed_layer(trace)
        t_first = time.perf_counter() - t0
    x = torch.randint(-128, 128, (1, LAYER.c, LAYER.h, LAYER.w)).float()
    w = torch.randint(-128, 128, (LAYER.k, LAYER.c, LAYER.r, LAYER.s)).float()
    pad = torch.nn.functional.pad
    top, bottom, left, right = LAYER.pad
    torch.nn.functional.conv2d(pad(x, (left, right, top, bottom)), w)
    ours, ours_cpu, ref, ref_cpu, ok = [], [], [], [], True
    for _ in range(max(1, args.repeat // 5)):
        for _ in range(5):
            dt, dc, ok2 = run_once(rc, armed)
            ok = ok and ok2
            ours.append(dt)
            ours_cpu.append(dc)
        for _ in range(5):
            t0, c0 = time.perf_counter(), time.process_time()
            torch.nn.functional.conv2d(pad(x, (left, right, top, bottom)), w)
            ref.append(time.perf_counter() - t0)
            ref_cpu.append(time.process_time() - c0)
    bo, br = min(ours), min(ref)
    mo, mr = float(np.median(ours)), float(np.median(ref))
    co, cr = float(np.median(ours_cpu)), float(np.median(ref_cpu))
    print(f"NVDLA conv layer {LAYER.c}x{LAYER.h}x{LAYER.w} * {LAYER.k}x{LAYER.r}x{LAYER.s} "
          f"({macs / 1e6:.1f} M MACs), layer + CRC check: {mo * 1e3:.3f} ms median, "
          f"{bo * 1e3:.3f} best ({macs / bo / 1e9:.1f} GMAC/s), CPU {co * 1e3:.3f} ms median; "
          f"first run incl. load, compile/cache load {t_first:.2f} s")
    print(f"torch {torch.__version__} float32 conv2d ({torch.get_num_threads()} threads): "
          f"{mr * 1e3:.3f} ms median, {br * 1e3:.3f} best ({macs / br / 1e9:.1f} GMAC/s), CPU "
          f"{cr * 1e3:.3f} ms median")
    print(f"ratio emulator/torch: {mr / mo:.2f} (medians), {br / bo:.2f} (best of each), "
          f"{cr / co:.2f} (CPU medians); every check_crc passed: {ok}")
    if args.breakdown:
        from accelstub.devices.host import HostProgram
        from accelstub.devices.nvdla import sdp as S
        from accelstub.emu.conv import int_conv as IC

        parts = {"the convolution kernel (conv_sums)": (IC, "conv_sums"),
                 "CACC + SDP (sdp.process)": (S, "process"),
                 "input and weights (Nvdla._conv_operands)": (type(rc.device), "_conv_operands"),
                 "the trace's waits, ISR writes and check_crc (HostProgram.advance)":
                     (HostProgram, "advance")}
        print("\n".join(breakdown(parts, lambda: run_once(rc, armed)[0], args.breakdown)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(bench_main(main))
