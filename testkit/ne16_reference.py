"""Independent plain-integer reference of one NE16 job, written from the register map ([NE16],
docs/citations.md) and the project's notes on it ("N§n", docs/citations.md), for the tests: nothing
here is shared with devices/ne16 or emu/.

It follows the hardware's own loop, subtile by subtile (N§3.2): for each output-channel
subtile (Ko), output row subtile (Ho), output column subtile (Wo): the input window of 5x5 pixels
(3x3 in 1x1 mode) is read from memory, or padding, per the PADDING register and the last
subtile's REM2 [NE16: PADDING]; every input-channel subtile (Ki, 16 channels) is accumulated with
the bit-serial weights decoded bit by bit from memory (N§3.4) plus the weight offset; the
int32 sum is normalised and quantised (N§3.5) and streamed out through the OUTFEAT strides.
Python integers throughout; slow, and meant to be.

``run_job(mem, regs)``: ``mem`` has ``read(addr, n) -> bytes`` and ``write(addr, data)``;
``regs`` maps the seed's job register names (WEIGHTS_PTR ... CONFIG0) to 32-bit values.
"""
from __future__ import annotations

JOB_REGISTERS = ("WEIGHTS_PTR", "INFEAT_PTR", "OUTFEAT_PTR", "SCALE_PTR", "SCALE_SHIFT_PTR",
                 "SCALE_BIAS_PTR", "INFEAT_D0_STRIDE", "INFEAT_D1_STRIDE", "INFEAT_D2_STRIDE",
                 "OUTFEAT_D0_STRIDE", "OUTFEAT_D1_STRIDE", "OUTFEAT_D2_STRIDE",
                 "WEIGHTS_D0_STRIDE", "WEIGHTS_D1_STRIDE", "WEIGHTS_D2_STRIDE", "SUBTILE_REM0",
                 "SUBTILE_REM1", "SUBTILE_REM2", "SUBTILE_NB0", "SUBTILE_NB1", "PADDING",
                 "WEIGHT_OFFSET", "FILTER_MASK", "CONFIG0")  # [NE16: Overview], offsets 0x20 + 4*i


def _bits(v: int, msb: int, lsb: int) -> int:
    return (v >> lsb) & ((1 << (msb - lsb + 1)) - 1)


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _u(mem, addr: int, n: int) -> int:
    return int.from_bytes(mem.read(addr & 0xFFFFFFFF, n), "little")


