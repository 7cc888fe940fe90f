"""MAX78000 per-quadrant BIST / zeroization (CNNx16_n_TEST), memory power (CNNx16_n_SRAM.pd/ds,
CNN_AOD_CTRL.pd/dsleep) and the Mlator (CTRL.mlat_ld, CTRL.mlatch_sel, CNNx16_n_MLAT).

[UG-CNN] tables; [UG-CNN: Table 27-22], R§3.5, R§4.1 (sequences E-H) and R7#n.

BIST / zeroization ([UG-CNN: Table 27-22], R§4.1 F/G):
* run (xbistrun) and zeroize (xramz) bits act on a 0->1 edge; writing 1 while 1 does nothing.
  The emulator completes at once: the memory's done bit (xallbdone / xallzdone) and the aggregate
  (bistdone / zerodone) are set by the same write. BIST always passes (no emulated memory has a
  fault): xallbfail = bistfail = 0. **A BIST run leaves the memory it tested zeroed** (R7#19 left
  the contents open): ai8xize.py's ``--zero-sram`` ("zero memories") runs exactly the four BIST
  run bits in cnn_init and then leaves all-zero kernels out of the weights it loads, so the
  generator relies on it (facts from ai8x-synthesis izer/backend/max7800x.py and kernels.py).
* zeroization clears every location of that memory type of the quadrant (SRAM: its 4 data
  memories; MRAM / TRAM: its 16 blocks; BRAM: its bias memory).
* writing a run / zeroize bit back to 0 clears that memory's done and fail bits; bistdone (and
  bistfail) clear when all four BIST run bits are 0, zerodone when all four zeroize bits are 0.
* bistsel (13:8) is stored; the selected controller's status ("on the memory read data bus",
  unclear, R7#19) is shown by ``monitor cnn test`` only.

Memory power [UG-CNN: Table 27-20, Table 27-16]:
* SRAM.pd 0->1 loses the contents of all four memory types of the quadrant (cleared to 0);
  while pd = 1, CPU writes to them are dropped and CPU reads return 0.
* SRAM.ds = 1 (and pd = 0): contents kept, CPU reads return 0 ("outputs read 0",
  [UG-CNN: Table 27-20]), CPU writes are dropped. **The debugger's read (Device.read, gdb `x`,
  `mdw`) shows the retained contents** (R7#41: the debugger bypasses; a read never has side
  effects); the CPU view is
  :meth:`Max78000.host_read` (the driver's read, ``monitor mlat``).
* CNN_AOD_CTRL.pd bit n: the MRAM of quadrant n is lost (cleared on the 0->1 edge); dsleep bit n:
  retained, CPU reads 0. Both are independent of CNNx16_n_SRAM.
* A layer that needs a memory that is powered down or asleep stops with a fault naming the
  register (the hardware would compute on zeros; a debugger user wants to know).

Mlator ([UG-CNN: Table 27-19, Table 27-40]; R7#20):
* CTRL.mlat_ld 0->1 loads the address counter from CNNx16_n_L0_WPTR_BASE (layer 0: the register
  the izer's mlator unload writes before mlat_ld). The value is the 17-bit global write-pointer
  address (bits 16:13 = data memory, 12:0 = word, R7#26).
* MLAT = byte ``mlatch_sel`` of the 4 words at the counter, **first-fetched byte in bits 7:0**
  (R7#20 recommendation). A CPU read of MLAT returns that word and advances the counter by 4 words.
* A debugger read of MLAT returns the same word without advancing (devices/device.py: reads never
  have side effects); ``monitor mlat [n]`` performs n CPU-style reads and prints them. The 4-clock
  fetch delay is not modelled (data are valid at once).
"""
from __future__ import annotations

from ..errors import DeviceError
from .datapath import sram_address

QUADRANTS = 4
SRAM_BASE, MRAM_BASE, TRAM_BASE, BRAM_BASE = 0x5040_0000, 0x5018_0000, 0x5011_0000, 0x5010_8000
QUAD_STRIDE = 0x40_0000

# TEST fields: (run, done, fail) per memory type for BIST, (zeroize, done) for zeroization
# [UG-CNN: Table 27-22], by their names in configs/max78000.toml
BIST = {"sram": ("sbistrun", "sallbdone", "sallbfail"), "mram": ("mbistrun", "mallbdone",
                                                                "mallbfail"),
        "tram": ("tbistrun", "tallbdone", "tallbfail"), "bram": ("bbistrun", "ballbdone",
                                                                "ballbfail")}
ZERO = {"sram": ("sramz", "sallzdone"), "mram": ("mramz", "mallzdone"),
        "tram": ("tramz", "tallzdone"), "bram": ("bramz", "ballzdone")}


def memory_regions(device, q: int, kind: str) -> list[str]:
    """Names of the bus regions of memory type ``kind`` (sram/mram/tram/bram) of quadrant q."""
    prefix = {"sram": f"sram_q{q}_", "mram": f"mram_q{q}_", "tram": f"tram_q{q}_",
              "bram": f"bram_q{q}"}[kind]
    return [n for n in device.bus.memories if n == prefix or n.startswith(prefix)]


