"""Machine-readable state (``json WHAT``): what the Python API's remote back end reads
(api/backends.py), the same functions its in-process back end calls, so both report the same
values by construction and the remote back end needs nothing device-specific."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from accelstub.devices.device import CORE_REGS
from accelstub.devices.layer_diff import differ_of, unit_spec
from accelstub.devices.runcontrol import RunControl
from accelstub.devices.tensors import TensorSpec

from .args import resolve
from .table import CommandContext, CommandError, command, usage_error
from .target import parse_unit, status_data, unit_at_pc, units_data


def stop_data(rc: RunControl) -> dict[str, Any]:
    """The last stop: reason (step|breakpoint|watchpoint|halt|done|fault|idle), pc, the unit
    index at pc (None past the last), the watchpoint hit ([kind, address]), the message, and
    whether going back reached the start of the history (RSP ``replaylog:begin``)."""
    stop, dev = rc.last_stop, rc.device
    return {"reason": stop.reason, "pc": dev.pc, "unit": unit_at_pc(dev),
            "watch": list(stop.watch) if stop.watch else None, "message": stop.message,
            "history_begin": stop.replaylog == "begin"}


def register_data(rc: RunControl, name: str) -> dict[str, Any]:
    """One register by name (or alias): its name, address, width, value (a debugger read: no
    side effects) and decoded fields; a name the device lacks gives ``{"error":
    "RegisterNotFound", ...}`` with the close matches, so a client raises the same error."""
    from accelstub.devices.errors import RegisterNotFound

    dev = rc.device
    if name in CORE_REGS:
        return {"name": name, "address": None, "bits": 32, "value": dev.read_core(name),
                "fields": {}}
    try:
        reg = dev.description.register(name)
    except RegisterNotFound as e:
        return {"error": "RegisterNotFound", "name": e.name, "device": e.device,
                "close": list(e.close)}
    value = dev.read_register(reg.name)
    return {"name": reg.name, "address": reg.address, "bits": reg.bits, "value": value,
            "fields": {f.name: f.extract(value) for f in reg.fields}}


def tensor_data(spec: TensorSpec) -> dict[str, Any]:
    """A TensorSpec as JSON values (``TensorSpec(**data)`` with tuples rebuilds it)."""
    return dataclasses.asdict(spec)


def tensor_from_data(data: dict[str, Any]) -> TensorSpec:
    """The TensorSpec that :func:`tensor_data` gave as JSON values (lists back to tuples): what
    a client of ``json tensors UNIT`` (the TUI, the API's remote back end) reads."""
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    return TensorSpec(**fields)


def diff_data(rc: RunControl) -> dict[str, Any]:
    """The per-layer diff so far (``diff load``): the ``--json`` form of ``accelstub diff``
    plus ``loaded`` (False: no reference loaded) and ``reference`` (the file's name)."""
    differ = differ_of(rc)
    if differ is None:
        return {"loaded": False, "reference": None, "layers": [], "first_divergence": None}
    return {"loaded": True, "reference": differ.source, **differ.as_json()}


def reference_data(rc: RunControl, index: int, tensor: str = "output") -> dict[str, Any]:
    """The loaded diff reference of one unit's tensor, for the TUI's tensor view: its name,
    its values as (C, H, W) flattened (None for a checksum reference, whose ``crc`` is given
    instead), and the rule that explains differences the hardware makes on purpose; all None
    when no reference covers that tensor."""
    differ = differ_of(rc)
    ref = differ.reference(index, tensor) if differ is not None else None
    if ref is None:
        return {"name": None, "values": None, "crc": None, "rule": ""}
    values = None
    if ref.array is not None:
        values = unit_spec(rc.device, ref).from_layout(ref.array).ravel().tolist()
    return {"name": ref.name, "values": values, "crc": None if ref.crc is None else ref.crc[1],
            "rule": ref.rule}


#: the state ``json WHAT`` gives, by WHAT (``register`` takes a name): what the API's remote back
#: end reads and its in-process back end calls, one table so the two cannot drift apart
JSON_DATA: dict[str, Callable[..., object]] = {
    "units": units_data, "status": status_data, "stop": stop_data, "register": register_data,
    "diff": diff_data,
    "counters": lambda rc: dict(rc.device.counters()),
    "interrupts": lambda rc: dict(rc.device.interrupts())}


@command("json", "units|tensors UNIT|counters|interrupts|status|stop|diff|register NAME|"
         "reference UNIT [TENSOR]|load PATH [INPUT]",
         "machine-readable state as one line of JSON (for the Python API)")
def cmd_json(ctx: CommandContext, args: list[str]) -> str:
    """``json units|tensors UNIT|counters|interrupts|status|stop|diff|register NAME|reference
    UNIT [TENSOR]|load PATH [INPUT]``: one line of JSON for programs (the Python API's remote
    back end, the TUI), never for people."""
    import json

    rc = ctx.target
    what, rest = (args[0], args[1:]) if args else ("", [])
    if what in JSON_DATA and len(rest) == (what == "register"):
        data: object = JSON_DATA[what](rc, *rest)
    elif what == "tensors" and len(rest) == 1:
        index = parse_unit("json tensors", rc.device, rest[0])
        data = [tensor_data(s) for s in rc.device.unit_tensors(index)]
    elif what == "reference" and len(rest) in (1, 2):
        data = reference_data(rc, parse_unit("json reference", rc.device, rest[0]), *rest[1:])
    elif what == "load" and len(rest) in (1, 2):
        from accelstub.devices.device import ProgramOptions

        from ..program import ProgramError, load_for_reset

        quiet = dataclasses.replace(ctx, log=lambda s: None, reported_stops=[])
        options = ProgramOptions(input=str(resolve(ctx, rest[1]))) if len(rest) == 2 else \
            ProgramOptions()
        try:
            data = {"summary": load_for_reset(quiet, resolve(ctx, rest[0]), options)}
        except ProgramError as e:
            raise CommandError(f"json load: {e}") from None
    else:
        raise usage_error("json")
    return json.dumps(data, separators=(",", ":"))
