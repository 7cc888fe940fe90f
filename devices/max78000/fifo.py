"""MAX78000 input FIFOs: CNN_FIFO_WR0-3, CNN_FIF0_CTRL, CNN_FIF0_STAT and CTRL.fifo_en input.

[UG-CNN: CNN Global Registers (CNN)] (registers), [UG-CNN: Table 27-19] (CTRL.fifo_en),
[UG-CNN: Table 27-19] (CTRL.fifogrp); R7#15 for the open points. Decisions:

* **Depth: 8 entries of 32 bits per FIFO** (``FIFO_DEPTH``). The seed gives none; the 3-bit
  thresholds (0-7, [UG-CNN: Table 27-10]) fit an 8-entry pointer difference. Thresholds count
  entries.
* ``almost_full`` = entries > full_thresh ("difference exceeds", [UG-CNN: Table 27-10]);
  ``almost_empty`` = entries < empty_thresh ("falls below", [UG-CNN: Table 27-10]); ``full`` =
  entries == depth; ``empty`` = entries == 0. A disabled FIFO reports 0 in every per-FIFO bit
  ("until software disables the FIFO", [UG-CNN: Table 27-11]; R7#15), so CNN_FIF0_STAT reads 0 after
  reset.
* Aggregates as printed: fifos_full / fifos_almost_full = AND over the *enabled* FIFOs,
  fifos_empty / fifos_almost_empty = OR [UG-CNN: Table 27-11]; rptr_eq / wptr_eq = all enabled
  FIFOs' read / write pointers (mod depth) equal [UG-CNN: Table 27-11]. All 0 with no FIFO enabled.
* A write to CNN_FIFO_WRn of a disabled FIFO is dropped (recorded in ``dropped``); a write to a
  full FIFO is an overrun, dropped likewise (the generated load_input() polls ``full`` first).
  Reading CNN_FIFO_WRn returns 0 (R7#15).
* The engine drains the FIFOs while the CNN is started with CTRL.fifo_en (the hardware fetches as
  soon as data is available, [AI8X: FIFOs]): pushed words move to the layer's input staging buffer,
  so a driver that polls ``full`` never waits. Coupled mode (fifo_cpl, [UG-CNN: Table 27-10]) drains
  in lockstep: only as many words as every enabled FIFO holds.
* Interrupts [UG-CNN: Table 27-10]: line ``CNN_FIFO`` = OR over enabled FIFOs of (full &
  full_int_en) | (empty & empty_int_en) | (almost_full & almost_full_int_en) | (almost_empty &
  almost_empty_int_en). The seed does not name the line (R7#15); it is reported separately from
  ``CNN`` in Device.interrupts().
* Byte -> processor routing of the first layer ([UG-CNN: Table 27-19]; izer load.py and the
  FIFO limits of [AI8X: Standard FIFOs]): HWC (neither LCTRL0.parallel nor CTRL.bigdata): byte b of
  FIFO n -> processor 16n+b, one pixel per word. CHW (parallel/bigdata): FIFO n carries one channel,
  4 consecutive pixels per word, byte 0 first, to processor 16n. With CTRL.fifogrp = 1 all
  "little data" goes to the first 4 processors: CHW FIFO n -> processor n; HWC only FIFO 0 (bytes
  -> processors 0-3) can be used. Enabled processors that no FIFO feeds are a fault.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from ..description import FieldView
from ..errors import DeviceError

FIFOS = 4
FIFO_DEPTH = 8  # 32-bit entries (decision, see module doc)
GLOBAL_CTRL = "CNN_FIF0_CTRL"
#: the FIFOs' write registers, FIFO n at index n [UG-CNN: CNN Global Registers (CNN)]
WRITE_REGISTERS = ("CNN_FIFO_WR0", "CNN_FIFO_WR1", "CNN_FIFO_WR2", "CNN_FIFO_WR3")
GLOBAL_STAT = "CNN_FIF0_STAT"


class Fifos:
    """The four input FIFOs of one device, their status and the engine's staging buffers."""

    def __init__(self, device) -> None:
        self.dev = device
        self.q: list[deque[int]] = [deque() for _ in range(FIFOS)]
        self.wptr = [0] * FIFOS  # words ever pushed (pointer = value % depth)
        self.rptr = [0] * FIFOS  # words ever popped
        self.staged: list[bytearray] = [bytearray() for _ in range(FIFOS)]  # drained by the engine
        self.dropped = [0] * FIFOS
        regs = device.regs
        for n, name in enumerate(WRITE_REGISTERS):
            regs.on_write(name, self._make_push(n))
            regs.on_read(name, lambda reg, v: 0)
        regs.on_read(GLOBAL_STAT, lambda reg, v: self.status())
        regs.on_write(GLOBAL_CTRL, self._ctrl_written)

    # -- state ---------------------------------------------------------------------------------
    def reset(self) -> None:
        for n in range(FIFOS):
            self.q[n].clear()
            self.staged[n].clear()
        self.wptr = [0] * FIFOS
        self.rptr = [0] * FIFOS
        self.dropped = [0] * FIFOS

    def state(self) -> dict:
        return {"q": [list(x) for x in self.q], "wptr": list(self.wptr), "rptr": list(self.rptr),
                "staged": [bytes(s) for s in self.staged], "dropped": list(self.dropped)}

    def set_state(self, s: dict) -> None:
        self.q = [deque(x) for x in s["q"]]
        self.wptr, self.rptr = list(s["wptr"]), list(s["rptr"])
        self.staged = [bytearray(b) for b in s["staged"]]
        self.dropped = list(s["dropped"])

    def ctrl(self) -> FieldView:
        return self.dev.regs.view(GLOBAL_CTRL)

    def enabled(self) -> int:
        """CNN_FIF0_CTRL.fifo_en: bit n = FIFO n enabled [UG-CNN: Table 27-10]."""
        return self.ctrl().fifo_en

    # -- pushes --------------------------------------------------------------------------------
    def _make_push(self, n: int):
        def push(reg, old: int, new: int) -> None:
            self.push(n, new)
        return push

    def push(self, n: int, word: int) -> None:
        if not (self.enabled() >> n) & 1:
            self.dropped[n] += 1
            self.dev.warn(f"CNN_FIFO_WR{n}: FIFO {n} is disabled (CNN_FIF0_CTRL.fifo_en bit {n} "
                          "= 0): word dropped", key=("fifo-disabled", n))
            return
        if len(self.q[n]) >= FIFO_DEPTH:
            self.dropped[n] += 1
            self.dev.warn(f"CNN_FIFO_WR{n}: FIFO {n} full ({FIFO_DEPTH} words): overrun, word "
                          "dropped", key=("fifo-overrun", n))
            return
        self.q[n].append(word & 0xFFFFFFFF)
        self.wptr[n] += 1
        self.drain()

    def _ctrl_written(self, reg, old: int, new: int) -> None:
        view = reg.definition.view
        off = view(old).fifo_en & ~view(new).fifo_en
        for n in range(FIFOS):
            # disabling a FIFO empties it and clears its status [UG-CNN: Table 27-11]
            if (off >> n) & 1:
                self.q[n].clear()
                self.wptr[n] = self.rptr[n] = 0
        self.drain()

    def engine_draining(self) -> bool:
        """The CNN is started (between the start edge and completion) with CTRL.fifo_en."""
        d = self.dev
        return bool(d.active or d.paused) and d.input_from_fifo()

    def drain(self) -> None:
        if not self.engine_draining():
            return
        en = self.enabled()
        idx = [n for n in range(FIFOS) if (en >> n) & 1]
        if not idx:
            return
        if self.ctrl().fifo_cpl:  # coupled: lockstep [UG-CNN: Table 27-10]
            k = min(len(self.q[n]) for n in idx)
            counts = {n: k for n in idx}
        else:
            counts = {n: len(self.q[n]) for n in idx}
        for n, k in counts.items():
            for _ in range(k):
                self.staged[n] += self.q[n].popleft().to_bytes(4, "little")
                self.rptr[n] += 1

    # -- status (pure) -------------------------------------------------------------------------
    def flags(self, n: int) -> tuple[int, int, int, int]:
        """(full, almost_full, empty, almost_empty) of FIFO n; 0s when disabled."""
        if not (self.enabled() >> n) & 1:
            return 0, 0, 0, 0
        c = self.ctrl()
        full_t, empty_t = c.full_thresh, c.empty_thresh
        k = len(self.q[n])
        return int(k >= FIFO_DEPTH), int(k > full_t), int(k == 0), int(k < empty_t)

    def status(self) -> int:
        """CNN_FIF0_STAT built by field name from the FIFOs' flags [UG-CNN: Table 27-11]."""
        en = self.enabled()
        idx = [n for n in range(FIFOS) if (en >> n) & 1]
        per = {n: self.flags(n) for n in idx}

        def bits(k: int) -> int:  # flag k of every enabled FIFO, bit n = FIFO n
            return sum(f[k] << n for n, f in per.items())
        fields = dict(full=bits(0), almost_full=bits(1), empty=bits(2), almost_empty=bits(3))
        if idx:
            flags = list(per.values())
            fields.update(fifos_full=int(all(f[0] for f in flags)),
                          fifos_empty=int(any(f[2] for f in flags)),
                          fifos_almost_full=int(all(f[1] for f in flags)),
                          fifos_almost_empty=int(any(f[3] for f in flags)),
                          wptr_eq=int(len({self.wptr[n] % FIFO_DEPTH for n in idx}) == 1),
                          rptr_eq=int(len({self.rptr[n] % FIFO_DEPTH for n in idx}) == 1))
        return self.dev.description.register(GLOBAL_STAT).definition.encode(**fields)

    def irq(self) -> bool:
        """A FIFO flag whose interrupt enable (CNN_FIF0_CTRL.*_int_en, bit n = FIFO n) is set."""
        c = self.ctrl()
        for n in range(FIFOS):
            full, afull, empty, aempty = self.flags(n)
            if (full and (c.full_int_en >> n) & 1 or empty and (c.empty_int_en >> n) & 1
                    or afull and (c.almost_full_int_en >> n) & 1
                    or aempty and (c.almost_empty_int_en >> n) & 1):
                return True
        return False

    # -- the first layer's input ---------------------------------------------------------------
    def routing(self, cfg, chw: bool, fifogrp: bool) -> dict[int, tuple[int, int]]:
        """processor index -> (fifo, byte lane or -1 for CHW)."""
        route: dict[int, tuple[int, int]] = {}
        if chw:
            for n in range(FIFOS):
                route[n if fifogrp else 16 * n] = (n, -1)
        elif fifogrp:
            for b in range(4):
                route[b] = (0, b)
        else:
            for n in range(FIFOS):
                for b in range(4):
                    route[16 * n + b] = (n, b)
        return route

    def gather(self, cfg, chw: bool, fifogrp: bool, consume: bool = True) -> np.ndarray:
        """X[j, H, W] int8 of the layer's processors from the staged FIFO bytes; raises
        DeviceError naming the FIFO that lacks data ("layer 0 waits for N more bytes in FIFO n")
        or a processor no FIFO feeds."""
        y = cfg.layer
        if cfg.in_passes != 1:
            raise DeviceError(f"layer {y}: FIFO input with {cfg.in_passes} input passes "
                              "(LCTRL1.inpchexp): the FIFOs carry at most 16 channels "
                              "[AI8X: Standard FIFOs]")
        route = self.routing(cfg, chw, fifogrp)
        h, w = cfg.in_rows, cfg.in_cols
        pixels = h * w
        words = -(-pixels // 4) if chw else pixels
        en = self.enabled()
        need: dict[int, int] = {}
        for p in cfg.processors:
            if p.index not in route:
                raise DeviceError(
                    f"layer {y}: processor {p.index} is enabled but no input FIFO feeds it "
                    f"(CTRL.fifo_en: {'CHW' if chw else 'HWC'} input, fifogrp={int(fifogrp)})")
            n = route[p.index][0]
            if not (en >> n) & 1:
                raise DeviceError(f"layer {y}: processor {p.index} takes its input from FIFO {n}, "
                                  f"which is disabled (CNN_FIF0_CTRL.fifo_en bit {n})")
            need[n] = 4 * words
        if fifogrp and not chw and en & ~1:
            raise DeviceError(f"layer {y}: CTRL.fifogrp = 1 routes HWC data of FIFO 0 to "
                              "processors 0-3; disable FIFOs 1-3")
        for n in sorted(need):
            have = len(self.staged[n]) + 4 * len(self.q[n])
            if have < need[n]:
                raise DeviceError(f"layer {y} waits for {need[n] - have} more bytes in FIFO {n} "
                                  f"({need[n]} bytes = {words} words for {cfg.in_rows}x"
                                  f"{cfg.in_cols} {'CHW' if chw else 'HWC'} input; push them "
                                  f"with CNN_FIFO_WR{n}, then continue)")
        self.drain()
        x = np.zeros((len(cfg.processors), h, w), dtype=np.int8)
        for j, p in enumerate(cfg.processors):
            n, lane = route[p.index]
            raw = np.frombuffer(bytes(self.staged[n][:need[n]]), dtype=np.uint8).reshape(-1, 4)
            if lane < 0:
                x[j] = raw.reshape(-1)[:pixels].view(np.int8).reshape(h, w)
            else:
                x[j] = raw[:, lane].view(np.int8).reshape(h, w)
        if consume:
            for n, k in need.items():
                del self.staged[n][:k]
        return x
