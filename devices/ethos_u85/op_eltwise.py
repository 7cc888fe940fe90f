"""NPU_OP_ELEMENTWISE [U85-TRM: §3.10.6]: decode (operands, broadcast,
scales), reads, the element-wise kernel, the output write; its run kept but for DIV."""
from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

from ...emu.eltwise import ethosu85 as eltwise_k
from .kept import ValuesRun, keep_run, kept_accesses, kept_run, run_values
from .operands import MemoryPort, Tensor, ofm_shape, read_raw, tensor
from .output import ao_cycles, ofm_precision_bits, out_config, write_ofm
from .setstate import (
    RD_IFM_STREAM,
    NpuConfig,
    OpResult,
    SetState,
    Unpredictable,
    check_diag,
    memo_on_state,
    require,
)
from .stream import Command


def _in_scale(s: SetState, which: str, needed: bool) -> tuple[int, int, int, int]:
    if not needed:
        return (1, 0, 1, 0)
    return (s.get(f"{which}_SCALE", "scale"), s.get(f"{which}_SCALE", "shift"),
            s.get(f"{which}_SCALE", "round_mode"), s.get(f"{which}_SCALE", "dbl_rnd"))


class _EltwiseDecode(NamedTuple):
    """What the commands decide about an NPU_OP_ELEMENTWISE (:func:`eltwise_decode`)."""
    mode: int
    chain: tuple[bool, bool]  # add_operation_to_chain's use_ifm, use_ifm2
    shape: tuple[int, ...]   # OFM H, W, D
    reads: tuple[Any, ...]   # per input: (tensor, shape read) or None (unary or scalar)
    kwargs: dict[str, Any]   # eltwise_k.elementwise's keywords but lut and diag
    result: OpResult
    error: str | None = None  # an assert that fails after the chain bookkeeping


