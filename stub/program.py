"""Loading the program a user brings.

A device may import its own artifacts (``Device.load_program``: ai8x-synthesis directories, Vela
output, ...); their errors (ValueError / OSError, messages naming file and line) become
ProgramError. Every device also accepts a *command script*: a text file of the OpenOCD memory
commands (``mww``, ``mwh``, ``mwb``, ``write_memory``, ``load_image``, ``reset``), one per line,
``#`` comments — the form a register-level bring-up script takes. Errors name file and line.
"""
from __future__ import annotations

from pathlib import Path

from .commands import CommandContext, CommandError, execute

SCRIPT_COMMANDS = {"mww", "mwh", "mwb", "write_memory", "load_image", "reset", "reg"}


class ProgramError(Exception):
    pass


def load_program(ctx: CommandContext, path: str | Path) -> str:
    """Load ``path`` into the current target; returns a one-line summary."""
    path = Path(path)
    device = ctx.target.device
    if not path.exists():
        raise ProgramError(f"{path}: no such file or directory")
    loader = getattr(device, "load_program", None)
    if loader is not None and path.suffix not in (".cfg", ".ocd", ".txt"):
        try:
            return loader(path)
        except (ValueError, OSError) as e:  # importer errors name file and line
            raise ProgramError(str(e)) from None
    if path.is_dir():
        raise ProgramError(f"{path}: is a directory, and {device.name} has no program importer "
                           "(give a command script)")
    return run_script(ctx, path)


def run_script(ctx: CommandContext, path: Path) -> str:
    n = 0
    script_ctx = CommandContext(targets=ctx.targets, current=ctx.current, log=lambda s: None,
                                shutdown=None, cwd=path.parent)
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
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
