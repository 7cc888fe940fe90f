"""MAX78000 kernel memory (MRAM) writes with CTRL.mexpress set: packed loading.

Plain writes (CTRL.mexpress = 0) need nothing here: the bus stores them as addressed, and the
region's word_mask keeps the 72 bits of each 16-byte word (+0 bits 7:0 = k0, +4 = k1..k4, +8 =
k5..k8, +12 reads 0), which is the layout devices/max78000/datapath.py reads. The "4th word
commits the 72-bit word" staging of the generated code is not modelled: every word is visible at
once (a debugger writing a single word sees it immediately).

Packed loading (CTRL.mexpress = 1). [UG-CNN: Table 27-19] says only: "Enable loading of the mask
memories using packed data. With this bit set, a change in the state of the two least
significant bits of the MRAM address triggers a reload of the address counter." The rest is the
public code ai8x-synthesis generates (R§1.3, R7#40; izer
kernels.py / apbaccess.py at HEAD ab4f4c01):

* "Set address": a *byte* write of 0x01 to ``block + column*4 | 1`` (address bits 1:0 = 01).
  We reload the block's address counter with ``column = (offset & 0x3ffc) >> 2``.
* Then 32-bit words are written to successive addresses (the old loader starts again at the
  block base, the new loader at ``block + column*4``: the word's own address is ignored). Each
  word carries 4 bytes of a stream of packed 9-byte kernels, first byte in bits 31:24 (the izer
  packs with numpy ``>u4``). Every 9 bytes k0..k8 are stored into the 72-bit word at the counter,
  which then advances by one. A final partial kernel (zero padding to a word) is never stored.

One counter per MRAM block (processor) is our model: the generated code always sets the address
before it streams a block, so a shared counter would behave the same for it.

Registration (the device does it once; ``install_mram_hooks`` is the convenience):

    for r in bus.regions:
        if r.name.startswith("mram_"):
            bus.on_memory_write(r.name, functools.partial(mram_write_hook, device))
"""
from __future__ import annotations

import functools

import numpy as np

from ..errors import BusError

MRAM_BASE = 0x5018_0000
QUAD_STRIDE = 0x40_0000
MRAM_WORDS = 768  # 768 x 72 bit per processor [UG-CNN: CNNx16_n MRAM Details]
MEXPRESS_BIT = 20  # CNNx16_n_CTRL.mexpress [UG-CNN: Table 27-19]


class _Stream:
    """Packed-loading state of one MRAM block: address counter and pending bytes."""

    __slots__ = ("column", "pending")

    def __init__(self) -> None:
        self.column = 0
        self.pending = bytearray()


def _streams(device) -> dict[str, _Stream]:
    st = device.__dict__.get("_mexpress_streams")
    if st is None:
        st = device.__dict__["_mexpress_streams"] = {}
    return st


def _plain(kernels: np.ndarray) -> bytes:
    """Kernels [k, 9] (bytes k0..k8) in the plain layout, 16 bytes each: +0 = k0, +4 =
    k1<<24|k2<<16|k3<<8|k4, +8 = k5<<24|..|k8 (little-endian words), +12 = 0."""
    out = np.zeros((len(kernels), 16), np.uint8)
    out[:, 0] = kernels[:, 0]
    out[:, 4:8] = kernels[:, 4:0:-1]
    out[:, 8:12] = kernels[:, 8:4:-1]
    return out.tobytes()


def mram_write_hook(device, region, address: int, data: bytes) -> bool:
    """Bus write hook for one MRAM region (``Bus.on_memory_write``). Returns False (store as
    addressed) unless CTRL.mexpress of the block's quadrant is set."""
    q = (region.base - MRAM_BASE) // QUAD_STRIDE
    if not (device.regs.peek(f"CNNx16_{q}_CTRL") >> MEXPRESS_BIT) & 1:
        return False
    st = _streams(device).setdefault(region.name, _Stream())
    off = address - region.base
    if off & 3:
        # address bits 1:0 changed: reload the address counter ([UG-CNN: Table 27-19], [izer] "Set
        # address")
        st.column = (off & 0x3FFC) >> 2
        st.pending.clear()
        return True
    mem = device.bus.memories[region.name]
    n = len(data) & ~3
    # each word's bits 31:24 first (izer '>u4' packing), after the bytes pending from before
    stream = bytes(st.pending) + np.frombuffer(data, np.uint8, count=n).reshape(-1, 4)[:, ::-1] \
        .tobytes()
    k = len(stream) // 9
    room = MRAM_WORDS - st.column
    if k > room:  # store what fits, then fault at the word that completes the next kernel
        mem.write(st.column * 16, _plain(np.frombuffer(stream, np.uint8, count=9 * room)
                                         .reshape(room, 9)))
        st.column = MRAM_WORDS
        word = -(-(9 * (room + 1) - len(st.pending)) // 4) - 1
        raise BusError(address + 4 * word, f"{region.name}: packed (mexpress) write past the "
                       f"{MRAM_WORDS} words of the block")
    if k:
        mem.write(st.column * 16, _plain(np.frombuffer(stream, np.uint8, count=9 * k)
                                         .reshape(k, 9)))
        st.column += k
    st.pending = bytearray(stream[9 * k:])
    return True


def install_mram_hooks(device) -> None:
    """Register :func:`mram_write_hook` on every MRAM region of ``device`` (idempotent)."""
    if getattr(device, "_mram_hooks", False):
        return
    for r in device.bus.regions:
        if r.name.startswith("mram_"):
            device.bus.on_memory_write(r.name, functools.partial(mram_write_hook, device))
    device._mram_hooks = True
