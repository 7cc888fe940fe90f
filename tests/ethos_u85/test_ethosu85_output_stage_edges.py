"""The Ethos-U85 fast output stage (emu/conv/ethosu85.py ``_fast_value``, written for AVX2's
vpmuldq and int32 lanes, issue 31 #1) at its edges, against the independent reference
tests/ethos_u85/ethosu85_reference.py: extreme accumulators and biases, scales up to
+-(2**31 - 1), every shift 0..62 of the fast stage (and 63, which the general stage takes),
every rounding mode with and without double rounding, signed/unsigned 8/16/32-bit OFMs,
extreme zero points, clipping on and off; serial and parallel kernels."""
from __future__ import annotations

import numpy as np
import pytest

from accelstub.emu.conv import ethosu85 as E
from accelstub.emu.conv import int_conv as IC
from accelstub.emu.numeric import ethosu85 as P
from accelstub.emu.numeric.ethosu85_values import ofm_dtype
from tests.ethos_u85 import ethosu85_reference as ref

I32 = 1 << 31
ACCS = [-I32, -I32 + 1, -(1 << 30), -12345, -2, -1, 0, 1, 2, 777, (1 << 30) - 1, I32 - 1]


def _layer(rng, shifts: np.ndarray, extreme_scales: bool):
    oc_n = len(shifts)
    if extreme_scales:  # the widest products: |acc| = 2**31 times |scale| = 2**31 - 1
        scales = np.resize([I32 - 1, -(I32 - 1), 1, -1, 0], oc_n).astype(np.int64)
    else:
        scales = rng.integers(-(I32 - 1), I32, oc_n)
    bias = np.resize([-(1 << 39), (1 << 39) - 1, -I32, I32 - 1, 0, 3], oc_n).astype(np.int64)
    tot = np.empty((1, len(ACCS) + 4, oc_n), np.int32)
    tot[0, :len(ACCS)] = np.array(ACCS, np.int64)[:, None]
    tot[0, len(ACCS):] = rng.integers(-I32, I32, (4, oc_n))
    return tot, bias, scales, shifts.astype(np.int64)


def _want(tot, bias, scales, shifts, o):
    return np.array([[[ref.output(int(tot[0, x, oc]), oc, o, b"", bias, scales, shifts)
                       for oc in range(tot.shape[2])] for x in range(tot.shape[1])]])


CASES = [(m, d) for m in range(6) for d in ((0, 12) if m in (0, 2) else (0,))]
OFMS = [(8, True, -128, False), (8, False, 0x7FFF, False), (16, True, -0x8000, True),
        (32, True, 0x7FFF, False)]


@pytest.mark.parametrize("mode,dbl", CASES)
@pytest.mark.parametrize("bits,signed,zp,clip_none", OFMS)
@pytest.mark.parametrize("top_shift", [62, 63])
def test_fast_output_stage_matches_the_reference_at_the_edges(mode, dbl, bits, signed, zp,
                                                              clip_none, top_shift,
                                                              monkeypatch):
    """Every output of a layer whose channels take shifts 0..top_shift: with 62 the fast stage
    runs (asserted), with 63 the general one; both bit-exact to the reference, serial and
    parallel."""
    rng = np.random.default_rng(mode * 100 + dbl + bits + top_shift)
    for extreme in (True, False):
        tot, bias, scales, shifts = _layer(rng, np.arange(top_shift + 1), extreme)
        for a in (bias, scales, shifts):
            a.flags.writeable = False
        cfg = P.out_config(ofm_bits=bits, ofm_signed=signed, zero_point=zp, round_mode=mode,
                           dbl_rnd=dbl, per_channel=True, clip_none=clip_none)
        terms = E._stage_terms(cfg, bias, scales, shifts, len(shifts))
        assert terms[-1] == (top_shift <= 62)  # fast: no accumulator input, shifts 0..62
        o = dict(bits=bits, signed=signed, zp=zp, amin=int(cfg[P.C_ACT_MIN]),
                 amax=int(cfg[P.C_ACT_MAX]), scale=0, shift=0, rnd=mode, dbl=dbl,
                 per_channel=True, acc_bits=32, clip_none=clip_none)
        want = _want(tot, bias, scales, shifts, o)
        ones = np.ones(tot.shape[1], np.int64)
        for serial_work in (1 << 62, 0):  # the serial kernel, then the parallel one
            monkeypatch.setattr(IC, "SERIAL_WORK", serial_work)
            out = np.empty(tot.shape, ofm_dtype(cfg))
            got = E._output_stage(tot, None, ones[:1], ones, cfg, terms, None, out)
            np.testing.assert_array_equal(got.astype(np.int64), want)
