"""Issue 27 point 4 on int16 layers: the Ethos-U85 reference's rule for an int16x8
FULLY_CONNECTED (devices/ethos_u85/framework_reference.py INT16_SCALE_RULE), on the project's
int16x8 network (testkit/ethosu85_models.py int16x8_network: CONV_2D + ReLU, RESHAPE, two
FULLY_CONNECTED) compiled by Vela 5.2 for ethos-u85-256.

The rule's arithmetic is written out again here from the facts it rests on (Vela's
NPU_SET_OFM_SCALE of each operation, LiteRT's values), not imported from the reader.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from accelstub.testkit.ethosu85_models import compile_with_vela, int16x8_network
from tests.ethos_u85.test_ethosu85_diff_reference import (
    _patch_buffer,
    compare,
    first_divergence,
    load,
)
from tests.ethos_u85.test_ethosu85_vela import needs_litert, needs_vela

pytestmark = [pytest.mark.slow, needs_vela, needs_litert]

FC2, FC3 = "int16x8.fc2.out", "int16x8.fc3.out"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    root = tmp_path_factory.mktemp("ethosu85_diff_int16")
    cache: dict = {}

    def get(patch=None) -> tuple[Path, Path]:
        key = patch and patch.__name__
        if key not in cache:
            d = root / (key or "clean")
            d.mkdir()
            model = d / "int16x8.tflite"
            data = int16x8_network()
            model.write_bytes(patch(data) if patch else data)
            src = root / "clean" / "int16x8.tflite"
            cache[key] = src, compile_with_vela(model, d / "out", macs=256, debug_db=True)
        return cache[key]
    get()
    return get


def _q31(real: float) -> tuple[int, int]:
    """real = q * 2^(e - 31), q in [2^30, 2^31) (TFLite's QuantizeMultiplier)."""
    frac, e = math.frexp(real)
    q = math.floor(frac * (1 << 31) + 0.5)
    return (q // 2, e + 1) if q == 1 << 31 else (q, e)


def _run(dev, refs) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Unit by unit: {TFLite name: (device array, reference array, explained mask)}."""
    from accelstub.devices.runcontrol import RunControl
    from accelstub.devices.tensors import read_tensor

    by_unit = {r.unit: r for r in refs}
    rc, out = RunControl(dev), {}
    for i in range(len(dev.units())):
        rc.step(300)
        if i in by_unit:
            r = by_unit[i]
            spec = next(s for s in dev.unit_tensors(i) if s.name == r.tensor)
            got = read_tensor(spec, dev.read)
            out[r.name] = got, r.array, r.explain(got, r.array) & (got != r.array)
    return out


def test_int16_fully_connected_differences_are_the_15_bit_scale(compiled):
    """A clean int16x8 program: no unexplained divergence; the CONV_2D equals LiteRT (its
    16x8 reference kernel takes the same 15-bit multiplier as Vela); each FULLY_CONNECTED
    differs only where the 15-bit scale and LiteRT's 31-bit multiplier round apart, and the
    explained elements are exactly those: the device equals (acc * m15 + 2^(s-1)) >> s from
    its own input, with m15, s the scale and shift Vela wrote in NPU_SET_OFM_SCALE (round_mode
    natural), LiteRT equals the 31-bit single rounding."""
    from accelstub.devices.ethos_u85 import stream as es
    from accelstub.devices.ethos_u85.vela import read_tflite

    src, prog = compiled()
    dev, inputs = load(prog, src)
    refs = dev.layer_references(src, inputs)
    assert {r.name: r.rule.split(":")[0] for r in refs} == {
        "int16x8.conv0.out": "carried", FC2: "15-bit scale", FC3: "15-bit scale"}
    assert "[U85-TRM: §3.6.6]" in next(r.rule for r in refs if r.name == FC2)
    scales = [(c.fields["scale"], c.fields["shift"], c.fields["round_mode"])
              for c in es.decode(dev.stream.words().tobytes()) if c.name == "NPU_SET_OFM_SCALE"]
    rows = _run(dev, refs)
    for got, ref, explained in rows.values():  # no unexplained divergence
        assert np.array_equal(explained, got != ref)
    conv, _, _ = rows["int16x8.conv0.out"]
    assert np.array_equal(conv, rows["int16x8.conv0.out"][1])

    m = read_tflite(src.read_bytes())
    total = 0
    for k, name, x_dev, x_ref in ((2, FC2, conv, conv), (3, FC3, rows[FC2][0], rows[FC2][1])):
        op = m.operators[k]
        x_t, w_t, b_t, y_t = (m.tensors[i] for i in (*op.inputs, op.outputs[0]))
        w = np.frombuffer(m.buffers[w_t.buffer], np.int8).reshape(w_t.shape).astype(np.int64)
        b = np.frombuffer(m.buffers[b_t.buffer], np.int64)
        q, e = _q31(float(x_t.scale[0]) * float(w_t.scale[0]) / float(y_t.scale[0]))
        m15, s15 = (q + (1 << 15)) >> 16, 15 - e
        assert (m15, s15, 1) in scales  # Vela's own scale, shift, natural rounding (1)
        lo = 0 if k == 2 else -32768  # fc2 has ReLU
        npu = np.clip((w @ x_dev.reshape(-1).astype(np.int64) + b) * m15 + (1 << (s15 - 1))
                      >> s15, lo, 32767)
        lite = np.clip((w @ x_ref.reshape(-1).astype(np.int64) + b) * q + (1 << (30 - e))
                       >> (31 - e), lo, 32767)
        got, ref, explained = rows[name]
        assert np.array_equal(got.reshape(-1), npu) and np.array_equal(ref.reshape(-1), lite)
        assert np.array_equal(explained, got != ref)
        total += int(explained.sum())
    assert total > 0  # the network does meet the rule (2 elements in fc2, 1 in fc3)


def test_int16_explain_is_precise(compiled):
    """An element one further from the 15-bit value is not explained, nor an equal one."""
    src, prog = compiled()
    dev, inputs = load(prog, src)
    refs = dev.layer_references(src, inputs)
    head = next(r for r in refs if r.name == FC3)
    got, ref, explained = _run(dev, refs)[FC3]
    assert not head.explain(ref.copy(), ref).any()
    i = int(np.argmax(explained.reshape(-1)))
    assert explained.reshape(-1)[i]
    worse = got.copy().reshape(-1)
    worse[i] += int(np.sign(int(got.reshape(-1)[i]) - int(ref.reshape(-1)[i])))
    assert not head.explain(worse.reshape(got.shape), ref).reshape(-1)[i]


def corrupt_fc3_weight(data: bytes) -> bytes:
    """int16x8 fc3: its largest weight negated."""
    def flip(a):
        i = int(np.argmax(np.abs(a)))
        a[i] = -a[i]
    return _patch_buffer(data, FC3, 1, flip)


def test_int16_corrupted_weight_diverges_at_its_layer(compiled):
    """A program compiled with one fc3 weight changed, compared with the clean model: fc2's
    differences stay explained by the 15-bit scale rule, fc3 is the first divergence."""
    src, _ = compiled()
    _, prog = compiled(corrupt_fc3_weight)
    dev, inputs = load(prog, src)
    refs = dev.layer_references(src, inputs)
    rows = compare(dev, refs)
    first = first_divergence(rows)
    assert first is not None and next(n for u, n, _, _ in rows if u == first) == FC3
    d, e = next((d, e) for _, n, d, e in rows if n == FC2)
    assert d > 0 and e == d
