"""One hardware layer of the convolution pipeline (CDMA, CSC, CMAC_A/B, CACC): the consumer
groups' registers decoded and checked against each other, then the direct INT8 convolution;
CACC's rounding and saturation run in one pass with SDP's stages (sdp.process, the kernel
emu/numeric/nvdla.py post_process). What leaves CACC goes to SDP; nv_small's CACC writes
nothing to memory itself.

Semantics ("[NVDLA-CONV: ...]" names the register or unit, docs/citations.md; "V§n" and
"V8#n" are project ids there; decisions in
docs/design-notes.md "NVDLA"):

* sizes are "n - 1" fields [NVDLA-CONV: CDMA data-group registers]; output W/H = (in + pad_l + pad_r
  - ((S-1)*dx + 1)) / stride + 1 with the dilated kernel (V8#23), checked against CSC/CACC
    D_DATAOUT_SIZE;
* padding reads the pad value, [7:0] as int8 [NVDLA-CONV: CDMA data-group registers]; CDMA's and
  CSC's must match ([NVDLA-CONV: CDMA_D_ZERO_PADDING_VALUE], [NVDLA-CONV: CSC_D_ZERO_PADDING_VALUE]:
  CSC pads feature data and an image's top and bottom, CDMA an image's sides);
* CDMA's converter (D_CVT_CFG) applies to feature data when enabled; the mean (MEAN_FORMAT) does
  not (facts from the C model, confirmed by the trace tests);
* sums are exact int32 (V8#13: the 22-bit figure is the MAC partial width); CACC divides
  by 2^CLIP_TRUNCATE rounding half away from zero and saturates to int32, counting saturations
  in D_OUT_SATURATION ([EXT] cmod NV_NVDLA_cacc.cpp,
  [NVDLA-CONV: CACC_D_CLIP_CFG, CACC_D_OUT_SATURATION]);
* nv_small has no Winograd, no weight compression and INT8 only ([EXT] spec/defs/nv_small.spec):
  those encodings and the other precisions are errors naming the register;
* pixel (image) input (pixel.py reads and converts it): CSC extends the kernel's width into its
  channels, so the weights are R rows of WEIGHT_CHANNEL_EXT = S * E values (E elements a pixel,
  the last pixel's may be cut short: its missing elements weigh 0), stored as a direct kernel of
  width 1; with POST_Y_EXTENSION 2 or 4 that many rows share one atom and are stored together
  per kernel; no dilation, no batches ([EXT] cmod csc/NV_NVDLA_csc.cpp
  SendImageDataToMacSequencerConvCommon and its weight sequencer);
* the convolution buffer across layers (D_MISC_CFG, [EXT] cmod cdma/NV_NVDLA_cdma.cpp, the data
  and weight request sequencers): a layer with SKIP_DATA_RLS / SKIP_WEIGHT_RLS keeps its
  converted input / weights in the buffer; the next convolution with DATA_REUSE / WEIGHT_REUSE
  uses them instead of reading memory when the input kind (feature or pixel) and D_BANK are
  unchanged, and reads memory otherwise; WEIGHT_REUSE after a layer that released its weights,
  with those settings unchanged, is the C model's invalid configuration (an error here).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...emu.conv import int_conv as IC
from ...emu.numeric.nvdla import cdma_convert
from ..bits import sign_extend
from ..content_cache import ContentCache, kept_for
from ..description import FieldView
from ..errors import DeviceError
from . import feature as F
from . import pixel as PX

#: reads a register of the consumer group by field name: (unit, register) -> FieldView
Reg = Callable[[str, str], FieldView]
#: bits of nv_small's one data type (INT8): pad values are taken from the low byte
INT8 = 8


@dataclass(frozen=True)
class ConvConfig:
    w: int
    h: int
    c: int
    k: int
    r: int  # kernel rows
    s: int  # kernel columns
    batches: int
    in_addr: int
    line: int
    surf: int
    wt_addr: int
    stride: tuple[int, int]  # (y, x)
    dilation: tuple[int, int]
    pad: tuple[int, int, int, int]  # top, bottom, left, right
    pad_value: int
    out_w: int
    out_h: int
    clip: int
    cvt: tuple[int, int, int] | None = None  # CDMA's converter: offset, scale, truncate
    pixel: PX.PixelConfig | None = None  # image input
    kc: int = 0  # image input: the weights' channels per row (CSC WEIGHT_CHANNEL_EXT)
    y_ext: int = 1  # image input: rows per weight atom (CSC POST_Y_EXTENSION)
    reuse: tuple[bool, bool] = (False, False)  # D_MISC_CFG DATA_REUSE, WEIGHT_REUSE
    keep: tuple[bool, bool] = (False, False)  # D_MISC_CFG SKIP_DATA_RLS, SKIP_WEIGHT_RLS
    bank: int = 0  # CDMA D_BANK

    @property
    def buffer_key(self) -> tuple[bool, int]:
        """What must not change for a layer to reuse its predecessor's buffer contents."""
        return self.pixel is not None, self.bank

    @property
    def weight_bytes(self) -> int:
        return self.k * self.r * (self.kc if self.pixel else self.s * self.c)

    def summary(self) -> str:
        return (f"conv {self.r}x{self.s}, "
                + (f"image {self.pixel.fmt.name} " if self.pixel else "")
                + f"{self.c}x{self.h}x{self.w} -> "
                f"{self.k}x{self.out_h}x{self.out_w}, stride {self.stride[1]}x{self.stride[0]}"
                + (f", dilation {self.dilation[1]}x{self.dilation[0]}"
                   if self.dilation != (1, 1) else "")
                + (f", {self.batches} batches" if self.batches > 1 else ""))


