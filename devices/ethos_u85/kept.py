"""Ethos-U85 operations: kept runs. An operation whose accesses are plain views of memory keeps
them (and its kernel) per decode and region placement, so the next run of the same program
skips working them out; the block recorder (blocks.py) is handed each kept run's data part.
Why: working the accesses out through the general reads and writes cost several times a
MobileNet layer's kernel."""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .operands import MemoryPort, Tensor, boxes, joined, read_views, store_views
from .output import OfmWrite, ofm_parts, ofm_write_layout, result_flag
from .setstate import WR_OFM, NpuConfig, SetState


def _kept_read_access(mem: MemoryPort, t: Tensor, shape: tuple[int, int, int],
                      channel: int) -> tuple[Any, ...] | None:
    """(the Access, bricked per box, shape) of :func:`read_raw` of ``t`` as kept box views,
    (None, the region, shape) for a chained tensor (the chaining FIFO), or None where it is
    neither (not boxes, not a plain view)."""
    if t.storage == 2:
        return None, t.region, shape
    bs = boxes(t, shape)
    if not bs:
        return None
    acc = mem.box_access(t.region, [b[:3] for b in bs], t.size,
                         f"<{'i' if t.signed else 'u'}{t.size}", channel, False)
    return (acc, tuple(b[3] for b in bs), shape) if acc else None


def _kept_write_access(mem: MemoryPort, w: OfmWrite | None) -> tuple[Any, ...] | None:
    """(the Access, ``w``) of :func:`write_ofm`'s store through ``w`` as kept box views, (None,
    ``w``) for a chained OFM, or None where it is neither (storage none, not boxes, not a
    plain injective view)."""
    if w is None or (w.tensor.storage != 2 and w.boxes is None):
        return None
    if w.tensor.storage == 2:
        return None, w
    t, bs = w.tensor, w.boxes
    assert bs is not None
    acc = mem.box_access(t.region, bs, t.size, f"<u{t.size}", WR_OFM, True)
    return (acc, w) if acc is not None else None


def kept_accesses(mem: MemoryPort, s: SetState, cfg: NpuConfig, reads: list[Any],
                  shape: tuple[int, ...], all_perms: bool
                  ) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """(per read (tensor, shape, channel) or None: its :func:`_kept_read_access` or None, the
    :func:`_kept_write_access` of the OFM of ``shape``), or None where one of them is not a
    kept view."""
    kept = tuple(None if r is None else _kept_read_access(mem, *r) for r in reads)
    ofm = _kept_write_access(mem, ofm_write_layout(s, cfg, shape, all_perms))
    if ofm is None or any((k is None) != (r is None) for k, r in zip(kept, reads)):
        return None
    return kept, ofm


class ValuesRun(NamedTuple):
    """An operation whose OFM is a function of its tensor reads alone (ELEMENTWISE but DIV,
    POOL without accumulators or scale stream): its reads and write kept as a convolution's
    (:class:`_ConvRun`), and that function."""
    reads: tuple[Any, ...]             # per input: _kept_read_access, or None
    ofm: tuple[Any, ...]               # _kept_write_access
    values: Callable[..., np.ndarray]  # values(*raw inputs, LUT) -> OFM values


def run_values(r: ValuesRun, mem: MemoryPort, account: bool = True) -> bool:
    """The operation through its kept reads, function and write; its asserts depend on the
    commands only, so they passed when it was kept."""
    raws = [None if a is None else kept_read(mem, a, account) for a in r.reads]
    if account:
        traced(mem, functools.partial(run_values, r, account=False))
    kept_write(mem, r.ofm, r.values(*raws, mem.lut), account)
    return True


def kept_read(mem: MemoryPort, r: tuple[Any, ...], account: bool = True) -> np.ndarray:
    """:func:`read_raw` through a kept read access (accounted unless a replay, which accounts
    the whole block at once: EthosU85.run_block)."""
    if r[0] is None:
        return mem.npu.pop(r[1], math.prod(r[2])).reshape(r[2])
    if account:
        mem.record(r[0])
    return joined(read_views(r[0]), r[1], r[2])


def kept_write(mem: MemoryPort, o: tuple[Any, ...], value: np.ndarray,
               account: bool = True) -> None:
    """:func:`write_ofm` through a kept write access."""
    result_flag(mem, value)
    if o[0] is None:
        mem.npu.push(o[1].tensor.region, value)
        return
    store_views(o[0], ofm_parts(o[1], value))
    if account:
        mem.record(o[0])


#: what an operation hands the block recorder when it has just kept a run (the recording
#: would replay it through the general path: the next run records the kept run)
KEPT_NOW = "kept now"


def traced(mem: MemoryPort, step: object) -> None:
    """Hand a kept run's data part (``step(mem)``: False, having done nothing, when it no
    longer applies), or KEPT_NOW, to the device's block recorder while it records."""
    trace = mem.trace
    if trace is not None:
        trace.append(step)


def kept_run(mem: MemoryPort, d: object) -> tuple[tuple[Any, ...] | None, Any]:
    """(key, kept run or None) of the operation decoded as ``d`` under the regions' present
    placement; (None, None) where the port keeps no runs."""
    runs = mem.kept_runs
    if runs is None:
        return None, None
    key = (id(d), mem.placement())
    hit = runs.get(key)
    return key, None if hit is None else hit[1]


def keep_run(mem: MemoryPort, key: tuple[Any, ...], d: object, run: object) -> None:
    """Keep ``run`` of the operation decoded as ``d`` (the entry holds ``d``, so its id stays
    its own) under ``key``; the table is cleared whole past 4096 entries."""
    runs = mem.kept_runs
    assert runs is not None  # (kept_run gave the key: the port keeps runs)
    if len(runs) >= 4096:
        runs.clear()
    runs[key] = (d, run)
    traced(mem, KEPT_NOW)
