"""NE16 emulator speed: one 3x3 dense job of 64 -> 64 channels on a 32x32 input ('same'
padding, 8-bit weights, normalisation with bias), submitted through the job queue as the
pulp-nnx driver does and run to its end, as a ratio to torch's float32 conv2d of the same shape
in the same run (torch is imported here only), runs of each alternating in blocks of five: wall
time (medians, best) and the process's CPU time (medians). The output is checked against the
layer-level golden output of testkit/ne16_build.py. Not a test: nothing here asserts a speed.

    python benchmarks/bench_ne16.py [--repeat N] [--breakdown N]

--breakdown N then times N more jobs part by part (bench_nvdla.breakdown): the driver's
register writes, the kernel call, the normalisation/quantisation, the weights.

The job's tensors (164 KiB) do not fit GAP9's 128 KiB L1 (pulp-nnx would tile the layer): the
device is opened with a 512 KiB L1 window (the ``l1_kib`` option).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from accelstub.devices import open_device
from accelstub.devices.host import apply_steps
from accelstub.devices.ne16.model import BASE as NE16
from accelstub.devices.ne16.pulp_nnx import Array, driver_tasks, place_arrays
from accelstub.devices.runcontrol import RunControl
from accelstub.testkit.ne16_build import Layer, build
from machine import bench_main

LAYER = Layer(32, 32, 64, 64, padding=(1, 1, 1, 1), name="bench")


def place(dev, app) -> tuple[tuple[int, ...], int]:
    """The arrays in L1, placed as the test-application importer places them, and the
    driver's job registers."""
    arrays = {name: Array(ctype, values, size, "bench") for name, (ctype, values, size)
              in app.arrays.items()}
    steps, addr = place_arrays(arrays, (dev.l1.region.base, dev.l1.region.size), "bench")
    apply_steps(dev, steps)
    return driver_tasks(app.defines, addr)[0], addr["output"]


def run_job(rc: RunControl, regs: tuple[int, ...]) -> tuple[float, float]:
    """Submit the job as the driver does and run it: (wall seconds, CPU seconds of the
    process)."""
    dev = rc.device
    t0, c0 = time.perf_counter(), time.process_time()
    dev.host_read(NE16 + 0x04, 4)  # ACQUIRE
    for i, v in enumerate(regs):
        dev.write(NE16 + 0x20 + 4 * i, v.to_bytes(4, "little"))
    dev.write(NE16, bytes(4))  # TRIGGER 0
    stop = rc.run_here()
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    assert stop.reason == "done", stop
    return dt, dc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--breakdown", type=int, default=0, metavar="N",
                    help="then time N jobs part by part")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    app = build(LAYER, seed=1)
    dev = open_device("ne16", l1_kib=512)
    rc = RunControl(dev)
    regs, out = place(dev, app)
    t_first = run_job(rc, regs)[0]
    golden = app.arrays["golden_output"][1]
    got = np.frombuffer(dev.read(out, golden.size), np.int8)
    exact = bool(np.array_equal(got, golden))
    x = torch.randint(0, 256, (1, 64, 32, 32)).float()
    w = torch.randint(-128, 128, (64, 64, 3, 3)).float()
    torch.nn.functional.conv2d(x, w, padding=1)
    ours, ours_cpu, ref, ref_cpu = [], [], [], []
    for _ in range(max(1, args.repeat // 5)):
        for _ in range(5):
            dt, dc = run_job(rc, regs)
            ours.append(dt)
            ours_cpu.append(dc)
        for _ in range(5):
            t0, c0 = time.perf_counter(), time.process_time()
            torch.nn.functional.conv2d(x, w, padding=1)
            ref.append(time.perf_counter() - t0)
            ref_cpu.append(time.process_time() - c0)
    macs = 32 * 32 * 64 * 64 * 9
    bo, br = min(ours), min(ref)
    mo, mr = float(np.median(ours)), float(np.median(ref))
    co, cr = float(np.median(ours_cpu)), float(np.median(ref_cpu))
    print(f"NE16 job 3x3 64->64 on 32x32 ({macs / 1e6:.1f} M MACs, {dev.cycles // dev.units_done}"
          f" modelled cycles): emulator {mo * 1e3:.2f} ms median, {bo * 1e3:.2f} best "
          f"({macs / bo / 1e9:.1f} GMAC/s), CPU {co * 1e3:.2f} ms median; first job incl. "
          f"compile/cache load {t_first:.2f} s")
    print(f"torch {torch.__version__} float32 conv2d ({torch.get_num_threads()} threads): "
          f"{mr * 1e3:.2f} ms median, {br * 1e3:.2f} best ({macs / br / 1e9:.1f} GMAC/s), CPU "
          f"{cr * 1e3:.2f} ms median")
    print(f"ratio emulator/torch: {mr / mo:.2f} (medians), {br / bo:.2f} (best of each), "
          f"{cr / co:.2f} (CPU medians); bit-exact against the layer's golden output: {exact}")
    if args.breakdown:
        from bench_nvdla import breakdown

        from accelstub.devices.ne16 import job as J
        from accelstub.emu.conv import int_conv as IC

        parts = {"the driver's register writes (Device.write)": (dev, "write"),
                 "the convolution kernel (conv_sums)": (IC, "conv_sums"),
                 "normalisation/quantisation (job.normquant)": (J, "normquant"),
                 "the weights, kept by content (job.weights)": (J, "weights")}
        print("\n".join(breakdown(parts, lambda: run_job(rc, regs)[0], args.breakdown)))
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(bench_main(main))
