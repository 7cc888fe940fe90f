"""Loading and running the program a user brings, for every device through the Device contract.

A device may import its own artifacts (``Device.load_program``: ai8x-synthesis directories, Vela
output, ...) as a host program (devices/host.py) that run control interleaves with the units;
importer errors (ValueError / OSError / DeviceError, messages naming file and line) become
ProgramError. Every device also accepts a *command script*: a text file of the OpenOCD memory
commands (``mww``, ``mwh``, ``mwb``, ``write_memory``, ``load_image``, ``reset``, ``reg``), one
per line, ``#`` comments -- the form a register-level bring-up script takes. Errors name file and
line.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from accelstub.devices import DeviceError, device_spec
from accelstub.devices.errors import BusError
from accelstub.devices.device import Device, ProgramOptions
from accelstub.devices.host import unit_output
from accelstub.devices.runcontrol import RunControl

from .commands import CommandContext, CommandError, execute

SCRIPT_COMMANDS = {"mww", "mwh", "mwb", "write_memory", "load_image", "reset", "reg"}


class ProgramError(Exception):
    pass


def load_program(ctx: CommandContext, path: str | Path,
                 options: ProgramOptions = ProgramOptions()) -> str:
    """Load ``path`` into the current target; returns a one-line summary."""
    path = Path(path)
    rc = ctx.target
    device = rc.device
    if not path.exists():
        raise ProgramError(f"{path}: no such file or directory")
    try:
        host = device.load_program(path, options)
        if host is not None:
            rc.attach(host)
            return host.summary
    except (ValueError, OSError, DeviceError) as e:  # importer errors name file and line
        raise ProgramError(str(e)) from None
    if path.is_dir():
        raise ProgramError(f"{path}: is a directory, and {device.name} takes "
                           f"{device_spec(device.name).program_help}")
    rc.attach(None)
    try:
        return run_script(ctx, path)
    except ProgramError as e:
        # a file of a program directory (cnn.c of an ai8x project): name the directory
        try:
            whole = device.load_program(path.parent, options) is not None
        except (ValueError, OSError, DeviceError):
            whole = False
        if whole:
            raise ProgramError(f"{e}\n{path.name} is part of the program in {path.parent}: "
                               f"give that directory (--program {path.parent})") from None
        raise


def run_script(ctx: CommandContext, path: Path) -> str:
    n = 0
    script_ctx = CommandContext(targets=ctx.targets, current=ctx.current, log=lambda s: None,
                                shutdown=None, cwd=path.parent)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ProgramError(f"{path}: cannot read the command script: {e}") from None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        word = line.split()[0]
        if word not in SCRIPT_COMMANDS:
            raise ProgramError(f"{path}:{lineno}: '{word}' is not allowed in a program script "
                               f"(allowed: {', '.join(sorted(SCRIPT_COMMANDS))})")
        try:
            execute(script_ctx, line)
        except CommandError as e:
            raise ProgramError(f"{path}:{lineno}: {e}") from None
        n += 1
    return f"{path.name}: {n} commands"


@dataclass(frozen=True)
class RunOutcome:
    """What ``accelstub run`` reports: exit code 0 (done, every check passed), 1 (a check
    failed) or 2 (a fault, or the program is stuck); the lines to print."""

    code: int
    lines: list[str]


def run_to_end(rc: RunControl, progress: Callable[[int], None] | None = None,
               verbose: bool = False) -> RunOutcome:
    """Run the loaded program to its end (its host program's checks included), in the calling
    thread. The last line gives the modelled cycles (per unit too with ``verbose``, with the
    size and CRC-32 of the bytes each unit wrote, so two runs or two builds can be compared
    unit by unit), beside the vendor tool's estimate when the program carries one."""
    dev = rc.device
    per_unit: list[tuple[str, int, str]] = []
    cycles = [dev.cycles]

    def record(done: int) -> None:  # after each unit (-v only: the labels cost time per unit)
        out = output_text(dev, rc.last_touched.writes) if rc.last_touched else ""
        per_unit.append((rc.last_unit_label, dev.cycles - cycles[0], out))
        cycles[0] = dev.cycles

    listeners = ([record] if verbose else []) + ([progress] if progress is not None else [])
    for fn in listeners:
        rc.add_unit_listener(fn)
    start = dev.cycles
    try:
        stop = rc.run_here()
    finally:
        for fn in listeners:
            rc.remove_unit_listener(fn)
    if stop.reason != "done":  # a fault, a stuck driver, a halt, or nothing to run at all
        return RunOutcome(2, [f"error: {stop.message or stop.reason}"])
    host = rc.host
    lines = [r.line for r in host.results] if host is not None and host.results else \
        [stop.message]
    lines += cycle_lines(dev.cycles - start, per_unit, host.vendor_cycles if host else None,
                         verbose)
    return RunOutcome(0 if host is None or not host.results or host.ok else 1, lines)


def output_text(dev: Device, writes: list[tuple[int, int]]) -> str:
    """", wrote N B at ADDR, crc32 0x........" for a unit's writes (zlib's CRC-32 over the
    bytes in address order, as unit_output reads them)."""
    if not writes:
        return ", wrote nothing"
    first = min(s for s, _ in writes)
    try:
        data = unit_output(dev, writes)
    except BusError as e:  # a range the debugger cannot read back: say so, do not stop the run
        return f", wrote at {first:#010x} (not readable back: {e})"
    return f", wrote {len(data)} B at {first:#010x}, crc32 {zlib.crc32(data):#010x}"


def cycle_lines(total: int, per_unit: list[tuple[str, int, str]],
                vendor: tuple[str, int, list[int]] | None, verbose: bool) -> list[str]:
    """"cycles: N modelled (SOURCE: M)" and with ``verbose`` one line per unit before it (with
    what the unit wrote, when known)."""
    lines = []
    if verbose:
        for i, (label, c, out) in enumerate(per_unit):
            theirs = f", {vendor[0].split()[0]}: {vendor[2][i]}" \
                if vendor and i < len(vendor[2]) else ""
            lines.append(f"  {label}: {c} cycles modelled{theirs}{out}")
    theirs = f" ({vendor[0]}: {vendor[1]})" if vendor else ""
    lines.append(f"cycles: {total} modelled{theirs}")
    return lines
