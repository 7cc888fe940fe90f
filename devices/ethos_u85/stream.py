"""Ethos-U85 command stream: decoder, encoder and disassembler (no device state).

The format is the TRM's section 3.5 ([U85-TRM], C§1; "[U85-TRM: ...]" cites the TRM's section or
table (docs/citations.md)). A command is one or two little-endian 32-bit words [U85-TRM: §3.5.3].
Word 0 ("header", [U85-TRM: Table 3-88])::

    [31:16] payload_0 ("param", 16 bits)   [15:14] control: 00 cmd0, 01 cmd1
    [13:10] 0000                           [9:0]   opcode

A cmd1 command carries one more word, payload_1 ("data"), which is bits [63:32] of the 64-bit
command. Field positions below are in that 64-bit *command* numbering, as in the TRM's encoding
tables: a field at [21:16] is param bits [5:0]; a field at [62:32] is data bits [30:0]. The cmd0
and cmd1 opcode spaces are separate (cmd0 0 = NPU_OP_STOP, cmd1 0 = NPU_SET_IFM_BASE0); the
16-bit key ``0x4000 | opcode`` names a cmd1 command, ``opcode`` a cmd0 one.

Opcode numbers: the seed's two index figures are corrupted (G-E1); every number here is
from the opcode table C§1.4, which checks each against all surviving seed digits and Arm's public
Vela interface header. Field positions come from the seed's per-instruction encoding tables
(Tables 3-95 .. 3-207), whose rows survived the text conversion.

Address payloads (``addr``) are 40-bit: addr_hi = command bits [23:16] and addr_lo = [63:32]
give ``addr_hi << 32 | addr_lo`` [U85-TRM: §3.10.4, §3.6.2]; the DMA strides and IDX_SKIP1 are
signed 40-bit [U85-TRM: Table 3-162, Table 3-163, Table 3-166, Table 3-169, Table 3-170].

Field values in :attr:`Command.fields` are the *stored* integers: ``*_m1`` fields hold the value
minus one exactly as the TRM names them, enumerations hold their number (the disassembly prints
the enumerator's name), signed fields are sign-extended, and "untyped" 16-bit fields (zero
points, clip boundaries: their meaning depends on the tensor type, [U85-TRM: Table 3-109, §3.10.42])
hold the raw unsigned 16 bits. :func:`encode` accepts enumerator names and negative values for
untyped fields as well.

Reserved encodings are UNPREDICTABLE [U85-TRM: §3.5.3]: the decoder never raises. A word whose
control bits are 10/11 or whose bits [13:10] are not zero, an unassigned opcode, or a cmd1 header
without its data word decodes as ``UNKNOWN`` with the raw words and the reason in
:attr:`Command.error`. Set bits in reserved positions of a known command are kept in
:attr:`Command.reserved_bits`.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

CMD0, CMD1 = "cmd0", "cmd1"
UNKNOWN = "UNKNOWN"

# ------------------------------------------------------------------------------------------------
# Enumerations (C§1.5; each cites its seed table)

E_ACT_TYPE = ("unsigned", "signed")  # activation_type_t [U85-TRM: Table 3-132]
E_ACT_PREC = ("b8", "b16", "b32", "b64")  # activation_precision_t [U85-TRM: Table 3-132]
E_ACT_FORMAT = ("nhwc", "nhcwb16")  # activation_format_t [U85-TRM: Table 3-132]
# activation_storage_t [U85-TRM: Table 3-132]
E_ACT_STORAGE = ("tile2x2", "tile3x1", "chained", "none")
# [U85-TRM: Table 3-104]
E_POOL = ("max", "average", "reduce_sum", "sum", "none", "min", "argmax_x", "argmax_y")
# [U85-TRM: Table 3-100]
E_ELEMENTWISE = {0: "mul", 1: "add", 2: "sub", 3: "min", 4: "max", 5: "lrelu", 6: "abs", 7: "clz",
                 8: "shr", 9: "shl", 10: "lshr", 11: "div", 16: "cmp_eq", 17: "cmp_ne",
                 18: "cmp_ge", 19: "cmp_gt", 33: "and", 34: "or", 35: "xor", 36: "not",
                 42: "and_not"}
E_RESIZE = ("bilinear", "replicate", "nearest")  # [U85-TRM: Table 3-105]
E_UPSCALE = ("none", "nearest", "zeros")  # [U85-TRM: §3.10.40]
# [U85-TRM: Table 3-117, Table 3-124]
E_BROADCAST = ("none", "h", "w", "hw", "c", "ch", "cw", "cwh", "scalar")
E_SCALE_MODE = ("per_channel", "global")  # [U85-TRM: Table 3-147]
E_REVERSE = ("none", "H", "W", "C")  # [U85-TRM: Table 3-147]
E_TRANSPOSE = {0: "HWC", 1: "WHC", 2: "HCW", 3: "WCH", 6: "CHW", 7: "CWH"}  # [U85-TRM: Table 3-147]
E_WEIGHT_ORDER = ("depth_first", "part_kernel_first")  # [U85-TRM: Table 3-138]
E_DILATION = ("none", "x2")  # [U85-TRM: Table 3-138]
E_DECOMPOSITION = ("d8x8", "d4x4")  # [U85-TRM: Table 3-138]
E_ACC_FORMAT = ("i32", "i48")  # [U85-TRM: Table 3-107]
E_ACC_INPUT = ("reset", "keep", "ifm2")  # [U85-TRM: Table 3-107]
E_ACC_OUTPUT = ("enable", "disable")  # [U85-TRM: Table 3-107]
# [U85-TRM: Table 3-107] (OCR 'ulx1' = u1x1)
E_MICROBLOCK = ("u1x1", "u1x2", "u1x4", "u2x2", "u2x4", "u4x4")
E_ACT_FUNCTION = {0: "lut_none", 1: "lut_u8_u8", 4: "lut_s8_s8", 5: "lut_s8_s16", 7: "lut_s8_s32",
                  # [U85-TRM: Table 3-108]
                  8: "lut_s16_s16", 9: "lut_s16_s32", 10: "lut_tanh", 11: "lut_sigmoid"}
E_CLIP_RANGE = ("b16", "none")  # [U85-TRM: Table 3-108]
E_WEIGHT_FORMAT = ("swd", "fwd")  # [U85-TRM: Table 3-157]
E_SPARSITY = ("none", "sparse_2_4")  # [U85-TRM: Table 3-157]
E_REGION_MODE = ("external", "internal")  # [U85-TRM: Table 3-112, Table 3-116]
E_STRIDE_MODE = ("d1", "d2", "d3")  # [U85-TRM: Table 3-116]
E_IDX_MODE = ("disabled", "enabled")  # [U85-TRM: Table 3-116]
E_ROUND_OFM = ("double_symmetric", "natural", "double_asymmetric", "symmetric",
               "truncate_to_zero", "truncate_to_lower")  # round_mode_ofm_t [U85-TRM: Table 3-191]
# round_mode_ifm_t [U85-TRM: Table 3-183, Table 3-175]
E_ROUND_IFM = ("double_symmetric", "natural")
E_BRANCH_COND = ("always", "rf_true")  # [U85-TRM: Table 3-160]


def _enum(e: Sequence[str] | Mapping[int, str] | None) -> dict[int, str] | None:
    if e is None:
        return None
    return dict(e) if isinstance(e, Mapping) else dict(enumerate(e))


# ------------------------------------------------------------------------------------------------
# Specification tables


@dataclass(frozen=True)
class FieldSpec:
    """One payload field. ``parts`` lists (command bit lsb, width, value bit lsb) pieces, so a
    40-bit address is ((32, 32, 0), (16, 8, 32)). ``kind``: "u" unsigned, "s" signed (two's
    complement over ``width``), "x" untyped 16-bit (stored raw; signed or unsigned accepted),
    "enum" (``enum`` maps numbers to names), "addr" unsigned address and "h" unsigned mask or
    offset (both printed in hex)."""

    name: str
    parts: tuple[tuple[int, int, int], ...]
    kind: str = "u"
    enum: dict[int, str] | None = None
    doc: str = ""

    @property
    def width(self) -> int:
        return max(v + w for _, w, v in self.parts)

    @property
    def mask(self) -> int:
        """Bits of the 64-bit command this field occupies."""
        m = 0
        for lsb, w, _ in self.parts:
            m |= ((1 << w) - 1) << lsb
        return m

    def extract(self, cmd: int) -> int:
        v = 0
        for lsb, w, vlsb in self.parts:
            v |= ((cmd >> lsb) & ((1 << w) - 1)) << vlsb
        if self.kind == "s" and v >> (self.width - 1):
            v -= 1 << self.width
        return v

    def insert(self, value: int) -> int:
        v = value & ((1 << self.width) - 1)
        out = 0
        for lsb, w, vlsb in self.parts:
            out |= ((v >> vlsb) & ((1 << w) - 1)) << lsb
        return out

    def value_range(self) -> tuple[int, int]:
        """Inclusive range :func:`encode` accepts (enumerations: any number that fits)."""
        n = self.width
        if self.kind == "s":
            return -(1 << (n - 1)), (1 << (n - 1)) - 1
        if self.kind == "x":
            return -(1 << (n - 1)), (1 << n) - 1
        return 0, (1 << n) - 1

    def coerce(self, value: int | str, command: str) -> int:
        if isinstance(value, str):
            names = {v: k for k, v in (self.enum or {}).items()}
            if value not in names:
                raise ValueError(f"{command}: field {self.name!r} has no value named {value!r}; "
                                 f"known: {', '.join(names) or '(not an enumeration)'}")
            return names[value]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{command}: field {self.name!r} needs an int or a name, got {value!r}")
        value = int(value)
        lo, hi = self.value_range()
        if not lo <= value <= hi:
            raise ValueError(f"{command}: field {self.name!r} = {value} is outside {lo}..{hi}")
        return value

    def format(self, value: int) -> str:
        if self.enum is not None:
            return self.enum.get(value, str(value))
        if self.kind in ("addr", "h"):
            return f"{value:#x}"
        if self.kind == "x":  # untyped 16-bit: show the int16 reading (zero points, clip bounds)
            return str(value - 0x10000 if value & 0x8000 else value)
        return str(value)


@dataclass(frozen=True)
class OpcodeSpec:
    name: str
    kind: str  # "cmd0" | "cmd1"
    opcode: int  # 10-bit
    fields: tuple[FieldSpec, ...]
    seed: str  # encoding table and seed lines
    doc: str = ""

    @property
    def key(self) -> int:
        """16-bit key: header bits [15:0] (cmd1 keys include the 0x4000 control bit)."""
        return self.opcode | (0x4000 if self.kind == CMD1 else 0)

    @property
    def length(self) -> int:
        return 2 if self.kind == CMD1 else 1

    @property
    def is_operation(self) -> bool:
        """NPU_OP_* (issues work) rather than NPU_SET_* (sets state) [U85-TRM: §3.5.5]."""
        return self.name.startswith("NPU_OP_")

    @property
    def reserved_mask(self) -> int:
        """Payload bits of the 64-bit command that no field uses (header bits excluded)."""
        used = 0
        for f in self.fields:
            used |= f.mask
        payload = 0xFFFF_0000 | ((0xFFFF_FFFF << 32) if self.kind == CMD1 else 0)
        return payload & ~used


def _b(spec: str) -> tuple[tuple[int, int, int], ...]:
    """'[21:16]' / '16' in command numbering -> one part."""
    msb, _, lsb = spec.partition(":")
    lo = int(lsb or msb)
    return ((lo, int(msb) - lo + 1, 0),)


def f(name: str, bits: str, kind: str = "u", enum=None, doc: str = "") -> FieldSpec:
    e = _enum(enum)
    return FieldSpec(name, _b(bits), "enum" if e is not None else kind, e, doc)


ADDR = ((32, 32, 0), (16, 8, 32))  # addr_lo [63:32], addr_hi [23:16]


def addr(signed: bool = False, doc: str = "") -> FieldSpec:
    return FieldSpec("addr", ADDR, "s" if signed else "addr", None, doc)


def _precision(type_prec_bits: str) -> tuple[FieldSpec, ...]:
    return (f("activation_type", "16", enum=E_ACT_TYPE),
            f("activation_precision", type_prec_bits, enum=E_ACT_PREC),
            f("activation_format", "23:22", enum=E_ACT_FORMAT),
            f("activation_storage", "31:30", enum=E_ACT_STORAGE))


def _scale(round_bits: str, rounding) -> tuple[FieldSpec, ...]:
    return (f("shift", "21:16"), f("dbl_rnd", "26:22"), f("round_mode", round_bits, enum=rounding),
            f("scale", "62:32"))


def _resize_step() -> tuple[FieldSpec, ...]:
    return (f("one_step_int", "19:16"), f("blk_step_int", "30:20"), f("one_step_mod", "42:32"),
            f("blk_step_mod", "58:48"))


_M1_31_16 = "31:16"

_CMD0: list[tuple[int, str, tuple[FieldSpec, ...], str]] = [
    # NPU_OP_* (cmd0 opcodes 0-19)
    (0, "NPU_OP_STOP", (f("mask", "31:16", "h"),), "T3-106 [U85-TRM: Table 3-106]"),
    (1, "NPU_OP_IRQ", (f("mask", "31:16", "h"),), "T3-101 [U85-TRM: Table 3-101]"),
    (2, "NPU_OP_CONV", (f("weights_ifm2", "16"),), "T3-95 [U85-TRM: Table 3-95]"),
    (3, "NPU_OP_DEPTHWISE", (), "T3-96 [U85-TRM: Table 3-96]"),
    (5, "NPU_OP_POOL", (f("pooling_mode", "18:16", enum=E_POOL),), "T3-104 [U85-TRM: Table 3-104]"),
    (6, "NPU_OP_ELEMENTWISE", (f("elementwise_mode", "21:16", enum=E_ELEMENTWISE),),
     "T3-99 [U85-TRM: Table 3-99]"),
    (7, "NPU_OP_RESIZE", (f("resize_mode", "17:16", enum=E_RESIZE),), "T3-105 "
                                                                      "[U85-TRM: Table 3-105]"),
    (16, "NPU_OP_DMA_START", (), "T3-97 [U85-TRM: Table 3-97]"),
    (17, "NPU_OP_DMA_WAIT", (f("k", "17:16"),), "T3-98 [U85-TRM: Table 3-98]"),
    (18, "NPU_OP_KERNEL_WAIT", (f("n", "16"),), "T3-102 [U85-TRM: Table 3-102]"),
    (19, "NPU_OP_PMU_MASK", (f("enable", "16"),), "T3-103 [U85-TRM: Table 3-103]"),
    # NPU_SET_* (cmd0 opcodes 256-399)
    (256, "NPU_SET_IFM_PAD_TOP", (f("pad", "22:16"),), "T3-131 [U85-TRM: Table 3-131]"),
    (257, "NPU_SET_IFM_PAD_LEFT", (f("pad", "22:16"),), "T3-129 [U85-TRM: Table 3-129]"),
    (258, "NPU_SET_IFM_PAD_RIGHT", (f("pad", "23:16"),), "T3-130 [U85-TRM: Table 3-130]"),
    (259, "NPU_SET_IFM_PAD_BOTTOM", (f("pad", "23:16"),), "T3-128 [U85-TRM: Table 3-128]"),
    (260, "NPU_SET_IFM_DEPTH_M1", (f("depth_m1", _M1_31_16),), "T3-125 [U85-TRM: Table 3-125]"),
    (261, "NPU_SET_IFM_PRECISION", _precision("19:18"), "T3-132 [U85-TRM: Table 3-132]"),
    (263, "NPU_SET_IFM_UPSCALE", (f("mode", "17:16", enum=E_UPSCALE),),
        "T3-134 [U85-TRM: §3.10.40]"),
    (264, "NPU_SET_IFM_BROADCAST", (f("broadcast_mode", "19:16", enum=E_BROADCAST),),
     "T3-124 [U85-TRM: Table 3-124]"),
    (265, "NPU_SET_IFM_ZERO_POINT", (f("zero_point", "31:16", "x"),), "T3-136 [U85-TRM: §3.10.42]"),
    (266, "NPU_SET_IFM_WIDTH0_M1", (f("width_m1", _M1_31_16),), "T3-135 [U85-TRM: Table 3-135]"),
    (267, "NPU_SET_IFM_HEIGHT0_M1", (f("height_m1", _M1_31_16),), "T3-126 [U85-TRM: Table 3-126]"),
    (268, "NPU_SET_IFM_HEIGHT1_M1", (f("height_m1", _M1_31_16),), "T3-127 [U85-TRM: §3.10.33]"),
    (271, "NPU_SET_IFM_REGION", (f("region", "18:16"),), "T3-133 [U85-TRM: Table 3-133]"),
    (273, "NPU_SET_OFM_WIDTH_M1", (f("width_m1", _M1_31_16),), "T3-150 [U85-TRM: Table 3-150]"),
    (274, "NPU_SET_OFM_HEIGHT_M1", (f("height_m1", _M1_31_16),), "T3-146 [U85-TRM: Table 3-146]"),
    (275, "NPU_SET_OFM_DEPTH_M1", (f("depth_m1", _M1_31_16),), "T3-143 [U85-TRM: Table 3-143]"),
    (276, "NPU_SET_OFM_PRECISION",
     (f("activation_type", "16", enum=E_ACT_TYPE),
      f("activation_precision", "18:17", enum=E_ACT_PREC),
      f("activation_format", "23:22", enum=E_ACT_FORMAT), f("scale_mode", "24", enum=E_SCALE_MODE),
      f("activation_reverse", "26:25", enum=E_REVERSE),
      f("activation_transpose", "29:27", enum=E_TRANSPOSE),
      f("activation_storage", "31:30", enum=E_ACT_STORAGE)), "T3-147 [U85-TRM: Table 3-147]"),
    (277, "NPU_SET_OFM_BLK_WIDTH_M1", (f("width_m1", "22:16"),), "T3-142 [U85-TRM: Table 3-142]"),
    (278, "NPU_SET_OFM_BLK_HEIGHT_M1", (f("height_m1", "22:16"),), "T3-141 [U85-TRM: Table 3-141]"),
    (279, "NPU_SET_OFM_BLK_DEPTH_M1", (f("depth_m1", "25:16"),), "T3-140 [U85-TRM: §3.10.46]"),
    (280, "NPU_SET_OFM_ZERO_POINT", (f("zero_point", "31:16", "x"),), "T3-151 "
                                                                      "[U85-TRM: Table 3-151]"),
    (282, "NPU_SET_OFM_WIDTH0_M1", (f("width_m1", _M1_31_16),), "T3-149 [U85-TRM: Table 3-149]"),
    (283, "NPU_SET_OFM_HEIGHT0_M1", (f("height_m1", _M1_31_16),), "T3-144 [U85-TRM: Table 3-144]"),
    (284, "NPU_SET_OFM_HEIGHT1_M1", (f("height_m1", _M1_31_16),), "T3-145 [U85-TRM: §3.10.51]"),
    (287, "NPU_SET_OFM_REGION", (f("region", "18:16"),), "T3-148 [U85-TRM: Table 3-148]"),
    (288, "NPU_SET_KERNEL_WIDTH_M1", (f("width_m1", _M1_31_16),), "T3-139 [U85-TRM: Table 3-139]"),
    (289, "NPU_SET_KERNEL_HEIGHT_M1", (f("height_m1", _M1_31_16),),
        "T3-137 [U85-TRM: Table 3-137]"),
    (290, "NPU_SET_KERNEL_STRIDE",
     (f("stride_x_lsb", "16"), f("stride_y_lsb", "17"),
      f("weight_order", "18", enum=E_WEIGHT_ORDER),
      f("dilation_x", "19", enum=E_DILATION), f("dilation_y", "20", enum=E_DILATION),
      f("decomposition", "21", enum=E_DECOMPOSITION), f("stride_x_msb", "22"),
      f("stride_y_msb", "25")), "T3-138 [U85-TRM: Table 3-138]"),
    (292, "NPU_SET_ACC_FORMAT",
     (f("acc_format", "17:16", enum=E_ACC_FORMAT), f("acc_input", "21:20", enum=E_ACC_INPUT),
      f("acc_output", "22", enum=E_ACC_OUTPUT), f("microblock", "26:24", enum=E_MICROBLOCK)),
     "T3-107 [U85-TRM: Table 3-107]"),
    (293, "NPU_SET_ACTIVATION",
     (f("activation_function", "20:16", enum=E_ACT_FUNCTION), f("table", "23:21"),
      f("activation_clip_range", "28", enum=E_CLIP_RANGE)), "T3-108 [U85-TRM: Table 3-108]"),
    (294, "NPU_SET_ACTIVATION_MIN", (f("clip_boundary", "31:16", "x"),), "T3-110 "
                                                                         "[U85-TRM: Table 3-110]"),
    (295, "NPU_SET_ACTIVATION_MAX", (f("clip_boundary", "31:16", "x"),), "T3-109 "
                                                                         "[U85-TRM: Table 3-109]"),
    (296, "NPU_SET_WEIGHT_REGION", (f("region", "18:16"),), "T3-158 [U85-TRM: Table 3-158]"),
    (297, "NPU_SET_SCALE_REGION", (f("region", "18:16"),), "T3-156 [U85-TRM: Table 3-156]"),
    (298, "NPU_SET_RESIZE_X_SCALE_N_M1", (f("resize_x_scale_n_m1", "26:16"),),
     "T3-153 [U85-TRM: Table 3-153]"),
    (299, "NPU_SET_RESIZE_Y_SCALE_N_M1", (f("resize_y_scale_n_m1", "26:16"),),
     "T3-155 [U85-TRM: Table 3-155]"),
    (300, "NPU_SET_RESIZE_X_OFFSET", (f("resize_x_offset", "27:16", "s"),), "T3-152 "
        "[U85-TRM: Table 3-152]"),
    (301, "NPU_SET_RESIZE_Y_OFFSET", (f("resize_y_offset", "27:16", "s"),), "T3-154 "
        "[U85-TRM: Table 3-154]"),
    (302, "NPU_SET_WEIGHT_FORMAT",
     (f("weight_format", "16", enum=E_WEIGHT_FORMAT), f("weight_sparsity", "20", enum=E_SPARSITY)),
     "T3-157 [U85-TRM: Table 3-157]"),
    (303, "NPU_SET_BLOCKDEP", (f("blockdep", "18:16"),), "T3-111 [U85-TRM: §3.10.17]"),
    (304, "NPU_SET_DMA0_SRC_REGION",
     (f("region", "18:16"), f("region_mode", "24", enum=E_REGION_MODE),
      f("stride_mode", "26:25", enum=E_STRIDE_MODE), f("idx_mode", "27", enum=E_IDX_MODE)),
     "T3-116 [U85-TRM: Table 3-116]"),
    (305, "NPU_SET_DMA0_DST_REGION",
     (f("region", "18:16"), f("region_mode", "24", enum=E_REGION_MODE),
      f("idx_mode", "27", enum=E_IDX_MODE)), "T3-112 [U85-TRM: Table 3-112]"),
    (306, "NPU_SET_DMA0_SIZE0", (f("size", "31:16"),), "T3-114 [U85-TRM: Table 3-114]"),
    (307, "NPU_SET_DMA0_SIZE1", (f("size", "31:16"),), "T3-115 [U85-TRM: Table 3-115]"),
    (308, "NPU_SET_DMA0_IDX_REGION", (f("region", "18:16"),), "T3-113 [U85-TRM: Table 3-113]"),
    (384, "NPU_SET_IFM2_BROADCAST", (f("broadcast_mode", "19:16", enum=E_BROADCAST),),
     "T3-117 [U85-TRM: Table 3-117]"),
    (389, "NPU_SET_IFM2_PRECISION", _precision("19:18"), "T3-120 [U85-TRM: Table 3-120]"),
    (393, "NPU_SET_IFM2_ZERO_POINT", (f("zero_point", "31:16", "x"),), "T3-123 "
                                                                       "[U85-TRM: Table 3-123]"),
    (394, "NPU_SET_IFM2_WIDTH0_M1", (f("width_m1", _M1_31_16),), "T3-122 [U85-TRM: §3.10.28]"),
    (395, "NPU_SET_IFM2_HEIGHT0_M1", (f("height_m1", _M1_31_16),), "T3-118 [U85-TRM: Table 3-118]"),
    (396, "NPU_SET_IFM2_HEIGHT1_M1", (f("height_m1", _M1_31_16),), "T3-119 [U85-TRM: Table 3-119]"),
    (399, "NPU_SET_IFM2_REGION", (f("region", "18:16"),), "T3-121 [U85-TRM: Table 3-121]"),
]

_LENGTH = (f("length", "63:32"),)

_CMD1: list[tuple[int, str, tuple[FieldSpec, ...], str]] = [
    (0, "NPU_SET_IFM_BASE0", (addr(),), "T3-179 [U85-TRM: Table 3-179]"),
    (1, "NPU_SET_IFM_BASE1", (addr(),), "T3-180 [U85-TRM: Table 3-180]"),
    (2, "NPU_SET_IFM_BASE2", (addr(),), "T3-181 [U85-TRM: Table 3-181]"),
    (3, "NPU_SET_IFM_BASE3", (addr(),), "T3-182 [U85-TRM: Table 3-182]"),
    (4, "NPU_SET_IFM_STRIDE_X", (addr(),), "T3-185 [U85-TRM: Table 3-185]"),
    (5, "NPU_SET_IFM_STRIDE_Y", (addr(),), "T3-186 [U85-TRM: Table 3-186]"),
    (6, "NPU_SET_IFM_STRIDE_C", (addr(),), "T3-184 [U85-TRM: Table 3-184]"),
    (16, "NPU_SET_OFM_BASE0", (addr(),), "T3-187 [U85-TRM: Table 3-187]"),
    (17, "NPU_SET_OFM_BASE1", (addr(),), "T3-188 [U85-TRM: Table 3-188]"),
    (18, "NPU_SET_OFM_BASE2", (addr(),), "T3-189 [U85-TRM: Table 3-189]"),
    (19, "NPU_SET_OFM_BASE3", (addr(),), "T3-190 [U85-TRM: §3.11.32]"),
    (20, "NPU_SET_OFM_STRIDE_X", (addr(),), "T3-193 [U85-TRM: §3.11.35]"),
    (21, "NPU_SET_OFM_STRIDE_Y", (addr(),), "T3-194 [U85-TRM: Table 3-194]"),
    (22, "NPU_SET_OFM_STRIDE_C", (addr(),), "T3-192 [U85-TRM: Table 3-192]"),
    (32, "NPU_SET_WEIGHT_BASE", (addr(),), "T3-206 [U85-TRM: Table 3-206]"),
    (33, "NPU_SET_WEIGHT_LENGTH", _LENGTH, "T3-207 [U85-TRM: Table 3-207]"),
    (34, "NPU_SET_SCALE_BASE", (addr(),), "T3-198 [U85-TRM: Table 3-198]"),
    (35, "NPU_SET_SCALE_LENGTH", (f("length", "51:32"),), "T3-199 [U85-TRM: §3.11.41]"),
    (36, "NPU_SET_OFM_SCALE", _scale("31:29", E_ROUND_OFM), "T3-191 [U85-TRM: Table 3-191]"),
    (37, "NPU_SET_IFM_SCALE", _scale("29", E_ROUND_IFM), "T3-183 [U85-TRM: Table 3-183]"),
    (38, "NPU_SET_IFM2_SCALE", _scale("29", E_ROUND_IFM), "T3-175 [U85-TRM: Table 3-175]"),
    (39, "NPU_SET_OP_SCALAR", (f("scalar", "63:32", "s"),), "T3-195 [U85-TRM: Table 3-195]"),
    (48, "NPU_SET_DMA0_SRC", (addr(),), "T3-168 [U85-TRM: Table 3-168]"),
    (49, "NPU_SET_DMA0_DST", (addr(),), "T3-161 [U85-TRM: Table 3-161]"),
    (50, "NPU_SET_DMA0_LEN", (addr(),), "T3-167 [U85-TRM: Table 3-167]"),
    (51, "NPU_SET_DMA0_SRC_STRIDE0", (addr(signed=True),), "T3-169 [U85-TRM: Table 3-169]"),
    (52, "NPU_SET_DMA0_SRC_STRIDE1", (addr(signed=True),), "T3-170 [U85-TRM: Table 3-170]"),
    (53, "NPU_SET_DMA0_DST_STRIDE0", (addr(signed=True),), "T3-162 [U85-TRM: Table 3-162]"),
    (54, "NPU_SET_DMA0_DST_STRIDE1", (addr(signed=True),), "T3-163 [U85-TRM: Table 3-163]"),
    (55, "NPU_SET_DMA0_IDX", (addr(),), "T3-164 [U85-TRM: Table 3-164]"),
    (56, "NPU_SET_DMA0_IDX_MAX", (f("idx_max", "62:32"),), "T3-165 [U85-TRM: §3.11.7]"),
    (57, "NPU_SET_DMA0_IDX_SKIP1", (addr(signed=True),), "T3-166 [U85-TRM: Table 3-166]"),
    (128, "NPU_SET_IFM2_BASE0", (addr(),), "T3-171 [U85-TRM: Table 3-171]"),
    (129, "NPU_SET_IFM2_BASE1", (addr(),), "T3-172 [U85-TRM: Table 3-172]"),
    (130, "NPU_SET_IFM2_BASE2", (addr(),), "T3-173 [U85-TRM: Table 3-173]"),
    (131, "NPU_SET_IFM2_BASE3", (addr(),), "T3-174 [U85-TRM: Table 3-174]"),
    (132, "NPU_SET_IFM2_STRIDE_X", (addr(),), "T3-177 [U85-TRM: §3.11.19]"),
    (133, "NPU_SET_IFM2_STRIDE_Y", (addr(),), "T3-178 [U85-TRM: Table 3-178]"),
    (134, "NPU_SET_IFM2_STRIDE_C", (addr(),), "T3-176 [U85-TRM: Table 3-176]"),
    (144, "NPU_SET_WEIGHT1_BASE", (addr(),), "T3-200 [U85-TRM: Table 3-200]"),
    (145, "NPU_SET_WEIGHT1_LENGTH", _LENGTH,
     "T3-201 lost in the seed [U85-TRM: §3.11.43]; layout of T3-203"),
    (146, "NPU_SET_WEIGHT2_BASE", (addr(),), "T3-202 [U85-TRM: Table 3-202]"),
    (147, "NPU_SET_WEIGHT2_LENGTH", _LENGTH, "T3-203 [U85-TRM: Table 3-203]"),
    (148, "NPU_SET_WEIGHT3_BASE", (addr(),), "T3-204 [U85-TRM: Table 3-204]"),
    (149, "NPU_SET_WEIGHT3_LENGTH", _LENGTH, "T3-205 [U85-TRM: Table 3-205]"),
    (150, "NPU_SET_RESIZE_X_STEP", _resize_step(), "T3-196 [U85-TRM: Table 3-196]"),
    (151, "NPU_SET_RESIZE_Y_STEP", _resize_step(), "T3-197 [U85-TRM: Table 3-197]"),
    (256, "NPU_OP_BRANCH",
     (f("branch_cond", "16", enum=E_BRANCH_COND), f("branch_target", "63:32", "h")),
     "T3-160 [U85-TRM: Table 3-160]"),
]

#: All 111 commands (63 cmd0 + 48 cmd1, [U85-TRM: Table 3-94, Table 3-159]), by name and by 16-bit
#: key.
OPCODES: dict[str, OpcodeSpec] = {}
BY_KEY: dict[int, OpcodeSpec] = {}
for _kind, _table in ((CMD0, _CMD0), (CMD1, _CMD1)):
    for _op, _name, _fields, _seed in _table:
        _spec = OpcodeSpec(_name, _kind, _op, _fields, _seed)
        OPCODES[_name] = _spec
        BY_KEY[_spec.key] = _spec

#: Other names accepted by :func:`encode` (the TRM's enum spelling of the resize steps,
#: [U85-TRM: Table 3-196]).
ALIASES = {"NPU_SET_RESIZE_X": "NPU_SET_RESIZE_X_STEP", "NPU_SET_RESIZE_Y": "NPU_SET_RESIZE_Y_STEP"}


def spec(name: str) -> OpcodeSpec:
    """The specification of a command by name (aliases accepted)."""
    try:
        return OPCODES[ALIASES.get(name, name)]
    except KeyError:
        raise KeyError(f"unknown Ethos-U85 command {name!r}") from None


# ------------------------------------------------------------------------------------------------
# Commands


@dataclass(frozen=True)
class Command:
    """One decoded command.

    ``offset`` byte offset in the stream (QREAD for this command); ``name`` the mnemonic or
    ``UNKNOWN``; ``kind`` cmd0 / cmd1 / unknown; ``opcode`` bits [9:0]; ``param`` payload_0
    (header bits [31:16]); ``data`` payload_1 (cmd1 only, else None); ``fields`` the decoded
    payload fields; ``words`` the raw words; ``length`` 1 or 2 words."""

    offset: int
    name: str
    kind: str
    opcode: int
    param: int
    data: int | None
    fields: dict[str, int] = field(default_factory=dict)
    words: tuple[int, ...] = ()
    error: str = ""  # why an UNKNOWN command is unknown
    reserved_bits: int = 0  # set bits in reserved payload positions (64-bit command numbering)

    @property
    def length(self) -> int:
        return len(self.words)

    @property
    def size(self) -> int:
        """Bytes this command occupies (4 or 8)."""
        return 4 * len(self.words)

    @property
    def next_offset(self) -> int:
        return self.offset + self.size

    @property
    def spec(self) -> OpcodeSpec | None:
        return OPCODES.get(self.name)

    @property
    def is_operation(self) -> bool:
        return self.name.startswith("NPU_OP_")

    def field_text(self) -> str:
        """``name=value`` pairs, enumerations by name, addresses in hex."""
        sp = self.spec
        if sp is None:
            text = "raw=" + " ".join(f"{w:#010x}" for w in self.words)
            return f"{text} ({self.error})" if self.error else text
        parts = [f"{fs.name}={fs.format(self.fields[fs.name])}" for fs in sp.fields]
        if self.reserved_bits:
            parts.append(f"reserved={self.reserved_bits:#x}")
        return " ".join(parts)

    def __str__(self) -> str:
        return f"{self.name} {self.field_text()}".rstrip()


def _as_words(words: bytes | bytearray | memoryview | np.ndarray | Iterable[int]) -> list[int]:
    if isinstance(words, (bytes, bytearray, memoryview)):
        b = bytes(words)
        n = len(b) // 4  # a trailing partial word is not a command
        return [int(x) for x in np.frombuffer(b[:4 * n], dtype="<u4")]
    if isinstance(words, np.ndarray):
        if words.dtype.itemsize == 1:
            return _as_words(words.tobytes())
        return [int(x) & 0xFFFF_FFFF for x in words.ravel()]
    return [int(x) & 0xFFFF_FFFF for x in words]


def decode_one(words: Sequence[int], index: int, offset: int) -> Command:
    """Decode the command whose header is ``words[index]``; ``offset`` is its byte offset."""
    w0 = words[index]
    ctrl = (w0 >> 14) & 3
    opcode = w0 & 0x3FF
    param = w0 >> 16

    def unknown(why: str, n: int = 1) -> Command:
        return Command(offset, UNKNOWN, "unknown" if ctrl > 1 or (w0 >> 10) & 0xF else
                       (CMD1 if ctrl == 1 else CMD0), opcode, param,
                       words[index + 1] if n == 2 else None, {}, tuple(words[index:index + n]), why)

    if (w0 >> 10) & 0xF:
        return unknown("reserved bits [13:10] set [U85-TRM: §3.5.3]")
    if ctrl > 1:
        return unknown(f"reserved control {ctrl:02b} [U85-TRM: §3.5.3]")
    kind = CMD1 if ctrl == 1 else CMD0
    if kind == CMD1 and index + 1 >= len(words):
        return unknown("cmd1 header without its data word")
    n = 2 if kind == CMD1 else 1
    sp = BY_KEY.get(w0 & 0xFFFF)
    if sp is None:
        return unknown(f"reserved {kind} opcode {opcode} [U85-TRM: §3.5.3]", n)
    data = words[index + 1] if n == 2 else None
    cmd = w0 | ((data or 0) << 32)
    fields = {fs.name: fs.extract(cmd) for fs in sp.fields}
    return Command(offset, sp.name, kind, opcode, param, data, fields,
                   tuple(words[index:index + n]),
                   "", cmd & sp.reserved_mask)


def decode(words: bytes | np.ndarray | Iterable[int], offset: int = 0,
           count: int | None = None) -> list[Command]:
    """Decode a command stream starting at byte ``offset`` (a multiple of 4) of ``words``.

    ``words`` is little-endian bytes, a numpy array of 32-bit words (or of bytes), or any iterable
    of ints. Command offsets are byte offsets from the start of ``words`` (QREAD values when
    ``words`` starts at QBASE). ``count`` limits the number of commands. Never raises on content:
    reserved encodings decode as UNKNOWN."""
    if offset % 4:
        raise ValueError(f"offset {offset:#x} is not a multiple of 4")
    ws = _as_words(words)
    out: list[Command] = []
    i = offset // 4
    while i < len(ws) and (count is None or len(out) < count):
        c = decode_one(ws, i, 4 * i)
        out.append(c)
        i += c.length
    return out


def encode(command: Command | str, **fields: int | str) -> list[int]:
    """The words of one command: ``encode("NPU_OP_ELEMENTWISE", elementwise_mode="add")`` ->
    ``[0x00010006]``. Missing fields are 0. A :class:`Command` is re-encoded from its fields (its
    reserved bits kept); an UNKNOWN command gives back its raw words. Raises ValueError for unknown
    commands or fields and for values that do not fit."""
    reserved = 0
    if isinstance(command, Command):
        if command.spec is None:
            return list(command.words)
        fields = {**command.fields, **fields}
        reserved = command.reserved_bits
        command = command.name
    sp = spec(command) if command in OPCODES or command in ALIASES else None
    if sp is None:
        raise ValueError(f"unknown Ethos-U85 command {command!r}")
    names = {fs.name: fs for fs in sp.fields}
    extra = set(fields) - set(names)
    if extra:
        raise ValueError(f"{sp.name} has no field(s) {sorted(extra)}; "
                         f"fields: {list(names) or 'none'}")
    cmd = (sp.key & 0xFFFF) | (reserved & sp.reserved_mask)
    for name, value in fields.items():
        cmd |= names[name].insert(names[name].coerce(value, sp.name))
    words = [cmd & 0xFFFF_FFFF]
    if sp.kind == CMD1:
        words.append(cmd >> 32)
    return words


def encode_stream(commands: Iterable[tuple[str, dict] | Command | str]) -> list[int]:
    """Concatenate commands: items are names, (name, fields) pairs or :class:`Command`s."""
    out: list[int] = []
    for c in commands:
        if isinstance(c, tuple):
            out += encode(c[0], **c[1])
        else:
            out += encode(c)
    return out


def to_bytes(words: Iterable[int]) -> bytes:
    return np.array(list(words), dtype="<u4").tobytes()


#: what an NPU_OP_CONV with weights_ifm2 computes, index by index: a matrix product whose second
#: operand IFM2 holds the second matrix transposed (x = output column, c = reduction index; TRM
#: [U85-TRM: §4.1] and the layout Vela 5.2 programs, see emu/conv/ethosu85.py ``matmul``)
MATMUL_LAYOUT = "matmul: ofm[0,x,oc] = sum over ic of ifm[0,x,ic] * ifm2[0,oc,ic]"


def is_matmul(c: Command) -> bool:
    """NPU_OP_CONV with weights_ifm2 = 1 (T3-95): the weights come from IFM2."""
    return c.name == "NPU_OP_CONV" and c.fields.get("weights_ifm2", 0) == 1


def format_command(c: Command) -> str:
    """One listing line: ``0x00f4: 00010006           NPU_OP_ELEMENTWISE  elementwise_mode=add``;
    a matrix product (:func:`is_matmul`) says so and gives its operand layout."""
    w = f"{c.words[0]:08x} " + (f"{c.words[1]:08x}" if len(c.words) > 1 else " " * 8)
    note = f"  ; {MATMUL_LAYOUT}" if is_matmul(c) else ""
    return f"0x{c.offset:04x}: {w}  {c.name:<28}{c.field_text()}{note}".rstrip()


def disassemble(words: bytes | np.ndarray | Iterable[int], offset: int = 0,
                base: int | None = None) -> str:
    """A listing of the stream, one command per line (see :func:`format_command`). With ``base``
    (e.g. QBASE) each line starts with the absolute address as well."""
    lines = []
    for c in decode(words, offset):
        line = format_command(c)
        lines.append(f"{base + c.offset:#010x} {line}" if base is not None else line)
    return "\n".join(lines) + ("\n" if lines else "")


def listing_lines(data: bytes, chunk_words: int = 1 << 16) -> Iterator[str]:
    """The lines of :func:`disassemble` for little-endian ``data``, decoded ``chunk_words`` at a
    time: a whole listing holds one Command object per word (hundreds of bytes each), so a
    large stream is listed in pieces with memory bounded by the chunk, not the stream."""
    n = len(data) // 4 * 4  # a trailing partial word is not a command
    pos = 0
    while pos < n:
        stop = pos + 4 * chunk_words
        end = pos
        for c in decode(data[pos:min(stop + 4, n)]):  # one more word: a 2-word command at the end
            if pos + c.offset >= stop:
                break
            yield format_command(replace(c, offset=pos + c.offset))
            end = pos + c.offset + c.size
        pos = end


__all__ = ["Command", "FieldSpec", "OpcodeSpec", "OPCODES", "BY_KEY", "ALIASES", "UNKNOWN",
           "CMD0", "CMD1", "decode", "decode_one", "encode", "encode_stream", "disassemble",
           "format_command",
           "listing_lines", "MATMUL_LAYOUT", "is_matmul",
           "spec", "to_bytes"]
