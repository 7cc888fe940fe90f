"""Import Vela's output for the Ethos-U85 and place it in the device as the driver stack does.

What users bring (docs/design-notes.md, "Programs"): Vela's ``*_vela.tflite`` or its
``--output-format raw`` ``*_vela.npz``, plus an input tensor. Both carry the same parts (public
facts from Vela 5.2's ``rawdata_writer.py`` / ``tflite_writer.py``, TFLM's
``kernels/ethos_u/ethosu.cc`` and the Ethos-U core driver's ``ethosu_driver.c``):

* the *custom operator payload* ("COP1"): 32-bit little-endian words, the fourcc ``COP1``, then
  driver actions ``tag = command | reserved << 8 | param << 16``: OPTIMIZER_CONFIG (1; two
  more words: the CONFIG and ID register values the stream was compiled for), COMMAND_STREAM
  (2; length in words = reserved << 16 | param, the NPU command words follow), NOP (5). Vela pads
  with NOPs so the command words start 16-byte aligned, and the driver refuses a stream or a
  base address that is not 16-byte aligned;
* the read-only "flash" tensor (weight and scale streams, DMA sources), region 0;
* the scratch tensor (the TFLM arena part the NPU uses; its size only), region 1, which also
  holds the graph's input and output tensors at offsets Vela chose; in a ``_vela.tflite`` they
  are the ``OfflineMemoryAllocation`` metadata (int32 words: version, subgraph count, tensor
  count, then one arena offset per tensor, -1 = not planned), in the .npz ``input_offset`` /
  ``output_offset`` with their ``*_region``;
* the scratch-fast tensor (size only), region 2: the driver replaces its address by the
  platform's fast memory (``FAST_MEMORY_BASE_ADDR_INDEX 2``).

The ethos-u custom operator's inputs are [command stream, flash, scratch, scratch_fast,
ifm...], its outputs [ofm...]; TFLM gives the driver base addresses in that order without the
command stream: BASEP0 = flash, BASEP1 = arena, BASEP2 = fast scratch, BASEP3.. = each IFM then
each OFM (at most 8). The driver soft-resets the NPU, programs MEM_ATTR/QCONFIG/REGIONCFG with
its U85 defaults (MEM_ATTR0/1 SRAM port, MEM_ATTR2/3 EXT port; QCONFIG 2; REGIONCFG region0 3,
region1 0, regions 2-7 1: flash and command stream over the EXT port, arena over SRAM), writes
BASEPn, QBASE, QSIZE and CMD.transition_to_running_state.

Memory placement here (a Corstone-style system): the whole payload then the flash tensor in the
``dram`` window ("flash"), the arena at the start of ``sram`` and the fast scratch after it.
A ``*_vela.tflite`` with operators Vela left on the CPU holds several ethos-u operators (one
stream each) with TFLite operators between them, every non-constant tensor in the one arena
(:func:`_with_cpu_operators`; design notes "Ethos-U85: operators Vela leaves on the CPU"): the
host program starts each stream and hands each CPU operator to the device (cpu_ops.py) in turn.

After :func:`load_vela_program` the NPU is running and sits halted before its first command,
like every program the debugger holds; after a run to the end :func:`read_outputs` reads every
output back (:func:`read_output` one).
"""
from __future__ import annotations

import functools
import io
import math
import re
import struct
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..device import ProgramOptions
from ..errors import DeviceError
from ..files import mib, read_program_file
from ..host import Call, Check, CheckResult, HostProgram, Step, WaitIrq, unit_output
from ..ranges import merge_ranges


class VelaImportError(ValueError):
    """A Vela output file that cannot be run: the message names the file and what is wrong."""


# --- a minimal, bounds-checked FlatBuffers reader (TFLite schema) ------------------------------

class _Table:
    __slots__ = ("buf", "pos", "vt", "vtlen")

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf, self.pos = buf, pos
        self.vt = pos - struct.unpack_from("<i", buf, pos)[0]
        self.vtlen = struct.unpack_from("<H", buf, self.vt)[0]

    def _off(self, slot: int) -> int:
        o = 4 + 2 * slot
        return struct.unpack_from("<H", self.buf, self.vt + o)[0] if o < self.vtlen else 0

    def scalar(self, slot: int, fmt: str, default=0):
        o = self._off(slot)
        return struct.unpack_from("<" + fmt, self.buf, self.pos + o)[0] if o else default

    def _ref(self, slot: int) -> int | None:
        o = self._off(slot)
        if not o:
            return None
        p = self.pos + o
        return p + struct.unpack_from("<I", self.buf, p)[0]

    def table(self, slot: int) -> _Table | None:
        p = self._ref(slot)
        return None if p is None else _Table(self.buf, p)

    def _vector(self, slot: int) -> tuple[int, int]:
        p = self._ref(slot)
        if p is None:
            return 0, 0
        return p + 4, struct.unpack_from("<I", self.buf, p)[0]

    def tables(self, slot: int) -> list[_Table]:
        start, n = self._vector(slot)
        out = []
        for i in range(n):
            p = start + 4 * i
            out.append(_Table(self.buf, p + struct.unpack_from("<I", self.buf, p)[0]))
        return out

    def array(self, slot: int, dtype: str) -> np.ndarray:
        start, n = self._vector(slot)
        return np.frombuffer(self.buf, dtype=dtype, count=n, offset=start) if n else \
            np.zeros(0, dtype=dtype)

    def bytes(self, slot: int) -> bytes:
        start, n = self._vector(slot)
        if start + n > len(self.buf):
            raise IndexError("vector runs past the end of the file")
        return bytes(self.buf[start:start + n])

    def string(self, slot: int) -> str:
        return self.bytes(slot).decode("utf-8", "replace")


#: TFLite TensorType -> numpy dtype (schema.fbs)
TFLITE_DTYPES = {0: np.float32, 1: np.float16, 2: np.int32, 3: np.uint8, 4: np.int64, 6: np.bool_,
                 7: np.int16, 9: np.int8, 10: np.float64, 12: np.uint64, 15: np.uint32,
                 16: np.uint16}


@dataclass
class TFLiteTensor:
    name: str
    shape: tuple[int, ...]
    type: int
    buffer: int
    scale: np.ndarray
    zero_point: np.ndarray
    is_variable: bool = False  # state a stateful operator keeps (LSTM, resource variables)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(TFLITE_DTYPES.get(self.type, np.uint8))

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass
class TFLiteOperator:
    opcode: int
    builtin_code: int
    custom_code: str
    inputs: list[int]
    outputs: list[int]


@dataclass
class TFLiteModel:
    tensors: list[TFLiteTensor]
    operators: list[TFLiteOperator]
    inputs: list[int]
    outputs: list[int]
    buffers: list[bytes]
    metadata: dict[str, bytes]
    subgraph_count: int

    def graph_inputs(self) -> list[TFLiteTensor]:
        return [self.tensors[i] for i in self.inputs]

    def graph_outputs(self) -> list[TFLiteTensor]:
        return [self.tensors[i] for i in self.outputs]


