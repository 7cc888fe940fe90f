"""The TUI's view of a stub: two RSP connections and what they tell about the target.

``ctl`` runs the target (step, continue, halt, reset, register writes, breakpoints); it is used
from one worker at a time, and never while a continue is pending. ``poll`` serves every read
(registers, memory, status) and may be used while the target runs; it also carries the
``%Stop`` notifications of stops that other clients (gdb) cause.

Everything here is plain Python with no Textual import, so it can be tested and benchmarked on
its own. The target description (target.xml) and the memory map are parsed here.
"""
from __future__ import annotations

import json
import re
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from accelstub.devices.tensors import TensorSpec, read_tensor
from accelstub.stub.client import RspClient, RspError
from accelstub.stub.commands import tensor_from_data

__all__ = ["RspError", "FieldInfo", "RegInfo", "BlockInfo", "TargetDescription", "Unit",
           "parse_target_xml", "parse_memory_map", "parse_regions", "parse_units", "parse_status",
           "Target"]


@dataclass(frozen=True)
class FieldInfo:
    name: str
    lsb: int
    msb: int
    enums: tuple[tuple[int, str], ...] = ()

    @property
    def width(self) -> int:
        return self.msb - self.lsb + 1

    def extract(self, value: int) -> int:
        return (value >> self.lsb) & ((1 << self.width) - 1)

    def describe(self, value: int) -> str:
        v = self.extract(value)
        for ev, en in self.enums:
            if ev == v:
                return en
        return str(v) if self.width == 1 else f"{v:#x}"

    @property
    def bits(self) -> str:
        return f"{self.lsb}" if self.width == 1 else f"{self.msb}:{self.lsb}"


@dataclass(frozen=True)
class RegInfo:
    name: str
    regnum: int
    bits: int
    group: str
    block: str
    fields: tuple[FieldInfo, ...] = ()


@dataclass
class BlockInfo:
    name: str
    feature: str
    registers: list[RegInfo] = field(default_factory=list)


@dataclass
class TargetDescription:
    device: str
    blocks: list[BlockInfo]

    def __post_init__(self) -> None:
        self.by_name = {r.name: r for b in self.blocks for r in b.registers}

    def register(self, name: str) -> RegInfo | None:
        return self.by_name.get(name)


def parse_target_xml(text: str) -> TargetDescription:
    """Blocks (one per <feature>), registers and their <flags>/<enum> fields."""
    root = ET.fromstring(text)
    device = ""
    blocks: list[BlockInfo] = []
    for feat in root.iter("feature"):
        fname = feat.get("name", "")
        enums: dict[str, tuple[tuple[int, str], ...]] = {}
        flags: dict[str, tuple[FieldInfo, ...]] = {}
        for en in feat.iter("enum"):
            enums[en.get("id", "")] = tuple((int(ev.get("value", "0"), 0), ev.get("name", ""))
                                            for ev in en.iter("evalue"))
        for fl in feat.iter("flags"):
            fields = []
            for f in fl.iter("field"):
                start, end = int(f.get("start", "0")), int(f.get("end", f.get("start", "0")))
                fields.append(FieldInfo(f.get("name", ""), start, end,
                                        enums.get(f.get("type", ""), ())))
            flags[fl.get("id", "")] = tuple(sorted(fields, key=lambda x: -x.lsb))
        if fname.startswith("org.accelstub."):
            parts = fname.split(".")
            device = device or parts[2]
            bname = ".".join(parts[3:]) or fname
        elif "arm" in fname:
            bname = "core"
        else:
            bname = fname.rsplit(".", 1)[-1]
        block = BlockInfo(bname, fname)
        for reg in feat.iter("reg"):
            block.registers.append(RegInfo(reg.get("name", ""), int(reg.get("regnum", "0")),
                                           int(reg.get("bitsize", "32")),
                                           reg.get("group", ""), bname,
                                           flags.get(reg.get("type", ""), ())))
        blocks.append(block)
    return TargetDescription(device or "target", blocks)


def parse_memory_map(text: str) -> list[tuple[int, int, str]]:
    """[(start, end, type)] from the qXfer memory-map XML."""
    root = ET.fromstring(text)
    out = []
    for m in root.iter("memory"):
        start, length = int(m.get("start", "0"), 0), int(m.get("length", "0"), 0)
        out.append((start, start + length, m.get("type", "ram")))
    return sorted(out)


def parse_regions(text: str) -> list[tuple[int, int, str]]:
    """[(start, end, name)] from ``monitor regions`` (lines ``0xSTART 0xEND name kind``)."""
    return [(s, e, name) for s, e, name, _ in _region_lines(text)]


