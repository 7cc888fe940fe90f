"""Independent plain-integer reference for the Ethos-U85 kernels (tests only).

Written from the TRM pseudocode ([U85-TRM],
[U85-TRM: §3.6], C§4) with unbounded Python integers and no code shared with accelstub.emu. Rounding
modes are expressed by their definitions (round half up / half away from zero / toward zero /
floor) rather than by the TRM's "add R then shift" form, except the double-rounding modes whose
only definition is that formula [U85-TRM: §3.6.6]. Output-stage parameters are a plain dict ``o``:
bits, signed, zp, amin, amax, scale, shift, rnd, dbl, per_channel, acc_bits, func, table,
clip_none, raw.
"""
from __future__ import annotations

import numpy as np


def wrap(v: int, n: int) -> int:
    if n > 64:
        return v
    m = 1 << n
    v %= m
    return v - m if v >= m // 2 else v


def uwrap(v: int, n: int) -> int:
    return v % (1 << n)


def rshift_round(x: int, s: int, mode: int, dbl: int = 0) -> int:
    if s == 0:
        return x
    p = 1 << s
    if mode == 1:                                   # natural: floor(x/p + 1/2)
        return (2 * x + p) // (2 * p)
    if mode == 3:                                   # symmetric: half away from zero
        a = (2 * abs(x) + p) // (2 * p)
        return a if x >= 0 else -a
    if mode == 4:                                   # toward zero
        a = abs(x) // p
        return a if x >= 0 else -a
    if mode == 5:                                   # toward -inf
        return x // p
    d = (1 << (30 - dbl)) if s > 31 - dbl else 0
    if mode == 0:
        return (x + p // 2 + (d if x >= 0 else -d)) // p
    if mode == 2:
        return (x + p // 2 + d) // p
    raise ValueError(mode)


def lut_entry(lut: bytes, size: int, i: int, signed: bool = True) -> int:
    return int.from_bytes(lut[size * i:size * i + size], "little", signed=signed)


def activation(v: int, o: dict, lut: bytes) -> int:
    if o["bits"] == 64:
        return v
    if o["signed"]:
        zp, lo, hi = (wrap(o[k], 16) for k in ("zp", "amin", "amax"))
    else:
        zp, lo, hi = (uwrap(o[k], 16) for k in ("zp", "amin", "amax"))
    a = wrap(v + zp, 32)
    f = o.get("func", 0)
    t = o.get("table", 0)
    if f == 10:
        a = min(max(a, -65536), 65535)
    elif f == 11:
        a = min(max(a, -0x1F000), 0x1EFFF)
    elif not o.get("clip_none", False):
        a = min(max(a, lo), hi)
    if f == 1:
        a = lut[256 * t + a % 256]
    elif f == 4:
        a = lut_entry(lut, 1, 256 * t + (a + 128) % 256)
    elif f == 5:
        a = lut_entry(lut, 2, 256 * t + (a + 128) % 256)
    elif f == 7:
        a = lut_entry(lut, 4, 256 * t + (a + 128) % 256)
    elif f in (8, 9, 10, 11):
        sh = {8: 7, 9: 7, 10: 8, 11: 9}[f]
        i = (256 + (a >> sh)) % 512          # out-of-table index (clip none): wraps (decision)
        base = lut_entry(lut, 2, 2 * i)
        slope = lut_entry(lut, 2, 2 * i + 1)
        frac = a % (1 << sh)
        if f == 8:
            a = wrap((base * 128 + frac * slope + 64) >> 7, 16)
        elif f == 9:
            a = base * 128 + frac * slope
        elif f == 10:
            a = (base * 256 + frac * slope + (0x80 if a >= 0 else 0x7F)) >> 8
        else:
            a = (base * 512 + frac * slope + (0x1000200 if a >= 0 else 0x10001FF)) >> 10
    return a


def store(v: int, o: dict) -> int:
    if o["bits"] == 64:
        return wrap(v, 64)
    return wrap(v, o["bits"]) if o["signed"] else uwrap(v, o["bits"])


def output(acc: int, oc: int, o: dict, lut: bytes, bias=None, scales=None, shifts=None,
           avg_count: int | None = None, shift_only: bool = False) -> int:
    if o.get("raw"):
        return acc
    if o.get("per_channel") and oc >= 0:
        acc = wrap(acc + int(bias[oc]), o.get("acc_bits", 32))
        sc, sh = int(scales[oc]), int(shifts[oc])
    else:
        sc, sh = o["scale"], o["shift"]
    if avg_count is not None:
        d = max(avg_count, 1)
        k = (d - 1).bit_length()
        sc, sh = ((2 ** 30 + 1) * 2 ** k) // d, 30 + k
    x = acc if shift_only else acc * sc
    return store(activation(rshift_round(x, sh, o["rnd"], o.get("dbl", 0)), o, lut), o)


def values(raw, zp: int, bits: int, signed: bool):
    """Stored integers -> Python-int nested lists of (value - zero point)."""
    zp16 = wrap(zp, 16) if signed else uwrap(zp, 16)
    a = np.asarray(raw).astype(object)
    f = np.vectorize(lambda x: (wrap(int(x), bits) if signed else uwrap(int(x), bits)) - zp16,
                     otypes=[object])
    return f(a)


def conv(v, w, H, W, stride, dil, pad, o, lut, bias=None, scales=None, shifts=None,
         depthwise=False, acc0=None):
    """v: object array [IH, IW, C] zero-point corrected (already the derived extent);
    w: int array [OC, KH, KW, IC] undilated."""
    IH, IW = v.shape[0], v.shape[1]
    OC, KH, KW = w.shape[0], w.shape[1], w.shape[2]
    out = np.zeros((H, W, OC), dtype=object)
    for oy in range(H):
        for ox in range(W):
            for oc in range(OC):
                acc = 0 if acc0 is None else int(acc0[oy][ox][oc])
                for ky in range(KH):
                    for kx in range(KW):
                        iy = oy * stride[0] + ky * dil[0] - pad[0]
                        ix = ox * stride[1] + kx * dil[1] - pad[1]
                        if not (0 <= iy < IH and 0 <= ix < IW):
                            continue
                        if depthwise:
                            acc += int(v[iy, ix, oc]) * int(w[oc, ky, kx, 0])
                        else:
                            acc += sum(int(v[iy, ix, c]) * int(w[oc, ky, kx, c])
                                       for c in range(w.shape[3]))
                acc = wrap(acc, o.get("acc_bits", 32))
                out[oy, ox, oc] = output(acc, oc, o, lut, bias, scales, shifts)
    return out


def pool(v, mode, H, W, kernel, stride, pad, o, lut, bias=None, scales=None, shifts=None,
         acc0=None):
    IH, IW, C = v.shape
    accb = o.get("acc_bits", 32)
    if mode == 2:
        out = np.zeros((H, W, 1), dtype=object)
        for y in range(H):
            for x in range(W):
                s = (0 if acc0 is None else int(acc0[y][x][0])) + sum(int(t) for t in v[y, x, :])
                out[y, x, 0] = output(wrap(s, accb), 0, o, lut, bias, scales, shifts)
        return out
    out = np.zeros((H, W, C), dtype=object)
    big = 2 ** 31
    for y in range(H):
        for x in range(W):
            for c in range(C):
                ident = -big if mode in (0, 6, 7) else (big - 1 if mode == 5 else 0)
                acc = ident if acc0 is None else int(acc0[y][x][c])
                n = 0
                for ky in range(kernel[0]):
                    for kx in range(kernel[1]):
                        iy, ix = y * stride[0] + ky - pad[0], x * stride[1] + kx - pad[1]
                        inside = 0 <= iy < IH and 0 <= ix < IW
                        n += inside
                        t = int(v[iy, ix, c]) if inside and mode != 4 else ident
                        if mode == 0:
                            acc = max(acc, t)
                        elif mode == 5:
                            acc = min(acc, t)
                        elif mode in (1, 3):
                            acc = wrap(acc + t, accb)
                        elif mode in (6, 7):
                            if t > wrap(acc, 16):
                                acc = wrap(t + 65536 * (kx if mode == 6 else ky), accb)
                out[y, x, c] = output(acc, c, o, lut, bias, scales, shifts,
                                      avg_count=n if mode == 1 else None)
    return out


def _insc(a, bits, signed, sc):
    if bits == 8 or (bits == 16 and signed):
        return wrap(rshift_round(a * sc[0], sc[1], sc[2], sc[3]), 32)
    return a


def elementwise(mode, a, b, bits, signed, sc1, sc2, o, lut):
    """a, b: object arrays [H, W, C] (broadcast, zero-point corrected, scalars too)."""
    H, W, C = a.shape
    out = np.zeros((H, W, C), dtype=object)
    for y in range(H):
        for x in range(W):
            for c in range(C):
                av, bv = int(a[y, x, c]), int(b[y, x, c])
                sa, sb = _insc(av, bits, signed, sc1), _insc(bv, bits, signed, sc2)
                kind = "global"
                if mode == 0:
                    r = av * bv
                    if bits == 32:
                        kind = "shift"
                elif mode == 1:
                    r = sa + sb
                elif mode == 2:
                    r = sa - sb
                elif mode == 3:
                    r = min(sa, sb)
                elif mode == 4:
                    r = max(sa, sb)
                elif mode == 5:
                    r = sa if av >= 0 else _insc(av, bits, signed, sc2)
                elif mode == 6:
                    r = abs(sa)
                elif mode == 7:
                    r = 32 - uwrap(sa, 32).bit_length()
                elif mode == 8:
                    r, kind = rshift_round(sa, sb % 32, o["rnd"], o.get("dbl", 0)), "none"
                elif mode == 9:
                    r, kind = sa * 2 ** (sb % 32), "none"
                elif mode == 10:
                    m = {8: 0xFF, 16: 0xFFFF}.get(bits, 0xFFFFFFFF)
                    r, kind = (sa & m & 0xFFFFFFFF) >> (sb % 32), "none"
                elif mode == 11:
                    sign = 1 if (av < 0) == (bv < 0) else -1
                    r = 0 if bv == 0 else int(abs(av) // abs(bv)) * sign
                elif mode in (16, 17, 18, 19):
                    r = -1 if {16: sa == sb, 17: sa != sb, 18: sa >= sb, 19: sa > sb}[mode] else 0
                elif mode == 33:
                    r = sa & sb
                elif mode == 34:
                    r = sa | sb
                elif mode == 35:
                    r = sa ^ sb
                elif mode == 36:
                    r = -sa - 1
                elif mode == 42:
                    r = sa & (-sb - 1)
                if mode != 0:  # the product stays whole (design notes: Ethos-U85 elementwise mul)
                    r = wrap(r, 32)
                if kind == "none":
                    out[y, x, c] = store(activation(r, o, lut), o)
                else:
                    out[y, x, c] = output(r, -1, dict(o, per_channel=False), lut,
                                          shift_only=(kind == "shift"))
    return out


def resize(v, mode, OH, OW, n, off, step, o, lut):
    """v: object [IH, IW, C]; n = (ny, nx); off = (y, x); step = ((yi, ym), (xi, xm)).
    Input position of output j along an axis: (off + j*step)/n, step = int*n + mod."""
    IH, IW, C = v.shape
    out = np.zeros((OH, OW, C), dtype=object)

    def pos(j, axis):
        total = off[axis] + j * (step[axis][0] * n[axis] + step[axis][1])
        return total // n[axis], total % n[axis]       # floor division keeps mod in [0, n)

    for oy in range(OH):
        yi, ym = pos(oy, 0)
        y0, y1 = min(max(yi, 0), IH - 1), max(min(yi + 1, IH - 1), 0)
        for ox in range(OW):
            xi, xm = pos(ox, 1)
            x0, x1 = min(max(xi, 0), IW - 1), max(min(xi + 1, IW - 1), 0)
            for c in range(C):
                if mode == 0:
                    acc = ((n[0] - ym) * ((n[1] - xm) * v[y0, x0, c] + xm * v[y0, x1, c])
                           + ym * ((n[1] - xm) * v[y1, x0, c] + xm * v[y1, x1, c]))
                elif mode == 2:
                    acc = v[y0 if 2 * ym < n[0] else y1, x0 if 2 * xm < n[1] else x1, c]
                else:
                    acc = v[y0, x0, c]
                out[oy, ox, c] = output(int(acc) * 65536, -1, dict(o, per_channel=False), lut,
                                        shift_only=True)
    return out


def tflite_requantize(acc: int, real: float, zp: int, double: bool) -> int:
    """TFLite's output rescale of an accumulator by ``real`` (< 1) to a zero point ``zp``, not
    clamped: its QuantizeMultiplier (a Q31 multiplier and an exponent), then either one rounding
    ((acc*q + 2^(s-1)) >> s, BUILTIN_REF's TFLITE_SINGLE_ROUNDING form) or two (gemmlowp's
    SaturatingRoundingDoublingHighMul then RoundingDivideByPOT, what the NPU's double_symmetric
    gives: design notes, "Ethos-U85", rounding near-ties)."""
    import math

    frac, e = math.frexp(real)
    q = round(frac * (1 << 31))
    if q == 1 << 31:
        q, e = q // 2, e + 1
    assert e <= 0, "real >= 1 is not a rescale this helper covers"
    if not double:
        return ((acc * q + (1 << (30 - e))) >> (31 - e)) + zp
    ab = acc * q
    hi = (abs(ab) + (1 << 30) - (ab < 0)) >> 31  # nudge, then toward zero
    hi = hi if ab >= 0 else -hi
    mask = (1 << -e) - 1
    return (hi >> -e) + ((hi & mask) > (mask >> 1) + (hi < 0)) + zp
