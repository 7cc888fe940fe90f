"""Breakpoints and watchpoints (bp, rbp, wp, rwp) on unit addresses, listed in OpenOCD's
formats; RunControl holds the points, this module only the lengths ``bp`` was given."""
from __future__ import annotations

import weakref

from accelstub.devices.runcontrol import RunControl

from .args import parse_address, parse_number
from .table import CommandContext, CommandError, command, usage_error

#: lengths given to `bp` per RunControl (RunControl keeps only addresses)
_BP_LEN: weakref.WeakKeyDictionary[RunControl, dict[int, int]] = weakref.WeakKeyDictionary()
_WP_KIND = {"r": 0, "w": 1, "a": 2}


@command("bp", "[address length ['hw']]", "list or set breakpoints (on unit addresses)")
def cmd_bp(ctx: CommandContext, args: list[str]) -> str:
    rc = ctx.target
    lengths = _BP_LEN.setdefault(rc, {})
    if not args:
        return "\n".join("Breakpoint(IVA): 0x%08x, 0x%x, 1" % (a, lengths.get(a, 4))
                         for a in sorted(rc.breakpoints))
    if len(args) not in (2, 3) or (len(args) == 3 and args[2] != "hw"):
        raise usage_error("bp")
    addr = parse_address("bp", args[0])
    length = parse_number("bp", "length", args[1])
    rc.add_breakpoint(addr)
    lengths[addr] = length
    return "breakpoint set at 0x%08x" % addr


def _removal(name: str, args: list[str]) -> int | None:
    """The address ``rbp``/``rwp`` remove, None for ``all``: OpenOCD's one grammar for both."""
    if len(args) != 1:
        raise usage_error(name)
    return None if args[0] == "all" else parse_address(name, args[0])


@command("rbp", "'all' | address", "remove breakpoints")
def cmd_rbp(ctx: CommandContext, args: list[str]) -> str:
    addr, rc = _removal("rbp", args), ctx.target
    if addr is None:
        rc.clear_breakpoints()
        _BP_LEN.pop(rc, None)
        return ""
    if not rc.remove_breakpoint(addr):
        raise CommandError("no breakpoint at address 0x%08x found" % addr)
    _BP_LEN.get(rc, {}).pop(addr, None)
    return ""


@command("wp", "[address length [('r'|'w'|'a')]]", "list or set watchpoints")
def cmd_wp(ctx: CommandContext, args: list[str]) -> str:
    rc = ctx.target
    if not args:
        return "\n".join("address: 0x%08x, len: 0x%08x, r/w/a: %i, value: 0x%08x, mask: 0x%08x"
                         % (w.start, w.length, _WP_KIND[w.kind], 0, 0xFFFFFFFF)
                         for w in rc.watchpoints)
    if not 2 <= len(args) <= 5:
        raise usage_error("wp")
    addr = parse_address("wp", args[0])
    length = parse_number("wp", "length", args[1])
    kind = "a"
    if len(args) >= 3:
        if args[2] not in _WP_KIND:
            raise usage_error("wp")
        kind = args[2]
    if len(args) >= 4:
        value = parse_number("wp", "value", args[3])
        mask = parse_number("wp", "mask", args[4]) if len(args) == 5 else 0xFFFFFFFF
        if mask & 0xFFFFFFFF != 0xFFFFFFFF or (len(args) == 4 and value):
            raise CommandError("wp: data value matching is not supported: "
                               f"{rc.device.name} watchpoints stop on any access to the range")
    if length < 1:
        raise CommandError(f"wp: invalid length '{args[1]}'")
    rc.add_watchpoint(kind, addr, length)
    return ""


@command("rwp", "'all' | address", "remove watchpoints")
def cmd_rwp(ctx: CommandContext, args: list[str]) -> str:
    addr, rc = _removal("rwp", args), ctx.target
    if addr is None:
        rc.clear_watchpoints()
        return ""
    if not rc.remove_watchpoint(None, addr):
        raise CommandError("no watchpoint at address 0x%08x found" % addr)
    return ""