def data_memory(text: str) -> int | None:
    """Start of the device's first data memory (kind ``ram``) in ``monitor regions``: where
    tensors live (MAX78000 data SRAM, Ethos-U85 SRAM), for the Tensor view."""
    return next((s for s, _, _, kind in _region_lines(text) if kind == "ram"), None)


def _region_lines(text: str) -> list[tuple[int, int, str, str]]:
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].startswith("0x"):
            try:
                out.append((int(parts[0], 16), int(parts[1], 16), parts[2],
                            parts[3] if len(parts) > 3 else ""))
            except ValueError:
                continue
    return out


@dataclass(frozen=True)
class Unit:
    address: int
    label: str
    summary: str


_UNIT_RE = re.compile(r"^\s*(?:=>\s*)?0x([0-9a-fA-F]{1,16})\s+([^:]+):\s?(.*)$")


def parse_units(text: str) -> list[Unit]:
    """``monitor units`` output: one ``0x%08x <label>: <summary>`` line per unit, the one at
    pc marked ``=>`` (the view marks pc itself, from the status), then the end address
    (label ``end``: not a unit; the view says when pc is past the last unit)."""
    out = []
    for line in text.splitlines():
        m = _UNIT_RE.match(line)
        if m and m.group(2).strip() != "end":
            out.append(Unit(int(m.group(1), 16), m.group(2).strip(), m.group(3).strip()))
    return out


def parse_status(text: str) -> dict[str, str]:
    """``monitor status`` output: ``key: value`` lines."""
    out = {}
    for line in text.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            if k.strip():
                out[k.strip()] = v.strip()
    return out


def parse_int(value: str) -> int | None:
    try:
        return int(value.split()[0], 0)
    except (ValueError, IndexError):
        return None


def describe_stop(reply: str) -> str:
    """A stop reply (``T05...``/``S02``/``W00``) as words."""
    if not reply:
        return ""
    kind = reply[0]
    if kind in "TS" and len(reply) >= 3:
        sig = int(reply[1:3], 16)
        m = re.search(r"(watch|rwatch|awatch):([0-9a-fA-F]+)", reply)
        if m:
            return f"{m.group(1)}point hit at {int(m.group(2), 16):#010x}"
        if "replaylog:begin" in reply:
            return "start of the reverse-execution history"
        return {5: "SIGTRAP (step/breakpoint)", 2: "SIGINT (halted)"}.get(sig, f"signal {sig}")
    if kind == "W":
        return "exited"
    if kind == "E":
        return f"error {reply}"
    return reply


