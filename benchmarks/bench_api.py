"""What the Python API costs (issue 26 #7; figures for the closing note, nothing asserts).

    python benchmarks/bench_api.py [--repeat N] [--devices a,b] [--history-off] [--no-remote]

1. In-process: a whole program by ``Session.cont()`` against the same program one unit at a
   time by ``Session.step()``, per unit, on every device's bundled demo and a MAX78000
   project with the shapes of the ai8x MNIST example (the goal: step costs at most 5 % more
   than run's per-unit time). Best and median of N, after one warm-up run. With
   ``--history-off`` each is timed again with the reverse-execution history off.
2. Remote: register reads per second through ``Session.connect(...).read_register`` (one by
   one) and ``read_registers`` (16 at a time, one round trip) against gdb-multiarch reading
   the same register with ``p`` packets (``maint packet``) through the same stub (the goal: at
   least as many as gdb).
"""
from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from accelstub import Session
from accelstub.devices import DEVICES
from accelstub.testkit.max78000_build import build, mnist_shapes_network
from machine import bench_main

REGISTER = "CNNx16_0_L0_RCNT"
READS = 3000
BLOCK = 16  # registers per read_registers call (a register block's worth)


def per_unit(session: Session, stepping: bool) -> float:
    """Seconds per unit of one pass over the program (reset init first, not timed)."""
    session.reset("init")
    n = len(session.units())
    t0 = time.perf_counter()
    if stepping:
        while session.step(timeout=300).reason == "step":
            pass
    else:
        session.cont(timeout=300)
    return (time.perf_counter() - t0) / n


def in_process(label: str, device: str, program: Path | None, repeat: int,
               history: bool = True) -> None:
    """``history``: recording on, as Session.open has it (the reverse-execution history,
    devices/history.py: each step journals one boundary); off (``monitor history 0``) shows
    what recording adds."""
    with Session.open(device, program) as s:
        if not history:
            s.monitor("history 0")
            label += ", history off"
        per_unit(s, False), per_unit(s, True)  # warm: kernels compiled and loaded
        runs, steps = [], []
        for _ in range(repeat):  # alternating, so both see the same load
            runs.append(per_unit(s, False))
            steps.append(per_unit(s, True))
        n = len(s.units())
    r, st = statistics.median(runs), statistics.median(steps)
    print(f"{label} ({n} units): cont {r * 1e3:.3f} ms/unit (best {min(runs) * 1e3:.3f}), "
          f"step {st * 1e3:.3f} ms/unit (best {min(steps) * 1e3:.3f}): step costs "
          f"{(st / r - 1) * 100:+.1f} % (medians), {(min(steps) / min(runs) - 1) * 100:+.1f} % "
          "(best)")


def serve() -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "accelstub.stub.cli", "serve", "max78000",
                             "--port", "0", "--telnet-port", "0", "--tcl-port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        if line.startswith("accelstub ready "):
            return proc, json.loads(line.split(" ", 2)[2])["gdb"][0]
    raise RuntimeError("the server did not start")


def remote_reads() -> None:
    proc, port = serve()
    try:
        with Session.connect(f"127.0.0.1:{port}") as s:
            s.read_register(REGISTER)
            t0 = time.perf_counter()
            for _ in range(READS):
                s.read_register(REGISTER)
            api = READS / (time.perf_counter() - t0)
            block = [n for n in s.register_names() if n.startswith("CNNx16_0_L")][:BLOCK]
            t0 = time.perf_counter()
            for _ in range(READS // BLOCK):
                s.read_registers(block)
            bulk = READS // BLOCK * BLOCK / (time.perf_counter() - t0)
        print(f"remote: Session.read_register: {api:,.0f} reads/s; Session.read_registers of "
              f"{BLOCK} at a time: {bulk:,.0f} reads/s")
        gdb = shutil.which("gdb-multiarch")
        if gdb is None:
            print("remote: gdb-multiarch not installed: no gdb figure")
            return
        script = (f"python\nimport gdb, time\nn = gdb.lookup_type('int')\n"
                  f"num = [i for i, r in enumerate(gdb.selected_frame().architecture()"
                  f".registers()) if r.name == '{REGISTER}'][0]\nt0 = time.perf_counter()\n"
                  f"for _ in range({READS}):\n    gdb.execute('maint packet p%x' % num, "
                  "to_string=True)\n"
                  f"print('GDB', {READS} / (time.perf_counter() - t0))\nend\n")
        with tempfile.NamedTemporaryFile("w", suffix=".gdb") as f:
            f.write(script)
            f.flush()
            out = subprocess.run([gdb, "-q", "-nx", "-batch", "-ex",
                                  f"target remote 127.0.0.1:{port}", "-x", f.name],
                                 capture_output=True, text=True, timeout=300).stdout
        rate = float(next(line.split()[1] for line in out.splitlines() if line.startswith("GDB")))
        print(f"remote: gdb-multiarch p packets: {rate:,.0f} reads/s; the API reads "
              f"{api / rate:.2f}x as many one by one, {bulk / rate:.2f}x in blocks")
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> int:
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 7
    devices = sys.argv[sys.argv.index("--devices") + 1].split(",") if "--devices" in sys.argv \
        else list(DEVICES)
    with tempfile.TemporaryDirectory() as tmp:
        mnist = build(mnist_shapes_network(), seed=1).write(Path(tmp) / "mnist")
        for history in (True, False) if "--history-off" in sys.argv else (True,):
            for device in devices:
                in_process(f"in-process {device} demo", device, None, repeat, history)
            if "max78000" in devices:
                in_process("in-process max78000 MNIST-shaped", "max78000", mnist, repeat,
                           history)
    if "--no-remote" not in sys.argv:
        remote_reads()
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(main))
