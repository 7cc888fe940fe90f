"""NPU_OP_POOL [U85-TRM: §3.10.10]: decode, reads, the pooling kernel, the
output write; its run kept when it reads no accumulators and no scale stream."""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from ...emu.numeric import ethosu85 as P
from ...emu.pool import ethosu85 as pool_k
from .kept import ValuesRun, keep_run, kept_accesses, kept_run, run_values
from .operands import (
    MemoryPort,
    Tensor,
    ifm_extent,
    kernel_stride,
    ofm_shape,
    pads,
    read_raw,
    tensor,
    upscale_mode,
)
from .output import acc_input, ao_cycles, finish, ofm_precision_bits, out_config
from .setstate import (
    RD_IFM,
    NpuConfig,
    OpResult,
    SetState,
    Unpredictable,
    check_diag,
    memo_on_state,
    require,
)
from .stream import Command
from .weightscale import scale_stream


class _PoolDecode(NamedTuple):
    """What the commands decide about an NPU_OP_POOL (:func:`pool_decode`)."""
    mode: int
    ofm: tuple[int, ...]     # H, W, D
    kernel: tuple[int, ...]  # kh, kw
    stride: tuple[int, ...]
    pad: tuple[int, ...]     # top, left, bottom, right
    ifm: Tensor | None       # None: pooling mode none
    ifm_shape: tuple[int, int, int] | None  # the stored extent read
    zp: int
    upscale: int
    kcfg: np.ndarray
    acc48: bool
    acc_in: int              # ACC_FORMAT.acc_input
    scaled: bool             # per-channel scales from the scale stream
    result: OpResult
    error: str | None        # an assert after the chain bookkeeping (raised there)


