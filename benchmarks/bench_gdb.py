"""GDB-facing throughput of the stub, measured through gdb-multiarch, against gdb's floor (a
stub answering from constant buffers) and QEMU's gdbstub on the same machine (issue 31 #6).

    python benchmarks/bench_gdb.py                 # 3 rounds: ~20 s, 35-50 s loaded

    python benchmarks/bench_gdb.py --rounds 5 --baseline /tmp/before   # before/after

Each round runs every server in turn (ours, the floors, QEMU), so a noisy minute on a shared
machine hits them alike; each figure is printed as the median over the rounds and the best.
Figures: `dump binary memory` of 512 KiB of MAX78000 data SRAM (MB/s), once as it is (mostly
zero: the demo's data) and once after gdb `restore`d random bytes into it (no runs: every byte
goes as two hex digits); 4-byte reads per second from GDB's Python API; register reads (`p`
packets through `maint packet`) per second; each server's CPU time (all its threads) per
4-byte read; time from `accelstub serve` to an accepted gdb connection; the server's RSS
idle and its peak (VmHWM) after the dumps.

The floor: FLOOR_C, compiled with the system's C compiler when there is one (what gdb itself
costs per request: the stub's share is a read and a write system call), and FLOOR_PY, the
same in Python (a Python stub's floor: the interpreter's share of a request). Their replies
are plain hex (no run-length codes), as QEMU's. Not a test: nothing here asserts a speed.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
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
import gdb, time, json, os
out = {}
windows = WINDOWS


def dump():
    t0 = time.perf_counter()
    for i, (a, n) in enumerate(windows):
        gdb.execute("dump binary memory %s.%d 0x%x 0x%x" % (DUMPFILE, i, a, a + n),
                    to_string=True)
    return time.perf_counter() - t0


out["dump_s"] = dump()
out["dump_bytes"] = sum(n for _, n in windows)
for i, (a, n) in enumerate(windows):
    with open("%s.rnd%d" % (DUMPFILE, i), "wb") as f:
        f.write(os.urandom(n))
    gdb.execute("restore %s.rnd%d binary 0x%x" % (DUMPFILE, i, a), to_string=True)
out["dump_random_s"] = dump()


def server_cpu_s():
    """The server's CPU time so far, all its threads (schedstat: ns on a CPU)."""
    total = 0
    for t in os.listdir("/proc/%d/task" % SERVERPID):
        with open("/proc/%d/task/%s/schedstat" % (SERVERPID, t)) as f:
            total += int(f.read().split()[0])
    return total / 1e9


inf = gdb.selected_inferior()
base, span = windows[0]
N = 3000
c0, t0 = server_cpu_s(), time.perf_counter()
for i in range(N):
    inf.read_memory(base + (i * 4100) % (span - 4), 4)
out["reads_per_s"] = N / (time.perf_counter() - t0)
out["server_us_per_read"] = (server_cpu_s() - c0) / N * 1e6
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


#: gdb's floor in Python: every request answered from constant buffers (no device, no parsing
#: beyond the packet's kind), in a process of its own as ours and QEMU's are. The socket is read
#: into one buffer (a fresh 1 MiB recv() per request is an mmap/munmap pair: it had made this
#: floor slower than the stub it measures).
FLOOR_PY = r"""
import socket
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(1)
print(ls.getsockname()[1], flush=True)
c, _ = ls.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
frame = lambda p: b"$" + p + b"#%02x" % (sum(p) & 0xFF)
fixed = {b"QStartNoAckMode": b"OK", b"?": b"S05", b"qAttached": b"1", b"g": b"00" * 64,
         b"qSupported": b"PacketSize=20000;QStartNoAckMode+", b"m": None, b"p": b"00000000",
         b"M": b"OK", b"X": b"OK"}
zeros, rbuf, ack = {}, bytearray(1 << 18), b"+"
view = memoryview(rbuf)
buf = b""
while True:
    n = c.recv_into(rbuf)
    if not n:
        break
    buf += view[:n]
    while True:
        i = buf.find(b"$")
        j = buf.find(b"#", i)
        if i < 0 or j < 0 or len(buf) < j + 3:
            break
        p, buf = buf[i + 1:j], buf[j + 3:]
        r = fixed.get(p, fixed.get(p[:1], fixed.get(p[:10], b"")))
        if r is None:
            n = int(p.split(b",")[1], 16)
            r = zeros.get(n) or zeros.setdefault(n, frame(b"00" * n))
        else:
            r = frame(r)
        c.sendall(ack + r)
        if p == b"QStartNoAckMode":
            ack = b""
"""

