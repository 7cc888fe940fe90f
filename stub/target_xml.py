"""target.xml and the memory-map XML, generated from the device description.

Register numbering (what ``p``/``P`` use): r0-r12, sp, lr, pc = 0-15 and xpsr = 25 as in the
classic Arm m-profile description (gdb's features/arm/arm-m-profile.xml), so ``g`` carries
exactly those 17 registers; every accelerator register follows from 26 in description order and
is reached with ``p``/``P`` only.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

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
    # imported here: xml.sax.saxutils imports urllib.request and ssl (~40 ms), which a command
    # that never serves target.xml (`accelstub run`, issue 31 #5) would pay at start
    from xml.sax.saxutils import quoteattr

    f0 = rdef.fields[0]
    if len(rdef.fields) == 1 and f0.width == rdef.bits and not f0.enums and not f0.text:
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
        elif f.text:
            # gdb prints a flags field as a decimal number unless its type is an enum: an enum
            # naming the characters of the reset value (a read-only field's only value) makes
            # `info registers` and the TUI show "00" where they showed 12336
            eid = f"{tid}_{_ident(f.name)}"
            out.append(f'<enum id="{eid}" size="{size}">')
            out.append(f"  <evalue name={quoteattr(f.text_of(f.reset << f.lsb))} "
                       f'value="{f.reset}"/>')
            out.append("</enum>")
            ftype = eid
        fields_xml.append(f'  <field name={quoteattr(_ident(f.name))} start="{f.lsb}" '
                          f'end="{f.msb}" type="{ftype}"/>')
    out.append(f'<flags id="{tid}" size="{size}">')
    out.extend(fields_xml)
    out.append("</flags>")
    return tid


def group_order(groups: list[str]) -> list[str]:
    """``groups`` in description order, except that a group comes before every group whose
    name it begins (nvdla: sdp before sdp_rdma). gdb lists groups in the order their first
    register appears in target.xml, and ``info registers NAME`` takes the first group whose
    name starts with NAME (gdb's registers_info), so an exact name is reachable only if no
    longer name that it begins comes first."""
    order: list[str] = []
    for g in groups:
        at = next((i for i, h in enumerate(order) if h.startswith(g)), len(order))
        order.insert(at, g)
    return order


def target_xml(desc: Description) -> str:
    out = ['<?xml version="1.0"?>', '<!DOCTYPE target SYSTEM "gdb-target.dtd">',
           '<target version="1.0">', "<architecture>arm</architecture>",
           '<feature name="org.gnu.gdb.arm.m-profile">']
    for name in CORE_REGS:
        rtype = {"sp": "data_ptr", "pc": "code_ptr"}.get(name, "uint32")
        out.append(f'  <reg name="{name}" bitsize="32" regnum="{CORE_REGNUMS[name]}" '
                   f'type="{rtype}" group="general"/>')
    out.append("</feature>")
    regnums = {e.name: e.regnum for e in register_table(desc) if e.register is not None}
    rank = {g: i for i, g in enumerate(group_order([_ident(g) for g in desc.groups()]))}
    # features in group order (see group_order); regnums stay those of description order
    for block in sorted(desc.blocks, key=lambda b: rank[_ident(b.group)]):
        out.append(f'<feature name="org.accelstub.{desc.name}.{_ident(block.name)}">')
        types: dict[str, str | None] = {}
        body: list[str] = []
        for reg in block.registers:
            key = reg.definition.type_id
            if key not in types:
                types[key] = _type_for(desc, reg.definition, block.kind_name, out)
            tid = types[key] or f"uint{reg.bits}"
            body.append(f'  <reg name="{reg.name}" bitsize="{reg.bits}" '
                        f'regnum="{regnums[reg.name]}" type="{tid}" group="{_ident(reg.group)}" '
                        'save-restore="no"/>')
        out.extend(body)
        out.append("</feature>")
    out.append("</target>")
    return "\n".join(out) + "\n"


def memory_ranges(desc: Description) -> list[tuple[int, int]]:
    """The memory map's regions: every populated range ([start, end)), adjacent ones merged,
    in address order (what qXfer:memory-map lists and what bounds a Z packet's range)."""
    ranges = sorted((s, e) for r in desc.regions for s, e in r.populated)
    merged: list[list[int]] = []
    for s, e in ranges:
        if merged and merged[-1][1] == s:
            merged[-1][1] = e
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def memory_map_xml(desc: Description) -> str:
    """Every populated range as a ``ram`` region (adjacent ranges merged), so gdb reads all of
    them without ``set mem inaccessible-by-default off`` and refuses the holes itself."""
    merged = memory_ranges(desc)
    lines = ['<?xml version="1.0"?>',
             '<!DOCTYPE memory-map PUBLIC "+//IDN gnu.org//DTD GDB Memory Map V1.0//EN" '
             '"http://sourceware.org/gdb/gdb-memory-map.dtd">', "<memory-map>"]
    for s, e in merged:
        lines.append(f'  <memory type="ram" start="{s:#x}" length="{e - s:#x}"/>')
    lines.append("</memory-map>")
    return "\n".join(lines) + "\n"
