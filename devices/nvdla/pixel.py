"""Image (pixel) input of the convolution pipeline for nv_small: the pixel formats CDMA reads,
the pitch-linear planes, the per-element mean and the input converter (CDMA), as the hardware
repository's C model and RTL define them (facts from cmod/cdma/NV_NVDLA_cdma.cpp
ImageConvDataRequest/ResponseSequencerCommon, cmod/hls_wrapper/cdma_hls_wrapper.cpp and
vmod/nvdla/cdma/NV_NVDLA_CDMA_IMG_ctrl.v, branch nv_small; written here in numpy):

* nv_small's RTL (FEATURE_DATA_TYPE_INT8) keeps the 8-bit formats only: T_R8, the eight
  A/X-R-G-B orders, T_A8Y8U8V8, T_V8U8Y8A8 and the semi-planar T_Y8___U8V8_N444 /
  T_Y8___V8U8_N444; the 10-, 12- and 16-bit formats are compiled out (errors here);
* a pixel's elements are reordered to R, G, B, A (Y, U, V, A); format names list the fields from
  the most significant byte of a little-endian word, so T_A8B8G8R8 holds R in its first byte;
* line y of plane 0 starts at DAIN_ADDR_0 + y * LINE_STRIDE, pixel x at (PIXEL_X_OFFSET + x) *
  bytes per pixel; plane 1 (U and V of the semi-planar formats, two bytes a pixel) at
  DAIN_ADDR_1 + y * LINE_UV_STRIDE + (2 * PIXEL_X_OFFSET) % 8 + 2 * x (the offset is a pixel's
  place in the first 8-byte memory atom of a line, nv_small's atom; PIXEL_Y_OFFSET is unused);
* converter (CVT_EN): the byte as unsigned 0..255 (signed with PIXEL_SIGN_OVERRIDE) minus the
  element's mean (MEAN_RY/GU/BV/AX when MEAN_FORMAT is enabled, else CVT_OFFSET), times
  CVT_SCALE, shifted right by CVT_TRUNCATE rounding half away from zero, saturated to 17 bits,
  then to int8; without CVT_EN the byte passes unchanged and no mean is subtracted.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...emu.numeric.nvdla import cdma_convert
from ..bits import sign_extend
from ..description import FieldView
from ..errors import DeviceError
from .feature import ATOM  # bytes of a memory atom (nv_small)


@dataclass(frozen=True)
class PixelFormat:
    name: str
    bytes0: int  # bytes of a pixel in plane 0
    #: where element e (R, G, B, A order) of a pixel lies among its bytes (plane 0 then plane 1)
    order: tuple[int, ...]
    planar: bool = False  # plane 1 holds two bytes a pixel (U and V)

    @property
    def elements(self) -> int:
        return len(self.order)


#: D_DATAIN_FORMAT.pixel_format -> format, for those nv_small has (cmod's reorder tables)
FORMATS: dict[int, PixelFormat] = {
    0: PixelFormat("T_R8", 1, (0,)),
    12: PixelFormat("T_A8B8G8R8", 4, (0, 1, 2, 3)),
    13: PixelFormat("T_A8R8G8B8", 4, (2, 1, 0, 3)),
    14: PixelFormat("T_B8G8R8A8", 4, (1, 2, 3, 0)),
    15: PixelFormat("T_R8G8B8A8", 4, (3, 2, 1, 0)),
    16: PixelFormat("T_X8B8G8R8", 4, (0, 1, 2, 3)),
    17: PixelFormat("T_X8R8G8B8", 4, (2, 1, 0, 3)),
    18: PixelFormat("T_B8G8R8X8", 4, (1, 2, 3, 0)),
    19: PixelFormat("T_R8G8B8X8", 4, (3, 2, 1, 0)),
    26: PixelFormat("T_A8Y8U8V8", 4, (2, 1, 0, 3)),
    27: PixelFormat("T_V8U8Y8A8", 4, (1, 2, 3, 0)),
    28: PixelFormat("T_Y8___U8V8_N444", 1, (0, 2, 1), planar=True),
    29: PixelFormat("T_Y8___V8U8_N444", 1, (0, 1, 2), planar=True),
}


@dataclass(frozen=True)
class PixelConfig:
    fmt: PixelFormat
    x_offset: int
    addr: tuple[int, int]  # planes 0 and 1
    line: tuple[int, int]  # LINE_STRIDE, LINE_UV_STRIDE
    signed: bool
    mean: tuple[int, int, int, int] | None  # RY, GU, BV, AX when MEAN_FORMAT is enabled

    def spans(self, h: int, w: int) -> list[tuple[int, int]]:
        """(address, bytes) of the planes' pixels the layer reads."""
        out = [(self.addr[0], (h - 1) * self.line[0] + (self.x_offset + w) * self.fmt.bytes0)]
        if self.fmt.planar:
            out.append((self.addr[1], (h - 1) * self.line[1] + _uv_start(self.x_offset) + 2 * w))
        return out


