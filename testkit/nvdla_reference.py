"""An independent integer reference for NVDLA nv_small layers, for tests: written from the
convolution pipeline's registers ([NVDLA-CONV], docs/citations.md), the project's notes on it
(docs/citations.md) and the hardware
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


def cdma_convert(image: np.ndarray, offset: int, scale: int, shift: int) -> np.ndarray:
    """CDMA's input converter on feature data: (x - offset) * scale >> shift rounded half away
    from zero, saturated to 17 bits, then to int8."""
    out = np.zeros_like(image, dtype=np.int64)
    for idx, x in np.ndenumerate(image):
        out[idx] = _convert(int(x), offset, scale, shift)
    return out


def _convert(x: int, offset: int, scale: int, shift: int) -> int:
    return sat(sat(rshift_round((x - offset) * scale, shift), 17), 8)


#: pixel formats nv_small reads (the register manual's D_DATAIN_FORMAT.pixel_format codes)
PIXEL_CODES = {"R8": 0, "A8B8G8R8": 12, "A8R8G8B8": 13, "B8G8R8A8": 14, "R8G8B8A8": 15,
               "X8B8G8R8": 16, "X8R8G8B8": 17, "B8G8R8X8": 18, "R8G8B8X8": 19, "A8Y8U8V8": 26,
               "V8U8Y8A8": 27, "Y8___U8V8_N444": 28, "Y8___V8U8_N444": 29}
_ELEMENT = {"R": 0, "G": 1, "B": 2, "Y": 0, "U": 1, "V": 2, "A": 3, "X": 3}


def _fields(part: str) -> list[str]:
    """'A8B8G8R8' -> ['A', 'B', 'G', 'R'] (most significant byte first)."""
    return [ch for ch in part if ch.isalpha()]


def pixel_elements(fmt: str) -> int:
    return len({_ELEMENT[f] for f in _fields(fmt.replace("_N444", ""))})


def pack_pixels(img: np.ndarray, fmt: str, x_offset: int, line: int, uv_line: int
                ) -> tuple[bytearray, bytearray]:
    """Elements [E, H, W] (0..255; R G B A or Y U V A) -> the bytes of planes 0 and 1. A format
    name lists its fields from the most significant byte of a little-endian word, so the first
    byte in memory is the last field named; a semi-planar name is "Y8___U8V8_N444": Y in plane
    0, the U/V pair in plane 1, two bytes a pixel. x_offset pixels precede each line's first
    pixel, in plane 1 modulo the 8-byte atom."""
    e, h, w = img.shape
    planes = fmt.replace("_N444", "").split("___")
    out = []
    for p, part in enumerate(planes):
        order = _fields(part)[::-1]  # byte order in memory
        bpp = len(order)
        stride = line if p == 0 else uv_line
        start = x_offset * bpp if p == 0 else (x_offset * bpp) % 8
        buf = bytearray((h - 1) * stride + start + w * bpp)
        for y in range(h):
            for x in range(w):
                for b, f in enumerate(order):
                    buf[y * stride + start + x * bpp + b] = int(img[_ELEMENT[f], y, x])
        out.append(buf)
    if len(out) == 1:
        out.append(bytearray())
    return out[0], out[1]


def pixel_convert(raw: np.ndarray, signed: bool, cvt: tuple[int, int, int] | None,
                  mean: tuple[int, int, int, int] | None) -> np.ndarray:
    """CDMA's image path into the convolution buffer: without the converter the byte itself
    (as int8); with it (byte - mean of the element, or the converter offset) * scale >> shift,
    rounded half away from zero, saturated to 17 then 8 bits; the byte is unsigned unless the
    sign override is set."""
    out = np.zeros(raw.shape, np.int64)
    for (e, y, x), b in np.ndenumerate(raw):
        b = int(b)
        as_int8 = b - 256 if b > 127 else b
        if cvt is None:
            out[e, y, x] = as_int8
            continue
        offset, scale, shift = cvt
        out[e, y, x] = _convert(as_int8 if signed else b, mean[e] if mean is not None else offset,
                                scale, shift)
    return out


def pack_image_weights(w: np.ndarray, y_ext: int) -> bytearray:
    """int8 rows [K, R, kc] -> image-convolution weight bytes: groups of 8 kernels; in a group,
    blocks of 8 row values, rows, kernels (a direct kernel of width 1); with a post extension of
    2 or 4 rows (kc <= 8 / y_ext): groups of y_ext rows, kernels, the group's rows of each
    kernel one after the other."""
    k, r, kc = w.shape
    if y_ext == 1:
        return pack_weights(w.reshape(k, r, 1, kc))
    out = bytearray()
    for g in range(0, k, 8):
        for r0 in range(0, r, y_ext):
            for ki in range(g, min(g + 8, k)):
                for ri in range(r0, min(r0 + y_ext, r)):
                    out += bytes(int(v) & 0xFF for v in w[ki, ri])
    return out


def image_conv(pixels: np.ndarray, weights: np.ndarray, stride: tuple[int, int],
               pad: tuple[int, int, int, int], pad_value: int, out_hw: tuple[int, int]
               ) -> np.ndarray:
    """Exact sums [K, OH, OW] of an image convolution: each padded line is a row of elements
    (pixel after pixel, E elements each); output (oy, ox) with kernel row r multiplies the
    row's kc weights with kc consecutive elements of line oy * sy + r from pixel ox * sx."""
    e, h, w = pixels.shape
    k, r, kc = weights.shape
    top, bottom, left, right = pad
    lines = []
    for y in range(-top, h + bottom):
        if 0 <= y < h:
            px = [pad_value] * (left * e) + [int(pixels[c, y, x]) for x in range(w)
                                             for c in range(e)] + [pad_value] * (right * e)
        else:
            px = [pad_value] * ((left + w + right) * e)
        lines.append(px)
    oh, ow = out_hw
    out = np.zeros((k, oh, ow), np.int64)
    for ki in range(k):
        for oy in range(oh):
            for ox in range(ow):
                acc = 0
                for ri in range(r):
                    row = lines[oy * stride[0] + ri]
                    base = ox * stride[1] * e
                    acc += sum(int(weights[ki, ri, j]) * row[base + j] for j in range(kc))
                out[ki, oy, ox] = acc
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
    return sdp_counted(values, ref)[0]


