"""MAX78000 CNN accelerator: registers, memories and layer sequencing.

Register and memory layout come from ``configs/max78000.toml`` [UG-CNN]. This module holds the
behaviour the description cannot: the cnn_en start edge [UG-CNN: Table 27-19], completion raising
CTRL.cnn_irq [UG-CNN: Table 27-19], and the layer sequence 0..LCNT_MAX [UG-CNN: Table 27-21].

A layer is decoded from the registers of all quadrants ((layer.py)) and executed by the
datapath (datapath.py, numba kernels in emu/). One-shot mode (CTRL.oneshot, [UG-CNN: Table 27-19])
is emulated as the hardware has it: each cnn_en 0->1 edge runs one layer and raises cnn_irq.
"""
from __future__ import annotations

from pathlib import Path

from ..description import FieldView, load_description
from ..device import Device, MonitorCommand, ProgramOptions, Touched, Unit, UnitContext
from ..errors import DeviceError
from ..host import HostProgram
from ..tensors import TensorSpec
from . import monitor
from .ai8x import load_ai8x_program
from .datapath import run_layer
from .fifo import Fifos
from .layer import LayerConfig, decode_layer, layer_cycles
from .listing import ai8x_summary
from .memory_control import MemoryControl
from .mram import install_mram_hooks
from .stream import run_stream_layer, stream_count, validate
from .tensors import layer_tensors

# device-level features (FIFOs, streaming, BIST/zeroize/power/Mlator, listing, monitor
# commands) live in fifo.py, stream.py, memory_control.py, listing.py and monitor.py