#: gdb's floor in C: the same replies, a read() and a write() per request
FLOOR_C = r"""
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char in[1 << 18], out[(1 << 18) + 8], zeros[1 << 18];

static void reply(int c, const char *p, size_t n, int ack) {
    size_t k = 0;
    unsigned s = 0;
    if (ack) out[k++] = '+';
    out[k++] = '$';
    for (size_t i = 0; i < n; i++) s += (unsigned char)(out[k++] = p[i]);
    k += sprintf(out + k, "#%02x", s & 0xff);
    for (size_t d = 0; d < k;) {
        ssize_t w = write(c, out + d, k - d);
        if (w <= 0) exit(0);
        d += w;
    }
}

int main(void) {
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1, ack = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1)) return 1;
    getsockname(ls, (struct sockaddr *)&a, &al);
    printf("%d\n", ntohs(a.sin_port));
    fflush(stdout);
    int c = accept(ls, 0, 0);
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    memset(zeros, '0', sizeof zeros);
    size_t have = 0;
    for (;;) {
        ssize_t r = read(c, in + have, sizeof in - 1 - have);
        if (r <= 0) return 0;
        have += r;
        for (;;) {
            char *d = memchr(in, '$', have), *h;
            if (!d) { have = 0; break; }
            h = memchr(d, '#', have - (d - in));
            if (!h || h + 3 > in + have) break;
            *h = 0;
            const char *p = d + 1, *comma = strchr(p, ',');
            if (p[0] == 'm' && comma) {
                size_t n = 2 * strtoul(comma + 1, 0, 16);
                reply(c, zeros, n < sizeof zeros ? n : sizeof zeros, ack);
            } else if (p[0] == 'p') reply(c, "00000000", 8, ack);
            else if (p[0] == 'g') reply(c, zeros, 128, ack);
            else if (p[0] == 'M' || p[0] == 'X') reply(c, "OK", 2, ack);
            else if (!strncmp(p, "qSupported", 10))
                reply(c, "PacketSize=20000;QStartNoAckMode+", 33, ack);
            else if (!strcmp(p, "QStartNoAckMode")) { reply(c, "OK", 2, ack); ack = 0; }
            else if (!strcmp(p, "?")) reply(c, "S05", 3, ack);
            else if (!strcmp(p, "qAttached")) reply(c, "1", 1, ack);
            else reply(c, "", 0, ack);
            size_t used = h + 3 - in;
            memmove(in, h + 3, have - used);
            have -= used;
        }
    }
}
"""


def build_floor_c(tmp: str) -> str | None:
    """FLOOR_C compiled into ``tmp``; None without a working C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None
    src, exe = os.path.join(tmp, "floor.c"), os.path.join(tmp, "floor")
    with open(src, "w") as f:
        f.write(FLOOR_C)
    done = subprocess.run([cc, "-O2", "-o", exe, src], capture_output=True, text=True)
    return exe if done.returncode == 0 else None


def run_gdb_bench(port: int, windows, regnum: int, pid: int, arch: str | None = None) -> dict:
    """The gdb script against the server on ``port`` (process ``pid``: its CPU time)."""
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "bench.py")
        with open(script, "w") as f:
            f.write(GDB_SCRIPT.replace("WINDOWS", repr(windows)).replace("REGNUM", str(regnum))
                    .replace("SERVERPID", str(pid))
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
    earlier commit, for before/after figures taken in the same minutes); None: this one. The
    shim lays the tree out as setup.py installs it: api/'s modules are the package root, each
    other top-level folder a subpackage."""
    if tree is None:
        return None
    tree = os.path.abspath(tree)
    pkg = os.path.join(tmp, "shim", "accelstub")
    os.makedirs(pkg, exist_ok=True)
    for name in os.listdir(os.path.join(tree, "api")):
        if name.endswith(".py") and not os.path.lexists(os.path.join(pkg, name)):
            os.symlink(os.path.join(tree, "api", name), os.path.join(pkg, name))
    for top in ("stub", "devices", "tui", "emu", "configs", "testkit"):
        if os.path.isdir(os.path.join(tree, top)) and not os.path.lexists(os.path.join(pkg, top)):
            os.symlink(os.path.join(tree, top), os.path.join(pkg, top))
    return dict(os.environ, PYTHONPATH=os.path.dirname(pkg) + os.pathsep + tree)


def bench_accelstub(env: dict | None = None) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "accelstub.stub.cli", "serve", "max78000",
                             "--port", "0"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        while not line.startswith("accelstub ready"):
            if not line:  # the server ended before it was ready (its error is on stderr)
                raise RuntimeError("accelstub serve ended before its ready line")
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
        res = run_gdb_bench(port, SRAM_WINDOWS, regnum, proc.pid)
        res_core = run_gdb_bench(port, SRAM_WINDOWS[:1], 0, proc.pid)
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
        return run_gdb_bench(port, [(0x2000_0000, 0x80000)], 0, proc.pid)
    finally:
        proc.terminate()
        proc.wait(5)


