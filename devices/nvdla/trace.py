"""The trace-test format of the NVDLA hardware repository (verif/tests/trace_tests/<name>/<name>.cfg
with its memory files), played as a host program: what the repository's test bench does with a
trace, in trace order.

Commands (one per line, ``;``-terminated; ``//`` starts a comment), facts from the repository's
traces and trace player:

* ``mem_init(pri_mem, ADDR, SIZE, ALL_ZERO)``: fill SIZE bytes at ADDR (ALL_ZERO: zeros);
* ``mem_load(pri_mem, ADDR, "file.dat")``: the memory file beside the .cfg at ADDR; a memory file
  is ``{offset:0x.., size:N, payload:0x.. 0x.. ...} ,`` records inside braces, each N bytes at
  ADDR + offset;
* ``reg_write(NVDLA_UNIT.REG_0, VALUE)``: a register write by symbolic name (the register manual's
  ``UNIT.NAME_0``: NAME is our ``UNIT_NAME``; a banked register reaches its producer group);
* ``poll_reg_equal(NVDLA_UNIT.REG_0, VALUE)``: read until the register equals VALUE;
* ``intr_notify(EVENT, SYNC_ID)``: wait for the done interrupt EVENT (``SDP_0`` = SDP's done
  status bit of group 0, ``CDMA_DAT_0``, ...) and clear it in GLB S_INTR_STATUS, as the test
  bench's interrupt handler does; the event then names the results checked with SYNC_ID;
* ``check_crc(SYNC_ID, MEM, ADDR, SIZE, CRC)``: the standard CRC-32 (zlib's) over SIZE bytes at
  ADDR in address order must equal CRC;
* ``check_file(SYNC_ID, MEM, ADDR, SIZE, "file.dat")``: the SIZE bytes at ADDR must hold the
  bytes of a memory file (mem_load's format) -- the per-layer dump form of nv_small's trace
  parser (verif/tools/nvdla_trace_parser.py accepts it; a trace of the repository carries one,
  commented out: sdp_8x8x32_bypass_int8_1.cfg; the repository's memory model leaves CHECK_FILE
  a TODO, so here it compares every byte the file gives);
* ``check_nothing(SYNC_ID)``: no result to check.

Writes the register manual marks read-only (the traces write every register, status included)
are not bus errors on the hardware's CSB: they are ignored, counted and reported with the
checks (``ro_writes``). Errors name the file and line.
"""
from __future__ import annotations

import functools
import os
import re
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..description import Description
from ..errors import BusError
from ..files import FileRefused, mib, read_program_text
from ..host import Check, CheckResult, HostProgram, Poll, Step, WaitIrq, Write

if TYPE_CHECKING:
    from .model import Nvdla

_COMMAND = re.compile(r"^\s*([a-z_]+)\s*\((.*)\)\s*;?\s*$", re.S)
_RECORD = re.compile(r"\{\s*offset\s*:\s*(0x[0-9a-fA-F]+|\d+)\s*,\s*size\s*:\s*(\d+)\s*,\s*"
                     r"payload\s*:\s*([^}]*)\}")
#: memory-file bytes a trace may load (a larger file is refused, not read into memory): the
#: text form takes ~5 bytes per byte, and the largest window is 64 MiB
MAX_FILE = 64 << 20
#: memory-file bytes one trace may load in all (a trace naming one file many times included)
MAX_FILES_TOTAL = 256 << 20
#: largest .cfg read: the repository's traces are some hundred lines of register writes; 16 MiB
#: is 300 000 commands, and the steps they become take a few times that in memory
MAX_TRACE = 16 << 20
#: the largest check_crc span whose passing bytes are kept to skip its CRC on the same bytes
#: (_check_crc): a copy of each checked output, bounded
CRC_KEPT_MAX = 4 << 20


class TraceError(ValueError):
    """A trace that cannot be played; the message starts with ``file:line:``."""


def is_trace(path: Path) -> bool:
    """A .cfg file of trace commands (OpenOCD command scripts are .cfg files too), or a
    directory holding one."""
    return trace_file(path) is not None


