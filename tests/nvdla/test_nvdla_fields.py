"""NVDLA decoders (conv, pixel, SDP, PDP, CDP) and configs/nvdla.toml agree on every register
field (issue 33 #1).

The decoders read fields by name from the description. These tests run traces the project
writes itself (testkit/nvdla_build.py encodes every register from its own bit positions) and
fail when a decoder reads a field the description lacks or gives another width than the
decoder relies on (``ASSUMED``: sizes, paddings and strides from [NVDLA-CONV]'s tables, the other
units from the hardware repository's register manual [EXT]), or when a decoded layer differs
from the one the trace was written for (round trip), or when a CRC check fails.
"""
from __future__ import annotations

from accelstub.devices import open_device
from accelstub.devices.nvdla import cdp as D
from accelstub.devices.nvdla import conv as C
from accelstub.devices.nvdla import pdp as P
from accelstub.devices.nvdla import sdp as S
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.commands import CommandContext
from accelstub.stub.program import load_program, run_to_end
from accelstub.testkit.nvdla_build import Cdp, Conv, Pdp, Pixel, Sdp, Stage, build
from tests.helpers import FieldReads

#: (register definition, field) -> width the decoders rely on: the "n - 1" sizes are 13 bits
#: [NVDLA-CONV: CDMA data-group registers], a 64-bit address is HIGH << 32 | a 32-bit LOW, sign
#: extensions take the width
_SIZE = 13
ASSUMED = {
    **{("D_MISC_CFG", f): w for f, w in (("conv_mode", 1), ("proc_precision", 2),
                                          ("in_precision", 2), ("data_reuse", 1),
                                          ("weight_reuse", 1), ("skip_data_rls", 1),
                                          ("skip_weight_rls", 1))},
    ("D_DATAIN_FORMAT", "datain_format"): 1, ("D_DATAIN_FORMAT", "pixel_format"): 6,
    ("D_DATAIN_FORMAT", "pixel_mapping"): 1, ("D_DATAIN_FORMAT", "pixel_sign_override"): 1,
    ("D_WEIGHT_FORMAT", "weight_format"): 1,
    ("D_DATAIN_SIZE_0", "datain_width"): _SIZE, ("D_DATAIN_SIZE_0", "datain_height"): _SIZE,
    ("D_DATAIN_SIZE_1", "datain_channel"): _SIZE,
    ("D_DATAIN_SIZE_EXT_0", "datain_width_ext"): _SIZE,
    ("D_DATAIN_SIZE_EXT_0", "datain_height_ext"): _SIZE,
    ("D_DATAIN_SIZE_EXT_1", "datain_channel_ext"): _SIZE,
    ("D_WEIGHT_SIZE_EXT_0", "weight_width_ext"): 5, ("D_WEIGHT_SIZE_EXT_0", "weight_height_ext"): 5,
    ("D_WEIGHT_SIZE_EXT_1", "weight_kernel"): _SIZE,
    ("D_WEIGHT_SIZE_EXT_1", "weight_channel_ext"): _SIZE,
    ("D_WEIGHT_SIZE_1", "weight_kernel"): _SIZE, ("D_WEIGHT_SIZE_0", "byte_per_kernel"): 18,
    ("D_WEIGHT_BYTES", "weight_bytes"): 32, ("D_POST_Y_EXTENSION", "y_extension"): 2,
    ("D_BATCH_NUMBER", "batches"): 5,
    ("D_CONV_STRIDE", "conv_x_stride"): 3, ("D_CONV_STRIDE", "conv_y_stride"): 3,
    ("D_CONV_STRIDE_EXT", "conv_x_stride_ext"): 3, ("D_CONV_STRIDE_EXT", "conv_y_stride_ext"): 3,
    ("D_DILATION_EXT", "x_dilation_ext"): 5, ("D_DILATION_EXT", "y_dilation_ext"): 5,
    ("D_ZERO_PADDING", "pad_left"): 5, ("D_ZERO_PADDING", "pad_right"): 6,
    ("D_ZERO_PADDING", "pad_top"): 5, ("D_ZERO_PADDING", "pad_bottom"): 6,
    ("D_ZERO_PADDING_VALUE", "pad_value"): 16,
    ("D_DATAOUT_SIZE_0", "dataout_width"): _SIZE, ("D_DATAOUT_SIZE_0", "dataout_height"): _SIZE,
    ("D_DATAOUT_SIZE_1", "dataout_channel"): _SIZE, ("D_CLIP_CFG", "clip_truncate"): 5,
    ("D_LINE_STRIDE", "line_stride"): 32, ("D_LINE_UV_STRIDE", "uv_line_stride"): 32,
    ("D_SURF_STRIDE", "surf_stride"): 32,
    ("D_DAIN_MAP", "line_packed"): 1, ("D_DAIN_MAP", "surf_packed"): 1,
    **{("D_DAIN_ADDR_" + hl + "_" + p, f"datain_addr_{hl.lower()}_{p}"): 32
       for hl in ("HIGH", "LOW") for p in "01"},
    ("D_WEIGHT_ADDR_HIGH", "weight_addr_high"): 32, ("D_WEIGHT_ADDR_LOW", "weight_addr_low"): 32,
    ("D_CVT_CFG", "cvt_en"): 1, ("D_CVT_CFG", "cvt_truncate"): 6,
    ("D_CVT_SCALE", "cvt_scale"): 16,
    ("D_PIXEL_OFFSET", "pixel_x_offset"): 5, ("D_MEAN_FORMAT", "mean_format"): 1,
    ("D_MEAN_GLOBAL_0", "mean_ry"): 16, ("D_MEAN_GLOBAL_0", "mean_gu"): 16,
    ("D_MEAN_GLOBAL_1", "mean_bv"): 16, ("D_MEAN_GLOBAL_1", "mean_ax"): 16,
    # SDP, SDP_RDMA
    ("D_DATA_FORMAT", "proc_precision"): 2, ("D_DATA_FORMAT", "out_precision"): 2,
    ("D_FEATURE_MODE_CFG", "flying_mode"): 1, ("D_FEATURE_MODE_CFG", "winograd"): 1,
    ("D_FEATURE_MODE_CFG", "output_dst"): 1, ("D_FEATURE_MODE_CFG", "in_precision"): 2,
    ("D_FEATURE_MODE_CFG", "proc_precision"): 2,
    ("D_DP_EW_CFG", "ew_bypass"): 1,
    ("D_DATA_CUBE_WIDTH", "width"): _SIZE, ("D_DATA_CUBE_HEIGHT", "height"): _SIZE,
    ("D_DATA_CUBE_CHANNEL", "channel"): _SIZE,
    **{(f"D_{kind.upper()}_BASE_ADDR_{hl}", f"{kind}_base_addr_{hl.lower()}"): 32
       for kind in ("src", "dst", "bs", "bn") for hl in ("HIGH", "LOW")},
    **{(f"D_{kind.upper()}_{s.upper()}_STRIDE", f"{kind}_{s}_stride"): 32
       for kind in ("src", "dst", "bs", "bn") for s in ("line", "surface")},
    **{(f"D_DP_{x.upper()}_CFG", f"{x}_{f}"): w for x in ("bs", "bn")
       for f, w in (("bypass", 1), ("alu_bypass", 1), ("alu_algo", 2), ("mul_bypass", 1),
                    ("mul_prelu", 1), ("relu_bypass", 1))},
    **{(f"D_DP_{x.upper()}_ALU_CFG", f"{x}_{f}"): w for x in ("bs", "bn")
       for f, w in (("alu_src", 1), ("alu_shift_value", 6))},
    **{(f"D_DP_{x.upper()}_MUL_CFG", f"{x}_{f}"): w for x in ("bs", "bn")
       for f, w in (("mul_src", 1), ("mul_shift_value", 8))},  # RTL reg2dp_*_mul_shift_value[7:0]
    **{(f"D_DP_{x.upper()}_{op.upper()}_SRC_VALUE", f"{x}_{op}_operand"): 16
       for x in ("bs", "bn") for op in ("alu", "mul")},
    **{(f"D_{d}_CFG", f"{d.lower()}_{f}"): w for d in ("BRDMA", "NRDMA", "ERDMA")
       for f, w in (("disable", 1), ("data_use", 2), ("data_mode", 1), ("data_size", 1))},
    ("D_CVT_OFFSET", "cvt_offset"): {16, 32},  # CDMA's int16, SDP's int32 (both sign-extended)
    ("D_CVT_SHIFT", "cvt_shift"): 6,
    # PDP, PDP_RDMA
    ("D_OPERATION_MODE_CFG", "flying_mode"): 1, ("D_OPERATION_MODE_CFG", "pooling_method"): 2,
    ("D_DATA_FORMAT", "input_data"): 2,
    **{(f"D_DATA_CUBE_{io}_{d}", f"cube_{io.lower()}_{d.lower()}"): _SIZE
       for io in ("IN", "OUT") for d in ("WIDTH", "HEIGHT", "CHANNEL")},
    **{("D_POOLING_KERNEL_CFG", f): 4 for f in ("kernel_width", "kernel_height",
                                                 "kernel_stride_width", "kernel_stride_height")},
    **{("D_POOLING_PADDING_CFG", f"pad_{s}"): 3 for s in ("left", "right", "top", "bottom")},
    **{(f"D_POOLING_PADDING_VALUE_{n}_CFG", f"pad_value_{n}x"): 19 for n in range(1, 8)},
    ("D_RECIP_KERNEL_WIDTH", "recip_kernel_width"): 17,
    ("D_RECIP_KERNEL_HEIGHT", "recip_kernel_height"): 17,
    # CDP, CDP_RDMA
    ("D_DATA_FORMAT", "input_data_type"): 2, ("D_LRN_CFG", "normalz_len"): 2,
    ("D_FUNC_BYPASS", "sqsum_bypass"): 1, ("D_FUNC_BYPASS", "mul_bypass"): 1,
    ("S_LUT_CFG", "lut_le_function"): 1, ("S_LUT_CFG", "lut_uflow_priority"): 1,
    ("S_LUT_CFG", "lut_oflow_priority"): 1, ("S_LUT_CFG", "lut_hybrid_priority"): 1,
    ("S_LUT_INFO", "lut_le_index_offset"): 8, ("S_LUT_INFO", "lut_le_index_select"): 8,
    ("S_LUT_INFO", "lut_lo_index_select"): 8,
    **{(f"S_LUT_{t}_{se}_{hl}", f"lut_{t.lower()}_{se.lower()}_{hl.lower()}"): w
       for t in ("LE", "LO") for se in ("START", "END") for hl, w in (("HIGH", 6), ("LOW", 32))},
    **{(f"S_LUT_{t}_SLOPE_{k}", f"lut_{t.lower()}_slope_{flow}_{k.lower()}"): w
       for t in ("LE", "LO") for flow in ("uflow", "oflow") for k, w in (("SCALE", 16),
                                                                         ("SHIFT", 5))},
    ("D_DATIN_OFFSET", "datin_offset"): 16, ("D_DATIN_SCALE", "datin_scale"): 16,
    ("D_DATIN_SHIFTER", "datin_shifter"): 5, ("D_DATOUT_OFFSET", "datout_offset"): 32,
    ("D_DATOUT_SCALE", "datout_scale"): 16, ("D_DATOUT_SHIFTER", "datout_shifter"): 6,
    ("D_OP_ENABLE", "op_en"): 1, ("D_PERF_ENABLE", "perf_sat_en"): 1,
}

