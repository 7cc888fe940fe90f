"""Whole int8 networks of real architectures, written by the project (no TensorFlow).

The small models of :mod:`testkit.ethosu85_models` have random integer weights and scales; the
networks here are quantized the way TFLite's converter quantizes a trained float model, so the
numbers Vela and the NPU see are those of deployed models: float weights (He-normal), BatchNorm
folded into the preceding convolution or dense layer with running statistics taken from the
layer's own pre-BN activations on a calibration batch (mean and variance jittered a little, as a
trained network's running averages are), activation ranges calibrated on that batch, then
TFLite's int8 scheme (public: per-channel symmetric weights, int32 bias at input x weight
scale, asymmetric int8 activations whose range includes 0, average pooling keeping its input's
quantization, softmax output scale 1/256 with zero point -128).

Architectures (public MLPerf Tiny v1.0 reference models and Keras applications, layer lists
only): ResNet-8 (image classification, 32x32x3), DS-CNN small (keyword spotting, 49x10x1 MFCC
input: its 1-channel first convolution is where Vela picks sparse 2:4 weights), MobileNet v1
alpha 0.25 (visual wake words) and MobileNet v2 alpha 0.35, both at 96x96x3, and the dense
autoencoder of the anomaly-detection benchmark (640 inputs). Each network is built with its
softmax or ending with the logits (``<arch>`` / ``<arch>_logits``).
"""
from __future__ import annotations

import math

import numpy as np

from .ethosu85_models import (
    ADD,
    AVERAGE_POOL_2D,
    CONV_2D,
    DEPTHWISE_CONV_2D,
    FULLY_CONNECTED,
    INT8,
    INT32,
    MEAN,
    NONE,
    OPT_ADD,
    OPT_CONV,
    OPT_DW,
    OPT_FC,
    OPT_REDUCER,
    OPT_SOFTMAX,
    RELU,
    RELU6,
    SAME,
    SOFTMAX,
    VALID,
    Graph,
    _Op,
)

BN_EPS = 1e-3  # Keras BatchNormalization's default epsilon


