"""NPU_OP_RESIZE [U85-TRM: §3.10.11]: prologue and asserts, the IFM read,
the resize kernel, the output write."""
from __future__ import annotations

from ...emu.numeric import ethosu85 as P
from ...emu.resize import ethosu85 as resize_k
from .operands import MemoryPort, ofm_shape, read_raw, tensor
from .output import ao_cycles, ofm_precision_bits, out_config, write_ofm
from .setstate import RD_IFM, NpuConfig, OpResult, SetState, check_diag, require
from .stream import Command


def resize(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    mode = cmd.fields["resize_mode"]
    require(mode in (0, 1, 2), f"resize_mode {mode} is not reserved", "[U85-TRM: Table 3-105]")
    H, W, D = ofm_shape(s)
    ihm1 = s.get("KERNEL_HEIGHT_M1", "height_m1")
    iwm1 = s.get("KERNEL_WIDTH_M1", "width_m1")
    ny = s.get("RESIZE_Y_SCALE_N_M1", "resize_y_scale_n_m1") + 1
    nx = s.get("RESIZE_X_SCALE_N_M1", "resize_x_scale_n_m1") + 1
    yo = s.get("RESIZE_Y_OFFSET", "resize_y_offset")
    xo = s.get("RESIZE_X_OFFSET", "resize_x_offset")
    ysi, ysm = s.get("RESIZE_Y_STEP", "one_step_int"), s.get("RESIZE_Y_STEP", "one_step_mod")
    xsi, xsm = s.get("RESIZE_X_STEP", "one_step_int"), s.get("RESIZE_X_STEP", "one_step_mod")
    require(-ny <= yo < ny and -nx <= xo < nx, "-scale_n <= offset < scale_n",
        "[U85-TRM: §3.10.11]")
    require(ysm < ny and xsm < nx, "step_mod < scale_n", "[U85-TRM: §3.10.11]")
    require(mem.npu.chain_length == 0, "g_chain_length == 0", "[U85-TRM: §3.10.11]")
    require(s.get("OFM_PRECISION", "activation_storage") != 2, "OFM storage != chained",
        "[U85-TRM: §3.10.11]")
    require(s.get("OFM_PRECISION", "activation_transpose") == 0, "OFM transpose == HWC",
        "[U85-TRM: §3.10.11]")
    require(s.get("IFM_UPSCALE", "mode") == 0, "IFM_UPSCALE.mode == none", "[U85-TRM: §3.10.11]")
    require(s.get("IFM_ZERO_POINT", "zero_point") == 0, "IFM_ZERO_POINT == 0",
        "[U85-TRM: §3.10.11]")
    require(s.get("IFM2_ZERO_POINT", "zero_point", 0) == 0, "IFM2_ZERO_POINT == 0",
        "[U85-TRM: §3.10.11]")
    ifm = tensor(s, "IFM")
    require(ifm.storage != 2, "IFM storage != chained", "[U85-TRM: §3.10.11]")
    require(ifm.bits == 8 or (ifm.bits == 16 and ifm.signed), "IFM b8 || (b16 && signed)",
            "[U85-TRM: §3.10.11]")
    kcfg = out_config(s, accumulator_path=False)
    require(s.get("OFM_PRECISION", "scale_mode") == 1,
            "mode == normal in rescale: resize needs OFM scale_mode global", "[U85-TRM: §3.6.6], "
                                                                             "G-R9")
    require(int(kcfg[P.C_SHIFT]) >= 16, "OFM_SCALE.shift >= 16", "[U85-TRM: §3.10.11]")
    raw = read_raw(mem, ifm, (ihm1 + 1, iwm1 + 1, D), RD_IFM)
    diag: list[str] = []
    out = resize_k.resize(raw, mode, (H, W), scale_n=(ny, nx), offset=(yo, xo),
                   step=((ysi, ysm), (xsi, xsm)), ifm_hw_m1=(ihm1, iwm1), ifm_zp=0,
                   ifm_bits=ifm.bits, ifm_signed=ifm.signed, cfg=kcfg, lut=mem.lut, diag=diag)
    check_diag(diag, "NPU_OP_RESIZE")
    write_ofm(mem, s, cfg, out, all_perms=True)
    n = H * W * D
    return OpResult(macs=0, elements=n, mac_cycles=0,
                    ao_cycles=ao_cycles(cfg, n, ofm_precision_bits(s), 32, False, False))
