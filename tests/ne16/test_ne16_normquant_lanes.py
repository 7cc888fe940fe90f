"""NE16 normquant with a bias and 8-bit outputs in 32-bit lanes (emu/conv/ne16.py, issue 31
#2): every combination of the int32 edges of the sums and biases, the largest scales of each
width, and shifts 0, 1, 30, 31, 32 and 63 (past 31 an int32 is only its sign) gives the
independent reference's N§3.5 value (testkit/ne16_reference.py), signed and under ReLU."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from accelstub.emu.conv import ne16 as K
from accelstub.testkit.ne16_reference import _normquant

EDGES = [-2**31, -2**31 + 1, -2**30, -257, -128, -1, 0, 1, 127, 128, 255, 2**30, 2**31 - 1]
SCALES = [0, 1, 3, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1]
SHIFTS = [0, 1, 7, 30, 31, 32, 63]


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, addr: int, n: int) -> bytes:
        return self.data[addr:addr + n]


@pytest.mark.parametrize("relu", [False, True])
def test_biased_8_bit_outputs_in_32_bit_lanes_equal_the_reference_at_every_edge(relu):
    # channels: every (scale, bias, shift); pixels: every sum
    channels = list(itertools.product(SCALES, EDGES, SHIFTS))
    k = len(channels)
    scale = np.array([c[0] for c in channels], np.int64)
    bias = np.array([c[1] for c in channels], np.int64)
    shift = np.array([c[2] for c in channels], np.int64)
    acc = np.repeat(np.array(EDGES, np.int32)[:, None], k, axis=1).reshape(1, len(EDGES), k)
    out = np.zeros(len(EDGES) * k, np.uint8)
    K.normquant(acc, scale, bias, shift, True, relu, 8, 1, len(EDGES), k, out, 0, 0, k,
                1, 0, 1)
    mem = _Bytes(b"".join(int(v).to_bytes(4, "little") for v in scale)
                 + bytes(int(v) for v in shift)
                 + b"".join(int(v).to_bytes(4, "little", signed=True) for v in bias))
    regs = {"SCALE_PTR": 0, "SCALE_SHIFT_PTR": 4 * k, "SCALE_BIAS_PTR": 5 * k}
    want = np.array([_normquant(mem, regs, int(a), c, 32, True, True, 0, relu, 8) & 0xFF
                     for a in EDGES for c in range(k)], np.uint8)
    bad = np.flatnonzero(out != want)
    assert bad.size == 0, [(EDGES[i // k], channels[i % k], int(out[i]), int(want[i]))
                           for i in bad[:5]]
