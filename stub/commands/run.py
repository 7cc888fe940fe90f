"""Run control (OpenOCD's reset, halt, wait_halt, resume, step, poll, targets) and the halted
message every front end prints: ``[target] halted due to <reason>, <unit>: <label>`` with pc on
a second line, OpenOCD's wording adapted to an accelerator whose pc names the next unit."""
from __future__ import annotations

from accelstub.devices import DeviceError, TargetRunning
from accelstub.devices.device import Stop
from accelstub.devices.runcontrol import RunControl

from .args import check_halted, parse_address, parse_number
from .table import CommandContext, CommandError, command, usage_error
from .target import unit_at_pc

#: default wait of halt / wait_halt, as OpenOCD (5 s)
DEFAULT_WAIT_MS = 5000
#: longest wait halt/wait_halt take (OpenOCD's int; a fuzzed 10**20 raised OverflowError)
MAX_WAIT_MS = (1 << 31) - 1
#: longest a step may take before the command gives up waiting (the unit keeps running)
STEP_TIMEOUT_S = 300.0


def next_unit_label(rc: RunControl) -> str:
    dev = rc.device
    try:
        i = unit_at_pc(dev)
        if i is not None and not dev.finished():
            return dev.units()[i].label
    except Exception:
        pass
    return "none"


def halted_message(rc: RunControl, stop: Stop | None = None) -> str:
    """OpenOCD's ``[target] halted due to <reason>, ...`` adapted to an accelerator: the second
    part names the next unit, the second line gives pc."""
    stop = stop or rc.last_stop
    dev = rc.device
    return (f"[{dev.description.cpu_name}] halted due to {stop.debug_reason}, "
            f"{dev.unit_name}: {next_unit_label(rc)}\npc: 0x{dev.pc:08x}")


def report_stop(ctx: CommandContext, rc: RunControl, stop: Stop) -> None:
    ctx.reported_stops.append(stop)
    ctx.log(halted_message(rc, stop))


def _wait_ms(cmd: str, args: list[str]) -> float:
    if len(args) > 1:
        raise usage_error(cmd)
    ms = parse_number(cmd, "timeout", args[0]) if args else DEFAULT_WAIT_MS
    if ms > MAX_WAIT_MS:  # OpenOCD parses an int; Python's wait overflows past time_t
        raise CommandError(f"{cmd}: timeout {ms} out of range (at most {MAX_WAIT_MS} ms)")
    return ms / 1000.0




@command("reset", "[run|halt|init]", "reset the accelerator, then run, halt or init")
def cmd_reset(ctx: CommandContext, args: list[str]) -> str:
    if len(args) > 1 or (args and args[0] not in ("run", "halt", "init")):
        raise usage_error("reset")
    kind = args[0] if args else "run"
    rc = ctx.target
    try:
        rc.reset(kind)
    except DeviceError as e:
        raise CommandError(f"reset: {e}") from None
    if kind in ("halt", "init"):
        report_stop(ctx, rc, rc.last_stop)
    return ""


@command("halt", "[milliseconds]", "request a halt and wait for it")
def cmd_halt(ctx: CommandContext, args: list[str]) -> str:
    timeout = _wait_ms("halt", args)
    rc = ctx.target
    if not rc.running:
        return ""
    rc.halt()
    if timeout:
        _wait_and_report(ctx, rc, timeout)
    return ""


@command("wait_halt", "[milliseconds]", "wait for the target to halt")
def cmd_wait_halt(ctx: CommandContext, args: list[str]) -> str:
    timeout = _wait_ms("wait_halt", args)
    rc = ctx.target
    if rc.running:
        _wait_and_report(ctx, rc, timeout)
    return ""


def _wait_and_report(ctx: CommandContext, rc: RunControl, timeout: float) -> None:
    """The tail halt and wait_halt share: OpenOCD's ``halt`` is a request plus ``wait_halt``,
    so both wait the same way and report the stop to the client the same way."""
    stop = rc.wait(timeout)
    if stop is None:
        raise CommandError("timed out while waiting for target halted")
    report_stop(ctx, rc, stop)


