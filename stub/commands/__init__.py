"""The one command table shared by gdb ``monitor`` (qRcmd), telnet (4444) and Tcl RPC (6666).

OpenOCD's command names, argument grammar and output formats (the OpenOCD User's Guide, chapter
"General Commands"; OpenOCD's src/target/target.c), mapped onto an accelerator: the "target" is
one emulated engine, its pc identifies the next unit (layer / command / job) and a step runs one
unit.

Words are split the way Tcl splits them (words.py), but nothing is ever evaluated. Each command
is declared once, next to its handler, with ``@command(name, usage, summary)`` (table.py); the
modules hold one concern each: run control (run.py), memory (memory.py), images (images.py),
registers (registers.py), break/watchpoints (points.py), snapshots and history (history.py),
the program, state, memory map and SVD (target.py), machine-readable state (json_state.py), unit
tensors (tensors.py), the per-layer diff (diff.py), the interpreter's own commands (shell.py) and
the dispatcher (dispatch.py). The first use of a name of this package imports them all, which
fills the table; importing the package alone does not, so a run of a program that is not a
command script (`accelstub run`'s demos) never loads the table (~10 ms of a warm run's start,
issue 31 #5), and `from .table import CommandContext` stays cheap.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # at run time the first use of a name imports them (__getattr__ below)
    from . import diff, history, images, memory, points, registers, run, shell, target, tensors
    from .args import parse_address, parse_number
    from .dispatch import execute, table_for
    from .images import MAX_IMAGE_FILE, parse_ihex
    from .json_state import (
        JSON_DATA,
        diff_data,
        reference_data,
        register_data,
        stop_data,
        tensor_data,
        tensor_from_data,
    )
    from .memory import MAX_LISTED, MAX_TRANSFER, md_output, value_list
    from .registers import CORE_CACHE, RegEntry, register_list
    from .run import DEFAULT_WAIT_MS, MAX_WAIT_MS, STEP_TIMEOUT_S, halted_message, next_unit_label
    from .shell import VERSION
    from .table import COMMANDS, CommandContext, CommandError, Handler, command, context_for
    from .target import parse_unit, status_data, unit_at_pc, units_data
    from .tensors import channel_text
    from .words import split_script, split_words

__all__ = [
    "COMMANDS", "CORE_CACHE", "DEFAULT_WAIT_MS", "JSON_DATA", "MAX_IMAGE_FILE", "MAX_LISTED",
    "MAX_TRANSFER", "MAX_WAIT_MS", "STEP_TIMEOUT_S", "VERSION", "CommandContext", "CommandError",
    "Handler", "RegEntry", "channel_text", "command", "context_for", "diff", "diff_data",
    "execute", "halted_message", "history", "images", "md_output", "memory", "next_unit_label",
    "parse_address", "parse_ihex", "parse_number", "parse_unit", "points", "reference_data",
    "register_data", "register_list", "registers", "run", "shell", "split_script",
    "split_words", "status_data", "stop_data", "table_for", "target", "tensor_data",
    "tensor_from_data", "tensors", "unit_at_pc", "units_data", "value_list",
]


def __getattr__(name: str) -> object:
    """Every command module imported (their ``@command`` declarations fill the table) and every
    name of ``__all__`` set from them, once: PEP 562's module ``__getattr__``, called only for
    a name not yet set (so after the first call only for a name the package does not have)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    modules = [importlib.import_module(f"{__name__}.{m.name}")
               for m in pkgutil.iter_modules(__path__)]
    names = globals()  # the submodules are set here by now
    for module in modules:
        names.update({n: v for n, v in vars(module).items() if n in __all__ and n not in names})
    if name not in names:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return names[name]
