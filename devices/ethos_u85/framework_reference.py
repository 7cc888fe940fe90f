"""Ethos-U85 per-layer references (issue 27 point 2): the model before Vela, run by LiteRT's
reference kernels with every intermediate tensor kept, each NPU operation of the loaded Vela
program paired with the TFLite tensor its output is.

How an operation is paired (decided from Vela 5.2.0's output, design notes "Per-layer diff,
Ethos-U85 reference"): the compiled ``*_vela.tflite`` keeps the names of the graph's inputs and
outputs only (its tensors are the command stream, flash, scratch, fast scratch, inputs,
outputs), so intermediate tensors cannot be found from it. Vela's debug database
(``--enable-debug-db``, written beside the output as ``<network>_debug.xml``) can: its
``queue`` table gives, for each kernel operation, the byte offset of its NPU_OP_* command in
the stream and the scheduled operation it runs; the ``perf`` table names that scheduled
operation's output tensor with the TFLite tensor's own name. A unit is compared where that
name is a tensor of the pre-Vela model and the unit declares its output in memory. So: fused
activations (conv + ReLU: one operation) compare with the activation's output, which carries
the same name; a convolution chained into an ADD has no output in memory (the chaining FIFO),
only the ADD compares; MEAN and SOFTMAX, which Vela lowers into several operations, compare at
the last one (the others write Vela's own tensors, ``*_intermediate`` / ``*_softmax_N``); an
operation Vela splits into several kernel operations (stripes of rows, depth slices of
channels) compares each part with its part of the tensor.

A model Vela leaves partly on the CPU (several ethos-u operators, CPU operators between them):
the one debug database numbers the streams and gives each offset in its own stream; a CPU
operator's outputs keep their TFLite names in Vela's output, so each compares with the pre-Vela
tensor of that name (floats exactly, as floats).

Differences the hardware makes on purpose (point 4), and one the reference makes by a defect
(LiteRT's int8 SUM): see :class:`_Rules`.
"""
from __future__ import annotations

import csv
import io
import math
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
from numpy.typing import DTypeLike

from ..files import read_program_file
from ..layer_diff import LayerReference, ReferenceFileError
from ..tensors import TensorSpec
from . import ops
from .listing import unit_ends
from .litert import open_litert
from .vela import (
    MAX_VELA_FILE,
    NpuStream,
    TFLiteModel,
    VelaImportError,
    _Table,
    read_tflite,
)

if TYPE_CHECKING:
    from .cpu_ops import CpuOperator, Interpreter
    from .model import EthosU85
    from .vela import VelaProgram

#: the part of a [1, H, W, C] tensor one unit writes (a slice per axis)
Index = tuple[slice, ...]
#: a rescale rule: int64 accumulators and the real multiplier to the rounded result
Rounding = Callable[[np.ndarray, float], np.ndarray]

#: the debug database of a network is a few MB at most (one CSV row per operation and tensor)
MAX_DEBUG_DB = 64 << 20
#: TFLite BuiltinOperator FULLY_CONNECTED (schema.fbs): the one int8 operator whose output
#: rounding differs between LiteRT's reference kernels (once) and the NPU (twice); LiteRT's
#: per-channel CONV_2D and DEPTHWISE_CONV_2D round twice like the NPU (design notes)
FULLY_CONNECTED = 9
RESHAPE = 22  # BuiltinOperator: no NPU operation, the same bytes
SUM = 74  # BuiltinOperator
ROUNDING_RULE = ("double rounding: Vela programs round_mode double_symmetric, which the TRM "
                 "defines as (acc*scale + 2^(shift-1) +- 2^30) >> shift ([U85-TRM: §3.6.6], "
                 "TFLite's "
                 "double rounding); LiteRT's reference FULLY_CONNECTED rounds once, so a value "
                 "near a .5 tie differs by 1 (recomputed from the layer's input as the device "
                 "wrote it, so a difference an earlier layer made is carried here)")