def read_tflite(data: bytes, name: str = "model") -> TFLiteModel:
    """Parse the parts of a TFLite flatbuffer this project uses (subgraph 0)."""
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise VelaImportError(f"{name}: not a TFLite flatbuffer (no 'TFL3' identifier)")
    try:
        model = _Table(data, struct.unpack_from("<I", data, 0)[0])
        buffers = []
        for b in model.tables(4):  # Buffer: data 0, offset 1, size 2
            off, size = b.scalar(1, "Q"), b.scalar(2, "Q")
            if off > 1:  # large models keep buffer data after the flatbuffer
                if off + size > len(data):
                    raise IndexError("buffer data runs past the end of the file")
                buffers.append(bytes(data[off:off + size]))
            else:
                buffers.append(b.bytes(0))
        codes = []
        for c in model.tables(1):  # OperatorCode: deprecated 0, custom 1, version 2, builtin 3
            codes.append((max(c.scalar(0, "b"), c.scalar(3, "i")), c.string(1)))
        metadata = {}
        for m in model.tables(6):  # Metadata: name 0, buffer 1
            idx = m.scalar(1, "I")
            metadata[m.string(0)] = buffers[idx] if idx < len(buffers) else b""
        subgraphs = model.tables(2)
        if not subgraphs:
            raise VelaImportError(f"{name}: the model has no subgraph")
        sg = subgraphs[0]
        tensors = []
        for t in sg.tables(0):  # Tensor: shape 0, type 1, buffer 2, name 3, quantization 4,
            q = t.table(4)      # is_variable 5
            tensors.append(TFLiteTensor(
                t.string(3), tuple(int(d) for d in t.array(0, "<i4")), t.scalar(1, "b"),
                t.scalar(2, "I"),
                q.array(2, "<f4") if q else np.zeros(0, np.float32),
                q.array(3, "<i8") if q else np.zeros(0, np.int64), bool(t.scalar(5, "B"))))
        ops = []
        for o in sg.tables(3):  # Operator: opcode_index 0, inputs 1, outputs 2
            idx = o.scalar(0, "I")
            builtin, custom = codes[idx] if idx < len(codes) else (-1, "")
            ops.append(TFLiteOperator(idx, builtin, custom, o.array(1, "<i4").tolist(),
                                      o.array(2, "<i4").tolist()))
        return TFLiteModel(tensors, ops, sg.array(1, "<i4").tolist(), sg.array(2, "<i4").tolist(),
                           buffers, metadata, len(subgraphs))
    except (struct.error, IndexError, ValueError) as e:
        if isinstance(e, VelaImportError):
            raise
        raise VelaImportError(f"{name}: corrupt TFLite flatbuffer ({e})") from None


@functools.cache
def _builtin_names() -> dict[int, str]:
    """TFLite's BuiltinOperator enum (schema.fbs) as number -> name, taken from the schema module
    that ethos-u-vela generates from TFLite's schema (``ethosu.vela.tflite.BuiltinOperator``):
    whoever brings Vela's output has Vela, and reading its copy keeps the names in step with the
    schema Vela writes. Empty when Vela is not installed here (names then fall back to numbers)."""
    try:
        from ethosu.vela.tflite.BuiltinOperator import BuiltinOperator
    except ImportError:
        return {}
    return {v: k for k, v in vars(BuiltinOperator).items()
            if not k.startswith("_") and isinstance(v, int)}


def operator_name(op: TFLiteOperator) -> str:
    """How messages name an operator: its custom code, or its BuiltinOperator name
    ("DEQUANTIZE"; "builtin operator 6" when the names are not available)."""
    if op.custom_code:
        return op.custom_code
    return _builtin_names().get(op.builtin_code, f"builtin operator {op.builtin_code}")


def no_npu_operator(m: TFLiteModel) -> str:
    """Why a TFLite model without an 'ethos-u' operator has nothing for the NPU: Vela's output
    (it writes OfflineMemoryAllocation metadata) whose every operator Vela left on the CPU, or
    a model Vela has not compiled; float tensors named, as Vela leaves those on the CPU (its
    supported-operator check takes integer feature maps only)."""
    names = list(dict.fromkeys(operator_name(op) for op in m.operators))
    used = {t for op in m.operators for t in op.inputs + op.outputs if t >= 0}
    floats = "/".join(sorted({str(m.tensors[t].dtype) for t in used
                              if t < len(m.tensors) and m.tensors[t].dtype.kind == "f"}))
    if "OfflineMemoryAllocation" not in m.metadata:
        return (f"not compiled by Vela, and its {floats} tensors would stay on the CPU: quantize "
                "the model to int8/int16, then compile it with vela" if floats else
                "no 'ethos-u' custom operator: compile it with vela first")
    ops_text = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
    return (f"Vela placed every operator on the CPU: {ops_text or 'no operator'}"
            + (f" on {floats} tensors, which the NPU does not take; quantize the model to "
               "int8/int16 and compile it again" if floats else ""))


# --- the program ------------------------------------------------------------------------------

DA_OPTIMIZER_CONFIG, DA_COMMAND_STREAM, DA_NOP = 1, 2, 5  # driver actions (ethosu_driver.c)
COP1 = 0x31504F43  # "COP1", Custom Operator Payload 1
REGION_FLASH, REGION_SCRATCH, REGION_FAST = 0, 1, 2
ALIGN = 16  # the driver's MASK_16_BYTE_ALIGN for the command stream and every base address


@dataclass
class TensorSlot:
    """A graph input or output: where it lives (region + offset) and what it holds."""
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    region: int
    offset: int
    address: int = 0  # set by load_vela_program

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass
class VelaProgram:
    path: str
    kind: str  # "tflite" or "npz"
    payload: bytes  # the whole COP1 custom operator payload
    command_offset: int  # byte offset of the NPU command words in payload
    command_words: int
    config: tuple[int, int] | None  # OPTIMIZER_CONFIG: (CONFIG, ID) the stream was built for
    flash: bytes  # read-only tensor (region 0)
    scratch_size: int
    scratch_fast_size: int
    inputs: list[TensorSlot]
    outputs: list[TensorSlot]
    regions: dict[str, int] = field(default_factory=lambda: {
        "flash": REGION_FLASH, "scratch": REGION_SCRATCH, "scratch_fast": REGION_FAST})
    # placement (set by load_vela_program)
    qbase: int = 0
    basep: dict[int, int] = field(default_factory=dict)
    #: a model Vela left partly on the CPU: its ethos-u operators (NpuStream) and CPU operators
    #: (cpu_ops.CpuOperator) in model order; empty for a model mapped wholly to the NPU
    segments: list = field(default_factory=list)
    #: int8 variable tensors (LSTM state) with a non-zero zero point, each with the byte TFLM
    #: resets it to at AllocateTensors (the zero point; every other variable starts at 0, as
    #: the cleared arena holds)
    state: list[tuple[TensorSlot, int]] = field(default_factory=list)

    def owns(self, qbase: int) -> bool:
        """Whether QBASE ``qbase`` is this program's: its stream, or for a model with CPU
        operators one of its streams or none yet (the driver's soft reset leaves QBASE 0)."""
        if not self.segments:
            return qbase == self.qbase
        return qbase == 0 or any(isinstance(s, NpuStream) and s.qbase == qbase
                                 for s in self.segments)

    @property
    def command_stream(self) -> bytes:
        return self.payload[self.command_offset:self.command_offset + 4 * self.command_words]

    def summary(self) -> str:
        ins = ", ".join(f"{t.name} {'x'.join(map(str, t.shape))} {t.dtype}" for t in self.inputs)
        outs = ", ".join(f"{t.name} {'x'.join(map(str, t.shape))} {t.dtype}"
                         for t in self.outputs)
        if self.segments:
            npu = [s for s in self.segments if isinstance(s, NpuStream)]
            return (f"{Path(self.path).name}: Vela {self.kind}, {len(npu)} NPU command streams "
                    f"({sum(s.command_words for s in npu)} command words) and "
                    f"{len(self.segments) - len(npu)} CPU operators, {self.scratch_size} B "
                    f"arena; in: {ins}; out: {outs}")
        return (f"{Path(self.path).name}: Vela {self.kind}, {self.command_words} command words, "
                f"{len(self.flash)} B flash, {self.scratch_size} B arena, "
                f"{self.scratch_fast_size} B fast scratch; in: {ins}; out: {outs}")


