"""GAP9 NE16: the job queue, its registers, and job execution (job.py) on the cluster's L1.

The register map is configs/ne16.toml [NE16]. The queue follows the seed's section on
TRIGGER/ACQUIRE/STATUS/RUNNING_JOB/SOFT_CLEAR ([NE16: Register map]) with the
hwpe-ctrl facts the project collected where the register map is silent (N§1.2):

* two job contexts, used round-robin: the driver's writes to the job registers reach the
  context of the next offload (the *pointer* context: the bank selector, ``bank_index``);
* a host read of ACQUIRE (Device.host_read: the debugger's read never acquires) locks the
  controller and returns the next 8-bit job ID; 0xFFFFFFFE while it is locked, 0xFFFFFFFF when
  both contexts hold jobs (no side effect then);
* TRIGGER commits the acquired job and unlocks; 0 also starts it, non-0 holds it until the next
  job is committed with 0 [NE16: TRIGGER]; the pointer moves to the other context;
* STATUS bit 0 / bit 8: context 0 / 1 holds a job queued or running [NE16: STATUS]; RUNNING_JOB: the
  running job, else the last one run [NE16: RUNNING_JOB]; FINISHED counts finished jobs ([EXT]);
* SOFT_CLEAR: the queue, the lock, the IDs and the counters go; 0 also clears both contexts'
  registers [NE16: SOFT_CLEAR];
* the end of a job pulses the event line EVT (pulp-nnx waits for cluster event 12): a pulsed
  line, counted (Device.interrupt_counts).

A unit is one job; ``step subtile`` runs one output subtile (Ko, Ho, Wo with all its Ki); the
job's result is computed from memory when its first subtile starts and written subtile by
subtile (identical results unless a job's output overlaps its own input).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..description import load_description
from ..device import Device, MonitorCommand, ProgramOptions, Touched, Unit, UnitContext
from ..errors import BusError, DeviceError
from ..host import HostProgram, plan_units
from ..tensors import TensorSpec
from . import job as J
from .monitor import commands
from .tensors import job_tensors

BASE = 0x0020_1000
JOB_BASE = BASE + 0x20
ACQUIRE_BUSY, ACQUIRE_LOCKED = 0xFFFF_FFFF, 0xFFFF_FFFE
#: modelled cycles (an estimate, not silicon timing): per Ki subtile, the 9 bit-serial passes
#: of each weight bit plus a window load; per output subtile, normalisation and streamout
C_KI_LOAD, C_NORMQUANT = 10, 20


@dataclass
class Job:
    """A committed job: its ID, context, the registers it was committed with, and while it runs
    the result being written subtile by subtile."""

    job_id: int
    context: int
    regs: tuple[int, ...]
    held: bool = False
    cfg: J.JobConfig | None = None
    result: J.JobResult | None = None
    next_subtile: int = 0


class Ne16(Device):
    name = "ne16"
    unit_name = "job"

    def __init__(self, l1_kib: int = 128, description_path: str | None = None) -> None:
        desc = load_description(description_path or "ne16")
        if l1_kib != 128:  # a larger window than GAP9's, for one job of tensors that big
            if not 16 <= l1_kib <= 64 * 1024:
                raise ValueError(f"ne16: l1_kib must be 16..65536, not {l1_kib}")
            desc = with_l1_size(desc, l1_kib * 1024)
        super().__init__(desc)
        self._args = (l1_kib, description_path)  # a fresh device of this kind plans programs
        self.l1 = self.bus.memories["l1"]
        #: summaries of the program's jobs by program index (the driver's plan, then each job
        #: as it starts): the listing, and what a job's window pc names
        self.listing: list[str] = []
        #: the job registers of the program's jobs by program index, beside the listing (the
        #: driver's plan, then each job as it starts; None: not known), for unit_tensors
        self.program_regs: list[tuple[int, ...] | None] = []
        #: (host program, its planned jobs' registers) from load_program, taken by
        #: program_started when that program starts
        self._planned: tuple[HostProgram, list[tuple[int, ...]]] | None = None
        self._job_regs = {name: self.description.banks_at(JOB_BASE + 4 * i)
                          for i, name in enumerate(J.JOB_REGISTERS)}
        #: the storage keys of context 0's and context 1's job registers, in job order
        self._job_keys = tuple(tuple(banks[c].key for banks in self._job_regs.values())
                               for c in (0, 1))
        r = self.regs
        r.on_write("TRIGGER", self._trigger)
        r.on_write("SOFT_CLEAR", self._soft_clear)
        r.on_read("ACQUIRE", lambda reg, stored: self._acquire_value())
        self.warnings: list[str] = []
        self.events = 0  # end-of-job pulses of the event line
        self._clear()
        #: (job ID, JobResult) of the last jobs run, newest last, for naming who wrote what
        self.history: list[tuple[int, J.JobResult]] = []

    def _clear(self) -> None:
        """The status that SOFT_CLEAR and reset clear [NE16: SOFT_CLEAR]."""
        self.queue: list[Job] = []
        self.pointer = 0
        self.locked = False
        self.next_id = 0
        self.last_run = 0  # RUNNING_JOB when no job runs [NE16: RUNNING_JOB]
        self._sync_status(finished=0)

    # -- the queue ------------------------------------------------------------------------------
    def bank_index(self, reg) -> int:
        return self.pointer

    def _busy(self) -> set[int]:
        return {j.context for j in self.queue}

    def _acquire_value(self) -> int:
        if self.locked:
            return ACQUIRE_LOCKED
        if self.pointer in self._busy():
            return ACQUIRE_BUSY
        return self.next_id

    def host_read(self, addr: int, size: int) -> bytes:
        """The driver's read: reading ACQUIRE acquires [NE16: ACQUIRE]."""
        data = self.read(addr, size)
        acq = BASE + 0x04
        if addr < acq + 4 and acq < addr + size and self._acquire_value() < 256:
            self.locked = True
            self.next_id = (self.next_id + 1) & 0xFF
        return data

    def _trigger(self, reg, old: int, new: int) -> None:
        if not self.locked:
            self.warn(f"TRIGGER written ({new:#x}) with no job acquired: ignored [NE16: TRIGGER]")
            return
        regs = self.regs.peek_keys(self._job_keys[self.pointer])
        held = new != 0
        if held and self.queue:
            self.warn(f"TRIGGER {new:#x} (commit without start) for a job that is not the first "
                      "of the queue [NE16: TRIGGER]: held anyway")
        if not held:
            for j in self.queue:
                j.held = False  # the next job committed with 0 starts the held one [NE16: TRIGGER]
        self.queue.append(Job((self.next_id - 1) & 0xFF, self.pointer, regs, held))
        self.locked = False
        self.pointer ^= 1
        self._sync_status()

    def _soft_clear(self, reg, old: int, new: int) -> None:
        keep = new != 0
        finished = self.regs.peek("FINISHED")
        self._clear()
        self.regs.poke("FINISHED", finished if keep else 0)
        if not keep:  # clear the register file too [NE16: SOFT_CLEAR]
            for banks in self._job_regs.values():
                for b in banks:
                    self.regs.poke(b, 0)

    def _sync_status(self, finished: int | None = None) -> None:
        """STATUS from the contexts in use; RUNNING_JOB: the job at the head of the queue runs
        (the engine starts a triggered job at once; the emulator computes it when it is
        stepped), else the last job run [NE16: RUNNING_JOB]."""
        busy = self._busy()
        self.regs.poke("STATUS", (0 in busy) | (1 in busy) << 8)
        head = self._runnable()
        self.regs.poke("RUNNING_JOB", head.job_id if head is not None else self.last_run)
        if finished is not None:
            self.regs.poke("FINISHED", finished)

    def warn(self, message: str) -> None:
        self.warnings.append(message)
        del self.warnings[:-100]

    # -- the contract ---------------------------------------------------------------------------
    @property
    def granularities(self) -> tuple[str, ...]:
        return ("job", "subtile")

    @property
    def pc(self) -> int:
        """Job k of the program (k = jobs run since reset) is word k of the program window: the
        two contexts' job registers share one address for every job, so they cannot name one
        (issue 25 #7). The end address once the program's jobs have all run."""
        if not self.queue and 0 < self.units_done >= len(self.listing):
            return self.end_address
        return self.window_pc(self.units_done)

    def _runnable(self) -> Job | None:
        return self.queue[0] if self.queue and not self.queue[0].held else None

    def finished(self) -> bool:
        return self._runnable() is None

    @staticmethod
    def _summary(j: Job) -> str:
        try:
            summary = J.decode(j.regs).summary()
        except DeviceError as e:
            summary = f"not runnable: {e}"
        held = ", held (committed without start)" if j.held else ""
        return f"{summary} (ID {j.job_id}, C{j.context}{held})"

    def units(self) -> list[Unit]:
        """The whole program: the jobs run, the queued ones (their registers as committed), and
        the ones the driver has still to queue (its plan)."""
        rows = list(self.listing)
        for i, j in enumerate(self.queue, self.units_done):
            rows[i:i + 1] = [self._summary(j)]
        return [Unit(self.window_pc(k), f"job {k}", s) for k, s in enumerate(rows)]

    def program_started(self, host: HostProgram) -> None:
        self.listing = self.listing[:self.units_done] + list(host.plan or [])
        planned = self._planned[1] if self._planned and self._planned[0] is host else []
        self.program_regs = self.program_regs[:self.units_done] + list(planned)

    def unit_tensors(self, index: int) -> tuple[TensorSpec, ...]:
        """Job ``index``'s input and output in L1, HWC as pulp-nnx has them (tensors.py), from
        its registers: as queued, else as planned from the driver or as run. ``()`` when they
        are not known (a job the driver has not written yet) or do not decode."""
        cfg = self.job_config(index)
        return () if cfg is None else job_tensors(cfg)

    def job_config(self, index: int) -> J.JobConfig | None:
        """Job ``index``'s decoded registers (unit_tensors; the per-layer diff's subtiles):
        as queued, else as planned or as run; None when not known or not decodable."""
        self.check_unit(index)
        queued = index - self.units_done
        if 0 <= queued < len(self.queue):
            regs = self.queue[queued].regs
        else:
            regs = self.program_regs[index] if index < len(self.program_regs) else None
        if regs is None:
            return None
        try:
            return J.decode(regs)
        except DeviceError:
            return None

    def _retire(self) -> str | None:
        """plan_units: the next job's summary, the queue moved on as after it, nothing run."""
        j = self._runnable()
        if j is None:
            return None
        summary = self._summary(j)
        self._finish(j)
        return summary

    def interrupts(self) -> dict[str, bool]:
        return {"EVT": False}  # a pulse: see interrupt_counts

    def interrupt_counts(self) -> dict[str, int]:
        return {"EVT": self.events}

    def counters(self) -> dict[str, int]:
        return {**super().counters(), "events": self.events, "queued": len(self.queue),
                "finished": self.regs.peek("FINISHED")}

    def monitor_commands(self) -> dict[str, MonitorCommand]:
        return commands(self)

    def load_program(self, path: Path, options: ProgramOptions) -> HostProgram | None:
        from .pulp_nnx import is_test_app, load_test_app

        l1 = (self.l1.region.base, self.l1.region.size)
        if not is_test_app(Path(path)):
            return None
        host = load_test_app(Path(path), l1)
        regs: list[tuple[int, ...]] = []

        def retire(dev: Ne16) -> str | None:
            j = dev._runnable()
            if j is not None:
                regs.append(j.regs)
            return Ne16._retire(dev)

        host.plan = plan_units(host, Ne16(*self._args), retire, self._program_window.size // 4)
        self._planned = (host, regs[:len(host.plan)])
        return host

    def layer_references(self, path: Path, inputs: list) -> list:
        """pulp-nnx's golden output (a test application directory) as one reference per job
        (golden.py), else the generic .npz (Device.layer_references)."""
        from .golden import golden_references, is_golden

        if is_golden(Path(path)):
            return golden_references(self, Path(path))
        return super().layer_references(path, inputs)

    def done_message(self) -> str:
        return (f"NE16 queue empty after {self.units_done} jobs, {self.events} end-of-job events"
                + (f" ({len(self.warnings)} warnings: monitor ne16 warnings)"
                   if self.warnings else ""))

    def idle_message(self) -> str:
        if self.queue:
            return (f"job {self.queue[0].job_id} is held (committed with TRIGGER != 0): it "
                    "starts when the next job is committed with TRIGGER = 0 [NE16: TRIGGER]")
        return "no job queued (ACQUIRE, write the job registers, TRIGGER 0)"

    # -- execution ------------------------------------------------------------------------------
    def _read_l1(self, addr: int, n: int, what: str) -> np.ndarray:
        base = self.l1.region.base
        if n < 0 or addr < base or addr + n > base + self.l1.region.size:
            raise DeviceError(f"{what}: {n} bytes at {addr:#010x} are outside L1 "
                              f"({base:#010x}-{base + self.l1.region.size - 1:#010x})")
        return self.l1.data[addr - base:addr - base + n]

    def execute_unit(self, ctx: UnitContext) -> Touched:
        """One job (or one output subtile of it with granularity ``subtile``)."""
        j = self._runnable()
        where = f"job {j.job_id} (context {j.context}): "
        if j.result is None:
            cfg = J.decode(j.regs, where)
            # the whole job at once: stored in L1 as it is computed (J.execute's l1)
            l1 = (self.l1.data, self.l1.region.base) if ctx.granularity != "subtile" else None
            try:
                j.result = J.execute(cfg, lambda a, n, what: self._read_l1(a, n, where + what),
                                     l1)
            except BusError as e:
                raise DeviceError(f"{where}{e}") from None
            j.cfg = cfg
            self.listing[self.units_done:self.units_done + 1] = [self._summary(j)]
            self.program_regs += [None] * (self.units_done + 1 - len(self.program_regs))
            self.program_regs[self.units_done] = j.regs
        res, cfg = j.result, j.cfg
        last = cfg.subtiles if ctx.granularity != "subtile" else j.next_subtile + 1
        self._write(res, j.next_subtile, last, cfg.subtiles)
        if j.next_subtile == 0:
            ctx.touched.reads += j.result.reads
        ctx.touched.writes += res.written_ranges(j.next_subtile, last)
        self.cycles += (last - j.next_subtile) * (
            C_NORMQUANT + (1 if cfg.mode == 1 else cfg.nb[3]) * (C_KI_LOAD + 9 * cfg.qw))
        j.next_subtile = last
        if last < cfg.subtiles:
            ctx.touched.partial = True
            return ctx.touched
        self._job_done(j)
        return ctx.touched

    def _write(self, res: J.JobResult, first: int, last: int, subtiles: int) -> None:
        """Store the outputs of subtiles first..last-1 of ``subtiles`` (their little-endian
        bytes); a whole job with contiguous channels is one strided store, or was stored as it
        was computed (``values`` None)."""
        base, size = self.l1.region.base, self.l1.region.size
        if res.values is None:
            self.l1.touch()
            return
        whole = first == 0 and last == subtiles and res.whole is not None
        if whole:  # bounds kept per configuration: no pass over the job's elements
            sel, (lo, hi) = None, res.whole
        else:
            sel = res.written & (res.subtile >= first) & (res.subtile < last)
            addr = res.addresses[sel]
            if not addr.size:
                return
            lo, hi = int(addr.min()), int(addr.max()) + res.elem
        J.check_output(lo, hi, res.elem, base, size)
        if whole:
            origin, d2, d1 = res.dense
            h, w, k, elem = res.values.shape
            view = np.ndarray((h, w, k * elem), np.uint8, self.l1.data, origin - base,
                              (d2, d1, 1))
            view[...] = res.values.reshape(h, w, k * elem)
        else:
            self.l1.data[(addr - base)[:, None] + np.arange(res.elem)] = res.values[sel]
        self.l1.touch()

    def _job_done(self, j: Job) -> None:
        self.history.append((j.job_id, j.result))
        del self.history[:-16]
        self._finish(j)

    def _finish(self, j: Job) -> None:
        """The end of job ``j``: out of the queue, the end-of-job event, the status."""
        self.queue.remove(j)
        self.events += 1
        self.last_run = j.job_id
        self._sync_status(finished=(self.regs.peek("FINISHED") + 1) & 0xFFFFFFFF)

    def locate(self, address: int) -> str | None:
        """"job N, subtile (ko, ho, wo)" of the last job that wrote ``address``."""
        for job_id, res in reversed(self.history):
            hit = np.flatnonzero(res.written.ravel()
                                 & (res.addresses.ravel() <= address)
                                 & (address < res.addresses.ravel() + res.elem))
            if hit.size:
                s = int(res.subtile.ravel()[hit[-1]])
                nb_ho, nb_wo = _subtile_grid(res)
                ko, rest = divmod(s, nb_ho * nb_wo)
                return f"job {job_id}, subtile ko={ko} ho={rest // nb_wo} wo={rest % nb_wo}"
        return None

    def reset(self, kind: str = "halt") -> None:
        super().reset(kind)
        self.warnings = []
        self.history = []
        self.listing = []
        self.program_regs = []
        self.events = 0  # the cluster's event line: SOFT_CLEAR (NE16's own state) keeps it
        self._clear()

    def _state(self) -> dict:
        return {"queue": list(self.queue), "pointer": self.pointer, "locked": self.locked,
                "next_id": self.next_id, "events": self.events, "last_run": self.last_run,
                "listing": list(self.listing), "program_regs": list(self.program_regs)}

    def _set_state(self, state: dict) -> None:
        self.queue = list(state["queue"])
        self.pointer, self.locked = state["pointer"], state["locked"]
        self.next_id, self.events = state["next_id"], state["events"]
        self.last_run = state["last_run"]
        self.listing = list(state["listing"])
        self.program_regs = list(state["program_regs"])


def with_l1_size(desc, size: int):
    """``desc`` with the L1 window ``size`` bytes long."""
    regions = tuple(dataclasses.replace(r, size=size, populated=((r.base, r.base + size),))
                    if r.name == "l1" else r for r in desc.regions)
    return dataclasses.replace(desc, regions=regions)


def _subtile_grid(res: J.JobResult) -> tuple[int, int]:
    h, w, _ = res.subtile.shape
    return -(-h // 3), -(-w // 3)
