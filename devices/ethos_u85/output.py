"""Ethos-U85 operations: the output stage (OFM_SCALE / ACTIVATION / ACC_FORMAT packed for the
kernels), the accumulator storage (read_/write_accumulator, [U85-TRM: §3.6.5]), write_ofm
([U85-TRM: §3.6.5]: result flag, chaining FIFO, reverse, transpose, tiles) and the AO unit's
modelled cycles."""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ...emu.numeric import ethosu85 as P
from ...emu.numeric import ethosu85_values as values_k
from ...emu.weights import ethosu85 as Wt
from ..bits import sign_extend  # the seed's sign_extend(v, n) [U85-TRM: §3.6.2]
from .operands import MemoryPort, Tensor, addresses, boxes, check_addressable, read_raw, tensor
from .setstate import (
    PRECISION_BITS,
    RD_IFM_STREAM,
    WR_OFM,
    NpuConfig,
    SetState,
    check_diag,
    memo_on_commands,
    memo_on_state,
    require,
)
from .weightscale import microblock

_TRANSPOSE_PERM = {0: (0, 1, 2), 1: (1, 0, 2), 2: (0, 2, 1), 3: (1, 2, 0), 6: (2, 0, 1),
                   7: (2, 1, 0)}  # stored[...] = value[y, x, c] [U85-TRM: §3.6.5]
_ACT_FUNCTIONS = (0, 1, 4, 5, 7, 8, 9, 10, 11)  # activation_function [U85-TRM: Table 3-108]


#: the NPU_SET_* commands :func:`out_config` reads
_OUT_CMDS = tuple(SetState._key(n) for n in (
    "OFM_PRECISION", "ACTIVATION", "ACTIVATION_MIN", "ACTIVATION_MAX", "OFM_ZERO_POINT",
    "OFM_SCALE", "ACC_FORMAT"))


def out_config(s: SetState, *, accumulator_path: bool) -> np.ndarray:
    """:func:`_out_config` memoised on the commands it reads (:func:`memo_on_commands`); the
    kernels only read the array."""
    return memo_on_commands("out", s, _OUT_CMDS, accumulator_path,
                            lambda: _out_config(s, accumulator_path=accumulator_path))