#: int16x8 FULLY_CONNECTED: LiteRT's reference kernel scales the 64-bit accumulator with the full
#: 31-bit multiplier and rounds once; the NPU takes Vela's 15-bit scale (design notes)
INT16_SCALE_RULE = ("15-bit scale: an int16 layer accumulates in 48 bits, whose scale is 15 bits "
                    "([U85-TRM: §3.6.6], the i48 scale/bias record); Vela rounds the layer's "
                    "31-bit "
                    "multiplier q to (q + 2^15) >> 16 with the shift 16 less and programs "
                    "round_mode natural, while LiteRT's reference int16 FULLY_CONNECTED scales "
                    "with q itself, so a value near a .5 tie differs by 1 (recomputed from the "
                    "layer's input as the device wrote it)")
#: int8 SUM: not the hardware's rule but a defect of the reference (design notes "Per-layer
#: diff: several command streams, CPU operators, a reference defect")
SUM_DEFECT_RULE = ("reference defect (LiteRT, not the hardware): LiteRT 2.3's reference SUM "
                   "reads int8 data as uint8 (reduce.cc, QuantizedMeanOrSum's kReference "
                   "branch; LiteRT issue 4079), so an int8 -3 is summed as 253 and the result "
                   "clamped to 0..255; the reference equals that wrong answer recomputed from "
                   "LiteRT's input, the device equals the true sum less n*zero point rescaled "
                   "once as Vela programs it (OFM_SCALE = TFLite's multiplier, round_mode "
                   "natural, [U85-TRM: §3.6.6]), recomputed from the layer's input as the device "
                   "wrote it")
#: every other op: a difference carried from an earlier layer, whose own line reports it
CARRIED_RULE = ("carried: LiteRT's reference kernel of this layer, run on the layer's input as "
                "the device wrote it, gives the device's values; the input's differences are "
                "reported at the layer that wrote them")


def debug_db_path(program: Path) -> Path:
    """Where Vela writes the debug database of ``<network>_vela.tflite`` / ``.npz``: the same
    output directory, ``<network>_debug.xml``."""
    stem = program.stem.removesuffix("_vela")
    return program.with_name(f"{stem}_debug.xml")


def read_debug_db(path: Path) -> tuple[dict[tuple[int, int], str], int]:
    """Vela's debug database as ({(stream, byte offset of an NPU_OP_* command in that stream):
    the name of the tensor that operation writes}, number of streams) (tables ``queue``:
    cmdstream_id, offset -> scheduled_id; ``perf``: id -> name; ``cmdstream``: the streams).
    Why a stream number: a model Vela leaves partly on the CPU has one command stream per
    ethos-u operator and ONE database for all of them, each queue offset relative to its own
    stream (Vela 5.2.0: encoder's ADDs of streams 2 and 3 both at offset 324); ``stream`` is
    the place of its cmdstream_id among the database's ids (Vela numbers the streams in the
    order it generates them, the model order of the ethos-u operators)."""
    try:
        data = read_program_file(path, MAX_DEBUG_DB, "Vela's debug database")
    except OSError as e:
        raise ReferenceFileError(f"{path}: cannot read ({e.strerror or e}); compile with "
                                 "vela --enable-debug-db so each NPU operation can be paired "
                                 "with its TFLite tensor") from None
    try:
        tables = {t.get("name"): list(csv.DictReader(io.StringIO((t.text or "").strip())))
                  for t in ET.fromstring(data).iter("table")}
        names = {int(r["id"]): r["name"] for r in tables["perf"]}
        ids = sorted({int(r["id"]) for r in tables.get("cmdstream", [])}
                     | {int(r["cmdstream_id"]) for r in tables["queue"]})
        return ({(ids.index(int(r["cmdstream_id"])), int(r["offset"])):
                 names[int(r["scheduled_id"])] for r in tables["queue"]}, len(ids))
    except (ET.ParseError, KeyError, ValueError, TypeError) as e:
        raise ReferenceFileError(f"{path}: not Vela's debug database ({type(e).__name__}: {e})") \
            from None


def _kernel_offsets(words: np.ndarray) -> dict[int, int]:
    """{byte offset of a kernel operation's NPU_OP_* command: its unit index}, units counted by
    the listing's own :func:`~.listing.unit_ends`."""
    return {c.offset: k for k, (_, c, _) in enumerate(unit_ends(words))
            if c is not None and c.name in ops.OPERATIONS}


