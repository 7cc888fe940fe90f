"""What a debugger shows of an Ethos-U85 program: the unit listing (one unit per operation,
and the CPU operators of a Vela model between its command streams), each unit's tensors, its
label, and the ``npu state`` / ``npu disasm`` texts. Read-only views over the model
(model.py): nothing here runs a unit or changes the NPU's state.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..content_cache import ContentCache
from ..device import Unit
from ..errors import DeviceError
from ..tensors import TensorSpec
from . import ops
from . import stream as es
from .cmdstream import decode_at
from .ops import NpuBusFault, SetState
from .vela import NpuStream, TensorSlot, VelaProgram

if TYPE_CHECKING:
    from .model import EthosU85

#: a unit of a Vela program: (the unit, its segment (NpuStream or CPU operator), its index
#: within the segment)
ProgramUnit = tuple[Unit, Any, int]


class Listing:
    """The listing of one device, kept while the stream and program stay the same.

    Kept by content (devices/content_cache.py): the words at QBASE (placed by QBASE/QSIZE/
    QCONFIG, ``CommandStream.place``, kept on those registers' values) are compared with the
    words the listing was made from, so a write into the stream by anyone (a debugger, the
    host program, a DMA, a reload) lists it again, and nothing else does. Why not the
    memory's ``version``: NPU stores do not count in it, and a version key would miss after
    every unit that writes an OFM beside the stream (issue 26 #7: every step asks for the
    unit at pc)."""

    def __init__(self, dev: EthosU85) -> None:
        self.dev = dev
        self._cache = ContentCache(size=4)

    def forget(self) -> None:
        """The stream or program may have changed: list it again when next asked."""
        self._cache = ContentCache(size=4)

    def units(self) -> list[Unit]:
        """The program's units, the same list object while it stays the same (callers may
        keep what they derive from it by that object: ``stub/commands/target.py``)."""
        dev = self.dev
        prog = self.with_cpu()
        if prog is not None:
            cpu: list[Unit] = self._program(prog)[1]
            return cpu
        try:
            words = dev.stream.words()
        except NpuBusFault:
            return []
        qbase = dev.qbase

        def listed(w: np.ndarray) -> list[Unit]:
            out: list[Unit] = []
            stream_units(w, qbase, out)
            return out
        units: list[Unit] = self._cache.get(("stream", qbase), words, listed)
        return units

    # -- a Vela model with CPU operators (cpu_ops.py) ------------------------------------------
    def with_cpu(self) -> VelaProgram | None:
        """The loaded Vela program when Vela left some of its operators on the CPU (and no other
        program was queued since), else None."""
        prog = self.dev.vela
        return prog if prog is not None and prog.segments and prog.owns(self.dev.qbase) else None

    def segment_words(self, seg: NpuStream) -> np.ndarray:
        """The command words of ethos-u operator ``seg`` where the driver placed them."""
        return np.frombuffer(self.dev.read(seg.qbase, 4 * seg.command_words), "<u4")

    def program_units(self, prog: VelaProgram) -> list[ProgramUnit]:
        """The whole program in order, each (unit, its segment, index within the segment): every
        stream's operations and the CPU operators between them (labels "cmd N", "cpu k")."""
        return self._program(prog)[0]

    def _program(self, prog: VelaProgram) -> tuple[list[ProgramUnit], list[Unit], VelaProgram]:
        """:meth:`program_units` and its units alone, kept while every stream's words stay the
        same (the program object held: a new program's reused id cannot hit)."""
        words = [self.segment_words(s) if isinstance(s, NpuStream) else None
                 for s in prog.segments]
        joined = np.concatenate([w for w in words if w is not None] or [np.zeros(0, "<u4")])
        hit: tuple[list[ProgramUnit], list[Unit], VelaProgram] = self._cache.get(
            ("cpu", id(prog)), joined, lambda _: self._program_units(prog, words))
        if hit[2] is not prog:
            self.forget()
            return self._program(prog)
        return hit

    def _program_units(self, prog: VelaProgram, words: list[np.ndarray | None]
                       ) -> tuple[list[ProgramUnit], list[Unit], VelaProgram]:
        out: list[ProgramUnit] = []
        k = 0
        for seg, w in zip(prog.segments, words):
            if isinstance(seg, NpuStream):
                assert w is not None
                units: list[Unit] = [u for u, _, _ in out]
                n = len(units)
                stream_units(w, seg.qbase, units)
                out += [(u, seg, i) for i, u in enumerate(units[n:])]
            else:
                out.append((Unit(self.dev.window_pc(k), f"cpu {k}", seg.summary()), seg, k))
                k += 1
        return out, [u for u, _, _ in out], prog

    def window_index(self, k: int | None, address: int) -> int | None:
        """The unit index of program-window word ``address`` (word ``k``): here word k is the
        k-th CPU operator, whose unit index counts the stream operations before it too (the
        per-layer diff finds the unit that just ran by its pc)."""
        prog = self.with_cpu()
        if k is None or prog is None:
            return k
        return next((i for i, (u, _, _) in enumerate(self.program_units(prog))
                     if u.address == address), None)

    def unit_tensors(self, index: int) -> tuple[TensorSpec, ...]:
        """IFM ("input"), IFM2 ("input2") and OFM ("output") of command ``index`` of
        :meth:`units` as TFLite holds them (1, H, W, C), from the NPU_SET_* state the listing
        decodes and the operation's own decode (:func:`ops.operand_offsets`: NHWC or NHCWB16,
        tiles, OFM reverse/transpose), placed at BASEP[region] as set now. Why tiles need no
        case of their own: a tile split is along H (HEIGHT0/HEIGHT1: a row offset per row)
        or along W at WIDTH0 (a column offset per column); only a 2x2 split whose tiles do not
        line up (HEIGHT0 != HEIGHT1, or BASE3 - BASE2 != BASE1 - BASE0) is no sum of per-axis
        offsets, and that tensor is left out. DMA, waits and the other non-kernel commands
        declare none: a DMA copies weight and scale streams in Vela's programs, bytes rather
        than a tensor of the network."""
        dev = self.dev
        dev.check_unit(index)
        prog = self.with_cpu()
        basep: Callable[[int], int] = dev.basep
        if prog is not None:
            _, seg, index = self.program_units(prog)[index]
            if not isinstance(seg, NpuStream):  # a CPU operator: its arena tensors
                names = [f"input{i + 1 if i else ''}" for i in range(len(seg.inputs))]
                return tuple(slot_spec(n, t) for n, t in zip(names, seg.inputs)) + tuple(
                    slot_spec(f"output{i + 1 if i else ''}", t)
                    for i, t in enumerate(seg.outputs))
            found = self.unit_command(index, self.segment_words(seg))
            basep = seg.basep.__getitem__
        else:
            found = self.unit_command(index)
        if found is None:
            return ()
        cmd, state = found
        specs = []
        for name, t, offs in ops.operand_offsets(cmd, state, dev.cfg):
            spec = nhwc_spec(name, t, offs, basep(t.region))
            if spec is not None:
                specs.append(spec)
        return tuple(specs)

    def program_io(self) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]] | None:
        """The graph's inputs and outputs where the Vela program placed them (its TensorSlots:
        whole NHWC tensors, contiguous, as TFLM hands them to the driver), not the first
        command's IFM: Vela may stripe the first operation, whose IFM is then a part of the
        input. None: another program queued since (QBASE moved), or none from Vela."""
        prog = self.dev.vela
        if prog is None or not prog.owns(self.dev.qbase):
            return None
        return (tuple(slot_spec(f"input{i or ''}", t) for i, t in enumerate(prog.inputs)),
                tuple(slot_spec(f"output{i or ''}", t) for i, t in enumerate(prog.outputs)))

    def unit_command(self, index: int, words: np.ndarray | None = None
                     ) -> tuple[es.Command, SetState] | None:
        """(the kernel command, the NPU_SET_* state it is issued with) of unit ``index`` as
        :meth:`units` counts them in ``words`` (default: the stream at QBASE); None for any
        other unit."""
        if index < 0:
            return None
        try:
            words = self.dev.stream.words() if words is None else words
        except NpuBusFault:
            return None
        state, k = SetState(), 0
        for c in es.decode(words.tobytes()):
            if c.name == es.UNKNOWN or c.is_operation:
                if k == index:
                    return (c, state) if c.name in ops.OPERATIONS else None
                k += 1
            else:
                state.set(c)
        return None

    def unit_label(self, label: str, address: int) -> str:
        """The listing's ``label`` plus the kind and stream offset of the unit's operation, the
        offset written as ``accelstub disasm`` lists it (a QREAD value), so a ``run -v`` line or
        an ``--expect`` failure can be found in the listing: "cmd 3 (NPU_OP_CONV at 0x0140)"."""
        dev = self.dev
        prog, qbase = self.with_cpu(), dev.qbase
        if prog is not None:
            for u, seg, _k in self.program_units(prog):
                if u.address == address and not isinstance(seg, NpuStream):
                    return f"{u.label} ({seg.name}, TFLite operator {seg.index}, on the CPU)"
                if u.address == address:
                    label, qbase = u.label, seg.qbase
        try:
            words = dev.stream.words() if qbase == dev.qbase or prog is None else \
                self.segment_words(next(s for s in prog.segments
                                        if isinstance(s, NpuStream) and s.qbase == qbase))
        except NpuBusFault:
            return label
        q = address - qbase
        while 0 <= q < 4 * len(words):
            c = decode_at(words, q)
            if es.is_matmul(c):  # name the matrix product and its operands (issue 28 #4)
                summary = next((u.summary for u in self.units() if u.address == address), "")
                return f"{label} ({c.name} at 0x{c.offset:04x}: {summary})"
            if c.name == es.UNKNOWN or c.is_operation:
                return f"{label} ({c.name} at 0x{c.offset:04x})"
            q = c.next_offset
        return label

    # -- monitor commands ------------------------------------------------------------------------
    def pending(self) -> tuple[SetState, set[str], es.Command | None]:
        """The state the next operation will use: current state + the SET commands from QREAD
        up to the next operation (returned too)."""
        dev = self.dev
        state = dev.sets.copy()
        pending: set[str] = set()
        if not dev.running:
            return state, pending, None
        try:
            words = dev.stream.words()
        except NpuBusFault:
            return state, pending, None
        q = dev.regs.peek("QREAD")
        while q < 4 * len(words):
            c = decode_at(words, q)
            if c.name == es.UNKNOWN or c.is_operation:
                return state, pending, c
            state.set(c)
            pending.add(c.name)
            q = c.next_offset
        return state, pending, None

    def state_text(self) -> str:
        dev = self.dev
        r = dev.regs
        state, pending, nxt = self.pending()
        lines = [f"NPU {'running' if dev.running else 'stopped'}"
                 + ("" if dev.running else f" ({dev.stop_reason})")
                 + f"; QBASE {dev.qbase:#x} QREAD {r.peek('QREAD'):#x} QSIZE {r.peek('QSIZE'):#x}"
                 f" pc {dev.pc:#010x}; STATUS {r.peek('STATUS'):#010x}"]
        if nxt is not None:
            summ = ops.summarize(nxt, state) if nxt.name != es.UNKNOWN else str(nxt)
            lines.append(f"next operation at {dev.qbase + nxt.offset:#010x}: {summ}")
        ps = dev.power_state()
        lines.append(f"CMD clock_q_enable={r.field('CMD', 'clock_q_enable')} power_q_enable="
                     f"{r.field('CMD', 'power_q_enable')}; clock off allowed: "
                     f"{'yes' if ps['clock_off_allowed'] else 'no'}, power off allowed: "
                     f"{'yes' if ps['power_off_allowed'] else 'no'}"
                     + (" (masked by RESET until the next CMD write)" if dev.power_masked else "")
                     + f"; POWER_CTRL.mac_step_cycles={r.field('POWER_CTRL', 'mac_step_cycles')}")
        mask = "enabled" if dev.pmu_mask_enable else "disabled"
        lines.append(f"PMU mask (NPU_OP_PMU_MASK): {mask}"
                     f"; MACs/cycle {dev.macs}")
        lines.append("NPU_SET_* state (offset of the command that set it; * = set by a command "
                     "before the next operation):")
        if not state.cmds:
            lines.append("  (none set)")
        for name in sorted(state.cmds, key=lambda n: es.OPCODES[n].key):
            c = state.cmds[name]
            mark = "*" if name in pending else " "
            lines.append(f" {mark}{name:<28} {c.field_text():<60} @{c.offset:#06x}".rstrip())
        return "\n".join(lines)

    def disasm_text(self, count: int = 16) -> str:
        dev = self.dev
        cmds = dev.stream.decoded()
        if not cmds:
            return "(no command stream: QSIZE is 0 or QBASE is outside the system memory)"
        q = dev.regs.peek("QREAD")
        at = next((i for i, c in enumerate(cmds) if c.offset >= q), len(cmds))
        first = max(0, at - 3)
        lines = []
        for c in cmds[first:first + max(1, count)]:
            mark = "=>" if c.offset == q and dev.running else "  "
            lines.append(f"{mark} {dev.qbase + c.offset:#010x} {es.format_command(c)}")
        return "\n".join(lines)


