"""target.xml and the memory-map XML, generated from the device description.

Register numbering (what ``p``/``P`` use): r0-r12, sp, lr, pc = 0-15 and xpsr = 25 as in the
classic Arm m-profile description (shared/reference/gdb-stub-anchors.md §2.2), so ``g`` carries
exactly those 17 registers; every accelerator register follows from 26 in description order and
is reached with ``p``/``P`` only.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from xml.sax.saxutils import quoteattr

from accelstub.devices.description import Description, Register, RegisterDef
from accelstub.devices.device import CORE_REGS

FIRST_DEVICE_REGNUM = 26
CORE_REGNUMS = {name: (25 if name == "xpsr" else i) for i, name in enumerate(CORE_REGS)}


@dataclass(frozen=True)
class RegEntry:
    regnum: int
    name: str
    bits: int
    register: Register | None  # None for the core view


def register_table(desc: Description) -> list[RegEntry]:
    table = [RegEntry(CORE_REGNUMS[n], n, 32, None) for n in CORE_REGS]
    for i, r in enumerate(desc.registers):
        table.append(RegEntry(FIRST_DEVICE_REGNUM + i, r.name, r.bits, r))
    return table


def _ident(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", s)


def _type_for(desc: Description, rdef: RegisterDef, kind: str, out: list[str]) -> str | None:
    """Emit <enum>/<flags> for a register definition; return its type id (None = plain uint)."""
    if len(rdef.fields) == 1 and rdef.fields[0].width == rdef.bits and not rdef.fields[0].enums:
        return None
    size = rdef.bits // 8
    tid = _ident(f"{desc.name}_{kind}_{rdef.type_id}")
    fields_xml = []
    for f in rdef.fields:
        ftype = "bool" if f.width == 1 else "uint32"
        if f.enums:
            eid = f"{tid}_{_ident(f.name)}"
            out.append(f'<enum id="{eid}" size="{size}">')
            for e in f.enums:
                out.append(f"  <evalue name={quoteattr(_ident(e.name))} value=\"{e.value}\"/>")
            out.append("</enum>")
            ftype = eid
        fields_xml.append(f'  <field name={quoteattr(_ident(f.name))} start="{f.lsb}" '
                          f'end="{f.msb}" type="{ftype}"/>')
    out.append(f'<flags id="{tid}" size="{size}">')
    out.extend(fields_xml)
    out.append("</flags>")
    return tid


def target_xml(desc: Description) -> str:
    out = ['<?xml version="1.0"?>', '<!DOCTYPE target SYSTEM "gdb-target.dtd">',
           '<target version="1.0">', "<architecture>arm</architecture>",
           '<feature name="org.gnu.gdb.arm.m-profile">']
    for name in CORE_REGS:
        rtype = {"sp": "data_ptr", "pc": "code_ptr"}.get(name, "uint32")
        out.append(f'  <reg name="{name}" bitsize="32" regnum="{CORE_REGNUMS[name]}" '
                   f'type="{rtype}" group="general"/>')
    out.append("</feature>")
    regnum = FIRST_DEVICE_REGNUM
    for block in desc.blocks:
        out.append(f'<feature name="org.accelstub.{desc.name}.{_ident(block.name)}">')
        types: dict[str, str | None] = {}
        body: list[str] = []
        for reg in block.registers:
            key = reg.definition.type_id
            if key not in types:
                types[key] = _type_for(desc, reg.definition, block.kind_name, out)
            tid = types[key] or f"uint{reg.bits}"
            body.append(f'  <reg name="{reg.name}" bitsize="{reg.bits}" regnum="{regnum}" '
                        f'type="{tid}" group="{_ident(reg.group)}" save-restore="no"/>')
            regnum += 1
        out.extend(body)
        out.append("</feature>")
    out.append("</target>")
    return "\n".join(out) + "\n"


def memory_map_xml(desc: Description) -> str:
    """Every populated range as a ``ram`` region (adjacent ranges merged), so gdb reads all of
    them without ``set mem inaccessible-by-default off`` and refuses the holes itself."""
    ranges = sorted((s, e) for r in desc.regions for s, e in r.populated)
    merged: list[list[int]] = []
    for s, e in ranges:
        if merged and merged[-1][1] == s:
            merged[-1][1] = e
        else:
            merged.append([s, e])
    lines = ['<?xml version="1.0"?>',
             '<!DOCTYPE memory-map PUBLIC "+//IDN gnu.org//DTD GDB Memory Map V1.0//EN" '
             '"http://sourceware.org/gdb/gdb-memory-map.dtd">', "<memory-map>"]
    for s, e in merged:
        lines.append(f'  <memory type="ram" start="{s:#x}" length="{e - s:#x}"/>')
    lines.append("</memory-map>")
    return "\n".join(lines) + "\n"
