"""MAX78000 (AI85) numeric primitives: weight fields, bias, output shift, rounding,
saturation, activation and the 32-bit output. Pure numba kernels.

Sources ("[AI8X: ...]" = a heading of the ai8x-synthesis documentation, "[UG-CNN: ...]" = a
table or heading of the user guide's CNN chapter, docs/citations.md; "A§n", "A7#An" = a section or
decision of the project's notes on the ai8x documentation, also resolved there):

* pipeline order pooling -> convolution -> bias -> shift/round/saturate -> activation
  ([AI8X: MAX78000 Hardware and Resources / Overview, Per-Layer Configuration]);
* products and sums at full resolution, saturation only at the very end
  [AI8X: Saturation and Clipping];
* bias enters as ``bias << 7`` ([UG-CNN: Table 27-38], A7#A6);
* ``v = floor(acc * 2**s / 128 + 1/2)`` ([AI8X: Rounding] "round half towards positive infinity",
  [AI8X: Per-Layer Configuration] output shift; A§1.8 canonical model), computed exactly in int64
  (A7#A5);
* clamp to [-128, 127] [AI8X: Saturation and Clipping], then ReLU = clamp [0, 127]
  [AI8X: Per-Layer Configuration] or Abs = min(|v|, 127) (A5#T10, public fact: ai8x-synthesis
  izer/simulate.py clips abs to 2**(bits-1)-1);
* the 32-bit (bigdwrt) output is the raw accumulator: no shift, rounding, clamp or activation
  [AI8X: Number Format, Per-Layer Configuration], [UG-CNN: Table 27-34].

Array layout: data ``[C, H, W]``, weights ``[K, C, kh, kw]`` (already sign-extended to int8),
bias ``[K]`` int64 holding the 8-bit bias values (zeros when the layer has none). The number of
distinct signatures is kept at one per kernel (C-contiguous int8/int64 arrays, int64 scalars).
"""
from __future__ import annotations

import numpy as np

from ..jit import njit

ACT_NONE = 0
ACT_RELU = 1
ACT_ABS = 2


def sign_extend(raw: np.ndarray, shift: np.ndarray | int, bits: int) -> np.ndarray:
    """The weight field ``bits`` wide at bit ``shift`` (per element, or one for all) of each
    byte of ``raw`` (uint8), two's complement, as int8 (A§1.3, public fact: izer kernels.py
    ``& (2**bits-1)``); ranges 8-bit [-128,127], 4-bit [-8,7], 2-bit [-2,1], 1-bit [-1,0]
    [AI8X: Number Format]. Plain numpy: it runs once per weight load
    (emu/memory/max78000.py gather_weights), not per inference."""
    v = (np.asarray(raw).astype(np.int16) >> shift) & ((1 << bits) - 1)
    return (v - ((v >> (bits - 1)) << bits)).astype(np.int8)


@njit(nogil=True, cache=True)
def requantize(acc, shift, act):
    """8-bit output: ``v = floor(acc * 2**shift / 128 + 1/2)`` with ``t = 7 - shift``:
    ``(acc + 2**(t-1)) >> t`` for t > 0, else ``acc << -t`` (arithmetic shifts, exact in int64;
    [AI8X: Rounding, Per-Layer Configuration], A§1.8); saturate to [-128, 127]
    [AI8X: Saturation and Clipping]; then ReLU clamps to [0, 127] [AI8X: Per-Layer Configuration] or
    Abs gives min(|v|, 127) ([UG-CNN: Table 27-38]; abs wins over ReLU, [UG-CNN: Table 27-38]).
    ``shift`` is the total shift held in POST.scale_reg/scale_shft, in [-15, 15]
    [AI8X: Per-Layer Configuration]. Returns int64 of the same shape."""
    out = np.empty(acc.shape, dtype=np.int64)
    fa = acc.ravel()
    fo = out.ravel()
    for i in range(fa.size):
        fo[i] = requant1(fa[i], shift, act)
    return out


@njit(nogil=True, cache=True)
def requant1(a, shift, act):
    """:func:`requantize` of one accumulator value."""
    t = 7 - shift
    if t > 0:
        v = (a + (np.int64(1) << (t - 1))) >> t
    else:
        v = a << (-t)
    if v > 127:
        v = 127
    elif v < -128:
        v = -128
    if act == ACT_RELU:
        if v < 0:
            v = 0
    elif act == ACT_ABS:
        if v < 0:
            v = -v
        if v > 127:
            v = 127
    return v


@njit(nogil=True, cache=True)
def wrap32(a):
    """:func:`wide_output` of one accumulator value."""
    v = a & 0xFFFFFFFF
    if v >= 0x80000000:
        v -= 0x100000000
    return v


@njit(nogil=True, cache=True)
def wide_output(acc):
    """32-bit (bigdwrt) output: the accumulator's low 32 bits, two's complement
    ([AI8X: Number Format] 'Q17.14 unclipped', [AI8X: Per-Layer Configuration] 'no hardware shift';
    [UG-CNN: Table 27-34] 'write 32-bit accumulator output')."""
    out = np.empty(acc.shape, dtype=np.int64)
    fa = acc.ravel()
    fo = out.ravel()
    for i in range(fa.size):
        fo[i] = wrap32(fa[i])
    return out


