"""The NE16 job path around the shared kernel (issue 31 #2), against the independent reference
(testkit/ne16_reference.py): jobs whose padding value is 0 (the convolution reads L1 in place,
no copy of the input), weights kept while their bytes stay the same (and decoded again when a
byte changes), the whole-job store, and decodes kept per register values (each job's error
still names its own job)."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelstub.devices import DeviceError, open_device
from accelstub.devices.ne16 import job as J
from tests.helpers import step

from .jobs import L1, L1_SIZE, random_job, reference, submit


def run_job_against_reference(dev, regs: dict[str, int]) -> None:
    before = dev.read(L1, L1_SIZE)
    want = reference(before, regs)
    submit(dev, regs)
    stop = step(dev)
    assert stop.reason == "done", stop
    got = dev.read(L1, L1_SIZE)
    if got != want:
        bad = next(i for i in range(L1_SIZE) if got[i] != want[i])
        pytest.fail(f"first difference at {L1 + bad:#x}: got {got[bad]}, reference "
                    f"{want[bad]} (regs {regs})")


def zero_padding(regs: dict[str, int]) -> dict[str, int]:
    """The job with PADDING.VALUE 0 (its padding sides as they were)."""
    return {**regs, "PADDING": regs["PADDING"] & ~0xFFFF}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_jobs_padding_with_zero_match_the_reference(seed):
    rng = np.random.default_rng(seed)
    dev = open_device("ne16")
    dev.write(L1, rng.integers(0, 256, L1_SIZE, dtype=np.uint8).tobytes())
    run_job_against_reference(dev, zero_padding(random_job(rng)))


@pytest.mark.parametrize("seed", [3, 4, 5, 6])
def test_changed_weight_bytes_are_decoded_again(seed):
    """The same job twice with the same weights (kept), then once more after one weight byte
    changed in L1: each output as the reference computes it from L1 as it is then."""
    rng = np.random.default_rng(seed)
    dev = open_device("ne16")
    dev.write(L1, rng.integers(0, 256, L1_SIZE, dtype=np.uint8).tobytes())
    regs = zero_padding(random_job(rng))
    run_job_against_reference(dev, regs)
    run_job_against_reference(dev, regs)
    cfg = J.decode(tuple(regs.get(n, 0) & 0xFFFFFFFF for n in J.JOB_REGISTERS))
    (lo, hi), = J.weights(cfg, lambda a, n, what: np.frombuffer(dev.read(a, n), np.uint8))[1]
    for addr in (lo, hi - 1, (lo + hi) // 2):
        old = dev.read(addr, 1)[0]
        dev.write(addr, bytes([old ^ 0xA5]))
        run_job_against_reference(dev, regs)


def test_the_same_bad_registers_name_each_job():
    """decode is kept per register values; its error still names the job that has them."""
    regs = random_job(np.random.default_rng(1))
    values = tuple(regs.get(n, 0) & 0xFFFFFFFF for n in J.JOB_REGISTERS)
    bad = values[:-1] + (values[-1] | 3 << 5,)  # CONFIG0.filter_mode 3 is reserved
    for where in ("job 1 (context 0): ", "job 2 (context 1): "):
        with pytest.raises(DeviceError, match="^" + re.escape(where + "CONFIG0.filter_mode 3")):
            J.decode(bad, where)
    assert J.decode(values) is J.decode(values)


class _Bytes:
    """A memory for the reference's reads: ``read(addr, n)`` of a byte string."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, addr: int, n: int) -> bytes:
        return self.data[addr:addr + n]


_INT32 = st.one_of(st.sampled_from([-2**31, -2**31 + 1, -1, 0, 1, 2**31 - 1]),
                   st.integers(-2**31, 2**31 - 1))


@settings(max_examples=150, deadline=None)
@given(k=st.integers(1, 20), norm_bits=st.sampled_from([8, 16, 32]), out_bits=st.sampled_from(
    [8, 16, 32]), has_bias=st.booleans(), norm_shift=st.booleans(), relu=st.booleans(),
       right_shift=st.integers(0, 31), data=st.data())
def test_normquant_from_the_work_array_matches_the_reference(k, norm_bits, out_bits, has_bias,
                                                             norm_shift, relu, right_shift, data):
    """The normalisation kernel over the shared kernel's padded work array (columns and
    channels past the job's hold other values) gives, for every output, the value of the
    reference's N§3.5 (testkit/ne16_reference.py), at the edges of every range: int32 sums and
    biases from -2**31 to 2**31 - 1, scales up to 2**norm_bits - 1, shifts up to 63 (the
    per-channel field's 6 bits), each output type's signed and unsigned limits. The outputs
    are stored as little-endian bytes at a strided place of a flat array (as into L1: a gap
    after each pixel and row, an origin past 0), and the bytes between them keep theirs. The
    same from the parallel kernel (normquant_parallel, issue 31 #2) with the rows split into
    any number of ranges, more than there are rows included (empty ranges)."""
    from accelstub.emu.conv import ne16 as K
    from accelstub.testkit.ne16_reference import _normquant

    ho, wo = data.draw(st.integers(1, 5), "rows"), 3
    acc = np.array(data.draw(st.lists(_INT32, min_size=ho * (wo + 2) * (k + 3),
                                      max_size=ho * (wo + 2) * (k + 3))),
                   np.int32).reshape(ho, wo + 2, k + 3)
    scale_max = (1 << norm_bits) - 1
    scale = data.draw(st.lists(st.one_of(st.just(scale_max), st.integers(0, scale_max)),
                               min_size=k, max_size=k))
    bias = data.draw(st.lists(_INT32, min_size=k, max_size=k))
    shift = data.draw(st.lists(st.integers(0, 63), min_size=k, max_size=k))
    nb = norm_bits // 8
    mem = _Bytes(b"".join(v.to_bytes(nb, "little") for v in scale).ljust(0x100, b"\0")
                 + bytes(shift).ljust(0x100, b"\0")
                 + b"".join(v.to_bytes(4, "little", signed=True) for v in bias))
    regs = {"SCALE_PTR": 0, "SCALE_SHIFT_PTR": 0x100, "SCALE_BIAS_PTR": 0x200}
    nb = out_bits // 8
    origin, d1 = 5, k * nb + 3
    d2 = wo * d1 + 7
    out = np.full(origin + ho * d2, 0xA5, np.uint8)
    args = (acc, np.array(scale, np.int64), np.array(bias, np.int64),
            np.array(shift if norm_shift else [right_shift] * k, np.int64), has_bias, relu,
            out_bits, ho, wo, k)
    K.normquant(*args, out, origin, d2, d1, 1, 0, ho)
    parts = data.draw(st.integers(1, ho + 2), "parts")
    split = np.full_like(out, 0xA5)
    K.normquant_parallel(*args, split, origin, d2, d1, parts)
    want = np.full_like(out, 0xA5)
    for y in range(ho):
        for x in range(wo):
            for c in range(k):
                v = _normquant(mem, regs, int(acc[y, x, c]), c, norm_bits, has_bias,
                               norm_shift, right_shift, relu, out_bits)
                at = origin + y * d2 + x * d1 + c * nb
                want[at:at + nb] = list((v & ((1 << out_bits) - 1)).to_bytes(nb, "little"))
    assert out.tobytes() == want.tobytes()
    assert split.tobytes() == want.tobytes(), parts
