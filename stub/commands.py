"""The one command table shared by gdb ``monitor`` (qRcmd), telnet (4444) and Tcl RPC (6666).

OpenOCD's command names, argument grammar and output formats (shared/reference/gdb-stub-anchors.md
§3, OpenOCD src/target/target.c), mapped onto an accelerator: the "target" is one emulated engine,
its pc identifies the next unit (layer / command / job) and a step runs one unit.

Words are split the way Tcl splits them ("quoted", {braced}, backslash escapes, ``;`` between
commands), but nothing is ever evaluated: ``[command substitution]`` and ``$variables`` are
rejected with an error, and no command runs Python or shell text.
"""
from __future__ import annotations

import dataclasses
import re
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from accelstub.devices import BusError, DeviceError, TargetRunning
from accelstub.devices.device import CORE_REGS, Device, Stop
from accelstub.devices.layer_diff import ReferenceFileError, differ_of, start_diff, unit_spec
from accelstub.devices.runcontrol import RunControl
from accelstub.devices.tensors import TensorSpec, read_tensor

from .files import FileRefused, read_bounded, write_regular
from .target_xml import FIRST_DEVICE_REGNUM, register_table

try:  # pragma: no cover - depends on the install
    from importlib.metadata import version as _dist_version

    VERSION = _dist_version("accelstub")
except Exception:  # pragma: no cover
    VERSION = "0.1.0"

#: register cache name of the virtual host core (``reg`` listing header)
CORE_CACHE = "accelstub host core"
#: default wait of halt / wait_halt, as OpenOCD (5 s)
DEFAULT_WAIT_MS = 5000
#: longest wait halt/wait_halt take (OpenOCD's int; a fuzzed 10**20 raised OverflowError)
MAX_WAIT_MS = (1 << 31) - 1
#: longest a step may take before the command gives up waiting (the unit keeps running)
STEP_TIMEOUT_S = 300.0
#: largest md*/read_memory/dump_image transfer one command may ask for
MAX_TRANSFER = 64 << 20
#: most values one md*/read_memory/host md* lists: their text is 3-5 bytes per byte of memory
#: (read_memory 8 33554432 made a 134 MB reply and peaked at 2.5 GB); dump_image writes more
MAX_LISTED = 1 << 20
#: largest image file load_image/verify_image read (a bin image also at most what fits in the
#: populated memory from its address on)
MAX_IMAGE_FILE = MAX_TRANSFER


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
    reported_stops: list = field(default_factory=list)

    @property
    def target(self) -> RunControl:
        if not self.targets:
            raise CommandError("no target available")
        return self.targets[self.current]


def context_for(source, log: Callable[[str], None]) -> CommandContext:
    """A fresh context for one connection, from a CommandContext (copied) or a factory called as
    ``factory(log=log)`` (StubServer.context)."""
    if isinstance(source, CommandContext):
        return dataclasses.replace(source, log=log, reported_stops=[])
    return source(log=log)


# ------------------------------------------------------------------------------------------------
# Tcl-like word splitting (no evaluation)

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


def _backslash(s: str, i: int) -> tuple[str, int]:
    """Decode the escape starting at s[i] == '\\'; returns (text, next index)."""
    if i + 1 >= len(s):
        return "\\", i + 1
    c = s[i + 1]
    if c in _ESCAPES:
        return _ESCAPES[c], i + 2
    if c == "\n":  # backslash-newline: one space
        j = i + 2
        while j < len(s) and s[j] in " \t":
            j += 1
        return " ", j
    if c == "x":
        j = i + 2
        while j < len(s) and j < i + 4 and s[j] in "0123456789abcdefABCDEF":
            j += 1
        if j > i + 2:
            return chr(int(s[i + 2:j], 16)), j
        return "x", i + 2
    return c, i + 2


def split_script(text: str) -> list[list[str]]:
    """Split ``text`` into commands (newline or ``;``) of words, Tcl style, without evaluating.

    Raises CommandError for ``[...]`` command substitution, ``$var`` substitution, unbalanced
    quotes or braces and characters after a closing quote or brace."""
    commands: list[list[str]] = []
    words: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r":
            i += 1
            continue
        if c == "\\" and i + 1 < n and text[i + 1] == "\n":
            i += 2
            continue
        if c in "\n;":
            if words:
                commands.append(words)
                words = []
            i += 1
            continue
        if c == "#" and not words:  # comment to end of line
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c == "{":
            depth, j, buf = 1, i + 1, []
            while j < n:
                ch = text[j]
                if ch == "\\" and j + 1 < n:
                    if text[j + 1] == "\n":
                        buf.append(" ")
                        j += 2
                        while j < n and text[j] in " \t":
                            j += 1
                        continue
                    buf.append(text[j:j + 2])
                    j += 2
                    continue
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                    if depth == 0:
                        break
                buf.append(ch)
                j += 1
            if depth:
                raise CommandError("missing close-brace")
            j += 1
            if j < n and text[j] not in " \t\r\n;":
                raise CommandError("extra characters after close-brace")
            words.append("".join(buf))
            i = j
            continue
        if c == '"':
            j, buf = i + 1, []
            while j < n and text[j] != '"':
                ch = text[j]
                if ch == "\\":
                    piece, j = _backslash(text, j)
                    buf.append(piece)
                    continue
                _check_substitution(text, j)
                buf.append(ch)
                j += 1
            if j >= n:
                raise CommandError('missing "')
            j += 1
            if j < n and text[j] not in " \t\r\n;":
                raise CommandError("extra characters after close-quote")
            words.append("".join(buf))
            i = j
            continue
        # bare word
        j, buf = i, []
        while j < n and text[j] not in " \t\r\n;":
            ch = text[j]
            if ch == "\\":
                if j + 1 < n and text[j + 1] == "\n":
                    break
                piece, j = _backslash(text, j)
                buf.append(piece)
                continue
            _check_substitution(text, j)
            buf.append(ch)
            j += 1
        words.append("".join(buf))
        i = j
    if words:
        commands.append(words)
    return commands


def _check_substitution(text: str, j: int) -> None:
    ch = text[j]
    if ch == "[":
        raise CommandError("command substitution [...] is not supported (nothing is evaluated)")
    if ch == "$" and j + 1 < len(text) and (text[j + 1].isalnum() or text[j + 1] in "_{:"):
        raise CommandError("variable substitution ($...) is not supported (nothing is evaluated)")


def split_words(line: str) -> list[str]:
    """The words of one command (Tcl rules, no evaluation)."""
    cmds = split_script(line)
    if not cmds:
        return []
    if len(cmds) > 1:
        raise CommandError("one command expected (';' or a newline separates commands)")
    return cmds[0]


# ------------------------------------------------------------------------------------------------
# argument parsing helpers


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


def _fit(cmd: str, value: int, bits: int) -> int:
    if value < 0:
        if value < -(1 << (bits - 1)):
            raise CommandError(f"{cmd}: value {value} does not fit in {bits} bits")
        return value & ((1 << bits) - 1)
    if value >= 1 << bits:
        raise CommandError(f"{cmd}: value {value:#x} does not fit in {bits} bits")
    return value