def pool(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    """The operation: its decode (memoised on the commands, as NPU_OP_CONV's), then the reads,
    the kernel and the OFM write; its run kept as a convolution's (:class:`_ConvRun`) when it
    reads no accumulators and no scale stream and writes an OFM."""
    d = memo_on_state("pool", cmd, s, cfg, lambda: pool_decode(cmd, s, cfg))
    mem.npu.add_operation_to_chain(s, d.mode != pool_k.POOL_NONE, d.acc_in == 2, False)
    if d.error is not None:
        raise Unpredictable(d.error)
    key, kept = kept_run(mem, d)
    if kept is not None:
        run_values(kept, mem)
        return d.result
    acc_in = acc_input(s, mem, d.ofm, d.acc48)
    raw = None if d.ifm is None or d.ifm_shape is None else \
        read_raw(mem, d.ifm, d.ifm_shape, RD_IFM)
    bias = scales = shifts = None
    if d.scaled:
        bias, scales, shifts = scale_stream(s, mem, cfg, d.ofm[2], d.acc48)
    finish(mem, s, cfg, _pool_values(d, raw, mem.lut, acc_in, bias, scales, shifts), d.kcfg,
            True)
    if key is not None and raw is not None and acc_in is None and not d.scaled \
            and not d.kcfg[P.C_ACC_OUTPUT]:
        acc = kept_accesses(mem, s, cfg, [(d.ifm, d.ifm_shape, RD_IFM)], d.ofm, True)
        if acc is not None:
            keep_run(mem, key, d, ValuesRun(*acc, functools.partial(_pool_values, d)))
    return d.result


def _pool_values(d: _PoolDecode, raw: np.ndarray | None, lut: np.ndarray,
                 acc_in: np.ndarray | None = None, bias: np.ndarray | None = None,
                 scales: np.ndarray | None = None, shifts: np.ndarray | None = None
                 ) -> np.ndarray:
    """The pooling kernel on the operation's reads (both paths)."""
    diag: list[str] = []
    H, W, D = d.ofm
    out: np.ndarray = pool_k.pool2d(
        raw, d.mode, d.kernel, (H, W), stride=d.stride, pad=d.pad, ifm_zp=d.zp,
        ifm_bits=d.ifm.bits if d.ifm else 8, ifm_signed=d.ifm.signed if d.ifm else True,
        upscale_mode=d.upscale, cfg=d.kcfg, bias=bias, scales=scales, shifts=shifts, lut=lut,
        acc_in=acc_in, depth=D, diag=diag)
    check_diag(diag, "NPU_OP_POOL")
    return out


#: the output configuration of a decode that failed an assert (never used: the operation
#: raises the decode's error first)
_NO_KCFG = np.zeros(0, np.int64)


def pool_decode(cmd: Command, s: SetState, cfg: NpuConfig) -> _PoolDecode:
    """The prologue of NPU_OP_POOL [U85-TRM: §3.10.10] from the commands alone: the dilation assert
    raises (before the chain bookkeeping, as in the pseudocode), the later ones are kept as
    the decode's error."""
    mode = cmd.fields["pooling_mode"]
    ofm = ofm_shape(s)
    kernel = (s.get("KERNEL_HEIGHT_M1", "height_m1") + 1, s.get("KERNEL_WIDTH_M1", "width_m1") + 1)
    sy, sx, dy, dx, order, decomp = kernel_stride(s)
    pad = pads(s)
    acc = (s.get("ACC_FORMAT", "acc_input"), s.get("ACC_FORMAT", "acc_format") == 1)
    require(dy == 1 and dx == 1, "dilation_y == 1 && dilation_x == 1", "[U85-TRM: §3.10.10]")
    try:
        return _pool_prologue(s, cfg, mode, ofm, kernel, (sy, sx, order, decomp), pad, acc)
    except Unpredictable as e:
        return _PoolDecode(mode, (), (), (), (), None, None, 0, 0, _NO_KCFG, False, acc[0],
                           False, OpResult(), str(e))


def _pool_prologue(s: SetState, cfg: NpuConfig, mode: int, ofm: tuple[int, int, int],
                   kernel: tuple[int, int], stride: tuple[int, int, int, int],
                   pad: tuple[int, int, int, int], acc: tuple[int, bool]) -> _PoolDecode:
    (H, W, D), (kh, kw), (sy, sx, order, decomp), (pt, pl, pb, pr) = ofm, kernel, stride, pad
    ain, acc48 = acc
    ih = (H - 1) * sy + kh - (pt + pb)
    iw = (W - 1) * sx + kw - (pl + pr)
    use_ifm = mode != pool_k.POOL_NONE
    if mode == pool_k.POOL_NONE:
        require(s.get("OFM_PRECISION", "activation_storage") != 2, "OFM storage != chained "
                "(pooling none)", "[U85-TRM: §3.10.10]")
    require(ih >= 1 and iw >= 1, "ifm_height >= 1 && ifm_width >= 1", "[U85-TRM: §3.10.10]")
    ifm = tensor(s, "IFM") if use_ifm else None
    up = 0
    if ifm is not None:  # (use_ifm)
        require(ifm.bits == 8 or (ifm.signed and ifm.bits in (16, 32)),
                "IFM precision == b8 || (b16 && signed) || (b32 && signed)", "[U85-TRM: §3.10.10]")
        up = upscale_mode(s, ifm, sy, sx)
    b32 = ifm is not None and ifm.bits == 32
    if mode in (pool_k.POOL_MAX, pool_k.POOL_MIN):
        require(kh * kw <= 65536 and (kh <= 256 or kw <= 256),
                "kh*kw <= 65536 && (kh <= 256 || kw <= 256)", "[U85-TRM: §3.10.10]")
        require(up != 2, "upscale != zeros", "[U85-TRM: §3.10.10]")
    elif mode == pool_k.POOL_AVERAGE:
        require(kh <= 8 and kw <= 8, "kh <= 8 && kw <= 8", "[U85-TRM: §3.10.10]")
        require(max(pt, pb) < kh and max(pl, pr) < kw, "pads < kernel", "[U85-TRM: §3.10.10]")
        require(decomp == 0, "decomposition == d8x8", "[U85-TRM: §3.10.10]")
        require(not b32, "IFM precision != b32", "[U85-TRM: §3.10.10]")
    elif mode == pool_k.POOL_REDUCE_SUM:
        require(kh == 1 and kw == 1 and sy == 1 and sx == 1 and up == 0 and order == 0
                and s.get("IFM_ZERO_POINT", "zero_point") == 0 and D == 1,
                "reduce_sum: 1x1 kernel, stride 1, no upscale, depth_first, IFM zero point 0, "
                "ofm_depth == 1", "[U85-TRM: §3.10.10]")
    elif mode == pool_k.POOL_SUM:
        require(not b32 and kh <= 65536 and kw <= 65536, "!b32 && kh, kw <= 65536",
            "[U85-TRM: §3.10.10]")
    elif mode in (pool_k.POOL_ARGMAX_X, pool_k.POOL_ARGMAX_Y):
        xm = mode == pool_k.POOL_ARGMAX_X
        require(not b32 and decomp == 0 and sy == 1 and sx == 1 and up == 0
                and (kh == 1 and W == 1 if xm else kw == 1 and H == 1),
                f"argmax_{'x' if xm else 'y'}: !b32, d8x8, stride 1x1, no upscale, "
                f"{'kh == 1 && W == 1' if xm else 'kw == 1 && H == 1'}", "[U85-TRM: §3.10.10]")
    require(mode in (pool_k.POOL_SUM, pool_k.POOL_REDUCE_SUM, pool_k.POOL_NONE) or not acc48,
            "pooling_mode in {sum, reduce_sum, none} || acc_format == i32", "[U85-TRM: §3.10.10]")
    kcfg = out_config(s, accumulator_path=True)
    shape = None
    if use_ifm:
        shape = (H, W, s.get("IFM_DEPTH_M1", "depth_m1") + 1) if mode == pool_k.POOL_REDUCE_SUM \
            else ifm_extent(up, ih, iw) + (D,)
    n = H * W * D
    if mode == pool_k.POOL_REDUCE_SUM:
        assert shape is not None  # (reduce_sum reads the IFM)
        macs = H * W * shape[2]
    elif mode == pool_k.POOL_NONE:
        macs = 0
    else:
        macs = n * kh * kw
    result = OpResult(macs=macs, elements=n,
                      mac_cycles=-(-macs // cfg.depthwise_macs(ifm.bits if ifm else 8)),
                      ao_cycles=ao_cycles(cfg, n, ofm_precision_bits(s), 64 if acc48 else 32, False,
                                          False))
    return _PoolDecode(mode, ofm, kernel, (sy, sx), pad, ifm, shape,
                       s.get("IFM_ZERO_POINT", "zero_point") if use_ifm else 0, up, kcfg,
                       acc48, ain,
                       not kcfg[P.C_ACC_OUTPUT] and kcfg[P.C_SCALE_MODE] == 0, result, None)