def run_litert(path: Path, inputs: list[np.ndarray]) -> Interpreter:
    """LiteRT (ai-edge-litert) on ``path`` with its reference kernels (BUILTIN_REF, the kernels
    TFLM runs; the default XNNPACK path is not bit-exact with them), every tensor kept; the
    interpreter after the run."""
    try:
        it = open_litert(path, keep_tensors=True)
    except (ImportError, ValueError) as e:
        raise ReferenceFileError(str(e)) from None
    try:
        for d, x in zip(it.get_input_details(), inputs):
            it.set_tensor(d["index"], x)
        it.invoke()
    except (ValueError, RuntimeError) as e:
        raise ReferenceFileError(f"{path}: LiteRT cannot run it ({' '.join(str(e).split())})") \
            from None
    return cast("Interpreter", it)  # LiteRT ships no type information


def layer_references(device: EthosU85, path: Path,
                     inputs: list[np.ndarray]) -> list[LayerReference]:
    """One LayerReference per unit of the loaded Vela program whose output is a tensor of the
    pre-Vela model ``path`` (module docstring), the array in the unit's declared shape (1, H,
    W, C; the spec hides NHCWB16). ``inputs``: the program's inputs (program_io()[0]). A model
    Vela left partly on the CPU: every stream's operations (the debug database's stream
    numbers) and every CPU operator, whose outputs keep their TFLite names in Vela's output."""
    path = Path(path)
    prog = device.vela
    if prog is None or not prog.owns(device.qbase):
        raise ReferenceFileError(f"{path}: no Vela program is loaded to compare with it")
    try:
        data = read_program_file(path, MAX_VELA_FILE, "a .tflite reference")
        model = read_tflite(data, str(path))
    except OSError as e:
        raise ReferenceFileError(f"{path}: cannot read ({e.strerror or e})") from None
    except VelaImportError as e:
        raise ReferenceFileError(str(e)) from None
    if any(op.custom_code == "ethos-u" for op in model.operators):
        raise ReferenceFileError(f"{path}: this is Vela's output; give the model before Vela")
    xs = _check_inputs(path, model, prog, inputs)
    db = debug_db_path(Path(prog.path))
    names, n_db = read_debug_db(db)
    outputs = _unit_outputs(device, prog)  # (unit, stream or None, offset or slot name, name)
    streams = sum(isinstance(s, NpuStream) for s in prog.segments) if prog.segments else 1
    stray = sorted(set(names) - {(s, off) for _, s, off, _ in outputs if s is not None})
    if n_db != streams or stray:
        where = (f"names {n_db} command stream(s), the loaded program has {streams}"
                 if n_db != streams else f"names an NPU operation at offset {stray[0][1]:#x} "
                 f"of stream {stray[0][0] + 1}, where the loaded program has none")
        raise ReferenceFileError(f"{db}: Vela's debug database {where}: it belongs to another "
                                 "compilation")
    producer = {t: k for k, op in enumerate(model.operators) for t in op.outputs}
    by_name = {model.tensors[t].name: t for t in producer}
    it = run_litert(path, xs)
    groups: dict[int, list[tuple[int, TensorSpec]]] = {}
    for unit, s, key, name in outputs:
        if s is not None:
            found = names.get((s, int(key)))
            t = by_name.get(found) if found is not None else None
        else:
            t = by_name.get(name)
        want = "output" if s is not None else str(key)
        spec = next((x for x in device.unit_tensors(unit) if x.name == want), None)
        if t is not None and spec is not None:
            groups.setdefault(t, []).append((unit, spec))
    rules = _Rules(model, data, it)
    refs = []
    for t, members in groups.items():
        full = rules.reference(t)
        for unit, spec, index in _stripes(full, members):
            refs.append(LayerReference(unit, model.tensors[t].name,
                                       full[index].reshape(spec.shape).astype(spec.dtype),
                                       tensor=spec.name,
                                       explain=rules.explainer(t, index), rule=rules.rule(t)))
    return sorted(refs, key=lambda r: r.unit)


