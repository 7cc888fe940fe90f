"""NPU_OP_CONV [U85-TRM: §3.10.2] and NPU_OP_DEPTHWISE [U85-TRM: §3.10.3]:
decode, reads, the convolution or matrix-product kernel, the output write; its run kept."""
from __future__ import annotations

import functools
import weakref
from typing import Any, NamedTuple

import numpy as np

from ...emu.conv import ethosu85 as conv_k
from ...emu.numeric import ethosu85 as P
from .kept import keep_run, kept_accesses, kept_read, kept_run, kept_write, traced
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
    RD_IFM_STREAM,
    RD_SCALE_BIAS,
    RD_WEIGHTS,
    NpuConfig,
    OpResult,
    SetState,
    check_diag,
    memo_on_state,
    require,
)
from .stream import Command
from .weightscale import read_scales, read_weights, scale_read, weight_read


class _ConvDecode(NamedTuple):
    """What the commands decide about an NPU_OP_CONV / _DEPTHWISE: extents, tensors, output
    stage, the streams to read, the counts (:func:`conv_decode`)."""
    matmul: bool
    ofm: tuple[Any, ...]               # H, W, D
    stride: tuple[Any, ...]
    dilation: tuple[Any, ...]
    dilated: tuple[Any, ...]           # KERNEL_HEIGHT/WIDTH_M1 + 1
    pad: tuple[Any, ...]               # top, left, bottom, right
    ifm: Tensor
    ifm_shape: tuple[Any, ...]         # the stored extent read
    ifm2: Tensor | None      # matmul
    zp: int                  # IFM_ZERO_POINT as stored
    upscale: int
    kcfg: np.ndarray
    acc48: bool
    scales: tuple[Any, ...] | None     # scale_read
    weights: tuple[Any, ...] | None    # weight_read (not matmul)
    result: OpResult
    kernels: dict[Any, Any]            # _int_conv's


def _conv_like(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig,
               depthwise: bool) -> OpResult:
    """The operation: its decode (memoised on the commands: a program's operations are the
    same on every run, and decoding them again cost more than the smaller ones' kernels),
    then the reads, the kernel and the OFM write, in the pseudocode's order."""
    matmul = not depthwise and cmd.fields.get("weights_ifm2", 0) == 1
    ain = s.get("ACC_FORMAT", "acc_input")
    mem.npu.add_operation_to_chain(s, True, matmul or ain == 2, False)
    d = memo_on_state("conv", cmd, s, (cfg, depthwise),
                      lambda: conv_decode(s, cfg, depthwise, matmul))
    key, kept = kept_run(mem, d)
    if kept is not None and _run_kept_conv(d, kept, mem):
        return d.result
    H, W, D = d.ofm
    acc_in = acc_input(s, mem, d.ofm, d.acc48) if ain else None
    raw = read_raw(mem, d.ifm, d.ifm_shape, RD_IFM)
    zp = d.zp
    bias = scales = shifts = None
    if d.scales is not None:
        bias, scales, shifts = read_scales(mem, d.scales)
    diag: list[str] = []
    if matmul:
        assert d.ifm2 is not None  # (the decode of a weights_ifm2 conv holds it)
        raw2 = read_raw(mem, d.ifm2, matmul_ifm2_shape(d), RD_IFM_STREAM)
        out = conv_k.matmul(raw, raw2, ifm_zp=zp, ifm2_zp=s.get("IFM2_ZERO_POINT", "zero_point"),
                            ifm_bits=d.ifm.bits, ifm_signed=d.ifm.signed, cfg=d.kcfg, bias=bias,
                            scales=scales, shifts=shifts, lut=mem.lut, acc_in=acc_in, diag=diag)
    else:
        assert d.weights is not None  # (the decode of any other conv holds them)
        w = read_weights(mem, d.weights)
        k, kkey = _int_conv(d, raw, zp, w, bias, scales, shifts, depthwise)
        if k is not None:
            if key is not None and not ain and kkey is not None:  # before the OFM write: the
                kept = _kept_conv(d, s, cfg, mem, kkey)           # streams as decoded
                if kept is not None:
                    keep_run(mem, key, d, kept)
            out = conv_k.run_int_conv(k, raw, acc_in, mem.lut)
        else:
            fn = conv_k.depthwise2d if depthwise else conv_k.conv2d
            out = fn(raw, w, (H, W), stride=d.stride, dilation=d.dilation, pad=d.pad,
                     ifm_zp=zp, ifm_bits=d.ifm.bits, ifm_signed=d.ifm.signed,
                     upscale_mode=d.upscale, cfg=d.kcfg, bias=bias, scales=scales,
                     shifts=shifts, lut=mem.lut, acc_in=acc_in, diag=diag, dilated=d.dilated)
    check_diag(diag, cmd.name)
    finish(mem, s, cfg, out, d.kcfg, True)
    return d.result


