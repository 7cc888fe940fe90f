"""Ethos-U85 kernel operations behind one small interface (the device calls nothing else).

``run_operation(cmd, state, mem, cfg)`` executes one kernel command (NPU_OP_CONV, _DEPTHWISE,
_POOL, _ELEMENTWISE, _RESIZE) against the NPU_SET_* state captured at issue [U85-TRM: §3.5.5] and
returns an :class:`OpResult` (exact MAC/element counts and the modelled cycles of the MAC and AO
units).

This module is the device side of an operation ([U85-TRM], C§4; "[U85-TRM: ...]" cites the TRM's
section or table (docs/citations.md)):

* the prologue of each operation's pseudocode: the extents derived from the NPU_SET_* state and
  the asserts (a failed ``assert()`` is UNPREDICTABLE: :class:`Unpredictable`, [U85-TRM: §3.5.4]);
* the gather: tensor addresses from the IFM/IFM2 registers via :mod:`accelstub.emu.memory.ethosu85`
  (``element_address_in_region``, NHWC and NHCWB16, tiles), read through the device's
  :class:`MemoryPort` (which checks the memory windows and records Touched ranges and AXI bytes);
  the weight streams (WEIGHT_BASE/WEIGHT1-3_BASE) and the scale-and-bias stream the same way;
* the scatter: ``write_ofm`` [U85-TRM: §3.6.5] with OFM reverse and transpose, chaining FIFOs, the
  accumulator storage (acc_input keep / ifm2, acc_output disable).

All arithmetic is the emu kernels' (``accelstub.emu.{conv,pool,eltwise,resize}.ethosu85``, weights
from
:mod:`accelstub.emu.weights.ethosu85`, output stage from :mod:`accelstub.emu.numeric.ethosu85`):
one implementation of each operation. The kernels report a violated assert in ``diag``; the device
turns the first one into :class:`Unpredictable` before anything is written.

sparse_2_4 weights are decoded like dense ones in their own order, the 2:4 rule checked
(:func:`accelstub.emu.weights.ethosu85.check_sparse_2_4`).

The parts, one module each (issue 33 #3), none of which reads this one: setstate.py (NPU_SET_*
state, internal state, configuration, results, errors, the decode memo), operands.py (tensors,
addresses and boxes, the gather, and :class:`MemoryPort`, every member the port must offer),
weightscale.py (weight and scale streams), output.py (output stage, accumulators, write_ofm,
AO cycles), kept.py (kept runs), op_conv.py, op_pool.py, op_eltwise.py, op_resize.py (one
operation each). Each operation decodes its commands once (a decode is the operation's row of
a table an executor can run: extents, tensors, streams, output stage), then reads, runs its
kernel and writes. This module holds the table of operations, the listing's summaries and the
operands a unit declares, and re-exports the names other modules take from ``ops``.
"""
from __future__ import annotations

import numpy as np

from ...emu.eltwise import ethosu85 as eltwise_k
from ...emu.numeric import ethosu85 as P
from ..bits import sign_extend  # the seed's sign_extend(v, n) [U85-TRM: §3.6.2]
from ..errors import DeviceError
from .kept import KEPT_NOW, keep_run, kept_run
from .op_conv import conv, conv_decode, depthwise, matmul_ifm2_shape
from .op_eltwise import elementwise, eltwise_decode
from .op_pool import pool, pool_decode
from .op_resize import resize
from .operands import (
    Access,
    MemoryPort,
    Tensor,
    addresses,
    boxes,
    ofm_shape,
    read_raw,
    read_views,
    store_views,
    tensor,
)
from .output import ofm_write, out_config, write_ofm
from .setstate import (
    PRECISION_BITS,
    RD_CMD,
    RD_IFM,
    RD_IFM_STREAM,
    RD_MEM2MEM,
    RD_MEM2MEM_IDX,
    RD_SCALE_BIAS,
    RD_WEIGHTS,
    WR_MEM2MEM,
    WR_OFM,
    NotImplementedYet,
    NpuBusFault,
    NpuConfig,
    NpuInternal,
    OpResult,
    SetState,
    Unpredictable,
    memo_on_commands,
    memo_on_state,
    not_implemented,
    require,
)
from .stream import MATMUL_LAYOUT, Command, is_matmul

#: the names other modules take from ``ops`` (defined in its parts)
__all__ = ["KEPT_NOW", "OPERATIONS", "PRECISION_BITS", "RD_CMD", "RD_IFM", "RD_IFM_STREAM",
           "RD_MEM2MEM", "RD_MEM2MEM_IDX", "RD_SCALE_BIAS", "RD_WEIGHTS", "WR_MEM2MEM", "WR_OFM",
           "Access", "MemoryPort", "NotImplementedYet", "NpuBusFault", "NpuConfig", "NpuInternal",
           "OpResult", "SetState", "Tensor", "Unpredictable", "addresses", "boxes", "keep_run",
           "kept_run", "memo_on_commands", "memo_on_state", "not_implemented", "operand_offsets",
           "out_config", "read_raw", "read_views", "require", "run_operation", "store_views",
           "summarize", "tensor", "write_ofm"]

