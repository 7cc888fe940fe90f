"""NVDLA nv_small: the units' producer/consumer register groups, hardware layers and GLB
interrupts; the arithmetic of a layer is in conv.py (CDMA to CACC), sdp.py, pdp.py and cdp.py.

Register groups (V§2.5, [EXT] the RTL's regfiles): every unit's D_* registers exist twice
(banks G0/G1 in configs/nvdla.toml). S_POINTER.PRODUCER chooses the group the bus reaches,
S_POINTER.CONSUMER (read-only) the group the unit executes next. Writing D_OP_ENABLE = 1 arms a
group; writes to an armed group are dropped (the register file's bank lock counts them).
S_STATUS per group: IDLE when not armed, RUNNING when armed and the consumer, PENDING when armed
and not the consumer. When a unit finishes a layer its consumer group is disarmed and CONSUMER
toggles, so layers alternate between the groups. CONSUMER lives only in S_POINTER.

A hardware layer is the set of units that run together:

* ``conv``: CDMA, CSC, CMAC_A, CMAC_B, CACC and SDP in flying mode (nv_small's CACC always feeds
  SDP), with SDP_RDMA when SDP reads an operand cube from memory;
* ``sdp``: SDP offline, reading its input through SDP_RDMA;
* either of them with PDP when SDP's output goes on to PDP (pooled on the fly);
* ``pdp``: PDP offline, reading through PDP_RDMA; ``cdp``: CDP reading through CDP_RDMA.

A layer runs when every unit in it is armed in its consumer group, in whatever order the driver
armed them (the seed enables CDMA first, the trace tests SDP first: V8#7). One layer is one
unit of run control: ``stepi`` runs one, pc is the D_OP_ENABLE address of the layer's last unit.

At the end of a layer GLB's S_INTR_STATUS gets the done bits of the group each unit ran (SDP,
CACC, CDMA data and weights for a convolution); the core interrupt line ``NVDLA`` is up while a
status bit is set whose S_INTR_MASK bit is clear, and every unmasked done bit set counts one event
of its name (``SDP_0``, ``CACC_1``, ...) for host programs that wait for one (the trace tests'
intr_notify).

Registers the hardware does not let software write (status, counters, CONSUMER) ignore bus
writes; those writes are counted (``ro_writes``): the trace tests write every register.
"""
from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..bus import Memory
from ..description import FieldView, Register, load_description
from ..device import Device, MonitorCommand, ProgramOptions, Touched, Unit, UnitContext
from ..errors import BusError, DeviceError
from ..host import HostProgram, plan_units
from ..tensors import TensorSpec
from . import cdp as D
from . import conv as C
from . import feature as F
from . import pdp as P
from . import pixel as PX
from . import sdp as S

UNITS = ("CDMA", "CSC", "CMAC_A", "CMAC_B", "CACC", "SDP_RDMA", "SDP", "PDP_RDMA", "PDP",
         "CDP_RDMA", "CDP")
CONV_UNITS = ("CDMA", "CSC", "CMAC_A", "CMAC_B", "CACC")
#: done events: name -> GLB S_INTR_STATUS bit (group 0; group 1 is the next bit)
DONE_BITS = {"SDP": 0, "CDP": 2, "PDP": 4, "CDMA_DAT": 16, "CDMA_WT": 18, "CACC": 20}
T = TypeVar("T")
_MISS = object()  # Nvdla._memoised: no value kept for these register values


class _Reading(threading.local):
    """Per thread: the register keys the memoised call running in it has read (None: none
    runs). A class attribute, not getattr with a default: a missing attribute of a
    threading.local costs ~1 us (an exception), paid twice by every register a decode reads."""
    keys: list[int] | None = None


@dataclass(frozen=True)
class Layer:
    """A hardware layer ready to run: its kind, the units in it and their consumer groups."""

    kind: str  # conv | sdp | pdp | cdp
    units: tuple[tuple[str, int], ...]

    @property
    def last(self) -> tuple[str, int]:
        return self.units[-1]

    def has(self, unit: str) -> bool:
        return any(u == unit for u, _ in self.units)


