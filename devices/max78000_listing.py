"""MAX78000 program listing in the words the ai8x tools comment cnn.c with:

    Layer 1: 60x28x28, max pool 2x2 with stride 2/2, conv2d with kernel size 3x3, stride 1/1,
    pad 2/2, ReLU, 60x16x16 output

(izer backend: ``<ch>x<rows>x<cols>[ streaming][ flattened to Nx1x1], <pool>, <op> with kernel
size RxC, stride 1/1, pad R/C, <activation>, <out ch>x<rows>x<cols> output``), decoded from the
registers (LayerConfig), plus the modelled cycle count of ``layer_cycles``.
"""
from __future__ import annotations

_ACT = {"none": "no activation", "relu": "ReLU", "abs": "Abs"}


def ai8x_summary(cfg, streaming: bool = False) -> str:
    g = lambda name, default=None: getattr(cfg, name, default)  # noqa: E731
    flatten = bool(g("flatten", False))
    chans = cfg.in_channels
    head = f"{chans}x{cfg.in_rows}x{cfg.in_cols}"
    if flatten:
        # the registers hold channels (processors) x passes (= H*W of the pre-flatten input);
        # H and W are not in the registers: a square H = W is assumed when passes is a square
        n_p, passes = len(cfg.processors), cfg.in_passes
        side = int(round(passes ** 0.5))
        hw = f"{side}x{side}" if side * side == passes else f"{passes}x1"
        head = f"{n_p}x{hw}"
    if streaming:
        head += " streaming"
    if flatten:
        head += f" flattened to {chans * cfg.in_rows * cfg.in_cols}x1x1"
    parts = [head]
    if cfg.pool_kind in ("max", "avg") and (cfg.pool_rows > 1 or cfg.pool_cols > 1):
        s = cfg.pool_stride
        parts.append(f"{cfg.pool_kind} pool {cfg.pool_rows}x{cfg.pool_cols} with stride {s}/{s}")
    else:
        parts.append("no pooling")
    op = g("operator") or ("linear" if flatten else None)
    if op is None:
        op = "conv1d" if g("oned", False) else "conv2d"
    if op in ("passthrough", "none"):
        parts.append("no convolution")
    else:
        if op == "linear":
            parts.append("linear")
        elif op == "conv1d":
            k = max(cfg.kernel_rows, cfg.kernel_cols)
            parts.append(f"conv1d with kernel size {k}, stride {cfg.conv_stride}, "
                         f"pad {max(cfg.pad_rows, cfg.pad_cols)}")
        else:
            parts.append(f"{op} with kernel size {cfg.kernel_rows}x{cfg.kernel_cols}, stride "
                         f"{cfg.conv_stride}/{cfg.conv_stride}, pad {cfg.pad_rows}/{cfg.pad_cols}")
        parts.append(_ACT.get(cfg.activation, cfg.activation))
    parts.append(f"{cfg.out_slots}x{cfg.out_rows}x{cfg.out_cols}"
                 f"{' 32-bit' if cfg.wide else ''} output")
    return ", ".join(parts)


LAYERS_HELP = ("list the program as ai8x comments cnn.c, with modelled cycles per layer: "
               "4 + out_rows * (2 + out_cols * out_channels * input_passes) (a start overhead, "
               "2 per output row, 1 per output channel and input pass at every output position, "
               "seed L36 'one output channel per clock'; an emulator model, not silicon timing)")


def layers_text(dev) -> str:
    from .errors import DeviceError
    from .max78000 import layer_cycles
    from .max78000_stream import stream_count

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
        lines.append(f"Layer {y}: {ai8x_summary(cfg, y < streams)} ({c} cycles)")
    lines.append(f"total: {total} cycles (model)")
    return "\n".join(lines)
