"""``accelstub compile``: compile the kernels of every device's bundled demo before a user waits.

numba compiles a kernel on its first call and caches it on disk (emu/kernel_cache.py says
where), which made a first run after install take 3-25 s. Running each bundled demo once
compiles the kernels the demos need. The devices run as separate processes, as many at a time
as there are cores (numba compiles one function at a time per process; a device with a kernel
plan compiles it first, in two processes, emu/kernel_plan.py); after its demo, each
child compiles the parallel kernels of the types the demo's serial launches had (emu/conv/
int_conv.py Twin). Each child reports each kernel it starts and finishes compiling on its output
(``KERNEL_MARK start|end module function [seconds]``), so the parent prints one line per kernel
compiled, with its time, and says at least every :data:`PROGRESS_EVERY_S` seconds which device
and which kernel family (the module under accelstub.emu) is being compiled: on a busy 2-core
machine max78000's kernels alone took 48 s, which a silent command cannot explain.

    python -m accelstub.stub.precompile DEVICE   # one child: the demo, with kernel lines
"""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

#: how often, at most, a progress line is printed while kernels compile
PROGRESS_EVERY_S = 2.0
#: the start of a child's line that names a kernel it finished compiling
KERNEL_MARK = "accelstub-kernel:"


#: kernels a device's demo does not call that `accelstub compile` compiles with its plan, each
#: by whichever of its two processes is free first (emu/kernel_plan.py compile_plan ``then``):
#: the Ethos-U85 block replays' executor (issue 32 #1; a demo run replays no block), compiled
#: by its module's compile_ahead for the argument types only that module knows (one function
#: for both kernel variants: it calls the kernels through their addresses)
AHEAD = {"ethos-u85": (
    ("accelstub.emu.executor.ethosu85", "run_rows", "call compile_ahead", 4.5, ""),)}  # CALL
#: where the kernels that AHEAD's call through their addresses are listed (module, function
#: returning kernel-plan entries): compiled by the queue beside the plan, not inside AHEAD's
AHEAD_KERNELS = {"ethos-u85": ("accelstub.emu.executor.ethosu85", "kernel_entries")}


def family(module: str) -> str:
    """The kernel family of a module: its path under accelstub.emu (``conv.max78000``)."""
    return module.removeprefix("accelstub.emu.")


@dataclass
class _Child:
    """One device's demo run: its process, its output file and what it has reported."""
    device: str
    number: int  # 1-based, in the order given
    proc: subprocess.Popen
    log: IO[str]
    start: float
    read: int = 0  # bytes of the log already parsed
    kernels: int = 0  # finished
    now: str = ""  # the family of the kernel being compiled, if one is
    lines: list[str] = field(default_factory=list)  # the demo's own output

    def poll_log(self) -> list[str]:
        """Parse what the child wrote since the last look (pread: the child's file offset is
        shared with ours, so ours must not move); a line for each kernel it finished since."""
        data = os.pread(self.log.fileno(), 1 << 20, self.read)
        end = data.rfind(b"\n") + 1  # whole lines only
        self.read += end
        done = []
        for line in data[:end].decode("utf-8", "replace").splitlines():
            if line.startswith(KERNEL_MARK):
                phase, module, *rest = line[len(KERNEL_MARK):].split()
                self.now = family(module) if phase == "start" else ""
                if phase == "end":
                    self.kernels += 1
                    took = f" in {float(rest[1]):.1f} s" if len(rest) > 1 else ""
                    done.append(f"accelstub: {self.device}: compiled {family(module)}."
                                f"{rest[0] if rest else 'kernel'}{took}")
            else:
                self.lines.append(line)
        return done


def work(device: str) -> float:
    """The CPU seconds ``device``'s kernels are known to take to compile (its plan and AHEAD's
    entries; 0 for a device without a plan): what :func:`compile_devices` starts first."""
    from accelstub.devices import device_spec

    return sum(e[3] for e in device_spec(device).kernel_plan + AHEAD.get(device, ()))


def _kernels(n: int) -> str:
    return f"{n} kernel" + ("" if n == 1 else "s")


