"""The command interpreter's own commands (help, capture, echo, sleep, version, init, shutdown,
tcl): what OpenOCD's command layer offers around the target commands."""
from __future__ import annotations

import dataclasses
import threading

from .args import parse_number
from .dispatch import execute, table_for
from .table import CommandContext, CommandError, command, usage_error

try:  # pragma: no cover - depends on the install
    from importlib.metadata import version as _dist_version

    VERSION = _dist_version("accelstub")
except Exception:  # pragma: no cover
    VERSION = "0.1.0"


@command("capture", "command", "run a command and return its log output and result")
def cmd_capture(ctx: CommandContext, args: list[str]) -> str:
    if len(args) != 1:
        raise usage_error("capture")
    lines: list[str] = []
    sub = dataclasses.replace(ctx, log=lines.append)
    try:
        result = execute(sub, args[0])
    finally:
        ctx.current = sub.current
        ctx.reported_stops.extend(sub.reported_stops)
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return text + result


@command("init", "", "ignored; for OpenOCD compatibility")
def cmd_init(ctx: CommandContext, args: list[str]) -> str:
    return ""


@command("version", "", "show the program version")
def cmd_version(ctx: CommandContext, args: list[str]) -> str:
    return f"accelstub {VERSION} (OpenOCD-compatible command set)"


@command("help", "[command_name]", "show command usage")
def cmd_help(ctx: CommandContext, args: list[str]) -> str:
    table = table_for(ctx)
    if args:
        name = args[0]
        if name not in table:
            raise CommandError(f"help: no command named '{name}'")
        usage, summary = table[name].usage, table[name].summary
        return f"{name} {usage}".rstrip() + (f"\n      {summary}" if summary else "")
    return "\n".join(f"{name} {table[name].usage}".rstrip() for name in sorted(table))


@command("shutdown", "", "shut the server down")
def cmd_shutdown(ctx: CommandContext, args: list[str]) -> str:
    if ctx.shutdown is None:
        raise CommandError("shutdown: not available on this connection")
    ctx.shutdown()
    return "shutdown command invoked"


@command("sleep", "milliseconds", "wait")
def cmd_sleep(ctx: CommandContext, args: list[str]) -> str:
    if len(args) != 1:
        raise usage_error("sleep")
    ms = parse_number("sleep", "time", args[0])
    threading.Event().wait(min(ms, 600_000) / 1000.0)
    return ""


@command("tcl", "notifications ('on'|'off')", "Tcl RPC event notifications")
def cmd_tcl(ctx: CommandContext, args: list[str]) -> str:
    raise CommandError("tcl notifications: only on a Tcl RPC connection (port 6666)")


@command("echo", "[-n] text...", "the text, as a result (scripts print progress with it)")
def cmd_echo(ctx: CommandContext, args: list[str]) -> str:
    """OpenOCD's echo: the words joined by spaces (``-n``: no newline, which our results never
    end with anyway). OpenOCD logs it; here it is the result, so telnet, monitor and Tcl RPC
    all show it."""
    return " ".join(args[1:] if args[:1] == ["-n"] else args)
