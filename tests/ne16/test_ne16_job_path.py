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
