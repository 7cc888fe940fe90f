"""Unit tensors (devices/device.py, unit_tensors): the device's declaration of a unit's input and
output tensors, listed, shown one channel at a time or dumped as .npy, read with the debugger
read; everything comes from Device.unit_tensors, so no device needs a case here."""
from __future__ import annotations

import numpy as np

from accelstub.devices import BusError
from accelstub.devices.device import Device
from accelstub.devices.runcontrol import RunControl
from accelstub.devices.tensors import TensorSpec, read_tensor

from ..files import FileRefused, write_regular
from .args import parse_number, resolve
from .table import CommandContext, CommandError, command, usage_error
from .target import parse_unit, unit_at_pc

#: address ranges one listing line shows before "... N more"
TENSOR_RANGES_SHOWN = 4


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


@command("tensor", "[UNIT] | show UNIT NAME [channel] | dump UNIT NAME file.npy",
         "a unit's declared tensors (default: the one at pc); one channel; a .npy dump")
def cmd_tensor(ctx: CommandContext, args: list[str]) -> str:
    """The current (or a named) unit's declared tensors; one channel as text; an array as .npy.
    Everything comes from Device.unit_tensors, so no device needs a case here."""
    rc = ctx.target
    dev = rc.device
    if not args or (len(args) == 1 and args[0] not in ("show", "dump")):
        if args:
            index = parse_unit("tensor", dev, args[0])
        else:
            at_pc = unit_at_pc(dev)
            if at_pc is None:
                raise CommandError(f"tensor: pc 0x{dev.pc:08x} is at no {dev.unit_name} (the "
                                   f"program has ended); name one: tensor UNIT")
            index = at_pc
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
            write_regular(resolve(ctx, rest[2]), buf.getvalue(), name=rest[2])
        except FileRefused as e:
            raise CommandError(f"{cmd}: {e}") from None
        except OSError as e:
            raise CommandError(f"{cmd}: couldn't write {rest[2]}: {e.strerror or e}") from None
        return (f"wrote {rest[2]}: {spec.name} of {_unit_words(dev, index)}, {spec.layout} "
                f"{'x'.join(map(str, spec.shape))} {spec.dtype}")
    raise usage_error("tensor")