def _uv_start(x_offset: int) -> int:
    return (2 * x_offset) % ATOM


def decode(reg: Callable[[str, str], FieldView], w: int) -> PixelConfig:
    """CDMA's pixel registers, read by field name; DeviceError naming the register for what
    nv_small lacks."""
    fmt_reg = reg("CDMA", "D_DATAIN_FORMAT")
    code = fmt_reg.pixel_format
    fmt = FORMATS.get(code)
    if fmt is None:
        raise DeviceError(f"convolution: CDMA_D_DATAIN_FORMAT.pixel_format is {code}: nv_small "
                          "reads the 8-bit pixel formats only (" +
                          ", ".join(f"{c} {f.name}" for c, f in FORMATS.items()) +
                          "; RTL NV_NVDLA_CDMA_IMG_ctrl.v)")
    if fmt_reg.pixel_mapping:
        raise DeviceError("convolution: CDMA_D_DATAIN_FORMAT.pixel_mapping is RESERVED_LINEAR: "
                          "images are read pitch linear")
    x_offset = reg("CDMA", "D_PIXEL_OFFSET").pixel_x_offset
    if x_offset * fmt.bytes0 >= ATOM:
        raise DeviceError(f"convolution: CDMA_D_PIXEL_OFFSET.pixel_x_offset is {x_offset}: it "
                          f"places the first pixel inside the line's first {ATOM}-byte atom, "
                          f"at most {ATOM // fmt.bytes0 - 1} for {fmt.name}")
    line = (reg("CDMA", "D_LINE_STRIDE").line_stride,
            reg("CDMA", "D_LINE_UV_STRIDE").uv_line_stride)
    need = (x_offset + w) * fmt.bytes0
    if need > line[0]:
        raise DeviceError(f"convolution: CDMA_D_LINE_STRIDE ({line[0]:#x}) is shorter than a "
                          f"line of {fmt.name} pixels ({need:#x} bytes)")
    if fmt.planar and _uv_start(x_offset) + 2 * w > line[1]:
        raise DeviceError(f"convolution: CDMA_D_LINE_UV_STRIDE ({line[1]:#x}) is shorter than a "
                          f"line of U and V ({_uv_start(x_offset) + 2 * w:#x} bytes)")
    addr = tuple(getattr(reg("CDMA", f"D_DAIN_ADDR_HIGH_{p}"), f"datain_addr_high_{p}") << 32
                 | getattr(reg("CDMA", f"D_DAIN_ADDR_LOW_{p}"), f"datain_addr_low_{p}")
                 for p in (0, 1))
    mean = None
    if reg("CDMA", "D_MEAN_FORMAT").mean_format:
        m0, m1 = reg("CDMA", "D_MEAN_GLOBAL_0"), reg("CDMA", "D_MEAN_GLOBAL_1")
        mean = tuple(sign_extend(v, 16) for v in (m0.mean_ry, m0.mean_gu, m1.mean_bv, m1.mean_ax))
    return PixelConfig(fmt, x_offset, addr, line, bool(fmt_reg.pixel_sign_override), mean)


def read_pixels(cfg: PixelConfig, planes: list[np.ndarray], h: int, w: int) -> np.ndarray:
    """The raw elements [E, H, W] (uint8, R G B A order) from the planes' bytes, each array
    starting at its plane's address (as :meth:`PixelConfig.spans` gives them)."""
    fmt = cfg.fmt
    y = np.arange(h)[:, None]
    x = np.arange(w)[None, :]
    out = np.empty((fmt.elements, h, w), np.uint8)
    for e, b in enumerate(fmt.order):
        if b < fmt.bytes0:
            out[e] = planes[0][y * cfg.line[0] + (cfg.x_offset + x) * fmt.bytes0 + b]
        else:  # U or V in plane 1
            out[e] = planes[1][y * cfg.line[1] + _uv_start(cfg.x_offset) + 2 * x + b
                               - fmt.bytes0]
    return out


def convert(cfg: PixelConfig, raw: np.ndarray, cvt: tuple[int, int, int] | None) -> np.ndarray:
    """int8 [E, H, W] as CDMA stores it in the convolution buffer."""
    if cvt is None:
        return raw.view(np.int8)
    offset, scale, shift = cvt
    values = raw.view(np.int8) if cfg.signed else raw
    sub = (np.asarray(cfg.mean[:raw.shape[0]], np.int64)[:, None, None] if cfg.mean is not None
           else offset)
    return cdma_convert(values, sub, scale, shift)
