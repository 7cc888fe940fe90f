"""Helpers of the NE16 tests: an L1 image the independent reference reads and writes, a driver
that submits a job through the queue registers, and random jobs for the property tests."""
from __future__ import annotations

import numpy as np

from accelstub.devices.ne16.job import JOB_REGISTERS
from accelstub.testkit.ne16_build import Layer
from accelstub.testkit.ne16_reference import run_job

NE16 = 0x0020_1000
L1 = 0x1000_0000
L1_SIZE = 0x2_0000
TRIGGER, ACQUIRE, FINISHED, STATUS, RUNNING_JOB, SOFT_CLEAR = (NE16 + o for o in
                                                               (0, 4, 8, 0xC, 0x10, 0x14))


class Image:
    """L1 as bytes, for the reference (``read``/``write`` at absolute addresses)."""

    def __init__(self, data: bytes) -> None:
        self.data = bytearray(data)

    def read(self, addr: int, n: int) -> bytes:
        assert L1 <= addr and addr + n <= L1 + L1_SIZE, hex(addr)
        return bytes(self.data[addr - L1:addr - L1 + n])

    def write(self, addr: int, data: bytes) -> None:
        assert L1 <= addr and addr + len(data) <= L1 + L1_SIZE, hex(addr)
        self.data[addr - L1:addr - L1 + len(data)] = data


def w32(dev, addr: int, v: int) -> None:
    dev.write(addr, (v & 0xFFFFFFFF).to_bytes(4, "little"))


def r32(dev, addr: int) -> int:
    return int.from_bytes(dev.read(addr, 4), "little")


def submit(dev, regs: dict[str, int], trigger: int = 0) -> int:
    """ACQUIRE (the driver's read), the 24 job registers, TRIGGER; returns the job ID."""
    job_id = int.from_bytes(dev.host_read(ACQUIRE, 4), "little")
    assert job_id < 256, hex(job_id)
    for i, name in enumerate(JOB_REGISTERS):
        w32(dev, NE16 + 0x20 + 4 * i, regs.get(name, 0))
    w32(dev, TRIGGER, trigger)
    return job_id


def reference(l1: bytes, regs: dict[str, int]) -> bytes:
    img = Image(l1)
    run_job(img, {n: regs.get(n, 0) & 0xFFFFFFFF for n in JOB_REGISTERS})
    return bytes(img.data)