def _unit_outputs(device: EthosU85, prog: VelaProgram
                  ) -> list[tuple[int, int | None, int | str, str]]:
    """Every unit that may write a tensor, in program order: (unit, stream number, byte offset
    of its NPU_OP_* command in that stream, "") for an NPU kernel operation; (unit, None, its
    declared tensor's name "output"/"output2"..., the TFLite tensor name) for each output of
    a CPU operator (Vela keeps the names of the CPU operators' tensors)."""
    if not prog.segments:
        return [(k, 0, off, "") for off, k in sorted(_kernel_offsets(device.stream.words())
                                                     .items(), key=lambda kv: kv[1])]
    out: list[tuple[int, int | None, int | str, str]] = []
    stream: dict[int, int] = {}  # id of a stream -> its number
    offsets: dict[int, dict[int, int]] = {}  # stream number -> {unit within it: offset}
    for unit, (_, seg, k) in enumerate(device.listing.program_units(prog)):
        if isinstance(seg, NpuStream):
            s = stream.setdefault(id(seg), len(stream))
            if s not in offsets:
                offsets[s] = {i: off for off, i in
                              _kernel_offsets(device.listing.segment_words(seg)).items()}
            if k in offsets[s]:
                out.append((unit, s, offsets[s][k], ""))
        else:
            out += [(unit, None, f"output{j + 1 if j else ''}", t.name)
                    for j, t in enumerate(cast("CpuOperator", seg).outputs)]
    return out


def _check_inputs(path: Path, model: TFLiteModel, prog: VelaProgram, inputs: list[np.ndarray]
                  ) -> list[np.ndarray]:
    """The inputs reshaped to the model's, refusing a model whose inputs are not the loaded
    program's (Vela keeps the graph inputs' names, shapes and types)."""
    want = model.graph_inputs()
    if len(want) != len(prog.inputs) or len(inputs) != len(want):
        raise ReferenceFileError(f"{path}: the model has {len(want)} input(s), the loaded "
                                 f"program {len(prog.inputs)}")
    out = []
    for t, slot, x in zip(want, prog.inputs, inputs):
        if (t.name, tuple(t.shape), t.dtype) != (slot.name, tuple(slot.shape), slot.dtype):
            raise ReferenceFileError(
                f"{path}: input '{t.name}' {tuple(t.shape)} {t.dtype} is not the loaded "
                f"program's input '{slot.name}' {tuple(slot.shape)} {slot.dtype}: give the "
                "model that Vela compiled")
        out.append(np.asarray(x).reshape(t.shape).astype(t.dtype))
    return out


def _stripes(full: np.ndarray, members: list[tuple[int, TensorSpec]]
             ) -> Iterator[tuple[int, TensorSpec, Index]]:
    """(unit, spec, index) of each unit writing part of ``full`` [1, H, W, C]: Vela splits an
    operation along one axis (stripes of rows; depth slices of channels when its weights are
    split), the parts in order; a unit whose part is not the next run along that axis (or a
    tensor with more than 4 axes) is left out, with every unit after it. A unit writing the
    whole tensor in another shape of the same size compares it reshaped."""
    if full.ndim != 4:
        return
    at = 0
    for unit, spec in members:
        split = [a for a in range(1, 4) if spec.shape[a] != full.shape[a]]
        if len(members) == 1 and (not split or math.prod(spec.shape) == full.size):
            # the whole tensor; Vela may view an NHWC tensor in another shape (a
            # FULLY_CONNECTED on [1, 8, 16] tokens runs on 2 x 4 x 16, SUM's [1, 4, 1, 8] is
            # written as 2 x 1 x 16): the same bytes, row-major
            yield unit, spec, (slice(None),) * 4
            return
        if len(split) != 1 or at + spec.shape[split[0]] > full.shape[split[0]]:
            return
        index = [slice(None)] * 4
        index[split[0]] = slice(at, at + spec.shape[split[0]])
        yield unit, spec, tuple(index)
        at += spec.shape[split[0]]


# --- point 4: differences the hardware makes on purpose ---------------------------------------

