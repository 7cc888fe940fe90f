"""The command table: each command is declared once, next to its handler, by ``@command(name,
usage, summary)``; ``help``, the usage errors and the dispatcher all read that one declaration
(pyOCD's commands carry theirs the same way, in one record per command class).

The record is the devices' own :class:`MonitorCommand`, so a device's commands (Device.
monitor_commands) and these are listed by ``help`` and run by ``execute`` alike."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from accelstub.devices.device import MonitorCommand, Stop
from accelstub.devices.runcontrol import RunControl


class CommandError(Exception):
    """A command failed; the message is what OpenOCD would print (and Tcl returns)."""


@dataclass
class CommandContext:
    targets: list[RunControl]  # one per served device; index = OpenOCD target number
    current: int = 0
    log: Callable[[str], None] = print  # LOG_USER output; gdb sends it as O packets
    shutdown: Callable[[], None] | None = None
    cwd: Path = field(default_factory=Path.cwd)  # base of relative file names
    #: stops whose halted message a command has logged (front ends that also print stops
    #: asynchronously skip these); cleared by the front end
    reported_stops: list[Stop] = field(default_factory=list)

    @property
    def target(self) -> RunControl:
        if not self.targets:
            raise CommandError("no target available")
        return self.targets[self.current]


def context_for(source: CommandContext | Callable[..., CommandContext],
                log: Callable[[str], None]) -> CommandContext:
    """A fresh context for one connection, from a CommandContext (copied) or a factory called as
    ``factory(log=log)`` (StubServer.context)."""
    if isinstance(source, CommandContext):
        return dataclasses.replace(source, log=log, reported_stops=[])
    return source(log=log)


Handler = Callable[[CommandContext, list[str]], str]

#: name -> declaration (usage, handler, one-line summary), filled by @command as the command
#: modules of this package are imported
COMMANDS: dict[str, MonitorCommand] = {}


def command(name: str, usage: str, summary: str) -> Callable[[Handler], Handler]:
    """Declare ``name``: its argument grammar as ``help`` and usage errors print it (OpenOCD's
    usage notation), and the line ``help NAME`` adds. A name declared twice is a mistake in the
    package, so it fails at import rather than one declaration silently winning."""

    def register(handler: Handler) -> Handler:
        if name in COMMANDS:
            raise ValueError(f"command {name!r} is declared twice")
        COMMANDS[name] = MonitorCommand(usage, handler, summary)
        return handler

    return register


def usage_error(name: str) -> CommandError:
    """OpenOCD's reply to a bad argument list: ``usage: NAME USAGE`` from the declaration."""
    return CommandError(str(COMMANDS[name].usage_error(name)) if name in COMMANDS
                        else f"usage: {name}")
