"""The per-layer comparison (``diff``) with a framework's reference tensors: a divergence
breakpoint over devices/layer_diff.py."""
from __future__ import annotations

from accelstub.devices.layer_diff import ReferenceFileError, differ_of, start_diff

from .args import resolve
from .table import CommandContext, CommandError, command, usage_error


@command("diff", "[load FILE ['all'] | clear]",
         "per-layer comparison with the framework's tensors: load a reference (continue then "
         "stops at the first unit that diverges), show the table so far, or clear")
def cmd_diff(ctx: CommandContext, args: list[str]) -> str:
    """``diff load R [all]``: compare every later unit's output with the reference file R
    (devices/layer_diff.py; the device's reader, Device.layer_references) and stop after the
    first unit that diverges (a divergence breakpoint; ``all``: never stop); ``diff``: the
    table so far; ``diff clear``: compare no more."""
    rc = ctx.target
    if args[:1] == ["load"] and len(args) in (2, 3) and args[2:] in ([], ["all"]):
        path = resolve(ctx, args[1])
        try:
            differ = start_diff(rc, path, stop=args[2:] != ["all"])
        except ReferenceFileError as e:
            raise CommandError(f"diff load: {e}") from None
        units = sorted(differ.by_unit)
        return (f"diff: {len(differ.by_unit)} {rc.device.unit_name}s referenced by {path.name} "
                f"({', '.join(map(str, units[:8]))}{' ...' if len(units) > 8 else ''}); "
                + ("continue stops after the first that diverges" if differ.stop else
                   "every one is compared, no stop"))
    loaded = differ_of(rc)
    if args == ["clear"]:
        if loaded is not None:
            loaded.detach()
        return "diff: cleared"
    if args:
        raise usage_error("diff")
    if loaded is None:
        raise CommandError("diff: no reference loaded (diff load FILE)")
    return loaded.table()
