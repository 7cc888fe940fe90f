"""Loading and running the program a user brings, for every device through the Device contract.

A device may import its own artifacts (``Device.load_program``: ai8x-synthesis directories, Vela
output, ...) as a host program (devices/host.py) that run control interleaves with the units;
importer errors (ValueError / OSError / DeviceError, messages naming file and line) become
ProgramError. Every device also accepts a *command script*: a text file of the OpenOCD memory
commands (``mww``, ``mwh``, ``mwb``, ``write_memory``, ``load_image``, ``reset``, ``reg``), one
per line, ``#`` comments -- the form a register-level bring-up script takes. Errors name file and
line.

Every file a program consists of is read through devices/files.py (regular files only, size
checked before reading, a limit per format kept next to its reader): a program is a regular
file or a directory; a character device, FIFO or socket is refused before any importer opens
it, and an empty file (or ``/dev/null``) is "empty program".
"""
from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from accelstub.devices import DeviceError, device_spec

# error moved to devices/errors.py with the rest of the hierarchy; stub.program keeps the name)
from accelstub.devices.device import Device, ProgramOptions
from accelstub.devices.errors import BusError, ProgramError  # noqa: F401 (re-exported: the
from accelstub.devices.files import FileRefused, file_kind, read_program_text
from accelstub.devices.host import unit_output
from accelstub.devices.runcontrol import RunControl

if TYPE_CHECKING:  # the command table is imported where a command script runs (run_script):
    # a program a device's importer takes never needs it (issue 31 #5, the warm `run`)
    from .commands import CommandContext

SCRIPT_COMMANDS = {"mww", "mwh", "mwb", "write_memory", "load_image", "reset", "reg"}
#: largest command script read: a bring-up script is a few thousand lines (its images come
#: through load_image, with their own limit); 16 MiB is some 600 000 commands
MAX_SCRIPT = 16 << 20


def load_program(ctx: CommandContext, path: str | Path,
                 options: ProgramOptions = ProgramOptions()) -> str:
    """Load ``path`` into the current target; returns a one-line summary."""
    path = Path(path)
    rc = ctx.target
    device = rc.device
    check_program_path(path)
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


def load_for_reset(ctx: CommandContext, path: str | Path,
                   options: ProgramOptions = ProgramOptions()) -> str:
    """:func:`load_program`, then make `reset init` load ``path`` again (the target's
    init_handler, OpenOCD's reset-init event), as `serve --program` and `json load` do. A
    program that became invalid on disk since is a user error of `reset init`, not an internal
    error with a traceback."""
    summary = load_program(ctx, path, options)

    def reload() -> None:
        from .commands import CommandError

        try:
            load_program(ctx, path, options)
        except ProgramError as e:
            raise CommandError(f"reset init: {e}") from None

    ctx.target.init_handler = reload
    return summary


def check_program_path(path: Path) -> None:
    """A program is a directory or a non-empty regular file: anything else (``/dev/zero``, a
    FIFO, which would block the reader) is refused before an importer opens it, with one line
    naming the file; an empty file and ``/dev/null`` are "empty program"."""
    try:
        st = path.stat()  # stat never blocks, not even on a FIFO
    except FileNotFoundError:
        raise ProgramError(f"{path}: no such file or directory") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the name
        raise ProgramError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    if stat.S_ISDIR(st.st_mode):
        return
    if st.st_size == 0 and stat.S_ISREG(st.st_mode) or os.path.samestat(st, os.stat(os.devnull)):
        raise ProgramError(f"{path}: empty program")
    if not stat.S_ISREG(st.st_mode):
        raise ProgramError(f"{path} is {file_kind(st.st_mode)}; a program is a regular file "
                           "or a directory")


def run_script(ctx: CommandContext, path: Path) -> str:
    from .commands import CommandContext, CommandError, execute

    n = 0
    script_ctx = CommandContext(targets=ctx.targets, current=ctx.current, log=lambda s: None,
                                shutdown=None, cwd=path.parent)
    try:
        text = read_program_text(path, MAX_SCRIPT, "a command script", errors="strict")
    except FileRefused as e:
        raise ProgramError(str(e)) from None
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
    failed) or 2 (a fault, the program is stuck, or its driver ended without running a single
    unit: checks that pass over an accelerator that never started prove nothing); the lines to
    print."""

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
    start, units = dev.cycles, dev.units_done
    try:
        stop = rc.run_here()
    finally:
        for fn in listeners:
            rc.remove_unit_listener(fn)
    if stop.reason != "done":  # a fault, a stuck driver, a halt, or nothing to run at all
        return RunOutcome(2, [f"error: {stop.message or stop.reason}"])
    if dev.units_done == units:  # the driver finished without starting the accelerator
        return RunOutcome(2, [f"error: the program ran no {dev.unit_name}: "
                              f"{dev.idle_message()}"])
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
