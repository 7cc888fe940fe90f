"""GDB-facing throughput of the stub, measured through gdb-multiarch, with QEMU's gdbstub as the
reference on the same machine when qemu-system-arm is installed.

    python benchmarks/bench_gdb.py

    python benchmarks/bench_gdb.py --rounds 5 --baseline /tmp/before   # before/after

Prints: `dump binary memory` of 512 KiB of MAX78000 data SRAM (MB/s), 4-byte reads per second from
GDB's Python API, register reads (`p` packets through `maint packet`) per second, time from
`accelstub serve` to an accepted gdb connection, and the server's RSS idle and its peak (VmHWM)
after the dump; each against gdb's floor (FLOOR_STUB: what gdb costs per request) and QEMU's
gdbstub. Not a test: nothing here asserts a speed.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from machine import bench_main

GDB = shutil.which("gdb-multiarch")
QEMU = shutil.which("qemu-system-arm")

# 512 KiB of data SRAM: 4 quadrants x 128 KiB, each contiguous (4 memories x 32 KiB)
SRAM_WINDOWS = [(0x5040_0000 + q * 0x40_0000, 0x20000) for q in range(4)]

GDB_SCRIPT = r'''
import gdb, time, json
out = {}
windows = WINDOWS
t0 = time.perf_counter()
for i, (a, n) in enumerate(windows):
    gdb.execute("dump binary memory %s.%d 0x%x 0x%x" % (DUMPFILE, i, a, a + n), to_string=True)
out["dump_s"] = time.perf_counter() - t0
out["dump_bytes"] = sum(n for _, n in windows)
inf = gdb.selected_inferior()
base, span = windows[0]
N = 3000
t0 = time.perf_counter()
for i in range(N):
    inf.read_memory(base + (i * 4100) % (span - 4), 4)
out["reads_per_s"] = N / (time.perf_counter() - t0)
N = 3000
regnum = REGNUM
t0 = time.perf_counter()
for i in range(N):
    gdb.execute("maint packet p%x" % regnum, to_string=True)
out["reg_round_trips_per_s"] = N / (time.perf_counter() - t0)
regnum_value = gdb.execute("maint packet p%x" % regnum, to_string=True)
out["reg_reply"] = regnum_value.strip().splitlines()[-1]
print("BENCH " + json.dumps(out))
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid: int) -> tuple[int, int]:
    vals = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                vals[k] = int(v.split()[0])
    return vals.get("VmRSS", 0), vals.get("VmHWM", 0)


#: gdb's floor: a stub that answers every request from constant buffers (no device, no
#: parsing beyond the packet's kind), in a process of its own as ours and QEMU's are. What gdb
#: itself costs per request; a stub can only approach it.
FLOOR_STUB = r'''
import socket, sys
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(1)
print(ls.getsockname()[1], flush=True)
c, _ = ls.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
frame = lambda p: b"$" + p + b"#%02x" % (sum(p) & 0xFF)
fixed = {b"QStartNoAckMode": b"OK", b"?": b"S05", b"qAttached": b"1", b"g": b"00" * 64}
zeros, buf, ack = {}, b"", b"+"
while True:
    data = c.recv(1 << 20)
    if not data:
        break
    buf += data
    while True:
        i = buf.find(b"$")
        j = buf.find(b"#", i)
        if i < 0 or j < 0 or len(buf) < j + 3:
            break
        p, buf = buf[i + 1:j], buf[j + 3:]
        if p[:1] == b"m":
            n = int(p.split(b",")[1], 16)
            r = zeros.get(n) or zeros.setdefault(n, b"00" * n)
        elif p[:1] == b"p":
            r = b"00000000"
        elif p.startswith(b"qSupported"):
            r = b"PacketSize=20000;QStartNoAckMode+"
        else:
            r = fixed.get(p, b"")
        c.sendall(ack + frame(r))
        if p == b"QStartNoAckMode":
            ack = b""
'''


def run_gdb_bench(port: int, windows, regnum: int, arch: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "bench.py")
        with open(script, "w") as f:
            f.write(GDB_SCRIPT.replace("WINDOWS", repr(windows)).replace("REGNUM", str(regnum))
                    .replace("DUMPFILE", repr(os.path.join(tmp, "dump"))))
        pre = ["-ex", f"set architecture {arch}"] if arch else []
        out = subprocess.run([GDB, "-q", "-nx", "-batch", "-ex", "set pagination off", *pre,
                              "-ex", f"target remote 127.0.0.1:{port}", "-x", script],
                             capture_output=True, text=True, timeout=600)
    for line in out.stdout.splitlines():
        if line.startswith("BENCH "):
            return json.loads(line[6:])
    raise RuntimeError(f"gdb benchmark failed:\n{out.stdout}\n{out.stderr}")


def source_env(tree: str | None, tmp: str) -> dict | None:
    """Environment that imports ``accelstub`` from the source tree ``tree`` (a checkout of an
    earlier commit, for before/after figures taken in the same minutes); None: this one."""
    if tree is None:
        return None
    shim = os.path.join(tmp, "shim")
    os.makedirs(shim, exist_ok=True)
    link = os.path.join(shim, "accelstub")
    if not os.path.islink(link):
        os.symlink(os.path.abspath(tree), link)
    return dict(os.environ, PYTHONPATH=shim + os.pathsep + os.path.abspath(tree))


def bench_accelstub(env: dict | None = None) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "accelstub.stub.cli", "serve", "max78000",
                             "--port", "0"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        while not line.startswith("accelstub ready"):
            line = proc.stdout.readline()
        port = json.loads(line.split(" ", 2)[2])["gdb"][0]
        with socket.create_connection(("127.0.0.1", port)):
            t_connect = time.perf_counter() - t0
        time.sleep(0.3)
        idle_rss, _ = rss_kib(proc.pid)
        from accelstub.devices.description import load_description
        from accelstub.stub.target_xml import register_table

        regnum = next(e.regnum for e in register_table(load_description("max78000"))
                      if e.name == "CNNx16_0_CTRL")
        res = run_gdb_bench(port, SRAM_WINDOWS, regnum)
        res_core = run_gdb_bench(port, SRAM_WINDOWS[:1], 0)
        _, peak = rss_kib(proc.pid)
        res.update(serve_to_connect_s=t_connect, idle_rss_mib=idle_rss / 1024,
                   peak_rss_mib=peak / 1024, core_reg_round_trips_per_s=res_core[
                       "reg_round_trips_per_s"])
        return res
    finally:
        proc.terminate()
        proc.wait(5)


def bench_qemu() -> dict | None:
    if QEMU is None:
        return None
    port = free_port()
    proc = subprocess.Popen([QEMU, "-M", "mps2-an386", "-S", "-gdb", f"tcp:127.0.0.1:{port}",
                             "-nographic", "-monitor", "none", "-serial", "none"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.05)
        time.sleep(0.2)
        # mps2-an386: 512 KiB of SSRAM at 0x20000000 (the same amount as our SRAM dump)
        return run_gdb_bench(port, [(0x2000_0000, 0x80000)], 0)
    finally:
        proc.terminate()
        proc.wait(5)


def bench_floor() -> dict:
    proc = subprocess.Popen([sys.executable, "-c", FLOOR_STUB], stdout=subprocess.PIPE,
                            text=True)
    try:
        port = int(proc.stdout.readline())
        return run_gdb_bench(port, [(0x2000_0000, 0x80000)], 0, arch="arm")
    finally:
        proc.terminate()
        proc.wait(5)


def best_of(runs: list[dict]) -> dict:
    """Each figure's best over the rounds (the machine is shared: a slow round is someone
    else's load, not the stub's)."""
    out = dict(runs[0])
    for k in out:
        vals = [r[k] for r in runs]
        if k.endswith("_per_s"):
            out[k] = max(vals)
        elif k.endswith("_s") or k.endswith("_mib"):
            out[k] = min(vals)
    return out


def report(name: str, r: dict) -> None:
    mb_s = r["dump_bytes"] / r["dump_s"] / 1e6
    print(f"{name:10s} dump 512 KiB SRAM: {mb_s:8.1f} MB/s")
    print(f"{name:10s} 4-byte reads:      {r['reads_per_s']:8.0f} /s")
    print(f"{name:10s} register round trips (`maint packet p..`, a device register): "
          f"{r['reg_round_trips_per_s']:8.0f} /s; core r0: "
          f"{r['core_reg_round_trips_per_s']:.0f} /s")
    print(f"{name:10s} serve -> accepted connection: {r['serve_to_connect_s'] * 1000:.0f} ms")
    print(f"{name:10s} RSS idle {r['idle_rss_mib']:.1f} MiB, peak {r['peak_rss_mib']:.1f} "
          f"MiB (VmHWM after the dump)")


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds; each figure is the best")
    ap.add_argument("--baseline", metavar="TREE",
                    help="also run accelstub from this source tree (e.g. `git archive` of an "
                         "earlier commit), rounds interleaved with this one")
    args = ap.parse_args(argv)
    if GDB is None:
        print("gdb-multiarch is not installed (apt-get install gdb-multiarch)")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        base_env = source_env(args.baseline, tmp)
        ours_runs, base_runs, ref_runs, floor_runs = [], [], [], []
        for _ in range(args.rounds):
            if args.baseline:
                base_runs.append(bench_accelstub(base_env))
            ours_runs.append(bench_accelstub())
            floor_runs.append(bench_floor())
            if QEMU is not None:
                ref_runs.append(bench_qemu())
    ours = best_of(ours_runs)
    if base_runs:
        report("baseline", best_of(base_runs))
    report("accelstub", ours)
    floor = best_of(floor_runs)
    for what, key in (("dump 512 KiB", "dump_s"), ("4-byte reads", "reads_per_s"),
                      ("register round trips", "reg_round_trips_per_s")):
        ratio = (floor[key] / ours[key]) if key.endswith("_s") and not key.endswith("per_s") \
            else ours[key] / floor[key]
        print(f"floor      {what}: accelstub at {ratio:.2f}x gdb's floor (a stub answering "
              "from constant buffers)")
    if not ref_runs:
        print("qemu-system-arm not installed: no reference run (apt-get install qemu-system-arm)")
        return 0
    ref = best_of(ref_runs)
    mb_s = ours["dump_bytes"] / ours["dump_s"] / 1e6
    qmb = ref["dump_bytes"] / ref["dump_s"] / 1e6
    print(f"qemu       dump 512 KiB:      {qmb:8.1f} MB/s   ratio accelstub/qemu {mb_s / qmb:.2f}")
    print(f"qemu       4-byte reads:      {ref['reads_per_s']:8.0f} /s  ratio "
          f"{ours['reads_per_s'] / ref['reads_per_s']:.2f}")
    print(f"qemu       register round trips (r0): {ref['reg_round_trips_per_s']:8.0f} /s  ratio "
          f"{ours['reg_round_trips_per_s'] / ref['reg_round_trips_per_s']:.2f} (device register)")
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(main, kernels_here=False))