class _ConvRun(NamedTuple):
    """A convolution's accesses and integer kernel for one decode and placement of the regions
    (:func:`_kept_conv`): the same on every run while the weight and scale streams hold the
    bytes they were decoded from. Why: working them out through the general reads and writes
    cost ~40 us per operation, several times a MobileNet layer's kernel."""
    ifm: tuple[Any, ...]               # _kept_read_access
    streams: tuple[Any, ...]           # (Access, the bytes it held): scale stream, weight streams
    kernel: tuple[Any, ...]            # the integer kernel's key in the decode's kernels (not the
    #                          kernel: a kept run must not keep the packed weights alive)
    ofm: tuple[Any, ...]               # _kept_write_access


def _kept_conv(d: _ConvDecode, s: SetState, cfg: NpuConfig, mem: MemoryPort,
               kernel: tuple[Any, ...]) -> _ConvRun | None:
    """The :class:`_ConvRun` of an operation that has just read its streams and chosen the
    integer kernel kept under ``kernel`` (no accumulator input, not matmul), or None where one
    of its accesses is not a kept view (:func:`_kept_read_access`,
    :func:`_kept_write_access`), with accumulator output, or with an empty stream."""
    if d.kcfg[P.C_ACC_OUTPUT]:
        return None
    assert d.weights is not None  # (not matmul)
    acc = kept_accesses(mem, s, cfg, [(d.ifm, d.ifm_shape, RD_IFM)], d.ofm, True)
    reads = [] if d.scales is None else [(d.scales[0], d.scales[1], d.scales[2], RD_SCALE_BIAS)]
    reads += [(d.weights[0], base, length, RD_WEIGHTS) for base, length in d.weights[1]]
    if acc is None or any(length <= 0 for _, _, length, _ in reads):
        return None
    streams = tuple((a, a.views[0].tobytes())
                    for a in (mem.stream_access(*r) for r in reads))
    return _ConvRun(acc[0][0], streams, kernel, acc[1])


def _run_kept_conv(d: _ConvDecode, r: _ConvRun, mem: MemoryPort, account: bool = True) -> bool:
    """The operation through its kept run, as the general path does it (reads, kernel, OFM
    write, each access accounted in the same order unless ``account`` is False); False,
    having done nothing, when a stream no longer holds the bytes the run was worked out from
    or the kernel has gone with its weights."""
    k = d.kernels.get(r.kernel)
    if k is None:
        return False
    for a, held in r.streams:
        if a.views[0].tobytes() != held:
            return False
    raw = kept_read(mem, r.ifm, account)
    if account:
        for a, _ in r.streams:
            mem.record(a)
        traced(mem, functools.partial(_run_kept_conv, d, r, account=False))
    kept_write(mem, r.ofm, conv_k.run_int_conv(k[1], raw, None, mem.lut), account)
    return True


def _int_conv(d: _ConvDecode, raw: np.ndarray, zp: int, w: np.ndarray, bias: np.ndarray | None,
              scales: np.ndarray | None, shifts: np.ndarray | None,
              depthwise: bool) -> tuple[conv_k.IntConv | None, tuple[Any, ...] | None]:
    """(conv_k.plan_int_conv of the operation, its key in ``d.kernels``): kept in its decode
    for read-only (decoded) weights and scale arrays and the input's type (the key None
    otherwise); None where the integer kernels do not take it as it is. The entry holds the
    scale arrays (so their ids stay theirs) but not the weights: it goes when they are freed
    (the weight memo's bound then bounds this too)."""
    scale_arrays = (bias, scales, shifts)
    keep = not w.flags.writeable and all(a is None or not a.flags.writeable
                                         for a in scale_arrays)
    key = (id(w), *map(id, scale_arrays), raw.dtype.str)
    hit = d.kernels.get(key) if keep else None
    if hit is None:
        k = None if d.upscale else conv_k.plan_int_conv(
            raw, w, d.ofm[:2], d.stride, d.dilation, d.pad, zp, d.ifm.bits, d.ifm.signed,
            d.kcfg, bias, scales, shifts, depthwise, d.dilated)
        hit = (scale_arrays, k)
        if keep:
            if len(d.kernels) >= 8:  # weights rewritten between runs: a few at a time
                d.kernels.clear()
            d.kernels[key] = hit
            weakref.finalize(w, d.kernels.pop, key, None)
    return hit[1], key if keep else None


def matmul_ifm2_shape(d: _ConvDecode) -> tuple[int, int, int]:
    """The [H, W, C] extent of IFM2 that a weights_ifm2 NPU_OP_CONV reads: [1, OFM depth, IFM
    depth], the second matrix transposed (x = output column, c = reduction index; [U85-TRM: §4.1],
    and the layout Vela 5.2 programs: see emu/conv/ethosu85.py ``matmul``)."""
    return (1, d.ofm[2], d.ifm_shape[2])