def _out_config(s: SetState, *, accumulator_path: bool) -> np.ndarray:
    """Pack OFM_PRECISION / OFM_SCALE / OFM_ZERO_POINT / ACTIVATION* / ACC_FORMAT into the
    kernels' ``cfg`` (emu/numeric/ethosu85.py: out_config) with the asserts of rescale and
    activation [U85-TRM: §3.6.6, §3.6.7]. ``accumulator_path``: write_accumulator ops (conv,
    depthwise, pool) honour ACC_FORMAT (acc_format, acc_output) and per-channel scaling.
    Decision: ELEMENTWISE and RESIZE have their own int32/int64 accumulator
    [U85-TRM: §3.10.6, §3.10.11], so ACC_FORMAT.acc_format = i48 does not bring rescale's 16-bit
    scale assert [U85-TRM: §3.6.6] to them (Vela's int16 ADD programs i48 with a 31-bit OFM
    scale)."""
    p = "OFM_PRECISION"
    bits = PRECISION_BITS[s.get(p, "activation_precision")]
    signed = bool(s.get(p, "activation_type"))
    per_channel = s.get(p, "scale_mode") == 0
    fn = s.get("ACTIVATION", "activation_function")
    require(fn in _ACT_FUNCTIONS, f"activation_function {fn} is not reserved",
        "[U85-TRM: Table 3-108]")
    table = s.get("ACTIVATION", "table")
    clip_none = s.get("ACTIVATION", "activation_clip_range") == 1
    need_clip = bits != 64 and not clip_none and fn not in (P.LUT_TANH, P.LUT_SIGMOID)
    lo = s.get("ACTIVATION_MIN", "clip_boundary", None if need_clip else 0)
    hi = s.get("ACTIVATION_MAX", "clip_boundary", None if need_clip else 0)
    zp = s.get("OFM_ZERO_POINT", "zero_point", None if bits != 64 else 0)
    if bits != 64:
        z, ok = P.ofm_zero_point(zp, signed)
        require(ok, f"OFM zero point {z} valid for {'s' if signed else 'u'}{bits}",
            "[U85-TRM: §3.6.7]")
    if fn == P.LUT_S8_S16:
        require(table < 4, "table < 4 (s8_s16)", "[U85-TRM: §3.6.7]")
    elif fn == P.LUT_S8_S32:
        require(table < 2, "table < 2 (s8_s32)", "[U85-TRM: §3.6.7]")
    elif fn in (P.LUT_S16_S16, P.LUT_S16_S32, P.LUT_TANH, P.LUT_SIGMOID):
        require(table == 0, "table == 0 (interpolating LUT uses all 2 KiB)", "[U85-TRM: §3.6.7]")
    rnd = s.get("OFM_SCALE", "round_mode")
    require(rnd < 6, "OFM_SCALE.round_mode is not reserved", "[U85-TRM: Table 3-191]")
    dbl = s.get("OFM_SCALE", "dbl_rnd")
    require(dbl <= 30, "0 <= dbl_rnd && dbl_rnd <= 30", "[U85-TRM: §3.6.6]")
    scale = s.get("OFM_SCALE", "scale")
    acc_format = s.get("ACC_FORMAT", "acc_format", 0) if accumulator_path else 0
    require(acc_format in (0, 1), "ACC_FORMAT.acc_format is not reserved", "[U85-TRM: Table 3-107]")
    if acc_format == 1 and not per_channel:
        require(scale == sign_extend(scale, 16), "scale == sign_extend(scale, 16)",
            "[U85-TRM: §3.6.6]")
    acc_out = s.get("ACC_FORMAT", "acc_output", 0) if accumulator_path else 0
    return P.out_config(ofm_bits=bits, ofm_signed=signed, zero_point=zp, act_min=lo, act_max=hi,
                        scale=scale, shift=s.get("OFM_SCALE", "shift"), round_mode=rnd,
                        dbl_rnd=dbl, per_channel=per_channel and accumulator_path,
                        acc_bits=48 if acc_format == 1 else 32, function=fn, table=table,
                        clip_none=clip_none, acc_output_disable=bool(acc_out))


def acc_input(s: SetState, mem: MemoryPort, shape: tuple[int, ...],
              acc48: bool) -> np.ndarray | None:
    """read_accumulator's source [U85-TRM: §3.6.5]: None for reset (the op's reset value)."""
    mode = s.get("ACC_FORMAT", "acc_input")
    require(mode in (0, 1, 2), "ACC_FORMAT.acc_input is not reserved", "[U85-TRM: Table 3-107]")
    H, W, D = shape
    if mode == 0:
        return None
    if mode == 1:
        blk = (s.get("OFM_BLK_HEIGHT_M1", "height_m1") + 1,
               s.get("OFM_BLK_WIDTH_M1", "width_m1") + 1,
               s.get("OFM_BLK_DEPTH_M1", "depth_m1") + 1)
        require(H <= blk[0] and W <= blk[1] and D <= blk[2], "oy < bh && ox < bw && oc < bd",
                "[U85-TRM: §3.6.5]")
        acc = mem.npu.acc
        require(acc is not None and all(a >= b for a, b in zip(acc.shape, shape)),
                "accumulator storage written before acc_input keep", "[U85-TRM: §3.6.5]")
        assert acc is not None
        return acc[:H, :W, :D].copy()
    t = tensor(s, "IFM2")
    require(t.signed and t.bits == (64 if acc48 else 32),
            f"IFM2 precision == {'b64' if acc48 else 'b32'} && signed (acc_input ifm2)",
            "[U85-TRM: §3.6.5]")
    diag: list[str] = []
    v = values_k.read_values(read_raw(mem, t, shape, RD_IFM_STREAM),
                      s.get("IFM2_ZERO_POINT", "zero_point"), t.bits, True, diag, "IFM2")
    check_diag(diag, "read_ifm2")
    return v