def _set_pc(ctx: CommandContext, cmd: str, text: str) -> None:
    addr = parse_address(cmd, text)
    try:
        ctx.target.device.write_core("pc", addr)
    except DeviceError as e:
        raise CommandError(f"{cmd}: {e}") from None


@command("resume", "[address]", "resume, optionally from a new pc (next unit)")
def cmd_resume(ctx: CommandContext, args: list[str]) -> str:
    if len(args) > 1:
        raise usage_error("resume")
    rc = ctx.target
    check_halted(rc, "resume")
    if args:
        _set_pc(ctx, "resume", args[0])
    if rc.device.finished():
        hint = ("'reset init' loads the program again; a plain 'reset' only resets the "
                "registers" if rc.init_handler is not None else "start the accelerator first")
        raise CommandError(f"resume: no {rc.device.unit_name} left to run ({hint})")
    try:
        rc.resume()
    except TargetRunning as e:
        raise CommandError(str(e)) from None
    return ""


@command("step", "[address | granularity]",
         "run one unit (layer/command/job) and halt; a granularity (e.g. subtile) runs one "
         "part of it")
def cmd_step(ctx: CommandContext, args: list[str]) -> str:
    """``step [address]`` runs one unit (OpenOCD's form); ``step GRANULARITY`` one part of it,
    for devices with finer granularities (Device.granularities, e.g. ne16's subtile)."""
    if len(args) > 1:
        raise usage_error("step")
    rc = ctx.target
    check_halted(rc, "step")
    grains = rc.device.granularities
    granularity = None
    if args and args[0] in grains:
        granularity = args[0]
    elif args and args[0][:1].isalpha() and not args[0].lower().startswith("0x"):
        raise CommandError(f"step: {rc.device.name} steps by {', '.join(grains)}; "
                           f"{args[0]!r} is neither one of them nor an address")
    elif args:
        _set_pc(ctx, "step", args[0])
    try:
        rc.start_step(granularity)
    except TargetRunning as e:
        raise CommandError(str(e)) from None
    stop = rc.wait(STEP_TIMEOUT_S)
    if stop is None:
        raise CommandError(f"step: the {rc.device.unit_name} is still running after "
                           f"{STEP_TIMEOUT_S:.0f}s (use 'halt' or 'wait_halt')")
    if stop.reason == "idle":
        raise CommandError(f"step: {stop.message}")
    report_stop(ctx, rc, stop)
    return ""


@command("poll", "['on'|'off']", "show the target state")
def cmd_poll(ctx: CommandContext, args: list[str]) -> str:
    if args:
        if len(args) != 1 or args[0] not in ("on", "off", "enable", "disable", "1", "0"):
            raise usage_error("poll")
        return ""  # background polling is always on: the stub pushes stops
    rc = ctx.target
    if rc.running:
        return "target state: running"
    return f"target halted due to {rc.last_stop.debug_reason}, pc: 0x{rc.device.pc:08x}"


@command("targets", "[target]", "list targets or select the current one")
def cmd_targets(ctx: CommandContext, args: list[str]) -> str:
    if len(args) > 1:
        raise usage_error("targets")
    if args:
        want = args[0]
        for i, rc in enumerate(ctx.targets):
            if want in (str(i), rc.device.description.cpu_name):
                ctx.current = i
                return ""
        names = ", ".join(rc.device.description.cpu_name for rc in ctx.targets)
        raise CommandError(f"Target: {want} is unknown, try one of: {names}")
    lines = ["    TargetName         Type       Endian TapName            State       ",
             "--  ------------------ ---------- ------ ------------------ ------------"]
    for i, rc in enumerate(ctx.targets):
        name = rc.device.description.cpu_name
        lines.append("%2d%c %-18s %-10s %-6s %-18s %s" % (
            i, "*" if i == ctx.current else " ", name, rc.device.name, "little", name, rc.state))
    return "\n".join(lines)