def _resolve(ctx: CommandContext, name: str) -> Path:
    p = Path(name).expanduser()
    return p if p.is_absolute() else ctx.cwd / p


def _usage(name: str) -> CommandError:
    usage = _COMMANDS[name][0] if name in _COMMANDS else ""
    return CommandError(f"usage: {name} {usage}".rstrip())


def _mem_read(cmd: str, rc: RunControl, addr: int, size: int) -> bytes:
    if size > MAX_TRANSFER:
        raise CommandError(f"{cmd}: {size} bytes is too much for one command "
                           f"(at most {MAX_TRANSFER})")
    try:
        return rc.device.read(addr, size)
    except BusError as e:
        raise CommandError(f"{cmd}: cannot read memory: {e}") from None


def _mem_write(cmd: str, rc: RunControl, addr: int, data: bytes) -> None:
    try:
        with rc.halted_access(cmd):
            rc.device.write(addr, data)
    except TargetRunning as e:
        raise CommandError(str(e)) from None
    except BusError as e:
        raise CommandError(f"{cmd}: cannot write memory: {e}") from None
    except DeviceError as e:
        raise CommandError(f"{cmd}: {e}") from None


def _halted(rc: RunControl, what: str) -> None:
    try:
        rc.require_halted(what)
    except TargetRunning as e:
        raise CommandError(str(e)) from None


def _elapsed(t0: float) -> float:
    return max(time.perf_counter() - t0, 1e-6)  # never divide by zero in the KiB/s figure


def _rate(n: int, t: float) -> str:
    return f"in {t:f}s ({n / 1024.0 / t:0.3f} KiB/s)"


# ------------------------------------------------------------------------------------------------
# halted message and state


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


def _report_stop(ctx: CommandContext, rc: RunControl, stop: Stop) -> None:
    ctx.reported_stops.append(stop)
    ctx.log(halted_message(rc, stop))


def _wait_ms(cmd: str, args: list[str]) -> float | None:
    if len(args) > 1:
        raise _usage(cmd)
    ms = parse_number(cmd, "timeout", args[0]) if args else DEFAULT_WAIT_MS
    if ms > MAX_WAIT_MS:  # OpenOCD parses an int; Python's wait overflows past time_t
        raise CommandError(f"{cmd}: timeout {ms} out of range (at most {MAX_WAIT_MS} ms)")
    return ms / 1000.0


# ------------------------------------------------------------------------------------------------
# commands: run control


def cmd_reset(ctx: CommandContext, args: list[str]) -> str:
    if len(args) > 1 or (args and args[0] not in ("run", "halt", "init")):
        raise _usage("reset")
    kind = args[0] if args else "run"
    rc = ctx.target
    try:
        rc.reset(kind)
    except DeviceError as e:
        raise CommandError(f"reset: {e}") from None
    if kind in ("halt", "init"):
        _report_stop(ctx, rc, rc.last_stop)
    return ""


def cmd_halt(ctx: CommandContext, args: list[str]) -> str:
    timeout = _wait_ms("halt", args)
    rc = ctx.target
    if not rc.running:
        return ""
    rc.halt()
    if timeout == 0:
        return ""
    stop = rc.wait(timeout)
    if stop is None:
        raise CommandError("timed out while waiting for target halted")
    _report_stop(ctx, rc, stop)
    return ""


def cmd_wait_halt(ctx: CommandContext, args: list[str]) -> str:
    timeout = _wait_ms("wait_halt", args)
    rc = ctx.target
    if not rc.running:
        return ""
    stop = rc.wait(timeout)
    if stop is None:
        raise CommandError("timed out while waiting for target halted")
    _report_stop(ctx, rc, stop)
    return ""


def _set_pc(ctx: CommandContext, cmd: str, text: str) -> None:
    addr = parse_address(cmd, text)
    try:
        ctx.target.device.write_core("pc", addr)
    except DeviceError as e:
        raise CommandError(f"{cmd}: {e}") from None


def cmd_resume(ctx: CommandContext, args: list[str]) -> str:
    if len(args) > 1:
        raise _usage("resume")
    rc = ctx.target
    _halted(rc, "resume")
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


def cmd_step(ctx: CommandContext, args: list[str]) -> str:
    """``step [address]`` runs one unit (OpenOCD's form); ``step GRANULARITY`` one part of it,
    for devices with finer granularities (Device.granularities, e.g. ne16's subtile)."""
    if len(args) > 1:
        raise _usage("step")
    rc = ctx.target
    _halted(rc, "step")
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
    _report_stop(ctx, rc, stop)
    return ""


def cmd_poll(ctx: CommandContext, args: list[str]) -> str:
    if args:
        if len(args) != 1 or args[0] not in ("on", "off", "enable", "disable", "1", "0"):
            raise _usage("poll")
        return ""  # background polling is always on: the stub pushes stops
    rc = ctx.target
    if rc.running:
        return "target state: running"
    return f"target halted due to {rc.last_stop.debug_reason}, pc: 0x{rc.device.pc:08x}"


def cmd_targets(ctx: CommandContext, args: list[str]) -> str:
    if len(args) > 1:
        raise _usage("targets")
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


# ------------------------------------------------------------------------------------------------
# commands: memory

_WIDTH = {"d": 8, "w": 4, "h": 2, "b": 1}


_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def _hex_digits(values: np.ndarray, size: int) -> np.ndarray:
    """ASCII hex digits, most significant first, of little-endian values: ``values`` is an
    (n, size) uint8 array; the result is (n, 2*size). Listings are built as byte arrays this
    way because a Python string per value cost ~70 bytes of memory for each byte listed."""
    be = values[:, ::-1]  # most significant byte first
    out = np.empty((len(values), 2 * size), dtype=np.uint8)
    out[:, 0::2] = _HEX_DIGITS[be >> 4]
    out[:, 1::2] = _HEX_DIGITS[be & 15]
    return out


