"""NE16 test applications in the format of pulp-nnx's test generator, made by the project: a
layer description -> random data -> ``conf.json``, ``gen/inc/layer_conf.h`` and
``gen/src/{input,weight,scale,bias,output}.c`` (arrays and the golden output), as
``testgen.py test --headers`` writes them. The golden output comes from the layer-level integer
model below (padding, convolution, 32-bit sums, normalisation/quantisation: the arithmetic of
N§3.5), written without the device's registers or subtiles, so a
test that runs the application through the emulator checks the driver's register values, the
queue and the job arithmetic together. Nothing here imports devices/ or emu/.

    python -m accelstub.testkit.ne16_build --demo DIR     (the bundled demo)
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Layer:
    height: int
    width: int
    in_channels: int
    out_channels: int
    kernel: int = 3            # 3 or 1
    depthwise: bool = False
    stride: int = 1            # 1 or 2
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, bottom, left, right
    weight_bits: int = 8       # 2..8
    out_type: str = "int8"     # int8, uint8 (ReLU), int32 (no normalisation)
    scale_bits: int = 8        # 8 or 32
    norm_quant: bool = True
    bias: bool = True
    relu: bool = False
    name: str = "layer"

    @property
    def out_hw(self) -> tuple[int, int]:
        t, b, left, r = self.padding
        return ((self.height + t + b - self.kernel) // self.stride + 1,
                (self.width + left + r - self.kernel) // self.stride + 1)


def _wrap32(a: np.ndarray) -> np.ndarray:
    return (a + (1 << 31)) % (1 << 32) - (1 << 31)


def golden(layer: Layer, x: np.ndarray, w: np.ndarray, scale: np.ndarray | None,
           bias: np.ndarray | None, shift: int) -> np.ndarray:
    """The layer's output [Ho, Wo, Ko] (int64) from input ``x`` [H, W, Ki] and signed weights
    ``w`` [Ko, Ki or 1, k, k]: zero padding, convolution with 32-bit wrapping sums, then
    acc * scale, + bias (32-bit wrap before and after), ReLU, >> shift, saturation."""
    t, b, left, r = layer.padding
    xp = np.pad(x.astype(np.int64), ((t, b), (left, r), (0, 0)))
    ho, wo = layer.out_hw
    k, s = layer.kernel, layer.stride
    acc = np.zeros((ho, wo, layer.out_channels), np.int64)
    for ty in range(k):
        for tx in range(k):
            win = xp[ty:ty + (ho - 1) * s + 1:s, tx:tx + (wo - 1) * s + 1:s, :]
            if layer.depthwise:
                acc += win * w[:, 0, ty, tx].astype(np.int64)
            else:
                acc += np.einsum("yxc,kc->yxk", win, w[:, :, ty, tx].astype(np.int64))
    acc = _wrap32(acc)
    if not layer.norm_quant:
        return acc
    p = acc * scale.astype(np.int64)
    if layer.bias:
        p = _wrap32(_wrap32(p) + bias.astype(np.int64))
    if layer.relu:
        p = np.maximum(p, 0)
    p = p >> shift
    info = np.iinfo(np.dtype(layer.out_type))
    return np.clip(p, info.min, info.max)


def encode_weights(w: np.ndarray, bits: int, depthwise: bool) -> np.ndarray:
    """Stored weights (w + 2^(bits-1), unsigned) as NE16 bit-planes: bytes ordered (Ko, KiMaj,
    bit, tap, 2 bytes of 8 input channels, lowest channel in bit 0); depthwise swaps Ko and
    Ki first (N§3.4)."""
    stored = (w.astype(np.int64) + (1 << (bits - 1))).astype(np.uint8)
    if depthwise:
        stored = stored.transpose(1, 0, 2, 3)
    ko, ki, kh, kw = stored.shape
    ki16 = -(-ki // 16) * 16
    s = np.zeros((ko, ki16, kh * kw), np.uint8)
    s[:, :ki] = stored.reshape(ko, ki, kh * kw)
    out = np.zeros((ko, ki16 // 16, bits, kh * kw, 2), np.uint8)
    for c in range(ki16):
        m, j, bit = c // 16, (c % 16) // 8, c % 8
        for b in range(bits):
            out[:, m, b, :, j] |= ((s[:, c, :] >> b) & 1).astype(np.uint8) << bit
    return out.ravel()


@dataclass
class TestApp:
    layer: Layer
    arrays: dict[str, tuple[str, np.ndarray | None, int]]  # name -> (ctype, values, size)
    defines: dict[str, object]

    def write(self, root: str | Path) -> Path:
        """``root``/conf.json and ``root``/gen/{inc,src}/ in the test generator's format."""
        root = Path(root)
        (root / "gen" / "inc").mkdir(parents=True, exist_ok=True)
        (root / "gen" / "src").mkdir(parents=True, exist_ok=True)
        lay = self.layer
        conf = {"in_height": lay.height, "in_width": lay.width, "in_channel": lay.in_channels,
                "in_type": "uint8", "out_channel": lay.out_channels, "out_type": lay.out_type,
                "depthwise": lay.depthwise,
                "kernel_shape": {"height": lay.kernel, "width": lay.kernel},
                "weight_type": f"int{lay.weight_bits}",
                "scale_type": f"uint{lay.scale_bits}" if lay.norm_quant else None,
                "bias_type": "int32" if lay.bias else None,
                "stride": {"height": lay.stride, "width": lay.stride},
                "padding": dict(zip(("top", "bottom", "left", "right"), lay.padding)),
                "has_norm_quant": lay.norm_quant, "has_bias": lay.bias, "has_relu": lay.relu}
        (root / "conf.json").write_text(json.dumps(conf, indent=4) + "\n")
        lines = ["#ifndef __LAYER_CONF_H__", "#define __LAYER_CONF_H__", ""]
        for k, v in self.defines.items():
            if v is None:
                lines.append(f"#define {k}")
            elif isinstance(v, str):
                lines.append(f'#define {k} "{v}"')
            else:
                lines.append(f"#define {k} ({int(v)})")
        lines += ["", "#endif  // __LAYER_CONF_H__", ""]
        (root / "gen" / "inc" / "layer_conf.h").write_text("\n".join(lines))
        files: dict[str, list[str]] = {}
        for name, (ctype, values, size) in self.arrays.items():
            stem = name.removeprefix("golden_")
            section = "PI_L2" if name.startswith("golden_") else "PI_L1"
            text = f"#define {name.upper()}_SIZE ({size})\n{section} {ctype} {name}" \
                   f"[{name.upper()}_SIZE]"
            if values is not None:
                rows = [", ".join(f"{int(v):#04x}" if v >= 0 else f"-{-int(v):#04x}"
                                  for v in values[i:i + 10]) for i in range(0, size, 10)]
                text += " = {\n    " + ",\n    ".join(rows) + "\n}"
            files.setdefault(stem, [f'#include "{stem}.h"\n']).append(text + ";\n")
            (root / "gen" / "inc" / f"{stem}.h").write_text(
                f"#ifndef __{stem.upper()}_H__\n#define __{stem.upper()}_H__\n\n"
                f"#include <pmsis.h>\n\n#endif\n")
        for stem, parts in files.items():
            (root / "gen" / "src" / f"{stem}.c").write_text("\n".join(parts))
        return root


