"""SDP's post_process on several threads for large cubes (emu/numeric/nvdla.py
post_process_parallel, launched by devices/nvdla/sdp.py process at PARALLEL_ELEMENTS, issue 31 #1):
the cube split into ranges of rows, even or not, gives the serial kernel's bytes and
saturation count and the independent reference's (testkit/nvdla_reference.py), with X stages
and per-element operands; a large layer through the device launches it (its trace's CRC checks
are the reference's), the bundled demo's small cubes do not, and NVDLA's kernel plan names the
types a layer launches it with (`accelstub compile` compiles it ahead)."""
from __future__ import annotations

from unittest.mock import patch

import numba
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelstub.devices import device_spec
from accelstub.devices.nvdla import sdp as S
from accelstub.devices.nvdla.feature import ATOM
from accelstub.emu import kernel_plan as KP
from accelstub.emu.conv import int_conv as IC
from accelstub.emu.numeric import nvdla as N
from accelstub.testkit import nvdla_build as V
from accelstub.testkit import nvdla_reference as ref
from tests.nvdla.test_nvdla_post_process import draw_case, hwc
from tests.test_winograd_devices import run_program

MULTI = numba.config.NUMBA_NUM_THREADS > 1


def _reference(acc, add, k, clip, drawn, cvt, lanes, h, w):
    """The reference's int8 cube [lanes, h, w] and converter saturations (CACC on the sums
    wrapped to 32 bits, then SDP)."""
    wrapped = ((acc[:k, :h, :w].astype(np.int64) + add[:, None, None] + (1 << 31))
               & 0xFFFFFFFF) - (1 << 31)
    values = np.zeros((lanes, h, w), object)
    values[:k] = np.vectorize(lambda v: ref.cacc(int(v), clip), otypes=[object])(wrapped)
    return ref.sdp_counted(values, ref.SdpRef([t for _, t, _ in drawn], cvt))


