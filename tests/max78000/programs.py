"""Small MAX78000 programs the tests build themselves, register by register from [UG-CNN].

``chain_writes(n)``: n layers of a 1x1 convolution on quadrant 0, processors 0-3 (4 channels,
2x2 pixels, HWC in data memory 0). Every weight is 64 on the diagonal and the output shift is
left 2, so each layer doubles its input (out = x*64*4/128, saturating at 127), ping-ponging
between word 0 and word 0x40 of data memory 0. Small enough to check by hand.
"""
from __future__ import annotations

QB = 0x5010_0000  # quadrant 0 registers [UG-CNN: Table 27-17]
SRAM = 0x5040_0000  # data memory 0 (quadrant 0, group 0)
MRAM = 0x5018_0000  # processor 0's kernel memory [UG-CNN: Table 27-5]; processor p at + p*0x4000
BUF = (0x000, 0x100)  # byte offsets of the two ping-pong buffers in data memory 0
INPUT = [[4 * pix + c + 1 for c in range(4)] for pix in range(4)]  # [pixel][channel]


def chain_writes(layers: int = 4) -> list[tuple[int, int, str]]:
    """(address, 32-bit value, comment) in driver order; the last write starts the engine."""
    w: list[tuple[int, int, str]] = []
    for pix, chans in enumerate(INPUT):
        w.append((SRAM + 4 * pix, int.from_bytes(bytes(chans), "little"),
                  f"input pixel {pix}: channels 0-3 in byte lanes 0-3 (HWC)"))
    for p in range(4):  # 1x1 kernel of output channel t in element 8-t of word 0 (plain layout)
        w.append((MRAM + p * 0x4000 + 8, 0x40 << (8 * p),
                  f"processor {p}: weight 64 for output channel {p} (MRAM +8 = k5..k8)"))
        w.append((MRAM + p * 0x4000 + 12, 0, "commit the 72-bit word"))
    w.append((QB + 0x8, layers - 1, "LCNT_MAX [UG-CNN: Table 27-21]"))
    for y in range(layers):
        src, dst = BUF[y % 2] // 4, BUF[(y + 1) % 2] // 4
        regs = [(0x010, 1, "RCNT: 2 rows, no pad [UG-CNN: Table 27-23]"), (0x090, 1, "CCNT: 2 "
                                                                                     "columns"),
                (0x110, 0x100, "ONED: oned_width 1 = 1x1 kernel [UG-CNN: Table 27-25]"),
                (0x310, dst, "WPTR_BASE: memory 0, word %#x [UG-CNN: Table 27-29]" % dst),
                (0x410, 0x2000, "WPTR_MOFF [UG-CNN: Table 27-31]"),
                (0x510, src, "RPTR_BASE: word %#x [UG-CNN: Table 27-33]" % src),
                (0x590, 0x820, "LCTRL0: sramlsrc | master [UG-CNN: Table 27-34]"),
                (0x610, 0x18, "MCNT: mask 0..24, 4 steps of 8 bits [UG-CNN: Table 27-35]"),
                (0x710, 0x000F000F, "EN: processors 0-3 [UG-CNN: Table 27-37]"),
                (0x790, 0x4000, "POST: 8-bit weights, scale left 2 [UG-CNN: Table 27-38]"),
                (0xA10, 0x1800, "LCTRL1: xpch_max 24 = 4 slots x 8 bits [UG-CNN: Table 27-39]")]
        for off, value, what in regs:
            w.append((QB + off + 4 * y, value, f"L{y} {what}"))
    w.append((QB, 0x8, "CTRL: clk_en [UG-CNN: Table 27-19]"))
    w.append((QB, 0x9, "CTRL: cnn_en 0->1 starts at layer 0 [UG-CNN: Table 27-19]"))
    return w


def chain_script(layers: int = 4) -> str:
    return "".join(f"mww 0x{a:08x} 0x{v:08x}  # {c}\n" for a, v, c in chain_writes(layers))


def chain_expected(layers: int) -> tuple[int, list[list[int]]]:
    """(byte offset of the buffer the last layer wrote, [pixel][channel] values)."""
    vals = [[min(127, x << layers) for x in chans] for chans in INPUT]
    return BUF[layers % 2], vals


def apply(device, layers: int = 4) -> None:
    for a, v, _ in chain_writes(layers):
        device.write(a, v.to_bytes(4, "little"))