def sdp_counted(values: np.ndarray, ref: SdpRef) -> tuple[np.ndarray, int]:
    """:func:`sdp`, and how many values SDP_D_PERF_OUT_SATURATION counts: those the
    converter's 17-bit saturation moved by more than its rounding does (the floor shift of
    the scaled value and the saturated one differ by more than 1)."""
    c, h, w = values.shape
    out = np.zeros((c, h, w), np.int64)
    saturations = 0
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
                scaled = (v - off) * scale
                t17 = sat(rshift_round(scaled, shift), 17)
                saturations += abs((scaled >> shift) - t17) > 1
                out[ci, y, x] = sat(t17, 8)
    return out, saturations


def _i16(v: int) -> int:
    return ((v + 0x8000) & 0xFFFF) - 0x8000


def pdp_pad_value(raw: int, sign_bit: int) -> int:
    """PAD_VALUE_nX as a 16-bit entry: the bits above ``sign_bit`` filled with the sign, the
    register's own bits kept (the C model ORs the whole field in)."""
    ext = ((1 << (31 - sign_bit)) - 1) << (sign_bit + 1) if raw >> sign_bit & 1 else 0
    return _i16(ext | raw)


def pool(x: np.ndarray, method: str, kernel: tuple[int, int], stride: tuple[int, int],
         pad: tuple[int, int, int, int], pads: list[int], recip: tuple[int, int],
         out_hw: tuple[int, int]) -> np.ndarray:
    """int8 [C, H, W] -> int8 [C, OH, OW]: max/min over the window's input elements; average =
    16-bit sum of the input elements plus, per input row, the padding value of the window's
    padded columns, plus kernel width times the value of its padded rows, then the two
    reciprocal multiplies with rounding half away from zero, stored as int8 (wrapping)."""
    c, h, w = x.shape
    kh, kw = kernel
    top, _, left, _ = pad
    oh, ow = out_hw
    out = np.zeros((c, oh, ow), np.int64)
    for ci in range(c):
        for oy in range(oh):
            for ox in range(ow):
                y0, x0 = oy * stride[0] - top, ox * stride[1] - left
                rows = [y for y in range(y0, y0 + kh) if 0 <= y < h]
                cols = [xx for xx in range(x0, x0 + kw) if 0 <= xx < w]
                vals = [int(x[ci, y, xx]) for y in rows for xx in cols]
                if method == "max":
                    v = max(vals)
                elif method == "min":
                    v = min(vals)
                else:
                    n_cols, n_rows = kw - len(cols), kh - len(rows)
                    total = sum(vals)
                    if n_cols:
                        total += len(rows) * pads[n_cols - 1]
                    if n_rows:
                        total += _i16(pads[n_rows - 1] * kw)
                    v = rshift_round(rshift_round(_i16(total) * recip[0], 16) * recip[1], 16)
                out[ci, oy, ox] = ((v + 128) & 0xFF) - 128
    return out