def elementwise(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    """The operation: its decode (memoised on the commands, as NPU_OP_CONV's), then the reads,
    the kernel and the OFM write. The asserts fail in the pseudocode's order around the chain
    bookkeeping; the later ones all before anything is read (the device stops before the
    operation's reads, where the pseudocode may have read an operand first)."""
    d = memo_on_state("eltwise", cmd, s, cfg, lambda: eltwise_decode(cmd, s, cfg))
    mem.npu.add_operation_to_chain(s, *d.chain, True)
    if d.error is not None:
        raise Unpredictable(d.error)
    key, kept = kept_run(mem, d)
    if kept is not None:
        run_values(kept, mem)
        return d.result
    raws = [None if r is None else read_raw(mem, r[0], r[1], RD_IFM_STREAM) for r in d.reads]
    diag: list[str] = []
    out = eltwise_k.elementwise(d.mode, raws[0], raws[1], d.shape, lut=mem.lut, diag=diag,
                                **d.kwargs)
    check_diag(diag, "NPU_OP_ELEMENTWISE")
    write_ofm(mem, s, cfg, out, all_perms=False)
    # kept unless DIV, whose asserts depend on the data (every other one on the commands)
    if key is not None and d.mode != eltwise_k.EW_DIV:
        acc = kept_accesses(mem, s, cfg, [None if r is None else (*r, RD_IFM_STREAM)
                                           for r in d.reads], out.shape, False)
        if acc is not None:
            plan = eltwise_k.plan_elementwise(d.mode, raws[0], raws[1], d.shape, **d.kwargs)
            keep_run(mem, key, d,
                     ValuesRun(*acc, functools.partial(eltwise_k.run_elementwise, plan)))
    return d.result


def eltwise_decode(cmd: Command, s: SetState, cfg: NpuConfig) -> _EltwiseDecode:
    """The prologue of NPU_OP_ELEMENTWISE [U85-TRM: §3.10.6]: operands, scales and asserts from the
    commands alone."""
    mode = cmd.fields["elementwise_mode"]
    require(mode in eltwise_k.EW_MODES, f"elementwise_mode {mode} is not reserved",
        "[U85-TRM: Table 3-100]")
    unary = mode in eltwise_k.EW_UNARY
    ifm = tensor(s, "IFM")
    bm1 = s.get("IFM_BROADCAST", "broadcast_mode")
    bm2 = 0 if unary else s.get("IFM2_BROADCAST", "broadcast_mode")
    ifm2 = None if unary else tensor(s, "IFM2")
    if ifm2 is not None:  # G-R12: only checked when IFM2 is used
        require(ifm.bits == ifm2.bits and ifm.signed == ifm2.signed,
                "IFM precision == IFM2 precision", "[U85-TRM: §3.10.6]")
    chain = (bm1 != eltwise_k.BC_SCALAR, not (unary or bm2 == eltwise_k.BC_SCALAR))
    try:
        return _eltwise_operands(s, cfg, mode, unary, ifm, ifm2, bm1, bm2, chain)
    except Unpredictable as e:  # raised after add_operation_to_chain, as the pseudocode does
        return _EltwiseDecode(mode, chain, (), (), {}, OpResult(), str(e))


def _eltwise_operands(s: SetState, cfg: NpuConfig, mode: int, unary: bool, ifm: Tensor,
                      ifm2: Tensor | None, bm1: int, bm2: int,
                      chain: tuple[bool, bool]) -> _EltwiseDecode:
    """The rest of :func:`eltwise_decode`: the asserts after the chain bookkeeping."""
    require(ifm.bits in (8, 16) or (ifm.bits == 32 and ifm.signed),
            "IFM precision == b8 || b16 || (b32 && signed)", "[U85-TRM: §3.10.6]")
    require(s.get("OFM_PRECISION", "activation_reverse") == 0, "OFM reverse == none",
        "[U85-TRM: §3.10.6]")
    require(s.get("IFM_UPSCALE", "mode") == 0, "IFM_UPSCALE.mode == none", "[U85-TRM: §3.10.6]")
    kcfg = out_config(s, accumulator_path=False)
    require(s.get("OFM_PRECISION", "scale_mode") == 1,
            "mode == normal in rescale: elementwise needs OFM scale_mode global",
                "[U85-TRM: §3.6.6], G-R9")
    shape = ofm_shape(s)
    scalar = 0
    reads: list[tuple[Tensor, tuple[int, int, int]] | None] = []
    for which, t, bm in (("IFM", ifm, bm1), ("IFM2", ifm2, bm2)):
        if t is None:
            reads.append(None)
        elif bm == eltwise_k.BC_SCALAR:
            require(t.storage == 3, f"{which} storage == none for a scalar operand",
                "[U85-TRM: Table 3-120]")
            scalar = s.get("OP_SCALAR", "scalar")
            reads.append(None)
        else:
            require(bm <= 7, f"{which} broadcast_mode {bm} is not reserved",
                "[U85-TRM: Table 3-117]")
            if t.storage == 2:
                require(bm == 0, "no broadcast from a chaining FIFO", "[U85-TRM: §3.6.4]")
            reads.append((t, eltwise_k.operand_shape(bm, shape)))
    if bm1 == eltwise_k.BC_SCALAR and bm2 == eltwise_k.BC_SCALAR:
        require(False, "IFM_BROADCAST != scalar when IFM2 is scalar", "[U85-TRM: §3.10.6]")
    # scale_a / scale_b read IFM_SCALE / IFM2_SCALE for b8 and signed b16 inputs [U85-TRM: §3.6.6];
    # div asserts on both [U85-TRM: §3.10.6]; mul never scales; lrelu scales a with IFM2_SCALE too
    scaled = (ifm.bits == 8 or (ifm.bits == 16 and ifm.signed)) and mode != eltwise_k.EW_MUL
    sc1 = _in_scale(s, "IFM", scaled or mode == eltwise_k.EW_DIV)
    sc2 = _in_scale(s, "IFM2", (scaled and (not unary or mode == eltwise_k.EW_LRELU))
                    or mode == eltwise_k.EW_DIV)
    for sc, which in ((sc1, "IFM"), (sc2, "IFM2")):
        require(sc[2] in (0, 1), f"{which}_SCALE.round_mode is not reserved",
            "[U85-TRM: Table 3-183]")
        require(0 <= sc[3] <= 30, "0 <= dbl_rnd && dbl_rnd <= 30", "[U85-TRM: §3.6.6]")
    kwargs = dict(ifm_zp=s.get("IFM_ZERO_POINT", "zero_point", 0 if bm1 == 8 else None),
                  ifm2_zp=0 if unary else s.get("IFM2_ZERO_POINT", "zero_point",
                                                0 if bm2 == 8 else None),
                  ifm_bits=ifm.bits, ifm_signed=ifm.signed,
                  ifm2_bits=ifm2.bits if ifm2 else ifm.bits,
                  ifm2_signed=ifm2.signed if ifm2 else ifm.signed, ifm_scale=sc1,
                  ifm2_scale=sc2, broadcast=bm1, broadcast2=bm2, scalar=scalar, cfg=kcfg)
    n = math.prod(shape)
    result = OpResult(macs=0, elements=n, mac_cycles=0,
                      ao_cycles=ao_cycles(cfg, n, ofm_precision_bits(s), ifm.bits, not unary, True))
    return _EltwiseDecode(mode, chain, shape, tuple(reads), kwargs, result)
