"""NE16 monitor command: ``monitor ne16 queue | job [C0|C1] | warnings [clear]``. Takes the device
model (duck-typed: nothing here imports model.py)."""
from __future__ import annotations

from functools import partial

from ..device import MonitorCommand
from ..errors import DeviceError
from . import job as J


def commands(dev) -> dict[str, MonitorCommand]:
    return {"ne16": MonitorCommand("queue | job [C0|C1] | warnings [clear]", partial(_ne16, dev),
                                   "the job queue (contexts, IDs, held jobs, the offload "
                                   "pointer), a context's job decoded, model warnings")}


def _ne16(dev, ctx, args: list[str]) -> str:
    if args == ["queue"]:
        return _queue(dev)
    if args and args[0] == "job" and len(args) <= 2:
        c = dev.pointer if len(args) == 1 else {"C0": 0, "C1": 1}.get(args[1].upper())
        if c is None:
            raise dev.usage_error("ne16")
        regs = tuple(dev.regs.peek(f"{name}_C{c}") for name in J.JOB_REGISTERS)
        lines = [f"context C{c}:"]
        try:
            lines.append("  " + J.decode(regs).summary())
        except DeviceError as e:
            lines.append(f"  not runnable: {e}")
        lines += [f"  {name:<18} 0x{v:08x}" for name, v in zip(J.JOB_REGISTERS, regs)]
        return "\n".join(lines)
    if args and args[0] == "warnings" and len(args) <= 2:
        text = "\n".join(dev.warnings) or "no warnings"
        if args[1:] == ["clear"]:
            dev.warnings.clear()
        return text
    raise dev.usage_error("ne16")


def _queue(dev) -> str:
    lines = [f"offload pointer: C{dev.pointer}" + (" (acquired, not triggered)" if dev.locked
                                                   else ""),
             f"next job ID: {dev.next_id}", f"end-of-job events: {dev.events}"]
    if not dev.queue:
        lines.append("queue: empty")
    for n, j in enumerate(dev.queue):
        state = "held" if j.held else ("running" if j.result is not None else "queued")
        if j.result is not None:
            state += f", {j.next_subtile}/{j.cfg.subtiles} subtiles done"
        lines.append(f"queue[{n}]: job {j.job_id} in C{j.context}, {state}")
    return "\n".join(lines)
