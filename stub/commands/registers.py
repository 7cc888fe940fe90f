"""Register commands (reg, get_reg, set_reg) in OpenOCD's formats, numbered with gdb's register
numbers (target.xml's regnum) so ``reg N``, gdb and the TUI name the same register."""
from __future__ import annotations

from dataclasses import dataclass

from accelstub.devices import BusError
from accelstub.devices.device import CORE_REGS
from accelstub.devices.runcontrol import RunControl

from ..target_xml import FIRST_DEVICE_REGNUM, register_table
from .args import fit, parse_number
from .table import CommandContext, CommandError, command, usage_error
from .words import split_words

#: register cache name of the virtual host core (``reg`` listing header)
CORE_CACHE = "accelstub host core"


@dataclass(frozen=True)
class RegEntry:
    number: int
    name: str
    bits: int
    cache: str
    core: bool


def register_list(rc: RunControl) -> list[RegEntry]:
    """Every register ``reg`` knows, in listing order: the host core, then one cache per register
    group of the description. The numbers are gdb's register numbers (target.xml's regnum), so
    ``reg 26``, gdb's ``p $26``-style numbers and the TUI name the same register."""
    desc = rc.device.description
    numbers = {e.name: e.regnum for e in register_table(desc)}
    out = [RegEntry(numbers[n], n, 32, CORE_CACHE, True) for n in CORE_REGS]
    for group in desc.groups():
        for r in desc.registers:
            if r.group == group:
                out.append(RegEntry(numbers[r.name], r.name, r.bits, group, False))
    return out


def _reg_value(rc: RunControl, e: RegEntry) -> int:
    return rc.device.read_core(e.name) if e.core else rc.device.read_register(e.name)


def _hex(value: int, bits: int) -> str:
    return "%0*x" % ((bits + 3) // 4, value & ((1 << bits) - 1))


def _find_reg(rc: RunControl, entries: list[RegEntry], key: str) -> RegEntry:
    if key.isascii() and key.isdigit():
        # past 9 digits no register has the number (and int() refuses past 4300 digits)
        n = int(key) if len(key) <= 9 else -1
        for e in entries:
            if e.number == n:
                return e
        shown = key if len(key) <= 20 else key[:20] + "..."
        raise CommandError(f"reg: no register number {shown} (gdb's numbers: 0-15 and 25 for the "
                           f"host core, {FIRST_DEVICE_REGNUM}-{max(e.number for e in entries)} "
                           "for the device)")
    for e in entries:
        if e.name == key:
            return e
    reg = rc.device.description.find_register(key)
    if reg is None:
        low = key.lower()
        matches = [e for e in entries if e.name.lower() == low]
        if len(matches) == 1:
            return matches[0]
        raise CommandError(f"reg: register {key} not found in current target")
    for e in entries:
        if not e.core and e.name == reg.name:
            return e
    raise CommandError(f"reg: register {key} not found in current target")


@command("reg", "[(register_number|register_name) [value]]", "list, read or write registers")
def cmd_reg(ctx: CommandContext, args: list[str]) -> str:
    rc = ctx.target
    entries = register_list(rc)
    if not args:
        lines, cache = [], None
        for e in entries:
            if e.cache != cache:
                cache = e.cache
                lines.append(f"===== {cache}")
            lines.append("(%i) %s (/%u): 0x%s" % (e.number, e.name, e.bits,
                                                  _hex(_reg_value(rc, e), e.bits)))
        return "\n".join(lines)
    if len(args) > 2:
        raise usage_error("reg")
    e = _find_reg(rc, entries, args[0])
    if len(args) == 2 and args[1] != "force":
        value = fit("reg", parse_number("reg", "value", args[1], signed=True), e.bits)
        try:
            with rc.halted_access("reg write"):
                if e.core:
                    rc.device.write_core(e.name, value)
                else:
                    rc.device.write_register(e.name, value)
        except BusError as err:  # TargetRunning and DeviceError: dispatch's wording
            raise CommandError(f"reg: cannot write {e.name}: {err}") from None
    return "%s (/%i): 0x%s" % (e.name, e.bits, _hex(_reg_value(rc, e), e.bits))


@command("get_reg", "[-force] list", "read registers into a Tcl dict")
def cmd_get_reg(ctx: CommandContext, args: list[str]) -> str:
    args = [a for a in args if a != "-force"]
    if len(args) != 1:
        raise usage_error("get_reg")
    rc = ctx.target
    entries = register_list(rc)
    out = []
    for name in split_words(args[0]):
        e = _find_reg(rc, entries, name)
        out += [name, "0x" + _hex(_reg_value(rc, e), e.bits)]
    return " ".join(out)


@command("set_reg", "dict", "write registers from a Tcl dict")
def cmd_set_reg(ctx: CommandContext, args: list[str]) -> str:
    if len(args) != 1:
        raise usage_error("set_reg")
    words = split_words(args[0])
    if len(words) % 2:
        raise CommandError("set_reg: expected a dict of register names and values")
    for name, value in zip(words[::2], words[1::2]):
        cmd_reg(ctx, [name, value])
    return ""
