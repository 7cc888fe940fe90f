"""Cost of reverse-execution history (issue 29 #5, devices/history.py): the time recording adds to
a forward run (`continue`), its memory per unit, and the time of one reverse step, on the
MAX78000 MNIST-shaped network and on Ethos-U85 MobileNet v2 (Vela, ethos-u85-256).

    python benchmarks/bench_history.py [--repeat N] [--network {max78000,mobilenet}]
                                       [--every K ...]

Each inference is run twice in alternation, history off and history on, in this thread
(RunControl.run_here), warm; the start of a history (one copy of every memory, the shadow) is
paid once per history and timed apart; the run without history follows the same copy
(evict), so both start with the caches the copy leaves. Such a run's stop is a journaled leg
(devices/history.py: a checkpoint comes every CHECKPOINT_EVERY legs), so the figure that
counts the checkpoints is the one of a session (below); memory is counted after the journal
is closed (one checkpoint). Reverse steps are timed after a stepi run (each step back undoes
one unit) and after a continue (the first step back replays the block the fast path ran at
once, unit by unit; the next ones undo one unit each). Not a test: nothing here asserts a
speed; the goal is at most 10 % added to a continue.

The MAX78000 network is also timed as a session that keeps recording runs it: two devices
alternate, one that never records and one that records every inference into one history
(each input reload journaled before its continue, timed apart), for each ``--every``
(CHECKPOINT_EVERY) given; means count the checkpoints, medians mostly not; then the first
reverse steps with the journal as full as it gets (the first closes and replays it).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_max78000 import load, time_layers

from accelstub.devices import DEFAULT_BUDGET_MIB
from accelstub.devices.history import CHECKPOINT_EVERY, History
from accelstub.devices.host import apply_steps
from accelstub.devices.max78000.datapath import sram_address
from accelstub.testkit.max78000_build import mnist_shapes_network
from machine import bench_main


def evict(dev) -> None:
    """The shadow copy a history starts with, made by a History of its own and thrown away:
    done before the run without history, so both runs start from the caches that copy
    leaves and differ by the recording. A plain copy of every memory (``m.data.copy()``)
    left them warmer than the shadow's sparse copy does (fresh zeroed pages, a scan for
    all-zero chunks): the MAX78000's layers ran ~15 us faster after it, which showed as a
    cost of recording (docs/design-notes.md "Reverse execution")."""
    History(dev.bus, dev.regs)._shadow_stores()


def inference(rc, prog, sram: np.ndarray, reload: list[float]) -> float:
    """The next inference armed as bench_max78000.rerun does (ISR, input, start: host writes,
    untimed); with history on, they are recorded as their own transition here, as the next run
    would at its start (timed apart, into ``reload``); then the timed continue."""
    dev = rc.device
    apply_steps(dev, prog.isr)
    for m, row in enumerate(sram):
        dev.write(sram_address(m, 0), row.tobytes())
    apply_steps(dev, prog.start)
    if rc.history.enabled:
        reload.append(timed(rc._sync_history))
    t = time_layers(rc)
    assert rc.last_stop.reason == "done", rc.last_stop
    return t


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def reverse_steps(rc, n: int) -> list[float]:
    return [timed(lambda: rc.reverse_here(True)) for _ in range(n)]


def close(rc) -> None:
    """Close the history's journal as going back would (History.settle: one checkpoint, the
    undo bytes of everything since the last one), so its memory can be counted."""
    rc.history.settle(rc._boundary_state, rc._apply_boundary)


def held(rc) -> tuple[int, int, int]:
    """(boundaries, units they cover, bytes) of the history now: the legs with units (runs) of
    its checkpoints and of its journal, and the bytes of the whole history (the input
    reload's, journaled or in a checkpoint, included)."""
    h = rc.history
    legs = [leg for e in h.entries for leg in e.legs] + h.legs
    runs = [leg for leg in legs if leg.units]
    return len(runs), sum(len(leg.units) for leg in runs), h.size


def report(name: str, off: list[float], on: list[float], begin: list[float], mem, units: int,
           after_steps: list[float], after_cont: list[float]) -> None:
    o, r = float(np.median(off)), float(np.median(on))
    entries, covered, size = mem
    per_unit = size / max(1, covered)
    print(f"{name}: {units} units per inference")
    print(f"  continue, history off {o * 1e3:8.2f} ms, on {r * 1e3:8.2f} ms (medians of "
          f"{len(off)}): {(r / o - 1) * 100:+.1f} %; best of each {min(off) * 1e3:.2f} / "
          f"{min(on) * 1e3:.2f} ms: {(min(on) / min(off) - 1) * 100:+.1f} %")
    print(f"  start of a history (shadow copy of all memory, once per load/reset): "
          f"{np.median(begin) * 1e3:.2f} ms")
    print(f"  memory after one continue: {per_unit / 1024:.1f} KiB per unit ({entries} entries "
          f"for {covered} units, {size / 2**20:.2f} MiB; budget {DEFAULT_BUDGET_MIB} MiB)")
    print(f"  reverse step after stepi: {np.median(after_steps) * 1e3:.3f} ms median, "
          f"max {max(after_steps) * 1e3:.3f} ms")
    print(f"  reverse step after continue: first {after_cont[0] * 1e3:.2f} ms (replays the "
          f"last block if the fast path ran one), then "
          f"{np.median(after_cont[1:]) * 1e3:.3f} ms median")


def bench_max78000(tmp: str, repeat: int, everies: list[int]) -> None:
    rc, prog, _ = load(mnist_shapes_network(), tmp)
    dev = rc.device
    sram = dev.bus.stacks["sram"].copy()
    units = len(dev.units())

    off, on, begin, reload = [], [], [], []
    for i in range(repeat + 2):  # the first two warm up
        rc.history.budget = 0
        rc.history.clear()
        evict(dev)
        t_off = inference(rc, prog, sram, reload)
        rc.history.budget = DEFAULT_BUDGET_MIB << 20
        t_begin = timed(rc._start_history)  # as a load does (RunControl keeps its mark)
        t_on = inference(rc, prog, sram, reload)
        if i >= 2:
            off.append(t_off)
            on.append(t_on)
            begin.append(t_begin)
    print(f"MAX78000: recording the input reload between two inferences (host writes of "
          f"{sram.nbytes // 1024} KiB): {np.median(reload) * 1e3:.2f} ms")
    close(rc)
    mem = held(rc)
    # reverse steps: after the last continue (one entry per layer or block), then after stepi
    after_cont = reverse_steps(rc, units)
    rc.history.clear()
    while rc.run_here(single=True).reason == "step":
        pass
    after_steps = reverse_steps(rc, units)
    report("MAX78000 MNIST-shaped network", off, on, begin, mem, units, after_steps, after_cont)
    off, ons = one_history(tmp, 5 * repeat, everies)
    o = float(np.median(off))
    print(f"  within one history: devices in turn, one never recording and one per "
          f"CHECKPOINT_EVERY recording every inference (input reload journaled, timed apart); "
          f"{len(off)} inferences each; continue off {o * 1e3:.3f} ms median, "
          f"{np.mean(off) * 1e3:.3f} mean, {min(off) * 1e3:.3f} best")
    for every, (on, reload, back) in zip(everies, ons):
        both = [a + b for a, b in zip(on, reload)]
        r = float(np.median(on))
        print(f"    CHECKPOINT_EVERY {every:2d}: continue on {r * 1e3:.3f} ms: "
              f"{(r / o - 1) * 100:+.1f} % median, {(np.mean(on) / np.mean(off) - 1) * 100:+.1f} "
              f"% mean (counts the checkpoints), {(min(on) / min(off) - 1) * 100:+.1f} % best; "
              f"with the reload's record {(np.median(both) / o - 1) * 100:+.1f} % median, "
              f"{(np.mean(both) / np.mean(off) - 1) * 100:+.1f} % mean; reverse steps then "
              f"{', '.join(f'{t * 1e3:.2f}' for t in back)} ms")


def one_history(tmp: str, repeat: int, everies: list[int]) -> tuple[
        list[float], list[tuple[list[float], list[float], list[float]]]]:
    """Continues of the MNIST-shaped network on several devices in turn, inference by
    inference (so the machine's load falls on all alike): one without history, and one per
    ``everies`` recording all of its inferences into one history with a checkpoint every that
    many legs (each input reload journaled before its continue, timed apart, as bench_max78000
    does: two legs per inference). Returns the seconds per continue off, and per ``every``:
    those on, of each reload's record, and of the first reverse steps after the last continue
    with the journal as full as it gets (the first closes it and replays it)."""
    runs = []
    for name in ["off", *map(str, everies)]:
        rc, prog, _ = load(mnist_shapes_network(), f"{tmp}/{name}")
        runs.append((rc, prog, rc.device.bus.stacks["sram"].copy()))
    for (rc, _, _), every in zip(runs[1:], everies):
        rc.history.budget = DEFAULT_BUDGET_MIB << 20
        rc.history.every = every
    times: list[list[float]] = [[] for _ in runs]
    reloads: list[list[float]] = [[] for _ in runs]
    for i in range(repeat + 2):  # the first two warm up
        for k, run in enumerate(runs):
            t = inference(*run, reloads[k])
            if i >= 2:
                times[k].append(t)
    out = []
    for k, ((rc, _, _), every) in enumerate(zip(runs[1:], everies), 1):
        per_run = len(rc.device.units())
        assert rc.history.dropped == 0 and held(rc)[1] == per_run * (repeat + 2)
        reverse_steps(rc, 1)  # the device's units one by one (its per-unit path) warm up
        while rc.run_here().reason != "done":
            pass
        for _ in range(every - 1):  # a journal as full as it gets: 2 legs per inference
            inference(*runs[k], [])
        out.append((times[k], reloads[k][2:], reverse_steps(rc, 3)))
    return times[0], out


def bench_mobilenet(tmp: Path, repeat: int) -> None:
    from bench_ethosu85_mobilenet import Device, compile_network

    from accelstub.devices.ethos_u85.vela import place_vela_program
    from accelstub.testkit.ethosu85_models import sample_inputs

    src, out = compile_network(tmp, 256)
    (x,) = sample_inputs(src.read_bytes())

    def alternate(d: Device) -> tuple[list[float], list[float], list[float]]:
        rc = d.rc
        off, on, begin = [], [], []
        for i in range(repeat + 2):
            rc.history.budget = 0
            rc.history.clear()
            place_vela_program(d.dev, d.prog, [x])
            evict(d.dev)
            t_off = timed(rc.run_here)
            rc.history.budget = DEFAULT_BUDGET_MIB << 20
            place_vela_program(d.dev, d.prog, [x])  # the setup; the history starts (untimed)
            rc.history.clear()
            t_begin = timed(rc._start_history)  # as a load does (RunControl keeps its mark)
            t_on = timed(rc.run_here)
            if i >= 2:
                off.append(t_off)
                on.append(t_on)
                begin.append(t_begin)
        return off, on, begin

    units_dev = Device(out, 256, x, blocks=False)  # as with a watchpoint set: no blocks
    u_off, u_on, _ = alternate(units_dev)
    close(units_dev.rc)
    u_mem = held(units_dev.rc)
    d = Device(out, 256, x)
    rc = d.rc
    off, on, begin = alternate(d)
    units = len(d.dev.units())
    close(rc)
    mem = held(rc)
    want = d.output()
    after_cont = reverse_steps(rc, 20)
    place_vela_program(d.dev, d.prog, [x])
    rc.history.clear()
    while rc.run_here(single=True).reason == "step":
        pass
    assert np.array_equal(d.output(), want)
    after_steps = reverse_steps(rc, 20)
    report("Ethos-U85 MobileNet v2 0.35 96x96 (Vela ethos-u85-256)", off, on, begin, mem, units,
           after_steps, after_cont)
    o, r = float(np.median(u_off)), float(np.median(u_on))
    print(f"  unit by unit (no blocks, as with a watchpoint set): off {o * 1e3:.2f} ms, on "
          f"{r * 1e3:.2f} ms: {(r / o - 1) * 100:+.1f} %; best of each {min(u_off) * 1e3:.2f} / "
          f"{min(u_on) * 1e3:.2f} ms: {(min(u_on) / min(u_off) - 1) * 100:+.1f} %; "
          f"memory {u_mem[2] / max(1, u_mem[1]) / 1024:.1f} "
          f"KiB per unit")

    session(out, x, repeat)


def session(out: Path, x: np.ndarray, repeat: int) -> None:
    """MobileNet v2 inferences on two devices in turn: one never recording, one recording all
    of them into one history (the driver's setup journaled before each continue, timed
    apart): the continue's cost with the checkpoints where they fall (CHECKPOINT_UNITS: a
    227-command continue closes one every second inference), then the first reverse steps."""
    from bench_ethosu85_mobilenet import Device

    from accelstub.devices.ethos_u85.vela import place_vela_program

    devs = [Device(out, 256, x), Device(out, 256, x)]
    devs[1].rc.history.budget = DEFAULT_BUDGET_MIB << 20
    devs[1].rc._start_history()
    times: list[list[float]] = [[], []]
    setup: list[float] = []
    for i in range(2 * repeat + 2):
        for k, d in enumerate(devs):
            place_vela_program(d.dev, d.prog, [x])
            if k:
                setup.append(timed(d.rc._sync_history))
            t = timed(d.rc.run_here)
            if i >= 2:
                times[k].append(t)
    off, on = times
    o, r = float(np.median(off)), float(np.median(on))
    rc = devs[1].rc
    legs = len(rc.history.legs)
    back = reverse_steps(rc, 3)
    print(f"  within one history ({len(on)} inferences each, devices in turn): continue off "
          f"{o * 1e3:.2f} ms, on {r * 1e3:.2f} ms median: {(r / o - 1) * 100:+.1f} %, mean "
          f"{(np.mean(on) / np.mean(off) - 1) * 100:+.1f} %, best "
          f"{(min(on) / min(off) - 1) * 100:+.1f} %; the setup's record "
          f"{np.median(setup) * 1e3:.2f} ms; then reverse steps ({legs} legs journaled) "
          f"{', '.join(f'{t * 1e3:.2f}' for t in back)} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--network", choices=["max78000", "mobilenet"], action="append",
                    help="run only this network (repeatable; default: both)")
    ap.add_argument("--skip-mobilenet", action="store_true", help="as --network max78000")
    ap.add_argument("--every", type=int, nargs="+", default=[CHECKPOINT_EVERY],
                    help="CHECKPOINT_EVERY values for the one-history figure")
    args = ap.parse_args()
    nets = args.network or (["max78000"] if args.skip_mobilenet else ["max78000", "mobilenet"])
    with tempfile.TemporaryDirectory() as tmp:
        if "max78000" in nets:
            bench_max78000(tmp, args.repeat, args.every)
        if "mobilenet" in nets:
            bench_mobilenet(Path(tmp), args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(bench_main(main))
