"""The TUI's live update rate and what its polling costs the emulation.

    python benchmarks/bench_tui.py [--view status|registers|memory|program|tensor|all]
                                   [--pairs 60] [--chunk 10]

Set-up as ``accelstub tui max78000`` with gdb beside it: three processes. The stub runs in a
child process (``accelstub serve``); the TUI (headless, 120x40, the chosen view) runs in a second
child process; this process is the gdb-like client that controls run state and times the runs.
The workload: 12 layers (all the MRAM holds) of 64->64-channel 3x3 convolutions on 64x64 data
(1.8 G MACs, built by testkit/max78000_build.py), tens of ms per continue.

1. Update rate: a run that gdb continues, slowed to 0.25 s per layer (EMU_THROTTLE_US), while
   the TUI watches: poll results the app applied while running, per second of run, and the TUI
   process's CPU use meanwhile (percent of one core: what it takes from the emulation's cores).
2. Slowdown: the program armed again as its ISR and cnn_start do (untimed), then a timed
   `continue` to completion, in pairs: one with the TUI polling, one with the TUI process
   stopped (SIGSTOP: attached but silent, the baseline), in alternating order (on-off, off-on,
   ...), so both halves of a pair see the same load from the rest of the machine. Per chunk of
   ``--chunk`` pairs: the mean continue time with the TUI over the mean without, minus 1;
   reported are the median over the chunks, their spread (min, max) and the figure over all
   pairs, with the TUI process's CPU use (percent of one core) and its update rate while
   polling. Nothing is pinned to a core.

Why the TUI is a process of its own: gdb is one, and a client sharing the TUI's interpreter
would time the TUI's hold on that interpreter's GIL (its reply waits behind the UI thread's
rendering), not the emulation.

Prints one JSON line per view. Not a test: nothing here asserts a speed.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import bench_main

POLL = float(os.environ.get("BENCH_POLL", "0.08"))
IDLE = float(os.environ.get("BENCH_IDLE", "0.1"))
VIEW_KEYS = {"registers": "1", "memory": "2", "program": "3", "status": "4", "tensor": "5"}


# -- the TUI child ---------------------------------------------------------------------------------

def tui_child(port: int, view: str) -> None:
    """Run the headless app on ``view``; answer each stdin line with a JSON line of counters
    (``quit`` ends it). Runs in its own process, started by :func:`main`."""
    import threading

    from accelstub.tui.app import AccelApp, yield_cpu
    from accelstub.tui.target import Target

    target = Target("127.0.0.1", port)
    yield_cpu()  # as run_tui does
    app = AccelApp(target, label="bench", poll_period=POLL, idle_period=IDLE)
    done = asyncio.Event()

    def stats() -> str:
        return json.dumps({"applied": app.applied, "polls": app.polls,
                           "cpu": time.process_time(), "t": time.monotonic()})

    async def body() -> None:
        loop = asyncio.get_running_loop()

        def read_stdin() -> None:
            for line in sys.stdin:
                if line.strip() == "quit":
                    break
                print(stats(), flush=True)
            loop.call_soon_threadsafe(done.set)

        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.5)
            await pilot.press(VIEW_KEYS[view])
            await pilot.pause(0.5)
            print("ready " + stats(), flush=True)
            threading.Thread(target=read_stdin, daemon=True).start()
            await done.wait()

    try:
        asyncio.run(body())
    finally:
        target.close()


class TuiProcess:
    """The TUI child: counters on request, SIGSTOP/SIGCONT to silence and resume it."""

    def __init__(self, port: int, view: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--tui-child", str(port), "--view", view],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line.startswith("ready "):
            raise RuntimeError(f"the TUI did not start: {line!r}")
        self.stopped = False

    def stats(self) -> dict:
        self.proc.stdin.write("?\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return json.loads(self.proc.stdout.readline())  # type: ignore[union-attr]

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)
        self.stopped = True

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.stopped = False

    def close(self) -> None:
        if self.stopped:
            self.resume()
        try:
            self.proc.stdin.write("quit\n")  # type: ignore[union-attr]
            self.proc.stdin.close()  # type: ignore[union-attr]
            self.proc.wait(10)
        except Exception:
            self.proc.kill()
            self.proc.wait()


# -- the controlling client ------------------------------------------------------------------------

def start_stub(tmp: str):
    """The stub serving the workload (module doc) and the program's CNN_ISR and start writes
    that arm it again after a run."""
    from accelstub.devices.max78000.ai8x import import_ai8x_project
    from accelstub.testkit.max78000_build import Layer, Network, build
    from accelstub.tui.app import StubProcess

    net = Network(64, 64, 64, [Layer(64, kernel=3, pad=1, shift=-3, activation="relu")
                               for _ in range(12)], name="conv64x12")
    path = build(net, seed=1).write(Path(tmp) / net.name)
    prog = import_ai8x_project(path)
    return StubProcess("max78000", str(path)), prog.isr + prog.start


class _Bus:
    """The device interface that Access.apply uses, over RSP memory packets."""

    def __init__(self, client) -> None:
        self.read, self.write = client.read_memory, client.write_memory


def one_continue(client, rearm) -> float:
    """Arm the program again as its ISR and cnn_start do (untimed), then run to completion:
    the wall time of the continue."""
    bus = _Bus(client)
    for access in rearm:
        access.apply(bus)
    t0 = time.perf_counter()
    reply = client.cont(timeout=60)
    dt = time.perf_counter() - t0
    if not reply.startswith("T"):
        raise RuntimeError(f"continue failed: {reply}")
    return dt


def continue_times(client, rearm, seconds: float) -> list[float]:
    """Run to completion repeatedly for ``seconds``: the wall time of each continue."""
    times = []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        times.append(one_continue(client, rearm))
    return times


def live_run(gdb, rearm, tui: TuiProcess) -> dict:
    """A run slowed to 0.25 s per layer: the TUI's updates per second of run."""
    gdb.write_register("EMU_THROTTLE_US", 250_000)
    for access in rearm:
        access.apply(_Bus(gdb))
    s0 = tui.stats()
    t0 = time.perf_counter()
    reply = gdb.cont(timeout=60)
    run_s = time.perf_counter() - t0
    time.sleep(0.3)
    s1 = tui.stats()
    gdb.write_register("EMU_THROTTLE_US", 0)
    n = s1["polls"] - s0["polls"]
    return {"stop": reply, "run_s": round(run_s, 3), "updates": n,
            "updates_per_s": round(n / run_s, 1),
            "tui_cpu_pct": round(100 * (s1["cpu"] - s0["cpu"]) / (s1["t"] - s0["t"]), 1)}