LAYERS = [
    Conv(9, 7, 16, 16, clip=3, pad=(1, 2, 0, 1), pad_value=-7, stride=(2, 1),
         dilation=(1, 2), cvt_in=(-20, 3, 2), cvt=(5, 300, 9),
         bs=Stage(alu="sum", alu_operand=-300, alu_shift=3, mul=True, mul_operand=-77,
                  mul_shift=200, relu=True),
         bn=Stage(alu="max", mul=True, mul_shift=4, prelu=True, mem="kernel")),
    Sdp(chain=True, bs=Stage(alu="min", alu_shift=2, mul=True, mul_shift=3, mem="element",
                             two_bytes=True), cvt=(-2, 13, 3)),
    Pdp(7, 9, 19, "average", (3, 3), (2, 2), (1, 2, 2, 1), 5),
    Cdp(3, 3, 16, normalz=4, le_linear=False, le_select=2, lo_select=7,
        priority=(True, False, True), datin=(-5, 7, 2), datout=(100, -2, 8)),
    Conv(10, 6, 4, 8, r=3, s=2, pad=(1, 1, 0, 0), clip=2, cvt=(0, 1, 1),
         pixel=Pixel("A8B8G8R8", x_offset=1, mean=(3, -4, 5, 0), signed=True)),
]