def compile_devices(devices: list[str], python: str | None = None,
                    say: Callable[[str], None] | None = None) -> int:
    """Run each device's demo in a child process, printing progress; 0 if all ran, else 1.
    The device with the most to compile starts first (:func:`work`), the others in the order
    given: a long one started last ran alone on one core at the end (ethos-u85: 15.5 s alone
    after 6.5 s, issue 31 #5)."""
    say = say or (lambda s: print(s, flush=True))
    python = python or sys.executable
    cores = os.cpu_count() or 1
    t0 = last_progress = time.perf_counter()
    waiting = sorted(enumerate(devices, 1), key=lambda d: -work(d[1]))
    running: list[_Child] = []
    failed = 0
    say(f"accelstub: compiling kernels for {', '.join(devices)} "
        f"({min(len(devices), cores)} at a time)")
    while waiting or running:
        while waiting and len(running) < cores:
            number, dev = waiting.pop(0)
            log = tempfile.TemporaryFile("w+")  # a file, not a pipe: no child blocks on it
            proc = subprocess.Popen([python, "-m", "accelstub.stub.precompile", dev],
                                    stdout=log, stderr=subprocess.STDOUT)
            running.append(_Child(dev, number, proc, log, time.perf_counter()))
        for child in list(running):
            exited = child.proc.poll() is not None
            for line in child.poll_log():
                say(line)
            if not exited:
                continue
            running.remove(child)
            child.log.close()
            if child.proc.returncode == 0:
                say(f"accelstub: {child.device}: done in "
                    f"{time.perf_counter() - child.start:.1f} s ({_kernels(child.kernels)} "
                    "compiled)")
            else:
                failed += 1
                output = "\n".join(child.lines).rstrip()
                print(f"accelstub: {child.device}: the bundled demo failed (exit "
                      f"{child.proc.returncode}):\n{output}", file=sys.stderr, flush=True)
        now = time.perf_counter()
        if running and now - last_progress >= PROGRESS_EVERY_S:
            last_progress = now
            parts = []
            for child in running:
                doing = f", compiling {child.now}" if child.now else ""
                parts.append(f"{child.device} ({child.number} of {len(devices)}): "
                             f"{_kernels(child.kernels)} compiled{doing}")
            say(f"accelstub: {now - t0:.0f} s: " + "; ".join(parts))
        time.sleep(0.05)
    say(f"accelstub: kernels compiled in {time.perf_counter() - t0:.1f} s"
        + (f"; {failed} device(s) failed" if failed else " (later runs load them from the "
           "cache)"))
    return 1 if failed else 0


def _child(device: str) -> int:
    """Compile ``device``'s kernel plan, AHEAD's kernels and the plan's parallel twins in two
    processes, run its bundled demo, then compile the parallel kernels of its types (the demo's
    small layers ran the serial twins, emu/conv/int_conv.py Twin), printing a KERNEL_MARK line
    as each kernel starts and ends compiling (``end MODULE FUNCTION SECONDS``)."""
    from accelstub.devices import device_spec
    from accelstub.emu.conv.int_conv import parallel_twin_plan, parallel_twins_of
    from accelstub.emu.jit import load_numba_without_scipy
    from accelstub.emu.kernel_plan import compile_plan

    from .cli import main
    from .compile_notice import CompileNotice

    started: dict[str, float] = {}

    def report(phase: str, module: str, name: str) -> None:
        took = ""
        if phase == "start":
            started[name] = time.perf_counter()
        else:
            took = f" {time.perf_counter() - started.pop(name, time.perf_counter()):.2f}"
        print(f"{KERNEL_MARK} {phase} {module} {name}{took}", file=sys.stderr, flush=True)

    load_numba_without_scipy()  # as `run` has it
    with CompileNotice(on_kernel=report):
        # the device's plan first (what the run does itself), with the parallel twins of
        # its serial kernels: each function to whichever process is free (a queue), the
        # longest first; the worker's lines come from the CompileNotice it inherits, as it
        # compiles (worker_output). AHEAD's kernels (the executor, the longest) start at
        # once in this process; the worker meanwhile takes the plan's and the kernels the
        # executor calls through their addresses (AHEAD_KERNELS; those not in the plan)
        plan = device_spec(device).kernel_plan
        if device in AHEAD_KERNELS:
            module, function = AHEAD_KERNELS[device]
            known = {e[:3] for e in plan}
            plan = plan + tuple(e for e in getattr(importlib.import_module(module), function)()
                                if e[:3] not in known)
        queue = sorted(plan, key=lambda e: -e[3]) + parallel_twins_of(plan)
        compile_plan(AHEAD.get(device, ()), then=queue, worker_output=True)
        code = main(["run", device])
        if code == 0:
            compile_plan(parallel_twin_plan(), worker_output=True)
    return code


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
