"""Argument parsing shared by the commands: numbers and addresses the way OpenOCD reads them,
values fitted to a width, file names relative to the connection's directory, and the halted
check of commands that change the target. Every failure is one CommandError line naming the
command and the word it could not use."""
from __future__ import annotations

from pathlib import Path

from accelstub.devices import TargetRunning
from accelstub.devices.runcontrol import RunControl

from .table import CommandContext, CommandError


def parse_number(cmd: str, what: str, text: str, *, signed: bool = False) -> int:
    """0x-hex or decimal (leading zeros are decimal, not octal). ``signed`` allows '-'."""
    s = text.strip()
    neg = False
    if signed and s.startswith("-"):
        neg, s = True, s[1:]
    try:
        if s[:2] in ("0x", "0X"):
            if not s[2:] or not all(ch in "0123456789abcdefABCDEF" for ch in s[2:]):
                raise ValueError
            v = int(s[2:], 16)
        elif s and s.isascii() and s.isdigit():
            v = int(s, 10)
        else:
            raise ValueError
    except ValueError:
        raise CommandError(f"{cmd}: invalid {what} '{text}'") from None
    return -v if neg else v


def parse_address(cmd: str, text: str) -> int:
    a = parse_number(cmd, "address", text)
    if a >= 1 << 32:
        raise CommandError(f"{cmd}: invalid address '{text}' (beyond the 32-bit address space)")
    return a


def fit(cmd: str, value: int, bits: int) -> int:
    if value < 0:
        if value < -(1 << (bits - 1)):
            raise CommandError(f"{cmd}: value {value} does not fit in {bits} bits")
        return value & ((1 << bits) - 1)
    if value >= 1 << bits:
        raise CommandError(f"{cmd}: value {value:#x} does not fit in {bits} bits")
    return value


def resolve(ctx: CommandContext, name: str) -> Path:
    p = Path(name).expanduser()
    return p if p.is_absolute() else ctx.cwd / p


def check_halted(rc: RunControl, what: str) -> None:
    try:
        rc.require_halted(what)
    except TargetRunning as e:
        raise CommandError(str(e)) from None
