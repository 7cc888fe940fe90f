"""Single-operator TFLite models for each operator Vela 5.2 places on the Ethos-U85 (issue 28 #2).

The operator list is Vela 5.2's own (``vela --supported-ops-report``, "Ethos-U85 TFLite Summary
Table"). Each model is one operator between graph inputs and outputs, written with the
project's TFLite writer (:mod:`testkit.ethosu85_models`); int8, and int16x8 (``*_i16``)
wherever Vela 5.2.0 places the int16 version on the U85 and a reference kernel (LiteRT's or
TFLM's) computes it (the rest: design notes, "int16x8 where Vela places it"). Operator and
option numbers are those of TFLite's public ``schema.fbs`` (slots in declaration order).
Quantization follows TFLite's kernels' rules: ops that move data keep their input's scale and
zero point, LOGISTIC and SOFTMAX write 1/256 (zp -128) in int8 and 1/32768 in int16, TANH 1/128
(zp 0) and 1/32768, int16 activations have zero point 0.
"""
from __future__ import annotations

import math

import numpy as np

from .ethosu85_models import (
    ADD,
    AVERAGE_POOL_2D,
    INT8,
    INT16,
    INT32,
    INT64,
    MAX_POOL_2D,
    MUL,
    OPT_ADD,
    OPT_MUL,
    RELU,
    SAME,
    VALID,
    Graph,
    _Op,
)

BOOL, RESOURCE = 6, 13  # TensorType
# BuiltinOperator (schema.fbs)
OP = dict(ABS=101, ARG_MAX=56, CONCATENATION=2, DIV=42, ELU=111, EQUAL=71, EXP=47,
          EXPAND_DIMS=70, GATHER=36, GELU=150, GREATER=61, GREATER_EQUAL=62, HARD_SWISH=117,
          LEAKY_RELU=98, LESS=58, LESS_EQUAL=63, LOG=73, LOGISTIC=14, MAXIMUM=55, MINIMUM=57,
          MIRROR_PAD=100, NEG=59, NOT_EQUAL=72, PACK=83, PAD=34, PADV2=60, PRELU=54,
          QUANTIZE=114, REDUCE_MAX=82, REDUCE_MIN=89, RELU=19, RELU6=21, RELU_0_TO_1=152,
          RELU_N1_TO_1=20, RESIZE_BILINEAR=23, REVERSE_V2=105, RSQRT=76, SELECT_V2=123,
          SLICE=65, SPLIT=49, SPLIT_V=102, SQUARED_DIFFERENCE=99, SQUEEZE=43, STRIDED_SLICE=45,
          SUB=41, SUM=74, TANH=28, TILE=69, TRANSPOSE=39, TRANSPOSE_CONV=67, UNPACK=88,
          MEAN=40, SOFTMAX=25, ADD=ADD, MUL=MUL, CAST=53, LOGICAL_AND=86, LOGICAL_OR=84,
          LOGICAL_NOT=87, REDUCE_ANY=91, REDUCE_ALL=140, SELECT=64, SCATTER_ND=122,
          VAR_HANDLE=142, READ_VARIABLE=143, ASSIGN_VARIABLE=144,
          UNIDIRECTIONAL_SEQUENCE_LSTM=44)
# BuiltinOptions union tags (schema.fbs)
OPT = dict(CONCATENATION=10, RESIZE_BILINEAR=15, PAD=22, GATHER=23, TRANSPOSE=26, REDUCER=27,
           SUB=28, DIV=29, SQUEEZE=30, STRIDED_SLICE=32, SPLIT=35, ARG_MAX=40, PADV2=43,
           TRANSPOSE_CONV=49, PACK=59, UNPACK=64, LEAKY_RELU=75, SQUARED_DIFFERENCE=76,
           MIRROR_PAD=77, SPLIT_V=79, GELU=116, SOFTMAX=9, ADD=OPT_ADD, MUL=OPT_MUL, CAST=37,
           LOGICAL_AND=62, LOGICAL_OR=60, LOGICAL_NOT=63, SELECT=47, SCATTER_ND=97,
           VAR_HANDLE=111, READ_VARIABLE=112, ASSIGN_VARIABLE=113,
           UNIDIRECTIONAL_SEQUENCE_LSTM=71)


def _like(g: Graph, x: int, shape, name: str) -> int:
    """An output in the quantization of ``x`` (what data-movement kernels require)."""
    t = g.tensors[x]
    return g.tensor(f"{g.name}.{name}{len(g.ops)}.out", shape, t.type, t.scale, t.zero_point)


def _const(g: Graph, values, ttype: int = INT32) -> int:
    v = np.asarray(values)
    return g.tensor(f"{g.name}.c{len(g.tensors)}", v.shape, ttype, data=v)


def _in(g: Graph, shape, ttype: int) -> int:
    x = g.input(f"in{len(g.inputs)}", shape, ttype)
    if ttype == INT16:
        g.tensors[x].scale = [float(g.rng.uniform(1e-4, 4e-4))]
        g.tensors[x].zero_point = [0]
    return x


def _fixed_out(g: Graph, x: int, name: str, scale_i8, zp_i8, scale_i16) -> int:
    t = g.tensors[x]
    scale, zp = (scale_i8, zp_i8) if t.type == INT8 else (scale_i16, 0)
    return g.tensor(f"{g.name}.{name}{len(g.ops)}.out", t.shape, t.type, scale, zp)


def _op(g: Graph, name: str, inputs, outputs, options=None, version: int = 1) -> None:
    opt = OPT.get(name, 0)
    g.ops.append(_Op(OP[name], list(inputs), list(outputs), opt, dict(options or {}), version))


# --- builders: name -> fn(g, ttype) ---------------------------------------------------------------

def _unary(name: str, out=None, options=None):
    """One-input elementwise operator; ``out(g, x)`` makes its output (default: a new random
    quantization of the same shape)."""
    def build(g: Graph, tt: int) -> None:
        x = _in(g, (1, 4, 5, 8), tt)
        y = out(g, x) if out else _requant(g, x, name)
        _op(g, name, [x], [y], options)
        g.output(y)
    return build


def _requant(g: Graph, x: int, name: str, factor: float = 1.0) -> int:
    t = g.tensors[x]
    s = g.scale_of(x) * factor * float(g.rng.uniform(0.8, 1.25))
    zp = int(g.rng.integers(-20, 21)) if t.type == INT8 else 0
    return g.tensor(f"{g.name}.{name}{len(g.ops)}.out", t.shape, t.type, s, zp)


