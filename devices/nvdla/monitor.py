"""NVDLA monitor command: ``monitor nvdla groups | layer | ignored | csb WORD [VALUE]``. Takes
the device model; model.py's unit list (UNITS) is imported where it is used, since model.py
imports this module."""
from __future__ import annotations

from functools import partial

from ..device import MonitorCommand
from ..errors import DeviceError

_STATE = {0: "idle", 1: "running", 2: "pending"}


def commands(dev) -> dict[str, MonitorCommand]:
    return {"nvdla": MonitorCommand("groups | layer | ignored | csb WORD [VALUE]",
                                    partial(_nvdla, dev),
                                    "each unit's two register groups (armed, which is the "
                                    "consumer), the next hardware layer decoded, the writes the "
                                    "hardware ignored, a register by its CSB word address")}


def _nvdla(dev, ctx, args: list[str]) -> str:
    if args == ["groups"]:
        from .model import UNITS

        lines = [f"{'unit':<9} producer consumer  G0       G1"]
        for u in UNITS:
            status = dev.description.register(f"{u}_S_STATUS").definition.view(dev._status(u))
            prod = dev.regs.field(f"{u}_S_POINTER", "producer")
            lines.append(f"{u:<9} G{prod}       G{dev.consumer[u]}       "
                         f"{_STATE[status.status_0]:<8} {_STATE[status.status_1]}")
        return "\n".join(lines)
    if args == ["layer"]:
        layer = dev.ready()
        return (f"{dev.unit_label(dev.pc)}: {dev.summary(layer)}" if layer is not None
                else dev.idle_message())
    if args == ["ignored"]:
        ro = dev.ro_writes
        busy = dev.regs.ignored_writes
        lines = [f"{n}: {c} writes (read-only)" for n, c in sorted(ro.items())]
        lines += [f"{n}: {c} writes (group armed)" for n, c in sorted(busy.items())]
        return "\n".join(lines) or "no writes ignored"
    if args and args[0] == "csb" and len(args) in (2, 3):
        try:
            word = int(args[1], 0)
            value = int(args[2], 0) if len(args) == 3 else None
        except ValueError:
            raise DeviceError(f"nvdla csb: {' '.join(args[1:])!r} is not a number") from None
        addr = word * 4  # the CSB word address is the byte address >> 2
        reg = dev.description.register_at(addr)
        if reg is None or not 0 <= word < 1 << 30:
            raise DeviceError(f"nvdla csb: no register at CSB word {word:#x} (byte {addr:#x})")
        if value is not None:
            dev.write(addr, (value & 0xFFFFFFFF).to_bytes(4, "little"))
        v = int.from_bytes(dev.read(addr, 4), "little")
        name = dev.regs.selected(reg).name
        return f"CSB {word:#06x} = byte {addr:#07x} {name}: {v:#010x}"
    raise dev.usage_error("nvdla")
