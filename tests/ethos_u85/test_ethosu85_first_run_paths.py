"""The Python-side paths a first run takes instead of compiling the general Ethos-U85 kernels
(issue 31 #5), bit for bit against those kernels:

* max / min / sum pooling without accumulator input: numpy window accumulators, then the
  convolutions' fast output stage (pool.ethosu85._pool_on_output_stage) against _pool_kernel;
* MUL without a LUT function in numpy (eltwise.ethosu85._mul) against _ew_kernel's loop;
* add/sub through the wrapper: _addsub_fast called directly where it applies, interpreted
  while its elements are few and it is not compiled;
* the output-stage terms in numpy (conv.ethosu85._finish_terms) against P.round_terms and
  the per-channel rule of which channels the fast stage takes;
* the weight decoder, the walk and the AXI burst counter interpreted (emu/jit.py interpreted,
  kernel_plan.tiered) against the compiled kernels, and the budget that chooses between them.
"""
from __future__ import annotations

import numpy as np
import pytest

from accelstub.emu import kernel_plan as KP
from accelstub.emu.conv import ethosu85 as CE
from accelstub.emu.eltwise import ethosu85 as E
from accelstub.emu.jit import interpreted
from accelstub.emu.memory import ethosu85_axi as AXI
from accelstub.emu.numeric import ethosu85 as P
from accelstub.emu.numeric.ethosu85_values import INT32_MIN, per_channel
from accelstub.emu.pool import ethosu85 as PO
from accelstub.emu.weights import ethosu85 as Wt

LUT = np.zeros(P.LUT_BYTES, np.uint8)
OFM_TYPES = [(8, True), (8, False), (16, True), (32, True)]


def random_cfg(rng, obits, osigned, per_ch=False, scale_bits=31, shift_max=63):
    lo16, hi16 = P.type_range(min(obits, 16), osigned)
    amin, amax = sorted(int(x) for x in rng.integers(lo16, hi16 + 1, 2))
    return P.out_config(ofm_bits=obits, ofm_signed=osigned, zero_point=int(rng.integers(-99, 99)),
                        act_min=amin, act_max=amax,
                        scale=int(rng.integers(-(1 << scale_bits) + 1, 1 << scale_bits)),
                        shift=int(rng.integers(0, shift_max)), round_mode=int(rng.integers(0, 6)),
                        dbl_rnd=int(rng.integers(0, 32)), per_channel=per_ch,
                        clip_none=bool(rng.integers(0, 2)))


