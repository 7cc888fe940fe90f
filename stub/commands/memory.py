"""Memory commands (md*, mw*, read_memory, write_memory, host md*) with OpenOCD's output
formats, and the bounded debugger read / halted bus write the image commands share. Listings
are built as numpy byte arrays: a Python string per value cost tens of bytes per byte listed."""
from __future__ import annotations

import numpy as np

from accelstub.devices import BusError
from accelstub.devices.runcontrol import RunControl

from .args import fit, parse_address, parse_number
from .table import CommandContext, CommandError, Handler, command, usage_error
from .words import split_words

#: largest md*/read_memory/dump_image transfer one command may ask for
MAX_TRANSFER = 64 << 20
#: most values one md*/read_memory/host md* lists: their text is 3-5 bytes per byte of memory
#: (read_memory 8 33554432 made a 134 MB reply and peaked at 2.5 GB); dump_image writes more
MAX_LISTED = 1 << 20


def mem_read(cmd: str, rc: RunControl, addr: int, size: int) -> bytes:
    if size > MAX_TRANSFER:
        raise CommandError(f"{cmd}: {size} bytes is too much for one command "
                           f"(at most {MAX_TRANSFER})")
    try:
        return rc.device.read(addr, size)
    except BusError as e:
        raise CommandError(f"{cmd}: cannot read memory: {e}") from None


def mem_write(cmd: str, rc: RunControl, addr: int, data: bytes) -> None:
    """Write ``data`` with the target halted. Only the bus error is worded here; TargetRunning
    and DeviceError reach the dispatcher, which words them for every command alike."""
    try:
        with rc.halted_access(cmd):
            rc.device.write(addr, data)
    except BusError as e:
        raise CommandError(f"{cmd}: cannot write memory: {e}") from None


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


def _address_count(cmd: str, args: list[str]) -> tuple[int, int]:
    """``address [count]`` of md* and host md* (count 1 if left out), checked by _listed."""
    addr = parse_address(cmd, args[0])
    count = parse_number(cmd, "count", args[1]) if len(args) == 2 else 1
    _listed(cmd, count)
    return addr, count


def _phys(args: list[str]) -> list[str]:
    return args[1:] if args and args[0] == "phys" else args


def _md(name: str) -> Handler:
    size = _WIDTH[name[2]]

    def handler(ctx: CommandContext, args: list[str]) -> str:
        args = _phys(args)
        if not 1 <= len(args) <= 2:
            raise usage_error(name)
        addr, count = _address_count(name, args)
        data = mem_read(name, ctx.target, addr, count * size)
        return md_output(addr, size, data)

    return handler


@command("host", "mdw|mdh|mdb address [count]",
         "read memory as the driver's CPU does, with its side effects (a FIFO pop, a queue "
         "acquire); md* never has them")
def cmd_host(ctx: CommandContext, args: list[str]) -> str:
    """``host mdw ADDR [COUNT]``: Device.host_read, the read a driver's load instruction makes;
    a change of the device, so the target must be halted."""
    if not args or args[0] not in ("mdw", "mdh", "mdb") or not 2 <= len(args) <= 3:
        raise usage_error("host")
    name, rc = args[0], ctx.target
    size = _WIDTH[name[2]]
    addr, count = _address_count("host", args[1:])
    try:
        with rc.halted_access(f"host {name}"):
            data = rc.device.host_read(addr, count * size)
    except BusError as e:
        raise CommandError(f"host: cannot read memory: {e}") from None
    return md_output(addr, size, data)


def _mw(name: str) -> Handler:
    size = _WIDTH[name[2]]

    def handler(ctx: CommandContext, args: list[str]) -> str:
        args = _phys(args)
        if not 2 <= len(args) <= 3:
            raise usage_error(name)
        addr = parse_address(name, args[0])
        value = fit(name, parse_number(name, "value", args[1], signed=True), size * 8)
        count = parse_number(name, "count", args[2]) if len(args) == 3 else 1
        if count * size > MAX_TRANSFER:
            raise CommandError(f"{name}: count {count} is too large")
        if count:
            mem_write(name, ctx.target, addr, value.to_bytes(size, "little") * count)
        return ""

    return handler


# the handlers differ only in the width their name gives; each is declared here, once
command("mdd", "['phys'] address [count]", "display memory as 64-bit words")(_md("mdd"))
command("mdw", "['phys'] address [count]", "display memory as 32-bit words")(_md("mdw"))
command("mdh", "['phys'] address [count]", "display memory as 16-bit halfwords")(_md("mdh"))
command("mdb", "['phys'] address [count]", "display memory as bytes")(_md("mdb"))
command("mwd", "['phys'] address value [count]", "write (fill) 64-bit words")(_mw("mwd"))
command("mww", "['phys'] address value [count]", "write (fill) 32-bit words")(_mw("mww"))
command("mwh", "['phys'] address value [count]", "write (fill) 16-bit halfwords")(_mw("mwh"))
command("mwb", "['phys'] address value [count]", "write (fill) bytes")(_mw("mwb"))


def _width(cmd: str, text: str) -> int:
    w = parse_number(cmd, "width", text)
    if w not in (8, 16, 32, 64):
        raise CommandError(f"{cmd}: invalid width '{text}' (must be one of: 8, 16, 32 or 64)")
    return w // 8


@command("read_memory", "address width count ['phys']", "read memory as a Tcl list of values")
def cmd_read_memory(ctx: CommandContext, args: list[str]) -> str:
    if len(args) == 4 and args[3] == "phys":
        args = args[:3]
    if len(args) != 3:
        raise usage_error("read_memory")
    addr = parse_address("read_memory", args[0])
    size = _width("read_memory", args[1])
    count = parse_number("read_memory", "count", args[2])
    _listed("read_memory", count)
    data = mem_read("read_memory", ctx.target, addr, count * size)
    return value_list(data, size)


@command("write_memory", "address width data ['phys']", "write a Tcl list of values to memory")
def cmd_write_memory(ctx: CommandContext, args: list[str]) -> str:
    if len(args) == 4 and args[3] == "phys":
        args = args[:3]
    if len(args) != 3:
        raise usage_error("write_memory")
    addr = parse_address("write_memory", args[0])
    size = _width("write_memory", args[1])
    values = split_words(args[2]) if args[2].strip() else []
    data = b"".join(fit("write_memory", parse_number("write_memory", "value", v, signed=True),
                         size * 8).to_bytes(size, "little") for v in values)
    if data:
        mem_write("write_memory", ctx.target, addr, data)
    return ""
