"""Soak `accelstub serve` with all four client kinds at once and report its memory (issue 25 #6).

    python benchmarks/soak_ports.py --seconds 120                      # max78000
    python benchmarks/soak_ports.py --seconds 60 --devices max78000 nvdla
    python benchmarks/soak_ports.py --seconds 60 --no-fuzz             # well-formed sessions only
    python benchmarks/soak_ports.py --seconds 60 --tracemalloc 15       # Python lines that grew

One server per device runs in a subprocess bound to 127.0.0.1 with --port 0 (its own cwd, a
temporary directory); four client threads drive it at once until --seconds or --ops is
reached, whichever comes first, then the soak stops the server itself:

- gdb: a gdb-like session in ack mode (no notifications): ``?``, ``g``, ``p``, ``m`` reads,
  ``Z0``/``z0`` at a unit's pc, ``Z2``/``z2`` on memory, ``s``, ``c`` then Ctrl-C, ``monitor``
  commands (``status``, ``reset init``), ``D`` and a new connection every 40 operations;
- telnet: OpenOCD command lines (``mdw``, ``reg``, ``bp``/``rbp``, ``wp``/``rwp``, ``step``,
  ``resume``, ``halt``, ``reset``, ``status``, ``units``, ``poll``), a new connection every 60;
- Tcl RPC: the same commands with ``tcl notifications on``, a new connection every 60;
- TUI polling: the TUI's own client (tui/target.py ``Target``: two RSP connections, one with
  ``%Stop`` notifications) polling ``monitor status``, ``monitor units``, registers and memory
  as the app's refresh does, a new Target every 30 polls;
- and, unless --no-fuzz, three more clients sending benchmarks/fuzz_ports.py's batches of real
  and mutated requests (200 a connection) to the gdb, telnet and Tcl ports.

Reported: the CPU model, the server's RSS (VmRSS of /proc/PID/status) when ready, after
--warmup seconds of the mix (the start: first use loads kernels), every --interval seconds and
at the end, operations per client, and the tracebacks the server logged. With --tracemalloc N
the server runs under tracemalloc and, at the end, logs the N source lines that gained the most
memory since the start (printed here). Not a test: tests/stub/test_soak.py checks what grew.

Issue 25 #6, 2-core AMD EPYC, 60 s after the warm-up: RSS grew 238 -> 368 MiB (max78000) and
1011 -> 1231 MiB (nvdla) with no Python object growing; glibc's heaps kept freed multi-megabyte
buffers (stub/heap.py). With the mmap threshold pinned: 201 -> 206 and 204 -> 209 MiB.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import signal
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests load this file by path
from accelstub.testkit import port_fuzz as fuzz_ports  # noqa: E402
from machine import bench_main  # noqa: E402

DEVICES = fuzz_ports.DEVICES
EOM = b"\x1a"

#: run in the server process instead of ``-m accelstub.stub.cli`` for --tracemalloc: snapshot
#: after start-up (SIGUSR1) and, at SIGUSR2, log the lines that gained the most since
TRACEMALLOC_MAIN = """
import signal, sys, tracemalloc
tracemalloc.start(int(sys.argv[1]))
base = []
def mark(*a):
    base[:] = [tracemalloc.take_snapshot()]
def report(*a):
    snap = tracemalloc.take_snapshot()
    top = snap.compare_to(base[0], "lineno") if base else snap.statistics("lineno")
    print("tracemalloc: top growth since the mark", file=sys.stderr)
    for s in top[:int(sys.argv[2])]:
        print("tracemalloc:", s, file=sys.stderr)
    sys.stderr.flush()
