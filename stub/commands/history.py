"""Saved state: named snapshots of the whole target (``snapshot``) and the budget of the
reverse-execution history (``history``), both kept by RunControl."""
from __future__ import annotations

import re

from accelstub.devices import DeviceError, TargetRunning

from .args import check_halted, parse_number
from .run import next_unit_label
from .table import CommandContext, CommandError, command, usage_error

_SNAPSHOT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@command("snapshot", "save|restore|delete NAME | list", "named snapshots of the whole target state")
def cmd_snapshot(ctx: CommandContext, args: list[str]) -> str:
    """``snapshot save|restore|delete NAME`` and ``snapshot list``: named whole-state
    snapshots of the target (RunControl.save_snapshot), one line per snapshot in ``list``."""
    rc = ctx.target
    if args == ["list"]:
        if not rc.snapshots:
            return "no snapshots"
        return "\n".join(f"{name}: pc 0x{s['pc']:08x} ({rc.device.unit_label(s['pc'])}), "
                         f"{s['units']} {rc.device.unit_name}s done"
                         for name, s in rc.snapshots.items())
    if len(args) != 2 or args[0] not in ("save", "restore", "delete"):
        raise usage_error("snapshot")
    verb, name = args
    if not _SNAPSHOT_NAME.fullmatch(name):
        raise CommandError(f"snapshot {verb}: {name!r} is not a snapshot name (letters, digits, "
                           "'_', '.', '-'; at most 64)")
    try:
        if verb == "save":
            rc.save_snapshot(name)
            return f"saved snapshot {name} at pc 0x{rc.device.pc:08x}"
        if verb == "restore":
            rc.restore_snapshot(name)
            return f"restored snapshot {name}: pc 0x{rc.device.pc:08x} ({next_unit_label(rc)})"
        rc.delete_snapshot(name)
        return f"deleted snapshot {name}"
    except (DeviceError, TargetRunning) as e:
        raise CommandError(f"snapshot {verb}: {e}") from None


@command("history", "[MiB]", "reverse-execution history: its size, or set its budget (0: off)")
def cmd_history(ctx: CommandContext, args: list[str]) -> str:
    """``history``: the reverse-execution history's size; ``history MIB`` sets its budget
    (0: recording off), as ``--history-mib`` does."""
    rc = ctx.target
    if len(args) > 1:
        raise usage_error("history")
    if args:
        mib = parse_number("history", "budget (MiB)", args[0])
        check_halted(rc, "history")
        rc.history.budget = mib << 20
        if not mib:
            rc.history.clear()
    return rc.history.usage()
