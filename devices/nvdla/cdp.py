"""CDP, the cross-channel data processor (local response normalisation), INT8: CDP_RDMA reads the
input cube, CDP normalises across channels and writes the output cube. The arithmetic follows the
hardware repository's C model (cmod/cdp/NV_NVDLA_cdp.cpp lookup_lut_int8 and CdpDataPathSequence,
cmod/hls/cdp_libs/cdp_icvt.cpp and cdp_ocvt.cpp; facts, written here in numpy):

* channels outside the cube (before the first, past the last, and the unused lanes of the last
  surface) read DATIN_OFFSET's low byte;
* input converter: (x - offset[7:0]) * DATIN_SCALE, shifted right by DATIN_SHIFTER rounding half
  away from zero, saturated to 9 bits;
* the sum of squares over 3/5/7/9 neighbouring channels (D_LRN_CFG), or the value itself with
  SQSUM_BYPASS;
* two lookup tables, LE (65 entries, linear or exponential index) and LO (257 entries, linear),
  each interpolated in 16 fractional bits or extrapolated with its underflow/overflow slope and
  shift, saturated to int16; S_LUT_CFG's priorities choose between them;
* the result times the converted input (unless MUL_BYPASS), then the output converter: (v -
  offset[24:0]) * DATOUT_SCALE, shifted right by DATOUT_SHIFTER rounding half away from zero,
  saturated to int8.

The tables are written through S_LUT_ACCESS_CFG (table, entry, write) and S_LUT_ACCESS_DATA
(each write stores one entry and moves to the next), which the device model forwards here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...emu.numeric.nvdla import round_shift, saturate
from ..bits import sign_extend
from ..description import FieldView
from ..errors import DeviceError
from . import feature as F
from .feature import Reg


@dataclass
class Luts:
    """The LE (raw) and LO (density) tables and the access pointer of S_LUT_ACCESS_*."""

    le: np.ndarray
    lo: np.ndarray
    table: int = 0
    entry: int = 0
    write: bool = False

    @classmethod
    def empty(cls) -> Luts:
        return cls(np.zeros(65, np.int64), np.zeros(257, np.int64))

    def access_cfg(self, cfg: FieldView) -> None:
        """S_LUT_ACCESS_CFG written: the table, entry and direction of the next accesses."""
        self.table, self.entry = cfg.lut_table_id, cfg.lut_addr
        self.write = bool(cfg.lut_access_type)

    def access_data(self, data: FieldView) -> None:
        """S_LUT_ACCESS_DATA written: the entry (int16) when the access is a write."""
        if not self.write:
            return
        table = self.lo if self.table else self.le
        if self.entry < table.size:
            table[self.entry] = sign_extend(data.lut_data, 16)
        if self.entry < table.size - 1:  # the C model stops at the last entry
            self.entry += 1

    def read_data(self) -> int:
        table = self.lo if self.table else self.le
        return int(table[self.entry]) & 0xFFFF if self.entry < table.size else 0


@dataclass(frozen=True)
class CdpConfig:
    w: int
    h: int
    c: int
    src: tuple[int, int, int]
    dst: tuple[int, int, int]
    normalz: int  # neighbours on each side: 1..4
    sqsum_bypass: bool
    mul_bypass: bool
    datin: tuple[int, int, int]  # offset (int8), scale, shifter
    datout: tuple[int, int, int]  # offset (25-bit), scale, shifter
    le_exponent: bool
    priority: tuple[bool, bool, bool]  # underflow, overflow, hybrid: True = LO
    le_index_offset: int
    le_frac: int
    lo_frac: int
    le_range: tuple[int, int]
    lo_range: tuple[int, int]
    le_slopes: tuple[int, int, int, int]  # uflow scale, uflow shift, oflow scale, oflow shift
    lo_slopes: tuple[int, int, int, int]

    def summary(self) -> str:
        return (f"CDP LRN over {2 * self.normalz + 1} channels, {self.c}x{self.h}x{self.w}, LE "
                f"{'exponential' if self.le_exponent else 'linear'}"
                + (", square sum bypassed" if self.sqsum_bypass else "")
                + (", multiply bypassed" if self.mul_bypass else ""))


def decode(reg: Reg) -> CdpConfig:
    """CDP's and CDP_RDMA's consumer groups, their fields read by their names in
    configs/nvdla.toml (issue 33 #1)."""
    def bad(msg: str) -> DeviceError:
        return DeviceError(f"CDP: {msg}")

    if reg("CDP", "D_DATA_FORMAT").input_data_type or reg("CDP_RDMA", "D_DATA_FORMAT").input_data:
        raise bad("D_DATA_FORMAT selects INT16/FP16: nv_small normalises INT8 only")
    w = reg("CDP_RDMA", "D_DATA_CUBE_WIDTH").width + 1
    h = reg("CDP_RDMA", "D_DATA_CUBE_HEIGHT").height + 1
    c = reg("CDP_RDMA", "D_DATA_CUBE_CHANNEL").channel + 1
    src = F.cube_address(reg, "CDP_RDMA", "src")
    dst = F.cube_address(reg, "CDP", "dst")
    byp = reg("CDP", "D_FUNC_BYPASS")
    lut_cfg, info = reg("CDP", "S_LUT_CFG"), reg("CDP", "S_LUT_INFO")

    def wide(name: str) -> int:  # signed: HIGH's 6 bits above LOW's 32
        f = name.lower()[2:]  # S_LUT_LE_START -> lut_le_start_high, lut_le_start_low
        high = reg("CDP", f"{name}_HIGH")
        value = getattr(high, f"{f}_high") << 32 | getattr(reg("CDP", f"{name}_LOW"), f"{f}_low")
        return sign_extend(value, 32 + high.fields[f"{f}_high"].width)

    def slopes(t: str) -> tuple[int, int, int, int]:  # uflow scale, shift, oflow scale, shift
        out = []
        for flow in ("uflow", "oflow"):
            for kind in ("SCALE", "SHIFT"):
                v = reg("CDP", f"S_LUT_{t}_SLOPE_{kind}")
                f = f"lut_{t.lower()}_slope_{flow}_{kind.lower()}"
                out.append(sign_extend(getattr(v, f), v.fields[f].width))  # signed fields
        return out[0], out[1], out[2], out[3]

    return CdpConfig(
        w, h, c, src, dst, reg("CDP", "D_LRN_CFG").normalz_len + 1,
        bool(byp.sqsum_bypass), bool(byp.mul_bypass),
        # the converters' widths as the C model takes them: an int8 input offset (INT8 data),
        # a 25-bit output offset, of the 16- and 32-bit fields
        (sign_extend(reg("CDP", "D_DATIN_OFFSET").datin_offset, 8),
         sign_extend(reg("CDP", "D_DATIN_SCALE").datin_scale, 16),
         reg("CDP", "D_DATIN_SHIFTER").datin_shifter),
        (sign_extend(reg("CDP", "D_DATOUT_OFFSET").datout_offset, 25),
         sign_extend(reg("CDP", "D_DATOUT_SCALE").datout_scale, 16),
         reg("CDP", "D_DATOUT_SHIFTER").datout_shifter),
        not lut_cfg.lut_le_function,
        (bool(lut_cfg.lut_uflow_priority), bool(lut_cfg.lut_oflow_priority),
         bool(lut_cfg.lut_hybrid_priority)),
        # the index select fields are 8 bits; their values are signed 6-bit (C model)
        sign_extend(info.lut_le_index_offset, 8), sign_extend(info.lut_le_index_select, 6),
        sign_extend(info.lut_lo_index_select, 6),
        (wide("S_LUT_LE_START"), wide("S_LUT_LE_END")), (wide("S_LUT_LO_START"),
                                                         wide("S_LUT_LO_END")),
        slopes("LE"), slopes("LO"))


def _interp(table: np.ndarray, index: np.ndarray, frac16: np.ndarray) -> np.ndarray:
    i = np.clip(index, 0, table.size - 2)
    lo, hi = table[i], table[i + 1]
    return saturate(lo + round_shift((hi - lo) * frac16, 16), 16)


def _linear(ss: np.ndarray, table: np.ndarray, start: int, end: int, frac: int,
            slopes: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(result, underflow, overflow) of a linearly indexed table."""
    n = table.size - 1
    tmp = ss - start
    index = tmp << -frac if frac < 0 else tmp >> frac
    under = (index < 0) | (tmp <= 0)
    over = ~under & (index >= n)
    if frac < 0:
        off = np.zeros_like(tmp)
    else:
        off = np.mod(tmp, 1 << frac)
        off = off >> (frac - 16) if frac > 16 else off << (16 - frac)
    hit = _interp(table, index, off)
    us, ush, os_, osh = slopes
    u = saturate(table[0] + round_shift((ss - start) * us, ush), 16)
    o = saturate(table[n] + round_shift((ss - end) * os_, osh), 16)
    return np.where(under, u, np.where(over, o, hit)), under, over


def _exponent(ss: np.ndarray, cfg: CdpConfig, table: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    start, end = cfg.le_range
    off_i = cfg.le_index_offset
    tmp = ss - start
    log = np.zeros_like(tmp)
    pos = tmp > 0
    log[pos] = np.floor(np.log2(tmp[pos].astype(np.float64))).astype(np.int64)
    index = log - off_i
    under = (index < 0) | ~pos
    over = ~under & (index >= 64)
    base = np.left_shift(1, np.clip(index + off_i, 0, 62))
    off = tmp - base
    sh = index + off_i
    off = np.where(sh > 16, off >> np.clip(sh - 16, 0, 62), off << np.clip(16 - sh, 0, 62))
    hit = _interp(table, index, off)
    us, ush, os_, osh = cfg.le_slopes
    uflow_origin = 0 if off_i < 0 else 1 << off_i
    u = saturate(table[0] + round_shift((ss - start - uflow_origin) * us, ush), 16)
    o = saturate(table[64] + round_shift((ss - end) * os_, osh), 16)
    return np.where(under, u, np.where(over, o, hit)), under, over


#: CDP_D_PERF_LUT_* in the order :func:`normalise` counts them
LUT_COUNTERS = ("UFLOW", "OFLOW", "HYBRID", "LE_HIT", "LO_HIT")


def normalise(cfg: CdpConfig, luts: Luts, x: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """int8 [lanes, H, W] -> (int8 [lanes, H, W], LUT statistics). The statistics count, over
    every lane of every atom (pad lanes included), which lookup gave the result: both tables
    under, both over, LE only hit, LO only hit, else hybrid (the RTL's both_uf / both_of /
    only_le_hit / only_lo_hit / both_hybrid counters, vmod/nvdla/cdp/NV_NVDLA_CDP_DP_intp.v,
    and cmod's lut_u_flow ... lut_hybrid_hit); order :data:`LUT_COUNTERS`."""
    lanes = x.shape[0]
    off, scale, shifter = cfg.datin
    pad = cfg.normalz
    v = np.full((lanes + 2 * pad, cfg.h, cfg.w), off, np.int64)
    v[pad:pad + cfg.c] = x[:cfg.c]
    d = saturate(round_shift((v - off) * scale, shifter), 9)
    if cfg.sqsum_bypass:
        ss = d[pad:pad + lanes]
    else:
        sq = d * d
        ss = sum(sq[j:j + lanes] for j in range(2 * pad + 1))
    if cfg.le_exponent:
        le, le_u, le_o = _exponent(ss, cfg, luts.le)
    else:
        le, le_u, le_o = _linear(ss, luts.le, *cfg.le_range, cfg.le_frac, cfg.le_slopes)
    lo, lo_u, lo_o = _linear(ss, luts.lo, *cfg.lo_range, cfg.lo_frac, cfg.lo_slopes)
    le_hit, lo_hit = ~le_u & ~le_o, ~lo_u & ~lo_o
    both_u, both_o, one = le_u & lo_u, le_o & lo_o, le_hit ^ lo_hit
    n_u, n_o = int(both_u.sum()), int(both_o.sum())
    n_le, n_lo = int((one & le_hit).sum()), int((one & lo_hit).sum())
    stats = (n_u, n_o, ss.size - n_u - n_o - n_le - n_lo, n_le, n_lo)
    u_pri, o_pri, h_pri = cfg.priority
    result = np.where(le_u & lo_u, lo if u_pri else le,
                      np.where(le_o & lo_o, lo if o_pri else le,
                               np.where(le_hit ^ lo_hit, np.where(le_hit, le, lo),
                                        lo if h_pri else le)))
    center = d[pad:pad + lanes]
    out = result if cfg.mul_bypass else result * center
    o_off, o_scale, o_shift = cfg.datout
    return saturate(round_shift((out - o_off) * o_scale, o_shift), 8).astype(np.int8), stats