def measure_view(gdb, rearm, port: int, view: str, pairs: int, chunk: int) -> dict:
    """The live run, then ``pairs`` pairs of continues, one with the TUI polling and one with
    it stopped, in alternating order (on-off, off-on, ...): the two halves of a pair run within
    a fraction of a second of each other, so the machine's other load hits both alike."""
    tui = TuiProcess(port, view)
    try:
        live = live_run(gdb, rearm, tui)
        on: list[float] = []
        off: list[float] = []
        applied = cpu = busy = 0.0
        for i in range(pairs):
            for phase in (("on", "off") if i % 2 == 0 else ("off", "on")):
                if phase == "off":
                    if not tui.stopped:
                        tui.pause()
                    off.append(one_continue(gdb, rearm))
                else:
                    if tui.stopped:
                        tui.resume()
                        time.sleep(0.1)  # let it catch up with the notifications it missed
                    s0 = tui.stats()
                    on.append(one_continue(gdb, rearm))
                    s1 = tui.stats()
                    applied += s1["applied"] - s0["applied"]
                    cpu += s1["cpu"] - s0["cpu"]
                    busy += s1["t"] - s0["t"]
    finally:
        tui.close()
    # per chunk of pairs: mean with the TUI over mean without; the median over the chunks and
    # their spread, and the ratio of all the means
    ratios = [100 * (statistics.fmean(on[k:k + chunk]) / statistics.fmean(off[k:k + chunk]) - 1)
              for k in range(0, pairs - chunk + 1, chunk)]

    def r1(x: float) -> float:
        return round(x, 1)

    return {"view": view, "live_run": live,
            "slowdown_pct_median": r1(statistics.median(ratios)),
            "slowdown_pct_min": r1(min(ratios)), "slowdown_pct_max": r1(max(ratios)),
            "slowdown_pct_chunks": [r1(x) for x in ratios],
            "slowdown_pct_all": r1(100 * (statistics.fmean(on) / statistics.fmean(off) - 1)),
            "ms_per_run_with_tui": round(statistics.fmean(on) * 1e3, 2),
            "ms_per_run_without_tui": round(statistics.fmean(off) * 1e3, 2),
            "ms_per_run_medians": [round(statistics.median(on) * 1e3, 2),
                                   round(statistics.median(off) * 1e3, 2)],
            "tui_updates_per_s_during_runs": r1(applied / busy),
            "tui_cpu_pct": r1(100 * cpu / busy)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--view", choices=sorted(VIEW_KEYS) + ["all"], default="status")
    ap.add_argument("--pairs", type=int, default=60, help="pairs of continues per view")
    ap.add_argument("--chunk", type=int, default=10, help="pairs per slowdown figure")
    ap.add_argument("--tui-child", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tui_child is not None:  # its first line is read as the ready line
        tui_child(args.tui_child, args.view)
        return
    from accelstub.stub.client import RspClient

    views = list(VIEW_KEYS) if args.view == "all" else [args.view]
    with tempfile.TemporaryDirectory() as tmp:
        stub, rearm = start_stub(tmp)
        try:
            gdb = RspClient("127.0.0.1", stub.port)  # first: controls run state
            gdb.cont(timeout=120)  # the loaded program's first run (numba cache, weights)
            continue_times(gdb, rearm, 1.0)
            for view in views:
                out = measure_view(gdb, rearm, stub.port, view, args.pairs, args.chunk)
                print("BENCH " + json.dumps(out), flush=True)
            gdb.close()
        finally:
            stub.stop()


if __name__ == "__main__":
    sys.exit(bench_main(main, kernels_here=False))