def region_owner(name: str) -> tuple[str, int] | None:
    """(kind, quadrant) of a memory region name, or None."""
    for kind in ("sram", "mram", "tram", "bram"):
        if name.startswith(f"{kind}_q"):
            return kind, int(name[len(kind) + 2])
    return None


class MemoryControl:
    """TEST register behaviour, memory power and the Mlator of all four quadrants."""

    def __init__(self, device) -> None:
        self.dev = device
        self.mlat_addr = [0] * QUADRANTS  # Mlator address counter (global word address)
        self.mlat_loaded = [False] * QUADRANTS
        regs = device.regs
        regs.on_write_each("TEST", self._test_written)  # CNNx16_q_TEST of each quadrant
        regs.on_write_each("SRAM", self._sram_written)
        regs.on_read_each("MLAT", lambda reg, stored: self.mlat_word(reg.instance))
        regs.on_write("CNN_AOD_CTRL", self._aod_written)
        #: TEST's single-bit fields as masks, by name (BIST, ZERO and the aggregates)
        test = regs.instances("TEST")[0].definition.view.fields
        self._test_mask = {name: f.mask for name, f in test.items()}
        #: SRAM.pd|ds and CNN_AOD_CTRL.pd|dsleep: any set bit makes check_layer look closer
        sram = regs.instances("SRAM")[0].definition.view.fields
        aod = regs.instances("CNN_AOD_CTRL")[0].definition.view.fields
        self._off = (sram["pd"].mask | sram["ds"].mask, aod["pd"].mask | aod["dsleep"].mask)
        reg = device.description.register
        self._power_regs = tuple(reg(f"CNNx16_{q}_SRAM").address for q in range(QUADRANTS)) \
            + (reg("CNN_AOD_CTRL").address,)
        bus = device.bus
        for name in list(bus.memories):
            owner = region_owner(name)
            if owner is None:
                continue
            inner = bus._write_hooks.get(name)
            bus.on_memory_write(name, self._power_hook(name, owner, inner))

    # -- state ---------------------------------------------------------------------------------
    def reset(self) -> None:
        self.mlat_addr = [0] * QUADRANTS
        self.mlat_loaded = [False] * QUADRANTS

    def state(self) -> dict:
        return {"mlat_addr": list(self.mlat_addr), "mlat_loaded": list(self.mlat_loaded)}

    def set_state(self, s: dict) -> None:
        self.mlat_addr, self.mlat_loaded = list(s["mlat_addr"]), list(s["mlat_loaded"])

    # -- BIST / zeroization --------------------------------------------------------------------
    def _clear(self, q: int, kind: str) -> None:
        for name in memory_regions(self.dev, q, kind):
            self.dev.bus.memories[name].clear()

    def _test_written(self, reg, old: int, new: int) -> None:
        q, m = reg.instance, self._test_mask
        v = self.dev.regs.peek(reg)
        for kind, (run, done, fail) in BIST.items():
            was, now = old & m[run], new & m[run]
            if now and not was:
                self._clear(q, kind)
                v |= m[done] | m["bistdone"]
                v &= ~m[fail]  # BIST passes
            elif was and not now:
                v &= ~(m[done] | m[fail])
        for kind, (run, done) in ZERO.items():
            was, now = old & m[run], new & m[run]
            if now and not was:
                self._clear(q, kind)
                v |= m[done] | m["zerodone"]
            elif was and not now:
                v &= ~m[done]
        if not any(new & m[r] for r, _, _ in BIST.values()):
            v &= ~(m["bistdone"] | m["bistfail"])
        if not any(new & m[r] for r, _ in ZERO.values()):
            v &= ~m["zerodone"]
        fails = any(v & m[f] for _, _, f in BIST.values())
        v = (v & ~m["bistfail"]) | (m["bistfail"] if fails else 0)
        self.dev.regs.poke(reg, v)

    def bist_status(self, q: int) -> str:
        """The controller bistsel selects [UG-CNN: Table 27-22]: [5] SRAM/bias group ([2:0]
        instance, 100 = bias), [4] MRAM ([3:0] instance), [3] TRAM ([3:0] instance)."""
        v = self.dev.regs.view(f"CNNx16_{q}_TEST")
        sel = v.bistsel
        if sel & 0x20:
            kind, inst = ("bram", 0) if sel & 7 == 4 else ("sram", sel & 7)
        elif sel & 0x10:
            kind, inst = "mram", sel & 0xF
        elif sel & 0x08:
            kind, inst = "tram", sel & 0xF
        else:
            return f"bistsel {sel:#04x}: no controller selected"
        _, done, fail = BIST[kind]
        return (f"bistsel {sel:#04x}: {kind} instance {inst}: done {getattr(v, done)}, "
                f"fail {getattr(v, fail)}")

    # -- memory power --------------------------------------------------------------------------
    def _sram_written(self, reg, old: int, new: int) -> None:
        view = reg.definition.view
        if view(new).pd and not view(old).pd:  # pd 0->1: contents lost [UG-CNN: Table 27-20]
            for kind in ("sram", "mram", "tram", "bram"):
                self._clear(reg.instance, kind)

    def _aod_written(self, reg, old: int, new: int) -> None:
        view = reg.definition.view
        rising = view(new).pd & ~view(old).pd  # one bit per quadrant
        for q in range(QUADRANTS):
            if (rising >> q) & 1:  # AOD pd: MRAM contents not maintained [UG-CNN: Table 27-16]
                self._clear(q, "mram")

    def power_state(self, q: int, kind: str) -> str | None:
        """Why memory type ``kind`` of quadrant q is not accessible, or None."""
        regs = self.dev.regs
        sram = regs.view(f"CNNx16_{q}_SRAM")
        if sram.pd:
            return f"CNNx16_{q}_SRAM.pd = 1 (quadrant {q} memories powered down)"
        if sram.ds:
            return f"CNNx16_{q}_SRAM.ds = 1 (quadrant {q} memories in deep sleep)"
        if kind == "mram":
            aod = regs.view("CNN_AOD_CTRL")
            if (aod.pd >> q) & 1:
                return f"CNN_AOD_CTRL.pd bit {q} = 1 (quadrant {q} MRAM powered down)"
            if (aod.dsleep >> q) & 1:
                return f"CNN_AOD_CTRL.dsleep bit {q} = 1 (quadrant {q} MRAM in deep sleep)"
        return None

    def _power_hook(self, name: str, owner: tuple[str, int], inner):
        kind, q = owner

        def hook(region, address: int, data: bytes) -> bool:
            why = self.power_state(q, kind)
            if why is not None:
                self.dev.warn(f"write to {address:#010x} dropped: {why}", key=("power-write", q))
                return True
            return bool(inner(region, address, data)) if inner is not None else False
        return hook

    def check_layer(self, cfg) -> None:
        """Fault if a memory the layer reads or writes is off (see module doc)."""
        *srams, aod = self.dev.regs.peek_addresses(self._power_regs)
        sram_off, aod_off = self._off
        if not any(v & sram_off for v in srams) and not aod & aod_off:
            return  # every memory on and awake: no need to look at each (once per layer)
        quads = set(cfg.quadrants) | {q for q, _ in getattr(cfg, "bias", ())}
        for q in sorted(quads):
            for kind in ("sram", "mram", "tram"):
                why = self.power_state(q, kind)
                if why is not None:
                    raise DeviceError(f"layer {cfg.layer} needs quadrant {q}'s "
                                      f"{kind.upper()}: {why}")

    def cpu_view(self, addr: int, data: bytes) -> bytes:
        """Apply the CPU's view (ds/pd/dsleep memories read 0) to ``data`` read at ``addr``."""
        out = bytearray(data)
        pos = 0
        bus = self.dev.bus
        while pos < len(out):
            a = addr + pos
            region = bus.region_at(a)
            n = min(len(out) - pos, region.end - a) if region is not None else len(out) - pos
            owner = region_owner(region.name) if region is not None else None
            if owner is not None and self.power_state(owner[1], owner[0]) is not None:
                out[pos:pos + n] = bytes(n)
            pos += n
        return bytes(out)

    # -- Mlator ----------------------------------------------------------------------------------
    def ctrl_written(self, q: int, old: int, new: int) -> None:
        ctrl = self.dev.regs.instances("CTRL")[q].definition.view
        if ctrl(new).mlat_ld and not ctrl(old).mlat_ld:  # mlat_ld 0->1 [UG-CNN: Table 27-19]
            self.mlat_addr[q] = self.dev.regs.view(f"CNNx16_{q}_L0_WPTR_BASE").wptr_base
            self.mlat_loaded[q] = True

    def mlat_word(self, q: int) -> int:
        """The packed word MLAT shows now (no side effects)."""
        if not self.mlat_loaded[q]:
            return 0
        sel = self.dev.regs.view(f"CNNx16_{q}_CTRL").mlatch_sel

        v = 0
        for i in range(4):
            a = self.mlat_addr[q] + i
            mem, word = (a >> 13) & 0xF, a & 0x1FFF
            m, off = self.dev.bus.memory_at(sram_address(mem, word))
            v |= int(m.data[off + sel]) << (8 * i)  # first-fetched byte in bits 7:0 (R7#20)
        return v

    def mlat_cpu_read(self, q: int) -> int:
        """A CPU read of CNNx16_q_MLAT: the word, then the counter advances by 4 words."""
        v = self.mlat_word(q)
        if self.mlat_loaded[q]:
            self.mlat_addr[q] = (self.mlat_addr[q] + 4) & 0x1FFFF
        return v
