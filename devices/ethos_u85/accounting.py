"""Ethos-U85 accounting: what one unit cost (bytes, cycles, AXI transactions) and the PMU
counters it advances. Apart from the model (model.py) and the operations (ops.py) so that an
executor of the command stream runs the data path and hands this module only the unit's
accesses and cycle counts (issue 33 #3): the counts never feed back into the data.

PMU (registers, exact where the emulator knows the answer; [U85-TRM]):
exact events are AXI transactions and beats per port (bursts split at min(AXI_*, CFG_*_CAP)
max_beats and at the striping granule, ports chosen by the CFG_*_HASH registers), with the
PMEVTYPER D0-D3 port disables for the summed events, and axi_latency_any on the PMCAXI_CHAN
channel. Modelled (time-based): cycle, npu_active, mac_active, mac_dpu_active, ao_active,
*_enabled_cycles and PMCCNTR come from the cycle model (model.py's docstring).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...emu.memory.ethosu85_axi import burst_counts
from ..device import Touched
from ..registers import RegisterFile

# PMU event numbers (pmu_event_t, [U85-TRM: Table 3-69])
EV_CYCLE, EV_NPU_IDLE, EV_NPU_ACTIVE = 17, 32, 35
EV_MAC_ACTIVE, EV_MAC_DPU_ACTIVE, EV_AO_ACTIVE = 48, 51, 64
EV_AXI_LATENCY_ANY = 160
SRAM_SUM, EXT_SUM, SRAM_PORT, EXT_PORT = 128, 384, 512, 640
S_RD_ACC, S_RD_DONE, S_RD_BEAT, S_WR_ACC, S_WR_BEAT, S_ENABLED = 0, 1, 2, 4, 7, 12

INT63 = (1 << 63) - 1  # addresses are non-negative int64: hash bits above 62 never match

#: one access as accounted: (port family, AXI channel, write, merged [start, end) ranges)
AxiAccess = tuple[int, int, bool, Any]
#: a port family's setup: (ports, burst alignment, address hash masks)
PortSetup = tuple[int, int, tuple[int, ...]]


class UnitAccount:
    """What the unit being run has done so far: the ranges it touched (watchpoints), its AXI
    accesses, the bytes they moved and its modelled cycles (all, MAC unit, AO unit). The
    memory port records into it; the unit's operations add their cycles."""

    __slots__ = ("touched", "axi", "bytes", "cycles", "mac_cycles", "ao_cycles")

    def __init__(self, touched: Touched) -> None:
        self.touched = touched
        self.axi: list[AxiAccess] = []
        self.bytes = 0
        self.cycles = 0
        self.mac_cycles = 0
        self.ao_cycles = 0