def run_job(mem, regs: dict[str, int]) -> None:
    c0 = regs["CONFIG0"]
    qw = _bits(c0, 2, 0) + 1                    # [NE16: CONFIG0]
    assert not _bits(c0, 3, 3), "MODE16 is not part of the reference"
    normquant = _bits(c0, 4, 4)                 # [NE16: CONFIG0]
    mode = _bits(c0, 6, 5)                      # [NE16: CONFIG0]: 0 3x3, 1 3x3 dw, 2 1x1
    assert mode != 3 and not _bits(c0, 7, 7)    # reserved / linear not in the reference
    strided = _bits(c0, 8, 8)                   # [NE16: CONFIG0]
    norm_bits = (8, 16, 32)[_bits(c0, 13, 12)]  # [NE16: CONFIG0]
    streamin = _bits(c0, 14, 14)                # [NE16: CONFIG0]
    offset_on = _bits(c0, 15, 15)               # [NE16: CONFIG0]
    right_shift = _bits(c0, 20, 16)             # [NE16: CONFIG0]
    out_bits = (8, 16, 32)[_bits(c0, 22, 21)]   # [NE16: CONFIG0]
    relu = not _bits(c0, 23, 23)                # [NE16: CONFIG0]: 0 = rectify
    norm_shift = _bits(c0, 24, 24)              # [NE16: CONFIG0]
    norm_bias = _bits(c0, 25, 25)               # [NE16: CONFIG0]
    if not normquant:
        assert out_bits == 32
    dw = mode == 1
    win = 3 if mode == 2 else 5                 # 5x5 window for 3x3 filters, 3x3 for 1x1
    taps = [(0, 0)] if mode == 2 else [(ty, tx) for ty in range(3) for tx in range(3)]
    ko_size = 16 if dw else 32

    nb_ki, nb_ko = _bits(regs["SUBTILE_NB0"], 15, 0), _bits(regs["SUBTILE_NB0"], 31, 16)
    nb_wo, nb_ho = _bits(regs["SUBTILE_NB1"], 15, 0), _bits(regs["SUBTILE_NB1"], 31, 16)

    def rem(reg: str, msb: int, lsb: int, full: int) -> int:
        return _bits(regs[reg], msb, lsb) or full   # 0 also means a full last subtile

    rem_ki, rem_ko = rem("SUBTILE_REM0", 15, 0, 16), rem("SUBTILE_REM0", 31, 16, ko_size)
    rem_wo, rem_ho = rem("SUBTILE_REM1", 15, 0, 3), rem("SUBTILE_REM1", 31, 16, 3)
    rem_wi, rem_hi = rem("SUBTILE_REM2", 15, 0, win), rem("SUBTILE_REM2", 31, 16, win)
    pad = regs["PADDING"]
    pad_value = _bits(pad, 7, 0)                # 8-bit mode uses the low byte [NE16: PADDING]
    p_left, p_bottom, p_right, p_top = (_bits(pad, 19, 16), _bits(pad, 23, 20),
                                        _bits(pad, 27, 24), _bits(pad, 31, 28))
    fm = regs["FILTER_MASK"]
    m_left, m_bottom, m_right, m_top = (_bits(fm, 7, 0), _bits(fm, 15, 8), _bits(fm, 23, 16),
                                        _bits(fm, 31, 24))
    wo_reg = regs["WEIGHT_OFFSET"]
    # 9-bit signed {bit 31, bits 7:0} (N§3.4); symmetric mode adds nothing (N8#14)
    w_offset = _signed((wo_reg >> 31) << 8 | (wo_reg & 0xFF), 9) if offset_on else 0

    x_ptr, y_ptr, w_ptr = regs["INFEAT_PTR"], regs["OUTFEAT_PTR"], regs["WEIGHTS_PTR"]
    xd0, xd1 = regs["INFEAT_D0_STRIDE"], regs["INFEAT_D1_STRIDE"]
    yd0, yd1, yd2 = regs["OUTFEAT_D0_STRIDE"], regs["OUTFEAT_D1_STRIDE"], regs["OUTFEAT_D2_STRIDE"]
    wd0, wd1 = regs["WEIGHTS_D0_STRIDE"], regs["WEIGHTS_D1_STRIDE"]
    out_bytes = out_bits // 8

    def tap_on(ty: int, tx: int) -> bool:
        return mode == 2 or (m_top <= ty < 3 - m_bottom and m_left <= tx < 3 - m_right)

    def is_pad(index: int, first: bool, last: bool, low: int, high: int, rem_in: int) -> bool:
        return (first and index < low) or (last and (index >= win - high or index >= rem_in))

    def weight(k: int, c: int, t: int) -> int:
        """Stored weight of output channel k, input channel c, tap t, decoded bit by bit."""
        kimaj, kimin = divmod(c, 16)
        stored = 0
        for b in range(qw):
            if mode == 2:  # 1x1: d2=Ko, d1=KiMaj, d0=Qw*KiMin [NE16: WEIGHTS_PTR]
                addr = w_ptr + k * wd1 + kimaj * wd0 + b * 2 + kimin // 8
            else:          # 3x3: d3=Ko, d2=KiMaj, d1=Qw, d0=Fx*Fy*KiMin [NE16: WEIGHTS_PTR]
                addr = w_ptr + k * wd1 + (kimaj * qw + b) * wd0 + t * 2 + kimin // 8
            stored |= ((_u(mem, addr, 1) >> (kimin % 8)) & 1) << b
        return stored + w_offset

    def channel_addr(oy: int, ox: int, k: int, size: int) -> int:
        byte = k * size
        return y_ptr + oy * yd2 + ox * yd1 + (byte // 32) * yd0 + byte % 32

    for ko in range(nb_ko):
        kn = rem_ko if ko == nb_ko - 1 else ko_size
        for ho in range(nb_ho):
            hn = rem_ho if ho == nb_ho - 1 else 3
            for wo in range(nb_wo):
                wn = rem_wo if wo == nb_wo - 1 else 3
                outs = [(i, j) for i in range(hn) for j in range(wn)
                        if not strided or (i % 2 == 0 and j % 2 == 0)]
                acc = {}
                for i, j in outs:
                    for k in range(kn):
                        kg = ko * ko_size + k
                        acc[i, j, k] = (_signed(_u(mem, channel_addr(ho * 3 + i, wo * 3 + j,
                                                                     kg, 4), 4), 32)
                                        if streamin else 0)

                def pixel(r: int, s: int, c: int) -> int:
                    if is_pad(r, ho == 0, ho == nb_ho - 1, p_top, p_bottom, rem_hi) or \
                            is_pad(s, wo == 0, wo == nb_wo - 1, p_left, p_right, rem_wi):
                        return pad_value
                    return _u(mem, x_ptr + (ho * 3 + r) * xd1 + (wo * 3 + s) * xd0 + c, 1)

                ki_list = [ko] if dw else list(range(nb_ki))
                for ki in ki_list:
                    cn = (rem_ki if ki == nb_ki - 1 else 16) if not dw else kn
                    for i, j in outs:
                        for k in range(kn):
                            kg = ko * ko_size + k
                            total = 0
                            for t, (ty, tx) in enumerate(taps):
                                if not tap_on(ty, tx):
                                    continue
                                chans = [k] if dw else range(cn)
                                for cl in chans:
                                    c = ki * 16 + cl
                                    w = weight(0, c, t) if dw else weight(kg, c, t)
                                    total += pixel(i + ty, j + tx, c) * w
                            acc[i, j, k] += total
                for (i, j, k), a in acc.items():
                    kg = ko * ko_size + k
                    a = _signed(a, 32)  # 32-bit accumulators wrap (N§1.2)
                    if not normquant:
                        value, size = a, 4
                    else:
                        value, size = _normquant(mem, regs, a, kg, norm_bits, norm_bias,
                                                 norm_shift, right_shift, relu, out_bits), \
                            out_bytes
                    mem.write(channel_addr(ho * 3 + i, wo * 3 + j, kg, size) & 0xFFFFFFFF,
                              (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little"))


def _normquant(mem, regs: dict[str, int], acc: int, k: int, norm_bits: int, norm_bias: int,
               norm_shift: int, right_shift: int, relu: bool, out_bits: int) -> int:
    """N§3.5: acc * scale (at least 64-bit), then with a bias the product wrapped to 32
    bits plus the bias wrapped again, ReLU, arithmetic right shift, saturation to the output."""
    scale = _u(mem, regs["SCALE_PTR"] + k * norm_bits // 8, norm_bits // 8)
    p = acc * scale
    if norm_bias:
        bias = _signed(_u(mem, regs["SCALE_BIAS_PTR"] + 4 * k, 4), 32)
        p = _signed(_signed(p, 32) + bias, 32)
    if relu:
        p = max(p, 0)
    shift = (_u(mem, regs["SCALE_SHIFT_PTR"] + k, 1) & 0x3F) if norm_shift else right_shift
    q = p >> shift
    lo, hi = (0, (1 << out_bits) - 1) if relu else (-(1 << (out_bits - 1)),
                                                    (1 << (out_bits - 1)) - 1)
    return min(max(q, lo), hi)