def test_decoders_round_trip_the_traces_registers(tmp_path, monkeypatch):
    """Each layer decodes to the layer the trace was written for, its output passes the CRC
    check, and every field the decoders read is in configs/nvdla.toml with the width they
    rely on."""
    decoded: list = []
    for mod in (C, S, P, D):
        real = mod.decode
        monkeypatch.setattr(mod, "decode",
                            lambda *a, _real=real, **k: decoded.append(_real(*a, **k)) or
                            decoded[-1])
    reads = FieldReads()
    rc = RunControl(open_device("nvdla"))
    dev = rc.device
    dev.view = reads.reader(dev.view)  # what the model hands to every decoder
    # one trace: the image layer after the others (units alternate their own groups)
    load_program(CommandContext(targets=[rc]), build(LAYERS, "fields", seed=5).write(tmp_path))
    stop = run_to_end(rc)
    crc = [ln for ln in stop.lines if ln.startswith("check_crc")]
    assert stop.code == 0 and len(crc) == len(LAYERS) and all(": PASS" in ln for ln in crc), \
        stop

    convs = [c for c in decoded if isinstance(c, C.ConvConfig)]
    feature, image = LAYERS[0], LAYERS[4]
    cfg = next(c for c in convs if c.pixel is None)
    assert (cfg.w, cfg.h, cfg.c, cfg.k, cfg.r, cfg.s) == (9, 7, 16, 16, 3, 3)
    assert (cfg.stride, cfg.dilation, cfg.pad) == (feature.stride, feature.dilation, feature.pad)
    assert (cfg.pad_value, cfg.clip, cfg.cvt) == (-7, 3, feature.cvt_in)
    img = next(c for c in convs if c.pixel is not None)
    assert (img.pixel.fmt.name, img.pixel.x_offset, img.pixel.signed) == ("T_A8B8G8R8", 1, True)
    assert img.pixel.mean == image.pixel.mean

    sdps = [c for c in decoded if isinstance(c, S.SdpConfig)]
    bs, bn = sdps[0].stages
    assert (bs.alu, bs.alu_operand, bs.alu_shift, bs.mul_operand, bs.mul_shift, bs.relu) == \
        ("sum", -300, 3, -77, 200, True)  # 200: all 8 bits of bs_mul_shift_value
    assert (bn.alu, bn.mul_shift, bn.prelu, bn.mul_src_mem) == ("max", 4, True, True)
    assert sdps[0].cvt == LAYERS[0].cvt
    chained = next(c for c in sdps if c.src is not None)
    assert chained.stages[0].rdma[:3] == (True, True, chained.stages[0].rdma[2])
    assert chained.cvt == LAYERS[1].cvt

    pdp = next(c for c in decoded if isinstance(c, P.PdpConfig))
    want = LAYERS[2]
    assert (pdp.w, pdp.h, pdp.c, pdp.method, pdp.kernel, pdp.stride, pdp.pad) == \
        (want.w, want.h, want.c, want.method, want.kernel, want.stride, want.pad)
    cdp = next(c for c in decoded if isinstance(c, D.CdpConfig))
    want = LAYERS[3]
    assert (cdp.normalz, cdp.datin, cdp.datout, cdp.le_exponent, cdp.priority) == \
        (want.normalz, want.datin, want.datout, True, want.priority)

    cvt_offsets = {(r.block, r.definition.view.fields["cvt_offset"].width)
                   for r in dev.description.registers if r.definition.name == "D_CVT_OFFSET"}
    assert cvt_offsets == {("cdma", 16), ("sdp", 32)}  # the widths conv.py and sdp.py extend
    reads.check(dev.description, ASSUMED)
    assert len(reads.seen) > 150


