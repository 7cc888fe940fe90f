"""Arm Ethos-U85 NPU: host registers, run state, command-stream execution, DMA and PMU.

Register map from ``configs/ethos-u85.toml`` (seed 001, the Ethos-U85 TRM, digested in
shared/devices/ethos-u85-registers.md and ethos-u85-command-stream.md; "Lnnnn" = seed line).
Kernel operations: :mod:`.ops` (NPU_SET_* state -> tensors, gather and scatter) over the
bit-exact emu kernels (``accelstub.emu.{conv,pool,eltwise,resize}.ethosu85``); the command format
in :mod:`.stream`.

The host's view (what a driver sees through bus writes):

* ID/CONFIG per MAC configuration (``EthosU85(macs=128..2048)``, CONFIG and the pin mirrors
  CFG_* poked over the TOML's 256-MAC resets; digest 1.2).
* Soft reset: a RESET write clears every register (memories outside the NPU are kept), the
  internal LUT RAM and the NPU_SET_* state; PROT takes the pending levels written (the debugger's
  bus is privileged and secure, so PROT = RESET[1:0], L1357 / digest 8 #3). The reset sequence
  completes at once (digest 8 #5: the duration is unspecified), so STATUS.reset_status reads 0
  after it; RESET masks power control until the next CMD write (L1358).
* CMD (reads as last written, L1296): bits act on the write that sets them: clear_irq,
  clear_irq_history, stop_request (stops at the command boundary the emulator is halted at:
  QREAD = next command, IRQ), transition_to_running_state (from QBASE, or from QBASE+QREAD
  after an NPU_OP_STOP with QBASE/QSIZE unwritten, L1331; digest 8 #7 #8: other stops restart at
  QBASE with QREAD = 0). clock_q_enable/power_q_enable are level state: the NPU allows clock-off
  when clock_q_enable and stopped; power-off when power_q_enable, stopped, no IRQ pending and
  not masked by a reset (L592, L1075, L1358). U85's STATUS has no Q-channel bits; the two
  permissions are reported by ``counters()`` and ``npu state``.
* Writing QBASE or QSIZE while stopped clears STATUS.cmd_end_reached and the resume point (L1270).

A *unit* (what ``step`` runs, DESIGN.md) is one operation: starting at QREAD, every NPU_SET_*
command up to and including the next NPU_OP_* command (kernel ops, DMA_START/DMA_WAIT,
KERNEL_WAIT, PMU_MASK, IRQ, STOP, BRANCH). After it QREAD is the command after the operation (or
the branch target), i.e. the first NPU_SET_* of the next operation; ``pc = QBASE + QREAD``.
An operator Vela left on the CPU is a unit too (cpu_ops.py), with pc in the emu_program window. When
QREAD reaches QSIZE inside a unit the stream ends there (cmd_end_reached + IRQ). A breakpoint on
any command address stops before that command, also inside a unit (the next step then runs from
there to the operation).

Error states (all: STATUS.state = stopped, irq_raised = 1, sticky bit until reset, the debugger
gets a fault stop whose message names the command and its offset; QREAD is left at the faulting
command, which L1420 permits):

* cmd_parse_error: a reserved encoding (control 10/11, bits [13:10] set, unassigned opcode, a
  cmd1 header whose data word lies beyond QSIZE, L6002 / digest G-E3), and every failed
  pseudocode assert (UNPREDICTABLE, L6004-6014): the digest's recommended "stop and report".
* bus_status with STATUS.faulting_interface/faulting_channel: an NPU access (command fetch,
  tensors, DMA) outside the system memory windows; the interface is the MEM_ATTR.axi_port of the
  region (REGIONCFG; QCONFIG for the command stream).
* branch_fault: NPU_OP_BRANCH to a target >= QSIZE (L11020-11025).

Operations the emulator does not model yet raise "... not implemented yet" without touching the
hardware state: QREAD stays at the operation, the NPU stays running.

PMU (registers, exact where the emulator knows the answer): PMCR cnt_en / event_cnt_rst /
cycle_cnt_rst, mask_en (gates counting while NPU_OP_PMU_MASK disabled it), PMCNTENSET/CLR,
PMOVSSET/CLR, PMINTSET/CLR (each pair shares one state), PMEVTYPERn, overflow (32-bit event
counters, 48-bit PMCCNTR) setting PMOVS and, when enabled in PMINTSET, STATUS.pmu_irq_raised.
Exact events: AXI transactions and beats per port (bursts split at min(AXI_*, CFG_*_CAP)
max_beats and at the striping granule, ports chosen by the CFG_*_HASH registers), with the
PMEVTYPER D0-D3 port disables for the summed events, and axi_latency_any on the PMCAXI_CHAN
channel. Modelled (time-based): cycle, npu_active, mac_active, mac_dpu_active, ao_active,
*_enabled_cycles and PMCCNTR come from the cycle model below; npu_idle, stalls, latency
buckets, WD and ECC events are 0 (ideal memory, no time passes while stopped). The PMCLUT
compound event and PMCCNTR_CFG start/stop gating are not modelled (counter 0 with PMCLUT.LE
counts nothing; PMCCNTR counts whenever enabled).

Cycle model (MODELLED, digest registers section 5): 1 cycle to issue each command; a kernel
operation takes max(MAC cycles, AO cycles, bytes moved / 16) where MAC cycles are
MACs / MACs-per-cycle (the depthwise rate of the configuration for pooling, macs_per_cc
otherwise) and AO cycles are output elements / (NUM_SU x per-SU rate of Tables 4-11/4-12);
a DMA takes its bytes / 16 (one 128-bit beat per cycle).
"""
from __future__ import annotations

import functools
import hashlib
import threading
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ...emu.memory.ethosu85_axi import burst_counts
from ..description import load_description
from ..device import Device, MonitorCommand, ProgramOptions, Touched, Unit, UnitContext
from ..errors import BusError, DeviceError
from ..host import HostProgram
from ..ranges import address_ranges, merge_ranges
from ..tensors import TensorSpec
from . import ops
from . import stream as es
from .ops import (
    NotImplementedYet,
    NpuBusFault,
    NpuConfig,
    NpuInternal,
    SetState,
    Unpredictable,
    require,
)
from .vela import NpuStream, TensorSlot, VelaProgram, program_in, vela_host_program

if TYPE_CHECKING:
    from .cpu_ops import CpuOperator

#: per MAC configuration: CONFIG.macs_per_cc, num_wd, num_axi_sram, num_axi_ext (log2 fields),
#: EXT outstanding reads (Table 3-23 L2062-2070) - digest 1.2
MAC_CONFIGS = {128: (7, 0, 1, 0, 32), 256: (8, 0, 1, 0, 32), 512: (9, 1, 1, 0, 64),
               1024: (10, 2, 1, 1, 64), 2048: (11, 2, 2, 1, 64)}
LUT_BYTES = 2048  # internal LUT RAM (digest G-C4: every LUT mode addresses 2 KiB)
ADDR_MASK = (1 << 40) - 1
CMD_ISSUE_CYCLES = 1  # modelled

# PMU event numbers (pmu_event_t, Table 3-69 L4248-4410)
EV_CYCLE, EV_NPU_IDLE, EV_NPU_ACTIVE = 17, 32, 35
EV_MAC_ACTIVE, EV_MAC_DPU_ACTIVE, EV_AO_ACTIVE = 48, 51, 64
EV_AXI_LATENCY_ANY = 160
SRAM_SUM, EXT_SUM, SRAM_PORT, EXT_PORT = 128, 384, 512, 640
S_RD_ACC, S_RD_DONE, S_RD_BEAT, S_WR_ACC, S_WR_BEAT, S_ENABLED = 0, 1, 2, 4, 7, 12


INT63 = (1 << 63) - 1  # addresses are non-negative int64: hash bits above 62 never match