def _md_lines(address: int, size: int, values: np.ndarray) -> np.ndarray:
    """md lines of whole (n, size) values, each line as bytes ending in a newline."""
    per_line = 32 // size
    nlines = -(-len(values) // per_line)
    starts = (address + 32 * np.arange(nlines, dtype=np.uint64)).astype(">u4")
    addr_hex = _hex_digits(starts.view(np.uint8).reshape(nlines, 4)[:, ::-1], 4)
    cell = 2 * size + 1
    line = np.full((nlines, 12 + per_line * cell + 1), ord(" "), dtype=np.uint8)
    line[:, 0:2] = np.frombuffer(b"0x", np.uint8)
    line[:, 2:10] = addr_hex
    line[:, 10] = ord(":")
    cells = np.full((nlines * per_line, cell), ord(" "), dtype=np.uint8)
    cells[:len(values), :2 * size] = _hex_digits(values, size)
    line[:, 12:12 + per_line * cell] = cells.reshape(nlines, per_line * cell)
    line[:, -1] = ord("\n")
    if len(values) % per_line:  # a short last line ends after its last value
        keep = 12 + (len(values) % per_line) * cell
        return np.concatenate([line[:-1].ravel(), line[-1, :keep], line[-1, -1:]])
    return line.ravel()


def md_output(address: int, size: int, data: bytes) -> str:
    """OpenOCD's target_handle_md_output: 32 bytes per line, every value followed by a space."""
    count = len(data) // size
    if not count:
        return ""
    values = np.frombuffer(data, dtype=np.uint8, count=count * size).reshape(count, size)
    return _md_lines(address, size, values)[:-1].tobytes().decode("ascii")


def value_list(data: bytes, size: int) -> str:
    """read_memory's Tcl list: ``0x%x`` per little-endian value (no leading zeros), one space
    between, built in numpy (a few bytes of memory per byte of the reply)."""
    count = len(data) // size
    if not count:
        return ""
    values = np.frombuffer(data, dtype=np.uint8, count=count * size).reshape(count, size)
    width = 2 * size
    cells = np.empty((count, width + 3), dtype=np.uint8)
    cells[:, 0:2] = np.frombuffer(b"0x", np.uint8)
    cells[:, 2:2 + width] = _hex_digits(values, size)
    cells[:, -1] = ord(" ")
    # the first significant digit of each value (the last one for 0): digits before it go
    first = np.argmax(cells[:, 2:2 + width] != ord("0"), axis=1)
    first[(cells[:, 2:2 + width] == ord("0")).all(axis=1)] = width - 1
    keep = np.ones(cells.shape, dtype=bool)
    keep[:, 2:2 + width] = np.arange(width) >= first[:, None]
    text = cells[keep][:-1]
    del cells, keep  # the reply is the only thing as large as itself that stays
    return text.tobytes().decode("ascii")


def _listed(cmd: str, count: int) -> None:
    """Refuse a listing of more than MAX_LISTED values before reading anything."""
    if count > MAX_LISTED:
        raise CommandError(f"{cmd}: {count} values are too many for one command (at most "
                           f"{MAX_LISTED}; dump_image writes memory to a file)")


def _phys(args: list[str]) -> list[str]:
    return args[1:] if args and args[0] == "phys" else args


def _md(name: str) -> Callable[[CommandContext, list[str]], str]:
    size = _WIDTH[name[2]]

    def handler(ctx: CommandContext, args: list[str]) -> str:
        args = _phys(args)
        if not 1 <= len(args) <= 2:
            raise _usage(name)
        addr = parse_address(name, args[0])
        count = parse_number(name, "count", args[1]) if len(args) == 2 else 1
        _listed(name, count)
        data = _mem_read(name, ctx.target, addr, count * size)
        return md_output(addr, size, data)

    return handler


def cmd_host(ctx: CommandContext, args: list[str]) -> str:
    """``host mdw ADDR [COUNT]``: Device.host_read, the read a driver's load instruction makes;
    a change of the device, so the target must be halted."""
    if not args or args[0] not in ("mdw", "mdh", "mdb") or not 2 <= len(args) <= 3:
        raise _usage("host")
    name, rc = args[0], ctx.target
    size = _WIDTH[name[2]]
    addr = parse_address("host", args[1])
    count = parse_number("host", "count", args[2]) if len(args) == 3 else 1
    _listed("host", count)
    try:
        with rc.halted_access(f"host {name}"):
            data = rc.device.host_read(addr, count * size)
    except BusError as e:
        raise CommandError(f"host: cannot read memory: {e}") from None
    return md_output(addr, size, data)


def _mw(name: str) -> Callable[[CommandContext, list[str]], str]:
    size = _WIDTH[name[2]]

    def handler(ctx: CommandContext, args: list[str]) -> str:
        args = _phys(args)
        if not 2 <= len(args) <= 3:
            raise _usage(name)
        addr = parse_address(name, args[0])
        value = _fit(name, parse_number(name, "value", args[1], signed=True), size * 8)
        count = parse_number(name, "count", args[2]) if len(args) == 3 else 1
        if count * size > MAX_TRANSFER:
            raise CommandError(f"{name}: count {count} is too large")
        if count:
            _mem_write(name, ctx.target, addr, value.to_bytes(size, "little") * count)
        return ""

    return handler


def _width(cmd: str, text: str) -> int:
    w = parse_number(cmd, "width", text)
    if w not in (8, 16, 32, 64):
        raise CommandError(f"{cmd}: invalid width '{text}' (must be one of: 8, 16, 32 or 64)")
    return w // 8


def cmd_read_memory(ctx: CommandContext, args: list[str]) -> str:
    if len(args) == 4 and args[3] == "phys":
        args = args[:3]
    if len(args) != 3:
        raise _usage("read_memory")
    addr = parse_address("read_memory", args[0])
    size = _width("read_memory", args[1])
    count = parse_number("read_memory", "count", args[2])
    _listed("read_memory", count)
    data = _mem_read("read_memory", ctx.target, addr, count * size)
    return value_list(data, size)


def cmd_write_memory(ctx: CommandContext, args: list[str]) -> str:
    if len(args) == 4 and args[3] == "phys":
        args = args[:3]
    if len(args) != 3:
        raise _usage("write_memory")
    addr = parse_address("write_memory", args[0])
    size = _width("write_memory", args[1])
    values = split_words(args[2]) if args[2].strip() else []
    data = b"".join(_fit("write_memory", parse_number("write_memory", "value", v, signed=True),
                         size * 8).to_bytes(size, "little") for v in values)
    if data:
        _mem_write("write_memory", ctx.target, addr, data)
    return ""


# -- images --------------------------------------------------------------------------------------


def parse_ihex(text: str, name: str = "image") -> list[tuple[int, bytes]]:
    """Intel hex (types 00-05) into sections [(address, data)], contiguous records merged."""
    base = 0
    sections: list[tuple[int, bytearray]] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        where = f"{name}:{lineno}"
        if not line.startswith(":"):
            raise CommandError(f"{where}: not an Intel hex record")
        try:
            rec = bytes.fromhex(line[1:])
        except ValueError:
            raise CommandError(f"{where}: bad hex digits") from None
        if len(rec) < 5 or len(rec) != rec[0] + 5:
            raise CommandError(f"{where}: bad record length")
        if sum(rec) & 0xFF:
            raise CommandError(f"{where}: checksum mismatch")
        n, off, kind, data = rec[0], int.from_bytes(rec[1:3], "big"), rec[3], rec[4:4 + rec[0]]
        if kind == 0:
            addr = base + off
            if sections and sections[-1][0] + len(sections[-1][1]) == addr:
                sections[-1][1].extend(data)
            else:
                sections.append((addr, bytearray(data)))
        elif kind == 1:
            break
        elif kind == 2 and n == 2:
            base = int.from_bytes(data, "big") << 4
        elif kind == 4 and n == 2:
            base = int.from_bytes(data, "big") << 16
        elif kind in (3, 5):
            pass  # start address: nothing to start on an accelerator
        else:
            raise CommandError(f"{where}: unsupported record type {kind:02x}")
    return [(a, bytes(d)) for a, d in sections]


def _room(rc: RunControl, addr: int) -> tuple[int, str]:
    """Bytes of populated memory from ``addr`` on without a hole (adjacent ranges joined), and
    where that is: the most a binary image at ``addr`` can hold, so load_image reads no more."""
    ranges = sorted((s, e, r.name) for r in rc.device.description.regions
                    for s, e in r.populated)
    end, names = addr, []
    for s, e, name in ranges:
        if s <= end < e:
            end = e
            if name not in names:
                names.append(name)
    if end == addr:
        return 0, f"nothing fits at 0x{addr:08x} (not populated memory of {rc.device.name})"
    return end - addr, f"{end - addr} bytes fit in memory from 0x{addr:08x} ({', '.join(names)})"


def _open_image(ctx: CommandContext, cmd: str,
                args: list[str]) -> tuple[Path, list[tuple[int, bytes]]]:
    if not 1 <= len(args) <= 3:
        raise _usage(cmd)
    path = _resolve(ctx, args[0])
    offset = parse_address(cmd, args[1]) if len(args) >= 2 else 0
    fmt = args[2].lower() if len(args) == 3 else None
    if fmt not in (None, "bin", "ihex"):
        raise CommandError(f"{cmd}: image format '{args[2]}' is not supported (use bin or ihex)")
    limit, limit_text = MAX_IMAGE_FILE, f"{MAX_IMAGE_FILE} bytes per image file"
    if fmt == "bin":
        room, where = _room(ctx.target, offset)
        if room < limit:
            limit, limit_text = room, where
    try:
        raw = read_bounded(path, limit, limit_text, name=args[0])
    except FileRefused as e:
        raise CommandError(f"{cmd}: {e}") from None
    except OSError as e:
        raise CommandError(f"{cmd}: couldn't open {args[0]}: {e.strerror or e}") from None
    if fmt is None:
        if raw[:4] == b"\x7fELF":
            raise CommandError(f"{cmd}: {args[0]} is an ELF file; give a bin or ihex image")
        fmt = "ihex" if raw[:1] == b":" and _looks_ihex(raw) else "bin"
        room, where = _room(ctx.target, offset)
        if fmt == "bin" and len(raw) > room:
            raise CommandError(f"{cmd}: {args[0]} is {len(raw)} bytes; at most {where}")
    if fmt == "bin":
        sections = [(offset, raw)]
    else:
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            raise CommandError(f"{cmd}: {args[0]} is not an Intel hex file") from None
        sections = [(a + offset, d) for a, d in parse_ihex(text, args[0])]
    for a, d in sections:
        if a + len(d) > 1 << 32:
            raise CommandError(f"{cmd}: section at {a:#x} runs past the 32-bit address space")
    return path, sections


def _looks_ihex(raw: bytes) -> bool:
    try:
        first = raw.decode("ascii").splitlines()[0].strip()
        bytes.fromhex(first[1:])
        return True
    except (UnicodeDecodeError, ValueError, IndexError):
        return False


def cmd_load_image(ctx: CommandContext, args: list[str]) -> str:
    rc = ctx.target
    _halted(rc, "load_image")
    t0 = time.perf_counter()
    _, sections = _open_image(ctx, "load_image", args)
    lines, total = [], 0
    for a, d in sections:
        _mem_write("load_image", rc, a, d)
        total += len(d)
        lines.append("%u bytes written at address 0x%08x" % (len(d), a))
    t = _elapsed(t0)
    lines.append(f"downloaded {total} bytes {_rate(total, t)}")
    return "\n".join(lines)


def cmd_dump_image(ctx: CommandContext, args: list[str]) -> str:
    if len(args) != 3:
        raise _usage("dump_image")
    path = _resolve(ctx, args[0])
    addr = parse_address("dump_image", args[1])
    size = parse_number("dump_image", "size", args[2])
    t0 = time.perf_counter()
    data = _mem_read("dump_image", ctx.target, addr, size)
    try:
        write_regular(path, data, name=args[0])
    except FileRefused as e:
        raise CommandError(f"dump_image: {e}") from None
    except OSError as e:
        raise CommandError(f"dump_image: couldn't write {args[0]}: {e.strerror or e}") from None
    t = _elapsed(t0)
    return f"dumped {len(data)} bytes {_rate(len(data), t)}"


def cmd_verify_image(ctx: CommandContext, args: list[str]) -> str:
    t0 = time.perf_counter()
    _, sections = _open_image(ctx, "verify_image", args)
    rc = ctx.target
    diffs: list[str] = []
    first = None
    ndiff = 0
    total = 0
    for a, d in sections:
        mem = _mem_read("verify_image", rc, a, len(d))
        total += len(d)
        if mem == d:
            continue
        differ = np.flatnonzero(np.frombuffer(mem, np.uint8) != np.frombuffer(d, np.uint8))
        for i in differ[:max(0, 128 - ndiff)].tolist():
            diffs.append("diff %d address 0x%08x. Was 0x%02x instead of 0x%02x"
                         % (len(diffs), a + i, mem[i], d[i]))
        if first is None:
            i = int(differ[0])
            first = (a + i, d[i], mem[i])
        ndiff += len(differ)
    if first is not None:
        if ndiff > 128:
            diffs.append("More than 128 errors, the rest are not printed.")
        addr, want, got = first
        diffs.append(f"verify_image: {ndiff} byte(s) differ; first at 0x{addr:08x}: "
                     f"expected 0x{want:02x}, got 0x{got:02x}")
        raise CommandError("\n".join(diffs))
    t = _elapsed(t0)
    return f"verified {total} bytes {_rate(total, t)}"


# ------------------------------------------------------------------------------------------------
# commands: registers


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
        raise _usage("reg")
    e = _find_reg(rc, entries, args[0])
    if len(args) == 2 and args[1] != "force":
        value = _fit("reg", parse_number("reg", "value", args[1], signed=True), e.bits)
        try:
            with rc.halted_access("reg write"):
                if e.core:
                    rc.device.write_core(e.name, value)
                else:
                    rc.device.write_register(e.name, value)
        except TargetRunning as err:
            raise CommandError(str(err)) from None
        except BusError as err:
            raise CommandError(f"reg: cannot write {e.name}: {err}") from None
        except DeviceError as err:
            raise CommandError(f"reg: {err}") from None
    return "%s (/%i): 0x%s" % (e.name, e.bits, _hex(_reg_value(rc, e), e.bits))


def cmd_get_reg(ctx: CommandContext, args: list[str]) -> str:
    args = [a for a in args if a != "-force"]
    if len(args) != 1:
        raise _usage("get_reg")
    rc = ctx.target
    entries = register_list(rc)
    out = []
    for name in split_words(args[0]):
        e = _find_reg(rc, entries, name)
        out += [name, "0x" + _hex(_reg_value(rc, e), e.bits)]
    return " ".join(out)


def cmd_set_reg(ctx: CommandContext, args: list[str]) -> str:
    if len(args) != 1:
        raise _usage("set_reg")
    words = split_words(args[0])
    if len(words) % 2:
        raise CommandError("set_reg: expected a dict of register names and values")
    for name, value in zip(words[::2], words[1::2]):
        cmd_reg(ctx, [name, value])
    return ""


# ------------------------------------------------------------------------------------------------
# commands: breakpoints and watchpoints

#: lengths given to `bp` per RunControl (RunControl keeps only addresses)
_BP_LEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_WP_KIND = {"r": 0, "w": 1, "a": 2}


def cmd_bp(ctx: CommandContext, args: list[str]) -> str:
    rc = ctx.target
    lengths = _BP_LEN.setdefault(rc, {})
    if not args:
        return "\n".join("Breakpoint(IVA): 0x%08x, 0x%x, 1" % (a, lengths.get(a, 4))
                         for a in sorted(rc.breakpoints))
    if len(args) not in (2, 3) or (len(args) == 3 and args[2] != "hw"):
        raise _usage("bp")
    addr = parse_address("bp", args[0])
    length = parse_number("bp", "length", args[1])
    rc.add_breakpoint(addr)
    lengths[addr] = length
    return "breakpoint set at 0x%08x" % addr


def cmd_rbp(ctx: CommandContext, args: list[str]) -> str:
    if len(args) != 1:
        raise _usage("rbp")
    rc = ctx.target
    if args[0] == "all":
        rc.clear_breakpoints()
        _BP_LEN.pop(rc, None)
        return ""
    addr = parse_address("rbp", args[0])
    if not rc.remove_breakpoint(addr):
        raise CommandError("no breakpoint at address 0x%08x found" % addr)
    _BP_LEN.get(rc, {}).pop(addr, None)
    return ""


def cmd_wp(ctx: CommandContext, args: list[str]) -> str:
    rc = ctx.target
    if not args:
        return "\n".join("address: 0x%08x, len: 0x%08x, r/w/a: %i, value: 0x%08x, mask: 0x%08x"
                         % (w.start, w.length, _WP_KIND[w.kind], 0, 0xFFFFFFFF)
                         for w in rc.watchpoints)
    if not 2 <= len(args) <= 5:
        raise _usage("wp")
    addr = parse_address("wp", args[0])
    length = parse_number("wp", "length", args[1])
    kind = "a"
    if len(args) >= 3:
        if args[2] not in _WP_KIND:
            raise _usage("wp")
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


def cmd_rwp(ctx: CommandContext, args: list[str]) -> str:
    if len(args) != 1:
        raise _usage("rwp")
    rc = ctx.target
    if args[0] == "all":
        rc.clear_watchpoints()
        return ""
    addr = parse_address("rwp", args[0])
    if not rc.remove_watchpoint(None, addr):
        raise CommandError("no watchpoint at address 0x%08x found" % addr)
    return ""


# ------------------------------------------------------------------------------------------------
# commands: misc


def cmd_capture(ctx: CommandContext, args: list[str]) -> str:
    if len(args) != 1:
        raise _usage("capture")
    lines: list[str] = []
    sub = dataclasses.replace(ctx, log=lines.append)
    try:
        result = execute(sub, args[0])
    finally:
        ctx.current = sub.current
        ctx.reported_stops.extend(sub.reported_stops)
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return text + result


_SNAPSHOT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def cmd_snapshot(ctx: CommandContext, args: list[str]) -> str:
    """``snapshot save|restore|delete NAME`` and ``snapshot list``: named whole-state
    snapshots of the target (RunControl.save_snapshot), one line per snapshot in ``list``."""
    rc = ctx.target
    if args == ["list"]:
        if not rc.snapshots:
            return "no snapshots"
        return "\n".join(f"{name}: pc 0x{s['pc']:08x} ({rc.device.unit_label(s['pc'])}), "
                         f"{s['units']} {rc.device.unit_name}s done"
                         for name, s in rc.snapshots.items())
    if len(args) != 2 or args[0] not in ("save", "restore", "delete"):
        raise _usage("snapshot")
    verb, name = args
    if not _SNAPSHOT_NAME.fullmatch(name):
        raise CommandError(f"snapshot {verb}: {name!r} is not a snapshot name (letters, digits, "
                           "'_', '.', '-'; at most 64)")
    try:
        if verb == "save":
            rc.save_snapshot(name)
            return f"saved snapshot {name} at pc 0x{rc.device.pc:08x}"
        if verb == "restore":
            rc.restore_snapshot(name)
            return f"restored snapshot {name}: pc 0x{rc.device.pc:08x} ({next_unit_label(rc)})"
        rc.delete_snapshot(name)
        return f"deleted snapshot {name}"
    except (DeviceError, TargetRunning) as e:
        raise CommandError(f"snapshot {verb}: {e}") from None


def cmd_history(ctx: CommandContext, args: list[str]) -> str:
    """``history``: the reverse-execution history's size; ``history MIB`` sets its budget
    (0: recording off), as ``--history-mib`` does."""
    rc = ctx.target
    if len(args) > 1:
        raise _usage("history")
    if args:
        mib = parse_number("history", "budget (MiB)", args[0])
        _halted(rc, "history")
        rc.history.budget = mib << 20
        if not mib:
            rc.history.clear()
    return rc.history.usage()


def cmd_init(ctx: CommandContext, args: list[str]) -> str:
    return ""


def cmd_version(ctx: CommandContext, args: list[str]) -> str:
    return f"accelstub {VERSION} (OpenOCD-compatible command set)"


def cmd_help(ctx: CommandContext, args: list[str]) -> str:
    table = _table(ctx)
    if args:
        name = args[0]
        if name not in table:
            raise CommandError(f"help: no command named '{name}'")
        usage, summary = table[name][0], table[name][2]
        return f"{name} {usage}".rstrip() + (f"\n      {summary}" if summary else "")
    return "\n".join(f"{name} {table[name][0]}".rstrip() for name in sorted(table))


def cmd_shutdown(ctx: CommandContext, args: list[str]) -> str:
    if ctx.shutdown is None:
        raise CommandError("shutdown: not available on this connection")
    ctx.shutdown()
    return "shutdown command invoked"


def cmd_sleep(ctx: CommandContext, args: list[str]) -> str:
    if len(args) != 1:
        raise _usage("sleep")
    ms = parse_number("sleep", "time", args[0])
    threading.Event().wait(min(ms, 600_000) / 1000.0)
    return ""


def cmd_tcl(ctx: CommandContext, args: list[str]) -> str:
    raise CommandError("tcl notifications: only on a Tcl RPC connection (port 6666)")


def cmd_units(ctx: CommandContext, args: list[str]) -> str:
    """The whole program: one line per unit, ``0x%08x <label>: <summary>``, like the comments
    the vendor tools put in generated code, then the end address (``end``); the line at pc is
    marked ``=>`` as gdb's ``x/i`` marks it (machine-readable: the TUI parses it)."""
    if args:
        raise _usage("units")
    d = units_data(ctx.target)
    rows = [(u["address"], u["label"], u["summary"]) for u in d["units"]]
    if d["end"] is not None:
        rows.append((d["end"], "end", f"end of program (pc once every {d['unit_name']} has "
                     "run)"))
    pc = ctx.target.device.pc
    return "\n".join(f"{'=>' if a == pc else '  '} 0x{a:08x} {label}: {summary}"
                     for a, label, summary in rows)


def cmd_status(ctx: CommandContext, args: list[str]) -> str:
    """Run state, pc, interrupt lines and counters as ``key: value`` lines."""
    if args:
        raise _usage("status")
    rc = ctx.target
    dev = rc.device
    lines = [f"state: {rc.state}", f"pc: 0x{dev.pc:08x}",
             f"stop: {rc.last_stop.debug_reason}"]
    lines += [f"irq.{name}: {int(level)}" for name, level in dev.interrupts().items()]
    lines += [f"{name}: {value}" for name, value in dev.counters().items()]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# machine-readable state (`json WHAT`): what the Python API's remote back end reads
# (api/backends.py), the same functions its in-process back end calls, so both report the same
# values by construction and the remote back end needs nothing device-specific


def stop_data(rc: RunControl) -> dict:
    """The last stop: reason (step|breakpoint|watchpoint|halt|done|fault|idle), pc, the unit
    index at pc (None past the last), the watchpoint hit ([kind, address]), the message, and
    whether going back reached the start of the history (RSP ``replaylog:begin``)."""
    stop, dev = rc.last_stop, rc.device
    return {"reason": stop.reason, "pc": dev.pc, "unit": unit_at_pc(dev),
            "watch": list(stop.watch) if stop.watch else None, "message": stop.message,
            "history_begin": stop.replaylog == "begin"}


def units_data(rc: RunControl) -> dict:
    """The program listing with indexes, the word for a unit and the end address."""
    dev = rc.device
    end = dev.end_address if dev.description.find_register("EMU_END") is not None else None
    return {"unit_name": dev.unit_name, "granularities": list(dev.granularities), "end": end,
            "units": [{"index": i, "address": u.address, "label": u.label, "summary": u.summary}
                      for i, u in enumerate(dev.units())]}


def status_data(rc: RunControl) -> dict:
    """What ``status`` prints, as values: run state, pc, unit at pc, stop reason, interrupt
    lines, counters."""
    dev = rc.device
    return {"device": dev.name, "state": rc.state, "pc": dev.pc, "unit": unit_at_pc(dev),
            "stop": rc.last_stop.reason, "interrupts": dict(dev.interrupts()),
            "counters": dict(dev.counters())}


def register_data(rc: RunControl, name: str) -> dict:
    """One register by name (or alias): its name, address, width, value (a debugger read: no
    side effects) and decoded fields; a name the device lacks gives ``{"error":
    "RegisterNotFound", ...}`` with the close matches, so a client raises the same error."""
    from accelstub.devices.errors import RegisterNotFound

    dev = rc.device
    if name in CORE_REGS:
        return {"name": name, "address": None, "bits": 32, "value": dev.read_core(name),
                "fields": {}}
    try:
        reg = dev.description.register(name)
    except RegisterNotFound as e:
        return {"error": "RegisterNotFound", "name": e.name, "device": e.device,
                "close": list(e.close)}
    value = dev.read_register(reg.name)
    return {"name": reg.name, "address": reg.address, "bits": reg.bits, "value": value,
            "fields": {f.name: f.extract(value) for f in reg.fields}}


def tensor_data(spec: TensorSpec) -> dict:
    """A TensorSpec as JSON values (``TensorSpec(**data)`` with tuples rebuilds it)."""
    return dataclasses.asdict(spec)


def tensor_from_data(data: dict) -> TensorSpec:
    """The TensorSpec that :func:`tensor_data` gave as JSON values (lists back to tuples): what
    a client of ``json tensors UNIT`` (the TUI, the API's remote back end) reads."""
    return TensorSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def diff_data(rc: RunControl) -> dict:
    """The per-layer diff so far (``diff load``): the ``--json`` form of ``accelstub diff``
    plus ``loaded`` (False: no reference loaded) and ``reference`` (the file's name)."""
    differ = differ_of(rc)
    if differ is None:
        return {"loaded": False, "reference": None, "layers": [], "first_divergence": None}
    return {"loaded": True, "reference": differ.source, **differ.as_json()}


def reference_data(rc: RunControl, index: int, tensor: str = "output") -> dict:
    """The loaded diff reference of one unit's tensor, for the TUI's tensor view: its name,
    its values as (C, H, W) flattened (None for a checksum reference, whose ``crc`` is given
    instead), and the rule that explains differences the hardware makes on purpose; all None
    when no reference covers that tensor."""
    differ = differ_of(rc)
    ref = differ.reference(index, tensor) if differ is not None else None
    if ref is None:
        return {"name": None, "values": None, "crc": None, "rule": ""}
    values = None
    if ref.array is not None:
        values = unit_spec(rc.device, ref).from_layout(ref.array).ravel().tolist()
    return {"name": ref.name, "values": values, "crc": None if ref.crc is None else ref.crc[1],
            "rule": ref.rule}


#: the state ``json WHAT`` gives, by WHAT (``register`` takes a name): what the API's remote back
#: end reads and its in-process back end calls, one table so the two cannot drift apart
JSON_DATA: dict[str, Callable[..., object]] = {
    "units": units_data, "status": status_data, "stop": stop_data, "register": register_data,
    "diff": diff_data,
    "counters": lambda rc: dict(rc.device.counters()),
    "interrupts": lambda rc: dict(rc.device.interrupts())}


def cmd_json(ctx: CommandContext, args: list[str]) -> str:
    """``json units|tensors UNIT|counters|interrupts|status|stop|diff|register NAME|reference
    UNIT [TENSOR]|load PATH [INPUT]``: one line of JSON for programs (the Python API's remote
    back end, the TUI), never for people."""
    import json

    rc = ctx.target
    what, rest = (args[0], args[1:]) if args else ("", [])
    if what in JSON_DATA and len(rest) == (what == "register"):
        data: object = JSON_DATA[what](rc, *rest)
    elif what == "tensors" and len(rest) == 1:
        index = parse_unit("json tensors", rc.device, rest[0])
        data = [tensor_data(s) for s in rc.device.unit_tensors(index)]
    elif what == "reference" and len(rest) in (1, 2):
        data = reference_data(rc, parse_unit("json reference", rc.device, rest[0]), *rest[1:])
    elif what == "load" and len(rest) in (1, 2):
        from accelstub.devices.device import ProgramOptions

        from .program import ProgramError, load_for_reset

        quiet = dataclasses.replace(ctx, log=lambda s: None, reported_stops=[])
        options = ProgramOptions(input=str(_resolve(ctx, rest[1]))) if len(rest) == 2 else \
            ProgramOptions()
        try:
            data = {"summary": load_for_reset(quiet, _resolve(ctx, rest[0]), options)}
        except ProgramError as e:
            raise CommandError(f"json load: {e}") from None
    else:
        raise _usage("json")
    return json.dumps(data, separators=(",", ":"))


def cmd_regions(ctx: CommandContext, args: list[str]) -> str:
    """The memory map with names: one ``0x%08x 0x%08x <name> <kind>`` line ([start, end)) per
    populated range (gdb's memory-map XML has no names; the TUI reads this)."""
    if args:
        raise _usage("regions")
    return "\n".join(f"0x{s:08x} 0x{e:08x} {r.name} {r.kind}"
                     for r in ctx.target.device.description.regions for s, e in r.populated)


def cmd_svd(ctx: CommandContext, args: list[str]) -> str:
    if len(args) != 1:
        raise _usage("svd")
    from .svd import description_to_svd

    path = _resolve(ctx, args[0])
    try:
        write_regular(path, description_to_svd(ctx.target.device.description).encode("utf-8"))
    except FileRefused as e:
        raise CommandError(f"svd: {e}") from None
    except OSError as e:
        raise CommandError(f"svd: cannot write {path}: {e.strerror}") from None
    return f"wrote {path}"

# ------------------------------------------------------------------------------------------------
# unit tensors (DESIGN.md "Unit tensors"): the device's declaration, read with its debugger read

#: address ranges one listing line shows before "... N more"
TENSOR_RANGES_SHOWN = 4


def unit_at_pc(dev: Device) -> int | None:
    """Index in ``dev.units()`` of the unit at pc (the next to run), None past the last."""
    pc = dev.pc
    return next((i for i, u in enumerate(dev.units()) if u.address == pc), None)


def parse_unit(cmd: str, dev: Device, text: str) -> int:
    """A unit given by its label (as ``units`` lists it) or its index in the listing."""
    units = dev.units()
    for i, u in enumerate(units):
        if u.label == text:
            return i
    try:
        index = int(text, 0)
    except ValueError:
        index = -1
    if 0 <= index < len(units):
        return index
    known = (f"an index 0..{len(units) - 1} or a label such as '{units[0].label}'" if units
             else "the program lists none")
    raise CommandError(f"{cmd}: no {dev.unit_name} '{text}' ({known})")


def _unit_words(dev: Device, index: int) -> str:
    return f"{dev.units()[index].label} (index {index})"


def _unit_specs(cmd: str, dev: Device, index: int) -> tuple[TensorSpec, ...]:
    specs = dev.unit_tensors(index)
    if not specs:
        raise CommandError(f"{cmd}: {_unit_words(dev, index)} declares no tensors on {dev.name}")
    return specs


def _tensor_spec(cmd: str, dev: Device, index: int, name: str) -> TensorSpec:
    specs = _unit_specs(cmd, dev, index)
    for s in specs:
        if s.name == name:
            return s
    raise CommandError(f"{cmd}: {_unit_words(dev, index)} has no tensor '{name}' "
                       f"(it has {', '.join(s.name for s in specs)})")


def _read_unit_tensor(cmd: str, rc: RunControl, index: int, spec: TensorSpec) -> np.ndarray:
    try:
        return read_tensor(spec, rc.device.read)
    except BusError as e:
        raise CommandError(f"{cmd}: cannot read {spec.name} of "
                           f"{_unit_words(rc.device, index)}: {e}") from None


def _tensor_line(spec: TensorSpec) -> str:
    ranges = spec.ranges()
    shown = " ".join(f"0x{s:08x}+{e - s}" for s, e in ranges[:TENSOR_RANGES_SHOWN])
    if len(ranges) > TENSOR_RANGES_SHOWN:
        shown += f" ... {len(ranges) - TENSOR_RANGES_SHOWN} more"
    total = sum(e - s for s, e in ranges)
    line = (f"  {spec.name:<8} {spec.layout:<5} {'x'.join(map(str, spec.shape)):<12} "
            f"{spec.dtype:<6} {total} bytes in {len(ranges)} "
            f"range{'s' if len(ranges) != 1 else ''}: {shown}")
    return line + (f"\n           {spec.doc}" if spec.doc else "")


def channel_text(array: np.ndarray, spec: TensorSpec, channel: int) -> str:
    """Channel ``channel`` of ``array`` (in ``spec``'s layout) as rows of right-aligned values,
    with row and column numbers."""
    plane = spec.from_layout(array)[channel]
    # float tensors: the operators Vela leaves on the CPU (a DEQUANTIZE's output, say)
    cells = [[f"{float(v):.6g}" if plane.dtype.kind == "f" else str(int(v)) for v in row]
             for row in plane]
    width = max([len(c) for row in cells for c in row] + [len(str(plane.shape[1] - 1)), 3]) + 1
    lines = [" " * 5 + "".join(f"{w:>{width}}" for w in range(plane.shape[1]))]
    lines += [f"{h:>4} " + "".join(f"{c:>{width}}" for c in row) for h, row in enumerate(cells)]
    return "\n".join(lines)


def cmd_tensor(ctx: CommandContext, args: list[str]) -> str:
    """The current (or a named) unit's declared tensors; one channel as text; an array as .npy.
    Everything comes from Device.unit_tensors, so no device needs a case here."""
    rc = ctx.target
    dev = rc.device
    if not args or (len(args) == 1 and args[0] not in ("show", "dump")):
        if args:
            index = parse_unit("tensor", dev, args[0])
        else:
            index = unit_at_pc(dev)
            if index is None:
                raise CommandError(f"tensor: pc 0x{dev.pc:08x} is at no {dev.unit_name} (the "
                                   f"program has ended); name one: tensor UNIT")
        specs = _unit_specs("tensor", dev, index)
        return "\n".join([f"{_unit_words(dev, index)}: {dev.units()[index].summary}"]
                         + [_tensor_line(s) for s in specs])
    sub, rest = args[0], args[1:]
    if sub == "show" and len(rest) in (2, 3):
        cmd = "tensor show"
        index = parse_unit(cmd, dev, rest[0])
        spec = _tensor_spec(cmd, dev, index, rest[1])
        channels = dict(zip(spec.layout, spec.shape))["C"]
        c = parse_number(cmd, "channel", rest[2]) if len(rest) == 3 else 0
        if c >= channels:
            raise CommandError(f"{cmd}: channel {c} out of range: {spec.name} of "
                               f"{_unit_words(dev, index)} has {channels} channels")
        array = _read_unit_tensor(cmd, rc, index, spec)
        return (f"{_unit_words(dev, index)} {spec.name} channel {c} of {channels}: "
                f"{spec.layout} {'x'.join(map(str, spec.shape))} {spec.dtype}\n"
                + channel_text(array, spec, c))
    if sub == "dump" and len(rest) == 3:
        import io

        cmd = "tensor dump"
        index = parse_unit(cmd, dev, rest[0])
        spec = _tensor_spec(cmd, dev, index, rest[1])
        array = _read_unit_tensor(cmd, rc, index, spec)
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=False)
        try:
            write_regular(_resolve(ctx, rest[2]), buf.getvalue(), name=rest[2])
        except FileRefused as e:
            raise CommandError(f"{cmd}: {e}") from None
        except OSError as e:
            raise CommandError(f"{cmd}: couldn't write {rest[2]}: {e.strerror or e}") from None
        return (f"wrote {rest[2]}: {spec.name} of {_unit_words(dev, index)}, {spec.layout} "
                f"{'x'.join(map(str, spec.shape))} {spec.dtype}")
    raise _usage("tensor")



