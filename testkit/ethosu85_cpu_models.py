"""Small int8 TFLite models that Vela leaves partly on the CPU (issue 28 point 5), written by the
project with :class:`testkit.ethosu85_models.Graph` (no TensorFlow).

* ``layernorm_neg``: Keras's LayerNormalization converts with a float NEG between a DEQUANTIZE
  and a QUANTIZE; here that pattern between two convolutions (NPU, CPU x3, NPU);
* ``encoder``: a small encoder-like graph on (1, 8, 16) tokens: fully-connected layers and
  residual ADDs on the NPU, two DEQUANTIZE/NEG/QUANTIZE groups on the CPU (3 NPU streams, 6 CPU
  operators);
* ``l2norm``: an int8 L2_NORMALIZATION, an operator Vela cannot place on the Ethos-U85 at all
  ("Unsupported opType"), between two convolutions;
* ``cumsum_int8``: an int8 CUMSUM, which Vela leaves on the CPU and LiteRT's reference kernels do
  not implement (int32/int64/float32 only): a model that truly cannot run.

Schema facts (BuiltinOperator numbers) from TensorFlow Lite's public ``schema.fbs``.
"""
from __future__ import annotations

import numpy as np

from .ethosu85_models import FLOAT32, INT8, INT32, NONE, RELU, SAME, Graph, _Op

NEG, QUANTIZE, L2_NORMALIZATION, CUMSUM = 59, 114, 11, 128  # BuiltinOperator


def neg_float(g: Graph, x: int) -> int:
    """DEQUANTIZE -> float NEG -> QUANTIZE (three CPU operators), an int8 result."""
    d = g.dequantize(x)
    n = g.tensor(f"{g.name}.neg{len(g.ops)}.out", g.shape_of(d), FLOAT32)
    g.ops.append(_Op(NEG, [d], [n]))
    q = g.act(f"{g.name}.quantize{len(g.ops)}.out", g.shape_of(n))
    g.ops.append(_Op(QUANTIZE, [n], [q]))
    return q


def _layernorm_neg(g: Graph) -> None:
    x = g.input("input", (1, 8, 8, 4))
    y = neg_float(g, g.conv(x, 8, (3, 3), (1, 1), SAME, RELU))
    g.output(g.conv(y, 8, (3, 3), (1, 1), SAME, NONE))


def _encoder(g: Graph) -> None:
    x = g.input("tokens", (1, 8, 16))
    r = g.binary(0, neg_float(g, g.fully_connected(x, 16, RELU)), x)  # ADD: residual
    f = g.fully_connected(g.fully_connected(r, 32, RELU), 16)
    g.output(g.binary(0, neg_float(g, f), r))


def _same_quantization(g: Graph, x: int, name: str) -> int:
    t = g.tensors[x]
    return g.tensor(f"{g.name}.{name}{len(g.ops)}.out", t.shape, t.type, t.scale, t.zero_point)


def _l2norm(g: Graph) -> None:
    x = g.input("input", (1, 8, 8, 4))
    c = g.conv(x, 8, (3, 3), (1, 1), SAME, RELU)
    y = g.tensor(f"{g.name}.l2norm.out", g.shape_of(c), INT8, 1.0 / 128.0, 0)  # TFLite's int8
    g.ops.append(_Op(L2_NORMALIZATION, [c], [y]))
    g.output(g.conv(y, 8, (3, 3), (1, 1), SAME, NONE))


def _cumsum_int8(g: Graph) -> None:
    x = g.input("input", (1, 8, 8, 4))
    c = g.conv(x, 8, (3, 3), (1, 1), SAME, RELU)
    y = _same_quantization(g, c, "cumsum")
    g.ops.append(_Op(CUMSUM, [c, g.tensor("axis", (), INT32, data=np.array(3))], [y]))
    g.output(g.conv(y, 8, (3, 3), (1, 1), SAME, NONE))


#: name -> (builder, seed)
MODELS = {
    "layernorm_neg": (_layernorm_neg, 41),
    "encoder": (_encoder, 42),
    "l2norm": (_l2norm, 43),
    "cumsum_int8": (_cumsum_int8, 44),
}


def build(name: str) -> bytes:
    """The .tflite bytes of one model (deterministic)."""
    fn, seed = MODELS[name]
    g = Graph(name, seed)
    fn(g)
    return g.to_tflite()
