"""The command table's declarations (issue 33 #3): every command declares its usage and help
once, next to its handler (stub/commands/table.py ``@command``), and ``help``, ``help NAME`` and
the usage errors all print that one declaration, for every device's table."""
from __future__ import annotations

import threading

import pytest

from accelstub.devices import DEVICES, open_device
from accelstub.devices.device import MonitorCommand
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.commands import (
    COMMANDS,
    CommandContext,
    CommandError,
    command,
    execute,
    split_script,
    split_words,
)

#: commands that take any words (echo prints them, help names one, init ignores them) or
#: refuse for another reason than their words (shutdown, tcl): no usage error for extra words
ANY_WORDS = {"echo", "help", "init", "shutdown", "tcl", "version"}


def context(device: str = "max78000") -> CommandContext:
    return CommandContext([RunControl(open_device(device))], log=lambda s: None)


def test_every_command_declares_a_summary_and_help_prints_its_declaration():
    ctx = context()
    assert len(COMMANDS) >= 45  # the OpenOCD set plus the accelerator commands
    for name, c in COMMANDS.items():
        assert c.summary.strip() and c.summary == c.summary.strip(), name
        assert c.usage == c.usage.strip() and "\n" not in c.usage, name
        assert execute(ctx, f"help {name}") == f"{name} {c.usage}".rstrip() + f"\n      {c.summary}"


@pytest.mark.parametrize("device", DEVICES)
def test_help_lists_each_command_once_with_its_declared_usage(device):
    ctx = context(device)
    own = ctx.target.device.monitor_commands()
    table = COMMANDS | own  # a device's command takes the name where both declare it
    lines = execute(ctx, "help").split("\n")
    names = [line.split(" ")[0] for line in lines]
    assert len(names) == len(set(names))
    assert names == sorted(table)
    assert lines == [f"{n} {table[n].usage}".rstrip() for n in names]


def test_help_lists_a_device_command_that_shares_a_name_once():
    ctx = context()
    ctx.target.device.monitor_commands = lambda: {
        "units": MonitorCommand("[layer]", lambda c, args: "the device's units", "its own")}
    lines = execute(ctx, "help").split("\n")
    assert [line for line in lines if line.split(" ")[0] == "units"] == ["units [layer]"]
    assert execute(ctx, "units") == "the device's units"


def test_extra_words_give_the_declared_usage():
    """Every command with a fixed grammar answers surplus words with ``usage: NAME USAGE`` made
    from its declaration (OpenOCD's reply), without running anything."""
    ctx = context()
    checked = 0
    for name, c in sorted(COMMANDS.items()):
        if name in ANY_WORDS:
            continue
        with pytest.raises(CommandError) as e:
            execute(ctx, f"{name} 1 2 3 4 5 6 7")
        assert str(e.value) == f"usage: {name} {c.usage}".rstrip(), name
        checked += 1
    assert checked == len(COMMANDS) - len(ANY_WORDS)
    assert ctx.target.device.pc == context().target.device.pc  # nothing ran


def test_a_name_declared_twice_is_refused():
    before = dict(COMMANDS)
    with pytest.raises(ValueError, match="'reset' is declared twice"):
        command("reset", "", "another reset")(lambda ctx, args: "")
    assert COMMANDS == before


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("words", ["1 2 3 4 5 6 7", "frob"])
def test_device_commands_answer_a_bad_argument_list_with_their_declared_usage(device, words):
    """A device's own commands (Device.monitor_commands: npu, cnn, mlat, layers, ne16, nvdla)
    answer words that fit none of their forms as the stub's do: ``usage: NAME USAGE`` from the
    usage they declare (Device.usage_error), with no ``NAME: `` before it and nothing run."""
    ctx = context(device)
    own = ctx.target.device.monitor_commands()
    assert own  # every device adds commands of its own
    for name, c in own.items():
        with pytest.raises(CommandError) as e:
            execute(ctx, f"{name} {words}")
        assert str(e.value) == f"usage: {name} {c.usage}".rstrip(), name
    assert ctx.target.device.pc == context(device).target.device.pc  # nothing ran


def test_a_device_error_names_its_command_once():
    """A device's message that already starts with its command (``nvdla csb: ...``) is not
    prefixed again; one that does not gets ``NAME: `` before it."""
    ctx = context("nvdla")
    with pytest.raises(CommandError) as e:
        execute(ctx, "nvdla csb 0x7fffffff")
    assert str(e.value).startswith("nvdla csb: no register at CSB word"), str(e.value)
    ctx = context("max78000")
    with pytest.raises(CommandError) as e:
        execute(ctx, "mlat 0 1")
    assert str(e.value).startswith("mlat: the Mlator of quadrant 0 is not loaded"), str(e.value)


def test_halt_and_wait_halt_share_the_wait_their_timeout_and_their_report():
    """``halt`` is a request plus ``wait_halt``'s wait (stub/commands/run.py _wait_and_report):
    a target that stays running times both out with OpenOCD's message, ``halt 0`` only asks,
    and a halt that arrives in time reports the stop once. The run is simulated by holding the
    run control's idle event clear (no worker thread), so no timing race decides the result."""
    logs: list[str] = []
    rc = RunControl(open_device("max78000"))
    ctx = CommandContext([rc], log=logs.append)
    rc._idle.clear()  # "running" with no worker: nothing will halt it
    try:
        for line in ("wait_halt 20", "halt 20"):
            with pytest.raises(CommandError) as e:
                execute(ctx, line)
            assert str(e.value) == "timed out while waiting for target halted", line
        assert execute(ctx, "halt 0") == "" and logs == [] and ctx.reported_stops == []
        threading.Timer(0.05, rc._idle.set).start()  # the worker stops a moment later
        assert execute(ctx, "halt 5000") == ""
        assert ctx.reported_stops == [rc.last_stop]
        assert logs == ["[max78000.cnn] halted due to " + rc.last_stop.debug_reason
                        + ", layer: none\npc: 0x%08x" % rc.device.pc]
    finally:
        rc._idle.set()
        rc._halt.clear()


def test_words_end_at_a_closing_quote_or_brace_and_braces_keep_their_backslashes():
    """Tcl's word rules (the Tcl manual, "Tcl" rules 4-6 and 9): a word that starts with a quote
    or a brace ends at its close, and anything but a separator right after it is an error; in
    braces backslashes stay as written, except backslash-newline and the blanks after it, which
    become one space."""
    assert split_script('a "b c";d {e}\nf') == [["a", "b c"], ["d", "e"], ["f"]]
    assert split_words("x {a\\n\\\n   b}") == ["x", "a\\n b"]
    assert split_words('x "a\\\n   b"') == ["x", "a b"]
    for line, closer in (('x "a"b', "quote"), ("x {a}b", "brace"), ("x {a}{b}", "brace")):
        with pytest.raises(CommandError) as e:
            split_words(line)
        assert str(e.value) == f"extra characters after close-{closer}", line
