"""The block-replay executor's parallel rows (issue 31 #1): a convolution row whose work is at
or above int_conv.SERIAL_WORK calls the parallel twin of its kernel (slot F_CONV_PAR /
F_CONV16_PAR), as the per-operation path's launch does; a small one the serial twin. Both write
the bytes the per-operation path's kernel writes (bench_ethosu85.py's driver-built 3x3
convolution, at two sizes, checked against emu/conv/ethosu85.conv2d and, on two rows, the
independent reference tests/ethos_u85/ethosu85_reference.py)."""
from __future__ import annotations

import numba
import numpy as np
import pytest

from accelstub.devices import open_device
from accelstub.devices.runcontrol import RunControl
from accelstub.emu.conv import ethosu85 as conv_k
from accelstub.emu.conv import int_conv as IC
from accelstub.emu.executor import ethosu85 as X
from accelstub.emu.numeric import ethosu85 as P
from tests.ethos_u85 import ethosu85_reference as ref
from tests.helpers import load_benchmark

#: with one numba thread every launch is serial, big or not (int_conv.parallel)
MULTI = numba.config.NUMBA_NUM_THREADS > 1


@pytest.mark.parametrize("size, big, stage", [(64, True, False), (8, False, False),
                                               (64, True, True)])
def test_a_big_conv_row_calls_the_parallel_kernel_and_a_small_one_the_serial(monkeypatch,
                                                                              size, big, stage):
    """(stage: the output stage's threshold lowered below the OFM's 64^3 elements, so that
    the row's output stage takes its parallel slot too, F_FINISH_PAR)"""
    if stage:
        monkeypatch.setattr(conv_k, "STAGE_PARALLEL", 1 << 16)
    load_benchmark("machine")  # (the benchmark imports it)
    bench = load_benchmark("bench_ethosu85")
    for name in ("H", "W", "C", "OC"):
        monkeypatch.setattr(bench, name, size)
    assert (size ** 4 * 9 >= IC.SERIAL_WORK) == big  # the work of the Python path's launch
    x, w, bias, scales, shifts = bench.conv_problem(1)
    dev = open_device("ethos-u85")
    bench.Host(dev).w("CMD", 0x4)
    words = bench.build(dev, x, w, bias, scales, shifts)
    rc = RunControl(dev)
    for _ in range(3):  # the first run records the block, the next ones replay its table
        dev.write(bench.TENSORS + bench.OFM_OFF, bytes(size ** 3))
        bench.run_device(dev, words, rc)
    assert dev.blocks.rows_run > 0
    (_, table), = dev.blocks._tables.values()
    conv = [r for r in table.ops if r[X.K_KIND] in (X.CONV, X.CONV16)]
    assert len(conv) == 1
    par = big and MULTI
    assert conv[0][X.K_PAR] == int(par)
    # (64^3 elements < STAGE_PARALLEL = 2^19 unless lowered)
    assert conv[0][X.K_PAR_FINISH] == int(stage and MULTI)
    assert (table.fps[X.F_FINISH_PAR] != 0) == par
    slot = X.F_CONV if X.BYTE_KERNELS else X.F_CONV16
    assert (table.fps[X.PAR_SLOTS[slot]] != 0) == par  # resolved only for a big row
    assert table.par.threads == (numba.config.NUMBA_NUM_THREADS if par else 1)
    got = np.frombuffer(dev.read(bench.TENSORS + bench.OFM_OFF, size ** 3), np.int8)
    cfg = P.out_config(ofm_bits=8, ofm_signed=True, zero_point=bench.OFM_ZP, act_min=-128,
                       act_max=127, round_mode=P.RND_DOUBLE_SYMMETRIC, per_channel=True)
    want = conv_k.conv2d(x, w, (size, size), pad=(1, 1, 1, 1), ifm_zp=bench.IFM_ZP, cfg=cfg,
                         bias=bias, scales=scales, shifts=shifts)
    assert np.array_equal(got.reshape(size, size, size), want)
    # and against the independent reference, as bench_ethosu85.check_exact checks it: the top
    # row (padding) and an inner one
    o = dict(bits=8, signed=True, zp=bench.OFM_ZP, amin=-128, amax=127, scale=0, shift=0,
             rnd=0, per_channel=True)
    for r in (0, size // 2 + 1):
        lo = max(r - 1, 0)
        exp = ref.conv(ref.values(x[lo:r + 2], bench.IFM_ZP, 8, True), w, 1, size, (1, 1),
                       (1, 1), (1 if r == 0 else 0, 1), o, bytes(2048), bias, scales, shifts)
        assert np.array_equal(got.reshape(size, size, size)[r].astype(np.int64),
                              np.asarray(exp[0], np.int64)), r
