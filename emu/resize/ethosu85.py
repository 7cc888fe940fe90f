"""Ethos-U85 NPU_OP_RESIZE (bilinear, replicate, nearest) on plain numpy tensors.

Source: the TRM's pseudocode [U85-TRM: §3.10] (docs/citations.md; C§4). No device knowledge: tensors
are numpy arrays in HWC (or NHWC, batches are independent), already read from memory; register
values come in as arguments. The numba kernels (``_*_kernel``) take int64 arrays plus packed int64
parameter vectors only, so each compiles exactly one signature; the Python wrappers do
read_ifm's value part (zero-point subtraction, upscale), derive the IFM extent and check the
pseudocode's asserts. A violated assert is UNPREDICTABLE in the [U85-TRM: §3.5.4]: the wrappers
append a message to ``diag`` (a list, when given) and continue with the literal result.

Every wrapper returns the OFM values truncated to the OFM type (dtype from ``cfg``; see
:func:`ofm_dtype`), or the raw int64 accumulators when ``cfg`` has acc_output = disable.
"""
from __future__ import annotations

import numpy as np

from ..jit import njit
from ..numeric import ethosu85 as P
from ..numeric.ethosu85 import C_SHIFT, RESCALE_SHIFT_ONLY
from ..numeric.ethosu85_values import (
    check,
    config_or_default,
    fit_hw,
    infer_type,
    lut_bytes,
    ofm_dtype,
    read_values,
)

# resize_mode [U85-TRM: Table 3-105]
RESIZE_BILINEAR, RESIZE_REPLICATE, RESIZE_NEAREST = 0, 1, 2


# ------------------------------------------------------------------------------------------------
# RESIZE [U85-TRM: §3.10.11]

@njit(nogil=True, cache=True)
def _resize_kernel(v, rz, cfg, lut):
    """NPU_OP_RESIZE loop [U85-TRM: §3.10.11]::

        y_int = y_off < 0 ? -1 : 0; y_mod = y_off < 0 ? y_off + scale_y_n : y_off
        per oy: iy0 = max(y_int, 0); iy1 = min(y_int+1, ifm_h-1); per ox likewise ix0, ix1
          bilinear: acc = (ny - y_mod)*((nx - x_mod)*v00 + x_mod*v01)
                          + y_mod*((nx - x_mod)*v10 + x_mod*v11)
          nearest:  acc = v[2*y_mod < ny ? iy0 : iy1][2*x_mod < nx ? ix0 : ix1];  replicate: v00
          acc2 = rescale(acc << 16, -1, shift_only); activation; truncate
          x_mod += step_x_mod; x_int += step_x_int; if x_mod >= nx: x_mod -= nx, x_int++
          (same for y)

    rz: OH, OW, D, ifm_h_m1, ifm_w_m1, ny, nx, y_off, x_off, y_step_int, y_step_mod,
    x_step_int, x_step_mod, mode. Indices beyond the IFM (assert [U85-TRM: §3.10.11]) are
    clamped."""
    OH, OW, D, ihm1, iwm1 = rz[0], rz[1], rz[2], rz[3], rz[4]
    ny, nx, yoff, xoff = rz[5], rz[6], rz[7], rz[8]
    ysi, ysm, xsi, xsm, mode = rz[9], rz[10], rz[11], rz[12], rz[13]
    out = np.zeros((OH, OW, D), np.int64)
    empty = np.zeros(0, np.int64)
    y_int = np.int64(-1) if yoff < 0 else np.int64(0)
    y_mod = yoff + ny if yoff < 0 else yoff
    for oy in range(OH):
        iy0 = min(max(y_int, 0), ihm1)
        iy1 = max(min(y_int + 1, ihm1), 0)
        x_int = np.int64(-1) if xoff < 0 else np.int64(0)
        x_mod = xoff + nx if xoff < 0 else xoff
        for ox in range(OW):
            ix0 = min(max(x_int, 0), iwm1)
            ix1 = max(min(x_int + 1, iwm1), 0)
            for oc in range(D):
                if mode == 0:
                    acc = ((ny - y_mod) * ((nx - x_mod) * v[iy0, ix0, oc] + x_mod * v[iy0, ix1, oc])
                           + y_mod * ((nx - x_mod) * v[iy1, ix0, oc] + x_mod * v[iy1, ix1, oc]))
                elif mode == 2:
                    iy = iy0 if 2 * y_mod < ny else iy1
                    ix = ix0 if 2 * x_mod < nx else ix1
                    acc = v[iy, ix, oc]
                else:
                    acc = v[iy0, ix0, oc]
                r = P.rescale(acc << 16, -1, RESCALE_SHIFT_ONLY, cfg, empty, empty)
                r = P.activation(r, cfg, lut)
                out[oy, ox, oc] = P.write_value(r, cfg)
            x_mod += xsm
            x_int += xsi
            if x_mod >= nx:
                x_mod -= nx
                x_int += 1
        y_mod += ysm
        y_int += ysi
        if y_mod >= ny:
            y_mod -= ny
            y_int += 1
    return out


