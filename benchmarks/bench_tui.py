"""The TUI's live update rate and what its polling costs the emulation.

    python benchmarks/bench_tui.py [--seconds 10] [--view registers|memory|status|...]

Set-up as ``accelstub tui max78000``: the stub runs in a child process (``accelstub serve``), the
TUI (headless, 120x40) attaches over RSP, and a gdb-like client controls run state.
The workload is a network with the layer shapes of the ai8x MNIST example (10.8 M MACs), built
by devices/max78000_build.py.

1. Update rate: a run that gdb continues, slowed to 0.5 s per layer (EMU_THROTTLE_US), while
   the TUI watches: poll results the app applied per second of run.
2. Slowdown: `monitor reset init` (reload) then `continue` to completion, again and again for N
   seconds; the mean wall time of the continues without the TUI, with the TUI attached and
   polling at its running rate, and without it again (to show the noise).

Prints one JSON line. Not a test: nothing here asserts a speed.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time

import os
import tempfile
from pathlib import Path

from accelstub.devices.max78000_build import Layer, Network, build
from accelstub.stub.client import RspClient
from accelstub.tui.app import AccelApp, StubProcess
from accelstub.tui.target import Target

POLL = float(os.environ.get("BENCH_POLL", "0.08"))
IDLE = float(os.environ.get("BENCH_IDLE", "0.1"))
VIEW_KEYS = {"registers": "1", "memory": "2", "program": "3", "status": "4", "tensor": "5"}


def start_stub(tmp: str) -> StubProcess:
    net = Network(1, 28, 28, [
        Layer(60, kernel=3, pad=1, activation="relu", shift=-1),
        Layer(60, kernel=3, pad=2, pool="max", activation="relu", shift=-1),
        Layer(56, kernel=3, pad=1, pool="max", activation="relu", shift=-1),
        Layer(12, kernel=3, pad=1, pool="avg", activation="relu", shift=-1),
        Layer(10, kernel=1, pad=0, wide=True)], name="mnist_shapes")
    path = build(net, seed=1).write(Path(tmp) / net.name)
    return StubProcess("max78000", str(path))


def continue_times(client: RspClient, seconds: float) -> float:
    """Reload and run to completion repeatedly: mean seconds per continue."""
    times = []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        client.monitor("reset init")
        t0 = time.perf_counter()
        reply = client.cont(timeout=60)
        times.append(time.perf_counter() - t0)
        if not reply.startswith("T"):
            raise RuntimeError(f"continue failed: {reply}")
    return sum(times) / len(times)


async def with_app(target: Target, view: str, work) -> tuple[object, AccelApp]:
    app = AccelApp(target, label="bench", poll_period=POLL, idle_period=IDLE)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.5)
        await pilot.press(VIEW_KEYS[view])
        await pilot.pause(0.5)
        result = await asyncio.get_running_loop().run_in_executor(None, work, app)
        await pilot.pause(0.1)
    return result, app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--view", choices=sorted(VIEW_KEYS), default="status")
    args = ap.parse_args()
    out: dict = {"view": args.view}
    with tempfile.TemporaryDirectory() as tmp:
        stub = start_stub(tmp)
        try:
            gdb = RspClient("127.0.0.1", stub.port)  # first: controls run state
            target = Target("127.0.0.1", stub.port)
            continue_times(gdb, 1.0)  # warm up (numba cache)

            def live_run(app: AccelApp) -> dict:
                gdb.monitor("reset init")
                gdb.write_register("EMU_THROTTLE_US", 500_000)
                polls0 = app.polls
                t0 = time.perf_counter()
                reply = gdb.cont(timeout=60)
                run_s = time.perf_counter() - t0
                time.sleep(0.3)
                gdb.write_register("EMU_THROTTLE_US", 0)
                return {"stop": reply, "run_s": round(run_s, 3), "updates": app.polls - polls0,
                        "updates_per_s": round((app.polls - polls0) / run_s, 1)}

            out["live_run"], _ = asyncio.run(with_app(target, args.view, live_run))
            base = continue_times(gdb, args.seconds)

            def loaded(app: AccelApp) -> dict:
                polls0, t0 = app.applied, time.perf_counter()
                mean = continue_times(gdb, args.seconds)
                return {"mean": mean, "tui_updates_per_s":
                        round((app.applied - polls0) / (time.perf_counter() - t0), 1)}

            with_tui, _ = asyncio.run(with_app(target, args.view, loaded))
            base2 = continue_times(gdb, args.seconds)
            ref = (base + base2) / 2
            out.update(ms_per_run_without_tui=round(base * 1e3, 2),
                       ms_per_run_without_tui_again=round(base2 * 1e3, 2),
                       ms_per_run_with_tui=round(with_tui["mean"] * 1e3, 2),
                       tui_updates_per_s_during_runs=with_tui["tui_updates_per_s"],
                       slowdown_pct=round(100 * (with_tui["mean"] / ref - 1), 1))
            gdb.close()
            target.close()
        finally:
            stub.stop()
    print("BENCH " + json.dumps(out))


if __name__ == "__main__":
    main()