class _Rules:
    """The rules that explain differences, per TFLite tensor ``t`` of the model:

    * rounding (FULLY_CONNECTED with int8 data and constant weights): the reference equals
      the op's output rounded once (TFLite's single rounding, BUILTIN_REF's) from LiteRT's
      input, and the device equals it rounded twice (the TRM's double_symmetric, [U85-TRM: §3.6.6])
      from the input as the device wrote it; both recomputed in integers from the op's
      weights, bias, fused activation and TFLite's QuantizeMultiplier of the model's scales;
    * carried (every other op): the device equals what LiteRT's reference kernel of that op
      computes from the input as the device wrote it (LiteRT run on that operator alone);
    * reference defect (int8 SUM, SUM_DEFECT_RULE): not a hardware rule; the reference equals
      LiteRT's int8-as-uint8 answer recomputed from LiteRT's input, the device the NPU's
      rescale of the true sum recomputed from the input as the device wrote it.

    "The input as the device wrote it": the device's array of each compared tensor, kept when
    the comparison calls ``explain`` with it (only where it differs from the reference, so
    elsewhere it is LiteRT's); an input the comparison never sees (a graph input, or one that
    Vela keeps in a chaining FIFO or its own tensors) is taken as LiteRT's. The arrays are
    those of the last run: the references hold for the inputs they were read with, and the
    same inputs give the same run. Precise: a corrupted weight, bias or scale of the op moves
    the device away from the recomputed value and stays a divergence; a difference in the
    input is reported at the unit that wrote it."""

    def __init__(self, model: TFLiteModel, data: bytes, it: Interpreter) -> None:
        self.model, self.data, self.it = model, data, it
        self.producer = {t: k for k, op in enumerate(model.operators) for t in op.outputs}
        self.seen: dict[int, np.ndarray] = {}  # tensor -> the device's array, [1, H, W, C]
        #: op index -> LiteRT running that op alone (None: it cannot)
        self.alone: dict[int, Interpreter | None] = {}

    def reference(self, t: int) -> np.ndarray:
        """LiteRT's tensor ``t`` as [1, H, W, C] (a lower rank padded in front)."""
        a = self.it.get_tensor(t)
        return a.reshape((1,) * (4 - a.ndim) + a.shape) if a.ndim <= 4 else a

    def rule(self, t: int) -> str:
        if self._sum_axes(self.producer[t]) is not None:
            return SUM_DEFECT_RULE
        kind = self._rounding(self.producer[t])
        if kind is None:
            return CARRIED_RULE
        return {"int8": ROUNDING_RULE, "int16": INT16_SCALE_RULE}.get(kind, CARRIED_RULE)

    def _sum_axes(self, k: int) -> tuple[int, ...] | None:
        """The reduced axes of op ``k`` if it is an int8 SUM with constant axes (the reference
        defect, SUM_DEFECT_RULE), else None."""
        op, m = self.model.operators[k], self.model
        if op.builtin_code != SUM or len(op.inputs) < 2 or min(op.inputs[:2]) < 0:
            return None
        x_t, a_t, y_t = m.tensors[op.inputs[0]], m.tensors[op.inputs[1]], m.tensors[op.outputs[0]]
        raw = m.buffers[a_t.buffer] if 0 < a_t.buffer < len(m.buffers) else b""
        if x_t.dtype != np.int8 or y_t.dtype != np.int8 or not raw:
            return None
        axes = np.frombuffer(raw, a_t.dtype).astype(np.int64) % len(x_t.shape)
        return tuple(sorted({int(a) for a in axes}))

    def _sum(self, k: int, x: np.ndarray, litert: bool) -> np.ndarray:
        """Int8 SUM op ``k`` of ``x`` as [1, H, W, C]: ``litert``: LiteRT 2.3's reference
        answer (each int8 read as its uint8 byte, MultiplyByQuantizedMultiplier -- double
        rounding --, + zero point, clamped to 0..255, the byte read back signed); else the
        NPU's (the sum of the int8 values less n * input zero point, rescaled by TFLite's
        multiplier with one natural rounding, the OFM_SCALE Vela programs, + zero point,
        clamped to int8)."""
        op, m = self.model.operators[k], self.model
        x_t, y_t = m.tensors[op.inputs[0]], m.tensors[op.outputs[0]]
        axes = self._sum_axes(k)
        assert axes is not None, "_sum() of an op that is not an int8 SUM"
        x = np.asarray(x, np.int8).reshape(x_t.shape)
        n = math.prod(x.shape[a] for a in axes)
        acc = (x.view(np.uint8) if litert else x).astype(np.int64).sum(axis=axes, keepdims=True)
        acc -= n * int(x_t.zero_point[0])
        real = float(x_t.scale[0]) / float(y_t.scale[0])
        y = (_double_rounding if litert else _single_rounding)(acc, real) + int(y_t.zero_point[0])
        y = np.clip(y, 0, 255).astype(np.uint8).view(np.int8) if litert else \
            np.clip(y, -128, 127).astype(np.int8)
        out: np.ndarray = y.reshape(y_t.shape)
        return out.reshape((1,) * (4 - out.ndim) + out.shape)

    def _rounding(self, k: int) -> str | None:
        """Which rescale rule op ``k`` has: "int8" (int8 FULLY_CONNECTED: single vs double
        rounding), "int16" (int16x8 FULLY_CONNECTED: 31-bit vs Vela's 15-bit scale), None
        (every other op; weights computed at run time included)."""
        op = self.model.operators[k]
        if op.builtin_code != FULLY_CONNECTED or len(op.inputs) < 2 or min(op.inputs[:2]) < 0:
            return None
        x_t, w_t, y_t = (self.model.tensors[i] for i in (op.inputs[0], op.inputs[1],
                                                         op.outputs[0]))
        b_t = self.model.tensors[op.inputs[2]] if len(op.inputs) > 2 and op.inputs[2] >= 0 \
            else None
        if w_t.dtype != np.int8 or w_t.buffer == 0:
            return None
        if x_t.dtype == y_t.dtype == np.int8 and (b_t is None or b_t.dtype == np.int32):
            return "int8"
        if x_t.dtype == y_t.dtype == np.int16 and (b_t is None or b_t.dtype == np.int64):
            return "int16"
        return None

    def device_value(self, t: int) -> np.ndarray:
        """Tensor ``t`` as the device wrote it, in the model's shape (class docstring); a
        RESHAPE's output (no NPU operation: the same bytes) is its input's."""
        shape = self.it.get_tensor(t).shape
        a = self.seen.get(t)
        if a is None and t in self.producer:
            op = self.model.operators[self.producer[t]]
            if op.builtin_code == RESHAPE and op.inputs and op.inputs[0] >= 0:
                a = self.device_value(op.inputs[0])
        return self.it.get_tensor(t) if a is None else a.reshape(shape)

    def explainer(self, t: int, index: Index) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """``explain`` of the part ``index`` of tensor ``t`` that one unit writes."""
        def explain(dev: np.ndarray, ref: np.ndarray) -> np.ndarray:
            found: np.ndarray  # (numpy types an array comparison as Any)
            if t not in self.seen:
                self.seen[t] = self.reference(t).copy()
            self.seen[t][index] = dev.reshape(self.seen[t][index].shape)
            k = self.producer[t]
            if self._sum_axes(k) is not None:  # the reference's defect, not the hardware's
                x = self.model.operators[k].inputs[0]
                wrong = self._sum(k, self.it.get_tensor(x), litert=True)
                right = self._sum(k, self.device_value(x), litert=False)
                found = ((ref == wrong[index].reshape(ref.shape))
                         & (dev == right[index].reshape(dev.shape)) & (dev != ref))
                return found
            kind = self._rounding(k)
            if kind:
                single = self._requantized(k, self.it.get_tensor(self.model.operators[k]
                                                                 .inputs[0]), _single_rounding)
                npu = _double_rounding if kind == "int8" else _reduced_scale_rounding
                double = self._requantized(k, self.device_value(self.model.operators[k]
                                                                .inputs[0]), npu)
                ok = (ref == single[index].reshape(ref.shape))
                found = ok & (dev == double[index].reshape(dev.shape)) & (dev != ref)
                return found
            carried = self._alone(k)
            if carried is None:
                return np.zeros(dev.shape, bool)
            found = (dev == carried[index].reshape(dev.shape)) & (dev != ref)
            return found
        return explain

    def _requantized(self, k: int, x: np.ndarray, rounding: Rounding) -> np.ndarray:
        """Op ``k``'s int8 or int16 output [1, H, W, C] for input ``x`` with ``rounding``."""
        op, m = self.model.operators[k], self.model
        x_t, w_t, y_t = m.tensors[op.inputs[0]], m.tensors[op.inputs[1]], m.tensors[op.outputs[0]]
        options = _options(self.data, k)
        lo, hi = _activation_range(options, float(y_t.scale[0]), int(y_t.zero_point[0]),
                                   y_t.dtype)
        acc = _accumulators(m, k, x)
        real = float(x_t.scale[0]) * np.asarray(w_t.scale, np.float64) / float(y_t.scale[0])
        real = np.broadcast_to(real, (acc.shape[-1],))
        y = np.stack([rounding(acc[..., c], r) for c, r in enumerate(real)], -1)
        out: np.ndarray = np.clip(y + int(y_t.zero_point[0]), lo, hi)
        return out.reshape((1,) * (4 - out.ndim) + out.shape)

    def _alone(self, k: int) -> np.ndarray | None:
        """LiteRT's reference kernel of op ``k`` on its inputs as the device wrote them, as
        [1, H, W, C]; None where LiteRT cannot run the op alone (:func:`_op_alone`)."""
        op = self.model.operators[k]
        if all(np.array_equal(self.device_value(i), self.it.get_tensor(i))
               for i in op.inputs if i >= 0):
            return None  # the inputs are LiteRT's: the op's own output is the reference
        if k not in self.alone:
            self.alone[k] = _op_alone(self.data, self.model, k)
        it = self.alone[k]
        if it is None:
            return None
        try:
            for i in op.inputs:
                if i >= 0:
                    it.set_tensor(i, np.ascontiguousarray(self.device_value(i)))
            it.invoke()
            y = it.get_tensor(op.outputs[0])
        except (ValueError, RuntimeError):  # LiteRT refuses: nothing explained, no crash
            return None
        return y.reshape((1,) * (4 - y.ndim) + y.shape)


