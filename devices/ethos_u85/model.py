"""Arm Ethos-U85 NPU: host registers, run state, command-stream execution, DMA and PMU.

Register map from ``configs/ethos-u85.toml`` ([U85-TRM], the Ethos-U85 TRM, see also
the project ids U8#n, G-xx, U§n, C§n of docs/citations.md; "[U85-TRM: ...]" cites the TRM's section
or table (docs/citations.md)). Kernel operations: :mod:`.ops` (NPU_SET_* state -> tensors, gather
and scatter) over the bit-exact emu kernels (``accelstub.emu.{conv,pool,eltwise,resize}.ethosu85``);
the command format in :mod:`.stream`.

The host's view (what a driver sees through bus writes):

* ID/CONFIG per MAC configuration (``EthosU85(macs=128..2048)``, CONFIG and the pin mirrors
  CFG_* poked over the TOML's 256-MAC resets; U§1.2).
* Soft reset: a RESET write clears every register (memories outside the NPU are kept), the
  internal LUT RAM and the NPU_SET_* state; PROT takes the pending levels written (the debugger's
  bus is privileged and secure, so PROT = RESET[1:0], [U85-TRM: §3.3.1.4] / U8#3). The reset
  sequence completes at once (U8#5: the duration is unspecified), so STATUS.reset_status reads 0
  after it; RESET masks power control until the next CMD write [U85-TRM: §3.3.1.4].
* CMD (reads as last written, [U85-TRM: §3.3.1.3]): bits act on the write that sets them: clear_irq,
  clear_irq_history, stop_request (stops at the command boundary the emulator is halted at:
  QREAD = next command, IRQ), transition_to_running_state (from QBASE, or from QBASE+QREAD
  after an NPU_OP_STOP with QBASE/QSIZE unwritten, [U85-TRM: Table 3-6]; U8#7, U8#8: other stops
  restart at QBASE with QREAD = 0). clock_q_enable/power_q_enable are level state: the NPU allows
  clock-off when clock_q_enable and stopped; power-off when power_q_enable, stopped, no IRQ pending
  and not masked by a reset [U85-TRM: §2.3.1, §3.1.4, §3.3.1.4]. U85's STATUS has no Q-channel bits;
  the two permissions are reported by ``counters()`` and ``npu state``.
* Writing QBASE or QSIZE while stopped clears STATUS.cmd_end_reached and the resume point
  [U85-TRM: Table 3-5].

A *unit* (what ``step`` runs, devices/device.py) is one operation: starting at QREAD, every
NPU_SET_* command up to and including the next NPU_OP_* command (kernel ops, DMA_START/DMA_WAIT,
KERNEL_WAIT, PMU_MASK, IRQ, STOP, BRANCH). After it QREAD is the command after the operation (or
the branch target), i.e. the first NPU_SET_* of the next operation; ``pc = QBASE + QREAD``.
An operator Vela left on the CPU is a unit too (cpu_ops.py), with pc in the emu_program window. When
QREAD reaches QSIZE inside a unit the stream ends there (cmd_end_reached + IRQ). A breakpoint on
any command address stops before that command, also inside a unit (the next step then runs from
there to the operation).

Error states (all: STATUS.state = stopped, irq_raised = 1, sticky bit until reset, the debugger
gets a fault stop whose message names the command and its offset; QREAD is left at the faulting
command, which [U85-TRM: §3.3.1.6] permits):

* cmd_parse_error: a reserved encoding (control 10/11, bits [13:10] set, unassigned opcode, a
  cmd1 header whose data word lies beyond QSIZE, [U85-TRM: §3.5.3] / G-E3), and every failed
  pseudocode assert (UNPREDICTABLE, [U85-TRM: §3.5.4]): the recommended "stop and report" (C§2.3).
* bus_status with STATUS.faulting_interface/faulting_channel: an NPU access (command fetch,
  tensors, DMA) outside the system memory windows; the interface is the MEM_ATTR.axi_port of the
  region (REGIONCFG; QCONFIG for the command stream).
* branch_fault: NPU_OP_BRANCH to a target >= QSIZE [U85-TRM: §3.11.2].

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

Cycle model (MODELLED, [U85-TRM: §4]): 1 cycle to issue each command; a kernel
operation takes max(MAC cycles, AO cycles, bytes moved / 16) where MAC cycles are
MACs / MACs-per-cycle (the depthwise rate of the configuration for pooling, macs_per_cc
otherwise) and AO cycles are output elements / (NUM_SU x per-SU rate of Tables 4-11/4-12);
a DMA takes its bytes / 16 (one 128-bit beat per cycle).

The model is composed of parts, one per concern, each behind the members it declares:
cmdstream.py (where the stream lies, its commands decoded once, a unit's NPU_SET_* commands),
memport.py (the memory port the operations reach: BASEP placement, windows, box views, the
unit's accesses recorded), ops.py (kernel operations over NPU_SET_* state through that port),
dma.py (NPU_OP_DMA_START), accounting.py (AXI counts, PMU counters), blocks.py (a run's units
replayed at once) and listing.py (the unit listing, unit tensors and ``npu`` texts). This
class holds the host registers' side effects and the run state, and executes a unit: decode
(cmdstream) -> operation (ops, dma) -> accounting.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..description import load_description
from ..device import Device, MonitorCommand, ProgramOptions, Touched, Unit, UnitContext
from ..errors import DeviceError
from ..host import HostProgram
from ..tensors import TensorSpec
from . import dma, ops
from . import stream as es
from .accounting import AxiPmu, UnitAccount
from .blocks import NO_DATA, NO_DATA_OPS, BlockReplay
from .cmdstream import CommandStream, decode_at, segment
from .listing import Listing
from .memport import ADDR_MASK, LUT_BYTES, NpuPort, basep, region_family
from .ops import (
    NotImplementedYet,
    NpuBusFault,
    NpuConfig,
    NpuInternal,
    SetState,
    Unpredictable,
    require,
)
from .vela import NpuStream, VelaProgram, program_in, vela_host_program

if TYPE_CHECKING:
    from .cpu_ops import CpuOperator

__all__ = ["ADDR_MASK", "CMD_ISSUE_CYCLES", "LUT_BYTES", "MAC_CONFIGS", "EthosU85"]

#: per MAC configuration: CONFIG.macs_per_cc, num_wd, num_axi_sram, num_axi_ext (log2 fields),
#: EXT outstanding reads [U85-TRM: Table 3-23] - U§1.2
MAC_CONFIGS = {128: (7, 0, 1, 0, 32), 256: (8, 0, 1, 0, 32), 512: (9, 1, 1, 0, 64),
               1024: (10, 2, 1, 1, 64), 2048: (11, 2, 2, 1, 64)}
CMD_ISSUE_CYCLES = 1  # modelled


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
        #: the memory port the operations and DMA reach (with the LUT RAM, the chaining FIFOs
        #: and accumulator storage, the kept runs and the block recorder's list)
        self.port = NpuPort(self.bus, self.regs)
        self.lut = self.port.lut  # (the one array: cleared and restored in place)
        self.placement = self.port.placement
        self.stream = CommandStream(self.regs, self.port)
        self.pmu = AxiPmu(self.regs)
        self.blocks = BlockReplay(self, self.description.register("COND_STATUS").key)
        self.listing = Listing(self)
        self.vela: VelaProgram | None = None  # the Vela program placed last (program_io)
        #: (k, operator): CPU operator k of a Vela model with CPU operators, queued by its host
        #: program to run as the next unit (cpu_ops.py; pc = word k of the program window)
        self.cpu_pending: tuple | None = None
        self.resumable = False  # last stop was NPU_OP_STOP and QBASE/QSIZE not written since
        self.pmu_mask_enable = True  # NPU_OP_PMU_MASK [U85-TRM: §3.10.9]
        # RESET masks power control until the next CMD write [U85-TRM: §3.3.1.4]
        self.power_masked = False
        self._qread = self.description.register("QREAD")
        # (pc and running are asked several times a unit, issue 26 #7: the registers are
        # looked up once, not by name each time)
        self._qsize = self.description.register("QSIZE")
        self._status_reg = self.description.register("STATUS")
        state = next(f for f in self._status_reg.fields if f.name == "state")
        self._state_mask = ((1 << state.width) - 1) << state.lsb
        self.stop_reason = "not started"
        self.stats: dict[str, int] = {}
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

    # -- the parts' state, as the model's own --------------------------------------------------
    @property
    def npu(self) -> NpuInternal:
        """Chaining FIFOs and accumulator storage (held by the memory port)."""
        return self.port.npu

    @npu.setter
    def npu(self, value: NpuInternal) -> None:
        self.port.npu = value

    @property
    def kept_runs(self) -> dict | None:
        """Operations' kept runs (the memory port's); None: the general path every time."""
        return self.port.kept_runs

    @kept_runs.setter
    def kept_runs(self, value: dict | None) -> None:
        self.port.kept_runs = value

    # -- configuration and reset ---------------------------------------------------------------
    def _apply_config(self) -> None:
        """Pin-defined values of this MAC configuration (CONFIG [U85-TRM: Table 3-13], CFG_*
        [U85-TRM: §3.3.1])."""
        log2, wd, sram, ext, ext_rd = MAC_CONFIGS[self.macs]
        r = self.regs
        r.poke("CONFIG", (2 << 28) | (wd << 12) | (ext << 10) | (sram << 8) | (1 << 4) | log2)
        r.poke("CFG_EXT_CAP", (2 << 16) | (31 << 8) | (ext_rd - 1))
        r.poke("CFG_SRAM_HASH0_LO", 0x40)  # 64-byte trivial striping [U85-TRM: Table 2-1]
        r.poke("CFG_SRAM_HASH1_LO", 0x80 if sram == 2 else 0)  # 4 ports only (U8#18)
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
        self.listing.forget()
        self.stats = {k: 0 for k in ("commands", "operations", "kernel_operations", "macs",
                                     "ofm_elements", "dma_bytes")}

    def reset(self, kind: str = "halt") -> None:
        super().reset(kind)
        self.cpu_pending = None
        self.power_masked = False
        self._after_reset(0)

    def _reset_written(self, reg, old: int, new: int) -> None:
        """RESET write: halt, clear all register state except the pending levels, clear the
        internal RAMs, PROT = the levels [U85-TRM: §3.3.1.4]."""
        self.regs.reset()
        self._after_reset(new)
        self.power_masked = True

    # -- host register side effects --------------------------------------------------------
    @property
    def running(self) -> bool:
        return bool(self.regs.peek(self._status_reg) & self._state_mask)

    def _status(self, **fields: int) -> None:
        for k, v in fields.items():
            self.regs.set_field("STATUS", k, v)

    def _cmd_written(self, reg, old: int, new: int) -> None:
        self.power_masked = False
        if new & 2:  # clear_irq [U85-TRM: Table 3-6]
            self._status(irq_raised=0, pmu_irq_raised=0)
        hist = new >> 16
        if hist:  # clear_irq_history [U85-TRM: Table 3-6]
            self._status(irq_history_mask=self.regs.field("STATUS", "irq_history_mask") & ~hist)
        # stop_request [U85-TRM: Table 3-6]: at the current boundary
        if new & 0x10 and self.running:
            q = self.regs.peek("QREAD")
            self._stop(f"stop_request: stopped before the command at offset {q:#06x}")
        if new & 1 and not self.running:  # transition_to_running_state [U85-TRM: Table 3-6]
            if not self.resumable:
                self.regs.poke("QREAD", 0)
            self.resumable = False
            self._status(state=1)
            self.stop_reason = ""
            if self.regs.peek("QREAD") >= self.regs.peek("QSIZE"):
                self._end_of_stream()  # QSIZE = 0 (U8#27)

    def _queue_written(self, reg, old: int, new: int) -> None:
        if not self.running:  # [U85-TRM: Table 3-5, Table 3-6]
            self._status(cmd_end_reached=0)
            self.resumable = False
        # (the listing is kept by the stream's words and QBASE, compared when next asked: a
        # driver that writes QBASE/QSIZE again per inference lists nothing again, listing.py)

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
        """RUNNING -> STOPPED with the IRQ [U85-TRM: §3.5.2]."""
        self._status(state=0, irq_raised=1)
        self.stop_reason = reason

    def _end_of_stream(self) -> None:
        q = self.regs.peek("QREAD")
        self._status(cmd_end_reached=1)
        self.resumable = False
        self._stop(f"end of command stream (QREAD = QSIZE = {q:#x})")

    def _error(self, bit: str, message: str, interface: int | None = None,
               channel: int | None = None):
        """raise_error() [U85-TRM: §3.6.8]: stop, sticky status bit, IRQ; then a fault stop."""
        self._status(**{bit: 1})
        if interface is not None:
            self._status(faulting_interface=interface, faulting_channel=channel)
        self.resumable = False
        self._stop(message)
        return DeviceError(message)

    # -- address translation -----------------------------------------------------------------
    @property
    def qbase(self) -> int:
        return self.stream.qbase

    def basep(self, region: int) -> int:
        return basep(self.regs, region)

    def region_family(self, region: int) -> int:
        return region_family(self.regs, region)

    # -- Device interface ----------------------------------------------------------------------
    @property
    def pc(self) -> int:
        """QBASE + QREAD, the next command; the end address once the NPU stopped with the stream
        read to its end (end of stream, or Vela's closing NPU_OP_STOP): QBASE + QSIZE would be
        the address of whatever follows the stream."""
        running = self.running
        if self.cpu_pending is not None and not running:
            return self.window_pc(self.cpu_pending[0])
        r = self.regs
        q = r.peek(self._qread)
        if not running and q >= r.peek(self._qsize) and self.stop_reason != "not started":
            return self.end_address
        return (self.stream.qbase + q) & 0xFFFFFFFF

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
        return {"IRQ": bool(st & 0x42)}  # irq_raised | pmu_irq_raised (U8#9)

    def power_state(self) -> dict[str, bool]:
        """Q-channel permissions as the NPU would answer them [U85-TRM: §2.3.1, §2.3.5, §3.1.4]."""
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

    # -- execution: decode (cmdstream) -> operation (ops, dma) -> accounting --------------------
    def execute_unit(self, ctx: UnitContext) -> Touched:
        """The NPU_SET_* commands from QREAD up to and including the next operation; a run's
        breakpoint on a command inside stops before that command."""
        touched = ctx.touched
        if self.cpu_pending is not None and not self.running:
            (_, op), self.cpu_pending = self.cpu_pending, None
            op.run(self, ctx.read, ctx.wrote)
            self.stats["cpu_operations"] = self.stats.get("cpu_operations", 0) + 1
            return touched
        if self.blocks.step(ctx):  # a unit a stored block recorded: its table's rows (blocks.py)
            return touched
        port = self.port
        acct = port.account = UnitAccount(touched)
        try:
            self._run_unit(ctx.breakpoints)
        finally:
            self.cycles += acct.cycles
            self.pmu.account_unit(acct, self.stats, self.pmu_mask_enable)
            port.account = None
        return touched

    def _run_unit(self, bp: frozenset[int]) -> None:
        r = self.regs
        qbase, qsize, cmd_family = self.stream.place()  # (they cannot change inside a unit)
        try:
            words = self.stream.words()
        except NpuBusFault as e:
            raise self._error("bus_status", f"{e} (command fetch at QBASE {qbase:#x})",
                              cmd_family, ops.RD_CMD) from e
        qread = self._qread
        fetches: list[tuple[int, int]] = []  # command fetches, recorded when the unit ends
        # NPU_SET_* commands only store state: QREAD is kept in q and written when the loop
        # leaves (it is written before anything can look at it)
        q = r.peek(qread)
        seg = None if bp else segment(words, q, qsize, qbase)
        if seg is not None:  # the same commands as last time from q: their state at once,
            # and the fetches up to and including the operation's as one kept tuple
            sets, ranges, nbytes, q = seg
            self.sets.update(sets)
            r.poke(qread, q)
            self._fetched(cmd_family, ranges, nbytes)
            return self._issue(decode_at(words, q), q, qsize, cmd_family)
        while True:
            if q >= qsize:
                r.poke(qread, q)
                self._fetched(cmd_family, fetches, None)
                self._end_of_stream()
                return
            cmd = decode_at(words, q)
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

    def _fetched(self, family: int, ranges, nbytes: int | None) -> None:
        """Record command fetches (before an operation: its cycle model counts them)."""
        self.port.record_ranges(family, ops.RD_CMD, False, ranges, nbytes)
        self.port.account.cycles += CMD_ISSUE_CYCLES * len(ranges)
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

    def _where(self, q: int) -> str:
        return f"at offset {q:#06x} (address {self.qbase + q:#010x})"

    def _operation(self, cmd: es.Command, q: int, qsize: int) -> None:
        r = self.regs
        nxt = q + cmd.size
        name = cmd.name
        port = self.port
        if port.trace is not None and (name in NO_DATA_OPS or (
                name == "NPU_OP_BRANCH" and cmd.fields["branch_cond"] == 0)):
            port.trace.append(NO_DATA)  # (a conditional branch depends on the data)
        if name in ("NPU_OP_STOP", "NPU_OP_IRQ"):  # [U85-TRM: §3.10.12, §3.10.7]
            require(self.npu.chain_length == 0, "g_chain_length == 0",
                    "[U85-TRM: §3.10.12]" if name == "NPU_OP_STOP" else "[U85-TRM: §3.10.7]")
            mask = cmd.fields["mask"]
            self._status(irq_history_mask=self.regs.field("STATUS", "irq_history_mask") | mask,
                         irq_raised=1)
            r.poke("QREAD", nxt)
            if name == "NPU_OP_STOP":
                self._stop(f"NPU_OP_STOP at offset {q:#06x} (mask {mask:#06x})")
                self.resumable = True
            return
        if name in ops.OPERATIONS:
            res = ops.run_operation(cmd, self.sets, port, self.cfg)
            self.stats["kernel_operations"] += 1
            self.stats["macs"] += res.macs
            self.stats["ofm_elements"] += res.elements
            acct = port.account
            mac_cycles = res.mac_cycles
            acct.mac_cycles += mac_cycles
            acct.ao_cycles += res.ao_cycles
            acct.cycles += max(mac_cycles, res.ao_cycles, -(-acct.bytes // 16))
            r.poke("QREAD", nxt)
            return
        if name == "NPU_OP_DMA_START":
            moved = dma.run(cmd, self.sets, port)
            self.stats["dma_bytes"] += moved
            port.account.cycles += -(-moved // 16)
        elif name == "NPU_OP_PMU_MASK":
            self.pmu_mask_enable = bool(cmd.fields["enable"])
        elif name == "NPU_OP_BRANCH":  # [U85-TRM: §3.11.2]
            target = cmd.fields["branch_target"]
            require(target & 3 == 0, "(branch_target & 3) == 0", "[U85-TRM: §3.11.2]")
            if target >= qsize:
                raise _BranchFault(f"branch target {target:#x} >= QSIZE {qsize:#x}")
            taken = cmd.fields["branch_cond"] == 0 or r.field("COND_STATUS", "result_flag") == 1
            r.poke("QREAD", target if taken else nxt)
            return
        # DMA_WAIT, KERNEL_WAIT: barriers, already satisfied in a sequential model
        # [U85-TRM: §3.10.5, §3.10.8]
        r.poke("QREAD", nxt)

    def run_block(self, halt: threading.Event) -> list | None:
        """Device.run_block: the units of a run replayed at once (blocks.py)."""
        return self.blocks.run(halt)

    # -- program listing (listing.py) ----------------------------------------------------------
    def load_program(self, path: Path, options: ProgramOptions) -> HostProgram | None:
        """Vela's ``*_vela.tflite`` or raw ``.npz`` (or a directory holding one, with its input
        and expected output) as the Ethos-U driver runs it (placement, start, wait for the IRQ,
        outputs read and checked); anything else is not Vela's."""
        if program_in(path) is None:
            return None
        return vela_host_program(path, options)

    def units(self) -> list[Unit]:
        return self.listing.units()

    def window_index(self, address: int) -> int | None:
        return self.listing.window_index(super().window_index(address), address)

    def unit_tensors(self, index: int) -> tuple[TensorSpec, ...]:
        return self.listing.unit_tensors(index)

    def program_io(self) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
        io = self.listing.program_io()
        return super().program_io() if io is None else io

    def layer_references(self, path: Path, inputs: list[np.ndarray]) -> list:
        """A ``.tflite``: the model before Vela run by LiteRT's reference kernels, each NPU
        operation paired with its TFLite tensor through Vela's debug database (issue 27;
        framework_reference.py); anything else the generic .npz (Device.layer_references)."""
        if Path(path).suffix.lower() != ".tflite":
            return super().layer_references(path, inputs)
        from .framework_reference import layer_references
        return layer_references(self, path, inputs)

    def unit_label(self, address: int) -> str:
        return self.listing.unit_label(super().unit_label(address), address)

    # -- monitor commands ------------------------------------------------------------------------
    def monitor_commands(self) -> dict[str, MonitorCommand]:
        return {"npu": MonitorCommand("state | disasm [count]", self._cmd_npu,
                                      "NPU_SET_* state of the next operation, or the commands "
                                      "from QREAD on")}

    def _cmd_npu(self, ctx, args: list[str]) -> str:
        if (not args or args[0] not in ("state", "disasm") or len(args) > 2
                or (args[0] == "state" and len(args) > 1)):
            raise self.usage_error("npu")
        if args[0] == "state":
            return self.state_text()
        count = 16
        if len(args) == 2:
            try:
                count = int(args[1], 0)
            except ValueError:
                raise DeviceError(f"npu disasm: count must be a number, not {args[1]!r}") from None
        return self.disasm_text(count)

    def state_text(self) -> str:
        return self.listing.state_text()

    def disasm_text(self, count: int = 16) -> str:
        return self.listing.disasm_text(count)

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


class _BranchFault(Unpredictable):
    """NPU_OP_BRANCH target >= QSIZE: STATUS.branch_fault (handled in _run_unit)."""
