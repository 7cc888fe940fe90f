"""Device descriptions: the one source of truth for regions, registers and fields.

A description is a TOML file in ``configs/`` (format documented in ``docs/description-format.md``).
It is parsed once into frozen dataclasses; the register file, the bus, target.xml, the memory map,
the SVD export and the TUI are all generated from these objects, so they cannot drift apart.

Errors name the file and the entry (``configs/max78000.toml: block 'quadrant' register 'CTRL'
field 'cnn_en': ...``) so a typo in a 2000-register map is found in one step.
"""
from __future__ import annotations

import bisect
import functools
import hashlib
import os
import pickle
import re
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import DescriptionError, RegisterNotFound

#: a citation of the sources in a description's doc text: a document's bracket ("[UG-CNN: Table
#: 27-10]", docs/citations.md) or a parenthesised note holding a project id ("(R7#15)",
#: "(N8#3)"): provenance for the description's readers, left out of what users see (SVD,
#: describe, the TUI, gdb's target description)
_CITATION = re.compile(r"\s*\[(?:UG-CNN|U85-TRM|NE16|AI8X|NVDLA-CONV)\b[^\]]*\]"
                       r"|\s*\((?=[^()]*(?:\[(?:UG-CNN|U85-TRM|NE16|AI8X|NVDLA-CONV)\b"
                       r"|\b(?:Table\s\d|digest\b|[RAUNVC]\d+#|G-[A-Z]\d|[RAUCNV]§|EXT\b"
                       r"|RDL\b)))[^()]*\)")


def user_doc(text: str) -> str:
    """``text`` without its source citations (they stay in the TOML file)."""
    return re.sub(r"\s+([.,;:])", r"\1", _CITATION.sub("", text)).strip()

#: Access kinds of a field. ``rw`` read/write; ``ro`` read-only (writes ignored); ``wo`` write-only
#: (reads 0); ``w1c`` write 1 to clear; ``w1s`` write 1 to set; ``rsvd`` reserved (reads 0,
#: writes ignored).
ACCESS_KINDS = ("rw", "ro", "wo", "w1c", "w1s", "rsvd")

#: Region kinds. ``pseudo``: emulator-only registers; ``rom``: an emulator-only window the model
#: fills (the program window of NE16 and NVDLA, docs/design-notes.md "One pc per unit"): readable,
#: bus writes refused.
REGION_KINDS = ("registers", "ram", "weights", "bias", "tram", "pseudo", "rom")


@dataclass(frozen=True)
class EnumValue:
    value: int
    name: str
    doc: str = ""