def _options(data: bytes, op_index: int) -> _Table | None:
    """The builtin options table of operator ``op_index`` (subgraph 0): Operator slot 4
    (schema.fbs: opcode_index 0, inputs 1, outputs 2, builtin_options_type 3, options 4)."""
    model = _Table(data, int.from_bytes(data[:4], "little"))
    return model.tables(2)[0].tables(3)[op_index].table(4)


def _op_alone(data: bytes, model: TFLiteModel, k: int) -> Interpreter | None:
    """A LiteRT interpreter (reference kernels) that runs operator ``k`` of the model alone:
    the model's bytes with three offsets changed in place -- the subgraph's inputs and
    outputs are operator k's own input and output vectors, and every entry of its operator
    vector is operator k (LiteRT refuses to run an operator whose input has no data, and the
    Python API cannot start a graph in the middle). None where the layout does not allow it
    (a flatbuffer offset can only point forward) or LiteRT refuses the result."""
    buf = bytearray(data)
    root = _Table(data, int.from_bytes(data[:4], "little"))
    sg = root.tables(2)[0]
    start, n = sg._vector(3)
    op_pos = start + 4 * k + int.from_bytes(data[start + 4 * k:start + 4 * k + 4], "little")
    op_t = _Table(data, op_pos)

    def point(field: int, target: int | None) -> bool:
        if field == 0 or target is None or target <= field:
            return False
        buf[field:field + 4] = (target - field).to_bytes(4, "little")
        return True
    ok = all(point(sg.pos + sg._off(slot) if sg._off(slot) else 0, op_t._ref(own))
             for slot, own in ((1, 1), (2, 2)))  # SubGraph inputs 1, outputs 2
    ok = ok and all(point(start + 4 * i, op_pos) for i in range(n))
    if not ok:
        return None
    try:
        return cast("Interpreter", open_litert(bytes(buf), keep_tensors=True))
    except ValueError:
        return None


