"""NPU_OP_DMA_START [U85-TRM: §3.10.4]: DMA0's parameters decoded from the
NPU_SET_DMA0_* state, its copies through the memory port (memport.py). The model counts the
bytes moved (statistics, cycle model); this module only moves them.
"""
from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from . import ops
from .memport import LUT_BYTES, NpuPort
from .ops import Access, NpuBusFault, SetState, Unpredictable, require
from .stream import Command

#: one kept copy: (source access, destination access, overlap step)
Copy = tuple[Access, Access, int]


class DmaDecode(NamedTuple):
    """What the NPU_SET_DMA0_* commands decide about an NPU_OP_DMA_START (:func:`decode`):
    regions, length, the copy grid and its strides."""
    src_r: int
    dst_r: int
    dst_internal: bool       # the LUT RAM
    length: int
    width: int
    height: int
    src_p: int
    dst_p: int
    ss0: int
    ds0: int
    ss1: int
    ds1: int
    idx: tuple[int, int, int, int, bool] | None  # index stream: region, offset, idx_max,
    #                                              skip1, gather


def run(cmd: Command, s: SetState, port: NpuPort) -> int:
    """NPU_OP_DMA_START: its parameters decoded once per command state (as an operation's),
    its copies kept per decode and region placement when it has no index stream (the same
    views on every run), else copied through the general path; the bytes moved."""
    d: DmaDecode = ops.memo_on_state("dma", cmd, s, None, lambda: decode(s))
    copies = None
    if d.idx is None:
        key, copies = ops.kept_run(port, d)
        if key is not None and copies is None:
            try:
                copies = tuple(_copy(port, d, *c) for c in _copies(port, d))
            except (NpuBusFault, Unpredictable):  # the general path faults at its copy,
                pass                              # after the ones before it
            else:
                ops.keep_run(port, key, d, copies)
    if copies is not None:
        copy_kept(port, copies)
        return len(copies) * d.length
    return _general(port, d)


def copy_kept(port: NpuPort, copies: tuple[Copy, ...], account: bool = True) -> bool:
    """The kept copies of a DMA (:func:`run`), accounted unless a replay."""
    if account and port.trace is not None:
        port.trace.append(functools.partial(copy_kept, copies=copies, account=False))
    for src, dst, step in copies:
        data = src.views[0].copy()
        if account:
            port.record(src)
        _copy_bytes(dst.views[0], data, step)
        if account:
            port.record(dst)
    return True


def decode(s: SetState) -> DmaDecode:
    """The DMA0 parameters and asserts from the commands alone [U85-TRM: §3.10.4]."""
    src_mode = s.get("DMA0_SRC_REGION", "region_mode")
    stride_mode = s.get("DMA0_SRC_REGION", "stride_mode")
    src_idx = s.get("DMA0_SRC_REGION", "idx_mode")
    dst_idx = s.get("DMA0_DST_REGION", "idx_mode")
    dst_internal = s.get("DMA0_DST_REGION", "region_mode") == 1
    require(src_mode == 0, "src_region_mode == external", "[U85-TRM: §3.10.4]")
    require(not (src_idx and dst_idx), "!(src_idx_mode && dst_idx_mode)", "[U85-TRM: §3.10.4]")
    require(stride_mode != 3, "stride_mode is not reserved", "[U85-TRM: Table 3-116]")
    length = s.get("DMA0_LEN", "addr")
    require(length > 0, "DMA0_LEN > 0", "[U85-TRM: §3.11.9]")
    width = s.get("DMA0_SIZE0", "size") if stride_mode != 0 else 1
    height = s.get("DMA0_SIZE1", "size") if stride_mode == 2 else 1
    dst_p = s.get("DMA0_DST", "addr")
    idx = None
    if src_idx or dst_idx:  # gather (source) or scatter (destination) through an index
        idx = (s.get("DMA0_IDX_REGION", "region"), s.get("DMA0_IDX", "addr"),  # stream
               s.get("DMA0_IDX_MAX", "idx_max"),
               s.get("DMA0_IDX_SKIP1", "addr") if height > 1 else 0, bool(src_idx))
    if dst_internal:
        require(dst_p % 16 == 0 and length % 16 == 0,
                "dst_addr % 16 == 0 && length % 16 == 0 (internal destination)",
                    "[U85-TRM: §3.6.3]")
    # stride 0 scales x, or in 1-D mode only the index of an index-mode side [U85-TRM: §3.10.4]
    return DmaDecode(
        s.get("DMA0_SRC_REGION", "region"), s.get("DMA0_DST_REGION", "region"),
        dst_internal, length, width, height, s.get("DMA0_SRC", "addr"), dst_p,
        s.get("DMA0_SRC_STRIDE0", "addr") if width > 1 or src_idx else 0,
        s.get("DMA0_DST_STRIDE0", "addr") if width > 1 or dst_idx else 0,
        s.get("DMA0_SRC_STRIDE1", "addr") if height > 1 else 0,
        s.get("DMA0_DST_STRIDE1", "addr") if height > 1 else 0, idx)


