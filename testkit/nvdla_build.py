"""Write NVDLA trace tests in the format of the hardware repository's trace tests (a <name>.cfg of
mem_init / mem_load / reg_write / poll_reg_equal / intr_notify / check_crc lines and .dat memory
files beside it), for layers the project generates itself: random data, the register values a
driver writes (the field layouts of the register manual), and each layer's expected output CRC
from the independent reference in nvdla_reference.py.

    python -m accelstub.testkit.nvdla_build --demo DIR   # the bundled demo (two layers)

A program is a list of layers run in order, alternating between the register groups as the
hardware requires (each unit's consumer group toggles after a layer): ``Conv`` is a direct
convolution through CDMA..CACC into SDP (flying mode), of a feature cube or, with ``pixel``, an
image; ``Sdp`` an SDP layer reading its input from memory. An Sdp layer may take the previous
layer's output as its input (``chain=True``). Either may pool SDP's output on the fly
(``pool=Pdp(...)``: PDP takes SDP's output stream and writes the layer's output).
"""
from __future__ import annotations

import argparse
import sys
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from . import nvdla_reference as ref

IN_BASE, WT_BASE, OP_BASE, OUT_BASE = 0x8000_0000, 0x8010_0000, 0x8020_0000, 0x9000_0000
ALGO = {"max": 0, "min": 1, "sum": 2}


@dataclass
class Stage:
    """An SDP X stage (BS or BN): register operands, or ``mem`` = "kernel" / "element" for
    operands read through SDP_RDMA (``both``: ALU and MUL interleaved; ``two_bytes``)."""

    alu: str | None = None
    alu_operand: int = 0
    alu_shift: int = 0
    mul: bool = False
    mul_operand: int = 1
    mul_shift: int = 0
    prelu: bool = False
    relu: bool = False
    mem: str | None = None  # None | "kernel" | "element"
    two_bytes: bool = False


@dataclass
class Pixel:
    """Image input of a Conv layer: the pixel format (a key of nvdla_reference.PIXEL_CODES;
    the layer's ``c`` must be its element count), the first pixel's offset in a line, the
    per-element mean (used with the layer's ``cvt_in``), the sign override, CSC's post
    extension (rows per weight atom) and the weights per kernel row (default all of ``s``
    pixels' elements)."""

    fmt: str = "A8B8G8R8"
    x_offset: int = 0
    mean: tuple[int, int, int, int] | None = None
    signed: bool = False
    y_ext: int = 1
    kc: int | None = None


@dataclass
class Conv:
    w: int
    h: int
    c: int
    k: int
    r: int = 3
    s: int = 3
    stride: tuple[int, int] = (1, 1)  # (y, x)
    dilation: tuple[int, int] = (1, 1)
    pad: tuple[int, int, int, int] = (1, 1, 1, 1)  # top, bottom, left, right
    pad_value: int = 0
    clip: int = 0
    bs: Stage | None = None
    bn: Stage | None = None
    cvt: tuple[int, int, int] = (0, 1, 0)
    cvt_in: tuple[int, int, int] | None = None  # CDMA's input converter: offset, scale, shift
    pixel: Pixel | None = None  # image input instead of a feature cube
    #: the convolution buffer: (data, weights) kept for the next convolution (SKIP_*_RLS) and
    #: taken from the previous one instead of memory (*_REUSE); the layer's own data and
    #: weights are still written to memory, where a reusing layer must not read them
    keep: tuple[bool, bool] = (False, False)
    reuse: tuple[bool, bool] = (False, False)
    pool: Pdp | None = None  # SDP's output pooled on the fly (the Pdp's w, h, c are SDP's)

    @property
    def out_hw(self) -> tuple[int, int]:
        top, bottom, left, right = self.pad
        oh = (self.h + top + bottom - ((self.r - 1) * self.dilation[0] + 1)) // self.stride[0] + 1
        ow = (self.w + left + right - ((self.s - 1) * self.dilation[1] + 1)) // self.stride[1] + 1
        return oh, ow


@dataclass
class Sdp:
    w: int = 0
    h: int = 0
    c: int = 0
    bs: Stage | None = None
    bn: Stage | None = None
    cvt: tuple[int, int, int] = (0, 1, 0)
    chain: bool = False  # input = the previous layer's output
    pool: Pdp | None = None  # SDP's output pooled on the fly (the Pdp's w, h, c are SDP's)