def build(layer: Layer, seed: int = 0, shift: int | None = None) -> TestApp:
    """Random data for ``layer`` (weights over the whole ``weight_bits`` range, uint8 input,
    scales and biases of the configured widths) and its golden output."""
    rng = np.random.default_rng(seed)
    ci, co, k = layer.in_channels, layer.out_channels, layer.kernel
    x = rng.integers(0, 256, (layer.height, layer.width, ci))
    lo = -(1 << (layer.weight_bits - 1))
    w = rng.integers(lo, -lo, (co, 1 if layer.depthwise else ci, k, k))
    scale = bias = None
    if layer.norm_quant:
        top = 256 if layer.scale_bits == 8 else 1 << 16
        scale = rng.integers(0, top, co)
        bias = rng.integers(-(1 << 20), 1 << 20, co) if layer.bias else None
    if shift is None:  # outputs spread over the output range (as the generator's global shift)
        raw = golden(Layer(**{**asdict(layer), "out_type": "int32", "relu": False,
                              "padding": tuple(layer.padding)}), x, w, scale, bias, 0)
        spread = float(np.std(raw.astype(np.float64))) or 1.0
        bits = np.dtype(layer.out_type).itemsize * 8
        shift = int(np.clip(np.ceil(np.log2(spread / (1 << (bits - 1)))), 0, 31)) \
            if layer.norm_quant else 0
    out = golden(layer, x, w, scale, bias, shift)
    ho, wo = layer.out_hw
    out_bits = np.dtype(layer.out_type).itemsize * 8
    out_ct = f"{layer.out_type}_t"
    arrays = {"input": ("uint8_t", x.ravel(), x.size),
              "output": (out_ct, None, out.size), "golden_output": (out_ct, out.ravel(), out.size)}
    wb = encode_weights(w, layer.weight_bits, layer.depthwise)
    arrays["weight"] = ("uint8_t", wb, wb.size)
    if scale is not None:
        arrays["scale"] = (f"uint{layer.scale_bits}_t", scale, co)
    if bias is not None:
        arrays["bias"] = ("int32_t", bias, co)
    t, b, left, r = layer.padding
    defines = {
        "TEST_NAME": layer.name, "INPUT_HEIGHT": layer.height, "INPUT_WIDTH": layer.width,
        "INPUT_CHANNEL": ci, "INPUT_SIGNED": 0, "INPUT_BITS": 8, "OUTPUT_HEIGHT": ho,
        "OUTPUT_WIDTH": wo, "OUTPUT_CHANNEL": co,
        "OUTPUT_SIGNED": int(layer.out_type.startswith("int")), "OUTPUT_BITS": out_bits,
        "WEIGHT_HEIGHT": k, "WEIGHT_WIDTH": k, "WEIGHT_CHANNEL_IN": 1 if layer.depthwise else ci,
        "WEIGHT_CHANNEL_OUT": co, "WEIGHT_BITS": layer.weight_bits,
        "WEIGHT_OFFSET": -(1 << (layer.weight_bits - 1)),
        "SCALE_BITS": layer.scale_bits if layer.norm_quant else 0,
        "BIAS_BITS": 32 if layer.bias else 0, "PADDING_TOP": t, "PADDING_BOTTOM": b,
        "PADDING_LEFT": left, "PADDING_RIGHT": r, "PADDING_VALUE": 0,
        "STRIDE_HEIGHT": layer.stride, "STRIDE_WIDTH": layer.stride,
        "GROUPS": ci if layer.depthwise else 1, "OUTSHIFT": shift,
        "HAS_NORM_QUANT": int(layer.norm_quant), "HAS_BIAS": int(layer.bias),
        "HAS_RELU": int(layer.relu), "WMEM_TCDM": None}
    return TestApp(layer, arrays, defines)


#: the bundled demo: a 3x3 layer of two output-channel subtiles with padding, ReLU and bias
DEMO = Layer(8, 8, 24, 40, padding=(1, 1, 1, 1), out_type="uint8", relu=True, name="ne16_demo")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m accelstub.testkit.ne16_build",
                                 description="write an NE16 test application (pulp-nnx format)")
    ap.add_argument("--demo", metavar="DIR", required=True,
                    help="write the bundled demo (configs/demo/ne16_demo)")
    args = ap.parse_args(argv)
    build(DEMO, seed=1).write(args.demo)
    print(f"wrote {args.demo}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
