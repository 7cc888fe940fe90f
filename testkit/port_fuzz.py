"""Fuzz the gdb, telnet and Tcl RPC ports of `accelstub serve` (issue 14 #7). An importable
module (tests/stub/test_fuzz_smoke.py and benchmarks/soak_ports.py use it); its command line is
benchmarks/fuzz_ports.py.

One server per device runs in a subprocess (its own cwd, a temporary directory, so file
commands write nothing elsewhere). Three client threads, one per port, send batches of
packets: real requests (RSP packets with correct checksums, OpenOCD commands, Tcl requests
ending in 0x1a) built from the device's memory map, most of them mutated (bit flips, inserted,
deleted, duplicated or replaced bytes, splices, interesting numbers, wrong checksums), plus
random bytes, truncated and oversized packets. A batch is sent on a new connection while its
replies are read; then the client half-closes and reads until the server closes, so every
packet of the batch was taken by the server before the batch counts as sent.

After each round (one batch per port) a well-formed probe goes to each port on a fresh
connection: `qAttached` (gdb), `version` (telnet, Tcl). Reported per device and in total:
packets sent, crashes (the server process died, or a port refused connections), hangs (a probe
not answered within --probe-timeout, or a batch the server did not finish within
--batch-timeout), tracebacks the server logged (handled, but each is a bug: a request that
should have had a clean error), and the server's peak RSS (VmHWM). A crash or hang restarts the
server and saves the batch that preceded it under --out.
Not a test: tests/stub/test_fuzz_smoke.py runs a few thousand packets of it.
These batches beside well-formed gdb, telnet, Tcl and TUI clients, with the server's RSS over
time: benchmarks/soak_ports.py.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

DEVICES = ["max78000", "ethos-u85", "ne16", "nvdla"]
EOM = b"\x1a"
IAC = 255

#: commands never sent: they stop the server (shutdown) or only wait (sleep); dump_image and
#: svd would write files of up to 64 MiB per request
EXCLUDED = {"shutdown", "sleep", "dump_image", "svd"}


# framing written here, not imported from stub/rsp_codec.py: the fuzzer must not share a bug
# with the code it attacks
def frame(payload: bytes) -> bytes:
    return b"$" + payload + b"#%02x" % (sum(payload) & 0xFF)


def escape(data: bytes) -> bytes:
    out = bytearray()
    for b in data:
        if b in b"#$}*":
            out += bytes((0x7D, b ^ 0x20))
        else:
            out.append(b)
    return bytes(out)


# -- what a device offers: addresses, registers ----------------------------------------------

@dataclass
class Target:
    name: str
    ranges: list[tuple[int, int]]  # populated (start, end)
    regnums: list[int]
    regnames: list[str]
    monitor: list[str]

    @classmethod
    def load(cls, name: str) -> Target:
        from accelstub.devices import open_device
        from accelstub.stub.target_xml import register_table

        dev = open_device(name)
        desc = dev.description
        ranges = [(s, e) for r in desc.regions for s, e in r.populated]
        table = register_table(desc)
        regs = [e for e in table]
        return cls(name, ranges, [e.regnum for e in regs], [e.name for e in regs],
                   sorted(dev.monitor_commands()))


class Generator:
    """Requests for one device, real and mutated."""

    INTERESTING = [0, 1, 2, 3, 4, 7, 8, 0xF, 0x10, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000,
                   0x7FFFFFFF, 0x80000000, 0xFFFFFFFC, 0xFFFFFFFF, 0x100000000, 1 << 64]
    SPECIAL = b"$#}*+-\x03\x1a\r\n\x00\xff \t{}[]\"\\;$"

    def __init__(self, target: Target, rng: random.Random) -> None:
        self.t = target
        self.rng = rng

    # -- numbers ---------------------------------------------------------------------------
    def addr(self) -> int:
        r = self.rng
        if r.random() < 0.1:
            return r.choice(self.INTERESTING) & 0xFFFFFFFF
        s, e = r.choice(self.t.ranges)
        pick = r.random()
        if pick < 0.15:
            return max(s, e - r.choice([1, 2, 4, 8, 16]))  # near the end of a range
        if pick < 0.25:
            return e  # just past it
        return s + r.randrange(max(1, min(e - s, 1 << 16))) & ~r.choice([0, 0, 3])

    def length(self) -> int:
        r = self.rng
        return r.choice([1, 2, 4, 4, 4, 8, 16, 64, 256, r.randrange(1, 4096)])

    def data(self, n: int) -> bytes:
        return bytes(self.rng.getrandbits(8) for _ in range(min(n, 512)))

    # -- the three protocols -------------------------------------------------------------
    def command(self) -> str:
        """An OpenOCD command line (monitor, telnet, Tcl)."""
        r, a = self.rng, self.addr()
        regname = r.choice(self.t.regnames)
        forms = [
            f"mdw {a:#x} {r.choice([1, 2, 8, 100])}", f"mdb {a:#x} {self.length()}",
            f"mdh {a:#x}", f"mdd {a:#x} 2", f"mww {a:#x} {r.getrandbits(32):#x}",
            f"mwb {a:#x} {r.getrandbits(8)} {r.choice([1, 4, 64])}", f"mwh {a:#x} 0x1234",
            f"read_memory {a:#x} {r.choice([8, 16, 32, 64])} {r.choice([1, 4, 16])}",
            f"write_memory {a:#x} 32 {{{r.getrandbits(32):#x} 0x2}}",
            "reg", f"reg {r.randrange(40)}", f"reg {regname}",
            f"reg {regname} {r.getrandbits(32):#x}",
            "get_reg {r0 pc}", f"set_reg {{r0 {r.getrandbits(32)}}}", f"bp {a:#x} 4 hw",
            "bp", f"rbp {a:#x}", "rbp all", f"wp {a:#x} 4 w", f"wp {a:#x} 8 r", "wp",
            f"rwp {a:#x}", "rwp all", "step", "resume", "halt", "halt 100", "wait_halt 50",
            "poll", "poll on", "reset halt", "reset init", "reset run", "reset", "targets",
            "targets 0", "status", "units", "regions", "help", "help mdw", "version",
            "echo hello", "echo -n x", f"capture {{mdw {a:#x}}}", f"host mdw {a:#x} 2",
            f"host mdb {a:#x}", "tcl notifications on", "tcl notifications off", "init",
            f"load_image missing.bin {a:#x}", f"verify_image missing.hex {a:#x} ihex",
            f"load_image /dev/zero {a:#x} bin", "set x 1", "expr 1+1", "mdw [expr 1]", "mdw $x",
            "flash info", "jtag names", "ocd_mdw 0x0", f"ocd_mdw {a:#x}", "xyz", '"unbalanced',
            "{a b", "mdw 0x0 {1 2}", "mdw \\x30", "; ;", "mdw 0x10;mdw 0x20",
        ] + self.t.monitor
        return r.choice(forms)

    def gdb_payload(self) -> bytes:
        r, a, n = self.rng, self.addr(), self.length()
        reg = r.choice(self.t.regnums + [0, 15, 25, 26, 0xFFFF])
        data = self.data(min(n, 64))
        forms = [
            b"?", b"g", b"G" + bytes(68).hex().encode(), b"p%x" % reg,
            b"P%x=%s" % (reg, data[:4].hex().encode()), b"m%x,%x" % (a, n),
            b"x%x,%x" % (a, n), b"M%x,%x:%s" % (a, len(data), data.hex().encode()),
            b"X%x,%x:%s" % (a, len(data), escape(data)), b"c", b"s", b"c%x" % a, b"vCont?",
            b"vCont;c", b"vCont;s", b"vCont;t", b"Z0,%x,4" % a, b"z0,%x,4" % a,
            b"Z%d,%x,%x" % (r.choice([1, 2, 3, 4, 5]), a, n), b"z%d,%x,%x" % (r.randrange(6), a, n),
            b"qSupported:multiprocess+;swbreak+;xmlRegisters=arm;accelstub-notify+",
            b"qXfer:features:read:target.xml:%x,%x" % (r.randrange(0x40000), n),
            b"qXfer:memory-map:read::%x,%x" % (r.randrange(0x1000), n),
            b"qXfer:features:read:other.xml:0,100",
            b"qRcmd," + self.command().encode().hex().encode(),
            b"qAttached", b"qOffsets", b"qSymbol::", b"qC", b"qfThreadInfo", b"Hg0", b"Hc-1",
            b"T1", b"vMustReplyEmpty", b"QStartNoAckMode", b"!", b"vFile:open:2f,0,0",
        ]
        rare = [b"D", b"k", b"vKill;1"]  # these end the connection
        return r.choice(rare) if r.random() < 0.003 else r.choice(forms)

    def gdb(self) -> bytes:
        r = self.rng
        pick = r.random()
        if pick < 0.15:
            return frame(self.gdb_payload())
        if pick < 0.70:
            return frame(self.mutate(self.gdb_payload()))
        if pick < 0.85:
            return self.mutate(frame(self.gdb_payload()))
        if pick < 0.90:
            return r.choice([b"+", b"-", b"\x03", b"+$", b"$#", b"$", b"#00", b"%Stop#00"])
        if pick < 0.96:
            return self.random_bytes()
        if pick < 0.999:
            return frame(self.gdb_payload())[:r.randrange(1, 12)]  # truncated
        # oversized: past PacketSize (0x20000), sometimes framed correctly
        big = b"M%x,10000:" % self.addr() + b"00" * r.choice([0x10000, 0x10010, 0x18000])
        return frame(big) if r.random() < 0.5 else b"$" + big

    def telnet(self) -> bytes:
        r = self.rng
        end = r.choice([b"\r\n", b"\n", b"\r", b"\r\x00", b"\r\n"])
        pick = r.random()
        if pick < 0.2:
            return self.command().encode() + end
        if pick < 0.7:
            return self.mutate(self.command().encode()) + end
        if pick < 0.85:  # a person at a terminal: options, editing keys, escape sequences
            keys = [bytes([IAC, 253, 1]), bytes([IAC, 254, 1]), bytes([IAC, 251, 31]),
                    bytes([IAC, 250, 31, 0, 80, 0, 24, IAC, 240]), bytes([IAC, 244]),
                    b"\x1b[A", b"\x1b[B", b"\x1b[C", b"\x1b[D", b"\x1b[3~", b"\x1b[H",
                    b"\x1bOF", b"\x7f", b"\x08", b"\x03", b"\x15", b"\x01", b"\x05",
                    b"\x1b[" + b"9" * r.randrange(40) + b"~", bytes([IAC, IAC])]
            parts = [r.choice(keys) if r.random() < 0.5 else self.command().encode()[:8]
                     for _ in range(r.randrange(1, 8))]
            return b"".join(parts) + end
        if pick < 0.95:
            return self.random_bytes() + end
        if pick < 0.9995:
            return self.command().encode()[:r.randrange(1, 10)]  # no line end
        return b"x" * r.choice([1 << 20, (1 << 20) + 10]) + end  # past MAX_LINE

    def tcl(self) -> bytes:
        r = self.rng
        pick = r.random()
        if pick < 0.2:
            return self.command().encode() + EOM
        if pick < 0.8:
            return self.mutate(self.command().encode()) + EOM
        if pick < 0.95:
            return self.random_bytes() + EOM
        if pick < 0.9998:
            return self.mutate(self.command().encode())  # no terminator: joins the next one
        return b"y" * ((4 << 20) + 100) + EOM  # past the 4 MiB request limit

    # -- mutations -------------------------------------------------------------------------
    def random_bytes(self) -> bytes:
        r = self.rng
        n = r.choice([1, 2, 8, 32, 200, 2000])
        return bytes(r.getrandbits(8) for _ in range(n))

    def mutate(self, data: bytes) -> bytes:
        r = self.rng
        buf = bytearray(data)
        for _ in range(r.choice([1, 1, 1, 2, 3, 8])):
            op = r.randrange(9)
            i = r.randrange(len(buf) + 1)
            if op == 0 and buf:  # flip a bit
                j = min(i, len(buf) - 1)
                buf[j] ^= 1 << r.randrange(8)
            elif op == 1 and buf:  # replace with a byte that means something somewhere
                buf[min(i, len(buf) - 1)] = r.choice(self.SPECIAL)
            elif op == 2:  # insert
                buf[i:i] = bytes(r.getrandbits(8) for _ in range(r.randrange(1, 6)))
            elif op == 3 and buf:  # delete
                del buf[i:i + r.randrange(1, 8)]
            elif op == 4 and buf:  # duplicate a piece, sometimes many times
                j = r.randrange(len(buf))
                piece = buf[j:j + r.randrange(1, 16)]
                buf[i:i] = piece * r.choice([1, 2, 50, 2000])
            elif op == 5:  # an interesting number in hex or decimal
                v = r.choice(self.INTERESTING + [-1, -0x80000000])
                text = r.choice(["%x", "%d", "%#x", "-%x"]) % abs(v) if v >= 0 else "%d" % v
                buf[i:i] = text.encode()
            elif op == 6:  # truncate
                del buf[i:]
            elif op == 7:  # splice another request in
                other = r.choice([self.command().encode(), self.gdb_payload()])
                buf[i:] = other[r.randrange(len(other) + 1):]
            elif op == 8:  # a long run of digits or separators
                filler = r.choice([b"f", b"0", b",", b":", b";", b" ", b"{"])
                buf[i:i] = filler * r.choice([20, 300])
        return bytes(buf)


# -- the server and the clients --------------------------------------------------------------

class Server:
    def __init__(self, device: str, workdir: str) -> None:
        self.device = device
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        self.ports: dict[str, int] = {}
        self.log_path = os.path.join(workdir, f"{device}.stderr")
        self.peak_kib = 0

    def command(self) -> list[str]:
        """The server's command line (every port on 127.0.0.1, chosen by the system)."""
        return [sys.executable, "-m", "accelstub.stub.cli", "serve", self.device, "--port", "0",
                "--telnet-port", "0", "--tcl-port", "0"]

    def start(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            self.command(), stdout=subprocess.PIPE,
            stderr=self._log, text=True, cwd=self.workdir, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        while line and not line.startswith("accelstub ready"):
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.device}: server did not start (see {self.log_path})")
        info = json.loads(line.split(" ", 2)[2])
        self.ports = {"gdb": info["gdb"][0], "telnet": info["telnet"], "tcl": info["tcl"]}
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()  # drain stdout

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def sample_rss(self) -> None:
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        self.peak_kib = max(self.peak_kib, int(line.split()[1]))
        except (OSError, AttributeError):
            pass

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.sample_rss()
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc is not None:
            self._log.close()

    def tracebacks(self) -> list[str]:
        """The last line of each traceback in the server's log (the exception)."""
        out = []
        lines = open(self.log_path, errors="replace").read().splitlines()
        for i, line in enumerate(lines):
            if line.startswith("Traceback (most recent call last)"):
                j = i + 1
                while j < len(lines) and (lines[j].startswith(" ") or not lines[j].strip()):
                    j += 1
                out.append(lines[j] if j < len(lines) else "?")
        return out


