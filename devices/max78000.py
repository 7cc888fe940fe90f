"""MAX78000 CNN accelerator: registers, memories and layer sequencing.

Register and memory layout come from ``configs/max78000.toml`` (seed 000). This module holds the
behaviour the description cannot: the cnn_en start edge (L2299), completion raising
CTRL.cnn_irq (L2182), and the layer sequence 0..LCNT_MAX (L2577).

The layer datapath itself is the subject of its own issue; until it lands a layer is a
placeholder *pass-through of one word* (the word at the layer's read pointer is copied to its
write pointer), enough to exercise stepping, breakpoints and watchpoints end to end.
"""
from __future__ import annotations

import threading

from .description import load_description
from .device import Device, Touched, Unit

QUADRANTS = 4
LAYERS = 32
SRAM_BASE = 0x5040_0000  # data SRAM of quadrant 0, group 0 (digest §1.3, S3:L2391)


def sram_address(wptr: int) -> int:
    """CPU address of a 17-bit write-pointer value: bits 16:13 select one of the 16 data memories
    (quadrant*4 + group), bits 12:0 the 32-bit word (digest §3.1 step 9, from SDK values)."""
    mem, word = (wptr >> 13) & 0xF, wptr & 0x1FFF
    return SRAM_BASE + (mem >> 2) * 0x40_0000 + (mem & 3) * 0x8000 + word * 4


class Max78000(Device):
    name = "max78000"
    unit_name = "layer"

    def __init__(self, description_path: str | None = None) -> None:
        super().__init__(load_description(description_path or "max78000"))
        self.active = False  # the state machine is between a start edge and completion
        self.layer = 0  # next layer to run
        for q in range(QUADRANTS):
            self.regs.on_write(f"CNNx16_{q}_CTRL", self._ctrl_written)

    # -- registers with side effects ---------------------------------------------------------
    def _ctrl_written(self, reg, old: int, new: int) -> None:
        """cnn_en 0->1 starts processing at layer 0 (L2299-2311); a quadrant with ext_sync != 0
        is a slave that follows its master (L2193), so only a master's edge starts."""
        rising = not (old & 1) and (new & 1)
        ext_sync = (new >> 9) & 7
        if rising and ext_sync == 0 and (new >> 3) & 1:
            self.active = True
            self.layer = 0

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
            wptr = self.regs.read(f"CNNx16_0_L{y}_WPTR_BASE")
            out.append(Unit(self._layer_address(y), f"Layer {y}",
                            f"placeholder pass-through, output word at {sram_address(wptr):#010x}"))
        return out

    def execute_unit(self, halt_requested: threading.Event) -> Touched:
        y = self.layer
        # placeholder: RPTR_BASE is a word index in processor 0's own memory (digest §7 #27)
        src = SRAM_BASE + (self.regs.read(f"CNNx16_0_L{y}_RPTR_BASE") & 0x1FFF) * 4
        dst = sram_address(self.regs.read(f"CNNx16_0_L{y}_WPTR_BASE"))
        self.bus.write(dst, self.bus.read(src, 4))
        touched = Touched(reads=[(src, src + 4)], writes=[(dst, dst + 4)])
        self.layer += 1
        if self.layer > self.last_layer():
            self._complete()
        return touched

    def _complete(self) -> None:
        """After layer LCNT_MAX the engine sets CTRL.cnn_irq (L2182); cnn_en stays set (the SDK's
        ISR clears it, digest §7 #10)."""
        self.active = False
        self.layer = 0
        for q in range(QUADRANTS):
            ctrl = f"CNNx16_{q}_CTRL"
            if self.regs.peek(ctrl) & 1:
                self.regs.set_field(ctrl, "cnn_irq", 1)

    def interrupts(self) -> dict[str, bool]:
        return {"CNN": any(self.regs.field(f"CNNx16_{q}_CTRL", "cnn_irq")
                           for q in range(QUADRANTS))}

    def done_message(self) -> str:
        return f"CNN complete after {self.units_done} layers, cnn_irq raised"

    def reset(self, kind: str = "halt") -> None:
        super().reset(kind)
        self.active = False
        self.layer = 0

    def _state(self) -> dict:
        return {"active": self.active, "layer": self.layer}

    def _set_state(self, state: dict) -> None:
        self.active, self.layer = state["active"], state["layer"]