class EthosU85(Device):
    name = "ethos-u85"
    unit_name = "command"
    state_is_copy = True  # _state: SetState/NpuInternal/lut copies, a dict of ints

    def __init__(self, macs: int = 256, description_path: str | None = None) -> None:
        if macs not in MAC_CONFIGS:
            raise ValueError(f"ethos-u85: macs must be one of {', '.join(map(str, MAC_CONFIGS))}"
                             f", not {macs}")
        super().__init__(load_description(description_path or "ethos-u85"))
        self.macs = macs
        self.cfg = NpuConfig(macs)
        self.sets = SetState()
        self.lut = np.zeros(LUT_BYTES, dtype=np.uint8)
        self.npu = NpuInternal()  # chaining FIFOs, accumulator storage
        self.vela: VelaProgram | None = None  # the Vela program placed last (program_io)
        #: (k, operator): CPU operator k of a Vela model with CPU operators, queued by its host
        #: program to run as the next unit (cpu_ops.py; pc = word k of the program window)
        self.cpu_pending: tuple | None = None
        self._windows: dict[tuple[int, int], tuple] = {}  # [lo, hi) -> (Memory, offset)
        self._boxes: dict[tuple, ops.Access | None] = {}  # box_access's memo
        self._words: tuple = (None, None)  # _stream_words: ((QBASE, bytes), the words' view)
        self.resumable = False  # last stop was NPU_OP_STOP and QBASE/QSIZE not written since
        self.pmu_mask_enable = True  # NPU_OP_PMU_MASK (L8773-8802)
        self.power_masked = False  # RESET masks power control until the next CMD write (L1358)
        self._axi_memo: dict = {}  # _axi_events: accesses and port setup -> counts
        self._axi_setup = self.regs.derived(self._AXI_REGS, self._axi_setup_now)
        self._stream = self.regs.derived(self._STREAM_REGS, self._stream_now)
        #: per region (BASEP, port family), kept with regs.derived (``_placement_now``)
        self.placement = self.regs.derived(self._PLACEMENT_REGS, self._placement_now)
        #: operations' kept runs per decode and region placement (ops._ConvRun, DMA copies);
        #: None keeps none (the general path every time)
        self.kept_runs: dict | None = {}
        #: run_block: blocks by start state (None: that state is not replayed); the recorder's
        #: list of the current unit's data parts while it records (ops._traced)
        self._blocks: dict | None = {}
        self._unreplayed = 0
        self.trace: list | None = None
        self._qread = self.description.register("QREAD")
        self._cond_key = self.description.register("COND_STATUS").key
        self.stop_reason = "not started"
        self.stats: dict[str, int] = {}
        self._units_cache: tuple | None = None
        self._unit_ctx: dict | None = None
        r = self.regs
        r.on_write("CMD", self._cmd_written)
        r.on_write("RESET", self._reset_written)
        for name in ("QBASE_LO", "QBASE_HI", "QSIZE"):
            r.on_write(name, self._queue_written)
        r.on_write("PMCR", self._pmcr_written)
        for a, b in (("PMCNTENSET", "PMCNTENCLR"), ("PMOVSSET", "PMOVSCLR"),
                     ("PMINTSET", "PMINTCLR")):
            r.on_write(a, self._pair(b))
            r.on_write(b, self._pair(a))
        self._after_reset(0)

    # -- configuration and reset ---------------------------------------------------------------
    def _apply_config(self) -> None:
        """Pin-defined values of this MAC configuration (CONFIG L1619-1653, CFG_* L2117-2346)."""
        log2, wd, sram, ext, ext_rd = MAC_CONFIGS[self.macs]
        r = self.regs
        r.poke("CONFIG", (2 << 28) | (wd << 12) | (ext << 10) | (sram << 8) | (1 << 4) | log2)
        r.poke("CFG_EXT_CAP", (2 << 16) | (31 << 8) | (ext_rd - 1))
        r.poke("CFG_SRAM_HASH0_LO", 0x40)  # 64-byte trivial striping (Table 2-1 L722-736)
        r.poke("CFG_SRAM_HASH1_LO", 0x80 if sram == 2 else 0)  # 4 ports only (digest 8 #18)
        r.poke("CFG_EXT_HASH0_LO", 0x40 if ext else 0)

    def _after_reset(self, pending: int) -> None:
        self._apply_config()
        self.regs.set_field("STATUS", "reset_status", 0)  # the sequence completes at once
        self.regs.poke("RESET", pending & 3)
        self.regs.poke("PROT", pending & 3)
        self.sets = SetState()
        self.lut[:] = 0
        self.npu = NpuInternal()
        self.resumable = False
        self.pmu_mask_enable = True
        self.stop_reason = "not started"
        self._units_cache = None
        self.stats = {k: 0 for k in ("commands", "operations", "kernel_operations", "macs",
                                     "ofm_elements", "dma_bytes")}

    def reset(self, kind: str = "halt") -> None:
        super().reset(kind)
        self.cpu_pending = None
        self.power_masked = False
        self._after_reset(0)

    def _reset_written(self, reg, old: int, new: int) -> None:
        """RESET write: halt, clear all register state except the pending levels, clear the
        internal RAMs, PROT = the levels (L1346-1362)."""
        self.regs.reset()
        self._after_reset(new)
        self.power_masked = True

    # -- host register side effects --------------------------------------------------------
    @property
    def running(self) -> bool:
        return bool(self.regs.field("STATUS", "state"))

    def _status(self, **fields: int) -> None:
        for k, v in fields.items():
            self.regs.set_field("STATUS", k, v)

    def _cmd_written(self, reg, old: int, new: int) -> None:
        self.power_masked = False
        if new & 2:  # clear_irq (L1332)
            self._status(irq_raised=0, pmu_irq_raised=0)
        hist = new >> 16
        if hist:  # clear_irq_history (L1340)
            self._status(irq_history_mask=self.regs.field("STATUS", "irq_history_mask") & ~hist)
        if new & 0x10 and self.running:  # stop_request (L1338): at the current boundary
            q = self.regs.peek("QREAD")
            self._stop(f"stop_request: stopped before the command at offset {q:#06x}")
        if new & 1 and not self.running:  # transition_to_running_state (L1331)
            if not self.resumable:
                self.regs.poke("QREAD", 0)
            self.resumable = False
            self._status(state=1)
            self.stop_reason = ""
            if self.regs.peek("QREAD") >= self.regs.peek("QSIZE"):
                self._end_of_stream()  # QSIZE = 0 (digest 8 #27)

    def _queue_written(self, reg, old: int, new: int) -> None:
        if not self.running:  # L1270, L1331
            self._status(cmd_end_reached=0)
            self.resumable = False
        self._units_cache = None

    def _pair(self, partner: str):
        def hook(reg, old: int, new: int) -> None:
            self.regs.poke(partner, new)
        return hook

    def _pmcr_written(self, reg, old: int, new: int) -> None:
        if new & 2:  # event_cnt_rst
            for i in range(8):
                self.regs.poke(f"PMEVCNTR{i}", 0)
        if new & 4:  # cycle_cnt_rst
            self.regs.poke("PMCCNTR_LO", 0)
            self.regs.poke("PMCCNTR_HI", 0)
        self.regs.poke("PMCR", new & ~6)

    def _stop(self, reason: str) -> None:
        """RUNNING -> STOPPED with the IRQ (L5980)."""
        self._status(state=0, irq_raised=1)
        self.stop_reason = reason

    def _end_of_stream(self) -> None:
        q = self.regs.peek("QREAD")
        self._status(cmd_end_reached=1)
        self.resumable = False
        self._stop(f"end of command stream (QREAD = QSIZE = {q:#x})")

    def _error(self, bit: str, message: str, interface: int | None = None,
               channel: int | None = None):
        """raise_error() (L7185-7189): stop, sticky status bit, IRQ; then a fault stop."""
        self._status(**{bit: 1})
        if interface is not None:
            self._status(faulting_interface=interface, faulting_channel=channel)
        self.resumable = False
        self._stop(message)
        return DeviceError(message)

    # -- address translation -----------------------------------------------------------------
    #: the registers that place the command stream (``_stream``, kept with regs.derived: every
    #: unit needs them, and reading them by name cost ~5 us)
    _STREAM_REGS = ("QBASE_LO", "QBASE_HI", "QSIZE", "QCONFIG", *(f"MEM_ATTR{i}" for i in range(4)))

    def _stream_now(self) -> tuple[int, int, int]:
        """(QBASE, QSIZE, the command stream's port family)."""
        return (self.qbase, self.regs.peek("QSIZE"),
                self._family(self.regs.field("QCONFIG", "cmd_region0")))

    @property
    def qbase(self) -> int:
        return (self.regs.peek("QBASE_HI") << 32 | self.regs.peek("QBASE_LO")) & ADDR_MASK

    #: the registers that place the regions (``placement``: every access is keyed or
    #: accounted by them)
    _PLACEMENT_REGS = (*(f"BASEP{r}_{h}" for r in range(8) for h in ("LO", "HI")), "REGIONCFG",
                       *(f"MEM_ATTR{i}" for i in range(4)))

    def _placement_now(self) -> tuple[tuple[int, int], ...]:
        return tuple((self.basep(r), self.region_family(r)) for r in range(8))

    def basep(self, region: int) -> int:
        return (self.regs.peek(f"BASEP{region}_HI") << 32
                | self.regs.peek(f"BASEP{region}_LO")) & ADDR_MASK

    def _family(self, attr_index: int) -> int:
        """0 sram / 1 ext: MEM_ATTR[attr_index].axi_port (L1843)."""
        return self.regs.field(f"MEM_ATTR{attr_index}", "axi_port")

    def region_family(self, region: int) -> int:
        return self._family(self.regs.field("REGIONCFG", f"region{region}"))

    def _window(self, lo: int, hi: int, channel: int, region: int, what: str):
        """The memory holding [lo, hi) or a bus fault: NPU accesses reach only the system
        memory windows of the description (kind not registers/pseudo). The bus map never
        changes, so a span found inside a window is remembered (a program's tensors and streams
        are the same spans on every run)."""
        hit = self._windows.get((lo, hi))
        if hit is not None:
            return hit
        try:
            mem, off = self.bus.memory_span(lo, hi - lo)
        except BusError as e:
            raise NpuBusFault(e.address, channel, region, f"bus fault: {what} access "
                              f"{lo:#x}-{hi - 1:#x} leaves the system memory windows at "
                              f"{e.address:#x}") from None
        if len(self._windows) >= 4096:
            self._windows.clear()
        self._windows[(lo, hi)] = mem, off
        return mem, off

    def _record(self, family: int, channel: int, write: bool, ranges,
                nbytes: int | None = None) -> None:
        """Account an access of ``ranges`` (``nbytes`` in all, summed here when not given)."""
        ctx = self._unit_ctx
        t: Touched = ctx["touched"]
        (t.writes if write else t.reads).extend(ranges)
        ctx["axi"].append((family, channel, write, ranges))
        ctx["bytes"] += sum(e - s for s, e in ranges) if nbytes is None else nbytes

    # MemoryPort (ops.py) ------------------------------------------------------------------
    def gather(self, region: int, offsets: np.ndarray, size: int, signed: bool,
               channel: int) -> np.ndarray:
        require(0 <= region < 8, "0 <= region && region < 8", "L6228")
        addrs = (self.basep(region) + np.asarray(offsets, dtype=np.int64)) & ADDR_MASK
        if not addrs.size:
            return np.zeros(0, dtype=np.int64)
        lo, hi = int(addrs.min()), int(addrs.max()) + size
        mem, _ = self._window(lo, hi, channel, region, f"region {region} read")
        idx = (addrs - mem.region.base)[:, None] + np.arange(size)
        raw = np.ascontiguousarray(mem.data[idx])
        vals = raw.view(f"<{'i' if signed else 'u'}{size}").reshape(-1).astype(np.int64)
        self._record(self.region_family(region), channel, False, address_ranges(addrs, size))
        return vals

    def scatter(self, region: int, offsets: np.ndarray, size: int, values: np.ndarray,
                channel: int) -> None:
        require(0 <= region < 8, "0 <= region && region < 8", "L6244")
        addrs = (self.basep(region) + np.asarray(offsets, dtype=np.int64)) & ADDR_MASK
        if not addrs.size:
            return
        lo, hi = int(addrs.min()), int(addrs.max()) + size
        mem, _ = self._window(lo, hi, channel, region, f"region {region} write")
        raw = np.asarray(values, dtype=np.int64).astype("<i8").view(np.uint8).reshape(-1, 8)
        idx = (addrs - mem.region.base)[:, None] + np.arange(size)
        mem.data[idx] = raw[:, :size]
        self._record(self.region_family(region), channel, True, address_ranges(addrs, size))

    @staticmethod
    def _box_span(base: int, offset: int, shape: tuple, strides: tuple,
                  size: int) -> tuple[int, int] | None:
        """[lo, hi) of a box with non-negative strides at region base ``base`` that does not
        wrap the address space; None for anything else (the element path handles it)."""
        if any(int(st) < 0 for st in strides) or min(shape) <= 0:
            return None
        lo = (base + int(offset)) & ADDR_MASK
        hi = lo + sum((int(n) - 1) * int(st) for n, st in zip(shape, strides)) + size
        if hi - 1 > ADDR_MASK:
            return None
        return lo, hi

    @staticmethod
    def _box_ranges(lo: int, shape: tuple, strides: tuple, size: int) -> tuple[tuple, int]:
        """(merged byte ranges of a box, identical to ``address_ranges`` of all its element
        addresses; their total bytes): the innermost dimensions that are contiguous (stride <=
        run length) fold into one run, the outer ones enumerate run starts."""
        dims = sorted((int(st), int(n)) for n, st in zip(shape, strides) if n > 1)
        run, outer = size, []
        for st, n in dims:
            if not outer and st <= run:
                run += (n - 1) * st
            else:
                outer.append((st, n))
        starts = np.zeros(1, np.int64) + lo
        for st, n in outer:
            starts = (starts[:, None] + np.arange(n, dtype=np.int64)[None, :] * st).ravel()
        runs = tuple(address_ranges(starts, run))
        return runs, sum(e - s for s, e in runs)

    @staticmethod
    def _injective(shape: tuple, strides: tuple, size: int) -> bool:
        """No two elements of the box share a byte (so one view assignment equals the element
        stores in any order)."""
        span = size
        for st, n in sorted((int(st), int(n)) for n, st in zip(shape, strides) if n > 1):
            if st < span:
                return False
            span += (n - 1) * st
        return True

    def box_access(self, region: int, boxes: list, size: int, dtype: str, channel: int,
                   write: bool) -> ops.Access | None:
        """The access of ``boxes`` ((offset, shape, strides): elements at offset +
        sum(i_k * strides[k]) of BASEP[region]) as strided views of the memory, window-checked
        as gather and scatter are, with the byte ranges of all the boxes' elements merged (as
        the element path's address_ranges gives them); not recorded (:meth:`record`). None when
        a box is not a plain view (or, for ``write``, writes a byte twice). Memoised on the
        boxes and the region's BASEP and port family (the bus map never changes, so the views
        stay views of the same memory; the access carries the family): a program's tensors
        are the same boxes on every run, and working the views out again cost ~10 us per
        access. The one memo of the box path: what :meth:`_box_views_of` calls runs on a miss
        only."""
        base, family = self.placement()[region]
        key = (region, base, family, tuple(boxes), size, dtype, channel, write)
        hit = self._boxes.get(key, False)
        if hit is False:
            hit = self._box_views_of(region, base, family, boxes, size, dtype, channel, write)
            if len(self._boxes) >= 4096:
                self._boxes.clear()
            self._boxes[key] = hit
        return hit

    def stream_access(self, region: int, offset: int, length: int,
                      channel: int) -> ops.Access:
        """The access of a stream read (weights, scale and bias): ``length`` > 0 bytes at
        BASEP[region] + offset as a uint8 view; not recorded (:meth:`record`)."""
        require(0 <= region < 8, "0 <= region && region < 8", "L6228")
        return self.span_access(region, offset, length, channel, False,
                                f"region {region} stream read")

    def span_access(self, region: int, offset: int, length: int, channel: int, write: bool,
                    what: str) -> ops.Access:
        """The access of ``length`` > 0 bytes at BASEP[region] + offset (``what`` names it in a
        bus fault) as a uint8 view; not recorded."""
        base, family = self.placement()[region]
        a = (base + offset) & ADDR_MASK
        mem, moff = self._window(a, a + length, channel, region, what)
        # the range as a list: the AXI counts' memo keys lists by value (a new tuple on every
        # run would miss it)
        return ops.Access(region, family, channel, write, (mem.data[moff:moff + length],),
                          [(a, a + length)], length)

    def record(self, access: ops.Access) -> None:
        """Account ``access`` (Touched, AXI counts, bytes) as made now."""
        self._record(access.family, access.channel, access.write, access.ranges,
                     access.nbytes)

    def _box_views_of(self, region: int, base: int, family: int, boxes: list, size: int,
                      dtype: str, channel: int, write: bool) -> ops.Access | None:
        """:meth:`box_access` worked out (``base``, ``family``: the region's placement)."""
        views, runs = [], []
        for offset, shape, strides in boxes:
            span = self._box_span(base, offset, shape, strides, size)
            if span is None or (write and not self._injective(shape, strides, size)):
                return None
            lo, hi = span
            mem, moff = self._window(lo, hi, channel, region,
                                     f"region {region} {'write' if write else 'read'}")
            if not mem.data.flags.c_contiguous:
                return None
            view = np.ndarray(tuple(shape), dtype=dtype, buffer=mem.data, offset=moff,
                              strides=tuple(strides))
            # a read's view is read-only: an operation reads it before its OFM is written
            # (numpy's assignment copies first where the two overlap), and nothing may write
            # memory through it
            view.flags.writeable = write
            views.append(view)
            runs.append(self._box_ranges(lo, shape, strides, size))
        if len(runs) == 1:
            ranges, nbytes = runs[0]
        else:
            ranges = tuple(merge_ranges([r for part, _ in runs for r in part]))
            nbytes = sum(e - s for s, e in ranges)
        return ops.Access(region, family, channel, write, tuple(views), ranges, nbytes)

    def gather_boxes(self, region: int, boxes: list, size: int, signed: bool,
                     channel: int) -> list[np.ndarray] | None:
        """:meth:`gather` of the elements of ``boxes`` (:meth:`box_access`), one strided view
        each: the stored integer type, int64 for 8-byte elements as gather gives. None when a
        box is not a plain view (the caller uses gather)."""
        require(0 <= region < 8, "0 <= region && region < 8", "L6228")
        acc = self.box_access(region, boxes, size, f"<{'i' if signed else 'u'}{size}", channel,
                              False)
        if acc is None:
            return None
        self.record(acc)
        return ops.read_views(acc)

    def scatter_boxes(self, region: int, boxes: list, size: int, values: list,
                      channel: int) -> bool:
        """:meth:`scatter` of ``values`` (one box-shaped array per box) into ``boxes``: the low
        ``size`` bytes of each value, little-endian, through one strided view each. False
        (nothing written) when a box is not a plain injective view (the caller uses
        scatter)."""
        require(0 <= region < 8, "0 <= region && region < 8", "L6244")
        acc = self.box_access(region, boxes, size, f"<u{size}", channel, True)
        if acc is None:
            return False
        ops.store_views(acc, values)
        self.record(acc)
        return True

    def read_bytes(self, region: int, offset: int, length: int, channel: int) -> bytes:
        """A stream read (weights, scale and bias): ``length`` bytes at BASEP[region] + offset."""
        require(0 <= region < 8, "0 <= region && region < 8", "L6228")
        if length <= 0:
            return b""
        acc = self.stream_access(region, offset, length, channel)
        self.record(acc)
        return acc.views[0].tobytes()

    def set_result_flag(self, value: int) -> None:
        self.regs.set_field("COND_STATUS", "result_flag", value & 1)

    # -- the command stream ------------------------------------------------------------------
    def _stream_words(self) -> np.ndarray:
        """The words of [QBASE, QBASE+QSIZE) (a view; bus fault if not in system memory)."""
        qbase, qsize, _ = self._stream()
        n = qsize & ~3
        if not n:
            return np.zeros(0, dtype="<u4")
        key = (qbase, n)
        if self._words[0] != key:  # a view of the same memory serves every unit of a stream
            mem, off = self._window(key[0], key[0] + n, ops.RD_CMD, -1, "command stream")
            self._words = key, mem.data[off:off + n].view("<u4")
        return self._words[1]

    _DECODE_CACHE_MAX = 1 << 14
    _decode_cache: dict = {}  # (offset, word, next word) -> Command (frozen), shared

    @classmethod
    def _decode_at(cls, words: np.ndarray, offset: int) -> es.Command:
        """The command at byte ``offset``. Memoised on (offset, its two words): a command is a
        pure function of them (Command is frozen), and a program's commands repeat on every
        run, so decoding costs once per distinct command rather than per execution."""
        i = offset // 4
        ws = tuple(words[i:i + 2].tolist())
        key = (offset,) + ws
        cmd = cls._decode_cache.get(key)
        if cmd is None:
            cmd = es.decode_one(list(ws), 0, offset)
            if len(cls._decode_cache) >= cls._DECODE_CACHE_MAX:
                cls._decode_cache.clear()
            cls._decode_cache[key] = cmd
        return cmd

    def decoded_stream(self) -> list[es.Command]:
        """The whole stream [0, QSIZE) decoded linearly ([] if not readable)."""
        try:
            words = self._stream_words()
        except NpuBusFault:
            return []
        return es.decode(words.tobytes())

    # -- Device interface ----------------------------------------------------------------------
    @property
    def pc(self) -> int:
        """QBASE + QREAD, the next command; the end address once the NPU stopped with the stream
        read to its end (end of stream, or Vela's closing NPU_OP_STOP): QBASE + QSIZE would be
        the address of whatever follows the stream."""
        if self.cpu_pending is not None and not self.running:
            return self.window_pc(self.cpu_pending[0])
        q = self.regs.peek("QREAD")
        if (not self.running and q >= self.regs.peek("QSIZE")
                and self.stop_reason != "not started"):
            return self.end_address
        return (self.qbase + q) & 0xFFFFFFFF

    def set_pc(self, address: int) -> None:
        off = address - self.qbase
        if self.running and 0 <= off < self.regs.peek("QSIZE") and off % 4 == 0:
            self.regs.poke("QREAD", off)
            return
        end = self.qbase + self.regs.peek("QSIZE")
        raise DeviceError(f"{self.name}: pc must be a command address in the stream "
                          f"QBASE..QBASE+QSIZE ({self.qbase:#x}..{end:#x}) while running")

    def finished(self) -> bool:
        return not self.running and self.cpu_pending is None

    def queue_cpu_operator(self, k: int, op: CpuOperator) -> None:
        """The host program hands CPU operator ``k`` (cpu_ops.CpuOperator) to the CPU: it runs
        as the next unit, while the NPU is stopped between two command streams."""
        self.cpu_pending = (k, op)

    def interrupts(self) -> dict[str, bool]:
        st = self.regs.peek("STATUS")
        return {"IRQ": bool(st & 0x42)}  # irq_raised | pmu_irq_raised (digest 8 #9)

    def power_state(self) -> dict[str, bool]:
        """Q-channel permissions as the NPU would answer them (L592, L847-855, L1075)."""
        cmd = self.regs.peek("CMD")
        idle = not self.running
        irq = self.interrupts()["IRQ"]
        return {"clock_off_allowed": bool(cmd & 4) and idle,
                "power_off_allowed": bool(cmd & 8) and idle and not irq and not self.power_masked}

    def counters(self) -> dict[str, int]:
        out = {"cycles": self.cycles, "units": self.units_done}
        for k, v in sorted(self.stats.items()):
            out[k] = v
        out["pmu.PMCCNTR"] = self.regs.peek("PMCCNTR_HI") << 32 | self.regs.peek("PMCCNTR_LO")
        for i in range(8):
            out[f"pmu.PMEVCNTR{i}"] = self.regs.peek(f"PMEVCNTR{i}")
        for k, v in self.power_state().items():
            out[f"q.{k}"] = int(v)
        return out

    def done_message(self) -> str:
        irq = ", IRQ raised" if self.interrupts()["IRQ"] else ""
        return f"NPU stopped: {self.stop_reason}{irq}"

    def idle_message(self) -> str:
        if self.stop_reason == "not started":
            return ("NPU stopped: no command stream running (write CMD.transition_to_running_state"
                    " to start)")
        return f"no {self.unit_name} left to run: NPU stopped ({self.stop_reason})"

    # -- execution -----------------------------------------------------------------------------
    def execute_unit(self, ctx: UnitContext) -> Touched:
        """The NPU_SET_* commands from QREAD up to and including the next operation; a run's
        breakpoint on a command inside stops before that command."""
        touched = ctx.touched
        if self.cpu_pending is not None and not self.running:
            (_, op), self.cpu_pending = self.cpu_pending, None
            op.run(self, ctx.read, ctx.wrote)
            self.stats["cpu_operations"] = self.stats.get("cpu_operations", 0) + 1
            return touched
        self._unit_ctx = {"touched": touched, "axi": [], "bytes": 0, "cycles": 0,
                          "mac_cycles": 0, "ao_cycles": 0}
        try:
            self._run_unit(ctx.breakpoints)
        finally:
            self._account_unit()
            self._unit_ctx = None
        return touched

    def _run_unit(self, bp: frozenset[int]) -> None:
        r = self.regs
        qbase, qsize, cmd_family = self._stream()  # (they cannot change inside a unit)
        try:
            words = self._stream_words()
        except NpuBusFault as e:
            raise self._error("bus_status", f"{e} (command fetch at QBASE {qbase:#x})",
                              cmd_family, ops.RD_CMD) from e
        qread = self._qread
        fetches: list[tuple[int, int]] = []  # command fetches, recorded when the unit ends
        # NPU_SET_* commands only store state: QREAD is kept in q and written when the loop
        # leaves (it is written before anything can look at it)
        q = r.peek(qread)
        seg = None if bp else self._segment(words, q, qsize, qbase)
        if seg is not None:  # the same commands as last time from q: their state at once,
            # and the fetches up to and including the operation's as one kept tuple
            sets, ranges, nbytes, q = seg
            self.sets.update(sets)
            r.poke(qread, q)
            self._fetched(cmd_family, ranges, nbytes)
            return self._issue(self._decode_at(words, q), q, qsize, cmd_family)
        while True:
            if q >= qsize:
                r.poke(qread, q)
                self._fetched(cmd_family, fetches, None)
                self._end_of_stream()
                return
            cmd = self._decode_at(words, q)
            fetches.append((qbase + q, qbase + q + 4 * len(cmd.words)))
            if cmd.name == es.UNKNOWN:
                r.poke(qread, q)
                self._fetched(cmd_family, fetches, None)
                raise self._error("cmd_parse_error", f"command parse error "
                                  f"{self._where(q)}: {cmd.field_text()}")
            if not cmd.is_operation:
                self.sets.set(cmd)
                q += cmd.size
                if q < qsize and not (bp and (qbase + q) & 0xFFFFFFFF in bp):
                    continue
                r.poke(qread, q)
                self._fetched(cmd_family, fetches, None)
                if q >= qsize:
                    self._end_of_stream()
                return  # or a breakpoint inside the unit: stop before that command
            r.poke(qread, q)
            self._fetched(cmd_family, fetches, None)
            return self._issue(cmd, q, qsize, cmd_family)

    # -- blocks: the units of a run replayed at once ----------------------------------------
    _BLOCKS_MAX = 8
    #: stored recordings in a row that no replay used: the start states do not come again
    #: (the PMU's counters add up from run to run, say): no more recording (a recording costs
    #: ~50 % more than the run) until a stored block is replayed
    _UNREPLAYED_MAX = 4

    def run_block(self, halt: threading.Event) -> list | None:
        """Device.run_block. From a state (every register but COND_STATUS, the SET state, the
        chain bookkeeping, the stop state) and command stream seen before, the units that run
        made are replayed at once: each operation's kept run without its accounting (ops:
        reads, kernel, OFM write, FIFO pops and pushes, DMA copies), nothing for waits, and
        the state the recording left after the last unit (registers, SET state, chain
        bookkeeping, and the statistics and cycles it added). What the commands decide does
        not depend on the data (the kept runs check the weight and scale bytes they depend
        on), so the result is the units' one by one; a unit without a kept run (an operation
        not kept, a conditional branch, a kept run whose check fails) runs through the general
        path from the state after the units before it, and the replay ends there if that unit
        leaves other registers than recorded. A run from a new state is recorded, and stored if no
        operation kept its run just then (the first run of a program keeps them, the next
        one records), it ran to the NPU's stop or to a unit that changed the interrupt lines
        (a block ends there: a host program takes the interrupt after it), and it did not
        write its own command stream. The result flag (COND_STATUS) is the data's: left as
        the units set it. Why: a MobileNet inference spent most of its time in the per-unit
        path around its kernels (~8 ms of Python around ~2 ms of kernels)."""
        if self._blocks is None or self.trace is not None or not self.running:
            return None
        held, ids = self.sets.held()
        key = self._block_key(ids)
        entry = self._blocks.get(key)
        if entry is not None and entry[1] is None:
            return None
        try:
            words = self._stream_words().tobytes()
        except NpuBusFault:
            return None
        if entry is None or entry[1].words != words:
            if self._unreplayed >= self._UNREPLAYED_MAX:
                return None
            return self._record_block(key, held, words, halt)
        self._unreplayed = 0
        return self._replay_block(entry[1], halt)

    def _regs_but_flag(self) -> dict:
        """Every register's value but COND_STATUS (the result flag is the data's: a block
        neither keys on it nor restores it)."""
        regs = self.regs.snapshot()
        del regs[self._cond_key]
        return regs

    def _chain_state(self) -> tuple:
        n = self.npu
        return n.chain_length, n.num_ifm, frozenset(n.fifo_valid)

    def _block_key(self, set_ids: tuple) -> tuple:
        return (tuple(self._regs_but_flag().items()), set_ids, self._chain_state(),
                self.resumable, self.pmu_mask_enable, self.power_masked, self.stop_reason)

    def _block_state(self) -> tuple:
        return (self._regs_but_flag(), self.sets.copy(), self._chain_state(), dict(self.stats),
                self.cycles, self.resumable, self.pmu_mask_enable, self.stop_reason)

    def _record_block(self, key: tuple, held: tuple, words: bytes,
                      halt: threading.Event) -> list:
        """Run units one by one as run control does, recording the block; the units' (pc,
        written ranges)."""
        states, steps, units = [self._block_state()], [], []
        qbase = self.qbase
        own_stream = interrupted = fresh = False
        lines = (self.interrupts(), self.interrupt_counts())
        self.trace = []
        try:
            while self.running and not halt.is_set() and not interrupted:
                pc = self.pc
                t = self.execute_unit(UnitContext(halt, frozenset(), self.granularities[0]))
                if t.partial:
                    return units
                self.units_done += 1
                units.append((pc, t.writes))
                fresh |= ops.KEPT_NOW in self.trace
                steps.append(_step_of(self.trace))
                self.trace.clear()
                states.append(self._block_state())
                own_stream |= any(s < qbase + len(words) and e > qbase for s, e in t.writes)
                interrupted = (self.interrupts(), self.interrupt_counts()) != lines
        finally:
            self.trace = None
        if (self.running and not interrupted) or fresh:  # halted; or runs kept just now
            return units
        if len(self._blocks) >= self._BLOCKS_MAX:
            self._blocks.clear()
        self._blocks[key] = (held, None if own_stream else _Block(words, steps, states, units))
        self._unreplayed += 1
        return units

    def _replay_block(self, blk: _Block, halt: threading.Event) -> list:
        base = (dict(self.stats), self.cycles)
        u0 = self.units_done
        for k, step in enumerate(blk.steps):
            if halt.is_set():
                self._materialize(blk, k, base)
                self.units_done = u0 + k
                return blk.units[:k]
            if step is _NO_DATA or (step is not _GENERAL and step(self)):
                continue
            # through the general path from the state after the units before it
            self._materialize(blk, k, base)
            self.units_done = u0 + k
            pc = self.pc
            self.trace = []
            try:
                t = self.execute_unit(UnitContext(halt, frozenset(), self.granularities[0]))
                if callable(_step_of(self.trace)):
                    blk.steps[k] = self.trace[0]  # a kept run now: the next replay takes it
            finally:
                self.trace = None
            if t.partial:
                return blk.units[:k]
            self.units_done = u0 + k + 1
            if self._regs_but_flag() != blk.states[k + 1][0]:  # another path than recorded
                return blk.units[:k] + [(pc, t.writes)]       # (a branch)
        n = len(blk.steps)
        self._materialize(blk, n, base)
        self.units_done = u0 + n
        return blk.units

    def _materialize(self, blk: _Block, k: int, base: tuple) -> None:
        """The state after the block's first ``k`` units: registers but COND_STATUS, SET
        state, chain bookkeeping and stop state as recorded, statistics and cycles the live
        ones at the replay's start (``base``) plus what the recording added up to there."""
        regs, sets, (chain, num_ifm, valid), stats, cycles, resumable, pme, reason = \
            blk.states[k]
        _, _, _, stats0, cycles0, *_ = blk.states[0]
        self.regs.restore(regs)  # (all but COND_STATUS)
        self.sets = sets.copy()
        n = self.npu
        n.chain_length, n.num_ifm, n.fifo_valid = chain, num_ifm, set(valid)
        live = dict(base[0])
        for name, v in stats.items():
            live[name] = live.get(name, 0) + v - stats0.get(name, 0)
        self.stats = live
        self.cycles = base[1] + cycles - cycles0
        self.resumable, self.pmu_mask_enable, self.stop_reason = resumable, pme, reason

    def _fetched(self, family: int, ranges, nbytes: int | None) -> None:
        """Record command fetches (before an operation: its cycle model counts them)."""
        self._record(family, ops.RD_CMD, False, ranges, nbytes)
        self._unit_ctx["cycles"] += CMD_ISSUE_CYCLES * len(ranges)
        self.stats["commands"] += len(ranges)

    def _issue(self, cmd: es.Command, q: int, qsize: int, cmd_family: int) -> None:
        """Run the operation ``cmd`` at ``q`` (QREAD is at it, its fetch recorded)."""
        r = self.regs
        self.stats["operations"] += 1
        try:
            self._operation(cmd, q, qsize)
        except NotImplementedYet as e:
            r.poke(self._qread, q)
            raise DeviceError(f"{cmd.name} {self._where(q)}: {e}") from None
        except _BranchFault as e:
            raise self._error("branch_fault", f"{cmd.name} {self._where(q)}: {e}") from None
        except Unpredictable as e:
            raise self._error("cmd_parse_error", f"{cmd.name} {self._where(q)}: {e}") \
                from None
        except NpuBusFault as e:
            raise self._error("bus_status", f"{cmd.name} {self._where(q)}: {e}",
                              self.region_family(e.region) if e.region >= 0 else cmd_family,
                              e.channel) from None
        if self.running and r.peek(self._qread) >= qsize:
            self._end_of_stream()

    _SEGMENTS_MAX = 4096
    #: (start, QSIZE, QBASE) -> (stream bytes to the operation's end, SET state, fetch ranges,
    #: their bytes, that end, the operation's offset)
    _segments: dict = {}

    @classmethod
    def _segment(cls, words: np.ndarray, q: int, qsize: int, qbase: int) -> tuple | None:
        """The NPU_SET_* commands from ``q`` up to the next operation, as (their state by name,
        the fetch ranges up to and including the operation's as one tuple, their bytes, the
        operation's offset), when the stream there holds the same words as when this was last
        worked out: a program's units repeat on every run, and setting each command of a unit
        one by one cost more than its convolution's output stage (and the kept tuple lets the
        unit's AXI counts be found by its identity). None where the walk must go command by
        command (no operation before the end, a reserved encoding)."""
        key = (q, qsize, qbase)
        hit = cls._segments.get(key)
        if hit is not None:
            data, sets, ranges, nbytes, end, op_q = hit
            if words[q // 4:end // 4].tobytes() == data:
                return sets, ranges, nbytes, op_q
        sets, ranges, p = {}, [], q
        while p < qsize:
            cmd = cls._decode_at(words, p)
            if cmd.name == es.UNKNOWN:
                return None
            ranges.append((qbase + p, qbase + p + cmd.size))
            if cmd.is_operation:
                if len(cls._segments) >= cls._SEGMENTS_MAX:
                    cls._segments.clear()
                end = p + cmd.size
                ranges = tuple(ranges)
                nbytes = sum(b - a for a, b in ranges)
                cls._segments[key] = (words[q // 4:end // 4].tobytes(), sets, ranges, nbytes,
                                      end, p)
                return sets, ranges, nbytes, p
            sets[cmd.name] = cmd
            p += cmd.size
        return None

    def _where(self, q: int) -> str:
        return f"at offset {q:#06x} (address {self.qbase + q:#010x})"

    def _operation(self, cmd: es.Command, q: int, qsize: int) -> None:
        r = self.regs
        nxt = q + cmd.size
        name = cmd.name
        if self.trace is not None and (name in _NO_DATA_OPS or (
                name == "NPU_OP_BRANCH" and cmd.fields["branch_cond"] == 0)):
            self.trace.append(_NO_DATA)  # (a conditional branch depends on the data)
        if name in ("NPU_OP_STOP", "NPU_OP_IRQ"):  # L9154-9166, L8711-8718
            require(self.npu.chain_length == 0, "g_chain_length == 0",
                    "L9149" if name == "NPU_OP_STOP" else "L8706")
            mask = cmd.fields["mask"]
            self._status(irq_history_mask=self.regs.field("STATUS", "irq_history_mask") | mask,
                         irq_raised=1)
            r.poke("QREAD", nxt)
            if name == "NPU_OP_STOP":
                self._stop(f"NPU_OP_STOP at offset {q:#06x} (mask {mask:#06x})")
                self.resumable = True
            return
        if name in ops.OPERATIONS:
            res = ops.run_operation(cmd, self.sets, self, self.cfg)
            self.stats["kernel_operations"] += 1
            self.stats["macs"] += res.macs
            self.stats["ofm_elements"] += res.elements
            ctx = self._unit_ctx
            mac_cycles = res.mac_cycles
            ctx["mac_cycles"] += mac_cycles
            ctx["ao_cycles"] += res.ao_cycles
            ctx["cycles"] += max(mac_cycles, res.ao_cycles, -(-ctx["bytes"] // 16))
            r.poke("QREAD", nxt)
            return
        if name == "NPU_OP_DMA_START":
            self._dma(cmd)
        elif name == "NPU_OP_PMU_MASK":
            self.pmu_mask_enable = bool(cmd.fields["enable"])
        elif name == "NPU_OP_BRANCH":  # L11010-11048
            target = cmd.fields["branch_target"]
            require(target & 3 == 0, "(branch_target & 3) == 0", "L11018")
            if target >= qsize:
                raise _BranchFault(f"branch target {target:#x} >= QSIZE {qsize:#x}")
            taken = cmd.fields["branch_cond"] == 0 or r.field("COND_STATUS", "result_flag") == 1
            r.poke("QREAD", target if taken else nxt)
            return
        # DMA_WAIT, KERNEL_WAIT: barriers, already satisfied in a sequential model (digest 4.8)
        r.poke("QREAD", nxt)

    # -- DMA (L8347-8431) ------------------------------------------------------------------------
    def _dma(self, cmd: es.Command) -> None:
        """NPU_OP_DMA_START: its parameters decoded once per command state (as an operation's),
        its copies kept per decode and region placement when it has no index stream (the same
        views on every run), else copied through the general path."""
        d = ops.memo_on_state("dma", cmd, self.sets, None, self._dma_decode)
        copies = None
        if d.idx is None:
            key, copies = ops.kept_run(self, d)
            if key is not None and copies is None:
                try:
                    copies = tuple(self._dma_copy(d, *c) for c in self._dma_copies(d))
                except (NpuBusFault, Unpredictable):  # the general path faults at its copy,
                    pass                              # after the ones before it
                else:
                    ops.keep_run(self, key, d, copies)
        if copies is not None:
            self._copy_kept(copies)
            moved = len(copies) * d.length
        else:
            moved = self._dma_general(d)
        self.stats["dma_bytes"] += moved
        self._unit_ctx["cycles"] += -(-moved // 16)

    def _copy_kept(self, copies: tuple, account: bool = True) -> bool:
        """The kept copies of a DMA (:meth:`_dma`), accounted unless a replay."""
        if account and self.trace is not None:
            self.trace.append(functools.partial(EthosU85._copy_kept, copies=copies,
                                                account=False))
        for src, dst, step in copies:
            data = src.views[0].copy()
            if account:
                self.record(src)
            self._copy_bytes(dst.views[0], data, step)
            if account:
                self.record(dst)
        return True

    def _dma_decode(self) -> _DmaDecode:
        """The DMA0 parameters and asserts from the commands alone (L8347-8431)."""
        s = self.sets
        src_mode = s.get("DMA0_SRC_REGION", "region_mode")
        stride_mode = s.get("DMA0_SRC_REGION", "stride_mode")
        src_idx = s.get("DMA0_SRC_REGION", "idx_mode")
        dst_idx = s.get("DMA0_DST_REGION", "idx_mode")
        dst_internal = s.get("DMA0_DST_REGION", "region_mode") == 1
        require(src_mode == 0, "src_region_mode == external", "L8383")
        require(not (src_idx and dst_idx), "!(src_idx_mode && dst_idx_mode)", "L8384")
        require(stride_mode != 3, "stride_mode is not reserved", "L9507")
        length = s.get("DMA0_LEN", "addr")
        require(length > 0, "DMA0_LEN > 0", "L11243")
        width = s.get("DMA0_SIZE0", "size") if stride_mode != 0 else 1
        height = s.get("DMA0_SIZE1", "size") if stride_mode == 2 else 1
        dst_p = s.get("DMA0_DST", "addr")
        idx = None
        if src_idx or dst_idx:  # gather (source) or scatter (destination) through an index
            idx = (s.get("DMA0_IDX_REGION", "region"), s.get("DMA0_IDX", "addr"),  # stream
                   s.get("DMA0_IDX_MAX", "idx_max"),
                   s.get("DMA0_IDX_SKIP1", "addr") if height > 1 else 0, bool(src_idx))
        if dst_internal:
            require(dst_p % 16 == 0 and length % 16 == 0,
                    "dst_addr % 16 == 0 && length % 16 == 0 (internal destination)", "L6268")
        # stride 0 scales x, or in 1-D mode only the index of an index-mode side (L8388-8392)
        return _DmaDecode(
            s.get("DMA0_SRC_REGION", "region"), s.get("DMA0_DST_REGION", "region"),
            dst_internal, length, width, height, s.get("DMA0_SRC", "addr"), dst_p,
            s.get("DMA0_SRC_STRIDE0", "addr") if width > 1 or src_idx else 0,
            s.get("DMA0_DST_STRIDE0", "addr") if width > 1 or dst_idx else 0,
            s.get("DMA0_SRC_STRIDE1", "addr") if height > 1 else 0,
            s.get("DMA0_DST_STRIDE1", "addr") if height > 1 else 0, idx)

    def _dma_copies(self, d: _DmaDecode):
        """(source offset, destination offset) of each copy of ``d``, in order (L8388-8431):
        per row ``height`` times ``width`` copies at stride 0, the row start advanced by stride
        1; with an index stream each int32 index is read (load_int32 at DMA0_IDX in
        DMA0_IDX_REGION) just before its copy, a copy whose index is outside 0..idx_max is
        skipped (L8407-8419), and the index pointer skips IDX_SKIP1 after each row."""
        src_p, dst_p = d.src_p, d.dst_p
        if d.idx is not None:
            idx_r, idx_p, idx_max, skip1, src_idx = d.idx
        for _ in range(d.height):
            for x in range(d.width):
                si = di = x
                if d.idx is not None:
                    idx = int(self._dma_read(idx_r, idx_p, 4).view("<i4")[0])
                    idx_p += 4
                    if not 0 <= idx <= idx_max:
                        continue
                    if src_idx:
                        si = idx
                    else:
                        di = idx
                yield src_p + si * d.ss0, dst_p + di * d.ds0
            src_p += d.ss1
            dst_p += d.ds1
            if d.idx is not None:
                idx_p += skip1

    def _dma_general(self, d: _DmaDecode) -> int:
        """The copies of ``d`` one by one (index streams, or runs not kept), each source read
        before its destination is looked at (a destination fault comes after the read); the
        bytes moved."""
        moved = 0
        for src_off, dst_off in self._dma_copies(d):
            src = self._dma_access(d.src_r, src_off, d.length, False)
            data = src.views[0].copy()
            self.record(src)
            dst, step = self._dma_dst(d, src, dst_off)
            self._copy_bytes(dst.views[0], data, step)
            self.record(dst)
            moved += d.length
        return moved

    def _dma_copy(self, d: _DmaDecode, src_off: int, dst_off: int) -> tuple:
        """(source access, destination access, overlap step) of one copy of ``d``."""
        src = self._dma_access(d.src_r, src_off, d.length, False)
        return (src, *self._dma_dst(d, src, dst_off))

    def _dma_dst(self, d: _DmaDecode, src: ops.Access, dst_off: int) -> tuple:
        """(destination access, overlap step) of a copy of ``d`` from ``src``: the LUT RAM as
        region -1 without byte ranges (not a bus access: recording it counts nothing)."""
        if d.dst_internal:
            require(0 <= dst_off and dst_off + d.length <= LUT_BYTES,
                    f"LUT RAM write {dst_off:#x}+{d.length} inside {LUT_BYTES} bytes", "L6246")
            return ops.Access(-1, 0, 0, True, (self.lut[dst_off:dst_off + d.length],), (), 0), 0
        dst = self._dma_access(d.dst_r, dst_off, d.length, True)
        return dst, self._overlap(src.ranges[0][0], dst.ranges[0][0], d.length)

    def _dma_access(self, region: int, off: int, n: int, write: bool) -> ops.Access:
        require(0 <= region < 8, "0 <= region && region < 8", "L6244" if write else "L6228")
        return self.span_access(region, off, n, ops.WR_MEM2MEM if write else ops.RD_MEM2MEM,
                                write, f"DMA {'destination' if write else 'source'} "
                                f"(region {region})")

    def _dma_read(self, region: int, off: int, n: int) -> np.ndarray:
        acc = self._dma_access(region, off, n, False)
        self.record(acc)
        return acc.views[0].copy()

    @staticmethod
    def _overlap(src: int, dst: int, n: int) -> int:
        """dst - src where the destination starts inside the source above it (copy_bytes then
        repeats the first dst - src bytes), else 0."""
        return dst - src if src < dst < src + n else 0

    @staticmethod
    def _copy_bytes(dst: np.ndarray, data: np.ndarray, step: int) -> None:
        """copy_bytes (L6262-6278) of ``data`` (the source as it was) into ``dst``: byte by byte
        upwards, so with an overlap ``step`` each chunk of ``step`` bytes repeats the first."""
        if not step:
            dst[...] = data
            return
        n = len(data)
        for i in range(0, n, step):
            dst[i:min(n, i + step)] = data[:min(step, n - i)]

    # -- PMU ---------------------------------------------------------------------------------
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

    #: the registers the AXI accounting reads (the port setup and PMCAXI_CHAN; ``_axi_setup``,
    #: kept with regs.derived: every unit needs it, ~5 us of register reads)
    _AXI_REGS = ("PMCAXI_CHAN", "CONFIG", "AXI_SRAM", "AXI_EXT", "CFG_SRAM_CAP", "CFG_EXT_CAP",
                 "CFG_SRAM_HASH0_LO", "CFG_SRAM_HASH0_HI", "CFG_SRAM_HASH1_LO",
                 "CFG_SRAM_HASH1_HI", "CFG_EXT_HASH0_LO", "CFG_EXT_HASH0_HI")

    def _axi_setup_now(self) -> tuple[int, tuple]:
        """(PMCAXI_CHAN, per port family (ports, burst alignment, hash masks))."""
        fams = []
        for family in (0, 1):
            n, granule = self._ports(family)
            align = self._burst_bytes(family)
            fams.append((n, min(align, granule) if granule else align, self._hashes(family)))
        return self.regs.peek("PMCAXI_CHAN"), tuple(fams)

    def _axi_events(self, cycles: int, events: bool) -> dict[int, int]:
        """Per-port AXI events of this unit (exact transactions and 16-byte beats); the byte
        statistics only (an empty dict) when ``events`` is False (the PMU is not counting)."""
        chan, fams = self._axi_setup()
        axi = self._unit_ctx["axi"]
        # memoised on the unit's accesses: a program's units repeat them on every run. A tuple
        # of ranges (the memoised box ranges, thousands for an NHCWB16 depth of 24) is keyed by
        # its identity, which the entry keeps by holding the tuples (hashing and comparing them
        # by value cost 8 us per unit); lists by value
        key = (chan, fams, tuple((f, c, w, id(r) if type(r) is tuple else tuple(r))
                                 for f, c, w, r in axi))
        hit = self._axi_memo.get(key)
        if hit is None:
            # every count below is a sum over bursts, so the accesses of one (port family,
            # channel, direction) are split and counted together: one vectorised pass instead
            # of one per command fetch
            groups: dict[tuple[int, int, bool], list] = {}
            for family, channel, write, ranges in axi:
                if ranges:
                    groups.setdefault((family, channel, write), []).extend(ranges)
            if len(self._axi_memo) >= 4096:  # all units of a network (MobileNet v2: 227)
                self._axi_memo.clear()
            hit = self._axi_memo[key] = self._axi_counts(chan, fams, groups) + (
                [r for *_, r in axi],)
        for k, v in hit[1]:
            self.stats[k] = self.stats.get(k, 0) + v
        if not events:
            return {}
        ev = dict(hit[0])
        for family in (0, 1):
            base = SRAM_PORT if family == 0 else EXT_PORT
            for p in range(fams[family][0]):
                ev[base + 16 * p + S_ENABLED] = cycles  # modelled: aclken every cycle
        return ev

    @staticmethod
    def _axi_counts(chan: int, fams: list, groups: dict) -> tuple[dict[int, int], tuple]:
        """The cycle-independent part of _axi_events: (events, (stats key, bytes) pairs)."""
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
        its port number (port = parity(h1 & a) << 1 | parity(h0 & a), digest 8 #18)."""
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

    def _account_unit(self) -> None:
        ctx = self._unit_ctx
        cycles = ctx["cycles"]
        self.cycles += cycles
        r = self.regs
        pmcr = r.peek("PMCR")
        counting = pmcr & 1 and not (pmcr & 8 and not self.pmu_mask_enable)
        ev = self._axi_events(cycles, bool(counting))
        if not counting:
            return
        ev.update({EV_CYCLE: cycles, EV_NPU_ACTIVE: cycles, EV_MAC_ACTIVE: ctx["mac_cycles"],
                   EV_MAC_DPU_ACTIVE: ctx["mac_cycles"], EV_AO_ACTIVE: ctx["ao_cycles"]})
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
                self._status(pmu_irq_raised=1)

    # -- program listing -----------------------------------------------------------------------
    def load_program(self, path: Path, options: ProgramOptions) -> HostProgram | None:
        """Vela's ``*_vela.tflite`` or raw ``.npz`` (or a directory holding one, with its input
        and expected output) as the Ethos-U driver runs it (placement, start, wait for the IRQ,
        outputs read and checked); anything else is not Vela's."""
        if program_in(path) is None:
            return None
        return vela_host_program(path, options)

    def units(self) -> list[Unit]:
        prog = self._with_cpu()
        if prog is not None:
            return [u for u, _, _ in self._program_units(prog)]
        try:
            words = self._stream_words()
        except NpuBusFault:
            return []
        key = (self.qbase, len(words), hashlib.blake2b(words.tobytes(), digest_size=16).digest())
        if self._units_cache is not None and self._units_cache[0] == key:
            return self._units_cache[1]
        out: list[Unit] = []
        self._stream_units(words, self.qbase, out)
        self._units_cache = (key, out)
        return out

    @staticmethod
    def _stream_units(words: np.ndarray, qbase: int, out: list[Unit]) -> None:
        """Append the units of the stream ``words`` at ``qbase`` to ``out`` (labels count on)."""
        state = SetState()
        start = None
        for c in es.decode(words.tobytes()):
            if start is None:
                start = c.offset
            if c.name == es.UNKNOWN:
                out.append(Unit(qbase + start, f"cmd {len(out)}",
                                f"UNKNOWN at offset {c.offset:#06x}: {c.field_text()}"))
                start = None
            elif not c.is_operation:
                state.set(c)
            else:
                out.append(Unit(qbase + start, f"cmd {len(out)}", ops.summarize(c, state)))
                start = None
        if start is not None:
            out.append(Unit(qbase + start, f"cmd {len(out)}",
                            "end of stream (NPU_SET_* commands, no operation)"))

    # -- a Vela model with CPU operators (cpu_ops.py) ------------------------------------------
    def _with_cpu(self) -> VelaProgram | None:
        """The loaded Vela program when Vela left some of its operators on the CPU (and no other
        program was queued since), else None."""
        prog = self.vela
        return prog if prog is not None and prog.segments and prog.owns(self.qbase) else None

    def _segment_words(self, seg) -> np.ndarray:
        """The command words of ethos-u operator ``seg`` where the driver placed them."""
        return np.frombuffer(self.read(seg.qbase, 4 * seg.command_words), "<u4")

    def _program_units(self, prog: VelaProgram) -> list[tuple[Unit, object, int]]:
        """The whole program in order, each (unit, its segment, index within the segment): every
        stream's operations and the CPU operators between them (labels "cmd N", "cpu k")."""
        words = [self._segment_words(s) if isinstance(s, NpuStream) else None
                 for s in prog.segments]
        digest = hashlib.blake2b(b"".join(w.tobytes() for w in words if w is not None),
                                 digest_size=16).digest()
        key = ("cpu", id(prog), digest)
        if self._units_cache is not None and self._units_cache[0] == key:
            return self._units_cache[1]
        out: list[tuple[Unit, object, int]] = []
        k = 0
        for seg, w in zip(prog.segments, words):
            if isinstance(seg, NpuStream):
                units: list[Unit] = [u for u, _, _ in out]
                n = len(units)
                self._stream_units(w, seg.qbase, units)
                out += [(u, seg, i) for i, u in enumerate(units[n:])]
            else:
                out.append((Unit(self.window_pc(k), f"cpu {k}", seg.summary()), seg, k))
                k += 1
        self._units_cache = (key, out)
        return out

    def window_index(self, address: int) -> int | None:
        """The unit index of program-window word ``address``: here word k is the k-th CPU
        operator, whose unit index counts the stream operations before it too (the per-layer
        diff finds the unit that just ran by its pc)."""
        k = super().window_index(address)
        prog = self._with_cpu()
        if k is None or prog is None:
            return k
        return next((i for i, (u, _, _) in enumerate(self._program_units(prog))
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
        self.check_unit(index)
        prog, basep = self._with_cpu(), self.basep
        if prog is not None:
            _, seg, index = self._program_units(prog)[index]
            if not isinstance(seg, NpuStream):  # a CPU operator: its arena tensors
                names = [f"input{i + 1 if i else ''}" for i in range(len(seg.inputs))]
                return tuple(_slot_spec(n, t) for n, t in zip(names, seg.inputs)) + tuple(
                    _slot_spec(f"output{i + 1 if i else ''}", t)
                    for i, t in enumerate(seg.outputs))
            found = self._unit_command(index, self._segment_words(seg))
            basep = seg.basep.get
        else:
            found = self._unit_command(index)
        if found is None:
            return ()
        cmd, state = found
        specs = []
        for name, t, offs in ops.operand_offsets(cmd, state, self.cfg):
            spec = _nhwc_spec(name, t, offs, basep(t.region))
            if spec is not None:
                specs.append(spec)
        return tuple(specs)

    def program_io(self) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
        """The graph's inputs and outputs where the Vela program placed them (its TensorSlots:
        whole NHWC tensors, contiguous, as TFLM hands them to the driver), not the first
        command's IFM: Vela may stripe the first operation, whose IFM is then a part of the
        input. Another program queued since (QBASE moved): the listing's default."""
        prog = self.vela
        if prog is None or not prog.owns(self.qbase):
            return super().program_io()
        return (tuple(_slot_spec(f"input{i or ''}", t) for i, t in enumerate(prog.inputs)),
                tuple(_slot_spec(f"output{i or ''}", t) for i, t in enumerate(prog.outputs)))

    def layer_references(self, path: Path, inputs: list[np.ndarray]) -> list:
        """A ``.tflite``: the model before Vela run by LiteRT's reference kernels, each NPU
        operation paired with its TFLite tensor through Vela's debug database (issue 27;
        framework_reference.py); anything else the generic .npz (Device.layer_references)."""
        if Path(path).suffix.lower() != ".tflite":
            return super().layer_references(path, inputs)
        from .framework_reference import layer_references
        return layer_references(self, path, inputs)

    def _unit_command(self, index: int, words: np.ndarray | None = None
                      ) -> tuple[es.Command, SetState] | None:
        """(the kernel command, the NPU_SET_* state it is issued with) of unit ``index`` as
        :meth:`units` counts them in ``words`` (default: the stream at QBASE); None for any
        other unit."""
        if index < 0:
            return None
        try:
            words = self._stream_words() if words is None else words
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

    def unit_label(self, address: int) -> str:
        """The listing's label plus the kind and stream offset of the unit's operation, the
        offset written as ``accelstub disasm`` lists it (a QREAD value), so a ``run -v`` line or
        an ``--expect`` failure can be found in the listing: "cmd 3 (NPU_OP_CONV at 0x0140)"."""
        label = super().unit_label(address)
        prog, qbase = self._with_cpu(), self.qbase
        if prog is not None:
            for u, seg, _k in self._program_units(prog):
                if u.address == address and not isinstance(seg, NpuStream):
                    return f"{u.label} ({seg.name}, TFLite operator {seg.index}, on the CPU)"
                if u.address == address:
                    label, qbase = u.label, seg.qbase
        try:
            words = self._stream_words() if qbase == self.qbase else \
                self._segment_words(next(s for s in prog.segments
                                         if isinstance(s, NpuStream) and s.qbase == qbase))
        except NpuBusFault:
            return label
        q = address - qbase
        while 0 <= q < 4 * len(words):
            c = self._decode_at(words, q)
            if es.is_matmul(c):  # name the matrix product and its operands (issue 28 #4)
                summary = next((u.summary for u in self.units() if u.address == address), "")
                return f"{label} ({c.name} at 0x{c.offset:04x}: {summary})"
            if c.name == es.UNKNOWN or c.is_operation:
                return f"{label} ({c.name} at 0x{c.offset:04x})"
            q = c.next_offset
        return label

    # -- monitor commands ------------------------------------------------------------------------
    def monitor_commands(self) -> dict[str, MonitorCommand]:
        return {"npu": MonitorCommand("state | disasm [count]", self._cmd_npu,
                                      "NPU_SET_* state of the next operation, or the commands "
                                      "from QREAD on")}

    def _cmd_npu(self, ctx, args: list[str]) -> str:
        if (not args or args[0] not in ("state", "disasm") or len(args) > 2
                or (args[0] == "state" and len(args) > 1)):
            raise DeviceError("usage: npu state | npu disasm [count]")
        if args[0] == "state":
            return self.state_text()
        count = 16
        if len(args) == 2:
            try:
                count = int(args[1], 0)
            except ValueError:
                raise DeviceError(f"npu disasm: count must be a number, not {args[1]!r}") from None
        return self.disasm_text(count)

    def _pending(self) -> tuple[SetState, set[str], es.Command | None]:
        """The state the next operation will use: current state + the SET commands from QREAD
        up to the next operation (returned too)."""
        state = self.sets.copy()
        pending: set[str] = set()
        if not self.running:
            return state, pending, None
        try:
            words = self._stream_words()
        except NpuBusFault:
            return state, pending, None
        q = self.regs.peek("QREAD")
        while q < 4 * len(words):
            c = self._decode_at(words, q)
            if c.name == es.UNKNOWN or c.is_operation:
                return state, pending, c
            state.set(c)
            pending.add(c.name)
            q = c.next_offset
        return state, pending, None

    def state_text(self) -> str:
        r = self.regs
        state, pending, nxt = self._pending()
        lines = [f"NPU {'running' if self.running else 'stopped'}"
                 + ("" if self.running else f" ({self.stop_reason})")
                 + f"; QBASE {self.qbase:#x} QREAD {r.peek('QREAD'):#x} QSIZE {r.peek('QSIZE'):#x}"
                 f" pc {self.pc:#010x}; STATUS {r.peek('STATUS'):#010x}"]
        if nxt is not None:
            summ = ops.summarize(nxt, state) if nxt.name != es.UNKNOWN else str(nxt)
            lines.append(f"next operation at {self.qbase + nxt.offset:#010x}: {summ}")
        ps = self.power_state()
        lines.append(f"CMD clock_q_enable={r.field('CMD', 'clock_q_enable')} power_q_enable="
                     f"{r.field('CMD', 'power_q_enable')}; clock off allowed: "
                     f"{'yes' if ps['clock_off_allowed'] else 'no'}, power off allowed: "
                     f"{'yes' if ps['power_off_allowed'] else 'no'}"
                     + (" (masked by RESET until the next CMD write)" if self.power_masked else "")
                     + f"; POWER_CTRL.mac_step_cycles={r.field('POWER_CTRL', 'mac_step_cycles')}")
        mask = "enabled" if self.pmu_mask_enable else "disabled"
        lines.append(f"PMU mask (NPU_OP_PMU_MASK): {mask}"
                     f"; MACs/cycle {self.macs}")
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
        cmds = self.decoded_stream()
        if not cmds:
            return "(no command stream: QSIZE is 0 or QBASE is outside the system memory)"
        q = self.regs.peek("QREAD")
        at = next((i for i, c in enumerate(cmds) if c.offset >= q), len(cmds))
        first = max(0, at - 3)
        lines = []
        for c in cmds[first:first + max(1, count)]:
            mark = "=>" if c.offset == q and self.running else "  "
            lines.append(f"{mark} {self.qbase + c.offset:#010x} {es.format_command(c)}")
        return "\n".join(lines)

    # -- snapshots ---------------------------------------------------------------------------
    def _state(self) -> dict:
        return {"sets": self.sets.copy(), "lut": self.lut.copy(), "npu": self.npu.copy(),
                "resumable": self.resumable,
                "pmu_mask_enable": self.pmu_mask_enable, "power_masked": self.power_masked,
                "stop_reason": self.stop_reason, "stats": dict(self.stats),
                # the queued CPU operator's number only: its LiteRT interpreter is not copied
                "cpu_pending": None if self.cpu_pending is None else self.cpu_pending[0]}

    def _set_state(self, state: dict) -> None:
        self.sets = state["sets"]
        self.lut[:] = state["lut"]
        self.npu = state["npu"].copy()
        self.resumable, self.pmu_mask_enable = state["resumable"], state["pmu_mask_enable"]
        self.power_masked, self.stop_reason = state["power_masked"], state["stop_reason"]
        self.stats = state["stats"]
        k = state.get("cpu_pending")
        cpu = [s for s in self.vela.segments if not isinstance(s, NpuStream)] \
            if self.vela is not None else []
        self.cpu_pending = (k, cpu[k]) if k is not None and k < len(cpu) else None
        self._units_cache = None


#: operations without data: a replay has nothing to do for them but what the block's state
#: after them says (EthosU85.run_block)
_NO_DATA_OPS = frozenset(("NPU_OP_STOP", "NPU_OP_IRQ", "NPU_OP_PMU_MASK", "NPU_OP_DMA_WAIT",
                          "NPU_OP_KERNEL_WAIT"))
_NO_DATA = "no data"   # a step of a block: nothing to do
_GENERAL = "general"   # a step of a block: the unit through the general path


def _step_of(trace: list):
    """A block's step for a unit that handed the recorder ``trace``: its one kept run's data
    part, _NO_DATA, or _GENERAL (nothing, or a run kept just now)."""
    if len(trace) == 1 and (trace[0] is _NO_DATA or callable(trace[0])):
        return trace[0]
    return _GENERAL


class _Block(NamedTuple):
    """The units a run made from one start state (:meth:`EthosU85.run_block`)."""
    words: bytes             # the command stream they ran
    steps: list              # per unit: _NO_DATA, _GENERAL or a kept run's data part
    states: list             # _block_state at each unit boundary (len(steps) + 1)
    units: list              # per unit: (pc, the ranges it wrote)


class _DmaDecode(NamedTuple):
    """What the NPU_SET_DMA0_* commands decide about an NPU_OP_DMA_START
    (:meth:`EthosU85._dma_decode`): regions, length, the copy grid and its strides."""
    src_r: int
    dst_r: int
    dst_internal: bool       # the LUT RAM
    length: int
    width: int
    height: int
    src_p: int
    dst_p: int
    ss0: int
    ds0: int
    ss1: int
    ds1: int
    idx: tuple | None        # index stream: region, offset, idx_max, skip1, gather


class _BranchFault(Unpredictable):
    """NPU_OP_BRANCH target >= QSIZE: STATUS.branch_fault (handled in _run_unit)."""


def _slot_spec(name: str, t: TensorSlot) -> TensorSpec:
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


def _nhwc_spec(name: str, t: ops.Tensor, offs: np.ndarray, base: int) -> TensorSpec | None:
    """The TensorSpec of an operand whose region offsets ``offs`` ([H, W, C]) lie at ``base``,
    or None where they are no sum of a row, a column and a channel offset (a 2x2 tile split
    whose tiles do not line up: :meth:`EthosU85.unit_tensors`)."""
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