class AxiPmu:
    """The AXI accounting and the PMU counters over the device's registers."""

    #: the registers the AXI accounting reads (the port setup and PMCAXI_CHAN; ``setup``, kept
    #: with regs.derived: every unit needs it, ~5 us of register reads)
    AXI_REGS = ("PMCAXI_CHAN", "CONFIG", "AXI_SRAM", "AXI_EXT", "CFG_SRAM_CAP", "CFG_EXT_CAP",
                "CFG_SRAM_HASH0_LO", "CFG_SRAM_HASH0_HI", "CFG_SRAM_HASH1_LO",
                "CFG_SRAM_HASH1_HI", "CFG_EXT_HASH0_LO", "CFG_EXT_HASH0_HI")

    def __init__(self, regs: RegisterFile) -> None:
        self.regs = regs
        self._memo: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # accesses, setup -> counts
        self.setup = regs.derived(self.AXI_REGS, self._setup_now)

    def _ports(self, family: int) -> tuple[int, int]:
        """(number of ports, striping granule or 0) of a port family."""
        cfg = self.regs.peek("CONFIG")
        if family == 0:
            n = 1 << ((cfg >> 8) & 3)
            h = self.regs.peek("CFG_SRAM_HASH0_LO") | self.regs.peek("CFG_SRAM_HASH1_LO")
        else:
            n = 1 << ((cfg >> 10) & 1)
            h = self.regs.peek("CFG_EXT_HASH0_LO")
        return n, (h & -h) if h else 0

    def _burst_bytes(self, family: int) -> int:
        reg, cap = ("AXI_SRAM", "CFG_SRAM_CAP") if family == 0 else ("AXI_EXT", "CFG_EXT_CAP")
        mb = min(self.regs.field(reg, "max_beats"), self.regs.field(cap, "max_beats"), 2)
        return 64 << mb

    def _setup_now(self) -> tuple[int, tuple[PortSetup, ...]]:
        """(PMCAXI_CHAN, per port family (ports, burst alignment, hash masks))."""
        fams = []
        for family in (0, 1):
            n, granule = self._ports(family)
            align = self._burst_bytes(family)
            fams.append((n, min(align, granule) if granule else align, self._hashes(family)))
        return self.regs.peek("PMCAXI_CHAN"), tuple(fams)

    def axi_events(self, axi: list[AxiAccess], cycles: int, events: bool,
                   stats: dict[str, int]) -> dict[int, int]:
        """Per-port AXI events of a unit's accesses ``axi`` (exact transactions and 16-byte
        beats), their bytes added to ``stats``; the byte statistics only (an empty dict) when
        ``events`` is False (the PMU is not counting)."""
        chan, fams = self.setup()
        # memoised on the unit's accesses: a program's units repeat them on every run. A tuple
        # of ranges (the memoised box ranges, thousands for an NHCWB16 depth of 24) is keyed by
        # its identity, which the entry keeps by holding the tuples (hashing and comparing them
        # by value cost 8 us per unit); lists by value
        key = (chan, fams, tuple((f, c, w, id(r) if type(r) is tuple else tuple(r))
                                 for f, c, w, r in axi))
        hit = self._memo.get(key)
        if hit is None:
            # every count below is a sum over bursts, so the accesses of one (port family,
            # channel, direction) are split and counted together: one vectorised pass instead
            # of one per command fetch
            groups: dict[tuple[int, int, bool], list[Any]] = {}
            for family, channel, write, ranges in axi:
                if ranges:
                    groups.setdefault((family, channel, write), []).extend(ranges)
            if len(self._memo) >= 4096:  # all units of a network (MobileNet v2: 227)
                self._memo.clear()
            hit = self._memo[key] = self.axi_counts(chan, fams, groups) + (
                [r for *_, r in axi],)
        for k, v in hit[1]:
            stats[k] = stats.get(k, 0) + v
        if not events:
            return {}
        ev = dict(hit[0])
        for family in (0, 1):
            base = SRAM_PORT if family == 0 else EXT_PORT
            for p in range(fams[family][0]):
                ev[base + 16 * p + S_ENABLED] = cycles  # modelled: aclken every cycle
        return ev

    @staticmethod
    def axi_counts(chan: int, fams: tuple[PortSetup, ...],
                   groups: dict[tuple[int, int, bool], list[Any]]
                   ) -> tuple[dict[int, int], tuple[tuple[str, int], ...]]:
        """The cycle-independent part of axi_events: (events, (stats key, bytes) pairs)."""
        ch_sel, axi_sel, bw_sel = chan & 15, (chan >> 8) & 1, (chan >> 10) & 1
        ev: dict[int, int] = {}
        stats: dict[str, int] = {}
        for (family, channel, write), ranges in groups.items():
            base = SRAM_PORT if family == 0 else EXT_PORT
            n, align, hashes = fams[family]
            count_bw = not bw_sel or channel == ch_sel
            # split every range into bursts at the alignment, ports by the address hashes
            masks = np.asarray([h & INT63 for h in hashes], np.int64)
            trans, nbeats, nbytes, nbursts = burst_counts(np.asarray(ranges, dtype=np.int64),
                                                          align, masks, n)
            for p in range(n):
                if not trans[p]:
                    continue
                kk = base + 16 * p
                if count_bw:
                    names = (S_WR_ACC, S_WR_BEAT) if write else (S_RD_ACC, S_RD_BEAT, S_RD_DONE)
                    for code in names:
                        v = int(nbeats[p]) if code in (S_WR_BEAT, S_RD_BEAT) else int(trans[p])
                        ev[kk + code] = ev.get(kk + code, 0) + v
                key = (f"axi.{('sram', 'ext')[family]}{p}."
                       f"{'write' if write else 'read'}_bytes")
                stats[key] = stats.get(key, 0) + int(nbytes[p])
            if channel == ch_sel and family == axi_sel:
                ev[EV_AXI_LATENCY_ANY] = ev.get(EV_AXI_LATENCY_ANY, 0) + int(nbursts)
        return ev, tuple(stats.items())

    def _hashes(self, family: int) -> tuple[int, ...]:
        """The address hash masks (CFG_*_HASH*) whose parities over an address are the bits of
        its port number (port = parity(h1 & a) << 1 | parity(h0 & a), U8#18)."""
        r = self.regs
        if family == 0:
            return (r.peek("CFG_SRAM_HASH0_HI") << 32 | r.peek("CFG_SRAM_HASH0_LO"),
                    r.peek("CFG_SRAM_HASH1_HI") << 32 | r.peek("CFG_SRAM_HASH1_LO"))
        return (r.peek("CFG_EXT_HASH0_HI") << 32 | r.peek("CFG_EXT_HASH0_LO"),)

    @staticmethod
    def _event_count(ev: dict[int, int], code: int, disabled: int) -> int:
        """Count of event ``code``; summed port families honour the D0-D3 port disables."""
        for sum_base, port_base in ((SRAM_SUM, SRAM_PORT), (EXT_SUM, EXT_PORT)):
            if sum_base <= code < sum_base + 16:
                return sum(ev.get(port_base + 16 * p + code - sum_base, 0)
                           for p in range(4) if not (disabled >> p) & 1)
        return ev.get(code, 0)

    def account_unit(self, acct: UnitAccount, stats: dict[str, int],
                     pmu_mask_enable: bool) -> None:
        """The unit's AXI bytes into ``stats`` and, while the PMU counts (PMCR.cnt_en, not
        masked by NPU_OP_PMU_MASK), its events into the enabled counters, with overflow
        flags and STATUS.pmu_irq_raised where PMINTSET enables it."""
        cycles = acct.cycles
        r = self.regs
        pmcr = r.peek("PMCR")
        counting = pmcr & 1 and not (pmcr & 8 and not pmu_mask_enable)
        ev = self.axi_events(acct.axi, cycles, bool(counting), stats)
        if not counting:
            return
        ev.update({EV_CYCLE: cycles, EV_NPU_ACTIVE: cycles, EV_MAC_ACTIVE: acct.mac_cycles,
                   EV_MAC_DPU_ACTIVE: acct.mac_cycles, EV_AO_ACTIVE: acct.ao_cycles})
        for sum_base, port_base in ((SRAM_SUM, SRAM_PORT), (EXT_SUM, EXT_PORT)):
            ev[sum_base + S_ENABLED] = sum(v for k, v in ev.items()
                                           if port_base <= k < port_base + 64
                                           and (k - port_base) % 16 == S_ENABLED)
        en = r.peek("PMCNTENSET")
        ovf = 0
        for i in range(8):
            if not (en >> i) & 1:
                continue
            t = r.peek(f"PMEVTYPER{i}")
            count = 0 if i == 0 and r.peek("PMCLUT") & 1 else \
                self._event_count(ev, t & 0x3FF, (t >> 12) & 15)
            v = r.peek(f"PMEVCNTR{i}") + count
            if v >> 32:
                ovf |= 1 << i
            r.poke(f"PMEVCNTR{i}", v & 0xFFFFFFFF)
        if (en >> 31) & 1:
            v = (r.peek("PMCCNTR_HI") << 32 | r.peek("PMCCNTR_LO")) + cycles
            if v >> 48:
                ovf |= 1 << 31
            v &= (1 << 48) - 1
            r.poke("PMCCNTR_LO", v & 0xFFFFFFFF)
            r.poke("PMCCNTR_HI", v >> 32)
        if ovf:
            flags = r.peek("PMOVSSET") | ovf
            r.poke("PMOVSSET", flags)
            r.poke("PMOVSCLR", flags)
            if ovf & r.peek("PMINTSET"):
                r.set_field("STATUS", "pmu_irq_raised", 1)