def _activation_range(o: _Table | None, scale: float, zp: int,
                      dtype: DTypeLike = np.int8) -> tuple[int, int]:
    """TFLite's CalculateActivationRangeQuantized for an int8/int16 output: the fused activation
    (FullyConnectedOptions slot 0: NONE 0, RELU 1, RELU_N1_TO_1 2, RELU6 3) quantized with
    TfLiteRound (half away from zero)."""
    act = o.scalar(0, "b") if o else 0

    def q(v: float) -> int:
        return zp + int(math.copysign(math.floor(abs(v / scale) + 0.5), v))
    qmin, qmax = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    lo, hi = {1: (q(0.0), qmax), 2: (q(-1.0), q(1.0)), 3: (q(0.0), q(6.0))}.get(act, (qmin, qmax))
    return max(lo, qmin), min(hi, qmax)


def _quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier: real = q * 2^(e - 31), q in [2^30, 2^31)."""
    frac, e = math.frexp(real)
    q = round(frac * (1 << 31))
    if q == 1 << 31:
        q, e = q // 2, e + 1
    return q, e


def _single_rounding(acc: np.ndarray, real: float) -> np.ndarray:
    """MultiplyByQuantizedMultiplier, TFLITE_SINGLE_ROUNDING: (acc*q + 2^(s-1)) >> s."""
    q, e = _quantize_multiplier(real)
    s = 31 - e
    return (acc * q + (1 << (s - 1))) >> s


def _double_rounding(acc: np.ndarray, real: float) -> np.ndarray:
    """gemmlowp's SaturatingRoundingDoublingHighMul (nudge, then toward zero) followed by
    RoundingDivideByPOT (round half away from zero) -- the TRM's double_symmetric."""
    q, e = _quantize_multiplier(real)
    ab = (acc << max(e, 0)) * q
    hi = np.where(ab >= 0, (ab + (1 << 30)) >> 31, -((-ab + (1 << 30) - 1) >> 31))
    right = max(-e, 0)
    mask = (1 << right) - 1
    return (hi >> right) + ((hi & mask) > (mask >> 1) + (hi < 0))


