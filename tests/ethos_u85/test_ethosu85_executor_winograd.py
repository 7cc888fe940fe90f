"""The block-replay executor's CONV16 rows on Winograd F(2x2, 3x3) (issue 31 #1): on a CPU
without the byte kernels (HAVE_VNNI false, as on AVX2-only x86 and arm64), a row whose layer
int_conv.winograd_for admits calls the Winograd slots (F_WINO_INPUT, F_WINO_GEMM or its
parallel twin) instead of the int16-pair kernels, and writes the bytes the per-operation path
and conv2d write and the Python-integer reference computes; a small row keeps the direct
slots; the byte kernels' rows (VNNI hosts) never resolve the Winograd slots. The problem is
bench_ethosu85.py's driver-written 3x3 convolution."""
from __future__ import annotations

import numba
import numpy as np
import pytest

from accelstub.devices import open_device
from accelstub.devices.ethos_u85 import setstate
from accelstub.devices.runcontrol import RunControl
from accelstub.emu.conv import ethosu85 as conv_k
from accelstub.emu.conv import int_conv as IC
from accelstub.emu.executor import ethosu85 as X
from accelstub.emu.numeric import ethosu85 as P
from tests.ethos_u85 import ethosu85_reference as ref
from tests.helpers import load_benchmark

MULTI = numba.config.NUMBA_NUM_THREADS > 1
DIRECT = (X.F_PACK16, X.F_CONV16, X.F_PACK16_PAR, X.F_CONV16_PAR)


def without_vnni(monkeypatch) -> None:
    """No byte kernels: weights packed without the byte layout (int_conv), CONV16 rows and the
    int16 variant's addresses (the executor). The packed weights int_conv keeps per decoded
    weight array (the decoder memoises those) and the operations' decodes (setstate's memo,
    which holds their planned layers) go into dicts of the test's own, so later tests do not
    find layers planned without the byte layout."""
    monkeypatch.setattr(IC, "HAVE_VNNI", False)
    monkeypatch.setattr(IC, "_PACKED", {})
    monkeypatch.setattr(setstate, "_MEMO", {})
    monkeypatch.setattr(X, "BYTE_KERNELS", False)


@pytest.fixture
def no_vnni(monkeypatch):
    without_vnni(monkeypatch)


def problem(monkeypatch, h: int, w: int, c: int, k: int):
    """bench_ethosu85's convolution at this size: (bench module, x, weights, bias, scales,
    shifts)."""
    load_benchmark("machine")  # (the benchmark imports it)
    bench = load_benchmark("bench_ethosu85")
    for name, v in (("H", h), ("W", w), ("C", c), ("OC", k)):
        monkeypatch.setattr(bench, name, v)
    return (bench, *bench.conv_problem(1))


def run(bench, args, blocks: bool = True, drop: tuple[int, ...] = ()):
    """Four runs of the stream on one device (the first records the block, the later ones
    replay it; ``blocks`` False: the per-operation path), the slots ``drop`` set to 0 in the
    replay's table before the last run (a call through one raises); (the last run's OFM,
    the table or None)."""
    dev = open_device("ethos-u85")
    if not blocks:
        dev.blocks.stored = None
    bench.Host(dev).w("CMD", 0x4)
    words = bench.build(dev, *args)
    rc = RunControl(dev)
    n = bench.H * bench.W * bench.OC
    table = None
    for i in range(4):
        if i == 3 and blocks:
            (_, table), = dev.blocks._tables.values()
            table.fps[list(drop)] = 0
            before = dev.blocks.rows_run
        dev.write(bench.TENSORS + bench.OFM_OFF, bytes(n))
        bench.run_device(dev, words, rc)
    if blocks:
        assert dev.blocks.rows_run - before == table.rows > 0  # (the last run's rows)
    got = np.frombuffer(dev.read(bench.TENSORS + bench.OFM_OFF, n), np.int8)
    return got.reshape(bench.H, bench.W, bench.OC), table


def conv_row(table) -> np.ndarray:
    (row,) = [r for r in table.ops if r[X.K_KIND] in (X.CONV, X.CONV16, X.POINTWISE)]
    return row


def conv2d(bench, x, w, bias, scales, shifts) -> np.ndarray:
    cfg = P.out_config(ofm_bits=8, ofm_signed=True, zero_point=bench.OFM_ZP, act_min=-128,
                       act_max=127, round_mode=P.RND_DOUBLE_SYMMETRIC, per_channel=True)
    return conv_k.conv2d(x, w, (bench.H, bench.W), pad=(1, 1, 1, 1), ifm_zp=bench.IFM_ZP,
                         cfg=cfg, bias=bias, scales=scales, shifts=shifts)


