"""NVDLA per-layer references from a trace's ``check_crc`` lines, for the per-layer diff
(issue 27, devices/layer_diff.py).

A trace test checks each layer's output with ``intr_notify(EVENT, SYNC_ID)`` (wait for the
layer's done interrupt) and then ``check_crc(SYNC_ID, MEM, ADDR, SIZE, CRC)`` (zlib's CRC-32 of
SIZE bytes at ADDR, trace.py). A check that follows the n-th interrupt wait can only check
what the first n layers wrote; its layer is the last of those whose declared output tensor
(nvdla/model.py unit_tensors) lies in [ADDR, ADDR + SIZE). The reference is a checksum: the
diff compares the CRC-32 of those bytes right after that layer ran (LayerReference.crc), so it
tells equal from different but cannot count the differing elements. A per-layer dump,
``check_file(SYNC_ID, MEM, ADDR, SIZE, "file.dat")`` (nv_small's trace parser; the file in
mem_load's memory-file format, trace.py), is placed on a layer the same way and compared
element by element: the reference array is the layer's declared output read from the file's
bytes (every byte of the output must be in the file).
"""
from __future__ import annotations

import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import DeviceError
from ..layer_diff import LayerReference, ReferenceFileError, unit_spec
from ..tensors import read_tensor
from .trace import _COMMAND, TraceError, _args, _int, check_file_bytes, read_trace

if TYPE_CHECKING:
    from .model import Nvdla


def crc_references(device: Nvdla, path: Path) -> list[LayerReference]:
    """One checksum reference per ``check_crc`` of the trace ``path`` (a .cfg or its
    directory), each on the layer that wrote the bytes it covers."""
    try:
        cfg, text = read_trace(path)
    except TraceError as e:
        raise ReferenceFileError(str(e)) from None
    outputs = []  # (layer, first address, end address, spec) of each declared output
    for k in range(len(device.units())):
        try:
            spec = unit_spec(device, LayerReference(k, "", None))
        except DeviceError:
            continue
        ranges = spec.ranges()
        outputs.append((k, ranges[0][0], ranges[-1][1], spec))
    refs, waits = [], 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("//", 1)[0].strip()
        m = _COMMAND.match(line) if line else None
        if m is None:
            continue
        where = f"{cfg.name}:{n}"
        if m.group(1) == "intr_notify":
            waits += 1
        elif m.group(1) == "check_file":
            try:
                addr, size, records = check_file_bytes(cfg, _args(m.group(2)), where)
            except TraceError as e:
                raise ReferenceFileError(str(e)) from None
            layer, spec = _layer_of(outputs, waits, addr, size, where, "check_file")
            refs.append(LayerReference(layer, f"check_file({_args(m.group(2))[0]})",
                                       _dump_array(spec, addr, size, records, where)))
        elif m.group(1) == "check_crc":
            args = _args(m.group(2))
            if len(args) != 5:
                raise ReferenceFileError(f"{where}: check_crc takes (sync id, memory, address, "
                                         "size, crc)")
            try:
                addr, size, crc = (_int(a, where) for a in args[2:])
            except TraceError as e:
                raise ReferenceFileError(str(e)) from None
            layer, _ = _layer_of(outputs, waits, addr, size, where, f"check_crc({args[0]})")
            refs.append(LayerReference(
                layer, f"check_crc({args[0]})", None,
                crc=(lambda _array, a=addr, s=size: zlib.crc32(device.read(a, s)) & 0xFFFFFFFF,
                     crc)))
    if not refs:
        raise ReferenceFileError(f"{cfg}: no check_crc or check_file line")
    return refs


def _layer_of(outputs: list, waits: int, addr: int, size: int, where: str, what: str):
    """(layer, its output spec): the last layer before the check's ``waits``-th interrupt wait
    whose whole declared output lies in [addr, addr + size)."""
    found = next(((k, spec) for k, s, e, spec in reversed(outputs)
                  if k < waits and addr <= s and e <= addr + size), None)
    if found is None:
        raise ReferenceFileError(f"{where}: {what} covers {size:#x} bytes at {addr:#010x}, "
                                 "which holds the whole output of no layer of the loaded "
                                 "program before it")
    return found


def _dump_array(spec, addr: int, size: int, records: list[tuple[int, bytes]],
                where: str) -> np.ndarray:
    """The layer's output as check_file's memory file holds it (read_tensor over the file's
    bytes instead of memory)."""
    data = np.zeros(size, np.uint8)
    known = np.zeros(size, bool)
    for a, chunk in records:
        data[a - addr:a - addr + len(chunk)] = np.frombuffer(chunk, np.uint8)
        known[a - addr:a - addr + len(chunk)] = True

    def read(a: int, n: int) -> bytes:
        if not known[a - addr:a - addr + n].all():
            raise ReferenceFileError(f"{where}: the memory file lacks bytes of the layer's "
                                     f"output at {a:#010x}..{a + n:#010x}")
        return data[a - addr:a - addr + n].tobytes()
    return read_tensor(spec, read)