OPERATIONS = {"NPU_OP_CONV": conv, "NPU_OP_DEPTHWISE": depthwise, "NPU_OP_POOL": pool,
              "NPU_OP_ELEMENTWISE": elementwise, "NPU_OP_RESIZE": resize}
_UNARY = set(eltwise_k.EW_UNARY)


def run_operation(cmd: Command, s: SetState, mem: MemoryPort, cfg: NpuConfig) -> OpResult:
    """Execute kernel command ``cmd`` (one of :data:`OPERATIONS`). A NotImplementedYet leaves
    the internal state (chain, FIFOs, accumulators) as it was."""
    saved = mem.npu.copy()
    try:
        return OPERATIONS[cmd.name](cmd, s, mem, cfg)
    except NotImplementedYet:
        mem.npu = saved
        raise


def _shape(h: int, w: int, c: int) -> str:
    return f"{h}x{w}x{c}"


def summarize(cmd: Command, s: SetState) -> str:
    """``op, IFM/OFM shapes, kernel, activation`` from the state an operation would use; never
    raises (missing state shows as '?')."""
    def g(name, fld, default=None):
        try:
            return s.get(name, fld, default)
        except DeviceError:
            return None

    def ttype(which):
        p, t = g(f"{which}_PRECISION", "activation_precision"), g(f"{which}_PRECISION",
                                                                   "activation_type")
        return "?" if p is None else f"{'s' if t else 'u'}{PRECISION_BITS[p]}"

    op = cmd.name[len("NPU_OP_"):]
    text = f"{op} {cmd.field_text()}".rstrip()
    matmul = is_matmul(cmd)
    if matmul:
        text += f" ({MATMUL_LAYOUT})"
    if cmd.name not in OPERATIONS:
        return text
    H, W, D = (g("OFM_HEIGHT_M1", "height_m1"), g("OFM_WIDTH_M1", "width_m1"),
               g("OFM_DEPTH_M1", "depth_m1"))
    ofm = "?" if None in (H, W, D) else _shape(H + 1, W + 1, D + 1)
    kh, kw = g("KERNEL_HEIGHT_M1", "height_m1"), g("KERNEL_WIDTH_M1", "width_m1")
    ks = s.cmds.get("NPU_SET_KERNEL_STRIDE")
    sy = sx = 1
    if ks is not None:
        sy = 2 * ks.fields["stride_y_msb"] + ks.fields["stride_y_lsb"] + 1
        sx = 2 * ks.fields["stride_x_msb"] + ks.fields["stride_x_lsb"] + 1
    pads = [g(f"IFM_PAD_{p}", "pad", 0) for p in ("TOP", "BOTTOM", "LEFT", "RIGHT")]
    parts = [text]
    if cmd.name == "NPU_OP_ELEMENTWISE":
        ifm = ofm
        if None not in (H, W, D):
            bm = g("IFM_BROADCAST", "broadcast_mode", 0)
            ifm = "scalar" if bm == 8 else _shape(1 if bm & 1 else H + 1, 1 if bm & 2 else W + 1,
                                                  1 if bm & 4 else D + 1)
        parts.append(f"ifm {ifm} {ttype('IFM')}")
        if cmd.fields["elementwise_mode"] not in _UNARY:
            bm2 = g("IFM2_BROADCAST", "broadcast_mode", 0)
            ifm2 = "scalar" if bm2 == 8 else ("?" if None in (H, W, D) else _shape(
                1 if bm2 & 1 else H + 1, 1 if bm2 & 2 else W + 1, 1 if bm2 & 4 else D + 1))
            parts.append(f"ifm2 {ifm2} {ttype('IFM2')}")
    elif cmd.name == "NPU_OP_RESIZE":
        ih = "?" if kh is None or kw is None else _shape(kh + 1, kw + 1, (D or 0) + 1)
        parts.append(f"ifm {ih} {ttype('IFM')}")
    else:
        ifm = "?"
        if None not in (H, W, D, kh, kw):
            # (OH-1)*sy + KH - pad [U85-TRM: §3.10.2], *_M1 here
            ih = H * sy + kh + 1 - pads[0] - pads[1]
            iw = W * sx + kw + 1 - pads[2] - pads[3]
            idepth = g("IFM_DEPTH_M1", "depth_m1") if cmd.name == "NPU_OP_CONV" else D
            ifm = _shape(ih, iw, (idepth if idepth is not None else -1) + 1)
        parts.append(f"ifm {ifm} {ttype('IFM')}")
        if matmul:  # IFM2 as matmul_ifm2_shape: [1, OFM depth, IFM depth]
            idepth = g("IFM_DEPTH_M1", "depth_m1")
            ifm2 = "?" if None in (D, idepth) else _shape(1, D + 1, idepth + 1)
            parts.append(f"ifm2 {ifm2} {ttype('IFM2')}")
    parts.append(f"-> ofm {ofm} {ttype('OFM')}")
    if cmd.name != "NPU_OP_ELEMENTWISE":
        k = "?" if kh is None or kw is None else f"{kh + 1}x{kw + 1}"
        parts.append(f"kernel {k} stride {sy}x{sx}")
        if any(pads):
            parts.append("pad t{} b{} l{} r{}".format(*pads))
    fn = g("ACTIVATION", "activation_function")
    lo, hi = g("ACTIVATION_MIN", "clip_boundary"), g("ACTIVATION_MAX", "clip_boundary")
    if fn is not None:
        from .stream import E_ACT_FUNCTION

        act = E_ACT_FUNCTION.get(fn, str(fn))
        if lo is not None and hi is not None and g("ACTIVATION", "activation_clip_range") == 0:
            signed = g("OFM_PRECISION", "activation_type")
            lo, hi = (sign_extend(lo, 16), sign_extend(hi, 16)) if signed else (lo, hi)
            act += f" clip [{lo},{hi}]"
        parts.append(f"act {act}")
    return ", ".join(parts)