def test_a_big_3x3_row_runs_winograd_and_writes_conv2ds_bytes(monkeypatch):
    """64->64 at 64x64 (the benchmark's layer): the row carries Winograd's launch (K_C16_WINO),
    the table resolves the Winograd slots (the GEMM's parallel twin where numba has threads),
    and the replay runs with every direct int16-pair slot emptied; its bytes are conv2d's
    (computed first, with this machine's kernels: the byte kernel on a VNNI host) and the
    per-operation path's, which takes Winograd through conv_sums too."""
    bench, *args = problem(monkeypatch, 64, 64, 64, 64)
    want = conv2d(bench, *args)
    without_vnni(monkeypatch)
    assert IC.winograd_for(np.dtype(np.int8), bench.IFM_ZP, IC.packed_weights(args[1]),
                           (64, 64), (1, 1), (1, 1)) is not None
    got, table = run(bench, args, drop=DIRECT)
    row = conv_row(table)
    assert row[X.K_KIND] == X.CONV16 and row[X.K_C16_WINO] != 0 and row[X.K_C16_PW] == 0
    assert row[X.K_PAR] == int(MULTI)
    assert table.fps[X.F_WINO_INPUT] != 0 and table.fps[X.F_WINO_GEMM] != 0
    assert (table.fps[X.F_WINO_GEMM_PAR] != 0) == MULTI
    # the work array Winograd writes, [2 Ty, 2 Tx, K16], and the stage's view of it
    assert (row[X.K_C16_HO], row[X.K_CV_WOB], row[X.K_CV_KP]) == (64, 64, 64)
    assert row[X.K_C16_TW] == 64
    assert np.array_equal(got, want)
    units, none = run(bench, args, blocks=False)
    assert none is None and np.array_equal(units, want)


def test_an_odd_sized_winograd_row_matches_the_integer_reference(monkeypatch, no_vnni):
    """16->16 at 23x21 (work just past SERIAL_WORK): Winograd computes a row and three columns
    more than the OFM (2 Ty = 24, 2 Tx = 24: tiles rounded up to 4 per row) and K is one block
    of 16; the output stage reads the first 23 rows of 24 columns. The bytes equal the
    Python-integer reference's (tests/ethosu85_reference.py) and the per-operation path's."""
    bench, *args = problem(monkeypatch, 23, 21, 16, 16)
    x, w, bias, scales, shifts = args
    assert 23 * 21 * 16 * 16 * 9 >= IC.SERIAL_WORK
    got, table = run(bench, args, drop=DIRECT)
    row = conv_row(table)
    assert row[X.K_C16_WINO] != 0
    assert (row[X.K_C16_HO], row[X.K_CV_WOB], row[X.K_CV_KP], row[X.K_C16_TW]) == \
        (24, 24, 16, 24)
    o = dict(bits=8, signed=True, zp=bench.OFM_ZP, amin=-128, amax=127, scale=1, shift=0,
             rnd=P.RND_DOUBLE_SYMMETRIC, per_channel=True)
    want = ref.conv(ref.values(x, bench.IFM_ZP, 8, True), w, 23, 21, (1, 1), (1, 1), (1, 1),
                    o, bytes(2048), bias, scales, shifts).astype(np.int64)
    assert np.array_equal(got.astype(np.int64), want)
    units, _ = run(bench, args, blocks=False)
    assert np.array_equal(units, got)


def test_a_small_row_keeps_the_direct_slots(monkeypatch, no_vnni):
    """8->8 at 8x8 (below SERIAL_WORK, so conv_sums keeps the direct kernel): no Winograd
    launch in the row, the Winograd slots unresolved (0: a call through one raises), and the
    replay still writes conv2d's bytes."""
    bench, *args = problem(monkeypatch, 8, 8, 8, 8)
    got, table = run(bench, args)
    row = conv_row(table)
    assert row[X.K_KIND] == X.CONV16 and row[X.K_C16_WINO] == 0
    assert not table.fps[list(X.WINO_SLOTS)].any()
    assert table.fps[X.F_CONV16] != 0
    assert np.array_equal(got, conv2d(bench, *args))


def test_the_byte_kernels_never_resolve_the_winograd_slots():
    """The byte kernels' variant (VNNI hosts) has no Winograd kernel in its slots, whatever a
    table asks; the int16 variant resolves them only when asked (``winograd``), so the
    default addresses (`accelstub compile`'s first replay) compile none of them."""
    every = [X.CONV, X.CONV16, X.POINTWISE, X.DEPTHWISE]
    wino = list(X.WINO_SLOTS)
    assert not X.addresses(True, kinds=every, parallel=True, winograd=True)[wino].any()
    assert not X.addresses(False)[wino].any()
    assert not X.addresses(False, kinds=every, parallel=True)[wino].any()
    fps = X.addresses(False, kinds=[X.CONV16], winograd=True)
    assert fps[X.F_WINO_INPUT] != 0 and fps[X.F_WINO_GEMM] != 0
    assert fps[X.F_WINO_GEMM_PAR] == 0  # (its twin only for a big row)
    assert X.addresses(False, kinds=[X.CONV16], parallel=True,
                       winograd=True)[X.F_WINO_GEMM_PAR] != 0


@pytest.mark.skipif(not IC.HAVE_VNNI, reason="the byte kernels' rows need AVX-512 VNNI")
def test_the_vnni_hosts_big_row_stays_a_byte_kernel_row(monkeypatch):
    """On a VNNI host the same 64->64 layer is a byte-kernel row (CONV), with no Winograd
    launch and no Winograd slot resolved."""
    bench, *args = problem(monkeypatch, 64, 64, 64, 64)
    got, table = run(bench, args)
    row = conv_row(table)
    assert row[X.K_KIND] == X.CONV and row[X.K_C16_WINO] == 0
    assert not table.fps[list(X.WINO_SLOTS)].any()
    assert np.array_equal(got, conv2d(bench, *args))
