"""CMSIS-SVD 1.3 export of a device description (docs/design-notes.md "GDB view": SVD generated from
the description, the same source as target.xml and the memory map).

One ``<peripheral>`` per register-block instance, one ``<register>`` per register instance (arrays
are written out one register per index, so every name is a plain SVD identifier), one ``<field>``
per field with its ``<enumeratedValues>``. The emulator-only block ``emu`` is exported too, as the
peripheral ``EMU`` whose description says it is not hardware.

Access kinds map as: rw -> read-write, ro -> read-only, wo -> write-only, w1c -> read-write with
``modifiedWriteValues`` oneToClear, w1s -> read-write with oneToSet, rsvd -> read-only.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from accelstub.devices.description import BlockInstance, Description, Field, Register

__all__ = ["description_to_svd", "peripheral_name", "svd_identifier"]

_ACCESS = {"rw": "read-write", "ro": "read-only", "wo": "write-only", "w1c": "read-write",
           "w1s": "read-write", "rsvd": "read-only"}
_MODIFIED = {"w1c": "oneToClear", "w1s": "oneToSet"}


def svd_identifier(name: str) -> str:
    """A valid SVD identifier: letters, digits and '_', not starting with a digit."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not out or out[0].isdigit():
        out = "_" + out
    return out


def _hex(v: int, digits: int = 8) -> str:
    return f"0x{v:0{digits}X}"


def _sub(parent: ET.Element, tag: str, text: str | None = None) -> ET.Element:
    e = ET.SubElement(parent, tag)
    if text is not None:
        e.text = text
    return e


def _one_line(text: str) -> str:
    return " ".join(text.split())


def peripheral_name(desc: Description, block: BlockInstance) -> str:
    """``EMU`` for the emulator block; else the block's group in upper case, with the block name
    appended when another block of the same group came first (CNN_GLOBAL, CNN_GLOBAL_AOD,
    CNN_Q0)."""
    if block.kind_name == "emu":
        return "EMU"
    first = next(b for b in desc.blocks if b.group == block.group)
    if first is block or block.name == block.group:
        return svd_identifier(block.group.upper())
    return svd_identifier(f"{block.group}_{block.name}".upper())


def _register_access(reg: Register) -> str:
    kinds = {f.access for f in reg.fields}
    if kinds <= {"ro", "rsvd"}:
        return "read-only"
    if kinds == {"wo"}:
        return "write-only"
    return "read-write"


def _field(parent: ET.Element, f: Field) -> None:
    fe = _sub(parent, "field")
    _sub(fe, "name", svd_identifier(f.name))
    _sub(fe, "description", _one_line(f.doc) or f.name)
    _sub(fe, "bitOffset", str(f.lsb))
    _sub(fe, "bitWidth", str(f.width))
    _sub(fe, "access", _ACCESS[f.access])
    if f.access in _MODIFIED:
        _sub(fe, "modifiedWriteValues", _MODIFIED[f.access])
    if f.enums:
        ev = _sub(fe, "enumeratedValues")
        _sub(ev, "name", svd_identifier(f.name + "_enum"))
        seen: set[str] = set()
        for e in f.enums:
            name = svd_identifier(e.name)
            while name in seen:  # enumeratedValue names must be unique in their container
                name += "_"
            seen.add(name)
            v = _sub(ev, "enumeratedValue")
            _sub(v, "name", name)
            _sub(v, "description", _one_line(e.doc) or e.name)
            _sub(v, "value", str(e.value))


def _register(parent: ET.Element, reg: Register, blk: BlockInstance, emu: bool) -> None:
    re_ = _sub(parent, "register")
    _sub(re_, "name", svd_identifier(reg.name))
    doc = _one_line(reg.doc) or reg.name
    if emu:
        doc = f"{doc} (emulator-only pseudo-register, not hardware)"
    if reg.aliases:
        doc += f" [aliases: {', '.join(reg.aliases)}]"
    if reg.bank is not None:
        doc += (f" (bank {blk.banks[reg.bank]} of {reg.slot}; the bus reaches the bank "
                f"{blk.bank_select if blk.bank_select != 'device' else 'the device state'} "
                "selects)")
    _sub(re_, "description", doc)
    if reg.bank:  # banks after the first share the address: SVD's alternate registers
        _sub(re_, "alternateRegister", svd_identifier(f"{reg.slot}_{blk.banks[0]}"))
    _sub(re_, "addressOffset", _hex(reg.address - blk.base, 4))
    _sub(re_, "size", str(reg.bits))
    _sub(re_, "access", _register_access(reg))
    _sub(re_, "resetValue", _hex(reg.reset))
    _sub(re_, "resetMask", _hex((1 << reg.bits) - 1))
    fields = _sub(re_, "fields")
    for f in sorted(reg.fields, key=lambda f: f.lsb):
        _field(fields, f)


def description_to_svd(desc: Description) -> str:
    """The description as a CMSIS-SVD 1.3 document (a string holding the XML)."""
    dev = ET.Element("device", {
        "schemaVersion": "1.3",
        "xmlns:xs": "http://www.w3.org/2001/XMLSchema-instance",
        "xs:noNamespaceSchemaLocation": "CMSIS-SVD.xsd",
    })
    _sub(dev, "vendor", "accelstub")
    _sub(dev, "name", svd_identifier(desc.name.upper()))
    _sub(dev, "version", "1.0")
    _sub(dev, "description", _one_line(f"{desc.title}. {desc.doc}".strip()))
    _sub(dev, "addressUnitBits", "8")
    _sub(dev, "width", "32")
    _sub(dev, "size", "32")
    _sub(dev, "access", "read-write")
    _sub(dev, "resetValue", _hex(0))
    _sub(dev, "resetMask", _hex(0xFFFFFFFF))
    periphs = _sub(dev, "peripherals")
    for blk in desc.blocks:
        emu = blk.kind_name == "emu"
        p = _sub(periphs, "peripheral")
        _sub(p, "name", peripheral_name(desc, blk))
        pdoc = _one_line(blk.doc) or blk.name
        if emu:
            pdoc = f"Emulator-only state, not part of the {desc.name} hardware: {pdoc}"
        _sub(p, "description", pdoc)
        _sub(p, "groupName", svd_identifier(blk.group.upper()))
        _sub(p, "baseAddress", _hex(blk.base))
        ab = _sub(p, "addressBlock")
        _sub(ab, "offset", "0x0")
        _sub(ab, "size", _hex(blk.size, 1))
        _sub(ab, "usage", "registers")
        regs = _sub(p, "registers")
        for reg in blk.registers:
            _register(regs, reg, blk, emu)
    ET.indent(dev, space="  ")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(dev, encoding="unicode") + "\n"