@dataclass(frozen=True)
class Field:
    name: str
    lsb: int
    msb: int
    access: str = "rw"
    reset: int = 0
    doc: str = ""
    enums: tuple[EnumValue, ...] = ()
    text: str = ""  # "ascii": the field holds characters (see :meth:`text_of`)

    @property
    def width(self) -> int:
        return self.msb - self.lsb + 1

    def text_of(self, value: int) -> str | None:
        """A ``text = "ascii"`` field's value as the characters it holds, quoted: its bytes in
        memory (little-endian) order, the byte at ``lsb`` first, as ``x/s`` shows them, with
        non-printable bytes as \\xNN (NVDLA's S_NVDLA_HW_VERSION holds "100" that way: major
        0x31 = "1", minor 0x3030 = "00"). None for other fields."""
        if self.text != "ascii":
            return None
        raw = self.extract(value).to_bytes(self.width // 8, "little")
        return '"' + "".join(chr(b) if 0x20 <= b < 0x7F and b not in b'"\\' else f"\\x{b:02x}"
                             for b in raw) + '"'

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb

    def extract(self, value: int) -> int:
        return (value >> self.lsb) & ((1 << self.width) - 1)

    def enum_name(self, value: int) -> str | None:
        for e in self.enums:
            if e.value == value:
                return e.name
        return None


class FieldView:
    """A register value read by field name (issue 33 #1): ``view.mask_size`` is the bits the
    description gives POST's ``mask_size``, so decoders write no bit positions of their own.

    One subclass per register definition, generated once (:attr:`RegisterDef.view`) with one
    property per field, its shift and mask bound: a field read is one attribute access, cheap
    enough for decoders that run once per layer or job. ``raw`` is the whole value. A name the
    description lacks raises AttributeError naming the register and its fields."""

    __slots__ = ("raw",)
    register: str = ""  # the definition's name, set on each generated subclass

    def __init__(self, raw: int) -> None:
        self.raw = raw

    def __getattr__(self, name: str) -> int:
        raise AttributeError(f"register {self.register} has no field {name!r} (its fields: "
                             f"{', '.join(type(self).fields)})")

    def __repr__(self) -> str:
        return f"<{self.register} {self.raw:#x}>"

    #: the definition's fields by name (set on each generated subclass)
    fields: dict[str, Field] = {}


def _field_property(lsb: int, mask: int) -> property:
    return property(lambda self: (self.raw >> lsb) & mask)


@dataclass(frozen=True)
class RegisterDef:
    """One register as written in the description; ``count`` > 1 makes it an array."""

    name: str  # may hold "{i}" for arrays
    offset: int
    count: int = 1
    stride: int = 4
    doc: str = ""
    fields: tuple[Field, ...] = ()
    aliases: tuple[str, ...] = ()
    bits: int = 32
    banked: bool = False  # one copy per bank of the block (``banks``)

    @property
    def type_id(self) -> str:
        return self.name.replace("{i}", "n")

    @functools.cached_property
    def view(self) -> type[FieldView]:
        """The :class:`FieldView` class of this register: ``rdef.view(value).field_name``."""
        attrs: dict[str, Any] = {"__slots__": (), "register": self.type_id,
                                 "fields": {f.name: f for f in self.fields}}
        for f in self.fields:
            attrs[f.name] = _field_property(f.lsb, (1 << f.width) - 1)
        return type(f"{self.type_id}View", (FieldView,), attrs)

    def encode(self, **values: int) -> int:
        """The register value holding ``values`` by field name (other fields 0): how tests and
        builders write a register without bit positions. Unknown names and values wider than
        their field raise ValueError naming both."""
        out = 0
        fields = self.view.fields
        for name, v in values.items():
            f = fields.get(name)
            if f is None:
                raise ValueError(f"register {self.type_id} has no field {name!r} (its fields: "
                                 f"{', '.join(fields)})")
            if not 0 <= v < 1 << f.width:
                raise ValueError(f"{self.type_id}.{name}: {v:#x} does not fit in its {f.width} "
                                 f"bits ({f.msb}:{f.lsb})")
            out |= v << f.lsb
        return out


@dataclass(frozen=True)
class Register:
    """One architected register instance at one address."""

    name: str
    address: int
    definition: RegisterDef
    block: str  # block instance name
    group: str
    index: int = 0  # array index (0 for singles)
    aliases: tuple[str, ...] = ()
    bank: int | None = None  # banked registers: which bank of the slot at this address
    slot: str = ""  # banked registers: the name shared by the banks (prefix + register name)
    instance: int = 0  # which instance of its block (``{n}``: a MAX78000 quadrant)

    @functools.cached_property
    def key(self) -> int:
        """Storage key: the address, plus bank * 2**32 for banked registers (one value per
        bank at one address)."""
        return self.address if self.bank is None else self.address | (self.bank + 1) << 32

    @property
    def fields(self) -> tuple[Field, ...]:
        return self.definition.fields

    @property
    def doc(self) -> str:
        return self.definition.doc

    @property
    def bits(self) -> int:
        return self.definition.bits

    @property
    def reset(self) -> int:
        return sum((f.reset << f.lsb) for f in self.fields) & 0xFFFFFFFF

    def mask_of(self, *kinds: str) -> int:
        """Bit mask of the fields whose access is one of ``kinds``."""
        m = 0
        for f in self.fields:
            if f.access in kinds:
                m |= f.mask
        return m

    def decode(self, value: int) -> list[tuple[Field, int]]:
        return [(f, f.extract(value)) for f in self.fields]


@dataclass(frozen=True)
class BlockInstance:
    """A register block placed at one base address (a quadrant, the global block, ...)."""

    name: str
    base: int
    size: int
    group: str
    doc: str
    registers: tuple[Register, ...]
    kind_name: str  # name of the block definition (shared by all instances)
    banks: tuple[str, ...] = ()  # bank names of the block's banked registers
    bank_select: str = ""  # "REGISTER.field" (full register name) or "device"
    bank_lock: str = ""  # "REGISTER.field" (slot name): writes to a bank ignored while it is 1


@dataclass(frozen=True)
class Region:
    """An address window. ``populated`` lists the absolute [start, end) ranges that exist;
    everything else inside [base, base+size) is addressable but not populated (accesses fault).

    ``word_mask`` describes which bits of each 32-bit word a memory stores, repeating every
    ``4*len(word_mask)`` bytes (MRAM keeps 72 of every 128 bits, BRAM 8 of 32)."""

    name: str
    kind: str
    base: int
    size: int
    populated: tuple[tuple[int, int], ...]
    doc: str = ""
    word_mask: tuple[int, ...] = (0xFFFFFFFF,)
    block: str | None = None  # register block instance served by this window
    group: str = ""  # e.g. quadrant name, for the TUI and the memory map

    @property
    def end(self) -> int:
        return self.base + self.size


@dataclass(frozen=True)
class Description:
    name: str
    title: str
    source: str  # file the description came from
    doc: str
    cpu_name: str
    regions: tuple[Region, ...]
    blocks: tuple[BlockInstance, ...]
    registers: tuple[Register, ...] = field(default=())
    pc_doc: str = ""

    def __post_init__(self) -> None:
        regs = tuple(r for b in self.blocks for r in b.registers)
        object.__setattr__(self, "registers", regs)
        by_name: dict[str, Register] = {}
        by_addr: dict[int, Register] = {}
        banks: dict[int, list[Register]] = {}
        for r in regs:
            for n in (r.name, *r.aliases):
                if n in by_name:
                    raise DescriptionError(self.source, f"register {n!r}", "name is used twice")
                by_name[n] = r
            if r.bank:  # a further bank of a slot: same address by design
                banks[r.address].append(r)
                continue
            if r.address in by_addr:
                raise DescriptionError(
                    self.source, f"register {r.name!r}",
                    f"address {r.address:#010x} is already taken by {by_addr[r.address].name!r}")
            by_addr[r.address] = r
            if r.bank == 0:
                banks[r.address] = [r]
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_by_addr", by_addr)
        object.__setattr__(self, "_banks", {a: tuple(v) for a, v in banks.items()})
        object.__setattr__(self, "_slots", {v[0].slot: a for a, v in banks.items()})

    def register(self, name: str) -> Register:
        try:
            return self._by_name[name]  # type: ignore[attr-defined]
        except KeyError:
            names = self._by_name  # type: ignore[attr-defined]
            raise RegisterNotFound.among(name, self.name, names) from None

    def find_register(self, name: str) -> Register | None:
        return self._by_name.get(name)  # type: ignore[attr-defined]

    def register_at(self, address: int) -> Register | None:
        """The register at ``address`` (bank 0 of a banked slot)."""
        return self._by_addr.get(address)  # type: ignore[attr-defined]

    def banks_at(self, address: int) -> tuple[Register, ...]:
        """Every bank of the banked slot at ``address`` (empty if it is not banked)."""
        return self._banks.get(address, ())  # type: ignore[attr-defined]

    def slot_address(self, name: str) -> int | None:
        """Address of the banked slot ``name`` (the register name without a bank suffix)."""
        return self._slots.get(name)  # type: ignore[attr-defined]

    def block_of(self, reg: Register) -> BlockInstance:
        for b in self.blocks:
            if b.name == reg.block:
                return b
        raise KeyError(reg.block)

    def groups(self) -> list[str]:
        seen: list[str] = []
        for b in self.blocks:
            if b.group not in seen:
                seen.append(b.group)
        return seen


# --------------------------------------------------------------------------------------------
# Loader


def _int(v: Any, where: str, src: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise DescriptionError(src, where, f"expected an integer, got {v!r}")
    return v


def _bits(v: Any, where: str, src: str) -> tuple[int, int]:
    """Accept ``"7:4"``, ``"3"``, ``[7, 4]`` or an int; return (msb, lsb)."""
    try:
        if isinstance(v, int) and not isinstance(v, bool):
            return v, v
        if isinstance(v, str):
            parts = v.split(":")
            msb, lsb = int(parts[0]), int(parts[-1])
        else:
            msb, lsb = int(v[0]), int(v[-1])
    except (ValueError, TypeError, IndexError):
        raise DescriptionError(src, where, f"bits must look like '7:4' or '3', got {v!r}") from None
    if msb < lsb or lsb < 0 or msb > 63:
        raise DescriptionError(src, where, f"bad bit range {v!r}")
    return msb, lsb


def _check_keys(d: dict, allowed: Iterable[str], where: str, src: str) -> None:
    extra = set(d) - set(allowed)
    if extra:
        raise DescriptionError(src, where, f"unknown key(s) {sorted(extra)}")


def _parse_field(d: dict, reg_access: str, where: str, src: str) -> Field:
    if "name" not in d:
        raise DescriptionError(src, where, "field has no name")
    where = f"{where} field {d['name']!r}"
    _check_keys(d, ("name", "bits", "access", "reset", "doc", "enum", "text"), where, src)
    if "bits" not in d:
        raise DescriptionError(src, where, "missing 'bits'")
    msb, lsb = _bits(d["bits"], where, src)
    access = d.get("access", reg_access)
    if access not in ACCESS_KINDS:
        raise DescriptionError(src, where, f"access {access!r} is not one of {ACCESS_KINDS}")
    reset = _int(d.get("reset", 0), where, src)
    if reset >> (msb - lsb + 1):
        raise DescriptionError(src, where, f"reset {reset:#x} does not fit in bits {msb}:{lsb}")
    enums = []
    for e in d.get("enum", []):
        if not (isinstance(e, list) and len(e) in (2, 3)):
            raise DescriptionError(src, where, f"enum entries are [value, name(, doc)], got {e!r}")
        enums.append(EnumValue(_int(e[0], where, src), str(e[1]),
                               user_doc(str(e[2])) if len(e) > 2 else ""))
    text = d.get("text", "")
    if text not in ("", "ascii") or text and ((msb - lsb + 1) % 8 or enums):
        raise DescriptionError(src, where, f"text {text!r}: only \"ascii\", for a field of whole "
                               "bytes without enum")
    return Field(d["name"], lsb, msb, access, reset, user_doc(d.get("doc", "")), tuple(enums),
                 text)


def _parse_register(d: dict, where: str, src: str) -> RegisterDef:
    if "name" not in d:
        raise DescriptionError(src, where, "register has no name")
    where = f"{where} register {d['name']!r}"
    _check_keys(d, ("name", "offset", "count", "stride", "doc", "field", "access", "aliases",
                    "reset", "bits", "banked"), where, src)
    if "offset" not in d:
        raise DescriptionError(src, where, "missing 'offset'")
    access = d.get("access", "rw")
    if access not in ACCESS_KINDS:
        raise DescriptionError(src, where, f"access {access!r} is not one of {ACCESS_KINDS}")
    nbits = _int(d.get("bits", 32), where, src)
    fields = tuple(_parse_field(f, access, where, src) for f in d.get("field", []))
    if not fields:  # a register without fields is one field spanning it
        fields = (Field("value", 0, nbits - 1, access, _int(d.get("reset", 0), where, src)),)
    used = 0
    for f in fields:
        if f.mask & used:
            raise DescriptionError(src, f"{where} field {f.name!r}", "overlaps another field")
        if f.msb >= nbits:
            raise DescriptionError(src, f"{where} field {f.name!r}", f"beyond bit {nbits - 1}")
        used |= f.mask
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise DescriptionError(src, where, "two fields have the same name")
    for n in names:  # decoders read fields as attributes of a FieldView
        if not n.isidentifier() or n in ("raw", "register", "fields"):
            raise DescriptionError(src, f"{where} field {n!r}", "a field name is an identifier "
                                   "other than raw, register and fields")
    rdef = RegisterDef(d["name"], _int(d["offset"], where, src),
                       _int(d.get("count", 1), where, src),
                       _int(d.get("stride", 4), where, src), user_doc(d.get("doc", "")), fields,
                       tuple(d.get("aliases", ())), nbits, bool(d.get("banked", False)))
    if "reset" in d and "field" in d:
        computed = sum(f.reset << f.lsb for f in fields)
        if computed != d["reset"]:
            raise DescriptionError(src, where, f"reset {d['reset']:#x} disagrees with the field "
                                   f"resets, which give {computed:#x}")
    if rdef.count > 1 and "{i}" not in rdef.name:
        raise DescriptionError(src, where, "an array register needs '{i}' in its name")
    return rdef


def _bank_keys(b: dict, rdefs: list[RegisterDef], where: str, src: str
               ) -> tuple[tuple[str, ...], str, str]:
    """A block's ``banks`` (names), ``bank_select`` ("REGISTER.field" of an unbanked register of
    the block, or "device") and optional ``bank_lock`` ("REGISTER.field" of a banked register):
    checked for shape here, the named fields once the block is built."""
    banks = tuple(str(x) for x in b.get("banks", ()))
    select, lock = b.get("bank_select", ""), b.get("bank_lock", "")
    banked = any(r.banked for r in rdefs)
    if banked != bool(banks) or (len(banks) == 1):
        raise DescriptionError(src, where, "a block with banked registers needs 'banks' with at "
                               "least two names, and 'banks' needs a register with banked = true")
    if banks and not select:
        raise DescriptionError(src, where, "banked registers need 'bank_select' "
                               "(\"REGISTER.field\" or \"device\")")
    if len(set(banks)) != len(banks):
        raise DescriptionError(src, where, f"bank names repeat: {list(banks)}")
    for key, value in (("bank_select", select), ("bank_lock", lock)):
        if value and value != "device" and value.count(".") != 1:
            raise DescriptionError(src, where, f"{key} must be \"REGISTER.field\", not {value!r}")
    if lock == "device":
        raise DescriptionError(src, where, "bank_lock names a field (\"REGISTER.field\")")
    return banks, select, lock


def _check_bank_fields(blk: BlockInstance, where: str, src: str) -> None:
    """The selector is a field of an unbanked register of the block wide enough for every bank;
    the lock is a field of a banked register of the block."""
    names = {r.name: r for r in blk.registers}
    slots = {r.slot: r for r in blk.registers if r.bank is not None}
    if blk.bank_select and blk.bank_select != "device":
        reg_name, fname = blk.bank_select.split(".")
        reg = names.get(reg_name)
        f = next((f for f in reg.fields if f.name == fname), None) if reg else None
        if f is None or reg.bank is not None:
            raise DescriptionError(src, where, f"bank_select {blk.bank_select!r} is not a field of "
                                   "an unbanked register of the block")
        if (1 << f.width) < len(blk.banks):
            raise DescriptionError(src, where, f"bank_select field {fname!r} cannot name "
                                   f"{len(blk.banks)} banks")
    if blk.bank_lock:
        reg_name, fname = blk.bank_lock.split(".")
        reg = slots.get(reg_name)
        if reg is None or not any(f.name == fname for f in reg.fields):
            raise DescriptionError(src, where, f"bank_lock {blk.bank_lock!r} is not a field of a "
                                   "banked register of the block")


def _expand(template: str, **kw: int) -> str:
    out = template
    for k, v in kw.items():
        out = out.replace("{" + k + "}", str(v))
    return out


def parse_description(data: dict, source: str) -> Description:
    """Turn the parsed TOML of a description into a :class:`Description`."""
    src = source
    _check_keys(data, ("device", "block", "region"), "top level", src)
    dev = data.get("device")
    if not isinstance(dev, dict) or "name" not in dev:
        raise DescriptionError(src, "[device]", "missing table with a 'name'")
    _check_keys(dev, ("name", "title", "doc", "cpu_name", "pc_doc"), "[device]", src)

    blocks: list[BlockInstance] = []
    block_names: set[str] = set()
    for bi, b in enumerate(data.get("block", [])):
        where = f"block #{bi}"
        if "name" not in b:
            raise DescriptionError(src, where, "block has no name")
        where = f"block {b['name']!r}"
        _check_keys(b, ("name", "base", "size", "instances", "stride", "group", "doc", "prefix",
                        "register", "banks", "bank_select", "bank_lock"), where, src)
        for key in ("base", "size"):
            if key not in b:
                raise DescriptionError(src, where, f"missing {key!r}")
        rdefs = [_parse_register(r, where, src) for r in b.get("register", [])]
        banks, select, lock = _bank_keys(b, rdefs, where, src)
        n_inst = _int(b.get("instances", 1), where, src)
        for n in range(n_inst):
            base = _int(b["base"], where, src) + n * _int(b.get("stride", 0), where, src)
            iname = _expand(b["name"], n=n)
            if iname in block_names:
                raise DescriptionError(src, where, f"instance name {iname!r} repeats; use '{{n}}'")
            block_names.add(iname)
            group = _expand(b.get("group", iname), n=n)
            prefix = _expand(b.get("prefix", ""), n=n)
            regs: list[Register] = []
            for rd in rdefs:
                for i in range(rd.count):
                    off = rd.offset + i * rd.stride
                    if off + rd.bits // 8 > b["size"]:
                        raise DescriptionError(src, f"{where} register {rd.name!r}",
                                               f"offset {off:#x} is outside the block size "
                                               f"{b['size']:#x}")
                    name = prefix + _expand(rd.name, i=i, n=n)
                    aliases = tuple(_expand(a, i=i, n=n) for a in rd.aliases)
                    if not rd.banked:
                        regs.append(Register(name, base + off, rd, iname, group, i, aliases,
                                             instance=n))
                        continue
                    for k, bank in enumerate(banks):  # one register per bank, same address
                        regs.append(Register(f"{name}_{bank}", base + off, rd, iname, group, i,
                                             tuple(f"{a}_{bank}" for a in aliases), k, name, n))
            select_full = select if select in ("", "device") else prefix + select
            blk = BlockInstance(iname, base, b["size"], group,
                                user_doc(_expand(b.get("doc", ""), n=n)),
                                tuple(regs), b["name"], banks, select_full,
                                prefix + lock if lock else "")
            _check_bank_fields(blk, where, src)
            blocks.append(blk)

    regions: list[Region] = []
    for ri, r in enumerate(data.get("region", [])):
        where = f"region #{ri}"
        if "name" not in r:
            raise DescriptionError(src, where, "region has no name")
        where = f"region {r['name']!r}"
        _check_keys(r, ("name", "kind", "base", "size", "populated", "doc", "word_mask", "block",
                        "repeat", "group"), where, src)
        kind = r.get("kind", "ram")
        if kind not in REGION_KINDS:
            raise DescriptionError(src, where, f"kind {kind!r} is not one of {REGION_KINDS}")
        for key in ("base", "size"):
            if key not in r:
                raise DescriptionError(src, where, f"missing {key!r}")
        repeats = r.get("repeat", [])
        # repeat = [["q", 4, 0x400000], ["p", 16, 0x4000]]: a cartesian product of instances
        combos: list[tuple[dict[str, int], int]] = [({}, 0)]
        for rep in repeats:
            if not (isinstance(rep, list) and len(rep) == 3):
                raise DescriptionError(src, where, f"repeat entries are [var, count, stride], "
                                       f"got {rep!r}")
            var, count, stride = rep
            combos = [({**vars_, var: k}, off + k * stride) for vars_, off in combos
                      for k in range(count)]
        for vars_, off in combos:
            base = _int(r["base"], where, src) + off
            size = _int(r["size"], where, src)
            pops = r.get("populated", [[0, size]])
            populated = []
            for p in pops:
                if not (isinstance(p, list) and len(p) == 2 and 0 <= p[0] < p[1] <= size):
                    raise DescriptionError(src, where, f"populated range {p!r} must be "
                                           f"[start, end) inside the size {size:#x}")
                populated.append((base + p[0], base + p[1]))
            wm = tuple(_int(x, where, src) for x in r.get("word_mask", [0xFFFFFFFF]))
            block = _expand(r["block"], **vars_) if "block" in r else None
            if block is not None and block not in block_names:
                raise DescriptionError(src, where, f"names block {block!r}, which does not exist")
            regions.append(Region(_expand(r["name"], **vars_), kind, base, size, tuple(populated),
                                  user_doc(_expand(r.get("doc", ""), **vars_)), wm, block,
                                  _expand(r.get("group", ""), **vars_)))
    regions.sort(key=lambda x: x.base)
    for a, b in zip(regions, regions[1:]):
        if b.base < a.end:
            raise DescriptionError(src, f"region {b.name!r}", f"overlaps region {a.name!r}")
    # every register must lie in a populated part of a registers region (regions do not
    # overlap, nor do a region's populated ranges: one sorted lookup per register)
    spans = sorted((s, e) for rg in regions if rg.kind in ("registers", "pseudo")
                   for s, e in rg.populated)
    starts = [s for s, _ in spans]
    for blk in blocks:
        for reg in blk.registers:
            k = bisect.bisect_right(starts, reg.address) - 1
            if k < 0 or reg.address >= spans[k][1]:
                raise DescriptionError(src, f"block {blk.kind_name!r} register {reg.name!r}",
                                       f"address {reg.address:#010x} is in no populated "
                                       f"registers region")
    return Description(dev["name"], dev.get("title", dev["name"]), src,
                       user_doc(dev.get("doc", "")),
                       dev.get("cpu_name", dev["name"]), tuple(regions), tuple(blocks),
                       pc_doc=user_doc(dev.get("pc_doc", "")))


def load_description(name_or_path: str | Path) -> Description:
    """Load ``configs/<name>.toml`` (a bundled device) or a path to a description file."""
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.exists():
        return _parse(p.read_text(encoding="utf-8"), str(p))
    return _bundled(str(name_or_path))


@functools.cache
def _bundled(name: str) -> Description:
    """A bundled description, parsed once per process (descriptions are immutable; every
    device opened afterwards shares it)."""
    try:
        res = resources.files("accelstub.configs").joinpath(f"{name}.toml")
        text = res.read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError):
        raise DescriptionError(name, "file", "no such description") from None
    return _parse(text, f"configs/{name}.toml")


def _parse(text: str, source: str) -> Description:
    cached = _cache_path(source)
    if cached is None:
        return _parse_toml(text, source)
    key = _cache_key(text, source)
    desc = _cache_read(cached, key)
    if desc is None:
        desc = _parse_toml(text, source)
        _cache_write(cached, key, desc)
    return desc


def _parse_toml(text: str, source: str) -> Description:
    import tomllib  # here: a run whose descriptions are all kept never imports the parser

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise DescriptionError(source, "TOML syntax", str(e)) from None
    return parse_description(data, source)


# -- the parsed descriptions kept on disk ---------------------------------------------------------
# Why: parsing a description (TOML, then the checks and the expansion of repeats) cost 4-35 ms
# of each `accelstub run`'s ~0.1 s above Python's and numba's start (NVDLA's 118 KB map the
# most; issue 31 #5), and unpickling the result costs a tenth of that. The cache lives in
# accelstub's per-user kernel cache folder (NUMBA_CACHE_DIR, which emu/kernel_cache.py sets in
# every process that runs kernels), so a process that runs none (describe, svd) parses as
# before and writes nothing. One file per description source, keyed on the TOML text itself,
# the source name, this module's file (the classes pickled are defined here) and Python's
# version: an edited TOML or a changed parser is parsed again and the file replaced. Nothing in
# the cache is trusted beyond that key: a file that does not read back is a miss.
_CACHE_FOLDER = "accelstub-descriptions"


def _cache_path(source: str) -> Path | None:
    """Where the parsed description of ``source`` is kept, or None (no kernel cache folder)."""
    folder = os.environ.get("NUMBA_CACHE_DIR")
    if not folder:
        return None
    name = hashlib.blake2b(source.encode(), digest_size=12).hexdigest()
    return Path(folder) / _CACHE_FOLDER / f"{name}.pickle"


@functools.cache
def _module_stamp() -> bytes:
    st = os.stat(__file__)
    return f"{st.st_mtime_ns}:{st.st_size}:{sys.version}:{pickle.HIGHEST_PROTOCOL}".encode()


def _cache_key(text: str, source: str) -> bytes:
    """A hex digest of everything the parsed result depends on, one line (the file's first)."""
    h = hashlib.blake2b(digest_size=20)
    for part in (_module_stamp(), source.encode(), text.encode()):
        h.update(len(part).to_bytes(8, "little") + part)
    return h.hexdigest().encode() + b"\n"


def _cache_read(path: Path, key: bytes) -> Description | None:
    try:
        with open(path, "rb") as f:
            if f.read(len(key)) != key:
                return None
            desc = pickle.load(f)
    except Exception:  # missing, half-written by a crash, unreadable: a miss, parsed again
        return None
    return desc if isinstance(desc, Description) else None


def _cache_write(path: Path, key: bytes, desc: Description) -> None:
    """Write atomically (a process that reads at the same time sees the old file or the new
    one; each writing thread its own temporary file); a folder that cannot be written leaves
    the description uncached."""
    try:
        blob = key + pickle.dumps(desc, protocol=pickle.HIGHEST_PROTOCOL)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, path)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass  # read-only cache folder, or a description holding something unpicklable