QUADRANTS = 4
LAYERS = 32
SRAM_BASE = 0x5040_0000  # data SRAM of quadrant 0, group 0 (R§1.3, [AI8X: Data memory])
class Max78000(Device):
    name = "max78000"
    unit_name = "layer"
    #: _state builds new lists and dicts; a stream layer's FrameBuffer is made new by each run
    #: of the layer (stream.scatter_stream), never changed once stored
    state_is_copy = True

    def __init__(self, description_path: str | None = None) -> None:
        super().__init__(load_description(description_path or "max78000"))
        self.active = False  # the state machine is between a start edge and completion
        # one-shot: a layer ran, waiting for the next cnn_en edge [UG-CNN: Table 27-19]
        self.paused = False
        self.layer = 0  # next layer to run
        self.ended = False  # the last layer completed: pc is the end address until a start
        #: layer -> its last two decodes, the latest first: (addresses read, their values,
        #: config) each (layer_config)
        self._decoded: dict[int, list[tuple]] = {}
        # one 2-D array per memory kind so the datapath's kernels index every processor at once:
        # row = global processor (MRAM) / global data memory q*4+g (SRAM)
        self.bus.stack("mram", [f"mram_q{p // 16}_p{p % 16}" for p in range(16 * QUADRANTS)])
        self.bus.stack("sram", [f"sram_q{m // 4}_g{m % 4}" for m in range(4 * QUADRANTS)])
        self.regs.on_write_each("CTRL", self._ctrl_written)  # CNNx16_q_CTRL of each quadrant
        install_mram_hooks(self)  # CTRL.mexpress packed weight loading [UG-CNN: Table 27-19]
        self.warnings: list[str] = []  # model messages (doc-rule violations), newest last
        self._warned: set = set()
        # CNN_FIFO_WRn, CNN_FIF0_CTRL/STAT [UG-CNN: CNN Global Registers (CNN)]
        self.fifos = Fifos(self)
        # TEST, SRAM/AOD power, Mlator (after the MRAM hooks)
        self.memory_control = MemoryControl(self)
        self.stream_frames: dict = {}  # stream layer -> FrameBuffer (frame-at-once streaming)

    def warn(self, message: str, key=None) -> None:
        """Record a model message (a doc rule broken, data dropped); ``key`` de-duplicates
        repeats until the next start edge."""
        if key is not None:
            if key in self._warned:
                return
            self._warned.add(key)
        self.warnings.append(message)
        del self.warnings[:-100]

    def input_from_fifo(self) -> bool:
        """CTRL.fifo_en [UG-CNN: Table 27-19] on any quadrant: layer 0 takes its input from the
        FIFOs."""
        return any(self.regs.field(r.name, "fifo_en") for r in self.regs.instances("CTRL"))

    def chw_input(self, cfg) -> bool:
        """LCTRL0.parallel of the layer's master or CTRL.bigdata
        [UG-CNN: Table 27-34, Table 27-19]."""
        m = cfg.master
        return bool(self.regs.view(f"CNNx16_{m}_L{cfg.layer}_LCTRL0").parallel
                    | self.regs.view(f"CNNx16_{m}_CTRL").bigdata)

    def host_read(self, addr: int, size: int) -> bytes:
        """A read by the driver's CPU (not the debugger): CNNx16_n_MLAT reads advance the
        Mlator, memories in deep sleep / powered down read 0 (see memory_control.py)."""
        data = self.memory_control.cpu_view(addr, self.bus.read(addr, size))
        out = bytearray(data)
        for q in range(QUADRANTS):
            a = self.description.register(f"CNNx16_{q}_MLAT").address
            if addr < a + 4 and a < addr + size:
                word = self.memory_control.mlat_cpu_read(q).to_bytes(4, "little")
                for i in range(4):
                    if addr <= a + i < addr + size:
                        out[a + i - addr] = word[i]
        return bytes(out)

    def load_program(self, path: Path, options: ProgramOptions) -> HostProgram | None:
        """A project directory generated by ai8x-synthesis (or testkit/max78000_build.py) is
        the host program its main() is; anything else is not this importer's."""
        if not Path(path).is_dir():
            return None
        return load_ai8x_program(path)

    # -- registers with side effects ---------------------------------------------------------
    def layer_references(self, path: Path, inputs: list) -> list:
        """ai8xize.py's log (``--verbose --log``: log.txt) as per-layer references
        (ai8x_log.py), else the generic .npz (Device.layer_references)."""
        from .ai8x_log import is_log, log_references

        if is_log(path):
            return log_references(self, path)
        return super().layer_references(path, inputs)

    def _ctrl_written(self, reg, old: int, new: int) -> None:
        """cnn_en 0->1 starts processing at layer 0 [UG-CNN: Table 27-19], or in one-shot mode runs
        the next layer [UG-CNN: Table 27-19]; a quadrant with ext_sync != 0 is a slave that follows
        its master [UG-CNN: Table 27-19], so only a master's edge counts, and only with clk_en set
        (R7#36)."""
        q = reg.instance
        self.memory_control.ctrl_written(q, old, new)  # mlat_ld edge [UG-CNN: Table 27-19]
        was, now = reg.definition.view(old), reg.definition.view(new)
        rising = not was.cnn_en and now.cnn_en
        ext_sync = now.ext_sync
        if ext_sync == 4 | q:
            # [izer] with FIFO input the master's CTRL carries bit 11 too (0x0018c809 on
            # quadrant 0): ext_sync "external, following quadrant q" names itself -> master
            ext_sync = 0
        if rising and ext_sync == 0 and not now.clk_en:
            self.warn(f"CNNx16_{q}_CTRL: cnn_en 0->1 with clk_en = 0 ignored: the "
                      "data-processing clock is off ([UG-CNN: Table 27-19], R7#36)")
        if not (rising and ext_sync == 0 and now.clk_en):
            self.fifos.drain()
            return
        self._warned.clear()
        self.ended = False
        if self.paused:
            self.paused = False
            self.active = True
            self.fifos.drain()
            return
        self.active = True
        self.layer = 0
        self.stream_frames = {}
        self.fifos.drain()  # the engine fetches from the FIFOs as soon as it runs [AI8X: FIFOs]

    # -- program -----------------------------------------------------------------------------
    def _layer_address(self, y: int) -> int:
        return self.description.register(f"CNNx16_0_L{y}_RCNT").address

    @property
    def pc(self) -> int:
        """The next layer's CNNx16_0_L<y>_RCNT; the end address after the last layer (the
        engine's layer counter returns to 0 there, which would name layer 0)."""
        if self.ended:
            return self.end_address
        return self._layer_address(self.layer if self.layer < LAYERS else 0)

    def set_pc(self, address: int) -> None:
        for y in range(self.last_layer() + 1):
            if self._layer_address(y) == address:
                self.layer = y
                self.active = True
                self.ended = False
                return
        super().set_pc(address)

    def last_layer(self) -> int:
        return self.regs.field("CNNx16_0_LCNT_MAX", "lcnt")

    def finished(self) -> bool:
        return not self.active

    def units(self) -> list[Unit]:
        out = []
        for y in range(self.last_layer() + 1):
            try:
                summary = ai8x_summary(self.layer_config(y), y < stream_count(self))
            except DeviceError as e:
                summary = f"not runnable: {e}"
            out.append(Unit(self._layer_address(y), f"Layer {y}", summary))
        return out

    def layer_config(self, y: int) -> LayerConfig:
        """decode_layer of layer ``y``, memoised on the values of exactly the registers that
        decode read (a decode is a pure function of them), so an unchanged layer is not decoded
        again on the next inference or step. The last two decodes are kept: a run decodes
        with CTRL.cnn_en set and the listing after it (a stop's unit_at_pc) with CTRL.cnn_irq
        set too, and with one kept each inference of a dataset run decoded every layer twice
        (~0.5 ms of the 4.9 ms a sample of the bundled demo took, issue 31 #2)."""
        kept = self._decoded.setdefault(y, [])
        for i, (addresses, values, cfg) in enumerate(kept):
            if self.regs.peek_addresses(addresses) == values:
                if i:
                    kept.reverse()
                return cfg
        read: list[int] = []

        def peek(name: str) -> FieldView:
            reg = self.description.register(name)
            read.append(reg.address)
            return self.regs.view(reg)

        cfg = decode_layer(peek, range(QUADRANTS), y)
        addresses = tuple(dict.fromkeys(read))
        kept[:] = [(addresses, self.regs.peek_addresses(addresses), cfg)] + kept[:1]
        return cfg

    def unit_tensors(self, index: int) -> tuple[TensorSpec, ...]:
        """Layer ``index``'s input(s) and output in data SRAM, CHW as ai8x-training has them
        (tensors.py); ``()`` for a layer that cannot be decoded (its units() summary says
        why: "not runnable: ...")."""
        self.check_unit(index)
        try:
            return layer_tensors(self, index)
        except DeviceError:
            return ()

    def unit_label(self, address: int) -> str:
        y = (address - self._layer_address(0)) // 4
        if 0 <= y < LAYERS and address == self._layer_address(y):
            return f"layer {y}"
        return super().unit_label(address)

    def execute_unit(self, ctx: UnitContext) -> Touched:
        """One layer: a single kernel call that cannot stop inside (a halt request is honoured
        before the next layer)."""
        y = self.layer
        cfg = self.layer_config(y)
        # memories powered down / asleep: fault [UG-CNN: Table 27-20]
        self.memory_control.check_layer(cfg)
        streams = stream_count(self)
        if y == 0 and streams:
            cfgs = {z: (cfg if z == 0 else self.layer_config(z)) for z in range(streams)}
            for w in validate(self, cfgs):
                self.warn(w, key=w)
        x = None
        if y == 0 and self.input_from_fifo():
            ctrl = self.regs.view(f"CNNx16_{cfg.master}_CTRL")
            # raises "layer 0 waits for N more bytes in FIFO n" before any state changes
            x = self.fifos.gather(cfg, self.chw_input(cfg), bool(ctrl.fifogrp))
        if y < streams:
            touched = run_stream_layer(self, cfg, x, streams)
        else:
            touched = run_layer(self.bus, cfg, x)
        self.cycles += layer_cycles(cfg)
        self.layer += 1
        if self.layer > self.last_layer():
            self._complete()
        elif self.regs.field("CNNx16_0_CTRL", "oneshot"):
            # one-shot: stop after this layer and raise the interrupt (R7#11, the SDK
            # waits for the ISR after every cnn_continue)
            self.active, self.paused = False, True
            self._raise_irq()
        return touched

    def _complete(self) -> None:
        """After layer LCNT_MAX the engine sets CTRL.cnn_irq [UG-CNN: Table 27-19]; cnn_en stays set
        (the SDK's ISR clears it, R7#10)."""
        self.active = self.paused = False
        self.layer = 0
        self.ended = True
        self._raise_irq()

    def _raise_irq(self) -> None:
        for q in range(QUADRANTS):
            ctrl = f"CNNx16_{q}_CTRL"
            if self.regs.peek(ctrl) & 1:
                self.regs.set_field(ctrl, "cnn_irq", 1)

    def interrupts(self) -> dict[str, bool]:
        return {"CNN": any(self.regs.field(f"CNNx16_{q}_CTRL", "cnn_irq")
                           for q in range(QUADRANTS)),
                "CNN_FIFO": self.fifos.irq()}  # FIFO interrupts: a line of their own (R7#15)

    def monitor_commands(self) -> dict[str, MonitorCommand]:
        return monitor.commands(self)

    def done_message(self) -> str:
        msg = f"CNN complete after {self.units_done} layers, cnn_irq raised"
        if self.warnings:
            msg += f" ({len(self.warnings)} warnings: monitor cnn warnings)"
        return msg

    def idle_message(self) -> str:
        if self.paused:
            return (f"one-shot mode: layer {self.layer - 1} done, waiting for cnn_en 0->1 to run "
                    f"layer {self.layer}")
        return super().idle_message()

    def reset(self, kind: str = "halt") -> None:
        super().reset(kind)
        self.active = self.paused = self.ended = False
        self.layer = 0
        self.fifos.reset()
        self.memory_control.reset()
        self.stream_frames = {}
        self.warnings, self._warned = [], set()

    def _state(self) -> dict:
        return {"active": self.active, "paused": self.paused, "layer": self.layer,
                "ended": self.ended,
                "fifos": self.fifos.state(),
                "tests": self.memory_control.state(), "stream_frames": dict(self.stream_frames)}

    def _set_state(self, state: dict) -> None:
        self.active, self.paused = state["active"], state["paused"]
        self.layer = state["layer"]
        self.ended = state["ended"]
        if "fifos" in state:
            self.fifos.set_state(state["fifos"])
            self.memory_control.set_state(state["tests"])
            self.stream_frames = dict(state["stream_frames"])
