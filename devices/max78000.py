"""MAX78000 CNN accelerator: registers, memories and layer sequencing.

Register and memory layout come from ``configs/max78000.toml`` (seed 000). This module holds the
behaviour the description cannot: the cnn_en start edge (L2299), completion raising
CTRL.cnn_irq (L2182), and the layer sequence 0..LCNT_MAX (L2577).

A layer is decoded from the registers of all quadrants (max78000_layer.py) and executed by the
datapath (max78000_datapath.py, numba kernels in emu/). One-shot mode (CTRL.oneshot, L2209-2224)
is emulated as the hardware has it: each cnn_en 0->1 edge runs one layer and raises cnn_irq.
"""
from __future__ import annotations

import threading

from .description import load_description
from .device import Device, Touched, Unit
from .errors import DeviceError
from .max78000_datapath import run_layer
from .max78000_layer import LayerConfig, decode_layer

QUADRANTS = 4
LAYERS = 32
SRAM_BASE = 0x5040_0000  # data SRAM of quadrant 0, group 0 (digest §1.3, S3:L2391)
#: modelled timing (digest §7 #42: the tools estimate with a 4-cycle start and 2 cycles of row
#: overhead; the seed gives "1 output channel per clock", L36)
C_START, C_ROW = 4, 2


def layer_cycles(cfg: LayerConfig) -> int:
    """Modelled cycles of one layer: a start overhead, then per output row a row overhead plus
    one clock per output channel (and input pass) at every output position: the 64 processors
    compute the products of one output channel for one position in parallel (L36).
    Check: the layer shapes of the ai8x MNIST example give 66,340 cycles by this formula against
    the 70,157 the silicon takes (issue 3 figure). A model, not the silicon: labelled as such in the description (EMU_CYCLES)."""
    per_position = cfg.out_slots * cfg.in_passes
    return C_START + cfg.out_rows * (C_ROW + cfg.out_cols * per_position)


class Max78000(Device):
    name = "max78000"
    unit_name = "layer"

    def __init__(self, description_path: str | None = None) -> None:
        super().__init__(load_description(description_path or "max78000"))
        self.active = False  # the state machine is between a start edge and completion
        self.paused = False  # one-shot: a layer ran, waiting for the next cnn_en edge (L2213)
        self.layer = 0  # next layer to run
        self.history: list[tuple[int, Touched]] = []  # (layer, touched) since the start edge
        for q in range(QUADRANTS):
            self.regs.on_write(f"CNNx16_{q}_CTRL", self._ctrl_written)

    # -- registers with side effects ---------------------------------------------------------
    def _ctrl_written(self, reg, old: int, new: int) -> None:
        """cnn_en 0->1 starts processing at layer 0 (L2299-2311), or in one-shot mode runs the
        next layer (L2209-2224); a quadrant with ext_sync != 0 is a slave that follows its master
        (L2193), so only a master's edge counts, and only with clk_en set (digest §7 #36)."""
        rising = not (old & 1) and (new & 1)
        ext_sync = (new >> 9) & 7
        if not (rising and ext_sync == 0 and (new >> 3) & 1):
            return
        if self.paused:
            self.paused = False
            self.active = True
            return
        self.active = True
        self.layer = 0
        self.history = []

    # -- program -----------------------------------------------------------------------------
    def _layer_address(self, y: int) -> int:
        return self.description.register(f"CNNx16_0_L{y}_RCNT").address

    @property
    def pc(self) -> int:
        return self._layer_address(self.layer if self.layer < LAYERS else 0)

    def set_pc(self, address: int) -> None:
        for y in range(self.last_layer() + 1):
            if self._layer_address(y) == address:
                self.layer = y
                self.active = True
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
                summary = self.layer_config(y).summary()
            except DeviceError as e:
                summary = f"not runnable: {e}"
            out.append(Unit(self._layer_address(y), f"Layer {y}", summary))
        return out

    def layer_config(self, y: int) -> LayerConfig:
        return decode_layer(self.regs.peek, range(QUADRANTS), y)

    def execute_unit(self, halt_requested: threading.Event) -> Touched:
        y = self.layer
        cfg = self.layer_config(y)
        touched = run_layer(self.bus, cfg)
        self.cycles += layer_cycles(cfg)
        self.history.append((y, touched))
        self.layer += 1
        if self.layer > self.last_layer():
            self._complete()
        elif self.regs.field("CNNx16_0_CTRL", "oneshot"):
            # one-shot: stop after this layer and raise the interrupt (digest §7 #11, the SDK
            # waits for the ISR after every cnn_continue)
            self.active, self.paused = False, True
            self._raise_irq()
        return touched

    def writer_of(self, address: int) -> int | None:
        """The last layer since the start that wrote ``address`` (for mismatch reports)."""
        for y, t in reversed(self.history):
            if any(s <= address < e for s, e in t.writes):
                return y
        return None

    def _complete(self) -> None:
        """After layer LCNT_MAX the engine sets CTRL.cnn_irq (L2182); cnn_en stays set (the SDK's
        ISR clears it, digest §7 #10)."""
        self.active = self.paused = False
        self.layer = 0
        self._raise_irq()

    def _raise_irq(self) -> None:
        for q in range(QUADRANTS):
            ctrl = f"CNNx16_{q}_CTRL"
            if self.regs.peek(ctrl) & 1:
                self.regs.set_field(ctrl, "cnn_irq", 1)

    def interrupts(self) -> dict[str, bool]:
        return {"CNN": any(self.regs.field(f"CNNx16_{q}_CTRL", "cnn_irq")
                           for q in range(QUADRANTS))}

    def done_message(self) -> str:
        return f"CNN complete after {self.units_done} layers, cnn_irq raised"

    def idle_message(self) -> str:
        if self.paused:
            return (f"one-shot mode: layer {self.layer - 1} done, waiting for cnn_en 0->1 to run "
                    f"layer {self.layer}")
        return super().idle_message()

    def reset(self, kind: str = "halt") -> None:
        super().reset(kind)
        self.active = self.paused = False
        self.layer = 0
        self.history = []

    def _state(self) -> dict:
        return {"active": self.active, "paused": self.paused, "layer": self.layer,
                "history": list(self.history)}

    def _set_state(self, state: dict) -> None:
        self.active, self.paused = state["active"], state["paused"]
        self.layer, self.history = state["layer"], state["history"]
