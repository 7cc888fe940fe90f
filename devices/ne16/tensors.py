"""NE16: where a job's input and output tensors lie in L1 (Device.unit_tensors), HWC as pulp-nnx
has them, from the job's registers as job.py decodes them ([NE16]).

* "input" (uint8: 8-bit activations; CONFIG0.mode16 is refused by job.decode): the pixels the
  job reads from memory, i.e. the unpadded input. The job's virtual input starts at INFEAT_PTR
  (the driver moves it back by the top/left padding, pulp_nnx.py) and its padding rows and
  columns come from PADDING [NE16: PADDING], not memory, so the tensor is the rectangle of pixels
  some subtile reads: element (h, w, c) at INFEAT_PTR + (y0 + h)*D1 + (x0 + w)*D0 + c
  ([NE16: Overview], N§3.1), (y0, x0) its first pixel read. Channels: Ki (= Ko in depthwise mode).
* "output": channel k of pixel (y, x) at OUTFEAT_PTR + y*D2 + x*D1 + (k*bytes // 32)*D0 +
  k*bytes % 32 (N§3.1); int8/int16/int32 (uint under ReLU, CONFIG0.quant_rect = 0, the
  saturation being unsigned then), or the raw int32 sums with streamout = 0 [NE16: CONFIG0]. A
  strided job (CONFIG0.strided2x2) writes rows and columns 0 and 2 of each 3x3 output subtile only,
  so its output tensor has those rows and columns (the pulp-nnx driver's 2x2 output blocks).

Weights (bit-planes, not an array in any framework's layout) and the streamin partial sums are
not declared.
"""
from __future__ import annotations

import numpy as np

from ..tensors import TensorSpec
from .job import JobConfig, _geometry


def job_tensors(cfg: JobConfig) -> tuple[TensorSpec, ...]:
    """The job's "input" (when it reads any pixel from memory) and "output", HWC."""
    g = _geometry(cfg)
    specs = []
    rows, cols = np.flatnonzero(g.need.any(axis=1)), np.flatnonzero(g.need.any(axis=0))
    if rows.size:
        y0, y1, x0, x1 = int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1
        d0, d1 = cfg.reg("INFEAT_D0_STRIDE"), cfg.reg("INFEAT_D1_STRIDE")
        base = cfg.reg("INFEAT_PTR") + y0 * d1 + x0 * d0
        specs.append(TensorSpec(
            "input", "HWC", (y1 - y0, x1 - x0, cfg.k_in), "uint8", tuple(range(cfg.k_in)),
            tuple(base + h * d1 for h in range(y1 - y0)), tuple(w * d0 for w in range(x1 - x0)),
            f"INFEAT_PTR + ({y0} + h)*D1 + ({x0} + w)*D0 + c: the unpadded input"))
    elem = cfg.out_bits // 8 if cfg.normquant else 4
    if cfg.normquant:
        dtype = f"{'uint' if cfg.relu else 'int'}{cfg.out_bits}"
    else:
        dtype = "int32"
    written = g.written.any(axis=2)
    oy, ox = np.flatnonzero(written.any(axis=1)), np.flatnonzero(written.any(axis=0))
    yp, o0, o1, o2 = (cfg.reg("OUTFEAT_PTR"), cfg.reg("OUTFEAT_D0_STRIDE"),
                      cfg.reg("OUTFEAT_D1_STRIDE"), cfg.reg("OUTFEAT_D2_STRIDE"))
    channel = tuple((k * elem // 32) * o0 + k * elem % 32 for k in range(cfg.k_out))
    specs.append(TensorSpec(
        "output", "HWC", (oy.size, ox.size, cfg.k_out), dtype, channel,
        tuple(yp + int(y) * o2 for y in oy), tuple(int(x) * o1 for x in ox),
        "OUTFEAT_PTR + y*D2 + x*D1 + (k*bytes // 32)*D0 + k*bytes % 32"
        + (", rows/columns 0 and 2 of each 3x3 subtile (strided2x2)" if cfg.strided else "")
        + ("" if cfg.normquant else ", raw int32 sums (streamout = 0)")))
    return tuple(specs)


def output_subtiles(cfg: JobConfig) -> np.ndarray:
    """The output subtile of each element of the job's "output" tensor (its HWC shape), as the
    number the job runs it at: subtiles go Ko > Ho > Wo (N§3.2), number
    (ko * nb_Ho + ho) * nb_Wo + wo (job.py's geometry). The per-layer diff names the first
    differing subtile of a job with it (issue 27: pulp-nnx's golden output per output
    subtile)."""
    g = _geometry(cfg)
    written = g.written.any(axis=2)
    oy, ox = np.flatnonzero(written.any(axis=1)), np.flatnonzero(written.any(axis=0))
    return g.subtile[np.ix_(oy, ox)]


def subtile_name(cfg: JobConfig, number: int) -> str:
    """"subtile N (Ko k, Ho h, Wo w)" of subtile ``number`` (:func:`output_subtiles`)."""
    ho_n, wo_n = cfg.nb[1], cfg.nb[2]
    return (f"subtile {number} (Ko {number // (ho_n * wo_n)}, Ho {number // wo_n % ho_n}, "
            f"Wo {number % wo_n})")