@dataclass
class NpuStream:
    """One ethos-u operator of a model Vela left partly on the CPU: its COP1 payload (command
    words at ``command_offset``), its read-only tensor (model tensor ``flash_id``), and the
    arena tensors TFLM hands the driver as BASEP3.. (``ifms`` then ``ofms``)."""
    index: int  # operator position in the model
    payload: bytes
    command_offset: int
    command_words: int
    config: tuple[int, int] | None
    flash_id: int
    flash: bytes
    ifms: list[TensorSlot]
    ofms: list[TensorSlot]
    qbase: int = 0  # placement
    basep: dict[int, int] = field(default_factory=dict)


def parse_payload(payload: bytes, where: str) -> tuple[int, int, tuple[int, int] | None]:
    """(byte offset of the command words, their count, OPTIMIZER_CONFIG (config, id) or None)
    of a COP1 payload, walked as the core driver's ethosu_invoke does."""
    if len(payload) < 4 or len(payload) % 4:
        raise VelaImportError(f"{where}: custom operator payload of {len(payload)} bytes "
                              "(must be a non-empty multiple of 4)")
    words = np.frombuffer(payload, dtype="<u4")
    if int(words[0]) != COP1:
        raise VelaImportError(f"{where}: custom operator payload does not start with 'COP1' "
                              f"(first word {int(words[0]):#010x})")
    i, config, stream = 1, None, None
    while i < len(words):
        tag = int(words[i])
        action, reserved, param = tag & 0xFF, (tag >> 8) & 0xFF, tag >> 16
        if action == DA_OPTIMIZER_CONFIG:
            if i + 3 > len(words):
                raise VelaImportError(f"{where}: truncated OPTIMIZER_CONFIG record at word {i}")
            config = (int(words[i + 1]), int(words[i + 2]))
            i += 3
        elif action == DA_COMMAND_STREAM:
            n = reserved << 16 | param
            if i + 1 + n > len(words):
                raise VelaImportError(f"{where}: COMMAND_STREAM record at word {i} says {n} "
                                      f"words but only {len(words) - i - 1} follow")
            if stream is not None:  # Vela writes one command stream per operator
                raise VelaImportError(f"{where}: more than one COMMAND_STREAM record")
            stream = (4 * (i + 1), n)
            i += 1 + n
        elif action == DA_NOP:
            i += 1
        else:
            raise VelaImportError(f"{where}: unsupported driver action {action} at word {i} "
                                  f"(tag {tag:#010x})")
    if stream is None:
        raise VelaImportError(f"{where}: the payload has no COMMAND_STREAM record")
    if stream[0] % ALIGN:
        raise VelaImportError(f"{where}: command stream at payload offset {stream[0]:#x} is not "
                              "16-byte aligned (the driver refuses it)")
    return stream[0], stream[1], config


