"""Small quantized TensorFlow Lite models written by the project (no TensorFlow, no network).

The models are the inputs users give Vela before they bring its output to the Ethos-U85 stub
(docs/design-notes.md, "Programs": vendor files are never committed, tests use programs
the project writes itself). Each model is one flatbuffer in TFLite's schema, built with the
``flatbuffers`` package (the only dependency, imported when a model is built) and deterministic
random weights, quantization parameters and shapes (numpy's PCG64 seeded per model).

Field slot numbers below are those of TensorFlow Lite's public ``schema.fbs`` (a public fact:
each table's fields are numbered in declaration order; the enum values are the schema's).
Quantization follows TFLite's int8 spec (public): weights symmetric (zero point 0), per output
channel for CONV_2D (axis 0) and DEPTHWISE_CONV_2D (axis 3), biases int32 with scale
input_scale * weight_scale and zero point 0; int16 activations have zero point 0.

Regenerate: ``python -m accelstub.testkit.ethosu85_models OUTDIR`` (writes OUTDIR/<name>.tflite).
"""
from __future__ import annotations

import argparse
import math
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# --- TFLite schema facts (schema.fbs) ------------------------------------------------------
FLOAT32, INT32, INT16, INT8, INT64 = 0, 2, 7, 9, 4  # TensorType
ADD, AVERAGE_POOL_2D, CONV_2D, DEPTHWISE_CONV_2D = 0, 1, 3, 4  # BuiltinOperator
FULLY_CONNECTED, MAX_POOL_2D, MUL, RESHAPE, SOFTMAX, MEAN = 9, 17, 18, 22, 25, 40
RESIZE_NEAREST_NEIGHBOR, DEQUANTIZE, BATCH_MATMUL = 97, 6, 126
OPT_CONV, OPT_DW, OPT_POOL, OPT_FC, OPT_SOFTMAX, OPT_ADD = 1, 2, 5, 8, 9, 11  # BuiltinOptions
OPT_RESHAPE, OPT_MUL, OPT_REDUCER, OPT_RESIZE_NN = 17, 21, 27, 74  # union tags
OPT_BATCH_MATMUL = 101
SAME, VALID = 0, 1  # Padding
NONE, RELU, RELU6 = 0, 1, 3  # ActivationFunctionType
DTYPES = {INT8: np.int8, INT16: np.int16, INT32: np.int32, INT64: np.int64}


@dataclass
class _Tensor:
    name: str
    shape: tuple[int, ...]
    type: int
    scale: list[float] | None = None
    zero_point: list[int] | None = None
    axis: int = 0
    data: bytes | None = None  # constant tensors
    variable: bool = False  # state a stateful operator keeps (Tensor.is_variable)


@dataclass
class _Op:
    code: int
    inputs: list[int]
    outputs: list[int]
    options_type: int = 0
    options: dict[int, tuple[str, int]] = field(default_factory=dict)  # slot -> (kind, value)
    version: int = 1
    intermediates: list[int] = field(default_factory=list)  # Operator.intermediates (LSTM)


