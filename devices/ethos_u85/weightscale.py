"""Ethos-U85 operations: the weight streams (WEIGHT_BASE/WEIGHT1-3_BASE, section 6) and the
scale-and-bias stream (section 5, [U85-TRM: §3.7]): what the commands
decide (regions, bases, lengths, decode parameters, asserts) and the reads and decodes through
the memory port."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...emu.weights import ethosu85 as Wt
from .operands import MemoryPort
from .setstate import RD_SCALE_BIAS, RD_WEIGHTS, NpuConfig, SetState, check_diag, require


def microblock(s: SetState) -> int:
    mb = s.get("ACC_FORMAT", "microblock")
    require(mb <= 5, "ACC_FORMAT.microblock is not reserved", "[U85-TRM: Table 3-107]")
    return mb


#: per OFM channel: bias, scale, shift
Scales = tuple[np.ndarray, np.ndarray, np.ndarray]


def scale_stream(s: SetState, mem: MemoryPort, cfg: NpuConfig, depth: int,
                 acc48: bool) -> Scales:
    """(bias, scale, shift) per OFM channel from the scale-and-bias stream (section 5,
    [U85-TRM: §3.7]) at BASEP[SCALE_REGION] + SCALE_BASE, SCALE_LENGTH bytes."""
    return read_scales(mem, scale_read(s, cfg, depth, acc48))


def scale_read(s: SetState, cfg: NpuConfig, depth: int, acc48: bool) -> tuple[Any, ...]:
    """What :func:`scale_stream` reads and how it decodes it (region, base, length, decode
    arguments), with its asserts: the part the commands decide."""
    region = s.get("SCALE_REGION", "region")
    base = s.get("SCALE_BASE", "addr")
    length = s.get("SCALE_LENGTH", "length")
    require(length % 16 == 0, "SCALE_LENGTH % 16 == 0", "[U85-TRM: §3.11.41]")
    cs = Wt.channels_in_set(cfg.macs, microblock(s))
    reverse_c = s.get("OFM_PRECISION", "activation_reverse") == 3
    nsets = -(-depth // cs)
    if reverse_c:
        require(depth <= 16 or depth % cs == 0,
                "ofm_depth <= 16 || ofm_depth % channels_in_set == 0 (reverse C)",
                    "[U85-TRM: §3.7.2]")
        need = 10 * ((nsets - 1) * cs + min(cs, depth))
    else:
        need = 10 * depth
    require(length >= need, f"SCALE_LENGTH {length} holds the {depth} channel records "
            f"({need} bytes)", "[U85-TRM: §3.7]")
    return region, base, length, (depth, acc48, cs, reverse_c)


def read_scales(mem: MemoryPort, read: tuple[Any, ...]) -> Scales:
    """The stream of :func:`scale_read` read and decoded."""
    region, base, length, args = read
    return Wt.decode_scale_stream(mem.read_bytes(region, base, length, RD_SCALE_BIAS), *args)


_WEIGHT_STREAMS = (("WEIGHT_BASE", "WEIGHT_LENGTH"), ("WEIGHT1_BASE", "WEIGHT1_LENGTH"),
                   ("WEIGHT2_BASE", "WEIGHT2_LENGTH"), ("WEIGHT3_BASE", "WEIGHT3_LENGTH"))


def weight_read(s: SetState, cfg: NpuConfig, *, depth: int, ifm_depth: int,
                dilated: tuple[int, int], dilation: tuple[int, int], stride: tuple[int, int],
                order: int, decomposition: int, depthwise: bool, ifm16: bool) -> tuple[Any, ...]:
    """What the weight stream(s) of an operation are (WEIGHT_BASE/WEIGHT1-3_BASE, section 6)
    and how they decode into W[oc][ky][kx][ic] (undilated): (region, ((base, length) per
    stream), ordering parameters, fwd), with the asserts: the part the commands decide."""
    fwd = s.get("WEIGHT_FORMAT", "weight_format") == 1
    sparse = bool(s.get("WEIGHT_FORMAT", "weight_sparsity"))
    if depthwise:
        require(not fwd, "WEIGHT_FORMAT.weight_format != fwd", "[U85-TRM: §3.10.3]")
        require(not sparse, "WEIGHT_FORMAT.weight_sparsity == none", "[U85-TRM: §3.10.3]")
    mb = microblock(s)
    require(Wt.microblock_depth(cfg.macs, mb) >= 1, "microblock legal for CONFIG.macs_per_cc",
            "[U85-TRM: Table 3-107]")
    p = Wt.ordering_params(ofm_depth=depth, ifm_depth=ifm_depth, kernel_hw=dilated,
                           dilation=dilation, stride=stride,
                           ofm_block_depth=s.get("OFM_BLK_DEPTH_M1", "depth_m1") + 1,
                           macs_per_cc=cfg.macs, microblock=mb, depthwise=depthwise,
                           part_kernel_first=bool(order), decomposition_d4x4=bool(decomposition),
                           sparse=sparse, ifm16bit=ifm16)
    if p[17] and not depthwise:  # mb_i16only; decision: a conv rule (it only changes the
        # ifm_block_depth of depth-first conv; Vela's 8-bit depthwise uses u1x2 at 256 MACs)
        require(ifm16 and dilated == (1, 1), "!mb_i16only || (ifm16bit && kernel 1x1)",
            "[U85-TRM: §3.9.2]")
    region = s.get("WEIGHT_REGION", "region")
    streams = []
    for k in range(1 if fwd else cfg.num_wd):
        bname, lname = _WEIGHT_STREAMS[k]
        base, length = s.get(bname, "addr"), s.get(lname, "length")
        require(base % 16 == 0, f"{bname} % 16 == 0", "[U85-TRM: §3.11.42]")
        align = 32 if fwd else 16
        require(length % align == 0, f"{lname} % {align} == 0", "[U85-TRM: §3.11.49]")
        streams.append((base, length))
    return region, tuple(streams), p, fwd


def read_weights(mem: MemoryPort, read: tuple[Any, ...]) -> np.ndarray:
    """The streams of :func:`weight_read` read and decoded (memoised on their bytes)."""
    region, streams, p, fwd = read
    data = [mem.read_bytes(region, base, length, RD_WEIGHTS) for base, length in streams]
    diag: list[str] = []
    w = Wt.decode_weights_memo(data, p, fwd=fwd, diag=diag)
    check_diag(diag, "weight stream")
    return w
