"""PDP, the planar data processor (pooling), INT8 offline mode: PDP_RDMA reads the input cube,
PDP pools it and writes the output cube. The arithmetic follows the hardware repository's C model
(cmod/pdp/NV_NVDLA_pdp.cpp: LineOperation, PoolingStage0Calc, PoolingStage1Calc; facts, written
here in numpy over the channel lanes):

* windows: output (oy, ox) covers input rows oy*stride_h - pad_top .. + kernel_h - 1 and columns
  likewise; only windows that end inside the padded cube exist;
* a window is reduced along its row first, then over its rows: MAX and MIN over the input
  elements only (padding does not take part), AVERAGE as a sum in 16 bits (the line buffers of
  INT8 data are 16 bits wide) plus the padding values: PAD_VALUE_nX (n = the padded positions
  the C model counts, sign-extended from bit 7/8/9/9/10/10/10 for n = 1..7) added once per row
  for the columns, and times the kernel width for padded rows;
* AVERAGE divides by multiplying with RECIP_KERNEL_WIDTH / 2^16, rounding half away from zero,
  then with RECIP_KERNEL_HEIGHT / 2^16, rounding again; the result is stored as int8 (wrapping).

The padding counts follow the C model's bookkeeping literally (in a window narrower than its
padding on both sides the count is the kernel width minus the elements seen), so the model loops
over columns and rows as the C model does, with the channels as vectors.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...emu.numeric.nvdla import round_shift, wrap
from ..errors import DeviceError
from . import feature as F
from .feature import Reg


def wrap16(v):
    """A 16-bit line-buffer store (INT8 data pools in 16 bits)."""
    return wrap(v, 16)


METHODS = ("average", "max", "min")
_SIGN_BITS = (7, 8, 9, 9, 10, 10, 10)


def pad_value(raw: int, sign_bit: int) -> int:
    """PAD_VALUE_nX as the C model extends it (int_sign_extend) into a 16-bit entry."""
    ext = ((1 << (32 - sign_bit - 1)) - 1) if raw >> sign_bit & 1 else 0
    return int(wrap16((ext << (sign_bit + 1)) | raw))


@dataclass(frozen=True)
class PdpConfig:
    w: int
    h: int
    c: int
    out_w: int
    out_h: int
    method: str
    kernel: tuple[int, int]  # (height, width)
    stride: tuple[int, int]
    pad: tuple[int, int, int, int]  # top, bottom, left, right
    pad_values: tuple[int, ...]
    recip: tuple[int, int]  # (width, height)
    src: tuple[int, int, int]
    dst: tuple[int, int, int]

    def summary(self) -> str:
        kh, kw = self.kernel
        return (f"PDP {self.method} {kh}x{kw} stride {self.stride[0]}x{self.stride[1]}, "
                f"{self.c}x{self.h}x{self.w} -> {self.c}x{self.out_h}x{self.out_w}")


def decode(reg: Reg, flying: bool = False) -> PdpConfig:
    """PDP's consumer group; ``flying``: its input is SDP's output (PDP_RDMA is not used)."""
    def bad(msg: str) -> DeviceError:
        return DeviceError(f"PDP: {msg}")

    mode = reg("PDP", "D_OPERATION_MODE_CFG")
    if bool(mode.flying_mode) == flying:  # FLYING_MODE: 0 on the fly, 1 off (SDP's is reversed)
        raise bad("PDP_D_OPERATION_MODE_CFG.flying_mode is "
                  + ("OFF_FLYING, but SDP sends its output to PDP" if flying else
                     "ON_FLYING, but SDP does not send its output to PDP"))
    method = mode.pooling_method
    if method == 3:
        raise bad("PDP_D_OPERATION_MODE_CFG.pooling_method 3 is reserved")
    if reg("PDP", "D_DATA_FORMAT").input_data or \
            not flying and reg("PDP_RDMA", "D_DATA_FORMAT").input_data:
        raise bad("D_DATA_FORMAT selects INT16/FP16: nv_small pools INT8 only")
    w = reg("PDP", "D_DATA_CUBE_IN_WIDTH").cube_in_width + 1
    h = reg("PDP", "D_DATA_CUBE_IN_HEIGHT").cube_in_height + 1
    c = reg("PDP", "D_DATA_CUBE_IN_CHANNEL").cube_in_channel + 1
    rdma = (reg("PDP_RDMA", "D_DATA_CUBE_IN_WIDTH").cube_in_width + 1,
            reg("PDP_RDMA", "D_DATA_CUBE_IN_HEIGHT").cube_in_height + 1,
            reg("PDP_RDMA", "D_DATA_CUBE_IN_CHANNEL").cube_in_channel + 1)
    if not flying and rdma != (w, h, c):
        raise bad(f"PDP_RDMA_D_DATA_CUBE_IN_* give {rdma[2]}x{rdma[1]}x{rdma[0]}, PDP's "
                  f"{c}x{h}x{w}")
    out_w = reg("PDP", "D_DATA_CUBE_OUT_WIDTH").cube_out_width + 1
    out_h = reg("PDP", "D_DATA_CUBE_OUT_HEIGHT").cube_out_height + 1
    if reg("PDP", "D_DATA_CUBE_OUT_CHANNEL").cube_out_channel + 1 != c:
        raise bad("PDP_D_DATA_CUBE_OUT_CHANNEL differs from the input channels")
    k = reg("PDP", "D_POOLING_KERNEL_CFG")
    kernel = (k.kernel_height + 1, k.kernel_width + 1)
    stride = (k.kernel_stride_height + 1, k.kernel_stride_width + 1)
    p = reg("PDP", "D_POOLING_PADDING_CFG")
    pad = (p.pad_top, p.pad_bottom, p.pad_left, p.pad_right)
    for axis, size, kk, st, lo, hi, name in ((1, w, kernel[1], stride[1], pad[2], pad[3], "WIDTH"),
                                             (0, h, kernel[0], stride[0], pad[0], pad[1],
                                              "HEIGHT")):
        expect = (size + lo + hi - kk) // st + 1
        got = out_w if axis else out_h
        if got != expect:
            raise bad(f"PDP_D_DATA_CUBE_OUT_{name} gives {got}, the input, kernel, padding and "
                      f"stride give {expect}")
    pads = tuple(pad_value(getattr(reg("PDP", f"D_POOLING_PADDING_VALUE_{n}_CFG"),
                                   f"pad_value_{n}x"), sb)
                 for n, sb in zip(range(1, 8), _SIGN_BITS))
    recip = (reg("PDP", "D_RECIP_KERNEL_WIDTH").recip_kernel_width,
             reg("PDP", "D_RECIP_KERNEL_HEIGHT").recip_kernel_height)
    src = F.cube_address(reg, "PDP_RDMA", "src")
    dst = F.cube_address(reg, "PDP", "dst")
    return PdpConfig(w, h, c, out_w, out_h, METHODS[method], kernel, stride, pad, pads, recip,
                     src, dst)


def _reduce(method: str, acc, value, first: bool):
    if first:
        return value.copy()
    if method == "max":
        return np.maximum(acc, value)
    if method == "min":
        return np.minimum(acc, value)
    return wrap16(acc + value)


def pool(cfg: PdpConfig, x: np.ndarray) -> np.ndarray:
    """int8 [C, H, W] -> int8 [C, OH, OW] as the C model computes it."""
    kh, kw = cfg.kernel
    sh, sw = cfg.stride
    top, bottom, left, right = cfg.pad
    avg = cfg.method == "average"
    pads = cfg.pad_values
    lanes = x.shape[0]
    x = x.astype(np.int64)
    # width pass: line[y][ox] for every input row, the C model's LineOperation
    line: dict[tuple[int, int], np.ndarray] = {}
    for y in range(cfg.h):
        acc: dict[int, np.ndarray] = {}
        for xi in range(cfg.w):
            for kwi in range(kw):
                if not (left + xi >= kwi and left + xi + (kw - kwi) <= left + right + cfg.w
                        and (left + xi - kwi) % sw == 0):
                    continue
                ox = (left + xi - kwi) // sw
                first = xi == 0 or kwi == 0
                v = _reduce(cfg.method, acc.get(ox), x[:, y, xi], first)
                if avg:
                    add_left = xi + 1 < kw and (kwi + 1 == kw or (xi + 1 == cfg.w and xi < kwi
                                                                    and left))
                    add_right = xi + kw - kwi > cfg.w and xi + 1 == cfg.w
                    if add_left:
                        v = wrap16(v + pads[kw - (xi + 1) - 1])
                    elif add_right:
                        v = wrap16(v + pads[kw - (kwi + 1) - 1])
                acc[ox] = v
                if kwi + 1 == kw or (xi + kw - kwi > cfg.w and xi + 1 == cfg.w):
                    line[(y, ox)] = v
    # height pass: the C model's PoolingStage0Calc over the rows of each window
    out = np.zeros((lanes, cfg.out_h, cfg.out_w), np.int64)
    for (y, ox), v in sorted(line.items()):
        if ox >= cfg.out_w:
            continue
        for khi in range(kh):
            if not (top + y >= khi and top + y + (kh - khi) <= top + bottom + cfg.h
                    and (top + y - khi) % sh == 0):
                continue
            oy = (top + y - khi) // sh
            if oy >= cfg.out_h:
                continue
            first = y == 0 or khi == 0
            r = _reduce(cfg.method, out[:, oy, ox], v, first)
            if avg:
                add_top = y + 1 < kh and (khi + 1 == kh or (y + 1 == cfg.h and y < khi))
                add_bottom = y + kh - khi > cfg.h and y + 1 == cfg.h
                if add_top:
                    r = wrap16(r + wrap16(pads[kh - (y + 1) - 1] * kw))
                elif add_bottom:
                    r = wrap16(r + wrap16(pads[kh - (khi + 1) - 1] * kw))
            out[:, oy, ox] = r
    if avg:
        # times the reciprocals / 2^16, each rounded (the C model's double arithmetic, exact here)
        out = round_shift(round_shift(out * cfg.recip[0], 16) * cfg.recip[1], 16)
    return wrap(out, 8).astype(np.int8)