def send_batch(port: int, packets: list[bytes], timeout: float) -> tuple[int, str]:
    """Send ``packets`` on a new connection while reading the replies, half-close, read until
    the server closes. Returns (packets sent, problem: "" | "refused" | "stalled")."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return 0, "refused"
    s.setblocking(False)
    ends = []
    total = 0
    for p in packets:
        total += len(p)
        ends.append(total)
    data = memoryview(b"".join(packets))
    sent, deadline, closed = 0, time.monotonic() + timeout, False
    try:
        while sent < total and not closed:
            if time.monotonic() > deadline:
                return sum(1 for e in ends if e <= sent), "stalled"
            r, w, _ = select.select([s], [s], [], 0.5)
            if r:
                try:
                    if not s.recv(1 << 20):
                        closed = True  # the server closed (exit, D, ^D ...): the rest is not sent
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    closed = True
            if w and not closed:
                try:
                    sent += s.send(data[sent:sent + (1 << 16)])
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    closed = True
        if not closed:
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:  # the server closed as the last packet went (ENOTCONN): as above
                closed = True
        if not closed:
            while True:  # until the server has taken every packet and closes
                if time.monotonic() > deadline:
                    return sum(1 for e in ends if e <= sent), "stalled"
                r, _, _ = select.select([s], [], [], 0.5)
                if r:
                    try:
                        if not s.recv(1 << 20):
                            break
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        break
    finally:
        s.close()
    return sum(1 for e in ends if e <= sent), ""


def probe(kind: str, port: int, timeout: float) -> str:
    """A well-formed request on a fresh connection; "" if answered, else what went wrong."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except OSError as e:
        return f"refused ({e})"
    try:
        s.settimeout(timeout)
        want, buf = {"gdb": b"$1#31", "telnet": b"accelstub ", "tcl": b"accelstub "}[kind], b""
        if kind == "gdb":
            s.sendall(frame(b"qAttached"))
        elif kind == "telnet":
            s.sendall(b"version\r\n")
        else:
            s.sendall(b"version" + EOM)
        t_end = time.monotonic() + timeout
        while want not in buf:
            if time.monotonic() > t_end:
                return "no answer"
            data = s.recv(65536)
            if not data:
                return "closed without answering"
            buf += data
        return ""
    except TimeoutError:
        return "no answer"
    except OSError as e:
        return f"error ({e})"
    finally:
        s.close()