class Graph:
    """One subgraph under construction: tensors, operators, graph inputs and outputs."""

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.tensors: list[_Tensor] = []
        self.ops: list[_Op] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []

    # -- tensors ------------------------------------------------------------------------------
    def tensor(self, name: str, shape, ttype: int, scale=None, zero_point=None, axis: int = 0,
               data: np.ndarray | None = None) -> int:
        if scale is not None and np.ndim(scale) == 0:
            scale, zero_point = [float(scale)], [int(zero_point or 0)]
        raw = None if data is None else np.ascontiguousarray(data, DTYPES[ttype]).tobytes()
        self.tensors.append(_Tensor(name, tuple(int(d) for d in shape), ttype,
                                    None if scale is None else [float(s) for s in scale],
                                    None if zero_point is None else [int(z) for z in zero_point],
                                    axis, raw))
        return len(self.tensors) - 1

    def act(self, name: str, shape, ttype: int = INT8, scale: float | None = None,
            zp: int | None = None) -> int:
        """An activation tensor with a random scale and (int8) zero point."""
        if scale is None:
            scale = float(self.rng.uniform(0.02, 0.08))
        if zp is None:
            zp = int(self.rng.integers(-20, 21)) if ttype == INT8 else 0
        return self.tensor(name, shape, ttype, scale, zp)

    def input(self, name: str, shape, ttype: int = INT8) -> int:
        t = self.act(name, shape, ttype)
        self.inputs.append(t)
        return t

    def scale_of(self, t: int) -> float:
        return self.tensors[t].scale[0]

    def shape_of(self, t: int) -> tuple[int, ...]:
        return self.tensors[t].shape

    def _out_scale(self, x: int, w_scale: np.ndarray, fan_in: int) -> float:
        """An output scale that keeps the quantized outputs mostly in range: the accumulator's
        standard deviation for uniform int8 data is about 74 * 74 * sqrt(fan_in)."""
        acc_std = 74.0 * 74.0 * math.sqrt(fan_in)
        return float(self.scale_of(x) * float(np.mean(w_scale)) * acc_std / 48.0)

    def _product_scale(self, a: int, b: int, k: int) -> float:
        """The output scale of a K-term product of two activations that keeps its quantized
        values mostly in range: uniform int8 values have a standard deviation of about 74,
        int16 about 18900; the target spread is 48 (int8) or 8000 (int16) quanta."""
        spread, target = (74.0, 48.0) if self.tensors[a].type == INT8 else (18900.0, 8000.0)
        return self.scale_of(a) * self.scale_of(b) * spread * spread * math.sqrt(k) / target

    # -- operators ----------------------------------------------------------------------------
    def _weights(self, shape, axis: int):
        w = self.rng.integers(-127, 128, size=shape, dtype=np.int64)
        n = shape[axis]
        w_scale = self.rng.uniform(0.002, 0.02, size=n)
        return w, w_scale

    def _bias(self, name: str, x: int, w_scale, n: int, ttype: int = INT32) -> int:
        b = self.rng.integers(-2000, 2001, size=n)
        return self.tensor(name, (n,), ttype, self.scale_of(x) * np.asarray(w_scale), [0] * n,
                           0, b)

    def conv(self, x: int, cout: int, k=(3, 3), stride=(1, 1), padding=SAME, act=NONE,
             dilation=(1, 1)) -> int:
        n, h, w, cin = self.shape_of(x)
        wt, ws = self._weights((cout, k[0], k[1], cin), 0)
        wi = self.tensor(f"{self.name}.conv{len(self.ops)}.w", wt.shape, INT8, ws, [0] * cout,
                         0, wt)
        bi = self._bias(f"{self.name}.conv{len(self.ops)}.b", x, ws, cout)
        oh, ow = _out_hw(h, w, k, stride, padding, dilation)
        y = self.act(f"{self.name}.conv{len(self.ops)}.out", (n, oh, ow, cout),
                     scale=self._out_scale(x, ws, k[0] * k[1] * cin))
        self.ops.append(_Op(CONV_2D, [x, wi, bi], [y], OPT_CONV,
                            {0: ("b", padding), 1: ("i", stride[1]), 2: ("i", stride[0]),
                             3: ("b", act), 4: ("i", dilation[1]), 5: ("i", dilation[0])}, 3))
        return y

    def depthwise(self, x: int, k=(3, 3), stride=(1, 1), padding=SAME, act=NONE,
                  multiplier: int = 1) -> int:
        n, h, w, cin = self.shape_of(x)
        cout = cin * multiplier
        wt, ws = self._weights((1, k[0], k[1], cout), 3)
        wi = self.tensor(f"{self.name}.dw{len(self.ops)}.w", wt.shape, INT8, ws, [0] * cout,
                         3, wt)
        bi = self._bias(f"{self.name}.dw{len(self.ops)}.b", x, ws, cout)
        oh, ow = _out_hw(h, w, k, stride, padding)
        y = self.act(f"{self.name}.dw{len(self.ops)}.out", (n, oh, ow, cout),
                     scale=self._out_scale(x, ws, k[0] * k[1]))
        self.ops.append(_Op(DEPTHWISE_CONV_2D, [x, wi, bi], [y], OPT_DW,
                            {0: ("b", padding), 1: ("i", stride[1]), 2: ("i", stride[0]),
                             3: ("i", multiplier), 4: ("b", act), 5: ("i", 1), 6: ("i", 1)}, 3))
        return y

    def pool(self, x: int, kind: int, k=(2, 2), stride=(2, 2), padding=VALID,
             act=NONE) -> int:
        n, h, w, c = self.shape_of(x)
        oh, ow = _out_hw(h, w, k, stride, padding)
        t = self.tensors[x]
        # TFLite's int8/int16 pooling kernels require the output quantization of the input
        y = self.tensor(f"{self.name}.pool{len(self.ops)}.out", (n, oh, ow, c), t.type,
                        t.scale, t.zero_point)
        self.ops.append(_Op(kind, [x], [y], OPT_POOL,
                            {0: ("b", padding), 1: ("i", stride[1]), 2: ("i", stride[0]),
                             3: ("i", k[1]), 4: ("i", k[0]), 5: ("b", act)}, 2))
        return y

    def binary(self, kind: int, a: int, b: int, act=NONE) -> int:
        t = self.tensors[a]
        sa, sb = self.scale_of(a), self.scale_of(b)
        scale = (sa + sb) * 1.1 if kind == ADD else sa * sb * 96.0
        y = self.act(f"{self.name}.{'add' if kind == ADD else 'mul'}{len(self.ops)}.out",
                     t.shape, t.type, scale=scale)
        self.ops.append(_Op(kind, [a, b], [y], OPT_ADD if kind == ADD else OPT_MUL,
                            {0: ("b", act)}, 2 if t.type == INT8 else 3))
        return y

    def fully_connected(self, x: int, units: int, act=NONE) -> int:
        shape = self.shape_of(x)
        cin = shape[-1]
        wt, ws1 = self._weights((units, cin), 0)
        ws = np.full(1, ws1[0])
        wi = self.tensor(f"{self.name}.fc{len(self.ops)}.w", wt.shape, INT8, ws, [0], 0, wt)
        bi = self._bias(f"{self.name}.fc{len(self.ops)}.b", x, ws, units)
        self.tensors[bi].scale = self.tensors[bi].scale[:1]  # per-tensor weights: one bias scale
        self.tensors[bi].zero_point = [0]
        y = self.act(f"{self.name}.fc{len(self.ops)}.out", shape[:-1] + (units,),
                     scale=self._out_scale(x, ws, cin))
        opts = {0: ("b", act)}
        if len(shape) > 2:  # keep_num_dims: [.., K] -> [.., units] (else TFLite flattens)
            opts[2] = ("bool", 1)
        self.ops.append(_Op(FULLY_CONNECTED, [x, wi, bi], [y], OPT_FC, opts, 4))
        return y

    def fully_connected_dynamic(self, x: int, w: int) -> int:
        """FULLY_CONNECTED whose weights ``w`` [units, K] are an activation (not constant), no
        bias: the form TFLite gives a matrix product with a computed operand."""
        shape, units = self.shape_of(x), self.shape_of(w)[0]
        y = self.act(f"{self.name}.fc{len(self.ops)}.out", shape[:-1] + (units,),
                     self.tensors[x].type, scale=self._product_scale(x, w, shape[-1]))
        opts = {0: ("b", NONE), 2: ("bool", int(len(shape) > 2))}
        self.ops.append(_Op(FULLY_CONNECTED, [x, w, -1], [y], OPT_FC, opts, 4))
        return y

    def softmax(self, x: int, beta: float = 1.0) -> int:
        """SOFTMAX over the last axis; output quantization TFLite's (1/256, -128 for int8;
        1/32768, 0 for int16)."""
        t = self.tensors[x]
        scale, zp = (1.0 / 256.0, -128) if t.type == INT8 else (1.0 / 32768.0, 0)
        y = self.tensor(f"{self.name}.softmax{len(self.ops)}.out", t.shape, t.type, scale, zp)
        self.ops.append(_Op(SOFTMAX, [x], [y], OPT_SOFTMAX, {0: ("f", beta)},
                            2 if t.type == INT8 else 3))
        return y

    def batch_matmul(self, a: int, b: int, adj_x: bool = False, adj_y: bool = False) -> int:
        """BATCH_MATMUL of two activations (neither constant): a [..., M, K] (adj_x: [..., K,
        M]) times b [..., K, N] (adj_y: [..., N, K]), batch dimensions broadcast; the output
        scale keeps the K-term dot products mostly in range."""
        sa, sb = self.shape_of(a), self.shape_of(b)
        m = sa[-1] if adj_x else sa[-2]
        k = sa[-2] if adj_x else sa[-1]
        n = sb[-2] if adj_y else sb[-1]
        batch = tuple(int(d) for d in np.broadcast_shapes(sa[:-2], sb[:-2]))
        t = self.tensors[a]
        y = self.act(f"{self.name}.bmm{len(self.ops)}.out", batch + (m, n), t.type,
                     scale=self._product_scale(a, b, k))
        self.ops.append(_Op(BATCH_MATMUL, [a, b], [y], OPT_BATCH_MATMUL,
                            {0: ("bool", adj_x), 1: ("bool", adj_y)},
                            2 if t.type == INT8 else 3))
        return y

    def mean(self, x: int) -> int:
        """MEAN over H and W without keep_dims (Keras' GlobalAveragePooling2D), the output in
        the input's quantization."""
        n, _, _, c = self.shape_of(x)
        t = self.tensors[x]
        axes = self.tensor(f"{self.name}.mean{len(self.ops)}.axes", (2,), INT32,
                           data=np.array([1, 2]))
        y = self.tensor(f"{self.name}.mean{len(self.ops)}.out", (n, c), t.type, t.scale,
                        t.zero_point)
        self.ops.append(_Op(MEAN, [x, axes], [y], OPT_REDUCER, {0: ("bool", 0)}, 2))
        return y

    def reshape(self, x: int, shape) -> int:
        t = self.tensors[x]
        s = self.tensor(f"{self.name}.reshape{len(self.ops)}.shape", (len(shape),), INT32,
                        data=np.asarray(shape))
        y = self.tensor(f"{self.name}.reshape{len(self.ops)}.out", shape, t.type, t.scale,
                        t.zero_point)
        self.ops.append(_Op(RESHAPE, [x, s], [y], OPT_RESHAPE, {}, 1))
        return y

    def resize_nearest(self, x: int, size) -> int:
        n, h, w, c = self.shape_of(x)
        t = self.tensors[x]
        s = self.tensor(f"{self.name}.resize{len(self.ops)}.size", (2,), INT32,
                        data=np.asarray(size))
        y = self.tensor(f"{self.name}.resize{len(self.ops)}.out", (n, size[0], size[1], c),
                        t.type, t.scale, t.zero_point)
        self.ops.append(_Op(RESIZE_NEAREST_NEIGHBOR, [x, s], [y], OPT_RESIZE_NN,
                            {0: ("bool", 0), 1: ("bool", 0)}, 3))
        return y

    def dequantize(self, x: int) -> int:
        """DEQUANTIZE to float32 (no options): an operator Vela leaves on the CPU."""
        y = self.tensor(f"{self.name}.dequantize{len(self.ops)}.out", self.shape_of(x), FLOAT32)
        self.ops.append(_Op(DEQUANTIZE, [x], [y]))
        return y

    def output(self, t: int) -> None:
        self.outputs.append(t)

    # -- serialisation ------------------------------------------------------------------------
    def to_tflite(self) -> bytes:
        return _serialise(self)