def cmd_diff(ctx: CommandContext, args: list[str]) -> str:
    """``diff load R [all]``: compare every later unit's output with the reference file R
    (devices/layer_diff.py; the device's reader, Device.layer_references) and stop after the
    first unit that diverges (a divergence breakpoint; ``all``: never stop); ``diff``: the
    table so far; ``diff clear``: compare no more."""
    rc = ctx.target
    if args[:1] == ["load"] and len(args) in (2, 3) and args[2:] in ([], ["all"]):
        path = _resolve(ctx, args[1])
        try:
            differ = start_diff(rc, path, stop=args[2:] != ["all"])
        except ReferenceFileError as e:
            raise CommandError(f"diff load: {e}") from None
        units = sorted(differ.by_unit)
        return (f"diff: {len(differ.by_unit)} {rc.device.unit_name}s referenced by {path.name} "
                f"({', '.join(map(str, units[:8]))}{' ...' if len(units) > 8 else ''}); "
                + ("continue stops after the first that diverges" if differ.stop else
                   "every one is compared, no stop"))
    if args == ["clear"]:
        differ = differ_of(rc)
        if differ is not None:
            differ.detach()
        return "diff: cleared"
    if args:
        raise _usage("diff")
    differ = differ_of(rc)
    if differ is None:
        raise CommandError("diff: no reference loaded (diff load FILE)")
    return differ.table()


