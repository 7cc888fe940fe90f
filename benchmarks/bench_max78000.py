"""MAX78000 emulation speed (figures for the closing note; nothing here asserts a speed).

    python benchmarks/bench_max78000.py

1. One 64->64-channel 3x3 layer on 64x64 data: emulated MACs/s as a ratio to torch's float32
   conv2d on the same data in the same run (torch is imported only here), checked bit-exact
   against the known answer the builder computed with the independent reference. 20 runs of
   the loaded layer (see rerun) and 20 torch calls in alternating blocks of 5: best of each,
   and the ratio of the medians.
2. A network with the shapes of the ai8x MNIST example (1x28x28 -> 60 -> 60 -> 56 -> 12 -> 10):
   wall time per inference after warm-up against the silicon's 70,157 cycles at 50 MHz = 1.40 ms,
   measured like the chip's figure: the program loaded once, then cnn_start to completion
   repeatedly (the CNN_ISR writes and the start writes between runs are not timed), 200
   times: best and median.
   The last layer is a 1x1 convolution of the 12x4x4... flattened features until flatten lands
   (192 -> 10 MACs either way: 1,920 of 10.8 M).
(The command line's start-up and first run: benchmarks/bench_first_run.py.)
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from accelstub.devices import open_device
from accelstub.devices.host import CheckWords, HostProgram, WaitIrq, apply_steps
from accelstub.devices.max78000.ai8x import import_ai8x_project
from accelstub.devices.max78000.datapath import sram_address
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.program import run_to_end
from accelstub.testkit.max78000_build import Layer, Network, build, mnist_shapes_network
from machine import bench_main


def load(net: Network, tmp: str, seed: int = 1):
    """A loaded project: run control with the program's setup and start writes applied (the
    device armed before layer 0), the imported program, and its directory."""
    project = build(net, seed=seed)
    path = project.write(Path(tmp) / net.name)
    prog = import_ai8x_project(path)
    rc = RunControl(open_device("max78000"))
    rc.attach(None)
    apply_steps(rc.device, prog.setup + prog.start)
    return rc, prog, path


def time_layers(rc) -> float:
    """Run the armed program to its end in this thread as one `continue` (run control's loop,
    no driver attached: the layers only); seconds of emulation."""
    t0 = time.perf_counter()
    rc.run_here()
    return time.perf_counter() - t0


def rerun(rc, prog, sram: np.ndarray) -> float:
    """One inference on a loaded device, timed from cnn_start to completion as the chip's
    latency is; then, untimed, the program's CNN_ISR writes, the input loaded again (data SRAM
    as it was after loading: layers overwrite their input) and the start writes."""
    t = time_layers(rc)
    apply_steps(rc.device, prog.isr)
    for m, row in enumerate(sram):
        rc.device.write(sram_address(m, 0), row.tobytes())
    apply_steps(rc.device, prog.start)
    return t


def check(rc, prog) -> str:
    """The armed program run to the end as its main() does after cnn_start (wait for the CNN
    interrupt, check_output) on the device as it is now."""
    rc.attach(HostProgram("check", [WaitIrq("CNN"), CheckWords(prog.expected)],
                          {"CNN": list(prog.isr)}))
    return "\n".join(run_to_end(rc).lines)


def macs(net: Network) -> int:
    total, c, h, w = 0, net.in_channels, net.in_rows, net.in_cols
    for lay in net.layers:
        if lay.pool != "none":
            h = (h - lay.pool_size) // lay.pool_stride + 1
            w = (w - lay.pool_size) // lay.pool_stride + 1
        h, w = h + 2 * lay.pad - lay.kernel + 1, w + 2 * lay.pad - lay.kernel + 1
        total += h * w * lay.out_channels * c * lay.kernel * lay.kernel
        c = lay.out_channels
    return total


def bench_conv(tmp: str) -> None:
    net = Network(64, 64, 64, [Layer(64, kernel=3, pad=1, shift=-3)], name="conv64")
    rc, prog, _ = load(net, tmp)
    dev = rc.device
    sram = dev.bus.stacks["sram"].copy()
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    x = torch.randint(-128, 128, (1, 64, 64, 64)).float()
    wt = torch.randint(-128, 128, (64, 64, 3, 3)).float()
    torch.nn.functional.conv2d(x, wt, padding=1)
    ours_t, torch_t = [], []
    for _ in range(4):  # alternating blocks, so both see the same load from the rest of the
        # machine; a pause between blocks lets the other's thread pool stop spinning, and one
        # untimed call wakes each side's own threads before its timed ones
        rerun(rc, prog, sram)
        for _ in range(5):
            ours_t.append(rerun(rc, prog, sram))
        time.sleep(0.3)
        torch.nn.functional.conv2d(x, wt, padding=1)
        for _ in range(5):
            t0 = time.perf_counter()
            torch.nn.functional.conv2d(x, wt, padding=1)
            torch_t.append(time.perf_counter() - t0)
        time.sleep(0.3)
    verdict = check(rc, prog)  # the timed device, re-armed by rerun
    n = macs(net)
    best, t_ref = min(ours_t), min(torch_t)
    med = float(np.median(ours_t)) / float(np.median(torch_t))
    ours, ref = n / best, n / t_ref
    print(f"conv 64->64 3x3 on 64x64 ({n / 1e6:.1f} M MACs): emulator {best * 1e3:.1f} ms = "
          f"{ours / 1e9:.2f} GMAC/s; torch float32 conv2d {t_ref * 1e3:.1f} ms = "
          f"{ref / 1e9:.2f} GMAC/s; ratio {ours / ref:.2f} (of the medians {1 / med:.2f}); "
          f"bit-exact: {verdict}")


#: inferences timed (0.3 ms each): enough that a few seconds of a busy host do not decide
#: the best-of figure
RUNS = 200


def bench_mnist(tmp: str) -> None:
    net = mnist_shapes_network()
    rc, prog, _ = load(net, tmp)
    dev = rc.device
    sram = dev.bus.stacks["sram"].copy()
    c0 = dev.cycles
    times = [rerun(rc, prog, sram) for _ in range(RUNS)]
    cycles = (dev.cycles - c0) // len(times)
    verdict = check(rc, prog)
    t = min(times)
    print(f"MNIST-shaped network ({macs(net) / 1e6:.1f} M MACs, {cycles} modelled cycles): "
          f"{t * 1e3:.2f} ms per inference (best of {RUNS}, median {np.median(times) * 1e3:.2f}) "
          f"vs silicon 1.40 ms: "
          f"{1.40e-3 / t:.2f}x the chip's speed; {verdict}")


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        bench_mnist(tmp)
        bench_conv(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(main))