def store_accumulators(s: SetState, mem: MemoryPort, acc: np.ndarray) -> None:
    """write_accumulator with acc_output disable [U85-TRM: §3.6.5]."""
    H, W, D = acc.shape
    blk = (s.get("OFM_BLK_HEIGHT_M1", "height_m1") + 1, s.get("OFM_BLK_WIDTH_M1", "width_m1") + 1,
           s.get("OFM_BLK_DEPTH_M1", "depth_m1") + 1)
    require(H <= blk[0] and W <= blk[1] and D <= blk[2], "oy < bh && ox < bw && oc < bd",
        "[U85-TRM: §3.6.5]")
    old = mem.npu.acc
    shape = tuple(max(a, b) for a, b in zip(acc.shape, (0, 0, 0) if old is None else old.shape))
    new = np.zeros(shape, np.int64)
    if old is not None:
        new[:old.shape[0], :old.shape[1], :old.shape[2]] = old
    new[:H, :W, :D] = acc
    mem.npu.acc = new


class OfmWrite(NamedTuple):
    """Where and how write_ofm stores an OFM of one shape (:func:`ofm_write`)."""
    tensor: Tensor
    flips: tuple[Any, ...]             # the index that reverses (OFM reverse)
    perm: tuple[Any, ...]              # the transpose
    boxes: list[Any] | None       # :func:`boxes` of the stored tensor
    parts: tuple[Any, ...]             # per box: (channels, bricked)


def write_ofm(mem: MemoryPort, s: SetState, cfg: NpuConfig, value: np.ndarray,
              all_perms: bool) -> None:
    """write_ofm [U85-TRM: §3.6.5] of the whole [H, W, D] OFM (values already truncated by the
    kernel): result flag, chaining FIFO, storage none, reverse, transpose, tiles. The layout is
    decoded once per command state and shape (memoised as an operation's decode)."""
    result_flag(mem, value)
    w = ofm_write_layout(s, cfg, value.shape, all_perms)
    if w is None:  # storage none
        return
    t = w.tensor
    if t.storage == 2:
        mem.npu.push(t.region, value)
        return
    if w.boxes is not None:
        if mem.scatter_boxes(t.region, w.boxes, t.size, ofm_parts(w, value), WR_OFM):
            return
    stored = np.transpose(value[w.flips], w.perm)
    offs = addresses(t, stored.shape)
    mem.scatter(t.region, offs.ravel(), t.size, np.ascontiguousarray(stored).ravel(), WR_OFM)


def result_flag(mem: MemoryPort, value: np.ndarray) -> None:
    """write_ofm's result flag: the low bit of a 1x1x1 OFM (both write paths)."""
    if value.shape == (1, 1, 1):
        mem.set_result_flag(int(value.ravel()[0]) & 1)


def ofm_write_layout(s: SetState, cfg: NpuConfig, shape: tuple[Any, ...],
                     all_perms: bool) -> OfmWrite | None:
    """:func:`ofm_write`, decoded once per command state and shape (as an operation)."""
    return memo_on_state("ofm", None, s, (cfg, shape, all_perms),
                         lambda: ofm_write(s, cfg, shape, all_perms))


