"""The machine a benchmark ran on, in one line, and the convolution kernels it ran: speed depends
on the CPU (an AVX-512 VNNI Xeon one session, an AVX2-only EPYC the next) and on which kernel
the emulators picked for it (emu/conv/int_conv.py: the byte kernel only where the CPU has VNNI),
so every figure is printed beside both (issue 31 #4)."""
from __future__ import annotations

import os
import platform
from collections.abc import Callable

#: the vector extensions the kernels choose between or LLVM vectorises with, as LLVM names them:
#: what each is called here
EXTENSIONS = {"avx2": "AVX2", "avx512f": "AVX-512", "avx512vnni": "AVX-512 VNNI",
              "avxvnni": "AVX-VNNI", "neon": "NEON", "dotprod": "NEON dot product",
              "sve": "SVE"}

#: Linux's /proc/cpuinfo names of EXTENSIONS where they differ from LLVM's (arm64 "Features",
#: x86 "flags")
CPUINFO_NAMES = {"asimd": "neon", "asimddp": "dotprod", "avx512_vnni": "avx512vnni",
                 "avx_vnni": "avxvnni"}

#: read by cpu_model and vector_extensions (a test points it at an arm64 machine's)
CPUINFO = "/proc/cpuinfo"

ARM64 = ("aarch64", "arm64")


def _cpuinfo() -> dict[str, str]:
    """The first value of each field of :data:`CPUINFO` (no file: none)."""
    fields: dict[str, str] = {}
    try:
        with open(CPUINFO) as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_model() -> str:
    """The CPU's marketing name (/proc/cpuinfo's "model name"); an arm64 Linux names none, only
    the implementer and part codes, printed as they are (LLVM's CPU name beside them in
    :func:`machine_line` says which core they are); else what platform knows."""
    info = _cpuinfo()
    if "model name" in info:
        return info["model name"]
    if platform.machine().lower() in ARM64 and "CPU part" in info:
        return (f"{platform.machine()} implementer {info.get('CPU implementer', '?')} "
                f"part {info['CPU part']}")
    return platform.processor() or platform.machine()


def vector_extensions() -> list[str]:
    """Which of EXTENSIONS the host CPU has, as LLVM (so numba) sees it; where LLVM knows none
    (it raises, or answers nothing as under qemu-user), /proc/cpuinfo's list of the machine's
    own kind ("Features" on arm64, "flags" on x86: under qemu-user the file is the host's)."""
    import llvmlite.binding as llvm

    try:
        have = {k for k, v in llvm.get_host_cpu_features().items() if v}
    except RuntimeError:
        have = set()
    if not have:
        field = "Features" if platform.machine().lower() in ARM64 else "flags"
        have = {CPUINFO_NAMES.get(f, f) for f in _cpuinfo().get(field, "").split()}
    return [label for key, label in EXTENSIONS.items() if key in have]


def machine_line() -> str:
    """``CPU: AMD EPYC (znver3, 2 logical CPUs); vector extensions: AVX2; Python 3.11.7``."""
    import llvmlite.binding as llvm

    ext = ", ".join(vector_extensions()) or "none of " + ", ".join(EXTENSIONS.values())
    return (f"CPU: {cpu_model()} ({llvm.get_host_cpu_name()}, {os.cpu_count()} logical CPUs); "
            f"vector extensions: {ext}; Python {platform.python_version()}")


def target_line() -> str | None:
    """What numba compiles for where ``NUMBA_CPU_NAME`` names a CPU (None where it does not:
    the host). Why: numba takes the CPU's name from ``NUMBA_CPU_NAME`` but its features from
    ``NUMBA_CPU_FEATURES``, and the host's where that is unset, so ``NUMBA_CPU_NAME=haswell``
    alone is haswell's scheduling with this host's instruction set: on an AVX-512 VNNI host
    LLVM fuses the int16-pair kernel's ``vpmaddwd`` + ``vpaddd`` into ``vpdpwssd``, and the
    figures are not AVX2 code (design notes, "The int16-pair kernel on AVX2")."""
    from numba.core import config

    name = config.CPU_NAME
    if name is None or name.lower() == "host":
        return None
    if config.CPU_FEATURES is None:
        ext = ", ".join(vector_extensions()) or "none"
        return (f"numba target: {name} with this host's features ({ext}), not {name}'s "
                f"instruction set: set NUMBA_CPU_FEATURES too (+avx2,+fma for haswell)")
    return f"numba target: {name}, features {config.CPU_FEATURES}"