def operand_offsets(cmd: Command, s: SetState,
                    cfg: NpuConfig) -> list[tuple[str, Tensor, np.ndarray]]:
    """("input" / "input2" / "output", the tensor, its region-relative byte offsets as a logical
    [H, W, C] array) of every operand of kernel command ``cmd`` that lies in memory, from the
    same decodes the operation runs (the extents it reads, the OFM write's reverse and
    transpose), so a declared tensor is exactly what the operation touches. Left out: chained
    operands (the chaining FIFO, [U85-TRM: §3.6.4]), storage none (a scalar,
    [U85-TRM: Table 3-120]), an accumulator output (acc_output disable: no OFM write,
    [U85-TRM: §3.6.5]), and any operand whose decode fails an assert (the operation itself would
    fault). Raises nothing but for a command that is no kernel."""
    reads: list[tuple[str, Tensor | None, tuple | None]] = []
    name = cmd.name
    try:
        if name in ("NPU_OP_CONV", "NPU_OP_DEPTHWISE"):
            dw = name == "NPU_OP_DEPTHWISE"
            mm = not dw and cmd.fields.get("weights_ifm2", 0) == 1
            d = conv_decode(s, cfg, dw, mm)
            reads = [("input", d.ifm, d.ifm_shape)]
            if mm:  # weights_ifm2: the IFM2 stream as _conv_like reads it
                reads.append(("input2", d.ifm2, matmul_ifm2_shape(d)))
            to_acc = bool(d.kcfg[P.C_ACC_OUTPUT])
        elif name == "NPU_OP_POOL":
            d = pool_decode(cmd, s, cfg)
            reads = [("input", d.ifm, d.ifm_shape)] if d.error is None else []
            to_acc = d.error is None and bool(d.kcfg[P.C_ACC_OUTPUT])
        elif name == "NPU_OP_ELEMENTWISE":
            d = eltwise_decode(cmd, s, cfg)
            reads = [(n, *r) for n, r in zip(("input", "input2"), d.reads) if r is not None]
            to_acc = False
        elif name == "NPU_OP_RESIZE":
            reads = [("input", tensor(s, "IFM"), (s.get("KERNEL_HEIGHT_M1", "height_m1") + 1,
                                                   s.get("KERNEL_WIDTH_M1", "width_m1") + 1,
                                                   ofm_shape(s)[2]))]
            to_acc = False
        else:
            raise ValueError(f"{name} is not a kernel operation")
    except DeviceError:
        return []
    out: list[tuple[str, Tensor, np.ndarray]] = []
    for which, t, shape in reads:
        if t is not None and t.storage in (0, 1):
            try:
                out.append((which, t, addresses(t, shape)))
            except DeviceError:
                pass
    if not to_acc:
        try:
            shape = ofm_shape(s)
            w = ofm_write(s, cfg, shape, name != "NPU_OP_ELEMENTWISE")
            if w is not None and w.tensor.storage in (0, 1):
                stored = addresses(w.tensor, tuple(shape[i] for i in w.perm))
                logical = np.transpose(stored, np.argsort(w.perm))  # stored = value.T(perm)
                out.append(("output", w.tensor, logical[w.flips] if w.flips else logical))
        except DeviceError:
            pass
    return out