signal.signal(signal.SIGUSR1, mark)
signal.signal(signal.SIGUSR2, report)
from accelstub.stub.cli import main
sys.exit(main(sys.argv[3:]))
"""


def rss_kib(pid: int) -> int:
    """VmRSS of ``pid`` in KiB (0 once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class SoakServer(fuzz_ports.Server):
    """fuzz_ports' server, optionally under tracemalloc."""

    def __init__(self, device: str, workdir: str, tracemalloc_top: int = 0) -> None:
        super().__init__(device, workdir)
        self.tracemalloc_top = tracemalloc_top

    def command(self) -> list[str]:
        cmd = super().command()
        if not self.tracemalloc_top:
            return cmd
        return [sys.executable, "-c", TRACEMALLOC_MAIN, "8", str(self.tracemalloc_top)] + cmd[3:]

    def signal(self, sig: int) -> None:
        """Only under tracemalloc: elsewhere SIGUSR1/2 would end the server."""
        if self.tracemalloc_top and self.alive():
            os.kill(self.proc.pid, sig)

    def tracemalloc_lines(self) -> list[str]:
        lines = open(self.log_path, errors="replace").read().splitlines()
        return [ln for ln in lines if ln.startswith("tracemalloc:")]


# -- the four clients -----------------------------------------------------------------------------

class Stop(Exception):
    """The soak is over (or the server went away): end the client loop."""


class Client:
    """One client kind: :meth:`session` runs one connection's worth of operations (each
    counted by :meth:`tick`); the loop starts new sessions until ``deadline`` or ``budget``."""

    kind = ""

    def __init__(self, port: int, rng: random.Random, units: list[int], ranges, deadline: float,
                 budget: Budget) -> None:
        self.port, self.rng, self.units, self.ranges = port, rng, units, ranges
        self.deadline, self.budget = deadline, budget
        self.ops = 0
        self.errors: list[str] = []

    @property
    def label(self) -> str:
        return self.kind if type(self) is not FuzzClient else f"{self.kind}-fuzz"

    def tick(self) -> None:
        """Count one operation; Stop when time or the operation budget is spent."""
        self.ops += 1
        if time.monotonic() > self.deadline or not self.budget.take():
            raise Stop

    def addr(self) -> int:
        s, e = self.rng.choice(self.ranges)
        return (s + self.rng.randrange(max(1, min(e - s - 64, 1 << 16)))) & ~3

    def loop(self) -> None:
        while time.monotonic() < self.deadline and self.budget.left():
            try:
                self.session()
            except Stop:
                return
            except (OSError, RuntimeError) as e:
                self.errors.append(f"{type(e).__name__}: {e}")
                if len(self.errors) > 20:
                    return
                time.sleep(0.2)

    def session(self) -> None:
        raise NotImplementedError


class Budget:
    """Operations left over all clients (thread-safe)."""

    def __init__(self, n: int) -> None:
        self.n, self._lock = n, threading.Lock()

    def take(self) -> bool:
        with self._lock:
            self.n -= 1
            return self.n > 0

    def left(self) -> bool:
        return self.n > 0


def _recv_until(sock: socket.socket, buf: bytearray, done, timeout: float = 30.0) -> bytes:
    """Read into ``buf`` until ``done(buf)`` returns an end index; return and drop that part."""
    t_end = time.monotonic() + timeout
    while True:
        end = done(buf)
        if end is not None:
            out = bytes(buf[:end])
            del buf[:end]
            return out
        if time.monotonic() > t_end:
            raise RuntimeError("no answer")
        sock.settimeout(max(0.1, t_end - time.monotonic()))
        data = sock.recv(1 << 16)
        if not data:
            raise OSError("connection closed by the server")
        buf += data


class GdbClient(Client):
    kind = "gdb"
    PACKET = re.compile(rb"\$([^#]*)#[0-9a-fA-F]{2}")

    def session(self) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        buf = bytearray()

        def packet(payload: bytes, reply: bool = True) -> bytes:
            sock.sendall(fuzz_ports.frame(payload))
            if not reply:
                return b""
            return wait()

        def wait() -> bytes:
            while True:  # skip acks and console (O) packets, ack each packet as gdb does
                def done(b: bytearray):
                    m = self.PACKET.search(b)
                    return m.end() if m else None
                raw = _recv_until(sock, buf, done)
                sock.sendall(b"+")
                body = self.PACKET.search(raw).group(1)
                if not (body.startswith(b"O") and body != b"OK"):
                    return body

        try:
            packet(b"qSupported:multiprocess+;swbreak+;xmlRegisters=arm")
            for _ in range(40):
                self.tick()
                pick = self.rng.randrange(12)
                if pick == 0:
                    packet(b"?")
                elif pick == 1:
                    packet(b"g")
                elif pick == 2:
                    packet(b"m%x,%x" % (self.addr(), self.rng.choice([4, 64, 1024])))
                elif pick == 3:
                    packet(b"p%x" % self.rng.randrange(26))
                elif pick == 4 and self.units:
                    a = self.rng.choice(self.units)
                    packet(b"Z0,%x,4" % a)
                    packet(b"z0,%x,4" % a)
                elif pick == 5:
                    a = self.addr()
                    packet(b"Z2,%x,4" % a)
                    packet(b"z2,%x,4" % a)
                elif pick == 6:
                    packet(b"s")
                elif pick == 7:
                    packet(b"c", reply=False)
                    time.sleep(0.01)
                    sock.sendall(b"\x03")
                    wait()
                elif pick == 8:
                    packet(b"qRcmd," + b"status".hex().encode())
                elif pick == 9:
                    packet(b"qRcmd," + self.rng.choice([b"reset init", b"reset halt"]).hex()
                           .encode())
                elif pick == 10:
                    packet(b"qXfer:features:read:target.xml:0,1000")
                else:
                    packet(b"qRcmd," + b"units".hex().encode())
            packet(b"D")
        finally:
            sock.close()


COMMANDS = ["mdw {a:#x} 4", "mdb {a:#x} 16", "reg", "reg pc", "bp {u:#x} 4 hw", "rbp {u:#x}",
            "wp {a:#x} 4 w", "rwp {a:#x}", "step", "resume", "halt", "wait_halt 100", "poll",
            "status", "units", "reset init", "reset halt", "targets", "version", "help mdw"]


def command(client: Client) -> str:
    u = client.rng.choice(client.units) if client.units else 0
    return client.rng.choice(COMMANDS).format(a=client.addr(), u=u)


class TelnetClient(Client):
    kind = "telnet"

    def session(self) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        buf = bytearray()
        prompt = lambda b: len(b) if b.endswith(b"> ") else None  # noqa: E731
        try:
            _recv_until(sock, buf, prompt)
            for _ in range(60):
                self.tick()
                sock.sendall(command(self).encode() + b"\r\n")
                _recv_until(sock, buf, prompt)
            sock.sendall(b"exit\r\n")
        finally:
            sock.close()


class TclClient(Client):
    kind = "tcl"

    def session(self) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        buf = bytearray()

        def request(text: str) -> bytes:
            sock.sendall(text.encode() + EOM)
            while True:  # notifications ("type target_...") come between the replies
                msg = _recv_until(sock, buf, lambda b: b.find(EOM) + 1 or None)
                if not msg.startswith(b"type target_"):
                    return msg

        try:
            request("tcl notifications on")
            for _ in range(60):
                self.tick()
                request(command(self))
            request("exit")
        finally:
            sock.close()


class TuiClient(Client):
    """What the TUI's refresh asks, through the TUI's own client class."""

    kind = "tui"

    def session(self) -> None:
        from accelstub.stub.client import RspError
        from accelstub.tui.target import Target

        try:
            target = Target("127.0.0.1", self.port, timeout=30)
        except RspError as e:
            raise RuntimeError(str(e)) from None
        regs = [r for b in target.desc.blocks for r in b.registers][:24]
        try:
            for _ in range(30):
                self.tick()
                target.status()
                target.units()
                target.read_regs(regs)
                target.read_memory(target.data_address, 256)
        except RspError as e:
            raise RuntimeError(str(e)) from None
        finally:
            target.close()


class FuzzClient(Client):
    """fuzz_ports' batches of real and mutated requests on one port (``--fuzz``): each
    session is one batch of 200 on a new connection."""

    def __init__(self, kind: str, target, *args) -> None:
        super().__init__(*args)
        self.kind = kind
        self.gen = fuzz_ports.Generator(target, self.rng)

    def session(self) -> None:
        batch = [getattr(self.gen, self.kind)() for _ in range(200)]
        sent, problem = fuzz_ports.send_batch(self.port, batch, 120.0)
        for _ in range(max(1, sent)):
            self.tick()
        if problem:
            raise RuntimeError(f"batch {problem}")


KINDS = [GdbClient, TelnetClient, TclClient, TuiClient]


# -- one device --------------------------------------------------------------------------------

def unit_addresses(port: int) -> list[int]:
    """The program's unit addresses, from ``units`` on the telnet port."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    buf = bytearray()
    prompt = lambda b: len(b) if b.endswith(b"> ") else None  # noqa: E731
    try:
        _recv_until(sock, buf, prompt)
        sock.sendall(b"units\r\n")
        text = _recv_until(sock, buf, prompt).decode(errors="replace")
    finally:
        sock.close()
    return sorted({int(m, 16) for m in re.findall(r"^[ *>]*(0x[0-9a-fA-F]+)", text, re.M)})


def soak_device(device: str, seconds: float, ops: int, seed: int, workdir: str,
                interval: float = 10.0, tracemalloc_top: int = 0, warmup: float = 15.0,
                fuzz: bool = False, report=print) -> dict:
    """Soak one device: ``warmup`` seconds of the mix (first use compiles and loads kernels and
    sizes work arrays: not growth), then ``seconds`` more. Returns the RSS when ready, samples
    (seconds since the warm-up, KiB; the first is the start), operations per kind, client
    errors and the server's tracebacks."""
    target = fuzz_ports.Target.load(device)
    server = SoakServer(device, workdir, tracemalloc_top)
    server.start()
    result: dict = {"device": device, "samples": [], "ops": {}, "errors": {}}
    try:
        ports = dict(server.ports, tui=server.ports["gdb"])
        units = unit_addresses(ports["telnet"])
        result["ready_kib"] = rss_kib(server.proc.pid)
        report(f"{device}: RSS when ready {result['ready_kib'] / 1024:.1f} MiB; "
               f"{len(units)} unit addresses; warm-up {warmup:.0f} s, then {seconds:.0f} s")
        rng = random.Random(f"{seed}-{device}")
        t0 = time.monotonic()
        deadline = t0 + warmup + seconds
        budget = Budget(ops)
        clients = [k(ports[k.kind], random.Random(rng.getrandbits(64)), units, target.ranges,
                     deadline, budget) for k in KINDS]
        if fuzz:  # the three ports also get fuzz_ports' batches, each from a client of its own
            clients += [FuzzClient(kind, target, ports[kind], random.Random(rng.getrandbits(64)),
                                   units, target.ranges, deadline, budget)
                        for kind in ("gdb", "telnet", "tcl")]
        threads = [threading.Thread(target=c.loop, name=c.kind, daemon=True) for c in clients]
        for t in threads:
            t.start()
        next_sample = t0 + warmup  # the first sample (the start) ends the warm-up
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=0.2)
            if time.monotonic() >= next_sample:
                next_sample += interval
                el, kib = time.monotonic() - t0 - warmup, rss_kib(server.proc.pid)
                if not result["samples"]:
                    server.signal(signal.SIGUSR1)  # tracemalloc: growth counts from here
                result["samples"].append((el, kib))
                report(f"  {el:6.0f} s  RSS {kib / 1024:7.1f} MiB  ops " + ", ".join(
                    f"{c.label} {c.ops}" for c in clients))
            if not server.alive():
                break
        el, kib = time.monotonic() - t0 - warmup, rss_kib(server.proc.pid)
        result["samples"].append((el, kib))
        result["ops"] = {c.label: c.ops for c in clients}
        result["errors"] = {c.label: c.errors for c in clients if c.errors}
        result["alive"] = server.alive()
        if tracemalloc_top and server.alive():
            server.signal(signal.SIGUSR2)
            t_end = time.monotonic() + 120  # a snapshot of a few 100 MB takes a while
            while time.monotonic() < t_end and len(server.tracemalloc_lines()) <= tracemalloc_top:
                time.sleep(0.5)
    finally:
        server.stop()
    result["tracebacks"] = server.tracebacks()
    result["tracemalloc"] = server.tracemalloc_lines()
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0, help="per device")
    ap.add_argument("--ops", type=int, default=1_000_000, help="operations per device, at most")
    ap.add_argument("--devices", nargs="+", default=["max78000"], choices=DEVICES)
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between RSS samples")
    ap.add_argument("--warmup", type=float, default=15.0,
                    help="seconds of the mix before the start sample (kernels load on first use)")
    ap.add_argument("--seed", type=int, default=25)
    ap.add_argument("--fuzz", action=argparse.BooleanOptionalAction, default=True,
                    help="also send fuzz_ports' mutated batches to the gdb, telnet and Tcl ports")
    ap.add_argument("--tracemalloc", type=int, default=0, metavar="N",
                    help="log the N lines that gained the most memory")
    args = ap.parse_args(argv)
    failed = False
    with tempfile.TemporaryDirectory(prefix="accelstub-soak-") as workdir:
        for device in args.devices:
            res = soak_device(device, args.seconds, args.ops, args.seed, workdir, args.interval,
                              args.tracemalloc, args.warmup, args.fuzz)
            (_, start), (el, end) = res["samples"][0], res["samples"][-1]
            print(f"{device:10s} RSS ready {res['ready_kib'] / 1024:.1f} MiB, start "
                  f"{start / 1024:.1f} MiB, end {end / 1024:.1f} MiB "
                  f"({(end - start) / 1024:+.1f}) after {el:.0f} s; ops " +
                  ", ".join(f"{k} {n}" for k, n in res["ops"].items()) +
                  f"; tracebacks {len(res['tracebacks'])}", flush=True)
            for kind, errs in res["errors"].items():
                print(f"     {kind} client errors: {len(errs)}; first: {errs[0]}")
            for t in sorted(set(res["tracebacks"])):
                print("     traceback:", t)
            for line in res["tracemalloc"]:
                print("    ", line)
            failed = failed or not res.get("alive", False) or bool(res["tracebacks"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(bench_main(main, kernels_here=False))