class Nvdla(Device):
    name = "nvdla"
    unit_name = "layer"
    #: _state copies what changes in place (the event counts, the LUT tables); the listing's
    #: strings, the layers' frozen TensorSpecs and the frozen convolution-buffer record (a new
    #: one per convolution, its arrays never written) are shared: the history's boundary then
    #: needs no deepcopy (~0.15 ms of a demo continue)
    state_is_copy = True
    DONE_EVENTS = {f"{n}_{g}": b + g for n, b in DONE_BITS.items() for g in (0, 1)}
    _NO_EVENTS = dict.fromkeys(DONE_EVENTS, 0)
    INTR_STATUS = 0x100C  # GLB S_INTR_STATUS

    def __init__(self, description_path: str | None = None) -> None:
        super().__init__(load_description(description_path or "nvdla"))
        self._description_path = description_path  # a fresh device of this kind plans traces
        #: summaries of the program's hardware layers by program index (the trace's plan, then
        #: each layer as it starts): the listing, and what a layer's window pc names
        self.listing: list[str] = []
        #: the declared tensors of the program's layers, beside the listing (the driver's plan,
        #: then each layer as it runs): a layer's registers live only while it is armed
        self.layer_specs: list[tuple[TensorSpec, ...]] = []
        #: (host program, its planned layers' tensors) from load_program, for program_started
        self._planned: tuple[HostProgram, list[tuple[TensorSpec, ...]]] | None = None
        self.ro_writes: Counter[str] = Counter()
        self.events: Counter[str] = Counter()
        #: _done's work per combination of units and groups (_done_plan)
        self._done_plans: dict[tuple[tuple[str, int], ...], tuple] = {}
        self._names = {r.name for r in self.description.registers}
        #: decodes kept on the values of the registers they read (:meth:`_memoised`)
        self._memo: dict[Hashable, dict[tuple[int, ...], tuple[Callable[[], object],
                                                               dict[object, Any]]]] = {}
        #: _memoised's last two answers per ``what``, the most recent first, each
        #: [RegisterFile.version it holds at, keys read, their peeker, their values, answer]
        self._memo_last: dict[Hashable, list[list]] = {}
        self._reading = _Reading()
        self._where: dict[tuple[str, str, int], Register] = {}  # view(): the register named
        r = self.regs
        for reg in self.description.registers:
            if reg.group != "emu" and not any(f.access in ("rw", "wo", "w1c", "w1s")
                                              for f in reg.fields):
                r.on_write(reg, self._count_ro)
        # S_STATUS of every unit (block cdma -> unit CDMA)
        r.on_read_each("S_STATUS", lambda reg, v: self._status(reg.block.upper()))
        r.on_write("GLB_S_INTR_SET", self._intr_set)
        r.on_write("CDP_S_LUT_ACCESS_CFG",
                   lambda reg, old, new: self.luts.access_cfg(reg.definition.view(new)))
        r.on_write("CDP_S_LUT_ACCESS_DATA",
                   lambda reg, old, new: self.luts.access_data(reg.definition.view(new)))
        r.on_read("CDP_S_LUT_ACCESS_DATA", lambda reg, v: self.luts.read_data())
        self._reset_state()

    # -- registers ------------------------------------------------------------------------------
    def _count_ro(self, reg, old: int, new: int) -> None:
        self.ro_writes[reg.name] += 1

    def _intr_set(self, reg, old: int, new: int) -> None:
        self._raise(self.regs.peek("GLB_S_INTR_SET"))

    def view(self, unit: str, name: str, group: int | None = None) -> FieldView:
        """A register of ``unit`` (of group ``group``, default the consumer group, when it is
        banked) read by field name (``view("CDMA", "D_BANK").data_bank``): what the decoders
        take, so they hold no bit positions of their own (issue 33 #1)."""
        g = self.consumer_group(unit) if group is None else group
        reg = self._where.get((unit, name, g))
        if reg is None:  # resolved once per name and group (a decode reads ~90)
            banked = f"{unit}_{name}_G{g}"
            reg = self._where[(unit, name, g)] = self.description.register(
                banked if banked in self._names else f"{unit}_{name}")
        keys = self._reading.keys
        if keys is not None:
            keys.append(reg.key)
        return self.regs.view(reg)

    def consumer_group(self, unit: str) -> int:
        """S_POINTER.CONSUMER of ``unit``: the group it executes next."""
        name = f"{unit}_S_POINTER"
        keys = self._reading.keys
        if keys is not None:
            keys.append(self.description.register(name).key)
        return self.regs.field(name, "consumer")

    def _memoised(self, what: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, kept on the values of exactly the registers it read through
        :meth:`view` and :meth:`consumer_group` (a decode, or :meth:`ready`, is a pure function
        of them), as MAX78000's ``layer_config`` keeps its decodes. Why: decoding a
        convolution layer reads ~90 registers by field name (0.2 ms, more than the 64->64
        3x3 layer's kernel on two threads), and the listing, the tensors and the run each need
        it; the run loop asks :meth:`ready` several times per layer. Kept per device, over
        runs: a program run again (``accelstub eval``'s rewind per sample) decodes nothing
        again (issue 31 #2). A decode that raises keeps nothing. The last two answers per
        ``what`` are kept with the register file's write count (RegisterFile.version) and the
        values they read: with no write since (the run loop asks ``ready`` several times
        between two writes), or the same values again (a rewound run; ``ready`` alternating
        between an armed and a done state), one is returned without the table's lookup,
        which hashes the ~90 values (~2 us a call, six calls a layer)."""
        outer = self._reading.keys
        regs = self.regs
        version = regs.version
        lasts = self._memo_last.get(what)
        if lasts is not None:
            for i, last in enumerate(lasts):
                if last[0] != version:
                    if last[2]() != last[3]:
                        continue
                    last[0] = version
                if i:  # the most recent answer first: `ready` alternates between two
                    lasts.reverse()
                if outer is not None:
                    outer += last[1]
                return last[4]
        table = self._memo.setdefault(what, {})
        for keys, (peek, results) in tuple(table.items()):
            vals = peek()
            hit = results.get(vals, _MISS)
            if hit is not _MISS:
                if outer is not None:
                    outer += keys
                self._keep_last(what, [version, keys, peek, vals, hit])
                return hit
        self._reading.keys = read = []
        try:
            value = compute()
        finally:
            self._reading.keys = outer
        if outer is not None:  # a memoised call inside another: the outer one read these too
            outer += read
        keys = tuple(dict.fromkeys(read))
        if len(table) >= 16:  # key sets: one per decode path and register group
            table.clear()
        peek, results = table.setdefault(keys, (regs.peeker(keys), {}))
        if len(results) >= 64:
            results.clear()
        vals = peek()
        results[vals] = value
        # a decode only reads: kept as the answer at this write count unless it wrote
        self._keep_last(what, [version if regs.version == version else -1, keys, peek, vals,
                               value])
        return value

    def _keep_last(self, what: Hashable, last: list) -> None:
        """``last`` (see :attr:`_memo_last`) as the most recent answer for ``what``, before
        the one that was (two kept: `ready` alternates between an armed and a done state)."""
        lasts = self._memo_last.get(what)
        if lasts is None:
            if len(self._memo_last) >= 64:  # summaries and tensors per layer
                self._memo_last.clear()
            self._memo_last[what] = [last]
        else:
            lasts[1:] = lasts[:1]
            lasts[0] = last

    @property
    def consumer(self) -> dict[str, int]:
        return {u: self.consumer_group(u) for u in UNITS}

    def armed(self, unit: str, group: int | None = None) -> bool:
        return bool(self.view(unit, "D_OP_ENABLE", group).op_en)

    def _status(self, unit: str) -> int:
        """S_STATUS: status_<g> of each armed group, 1 (running) for the consumer's, 2
        (pending) for the other's; 0 (idle) when not armed."""
        consumer = self.consumer_group(unit)
        fields = {f"status_{g}": 1 if consumer == g else 2 for g in (0, 1) if self.armed(unit, g)}
        return self.description.register(f"{unit}_S_STATUS").definition.encode(**fields)

    def _reset_state(self) -> None:
        self.events.clear()
        self.ro_writes.clear()
        self.luts = D.Luts.empty()  # CDP's lookup tables
        self.cbuf: C.Kept | None = None  # None until the first convolution after reset
        self.regs.set_field("CDMA_S_CBUF_FLUSH_STATUS", "flush_done", 1)  # flushed at reset

    def reset(self, kind: str = "halt") -> None:
        super().reset(kind)
        self._reset_state()
        self.listing = []
        self.layer_specs = []

    def _state(self) -> dict:
        luts = dataclasses.replace(self.luts, le=self.luts.le.copy(), lo=self.luts.lo.copy())
        return {"events": Counter(self.events), "luts": luts, "cbuf": self.cbuf,
                "listing": list(self.listing), "layer_specs": list(self.layer_specs)}

    def _set_state(self, state: dict) -> None:
        self.listing = list(state["listing"])
        self.layer_specs = list(state.get("layer_specs", []))
        self.events = Counter(state["events"])
        self.luts = state["luts"]
        self.cbuf = state["cbuf"]

    # -- interrupts -----------------------------------------------------------------------------
    def _raise(self, bits: int) -> None:
        status = self.regs.peek("GLB_S_INTR_STATUS") | bits
        self.regs.poke("GLB_S_INTR_STATUS", status)
        mask = self.regs.peek("GLB_S_INTR_MASK")
        for name, bit in self.DONE_EVENTS.items():
            if bits >> bit & 1 and not mask >> bit & 1:
                self.events[name] += 1

    def interrupts(self) -> dict[str, bool]:
        status, mask = self.regs.peek("GLB_S_INTR_STATUS"), self.regs.peek("GLB_S_INTR_MASK")
        return {"NVDLA": bool(status & ~mask & 0xFFFFFFFF)}

    def interrupt_counts(self) -> dict[str, int]:
        # every line at 0, then the counts (only _raise counts, DONE_EVENTS names only): one C
        # merge, 2 -> 0.3 us, and the host program samples twice a layer (issue 31 #2)
        return {**self._NO_EVENTS, **self.events}

    def counters(self) -> dict[str, int]:
        return {**super().counters(), "ro_writes": sum(self.ro_writes.values()),
                **{f"events.{k}": v for k, v in sorted(self.events.items())}}

    # -- layers ---------------------------------------------------------------------------------
    def ready(self) -> Layer | None:
        """The first hardware layer whose units are all armed in their consumer groups
        (memoised: the run loop, the pc and the listing ask for it several times a layer)."""
        return self._memoised("ready", self._ready)

    def _ready(self) -> Layer | None:
        def at(unit: str) -> tuple[str, int]:
            return unit, self.consumer_group(unit)

        if self.armed("SDP"):
            mode = self.view("SDP", "D_FEATURE_MODE_CFG")
            flying, to_pdp = bool(mode.flying_mode), bool(mode.output_dst)
            # SDP_RDMA takes part when SDP's registers read the input (offline) or an operand
            # through it; SDP_RDMA's own consumer group may be stale (sdp.reads_rdma)
            rdma = (at("SDP_RDMA"),) if S.reads_rdma(self.view) else ()
            # SDP's output may go on to PDP, which then belongs to the same layer when its
            # consumer group is on the fly; one armed offline is an earlier layer of its own
            tail = (at("SDP"), at("PDP")) if to_pdp else (at("SDP"),)
            if all(self.armed(u) for u, _ in rdma + tail) and (not to_pdp
                                                               or self.pdp_on_the_fly()):
                if flying and all(self.armed(u) for u in CONV_UNITS):
                    return Layer("conv", tuple(at(u) for u in CONV_UNITS) + rdma + tail)
                if not flying:
                    return Layer("sdp", rdma + tail)
        # PDP is a layer of its own only offline: on the fly (its own D_OPERATION_MODE_CFG.
        # flying_mode ON_FLYING, the reset value) it pools SDP's output stream, so it belongs
        # to SDP's layer above and waits until SDP is armed (drivers arm downstream first)
        if self.armed("PDP") and not self.pdp_on_the_fly():
            return Layer("pdp", (at("PDP_RDMA"), at("PDP")))
        if self.armed("CDP"):
            return Layer("cdp", (at("CDP_RDMA"), at("CDP")))
        return None

    def pdp_on_the_fly(self) -> bool:
        """PDP's consumer group takes its input from SDP, not from memory through PDP_RDMA
        (FLYING_MODE 0 is ON_FLYING: the reverse of SDP's encoding)."""
        return not self.view("PDP", "D_OPERATION_MODE_CFG").flying_mode

    @property
    def pc(self) -> int:
        """Hardware layer k of the program (k = layers run since reset) is word k of the program
        window: every layer reuses the same two register groups, so no register address can
        name one (issue 25 #7). The end address once the program's layers have all run."""
        if 0 < self.units_done >= len(self.listing) and self.ready() is None:
            return self.end_address
        return self.window_pc(self.units_done)

    def finished(self) -> bool:
        return self.ready() is None

    def summary(self, layer: Layer) -> str:
        """``conv (SDP G0): <the decoded layer>``: the kind, the unit that ends it, its group
        (memoised like the decodes it is written from)."""
        def text() -> str:
            try:
                return self._describe(layer)
            except DeviceError as e:
                return f"not runnable: {e}"

        unit, g = layer.last
        return f"{layer.kind} ({unit} G{g}): {self._memoised(('summary', layer), text)}"

    def units(self) -> list[Unit]:
        """The whole program: the layers run, the armed one, the ones the trace arms later."""
        rows = list(self.listing)
        layer = self.ready()
        if layer is not None:
            rows[self.units_done:self.units_done + 1] = [self.summary(layer)]
        return [Unit(self.window_pc(k), f"layer {k}", s) for k, s in enumerate(rows)]

    def program_started(self, host: HostProgram) -> None:
        self.listing = self.listing[:self.units_done] + list(host.plan or [])
        planned = self._planned[1] if self._planned and self._planned[0] is host else []
        self.layer_specs = self.layer_specs[:self.units_done] + list(planned)

    def unit_tensors(self, index: int) -> tuple[TensorSpec, ...]:
        """Layer ``index``'s input cube (read by CDMA, SDP_RDMA, PDP_RDMA or CDP_RDMA) and
        output cube (written by the layer's last stage: SDP, PDP or CDP), C, H, W as the cube
        is: the armed layer from its registers now, the others as planned from the driver or
        as run. ``()`` for a layer not known or whose registers do not decode."""
        self.check_unit(index)
        if index == self.units_done:
            layer = self.ready()
            if layer is not None:
                return self.tensors_of(layer)
        return self.layer_specs[index] if 0 <= index < len(self.layer_specs) else ()

    def tensors_of(self, layer: Layer) -> tuple[TensorSpec, ...]:
        """The declared tensors of ``layer`` from its consumer groups (unit_tensors). Left out:
        an image input (pixel formats: CDMA's converter makes the cube, no cube lies in
        memory), a convolution input kept in the buffer (D_MISC_CFG.data_reuse: not read), and
        every tensor of a layer whose registers do not decode (the run reports why).
        Memoised (:meth:`_memoised`): the listing and the run each ask for it."""
        return self._memoised(("tensors", layer), lambda: self._tensors_of(layer))

    def _tensors_of(self, layer: Layer) -> tuple[TensorSpec, ...]:
        try:
            if layer.kind == "pdp":
                p = self._pdp_config()
                return (_cube_spec("input", p.src, p.c, p.h, p.w, "PDP_RDMA D_SRC_BASE_ADDR"),
                        _cube_spec("output", p.dst, p.c, p.out_h, p.out_w, "PDP D_DST_BASE_ADDR"))
            if layer.kind == "cdp":
                d = self._cdp_config()
                return (_cube_spec("input", d.src, d.c, d.h, d.w, "CDP_RDMA D_SRC_BASE_ADDR"),
                        _cube_spec("output", d.dst, d.c, d.h, d.w, "CDP D_DST_BASE_ADDR"))
            sdp = self._sdp_config(layer)
            specs = []
            if layer.kind == "conv":
                cfg = self._conv_config()
                if cfg.pixel is None and not cfg.reuse[0]:
                    specs.append(_cube_spec("input", (cfg.in_addr, cfg.line, cfg.surf), cfg.c,
                                            cfg.h, cfg.w, "CDMA D_DAIN_ADDR"))
            elif sdp.src is not None:
                specs.append(_cube_spec("input", sdp.src, sdp.c, sdp.h, sdp.w,
                                        "SDP_RDMA D_SRC_BASE_ADDR"))
            if sdp.to_pdp:
                p = self._pdp_config(flying=True)
                specs.append(_cube_spec("output", p.dst, p.c, p.out_h, p.out_w,
                                        "PDP D_DST_BASE_ADDR"))
            else:
                specs.append(_cube_spec("output", sdp.dst, sdp.c, sdp.h, sdp.w,
                                        "SDP D_DST_BASE_ADDR"))
            return tuple(specs)
        except DeviceError:
            return ()

    def _retire(self) -> str | None:
        """plan_units: the armed layer's summary, the groups moved on as after it, nothing
        computed."""
        layer = self.ready()
        if layer is None:
            return None
        text = self.summary(layer)
        self.layer_specs.append(self.tensors_of(layer))
        self._done(layer)
        return text

    def _describe(self, layer: Layer) -> str:
        if layer.kind in ("conv", "sdp"):
            parts = [self._conv_config().summary()] if layer.kind == "conv" else []
            parts.append(self._sdp_config(layer).summary())
            if layer.last[0] == "PDP":
                parts.append(self._pdp_config(flying=True).summary())
            return "; ".join(parts)
        if layer.kind == "pdp":
            return self._pdp_config().summary()
        return self._cdp_config().summary()

    # -- memory ---------------------------------------------------------------------------------
    def memory(self, addr: int, size: int, what: str) -> tuple[Memory, int]:
        """(the memory, offset of ``addr`` in it) for ``size`` bytes at ``addr``; DeviceError
        naming ``what`` when they are not all in one memory."""
        try:
            return self.bus.memory_span(addr, size)
        except BusError as e:
            raise DeviceError(f"{what}: {size} bytes at {addr:#010x} leave the memory windows "
                              f"at {e.address:#010x}") from None

    def _read(self, addr: int, size: int, what: str) -> np.ndarray:
        mem, off = self.memory(addr, size, what)
        return mem.data[off:off + size]

    # -- execution ------------------------------------------------------------------------------
    def execute_unit(self, ctx: UnitContext) -> Touched:
        """One hardware layer. Its convolution and SDP configurations are decoded once for the
        listing, its tensors and the run, and again only when their registers change
        (:meth:`_memoised`)."""
        layer = self.ready()
        if layer is None:
            raise DeviceError("no hardware layer is armed")
        self.listing[self.units_done:self.units_done + 1] = [self.summary(layer)]
        self.layer_specs += [()] * (self.units_done + 1 - len(self.layer_specs))
        self.layer_specs[self.units_done] = self.tensors_of(layer)
        if layer.kind == "pdp":
            return self._pdp(layer, ctx.touched)
        if layer.kind == "cdp":
            return self._cdp(layer, ctx.touched)
        sdp = self._sdp_config(layer)
        touched = ctx.touched
        # SDP's output stored as it is computed (S.process ``dst``), where its memory place is
        # known first and no two elements share a byte; else stored from the cube
        store = None if sdp.to_pdp else self._out_place(sdp.dst, sdp.c, sdp.h, sdp.w,
                                                        "SDP output")
        # SDP works on whole 8-channel atoms and writes them whole: the channels past the cube's
        # last one in its last surface are processed and stored too (the hardware's lanes:
        # S.process)
        if layer.kind == "conv":
            cfg = self._conv_config()
            if (cfg.k, cfg.out_h, cfg.out_w) != (sdp.c, sdp.h, sdp.w):
                raise DeviceError(f"SDP_D_DATA_CUBE_* ({sdp.c}x{sdp.h}x{sdp.w}) differ from the "
                                  f"convolution's output ({cfg.k}x{cfg.out_h}x{cfg.out_w})")
            if cfg.batches > 1:
                raise DeviceError("CDMA_D_BATCH_NUMBER: nv_small has no batches "
                                  "(spec/defs/nv_small.spec BATCH_DISABLE)")
            image, weights = self._conv_operands(cfg, touched)
            sums, add = C.convolve(cfg, image, weights)
            # CACC and SDP in one pass; the lanes of the last atom without a kernel carry 0
            out, sat, cacc_sat = S.process(sdp, sums, self._read, k=cfg.k, add=add,
                                           clip=cfg.clip, dst=store)
            self.regs.poke(f"CACC_D_OUT_SATURATION_G{self.consumer_group('CACC')}", cacc_sat)
            self.cycles += cfg.k * cfg.out_h * cfg.out_w * cfg.r * cfg.s * cfg.c // 64
        else:
            values = self._cube_in(sdp.src, sdp.c, sdp.h, sdp.w, "SDP input", touched)
            self.cycles += sdp.c * sdp.h * sdp.w // 8
            out, sat, _ = S.process(sdp, values, self._read, dst=store)
        if sdp.to_pdp:  # pooled on the fly, written by PDP
            pdp = self._pdp_config(flying=True)
            if (pdp.c, pdp.h, pdp.w) != (sdp.c, sdp.h, sdp.w):
                raise DeviceError(f"PDP_D_DATA_CUBE_IN_* ({pdp.c}x{pdp.h}x{pdp.w}) differ "
                                  f"from SDP's output ({sdp.c}x{sdp.h}x{sdp.w})")
            self._cube_out(pdp.dst, P.pool(pdp, out), "PDP output", touched)
        elif out is not None:
            self._cube_out(sdp.dst, out, "SDP output", touched)  # every lane
        else:
            self._stored(sdp.dst, -(-sdp.c // F.ATOM) * F.ATOM, sdp.h, sdp.w, touched)
        if self.view("SDP", "D_PERF_ENABLE").perf_sat_en:
            self.regs.poke(f"SDP_D_PERF_OUT_SATURATION_G{self.consumer_group('SDP')}", sat)
        self._done(layer)
        return touched

    def _conv_config(self) -> C.ConvConfig:
        return self._memoised("conv", lambda: C.decode(self.view))

    def _sdp_config(self, layer: Layer) -> S.SdpConfig:
        rdma = layer.has("SDP_RDMA")
        return self._memoised(("sdp", rdma), lambda: S.decode(self.view, rdma))

    def _pdp_config(self, flying: bool = False) -> P.PdpConfig:
        return self._memoised(("pdp", flying), lambda: P.decode(self.view, flying=flying))

    def _cdp_config(self) -> D.CdpConfig:
        return self._memoised("cdp", lambda: D.decode(self.view))

    def _conv_operands(self, cfg: C.ConvConfig, touched: Touched
                       ) -> tuple[np.ndarray, np.ndarray]:
        """The convolution's converted input [C, H, W] and weights [K, R, S, C]: from memory,
        or kept in the convolution buffer by the previous convolution (conv.py)."""
        kept = self.cbuf if self.cbuf is not None and self.cbuf.key == cfg.buffer_key else None
        if cfg.reuse[0] and kept is not None and kept.data is not None:
            image = kept.data
            if image.shape != (cfg.c, cfg.h, cfg.w):
                raise DeviceError(f"CDMA_D_MISC_CFG.data_reuse: the buffer holds the previous "
                                  f"layer's {'x'.join(map(str, image.shape))} input, this layer "
                                  f"reads {cfg.c}x{cfg.h}x{cfg.w}")
        elif cfg.pixel is None:
            image = self._cube_in((cfg.in_addr, cfg.line, cfg.surf), cfg.c, cfg.h, cfg.w,
                                  "convolution input", touched, channels_last=True)[:cfg.c]
            image = C.convert_input(cfg, image)
        else:
            planes = []
            for p, (addr, size) in enumerate(cfg.pixel.spans(cfg.h, cfg.w)):
                planes.append(self._read(addr, size, f"image plane {p}"))
                touched.reads.append((addr, addr + size))
            image = PX.convert(cfg.pixel, PX.read_pixels(cfg.pixel, planes, cfg.h, cfg.w),
                               cfg.cvt)
        if cfg.reuse[1] and kept is not None:
            if kept.weights is None:
                raise DeviceError("CDMA_D_MISC_CFG.weight_reuse is set, but the previous "
                                  "convolution released its weights (its SKIP_WEIGHT_RLS was 0)")
            weights = kept.weights
            if weights.shape != (cfg.k, cfg.r, cfg.s, cfg.c):
                raise DeviceError(f"CDMA_D_MISC_CFG.weight_reuse: the buffer holds the previous "
                                  f"layer's {'x'.join(map(str, weights.shape))} weights, this "
                                  f"layer's are {cfg.k}x{cfg.r}x{cfg.s}x{cfg.c}")
        else:
            nbytes = cfg.weight_bytes
            weights = C.read_weights(cfg, self._read(cfg.wt_addr, nbytes, "convolution weights"))
            touched.reads.append((cfg.wt_addr, cfg.wt_addr + nbytes))
        self.cbuf = C.Kept(cfg.buffer_key, image if cfg.keep[0] else None,
                           weights if cfg.keep[1] else None)
        return image, weights

    def _cube_in(self, src: tuple[int, int, int], c: int, h: int, w: int, what: str,
                 touched: Touched, channels_last: bool = False) -> np.ndarray:
        """The int8 cube at ``src`` (base, line, surface) with every lane of its atoms
        (F.read_feature)."""
        base, line, surf = src
        span = F.feature_span(c, h, w, line, surf)
        mem, off = self.memory(base, span, what)
        touched.reads.append((base, base + span))
        return F.read_feature(mem.data, off, -(-c // F.ATOM) * F.ATOM, h, w, line, surf,
                              channels_last)

    def _cube_out(self, dst: tuple[int, int, int], cube: np.ndarray, what: str,
                  touched: Touched) -> None:
        base, line, surf = dst
        c, h, w = cube.shape
        span = F.feature_span(c, h, w, line, surf)
        mem, off = self.memory(base, span, what)
        F.write_feature(mem.data, off, cube, line, surf)
        self._stored(dst, c, h, w, touched)

    def _out_place(self, dst: tuple[int, int, int], c: int, h: int, w: int, what: str
                   ) -> tuple[np.ndarray, int, int, int] | None:
        """(memory bytes, offset, line, surface stride) of the cube [c rounded up to atoms, h,
        w] at ``dst`` (base, line, surface) for S.process to store into; None where two of its
        elements share a byte (F.write_feature's order decides then). DeviceError, naming
        ``what``, where it leaves memory."""
        base, line, surf = dst
        c = -(-c // F.ATOM) * F.ATOM
        if not F.unique_bytes(c, h, w, line, surf):
            return None
        mem, off = self.memory(base, F.feature_span(c, h, w, line, surf), what)
        return mem.data, off, line, surf

    def _stored(self, dst: tuple[int, int, int], c: int, h: int, w: int,
                touched: Touched) -> None:
        """After a cube [c, h, w] was stored at ``dst``: its memory's change counter and the
        ranges the unit wrote."""
        base, line, surf = dst
        mem, _ = self.memory(base, F.feature_span(c, h, w, line, surf), "")
        mem.touch()
        touched.writes += F.written_ranges(base, c, h, w, line, surf)

    def _pdp(self, layer: Layer, touched: Touched) -> Touched:
        cfg = self._pdp_config()
        x = self._cube_in(cfg.src, cfg.c, cfg.h, cfg.w, "PDP input", touched)
        self._cube_out(cfg.dst, P.pool(cfg, x), "PDP output", touched)
        self.cycles += cfg.c * cfg.out_h * cfg.out_w * cfg.kernel[0] * cfg.kernel[1] // 8
        self._done(layer)
        return touched

    def _cdp(self, layer: Layer, touched: Touched) -> Touched:
        cfg = self._cdp_config()
        x = self._cube_in(cfg.src, cfg.c, cfg.h, cfg.w, "CDP input", touched)
        out, stats = D.normalise(cfg, self.luts, x)
        self._cube_out(cfg.dst, out, "CDP output", touched)
        group = self.consumer_group("CDP")
        for name, count in zip(D.LUT_COUNTERS, stats):  # saturating 32-bit counters (RTL)
            self.regs.poke(f"CDP_D_PERF_LUT_{name}_G{group}", min(count, 0xFFFFFFFF))
        self.cycles += cfg.c * cfg.h * cfg.w // 8
        self._done(layer)
        return touched

    def _done(self, layer: Layer) -> None:
        """Disarm the consumer groups, toggle CONSUMER, raise the done interrupts."""
        plan = self._done_plans.get(layer.units)
        if plan is None:
            plan = self._done_plans[layer.units] = self._done_plan(layer.units)
        regs = self.regs
        cleared, pointers, bits = plan
        values = dict(cleared)
        for reg, lsb, mask, g in pointers:
            values[reg.key] = regs.peek(reg) & ~(mask << lsb) | (g ^ 1) << lsb
        regs.redo(values)  # stored as pokes are, in one call (issue 31 #2: 14 -> 5 us a layer)
        self._raise(bits)

    def _done_plan(self, units: tuple[tuple[str, int], ...]
                   ) -> tuple[dict[int, int], tuple[tuple[Register, int, int, int], ...], int]:
        """What :meth:`_done` does for the units ``units``, worked out once per combination
        (15 us of name formatting and lookups per layer otherwise, issue 31 #2): the
        D_OP_ENABLE registers to clear (storage key -> 0), the S_POINTER registers whose
        CONSUMER becomes the other group (register, the field's lsb and mask, the group), and
        the done bits to raise (CDMA raises its data and weight bits)."""
        d = self.description
        bits = 0
        for unit, g in units:
            for n in {"CDMA": ("CDMA_DAT", "CDMA_WT")}.get(unit, (unit,)):
                if n in DONE_BITS:
                    bits |= 1 << (DONE_BITS[n] + g)
        pointers = []
        for unit, g in units:
            reg = d.register(f"{unit}_S_POINTER")
            f = next(f for f in reg.fields if f.name == "consumer")
            pointers.append((reg, f.lsb, (1 << f.width) - 1, g))
        return ({d.register(f"{unit}_D_OP_ENABLE_G{g}").key: 0 for unit, g in units},
                tuple(pointers), bits)

    # -- programs and commands --------------------------------------------------------------------
    def layer_references(self, path: Path, inputs: list) -> list:
        """A trace's per-layer check_crc lines as checksum references (trace_crc.py), else
        the generic .npz (Device.layer_references): per-layer dumps as arrays."""
        from .trace import is_trace
        from .trace_crc import crc_references

        if is_trace(Path(path)):
            return crc_references(self, Path(path))
        return super().layer_references(path, inputs)

    def load_program(self, path: Path, options: ProgramOptions) -> HostProgram | None:
        from .trace import is_trace, load_trace

        if not is_trace(Path(path)):
            return None
        host = load_trace(Path(path), self)
        planner = Nvdla(self._description_path)
        host.plan = plan_units(host, planner, Nvdla._retire, self._program_window.size // 4)
        self._planned = (host, planner.layer_specs[:len(host.plan)])
        return host

    def monitor_commands(self) -> dict[str, MonitorCommand]:
        from .monitor import commands

        return commands(self)

    def idle_message(self) -> str:
        waiting = [f"{u} G{g ^ 1} (its consumer is G{g})" for u, g in self.consumer.items()
                   if self.armed(u, g ^ 1) and not self.armed(u, g)]
        # SDP -> PDP on the fly needs both armed, PDP with flying_mode ON_FLYING
        to_pdp = self.armed("SDP") and self.view("SDP", "D_FEATURE_MODE_CFG").output_dst
        on_the_fly = self.armed("PDP") and self.pdp_on_the_fly()
        flying = ""
        if on_the_fly and not to_pdp:
            flying = (f"; PDP G{self.consumer_group('PDP')} is armed on the fly "
                      "(PDP_D_OPERATION_MODE_CFG.flying_mode ON_FLYING) and waits for SDP "
                      "armed with SDP_D_FEATURE_MODE_CFG.output_dst PDP")
        elif to_pdp and not on_the_fly:
            flying = (f"; SDP G{self.consumer_group('SDP')} sends its output to PDP "
                      "(SDP_D_FEATURE_MODE_CFG.output_dst PDP) and waits for PDP armed with "
                      "PDP_D_OPERATION_MODE_CFG.flying_mode ON_FLYING")
        return ("no hardware layer armed (every unit of a layer needs D_OP_ENABLE in its "
                "consumer group)" + (f"; armed but not the consumer: {', '.join(waiting)}"
                                     if waiting else "") + flying)

    def done_message(self) -> str:
        return f"NVDLA idle after {self.units_done} hardware layers"


def _cube_spec(name: str, where: tuple[int, int, int], c: int, h: int, w: int,
               register: str) -> TensorSpec:
    """An int8 feature cube [C, H, W] at (base, line stride, surface stride): element (c, y, x)
    at base + (c // 8) * surface + y * line + x * 8 + c % 8 (feature.py; nv_small's 8-byte
    memory atom, V§3.8 [EXT])."""
    base, line, surf = where
    return TensorSpec(name, "CHW", (c, h, w), "int8",
                      tuple((k // F.ATOM) * surf + k % F.ATOM for k in range(c)),
                      tuple(base + y * line for y in range(h)),
                      tuple(x * F.ATOM for x in range(w)),
                      f"int8 feature cube at {register} {base:#010x}, line stride {line:#x}, "
                      f"surface stride {surf:#x} (8-channel surfaces)")