def random_job(rng: np.random.Generator) -> dict[str, int]:
    """A random job inside L1: any mode, subtile counts and remainders (0 = full included),
    strides with gaps, padding (with a padding value), filter masks, 2-8-bit weights with or
    without the offset, 8/16/32-bit output, scales of 8/16/32 bits, per-channel shifts, bias,
    ReLU, streamin, strided 2x2."""
    mode = int(rng.choice([0, 1, 2]))
    dw, win = mode == 1, (3 if mode == 2 else 5)
    ko_size = 16 if dw else 32
    nb_ko, nb_ho, nb_wo = (int(rng.integers(1, 3)) for _ in range(3))
    nb_ki = 0 if dw else int(rng.integers(1, 3))
    rem_ko = int(rng.integers(0, ko_size + 1))
    rem_ho, rem_wo = int(rng.integers(0, 4)), int(rng.integers(0, 4))
    rem_ki = int(rng.integers(0, 17))
    k_out = (nb_ko - 1) * ko_size + (rem_ko or ko_size)
    k_in = k_out if dw else (nb_ki - 1) * 16 + (rem_ki or 16)
    ho = (nb_ho - 1) * 3 + (rem_ho or 3)
    wo = (nb_wo - 1) * 3 + (rem_wo or 3)
    pad = [int(v) for v in rng.integers(0, 3, 4)] if mode != 2 else [0, 0, 0, 0]
    rem_hi = int(rng.integers(0, win + 1))
    rem_wi = int(rng.integers(0, win + 1))
    qw = int(rng.integers(2, 9))
    normquant = bool(rng.integers(0, 2))
    out_bits = int(rng.choice([8, 16, 32])) if normquant else 32
    norm_bits = int(rng.integers(0, 3))
    relu = bool(rng.integers(0, 2))
    c0 = (qw - 1) | normquant << 4 | mode << 5 | int(rng.integers(0, 2)) << 8 \
        | norm_bits << 12 | int(rng.integers(0, 2)) << 14 | int(rng.integers(0, 2)) << 15 \
        | int(rng.integers(0, 32)) << 16 | {8: 0, 16: 1, 32: 2}[out_bits] << 21 \
        | (not relu) << 23 | int(rng.integers(0, 2)) << 24 | int(rng.integers(0, 2)) << 25
    # layout: input, weights, output, scale/shift/bias in L1 with random gaps
    d0 = k_in + int(rng.integers(0, 3))
    y_in, x_in = (nb_ho - 1) * 3 + win, (nb_wo - 1) * 3 + win
    d1 = x_in * d0 + int(rng.integers(0, 5))
    x_ptr = L1 + 0x40
    in_end = x_ptr + y_in * d1
    planes = (1 if dw else k_out) * max(nb_ki, 1 if not dw else -(-k_out // 16)) * qw
    if mode == 2:
        wd0, wd1 = 2 * qw, 2 * qw * nb_ki
    elif dw:
        wd0, wd1 = 18, 0
    else:
        wd0, wd1 = 18, 18 * qw * nb_ki
    w_ptr = (in_end + 63) // 64 * 64
    w_end = w_ptr + planes * (2 if mode == 2 else 18) + 32
    yd1 = -(-k_out * 4 // 32) * 32 + int(rng.integers(0, 2)) * 32
    yd2 = wo * yd1 + int(rng.integers(0, 3)) * 32
    y_ptr = (w_end + 63) // 64 * 64
    y_end = y_ptr + ho * yd2 + 64
    s_ptr = (y_end + 15) // 16 * 16
    sh_ptr = s_ptr + 4 * k_out + 16
    b_ptr = sh_ptr + k_out + 16
    assert b_ptr + 4 * k_out <= L1 + L1_SIZE
    return {
        "WEIGHTS_PTR": w_ptr, "INFEAT_PTR": x_ptr, "OUTFEAT_PTR": y_ptr, "SCALE_PTR": s_ptr,
        "SCALE_SHIFT_PTR": sh_ptr, "SCALE_BIAS_PTR": b_ptr, "INFEAT_D0_STRIDE": d0,
        "INFEAT_D1_STRIDE": d1, "OUTFEAT_D0_STRIDE": 32, "OUTFEAT_D1_STRIDE": yd1,
        "OUTFEAT_D2_STRIDE": yd2, "WEIGHTS_D0_STRIDE": wd0, "WEIGHTS_D1_STRIDE": wd1,
        "SUBTILE_REM0": rem_ko << 16 | rem_ki, "SUBTILE_REM1": rem_ho << 16 | rem_wo,
        "SUBTILE_REM2": rem_hi << 16 | rem_wi, "SUBTILE_NB0": nb_ko << 16 | nb_ki,
        "SUBTILE_NB1": nb_ho << 16 | nb_wo,
        "PADDING": pad[0] << 28 | pad[3] << 24 | pad[1] << 20 | pad[2] << 16
        | int(rng.integers(0, 256)),
        "WEIGHT_OFFSET": int(rng.integers(-256, 256)) & 0xFFFFFFFF if rng.integers(0, 2)
        else (0xFFFFFF00 | int(rng.integers(0, 256))),
        "FILTER_MASK": (int(rng.integers(0, 2)) << 24 | int(rng.integers(0, 2)) << 16
                        | int(rng.integers(0, 2)) << 8 | int(rng.integers(0, 2)))
        if rng.integers(0, 3) == 0 else 0,
        "CONFIG0": c0}


#: layers of pulp-nnx test applications the tests build (testkit/ne16_build): every weight width
#: family, 1x1, depthwise, stride 2, raw sums, 32-bit scales, padding
APP_LAYERS = [
    Layer(7, 11, 37, 45, padding=(1, 1, 1, 1), weight_bits=5, name="dense_w5_rem"),
    Layer(6, 9, 20, 33, kernel=1, weight_bits=2, out_type="uint8", relu=True, name="1x1_w2_relu"),
    Layer(8, 7, 35, 35, depthwise=True, padding=(1, 1, 1, 1), weight_bits=3, name="dw_w3"),
    Layer(9, 11, 24, 34, stride=2, padding=(1, 1, 1, 1), weight_bits=6, name="s2_dense"),
    Layer(10, 9, 18, 18, depthwise=True, stride=2, padding=(0, 1, 0, 1), weight_bits=4,
          name="s2_dw"),
    Layer(5, 7, 19, 21, padding=(1, 1, 1, 1), out_type="int32", norm_quant=False, bias=False,
          weight_bits=7, name="raw_sums"),
    Layer(5, 5, 33, 35, padding=(1, 0, 0, 1), scale_bits=32, bias=False, name="u32_scale"),
    Layer(6, 6, 16, 32, padding=(2, 2, 2, 2), out_type="uint8", relu=True, name="pad2_relu"),
]