def resize_step(scale_n: int, scale_d: int) -> tuple[int, int]:
    """(one_step_int, one_step_mod) of NPU_SET_RESIZE_*_STEP for the input step scale_d/scale_n
    per output [U85-TRM: §3.10.58, §3.11.38]."""
    return scale_d // scale_n, scale_d % scale_n


def resize(ifm, mode, ofm_hw, *, scale_n=(1, 1), offset=(0, 0), step=((1, 0), (1, 0)),
           ifm_hw_m1=None, ifm_zp=0, ifm_bits=None, ifm_signed=None, cfg=None, lut=None, diag=None):
    """NPU_OP_RESIZE ``mode`` (RESIZE_BILINEAR / REPLICATE / NEAREST). scale_n = (y, x)
    numerators (RESIZE_*_SCALE_N_M1 + 1); offset = (y, x) signed RESIZE_*_OFFSET;
    step = ((y_int, y_mod), (x_int, x_mod)) one_step fields; ifm_hw_m1 = (KERNEL_HEIGHT_M1,
    KERNEL_WIDTH_M1), default IFM shape - 1. cfg's OFM_SCALE shift (>= 16) normalises."""
    ifm = np.asarray(ifm)
    if ifm.ndim == 4:
        return np.stack([resize(ifm[n], mode, ofm_hw, scale_n=scale_n, offset=offset, step=step,
                                ifm_hw_m1=ifm_hw_m1, ifm_zp=ifm_zp, ifm_bits=ifm_bits,
                                ifm_signed=ifm_signed, cfg=cfg, lut=lut, diag=diag)
                         for n in range(ifm.shape[0])])
    cfg = config_or_default(cfg)
    bits, signed = infer_type(ifm, ifm_bits, ifm_signed)
    check(diag, bits == 8 or (bits == 16 and signed), "RESIZE IFM b8 or signed b16 "
                                                      "[U85-TRM: §3.10.11]")
    check(diag, ifm_zp == 0, "RESIZE needs IFM zero point 0 [U85-TRM: §3.10.11]")
    check(diag, int(cfg[C_SHIFT]) >= 16, "RESIZE needs OFM shift >= 16 [U85-TRM: §3.10.11]")
    ny, nx = scale_n
    yo, xo = offset
    check(diag, -ny <= yo < ny and -nx <= xo < nx, "resize offset out of range [U85-TRM: §3.10.11]")
    check(diag, step[0][1] < ny and step[1][1] < nx, "resize step_mod >= scale_n "
                                                     "[U85-TRM: §3.10.11]")
    v = read_values(ifm, ifm_zp, bits, signed, diag)
    if ifm_hw_m1 is None:
        ifm_hw_m1 = (v.shape[0] - 1, v.shape[1] - 1)
    v = fit_hw(v, ifm_hw_m1[0] + 1, ifm_hw_m1[1] + 1)
    rz = np.array([ofm_hw[0], ofm_hw[1], v.shape[2], ifm_hw_m1[0], ifm_hw_m1[1], ny, nx, yo, xo,
                   step[0][0], step[0][1], step[1][0], step[1][1], mode], np.int64)
    out = _resize_kernel(np.ascontiguousarray(v), rz, cfg, lut_bytes(lut))
    return out.astype(ofm_dtype(cfg))