def bench_floor(cmd: list[str]) -> dict:
    """A floor stub (FLOOR_PY or FLOOR_C) run by ``cmd``, through the same gdb script."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        return run_gdb_bench(port, [(0x2000_0000, 0x80000)], 0, proc.pid, arch="arm")
    finally:
        proc.terminate()
        proc.wait(5)


def mb_s(r: dict, key: str) -> float:
    return r["dump_bytes"] / r[key] / 1e6


#: the figures compared between servers: label, decimals, the figure of a run (higher is better)
FIGURES = [
    ("dump 512 KiB as it is (MB/s)", 1, lambda r: mb_s(r, "dump_s")),
    ("dump 512 KiB random (MB/s)", 1, lambda r: mb_s(r, "dump_random_s")),
    ("4-byte reads (/s)", 0, lambda r: r["reads_per_s"]),
    ("register round trips (/s)", 0, lambda r: r["reg_round_trips_per_s"]),
]


def med_best(runs: list[dict], figure) -> tuple[float, float]:
    vals = [figure(r) for r in runs]
    return statistics.median(vals), max(vals)


def report_servers(servers: dict[str, list[dict]], ours: str = "accelstub") -> None:
    """One line per figure and server: median and best over the rounds, and ours over it
    (median over median, best over best)."""
    print(f"{'':31s} {'server':12s} {'median':>10s} {'best':>10s}   accelstub / it")
    for label, places, figure in FIGURES:
        om, ob = med_best(servers[ours], figure)
        for name, runs in servers.items():
            m, b = med_best(runs, figure)
            ratio = "" if name == ours else f"   {om / m:.2f}x median, {ob / b:.2f}x best"
            print(f"{label:31s} {name:12s} {m:10.{places}f} {b:10.{places}f}{ratio}")
    # the server's CPU time per 4-byte read: what polling for the next request costs
    for name, runs in servers.items():
        us = sorted(r["server_us_per_read"] for r in runs)
        print(f"{'server CPU per 4-byte read (us)':31s} {name:12s} {statistics.median(us):10.1f}"
              f" {us[0]:10.1f} (least)")


def report_ours(name: str, runs: list[dict]) -> None:
    best = {k: (min if k.endswith(("_s", "_mib")) and not k.endswith("per_s") else max)(
        r[k] for r in runs) for k in runs[0] if isinstance(runs[0][k], (int, float))}
    print(f"{name}: device register round trips {best['reg_round_trips_per_s']:.0f} /s, core r0 "
          f"{best['core_reg_round_trips_per_s']:.0f} /s (best); serve -> accepted connection "
          f"{best['serve_to_connect_s'] * 1000:.0f} ms; RSS idle {best['idle_rss_mib']:.1f} MiB, "
          f"peak {best['peak_rss_mib']:.1f} MiB (VmHWM after the dumps)")


def version(exe: str) -> str:
    return subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.split("\n")[0]


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds, each running every server once (median and best)")
    ap.add_argument("--baseline", metavar="TREE",
                    help="also run accelstub from this source tree (e.g. `git archive` of an "
                         "earlier commit), rounds interleaved with this one")
    args = ap.parse_args(argv)
    if GDB is None:
        print("gdb-multiarch is not installed (apt-get install gdb-multiarch)")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        base_env = source_env(args.baseline, tmp)
        floor_c = build_floor_c(tmp)
        runners = {"accelstub": bench_accelstub}
        if args.baseline:
            runners["baseline"] = lambda: bench_accelstub(base_env)
        if floor_c:
            runners["floor C"] = lambda: bench_floor([floor_c])
        runners["floor Python"] = lambda: bench_floor([sys.executable, "-c", FLOOR_PY])
        if QEMU is not None:
            runners["QEMU"] = bench_qemu
        servers: dict[str, list[dict]] = {name: [] for name in runners}
        load0, t0 = os.getloadavg()[0], time.perf_counter()
        for _ in range(args.rounds):
            for name, run in runners.items():
                servers[name].append(run())
    print(f"{args.rounds} rounds in {time.perf_counter() - t0:.0f} s (load average {load0:.2f} "
          f"before, {os.getloadavg()[0]:.2f} after: round trips depend on it); {version(GDB)}")
    if QEMU is None:
        print("qemu-system-arm not installed: no reference run (apt-get install qemu-system-arm)")
    else:
        print(f"{version(QEMU)}: mps2-an386, 512 KiB at 0x20000000 (PacketSize 0x1000, acks on)")
    if floor_c is None:
        print("no C compiler: no C floor (the Python floor stands in)")
    report_servers(servers)
    report_ours("accelstub", servers["accelstub"])
    if args.baseline:
        report_ours("baseline", servers["baseline"])
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(main, kernels_here=False))