def cmd_echo(ctx: CommandContext, args: list[str]) -> str:
    """OpenOCD's echo: the words joined by spaces (``-n``: no newline, which our results never
    end with anyway). OpenOCD logs it; here it is the result, so telnet, monitor and Tcl RPC
    all show it."""
    return " ".join(args[1:] if args[:1] == ["-n"] else args)


Handler = Callable[[CommandContext, list[str]], str]

#: name -> (usage, handler, one-line summary)
_COMMANDS: dict[str, tuple[str, Handler, str]] = {
    "reset": ("[run|halt|init]", cmd_reset, "reset the accelerator, then run, halt or init"),
    "halt": ("[milliseconds]", cmd_halt, "request a halt and wait for it"),
    "wait_halt": ("[milliseconds]", cmd_wait_halt, "wait for the target to halt"),
    "resume": ("[address]", cmd_resume, "resume, optionally from a new pc (next unit)"),
    "step": ("[address | granularity]", cmd_step, "run one unit (layer/command/job) and "
             "halt; a granularity (e.g. subtile) runs one part of it"),
    "host": ("mdw|mdh|mdb address [count]", cmd_host, "read memory as the driver's CPU does, "
             "with its side effects (a FIFO pop, a queue acquire); md* never has them"),
    "poll": ("['on'|'off']", cmd_poll, "show the target state"),
    "echo": ("[-n] text...", cmd_echo, "the text, as a result (scripts print progress with it)"),
    "targets": ("[target]", cmd_targets, "list targets or select the current one"),
    "mdd": ("['phys'] address [count]", _md("mdd"), "display memory as 64-bit words"),
    "mdw": ("['phys'] address [count]", _md("mdw"), "display memory as 32-bit words"),
    "mdh": ("['phys'] address [count]", _md("mdh"), "display memory as 16-bit halfwords"),
    "mdb": ("['phys'] address [count]", _md("mdb"), "display memory as bytes"),
    "mwd": ("['phys'] address value [count]", _mw("mwd"), "write (fill) 64-bit words"),
    "mww": ("['phys'] address value [count]", _mw("mww"), "write (fill) 32-bit words"),
    "mwh": ("['phys'] address value [count]", _mw("mwh"), "write (fill) 16-bit halfwords"),
    "mwb": ("['phys'] address value [count]", _mw("mwb"), "write (fill) bytes"),
    "read_memory": ("address width count ['phys']", cmd_read_memory,
                    "read memory as a Tcl list of values"),
    "write_memory": ("address width data ['phys']", cmd_write_memory,
                     "write a Tcl list of values to memory"),
    "load_image": ("filename [address [bin|ihex]]", cmd_load_image, "load an image into memory"),
    "dump_image": ("filename address size", cmd_dump_image, "dump memory to a binary file"),
    "verify_image": ("filename [address [bin|ihex]]", cmd_verify_image,
                     "compare an image with memory"),
    "reg": ("[(register_number|register_name) [value]]", cmd_reg,
            "list, read or write registers"),
    "get_reg": ("[-force] list", cmd_get_reg, "read registers into a Tcl dict"),
    "set_reg": ("dict", cmd_set_reg, "write registers from a Tcl dict"),
    "bp": ("[address length ['hw']]", cmd_bp, "list or set breakpoints (on unit addresses)"),
    "rbp": ("'all' | address", cmd_rbp, "remove breakpoints"),
    "wp": ("[address length [('r'|'w'|'a')]]", cmd_wp, "list or set watchpoints"),
    "rwp": ("'all' | address", cmd_rwp, "remove watchpoints"),
    "capture": ("command", cmd_capture, "run a command and return its log output and result"),
    "init": ("", cmd_init, "ignored; for OpenOCD compatibility"),
    "snapshot": ("save|restore|delete NAME | list", cmd_snapshot,
                 "named snapshots of the whole target state"),
    "history": ("[MiB]", cmd_history, "reverse-execution history: its size, or set its "
                "budget (0: off)"),
    "version": ("", cmd_version, "show the program version"),
    "help": ("[command_name]", cmd_help, "show command usage"),
    "shutdown": ("", cmd_shutdown, "shut the server down"),
    "sleep": ("milliseconds", cmd_sleep, "wait"),
    "tcl": ("notifications ('on'|'off')", cmd_tcl, "Tcl RPC event notifications"),
    "units": ("", cmd_units, "list the program: one line per layer/command/job"),
    "json": ("units|tensors UNIT|counters|interrupts|status|stop|diff|register NAME|"
             "reference UNIT [TENSOR]|load PATH [INPUT]", cmd_json,
             "machine-readable state as one line of JSON (for the Python API)"),
    "status": ("", cmd_status, "run state, pc, interrupt lines and counters"),
    "svd": ("filename", cmd_svd, "write the device's CMSIS-SVD description to a file"),
    "regions": ("", cmd_regions, "list the memory map: start, end, name and kind of each range"),
    "diff": ("[load FILE ['all'] | clear]", cmd_diff, "per-layer comparison with the "
             "framework's tensors: load a reference (continue then stops at the first unit "
             "that diverges), show the table so far, or clear"),
    "tensor": ("[UNIT] | show UNIT NAME [channel] | dump UNIT NAME file.npy", cmd_tensor,
               "a unit's declared tensors (default: the one at pc); one channel; a .npy dump"),
}

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


def _table(ctx: CommandContext) -> dict[str, tuple[str, Handler, str]]:
    table = dict(_COMMANDS)
    if ctx.targets:
        for name, c in ctx.target.device.monitor_commands().items():
            table[name] = (c.usage, c.handler, c.summary)
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
    table = _table(ctx)
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
        return entry[1](ctx, args)
    except CommandError:
        raise
    except TargetRunning as e:
        raise CommandError(str(e)) from None
    except BusError as e:
        raise CommandError(f"{name}: {e}") from None
    except DeviceError as e:
        raise CommandError(f"{name}: {e}") from None
