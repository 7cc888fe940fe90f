"""Image commands (load_image, dump_image, verify_image): bin and Intel hex files, read
with a bound (never more than fits in the target's memory) and written only as regular files,
with OpenOCD's progress and mismatch lines."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from accelstub.devices.runcontrol import RunControl

from ..files import FileRefused, read_bounded, write_regular
from .args import check_halted, parse_address, parse_number, resolve
from .memory import MAX_TRANSFER, mem_read, mem_write
from .table import CommandContext, CommandError, command, usage_error

#: largest image file load_image/verify_image read (a bin image also at most what fits in the
#: populated memory from its address on)
MAX_IMAGE_FILE = MAX_TRANSFER


def _elapsed(t0: float) -> float:
    return max(time.perf_counter() - t0, 1e-6)  # never divide by zero in the KiB/s figure


def _rate(n: int, t: float) -> str:
    return f"in {t:f}s ({n / 1024.0 / t:0.3f} KiB/s)"


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
        raise usage_error(cmd)
    path = resolve(ctx, args[0])
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


@command("load_image", "filename [address [bin|ihex]]", "load an image into memory")
def cmd_load_image(ctx: CommandContext, args: list[str]) -> str:
    rc = ctx.target
    check_halted(rc, "load_image")
    t0 = time.perf_counter()
    _, sections = _open_image(ctx, "load_image", args)
    lines, total = [], 0
    for a, d in sections:
        mem_write("load_image", rc, a, d)
        total += len(d)
        lines.append("%u bytes written at address 0x%08x" % (len(d), a))
    t = _elapsed(t0)
    lines.append(f"downloaded {total} bytes {_rate(total, t)}")
    return "\n".join(lines)


@command("dump_image", "filename address size", "dump memory to a binary file")
def cmd_dump_image(ctx: CommandContext, args: list[str]) -> str:
    if len(args) != 3:
        raise usage_error("dump_image")
    path = resolve(ctx, args[0])
    addr = parse_address("dump_image", args[1])
    size = parse_number("dump_image", "size", args[2])
    t0 = time.perf_counter()
    data = mem_read("dump_image", ctx.target, addr, size)
    try:
        write_regular(path, data, name=args[0])
    except FileRefused as e:
        raise CommandError(f"dump_image: {e}") from None
    except OSError as e:
        raise CommandError(f"dump_image: couldn't write {args[0]}: {e.strerror or e}") from None
    t = _elapsed(t0)
    return f"dumped {len(data)} bytes {_rate(len(data), t)}"


@command("verify_image", "filename [address [bin|ihex]]", "compare an image with memory")
def cmd_verify_image(ctx: CommandContext, args: list[str]) -> str:
    t0 = time.perf_counter()
    _, sections = _open_image(ctx, "verify_image", args)
    rc = ctx.target
    diffs: list[str] = []
    first = None
    ndiff = 0
    total = 0
    for a, d in sections:
        mem = mem_read("verify_image", rc, a, len(d))
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