@dataclass
class Result:
    device: str
    packets: dict = field(default_factory=lambda: {"gdb": 0, "telnet": 0, "tcl": 0})
    crashes: list = field(default_factory=list)
    hangs: list = field(default_factory=list)
    tracebacks: list = field(default_factory=list)
    peak_rss_mib: float = 0.0
    seconds: float = 0.0

    @property
    def sent(self) -> int:
        return sum(self.packets.values())


def fuzz_device(device: str, packets: int, batch: int, seed: int, workdir: str,
                probe_timeout: float = 10.0, batch_timeout: float = 120.0,
                out_dir: str | None = None, progress=None) -> Result:
    rng = random.Random(f"{seed}-{device}")
    gen_rngs = {k: random.Random(rng.getrandbits(64)) for k in ("gdb", "telnet", "tcl")}
    target = Target.load(device)
    gens = {k: Generator(target, gen_rngs[k]) for k in gen_rngs}
    res = Result(device)
    server = Server(device, workdir)
    server.start()
    t0 = time.perf_counter()
    round_no = 0
    try:
        while res.sent < packets:
            round_no += 1
            left = packets - res.sent
            batches = {k: [getattr(gens[k], k)() for _ in range(max(1, min(batch, left // 3 + 1)))]
                       for k in ("gdb", "telnet", "tcl")}
            outcome: dict = {}

            def run(kind: str) -> None:
                outcome[kind] = send_batch(server.ports[kind], batches[kind], batch_timeout)

            threads = [threading.Thread(target=run, args=(k,)) for k in batches]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            problems = []
            for kind, (n, problem) in outcome.items():
                res.packets[kind] += n
                if problem:
                    problems.append((kind, problem))
            if server.alive():
                for kind in ("gdb", "telnet", "tcl"):
                    p = probe(kind, server.ports[kind], probe_timeout)
                    if p:
                        problems.append((kind, "probe: " + p))
            server.sample_rss()
            if not server.alive() or problems:
                died = not server.alive()
                what = {"round": round_no, "problems": problems,
                        "exit_code": server.proc.poll() if died else None}
                if died or any("refused" in p for _, p in problems):
                    res.crashes.append(what)
                else:
                    res.hangs.append(what)
                if out_dir:
                    os.makedirs(out_dir, exist_ok=True)
                    for kind, pk in batches.items():
                        with open(os.path.join(out_dir, f"{device}-r{round_no}-{kind}.bin"),
                                  "wb") as f:
                            f.write(b"".join(pk))
                server.stop()
                server = Server(device, workdir)
                server.start()
            if progress:
                progress(res, time.perf_counter() - t0)
    finally:
        server.stop()
        res.peak_rss_mib = max(res.peak_rss_mib, server.peak_kib / 1024)
        res.tracebacks = server.tracebacks()
        res.seconds = time.perf_counter() - t0
        if out_dir and res.tracebacks:
            import shutil

            os.makedirs(out_dir, exist_ok=True)
            shutil.copy(server.log_path, out_dir)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=1_000_000, help="total over all devices")
    ap.add_argument("--batch", type=int, default=400, help="packets per connection")
    ap.add_argument("--devices", nargs="+", default=DEVICES, choices=DEVICES)
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--probe-timeout", type=float, default=10.0)
    ap.add_argument("--batch-timeout", type=float, default=120.0)
    ap.add_argument("--out", default="fuzz-out", help="batches before a crash or hang")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    per_device = args.packets // len(args.devices)
    results = []
    last = [0.0]

    def progress(res: Result, elapsed: float) -> None:
        if elapsed - last[0] >= 30:
            last[0] = elapsed
            print(f"  {res.device}: {res.sent} packets, {elapsed:.0f} s, "
                  f"{len(res.crashes)} crashes, {len(res.hangs)} hangs", flush=True)

    with tempfile.TemporaryDirectory(prefix="accelstub-fuzz-") as workdir:
        for device in args.devices:
            last[0] = 0.0
            res = fuzz_device(device, per_device, args.batch, args.seed, workdir,
                              args.probe_timeout, args.batch_timeout, args.out, progress)
            results.append(res)
            tb = sorted(set(res.tracebacks))
            print(f"{device:10s} packets {res.sent:8d} (gdb {res.packets['gdb']}, telnet "
                  f"{res.packets['telnet']}, tcl {res.packets['tcl']}) in {res.seconds:.0f} s; "
                  f"crashes {len(res.crashes)}, hangs {len(res.hangs)}, tracebacks "
                  f"{len(res.tracebacks)}, peak RSS {res.peak_rss_mib:.1f} MiB", flush=True)
            for c in res.crashes + res.hangs:
                print("    ", c)
            for t in tb:
                print("     traceback:", t)
    total = sum(r.sent for r in results)
    crashes = sum(len(r.crashes) for r in results)
    hangs = sum(len(r.hangs) for r in results)
    print(f"total      packets {total}; crashes {crashes}; hangs {hangs}; tracebacks "
          f"{sum(len(r.tracebacks) for r in results)}; peak RSS "
          f"{max(r.peak_rss_mib for r in results):.1f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.__dict__ for r in results], f, indent=1, default=str)
    return 1 if crashes or hangs else 0

