"""MAX78000 program listing in the words the ai8x tools comment cnn.c with:

    Layer 1: 60x28x28, max pool 2x2 with stride 2/2, conv2d with kernel size 3x3, stride 1/1,
    pad 2/2, ReLU, 60x16x16 output

(izer backend: ``<ch>x<rows>x<cols>[ streaming][ flattened to Nx1x1], <pool>, <op> with kernel
size RxC, stride 1/1, pad R/C, <activation>, <out ch>x<rows>x<cols> output``), decoded from the
registers (LayerConfig), plus the modelled cycle count of ``layer_cycles``.
"""
from __future__ import annotations

from ..errors import DeviceError
from .layer import layer_cycles
from .stream import stream_count

_ACT = {"none": "no activation", "relu": "ReLU", "abs": "Abs"}
_EWISE = {0: "sub", 1: "add", 2: "or", 3: "xor"}  # ONED.ewise_func [UG-CNN: Table 27-25]


def operation(cfg) -> str:
    """What the layer computes: passthrough | linear | conv1d | convtranspose2d | conv2d.

    A flatten of up to 16 pixels needs no POST.flatten_en: it is a 1x1 kernel on 1x1 data with
    the pixels as passes. It is told from a multi-pass 1x1 convolution by its processor count:
    passes are only needed past 64 channels, so a convolution has n * passes > 64 * (passes-1)
    (an inference from how the generator allocates processors, not a register field)."""
    if cfg.passthrough:
        return "passthrough"
    n, e = len(cfg.processors), cfg.in_passes
    if cfg.flatten or (cfg.in_rows == cfg.in_cols == 1 and cfg.kernel_rows == cfg.kernel_cols == 1
                       and e > 1 and n * e <= 64 * (e - 1)):
        return "linear"
    if cfg.oned:
        return "conv1d"
    return "convtranspose2d" if cfg.deconv else "conv2d"


def ai8x_summary(cfg, streaming: bool = False) -> str:
    """One layer in the izer's cnn.c comment wording: an element-wise layer is ``Nx`` before the
    channels and ``N-element <op>`` after the pooling (pre-pool) or before it; a pass-through
    layer says ``no convolution`` and has no activation part; a transposed convolution gives
    PyTorch's padding, 2 - the hardware pad (public fact, ai8x-synthesis izer comments); 1-D
    sizes are one number."""
    op = operation(cfg)
    chans = cfg.in_channels
    size = f"{cfg.in_rows}" if op == "conv1d" else f"{cfg.in_rows}x{cfg.in_cols}"
    head = f"{chans}x{size}"
    if op == "linear":
        # the registers hold channels (processors) x passes (= H*W of the pre-flatten input);
        # H and W are not in the registers: a square H = W is assumed when passes is a square
        n_p, passes = len(cfg.processors), cfg.in_passes
        side = int(round(passes ** 0.5))
        hw = f"{side}x{side}" if side * side == passes else f"{passes}x1"
        head = f"{n_p}x{hw}"
    if cfg.operands > 1:
        head = f"{cfg.operands}x{head}"
    if streaming:
        head += " streaming"
    if op == "linear":
        head += f" flattened to {chans}x1x1"
    parts = [head]
    ewise = f"{cfg.operands}-element {_EWISE.get(cfg.ewise_func, cfg.ewise_func)}" \
        if cfg.operands > 1 else None
    if ewise and not cfg.prepool:
        parts.append(ewise)
    if cfg.pool_kind in ("max", "avg") and (cfg.pool_rows > 1 or cfg.pool_cols > 1):
        s = cfg.pool_stride
        win, st = (f"{cfg.pool_rows}", f"{s}") if op == "conv1d" else \
            (f"{cfg.pool_rows}x{cfg.pool_cols}", f"{s}/{s}")
        parts.append(f"{cfg.pool_kind} pool {win} with stride {st}")
    else:
        parts.append("no pooling")
    if ewise and cfg.prepool:
        parts.append(ewise)
    if op == "passthrough":
        parts.append("no convolution")
    else:
        if op == "linear":
            parts.append("linear")
        elif op == "conv1d":
            parts.append(f"conv1d with kernel size {cfg.kernel_rows}, stride {cfg.conv_stride}, "
                         f"pad {cfg.pad_rows}")
        elif op == "convtranspose2d":
            pr, pc = 2 - cfg.pad_rows, 2 - cfg.pad_cols
            parts.append(f"convtranspose2d with kernel size {cfg.kernel_rows}x{cfg.kernel_cols}, "
                         f"stride 2/2, pad {pr}/{pc}")
        else:
            parts.append(f"conv2d with kernel size {cfg.kernel_rows}x{cfg.kernel_cols}, stride "
                         f"{cfg.conv_stride}/{cfg.conv_stride}, pad {cfg.pad_rows}/{cfg.pad_cols}")
        parts.append(_ACT.get(cfg.activation, cfg.activation))
    out = f"{cfg.out_rows}" if op == "conv1d" else f"{cfg.out_rows}x{cfg.out_cols}"
    parts.append(f"{cfg.out_slots}x{out} output")  # the izer marks no 32-bit output
    return ", ".join(parts)


LAYERS_HELP = ("list the program as ai8x comments cnn.c, with modelled cycles per layer: "
               "4 + out_rows * (2 + out_cols * out_channels * input_passes) (a start overhead, "
               "2 per output row, 1 per output channel and input pass at every output position, "
               "[UG-CNN: Overview] 'one output channel per clock'; an emulator model, not silicon "
               "timing)")


def layers_text(dev) -> str:
    lines = []
    total = 0
    streams = stream_count(dev)
    for y in range(dev.last_layer() + 1):
        try:
            cfg = dev.layer_config(y)
        except DeviceError as e:
            lines.append(f"Layer {y}: not runnable: {e}")
            continue
        c = layer_cycles(cfg)
        total += c
        wide = "32-bit output, " if cfg.wide else ""
        lines.append(f"Layer {y}: {ai8x_summary(cfg, y < streams)} ({wide}{c} cycles)")
    lines.append(f"total: {total} cycles (model)")
    return "\n".join(lines)