def _binary(name: str, options=None, same_quant: bool = False, bool_out: bool = False,
            shape=(1, 4, 5, 8)):
    """Two-input elementwise operator (comparisons: a larger shape, so that random int8
    inputs meet equal values; int16 comparisons with equality: random inputs almost never do,
    so the second operand is the first transposed over H and W, equal on the diagonal)."""
    def build(g: Graph, tt: int) -> None:
        a = _in(g, shape, tt)
        if "EQUAL" in name and tt == INT16:
            b = _like(g, a, shape, "transpose")
            _op(g, "TRANSPOSE", [a, _const(g, [0, 2, 1, 3])], [b])
        else:
            b = _in(g, shape, tt)
        if same_quant:
            g.tensors[b].scale = g.tensors[a].scale
            g.tensors[b].zero_point = g.tensors[a].zero_point
        if bool_out:
            y = g.tensor(f"{g.name}.{name}.out", shape, BOOL)
        elif same_quant:
            y = _like(g, a, shape, name)
        else:
            sa, sb = g.scale_of(a), g.scale_of(b)
            scale = {"SQUARED_DIFFERENCE": (sa + sb) ** 2 * 400, "DIV": sa / sb * 0.05}.get(
                name, (sa + sb) * 1.1)
            y = g.act(f"{g.name}.{name}.out", shape, tt, scale=scale)
            if tt == INT16:
                g.tensors[y].zero_point = [0]
        _op(g, name, [a, b], [y], options)
        g.output(y)
    return build


def _transpose(perm, shape=(1, 4, 6, 8)):
    def build(g: Graph, tt: int) -> None:
        x = _in(g, shape, tt)
        y = _like(g, x, tuple(shape[p] for p in perm), "transpose")
        _op(g, "TRANSPOSE", [x, _const(g, perm)], [y])
        g.output(y)
    return build


def _pad(g: Graph, tt: int, name: str = "PAD", mode: int | None = None) -> None:
    x = _in(g, (1, 4, 5, 8), tt)
    pads = [[0, 0], [1, 2], [2, 1], [0, 0]]
    y = _like(g, x, (1, 7, 8, 8), name.lower())
    ins = [x, _const(g, pads)]
    if name == "PADV2":
        ins.append(g.tensor(f"{g.name}.padv", (1,), tt, g.tensors[x].scale,
                            g.tensors[x].zero_point, data=np.array([5])))
    _op(g, name, ins, [y], {0: ("b", mode)} if mode is not None else None)
    g.output(y)


def _strided_slice(g: Graph, tt: int) -> None:
    x = _in(g, (1, 8, 9, 16), tt)
    y = _like(g, x, (1, 4, 5, 12), "ss")  # Vela: strides over H and W only
    _op(g, "STRIDED_SLICE", [x, _const(g, [0, 1, 0, 2]), _const(g, [1, 8, 9, 14]),
                              _const(g, [1, 2, 2, 1])], [y], {0: ("i", 0), 1: ("i", 0)})
    g.output(y)


def _slice(g: Graph, tt: int) -> None:
    x = _in(g, (1, 8, 9, 16), tt)
    y = _like(g, x, (1, 3, 5, 7), "slice")
    _op(g, "SLICE", [x, _const(g, [0, 2, 1, 4]), _const(g, [1, 3, 5, 7])], [y])
    g.output(y)


def _concat(axis: int):
    def build(g: Graph, tt: int) -> None:
        a = _in(g, (1, 4, 5, 8), tt)
        shape_b = [1, 4, 5, 8]
        shape_b[axis] = 3
        b = _in(g, tuple(shape_b), tt)
        g.tensors[b].scale, g.tensors[b].zero_point = g.tensors[a].scale, g.tensors[a].zero_point
        shape = [1, 4, 5, 8]
        shape[axis] += 3
        y = _like(g, a, tuple(shape), "concat")
        _op(g, "CONCATENATION", [a, b], [y], {0: ("i", axis), 1: ("b", 0)})
        g.output(y)
    return build


def _reshape(g: Graph, tt: int) -> None:
    x = _in(g, (1, 4, 6, 8), tt)
    g.output(g.reshape(x, (1, 8, 24)))


def _resize_bilinear(align: bool, half: bool):
    def build(g: Graph, tt: int) -> None:
        x = _in(g, (1, 4, 4, 8), tt)
        n = 7 if align else 8  # Vela: a power-of-two scale, (n-1)/(4-1) with align_corners
        y = _like(g, x, (1, n, n, 8), "resize")
        _op(g, "RESIZE_BILINEAR", [x, _const(g, [n, n])], [y],
            {2: ("bool", int(align)), 3: ("bool", int(half))})
        g.output(y)
    return build


def _resize_nearest(g: Graph, tt: int) -> None:
    x = _in(g, (1, 4, 4, 8), tt)
    g.output(g.resize_nearest(x, (8, 8)))


