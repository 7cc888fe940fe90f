"""The machine a benchmark ran on, in one line, and the convolution kernels it ran: speed depends
on the CPU (an AVX-512 VNNI Xeon one session, an AVX2-only EPYC the next) and on which kernel
the emulators picked for it (emu/conv/int_conv.py: the byte kernel only where the CPU has VNNI),
so every figure is printed beside both (issue 31 #4)."""
from __future__ import annotations

import os
import platform
from collections.abc import Callable

#: the vector extensions the kernels choose between, as LLVM names them: what each is called here
EXTENSIONS = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512vnni": "AVX-512 VNNI",
              "avxvnni": "AVX-VNNI", "dotprod": "NEON dot product"}


def cpu_model() -> str:
    """The CPU's marketing name (/proc/cpuinfo's "model name"), or what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def vector_extensions() -> list[str]:
    """Which of EXTENSIONS the host CPU has, as LLVM (so numba) sees it."""
    import llvmlite.binding as llvm

    try:
        features = llvm.get_host_cpu_features()
    except RuntimeError:
        return []
    return [label for key, label in EXTENSIONS.items() if features.get(key)]


def machine_line() -> str:
    """``CPU: AMD EPYC (znver3, 2 logical CPUs); vector extensions: AVX2; Python 3.11.7``."""
    import llvmlite.binding as llvm

    ext = ", ".join(vector_extensions()) or "none of " + ", ".join(EXTENSIONS.values())
    return (f"CPU: {cpu_model()} ({llvm.get_host_cpu_name()}, {os.cpu_count()} logical CPUs); "
            f"vector extensions: {ext}; Python {platform.python_version()}")


#: the numba convolution kernels of emu/conv (module, function) and what each is called here
#: (Ethos-U85's exact float BLAS GEMM, used where int32 sums would not be exact, is numpy's)
CONV_KERNELS = {
    ("int_conv", "_vnni_conv"): "int8 vpdpbusd (byte kernel)",
    ("int_conv", "_pointwise8"): "int8 vpdpbusd 1x1 (pointwise byte kernel)",
    ("int_conv", "_conv_blocks"): "int16 vpmaddwd (int16-pair kernel)",
    ("int_conv", "_depthwise_pixels"): "depthwise loop",
    ("ethosu85", "_conv_kernel"): "int64 loop (Ethos-U85 sums past float64)",
}


def kernel_choice() -> str:
    """Which convolution kernel this machine's emulators pick (int_conv.conv_sums), for a
    benchmark whose kernels run in another process."""
    from accelstub.emu.conv.vnni import HAVE_VNNI

    if HAVE_VNNI:
        return ("conv kernel: int8 vpdpbusd (byte kernel) for 8-bit data with int8 weights, "
                "int16 vpmaddwd otherwise")
    why = "ACCELSTUB_VNNI=0" if os.environ.get("ACCELSTUB_VNNI") == "0" else "no AVX-512 VNNI"
    return f"conv kernel: int16 vpmaddwd (int16-pair kernel) for all ({why})"


def kernels_ran() -> list[str]:
    """The convolution kernels of :data:`CONV_KERNELS` that ran in this process so far: those
    numba has a compiled version of, parallel or its serial twin (numba makes one on a
    kernel's first call, compiling or loading it from the cache); nothing is wrapped, so a
    benchmark's own view of the kernels stays as it is."""
    from accelstub.emu.conv import ethosu85, int_conv

    modules = {"int_conv": int_conv, "ethosu85": ethosu85}
    serial = {id(t.parallel): t.serial for t in int_conv.TWINS}
    ran = []
    for (mod, name), label in CONV_KERNELS.items():
        kernel = getattr(modules[mod], name)
        if kernel.overloads or (id(kernel) in serial and serial[id(kernel)].overloads):
            ran.append(label)
    return ran


def kernel_line(ran: list[str] | None = None) -> str:
    """``conv kernels run: int8 vpdpbusd (byte kernel), ...`` from :func:`kernels_ran`;
    without it (the kernels ran in another process), :func:`kernel_choice`."""
    if ran is None:
        return kernel_choice()
    return "conv kernels run in this process: " + (", ".join(ran) or "none")


def bench_main(main: Callable[[], int | None], kernels_here: bool = True) -> int:
    """Run a benchmark's ``main`` as its script does: the machine line first; the convolution
    kernels it ran after it (``kernels_here`` False: they run in other processes, so the
    kernel this machine picks, before it). The script's exit code."""
    print(machine_line(), flush=True)
    if not kernels_here:
        print(kernel_choice(), flush=True)
        return main() or 0
    code = main() or 0
    print(kernel_line(kernels_ran()), flush=True)
    return code


if __name__ == "__main__":
    print(machine_line())
    print(kernel_choice())