def ofm_parts(w: OfmWrite, value: np.ndarray) -> list[np.ndarray]:
    """The OFM ``value`` [H, W, D] as stored (reversed, transposed), one array per box of
    ``w.boxes``."""
    as_is = not w.flips and w.perm == (0, 1, 2)
    if as_is and w.parts == ((value.shape[2], False),):
        return [value]  # NHWC as it is
    stored = value if as_is else np.transpose(value[w.flips], w.perm)
    h, wd, _ = stored.shape
    parts, c0 = [], 0
    for n, bricked in w.parts:
        part = stored[:, :, c0:c0 + n]
        parts.append(part.reshape(h, wd, n // 16, 16).transpose(0, 2, 1, 3) if bricked
                     else part)
        c0 += n
    return parts


def ofm_write(s: SetState, cfg: NpuConfig, shape: tuple[int, ...],
              all_perms: bool) -> OfmWrite | None:
    """write_ofm's layout and asserts for an OFM of ``shape`` from the commands alone; None for
    storage none."""
    t = tensor(s, "OFM")
    rev = s.get("OFM_PRECISION", "activation_reverse")
    tr = s.get("OFM_PRECISION", "activation_transpose")
    require(tr in _TRANSPOSE_PERM, f"OFM transpose {tr} is not reserved", "[U85-TRM: Table 3-147]")
    if t.storage == 2:
        require(rev == 0 and tr == 0, "reverse == none && transpose == HWC (chained OFM)",
                "[U85-TRM: §3.6.5]")
        return OfmWrite(t, (), (0, 1, 2), None, ())
    if t.storage == 3:
        return None
    bh = s.get("OFM_BLK_HEIGHT_M1", "height_m1", 0) + 1
    bw = s.get("OFM_BLK_WIDTH_M1", "width_m1", 0) + 1
    bd = s.get("OFM_BLK_DEPTH_M1", "depth_m1", 0) + 1
    flips = ()
    if rev:
        require(tr == 0, "transpose == HWC (with reverse)", "[U85-TRM: §3.6.5]")
        require(all_perms, "allowed_perms == allowed_perms_all (reverse)", "[U85-TRM: §3.6.5]")
        require(t.bits != 64, "precision != b64 (reverse)", "[U85-TRM: §3.6.5]")
        if rev == 3:
            mbd = max(16, Wt.microblock_depth(cfg.macs, microblock(s)))
            if shape[2] % mbd:
                require(t.fmt == 0 and bd <= 16, "format == nhwc && ofm_blk_depth <= 16 "
                        "(reverse C, depth not a multiple of the microblock)", "[U85-TRM: §3.6.5]")
        flips = (slice(None),) * (rev - 1) + (slice(None, None, -1),)
    if t.fmt == 1:
        if tr in (2, 6):
            require(bw % 16 == 0, "ofm_blk_width % 16 == 0 (NHCWB16 HCW/CHW)", "[U85-TRM: §3.6.5]")
        if tr in (3, 7):
            require(bh % 16 == 0, "ofm_blk_height % 16 == 0 (NHCWB16 CWH/WCH)", "[U85-TRM: §3.6.5]")
    require(tr in (0, 2, 6) or all_perms, "transpose in {HWC, HCW, CHW} || allowed_perms_all",
            "[U85-TRM: §3.6.5]")
    require(tr == 0 or t.bits != 64, "transpose == HWC || precision != b64", "[U85-TRM: §3.6.5]")
    lim = {1: (bw <= 128 and bh <= 128), 2: (bd <= 128 and bw <= 1024),
           7: (bd <= 128 and bh <= 1024), 6: (bd <= 128 and bh <= 128 and bw <= 1024),
           3: (bw <= 128 and bd <= 128 and bh <= 1024)}
    require(lim.get(tr, True), "OFM block fits the transpose limits (128 / 1024)",
        "[U85-TRM: §3.6.5]")
    perm = _TRANSPOSE_PERM[tr]
    check_addressable(t)
    bs = boxes(t, tuple(shape[i] for i in perm))
    if bs is None:
        return OfmWrite(t, flips, perm, None, ())
    return OfmWrite(t, flips, perm, [b[:3] for b in bs],
                     tuple((b[1][1] * 16 if b[3] else b[1][2], b[3]) for b in bs))


def ao_cycles(cfg: NpuConfig, n: int, ofm_bits: int, in_bits: int, binary: bool,
              from_cb: bool) -> int:
    """AO cycles for ``n`` output elements: per scaling unit min(1, P, CB, DMA) elements/cycle
    (closed form of Tables 4-11/4-12, [U85-TRM: §4.2]), NUM_SU units in parallel."""
    p = 0.5 if ofm_bits == 64 else 1.0
    cb = 0.5 if from_cb and in_bits == 32 and binary else 1.0
    dma = cfg.ofm_data_w / (cfg.num_su * ofm_bits)
    per_su = min(1.0, p, cb, dma)
    return int(np.ceil(n / (per_su * cfg.num_su))) if n else 0


def finish(mem: MemoryPort, s: SetState, cfg: NpuConfig, out: np.ndarray, kcfg: np.ndarray,
            all_perms: bool) -> None:
    """The accumulator or OFM write of a kernel result."""
    if kcfg[P.C_ACC_OUTPUT]:
        store_accumulators(s, mem, out.astype(np.int64))
    else:
        write_ofm(mem, s, cfg, out, all_perms)


def ofm_precision_bits(s: SetState) -> int:
    return PRECISION_BITS[s.get("OFM_PRECISION", "activation_precision")]