def _from_tflite(path: Path, data: bytes) -> VelaProgram:
    m = read_tflite(data, str(path))
    npu = [i for i, op in enumerate(m.operators) if op.custom_code == "ethos-u"]
    if not npu:
        raise VelaImportError(f"{path}: a TFLite model with no NPU operator ({no_npu_operator(m)})")
    for i in npu:
        if len(m.operators[i].inputs) < 4:
            raise VelaImportError(f"{path}: the ethos-u operator {i} has "
                                  f"{len(m.operators[i].inputs)} inputs, Vela writes at least "
                                  "4 (command stream, flash, scratch, scratch_fast)")
    op = m.operators[npu[0]]
    cms, flash, scratch, fast = (m.tensors[t] for t in op.inputs[:4])

    def buf(t: TFLiteTensor) -> bytes:
        return m.buffers[t.buffer] if t.buffer < len(m.buffers) else b""

    payload = buf(cms)
    offset, n, config = parse_payload(payload, f"{path}: tensor '{cms.name}'")
    plan = m.metadata.get("OfflineMemoryAllocation")
    if plan is None:
        raise VelaImportError(f"{path}: no OfflineMemoryAllocation metadata (Vela writes the "
                              "arena offsets of the input and output tensors there)")
    pw = np.frombuffer(plan[:len(plan) // 4 * 4], dtype="<i4")
    if len(pw) < 3 or len(pw) < 3 + int(pw[2]):
        raise VelaImportError(f"{path}: OfflineMemoryAllocation metadata is truncated")
    offsets = pw[3:3 + int(pw[2])]

    def slot(t: int) -> TensorSlot:
        tt = m.tensors[t]
        if t >= len(offsets) or offsets[t] < 0:
            raise VelaImportError(f"{path}: tensor '{tt.name}' has no arena offset in the "
                                  "OfflineMemoryAllocation metadata")
        if tt.type not in TFLITE_DTYPES:
            raise VelaImportError(f"{path}: tensor '{tt.name}' has unsupported type {tt.type}")
        return TensorSlot(tt.name, tt.shape, tt.dtype, REGION_SCRATCH, int(offsets[t]))

    # TFLM's MicroInterpreterGraph::ResetVariableTensors fills each variable tensor with its
    # zero point if int8, else 0 (the cleared arena); Vela's output keeps them variable, with
    # their quantization
    state = [(slot(i), int(t.zero_point[0]) & 0xFF) for i, t in enumerate(m.tensors)
             if t.is_variable and t.type == 9 and len(t.zero_point) and t.zero_point[0]]
    if len(m.operators) > 1:
        prog = _with_cpu_operators(path, data, m, slot, buf)
        prog.state = state
        return prog
    extra_in = {m.tensors[t].name for t in op.inputs[4:] if t not in m.inputs}
    extra_out = {m.tensors[t].name for t in op.outputs if t not in m.outputs}
    # state (READ_VARIABLE/ASSIGN_VARIABLE's variables, an LSTM's output and cell state): Vela
    # passes each to the operator as one more input and one or more outputs of the same name
    # (an LSTM writes its state once per time step), state that stays in the arena (at its
    # OfflineMemoryAllocation offset) between inferences, not a graph input or output
    if not set(m.inputs) <= set(op.inputs[4:]) or not set(m.outputs) <= set(op.outputs) \
            or extra_in != extra_out:
        raise VelaImportError(f"{path}: the graph's inputs/outputs are not those of the ethos-u "
                              "operator")
    return VelaProgram(str(path), "tflite", payload, offset, n, config, buf(flash),
                       int(np.prod(scratch.shape)) if scratch.shape else 0,
                       int(np.prod(fast.shape)) if fast.shape else 0,
                       [slot(t) for t in m.inputs], [slot(t) for t in m.outputs], state=state)


def _with_cpu_operators(path: Path, data: bytes, m: TFLiteModel, slot, buf) -> VelaProgram:
    """A ``*_vela.tflite`` with several operators: ethos-u operators (each its own command
    stream) and the operators Vela left on the CPU between them, run by LiteRT's reference
    kernels as TFLM runs them (design notes "Ethos-U85: operators Vela leaves on the CPU").
    Every non-constant tensor lies in the arena at the offset Vela planned (slot); the arena
    is as large as the scratch tensor or the furthest planned tensor. VelaImportError naming
    the operator for one that cannot run: a custom operator other than ethos-u (no reference
    kernel), or one LiteRT cannot run alone."""
    from .cpu_ops import CpuOperator
    from .framework_reference import _op_alone

    segments: list = []
    arena = 0
    for i, op in enumerate(m.operators):
        if op.custom_code == "ethos-u":
            cms, flash = m.tensors[op.inputs[0]], m.tensors[op.inputs[1]]
            payload = buf(cms)
            off, n, config = parse_payload(payload, f"{path}: operator {i} (ethos-u), tensor "
                                           f"'{cms.name}'")
            seg = NpuStream(i, payload, off, n, config, op.inputs[1], buf(flash),
                            [slot(t) for t in op.inputs[4:] if t >= 0],
                            [slot(t) for t in op.outputs if t >= 0])
            arena = max([arena] + [t.offset + t.nbytes for t in seg.ifms + seg.ofms])
            segments.append(seg)
            continue
        name = operator_name(op)
        if op.custom_code:
            raise VelaImportError(f"{path}: operator {i} ({name}) is a custom operator that "
                                  "Vela left on the CPU; LiteRT's reference kernels have no "
                                  "kernel for it, so it cannot run here")
        ins = [t for t in op.inputs if t >= 0 and not buf(m.tensors[t])]  # not constants
        outs = [t for t in op.outputs if t >= 0]
        try:
            slots_in, slots_out = [slot(t) for t in ins], [slot(t) for t in outs]
        except VelaImportError as e:
            raise VelaImportError(f"{e} (operator {i}, {name}, on the CPU)") from None
        try:
            it = _op_alone(data, m, i)
        except ImportError:
            raise VelaImportError(f"{path}: operator {i} ({name}) runs on the CPU, by LiteRT's "
                                  "reference kernels, which are not installed: pip install "
                                  "ai-edge-litert") from None
        if it is None:
            raise VelaImportError(f"{path}: operator {i} ({name}) runs on the CPU, and LiteRT's "
                                  "reference kernels (the kernels TFLM runs there) refuse it: an "
                                  "operator, tensor type or option they do not implement")
        arena = max([arena] + [t.offset + t.nbytes for t in slots_in + slots_out])
        segments.append(CpuOperator(i, name, slots_in, slots_out, ins, outs, it))
    first = next(s for s in segments if isinstance(s, NpuStream))
    scratch, fast = (m.tensors[t] for t in m.operators[first.index].inputs[2:4])
    return VelaProgram(str(path), "tflite", first.payload, first.command_offset,
                       first.command_words, first.config, first.flash,
                       max(arena, int(np.prod(scratch.shape)) if scratch.shape else 0),
                       int(np.prod(fast.shape)) if fast.shape else 0,
                       [slot(t) for t in m.inputs], [slot(t) for t in m.outputs],
                       segments=segments)


_NPZ_DTYPES = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


def raw(a: np.ndarray) -> bytes:
    """The bytes of an .npz entry: Vela stores its byte blobs as bytes objects (a 0-d array of
    dtype S) or numeric arrays. tobytes() for both: ``item()`` / ``tolist()`` of an S array
    drop trailing zero bytes (a weight blob ending in zeros came out short)."""
    return a.tobytes()


#: largest Vela output file read (model, weights and command stream: Ethos-U85 systems keep
#: models of tens of MB in flash)
MAX_VELA_FILE = 256 << 20
#: largest --input / --expect file read (the tensors of one inference, some MB at most)
MAX_TENSOR_FILE = 256 << 20
#: bytes the arrays of one .npz may unpack to (checked against the sizes its directory and its
#: .npy headers declare, before anything is inflated or allocated)
MAX_NPZ_UNPACKED = 256 << 20


def _read_tensor_file(path: Path) -> bytes:
    """An --input / --expect file: regular files only, at most MAX_TENSOR_FILE bytes."""
    try:
        return read_program_file(path, MAX_TENSOR_FILE, "a tensor file (.npy/.npz)")
    except OSError as e:
        raise VelaImportError(f"{path}: cannot read ({e.strerror or e})") from None


def _check_npy_header(f, size: int, where: str) -> None:
    """An .npy header declares the array's shape and type, and numpy allocates that much
    before it reads the data: the array must fit in the ``size`` bytes that hold it."""
    version = np.lib.format.read_magic(f)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
        np.lib.format.read_array_header_2_0  # 3.0 differs from 2.0 only in its encoding
    shape, _, dtype = read_header(f)
    need = math.prod(shape) * dtype.itemsize
    if need > size:
        raise VelaImportError(f"{where}: its header declares {need} bytes of array data; the "
                              f"file holds {size}")


def np_load(data: bytes, path: str | Path, what: str):
    """np.load of a file's bytes (never unpickling) after checking what its arrays will take: a
    200-byte .npy or .npz could otherwise claim terabytes (a member inflates to the size its
    zip directory declares, and numpy allocates what an .npy header declares). Every .npz
    member together at most MAX_NPZ_UNPACKED; each array within the bytes that hold it.
    VelaImportError "<path>: <what> (<reason>)" for an unreadable file."""
    try:
        if data[:4] == b"PK\x03\x04":
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                infos = zf.infolist()
                total = sum(i.file_size for i in infos)
                if total > MAX_NPZ_UNPACKED:
                    raise VelaImportError(f"{path}: its arrays unpack to {total} bytes; at most "
                                          f"{mib(MAX_NPZ_UNPACKED)} per .npz")
                for i in infos:
                    if i.filename.endswith(".npy"):
                        with zf.open(i) as f:
                            _check_npy_header(f, i.file_size, f"{path}: {i.filename}")
        elif data[:6] == b"\x93NUMPY":
            _check_npy_header(io.BytesIO(data), len(data), str(path))
        return np.load(io.BytesIO(data), allow_pickle=False)
    except VelaImportError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise VelaImportError(f"{path}: {what} ({e})") from None


def _from_npz(path: Path, data: bytes) -> VelaProgram:
    z = np_load(data, path, "not a readable .npz archive")
    need = ("cmd_data", "weight_data", "weight_region", "scratch_size", "scratch_region",
            "scratch_fast_size", "scratch_fast_region", "input_shape", "input_elem_size",
            "input_region", "input_offset", "output_shape", "output_elem_size",
            "output_region", "output_offset")
    with z:
        missing = [k for k in need if k not in z.files]
        if missing:
            raise VelaImportError(f"{path}: not Vela's raw output: missing {', '.join(missing)}")
        try:
            v = {k: z[k] for k in need}
        except ValueError as e:
            raise VelaImportError(f"{path}: unreadable entry ({e})") from None

    payload = raw(v["cmd_data"])
    offset, n, config = parse_payload(payload, f"{path}: cmd_data")
    regions = {"flash": int(v["weight_region"]), "scratch": int(v["scratch_region"]),
               "scratch_fast": int(v["scratch_fast_region"])}

    def slots(kind: str) -> list[TensorSlot]:
        shapes, sizes = v[f"{kind}_shape"], v[f"{kind}_elem_size"]
        regs, offs = v[f"{kind}_region"], v[f"{kind}_offset"]
        out = []
        for i in range(len(sizes)):
            es_ = int(sizes[i])
            if es_ not in _NPZ_DTYPES:
                raise VelaImportError(f"{path}: {kind} {i} has element size {es_}")
            shape = tuple(int(d) for d in shapes[i])
            while len(shape) > 4 and shape[0] == 1:  # Vela pads shapes to 6-D
                shape = shape[1:]
            out.append(TensorSlot(f"{kind}{i}", shape, np.dtype(_NPZ_DTYPES[es_]), int(regs[i]),
                                  int(offs[i])))
        return out

    return VelaProgram(str(path), "npz", payload, offset, n, config, raw(v["weight_data"]),
                       int(v["scratch_size"]), int(v["scratch_fast_size"]), slots("input"),
                       slots("output"), regions)


def container_kind(head: bytes) -> str | None:
    """"npz" (a zip archive: Vela's --output-format raw), "tflite" (a TFL3 flatbuffer) or None,
    from a file's first 8 bytes."""
    if head[:4] == b"PK\x03\x04":
        return "npz"
    if head[4:8] == b"TFL3":
        return "tflite"
    return None


def read_vela(path: str | Path) -> VelaProgram:
    """Parse a ``*_vela.tflite`` or Vela raw ``.npz`` (chosen by content)."""
    path = Path(path)
    try:
        data = read_program_file(path, MAX_VELA_FILE, "Vela's output")
    except OSError as e:
        raise VelaImportError(f"{path}: cannot read: {e.strerror or e}") from None
    kind = container_kind(data)
    if kind == "npz":
        return _from_npz(path, data)
    if kind == "tflite":
        return _from_tflite(path, data)
    raise VelaImportError(f"{path}: neither a Vela .tflite (TFL3 flatbuffer) nor a Vela raw "
                          ".npz (zip archive)")


# --- finding the command stream (accelstub disasm) --------------------------------------------

#: MACs per cycle of an Ethos-U85 configuration, by CONFIG.macs_per_cc (log2); the model's
#: MAC_CONFIGS has the same keys
U85_MACS = {7: 128, 8: 256, 9: 512, 10: 1024, 11: 2048}
U85_PRODUCT = 2  # CONFIG.product of the Ethos-U85 (the model's CONFIG reset value)


@dataclass(frozen=True)
class FoundStream:
    """A command stream inside a container file: where it was found, its words (little-endian
    bytes, QREAD 0 at the first) and the OPTIMIZER_CONFIG record (CONFIG, ID) beside it."""

    where: str
    words: bytes
    payload_offset: int
    config: tuple[int, int] | None


def config_text(config: tuple[int, int] | None) -> str:
    """The OPTIMIZER_CONFIG record as a person reads it: the CONFIG/ID words and the MACs."""
    if config is None:
        return "no configuration record"
    cfg, ident = config
    macs = U85_MACS.get(cfg & 0xF) if cfg >> 28 == U85_PRODUCT else None
    what = f"Ethos-U85 with {macs} MACs/cycle" if macs else \
        f"product {cfg >> 28}, macs_per_cc {cfg & 0xF}: not an Ethos-U85 configuration"
    return f"compiled for CONFIG {cfg:#010x} ID {ident:#010x} ({what})"


def macs_of(config: tuple[int, int], where: str) -> int:
    """MACs per cycle named by an OPTIMIZER_CONFIG record; VelaImportError listing the
    Ethos-U85's configurations when the record names none of them (a U55 stream, say)."""
    cfg = config[0]
    macs = U85_MACS.get(cfg & 0xF)
    if cfg >> 28 != U85_PRODUCT or macs is None:
        valid = ", ".join(map(str, U85_MACS.values()))
        raise VelaImportError(
            f"{where}: the stream's configuration record (CONFIG {cfg:#010x}: product "
            f"{cfg >> 28}, macs_per_cc {cfg & 0xF}, i.e. {1 << (cfg & 0xF)} MACs/cycle) is not an "
            f"Ethos-U85 configuration; the Ethos-U85 has {valid} MACs/cycle (compile with vela "
            f"--accelerator-config ethos-u85-N)")
    return macs


def find_command_streams(data: bytes, name: str) -> list[FoundStream] | None:
    """The command streams a Vela output file holds, by content: a ``*_vela.tflite`` (the
    payload of each ethos-u custom operator), a raw ``.npz`` (its ``cmd_data``) or a bare COP1
    payload; the driver-action header is skipped. None when ``data`` is none of these (a raw
    stream); VelaImportError for a container that holds no command stream (a TFLite model not
    compiled by Vela, another .npz, a .npy array), so that no container is listed as words."""
    def one(payload: bytes, where: str) -> FoundStream:
        off, n, config = parse_payload(payload, where)
        return FoundStream(where, payload[off:off + 4 * n], off, config)

    kind = container_kind(data)
    if kind == "npz":
        try:
            with np_load(data, name, "not a readable .npz archive") as z:
                if "cmd_data" not in z.files:
                    raise VelaImportError(f"{name}: an .npz without Vela's cmd_data array "
                                          f"(it holds {', '.join(z.files[:8]) or 'nothing'}): "
                                          "not Vela's --output-format raw output")
                cmd = z["cmd_data"]
        except (OSError, ValueError, zipfile.BadZipFile) as e:
            if isinstance(e, VelaImportError):
                raise
            raise VelaImportError(f"{name}: not a readable .npz archive ({e})") from None
        return [one(raw(cmd), f"{name}: cmd_data")]
    if kind == "tflite":
        m = read_tflite(data, name)
        found = []
        for i, op in enumerate(m.operators):
            if op.custom_code == "ethos-u" and op.inputs:
                t = m.tensors[op.inputs[0]]
                payload = m.buffers[t.buffer] if t.buffer < len(m.buffers) else b""
                found.append(one(payload, f"{name}: operator {i} (ethos-u), tensor '{t.name}'"))
        if not found:
            raise VelaImportError(f"{name}: a TFLite model with no NPU operator, so no command "
                                  f"stream ({no_npu_operator(m)})")
        return found
    if data[:6] == b"\x93NUMPY":
        raise VelaImportError(f"{name}: a NumPy .npy array, not a command stream (Vela's raw "
                              "output is an .npz with cmd_data)")
    if len(data) >= 4 and int.from_bytes(data[:4], "little") == COP1:
        return [one(data[:len(data) // 4 * 4], f"{name}: COP1 payload")]
    return None


# --- placing it in the device -------------------------------------------------------------------

def _align(v: int, a: int = 256) -> int:
    return (v + a - 1) // a * a


def _window(device, name: str):
    for r in device.description.regions:
        if r.name == name:
            return r
    raise DeviceError(f"{device.name}: no '{name}' memory window in the description")


def _w(device, name: str, value: int) -> None:
    device.write(device.description.register(name).address,
                 (value & 0xFFFFFFFF).to_bytes(4, "little"))


def _r(device, name: str) -> int:
    return int.from_bytes(device.read(device.description.register(name).address, 4), "little")


def _check_config(device, prog: VelaProgram) -> None:
    """The core driver refuses a payload compiled for another NPU configuration
    (verify_optimizer_config): compare the fields this NPU reports in CONFIG and ID."""
    if prog.config is None:
        return
    cfg, ident = prog.config
    hw_cfg, hw_id = _r(device, "CONFIG"), _r(device, "ID")
    checks = [("macs_per_cc (log2 MACs/cycle)", cfg & 0xF, hw_cfg & 0xF),
              ("cmd_stream_version", (cfg >> 4) & 0xF, (hw_cfg >> 4) & 0xF),
              ("product", cfg >> 28, hw_cfg >> 28),
              ("arch_major_rev", ident >> 28, hw_id >> 28)]
    for what, want, have in checks:
        if want != have:
            hint = (f"run with --macs {1 << (cfg & 0xF)}, or without --macs: it is taken from "
                    "the stream; or compile with " if what.startswith("macs") else "compile with ")
            raise VelaImportError(
                f"{prog.path}: compiled for an NPU with {what} {want}, this {device.name} has "
                f"{have} (CONFIG {hw_cfg:#010x}; {hint}--accelerator-config "
                f"ethos-u85-{1 << (hw_cfg & 0xF)})")


def _inputs(prog: VelaProgram, inputs) -> list[np.ndarray]:
    if inputs is None:
        return [np.zeros(t.shape, t.dtype) for t in prog.inputs]
    if isinstance(inputs, np.ndarray) or np.isscalar(inputs):
        inputs = [inputs]
    inputs = list(inputs)
    if len(inputs) != len(prog.inputs):
        raise VelaImportError(f"{prog.path}: the model has {len(prog.inputs)} input(s), "
                              f"{len(inputs)} given")
    out = []
    for t, x in zip(prog.inputs, inputs):
        x = np.asarray(x)
        if x.size != int(np.prod(t.shape)):
            raise VelaImportError(f"{prog.path}: input '{t.name}' is {t.shape} {t.dtype}, the "
                                  f"given array has shape {x.shape}")
        if x.dtype != t.dtype:
            x = _cast_input(prog, t, x)
        out.append(np.ascontiguousarray(x).reshape(t.shape))
    return out


def _cast_input(prog: VelaProgram, t: TensorSlot, x: np.ndarray) -> np.ndarray:
    """``x`` as input ``t``'s type when that loses nothing: an integer array of the same
    signedness whose values fit (np.array of Python ints is int64). A float array (not yet
    quantized) or one of the other signedness (a uint8 image for an int8 model: its values
    mean something else by 128 zero-point steps) is refused naming both types, never cast."""
    want = f"{prog.path}: input '{t.name}' is {t.dtype}, the given array is {x.dtype}"
    if x.dtype.kind == "f" and t.dtype.kind in "iu":
        raise VelaImportError(f"{want}: quantize it with the model's input scale and zero point")
    if x.dtype.kind not in "iu" or t.dtype.kind not in "iu" or x.dtype.kind != t.dtype.kind:
        raise VelaImportError(f"{want}: give an array of type {t.dtype}")
    info = np.iinfo(t.dtype)
    if x.size and (x.min() < info.min or x.max() > info.max):
        raise VelaImportError(f"{want} with values outside {t.dtype}'s range "
                              f"{info.min}..{info.max} ({x.min()}..{x.max()})")
    return x.astype(t.dtype)


def load_vela_program(device, path: str | Path, input=None) -> VelaProgram:
    """Load Vela's output ``path`` into ``device`` with ``input`` (one array, or one per model
    input; None = zeros) exactly as the Ethos-U driver stack would, and start the NPU: it then
    sits halted before its first command. Returns the program (addresses filled in)."""
    prog = read_vela(path)
    place_vela_program(device, prog, _inputs(prog, input))
    return prog


def place_vela_program(device, prog: VelaProgram, xs: list[np.ndarray]) -> None:
    """The driver's setup of ``prog`` with inputs ``xs``: soft reset, memory attributes, the
    payload in flash (dram), arena and fast scratch in sram, inputs, base pointers, QBASE/QSIZE,
    then CMD.transition_to_running_state."""
    sram, dram = _window(device, "sram"), _window(device, "dram")
    # driver: soft reset, then the U85 defaults of ethosu_config_u85.h (module docstring)
    _w(device, "CMD", 0x4)
    _w(device, "RESET", 0x0)
    for _ in range(100):
        if not (_r(device, "STATUS") >> 3) & 1:  # STATUS.reset_status
            break
    _check_config(device, prog)
    for i, attr in enumerate((0, 0, 1 << 2, 1 << 2)):  # MEM_ATTR.axi_port: 0 SRAM, 1 EXT
        _w(device, f"MEM_ATTR{i}", attr)
    _w(device, "QCONFIG", 2)
    _w(device, "REGIONCFG", 3 | 0 << 2 | sum(1 << 2 * r for r in range(2, 8)))

    # flash (dram): payload, then the read-only tensor; arena then fast scratch (sram)
    flash_base = dram.base
    ro = _align(flash_base + len(prog.payload))
    npu = [s for s in prog.segments if isinstance(s, NpuStream)]
    if npu:  # every stream's payload, then each read-only tensor once
        at, flashes = flash_base, {}
        for seg in npu:
            seg.qbase = at + seg.command_offset
            at = _align(at + len(seg.payload))
        for seg in npu:
            if seg.flash_id not in flashes:
                flashes[seg.flash_id] = at
                at = _align(at + len(seg.flash))
        ro = at
    if ro + len(prog.flash) > dram.base + dram.size:
        need = ro - flash_base + len(prog.flash)
        raise VelaImportError(f"{prog.path}: command stream + flash ({need} B) do not fit in "
                              f"{device.name}'s {dram.name} window ({dram.size} B)")
    arena = sram.base
    fast = _align(arena + max(prog.scratch_size, 1))
    end = fast + prog.scratch_fast_size
    bases = {prog.regions["flash"]: ro, prog.regions["scratch"]: arena,
             prog.regions["scratch_fast"]: fast}
    sizes = {prog.regions["flash"]: len(prog.flash), prog.regions["scratch"]: prog.scratch_size,
             prog.regions["scratch_fast"]: prog.scratch_fast_size}
    window = next((r for r in device.description.regions if r.name == "emu_program"), None)
    cpu = len(prog.segments) - len(npu)
    if cpu and (window is None or cpu > window.size // 4):
        raise VelaImportError(f"{prog.path}: {cpu} operators run on the CPU; {device.name}'s "
                              f"program window names at most "
                              f"{window.size // 4 if window else 0} (one pc each)")
    slots = prog.inputs + prog.outputs + [t for t, _ in prog.state] + [
        t for seg in prog.segments for t in (
            seg.ifms + seg.ofms if isinstance(seg, NpuStream) else seg.inputs + seg.outputs)]
    for t in slots:
        if t.region not in bases:
            raise VelaImportError(f"{prog.path}: tensor '{t.name}' is in region {t.region}, not "
                                  f"one of the flash/scratch/scratch_fast regions")
        if t.offset < 0 or t.offset + t.nbytes > max(sizes[t.region], 0):
            raise VelaImportError(f"{prog.path}: tensor '{t.name}' ({t.nbytes} B at offset "
                                  f"{t.offset:#x}) lies outside region {t.region} "
                                  f"({sizes[t.region]} B)")
        t.address = bases[t.region] + t.offset
    if end > sram.base + sram.size:
        raise VelaImportError(f"{prog.path}: arena + fast scratch ({end - arena} B) do not fit "
                              f"in {device.name}'s {sram.name} window ({sram.size} B)")
    if npu:
        for seg in npu:
            device.write(seg.qbase - seg.command_offset, seg.payload)
            device.write(flashes[seg.flash_id], seg.flash)
            seg.basep = {0: flashes[seg.flash_id], 1: arena, 2: fast}
    else:
        device.write(flash_base, prog.payload)
        if prog.flash:
            device.write(ro, prog.flash)
    if end > arena:
        device.write(arena, bytes(end - arena))  # TFLM does not clear it; a clean view here
    for t, fill in prog.state:  # TFLM's reset of the variable tensors (VelaProgram.state)
        device.write(t.address, bytes([fill]) * t.nbytes)
    for t, x in zip(prog.inputs, xs):
        device.write(t.address, x.tobytes())
    device.vela = prog
    device.cpu_pending = None
    if npu:  # the host program starts each stream and runs each CPU operator in turn
        return

    # base pointers in TFLM's order: flash, arena, fast scratch, inputs..., outputs... (max 8)
    order = [bases[prog.regions["flash"]], arena, fast] + [t.address for t in prog.inputs] + \
        [t.address for t in prog.outputs]
    prog.basep = {}
    for i, a in enumerate(order[:8]):
        _w(device, f"BASEP{i}_LO", a)
        _w(device, f"BASEP{i}_HI", a >> 32)
        prog.basep[i] = a
    if prog.kind == "npz":  # the .npz names its regions: honour them over TFLM's order
        for r, a in bases.items():
            _w(device, f"BASEP{r}_LO", a)
            _w(device, f"BASEP{r}_HI", a >> 32)
            prog.basep[r] = a
    prog.qbase = flash_base + prog.command_offset
    _w(device, "QBASE_LO", prog.qbase)
    _w(device, "QBASE_HI", prog.qbase >> 32)
    _w(device, "QSIZE", 4 * prog.command_words)
    device.vela = prog  # its graph's inputs and outputs: EthosU85.program_io
    # power/clock Q-channels disabled while the inference runs (ethosu_request_power)
    _w(device, "CMD", 0x1)  # transition_to_running_state


def start_stream(device, seg: NpuStream) -> None:
    """The driver's invocation of one ethos-u operator of a model with CPU operators (TFLM's
    ethosu.cc, then ethosu_driver.c): base pointers flash, arena, fast scratch, then each IFM
    and OFM (at most 8), QBASE/QSIZE, CMD.transition_to_running_state."""
    order = [seg.basep[0], seg.basep[1], seg.basep[2]] + [t.address for t in seg.ifms + seg.ofms]
    for i, a in enumerate(order[:8]):
        _w(device, f"BASEP{i}_LO", a)
        _w(device, f"BASEP{i}_HI", a >> 32)
        seg.basep[i] = a
    _w(device, "QBASE_LO", seg.qbase)
    _w(device, "QBASE_HI", seg.qbase >> 32)
    _w(device, "QSIZE", 4 * seg.command_words)
    _w(device, "CMD", 0x1)


@dataclass
class WaitCpu(Step):
    """Wait until the CPU operator queued before (EthosU85.queue_cpu_operator) has run: the
    CPU runs it as a unit of the device, so that stepping stops before and after it."""

    name: str
    where: str = ""

    def run(self, hp: HostProgram) -> bool:
        return hp.device.cpu_pending is None

    def waiting_for(self, hp: HostProgram) -> str:
        return f"CPU operator {self.name}"


def read_output(device, program: VelaProgram, index: int = 0) -> np.ndarray:
    """Output tensor ``index`` as the device's memory holds it now (debugger reads)."""
    try:
        t = program.outputs[index]
    except IndexError:
        raise VelaImportError(f"{program.path}: no output {index} "
                              f"(the model has {len(program.outputs)})") from None
    raw = device.read(t.address, t.nbytes)
    return np.frombuffer(raw, dtype=t.dtype).reshape(t.shape).copy()


def read_outputs(device, program: VelaProgram) -> list[np.ndarray]:
    """Every output after the NPU stopped; a stop with an error bit set raises DeviceError."""
    status = _r(device, "STATUS")
    faults = [n for n, b in (("bus_status", 2), ("cmd_parse_error", 4), ("ecc_fault", 8),
                             ("branch_fault", 9)) if status >> b & 1]
    if faults:
        raise DeviceError(f"{program.path}: NPU stopped with {', '.join(faults)} "
                          f"(STATUS {status:#010x})")
    return [read_output(device, program, i) for i in range(len(program.outputs))]


def load_input(path: str | Path, names: list[str] | None = None) -> list[np.ndarray]:
    """The input tensor(s) of ``accelstub run/serve --input`` (or the arrays of ``--expect``):
    a .npy (one array) or an .npz with one array per model input. The .npz's arrays are taken
    by name when their names are exactly ``names`` (the model's input names, in any order),
    else in file order (np.savez(f, x0, x1) stores arr_0, arr_1). Never unpickles."""
    path = Path(path)
    data = _read_tensor_file(path)
    if data[:6] != b"\x93NUMPY" and data[:4] != b"PK\x03\x04":
        raise VelaImportError(f"{path}: not a .npy or .npz file (a .npy array, or an .npz with "
                              "one array per model input or output)")
    obj = np_load(data, path, "cannot read the input tensor")
    if isinstance(obj, np.ndarray):
        return [obj]
    try:
        with obj:
            keys = list(obj.files)
            if names and sorted(keys) == sorted(names):
                keys = list(names)
            return [obj[k] for k in keys]
    except ValueError as e:
        raise VelaImportError(f"{path}: cannot read the input tensor ({e})") from None


#: files of a program directory (the bundled demo's form) beside its one *_vela.tflite/.npz
DIR_INPUT, DIR_EXPECT = ("input.npy", "input.npz"), ("expected.npy", "expected.npz")


def program_in(path: str | Path) -> Path | None:
    """The Vela file ``path`` names: itself if it is a .tflite/.npz, in a directory its one
    ``*_vela.tflite`` or ``*_vela.npz`` (VelaImportError if several), else None."""
    path = Path(path)
    if not path.is_dir():
        return path if path.suffix in (".tflite", ".npz") else None
    found = sorted(p for p in path.iterdir() if p.name.endswith(("_vela.tflite", "_vela.npz")))
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise VelaImportError(f"{path}: {len(found)} Vela files ({names}); a program directory "
                              "holds one")
    return found[0] if found else None


def device_options_of(path: Path) -> dict[str, object]:
    """The construction options a Vela program names (DeviceSpec.options_from_program): the
    MACs per cycle of its OPTIMIZER_CONFIG record. {} for other files and for files the load
    refuses anyway (with its own message); VelaImportError (a ValueError) when the record names
    no Ethos-U85 configuration."""
    try:
        vela = program_in(path)
        prog = read_vela(vela) if vela is not None else None
    except VelaImportError:
        return {}
    if prog is None or prog.config is None:
        return {}
    return {"macs": macs_of(prog.config, str(vela))}


def vela_host_program(path: str | Path, options: ProgramOptions) -> HostProgram:
    """Vela's output as the Ethos-U driver runs it: place and start (inputs from
    ``options.input``, zeros without), wait for the NPU's IRQ, then read the outputs, write them
    to ``options.output`` and compare them with ``options.expect``. The files are read here, so
    their errors come at load time and name the file. A directory holds the Vela file and may
    hold ``input.npy|npz`` and ``expected.npy|npz``, used when no --input/--expect is given."""
    path = Path(path)
    if path.is_dir():
        vela = program_in(path)
        if vela is None:
            raise VelaImportError(f"{path}: no *_vela.tflite or *_vela.npz in this directory")

        def here(names: tuple[str, ...]) -> str | None:
            # exists(): a FIFO or device there is refused when read, not taken as missing
            return next((str(path / n) for n in names if (path / n).exists()), None)
        options = replace(options, input=options.input or here(DIR_INPUT),
                          expect=options.expect or here(DIR_EXPECT))
        path = vela
    prog = read_vela(path)
    xs = _inputs(prog, load_input(options.input, [t.name for t in prog.inputs])
                 if options.input else None)
    per_op = load_op_reference(options.expect) if options.expect else None
    want = None
    if options.expect and per_op is None:
        want = load_input(options.expect, [t.name for t in prog.outputs])
        if len(want) != len(prog.outputs):
            raise VelaImportError(f"{options.expect}: {len(want)} array(s), the model has "
                                  f"{len(prog.outputs)} output(s)")
    trace = OpTrace(per_op, options.output_ops) if per_op is not None or options.output_ops \
        else None
    note = "" if options.input else " (input: zeros, no --input given)"
    where = str(prog.path)
    steps: list[Step] = [Call(lambda hp: place_vela_program(hp.device, prog, xs),
                              f"{where}: driver setup")]
    isr = {}
    if not prog.segments:
        steps.append(WaitIrq("IRQ", f"{where}: wait for the NPU interrupt"))
    # the interrupt handler clears the IRQ (ethosu_driver.c; CMD.clear_irq, [U85-TRM: Table 3-6]),
    else:
        # so each stream raises an event of its own
        isr = {"IRQ": [Call(lambda hp: _w(hp.device, "CMD", 0x2), f"{where}: NPU IRQ handler")]}
        k = 0
        for seg in prog.segments:
            what = f"{where}: operator {seg.index}"
            if isinstance(seg, NpuStream):
                steps += [Call(lambda hp, s=seg: start_stream(hp.device, s),
                               f"{what} (ethos-u): start the NPU"),
                          WaitIrq("IRQ", f"{what} (ethos-u): wait for the NPU interrupt")]
            else:
                steps += [Call(lambda hp, s=seg, k=k: hp.device.queue_cpu_operator(k, s),
                               f"{what} ({seg.name}) on the CPU"),
                          WaitCpu(seg.name, f"{what} ({seg.name}) on the CPU")]
                k += 1
    steps.append(Check(lambda hp: _check_outputs(hp, prog, options.output, want, trace),
                       f"{where}: outputs"))
    hp = HostProgram(Path(prog.path).name, steps, isr, summary=prog.summary() + note)
    hp.on_unit = trace
    return hp


# --- per-operation outputs: -v checksums them, --expect ops.npz compares, --output-ops writes ---

OP_KEY = re.compile(r"op(\d+)")


def load_op_reference(path: str | Path) -> dict[int, bytes] | None:
    """A per-operation reference: an .npz whose arrays are all named ``op<N>``, N the
    operation's position in the run (0-based; the number of the ``cmd N`` label run -v prints
    for a stream without branches), each holding the bytes that operation writes, in address
    order (uint8 as --output-ops writes them; another dtype is compared by its bytes). None
    for any other file (a whole-output reference, read by load_input)."""
    path = Path(path)
    data = _read_tensor_file(path)
    if data[:4] != b"PK\x03\x04":
        return None
    z = np_load(data, path, "cannot read the reference")
    try:
        with z:
            keys = list(z.files)
            if not keys or not all(OP_KEY.fullmatch(k) for k in keys):
                return None
            return {int(k[2:]): np.ascontiguousarray(z[k]).tobytes() for k in keys}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise VelaImportError(f"{path}: cannot read the reference ({e})") from None


class OpTrace:
    """HostProgram.on_unit of a run with a per-operation reference or --output-ops: the bytes
    each operation wrote, read right after it (Vela reuses the arena, so at the end they are
    gone), compared with the reference until the first difference and kept for writing."""

    def __init__(self, reference: dict[int, bytes] | None, output: str | None) -> None:
        self.reference = reference
        self.output = output
        self.outputs: dict[int, bytes] = {}
        self.checked = 0
        self.first: str | None = None  # the first difference, as the FAIL line says it

    def __call__(self, hp: HostProgram, touched) -> None:
        i = hp.units - 1
        ref = self.reference.get(i) if self.reference is not None and self.first is None \
            else None
        if ref is None and self.output is None:
            return
        got = unit_output(hp.device, touched.writes)
        if self.output is not None:
            self.outputs[i] = got
        if ref is not None:
            self.checked += 1
            self.first = self._compare(hp, i, touched.writes, got, ref)

    @staticmethod
    def _compare(hp: HostProgram, i: int, writes, got: bytes, ref: bytes) -> str | None:
        pc = hp.history[-1][0]  # the unit named as run -v names it, and where to break
        what = f"operation {i}, {hp.device.unit_label(pc)} at pc {pc:#010x}"
        if len(got) != len(ref):
            return f"{what} wrote {len(got)} B, the reference op{i} has {len(ref)} B"
        a, b = np.frombuffer(got, np.uint8), np.frombuffer(ref, np.uint8)
        d = np.flatnonzero(a != b)
        if not d.size:
            return None
        k = int(d[0])
        for s, e in merge_ranges(writes):  # byte k of the output -> its address
            if k < e - s:
                break
            k -= e - s
        return (f"{what}: {d.size}/{a.size} bytes differ, first at {s + k:#010x}: expected "
                f"{b[d[0]]:#04x}, got {a[d[0]]:#04x}")

    def finish(self, units: int) -> str | None:
        """Write --output-ops; the FAIL text, or None when every referenced operation ran and
        matched."""
        if self.output is not None:
            np.savez(self.output, **{f"op{i}": np.frombuffer(b, np.uint8)
                                     for i, b in sorted(self.outputs.items())})
        if self.first is not None:
            return self.first
        missing = sorted(i for i in self.reference or () if i >= units)
        if missing:
            return (f"the reference has op{missing[0]}, the run had {units} operation(s) "
                    f"(op0..op{units - 1})")
        return None


def _check_outputs(hp: HostProgram, prog: VelaProgram, output: str | None,
                   want: list[np.ndarray] | None, trace: OpTrace | None = None) -> CheckResult:
    dev = hp.device
    outs = read_outputs(dev, prog)
    n = dev.counters().get("operations", dev.units_done)
    cpu = dev.counters().get("cpu_operations")
    n = f"{n} operations" + (f" and {cpu} CPU operator{'s' if cpu > 1 else ''}" if cpu else "")
    done = (f"{len(outs)} output(s), {n}, {dev.cycles} cycles (modelled), "
            f"{hp.elapsed_ms():.0f} ms")
    if output is not None:
        if len(outs) == 1:
            np.save(output, outs[0])
        else:
            np.savez(output, *outs)
    if trace is not None:
        fail = trace.finish(hp.units)
        if fail is not None:
            return CheckResult(False, f"FAIL {fail}")
        if trace.reference is not None:
            return CheckResult(True, f"PASS ({done}; {trace.checked} operation output(s) "
                               "checked)")
    if want is None:
        return CheckResult(True, f"DONE ({done})")
    for i, (g, w) in enumerate(zip(outs, want)):
        w = np.asarray(w).ravel()
        if g.size != w.size:
            return CheckResult(False, f"FAIL output {i}: shape {g.shape}, expected "
                               f"{np.shape(want[i])}")
        # float outputs (a DEQUANTIZE that Vela left on the CPU) compare as they are
        d = np.flatnonzero(g.ravel() != w if g.dtype.kind == "f" else
                           g.ravel().astype(np.int64) != w.astype(np.int64))
        if d.size:
            k = int(d[0])
            return CheckResult(False, f"FAIL output {i}: {d.size}/{g.size} elements differ, "
                               f"first at flat index {k} (address "
                               f"{prog.outputs[i].address + k * g.itemsize:#010x}): expected "
                               f"{w[k]}, got {g.ravel()[k]}")
    return CheckResult(True, f"PASS ({done})")
