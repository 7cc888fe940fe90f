"""The TUI's live update rate and what its polling costs the emulation.

    python benchmarks/bench_tui.py [--seconds 5] [--view registers|memory|status|...]

Set-up as ``accelstub tui max78000``: a StubServer in a thread of this process with the bundled
demo, the TUI (headless, 120x40) attached over RSP.

1. Update rate: a run that gdb continues, slowed to 0.5 s per layer (EMU_THROTTLE_US), while
   the TUI watches; the poll results the app applied while the target ran, per second of run.
2. Slowdown: a gdb-like client (the controlling connection) restores the loaded demo (an in-process snapshot) and continues it
   to completion, again and again for N seconds — runs per second without the TUI, then with the
   TUI attached and polling at its running rate (0.1 s) the whole time, visible view chosen
   with --view. Slowdown = 1 - (runs/s with) / (runs/s without).

BENCH_POLL / BENCH_IDLE (seconds, default 0.08 / 0.1) set the app's poll periods while running /
halted. The runs are tiny (4 layers of 2x2), so each is mostly Python RSP handling in the same
process (and GIL) as the TUI: a worst case for the slowdown, and noisy on a loaded machine.

Prints one JSON line. Not a test: nothing here asserts a speed.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time

from accelstub.devices import open_device
from accelstub.stub.cli import demo_program
from accelstub.stub.client import RspClient
from accelstub.stub.program import load_program
from accelstub.stub.server import StubServer
from accelstub.tui.app import AccelApp
from accelstub.tui.target import Target

import os
POLL = float(os.environ.get("BENCH_POLL", "0.08"))
IDLE = float(os.environ.get("BENCH_IDLE", "0.1"))
VIEW_KEYS = {"registers": "1", "memory": "2", "program": "3", "status": "4", "tensor": "5"}


def start_stub() -> tuple[StubServer, dict]:
    device = open_device("max78000")
    server = StubServer([device], gdb_port=0, telnet_port=None, tcl_port=None)
    load_program(server.context(log=lambda s: None), demo_program("max78000"))
    server.start()
    return server, device.snapshot()


def runs_for(server: StubServer, snap: dict, client: RspClient, seconds: float) -> float:
    """Restore the demo and continue it to completion, repeatedly: runs per second."""
    device = server.targets[0].device
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        device.restore(snap)  # halted: no RSP traffic, just the model's state
        reply = client.cont(timeout=60)
        if not reply.startswith("T"):
            raise RuntimeError(f"continue failed: {reply}")
        n += 1
    return n / (time.perf_counter() - t0)


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
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--view", choices=sorted(VIEW_KEYS), default="registers")
    args = ap.parse_args()
    out: dict = {"view": args.view}

    server, snap = start_stub()
    try:
        # gdb first (it controls run state, as when the TUI is started beside gdb), then the TUI
        gdb = RspClient("127.0.0.1", server.gdb[0].port)
        target = Target("127.0.0.1", server.gdb[0].port)
        runs_for(server, snap, gdb, 0.5)  # warm up: numba compiles, caches fill

        # 1. update rate during one slowed, live run (gdb continues, the TUI watches)
        def live_run(app: AccelApp) -> dict:
            server.targets[0].device.restore(snap)
            gdb.write_register("EMU_THROTTLE_US", 500_000)
            polls0 = app.polls
            t0 = time.perf_counter()
            reply = gdb.cont(timeout=60)
            run_s = time.perf_counter() - t0
            time.sleep(0.3)  # let the last running poll land
            gdb.write_register("EMU_THROTTLE_US", 0)
            return {"stop": reply, "run_s": round(run_s, 3), "updates": app.polls - polls0,
                    "updates_per_s": round((app.polls - polls0) / run_s, 1)}

        live, _ = asyncio.run(with_app(target, args.view, live_run))
        out["live_run"] = live

        # 2. emulation throughput without and with the TUI polling
        base = runs_for(server, snap, gdb, args.seconds)

        def loaded(app: AccelApp) -> dict:
            polls0, t0 = app.applied, time.perf_counter()
            rate = runs_for(server, snap, gdb, args.seconds)
            dt = time.perf_counter() - t0
            return {"runs_per_s": rate, "tui_updates_per_s": round((app.applied - polls0) / dt, 1)}

        with_tui, _ = asyncio.run(with_app(target, args.view, loaded))
        base2 = runs_for(server, snap, gdb, args.seconds)  # again, to see the noise
        out["runs_per_s_without_tui"] = round(base, 1)
        out["runs_per_s_without_tui_again"] = round(base2, 1)
        out["runs_per_s_with_tui"] = round(with_tui["runs_per_s"], 1)
        out["tui_updates_per_s_during_runs"] = with_tui["tui_updates_per_s"]
        ref = (base + base2) / 2
        out["slowdown_pct"] = round(100 * (1 - with_tui["runs_per_s"] / ref), 1)
        gdb.close()
        target.close()
    finally:
        server.stop()
    print("BENCH " + json.dumps(out))


if __name__ == "__main__":
    main()