def unit_ends(words: np.ndarray) -> Iterator[tuple[int, es.Command | None, SetState]]:
    """Each unit of the stream ``words`` in order: (byte offset of its first command, the
    command that ends it — an operation or an undecodable command — or None for NPU_SET_*
    commands left at the end, the NPU_SET_* state before that command). The one place units
    are counted, so the listing (:func:`stream_units`) and the framework reference's pairing
    of operations with units (framework_reference.py) cannot disagree."""
    state = SetState()
    start = None
    for c in es.decode(words.tobytes()):
        if start is None:
            start = c.offset
        if c.name != es.UNKNOWN and not c.is_operation:
            state.set(c)
            continue
        yield start, c, state
        start = None
    if start is not None:
        yield start, None, state


def stream_units(words: np.ndarray, qbase: int, out: list[Unit]) -> None:
    """Append the units of the stream ``words`` at ``qbase`` to ``out`` (labels count on)."""
    for start, c, state in unit_ends(words):
        if c is None:
            summary = "end of stream (NPU_SET_* commands, no operation)"
        elif c.name == es.UNKNOWN:
            summary = f"UNKNOWN at offset {c.offset:#06x}: {c.field_text()}"
        else:
            summary = ops.summarize(c, state)
        out.append(Unit(qbase + start, f"cmd {len(out)}", summary))


