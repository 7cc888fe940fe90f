"""Bit helpers the devices' register decoders share, on Python ints."""
from __future__ import annotations


def bit_field(v: int, msb: int, lsb: int) -> int:
    """Bits msb..lsb of ``v``."""
    return (v >> lsb) & ((1 << (msb - lsb + 1)) - 1)


def sign_extend(v: int, n: int) -> int:
    """The low ``n`` bits of ``v`` as a two's complement value."""
    v &= (1 << n) - 1
    return v - (1 << n) if v >= 1 << (n - 1) else v