class Target:
    """Two RSP connections to one stub and the parsed target description."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.host, self.port = host, port
        self._stop_listener: Callable[[str], None] | None = None
        self.ctl = RspClient(host, port, timeout=timeout)
        try:
            self.poll = RspClient(host, port, timeout=timeout, on_stop=self._notified)
            xml = self.poll.target_xml()
            self.desc = parse_target_xml(xml)
            # the control client writes registers by name: share the parsed table with it
            self.ctl._regs = {r.name: (r.regnum, r.bits) for b in self.desc.blocks
                              for r in b.registers}
            self.memory = parse_memory_map(self.poll.memory_map())
            try:  # names are a nicety: a stub without `monitor regions` still works
                regions = self.poll.monitor("regions")
            except RspError:
                regions = ""
            self.region_names = parse_regions(regions)
            #: where the Tensor view opens: the device's own data memory (else its first RAM)
            self.data_address = data_memory(regions) or next(
                (s for s, _, kind in self.memory if kind == "ram"), 0)
        except BaseException:
            self.ctl.close()
            raise
        self.status_mode = "status"  # or "fallback" once "monitor status" proves unknown
        self.units_note = ""
        self.lock = threading.Lock()

    # -- notifications --------------------------------------------------------------------
    def set_stop_listener(self, fn: Callable[[str], None] | None) -> None:
        self._stop_listener = fn

    def _notified(self, reply: str) -> None:
        fn = self._stop_listener
        if fn is not None:
            fn(reply)

    def close(self) -> None:
        self._stop_listener = None
        for c in (self.ctl, self.poll):
            c.close()

    # -- reads (poll connection) -------------------------------------------------------------
    def read_reg(self, reg: RegInfo) -> int | None:
        reply = self.poll.request(f"p{reg.regnum:x}")
        if not reply or reply.startswith(b"E"):
            return None
        try:
            return int.from_bytes(bytes.fromhex(reply.decode()), "little")
        except ValueError:
            return None

    def read_regs(self, regs: list[RegInfo]) -> dict[str, int | None]:
        return {r.name: self.read_reg(r) for r in regs}

    def read_named(self, *names: str) -> dict[str, int | None]:
        return {n: self.read_reg(r) for n in names if (r := self.desc.register(n)) is not None}

    def region_name(self, addr: int) -> str | None:
        for s, e, name in self.region_names:
            if s <= addr < e:
                return name
        return None

    def readable(self, addr: int) -> tuple[int, int] | None:
        for s, e, _ in self.memory:
            if s <= addr < e:
                return s, e
        return None

    def read_memory(self, addr: int, length: int) -> list[int | None]:
        """Bytes at [addr, addr+length); None where the target has no memory."""
        out: list[int | None] = []
        a, end = addr, addr + length
        while a < end:
            rng = self.readable(a)
            if rng is None:
                nxt = min((s for s, _, _ in self.memory if s > a), default=end)
                nxt = min(nxt, end)
                out += [None] * (nxt - a)
                a = nxt
                continue
            n = min(end, rng[1]) - a
            try:
                data = self.poll.read_memory(a, n)
                out += list(data)
            except RspError as e:
                if "closed" in str(e):
                    raise
                out += [None] * n
            a += n
        return out

    def units(self) -> list[Unit]:
        try:
            units = parse_units(self.poll.monitor("units"))
            self.units_note = "" if units else "the stub listed no units"
            return units
        except RspError as e:
            if "closed" in str(e):
                raise
            self.units_note = "'monitor units' is not available on this stub"
            return []

    def json(self, what: str) -> object:
        """``monitor json WHAT``: the stub's machine-readable state (one JSON line)."""
        return json.loads(self.poll.monitor(f"json {what}"))

    def unit_tensors(self, index: int) -> tuple[TensorSpec, ...]:
        """The tensors unit ``index`` declares (the device's own declaration, sent by the
        stub), so the Tensor view knows no device."""
        return tuple(tensor_from_data(d) for d in self.json(f"tensors {index}"))  # type: ignore

    def read_tensor(self, spec: TensorSpec) -> np.ndarray:
        """A declared tensor in its toolchain's layout, read with ``m`` packets."""
        return read_tensor(spec, self.poll.read_memory)

    def pc(self) -> int | None:
        reg = self.desc.register("pc")
        return self.read_reg(reg) if reg is not None else None

    def status(self) -> dict[str, str]:
        """State and counters: ``monitor status`` when the stub has it, else ``monitor poll``
        and the emulator's EMU_* registers."""
        if self.status_mode == "status":
            try:
                st = parse_status(self.poll.monitor("status"))
                if "state" in st:
                    return st
            except RspError as e:
                if "closed" in str(e):
                    raise
            self.status_mode = "fallback"
        st: dict[str, str] = {}
        text = self.poll.monitor("poll")
        if "running" in text:
            st["state"] = "running"
        else:
            st["state"] = "halted"
            m = re.search(r"halted due to ([^,]+)", text)
            if m:
                st["reason"] = m.group(1).strip()
        regs = self.read_named("EMU_PC", "EMU_UNIT", "EMU_UNITS", "EMU_CYCLES_LO", "EMU_STATE")
        if regs.get("EMU_PC") is not None:
            st["pc"] = f"{regs['EMU_PC']:#010x}"
        else:
            pc = self.read_reg(self.desc.register("pc")) if self.desc.register("pc") else None
            if pc is not None:
                st["pc"] = f"{pc:#010x}"
        for key, name in (("unit", "EMU_UNIT"), ("units", "EMU_UNITS"),
                          ("cycles", "EMU_CYCLES_LO")):
            if regs.get(name) is not None:
                st[key] = str(regs[name])
        if regs.get("EMU_STATE") == 2:
            st["finished"] = "yes"
        for reg, fld in self.irq_fields():
            v = self.read_reg(reg)
            if v is not None:
                st[f"irq.{reg.name}"] = str(fld.extract(v))
        return st

    def irq_fields(self) -> list[tuple[RegInfo, FieldInfo]]:
        """Interrupt-request fields (named ``*irq*``) of the description, for the fallback."""
        if not hasattr(self, "_irq_fields"):
            self._irq_fields = [(r, f) for b in self.desc.blocks for r in b.registers
                                for f in r.fields if "irq" in f.name.lower()][:16]
        return self._irq_fields