def slot_spec(name: str, t: TensorSlot) -> TensorSpec:
    """A graph tensor Vela placed (contiguous, NHWC; a lower rank, e.g. a classifier's
    (1, 10), as (1, 1, 1, 10): the same bytes in the same order)."""
    if len(t.shape) > 4:
        raise DeviceError(f"ethos-u85: graph tensor '{t.name}' has shape {t.shape}; "
                          "at most 4 axes (NHWC) can be placed")
    _, H, W, C = (1,) * (4 - len(t.shape)) + tuple(t.shape)
    item = t.dtype.itemsize
    return TensorSpec(name, "NHWC", (1, H, W, C), t.dtype.name,
                      tuple(t.address + c * item for c in range(C)),
                      tuple(h * W * C * item for h in range(H)),
                      tuple(w * C * item for w in range(W)),
                      f"graph tensor '{t.name}' at {t.address:#x} (Vela region {t.region} "
                      f"+ {t.offset:#x})")


def nhwc_spec(name: str, t: ops.Tensor, offs: np.ndarray, base: int) -> TensorSpec | None:
    """The TensorSpec of an operand whose region offsets ``offs`` ([H, W, C]) lie at ``base``,
    or None where they are no sum of a row, a column and a channel offset (a 2x2 tile split
    whose tiles do not line up: :meth:`Listing.unit_tensors`)."""
    H, W, C = offs.shape
    row = offs[:, 0, 0]
    col = offs[0, :, 0] - offs[0, 0, 0]
    chan = offs[0, 0, :] - offs[0, 0, 0]
    if not np.array_equal(row[:, None, None] + col[None, :, None] + chan[None, None, :], offs):
        return None
    fmt = "NHCWB16" if t.fmt == 1 else "NHWC"
    which = {"input": "IFM", "input2": "IFM2", "output": "OFM"}[name]
    return TensorSpec(name, "NHWC", (1, H, W, C), f"{'int' if t.signed else 'uint'}{t.bits}",
                      tuple(int(v) for v in chan), tuple(int(base + v) for v in row),
                      tuple(int(v) for v in col),
                      f"{which} {t.type_text} {fmt} in region {t.region} (BASEP{t.region} "
                      f"{base:#x}) + {which}_BASE0 {t.bases[0]:#x}, stride_y {t.stride_y:#x}")