def decode(reg: Reg) -> ConvConfig:
    """The consumer groups of CDMA, CSC, CMAC_A/B and CACC as one convolution; inconsistent or
    unsupported settings raise DeviceError naming the registers. Fields are read by their names
    in configs/nvdla.toml (issue 33 #1)."""
    def bad(msg: str) -> DeviceError:
        return DeviceError(f"convolution: {msg}")

    misc = {u: reg(u, "D_MISC_CFG") for u in ("CDMA", "CSC", "CMAC_A", "CMAC_B", "CACC")}
    for u, v in misc.items():
        if v.conv_mode:
            raise bad(f"{u}_D_MISC_CFG.conv_mode is WINOGRAD: nv_small has no Winograd "
                      "(spec/defs/nv_small.spec)")
        if v.proc_precision:
            raise bad(f"{u}_D_MISC_CFG.proc_precision is {v.proc_precision}: nv_small computes "
                      "INT8 only")
    cdma_misc = misc["CDMA"]
    if cdma_misc.in_precision:
        raise bad("CDMA_D_MISC_CFG.in_precision is not INT8: nv_small reads INT8 only")
    flags = ("data_reuse", "weight_reuse", "skip_data_rls", "skip_weight_rls")
    reuse = (bool(cdma_misc.data_reuse), bool(cdma_misc.weight_reuse))
    keep = (bool(cdma_misc.skip_data_rls), bool(cdma_misc.skip_weight_rls))
    if any(getattr(cdma_misc, f) != getattr(misc["CSC"], f) for f in flags):
        raise bad("CSC_D_MISC_CFG's reuse and release flags differ from CDMA_D_MISC_CFG's")
    pixel_in = reg("CDMA", "D_DATAIN_FORMAT").datain_format
    if reg("CSC", "D_DATAIN_FORMAT").datain_format != pixel_in:
        raise bad("CSC_D_DATAIN_FORMAT.datain_format differs from CDMA_D_DATAIN_FORMAT's")
    if reg("CDMA", "D_WEIGHT_FORMAT").weight_format or reg("CSC", "D_WEIGHT_FORMAT").weight_format:
        raise bad("D_WEIGHT_FORMAT is COMPRESSED: nv_small has no weight compression")
    size0, size1 = reg("CDMA", "D_DATAIN_SIZE_0"), reg("CDMA", "D_DATAIN_SIZE_1")
    w, h, c = size0.datain_width + 1, size0.datain_height + 1, size1.datain_channel + 1
    ext0 = reg("CSC", "D_DATAIN_SIZE_EXT_0")
    if (ext0.datain_width_ext + 1, ext0.datain_height_ext + 1) != (w, h):
        raise bad(f"CSC_D_DATAIN_SIZE_EXT_0 ({ext0.raw:#x}) differs from CDMA_D_DATAIN_SIZE_0 "
                  f"({size0.raw:#x}) [NVDLA-CONV: CSC_D_DATAIN_SIZE_EXT_0]")
    if reg("CSC", "D_DATAIN_SIZE_EXT_1").datain_channel_ext + 1 != c:
        raise bad("CSC_D_DATAIN_SIZE_EXT_1 differs from CDMA_D_DATAIN_SIZE_1")
    wext0, wext1 = reg("CSC", "D_WEIGHT_SIZE_EXT_0"), reg("CSC", "D_WEIGHT_SIZE_EXT_1")
    s, r = wext0.weight_width_ext + 1, wext0.weight_height_ext + 1
    k, kc = wext1.weight_kernel + 1, wext1.weight_channel_ext + 1
    pixel, y_ext = None, 1
    if pixel_in:
        pixel = PX.decode(reg, w)
        if c != pixel.fmt.elements:
            raise bad(f"CDMA_D_DATAIN_SIZE_1 gives {c} channels, a {pixel.fmt.name} pixel has "
                      f"{pixel.fmt.elements} elements")
        if s != 1:
            raise bad(f"CSC_D_WEIGHT_SIZE_EXT_0.weight_width_ext is {s - 1}: with pixel input "
                      "CSC takes the kernel's width into its channels, the width is 1")
        s = -(-kc // c)  # pixels a kernel row covers
        ext = reg("CSC", "D_POST_Y_EXTENSION").y_extension
        if ext == 3:
            raise bad("CSC_D_POST_Y_EXTENSION.y_extension is 3: 0, 1 or 2 (1, 2 or 4 rows)")
        y_ext = 1 << ext
        if y_ext > 1 and kc > F.ATOM // y_ext:
            raise bad(f"CSC_D_POST_Y_EXTENSION puts {y_ext} rows in one atom: a row may hold "
                      f"{F.ATOM // y_ext} weights, CSC_D_WEIGHT_SIZE_EXT_1 gives {kc}")
        if reg("CSC", "D_DILATION_EXT").raw:
            raise bad("CSC_D_DILATION_EXT is not 0: CSC's image path has no dilation")
    elif kc != c:
        raise bad("CSC_D_WEIGHT_SIZE_EXT_1.weight_channel_ext differs from the input channels")
    if reg("CDMA", "D_WEIGHT_SIZE_1").weight_kernel + 1 != k:
        raise bad("CDMA_D_WEIGHT_SIZE_1 and CSC_D_WEIGHT_SIZE_EXT_1 give different kernel "
                  "counts")
    bpk = reg("CDMA", "D_WEIGHT_SIZE_0").byte_per_kernel + 1
    row = kc if pixel else s * c
    if bpk != r * row:
        shape = f"{r}x{kc}" if pixel else f"{r}x{s}x{c}"
        raise bad(f"CDMA_D_WEIGHT_SIZE_0 says {bpk} bytes per kernel, the kernel is "
                  f"{shape} = {r * row} [NVDLA-CONV: CDMA_D_WEIGHT_SIZE_0]")
    wbytes = {u: reg(u, "D_WEIGHT_BYTES").weight_bytes for u in ("CDMA", "CSC")}
    for u, n in wbytes.items():  # the drivers round the total up to 128 bytes
        if n < bpk * k:
            raise bad(f"{u}_D_WEIGHT_BYTES is {n}, the weights take {bpk * k} bytes "
                      f"[NVDLA-CONV: CDMA_D_WEIGHT_BYTES]")
    if wbytes["CDMA"] != wbytes["CSC"]:
        raise bad("CSC_D_WEIGHT_BYTES differs from CDMA_D_WEIGHT_BYTES "
                  "[NVDLA-CONV: Cross-module register consistency requirements]")
    for name, line in (("D_ENTRY_PER_SLICE",
        "[NVDLA-CONV: CDMA_D_ENTRY_PER_SLICE, CSC_D_ENTRY_PER_SLICE]"), ("D_BANK",
            "[NVDLA-CONV: CDMA_D_BANK, CSC_D_BANK]")):
        if reg("CDMA", name).raw != reg("CSC", name).raw:  # how they share the buffer
            raise bad(f"CSC_{name} differs from CDMA_{name} {line}")
    batches = reg("CDMA", "D_BATCH_NUMBER").batches + 1
    for u in ("CSC", "CACC"):
        if reg(u, "D_BATCH_NUMBER").batches + 1 != batches:
            raise bad(f"{u}_D_BATCH_NUMBER differs from CDMA_D_BATCH_NUMBER")
    st = reg("CDMA", "D_CONV_STRIDE")
    stride = (st.conv_y_stride + 1, st.conv_x_stride + 1)
    st2 = reg("CSC", "D_CONV_STRIDE_EXT")
    if (st2.conv_y_stride_ext + 1, st2.conv_x_stride_ext + 1) != stride:
        raise bad("CSC_D_CONV_STRIDE_EXT differs from CDMA_D_CONV_STRIDE "
                  "[NVDLA-CONV: CDMA_D_CONV_STRIDE]")
    dil = reg("CSC", "D_DILATION_EXT")
    dilation = (dil.y_dilation_ext + 1, dil.x_dilation_ext + 1)
    zp = reg("CDMA", "D_ZERO_PADDING")
    pad = (zp.pad_top, zp.pad_bottom, zp.pad_left, zp.pad_right)
    zp2 = reg("CSC", "D_ZERO_PADDING")
    if (zp2.pad_top, zp2.pad_left) != (pad[0], pad[2]):
        raise bad("CSC_D_ZERO_PADDING (left, top) differs from CDMA_D_ZERO_PADDING "
                  "[NVDLA-CONV: CSC_D_ZERO_PADDING]")
    pad_raw = reg("CDMA", "D_ZERO_PADDING_VALUE").pad_value
    if reg("CSC", "D_ZERO_PADDING_VALUE").pad_value != pad_raw:
        # CDMA pads an image's lines, CSC everything else (C model): one value
        # [NVDLA-CONV: CDMA_D_ZERO_PADDING_VALUE, CSC_D_ZERO_PADDING_VALUE]
        raise bad("CSC_D_ZERO_PADDING_VALUE differs from CDMA_D_ZERO_PADDING_VALUE "
                  "[NVDLA-CONV: CDMA_D_ZERO_PADDING_VALUE]")
    # INT8: the value's low byte as int8 [NVDLA-CONV: CDMA data-group registers]
    pad_value = sign_extend(pad_raw, INT8)
    out0, out1 = reg("CSC", "D_DATAOUT_SIZE_0"), reg("CSC", "D_DATAOUT_SIZE_1")
    out_w, out_h = out0.dataout_width + 1, out0.dataout_height + 1
    span_w, span_h = (s - 1) * dilation[1] + 1, (r - 1) * dilation[0] + 1
    if span_w > w + pad[2] + pad[3] or span_h > h + pad[0] + pad[1]:
        raise bad(f"the kernel spans {span_w}x{span_h} (CSC_D_WEIGHT_SIZE_EXT_0, D_DILATION_EXT), "
                  f"more than the padded input's {w + pad[2] + pad[3]}x{h + pad[0] + pad[1]} "
                  "(CDMA_D_DATAIN_SIZE_0, D_ZERO_PADDING)")
    ew = (w + pad[2] + pad[3] - span_w) // stride[1] + 1
    eh = (h + pad[0] + pad[1] - span_h) // stride[0] + 1
    if (out_w, out_h) != (ew, eh):
        raise bad(f"CSC_D_DATAOUT_SIZE_0 gives {out_w}x{out_h}, the input, kernel, padding, "
                  f"stride and dilation give {ew}x{eh} [NVDLA-CONV: CSC]")
    if out1.dataout_channel + 1 != k:
        raise bad("CSC_D_DATAOUT_SIZE_1 differs from the kernel count")
    c0, c1 = reg("CACC", "D_DATAOUT_SIZE_0"), reg("CACC", "D_DATAOUT_SIZE_1")
    if (c0.dataout_width, c0.dataout_height, c1.dataout_channel) != \
            (out0.dataout_width, out0.dataout_height, out1.dataout_channel):
        raise bad("CACC_D_DATAOUT_SIZE_0/1 differ from CSC's [NVDLA-CONV: CACC_D_DATAOUT_SIZE_0]")
    clip = reg("CACC", "D_CLIP_CFG").clip_truncate
    if clip > 16:
        raise bad(f"CACC_D_CLIP_CFG.clip_truncate is {clip}, more than 16 "
                  f"[NVDLA-CONV: CACC_D_CLIP_CFG]")
    line = reg("CDMA", "D_LINE_STRIDE").line_stride
    surf = reg("CDMA", "D_SURF_STRIDE").surf_stride
    dmap = reg("CDMA", "D_DAIN_MAP")
    if dmap.line_packed:  # the lines follow each other [NVDLA-CONV: CDMA_D_DAIN_MAP]
        line = w * F.ATOM
    if dmap.surf_packed:
        surf = line * h
    in_addr = reg("CDMA", "D_DAIN_ADDR_HIGH_0").datain_addr_high_0 << 32 \
        | reg("CDMA", "D_DAIN_ADDR_LOW_0").datain_addr_low_0
    wt_addr = reg("CDMA", "D_WEIGHT_ADDR_HIGH").weight_addr_high << 32 \
        | reg("CDMA", "D_WEIGHT_ADDR_LOW").weight_addr_low
    cvt_cfg = reg("CDMA", "D_CVT_CFG")
    cvt = (sign_extend(reg("CDMA", "D_CVT_OFFSET").cvt_offset, 16),
           sign_extend(reg("CDMA", "D_CVT_SCALE").cvt_scale, 16), cvt_cfg.cvt_truncate) \
        if cvt_cfg.cvt_en else None
    return ConvConfig(w, h, c, k, r, s, batches, in_addr, line, surf, wt_addr, stride, dilation,
                      pad, pad_value, out_w, out_h, clip, cvt, pixel, kc, y_ext, reuse, keep,
                      reg("CDMA", "D_BANK").raw)


@dataclass(frozen=True)
class Kept:
    """What the last convolution left in the convolution buffer: its converted input and its
    weights, each None when released."""
    key: tuple[bool, int]
    data: np.ndarray | None
    weights: np.ndarray | None


def read_weights(cfg: ConvConfig, data: np.ndarray) -> np.ndarray:
    """int8 weights [K, R, S, C] (read-only) from the layer's weight bytes; with pixel input the
    rows' positions past WEIGHT_CHANNEL_EXT weigh 0. The same array while the bytes and the
    layout are the same, so the kernel's packed form (kept per read-only array by
    emu/conv/int_conv.py) is made once, not per layer (issue 31 #2)."""
    # per address too: a network's layers of one shape each keep their own
    key = (cfg.wt_addr, cfg.k, cfg.c, cfg.r, cfg.s, cfg.pixel is not None, cfg.kc, cfg.y_ext)
    return _WEIGHTS.get(key, data, lambda raw: _readonly(_decode_weights(cfg, raw)))


def _decode_weights(cfg: ConvConfig, data: np.ndarray) -> np.ndarray:
    if cfg.pixel is None:
        return F.read_weights(data, 0, cfg.k, cfg.c, cfg.r, cfg.s)
    rows = F.read_image_weights(data, 0, cfg.k, cfg.r, cfg.kc, cfg.y_ext)
    rows = np.pad(rows, ((0, 0), (0, 0), (0, cfg.s * cfg.c - cfg.kc)))
    return rows.reshape(cfg.k, cfg.r, cfg.s, cfg.c)


_WEIGHTS = ContentCache()
#: a layer's configuration -> (its weights array, conv_sums' launches for both)
_LAUNCHES: dict = {}


def convert_input(cfg: ConvConfig, image: np.ndarray) -> np.ndarray:
    """CDMA's input converter, which applies to feature data too when CVT_EN is set ([EXT] cmod
    cdma/NV_NVDLA_cdma.cpp and hls/cdma_libs/cdma_cvt.cpp): (x - offset) * scale, shifted right
    by CVT_TRUNCATE rounding half away from zero, saturated to 17 bits, then to int8. Padding
    is added later (by CSC) and is not converted."""
    return image if cfg.cvt is None else cdma_convert(image, *cfg.cvt)


def convolve(cfg: ConvConfig, image: np.ndarray, weights: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """The sums of one batch as the shared kernel's whole work array, channels last: int32
    [>= OH, >= OW, K rounded up] (valid until the thread's next convolution; channels last
    because SDP's 8-channel atoms are then adjacent: emu/numeric/nvdla.py post_process), and
    int64 [K] to add to them (wrapping to 32 bits): ``image`` int8 [C, H, W], ``weights``
    int8 [K, R, S, C] (read-only: :func:`read_weights`); padding positions read the pad value
    P. The kernel reads positions outside the image as its zero point, so with zero point P it
    sums (x - P) * w over the padded image; adding P * sum(w) per kernel gives the sums of
    x * w (exact modulo 2**32, where int8 sums never reach). CACC and SDP take both in one
    pass (emu/numeric/nvdla.py post_process), so nothing here copies the sums."""
    top, _, left, _ = cfg.pad
    sums = IC.conv_sums(image, IC.packed_weights(weights), (cfg.out_h, cfg.out_w),
                        zero_point=cfg.pad_value, pad=(top, left), stride=cfg.stride,
                        dilation=cfg.dilation, hwc=True, padded=True,
                        launches=kept_for(_LAUNCHES, cfg, weights, 32))
    add = np.zeros(cfg.k, np.int64)
    if cfg.pad_value:
        add += weights.reshape(cfg.k, -1).sum(axis=1, dtype=np.int64) * cfg.pad_value
    return sums, add


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a
