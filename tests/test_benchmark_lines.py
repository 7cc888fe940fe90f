"""Every benchmark says on which machine and with which kernel its figures were taken (issue 31
#4): the CPU model and the vector extensions it found (machine_line), and the convolution
kernels it ran, or, where they run in other processes, the one this machine picks."""
from __future__ import annotations

import ast
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _python(code: str, **env: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], cwd=BENCH, capture_output=True,
                         text=True, timeout=300, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def _int16_label() -> str:
    """The int16-pair kernel's name for numba's target here, as a child without NUMBA_CPU_*
    settings of its own sees it (tested below)."""
    out = _python("from machine import kernel_labels\n"
                  "print(kernel_labels()[('int_conv', '_conv_blocks')])")
    return out[0]


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="names x86 instructions")
def test_the_int16_pair_kernel_is_named_by_the_instruction_its_target_gets(monkeypatch):
    """On a target with VNNI, LLVM fuses the kernel's vpmaddwd + vpaddd into vpdpwssd: the label
    follows NUMBA_CPU_FEATURES where it is set, else the host's extensions."""
    sys.path.insert(0, str(BENCH))
    try:
        import machine
    finally:
        sys.path.remove(str(BENCH))
    from numba.core import config

    key = ("int_conv", "_conv_blocks")
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+fma")
    assert machine.kernel_labels()[key] == "int16 vpmaddwd (int16-pair kernel)"
    for vnni in ("+avx512vnni", "+avxvnni"):
        monkeypatch.setattr(config, "CPU_FEATURES", f"+avx2,+fma,{vnni},+avx512vl")
        assert machine.kernel_labels()[key] == "int16 vpdpwssd (int16-pair kernel)"
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+fma,-avx512vnni")
    assert machine.kernel_labels()[key] == "int16 vpmaddwd (int16-pair kernel)"
    monkeypatch.setattr(config, "CPU_FEATURES", None)
    for ext, label in ((["AVX2"], "vpmaddwd"), (["AVX2", "AVX-VNNI"], "vpdpwssd"),
                       (["AVX2", "AVX-512", "AVX-512 VNNI"], "vpdpwssd")):
        monkeypatch.setattr(machine, "vector_extensions", lambda ext=ext: ext)
        assert machine.kernel_labels()[key] == f"int16 {label} (int16-pair kernel)"


def test_every_benchmark_script_runs_its_main_through_bench_main():
    scripts = sorted(p for p in BENCH.glob("*.py") if p.name != "machine.py")
    assert len(scripts) > 10
    for script in scripts:
        tree = ast.parse(script.read_text())
        guard = [n for n in tree.body if isinstance(n, ast.If)
                 and "__main__" in ast.unparse(n.test)]
        assert guard, f"{script.name}: no `if __name__ == '__main__':`"
        calls = [n for n in ast.walk(guard[0]) if isinstance(n, ast.Call)
                 and ast.unparse(n.func) == "bench_main"]
        assert calls, f"{script.name}: its __main__ block does not call bench_main"


def test_bench_main_prints_the_machine_then_the_kernels_the_benchmark_ran():
    lines = _python("import numpy as np\n"
                    "from machine import bench_main, machine_line\n"
                    "from accelstub.emu.conv import int_conv as IC\n"
                    "def main():\n"
                    "    print('figures')\n"
                    "    w = IC.pack_weights(np.ones((4, 3, 3, 2), np.int64))\n"
                    "    IC.conv_sums(np.ones((2, 6, 6), np.int16), w, (4, 4), kernel='int16')\n"
                    "code = bench_main(main)\n"
                    "print('exit', code, machine_line())\n")
    machine = lines[-1].split(" ", 2)[2]
    assert machine.startswith("CPU: ") and "vector extensions: " in machine
    assert lines[:-1] == [machine, "figures",
                          f"conv kernels run in this process: {_int16_label()}"]
    assert lines[-1].startswith("exit 0 ")


def test_a_benchmark_whose_kernels_run_elsewhere_names_the_kernel_this_machine_picks():
    code = ("from machine import bench_main\n"
            "bench_main(lambda: print('figures'), kernels_here=False)\n")
    lines = _python(code, ACCELSTUB_VNNI="0")
    assert lines[0].startswith("CPU: ")
    assert lines[1:] == [f"conv kernel: {_int16_label()} for all (ACCELSTUB_VNNI=0)", "figures"]


def test_a_named_numba_cpu_without_its_features_is_said_to_keep_the_hosts():
    """NUMBA_CPU_NAME alone leaves numba on the host's instruction set (the int16-pair kernel
    became vpdpwssd under "haswell" on an AVX-512 VNNI host): the benchmark says so; with
    NUMBA_CPU_FEATURES it names them; without NUMBA_CPU_NAME there is no such line."""
    code = "from machine import bench_main\nbench_main(lambda: print('figures'), False)\n"
    alone = _python(code, ACCELSTUB_VNNI="0", NUMBA_CPU_NAME="haswell")
    assert alone[1].startswith("numba target: haswell with this host's features (")
    assert alone[1].endswith("not haswell's instruction set: set NUMBA_CPU_FEATURES too "
                             "(+avx2,+fma for haswell)")
    named = _python(code, ACCELSTUB_VNNI="0", NUMBA_CPU_NAME="haswell",
                    NUMBA_CPU_FEATURES="+avx2,+fma")
    assert named[1] == "numba target: haswell, features +avx2,+fma"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CPU_")}
    out = subprocess.run([sys.executable, "-c", code], cwd=BENCH, capture_output=True,
                         text=True, timeout=300, env={**env, "ACCELSTUB_VNNI": "0"})
    assert out.returncode == 0, out.stderr
    assert not any(line.startswith("numba target:") for line in out.stdout.splitlines())


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="compiles for haswell, an x86 CPU")
def test_the_int16_pair_peak_is_measured_on_the_kernels_step_as_avx2_compiles_it(tmp_path):
    """bench_int8_kernels' int16 peak times the kernel's own step, which AVX2 code runs as
    vpmaddwd then vpaddd (the pair's rate, not vpmaddwd's alone, bounds the kernel)."""
    lines = _python("import bench_int8_kernels as B\nprint(B.pair_peak(3.0))\n",
                    NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES="+avx2,+fma",
                    NUMBA_CACHE_DIR=str(tmp_path), ACCELSTUB_VNNI="0")
    head, _, tail = lines[-1].partition("/cycle/core x 16 MACs x ")
    assert head.startswith("int16 pair peak: vpmaddwd+vpaddd ymm ")
    ipc = float(head.rsplit(" ", 1)[1])
    cores = os.cpu_count() or 1
    gmacs = float(tail.split(" = ")[1].split(" ")[0])
    assert 0 < ipc <= 4 and tail.endswith("GMAC/s (measured)")
    assert abs(gmacs - ipc * 16 * cores * 3.0) <= 0.5 + 0.01 * gmacs