def trace_file(path: Path) -> Path | None:
    """The .cfg of the trace ``path`` names, or None. In a directory that is its ``<dir>.cfg``,
    or its one .cfg, whatever that file holds: the directory says it is a trace, so a .cfg there
    that is empty, unreadable or no trace is refused by load_trace naming the .cfg's problem
    (not as "is a directory"). A .cfg named directly is a trace only when its first 64 KiB hold
    a trace command: an OpenOCD command script is a .cfg too."""
    if path.is_dir():
        named = path / f"{path.name}.cfg"
        found = [named] if os.path.lexists(named) else sorted(path.glob("*.cfg"))
        return found[0] if len(found) == 1 else None
    if path.is_file() and path.suffix == ".cfg":
        try:
            with path.open("rb") as f:
                head = f.read(1 << 16)
        except OSError:
            return None
        if re.search(rb"^\s*(reg_write|mem_init|mem_load)\s*\(", head, re.M):
            return path
    return None


def read_memory_file(path: Path, where: str, limit: int = MAX_FILE) -> list[tuple[int, bytes]]:
    """The memory file's records as (offset, bytes), records that touch merged into one run;
    at most ``limit`` bytes of it are read (the trace's remaining budget)."""
    try:
        what = "an NVDLA memory file" if limit == MAX_FILE else \
            f"the rest of this trace's memory files ({mib(MAX_FILES_TOTAL)} in all)"
        text = read_program_text(path, limit, what, name=path.name, encoding="ascii")
    except FileRefused as e:
        raise TraceError(f"{where}: {e}") from None
    except OSError as e:
        raise TraceError(f"{where}: cannot read {path.name}: {e.strerror}") from None
    runs: list[tuple[int, bytearray]] = []
    for m in _RECORD.finditer(text):
        try:
            data = bytes.fromhex(m.group(3).replace("0x", " "))
            ok = len(data) == int(m.group(2))
        except ValueError:
            ok = False
        if not ok:
            line = text.count("\n", 0, m.start()) + 1  # only for the message
            raise TraceError(f"{path.name}:{line}: a record needs size:N and N payload bytes "
                             "written 0x..")
        off = int(m.group(1), 0)
        if runs and runs[-1][0] + len(runs[-1][1]) == off:
            runs[-1][1].extend(data)
        else:
            runs.append((off, bytearray(data)))
    if not runs and text.strip(" \n\r\t{}"):
        raise TraceError(f"{path.name}:1: no {{offset:..., size:..., payload:...}} records")
    return [(off, bytes(data)) for off, data in runs]


def _args(text: str) -> list[str]:
    return [a.strip() for a in text.split(",")]