def _copies(port: NpuPort, d: DmaDecode) -> Iterator[tuple[int, int]]:
    """(source offset, destination offset) of each copy of ``d``, in order [U85-TRM: §3.10.4]:
    per row ``height`` times ``width`` copies at stride 0, the row start advanced by stride
    1; with an index stream each int32 index is read (load_int32 at DMA0_IDX in
    DMA0_IDX_REGION) just before its copy, a copy whose index is outside 0..idx_max is
    skipped [U85-TRM: §3.10.4], and the index pointer skips IDX_SKIP1 after each row."""
    src_p, dst_p = d.src_p, d.dst_p
    idx_r = idx_p = idx_max = skip1 = 0
    src_idx = False
    if d.idx is not None:
        idx_r, idx_p, idx_max, skip1, src_idx = d.idx
    for _ in range(d.height):
        for x in range(d.width):
            si = di = x
            if d.idx is not None:
                idx = int(_read(port, idx_r, idx_p, 4).view("<i4")[0])
                idx_p += 4
                if not 0 <= idx <= idx_max:
                    continue
                if src_idx:
                    si = idx
                else:
                    di = idx
            yield src_p + si * d.ss0, dst_p + di * d.ds0
        src_p += d.ss1
        dst_p += d.ds1
        if d.idx is not None:
            idx_p += skip1


def _general(port: NpuPort, d: DmaDecode) -> int:
    """The copies of ``d`` one by one (index streams, or runs not kept), each source read
    before its destination is looked at (a destination fault comes after the read); the
    bytes moved."""
    moved = 0
    for src_off, dst_off in _copies(port, d):
        src = _access(port, d.src_r, src_off, d.length, False)
        data = src.views[0].copy()
        port.record(src)
        dst, step = _dst(port, d, src, dst_off)
        _copy_bytes(dst.views[0], data, step)
        port.record(dst)
        moved += d.length
    return moved


def _copy(port: NpuPort, d: DmaDecode, src_off: int, dst_off: int) -> Copy:
    """(source access, destination access, overlap step) of one copy of ``d``."""
    src = _access(port, d.src_r, src_off, d.length, False)
    return (src, *_dst(port, d, src, dst_off))


def _dst(port: NpuPort, d: DmaDecode, src: Access, dst_off: int) -> tuple[Access, int]:
    """(destination access, overlap step) of a copy of ``d`` from ``src``: the LUT RAM as
    region -1 without byte ranges (not a bus access: recording it counts nothing)."""
    if d.dst_internal:
        require(0 <= dst_off and dst_off + d.length <= LUT_BYTES,
                f"LUT RAM write {dst_off:#x}+{d.length} inside {LUT_BYTES} bytes",
                    "[U85-TRM: §3.6.3]")
        return Access(-1, 0, 0, True, (port.lut[dst_off:dst_off + d.length],), (), 0), 0
    dst = _access(port, d.dst_r, dst_off, d.length, True)
    return dst, _overlap(src.ranges[0][0], dst.ranges[0][0], d.length)


def _access(port: NpuPort, region: int, off: int, n: int, write: bool) -> Access:
    require(0 <= region < 8, "0 <= region && region < 8",
        "[U85-TRM: §3.6.3]" if write else "[U85-TRM: §3.6.3]")
    return port.span_access(region, off, n, ops.WR_MEM2MEM if write else ops.RD_MEM2MEM,
                            write, f"DMA {'destination' if write else 'source'} "
                            f"(region {region})")


def _read(port: NpuPort, region: int, off: int, n: int) -> np.ndarray:
    acc = _access(port, region, off, n, False)
    port.record(acc)
    data: np.ndarray = acc.views[0].copy()
    return data


def _overlap(src: int, dst: int, n: int) -> int:
    """dst - src where the destination starts inside the source above it (copy_bytes then
    repeats the first dst - src bytes), else 0."""
    return dst - src if src < dst < src + n else 0


def _copy_bytes(dst: np.ndarray, data: np.ndarray, step: int) -> None:
    """copy_bytes [U85-TRM: §3.6.3] of ``data`` (the source as it was) into ``dst``: byte by byte
    upwards, so with an overlap ``step`` each chunk of ``step`` bytes repeats the first."""
    if not step:
        dst[...] = data
        return
    n = len(data)
    for i in range(0, n, step):
        dst[i:min(n, i + step)] = data[:min(step, n - i)]