def _transpose_conv(stride: int, padding: int):
    def build(g: Graph, tt: int) -> None:
        x = _in(g, (1, 5, 5, 8), tt)
        cout, k = 6, 3
        oh = 5 * stride if padding == SAME else (5 - 1) * stride + k
        wt, ws = g._weights((cout, k, k, 8), 0)
        wi = g.tensor(f"{g.name}.tc.w", wt.shape, INT8, ws, [0] * cout, 0, wt)
        btype = INT32 if tt == INT8 else 4  # int64 bias for 16x8
        bi = g._bias(f"{g.name}.tc.b", x, ws, cout, btype)
        y = g.act(f"{g.name}.tc.out", (1, oh, oh, cout), tt,
                  scale=g._out_scale(x, ws, k * k * 8 // (stride * stride)))
        if tt == INT16:
            g.tensors[y].zero_point = [0]
        g.ops.append(_Op(OP["TRANSPOSE_CONV"], [_const(g, [1, oh, oh, cout]), wi, x, bi], [y],
                         OPT["TRANSPOSE_CONV"], {0: ("b", padding), 1: ("i", stride),
                                                 2: ("i", stride), 3: ("b", 0)}, 3))
        g.output(y)
    return build


def _reduce(name: str, axes, keep: bool = True):
    def build(g: Graph, tt: int) -> None:
        x = _in(g, (1, 4, 5, 8), tt)
        shape = [d if i not in axes else 1 for i, d in enumerate((1, 4, 5, 8))]
        if not keep:
            shape = [d for i, d in enumerate((1, 4, 5, 8)) if i not in axes]
        y = _like(g, x, tuple(shape), name.lower()) if name != "SUM" else \
            _requant(g, x, "sum", 20.0)
        if name == "SUM":
            g.tensors[y].shape = tuple(shape)
        g.ops.append(_Op(OP[name], [x, _const(g, list(axes))], [y], OPT["REDUCER"],
                         {0: ("bool", int(keep))}, 1))
        g.output(y)
    return build


def _softmax(g: Graph, tt: int) -> None:
    x = _in(g, (1, 4, 5, 16), tt)
    g.output(g.softmax(x))


def _split(g: Graph, tt: int) -> None:
    x = _in(g, (1, 4, 6, 8), tt)
    ys = [_like(g, x, (1, 4, 2, 8), "split") for _ in range(3)]
    _op(g, "SPLIT", [_const(g, [2]), x], ys, {0: ("i", 3)})
    for y in ys:
        g.output(y)


def _split_v(g: Graph, tt: int) -> None:
    x = _in(g, (1, 4, 6, 8), tt)
    ys = [_like(g, x, (1, 4, 6, n), "splitv") for n in (3, 5)]
    _op(g, "SPLIT_V", [x, _const(g, [3, 5]), _const(g, [3])], ys, {0: ("i", 2)})
    for y in ys:
        g.output(y)


def _pack(g: Graph, tt: int) -> None:
    a = _in(g, (4, 5, 8), tt)
    b = _in(g, (4, 5, 8), tt)
    g.tensors[b].scale, g.tensors[b].zero_point = g.tensors[a].scale, g.tensors[a].zero_point
    y = _like(g, a, (4, 2, 5, 8), "pack")
    _op(g, "PACK", [a, b], [y], {0: ("i", 2), 1: ("i", 1)})
    g.output(y)


def _unpack(g: Graph, tt: int) -> None:
    x = _in(g, (1, 3, 5, 8), tt)
    ys = [_like(g, x, (1, 5, 8), "unpack") for _ in range(3)]
    _op(g, "UNPACK", [x], ys, {0: ("i", 3), 1: ("i", 1)})
    for y in ys:
        g.output(y)


def _shape_op(name: str, in_shape, out_shape, extra=None):
    """An operator that only changes the shape (EXPAND_DIMS, SQUEEZE, TILE, REVERSE_V2)."""
    def build(g: Graph, tt: int) -> None:
        x = _in(g, in_shape, tt)
        y = _like(g, x, out_shape, name.lower())
        _op(g, name, [x] + ([_const(g, extra)] if extra is not None else []), [y])
        g.output(y)
    return build


def _div(g: Graph, tt: int) -> None:
    """DIV by a constant without zeros (a zero divisor is UNPREDICTABLE on the NPU,
    [U85-TRM: §3.10.6])."""
    a = _in(g, (1, 4, 5, 8), tt)
    b = g.tensor(f"{g.name}.divisor", (1, 1, 1, 8), tt, 0.05, 0,
                 data=g.rng.integers(5, 100, size=(1, 1, 1, 8)) * g.rng.choice([-1, 1], 8))
    y = g.act(f"{g.name}.div.out", (1, 4, 5, 8), tt, scale=g.scale_of(a) / 0.05 * 0.1)
    _op(g, "DIV", [a, b], [y])
    g.output(y)


def _neg(g: Graph, tt: int) -> None:
    """NEG: TFLite's kernel negates the stored integers, so input and output zero point 0."""
    x = _in(g, (1, 4, 5, 8), tt)
    g.tensors[x].zero_point = [0]
    y = _like(g, x, (1, 4, 5, 8), "neg")
    _op(g, "NEG", [x], [y])
    g.output(y)


def _rsqrt(g: Graph, tt: int) -> None:
    """RSQRT of values >= 0 only (LiteRT refuses negative ones; it maps 0 to the largest
    output): input zero point -128; output from 0 to 1/sqrt(one input step). int16 (zero
    points 0, what Vela takes): the RSQRT of an ABS of the input."""
    x = _in(g, (1, 4, 5, 8), tt)
    if tt == INT16:
        a = _like(g, x, g.shape_of(x), "abs")
        _op(g, "ABS", [x], [a])
        x = a
    else:
        g.tensors[x].zero_point = [-128]
    hi, zp = (255, -128) if tt == INT8 else (32767, 0)
    y = g.tensor(f"{g.name}.rsqrt.out", (1, 4, 5, 8), tt, 1.0 / math.sqrt(g.scale_of(x)) / hi,
                 zp)
    _op(g, "RSQRT", [x], [y])
    g.output(y)


def _leaky_relu(g: Graph, tt: int) -> None:
    x = _in(g, (1, 4, 5, 8), tt)
    y = _requant(g, x, "lrelu")
    _op(g, "LEAKY_RELU", [x], [y], {0: ("f", 0.2)})
    g.output(y)


def _elu(g: Graph, tt: int) -> None:
    """ELU on 256 values, so that one input can hold every int8 value (the whole table TFLM's
    int8 kernel builds; Vela 5.2 places int8 only)."""
    x = _in(g, (1, 4, 8, 8), tt)
    y = _requant(g, x, "elu")
    _op(g, "ELU", [x], [y])
    g.output(y)


def _prelu(g: Graph, tt: int) -> None:
    """PRELU, alpha of the input's type. int16: Vela 5.2.0 places this form (it refuses an
    int8 alpha with int16 input), but no reference computes it (LiteRT reads the int16 alpha's
    bytes as int8, TFLM requires an int8 alpha): no int16 entry, see the design notes."""
    x = _in(g, (1, 4, 5, 8), tt)
    alpha = g.tensor(f"{g.name}.alpha", (1, 1, 8), tt, 0.01, 0,
                     data=g.rng.integers(1, 40, size=(1, 1, 8)))
    y = _requant(g, x, "prelu")
    _op(g, "PRELU", [x, alpha], [y])
    g.output(y)


def _gelu(approximate: bool):
    def build(g: Graph, tt: int) -> None:
        x = _in(g, (1, 4, 5, 8), tt)
        y = _requant(g, x, "gelu")
        _op(g, "GELU", [x], [y], {0: ("bool", int(approximate))})
        g.output(y)
    return build


def _arg_max(g: Graph, tt: int) -> None:
    x = _in(g, (1, 4, 5, 8), tt)
    y = g.tensor(f"{g.name}.argmax.out", (1, 4, 5), INT32)
    _op(g, "ARG_MAX", [x, _const(g, [3])], [y], {0: ("b", INT32)})
    g.output(y)


def _quantize(g: Graph, tt: int) -> None:
    x = _in(g, (1, 4, 5, 8), tt)
    y = _requant(g, x, "quantize", 1.7)
    _op(g, "QUANTIZE", [x], [y])
    g.output(y)


def _gather(g: Graph, tt: int) -> None:
    x = _in(g, (6, 8), tt)  # Vela: axis == batch_dims
    y = _like(g, x, (4, 8), "gather")
    _op(g, "GATHER", [x, _const(g, [5, 0, 2, 2])], [y], {0: ("i", 0), 1: ("i", 0)})
    g.output(y)


def _select_v2(g: Graph, tt: int) -> None:
    """SELECT_V2 with its condition from a GREATER of the two inputs (graph inputs are
    integers)."""
    a = _in(g, (1, 4, 5, 8), tt)
    b = _in(g, (1, 4, 5, 8), tt)
    g.tensors[b].scale, g.tensors[b].zero_point = g.tensors[a].scale, g.tensors[a].zero_point
    cond = g.tensor(f"{g.name}.cond", (1, 4, 5, 8), BOOL)
    _op(g, "GREATER", [a, b], [cond])
    y = _like(g, a, (1, 4, 5, 8), "select")
    _op(g, "SELECT_V2", [cond, a, b], [y])
    g.output(y)


def _compare(g: Graph, a: int, b: int, name: str = "GREATER") -> int:
    """A boolean tensor from two int8 inputs (graph inputs are integers, so boolean operators
    take their operands from comparisons)."""
    y = g.tensor(f"{g.name}.cmp{len(g.ops)}.out", g.shape_of(a), BOOL)
    _op(g, name, [a, b], [y])
    return y


def _logical(name: str):
    """LOGICAL_AND / _OR of two comparisons, LOGICAL_NOT of one; the bool output."""
    def build(g: Graph, tt: int) -> None:
        ts = [_in(g, (1, 4, 5, 8), tt) for _ in range(2 if name == "LOGICAL_NOT" else 3)]
        for t in ts[1:]:
            g.tensors[t].scale = g.tensors[ts[0]].scale
            g.tensors[t].zero_point = g.tensors[ts[0]].zero_point
        p = _compare(g, ts[0], ts[1])
        ins = [p] if name == "LOGICAL_NOT" else [p, _compare(g, ts[0], ts[2], "LESS")]
        y = g.tensor(f"{g.name}.{name.lower()}.out", (1, 4, 5, 8), BOOL)
        _op(g, name, ins, [y])
        g.output(y)
    return build


def _reduce_bool(name: str):
    """REDUCE_ANY / REDUCE_ALL over W (2 wide, so that random inputs give both answers) of a
    comparison."""
    def build(g: Graph, tt: int) -> None:
        a, b = _in(g, (1, 16, 2, 8), tt), _in(g, (1, 16, 2, 8), tt)
        g.tensors[b].scale, g.tensors[b].zero_point = g.tensors[a].scale, g.tensors[a].zero_point
        p = _compare(g, a, b)
        y = g.tensor(f"{g.name}.{name.lower()}.out", (1, 16, 1, 8), BOOL)
        g.ops.append(_Op(OP[name], [p, _const(g, [2])], [y], OPT["REDUCER"],
                         {0: ("bool", 1)}, 1))
        g.output(y)
    return build


def _select(g: Graph, tt: int) -> None:
    """SELECT (v1, same shapes) with its condition from a GREATER of the two inputs."""
    a, b = _in(g, (1, 4, 5, 8), tt), _in(g, (1, 4, 5, 8), tt)
    g.tensors[b].scale, g.tensors[b].zero_point = g.tensors[a].scale, g.tensors[a].zero_point
    y = _like(g, a, (1, 4, 5, 8), "select")
    _op(g, "SELECT", [_compare(g, a, b), b, a], [y])
    g.output(y)


def _cast(g: Graph, tt: int) -> None:
    """CAST int8 -> int32 (the stored integers, no quantization)."""
    x = _in(g, (1, 4, 5, 8), tt)
    y = g.tensor(f"{g.name}.cast.out", (1, 4, 5, 8), INT32)
    _op(g, "CAST", [x], [y], {0: ("b", tt), 1: ("b", INT32)})
    g.output(y)


def _scatter_nd(g: Graph, tt: int) -> None:
    """SCATTER_ND of 3 rows of updates into a [6, 8] zero tensor at constant indices."""
    upd = _in(g, (3, 8), tt)
    y = _like(g, upd, (6, 8), "scatter")
    _op(g, "SCATTER_ND", [_const(g, [[4], [0], [2]]), upd, _const(g, [6, 8])], [y])
    g.output(y)


def _variable(g: Graph, tt: int) -> None:
    """A resource variable: VAR_HANDLE (shared_name; Vela 5.2 makes no operation of it),
    ASSIGN_VARIABLE of the input, READ_VARIABLE into the output. Vela lowers the two into NPU
    memory copies through the variable's own arena tensor, which its output passes to the
    ethos-u operator as one more input and output."""
    x = _in(g, (1, 4, 5, 8), tt)
    h = g.tensor(f"{g.name}.handle", (), RESOURCE)
    _op(g, "VAR_HANDLE", [], [h], {1: ("s", f"{g.name}.state")})
    _op(g, "ASSIGN_VARIABLE", [h, x], [])
    y = _like(g, x, g.shape_of(x), "read")
    _op(g, "READ_VARIABLE", [h], [y])
    g.output(y)


def _lstm(g: Graph, tt: int, state_zp: int = 0) -> None:
    """UNIDIRECTIONAL_SEQUENCE_LSTM, int8 (TFLite's 8x8_16 integer LSTM), in the form Vela 5.2
    takes on the U85 (no peephole, projection or layer normalisation): 4 time steps of 8
    inputs, 8 cells, TANH; symmetric int8 weights, int32 gate biases; the output state int8
    and the cell state int16 with a power-of-two scale (LiteRT requires it) are variable
    tensors with zero point 0 (both sides start them at zero); the five intermediates
    LiteRT's kernel reads (gates Q3.12, hidden); operator version 3. int16 (16x8, TFLM's
    EvalLstm<int16_t, int8_t, int16_t, int64_t>): input, output and output state int16 with
    zero point 0, int64 biases. ``state_zp``: the int8 output state's (and output's) zero
    point (TFLite resets an int8 variable to its zero point)."""
    steps, n_in, n_cell = 4, 8, 8
    x = _in(g, (1, steps, n_in), tt)
    if tt == INT8:
        g.tensors[x].scale, g.tensors[x].zero_point = [0.02], [3]

    def weights(name: str, shape) -> int:
        return g.tensor(f"{g.name}.{name}", shape, INT8, 0.01, 0,
                        data=g.rng.integers(-127, 128, size=shape))
    to_gates = [weights(f"in_{k}", (n_cell, n_in)) for k in "ifco"]
    recurrent = [weights(f"rec_{k}", (n_cell, n_cell)) for k in "ifco"]
    b_type, b_scale = (INT32, 0.0002) if tt == INT8 else (INT64, g.scale_of(x) * 0.01)
    biases = [g.tensor(f"{g.name}.bias_{k}", (n_cell,), b_type, b_scale, 0,
                       data=g.rng.integers(-500, 500, size=n_cell)) for k in "ifco"]
    h_scale = 1 / 128 if tt == INT8 else 1 / 32768
    h = g.tensor(f"{g.name}.h", (1, n_cell), tt, h_scale, state_zp)
    c = g.tensor(f"{g.name}.c", (1, n_cell), INT16, 2.0 ** -11, 0)
    g.tensors[h].variable = g.tensors[c].variable = True
    # intermediates of shape [0]: TFLM refuses one of non-zero size, Vela a shapeless one
    inter = [g.tensor(f"{g.name}.gate{i}", (0,), INT16, 2.0 ** -12, 0) for i in range(4)]
    inter.append(g.tensor(f"{g.name}.hidden", (0,), tt, h_scale, state_zp))
    y = g.tensor(f"{g.name}.out", (1, steps, n_cell), tt, h_scale, state_zp)
    ins = [x] + to_gates + recurrent + [-1] * 3 + biases + [-1, -1, h, c] + [-1] * 4
    g.ops.append(_Op(OP["UNIDIRECTIONAL_SEQUENCE_LSTM"], ins, [y],
                     OPT["UNIDIRECTIONAL_SEQUENCE_LSTM"],
                     {0: ("b", 4), 1: ("f", 0.0), 2: ("f", 0.0), 3: ("bool", 0)}, 3, inter))
    g.output(y)


def _pool(kind: int, k, stride, padding):
    def build(g: Graph, tt: int) -> None:
        x = _in(g, (1, 7, 7, 8), tt)
        g.output(g.pool(x, kind, k, stride, padding))
    return build


def _conv(g: Graph, tt: int) -> None:
    x = _in(g, (1, 6, 6, 4), tt)
    y = g.conv(x, 8, (3, 3), (1, 1), SAME, RELU)
    if tt == INT16:
        _int16_fix(g)
    g.output(y)


def _depthwise(g: Graph, tt: int) -> None:
    x = _in(g, (1, 6, 6, 8), tt)
    y = g.depthwise(x, (3, 3), (2, 2), SAME)
    if tt == INT16:
        _int16_fix(g)
    g.output(y)


def _fully_connected(g: Graph, tt: int) -> None:
    x = _in(g, (1, 32), tt)
    y = g.fully_connected(x, 10)
    if tt == INT16:
        _int16_fix(g)
    g.output(y)


#: _out_scale aims at int8 spreads (inputs of ~74 quanta, outputs of ~48); int16 inputs spread
#: over ~18900 quanta and outputs should over ~8000 (testkit/ethosu85_models.py _product_scale)
INT16_SPREAD = (18900.0 / 74.0) * (48.0 / 8000.0)


def _int16_fix(g: Graph) -> None:
    """16x8 kernels: the last operator's output int16 with zero point 0, its bias int64."""
    op = g.ops[-1]
    y = g.tensors[op.outputs[0]]
    y.type, y.zero_point = INT16, [0]
    y.scale = [y.scale[0] * INT16_SPREAD]
    b = g.tensors[op.inputs[2]]
    b.type = 4
    b.data = np.frombuffer(b.data, np.int32).astype(np.int64).tobytes()


def _binary_builtin(kind: int):
    def build(g: Graph, tt: int) -> None:
        a, b = _in(g, (1, 4, 5, 8), tt), _in(g, (1, 4, 5, 8), tt)
        g.output(g.binary(kind, a, b))
        if tt == INT16:
            y = g.tensors[g.outputs[-1]]
            y.zero_point = [0]
            if kind == MUL:  # int16 products: 18900^2 spread to 8000 quanta
                y.scale = [g.scale_of(a) * g.scale_of(b) * 18900.0 ** 2 / 8000.0]
    return build


def _mean(g: Graph, tt: int) -> None:
    x = _in(g, (1, 4, 5, 8), tt)
    y = _like(g, x, (1, 1, 1, 8), "mean")
    g.ops.append(_Op(OP["MEAN"], [x, _const(g, [1, 2])], [y], OPT["REDUCER"],
                     {0: ("bool", 1)}, 2))
    g.output(y)


UNARY_LIKE = {n: _unary(n, out=lambda g, x: _like(g, x, g.shape_of(x), "act"))
              for n in ("RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1")}

#: operator -> (builder, seed, int16 too)
OPERATORS: dict[str, tuple] = {
    "ABS": (_unary("ABS"), 101, True),
    "ADD": (_binary_builtin(ADD), 102, True),
    "ARG_MAX": (_arg_max, 103, False),
    "AVERAGE_POOL_2D": (_pool(AVERAGE_POOL_2D, (3, 3), (2, 2), VALID), 104, True),
    "CONCATENATION_C": (_concat(3), 105, True),
    "CONCATENATION_W": (_concat(2), 106, True),
    "CONCATENATION_H": (_concat(1), 107, True),
    "CONV_2D": (_conv, 108, True),
    "DEPTHWISE_CONV_2D": (_depthwise, 109, True),
    "DIV": (_div, 110, True),
    "EQUAL": (_binary("EQUAL", same_quant=True, bool_out=True, shape=(1, 16, 16, 8)), 112,
              True),
    "NOT_EQUAL": (_binary("NOT_EQUAL", same_quant=True, bool_out=True, shape=(1, 16, 16, 8)),
                  167, True),
    "GREATER_EQUAL": (_binary("GREATER_EQUAL", same_quant=True, bool_out=True,
                              shape=(1, 16, 16, 8)), 168, True),
    "LESS_EQUAL": (_binary("LESS_EQUAL", same_quant=True, bool_out=True, shape=(1, 16, 16, 8)),
                   169, True),
    "EXP": (_unary("EXP"), 113, True),
    "EXPAND_DIMS": (_shape_op("EXPAND_DIMS", (1, 4, 8), (1, 4, 1, 8), [2]), 114, True),
    "FULLY_CONNECTED": (_fully_connected, 115, True),
    "GATHER": (_gather, 116, True),
    "GELU": (_gelu(False), 117, False),
    "GELU_APPROX": (_gelu(True), 118, False),
    "GREATER": (_binary("GREATER", same_quant=True, bool_out=True), 119, True),
    "HARD_SWISH": (_unary("HARD_SWISH"), 120, False),  # LiteRT: no int16 kernel
    "LEAKY_RELU": (_leaky_relu, 121, True),
    "LESS": (_binary("LESS", same_quant=True, bool_out=True), 122, True),
    "LOG": (_unary("LOG"), 123, True),
    "LOGISTIC": (_unary("LOGISTIC", out=lambda g, x: _fixed_out(g, x, "logistic", 1 / 256,
                                                                 -128, 1 / 32768)), 124, True),
    "MAXIMUM": (_binary("MAXIMUM", same_quant=True), 125, True),
    "MAX_POOL_2D": (_pool(MAX_POOL_2D, (2, 2), (2, 2), VALID), 126, True),
    "MEAN": (_mean, 127, True),
    "MINIMUM": (_binary("MINIMUM", same_quant=True), 128, True),
    "MIRROR_PAD": (lambda g, tt: _pad(g, tt, "MIRROR_PAD", 0), 129, True),
    "MUL": (_binary_builtin(MUL), 130, True),
    "NEG": (_neg, 131, True),
    "PACK": (_pack, 132, True),
    "PAD": (_pad, 133, True),
    "PADV2": (lambda g, tt: _pad(g, tt, "PADV2"), 134, True),
    "PRELU": (_prelu, 135, False),
    "QUANTIZE": (_quantize, 136, True),
    "REDUCE_MAX": (_reduce("REDUCE_MAX", (1, 2)), 137, True),
    "REDUCE_MIN": (_reduce("REDUCE_MIN", (2,)), 138, True),
    **{n: (b, 139 + i, n in ("RELU", "RELU6")) for i, (n, b) in enumerate(UNARY_LIKE.items())},
    "RESHAPE": (_reshape, 143, True),
    "RESIZE_BILINEAR": (_resize_bilinear(False, False), 144, True),
    "RESIZE_BILINEAR_HALF_PIXEL": (_resize_bilinear(False, True), 145, True),
    "RESIZE_BILINEAR_ALIGN": (_resize_bilinear(True, False), 146, True),
    "RESIZE_NEAREST_NEIGHBOR": (_resize_nearest, 147, True),
    "REVERSE_V2": (_shape_op("REVERSE_V2", (1, 4, 5, 8), (1, 4, 5, 8), [2]), 148, True),
    "RSQRT": (_rsqrt, 149, True),
    "SELECT_V2": (_select_v2, 150, True),
    "SLICE": (_slice, 151, True),
    "SOFTMAX": (_softmax, 152, True),
    "SPLIT": (_split, 153, True),
    "SPLIT_V": (_split_v, 154, True),
    "SQUARED_DIFFERENCE": (_binary("SQUARED_DIFFERENCE"), 155, True),
    "SQUEEZE": (_shape_op("SQUEEZE", (1, 4, 1, 8), (4, 8)), 156, True),
    "STRIDED_SLICE": (_strided_slice, 157, True),
    "SUB": (_binary("SUB"), 158, True),
    "SUM": (_reduce("SUM", (2,)), 159, True),
    "SUM_HW": (_reduce("SUM", (1, 2)), 170, True),
    "TANH": (_unary("TANH", out=lambda g, x: _fixed_out(g, x, "tanh", 1 / 128, 0, 1 / 32768)),
             160, True),
    "TILE": (_shape_op("TILE", (1, 2, 3, 8), (1, 4, 9, 8), [1, 2, 3, 1]), 161, True),
    "TRANSPOSE": (_transpose((0, 2, 1, 3)), 162, True),
    "TRANSPOSE_CHW": (_transpose((0, 3, 1, 2)), 163, True),
    "TRANSPOSE_CONV": (_transpose_conv(2, SAME), 164, True),
    "TRANSPOSE_CONV_VALID": (_transpose_conv(2, VALID), 165, True),
    "UNPACK": (_unpack, 166, True),
    "LOGICAL_AND": (_logical("LOGICAL_AND"), 171, True),
    "LOGICAL_OR": (_logical("LOGICAL_OR"), 172, True),
    "LOGICAL_NOT": (_logical("LOGICAL_NOT"), 173, True),
    "REDUCE_ANY": (_reduce_bool("REDUCE_ANY"), 174, True),
    "REDUCE_ALL": (_reduce_bool("REDUCE_ALL"), 175, True),
    "SELECT": (_select, 176, True),
    "CAST": (_cast, 177, True),
    "SCATTER_ND": (_scatter_nd, 178, False),
    "ASSIGN_READ_VARIABLE": (_variable, 179, True),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": (_lstm, 180, True),
    "UNIDIRECTIONAL_SEQUENCE_LSTM_STATE_ZP": (lambda g, tt: _lstm(g, tt, state_zp=-20), 181,
                                              False),
    "ELU": (_elu, 111, False),  # Vela 5.2: int8 only ("must be Int8")
}


def operator_models() -> list[str]:
    """Every model name: each operator's int8 model, and ``<op>_i16`` where int16 is built."""
    return [n for op, (_, _, i16) in OPERATORS.items() for n in ([op] + [op + "_i16"] * i16)]


def build_operator(name: str) -> bytes:
    """The .tflite bytes of one single-operator model (:func:`operator_models`)."""
    op, i16 = (name[:-4], True) if name.endswith("_i16") else (name, False)
    try:
        fn, seed, has16 = OPERATORS[op]
    except KeyError:
        raise KeyError(f"unknown operator model {name!r}") from None
    if i16 and not has16:
        raise KeyError(f"no int16 model of {op}")
    g = Graph(name.lower(), seed + (1000 if i16 else 0))
    fn(g, INT16 if i16 else INT8)
    return g.to_tflite()





# --- small networks heavy in these operators (issue 28 #2) --------------------------------------

def _reduce_last(g: Graph, x: int, name: str = "MEAN") -> int:
    """MEAN over the last axis, kept (the output in the input's quantization)."""
    shape = g.shape_of(x)[:-1] + (1,)
    y = _like(g, x, shape, name.lower())
    g.ops.append(_Op(OP[name], [x, _const(g, [len(shape) - 1])], [y], OPT["REDUCER"],
                     {0: ("bool", 1)}, 2))
    return y


def _elementwise(g: Graph, name: str, a: int, b: int, shape, scale: float, zp: int) -> int:
    y = g.tensor(f"{g.name}.{name.lower()}{len(g.ops)}.out", shape, g.tensors[a].type, scale, zp)
    _op(g, name, [a, b], [y], {0: ("b", 0)} if name in ("SUB",) else None)
    return y


def layer_norm(g: Graph, x: int, spread: float) -> int:
    """Layer normalisation over the last axis as TFLite's converter writes it for int8 (no
    float operator): mean, x - mean, SQUARED_DIFFERENCE, mean, + eps, RSQRT, product.
    ``spread``: the standard deviation of x in quanta (measured on the sample input with
    LiteRT), from which the scales keep every step's values spread (x - mean about 40 quanta,
    the variance about 60)."""
    s_x, shape = g.scale_of(x), g.shape_of(x)
    mean = _reduce_last(g, x)
    d = _elementwise(g, "SUB", x, mean, shape, spread * s_x / 40.0, 0)
    s_v = (spread * s_x) ** 2 / 60.0
    sq = _elementwise(g, "SQUARED_DIFFERENCE", x, mean, shape, s_v, -128)
    var = _reduce_last(g, sq)
    eps = g.tensor(f"{g.name}.ln{len(g.ops)}.eps", (1,), INT8, s_v, -128, data=np.array([-127]))
    ve = _elementwise(g, "ADD", var, eps, g.shape_of(var), s_v, -128)
    r = g.tensor(f"{g.name}.rsqrt{len(g.ops)}.out", g.shape_of(var), INT8,
                 1.0 / math.sqrt(s_v) / 255.0, -128)
    _op(g, "RSQRT", [ve], [r])
    return _elementwise(g, "MUL", d, r, shape, 4.0 / 127.0, 0)


def _heads(g: Graph, t: int, n_heads: int) -> int:
    """[1, S, E] -> [1, heads, S, E/heads] (RESHAPE, TRANSPOSE)."""
    _, s_len, e = g.shape_of(t)
    r = g.reshape(t, (1, s_len, n_heads, e // n_heads))
    y = _like(g, r, (1, n_heads, s_len, e // n_heads), "transpose")
    _op(g, "TRANSPOSE", [r, _const(g, [0, 2, 1, 3])], [y])
    return y


def _merge_heads(g: Graph, t: int) -> int:
    _, h, s_len, d = g.shape_of(t)
    y = _like(g, t, (1, s_len, h, d), "transpose")
    _op(g, "TRANSPOSE", [t, _const(g, [0, 2, 1, 3])], [y])
    return g.reshape(y, (1, s_len, h * d))


def encoder_block(g: Graph, x: int, n_heads: int, spreads: tuple[float, float]) -> int:
    """One transformer encoder block, int8, on x [1, S, E]: Dense Q, K, V; multi-head
    attention (RESHAPE, TRANSPOSE, BATCH_MATMUL Q.K^T, scale, SOFTMAX, .V, heads merged);
    output Dense; residual ADD; layer normalisation; feed-forward Dense, GELU, Dense; residual
    ADD; layer normalisation. ``spreads``: the two layer norms' input spreads (layer_norm)."""
    e = g.shape_of(x)[-1]
    q, k, v = (_heads(g, g.fully_connected(x, e), n_heads) for _ in range(3))
    scores = g.batch_matmul(q, k, adj_y=True)
    c = g.tensor(f"{g.name}.scale{len(g.ops)}", (1,), INT8,
                 2.0 / (48.0 * g.scale_of(scores)) / 127.0, 0, data=np.array([127]))
    scaled = g.binary(MUL, scores, c)
    g.tensors[scaled].scale = [6.0 / 127.0]
    ctx = _merge_heads(g, g.batch_matmul(g.softmax(scaled), v))
    h1 = layer_norm(g, g.binary(ADD, x, g.fully_connected(ctx, e)), spreads[0])
    f = g.fully_connected(h1, 2 * e)
    act = _requant(g, f, "gelu")
    _op(g, "GELU", [f], [act], {0: ("bool", 0)})
    return layer_norm(g, g.binary(ADD, h1, g.fully_connected(act, e)), spreads[1])


def transformer_encoder(g: Graph) -> None:
    """A tiny transformer encoder: 8 tokens of 16 (Dense embeddings as its input), 2 heads."""
    g.output(encoder_block(g, g.input("x", (1, 8, 16)), 2, (12.6, 7.3)))


def vit_tiny(g: Graph) -> None:
    """A ViT-like classifier at small size: 16x16x3 image, 4x4 patches embedded by a CONV_2D
    (stride 4) into 16 tokens of 16, one encoder block with 4 heads, MEAN over the tokens,
    a Dense head of 10 classes."""
    x = g.input("image", (1, 16, 16, 3))
    patches = g.conv(x, 16, (4, 4), (4, 4), VALID)
    tokens = g.reshape(patches, (1, 16, 16))
    h = encoder_block(g, tokens, 4, (12.0, 7.0))
    pooled = _reduce_last(g, _transpose_tokens(g, h))
    g.output(g.fully_connected(g.reshape(pooled, (1, 16)), 10))


def _transpose_tokens(g: Graph, t: int) -> int:
    """[1, S, E] -> [1, E, S] (TRANSPOSE), so a MEAN over the last axis pools the tokens."""
    _, s_len, e = g.shape_of(t)
    y = _like(g, t, (1, e, s_len), "transpose")
    _op(g, "TRANSPOSE", [t, _const(g, [0, 2, 1])], [y])
    return y


def data_movement(g: Graph, tt: int = INT8) -> None:
    """A graph of data movement: PAD, TRANSPOSE, STRIDED_SLICE, CONCATENATION, RESHAPE,
    RESIZE_BILINEAR, TRANSPOSE_CONV, RESIZE_NEAREST_NEIGHBOR, a CONV_2D between them."""
    x = _in(g, (1, 6, 6, 8), tt)
    p = _like(g, x, (1, 8, 8, 8), "pad")
    _op(g, "PAD", [x, _const(g, [[0, 0], [1, 1], [1, 1], [0, 0]])], [p])
    t = _like(g, p, (1, 8, 8, 8), "transpose")
    _op(g, "TRANSPOSE", [p, _const(g, [0, 2, 1, 3])], [t])
    s = _like(g, t, (1, 4, 4, 8), "ss")
    _op(g, "STRIDED_SLICE", [t, _const(g, [0, 0, 1, 0]), _const(g, [1, 8, 8, 8]),
                             _const(g, [1, 2, 2, 1])], [s], {0: ("i", 0), 1: ("i", 0)})
    up = _like(g, s, (1, 8, 8, 8), "resize")
    _op(g, "RESIZE_BILINEAR", [s, _const(g, [8, 8])], [up], {2: ("bool", 0), 3: ("bool", 1)})
    cat = _like(g, p, (1, 8, 8, 16), "concat")
    g.tensors[up].scale, g.tensors[up].zero_point = g.tensors[p].scale, g.tensors[p].zero_point
    _op(g, "CONCATENATION", [p, up], [cat], {0: ("i", 3), 1: ("b", 0)})
    y = g.conv(cat, 8, (3, 3), (2, 2), SAME, RELU)
    if tt == INT16:
        _int16_fix(g)
    wt, ws = g._weights((8, 3, 3, 8), 0)
    wi = g.tensor(f"{g.name}.tc.w", wt.shape, INT8, ws, [0] * 8, 0, wt)
    bi = g._bias(f"{g.name}.tc.b", y, ws, 8, INT32 if tt == INT8 else INT64)
    tc = g.act(f"{g.name}.tc.out", (1, 8, 8, 8), tt, scale=g._out_scale(y, ws, 18))
    if tt == INT16:
        g.tensors[tc].zero_point = [0]
        g.tensors[tc].scale = [g.scale_of(tc) * INT16_SPREAD]
    g.ops.append(_Op(OP["TRANSPOSE_CONV"], [_const(g, [1, 8, 8, 8]), wi, y, bi], [tc],
                     OPT["TRANSPOSE_CONV"], {0: ("b", SAME), 1: ("i", 2), 2: ("i", 2),
                                             3: ("b", 0)}, 3))
    r = g.reshape(tc, (1, 16, 4, 8))
    g.output(g.resize_nearest(r, (32, 8)))


def kws_transformer(g: Graph) -> None:
    """A keyword-spotting transformer at small size (the KWT shape, scaled down): 49 frames of
    10 MFCC coefficients, a CONV_2D front-end (3x3 stride 2 + ReLU, then 1x5 across the
    coefficients) giving 25 tokens of 16, two encoder blocks with 2 heads, MEAN over the
    tokens, a Dense head of 12 keywords."""
    x = g.input("mfcc", (1, 49, 10, 1))
    f = g.conv(g.conv(x, 16, (3, 3), (2, 2), SAME, RELU), 16, (1, 5), (1, 1), VALID)
    h = g.reshape(f, (1, 25, 16))
    for spreads in ((12.0, 7.0), (8.0, 7.0)):
        h = encoder_block(g, h, 2, spreads)
    pooled = _reduce_last(g, _transpose_tokens(g, h))
    g.output(g.fully_connected(g.reshape(pooled, (1, 16)), 12))


def gated_cnn_i16(g: Graph) -> None:
    """An int16x8 network (int16 activations, zero point 0; int8 weights, int64 biases):
    CONV_2D + ReLU, DEPTHWISE_CONV_2D, residual ADD, a LOGISTIC gate and its MUL (swish-like),
    AVERAGE_POOL_2D (an output), SOFTMAX over the channels (the other output)."""
    x = _in(g, (1, 8, 8, 4), INT16)
    c = g.conv(x, 8, (3, 3), (1, 1), SAME, RELU)
    _int16_fix(g)
    d = g.depthwise(c, (3, 3), (1, 1), SAME)
    _int16_fix(g)
    a = g.binary(ADD, c, d)
    g.tensors[a].zero_point = [0]
    gate = _fixed_out(g, a, "logistic", 1 / 256, -128, 1 / 32768)
    _op(g, "LOGISTIC", [a], [gate])
    m = g.binary(MUL, a, gate)
    # a (~8000 quanta) times the gate (~16000): products of ~1.3e8 quanta, spread to ~8000
    g.tensors[m].scale, g.tensors[m].zero_point = [g.scale_of(a) * g.scale_of(gate) * 16000.0], [0]
    pooled = g.pool(m, AVERAGE_POOL_2D, (2, 2), (2, 2), VALID)
    g.output(pooled)
    g.output(g.softmax(pooled))


#: name -> (builder, seed)
NETWORK_MODELS = {
    "transformer_encoder": (transformer_encoder, 201),
    "vit_tiny": (vit_tiny, 203),
    "data_movement": (data_movement, 202),
    "data_movement_i16": (lambda g: data_movement(g, INT16), 204),
    "gated_cnn_i16": (gated_cnn_i16, 205),
    "kws_transformer": (kws_transformer, 206),
}


def build_network_model(name: str, cut: int | None = None) -> bytes:
    """The .tflite bytes of a network of :data:`NETWORK_MODELS`; with ``cut``, only its
    operators up to index ``cut``, whose output is then the graph's output (to find where
    two answers first differ)."""
    fn, seed = NETWORK_MODELS[name]
    g = Graph(name, seed)
    fn(g)
    if cut is not None:
        g.ops = g.ops[:cut + 1]
        g.outputs = [g.ops[cut].outputs[0]]
    return g.to_tflite()


__all__ = ["NETWORK_MODELS", "OPERATORS", "build_network_model", "build_operator",
           "encoder_block", "kws_transformer", "layer_norm", "operator_models"]
