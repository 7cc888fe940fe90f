"""Independent plain-integer-numpy reference of one MAX78000 layer (no numba, nothing imported
from accelstub.emu or the emulator's decoding in accelstub.devices.max78000.layer/_datapath),
written from the arithmetic of the ai8x documentation (A§1.8). It lives in devices/ so the
program builder (max78000_build.py) can compute the known answers it writes into
sampleoutput.h; the tests use it through tests/max78000_reference.py.

* pooling before the conv, no padding; out = (in - pool)//stride + 1 (section 1.9);
  average = mean of the window, rounded per policy (section 7 A3):
  "trunc" (izer "floor" mode: toward zero), "away" (izer "rounding" mode: half away from zero),
  "floor" (floor(mean)), "floor_half" (floor(mean + 1/2));
* acc = sum w*x over the zero-padded pooled input + 128*bias (section 1.8);
* 8-bit output v = floor(acc * 2**s / 128 + 1/2) [AI8X: Rounding], clipped to [-128, 127], then
  ReLU -> clip [0, 127] or Abs -> min(|v|, 127);
* 32-bit output = acc as a signed 32-bit value;
* element-wise operations (``eltwise``) and the zero insertion of transposed convolutions
  (``zero_stuff``) as separate steps the caller chains with ``pool`` and ``layer``.

The rounding is evaluated as an exact rational floor (see ``_round``), a different formulation
from the emulator's shift-based one.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def pool(x: np.ndarray, ph: int, pw: int, stride: int, kind: str, policy: str = "trunc"):
    """kind: 'none' (decimate), 'max' or 'avg'. x is [C,H,W] integers."""
    x = np.asarray(x, dtype=np.int64)
    if kind == "none":
        ph = pw = 1
    if x.shape[1] < ph or x.shape[2] < pw:
        return np.zeros((x.shape[0], 0, 0), dtype=np.int64)
    win = sliding_window_view(x, (ph, pw), axis=(1, 2))[:, ::stride, ::stride]
    if kind == "none":
        return win[..., 0, 0].copy()
    if kind == "max":
        return win.max(axis=(3, 4))
    total = win.sum(axis=(3, 4))
    n = ph * pw
    mean = total / n  # exact enough: |total| < 2**15, n <= 256
    if policy == "trunc":
        v = np.trunc(mean)
    elif policy == "away":
        v = np.where(mean < 0, np.ceil(mean - 0.5), np.floor(mean + 0.5))
    elif policy == "floor":
        v = np.floor_divide(total, n)
        return np.clip(v, -128, 127).astype(np.int64)
    elif policy == "floor_half":
        v = np.floor_divide(2 * total + n, 2 * n)
        return np.clip(v, -128, 127).astype(np.int64)
    else:
        raise ValueError(policy)
    return np.clip(v, -128, 127).astype(np.int64)


def conv_acc(x: np.ndarray, w: np.ndarray, bias, pad_h: int, pad_w: int, stride: int = 1):
    """acc[k,y,x] = sum_{c,i,j} w[k,c,i,j] * xpad[c, y*stride+i, x*stride+j] + 128*bias[k]."""
    x = np.asarray(x, dtype=np.int64)
    w = np.asarray(w, dtype=np.int64)
    xp = np.pad(x, ((0, 0), (pad_h, pad_h), (pad_w, pad_w)))
    kh, kw = w.shape[2], w.shape[3]
    if xp.shape[1] < kh or xp.shape[2] < kw:
        return np.zeros((w.shape[0], 0, 0), dtype=np.int64)
    win = sliding_window_view(xp, (kh, kw), axis=(1, 2))[:, ::stride, ::stride]  # C,Ho,Wo,kh,kw
    acc = np.einsum("cyxij,kcij->kyx", win, w)
    if bias is not None:
        acc = acc + 128 * np.asarray(bias, dtype=np.int64)[:, None, None]
    return acc


def _round(acc: np.ndarray, s: int) -> np.ndarray:
    """floor(acc * 2**s / 128 + 1/2) as floor((2*acc*2**a + 128*2**b) / (256*2**b)),
    a = max(s, 0), b = max(-s, 0)."""
    a, b = max(s, 0), max(-s, 0)
    num = 2 * acc * (2 ** a) + 128 * (2 ** b)
    den = 256 * (2 ** b)
    return np.floor_divide(num, den)


def requant(acc: np.ndarray, s: int, act: str) -> np.ndarray:
    v = np.clip(_round(np.asarray(acc, dtype=np.int64), s), -128, 127)
    if act == "relu":
        v = np.clip(v, 0, 127)
    elif act == "abs":
        v = np.minimum(np.abs(v), 127)
    return v.astype(np.int64)


def to_int32(acc: np.ndarray) -> np.ndarray:
    return ((np.asarray(acc, dtype=np.int64) + 2**31) % 2**32 - 2**31).astype(np.int64)


def layer(x, w, bias=None, *, pool_size=(1, 1), pool_stride=1, pool_kind="none",
          avg_policy="trunc", pad=(0, 0), conv_stride=1, shift=0, act="none", wide=False):
    """The whole layer: pool -> conv (+bias) -> requant/activation or 32-bit output."""
    p = pool(x, pool_size[0], pool_size[1], pool_stride, pool_kind, avg_policy)
    acc = conv_acc(p, w, bias, pad[0], pad[1], conv_stride)
    if wide:
        return to_int32(acc)
    return requant(acc, shift, act)


def zero_stuff(x: np.ndarray) -> np.ndarray:
    """Transposed-convolution input: "a 0 byte after each actual input data byte ... and a row
    of 0s following each row" [UG-CNN: Table 27-38]: [C,H,W] -> [C,2H,2W], x at even positions."""
    x = np.asarray(x, dtype=np.int64)
    out = np.zeros((x.shape[0], 2 * x.shape[1], 2 * x.shape[2]), dtype=np.int64)
    out[:, ::2, ::2] = x
    return out


def eltwise(xs, fn: str) -> np.ndarray:
    """Element-wise operation over operands xs[0], xs[1], ... ([UG-CNN: Table 27-25] ewise_func:
    sub, add, or, xor), folded left to right at full resolution and clipped to int8 once at the end
    (section 7 A4, A9: operand 0 - operand 1 - ...); OR/XOR act on the two's complement bytes."""
    v = np.asarray(xs[0], dtype=np.int64)
    for b in xs[1:]:
        b = np.asarray(b, dtype=np.int64)
        if fn == "add":
            v = v + b
        elif fn == "sub":
            v = v - b
        elif fn in ("or", "xor"):
            u = (v & 0xFF) | (b & 0xFF) if fn == "or" else (v & 0xFF) ^ (b & 0xFF)
            v = sign_extend(u, 8)
        else:
            raise ValueError(fn)
    return np.clip(v, -128, 127).astype(np.int64)


def sign_extend(v, bits: int):
    """Two's complement value of the low ``bits`` of v."""
    v = np.asarray(v, dtype=np.int64) & ((1 << bits) - 1)
    return np.where(v >= 1 << (bits - 1), v - (1 << bits), v)