def _cube(words: np.ndarray, lanes: int, h: int, w: int) -> np.ndarray:
    """The int8 cube [lanes, h, w] of post_process's words stored packed (line w, surface h*w
    words, as sdp.process stores a cube it returns)."""
    return words.view(np.int8).reshape(lanes // ATOM, h, w, ATOM).transpose(0, 3, 1, 2) \
        .reshape(lanes, h, w).astype(np.int64)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_any_split_into_row_ranges_equals_the_serial_kernel_and_the_reference(data, seed):
    """The arguments sdp.process gives the serial kernel, run by post_process_parallel in
    ``parts`` ranges: 2 (the launch's count on this machine), uneven ones, and more parts than
    rows (empty ranges); X stages with per-element, per-channel and register operands;
    shifts and scales that saturate, counted."""
    rng = np.random.default_rng(seed)
    k, h, w, lanes, clip, acc, add, drawn, cvt, cfg = draw_case(data, rng, 27, 7, 6, 40)
    calls = []

    def serial(*args):
        calls.append(args)
        return N.post_process(*args)
    with patch.object(S, "operands", side_effect=[ops for _, _, ops in drawn]), \
            patch.object(S, "post_process", serial):
        out, sat, _ = S.process(cfg, hwc(acc), None, k=k, add=add, clip=clip)
    (args,) = calls
    *common, parts, start, stop = args
    assert (parts, start, stop) == (1, 0, h)
    want, want_sat = _reference(acc, add, k, clip, drawn, cvt, lanes, h, w)
    assert np.array_equal(out.astype(np.int64), want) and sat == want_sat
    words = common[15]
    serial_words = words.copy()
    for parts in sorted({2, 3, data.draw(st.integers(1, h + 3), "parts")}):
        words[:] = rng.integers(0, 1 << 63, words.size, dtype=np.uint64)  # all overwritten
        got_sat = N.post_process_parallel(*common, parts)
        assert got_sat == want_sat, parts
        assert words.tobytes() == serial_words.tobytes(), parts
        assert np.array_equal(_cube(words, lanes, h, w), want), parts


def test_the_split_counts_saturations_from_every_range():
    """Saturations in the first and last rows only, counted once each whatever the split."""
    k, h, w = 16, 3, 5
    acc = np.zeros((k, h, w), np.int32)
    acc[0, 0, :2] = 70000  # first row of the first surface
    acc[15, 2, 4] = -70000  # last row of the last surface
    cfg = S.SdpConfig(w, h, k, True, False, None, (0, 0, 0), (), (0, 1, 0))
    out, sat, _ = S.process(cfg, hwc(acc), None, k=k, add=np.zeros(k, np.int64))
    assert sat == 3 and out[0, 0, :2].tolist() == [127, 127] and out[15, 2, 4] == -128
    args = (hwc(acc), k, np.zeros(k, np.int64), 0, S._NO_STAGES, *[S._NO_OPERAND] * 4, 0, 1, 0,
            k, h, w)
    for parts in (1, 2, 4, 6, 9):
        words = np.zeros(k // ATOM * h * w, np.uint64)
        assert N.post_process_parallel(*args, words, 0, w, h * w, parts) == 3, parts
        assert np.array_equal(_cube(words, k, h, w), out.astype(np.int64)), parts


def test_sdp_launches_the_parallel_kernel_from_its_threshold_on():
    """A cube of PARALLEL_ELEMENTS (8192) elements or more runs post_process_parallel
    on the launch's threads where numba has more than one (the thread count is the split's),
    a smaller one the serial kernel over all its rows; both equal the reference."""
    launched = []

    def spy(name, real):
        def f(*args):
            launched.append((name, args[-1] if name == "parallel" else args[-2:]))
            return real(*args)
        return f
    rng = np.random.default_rng(5)
    for k, h, w in ((64, 8, 16), (64, 8, 15), (16, 8, 8)):  # 8192, 7680, the demo's 1024
        acc = rng.integers(-(1 << 24), 1 << 24, (k, h, w), dtype=np.int64).astype(np.int32)
        add = rng.integers(-100, 100, k, dtype=np.int64)
        cfg = S.SdpConfig(w, h, k, True, False, None, (0, 0, 0), (), (7, 3, 9))
        launched.clear()
        with patch.object(S, "post_process", spy("serial", N.post_process)), \
                patch.object(S, "post_process_parallel", spy("parallel", N.post_process_parallel)):
            out, sat, _ = S.process(cfg, hwc(acc), None, k=k, add=add, clip=2)
        big = k * h * w >= 8192
        assert IC.parallel_for_elements(k * h * w, S.PARALLEL_ELEMENTS).threads == \
            (numba.config.NUMBA_NUM_THREADS if big else 1)
        if big and MULTI:
            assert launched == [("parallel", numba.config.NUMBA_NUM_THREADS)]
        else:
            assert launched == [("serial", (0, h))]
        want, want_sat = _reference(acc, add, k, 2, [], (7, 3, 9), k, h, w)
        assert np.array_equal(out.astype(np.int64), want) and sat == want_sat


def test_a_large_layer_with_x_stages_runs_on_two_threads_bit_exact(tmp_path):
    """A 16->40 3x3 layer on 24x20 (a 40x20x24 cube: 19200 elements) with a BS stage of
    per-element operands (ALU and MUL) and a BN stage of per-channel ones with PReLU and ReLU,
    CACC's clip and a converter that saturates: its trace's CRC check (the reference's) passes,
    through the parallel kernel where numba has two threads; the types it is launched with
    are NVDLA's kernel-plan entry for it (compiled by `accelstub compile`, NEEDS "ahead")."""
    conv = V.Conv(24, 20, 16, 40, clip=3, cvt=(-20, 3, 4),
                  bs=V.Stage(alu="sum", alu_shift=2, mul=True, mul_shift=5, mem="element"),
                  bn=V.Stage(alu="max", mul=True, mul_operand=-3, mul_shift=1, prelu=True,
                             relu=True, mem="kernel"))
    launches = []
    real = N.post_process_parallel

    def counted(*args):
        launches.append(args[-1])
        return real(*args)
    with patch.object(S, "post_process_parallel", counted):
        lines = run_program("nvdla", V.build([conv], "par", seed=4).write(tmp_path / "par"))
    assert sum(": PASS" in line for line in lines) == 1, lines
    assert launches == ([numba.config.NUMBA_NUM_THREADS] if MULTI else [])
    (entry,) = [e for e in device_spec("nvdla").kernel_plan if e[1] == "post_process_parallel"]
    assert entry[0] == "accelstub.emu.numeric.nvdla" and entry[4] == KP.AHEAD
    if MULTI:
        assert entry[2] in [str(tuple(s)) for s in real.signatures]
