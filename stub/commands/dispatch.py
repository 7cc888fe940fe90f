"""Running a line: split into commands (no evaluation), each looked up in the declared table
plus the device's own commands, with OpenOCD's ``ocd_`` prefix and one clear line for names
that are Tcl, that do not apply to an accelerator, or that do not exist. Device errors from a
handler become CommandError, so no client input reaches a front end as an exception."""
from __future__ import annotations

from accelstub.devices import BusError, DeviceError, TargetRunning
from accelstub.devices.device import MonitorCommand, UsageError

from .table import COMMANDS, CommandContext, CommandError
from .words import split_script

#: OpenOCD commands that have no meaning for an accelerator, and what it lacks
_NOT_APPLICABLE = {
    "flash": "flash memory", "nand": "flash memory", "nor": "flash memory",
    "arm": "Arm CPU core", "armv4_5": "Arm CPU core", "cortex_m": "Arm CPU core",
    "cortex_a": "Arm CPU core", "riscv": "RISC-V core", "semihosting": "CPU to run semihosting",
    "arm7_9": "Arm CPU core", "etm": "trace macrocell", "itm": "trace macrocell",
    "tpiu": "trace port", "rtt": "RTT control block", "adapter": "debug adapter",
    "adapter_khz": "debug adapter", "interface": "debug adapter", "transport": "debug adapter",
    "jtag": "JTAG chain", "jtag_khz": "JTAG chain", "scan_chain": "JTAG chain",
    "irscan": "JTAG chain", "drscan": "JTAG chain", "runtest": "JTAG chain",
    "pathmove": "JTAG chain", "svf": "JTAG chain", "xsvf": "JTAG chain", "swd": "SWD port",
    "dap": "debug access port", "swo": "SWO trace pin", "reset_config": "reset lines to configure",
    "pld": "programmable logic device", "virt2phys": "MMU", "mmu": "MMU",
    "cache": "CPU cache", "profile": "CPU to sample",
}


#: Tcl's own commands: scripts that use them need OpenOCD's interpreter, which is not here
_TCL_BUILTINS = frozenset(
    "set proc if else for foreach while expr puts return source catch eval uplevel upvar "
    "global incr append lappend lindex llength list string format scan array dict info "
    "after sleep".split())


def table_for(ctx: CommandContext) -> dict[str, MonitorCommand]:
    """The declared commands plus the current device's own (Device.monitor_commands), which
    take the name where both declare it."""
    table = dict(COMMANDS)
    if ctx.targets:
        table.update(ctx.target.device.monitor_commands())
    return table


def execute(ctx: CommandContext, line: str) -> str:
    """Run one line (one or more commands separated by ';' or newlines); returns the result text
    of the last one, raises CommandError with OpenOCD-like messages on failure."""
    result = ""
    for words in split_script(line):
        result = _run(ctx, words)
    return result


def _run(ctx: CommandContext, words: list[str]) -> str:
    name, args = words[0], words[1:]
    table = table_for(ctx)
    if name.startswith("ocd_") and name[4:] in table:
        name = name[4:]  # OpenOCD's ocd_ prefix (the command's output as its Tcl result)
    entry = table.get(name)
    if entry is None:
        if name in _TCL_BUILTINS:
            raise CommandError(f"{name}: Tcl is not evaluated here (accelstub runs OpenOCD's "
                               "commands one line at a time: no variables, procs, control "
                               "flow or [command substitution])")
        if name in _NOT_APPLICABLE:
            dev = ctx.target.device.name if ctx.targets else "this target"
            raise CommandError(f"{name} does not apply to {dev} "
                               f"(an accelerator has no {_NOT_APPLICABLE[name]})")
        raise CommandError(f'invalid command name "{name}"')
    try:
        return entry.handler(ctx, args)
    except CommandError:
        raise
    except TargetRunning as e:
        raise CommandError(str(e)) from None
    except BusError as e:
        raise CommandError(f"{name}: {e}") from None
    except UsageError as e:  # already the whole reply, ``usage: NAME USAGE``
        raise CommandError(str(e)) from None
    except DeviceError as e:  # named once: a device's message may start with its command
        text = str(e)
        raise CommandError(text if text.startswith((f"{name}:", f"{name} ")) else
                           f"{name}: {text}") from None