def test_lut_access_hook_reads_the_access_fields():
    """S_LUT_ACCESS_CFG / DATA hooks (registered by name) take table, entry and direction
    from the named fields: a value written through the bus reads back through the LUT."""
    dev = open_device("nvdla")
    cfg = dev.description.register("CDP_S_LUT_ACCESS_CFG")
    data = dev.description.register("CDP_S_LUT_ACCESS_DATA")
    dev.write(cfg.address, cfg.definition.encode(lut_access_type=1, lut_table_id=1,
                                                   lut_addr=5).to_bytes(4, "little"))
    dev.write(data.address, (0xFFFF8123).to_bytes(4, "little"))
    assert int(dev.luts.lo[5]) == 0x8123 - 0x10000 and not dev.luts.le.any()
    dev.write(cfg.address, cfg.definition.encode(lut_table_id=1, lut_addr=5)
              .to_bytes(4, "little"))
    assert int.from_bytes(dev.read(data.address, 4), "little") == 0x8123


def test_status_hook_is_registered_on_every_units_s_status():
    """S_STATUS read hooks come from the description's name "S_STATUS" (one per unit)."""
    dev = open_device("nvdla")
    units = {r.block.upper() for r in dev.regs.instances("S_STATUS")}
    from accelstub.devices.nvdla.model import UNITS

    assert units == set(UNITS)