@dataclass
class Pdp:
    """Pooling of a random cube read through PDP_RDMA."""

    w: int
    h: int
    c: int
    method: str = "max"  # average | max | min
    kernel: tuple[int, int] = (2, 2)  # (height, width)
    stride: tuple[int, int] = (2, 2)
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, bottom, left, right
    pad_value: int = 0  # PAD_VALUE_nX = n * pad_value, as drivers program them

    @property
    def out_hw(self) -> tuple[int, int]:
        top, bottom, left, right = self.pad
        return ((self.h + top + bottom - self.kernel[0]) // self.stride[0] + 1,
                (self.w + left + right - self.kernel[1]) // self.stride[1] + 1)


@dataclass
class Cdp:
    """Local response normalisation of a random cube read through CDP_RDMA, with random
    lookup tables."""

    w: int
    h: int
    c: int
    normalz: int = 1  # channels on each side: 1..4 (3, 5, 7, 9 in all)
    le_linear: bool = True
    le_select: int = 6  # linear: index bits dropped; exponential: the index offset
    lo_select: int = 4
    datin: tuple[int, int, int] = (0, 1, 0)
    datout: tuple[int, int, int] = (0, 1, 9)
    slopes: tuple[int, ...] = (3, 2, -5, 4, 7, -1, 2, 3)
    priority: tuple[bool, bool, bool] = (False, True, False)
    sqsum_bypass: bool = False
    mul_bypass: bool = False


@dataclass
class Trace:
    name: str
    cfg: list[str] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    outputs: list[tuple[int, bytes]] = field(default_factory=list)  # (address, expected bytes)
    #: status registers the layers leave, (register, group) -> value (a later layer in the
    #: same group overwrites)
    status: dict[tuple[str, int], int] = field(default_factory=dict)

    def load(self, fname: str, at: int, data: bytes) -> None:
        """Put ``data`` at ``at`` with the trace tests' mem_init and mem_load."""
        self.files[fname] = bytes(data)
        self.cfg += [f"mem_init(pri_mem, {at:#x}, {len(data):#x}, ALL_ZERO);",
                     f'mem_load(pri_mem, {at:#x}, "{fname}");']

    def random_cube(self, rng: np.random.Generator, fname: str, at: int, c: int, h: int,
                    w: int) -> tuple[np.ndarray, int, int]:
        """A random int8 cube [C, H, W] loaded at ``at`` in packed lines: (its values with every
        lane of the last atom, as the memory holds them, line stride, surface stride)."""
        line, surf = w * 8, w * 8 * h
        feat = bytes(ref.pack_feature(rng.integers(-128, 128, (c, h, w)), line, surf))
        self.load(fname, at, feat)
        return ref.unpack_feature(feat, -(-c // 8) * 8, h, w, line, surf), line, surf

    def write(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{self.name}.cfg").write_text("\n".join(self.cfg) + "\n")
        for fname, data in self.files.items():
            (directory / fname).write_text(memory_file(data))
        return directory


def memory_file(data: bytes) -> str:
    """The trace tests' memory-file form: 4-byte records (the last may be shorter)."""
    lines = ["{"]
    for off in range(0, len(data), 4):
        chunk = data[off:off + 4]
        payload = " ".join(f"0x{b:02x}" for b in chunk)
        lines.append(f"{{offset:0x{off:x}, size:{len(chunk)}, payload:{payload}}} ,")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _stage_regs(unit: str, st: Stage | None, base: int, rng: np.random.Generator,
                shape: tuple[int, int, int], rdma_name: str, t: Trace, tag: str
                ) -> tuple[dict[str, int], dict[str, int], ref.XStage | None]:
    """(SDP registers, SDP_RDMA registers, reference stage) of one X stage."""
    name = unit  # BS or BN
    sdp, rdma = {}, {}
    if st is None:
        sdp[f"D_DP_{name}_CFG"] = 1  # bypass
        rdma[f"D_{rdma_name}_CFG"] = 1  # disabled
        return sdp, rdma, None
    if st.mem is not None and not (st.alu or st.mul):
        # SDP reads an operand only for its ALU or MUL: SDP_RDMA armed for nothing would stay
        # armed (devices/nvdla/sdp.py reads_rdma)
        raise ValueError(f"{name} stage: operands from memory ({st.mem}) need its ALU or MUL")
    cfg_v = (0 if st.alu else 1 << 1) | (ALGO.get(st.alu or "max") << 2) | \
        (0 if st.mul else 1 << 4) | (int(st.prelu) << 5) | (0 if st.relu else 1 << 6)
    sdp[f"D_DP_{name}_CFG"] = cfg_v
    sdp[f"D_DP_{name}_ALU_CFG"] = st.alu_shift << 8 | int(st.mem is not None and bool(st.alu))
    sdp[f"D_DP_{name}_ALU_SRC_VALUE"] = st.alu_operand & 0xFFFF
    sdp[f"D_DP_{name}_MUL_CFG"] = st.mul_shift << 8 | int(st.mem is not None and st.mul)
    sdp[f"D_DP_{name}_MUL_SRC_VALUE"] = st.mul_operand & 0xFFFF
    rs = ref.XStage(st.alu, st.alu_operand, st.alu_shift, st.mul, st.mul_operand, st.mul_shift,
                    st.prelu, st.relu)
    if st.mem is None:
        rdma[f"D_{rdma_name}_CFG"] = 1
        return sdp, rdma, rs
    c, h, w = shape
    lanes = -(-c // 8) * 8
    both = bool(st.alu) and st.mul
    use = 2 if both else (1 if st.alu else 0)
    bpc = 2 if st.two_bytes else 1
    comps = 2 if both else 1
    bpe = bpc * comps
    lo, hi = (-300, 300) if st.two_bytes else (-128, 128)
    if st.mem == "kernel":
        vals = [rng.integers(lo, hi, lanes) for _ in range(comps)]
        raw = bytearray()
        for e in range(lanes):
            for v in vals:
                raw += int(v[e]).to_bytes(bpc, "little", signed=True)
        line, surf = 0, 8 * bpe
    else:
        vals = [rng.integers(lo, hi, (lanes, h, w)) for _ in range(comps)]
        line = w * 8 * bpe
        surf = line * h
        raw = bytearray(surf * (lanes // 8))
        for ci in range(lanes):
            for y in range(h):
                for x in range(w):
                    at = (ci // 8) * surf + y * line + x * 8 * bpe + (ci % 8) * bpe
                    for way, v in enumerate(vals):
                        raw[at + way * bpc:at + (way + 1) * bpc] = \
                            int(v[ci, y, x]).to_bytes(bpc, "little", signed=True)
    t.load(f"{tag}_{name.lower()}.dat", base, raw)
    rdma[f"D_{rdma_name}_CFG"] = (1 << 5) | (int(st.mem == "element") << 4) | \
        (int(st.two_bytes) << 3) | (use << 1)
    rdma[f"D_{name}_BASE_ADDR_LOW"] = base
    rdma[f"D_{name}_BASE_ADDR_HIGH"] = 0
    rdma[f"D_{name}_LINE_STRIDE"] = line
    rdma[f"D_{name}_SURFACE_STRIDE"] = surf
    if st.alu:
        rs.alu_operand = vals[0]
    if st.mul:
        rs.mul_operand = vals[-1]
    return sdp, rdma, rs


def _writes(unit: str, regs: dict[str, int]) -> list[str]:
    return [f"reg_write(NVDLA_{unit}.{name}_0, {value & 0xFFFFFFFF:#x});"
            for name, value in regs.items()]


def build(layers: list, name: str = "nvdla_test", seed: int = 0) -> Trace:
    """A trace running ``layers`` one after the other, each checked by CRC."""
    rng = np.random.default_rng(seed)
    t = Trace(name)
    t.cfg += [f"// accelstub-generated NVDLA trace: {name}, {len(layers)} layers",
              "reg_write(NVDLA_GLB.S_INTR_MASK_0, 0x3f0000);"]  # SDP, CDP, PDP done unmasked
    #: the previous layer's output (all lanes), its address, line, surface, channels
    prev: tuple[np.ndarray, int, int, int, int] | None = None
    kept: tuple = (None, None)  # the input and weights the last Conv kept in the buffer
    out_at = OUT_BASE
    group = {u: 0 for u in ("SDP", "SDP_RDMA", "CDMA", "CSC", "CMAC_A", "CMAC_B", "CACC",
                            "PDP", "PDP_RDMA", "CDP", "CDP_RDMA")}
    for n, layer in enumerate(layers):
        tag = f"{name}_l{n}"
        t.cfg.append(f"// layer {n}: {type(layer).__name__}")
        if isinstance(layer, (Pdp, Cdp)):
            unit = "PDP" if isinstance(layer, Pdp) else "CDP"
            in_at = IN_BASE + n * 0x20_0000
            values, line, surf = t.random_cube(rng, f"{tag}_in.dat", in_at, layer.c, layer.h,
                                               layer.w)
            if unit == "PDP":
                out, regs, rdma = _pool_regs(layer, values)
            else:
                out, regs, rdma, counts = _lrn_regs(layer, values, rng, t.cfg)
                t.status.update({(f"CDP_D_PERF_LUT_{k.upper()}", group["CDP"]): counts.get(k, 0)
                                 for k in ("uflow", "oflow", "hybrid", "le_hit", "lo_hit")})
            oh, ow = out.shape[1:]
            dline, dsurf = ow * 8, ow * 8 * oh
            expected = ref.pack_feature(out, dline, dsurf)
            t.cfg.append(f"mem_init(pri_mem, {out_at:#x}, {len(expected):#x}, ALL_ZERO);")
            units = [unit, f"{unit}_RDMA"]
            for u in units:
                t.cfg.append(f"reg_write(NVDLA_{u}.S_POINTER_0, {group[u]:#x});")
            rdma.update({"D_SRC_BASE_ADDR_LOW": in_at, "D_SRC_BASE_ADDR_HIGH": 0,
                         "D_SRC_LINE_STRIDE": line, "D_SRC_SURFACE_STRIDE": surf})
            regs.update({"D_DST_BASE_ADDR_LOW": out_at, "D_DST_BASE_ADDR_HIGH": 0,
                         "D_DST_LINE_STRIDE": dline, "D_DST_SURFACE_STRIDE": dsurf})
            t.cfg += _writes(unit, regs) + _writes(f"{unit}_RDMA", rdma)
            _enable_and_check(t, units, [unit], group, n, out_at, bytes(expected))
            prev = (out, out_at, dline, dsurf, layer.c)
            out_at += -(-len(expected) // 0x1000) * 0x1000
            continue
        sdp_regs: dict[str, int] = {}
        rdma_regs: dict[str, int] = {}
        if isinstance(layer, Conv):
            in_at, wt_at = IN_BASE + n * 0x20_0000, WT_BASE + n * 0x20_0000
            oh, ow = layer.out_hw
            px = layer.pixel
            if px is None:
                image = rng.integers(-128, 128, (layer.c, layer.h, layer.w))
                weights = rng.integers(-128, 128, (layer.k, layer.r, layer.s, layer.c))
                line, surf = layer.w * 8, layer.w * 8 * layer.h
                t.load(f"{tag}_in.dat", in_at, ref.pack_feature(image, line, surf))
                wt = ref.pack_weights(weights)
                conv_in = image if layer.cvt_in is None else \
                    ref.cdma_convert(image, *layer.cvt_in)
            else:
                if layer.c != ref.pixel_elements(px.fmt):
                    raise ValueError(f"{px.fmt} has {ref.pixel_elements(px.fmt)} elements")
                kc = px.kc or layer.s * layer.c
                if -(-kc // layer.c) != layer.s or layer.dilation != (1, 1):
                    raise ValueError("kc must cover s pixels; image input has no dilation")
                raw = rng.integers(0, 256, (layer.c, layer.h, layer.w))
                line = uv_line = -(-(layer.w + px.x_offset) * 4 // 8) * 8 + 8
                surf = 0
                plane0, plane1 = ref.pack_pixels(raw, px.fmt, px.x_offset, line, uv_line)
                t.load(f"{tag}_in.dat", in_at, plane0)
                if plane1:
                    t.load(f"{tag}_uv.dat", in_at + 0x8_0000, plane1)
                weights = rng.integers(-128, 128, (layer.k, layer.r, kc))
                wt = ref.pack_image_weights(weights, px.y_ext)
                conv_in = ref.pixel_convert(raw, px.signed, layer.cvt_in, px.mean)
            t.load(f"{tag}_wt.dat", wt_at, wt)
            # the C model reuses what the previous convolution kept, else reads memory
            conv_in = kept[0] if layer.reuse[0] and kept[0] is not None else conv_in
            weights = kept[1] if layer.reuse[1] and kept[1] is not None else weights
            kept = (conv_in if layer.keep[0] else None, weights if layer.keep[1] else None)
            if px is None:
                sums = ref.conv(conv_in, weights, layer.stride, layer.dilation, layer.pad,
                                layer.pad_value, (oh, ow))
            else:
                sums = ref.image_conv(conv_in, weights, layer.stride, layer.pad,
                                      layer.pad_value, (oh, ow))
            lanes = -(-layer.k // 8) * 8
            values = np.zeros((lanes, oh, ow), np.int64)
            for idx, v in np.ndenumerate(sums):
                values[idx] = ref.cacc(int(v), layer.clip)
            shape = (layer.k, oh, ow)
            top, bottom, left, right = layer.pad
            misc = (layer.reuse[0] << 16 | layer.reuse[1] << 20 | layer.keep[0] << 24
                    | layer.keep[1] << 28)
            cdma = {"D_MISC_CFG": misc, "D_DATAIN_FORMAT": 0,
                    "D_DATAIN_SIZE_0": (layer.h - 1) << 16 | (layer.w - 1),
                    "D_DATAIN_SIZE_1": layer.c - 1,
                    "D_DATAIN_SIZE_EXT_0": (layer.h - 1) << 16 | (layer.w - 1),
                    "D_DAIN_RAM_TYPE": 1, "D_DAIN_ADDR_HIGH_0": 0, "D_DAIN_ADDR_LOW_0": in_at,
                    "D_LINE_STRIDE": line, "D_SURF_STRIDE": surf, "D_DAIN_MAP": 0,
                    "D_BATCH_NUMBER": 0, "D_ENTRY_PER_SLICE": -(-layer.w * 8 // 8) - 1,
                    "D_WEIGHT_FORMAT": 0,
                    "D_WEIGHT_SIZE_0": layer.r * layer.s * layer.c - 1,
                    "D_WEIGHT_SIZE_1": layer.k - 1, "D_WEIGHT_RAM_TYPE": 1,
                    "D_WEIGHT_ADDR_HIGH": 0, "D_WEIGHT_ADDR_LOW": wt_at,
                    "D_WEIGHT_BYTES": -(-len(wt) // 128) * 128,
                    "D_CONV_STRIDE": (layer.stride[0] - 1) << 16 | (layer.stride[1] - 1),
                    "D_ZERO_PADDING": bottom << 24 | top << 16 | right << 8 | left,
                    "D_ZERO_PADDING_VALUE": layer.pad_value & 0xFFFF, "D_BANK": 0x000F000F}
            if layer.cvt_in is not None:
                off_in, scale_in, shift_in = layer.cvt_in
                cdma.update({"D_CVT_CFG": shift_in << 4 | 1, "D_CVT_OFFSET": off_in & 0xFFFF,
                             "D_CVT_SCALE": scale_in & 0xFFFF})
            csc_wt = ((layer.r - 1) << 16 | (layer.s - 1), (layer.k - 1) << 16 | (layer.c - 1))
            if px is not None:
                m = [v & 0xFFFF for v in px.mean or (0, 0, 0, 0)]
                cdma.update({"D_DATAIN_FORMAT": int(px.signed) << 20
                             | ref.PIXEL_CODES[px.fmt] << 8 | 1,
                             "D_PIXEL_OFFSET": px.x_offset, "D_LINE_UV_STRIDE": uv_line,
                             "D_DAIN_ADDR_LOW_1": in_at + 0x8_0000, "D_DAIN_ADDR_HIGH_1": 0,
                             "D_MEAN_FORMAT": int(px.mean is not None),
                             "D_MEAN_GLOBAL_0": m[1] << 16 | m[0],
                             "D_MEAN_GLOBAL_1": m[3] << 16 | m[2],
                             "D_WEIGHT_SIZE_0": layer.r * kc - 1})
                csc_wt = ((layer.r - 1) << 16, (layer.k - 1) << 16 | (kc - 1))
            csc = {"D_MISC_CFG": misc, "D_DATAIN_FORMAT": int(px is not None),
                   "D_DATAIN_SIZE_EXT_0": cdma["D_DATAIN_SIZE_0"],
                   "D_DATAIN_SIZE_EXT_1": layer.c - 1, "D_BATCH_NUMBER": 0,
                   "D_ENTRY_PER_SLICE": cdma["D_ENTRY_PER_SLICE"], "D_WEIGHT_FORMAT": 0,
                   "D_WEIGHT_SIZE_EXT_0": csc_wt[0], "D_WEIGHT_SIZE_EXT_1": csc_wt[1],
                   "D_WEIGHT_BYTES": cdma["D_WEIGHT_BYTES"],
                   "D_DATAOUT_SIZE_0": (oh - 1) << 16 | (ow - 1), "D_DATAOUT_SIZE_1": layer.k - 1,
                   "D_ATOMICS": oh * ow - 1, "D_RELEASE": layer.h - 1,
                   "D_CONV_STRIDE_EXT": cdma["D_CONV_STRIDE"],
                   "D_DILATION_EXT": (layer.dilation[0] - 1) << 16 | (layer.dilation[1] - 1),
                   "D_ZERO_PADDING": top << 16 | left,
                   "D_ZERO_PADDING_VALUE": layer.pad_value & 0xFFFF, "D_BANK": 0x000F000F}
            if px is not None:
                csc["D_POST_Y_EXTENSION"] = px.y_ext.bit_length() - 1
            cacc = {"D_MISC_CFG": 0, "D_DATAOUT_SIZE_0": csc["D_DATAOUT_SIZE_0"],
                    "D_DATAOUT_SIZE_1": layer.k - 1, "D_DATAOUT_ADDR": 0, "D_BATCH_NUMBER": 0,
                    "D_LINE_STRIDE": ow * 32, "D_SURF_STRIDE": ow * oh * 32, "D_DATAOUT_MAP": 0,
                    "D_CLIP_CFG": layer.clip}
            flying = 1
        else:
            if layer.chain:
                if prev is None:
                    raise ValueError("a chained Sdp layer needs a layer before it")
                values, in_at, line, surf, c_prev = prev
                shape = (c_prev, values.shape[1], values.shape[2])
                values = values.astype(np.int64)
            else:
                shape = (layer.c, layer.h, layer.w)
                in_at = IN_BASE + n * 0x20_0000
                values, line, surf = t.random_cube(rng, f"{tag}_in.dat", in_at, *shape)
            flying = 0
            rdma_regs.update({"D_SRC_BASE_ADDR_LOW": in_at, "D_SRC_BASE_ADDR_HIGH": 0,
                              "D_SRC_LINE_STRIDE": line, "D_SRC_SURFACE_STRIDE": surf,
                              "D_SRC_DMA_CFG": 1})
        c, oh, ow = shape
        stages = []
        for unit, st, rname in (("BS", layer.bs, "BRDMA"), ("BN", layer.bn, "NRDMA")):
            s_regs, r_regs, rs = _stage_regs(unit, st, OP_BASE + n * 0x20_0000 +
                                             (0x10_0000 if unit == "BN" else 0), rng,
                                             shape, rname, t, tag)
            sdp_regs.update(s_regs)
            rdma_regs.update(r_regs)
            if rs is not None:
                stages.append(rs)
        out = ref.sdp(values, ref.SdpRef(stages, layer.cvt))
        pdp_regs: dict[str, int] = {}
        if layer.pool is not None:  # PDP pools SDP's output stream and writes the result
            out, pdp_regs, _ = _pool_regs(replace(layer.pool, w=ow, h=oh, c=c), out,
                                          on_the_fly=True)
        dline, dsurf = out.shape[2] * 8, out.shape[2] * 8 * out.shape[1]
        expected = ref.pack_feature(out, dline, dsurf)  # every lane of the last atom
        t.cfg.append(f"mem_init(pri_mem, {out_at:#x}, {len(expected):#x}, ALL_ZERO);")
        off, scale, shift = layer.cvt
        dst = {"D_DST_BASE_ADDR_LOW": out_at, "D_DST_BASE_ADDR_HIGH": 0,
               "D_DST_LINE_STRIDE": dline, "D_DST_SURFACE_STRIDE": dsurf}
        # pooled: SDP writes no memory, so its destination stays unprogrammed (PDP's is set)
        sdp_regs.update({"D_DATA_CUBE_WIDTH": ow - 1, "D_DATA_CUBE_HEIGHT": oh - 1,
                         "D_DATA_CUBE_CHANNEL": c - 1, **({} if pdp_regs else dst),
                         "D_DP_EW_CFG": 1,
                         "D_FEATURE_MODE_CFG": flying | int(bool(pdp_regs)) << 1,
                         "D_DST_DMA_CFG": 1, "D_DATA_FORMAT": 0,
                         "D_CVT_OFFSET": off, "D_CVT_SCALE": scale & 0xFFFF, "D_CVT_SHIFT": shift})
        pdp_regs.update(dst if pdp_regs else {})
        use_rdma = not flying or any(not v & 1 for k, v in rdma_regs.items()
                                     if k.endswith("RDMA_CFG"))
        units = (["PDP"] if pdp_regs else []) + ["SDP"] + (["SDP_RDMA"] if use_rdma else [])
        if flying:
            units += ["CDMA", "CSC", "CMAC_A", "CMAC_B", "CACC"]
        for u in units:  # each unit alternates its groups, layer after layer it runs
            t.cfg.append(f"reg_write(NVDLA_{u}.S_POINTER_0, {group[u]:#x});")
        t.cfg += _writes("PDP", pdp_regs) + _writes("SDP", sdp_regs)
        if use_rdma:
            rdma_regs.update({"D_DATA_CUBE_WIDTH": ow - 1, "D_DATA_CUBE_HEIGHT": oh - 1,
                              "D_DATA_CUBE_CHANNEL": c - 1, "D_FEATURE_MODE_CFG": flying})
            t.cfg += _writes("SDP_RDMA", rdma_regs)
        if flying:
            t.cfg += _writes("CDMA", cdma) + _writes("CSC", csc)
            t.cfg += _writes("CMAC_A", {"D_MISC_CFG": 0}) + _writes("CMAC_B", {"D_MISC_CFG": 0})
            t.cfg += _writes("CACC", cacc)
            t.cfg.append("poll_reg_equal(NVDLA_CDMA.S_CBUF_FLUSH_STATUS_0,0x1);")
        _enable_and_check(t, units, ["SDP", "PDP"] if pdp_regs else ["SDP"], group, n, out_at,
                          bytes(expected))
        prev = (out, out_at, dline, dsurf, c)
        out_at += -(-len(expected) // 0x1000) * 0x1000
    return t


def _enable_and_check(t: Trace, units: list[str], done: list[str], group: dict[str, int],
                      n: int, out_at: int, expected: bytes) -> None:
    """Arm the layer's units (downstream first, as the trace tests do), wait for the done
    interrupts of ``done`` (SDP and PDP when PDP pools on the fly: each raises its own, as a
    driver waits for each operation's), check the output by CRC; each unit then uses its other
    group."""
    t.cfg += [f"reg_write(NVDLA_{u}.D_OP_ENABLE_0, 0x1);" for u in units]
    sync = f"sync_id_{n}"
    t.cfg += [f"intr_notify({u}_{group[u]}, {sync});" for u in done]
    t.cfg += [f"check_crc({sync}, 1, {out_at:#x}, {len(expected):#x}, "
              f"{zlib.crc32(expected):#010x});"]
    t.outputs.append((out_at, expected))
    for u in units:
        group[u] ^= 1


def _pool_regs(layer: Pdp, x: np.ndarray, on_the_fly: bool = False
               ) -> tuple[np.ndarray, dict, dict]:
    """(expected output, PDP registers, PDP_RDMA registers); ``on_the_fly``: PDP takes SDP's
    output (FLYING_MODE 0), PDP_RDMA is not used."""
    oh, ow = layer.out_hw
    kh, kw = layer.kernel
    top, bottom, left, right = layer.pad
    raw = [(n * layer.pad_value) & 0x7FFFF for n in range(1, 8)]
    pads = [ref.pdp_pad_value(v, sb) for v, sb in zip(raw, (7, 8, 9, 9, 10, 10, 10))]
    recip = (round(65536 / kw), round(65536 / kh))
    out = ref.pool(x, layer.method, layer.kernel, layer.stride, layer.pad, pads, recip,
                   (oh, ow))
    method = {"average": 0, "max": 1, "min": 2}[layer.method]
    cube = {"D_DATA_CUBE_IN_WIDTH": layer.w - 1, "D_DATA_CUBE_IN_HEIGHT": layer.h - 1,
            "D_DATA_CUBE_IN_CHANNEL": layer.c - 1}
    regs = {**cube, "D_DATA_CUBE_OUT_WIDTH": ow - 1, "D_DATA_CUBE_OUT_HEIGHT": oh - 1,
            "D_DATA_CUBE_OUT_CHANNEL": layer.c - 1,
            "D_OPERATION_MODE_CFG": int(not on_the_fly) << 4 | method,  # 1: off the fly
            "D_POOLING_KERNEL_CFG": (layer.stride[0] - 1) << 20 | (layer.stride[1] - 1) << 16
            | (kh - 1) << 8 | (kw - 1),
            "D_RECIP_KERNEL_WIDTH": recip[0], "D_RECIP_KERNEL_HEIGHT": recip[1],
            "D_POOLING_PADDING_CFG": bottom << 12 | right << 8 | top << 4 | left,
            **{f"D_POOLING_PADDING_VALUE_{n}_CFG": v for n, v in enumerate(raw, 1)},
            "D_DST_RAM_CFG": 1, "D_DATA_FORMAT": 0}
    rdma = {**cube, "D_FLYING_MODE": 1, "D_SRC_RAM_CFG": 1, "D_DATA_FORMAT": 0,
            "D_POOLING_KERNEL_CFG": (layer.stride[1] - 1) << 4 | (kw - 1),
            "D_POOLING_PADDING_CFG": left}
    return out, regs, rdma


def _lrn_regs(layer: Cdp, x: np.ndarray, rng: np.random.Generator,
              cfg: list[str]) -> tuple[np.ndarray, dict, dict, dict]:
    """(expected output, CDP registers, CDP_RDMA registers, the reference's LUT statistics);
    the lookup tables are written through S_LUT_ACCESS_* into ``cfg``."""
    le = [int(v) for v in rng.integers(-3000, 3000, 65)]
    lo = [int(v) for v in rng.integers(-3000, 3000, 257)]
    le_start, lo_start = int(rng.integers(-50, 50)), int(rng.integers(-50, 50))
    # exponential: the end only places the overflow line, never reached by 9-bit squares
    le_end = le_start + ((64 << layer.le_select) if layer.le_linear else 1 << 30)
    lo_end = lo_start + (256 << layer.lo_select)
    lrn = ref.LrnRef(layer.normalz, layer.datin, layer.datout, le, lo, layer.le_linear,
                     le_start, le_end, layer.le_select, lo_start, lo_end, layer.lo_select,
                     layer.slopes, layer.priority, layer.sqsum_bypass, layer.mul_bypass)
    counts: dict[str, int] = {}
    out = ref.lrn(x, layer.c, lrn, counts)
    for table_id, values in ((0, le), (1, lo)):
        cfg.append(f"reg_write(NVDLA_CDP.S_LUT_ACCESS_CFG_0, {1 << 17 | table_id << 16:#x});")
        cfg += [f"reg_write(NVDLA_CDP.S_LUT_ACCESS_DATA_0, {v & 0xFFFF:#x});" for v in values]
    us, ush, os_, osh, lus, lush, los, losh = layer.slopes

    def wide(v: int) -> tuple[int, int]:
        return v & 0xFFFFFFFF, (v >> 32) & 0x3F

    regs = {"S_LUT_CFG": int(layer.priority[2]) << 6 | int(layer.priority[1]) << 5
            | int(layer.priority[0]) << 4 | int(layer.le_linear),
            "S_LUT_INFO": (layer.lo_select & 0xFF) << 16
            | ((layer.le_select if layer.le_linear else 0) & 0xFF) << 8
            | ((0 if layer.le_linear else layer.le_select) & 0xFF),
            "S_LUT_LE_SLOPE_SCALE": (os_ & 0xFFFF) << 16 | (us & 0xFFFF),
            "S_LUT_LE_SLOPE_SHIFT": (osh & 0x1F) << 5 | (ush & 0x1F),
            "S_LUT_LO_SLOPE_SCALE": (los & 0xFFFF) << 16 | (lus & 0xFFFF),
            "S_LUT_LO_SLOPE_SHIFT": (losh & 0x1F) << 5 | (lush & 0x1F),
            "D_FUNC_BYPASS": int(layer.mul_bypass) << 1 | int(layer.sqsum_bypass),
            "D_DST_DMA_CFG": 1, "D_DATA_FORMAT": 0, "D_LRN_CFG": layer.normalz - 1,
            "D_DATIN_OFFSET": layer.datin[0] & 0xFFFF, "D_DATIN_SCALE": layer.datin[1] & 0xFFFF,
            "D_DATIN_SHIFTER": layer.datin[2], "D_DATOUT_OFFSET": layer.datout[0] & 0xFFFFFFFF,
            "D_DATOUT_SCALE": layer.datout[1] & 0xFFFF, "D_DATOUT_SHIFTER": layer.datout[2]}
    for name, v in (("LE_START", le_start), ("LE_END", le_end), ("LO_START", lo_start),
                    ("LO_END", lo_end)):
        regs[f"S_LUT_{name}_LOW"], regs[f"S_LUT_{name}_HIGH"] = wide(v)
    rdma = {"D_DATA_CUBE_WIDTH": layer.w - 1, "D_DATA_CUBE_HEIGHT": layer.h - 1,
            "D_DATA_CUBE_CHANNEL": layer.c - 1, "D_SRC_DMA_CFG": 1, "D_DATA_FORMAT": 0}
    return out, regs, rdma, counts


DEMO = [Conv(8, 8, 16, 16, clip=4, cvt=(0, 1, 3)),
        Sdp(chain=True, bs=Stage(alu="sum", alu_operand=3, mul=True, mul_operand=5,
                                 mul_shift=2, relu=True))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory")
    ap.add_argument("--demo", action="store_true", help="the bundled demo (two layers)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if not args.demo:
        ap.error("only --demo is available from the command line (the API builds others)")
    path = Path(args.directory)
    build(DEMO, path.name, args.seed).write(path)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
