"""SDP, the single-point data processor, for nv_small (INT8; the BS and BN stages, no EW stage and
no LUT: [EXT] spec/defs/nv_small.spec): its input (CACC's int32 sums in flying mode, or an INT8
cube that SDP_RDMA reads), the two X stages, the output converter and the write to memory.

The integer arithmetic follows the hardware repository's C model (cmod/hls/sdp/sdp_x.cpp,
sdp_c.cpp, include/nvdla_int.h; facts, written here in numpy):

* X stage (BS, then BN), each skipped when its BYPASS is set:
  ALU (unless ALU_BYPASS): operand << ALU_SHIFT_VALUE (6 bits) saturated to int32, then MAX, MIN
  or SUM with the input (33-bit result);
  MUL (unless MUL_BYPASS): with PRELU and a non-negative input the value passes unchanged and
  unshifted; otherwise input * operand (int16; 49-bit result);
  shift (MUL_SHIFT_VALUE, 6 bits) right, rounding half away from zero, saturating to int32 (also
  when MUL is bypassed); a value PRELU passed keeps its low 32 bits;
  ReLU unless RELU_BYPASS;
* converter: (x - CVT_OFFSET) * CVT_SCALE (int16), shifted right by CVT_SHIFT rounding half away
  from zero and saturated to 17 bits (saturations counted), then saturated to int8;
* operands come from the registers (*_SRC = REG; int16) or through SDP_RDMA (BRDMA for BS, NRDMA
  for BN): one or two bytes per component, ALU, MUL or BOTH components per element (BOTH
  interleaves alu, mul per element), one element per channel (PER_KERNEL, packed from the base)
  or per element of the cube (PER_ELEMENT, in the feature layout with the element's bytes
  in place of one byte).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...emu.numeric.nvdla import round_shift, saturate, wrap
from ..bits import bit_field, sign_extend
from ..errors import DeviceError
from . import feature as F

Reg = Callable[[str, str], int]
#: reads memory: (address, size, what) -> uint8 array
Read = Callable[[int, int, str], np.ndarray]

ALGOS = ("max", "min", "sum")


@dataclass(frozen=True)
class Stage:
    """One X stage (BS or BN) as configured."""

    name: str  # "BS" or "BN"
    alu: str | None  # "max" | "min" | "sum", None when bypassed
    alu_src_mem: bool
    alu_operand: int
    alu_shift: int
    mul: bool
    mul_src_mem: bool
    mul_operand: int
    mul_shift: int
    prelu: bool
    relu: bool
    rdma: tuple[bool, bool, int, int, int, int] | None  # mode per element, two bytes, use, base,
    #                                                     line, surface (from SDP_RDMA)


@dataclass(frozen=True)
class SdpConfig:
    w: int
    h: int
    c: int
    flying: bool
    to_pdp: bool  # output_dst PDP: the output goes to PDP on the fly, not to memory
    src: tuple[int, int, int] | None  # offline input: base, line, surface
    dst: tuple[int, int, int]  # base, line, surface
    stages: tuple[Stage, ...]
    cvt: tuple[int, int, int]  # offset, scale, shift

    def summary(self) -> str:
        parts = []
        for st in self.stages:
            ops = [f"{st.alu}{'(mem)' if st.alu_src_mem else ''}"] if st.alu else []
            ops += [f"{'prelu' if st.prelu else 'mul'}{'(mem)' if st.mul_src_mem else ''}"] \
                if st.mul else []
            ops += ["relu"] if st.relu else []
            parts.append(f"{st.name} {'+'.join(ops) or 'shift'}")
        off, scale, shift = self.cvt
        return (f"SDP {'from CACC' if self.flying else 'from memory'}, {self.c}x{self.h}x{self.w}"
                + (", " + ", ".join(parts) if parts else "")
                + f", cvt (x-{off})*{scale}>>{shift} to int8"
                + (", to PDP" if self.to_pdp else ""))


def decode(reg: Reg, rdma_enabled: bool) -> SdpConfig:
    """The consumer group of SDP (and SDP_RDMA when ``rdma_enabled``) as one layer."""
    def bad(msg: str) -> DeviceError:
        return DeviceError(f"SDP: {msg}")

    fmt = reg("SDP", "D_DATA_FORMAT")
    if bit_field(fmt, 1, 0) or bit_field(fmt, 3, 2):
        raise bad("SDP_D_DATA_FORMAT selects INT16/FP16: nv_small's SDP is INT8 only")
    mode = reg("SDP", "D_FEATURE_MODE_CFG")
    flying = bool(mode & 1)
    if mode >> 2 & 1:
        raise bad("SDP_D_FEATURE_MODE_CFG.winograd is ON: nv_small has no Winograd")
    ew = reg("SDP", "D_DP_EW_CFG")
    if not ew & 1:
        raise bad("SDP_D_DP_EW_CFG.ew_bypass is NO: nv_small's SDP has no EW stage "
                  "(spec/defs/nv_small.spec SDP_EW_DISABLE)")
    w = bit_field(reg("SDP", "D_DATA_CUBE_WIDTH"), 12, 0) + 1
    h = bit_field(reg("SDP", "D_DATA_CUBE_HEIGHT"), 12, 0) + 1
    c = bit_field(reg("SDP", "D_DATA_CUBE_CHANNEL"), 12, 0) + 1
    src = None
    if rdma_enabled:
        rmode = reg("SDP_RDMA", "D_FEATURE_MODE_CFG")
        if bool(rmode & 1) != flying:
            raise bad("SDP_RDMA_D_FEATURE_MODE_CFG.flying_mode differs from "
                      "SDP_D_FEATURE_MODE_CFG.flying_mode")
        if bit_field(rmode, 3, 2) or bit_field(rmode, 5, 4):
            raise bad("SDP_RDMA_D_FEATURE_MODE_CFG selects INT16/FP16: nv_small is INT8 only")
        dims = (bit_field(reg("SDP_RDMA", "D_DATA_CUBE_WIDTH"), 12, 0) + 1,
                bit_field(reg("SDP_RDMA", "D_DATA_CUBE_HEIGHT"), 12, 0) + 1,
                bit_field(reg("SDP_RDMA", "D_DATA_CUBE_CHANNEL"), 12, 0) + 1)
        if dims != (w, h, c):
            raise bad(f"SDP_RDMA_D_DATA_CUBE_* give {dims[2]}x{dims[1]}x{dims[0]}, SDP's "
                      f"{c}x{h}x{w}")
        if not flying:
            src = (reg("SDP_RDMA", "D_SRC_BASE_ADDR_HIGH") << 32
                   | reg("SDP_RDMA", "D_SRC_BASE_ADDR_LOW"),
                   reg("SDP_RDMA", "D_SRC_LINE_STRIDE"), reg("SDP_RDMA", "D_SRC_SURFACE_STRIDE"))
    elif not flying:
        raise bad("offline mode (flying_mode OFF) needs SDP_RDMA enabled")
    dst = (reg("SDP", "D_DST_BASE_ADDR_HIGH") << 32 | reg("SDP", "D_DST_BASE_ADDR_LOW"),
           reg("SDP", "D_DST_LINE_STRIDE"), reg("SDP", "D_DST_SURFACE_STRIDE"))
    stages = []
    for name, rdma in (("BS", "BRDMA"), ("BN", "NRDMA")):
        cfg = reg("SDP", f"D_DP_{name}_CFG")
        if cfg & 1:
            continue
        alu_cfg, mul_cfg = reg("SDP", f"D_DP_{name}_ALU_CFG"), reg("SDP", f"D_DP_{name}_MUL_CFG")
        alu = None if cfg >> 1 & 1 else bit_field(cfg, 3, 2)
        if alu == 3:
            raise bad(f"SDP_D_DP_{name}_CFG.{name.lower()}_alu_algo 3 is reserved")
        mul = not cfg >> 4 & 1
        alu_mem = alu is not None and bool(alu_cfg & 1)
        mul_mem = mul and bool(mul_cfg & 1)
        r = None
        if alu_mem or mul_mem:
            rc = reg("SDP_RDMA", f"D_{rdma}_CFG") if rdma_enabled else 1
            if not rdma_enabled or rc & 1:
                raise bad(f"{name} takes an operand from memory but SDP_RDMA's {rdma} is "
                          "disabled")
            use = bit_field(rc, 2, 1)
            if use == 3:
                raise bad(f"SDP_RDMA_D_{rdma}_CFG.{rdma.lower()}_data_use 3 is reserved")
            r = (bool(rc >> 4 & 1), bool(rc >> 3 & 1), use,
                 reg("SDP_RDMA", f"D_{name}_BASE_ADDR_HIGH") << 32
                 | reg("SDP_RDMA", f"D_{name}_BASE_ADDR_LOW"),
                 reg("SDP_RDMA", f"D_{name}_LINE_STRIDE"),
                 reg("SDP_RDMA", f"D_{name}_SURFACE_STRIDE"))
        stages.append(Stage(name, None if alu is None else ALGOS[alu], alu_mem,
                            sign_extend(reg("SDP", f"D_DP_{name}_ALU_SRC_VALUE"), 16),
                            bit_field(alu_cfg, 13, 8), mul, mul_mem,
                            sign_extend(reg("SDP", f"D_DP_{name}_MUL_SRC_VALUE"), 16),
                            bit_field(mul_cfg, 13, 8), mul and bool(cfg >> 5 & 1),
                            not cfg >> 6 & 1, r))
    cvt = (sign_extend(reg("SDP", "D_CVT_OFFSET"), 32), sign_extend(reg("SDP", "D_CVT_SCALE"), 16),
           bit_field(reg("SDP", "D_CVT_SHIFT"), 5, 0))
    return SdpConfig(w, h, c, flying, bool(mode >> 1 & 1), src, dst, tuple(stages), cvt)


def operands(st: Stage, shape: tuple[int, int, int], read: Read
             ) -> tuple[np.ndarray | int, np.ndarray | int]:
    """(alu operand, mul operand) of a stage: an int from the register, or int64 arrays that
    broadcast over [C, H, W] from memory."""
    alu: np.ndarray | int = st.alu_operand
    mul: np.ndarray | int = st.mul_operand
    if st.rdma is None:
        return alu, mul
    per_element, two_bytes, use, base, line, surf = st.rdma
    c, h, w = shape
    comps = 2 if use == 2 else 1
    bpc = 2 if two_bytes else 1
    bpe = comps * bpc
    if per_element:
        cc = np.arange(c)[:, None, None]
        idx = ((cc // F.ATOM) * surf + np.arange(h)[None, :, None] * line
               + np.arange(w)[None, None, :] * F.ATOM * bpe + (cc % F.ATOM) * bpe)
    else:
        idx = (np.arange(c) * bpe)[:, None, None]
    span = int(idx.max()) + bpe
    raw = read(base, span, f"{st.name} operands")
    values = []
    for way in range(comps):
        b = raw[idx + way * bpc].astype(np.int64)
        if two_bytes:
            b = b | raw[idx + way * bpc + 1].astype(np.int64) << 8
        values.append(wrap(b, 16 if two_bytes else 8))
    # data_use: 0 MUL, 1 ALU, 2 BOTH (alu first, then mul)
    if use == 2:
        alu_m, mul_m = values
    elif use == 1:
        alu_m, mul_m = values[0], None
    else:
        alu_m, mul_m = None, values[0]
    if st.alu_src_mem:
        if alu_m is None:
            raise DeviceError(f"SDP: {st.name} ALU takes its operand from memory but the RDMA "
                              "data_use is MUL")
        alu = alu_m
    if st.mul_src_mem:
        if mul_m is None:
            raise DeviceError(f"SDP: {st.name} MUL takes its operand from memory but the RDMA "
                              "data_use is ALU")
        mul = mul_m
    return alu, mul


def x_stage(x: np.ndarray, st: Stage, alu_op, mul_op) -> np.ndarray:
    """One X stage on int64 values (int32 range)."""
    if st.alu is not None:
        operand = saturate(np.int64(1) * np.asarray(alu_op, np.int64) << st.alu_shift, 32)
        if st.alu == "max":
            x = np.maximum(x, operand)
        elif st.alu == "min":
            x = np.minimum(x, operand)
        else:
            x = x + operand
    if st.mul:
        product = x * np.asarray(mul_op, np.int64)
        shifted = saturate(round_shift(product, st.mul_shift), 32)
        if st.prelu:
            x = np.where(x >= 0, wrap(x, 32), shifted)
        else:
            x = shifted
    else:
        x = saturate(round_shift(x, st.mul_shift), 32)
    if st.relu:
        x = np.maximum(x, 0)
    return x


def convert(x: np.ndarray, cvt: tuple[int, int, int]) -> tuple[np.ndarray, int]:
    """The output converter to int8, and the count of 17-bit saturations."""
    offset, scale, shift = cvt
    v = (x - offset) * scale
    t = round_shift(v, shift)
    t17 = saturate(t, 17)
    floor = v >> shift
    sat = int(np.count_nonzero(np.abs(floor - t17) > 1))
    return saturate(t17, 8).astype(np.int8), sat


def process(cfg: SdpConfig, x: np.ndarray, read: Read) -> tuple[np.ndarray, int]:
    """[C, H, W] int values in -> int8 [C, H, W] out, and the saturation count."""
    x = x.astype(np.int64)
    for st in cfg.stages:
        alu, mul = operands(st, x.shape, read)
        x = x_stage(x, st, alu, mul)
    return convert(x, cfg.cvt)
