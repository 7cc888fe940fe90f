"""The shared exact convolution kernels alone (emu/conv/int_conv.py): the byte kernel (VNNI
``vpdpbusd``), the int16-pair kernel (``vpmaddwd``), the exact float32 BLAS GEMM that the
Ethos-U85 path keeps for sums past int32, and torch's float32 conv2d, on the same data in the
same run. Figures for notes; nothing here asserts a speed.

    python benchmarks/bench_int8_kernels.py [--repeat N]

Each shape: all contenders in turn, in blocks of 3 timed calls after an untimed one and a pause
of 0.1 s (so a thread pool left spinning by the previous contender does not take the cores), N
calls each (default 15), so all see the same load from the rest of the machine; best and median
per contender, GMAC/s of the best, ratios to torch.
The int kernels' results are checked equal to each other and to the float GEMM (exact here).
On 3x3 stride-1 shapes also the Winograd F(2x2, 3x3) kernel (emu/conv/winograd.py); its GMAC/s
are direct-equivalent (the direct convolution's multiply-adds over its time).
Also: the machine's int8 peak estimate (clock from a dependent add chain, one vpdpbusd per cycle
per core measured with independent chains), the int16-pair kernel's peak (its own multiply-add
step measured, ``pair_peak``) and the first-call compile time of the byte kernels
with a cold cache (run with NUMBA_CACHE_DIR pointing at an empty directory to see it).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from accelstub.emu.conv import ethosu85 as E
from accelstub.emu.conv import int_conv as IC
from accelstub.emu.conv import winograd as WG
from accelstub.emu.conv.vnni import HAVE_VNNI
from machine import bench_main

SHAPES = [  # name, C, K, H, W, kernel, pad, stride, channels_last, zero point
    ("64->64 3x3 64x64 (MAX78000 layout)", 64, 64, 64, 64, 3, 1, 1, True, 0),
    ("64->64 3x3 64x64 NHWC zp -3, hwc out (Ethos-U85)", 64, 64, 64, 64, 3, 1, 1, True, -3),
    ("60->60 3x3 16x16 (MNIST layer 2)", 60, 60, 16, 16, 3, 1, 1, True, 0),
    ("64->128 3x3 stride 2 32x32", 64, 128, 32, 32, 3, 1, 2, True, 0),
    ("128->128 1x1 32x32", 128, 128, 32, 32, 1, 0, 1, True, 0),
]


def timed(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def peak() -> str:
    from numba import njit

    from accelstub.emu.conv.vnni import zdot, zsplat, zstore

    @njit
    def chain(n, a):
        x = a
        for i in range(n):
            x = (x + a) ^ i  # add, xor: 2 dependent 1-cycle operations per iteration
        return x

    chain(10, 3)
    n = 100_000_000
    t = min(timed(lambda: chain(n, 3)) for _ in range(5))
    ghz = 2 * n / t / 1e9
    text = f"clock ~{ghz:.2f} GHz (dependent add+xor chain; /proc/cpuinfo says {_mhz()} MHz)"
    pairs = "\n" + pair_peak(ghz)
    if not HAVE_VNNI:
        return text + pairs

    @njit
    def dp(n, w):
        a0 = zsplat(w, 0)
        a1, a2, a3, a4, a5, a6, a7 = a0, a0, a0, a0, a0, a0, a0
        x = zsplat(w, 1)
        for _ in range(n):
            a0 = zdot(a0, x, w, 2)
            a1 = zdot(a1, x, w, 2)
            a2 = zdot(a2, x, w, 2)
            a3 = zdot(a3, x, w, 2)
            a4 = zdot(a4, x, w, 2)
            a5 = zdot(a5, x, w, 2)
            a6 = zdot(a6, x, w, 2)
            a7 = zdot(a7, x, w, 2)
        out = np.empty(128, np.int32)
        for i, a in enumerate((a0, a1, a2, a3, a4, a5, a6, a7)):
            zstore(out, 16 * i, a)
        return out

    w = np.arange(3, dtype=np.int32)
    dp(10, w)
    m = 20_000_000
    t = min(timed(lambda: dp(m, w)) for _ in range(5))
    ipc = 8 * m / t / 1e9 / ghz
    cores = os.cpu_count() or 1
    return (text + f"; vpdpbusd zmm {ipc:.2f}/cycle/core x 64 MACs x {cores} cores x "
            f"{ghz:.2f} GHz = int8 peak {ipc * 64 * cores * ghz:.0f} GMAC/s "
            f"(float32 FMA: 2/cycle x 8 lanes -> {2 * 8 * cores * ghz:.0f} GMAC/s)" + pairs)


def pair_peak(ghz: float) -> str:
    """The int16-pair kernel's peak as measured: its step, an int16 pair multiply-add into an
    accumulator (``vpmaddwd`` then ``vpaddd`` on AVX2; one ``vpdpwssd`` where the target has
    AVX-512 VNNI), as the kernel's turn has it: 8 accumulators, 2 input registers, 4 weight
    words. Why measured: ``vpmaddwd`` alone issues twice a cycle on Zen 4, but AVX2 code needs
    the ``vpaddd`` beside it, and the pair issues less often (design notes, "The int16-pair
    kernel on AVX2")."""
    from numba import njit

    from accelstub.emu.conv.simd import vbcast, vload, vmadd, vstore, vzero

    @njit
    def pairs(n, w):  # the kernel's turn without its input loads: 2 inputs x 4 weight words
        a0, a1, b0, b1 = vzero(), vzero(), vzero(), vzero()
        c0, c1, d0, d1 = vzero(), vzero(), vzero(), vzero()
        lo, hi = vload(w, 8), vload(w, 16)
        for i in range(n):
            k = i & 7  # new weight words each turn: nothing to hoist
            wv = vbcast(w, k)
            a0, a1 = vmadd(a0, lo, wv), vmadd(a1, hi, wv)
            wv = vbcast(w, k + 1)
            b0, b1 = vmadd(b0, lo, wv), vmadd(b1, hi, wv)
            wv = vbcast(w, k + 2)
            c0, c1 = vmadd(c0, lo, wv), vmadd(c1, hi, wv)
            wv = vbcast(w, k + 3)
            d0, d1 = vmadd(d0, lo, wv), vmadd(d1, hi, wv)
        for i, a in enumerate((a0, a1, b0, b1, c0, c1, d0, d1)):
            vstore(w, 24 + 8 * i, a)

    w = np.ones(88, np.int32)
    pairs(10, w)
    m = 20_000_000
    t = min(timed(lambda: pairs(m, w)) for _ in range(5))
    ipc = 8 * m / t / 1e9 / ghz
    cores = os.cpu_count() or 1
    asm = pairs.inspect_asm(pairs.signatures[0])
    step = "vpdpwssd" if "vpdpwssd" in asm else "vpmaddwd+vpaddd" if "vpmaddwd" in asm \
        else "int16 pair multiply-add"
    return (f"int16 pair peak: {step} ymm {ipc:.2f}/cycle/core x 16 MACs x {cores} cores x "
            f"{ghz:.2f} GHz = {ipc * 16 * cores * ghz:.0f} GMAC/s (measured)")


def _mhz() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("cpu MHz"):
                return line.split(":")[1].strip()
    except OSError:
        pass
    return "?"


def bench_shape(name, c, k, h, wd, kk, pad, stride, channels_last, zp, repeat, torch):
    rng = np.random.default_rng(0)
    if channels_last:
        v = rng.integers(-128, 128, (h, wd, c)).astype(np.int8).transpose(2, 0, 1)
    else:
        v = rng.integers(-128, 128, (c, h, wd)).astype(np.int8)
    w = rng.integers(-127, 128, (k, kk, kk, c))
    pw = IC.pack_weights(w)
    ho = (h + 2 * pad - kk) // stride + 1
    wo = (wd + 2 * pad - kk) // stride + 1
    hwc = zp != 0
    kw = dict(zero_point=zp, pad=(pad, pad), stride=(stride, stride), hwc=hwc)
    macs = ho * wo * k * c * kk * kk
    contenders = {"int16 vpmaddwd": lambda: IC.conv_sums(v, pw, (ho, wo), kernel="direct", **kw)}
    if kk == 3 and stride == 1:  # emu/conv/winograd.py, GMAC/s direct-equivalent (MACs / time)
        ww = WG.winograd_weights(w)
        assert WG.winograd_fits(*WG.input_range(v.dtype, zp), ww)
        contenders["int16 Winograd 2x2,3x3"] = lambda: WG.winograd_sums(
            v, ww, (ho, wo), zero_point=zp, pad=(pad, pad), hwc=hwc)
    if HAVE_VNNI:
        contenders["int8 vpdpbusd"] = lambda: IC.conv_sums(v, pw, (ho, wo), kernel="int8", **kw)
    hp, wp = (ho - 1) * stride + kk, (wo - 1) * stride + kk
    vh = np.ascontiguousarray(v.transpose(1, 2, 0))
    contenders["float32 BLAS GEMM"] = lambda: E._conv_sums(
        E._padded(vh, zp, hp, wp, pad, pad, h, wd, np.float32), w, ho, wo, stride, stride, 1, 1,
        False)
    xt = torch.from_numpy(np.ascontiguousarray(v.astype(np.float32) - zp))[None]
    wt = torch.from_numpy(np.ascontiguousarray(w.astype(np.float32).transpose(0, 3, 1, 2)))
    contenders["torch float32 conv2d"] = lambda: torch.nn.functional.conv2d(
        xt, wt, padding=pad, stride=stride)
    results = {}
    for key, f in contenders.items():
        results[key] = np.asarray(f()).copy()
    ref = results["float32 BLAS GEMM"][:, :wo, :].astype(np.int64)  # [Ho, Wo, K]
    ok = all(np.array_equal(np.asarray(results[key], np.int64),
                            ref if hwc else ref.transpose(2, 0, 1))
             for key in contenders if key.startswith("int"))
    times = {key: [] for key in contenders}
    for _ in range(-(-repeat // 3)):
        for key, f in contenders.items():
            time.sleep(0.1)  # the other's thread pool stops spinning (else medians of ~24 ms)
            f()
            times[key] += [timed(f) for _ in range(3)]
    t_best = min(times["torch float32 conv2d"])
    t_med = float(np.median(times["torch float32 conv2d"]))
    print(f"{name}: {macs / 1e6:.1f} M MACs; int kernels bit-exact: {ok}")
    for key, ts in times.items():
        b, m = min(ts), float(np.median(ts))
        print(f"  {key:22s} best {b * 1e3:7.3f} ms {macs / b / 1e9:6.1f} GMAC/s  median "
              f"{m * 1e3:7.3f} ms  x torch: best {t_best / b:5.2f}, median {t_med / m:5.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    if HAVE_VNNI:
        t0 = time.perf_counter()
        IC.conv_sums(np.zeros((4, 4, 4), np.int8), IC.pack_weights(np.ones((8, 3, 3, 4))),
                     (2, 2), kernel="int8")
        IC.conv_sums(np.zeros((4, 4, 4), np.int8), IC.pack_weights(np.ones((8, 3, 3, 4))),
                     (2, 2), kernel="int8", hwc=True)
        print(f"byte kernels' first call (compile or cache load): {time.perf_counter() - t0:.2f} s;"
              f" NUMBA_CACHE_DIR={os.environ.get('NUMBA_CACHE_DIR', '(default)')}")
    print(peak())
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    for shape in SHAPES:
        bench_shape(*shape, args.repeat, torch)
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(main))
