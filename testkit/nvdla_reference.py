"""An independent integer reference for NVDLA nv_small layers, for tests: written from the seed
(shared/seeds/004, the convolution), the digest (shared/devices/nvdla.md) and the hardware
repository's documented formats and C-model arithmetic, in plain Python integers and loops, sharing
no code with devices/nvdla/.

* feature cube (int8): element (c, y, x) at c // 8 * surface + y * line + x * 8 + c % 8;
* direct-convolution weights: groups of 8 kernels; in a group, blocks of 8 channels, then rows,
  columns, the group's kernels, the block's channels;
* CACC: round half away from zero after dropping ``clip`` bits, saturate to int32;
* SDP X stage: ALU (operand << shift saturated to int32; max / min / sum), MUL (times operand;
  PReLU keeps non-negative values), shift right rounding half away from zero and saturating to
  int32, ReLU; converter (x - offset) * scale >> shift, rounded, saturated to 17 then 8 bits.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def sat(v: int, bits: int) -> int:
    return max(-(1 << (bits - 1)), min((1 << (bits - 1)) - 1, v))


def rshift_round(v: int, n: int) -> int:
    """v / 2^n rounded half away from zero."""
    if n == 0:
        return v
    q = (abs(v) + (1 << (n - 1))) >> n
    return -q if v < 0 else q


def feature_offset(c: int, y: int, x: int, line: int, surf: int) -> int:
    return (c // 8) * surf + y * line + x * 8 + c % 8


def pack_feature(cube: np.ndarray, line: int, surf: int) -> bytearray:
    """int8 [C, H, W] -> bytes with whole atoms (the unused lanes of the last surface zero)."""
    c, h, w = cube.shape
    out = bytearray(((c + 7) // 8 - 1) * surf + (h - 1) * line + w * 8)
    for ci in range(c):
        for y in range(h):
            for x in range(w):
                out[feature_offset(ci, y, x, line, surf)] = int(cube[ci, y, x]) & 0xFF
    return out


def unpack_feature(raw: bytes, c: int, h: int, w: int, line: int, surf: int) -> np.ndarray:
    out = np.zeros((c, h, w), np.int64)
    for ci in range(c):
        for y in range(h):
            for x in range(w):
                b = raw[feature_offset(ci, y, x, line, surf)]
                out[ci, y, x] = b - 256 if b > 127 else b
    return out


def pack_weights(w: np.ndarray) -> bytearray:
    """int8 [K, R, S, C] -> the direct-convolution weight bytes."""
    k, r, s, c = w.shape
    out = bytearray()
    for g in range(0, k, 8):
        kernels = range(g, min(g + 8, k))
        for cb in range(0, c, 8):
            chans = range(cb, min(cb + 8, c))
            for ri in range(r):
                for si in range(s):
                    for ki in kernels:
                        for ci in chans:
                            out.append(int(w[ki, ri, si, ci]) & 0xFF)
    return out


def conv(image: np.ndarray, weights: np.ndarray, stride: tuple[int, int],
         dilation: tuple[int, int], pad: tuple[int, int, int, int], pad_value: int,
         out_hw: tuple[int, int]) -> np.ndarray:
    """Exact sums [K, OH, OW]; ``pad`` is (top, bottom, left, right)."""
    c, h, w = image.shape
    k, r, s, _ = weights.shape
    top, bottom, left, right = pad
    big = np.full((c, h + top + bottom, w + left + right), pad_value, np.int64)
    big[:, top:top + h, left:left + w] = image
    oh, ow = out_hw
    out = np.zeros((k, oh, ow), np.int64)
    for ri in range(r):
        for si in range(s):
            rows = big[:, ri * dilation[0]: ri * dilation[0] + (oh - 1) * stride[0] + 1:stride[0],
                       si * dilation[1]: si * dilation[1] + (ow - 1) * stride[1] + 1:stride[1]]
            out += np.einsum("chw,kc->khw", rows,
                             weights[:, ri, si, :].astype(np.int64))
    return out


def cacc(v: int, clip: int) -> int:
    return sat(rshift_round(v, clip), 32)


@dataclass
class XStage:
    """One SDP X stage; operands are ints, or per-channel lists / per-element arrays [C, H, W]."""

    alu: str | None = None  # max | min | sum
    alu_operand: object = 0
    alu_shift: int = 0
    mul: bool = False
    mul_operand: object = 1
    mul_shift: int = 0
    prelu: bool = False
    relu: bool = False


@dataclass
class SdpRef:
    stages: list[XStage] = field(default_factory=list)
    cvt: tuple[int, int, int] = (0, 1, 0)


def _operand(op, c: int, y: int, x: int) -> int:
    if isinstance(op, (int, np.integer)):
        return int(op)
    if isinstance(op, np.ndarray) and op.ndim == 3:
        return int(op[c, y, x])
    return int(op[c])


def sdp(values: np.ndarray, ref: SdpRef) -> np.ndarray:
    """int [C, H, W] -> int8 [C, H, W] through the X stages and the converter."""
    c, h, w = values.shape
    out = np.zeros((c, h, w), np.int64)
    off, scale, shift = ref.cvt
    for ci in range(c):
        for y in range(h):
            for x in range(w):
                v = int(values[ci, y, x])
                for st in ref.stages:
                    if st.alu is not None:
                        a = sat(_operand(st.alu_operand, ci, y, x) << st.alu_shift, 32)
                        v = max(v, a) if st.alu == "max" else min(v, a) if st.alu == "min" \
                            else v + a
                    if st.mul and st.prelu and v >= 0:
                        v = ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
                    else:
                        if st.mul:
                            v *= _operand(st.mul_operand, ci, y, x)
                        v = sat(rshift_round(v, st.mul_shift), 32)
                    if st.relu:
                        v = max(v, 0)
                out[ci, y, x] = sat(sat(rshift_round((v - off) * scale, shift), 17), 8)
    return out
