"""The machine a benchmark ran on, in one line: speed depends on the CPU (an AVX-512 VNNI Xeon
one session, an AVX2-only EPYC the next), so every figure is printed beside it."""
from __future__ import annotations

import os
import platform

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


if __name__ == "__main__":
    print(machine_line())