def _reduced_scale_rounding(acc: np.ndarray, real: float) -> np.ndarray:
    """The NPU's rescale of an int16 layer as Vela 5.2 programs it: the 48-bit accumulator
    times a 15-bit scale ([U85-TRM: §3.6.6]: an i48 rescale asserts a 16-bit signed scale), the
    31-bit multiplier q rounded to (q + 2^15) >> 16 (0x7FFF at the top) with the shift 16
    less, then round_mode natural, (x + 2^(s-1)) >> s (TRM rounded_shift_right, [U85-TRM: §3.6.6]).
    Checked against the scale records and NPU_SET_OFM_SCALE Vela writes for int16x8
    FULLY_CONNECTED (tests/ethos_u85/test_ethosu85_diff_reference.py)."""
    q, e = _quantize_multiplier(real)
    m = (q + (1 << 15)) >> 16 if q < 0x7FFF0000 else 0x7FFF
    s = 15 - e
    return (acc * m + (1 << (s - 1))) >> s if s > 0 else acc * m << -s


def _accumulators(model: TFLiteModel, op_index: int, x: np.ndarray) -> np.ndarray:
    """FULLY_CONNECTED's int64 accumulators (bias included) for input ``x`` (the op's input
    tensor's shape and quantization), in plain numpy, never the device's kernels."""
    op = model.operators[op_index]
    x_t, w_t = model.tensors[op.inputs[0]], model.tensors[op.inputs[1]]
    x = x.astype(np.int64) - int(x_t.zero_point[0])
    w = np.frombuffer(model.buffers[w_t.buffer], np.int8).reshape(w_t.shape).astype(np.int64)
    bias: int | np.ndarray = 0
    if len(op.inputs) > 2 and op.inputs[2] >= 0:
        b_t = model.tensors[op.inputs[2]]
        bias = np.frombuffer(model.buffers[b_t.buffer], b_t.dtype).astype(np.int64)
    return (x.reshape(-1, w.shape[1]) @ w.T + bias).reshape(model.tensors[op.outputs[0]].shape)
