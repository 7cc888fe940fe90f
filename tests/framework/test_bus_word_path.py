"""The bus's word path (Bus.write: one aligned register word, decoded once per register, issue
31 #2) does what the general path does: the same register (bank) reached, the same access rules
and hooks, the same errors, the same write log."""
import random

import pytest

from accelstub.devices import DEVICES, BusError, open_device
from accelstub.devices.errors import DeviceError


def _outcome(dev, addr: int, value: int) -> tuple[str, dict[int, int], list, dict[str, int]]:
    """Write ``value`` to the word at ``addr``: (error text or "", every stored register value,
    the write log, the writes ignored by locked banks so far)."""
    dev.bus.write_log = []
    try:
        dev.write(addr, value.to_bytes(4, "little"))
        error = ""
    except (BusError, DeviceError) as e:
        error = f"{type(e).__name__}: {e}"
    return error, dev.regs.snapshot(), dev.bus.write_log, dict(dev.regs.ignored_writes)


@pytest.mark.parametrize("name", DEVICES)
def test_word_writes_match_the_general_path_on_every_register_word(name):
    """Two devices of the same kind take the same writes, one through the word path and one
    with the word path emptied (every write through _chunks/_write_regs): every word of every
    register window, reserved words included, with random values (control bits too, so hooks
    run), compared after each write."""
    fast, slow = open_device(name), open_device(name)
    slow.bus._word_regs = {}
    assert fast.bus._word_regs, "the word path covers no register"
    words = [a for r in fast.description.regions if r.kind in ("registers", "pseudo")
             for s, e in r.populated for a in range(s & ~3, e, 4)]
    rnd = random.Random(31)
    for addr in words:
        value = rnd.getrandbits(32)
        assert _outcome(fast, addr, value) == _outcome(slow, addr, value), hex(addr)


def test_word_path_reaches_the_selected_bank_and_keeps_locked_banks(monkeypatch):
    """NVDLA's banked contexts through the word path: the producer pointer picks the bank a
    word write reaches; a write to a bank whose op_en is set is ignored and counted."""
    dev = open_device("nvdla")
    reg = next(r for r in dev.description.registers if r.slot == "CACC_D_DATAOUT_ADDR")
    pointer = dev.description.register("CACC_S_POINTER")
    assert reg.address in dev.bus._word_regs
    dev.write(pointer.address, (1).to_bytes(4, "little"))  # producer = 1
    dev.write(reg.address, (0x1234_5640).to_bytes(4, "little"))
    b0, b1 = dev.description.banks_at(reg.address)
    assert (dev.regs.peek(b0), dev.regs.peek(b1)) == (0, 0x1234_5640)
    enable = dev.description.banks_at(dev.description.register("CACC_D_OP_ENABLE_G1").address)
    dev.regs.poke(enable[1], 1)  # bank 1 armed: locked
    dev.write(reg.address, (0x40).to_bytes(4, "little"))
    assert dev.regs.peek(b1) == 0x1234_5640
    assert dev.regs.ignored_writes[b1.name] == 1


def test_word_path_runs_hooks_once_and_refuses_unpopulated_words():
    """A word write runs the register's write hook once with (old, new); a word beside the
    registers (not populated) raises naming the address and logs nothing."""
    dev = open_device("ne16")
    seen = []
    reg = dev.description.register("SOFT_CLEAR")
    dev.regs.on_write(reg, lambda r, old, new: seen.append((r.name, old, new)))
    dev.bus.write_log = []
    dev.write(reg.address, (1).to_bytes(4, "little"))
    assert seen == [("SOFT_CLEAR", 0, 1)]
    assert dev.bus.write_log == [(reg.address, reg.address + 4)]
    gap = reg.address + 4  # NE16's control block ends at SOFT_CLEAR; the job registers
    assert dev.bus.region_at(gap) is not None  # start two words further on
    with pytest.raises(BusError, match=f"{gap:#010x}.*not populated"):
        dev.write(gap, bytes(4))
    assert dev.bus.write_log == [(reg.address, reg.address + 4)]
