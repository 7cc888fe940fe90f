"""NE16 jobs against the independent reference (testkit/ne16_reference.py, written from the seed
and the project's notes on it, subtile by subtile, bit by bit) and the worked examples N§5.2, N§5.3,
N§5.4, N§5.5, N§5.6."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelstub.devices import DeviceError, open_device
from tests.helpers import control, step

from .jobs import L1, L1_SIZE, r32, random_job, reference, submit


def l1(dev) -> bytes:
    return dev.read(L1, L1_SIZE)


def run_against_reference(seed: int, granularity: str | None = None) -> None:
    rng = np.random.default_rng(seed)
    regs = random_job(rng)
    dev = open_device("ne16")
    dev.write(L1, rng.integers(0, 256, L1_SIZE, dtype=np.uint8).tobytes())
    before = l1(dev)
    want = reference(before, regs)
    submit(dev, regs)
    stop = step(dev, granularity)
    while granularity and stop.reason == "step":
        stop = step(dev, granularity)
    assert stop.reason == "done", stop
    got = l1(dev)
    if got != want:
        bad = next(i for i in range(L1_SIZE) if got[i] != want[i])
        pytest.fail(f"seed {seed}: first difference at {L1 + bad:#x}: got {got[bad]}, "
                    f"reference {want[bad]} (regs {regs})")
    # the job wrote its output (as bus writes: streamin jobs whose sums are zero write back
    # the values already there, so comparing memory could not tell)
    assert control(dev).last_touched.writes or "OUTFEAT_PTR" not in regs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_random_jobs_match_the_reference(seed):
    run_against_reference(seed)


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_subtile_steps_give_the_same_memory(seed):
    run_against_reference(seed, "subtile")


def test_subtiles_that_disagree_about_padding_are_computed_window_by_window():
    """REM2's HI says the last subtile reads only 1 window row while the one before reads its
    rows 3-4 from memory: the same input row is memory for one subtile and padding for the
    other (no single padded image exists)."""
    rng = np.random.default_rng(5)
    regs = random_job(rng)
    regs.update({"SUBTILE_NB1": 2 << 16 | 1, "SUBTILE_REM1": 3 << 16 | 3,
                 "SUBTILE_REM2": 1 << 16 | 5, "PADDING": 0x7,
                 "CONFIG0": regs["CONFIG0"] & ~(3 << 5 | 1 << 8),  # 3x3, no stride 2
                 # 6 output rows now: the output and the parameters moved apart
                 "OUTFEAT_PTR": L1 + 0x8000, "SCALE_PTR": L1 + 0x10000,
                 "SCALE_SHIFT_PTR": L1 + 0x10400, "SCALE_BIAS_PTR": L1 + 0x10800})
    dev = open_device("ne16")
    dev.write(L1, rng.integers(0, 256, L1_SIZE, dtype=np.uint8).tobytes())
    want = reference(l1(dev), regs)
    submit(dev, regs)
    assert step(dev).reason == "done"
    assert l1(dev) == want


# -- the worked examples (N§5.2-N§5.6) -------------------------------------------------------
A_REGS = {"WEIGHTS_PTR": 0x10001000, "INFEAT_PTR": 0x10000000, "OUTFEAT_PTR": 0x10003000,
          "SCALE_PTR": 0x10004000, "SCALE_BIAS_PTR": 0x10004100, "INFEAT_D0_STRIDE": 16,
          "INFEAT_D1_STRIDE": 80, "OUTFEAT_D0_STRIDE": 32, "OUTFEAT_D1_STRIDE": 32,
          "OUTFEAT_D2_STRIDE": 96, "WEIGHTS_D0_STRIDE": 18, "WEIGHTS_D1_STRIDE": 144,
          "SUBTILE_REM0": 0x00200010, "SUBTILE_REM1": 0x00030003, "SUBTILE_REM2": 0x00050005,
          "SUBTILE_NB0": 0x00010001, "SUBTILE_NB1": 0x00010001, "WEIGHT_OFFSET": 0xFFFFFF80,
          "CONFIG0": 0x00008017}


def example(regs: dict[str, int], stored: int, ko: int, pixels: int, scale: int = 1,
            bias: int = 0, n_weights: int = 4608) -> np.ndarray:
    """Input all 1, every stored weight byte-plane the pattern of ``stored``, scales and biases
    as given; returns the output bytes of the job (pixels x ko)."""
    dev = open_device("ne16")
    dev.write(0x10000000, bytes([1]) * 0x800)
    planes = bytes(0xFF if (stored >> b) & 1 else 0 for b in range(8))  # a whole plane per bit
    w = bytearray()
    for _ in range(n_weights // (8 * 18)):
        for b in range(8):
            w += planes[b:b + 1] * 18
    dev.write(0x10001000, bytes(w))
    dev.write(0x10004000, bytes([scale]) * 32)
    dev.write(0x10004100, (bias & 0xFFFFFFFF).to_bytes(4, "little") * 32)
    submit(dev, regs)
    assert step(dev).reason == "done"
    return np.frombuffer(dev.read(0x10003000, pixels * 32), np.uint8)[:pixels * 32]


def test_example_a_dense_3x3():
    """Input 1, stored weights 129 (effective +1, offset -128): every sum 9*16 = 144."""
    assert set(example(A_REGS, 129, 32, 9)) == {144}
    # ReLU, shift 8, bias, scale 2, bias -32: (144*2 - 32) >> 8 = 1; bias -400: ReLU -> 0
    assert set(example({**A_REGS, "CONFIG0": 0x02088017}, 129, 32, 9, 2, -32)) == {1}
    assert set(example({**A_REGS, "CONFIG0": 0x02088017}, 129, 32, 9, 2, -400)) == {0}
    # stored 0 (effective -128), signed, shift 7: -18432 >> 7 = -144, saturated to -128
    assert set(example({**A_REGS, "CONFIG0": 0x00878017}, 0, 32, 9)) == {0x80}
    assert set(example(A_REGS, 0, 32, 9)) == {0}  # the same with ReLU


def test_example_a_raw_sums_and_strided():
    """STREAMOUT = 0 with 32-bit output writes int32 144; STRIDED_2X2 writes only (0,0),
    (0,2), (2,0), (2,2) of the 3x3 block."""
    raw = example({**A_REGS, "CONFIG0": 0x00408007, "OUTFEAT_D1_STRIDE": 128,
                   "OUTFEAT_D2_STRIDE": 384}, 129, 32, 9 * 4)
    sums = raw.view("<i4").reshape(9, 32)
    assert set(sums.ravel()) == {144}
    out = example({**A_REGS, "CONFIG0": 0x00008117}, 129, 32, 9).reshape(3, 3, 32)
    written = {(i, j) for i in range(3) for j in range(3) if out[i, j].any()}
    assert written == {(0, 0), (0, 2), (2, 0), (2, 2)}


def test_example_d_same_padding():
    regs = {**A_REGS, "PADDING": 0x11110000, "SUBTILE_REM2": 0x00040004,
            "INFEAT_PTR": 0x10000400 - 64, "INFEAT_D1_STRIDE": 48}
    dev = open_device("ne16")
    dev.write(0x10000400, bytes([1]) * (3 * 3 * 16))
    plane = bytes([0xFF]) * 18 + bytes(18) * 6 + bytes([0xFF]) * 18  # 129 = bits 0 and 7
    dev.write(0x10001000, plane * 32)
    dev.write(0x10004000, bytes([1]) * 32)
    submit(dev, regs)
    assert step(dev).reason == "done"
    out = np.frombuffer(dev.read(0x10003000, 9 * 32), np.uint8).reshape(3, 3, 32)
    assert (out[:, :, 0] == np.array([[64, 96, 64], [96, 144, 96], [64, 96, 64]])).all()
    assert (out == out[:, :, :1]).all()


def test_examples_b_and_c_1x1_and_depthwise():
    """1x1 with two subtiles in every dimension: every output 32 (Ki 32, weights +1);
    depthwise: every output 9."""
    dev = open_device("ne16")
    dev.write(0x10000000, bytes([1]) * 0x1000)
    one = bytes([0xFF, 0xFF]) + bytes(12) + bytes([0xFF, 0xFF])  # planes 0 and 7: stored 129
    dev.write(0x10001000, one * 80)
    dev.write(0x10004000, bytes([1]) * 64)
    submit(dev, {"WEIGHTS_PTR": 0x10001000, "INFEAT_PTR": 0x10000000,
                 "OUTFEAT_PTR": 0x10003000, "SCALE_PTR": 0x10004000, "INFEAT_D0_STRIDE": 32,
                 "INFEAT_D1_STRIDE": 128, "OUTFEAT_D0_STRIDE": 32, "OUTFEAT_D1_STRIDE": 40,
                 "OUTFEAT_D2_STRIDE": 160, "WEIGHTS_D0_STRIDE": 16, "WEIGHTS_D1_STRIDE": 32,
                 "SUBTILE_REM0": 0x00080010, "SUBTILE_REM1": 0x00010001,
                 "SUBTILE_REM2": 0x00010001, "SUBTILE_NB0": 0x00020002,
                 "SUBTILE_NB1": 0x00020002, "WEIGHT_OFFSET": 0xFFFFFF80, "CONFIG0": 0x00808057})
    assert step(dev).reason == "done"
    assert set(np.frombuffer(dev.read(0x10003000, 16 * 40), np.uint8)) == {32}
    dev = open_device("ne16")
    dev.write(0x10000000, bytes([1]) * 400)
    dev.write(0x10001000, (bytes([0xFF]) * 18 + bytes(18 * 6) + bytes([0xFF]) * 18))
    dev.write(0x10004000, bytes([1]) * 16)
    submit(dev, {"WEIGHTS_PTR": 0x10001000, "INFEAT_PTR": 0x10000000,
                 "OUTFEAT_PTR": 0x10003000, "SCALE_PTR": 0x10004000, "INFEAT_D0_STRIDE": 16,
                 "INFEAT_D1_STRIDE": 80, "OUTFEAT_D0_STRIDE": 32, "OUTFEAT_D1_STRIDE": 16,
                 "OUTFEAT_D2_STRIDE": 48, "WEIGHTS_D0_STRIDE": 18, "SUBTILE_REM0": 0x00100010,
                 "SUBTILE_REM1": 0x00030003, "SUBTILE_REM2": 0x00050005,
                 "SUBTILE_NB0": 0x00010001, "SUBTILE_NB1": 0x00010001,
                 "WEIGHT_OFFSET": 0xFFFFFF80, "CONFIG0": 0x00008037})
    assert step(dev).reason == "done"
    assert set(np.frombuffer(dev.read(0x10003000, 9 * 16), np.uint8)) == {9}


# -- reserved and unmodelled encodings ------------------------------------------------------------
@pytest.mark.parametrize("config0, message", [
    (0x00008077, r"CONFIG0.filter_mode 3 is reserved \[NE16: CONFIG0\]"),
    (0x0000B017, r"CONFIG0.norm_bits 3 is reserved \[NE16: CONFIG0\]"),
    (0x00608017, r"CONFIG0.quant_bits 3 is reserved \[NE16: CONFIG0\]"),
    (0x00008007, r"CONFIG0.streamout 0 writes 32-bit sums, but CONFIG0.quant_bits selects "
                 r"8-bit output"),
    (0x0000801F, r"CONFIG0.mode16 .* is not modelled yet"),
    (0x00008097, r"CONFIG0.linear .* is not modelled yet")])
def test_reserved_encodings_are_errors_naming_the_field(config0, message):
    dev = open_device("ne16")
    job_id = submit(dev, {**A_REGS, "CONFIG0": config0})
    before = dev.read(L1, L1_SIZE)
    with pytest.raises(DeviceError, match=rf"job {job_id} \(context 0\): {message}"):
        step(dev)
    assert dev.read(L1, L1_SIZE) == before and r32(dev, 0x0020100C) == 1  # still queued


def test_a_pointer_outside_l1_is_an_error_naming_the_tensor():
    dev = open_device("ne16")
    submit(dev, {**A_REGS, "INFEAT_PTR": 0x0FFFFF00})
    with pytest.raises(DeviceError, match=r"input features: .* outside L1"):
        step(dev)
    assert r32(dev, 0x0020100C) == 1  # the faulted job is still queued
    control(dev).reset("halt")
    assert r32(dev, 0x0020100C) == 0  # a reset empties the queue