@dataclass
class LrnRef:
    """CDP settings for :func:`lrn`."""

    normalz: int  # channels on each side (1..4)
    datin: tuple[int, int, int]  # offset (int8), scale, shift
    datout: tuple[int, int, int]  # offset, scale, shift
    le: list[int]  # 65 entries
    lo: list[int]  # 257 entries
    le_linear: bool
    le_start: int
    le_end: int
    le_select: int  # linear: index = (s - start) >> select; exponential: index offset
    lo_start: int
    lo_end: int
    lo_select: int
    slopes: tuple[int, ...] = (0, 0, 0, 0, 0, 0, 0, 0)  # LE u scale/shift, o scale/shift, LO ..
    priority: tuple[bool, bool, bool] = (False, False, False)  # uflow, oflow, hybrid: LO?
    sqsum_bypass: bool = False
    mul_bypass: bool = False


def _table(s: int, table: list[int], start: int, end: int, size: int, select: int,
           exponent: bool, slopes: tuple[int, int, int, int]) -> tuple[int, str]:
    """One lookup: (result, "under" | "over" | "hit")."""
    n = size - 1
    if exponent:
        t = s - start
        index = (t.bit_length() - 1 - select) if t > 0 else -1
        if t <= 0 or index < 0:
            base = 0 if select < 0 else 1 << select
            return sat(table[0] + rshift_round_signed((s - start - base) * slopes[0], slopes[1]),
                       16), "under"
        if index >= n:
            return sat(table[n] + rshift_round_signed((s - end) * slopes[2], slopes[3]), 16), \
                "over"
        frac = t - (1 << (index + select))
        sh = index + select
        frac = frac >> (sh - 16) if sh > 16 else frac << (16 - sh)
    else:
        t = s - start
        index = t >> select
        if t <= 0 or index < 0:
            return sat(table[0] + rshift_round_signed(t * slopes[0], slopes[1]), 16), "under"
        if index >= n:
            return sat(table[n] + rshift_round_signed((s - end) * slopes[2], slopes[3]), 16), \
                "over"
        frac = t % (1 << select)
        frac = frac >> (select - 16) if select > 16 else frac << (16 - select)
    lo, hi = table[index], table[index + 1]
    return sat(lo + rshift_round((hi - lo) * frac, 16), 16), "hit"


def rshift_round_signed(v: int, n: int) -> int:
    return v << -n if n < 0 else rshift_round(v, n)


def lrn(x: np.ndarray, c_real: int, ref: LrnRef, counts: dict | None = None) -> np.ndarray:
    """int8 [lanes, H, W] -> int8 [lanes, H, W] through CDP's integer path. ``counts`` (when
    given) adds up, over every lane of every atom, which table gave the result: "uflow" (both
    under), "oflow" (both over), "le_hit" / "lo_hit" (that one table only hit), "hybrid" (the
    rest), as CDP's LUT statistics count them."""
    lanes, h, w = x.shape
    off, scale, shift = ref.datin

    def cvt_in(v: int) -> int:
        return sat(rshift_round((v - off) * scale, shift), 9)

    out = np.zeros_like(x, dtype=np.int64)
    for y in range(h):
        for xx in range(w):
            d = [cvt_in(int(x[c, y, xx]) if c < c_real else off) for c in range(lanes)]

            def at(c: int) -> int:
                return d[c] if 0 <= c < lanes else cvt_in(off)

            for c in range(lanes):
                s = at(c) if ref.sqsum_bypass else \
                    sum(at(c + j) ** 2 for j in range(-ref.normalz, ref.normalz + 1))
                le, le_k = _table(s, ref.le, ref.le_start, ref.le_end, 65, ref.le_select,
                                  not ref.le_linear, ref.slopes[:4])
                lo, lo_k = _table(s, ref.lo, ref.lo_start, ref.lo_end, 257, ref.lo_select, False,
                                  ref.slopes[4:])
                if le_k == lo_k == "under":
                    r, kind = (lo if ref.priority[0] else le), "uflow"
                elif le_k == lo_k == "over":
                    r, kind = (lo if ref.priority[1] else le), "oflow"
                elif (le_k == "hit") != (lo_k == "hit"):
                    r, kind = (le, "le_hit") if le_k == "hit" else (lo, "lo_hit")
                else:
                    r, kind = (lo if ref.priority[2] else le), "hybrid"
                if counts is not None:
                    counts[kind] = counts.get(kind, 0) + 1
                v = r if ref.mul_bypass else r * at(c)
                o_off, o_scale, o_shift = ref.datout
                out[c, y, xx] = sat(rshift_round((v - o_off) * o_scale, o_shift), 8)
    return out