class FloatNet:
    """A quantized TFLite graph built alongside the float network it stands for.

    Every tensor has its float values on the calibration batch (``self.f``); each layer
    computes its float output from its float input, then writes the quantized operator."""

    def __init__(self, name: str, seed: int, batch: int = 8) -> None:
        self.g = Graph(name, seed)
        self.rng = self.g.rng
        self.batch = batch
        self.f: dict[int, np.ndarray] = {}

    # -- quantization ----------------------------------------------------------------------
    @staticmethod
    def qparams(v: np.ndarray) -> tuple[float, int]:
        """TFLite's asymmetric int8 parameters for the range of v (widened to include 0)."""
        lo, hi = min(float(v.min()), 0.0), max(float(v.max()), 0.0)
        if hi - lo < 1e-6:
            hi = lo + 1e-6
        scale = (hi - lo) / 255.0
        zp = int(np.clip(round(-128 - lo / scale), -128, 127))
        return scale, zp

    def _act(self, name: str, v: np.ndarray, scale=None, zp=None) -> int:
        if scale is None:
            scale, zp = self.qparams(v)
        t = self.g.tensor(name, (1,) + v.shape[1:], INT8, scale, zp)
        self.f[t] = v
        return t

    def _name(self, kind: str) -> str:
        return f"{self.g.name}.{kind}{len(self.g.ops)}"

    def input(self, shape, lo: float, hi: float) -> int:
        """A graph input, calibrated on uniform values in [lo, hi]."""
        v = self.rng.uniform(lo, hi, size=(self.batch,) + tuple(shape[1:]))
        t = self._act("input", v)
        self.g.inputs.append(t)
        return t

    def output(self, t: int) -> None:
        self.g.outputs.append(t)

    def _bn(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(multiplier, offset) of a BatchNorm over the last axis of z with running statistics
        near z's own and random affine parameters."""
        axes = tuple(range(z.ndim - 1))
        mean = z.mean(axis=axes) + self.rng.normal(0, 0.05, z.shape[-1]) * z.std(axis=axes)
        var = z.var(axis=axes) * self.rng.uniform(0.8, 1.25, z.shape[-1]) + 1e-6
        gamma = self.rng.uniform(0.5, 1.5, z.shape[-1])
        beta = self.rng.normal(0, 0.3, z.shape[-1])
        mul = gamma / np.sqrt(var + BN_EPS)
        return mul, beta - mean * mul

    def _bn_or_bias(self, z: np.ndarray, w: np.ndarray, bn: bool
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(weights, output, bias) after a BatchNorm folded into the weights (output channels
        on w's first axis), or after a random bias."""
        if bn:
            mul, b = self._bn(z)
            return w * mul.reshape((-1,) + (1,) * (w.ndim - 1)), z * mul + b, b
        b = self.rng.normal(0, 0.1, z.shape[-1])
        return w, z + b, b

    @staticmethod
    def _activate(v: np.ndarray, act: int) -> np.ndarray:
        if act == RELU:
            return np.maximum(v, 0)
        if act == RELU6:
            return np.clip(v, 0, 6)
        return v

    def _weights(self, name: str, w: np.ndarray, axis: int,
                 per_channel: bool) -> tuple[int, np.ndarray]:
        """int8 symmetric weights (per channel along axis, else per tensor): (tensor, scales)."""
        red = tuple(i for i in range(w.ndim) if i != axis)
        amax = np.abs(w).max(axis=red) if per_channel else np.full(1, np.abs(w).max())
        scale = np.maximum(amax, 1e-9) / 127.0
        shape = [1] * w.ndim
        shape[axis] = -1
        q = np.clip(np.round(w / (scale.reshape(shape) if per_channel else scale[0])), -127, 127)
        t = self.g.tensor(name, w.shape, INT8, scale, [0] * scale.size, axis if per_channel else 0,
                          q.astype(np.int64))
        return t, scale

    def _bias(self, name: str, b: np.ndarray, s_in: float, s_w: np.ndarray) -> int:
        bs = s_in * s_w
        q = np.round(b / (bs if bs.size == b.size else bs[0]))
        q = np.clip(q, -(1 << 31), (1 << 31) - 1).astype(np.int64)
        return self.g.tensor(name, b.shape, INT32, bs, [0] * bs.size, 0, q)

    # -- layers ----------------------------------------------------------------------------
    def conv(self, x: int, cout: int, k=(3, 3), stride=(1, 1), padding=SAME, act=RELU,
             bn: bool = True) -> int:
        v = self.f[x]
        cin = v.shape[-1]
        w = self.rng.normal(0, math.sqrt(2.0 / (k[0] * k[1] * cin)), (cout, k[0], k[1], cin))
        w, z, b = self._bn_or_bias(_conv(v, w, stride, padding), w, bn)
        y = self._activate(z, act)
        name = self._name("conv")
        wi, ws = self._weights(name + ".w", w, 0, True)
        bi = self._bias(name + ".b", b, self.g.scale_of(x), ws)
        yt = self._act(name + ".out", y)
        self.g.ops.append(_Op(CONV_2D, [x, wi, bi], [yt], OPT_CONV,
                              {0: ("b", padding), 1: ("i", stride[1]), 2: ("i", stride[0]),
                               3: ("b", act), 4: ("i", 1), 5: ("i", 1)}, 3))
        return yt

    def depthwise(self, x: int, k=(3, 3), stride=(1, 1), padding=SAME, act=RELU) -> int:
        v = self.f[x]
        c = v.shape[-1]
        w = self.rng.normal(0, math.sqrt(2.0 / (k[0] * k[1])), (k[0], k[1], c))
        z = _depthwise(v, w, stride, padding)
        mul, b = self._bn(z)
        w = w * mul
        y = self._activate(z * mul + b, act)
        name = self._name("dw")
        wi, ws = self._weights(name + ".w", w[None], 3, True)
        bi = self._bias(name + ".b", b, self.g.scale_of(x), ws)
        yt = self._act(name + ".out", y)
        self.g.ops.append(_Op(DEPTHWISE_CONV_2D, [x, wi, bi], [yt], OPT_DW,
                              {0: ("b", padding), 1: ("i", stride[1]), 2: ("i", stride[0]),
                               3: ("i", 1), 4: ("b", act), 5: ("i", 1), 6: ("i", 1)}, 3))
        return yt

    def dense(self, x: int, units: int, act=NONE, bn: bool = False) -> int:
        v = self.f[x]
        cin = v.shape[-1]
        w = self.rng.normal(0, math.sqrt(2.0 / cin), (units, cin))
        w, z, b = self._bn_or_bias(v @ w.T, w, bn)
        y = self._activate(z, act)
        name = self._name("fc")
        wi, ws = self._weights(name + ".w", w, 0, False)
        bi = self._bias(name + ".b", b, self.g.scale_of(x), ws)
        yt = self._act(name + ".out", y)
        self.g.ops.append(_Op(FULLY_CONNECTED, [x, wi, bi], [yt], OPT_FC, {0: ("b", act)}, 4))
        return yt

    def add(self, a: int, b: int, act=NONE) -> int:
        y = self._activate(self.f[a] + self.f[b], act)
        yt = self._act(self._name("add") + ".out", y)
        self.g.ops.append(_Op(ADD, [a, b], [yt], OPT_ADD, {0: ("b", act)}, 2))
        return yt

    def avg_pool(self, x: int, k) -> int:
        """VALID average pooling with stride = kernel (the MLPerf models' global pooling);
        TFLite's int8 kernel keeps the input quantization."""
        v = self.f[x]
        n, h, w, c = v.shape
        oh, ow = h // k[0], w // k[1]
        y = v[:, :oh * k[0], :ow * k[1]].reshape(n, oh, k[0], ow, k[1], c).mean(axis=(2, 4))
        yt = self.g.pool(x, AVERAGE_POOL_2D, k, k, VALID)
        self.f[yt] = y
        return yt

    def mean(self, x: int) -> int:
        """MEAN over H and W without keep_dims (what Keras' GlobalAveragePooling2D becomes)."""
        y = self.f[x].mean(axis=(1, 2))
        axes = self.g.tensor(self._name("mean") + ".axes", (2,), INT32, data=np.array([1, 2]))
        yt = self._act(self._name("mean") + ".out", y)
        self.g.ops.append(_Op(MEAN, [x, axes], [yt], OPT_REDUCER, {0: ("bool", 0)}, 2))
        return yt

    def flatten(self, x: int) -> int:
        v = self.f[x]
        y = v.reshape(v.shape[0], -1)
        yt = self.g.reshape(x, (1, y.shape[1]))  # the input's quantization
        self.f[yt] = y
        return yt

    def softmax(self, x: int) -> int:
        v = self.f[x]
        e = np.exp(v - v.max(axis=-1, keepdims=True))
        yt = self._act(self._name("softmax") + ".out", e / e.sum(axis=-1, keepdims=True),
                       1.0 / 256.0, -128)
        self.g.ops.append(_Op(SOFTMAX, [x], [yt], OPT_SOFTMAX, {0: ("f", 1.0)}, 2))
        return yt


# --- float reference layers (calibration only) -----------------------------------------------

def _pad_same(v: np.ndarray, k, stride) -> np.ndarray:
    """TensorFlow's SAME padding (the extra row/column after)."""
    h, w = v.shape[1:3]
    ph = max((-(-h // stride[0]) - 1) * stride[0] + k[0] - h, 0)
    pw = max((-(-w // stride[1]) - 1) * stride[1] + k[1] - w, 0)
    return np.pad(v, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))


def _windows(v: np.ndarray, k, stride, padding) -> np.ndarray:
    if padding == SAME:
        v = _pad_same(v, k, stride)
    win = np.lib.stride_tricks.sliding_window_view(v, k, axis=(1, 2))
    return win[:, ::stride[0], ::stride[1]]  # [n, oh, ow, c, kh, kw]


def _conv(v: np.ndarray, w: np.ndarray, stride, padding) -> np.ndarray:
    win = _windows(v, w.shape[1:3], stride, padding)
    return np.einsum("nhwcij,oijc->nhwo", win, w, optimize=True)


def _depthwise(v: np.ndarray, w: np.ndarray, stride, padding) -> np.ndarray:
    win = _windows(v, w.shape[:2], stride, padding)
    return np.einsum("nhwcij,ijc->nhwc", win, w, optimize=True)


# --- architectures ------------------------------------------------------------------------------

def _head(n: FloatNet, x: int, classes: int, softmax: bool) -> None:
    y = n.dense(x, classes)
    n.output(n.softmax(y) if softmax else y)


def resnet8(n: FloatNet, softmax: bool) -> None:
    """MLPerf Tiny image classification ResNet-8: 3 residual stacks of 16/32/64 filters, the
    strided stacks with a 1x1 strided convolution on the shortcut, 8x8 average pool, 10 classes."""
    x = n.input((1, 32, 32, 3), 0.0, 1.0)
    x = n.conv(x, 16, (3, 3))
    for filters, stride in ((16, 1), (32, 2), (64, 2)):
        y = n.conv(x, filters, (3, 3), (stride, stride))
        y = n.conv(y, filters, (3, 3), act=NONE)
        if stride > 1:
            x = n.conv(x, filters, (1, 1), (stride, stride), act=NONE, bn=False)
        x = n.add(y, x, RELU)
    x = n.flatten(n.avg_pool(x, (8, 8)))
    _head(n, x, 10, softmax)


def ds_cnn(n: FloatNet, softmax: bool) -> None:
    """MLPerf Tiny keyword spotting DS-CNN: a 10x4 stride-2 convolution to 64 channels, four
    depthwise-separable blocks, average pool over the remaining 25x5, 12 keywords."""
    x = n.input((1, 49, 10, 1), -30.0, 30.0)
    x = n.conv(x, 64, (10, 4), (2, 2))
    for _ in range(4):
        x = n.depthwise(x, (3, 3))
        x = n.conv(x, 64, (1, 1))
    x = n.flatten(n.avg_pool(x, (25, 5)))
    _head(n, x, 12, softmax)


def _make_divisible(v: float, d: int = 8) -> int:
    """Keras MobileNet's channel rounding (to a multiple of 8, never below 90% of v)."""
    r = max(d, int(v + d / 2) // d * d)
    return r + d if r < 0.9 * v else r


def mobilenet_v1(n: FloatNet, softmax: bool, size: int = 96, alpha: float = 0.25,
                 classes: int = 2) -> None:
    """MobileNet v1 (visual wake words: alpha 0.25, 96x96, 2 classes), ReLU6, global average
    pooling as MEAN."""
    x = n.input((1, size, size, 3), 0.0, 1.0)
    x = n.conv(x, int(32 * alpha), (3, 3), (2, 2), act=RELU6)
    for filters, stride in ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                            (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2),
                            (1024, 1)):
        x = n.depthwise(x, (3, 3), (stride, stride), act=RELU6)
        x = n.conv(x, int(filters * alpha), (1, 1), act=RELU6)
    _head(n, n.mean(x), classes, softmax)


def mobilenet_v2(n: FloatNet, softmax: bool, size: int = 96, alpha: float = 0.35,
                 classes: int = 10) -> None:
    """MobileNet v2 (alpha 0.35, 96x96): inverted residual blocks (expansion t, channels c,
    repeats r, first stride s), linear bottlenecks, residual ADD when shapes agree, a
    1280-channel 1x1 convolution, MEAN."""
    x = n.input((1, size, size, 3), 0.0, 1.0)
    x = n.conv(x, _make_divisible(32 * alpha), (3, 3), (2, 2), act=RELU6)
    for t, c, r, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        out = _make_divisible(c * alpha)
        for i in range(r):
            cin = n.g.shape_of(x)[-1]
            y = n.conv(x, cin * t, (1, 1), act=RELU6) if t != 1 else x
            y = n.depthwise(y, (3, 3), (s, s) if i == 0 else (1, 1), act=RELU6)
            y = n.conv(y, out, (1, 1), act=NONE)
            x = n.add(x, y) if (i > 0 and cin == out) else y
    x = n.conv(x, 1280, (1, 1), act=RELU6)
    _head(n, n.mean(x), classes, softmax)


def autoencoder(n: FloatNet, softmax: bool) -> None:
    """MLPerf Tiny anomaly detection dense autoencoder: 640 -> 4x128 -> 8 -> 4x128 -> 640,
    BatchNorm and ReLU after every hidden layer."""
    x = n.input((1, 640), -3.0, 3.0)
    for units in (128, 128, 128, 128, 8, 128, 128, 128, 128):
        x = n.dense(x, units, RELU, bn=True)
    y = n.dense(x, 640)
    n.output(n.softmax(y) if softmax else y)


#: architecture -> (builder, seed)
ARCHITECTURES = {
    "resnet8": (resnet8, 101),
    "ds_cnn": (ds_cnn, 102),
    "mobilenet_v1_025": (mobilenet_v1, 103),
    "mobilenet_v2_035": (mobilenet_v2, 104),
    "autoencoder": (autoencoder, 105),
}

#: every network: the architecture with its softmax, and ``_logits`` without it
NETWORKS = [a + suffix for a in ARCHITECTURES for suffix in ("", "_logits")]


def build_network(name: str) -> bytes:
    """The .tflite bytes of one network (same bytes on every call and machine)."""
    arch, logits = (name[:-7], True) if name.endswith("_logits") else (name, False)
    try:
        fn, seed = ARCHITECTURES[arch]
    except KeyError:
        raise KeyError(f"unknown network {name!r}; known: {', '.join(NETWORKS)}") from None
    n = FloatNet(name, seed)
    fn(n, softmax=not logits)
    return n.g.to_tflite()
