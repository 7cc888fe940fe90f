"""``accelstub compile``: compile the kernels of every device's bundled demo before a user waits.

numba compiles a kernel on its first call and caches it on disk (emu/kernel_cache.py says
where), which made a first run after install take 3-25 s. One child process compiles every
device's kernel plan, the Ethos-U85 executor and the parallel twins of the plans' serial
kernels from one queue, longest first, shared with one worker it forks (emu/kernel_plan.py
compile_plan ``then``: each job to whichever process is free), and runs the demos of the
devices without a plan in that queue too; then it runs each device's demo (what no plan names
compiles there) and compiles the parallel kernels of the types the demos' serial launches had
(emu/conv/int_conv.py Twin). Both processes report each kernel they start and finish compiling
on the child's output (``KERNEL_MARK start|end module function [seconds]``), so the parent
prints one line per kernel compiled, with its time, and says at least every
:data:`PROGRESS_EVERY_S` seconds which kernel family (the module under accelstub.emu) is being
compiled: on a busy 2-core machine max78000's kernels alone took 48 s, which a silent command
cannot explain.

    python -m accelstub.stub.precompile DEVICE...   # the child: kernels and demos, with lines
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
    ("accelstub.emu.executor.ethosu85", "run_rows", "call compile_ahead", 3.5, ""),)}  # CALL
#: where the kernels that AHEAD's call through their addresses are listed (module, function
#: returning kernel-plan entries): compiled by the queue beside the plan, not inside AHEAD's
AHEAD_KERNELS = {"ethos-u85": ("accelstub.emu.executor.ethosu85", "kernel_entries")}


#: kernels that share costly callees (kernels they call, each a full compile), by what they
#: share, with the CPU seconds the set takes compiled one after the other in one process: one
#: job of the queue (emu/kernel_plan.py compile_plan ``together``), placed by that figure
#: (their entries' own, from the executor's kernel_entries, are a flat 0.3). The Ethos-U85
#: element-wise and pooling kernels share numeric/ethosu85.py's rescale, activation and
#: ``finish``: taken by the two processes at once, each compiled them (issue 31 #5; lone
#: process, empty cache: `_pool_kernel` 2.5 s CPU alone, 0.8 s after `_ew_kernel`); the byte
#: convolution and its serial twin share the VNNI helpers (2.7 s apart, 2.2-2.6 s in one
#: process). Measured and left apart: the output stage and the int16 kernels with their twins
#: (no saving)
TOGETHER = {"numeric.ethosu85": ((("accelstub.emu.eltwise.ethosu85", "_ew_kernel"),
                                  ("accelstub.emu.pool.ethosu85", "_pool_kernel")), 3.5),
            "conv.vnni": ((("accelstub.emu.conv.int_conv", "_vnni_conv_serial"),
                           ("accelstub.emu.conv.int_conv", "_vnni_conv")), 2.3)}


def together() -> dict[tuple[str, str], str]:
    """TOGETHER as compile_plan takes it: (module, function) -> the name of its set."""
    return {f: name for name, (functions, _) in TOGETHER.items() for f in functions}


def family(module: str) -> str:
    """The kernel family of a module: its path under accelstub.emu (``conv.max78000``)."""
    return module.removeprefix("accelstub.emu.")


@dataclass
class _Child:
    """The child that compiles (:func:`_child`): its process, its output file and what it has
    reported."""
    device: str  # what it compiles for: a device, "all devices" or a list
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


def _kernels(n: int) -> str:
    return f"{n} kernel" + ("" if n == 1 else "s")


def compile_devices(devices: list[str], python: str | None = None,
                    say: Callable[[str], None] | None = None) -> int:
    """Compile the kernels of ``devices`` in one child process (:func:`_child`), printing a
    line per kernel and progress; 0 if every demo ran, else 1. One child for all devices, not
    one per device: four children each started Python, numba and accelstub (~0.8 s CPU each)
    and each compiled the kernels the devices share, while one process and its forked worker
    take every device's kernels from one queue, so both cores stay busy to the end (issue 31
    #5)."""
    from accelstub.devices import DEVICES

    say = say or (lambda s: print(s, flush=True))
    python = python or sys.executable
    label = (devices[0] if len(devices) == 1 else
             "all devices" if sorted(devices) == sorted(DEVICES) else ", ".join(devices))
    t0 = last_progress = time.perf_counter()
    say(f"accelstub: compiling kernels for {', '.join(devices)} (one process and a worker)")
    log = tempfile.TemporaryFile("w+")  # a file, not a pipe: no child blocks on it
    proc = subprocess.Popen([python, "-m", "accelstub.stub.precompile", *devices],
                            stdout=log, stderr=subprocess.STDOUT)
    child = _Child(label, proc, log, t0)
    while True:
        exited = proc.poll() is not None
        for line in child.poll_log():
            say(line)
        if exited:
            break
        now = time.perf_counter()
        if now - last_progress >= PROGRESS_EVERY_S:
            last_progress = now
            doing = f", compiling {child.now}" if child.now else ""
            say(f"accelstub: {now - t0:.0f} s: {label}: {_kernels(child.kernels)} "
                f"compiled{doing}")
        time.sleep(0.05)
    log.close()
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        output = "\n".join(child.lines).rstrip()
        print(f"accelstub: {label}: a bundled demo failed (exit {proc.returncode}):\n{output}",
              file=sys.stderr, flush=True)
        say(f"accelstub: kernels compiled in {took:.1f} s; a device failed")
        return 1
    say(f"accelstub: {label}: done in {took:.1f} s ({_kernels(child.kernels)} compiled)")
    say(f"accelstub: kernels compiled in {took:.1f} s (later runs load them from the cache)")
    return 0