@pytest.mark.parametrize("seed", range(60))
def test_max_min_sum_pooling_on_the_output_stage_equals_the_pool_kernel(seed):
    """The numpy window accumulators and the fast output stage give _pool_kernel's values:
    modes max, min, sum; kernel sizes, strides and pads (padding reads the mode's identity),
    an IFM larger or smaller than the derived extent, per-channel and global scales, clipping
    on and off, every OFM type the fast stage writes."""
    rng = np.random.default_rng(seed)
    mode = (PO.POOL_MAX, PO.POOL_MIN, PO.POOL_SUM)[seed % 3]
    obits, osigned = OFM_TYPES[seed % 4]
    D, H, W = (int(n) for n in rng.integers(1, 6, 3))
    kh, kw, sy, sx = (int(n) for n in rng.integers(1, 4, 4))
    pt, pl = (int(n) for n in rng.integers(0, 3, 2))
    ih, iw = (int(n) for n in rng.integers(1, 9, 2))
    v = rng.integers(-(1 << 15), 1 << 15, (ih, iw, D))
    per_ch = bool(seed % 2)
    cfg = random_cfg(rng, obits, osigned, per_ch, shift_max=63)
    bias, scales, shifts = (per_channel(rng.integers(-999, 999, D), D),
                            per_channel(rng.integers(0, 1 << 31, D), D),
                            per_channel(rng.integers(0, 63, D), D))
    got = PO._pool_on_output_stage(v, mode, (H, W, sy, sx, kh, kw, pt, pl), D, cfg, bias,
                                   scales, shifts, None)
    assert got is not None, "the fast stage takes every case here"
    geo = np.array([H, W, sy, sx, kh, kw, pt, pl, mode, 0, D], np.int64)
    want = PO._pool_kernel(v, np.zeros((H, W, D), np.int64), geo, cfg, bias, scales, shifts, LUT)
    assert got.dtype == np.dtype(("i" if osigned else "u") + str(obits // 8))
    np.testing.assert_array_equal(got, want.astype(got.dtype))


def test_pooling_leaves_to_the_kernel_what_the_fast_stage_cannot_take(monkeypatch):
    """A LUT function, a 48-bit accumulator and a max wider than int32 go to the kernel
    (None), and pool2d then still gives the kernel's values."""
    v = np.arange(-8, 8, dtype=np.int64).reshape(2, 2, 4)
    geo_hw = (1, 1, 1, 1, 2, 2, 0, 0)
    for cfg in (P.out_config(function=P.LUT_S8_S8), P.out_config(acc_bits=48)):
        assert PO._pool_on_output_stage(v, PO.POOL_MAX, geo_hw, 4, cfg, None, None, None,
                                        None) is None
    wide = v * (1 << 31)
    assert PO._pool_on_output_stage(wide, PO.POOL_MAX, geo_hw, 4, P.out_config(ofm_bits=32),
                                    None, None, None, None) is None
    assert PO._pool_on_output_stage(np.full((2, 2, 1), INT32_MIN, np.int64), PO.POOL_MIN,
                                    geo_hw, 1, P.out_config(), None, None, None, None) \
        is not None
    lut = np.random.default_rng(1).integers(0, 256, P.LUT_BYTES).astype(np.uint8)
    cfg = P.out_config(function=P.LUT_S8_S8)
    geo = np.array([1, 1, 1, 1, 2, 2, 0, 0, PO.POOL_MAX, 0, 4], np.int64)
    zeros = per_channel(None, 4)
    want = PO._pool_kernel(v, np.zeros((1, 1, 4), np.int64), geo, cfg, zeros, zeros, zeros, lut)
    kernel, calls = PO._pool_kernel, []
    monkeypatch.setattr(PO, "_pool_kernel", lambda *a: calls.append(a) or kernel(*a))
    got = PO.pool2d(v.astype(np.int8), PO.POOL_MAX, (2, 2), cfg=cfg, lut=lut)
    assert len(calls) == 1
    np.testing.assert_array_equal(np.asarray(got, np.int64), want)


@pytest.mark.parametrize("seed", range(60))
def test_mul_in_numpy_equals_the_general_kernel(seed):
    """_mul against _ew_kernel's per-element loop: 8-, 16- and 32-bit inputs (32: rescale
    shift_only, products up to 2**62), scales of either sign, shifts 0..63 (the halving form of
    rounded_shift_right), every round mode and dbl_rnd, zero points, clipping on and off, OFM
    types; then the wrapper's result (run_elementwise) is the same."""
    rng = np.random.default_rng(seed)
    bits, signed = [(8, True), (8, False), (16, True), (32, True)][seed % 4]
    obits, osigned = OFM_TYPES[(seed // 4) % 4]
    shape = tuple(int(n) for n in rng.integers(1, 6, 3))
    span = 1 << 31 if bits == 32 else 1 << 16
    a, b = (rng.integers(-span, span, shape) for _ in range(2))
    cfg = random_cfg(rng, obits, osigned, scale_bits=31 if bits == 32 else 14)
    ew = np.array([E.EW_MUL, bits, int(signed), bits, int(signed), 1, 0, 0, 0, 1, 0, 0, 0, 0],
                  np.int64)
    assert E._mul_applies(ew, cfg)
    dtype = np.dtype(("i" if osigned else "u") + str(obits // 8))
    want = E._ew_kernel(a, b, ew, cfg, LUT)  # the OFM values (truncated), as int64
    np.testing.assert_array_equal(E._mul(a, b, ew, cfg).astype(dtype).astype(np.int64), want)
    p = E.Eltwise(shape, (None, None), ew, cfg, dtype)
    np.testing.assert_array_equal(E._run(p, a, b, None), want.astype(dtype))


def test_mul_with_a_lut_function_or_raw_output_takes_the_kernel():
    ew = np.array([E.EW_MUL, 8, 1, 8, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0], np.int64)
    assert E._mul_applies(ew, P.out_config())
    assert not E._mul_applies(ew, P.out_config(function=P.LUT_S8_S8))
    assert not E._mul_applies(ew, P.out_config(acc_output_disable=True))
    assert not E._mul_applies(ew, P.out_config(ofm_bits=64))
    ew[0] = E.EW_MAX
    assert not E._mul_applies(ew, P.out_config())


@pytest.mark.parametrize("mode", [E.EW_ADD, E.EW_SUB])
def test_add_sub_through_the_wrapper_take_the_fast_kernel_with_the_loops_values(mode,
                                                                                 monkeypatch):
    """run_elementwise of an add/sub that _addsub_fast_applies calls _addsub_fast, not
    _ew_kernel, and gives the per-element loop's values (ew[13] = 1)."""
    rng = np.random.default_rng(mode)
    a, b = (rng.integers(-128, 128, (3, 4, 5)) for _ in range(2))
    cfg = P.out_config(scale=1 << 30, shift=33, zero_point=-3)
    p = E.plan_elementwise(mode, a.astype(np.int8), b.astype(np.int8), (3, 4, 5), ifm_zp=5,
                           ifm2_zp=-7, ifm_scale=(1 << 30, 30, 0, 0),
                           ifm2_scale=(3 << 28, 29, 1, 0), cfg=cfg)
    slow = p.ew.copy()
    slow[13] = 1
    av, bv = E._operand_values(p, a.astype(np.int8), b.astype(np.int8))
    want = E._ew_kernel(av, bv, slow, cfg, LUT).astype(p.dtype)
    kernel = E._ew_kernel
    monkeypatch.setattr(E, "_ew_kernel", lambda *args: pytest.fail("the general kernel ran"))
    got = E.run_elementwise(p, a.astype(np.int8), b.astype(np.int8))
    monkeypatch.setattr(E, "_ew_kernel", kernel)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(12))
def test_the_interpreted_add_sub_equals_the_kernel(seed):
    """jit.interpreted(_addsub_fast), its helpers reached through the numeric module (P.
    round_terms, P.output_limits) interpreted too, gives the compiled kernel's values for
    random operands, input scales and output stages where _addsub_fast_applies."""
    rng = np.random.default_rng(seed)
    mode = (E.EW_ADD, E.EW_SUB)[seed % 2]
    shape = tuple(int(n) for n in rng.integers(1, 6, 3))
    a, b = (rng.integers(-128, 128, shape).astype(np.int8) for _ in range(2))
    obits, osigned = OFM_TYPES[seed % len(OFM_TYPES)]
    cfg = random_cfg(rng, obits, osigned, scale_bits=30, shift_max=50)
    p = E.plan_elementwise(mode, a, b, shape, ifm_zp=int(rng.integers(-99, 99)),
                           ifm2_zp=int(rng.integers(-99, 99)),
                           ifm_scale=(int(rng.integers(1, 1 << 30)), int(rng.integers(0, 40)),
                                      int(rng.integers(0, 6)), int(rng.integers(0, 2))),
                           ifm2_scale=(int(rng.integers(1, 1 << 30)), int(rng.integers(0, 40)),
                                       int(rng.integers(0, 6)), int(rng.integers(0, 2))),
                           cfg=cfg)
    assert E._addsub_fast_applies.py_func(p.ew, p.cfg)
    av, bv = E._operand_values(p, a, b)
    sub = bool(mode == E.EW_SUB)
    want, got = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
    E._addsub_fast(av, bv, sub, p.ew, p.cfg, want)
    interpreted(E._addsub_fast)(av, bv, sub, p.ew, p.cfg, got)
    np.testing.assert_array_equal(got, want)


#: in a fresh process and an empty cache: the demo's add interpreted compiles nothing, not
#: even the helpers it reaches through the numeric module
ADD_COMPILES_NOTHING = """
import json, numpy as np
from accelstub.emu.eltwise import ethosu85 as E
from accelstub.emu.numeric import ethosu85 as P
a = (np.arange(288) % 256 - 128).astype(np.int8).reshape(6, 6, 8)
p = E.plan_elementwise(E.EW_ADD, a, a[::-1].copy(), (6, 6, 8), ifm_scale=(1 << 29, 30, 0, 0),
                       ifm2_scale=(3 << 27, 29, 1, 0), cfg=P.out_config(scale=1 << 30, shift=31))
out = E.run_elementwise(p, a, a[::-1].copy())
print(json.dumps([int(out.astype(np.int64).sum()), len(E._addsub_fast.overloads),
                  len(P.round_terms.overloads), len(P.output_limits.overloads)]))
"""


def test_a_small_add_runs_interpreted_and_compiles_nothing(tmp_path):
    """run_elementwise of a small add with nothing compiled or cached: kernel_plan.tiered
    interprets _addsub_fast, and jit.interpreted interprets the numeric module's helpers it
    calls as ``P.round_terms`` and ``P.output_limits`` (a module attribute, not a global):
    no kernel is compiled. The values equal the compiled kernel's (in this process)."""
    import json
    import os
    import subprocess
    import sys
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", ADD_COMPILES_NOTHING], capture_output=True,
                         text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    total, *compiled = json.loads(out.stdout.splitlines()[-1])
    assert compiled == [0, 0, 0]
    a = (np.arange(288) % 256 - 128).astype(np.int8).reshape(6, 6, 8)
    p = E.plan_elementwise(E.EW_ADD, a, a[::-1].copy(), (6, 6, 8),
                           ifm_scale=(1 << 29, 30, 0, 0), ifm2_scale=(3 << 27, 29, 1, 0),
                           cfg=P.out_config(scale=1 << 30, shift=31))
    av, bv = E._operand_values(p, a, a[::-1].copy())
    want = np.zeros((6, 6, 8), np.int64)
    E._addsub_fast(av, bv, False, p.ew, p.cfg, want)
    assert total == int(want.astype(p.dtype).astype(np.int64).sum())


def test_finish_terms_per_channel_rounding_and_which_channels_the_fast_stage_takes():
    """_finish_terms (numpy): each channel's scale, shift, bias and P.round_terms' addends;
    a shift outside 0..62 or a scale of 2**31 or more makes the stage general (fast False)
    and leaves that channel's addends 0; global scale_mode takes cfg's scale and shift."""
    rng = np.random.default_rng(3)
    oc = 7
    cfg = P.out_config(per_channel=True, round_mode=P.RND_SYMMETRIC, dbl_rnd=4)
    bias = rng.integers(-99, 99, oc)
    scales = rng.integers(1, 1 << 31, oc)
    shifts = rng.integers(0, 63, oc)
    sc, sh, bi, rp, rn, fast, zp, lo, hi = CE._finish_terms(cfg, bias, scales, shifts, oc)
    assert fast
    for i in range(oc):
        assert (sc[i], sh[i], bi[i]) == (scales[i], shifts[i], bias[i])
        assert (rp[i], rn[i]) == P.round_terms(shifts[i], P.RND_SYMMETRIC, 4)
    assert (zp, lo, hi) == (0, -128, 127)
    shifts[2], scales[4] = 63, 1 << 31
    sc, sh, bi, rp, rn, fast, *_ = CE._finish_terms(cfg, bias, scales, shifts, oc)
    assert not fast and (rp[2], rn[2], rp[4], rn[4]) == (0, 0, 0, 0)
    assert (rp[0], rn[0]) == P.round_terms(shifts[0], P.RND_SYMMETRIC, 4)
    glob = P.out_config(scale=12345, shift=20, clip_none=True, ofm_signed=False, zero_point=200)
    sc, sh, bi, rp, rn, fast, zp, lo, hi = CE._finish_terms(glob, bias, scales, shifts, oc)
    assert fast and set(sc) == {12345} and set(sh) == {20} and not bi.any()
    assert (zp, lo, hi) == (200, -(1 << 62), 1 << 62)


def test_output_limits_in_python_as_compiled():
    """P.output_limits' Python function (the numpy stages) and its compiled form agree, and
    both give the registers' values as written: int16 for a signed OFM (0x8000 reads
    -32768), uint16 for an unsigned one (a zero point of -1 reads 65535), clipping unless
    clip_none [U85-TRM: §3.6.7]."""
    for signed, zp, amin, amax, clip_none, want in (
            (True, -5, -100, 120, False, (-5, -100, 120, True)),
            (False, 250, 3, 120, False, (250, 3, 120, True)),
            (True, 0x7FFF, -(1 << 15), 0x7FFF, True, (0x7FFF, -(1 << 15), 0x7FFF, False)),
            (False, -1, 0, 0xFFFF, True, (0xFFFF, 0, 0xFFFF, False))):
        cfg = P.out_config(ofm_bits=16, ofm_signed=signed, zero_point=zp, act_min=amin,
                           act_max=amax, clip_none=clip_none)
        assert tuple(P.output_limits.py_func(cfg)) == want
        assert tuple(P.output_limits(cfg)) == want


def swd_streams(rng):
    """Streams of the encoder's forms (zero runs, palettes, uncompressed, truncated GRC) and
    broken ones (cut short, a reserved zdiv, random bytes)."""
    for n in (1, 37, 300):
        vals = rng.integers(-60, 61, n) * (rng.random(n) < 0.6)
        yield Wt.encode_swd(vals, zdiv=0, wdiv=5)
        yield Wt.encode_swd(vals, zdiv=6, wdiv=7)
        yield Wt.encode_swd(np.abs(vals) % 3, zdiv=1, wdiv=1, wtrunc=True)
        yield Wt.encode_swd(vals, zdiv=2, wdiv=5)[:7]
    yield bytes([5]) + bytes(15)
    yield rng.integers(0, 256, 64).astype(np.uint8).tobytes()


def test_the_interpreted_decoder_and_walk_equal_the_kernels():
    """jit.interpreted(_swd_decode) and (_walk) give the compiled kernels' results: values,
    status and bit position of every stream, good or broken, and the walk's stream numbers
    and indices for convolutions, part-kernel-first, depthwise, sparse and 16-bit orderings."""
    rng = np.random.default_rng(5)
    for stream in swd_streams(rng):
        buf = np.frombuffer(stream, np.uint8)
        got, want = np.zeros(4096, np.int64), np.zeros(4096, np.int64)
        n, status, pos = interpreted(Wt._swd_decode)(buf, got)
        assert (n, status, pos) == tuple(Wt._swd_decode(buf, want))
        np.testing.assert_array_equal(got, want)
    for kind in ("depth", "part", "dw", "sparse", "i16"):
        p = Wt.ordering_params(ofm_depth=int(rng.integers(1, 40)),
                               ifm_depth=int(rng.integers(1, 70)), kernel_hw=(3, 2),
                               stride=(2, 1), ofm_block_depth=16, macs_per_cc=512,
                               microblock=3, depthwise=kind == "dw",
                               part_kernel_first=kind == "part", sparse=kind == "sparse",
                               ifm16bit=kind == "i16")
        n = Wt._walk(p, False, np.zeros(0, np.int64), np.zeros(0, np.int64))
        assert interpreted(Wt._walk)(p, False, np.zeros(0, np.int64), np.zeros(0, np.int64)) == n
        want, got = [np.zeros(n, np.int64) for _ in range(2)], [np.zeros(n, np.int64)
                                                                 for _ in range(2)]
        Wt._walk(p, True, *want)
        interpreted(Wt._walk)(p, True, *got)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_a_kernel_is_interpreted_within_the_budget_then_compiled(monkeypatch):
    """kernel_plan.tiered: a kernel not compiled in the process (nor cached) runs interpreted
    while a call's estimated cost fits what is left of the budget (which it then spends),
    else the kernel itself; a kernel compiled in the process is always taken compiled."""
    monkeypatch.setattr(KP, "_budget_left", [0.1])
    fresh = type("Kernel", (), {"overloads": {}, "py_func": Wt._bits.py_func})()
    monkeypatch.setattr(KP, "interpreted", lambda k: ("python", k))
    assert KP.tiered(fresh, 0.06) == ("python", fresh)
    assert KP._budget_left[0] == pytest.approx(0.04)
    assert KP.tiered(fresh, 0.06) is fresh  # over what is left: compiled
    compiled = type("Kernel", (), {"overloads": {"sig": None}})()
    assert KP.tiered(compiled, 0.0) is compiled


def test_the_interpreted_burst_counter_equals_the_kernel():
    """jit.interpreted(_burst_counts) gives the kernel's transactions, beats, bytes and total
    on random ranges, alignments, port hashes and port counts."""
    rng = np.random.default_rng(11)
    for _ in range(20):
        starts = rng.integers(0, 1 << 20, int(rng.integers(1, 30)))
        ranges = np.stack([starts, starts + rng.integers(1, 3000, starts.size)], 1)
        align, n = int(rng.choice([16, 64, 128])), int(rng.integers(1, 5))
        hashes = rng.integers(0, 1 << 30, int(rng.integers(0, 3)))
        got, want = np.zeros((3, n), np.int64), np.zeros((3, n), np.int64)
        assert interpreted(AXI._burst_counts)(ranges, align, hashes, got) == \
            AXI._burst_counts(ranges, align, hashes, want)
        np.testing.assert_array_equal(got, want)


def test_weight_burst_and_add_kernels_are_compiled_ahead_only():
    """The Ethos-U85 plan's decoder, walk, burst counter and add/sub entries are "ahead": a
    run's plan leaves them out (the demo interprets its few weights, bursts and its 288-element
    add), `accelstub compile`'s queue (compile_plan's ``then``) keeps them."""
    from accelstub.devices import device_spec
    ahead = {e[1] for e in device_spec("ethos-u85").kernel_plan if e[4] == KP.AHEAD}
    assert ahead == {"_walk", "_swd_decode", "_burst_counts", "_addsub_fast"}
    assert ahead <= {e[1] for e in KP.for_this_machine(device_spec("ethos-u85").kernel_plan)}


def test_a_decoder_in_the_disk_cache_is_loaded_not_interpreted(tmp_path):
    """With nothing cached, decode_swd interprets (the kernel stays uncompiled); once the
    kernel was compiled for those argument types in this cache (as `accelstub compile` does),
    a new process loads it (a cache hit) instead of interpreting."""
    import json
    import os
    import subprocess
    import sys
    import textwrap

    child = textwrap.dedent('''
        import json, sys
        import numpy as np
        from accelstub.emu.weights import ethosu85 as Wt
        stream = Wt.encode_swd(np.arange(-20, 20), zdiv=0, wdiv=5)
        if sys.argv[1] == "compile":
            buf = np.frombuffer(stream, np.uint8)
            Wt._swd_decode(buf, np.zeros(64, np.int64))
        v, status, _ = Wt.decode_swd(stream)
        assert status == Wt.SWD_OK and v.tolist() == list(range(-20, 20))
        print(json.dumps([len(Wt._swd_decode.overloads),
                          sum(Wt._swd_decode.stats.cache_hits.values())]))
    ''')
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))

    def run(what: str) -> list:
        out = subprocess.run([sys.executable, "-c", child, what], capture_output=True,
                             text=True, timeout=300, env=env)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.splitlines()[-1])

    assert run("decode") == [0, 0]  # interpreted: nothing compiled or loaded
    assert run("compile") == [1, 0]  # compiled here, written to the cache
    assert run("decode") == [1, 1]  # loaded from the cache


@pytest.mark.parametrize("mode", [PO.POOL_MAX, PO.POOL_MIN, PO.POOL_SUM])
def test_pool2d_without_accumulator_input_equals_a_numpy_window_reference(mode, monkeypatch):
    """pool2d's max / min / sum (2x2 windows, stride 2, unit scale, int8 OFM) against the
    windows' max / min / sum clipped to int8, worked out here, not by the emulator; the
    numpy path takes them (the pooling kernel does not run)."""
    rng = np.random.default_rng(mode)
    ifm = rng.integers(-128, 128, (4, 6, 3)).astype(np.int8)
    win = ifm.astype(np.int64).reshape(2, 2, 3, 2, 3).transpose(0, 2, 4, 1, 3).reshape(2, 3, 3, 4)
    want = {PO.POOL_MAX: win.max(-1), PO.POOL_MIN: win.min(-1),
            PO.POOL_SUM: win.sum(-1)}[mode].clip(-128, 127)
    monkeypatch.setattr(PO, "_pool_kernel", lambda *a: pytest.fail("the pooling kernel ran"))
    got = PO.pool2d(ifm, mode, (2, 2), stride=(2, 2))
    np.testing.assert_array_equal(np.asarray(got, np.int64), want)