def _out_hw(h: int, w: int, k, stride, padding, dilation=(1, 1)) -> tuple[int, int]:
    ek = ((k[0] - 1) * dilation[0] + 1, (k[1] - 1) * dilation[1] + 1)
    if padding == SAME:
        return -(-h // stride[0]), -(-w // stride[1])
    return (h - ek[0]) // stride[0] + 1, (w - ek[1]) // stride[1] + 1


def _serialise(g: Graph) -> bytes:
    try:
        import flatbuffers
    except ImportError as e:  # pragma: no cover - the test extra installs it
        raise RuntimeError("writing TFLite models needs the 'flatbuffers' package "
                           "(pip install flatbuffers)") from e
    b = flatbuffers.Builder(4096)
    b.ForceDefaults(True)  # write every field given, also when it equals the schema default

    def ivec(values, kind: str = "i") -> int:
        prepend = {"i": b.PrependInt32, "f": b.PrependFloat32, "l": b.PrependInt64}[kind]
        size = {"i": 4, "f": 4, "l": 8}[kind]
        b.StartVector(size, len(values), size)
        for v in reversed(list(values)):
            prepend(v)
        return b.EndVector()

    def ovec(offsets) -> int:
        b.StartVector(4, len(offsets), 4)
        for o in reversed(offsets):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()

    # buffers: 0 is the empty sentinel TFLite reserves; one per constant tensor
    buffer_data: list[bytes | None] = [None]
    tensor_buffer = []
    for t in g.tensors:
        if t.data is None:
            tensor_buffer.append(0)
        else:
            buffer_data.append(t.data)
            tensor_buffer.append(len(buffer_data) - 1)
    buffers = []
    for data in buffer_data:
        d = None
        if data is not None:
            b.StartVector(1, len(data), 16)  # 16-byte alignment for the constant data
            b.head = b.head - len(data)
            b.Bytes[b.head:b.head + len(data)] = data
            d = b.EndVector()
        b.StartObject(3)  # Buffer: data 0, offset 1, size 2
        if d is not None:
            b.PrependUOffsetTRelativeSlot(0, d, 0)
        buffers.append(b.EndObject())

    tensors = []
    for t, buf in zip(g.tensors, tensor_buffer):
        name = b.CreateString(t.name)
        shape = ivec(t.shape)
        q = None
        if t.scale is not None:
            sc = ivec(t.scale, "f")
            zp = ivec(t.zero_point, "l")
            b.StartObject(7)  # QuantizationParameters: min max scale zero_point ... axis 6
            b.PrependUOffsetTRelativeSlot(2, sc, 0)
            b.PrependUOffsetTRelativeSlot(3, zp, 0)
            b.PrependInt32Slot(6, t.axis, 0)
            q = b.EndObject()
        b.StartObject(8)  # Tensor: shape 0, type 1, buffer 2, name 3, quantization 4
        b.PrependUOffsetTRelativeSlot(0, shape, 0)
        b.PrependInt8Slot(1, t.type, 0)
        b.PrependUint32Slot(2, buf, 0)
        b.PrependUOffsetTRelativeSlot(3, name, 0)
        if q is not None:
            b.PrependUOffsetTRelativeSlot(4, q, 0)
        if t.variable:
            b.PrependBoolSlot(5, True, False)
        tensors.append(b.EndObject())

    codes: list[tuple[int, int]] = []
    ops = []
    for op in g.ops:
        key = (op.code, op.version)
        if key not in codes:
            codes.append(key)
        ins, outs = ivec(op.inputs), ivec(op.outputs)
        inter = ivec(op.intermediates) if op.intermediates else None
        opts = None
        if op.options_type:
            # strings ("s", e.g. VarHandleOptions.shared_name) are written before the table
            strings = {k: b.CreateString(v) for k, (kind, v) in op.options.items() if kind == "s"}
            b.StartObject(max(op.options, default=0) + 1)
            for slot, (kind, v) in sorted(op.options.items()):
                if kind == "s":
                    b.PrependUOffsetTRelativeSlot(slot, strings[slot], 0)
                elif kind == "b":
                    b.PrependInt8Slot(slot, v, 0)
                elif kind == "bool":
                    b.PrependBoolSlot(slot, bool(v), False)
                elif kind == "f":
                    b.PrependFloat32Slot(slot, float(v), 0.0)
                else:
                    b.PrependInt32Slot(slot, v, 0)
            opts = b.EndObject()
        b.StartObject(9)  # Operator: opcode_index 0, inputs 1, outputs 2, options type 3,
        # opts 4, ..., intermediates 8
        b.PrependUint32Slot(0, codes.index(key), 0)
        if inter is not None:
            b.PrependUOffsetTRelativeSlot(8, inter, 0)
        b.PrependUOffsetTRelativeSlot(1, ins, 0)
        b.PrependUOffsetTRelativeSlot(2, outs, 0)
        if opts is not None:
            b.PrependUint8Slot(3, op.options_type, 0)
            b.PrependUOffsetTRelativeSlot(4, opts, 0)
        ops.append(b.EndObject())

    sg_name = b.CreateString(g.name)
    tv, iv, outv, opv = ovec(tensors), ivec(g.inputs), ivec(g.outputs), ovec(ops)
    b.StartObject(5)  # SubGraph: tensors 0, inputs 1, outputs 2, operators 3, name 4
    b.PrependUOffsetTRelativeSlot(0, tv, 0)
    b.PrependUOffsetTRelativeSlot(1, iv, 0)
    b.PrependUOffsetTRelativeSlot(2, outv, 0)
    b.PrependUOffsetTRelativeSlot(3, opv, 0)
    b.PrependUOffsetTRelativeSlot(4, sg_name, 0)
    subgraph = b.EndObject()

    code_offs = []
    for code, version in codes:
        b.StartObject(4)  # OperatorCode: deprecated_builtin_code 0, custom 1, version 2, code 3
        b.PrependInt8Slot(0, min(code, 127), 0)
        b.PrependInt32Slot(2, version, 1)
        b.PrependInt32Slot(3, code, 0)
        code_offs.append(b.EndObject())
    cv, sv, bv = ovec(code_offs), ovec([subgraph]), ovec(buffers)
    desc = b.CreateString("accelstub ethosu85_models")
    b.StartObject(5)  # Model: version 0, operator_codes 1, subgraphs 2, description 3, buffers 4
    b.PrependUint32Slot(0, 3, 0)
    b.PrependUOffsetTRelativeSlot(1, cv, 0)
    b.PrependUOffsetTRelativeSlot(2, sv, 0)
    b.PrependUOffsetTRelativeSlot(3, desc, 0)
    b.PrependUOffsetTRelativeSlot(4, bv, 0)
    model = b.EndObject()
    b.Finish(model, file_identifier=b"TFL3")
    return bytes(b.Output())


# --- the models ---------------------------------------------------------------------------------

def _conv(g: Graph) -> None:
    x = g.input("input", (1, 8, 8, 3))
    g.output(g.conv(x, 8, (3, 3), (1, 1), SAME, RELU))


def _conv_2ch(g: Graph) -> None:
    """Two input channels (an audio/stereo front end): Vela stores these weights as
    sparse_2_4, every group of four input channels has at most two real ones."""
    x = g.input("input", (1, 12, 10, 2))
    g.output(g.conv(x, 16, (4, 3), (2, 2), SAME, RELU))


def _depthwise(g: Graph) -> None:
    x = g.input("input", (1, 9, 9, 8))
    g.output(g.depthwise(x, (3, 3), (2, 2), SAME))


def _max_pool(g: Graph) -> None:
    x = g.input("input", (1, 8, 8, 8))
    g.output(g.pool(x, MAX_POOL_2D, (2, 2), (2, 2), VALID))


def _avg_pool(g: Graph) -> None:
    x = g.input("input", (1, 7, 7, 8))
    g.output(g.pool(x, AVERAGE_POOL_2D, (3, 3), (2, 2), VALID))


def _add(g: Graph) -> None:
    a = g.input("a", (1, 4, 4, 8))
    b = g.input("b", (1, 4, 4, 8))
    g.output(g.binary(ADD, a, b))


def _mul(g: Graph) -> None:
    a = g.input("a", (1, 4, 4, 8))
    b = g.input("b", (1, 4, 4, 8))
    g.output(g.binary(MUL, a, b))


def _mul_const(g: Graph) -> None:
    """x * 0.37 with the constant quantized as int8 127 with zero point -128 (what Vela turns
    into a scalar operand with its zero point)."""
    a = g.input("a", (1, 4, 4, 8))
    c = g.tensor("mul_const.c", (1,), INT8, 0.37 / 255.0, -128, data=np.array([127]))
    y = g.binary(MUL, a, c)
    g.tensors[y].scale = [g.scale_of(a) * 0.4]  # x * 0.37 stays in range
    g.output(y)


def _fully_connected(g: Graph) -> None:
    x = g.input("input", (1, 32))
    g.output(g.fully_connected(x, 16))


def _small_cnn(g: Graph) -> None:
    x = g.input("input", (1, 12, 12, 3))
    y = g.conv(x, 8, (3, 3), (1, 1), SAME, RELU)
    y = g.pool(y, MAX_POOL_2D, (2, 2), (2, 2), VALID)
    y = g.depthwise(y, (3, 3), (1, 1), SAME, RELU)
    y = g.binary(ADD, y, g.conv(y, 8, (1, 1), (1, 1), VALID))  # a residual add
    y = g.conv(y, 4, (1, 1), (1, 1), VALID)
    y = g.fully_connected(g.mean(y), 10)  # global average pooling
    # logits unclipped; with the sample input no output meets a rounding near-tie (where LiteRT's
    # single rounding and the NPU's double rounding differ by 1: test_ethosu85_networks.py)
    g.tensors[y].scale = [g.tensors[y].scale[0] / 4]
    g.output(y)


def _add_int16(g: Graph) -> None:
    a = g.input("a", (1, 4, 4, 8), INT16)
    b = g.input("b", (1, 4, 4, 8), INT16)
    for t in (a, b):  # int16 activations: small scales, zero point 0
        g.tensors[t].scale = [float(g.rng.uniform(1e-4, 4e-4))]
    g.output(g.binary(ADD, a, b))


def _max_pool_int16(g: Graph) -> None:
    x = g.input("input", (1, 6, 6, 4), INT16)
    g.output(g.pool(x, MAX_POOL_2D, (3, 3), (1, 1), SAME))


def _resize_nearest(g: Graph) -> None:
    x = g.input("input", (1, 4, 4, 8))
    g.output(g.resize_nearest(x, (8, 8)))


def _bmm(shape_a, shape_b, adj_x=False, adj_y=False, ttype=INT8):
    """A single BATCH_MATMUL of two graph inputs."""
    def build_(g: Graph) -> None:
        a, b = g.input("a", shape_a, ttype), g.input("b", shape_b, ttype)
        if ttype == INT16:
            for t in (a, b):
                g.tensors[t].scale = [float(g.rng.uniform(1e-4, 4e-4))]
        g.output(g.batch_matmul(a, b, adj_x, adj_y))
    return build_


def _fc_dynamic(g: Graph) -> None:
    """FULLY_CONNECTED with a non-constant weight operand (both graph inputs)."""
    x, w = g.input("x", (1, 5, 24)), g.input("w", (12, 24))
    g.tensors[w].zero_point = [0]  # TFLite's int8 FULLY_CONNECTED: weights zero point 0
    g.output(g.fully_connected_dynamic(x, w))


def _qkv(g: Graph) -> tuple[int, int, int]:
    """The attention block's input x [1, 8, 16] and its Dense projections Q, K, V."""
    x = g.input("x", (1, 8, 16))
    q, k, v = (g.fully_connected(x, 16) for _ in range(3))
    return q, k, v


def attention_projections() -> bytes:
    """The attention block cut after its projections (outputs Q, K, V; the same weights, seed
    and input as "attention"): where a FULLY_CONNECTED rounding near-tie first shows."""
    g = Graph("attention", MATMUL_MODELS["attention"][1])
    for t in _qkv(g):
        g.output(t)
    return g.to_tflite()


def int16x8_network() -> bytes:
    """A small int16x8 network (TFLite's 16-bit activations, 8-bit weights scheme: int16
    activations with zero point 0, int64 biases): a 3x3 CONV_2D + ReLU, RESHAPE, two
    FULLY_CONNECTED (the first with ReLU). Where the NPU's int16 rescale (Vela's 15-bit scale)
    and LiteRT's reference FULLY_CONNECTED (31-bit multiplier) part (issue 27 point 4). The
    output scales follow _out_scale, so values spread over some 8000-12000 quanta."""
    g = Graph("int16x8", 121)
    x = g.input("input", (1, 6, 6, 4), INT16)
    g.tensors[x].scale, g.tensors[x].zero_point = [2e-4], [0]
    y = g.conv(x, 8, act=RELU)
    y = g.reshape(y, (1, 6 * 6 * 8))
    y = g.fully_connected(y, 32, act=RELU)
    g.output(g.fully_connected(y, 10))
    for op in g.ops:
        for t in op.outputs:
            g.tensors[t].type, g.tensors[t].zero_point = INT16, [0]
        if op.code != RESHAPE:
            b = g.tensors[op.inputs[2]]
            b.type, b.data = INT64, np.frombuffer(b.data, np.int32).astype(np.int64).tobytes()
    return g.to_tflite()


def _attention(g: Graph) -> None:
    """One attention head as a transformer has it: Dense projections Q, K, V of x [1, S, E],
    Q.K^T (BATCH_MATMUL adj_y), a constant scale (MUL), SOFTMAX, .V (BATCH_MATMUL), output
    Dense."""
    q, k, v = _qkv(g)
    e = g.shape_of(q)[-1]
    scores = g.batch_matmul(q, k, adj_y=True)
    # the scale brings the logits to a spread of about 2 (the projections' random weights
    # make Q.K^T far larger than a trained model's): softmax then has many distinct outputs
    c_val = 2.0 / (48.0 * g.scale_of(scores))
    c = g.tensor("attention.scale", (1,), INT8, c_val / 127.0, 0, data=np.array([127]))
    scaled = g.binary(MUL, scores, c)
    g.tensors[scaled].scale = [6.0 / 127.0]
    p = g.softmax(scaled)
    g.output(g.fully_connected(g.batch_matmul(p, v), e))


#: single matrix products and the attention block (issue 28 #1): name -> (builder, seed)
MATMUL_MODELS = {
    "bmm_4x8x6": (_bmm((1, 4, 8), (1, 8, 6)), 16),
    "bmm_adj_x": (_bmm((1, 8, 4), (1, 8, 6), adj_x=True), 17),
    "bmm_adj_y": (_bmm((1, 4, 8), (1, 6, 8), adj_y=True), 18),
    "bmm_adj_xy": (_bmm((1, 20, 5), (1, 7, 20), True, True), 19),
    "bmm_batch3": (_bmm((3, 5, 20), (3, 20, 7)), 20),
    "bmm_4d_heads": (_bmm((1, 2, 6, 16), (1, 2, 16, 24)), 21),
    "bmm_wide": (_bmm((1, 9, 40), (1, 40, 33)), 22),
    "bmm_bcast": (_bmm((2, 4, 8), (1, 8, 6)), 26),
    "bmm_int16": (_bmm((1, 4, 8), (1, 8, 6), ttype=INT16), 23),
    "bmm_int16_adj_y": (_bmm((2, 6, 20), (2, 9, 20), adj_y=True, ttype=INT16), 27),
    "fc_dynamic": (_fc_dynamic, 24),
    "attention": (_attention, 25),
}


#: name -> (builder, seed); the seed makes every weight, scale and zero point reproducible
MODELS = {
    "conv": (_conv, 1),
    "conv_2ch": (_conv_2ch, 13),
    "depthwise": (_depthwise, 2),
    "max_pool": (_max_pool, 3),
    "avg_pool": (_avg_pool, 4),
    "add": (_add, 5),
    "mul": (_mul, 6),
    "mul_const": (_mul_const, 12),
    "fully_connected": (_fully_connected, 7),
    "small_cnn": (_small_cnn, 8),
    "add_int16": (_add_int16, 9),
    "max_pool_int16": (_max_pool_int16, 10),
    "resize_nearest": (_resize_nearest, 11),
}


def _float_max_pool(g: Graph) -> None:
    """A float32 model: Vela places its operator on the CPU (no NPU operator at all)."""
    x = g.tensor("input", (1, 8, 8, 8), FLOAT32)
    g.inputs.append(x)
    g.output(g.pool(x, MAX_POOL_2D, (2, 2), (2, 2), VALID))


def _conv_dequantize(g: Graph) -> None:
    """An int8 convolution (NPU) whose output is dequantized to float32 (CPU)."""
    x = g.input("input", (1, 8, 8, 3))
    g.output(g.dequantize(g.conv(x, 8, (3, 3), (1, 1), SAME, RELU)))


#: models Vela leaves wholly or partly on the CPU (what the importer refuses, naming why);
#: not in MODELS, whose models all run on the NPU
CPU_MODELS = {
    "float_max_pool": (_float_max_pool, 14),
    "conv_dequantize": (_conv_dequantize, 15),
}


def build(name: str) -> bytes:
    """The .tflite bytes of one model (same bytes on every call and machine)."""
    registries = (MODELS, CPU_MODELS, MATMUL_MODELS)
    try:
        fn, seed = next(r[name] for r in registries if name in r)
    except StopIteration:
        known = ", ".join(n for r in registries for n in r)
        raise KeyError(f"unknown model {name!r}; known: {known}") from None
    g = Graph(name, seed)
    fn(g)
    return g.to_tflite()


def sample_inputs(model: bytes | str, seed: int = 1234) -> list[np.ndarray]:
    """Deterministic random inputs for a model (built with :func:`build` or any model whose
    graph inputs are int8/int16), full range of the input type."""
    data = build(model) if isinstance(model, str) else model
    from accelstub.devices.ethos_u85.vela import read_tflite  # the project's own flatbuffer reader
    m = read_tflite(data)
    rng = np.random.default_rng(seed)
    out = []
    for t in m.graph_inputs():
        info = np.iinfo(t.dtype)
        out.append(rng.integers(info.min, info.max + 1, size=t.shape).astype(t.dtype))
    return out


def litert_reference(model: str | Path, inputs: list[np.ndarray],
                     tensors: list[int] | None = None,
                     resolver: str = "BUILTIN_REF") -> list[np.ndarray]:
    """LiteRT's answer with its reference kernels (OpResolverType.BUILTIN_REF, the kernels TFLM
    runs; its default XNNPACK path is not bit-exact with them), from ai-edge-litert: the
    model's outputs, or the graph tensors ``tensors`` (all tensors are then kept).
    ``resolver``: another OpResolverType, for an operator BUILTIN_REF has no kernel of
    (ELU: BUILTIN_WITHOUT_DEFAULT_DELEGATES, LiteRT's own kernels without XNNPACK)."""
    from accelstub.devices.ethos_u85.litert import open_litert

    it = open_litert(model, resolver=resolver, keep_tensors=tensors is not None)
    for d, x in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(t) for t in (tensors if tensors is not None
                                       else [d["index"] for d in it.get_output_details()])]