#: what each device's demo run returned in this process (:func:`demo`)
_DEMOS: dict[str, int] = {}


def demo(device: str) -> None:
    """Run ``device``'s bundled demo once in this process (its kernels compile or load as a
    run's do): a queued job (kernel_plan CALL) for a device without a kernel plan, whose
    kernels only its demo names, so they compile beside the other devices' queue in whichever
    process is free. Once per process, and :func:`_child` takes the exit code from here. In
    the forked worker a failed demo raises: the worker then reports no such job and stops,
    and compile_plan runs the job in the child, so the exit code it names is its own run's (a
    demo the worker reported done passed)."""
    from accelstub.emu.kernel_plan import in_worker

    from .cli import main

    if device not in _DEMOS:
        _DEMOS[device] = main(["run", device])
    if _DEMOS[device] and in_worker():
        raise RuntimeError(f"{device}: the bundled demo failed (exit {_DEMOS[device]})")


def queue_for(devices: list[str]) -> list[tuple[str, str, str, float, str]]:
    """The one queue `accelstub compile` gives its two processes (emu/kernel_plan.py
    compile_plan ``then``): AHEAD's (the Ethos-U85 executor, the longest single compile),
    then every device's plan and AHEAD_KERNELS' entries, each (module, function, signature)
    once, and their parallel twins, longest first (a TOGETHER set at its own figure, its
    kernels in its order), then the demo runs of devices without a plan (last: their kernels
    include shared convolution kernels the plans compile first)."""
    from accelstub.devices import device_spec
    from accelstub.emu.conv.int_conv import parallel_twins_of

    ahead: list[tuple[str, str, str, float, str]] = []
    entries: list[tuple[str, str, str, float, str]] = []
    seen: set[tuple[str, str, str]] = set()
    for device in devices:
        ahead += AHEAD.get(device, ())
        plan = device_spec(device).kernel_plan
        if device in AHEAD_KERNELS:
            module, function = AHEAD_KERNELS[device]
            plan = plan + tuple(getattr(importlib.import_module(module), function)())
        for e in plan:
            if e[:3] not in seen:
                seen.add(e[:3])
                entries.append(e)
    demos = [(__name__, f"demo {d}", f"call demo {d}", 2.0, "") for d in devices
             if not device_spec(d).kernel_plan]
    sets = {f: (-seconds, name, functions.index(f))
            for name, (functions, seconds) in TOGETHER.items() for f in functions}
    return ahead + sorted(entries + parallel_twins_of(entries),
                          key=lambda e: sets.get((e[0], e[1]), (-e[3], "", 0))) + demos


def _child(devices: list[str]) -> int:
    """Compile the kernels of ``devices`` (:func:`queue_for`) in this process and one forked
    worker, run each device's bundled demo (what the plans miss compiles there), then compile
    the parallel kernels of the demos' types (the demos' small layers ran the serial twins,
    emu/conv/int_conv.py Twin), printing a KERNEL_MARK line as each kernel starts and ends
    compiling (``end MODULE FUNCTION SECONDS``), in either process."""
    from .numba_start import start_numba_lean

    start_numba_lean()  # numba started as `run` starts it, before anything imports it

    from accelstub.emu.conv.int_conv import parallel_twin_plan
    from accelstub.emu.kernel_plan import compile_plan

    from .compile_notice import CompileNotice

    started: dict[str, float] = {}

    def report(phase: str, module: str, name: str) -> None:
        took = ""
        if phase == "start":
            started[name] = time.perf_counter()
        else:
            took = f" {time.perf_counter() - started.pop(name, time.perf_counter()):.2f}"
        print(f"{KERNEL_MARK} {phase} {module} {name}{took}", file=sys.stderr, flush=True)

    def worker_did(module: str, name: str, seconds: float) -> None:
        if name.startswith("demo "):  # (one that failed raised there: not reported)
            _DEMOS.setdefault(name.removeprefix("demo "), 0)

    with CompileNotice(on_kernel=report):
        # the worker's lines come from the CompileNotice it inherits, as it compiles
        # (worker_output); what it did is left in the cache (load=False: not loaded or run
        # again here); the devices whose demo no process ran yet run it now
        compile_plan((), then=queue_for(devices), worker_output=True, load=False,
                     on_worker=worker_did, together=together())
        for device in devices:
            demo(device)
        failed = [d for d in devices if _DEMOS[d]]
        for device in failed:  # the parent's message names the devices given, this one which
            print(f"accelstub: {device}: the bundled demo failed (exit {_DEMOS[device]})",
                  file=sys.stderr, flush=True)
        if not failed:
            compile_plan(parallel_twin_plan(), worker_output=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
