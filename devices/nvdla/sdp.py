"""SDP, the single-point data processor, for nv_small (INT8; the BS and BN stages, no EW stage and
no LUT: [EXT] spec/defs/nv_small.spec): its input (CACC's int32 sums in flying mode, or an INT8
cube that SDP_RDMA reads), the two X stages, the output converter and the write to memory.

The integer arithmetic follows the hardware repository's C model (cmod/hls/sdp/sdp_x.cpp,
sdp_c.cpp, include/nvdla_int.h; facts, computed by emu/numeric/nvdla.py post_process in one pass
with CACC's rounding):

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

from ...emu.conv import int_conv as IC
from ...emu.numeric.nvdla import ALU_CODES, post_process, post_process_parallel, wrap
from ..bits import sign_extend
from ..errors import DeviceError
from . import feature as F
from .feature import Reg

#: reads memory: (address, size, what) -> uint8 array
Read = Callable[[int, int, str], np.ndarray]

ALGOS = ("max", "min", "sum")
OPERAND_BITS = 16  # the BS/BN ALU and MUL operands (D_DP_*_SRC_VALUE) are int16


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


def reads_rdma(reg: Reg) -> bool:
    """Whether SDP's consumer group takes data through SDP_RDMA: its input when offline
    (flying_mode OFF), or an operand of a BS, BN or EW stage that is on, with its ALU or MUL on
    and that operand's source MEM. SDP's own registers decide, never SDP_RDMA's: [EXT] the RTL
    (vmod/nvdla/sdp/NV_NVDLA_SDP_core.v) opens a stage's operand stream from
    ``<x>_bypass``, ``<x>_alu_bypass``/``<x>_mul_bypass`` and ``<x>_alu_src``/``<x>_mul_src``
    alone, and the driver (kmd/firmware/sdp.c, dla_sdp_rdma_check) arms SDP_RDMA only for such
    a layer, so SDP_RDMA's consumer group may hold an earlier layer's stale configuration."""
    if not reg("SDP", "D_FEATURE_MODE_CFG").flying_mode:
        return True
    for x in ("bs", "bn", "ew"):
        name = x.upper()
        if getattr(reg("SDP", f"D_DP_{name}_CFG"), f"{x}_bypass"):
            continue
        for op in ("alu", "mul"):
            on = not getattr(reg("SDP", f"D_DP_{name}_CFG"), f"{x}_{op}_bypass")
            if on and getattr(reg("SDP", f"D_DP_{name}_{op.upper()}_CFG"), f"{x}_{op}_src"):
                return True
    return False


def decode(reg: Reg, rdma_enabled: bool) -> SdpConfig:
    """The consumer group of SDP (and SDP_RDMA when ``rdma_enabled``) as one layer, its fields
    read by their names in configs/nvdla.toml (issue 33 #1)."""
    def bad(msg: str) -> DeviceError:
        return DeviceError(f"SDP: {msg}")

    fmt = reg("SDP", "D_DATA_FORMAT")
    if fmt.proc_precision or fmt.out_precision:
        raise bad("SDP_D_DATA_FORMAT selects INT16/FP16: nv_small's SDP is INT8 only")
    mode = reg("SDP", "D_FEATURE_MODE_CFG")
    flying = bool(mode.flying_mode)
    if mode.winograd:
        raise bad("SDP_D_FEATURE_MODE_CFG.winograd is ON: nv_small has no Winograd")
    if not reg("SDP", "D_DP_EW_CFG").ew_bypass:
        raise bad("SDP_D_DP_EW_CFG.ew_bypass is NO: nv_small's SDP has no EW stage "
                  "(spec/defs/nv_small.spec SDP_EW_DISABLE)")
    w = reg("SDP", "D_DATA_CUBE_WIDTH").width + 1
    h = reg("SDP", "D_DATA_CUBE_HEIGHT").height + 1
    c = reg("SDP", "D_DATA_CUBE_CHANNEL").channel + 1
    src = None
    if rdma_enabled:
        rmode = reg("SDP_RDMA", "D_FEATURE_MODE_CFG")
        if bool(rmode.flying_mode) != flying:
            raise bad("SDP_RDMA_D_FEATURE_MODE_CFG.flying_mode differs from "
                      "SDP_D_FEATURE_MODE_CFG.flying_mode")
        if rmode.in_precision or rmode.proc_precision:
            raise bad("SDP_RDMA_D_FEATURE_MODE_CFG selects INT16/FP16: nv_small is INT8 only")
        dims = (reg("SDP_RDMA", "D_DATA_CUBE_WIDTH").width + 1,
                reg("SDP_RDMA", "D_DATA_CUBE_HEIGHT").height + 1,
                reg("SDP_RDMA", "D_DATA_CUBE_CHANNEL").channel + 1)
        if dims != (w, h, c):
            raise bad(f"SDP_RDMA_D_DATA_CUBE_* give {dims[2]}x{dims[1]}x{dims[0]}, SDP's "
                      f"{c}x{h}x{w}")
        if not flying:
            src = F.cube_address(reg, "SDP_RDMA", "src")
    elif not flying:
        raise bad("offline mode (flying_mode OFF) needs SDP_RDMA enabled")
    dst = F.cube_address(reg, "SDP", "dst")
    def field(register: str, f: str, unit: str = "SDP") -> int:
        return getattr(reg(unit, register), f)

    stages = []
    for name, rdma in (("BS", "BRDMA"), ("BN", "NRDMA")):
        x, d = name.lower(), rdma.lower()  # the fields' prefixes: bs_alu_algo, brdma_data_use
        cfg = f"D_DP_{name}_CFG"
        if field(cfg, f"{x}_bypass"):
            continue
        alu = None if field(cfg, f"{x}_alu_bypass") else field(cfg, f"{x}_alu_algo")
        if alu == 3:
            raise bad(f"SDP_D_DP_{name}_CFG.{x}_alu_algo 3 is reserved")
        mul = not field(cfg, f"{x}_mul_bypass")
        alu_mem = alu is not None and bool(field(f"D_DP_{name}_ALU_CFG", f"{x}_alu_src"))
        mul_mem = mul and bool(field(f"D_DP_{name}_MUL_CFG", f"{x}_mul_src"))
        r = None
        if alu_mem or mul_mem:
            rc = f"D_{rdma}_CFG"
            if not rdma_enabled or field(rc, f"{d}_disable", "SDP_RDMA"):
                raise bad(f"{name} takes an operand from memory but SDP_RDMA's {rdma} is "
                          "disabled")
            use = field(rc, f"{d}_data_use", "SDP_RDMA")
            if use == 3:
                raise bad(f"SDP_RDMA_D_{rdma}_CFG.{d}_data_use 3 is reserved")
            r = (bool(field(rc, f"{d}_data_mode", "SDP_RDMA")),
                 bool(field(rc, f"{d}_data_size", "SDP_RDMA")), use,
                 *F.cube_address(reg, "SDP_RDMA", name))
        # the operands are 16 bits (the RTL's reg2dp_bs_alu_operand [15:0]); the ALU shift 6
        # bits, the MUL shift 8 bits ([EXT] NV_NVDLA_SDP_reg.v), as the fields give them
        stages.append(Stage(name, None if alu is None else ALGOS[alu], alu_mem,
                            sign_extend(field(f"D_DP_{name}_ALU_SRC_VALUE", f"{x}_alu_operand"),
                                        OPERAND_BITS),
                            field(f"D_DP_{name}_ALU_CFG", f"{x}_alu_shift_value"), mul, mul_mem,
                            sign_extend(field(f"D_DP_{name}_MUL_SRC_VALUE", f"{x}_mul_operand"),
                                        OPERAND_BITS),
                            field(f"D_DP_{name}_MUL_CFG", f"{x}_mul_shift_value"),
                            mul and bool(field(cfg, f"{x}_mul_prelu")),
                            not field(cfg, f"{x}_relu_bypass"), r))
    cvt = (sign_extend(reg("SDP", "D_CVT_OFFSET").cvt_offset, 32),
           sign_extend(reg("SDP", "D_CVT_SCALE").cvt_scale, 16),
           reg("SDP", "D_CVT_SHIFT").cvt_shift)
    return SdpConfig(w, h, c, flying, bool(mode.output_dst), src, dst, tuple(stages), cvt)


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


def process(cfg: SdpConfig, acc: np.ndarray, read: Read, *, k: int | None = None,
            add: np.ndarray | None = None, clip: int = 0,
            dst: tuple[np.ndarray, int, int, int] | None = None
            ) -> tuple[np.ndarray | None, int, int]:
    """int8 [C, H, W] out of SDP (C the cube's channels rounded up to whole atoms, the
    hardware's lanes), its converter's 17-bit saturations and CACC's saturations (always 0:
    CACC's round shift of a sum wrapped to 32 bits stays within 32 bits), all in one pass
    (emu/numeric/nvdla.py post_process: CACC, X stages, converter). The input ``acc``: an INT8
    cube [C, H, W] read by SDP_RDMA (offline), or CACC's (flying): the convolution's
    int32 work array, channels last [>= H, >= W, >= k] (conv.convolve), plus ``add`` [k],
    shifted right by ``clip`` (CACC's CLIP_TRUNCATE), channels from ``k`` on 0. ``dst``
    (memory bytes, offset, line stride, surface stride; a layout where no two elements share
    a byte, F.unique_bytes): the cube is stored there as it is computed, as F.write_feature
    would store it, and None returned (issue 31 #2: the store's own pass cost as much as the
    computation)."""
    c = -(-cfg.c // F.ATOM) * F.ATOM
    if k is None:  # offline: the cube itself, every lane, channels last as post_process
        # reads it (a read cube is a view of memory's channels-last atoms: one pass)
        acc, k = np.ascontiguousarray(acc.transpose(1, 2, 0), np.int32), acc.shape[0]
    shape = (c, cfg.h, cfg.w)
    stages, ops = _NO_STAGES, [_NO_OPERAND] * 4  # not written by post_process
    if cfg.stages:
        stages = np.zeros((2, 7), np.int64)
    for i, st in enumerate(cfg.stages):
        alu, mul = operands(st, shape, read)
        stages[i] = (1, ALU_CODES[st.alu], st.alu_shift, st.mul, st.mul_shift, st.prelu,
                     st.relu)
        ops[2 * i:2 * i + 2] = _operand_rows(alu, shape), _operand_rows(mul, shape)
    add = np.zeros(k, np.int64) if add is None else add
    # the kernel stores whole aligned 8-byte atoms: into memory where they are aligned, else
    # into a packed cube [C/8, H, W, 8] that is returned (as a [C, H, W] view) or stored
    aligned = dst is not None and dst[0].size % 8 == 0 and (dst[1] | dst[2] | dst[3]) % 8 == 0
    if dst is not None and aligned:
        mem, base, line, surf = dst
        words = mem.view(np.uint64)
    else:
        packed = np.empty((c // F.ATOM, cfg.h, cfg.w, F.ATOM), np.uint8)
        words = packed.reshape(-1).view(np.uint64)
        base, line, surf = 0, F.ATOM * cfg.w, F.ATOM * cfg.h * cfg.w
    sat = IC.launch_rows(post_process, post_process_parallel,
                         (acc, k, add, clip, stages, *ops, *cfg.cvt, *shape, words, base // 8,
                          line // 8, surf // 8), cfg.h, c * cfg.h * cfg.w, PARALLEL_ELEMENTS)
    out = None
    if not aligned:
        out = packed.view(np.int8).transpose(0, 3, 1, 2).reshape(shape)
        if dst is not None:
            F.write_feature(dst[0], dst[1], out, dst[2], dst[3])
            out = None
    return out, int(sat), 0


#: the cube's elements from which post_process runs on the launch's threads
#: (int_conv.parallel_for_elements: SERIAL_WORK, every parallel launch's threshold, scaled to
#: them): two threads were faster than one from 8192 on (AMD EPYC Zen 4, one thread -> two,
#: AVX-512: 32x16x16 5.6 -> 5.1 us, 16x16x16 4.0 -> 4.3 us; AVX2 approximation, best: 6.9 ->
#: 5.6 and 4.5 -> 4.4 us; a 64->64 3x3 layer's 64x32x32: 32 -> 19 us and 41 -> 23 us). The
#: bundled demo's cubes (16x8x8) stay on one thread and compile no parallel kernel
PARALLEL_ELEMENTS = 8192


#: post_process's arguments for a layer without X stages, made once (~4 us of a 64->64 3x3
#: layer made them per layer, issue 31 #2); not read-only, which would be another numba type
_NO_STAGES = np.zeros((2, 7), np.int64)
_NO_OPERAND = np.zeros((1, 1), np.int64)


def _operand_rows(op: np.ndarray | int, shape: tuple[int, int, int]) -> np.ndarray:
    """An operand as post_process takes it: int64 [C or 1, H*W or 1]."""
    a = np.asarray(op, np.int64)
    if a.ndim == 3 and a.shape[1:] != (1, 1):  # per element
        return np.ascontiguousarray(np.broadcast_to(a, shape).reshape(shape[0], -1))
    return np.ascontiguousarray(a.reshape(-1, 1) if a.ndim else a.reshape(1, 1))
