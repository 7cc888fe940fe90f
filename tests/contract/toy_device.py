"""A tiny device written against the contract alone (devices/device.py), for the contract suite:
two banked job contexts (bank_select = POINTER.producer, locked while ENABLE.en), a host read with
a side effect (TICKET), a unit that stops word by word at a finer granularity or on a halt
request, an interrupt line, a program importer.

Its program format (``*.toyjob``), one statement per line, ``#`` comments:
``copy SRC DST COUNT`` (a job on the next context, then the driver waits for DONE) and
``expect ADDR VALUE`` (the known answer).
"""
from __future__ import annotations

from collections import deque
from pathlib import Path

from accelstub.devices.description import load_description
from accelstub.devices.device import (
    Device,
    DeviceSpec,
    MonitorCommand,
    ProgramOptions,
    Touched,
    Unit,
    UnitContext,
)
from accelstub.devices.host import CheckWords, HostProgram, Poll, WaitIrq, Write
from accelstub.devices.tensors import TensorSpec

DESCRIPTION = Path(__file__).with_name("toy.toml")
RAM = 0x2000_0000
BASE = 0x1000_0000
SPEC = DeviceSpec(name="toy", title="Toy copy engine", factory=f"{__name__}:Toy",
                  program_help="a .toyjob file or a command script")


class Toy(Device):
    name = "toy"
    unit_name = "job"

    def __init__(self) -> None:
        super().__init__(load_description(DESCRIPTION))
        self.queue: deque[int] = deque()  # contexts with ENABLE.en set, in enable order
        self.word = 0  # words of the running job already copied (a job stopped part-way)
        self.ticket = 0
        self.jobs = 0
        for bank in self.description.banks_at(BASE + 0x2C):
            self.regs.on_write(bank, self._enable_written)
        self.regs.on_read("TICKET", self._read_ticket)

    @property
    def granularities(self) -> tuple[str, ...]:
        return ("job", "word")

    def _enable_written(self, reg, old: int, new: int) -> None:
        if new & 1 and not old & 1:
            self.queue.append(reg.bank)
            self._status()

    def _status(self) -> None:
        consumer = self.queue[0] if self.queue else 0
        self.regs.set_field("POINTER", "consumer", consumer)
        self.regs.set_field("STATUS", "busy", int(bool(self.queue)))

    def _bank(self, name: str, b: int) -> int:
        return self.regs.peek(f"{name}_C{b}")

    # -- the contract ---------------------------------------------------------------------------
    @property
    def pc(self) -> int:
        b = self.queue[0] if self.queue else 0
        return self.description.register(f"ENABLE_C{b}").address

    def finished(self) -> bool:
        return not self.queue

    def units(self) -> list[Unit]:
        return [Unit(self.description.register(f"ENABLE_C{b}").address, f"job C{b}",
                     f"copy {self._bank('COUNT', b)} words {self._bank('SRC', b):#x} -> "
                     f"{self._bank('DST', b):#x}") for b in self.queue]

    def unit_tensors(self, index: int) -> tuple[TensorSpec, ...]:
        """A job's words read as int8 pixels of 4 channels, HWC (byte c of word w is channel c
        of column w): an interleaved layout for the tensor commands and views to get right."""
        b = self.queue[index]
        n = self._bank("COUNT", b)
        return tuple(TensorSpec(name, "HWC", (1, n, 4), "int8", channel=(0, 1, 2, 3), row=(base,),
                                col=tuple(4 * w for w in range(n)), doc=f"{reg}_C{b}, words")
                     for name, reg, base in (("input", "SRC", self._bank("SRC", b)),
                                             ("output", "DST", self._bank("DST", b))))

    def execute_unit(self, ctx: UnitContext) -> Touched:
        b = self.queue[0]
        src, dst, n = self._bank("SRC", b), self._bank("DST", b), self._bank("COUNT", b)
        while self.word < n:
            if ctx.halt_requested():
                ctx.touched.partial = True
                return ctx.touched
            a = 4 * self.word
            self.write(dst + a, self.read(src + a, 4))
            ctx.read(src + a, src + a + 4)
            ctx.wrote(dst + a, dst + a + 4)
            self.word += 1
            self.cycles += 1
            if ctx.granularity == "word" and self.word < n:
                ctx.touched.partial = True
                return ctx.touched
        self.queue.popleft()
        self.word = 0
        self.jobs += 1
        self.regs.set_field(f"ENABLE_C{b}", "en", 0)  # the engine's own update, not a bus write
        self.regs.set_field("STATUS", "done", 1)
        self._status()
        return ctx.touched

    def host_read(self, addr: int, size: int) -> bytes:
        data = self.read(addr, size)
        if addr <= BASE + 4 < addr + size:
            self.ticket += 1
        return data

    def _read_ticket(self, reg, stored: int) -> int:
        return self.ticket

    def interrupts(self) -> dict[str, bool]:
        return {"DONE": bool(self.regs.field("STATUS", "done"))}

    def counters(self) -> dict[str, int]:
        return {**super().counters(), "jobs": self.jobs}

    def monitor_commands(self) -> dict[str, MonitorCommand]:
        return {"queue": MonitorCommand("", lambda ctx, args: " ".join(f"C{b}" for b in
                                                                       self.queue) or "empty",
                                        "contexts queued, next first")}

    def load_program(self, path: Path, options: ProgramOptions) -> HostProgram | None:
        if Path(path).suffix != ".toyjob":
            return None
        steps, expected, bank = [], [], 0
        for n, line in enumerate(Path(path).read_text().splitlines(), 1):
            words = line.split("#")[0].split()
            where = f"{Path(path).name}:{n}"
            if not words:
                continue
            if words[0] == "copy" and len(words) == 4:
                src, dst, count = (int(w, 0) for w in words[1:])
                steps += [Poll(BASE + 0x04, 0, 0, where=where, name="TICKET"),  # take a ticket
                          Write(BASE + 0x08, bank.to_bytes(4, "little"), where=where)]
                steps += [Write(BASE + off, v.to_bytes(4, "little"), where=where)
                          for off, v in ((0x20, src), (0x24, dst), (0x28, count), (0x2C, 1))]
                steps.append(WaitIrq("DONE", where))
                bank ^= 1
            elif words[0] == "expect" and len(words) == 3:
                expected.append((int(words[1], 0), int(words[2], 0), 0xFFFFFFFF))
            else:
                raise ValueError(f"{where}: expected 'copy SRC DST COUNT' or 'expect ADDR VALUE'")
        steps.append(CheckWords(expected, f"{Path(path).name}: end"))
        isr = [Write(BASE + 0x0C, (1 << 8).to_bytes(4, "little"), where="isr")]  # clear done
        return HostProgram(Path(path).name, steps, {"DONE": isr}, f"{Path(path).name}: toy job")

    def reset(self, kind: str = "halt") -> None:
        super().reset(kind)
        self.queue.clear()
        self.word = self.jobs = 0
        self._status()

    def _state(self) -> dict:
        return {"queue": list(self.queue), "word": self.word, "ticket": self.ticket,
                "jobs": self.jobs}

    def _set_state(self, state: dict) -> None:
        self.queue = deque(state["queue"])
        self.word, self.ticket, self.jobs = state["word"], state["ticket"], state["jobs"]