def tflm_reference(model: str | Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """TFLite Micro's answer (the tflite-micro package's interpreter, its reference kernels:
    what a Cortex-M beside the NPU runs), for operators LiteRT has no integer kernel of
    (int16x8 UNIDIRECTIONAL_SEQUENCE_LSTM). Its interpreter resets variable tensors as TFLM
    does (int8: the zero point)."""
    from tflite_micro.python.tflite_micro import runtime

    from accelstub.devices.ethos_u85.vela import read_tflite  # the project's own reader

    data = Path(model).read_bytes()
    it = runtime.Interpreter.from_bytes(data)
    for i, x in enumerate(inputs):
        it.set_input(x, i)
    it.invoke()
    return [it.get_output(i) for i in range(len(read_tflite(data).outputs))]


def compile_with_vela(model: str | Path, outdir: str | Path, macs: int = 256,
                      raw: bool = False, cpu_operators: bool = False,
                      debug_db: bool = False) -> Path:
    """Compile ``model`` with Vela (ethos-u-vela, a subprocess) for an Ethos-U85 with ``macs``
    MACs; the path of its output (``*_vela.tflite``, or the raw ``.npz``). RuntimeError with
    Vela's output when it fails or (unless ``cpu_operators``) leaves operators on the CPU.
    ``debug_db``: also write Vela's debug database (``<model>_debug.xml`` beside the output),
    which pairs each NPU operation with its TFLite tensor (the per-layer diff)."""
    model, outdir = Path(model), Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "ethosu.vela", "--accelerator-config", f"ethos-u85-{macs}",
           "--output-dir", str(outdir)] + (["--output-format", "raw"] if raw else []) \
        + (["--enable-debug-db"] if debug_db else []) + [str(model)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = outdir / f"{model.stem}_vela.{'npz' if raw else 'tflite'}"
    if p.returncode != 0 or not out.exists():
        raise RuntimeError(f"vela failed on {model.name}:\n{p.stdout}\n{p.stderr}")
    if not cpu_operators and "CPU operators = 0 " not in p.stdout:
        raise RuntimeError(f"vela left CPU operators in {model.name}:\n{p.stdout}")
    return out


def write_models(outdir: str | Path, names=None) -> list[Path]:
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names or MODELS:
        p = outdir / f"{name}.tflite"
        p.write_bytes(build(name))
        paths.append(p)
    return paths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m accelstub.testkit.ethosu85_models",
                                 description="Write the project's small int8/int16 TFLite "
                                 "models (input to Vela) into OUTDIR.")
    ap.add_argument("outdir")
    ap.add_argument("names", nargs="*", help=f"models (default all): {', '.join(MODELS)}")
    args = ap.parse_args(argv)
    for p in write_models(args.outdir, args.names or None):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
