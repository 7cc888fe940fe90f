"""Every benchmark says on which machine and with which kernel its figures were taken (issue 31
#4): the CPU model and the vector extensions it found (machine_line), and the convolution
kernels it ran, or, where they run in other processes, the one this machine picks."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _python(code: str, **env: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], cwd=BENCH, capture_output=True,
                         text=True, timeout=300, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


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
                          "conv kernels run in this process: int16 vpmaddwd (int16-pair kernel)"]
    assert lines[-1].startswith("exit 0 ")


def test_a_benchmark_whose_kernels_run_elsewhere_names_the_kernel_this_machine_picks():
    code = ("from machine import bench_main\n"
            "bench_main(lambda: print('figures'), kernels_here=False)\n")
    lines = _python(code, ACCELSTUB_VNNI="0")
    assert lines[0].startswith("CPU: ")
    assert lines[1:] == ["conv kernel: int16 vpmaddwd (int16-pair kernel) for all "
                         "(ACCELSTUB_VNNI=0)", "figures"]
