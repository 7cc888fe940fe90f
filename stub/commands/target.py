"""What the target holds, for people and for the TUI: the program as units (``units``, with the
unit at pc marked), the run state (``status``), the named memory map (``regions``) and the
CMSIS-SVD export (``svd``); plus the unit lookups other commands share."""
from __future__ import annotations

from typing import Any

from accelstub.devices.content_cache import kept_for
from accelstub.devices.device import Device, unit_indices
from accelstub.devices.runcontrol import RunControl

from ..files import FileRefused, write_regular
from .args import resolve
from .table import CommandContext, CommandError, command, usage_error

#: id(device) -> (its listing, {"index": address -> unit index}) (unit_at_pc, kept_for)
_AT_PC: dict[int, tuple[object, dict[str, Any]]] = {}


def unit_at_pc(dev: Device) -> int | None:
    """Index in ``dev.units()`` of the unit at pc (the next to run), None past the last.
    Every stop asks for it (a step's stop data, issue 26 #7): where the device hands out the
    same listing object again (Ethos-U85 keeps it while the stream stays the same), the
    address -> index table made from it the second time is kept with it (``kept_for``); a
    listing made anew per call is scanned, as before."""
    pc = dev.pc
    units = dev.units()
    kept = kept_for(_AT_PC, id(dev), units)
    index = kept.get("index")
    if index is None:
        if not kept:  # the first time this listing is seen: it may be made anew per call
            kept["seen"] = True
            return next((i for i, u in enumerate(units) if u.address == pc), None)
        index = kept["index"] = unit_indices(units)
    at: int | None = index.get(pc)
    return at


def parse_unit(cmd: str, dev: Device, text: str) -> int:
    """A unit given by its label (as ``units`` lists it) or its index in the listing."""
    units = dev.units()
    for i, u in enumerate(units):
        if u.label == text:
            return i
    try:
        index = int(text, 0)
    except ValueError:
        index = -1
    if 0 <= index < len(units):
        return index
    known = (f"an index 0..{len(units) - 1} or a label such as '{units[0].label}'" if units
             else "the program lists none")
    raise CommandError(f"{cmd}: no {dev.unit_name} '{text}' ({known})")


def units_data(rc: RunControl) -> dict[str, Any]:
    """The program listing with indexes, the word for a unit and the end address."""
    dev = rc.device
    end = dev.end_address if dev.description.find_register("EMU_END") is not None else None
    return {"unit_name": dev.unit_name, "granularities": list(dev.granularities), "end": end,
            "units": [{"index": i, "address": u.address, "label": u.label, "summary": u.summary}
                      for i, u in enumerate(dev.units())]}


def status_data(rc: RunControl) -> dict[str, Any]:
    """What ``status`` prints, as values: run state, pc, unit at pc, stop reason, interrupt
    lines, counters."""
    dev = rc.device
    return {"device": dev.name, "state": rc.state, "pc": dev.pc, "unit": unit_at_pc(dev),
            "stop": rc.last_stop.reason, "interrupts": dict(dev.interrupts()),
            "counters": dict(dev.counters())}


@command("units", "", "list the program: one line per layer/command/job")
def cmd_units(ctx: CommandContext, args: list[str]) -> str:
    """The whole program: one line per unit, ``0x%08x <label>: <summary>``, like the comments
    the vendor tools put in generated code, then the end address (``end``); the line at pc is
    marked ``=>`` as gdb's ``x/i`` marks it (machine-readable: the TUI parses it)."""
    if args:
        raise usage_error("units")
    d = units_data(ctx.target)
    rows = [(u["address"], u["label"], u["summary"]) for u in d["units"]]
    if d["end"] is not None:
        rows.append((d["end"], "end", f"end of program (pc once every {d['unit_name']} has "
                     "run)"))
    pc = ctx.target.device.pc
    return "\n".join(f"{'=>' if a == pc else '  '} 0x{a:08x} {label}: {summary}"
                     for a, label, summary in rows)


@command("status", "", "run state, pc, interrupt lines and counters")
def cmd_status(ctx: CommandContext, args: list[str]) -> str:
    """Run state, pc, interrupt lines and counters as ``key: value`` lines."""
    if args:
        raise usage_error("status")
    rc = ctx.target
    dev = rc.device
    lines = [f"state: {rc.state}", f"pc: 0x{dev.pc:08x}",
             f"stop: {rc.last_stop.debug_reason}"]
    lines += [f"irq.{name}: {int(level)}" for name, level in dev.interrupts().items()]
    lines += [f"{name}: {value}" for name, value in dev.counters().items()]
    return "\n".join(lines)


@command("regions", "", "list the memory map: start, end, name and kind of each range")
def cmd_regions(ctx: CommandContext, args: list[str]) -> str:
    """The memory map with names: one ``0x%08x 0x%08x <name> <kind>`` line ([start, end)) per
    populated range (gdb's memory-map XML has no names; the TUI reads this)."""
    if args:
        raise usage_error("regions")
    return "\n".join(f"0x{s:08x} 0x{e:08x} {r.name} {r.kind}"
                     for r in ctx.target.device.description.regions for s, e in r.populated)


@command("svd", "filename", "write the device's CMSIS-SVD description to a file")
def cmd_svd(ctx: CommandContext, args: list[str]) -> str:
    if len(args) != 1:
        raise usage_error("svd")
    from ..svd import description_to_svd

    path = resolve(ctx, args[0])
    try:
        write_regular(path, description_to_svd(ctx.target.device.description).encode("utf-8"))
    except FileRefused as e:
        raise CommandError(f"svd: {e}") from None
    except OSError as e:
        raise CommandError(f"svd: cannot write {path}: {e.strerror}") from None
    return f"wrote {path}"