def conv_decode(s: SetState, cfg: NpuConfig, depthwise: bool, matmul: bool) -> _ConvDecode:
    """The prologue of NPU_OP_CONV [U85-TRM: §3.10.2] / NPU_OP_DEPTHWISE [U85-TRM: §3.10.3]: extents
    and asserts from the commands alone."""
    H, W, D = ofm_shape(s)
    sy, sx, dy, dx, order, decomp = kernel_stride(s)
    dh = s.get("KERNEL_HEIGHT_M1", "height_m1") + 1
    dw = s.get("KERNEL_WIDTH_M1", "width_m1") + 1
    pt, pl, pb, pr = pads(s)
    ifm_depth = D if depthwise else s.get("IFM_DEPTH_M1", "depth_m1") + 1
    ain = s.get("ACC_FORMAT", "acc_input")
    acc48 = s.get("ACC_FORMAT", "acc_format") == 1
    ih = (H - 1) * sy + dh - (pt + pb)
    iw = (W - 1) * sx + dw - (pl + pr)
    line = "[U85-TRM: §3.10.3]" if depthwise else "[U85-TRM: §3.10.2]"
    require(ih >= 1 and iw >= 1, "ifm_height >= 1 && ifm_width >= 1", line)
    require(dh * dw <= 64 * 64 and (dh <= 64 or dw <= 64),
            "dilated_height*dilated_width <= 64*64 && "
            "(dilated_height <= 64 || dilated_width <= 64)",
            line)
    ifm = tensor(s, "IFM")
    require(ifm.bits == 8 or (ifm.bits == 16 and ifm.signed),
            "IFM precision == b8 || (b16 && signed)", line)
    if depthwise:
        require(s.get("WEIGHT_FORMAT", "weight_sparsity") == 0, "weight_sparsity == none",
                "[U85-TRM: §3.10.3]")
    up = upscale_mode(s, ifm, sy, sx)
    kh_u, kw_u = (dh + dy - 1) // dy, (dw + dx - 1) // dx
    kcfg = out_config(s, accumulator_path=True)
    require(ain in (0, 1, 2), "ACC_FORMAT.acc_input is not reserved", "[U85-TRM: Table 3-107]")
    scales = None
    if not kcfg[P.C_ACC_OUTPUT] and kcfg[P.C_SCALE_MODE] == 0:
        scales = scale_read(s, cfg, D, acc48)
    ifm2 = wts = None
    if matmul:
        require(dh == 1 and dw == 1 and H == 1 and pl == 0 and pt == 0,
                "dilated 1x1 && ofm_height == 1 && pad_x == 0 && pad_y == 0 (weights_ifm2)",
                "[U85-TRM: §3.10.2]")
        require(dy == 1 and dx == 1 and sy == 1 and sx == 1, "dilation 1x1 && stride 1x1",
                "[U85-TRM: §3.10.2]")
        ifm2 = tensor(s, "IFM2")
        require(ifm2.bits == ifm.bits and ifm2.signed == ifm.signed,
                "IFM precision == IFM2 precision", "[U85-TRM: §3.10.2]")
        require(ain != 2, "acc_input != ifm2 (weights_ifm2)", "[U85-TRM: §3.10.2]")
        require(s.get("WEIGHT_FORMAT", "weight_sparsity", 0) == 0, "weight_sparsity == none",
                "[U85-TRM: §3.10.2]")
        require(order == 0, "weight_order == depth_first (weights_ifm2)", "[U85-TRM: §3.10.2]")
    else:
        wts = weight_read(s, cfg, depth=D, ifm_depth=ifm_depth, dilated=(dh, dw),
                          dilation=(dy, dx), stride=(sy, sx), order=order,
                          decomposition=decomp, depthwise=depthwise, ifm16=ifm.bits == 16)
    n = H * W * D
    macs = n * kh_u * kw_u * (1 if depthwise else ifm_depth)
    rate = cfg.depthwise_macs(ifm.bits) if depthwise else cfg.macs
    result = OpResult(macs=macs, elements=n, mac_cycles=-(-macs // rate),
                      ao_cycles=ao_cycles(cfg, n, ofm_precision_bits(s), 64 if acc48 else 32, False,
                                          False))
    return _ConvDecode(matmul, (H, W, D), (sy, sx), (dy, dx), (dh, dw), (pt, pl, pb, pr), ifm,
                       (*ifm_extent(up, ih, iw), ifm_depth), ifm2,
                       s.get("IFM_ZERO_POINT", "zero_point"), up, kcfg, acc48, scales, wts,
                       result, {})


def conv(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    return _conv_like(cmd, s, mem, cfg, depthwise=False)


def depthwise(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    return _conv_like(cmd, s, mem, cfg, depthwise=True)