#: the numba convolution kernels of emu/conv (module, function) and what each is called here
#: (Ethos-U85's exact float BLAS GEMM, used where int32 sums would not be exact, is numpy's)
CONV_KERNELS = {
    ("int_conv", "_vnni_conv"): "int8 vpdpbusd (byte kernel)",
    ("int_conv", "_pointwise8"): "int8 vpdpbusd 1x1 (pointwise byte kernel)",
    ("int_conv", "_conv_blocks"): "int16 vpmaddwd (int16-pair kernel)",
    ("winograd", "_wino_gemm"): "int16 Winograd 2x2,3x3 (vpmaddwd)",
    ("int_conv", "_depthwise_pixels"): "depthwise loop",
    ("ethosu85", "_conv_kernel"): "int64 loop (Ethos-U85 sums past float64)",
}

#: the int16-pair kernel's instructions where they are not vpmaddwd: on arm64 LLVM lowers its
#: pair multiply-add (emu/conv/simd.py vmadd) to NEON smull + addp + add
#: (benchmarks/arm64_codegen.py; design notes "arm64 (issue 31 #3)")
ARM64_LABELS = {("int_conv", "_conv_blocks"): "int16 NEON smull (int16-pair kernel)",
                ("winograd", "_wino_gemm"): "int16 Winograd 2x2,3x3 (NEON smull)"}


#: the int16-pair kernel where numba's target has VNNI: LLVM fuses its ``vpmaddwd`` + ``vpaddd``
#: into one ``vpdpwssd`` (design notes, "The int16-pair kernel on AVX2")
VNNI_INT16_LABELS = {("int_conv", "_conv_blocks"): "int16 vpdpwssd (int16-pair kernel)",
                     ("winograd", "_wino_gemm"): "int16 Winograd 2x2,3x3 (vpdpwssd)"}


def target_has_vnni() -> bool:
    """Whether numba compiles for a CPU with AVX-512 VNNI or AVX-VNNI: ``NUMBA_CPU_FEATURES``
    where it is set, else the host's (as numba does, :func:`target_line`)."""
    from numba.core import config

    if config.CPU_FEATURES is not None:
        return any(f"+{f}" in config.CPU_FEATURES.split(",") for f in ("avx512vnni", "avxvnni"))
    return bool({"AVX-512 VNNI", "AVX-VNNI"} & set(vector_extensions()))


def kernel_labels() -> dict[tuple[str, str], str]:
    """:data:`CONV_KERNELS` as named on this machine's kind (x86 or arm64) and numba's target."""
    if platform.machine().lower() in ARM64:
        return CONV_KERNELS | ARM64_LABELS
    return CONV_KERNELS | VNNI_INT16_LABELS if target_has_vnni() else CONV_KERNELS


def kernel_choice() -> str:
    """Which convolution kernel this machine's emulators pick (int_conv.conv_sums), for a
    benchmark whose kernels run in another process."""
    from accelstub.emu.conv.vnni import HAVE_VNNI

    int16 = kernel_labels()[("int_conv", "_conv_blocks")]
    if HAVE_VNNI:
        return (f"conv kernel: int8 vpdpbusd (byte kernel) for 8-bit data with int8 weights, "
                f"{int16} otherwise")
    if os.environ.get("ACCELSTUB_VNNI") == "0":
        why = "ACCELSTUB_VNNI=0"
    elif platform.machine().lower() in ARM64:  # the byte kernel is AVX-512 VNNI code
        why = "no AVX-512 VNNI on arm64; NEON dot product unused"
    else:
        why = "no AVX-512 VNNI"
    return f"conv kernel: {int16} for all ({why})"


def kernels_ran() -> list[str]:
    """The convolution kernels of :data:`CONV_KERNELS` that ran in this process so far: those
    numba has a compiled version of, parallel or its serial twin (numba makes one on a
    kernel's first call, compiling or loading it from the cache); nothing is wrapped, so a
    benchmark's own view of the kernels stays as it is."""
    from accelstub.emu.conv import ethosu85, int_conv, winograd

    modules = {"int_conv": int_conv, "ethosu85": ethosu85, "winograd": winograd}
    serial = {id(t.parallel): t.serial for t in int_conv.TWINS}
    ran = []
    for (mod, name), label in kernel_labels().items():
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
    """Run a benchmark's ``main`` as its script does: the machine line first (then numba's
    target where ``NUMBA_CPU_NAME`` names one, :func:`target_line`); the convolution
    kernels it ran after it (``kernels_here`` False: they run in other processes, so the
    kernel this machine picks, before it). The script's exit code."""
    print(machine_line(), flush=True)
    target = target_line()
    if target is not None:
        print(target, flush=True)
    if not kernels_here:
        print(kernel_choice(), flush=True)
        return main() or 0
    code = main() or 0
    print(kernel_line(kernels_ran()), flush=True)
    return code


if __name__ == "__main__":
    print(machine_line())
    print(kernel_choice())