def _int(text: str, where: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise TraceError(f"{where}: {text!r} is not a number") from None


def register_address(desc: Description, symbol: str, where: str) -> tuple[int, str]:
    """``NVDLA_CDMA.D_MISC_CFG_0`` -> (address, ``CDMA_D_MISC_CFG``)."""
    m = re.fullmatch(r"NVDLA_([A-Z0-9_]+)\.([A-Z0-9_]+?)_0", symbol)
    if m is None:
        raise TraceError(f"{where}: {symbol!r} is not a register name of the form "
                         "NVDLA_UNIT.NAME_0")
    name = f"{m.group(1)}_{m.group(2)}"
    addr = desc.slot_address(name)
    if addr is None:
        reg = desc.find_register(name)
        if reg is None:
            raise TraceError(f"{where}: no register {name} (from {symbol}) in the nv_small map")
        addr = reg.address
    return addr, name


def _check_span(device: Nvdla, addr: int, size: int, where: str) -> None:
    """A memory command's bytes must lie in one of the device's memory windows: checked when the
    trace is read, before anything is allocated or written."""
    if size < 0 or not device.bus.is_mapped(addr, max(size, 1)):
        raise TraceError(f"{where}: {size:#x} bytes at {addr:#010x} are not all in the NVDLA's "
                         "memory windows (memory map: monitor map, or accelstub describe nvdla)")


def _check_crc(hp: HostProgram, sync: str, address: int, size: int, crc: int,
               where: str, passed: CheckResult, kept: list) -> CheckResult:
    """check_crc: CRC-32 of SIZE bytes at ADDR, over a copy of the memory's bytes where they lie
    in one memory, else the debugger's read (which names the first byte that cannot be read).
    ``passed``: the result of a pass, made once by load_trace (a CheckResult is frozen; its
    line formatted per layer cost ~2 us). ``kept``: [the bytes that last passed, or None],
    one list per check_crc line: the same bytes again pass without their CRC, exactly (equal
    bytes have equal CRCs). A rewound layer that wrote the same output costs a copy and a
    memcmp (~2.5 us for 64 KiB) instead of the CRC (~16 us, issue 31 #2). Spans over
    CRC_KEPT_MAX are not kept: their CRC runs over the memory in place, as before."""
    keep = size <= CRC_KEPT_MAX
    try:
        mem, off = hp.device.bus.memory_span(address, size)
        data: bytes | memoryview = mem.data[off:off + size].tobytes() if keep \
            else mem.data[off:off + size].data
    except BusError:
        data = hp.device.read(address, size)
    if keep and data == kept[0]:
        return passed
    got = zlib.crc32(data) & 0xFFFFFFFF
    if got == crc:
        if keep:
            kept[0] = data
        return passed
    return _crc_result(sync, address, size, crc, got, where)


def _crc_result(sync: str, address: int, size: int, crc: int, got: int,
                where: str) -> CheckResult:
    """check_crc's result when the CRC-32 of its bytes is ``got``."""
    ok = got == crc
    what = f"check_crc({sync}) {size:#x} bytes at {address:#010x}: {'PASS' if ok else 'FAIL'}"
    if not ok:
        what += f" (expected {crc:#010x}, got {got:#010x})"
    return CheckResult(ok, f"{what}  [{where}]")


def check_file_bytes(cfg: Path, args: list[str], where: str,
                     limit: int = MAX_FILE) -> tuple[int, int, list[tuple[int, bytes]]]:
    """check_file's (ADDR, SIZE, the memory file's records as (address, bytes)), the records
    inside [ADDR, ADDR + SIZE) (TraceError naming the line otherwise)."""
    if len(args) != 5:
        raise TraceError(f"{where}: check_file takes (sync id, memory, address, size, "
                         "\"file\")")
    addr, size = _int(args[2], where), _int(args[3], where)
    records = read_memory_file(cfg.parent / args[4].strip('"'), where, limit)
    for off, data in records:
        if off + len(data) > size:
            raise TraceError(f"{where}: {args[4]} holds bytes up to offset "
                             f"{off + len(data):#x}, beyond the checked {size:#x}")
    return addr, size, [(addr + off, data) for off, data in records]


def _check_file(hp: HostProgram, sync: str, records: list[tuple[int, bytes]],
                where: str) -> CheckResult:
    """check_file: the device's bytes equal the memory file's."""
    bad = None
    for a, data in records:
        diff = np.flatnonzero(np.frombuffer(hp.device.read(a, len(data)), np.uint8)
                              != np.frombuffer(data, np.uint8))
        if diff.size:
            bad = a + int(diff[0])
            break
    n = sum(len(d) for _, d in records)
    what = f"check_file({sync}) {n:#x} bytes: {'PASS' if bad is None else 'FAIL'}"
    if bad is not None:
        what += f" (first at {bad:#010x})"
    return CheckResult(bad is None, f"{what}  [{where}]")


def read_trace(path: Path) -> tuple[Path, str]:
    """The .cfg of the trace ``path`` (a .cfg or its directory) and its text, bounded;
    TraceError naming the file."""
    cfg = trace_file(path)
    if cfg is None:
        raise TraceError(f"{path}: not a trace (.cfg, or a directory with one)")
    try:
        return cfg, read_program_text(cfg, MAX_TRACE, "an NVDLA trace", encoding="ascii")
    except FileRefused as e:
        raise TraceError(str(e)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"{cfg}: cannot read: {getattr(e, 'strerror', None) or e}") from None


def load_trace(path: Path, device: Nvdla) -> HostProgram:
    """The host program of the trace ``path`` (a .cfg or its directory)."""
    cfg, text = read_trace(path)
    desc = device.description
    steps: list[Step] = []
    layers = 0
    budget = MAX_FILES_TOTAL  # memory-file bytes this trace may still read
    zeros = b""  # mem_init's bytes: one buffer shared by every mem_init (views of it)
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("//", 1)[0].strip()
        if not line:
            continue
        where = f"{cfg.name}:{n}"
        m = _COMMAND.match(line)
        if m is None:
            raise TraceError(f"{where}: cannot parse {line[:60]!r}")
        cmd, args = m.group(1), _args(m.group(2))
        if cmd == "mem_init":
            if len(args) != 4:
                raise TraceError(f"{where}: mem_init takes (mem, address, size, pattern)")
            addr, size = _int(args[1], where), _int(args[2], where)
            if args[3] != "ALL_ZERO":
                raise TraceError(f"{where}: mem_init pattern {args[3]} is not supported "
                                 "(ALL_ZERO is)")
            _check_span(device, addr, size, where)
            if len(zeros) < size:  # a 50-byte line may clear 64 MiB: allocate that once
                zeros = bytes(size)
            steps.append(Write(addr, memoryview(zeros)[:size], where=where))
        elif cmd == "mem_load":
            if len(args) != 3:
                raise TraceError(f"{where}: mem_load takes (mem, address, \"file\")")
            addr = _int(args[1], where)
            file = cfg.parent / args[2].strip('"')
            records = read_memory_file(file, where, min(MAX_FILE, budget))
            budget -= file.stat().st_size  # the text read (a budget of file bytes)
            for off, data in records:
                _check_span(device, addr + off, len(data), where)
                steps.append(Write(addr + off, data, where=f"{where} ({args[2]})"))
        elif cmd == "reg_write":
            if len(args) != 2:
                raise TraceError(f"{where}: reg_write takes (register, value)")
            addr, _ = register_address(desc, args[0], where)
            value = _int(args[1], where) & 0xFFFFFFFF
            steps.append(Write(addr, value.to_bytes(4, "little"), where=where))
        elif cmd == "poll_reg_equal":
            if len(args) != 2:
                raise TraceError(f"{where}: poll_reg_equal takes (register, value)")
            addr, name = register_address(desc, args[0], where)
            steps.append(Poll(addr, 0xFFFFFFFF, _int(args[1], where), where=where, name=name))
        elif cmd == "intr_notify":
            if len(args) != 2:
                raise TraceError(f"{where}: intr_notify takes (event, sync id)")
            if args[0] not in device.DONE_EVENTS:
                raise TraceError(f"{where}: unknown interrupt event {args[0]} (known: "
                                 f"{', '.join(sorted(device.DONE_EVENTS))})")
            steps.append(WaitIrq(args[0], where=where))
            bit = 1 << device.DONE_EVENTS[args[0]]
            steps.append(Write(device.INTR_STATUS, bit.to_bytes(4, "little"), where=where))
            layers += 1
        elif cmd == "check_crc":
            if len(args) != 5:
                raise TraceError(f"{where}: check_crc takes (sync id, memory, address, size, "
                                 "crc)")
            addr, size, crc = (_int(a, where) for a in args[2:])
            passed = _crc_result(args[0], addr, size, crc, crc, where)  # the same each run
            steps.append(Check(functools.partial(
                _check_crc, sync=args[0], address=addr, size=size, crc=crc, where=where,
                passed=passed, kept=[None]), where=where,
                quiet=True))  # the checks read with the debugger's read (Step.quiet)
        elif cmd == "check_file":
            _, _, records = check_file_bytes(cfg, args, where, min(MAX_FILE, budget))
            budget -= sum(len(d) for _, d in records)
            steps.append(Check(functools.partial(_check_file, sync=args[0], records=records,
                                                 where=where), where=where, quiet=True))
        elif cmd == "check_nothing":
            steps.append(Check(lambda hp, w=where: CheckResult(True, f"check_nothing  [{w}]"),
                               where=where, quiet=True))
        else:
            raise TraceError(f"{where}: unknown trace command {cmd}")
    if not steps:
        raise TraceError(f"{cfg}: {'empty file' if not text.strip() else 'only comments'}, "
                         "not a trace (no reg_write, mem_init or mem_load command)")
    steps.append(Check(lambda hp: _ignored_writes(hp), where=cfg.name, quiet=True))
    return HostProgram(cfg.stem, steps, summary=f"{cfg.name}: NVDLA trace, {len(steps)} steps, "
                       f"{layers} interrupt waits", total_units=layers or None)


def _ignored_writes(hp: HostProgram) -> CheckResult:
    """Writes the hardware ignores (read-only registers, busy groups): counted, not failed."""
    dev = hp.device
    ro = dict(dev.ro_writes)
    busy = dict(dev.regs.ignored_writes)
    parts = []
    if ro:
        parts.append(f"{sum(ro.values())} writes to read-only registers ignored "
                     f"({', '.join(sorted(ro)[:6])}{', ...' if len(ro) > 6 else ''})")
    if busy:
        parts.append(f"{sum(busy.values())} writes to busy register groups dropped "
                     f"({', '.join(sorted(busy)[:6])}{', ...' if len(busy) > 6 else ''})")
    return CheckResult(True, "; ".join(parts) if parts else "no writes ignored")
