"""Whole int8 networks (testkit/ethosu85_networks.py: ResNet-8, DS-CNN, MobileNet v1 0.25 and
v2 0.35 at 96x96, the dense autoencoder; each with and without its softmax) compiled by Vela for
two MAC configurations, run in the device and compared bit for bit with LiteRT's reference
kernels (OpResolverType.BUILTIN_REF); four of them also run four times on one device with new
inputs (kept runs, then replayed blocks).

Known differences (strict xfail, so a change on either side shows): LiteRT 2.3's reference
kernels round the output rescale once (its MultiplyByQuantizedMultiplier is the single-rounding
one), Vela programs double_symmetric rounding, which the TRM defines as the add-then-shift with
the extra 2^30 ([U85-TRM: §3.6.6], gemmlowp's double rounding). On a near-tie the two differ by 1;
the NPU's value is the TRM's (design notes, "Ethos-U85", rounding). ``test_rounding_near_tie``
shows one such element with both roundings written out.
"""
from __future__ import annotations

import numpy as np
import pytest

from accelstub.testkit.ethosu85_models import sample_inputs
from accelstub.testkit.ethosu85_networks import NETWORKS, build_network
from tests.ethos_u85.compiled import compile_cache, run_compiled, run_vela_program
from tests.ethos_u85.test_ethosu85_vela import (
    assert_outputs_equal,
    litert_reference,
    needs_litert,
    needs_vela,
)

MACS = (256, 1024)

#: networks whose output meets a rounding near-tie (LiteRT single rounding vs the NPU's double)
ROUNDING = "LiteRT BUILTIN_REF rounds once, Vela's double_symmetric twice (module docstring)"
XFAIL = {"ds_cnn_logits": ROUNDING, "autoencoder": ROUNDING, "autoencoder_logits": ROUNDING}

pytestmark = pytest.mark.slow


def _params():
    return [pytest.param(n, m, marks=pytest.mark.xfail(strict=True, reason=XFAIL[n]))
            if n in XFAIL else pytest.param(n, m) for n in NETWORKS for m in MACS]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compile_cache(tmp_path_factory.mktemp("ethosu85_networks"), build_network)


run = run_compiled


@needs_vela
@needs_litert
@pytest.mark.parametrize("name,macs", _params())
def test_network_matches_litert(compiled, name, macs):
    src, out = compiled(name, macs)
    xs = sample_inputs(src.read_bytes())
    want = litert_reference(src, xs)
    assert_outputs_equal(run(out, xs, macs), want)


@needs_vela
@needs_litert
def test_rounding_near_tie(compiled):
    """DS-CNN's last layer (FULLY_CONNECTED), output 5: the exact value is -58.4985; LiteRT's
    reference gives -58, the NPU -59. Both are recomputed here in Python integers from the
    model's scales (TFLite's QuantizeMultiplier): single rounding gives LiteRT's value,
    TFLite's double rounding (SaturatingRoundingDoublingHighMul, RoundingDivideByPOT) the
    NPU's; the scale Vela programs rounds the same way under the TRM's double_symmetric."""
    import math

    from accelstub.devices.ethos_u85.vela import read_tflite

    src, out = compiled("ds_cnn_logits", 256)
    xs = sample_inputs(src.read_bytes())
    m = read_tflite(src.read_bytes())
    fc = m.operators[-1]
    x_t, w_t, b_t = (m.tensors[i] for i in fc.inputs)
    y_t = m.tensors[fc.outputs[0]]
    # the FC input: the whole network but the last layer, from LiteRT (matches the NPU there)
    got = run(out, xs, 256)[0].ravel()
    want = litert_reference(src, xs)[0].ravel()
    diff = np.flatnonzero(got.astype(int) - want.astype(int))
    assert diff.tolist() == [5] and (got[5], want[5]) == (-59, -58)
    # recompute output 5 from the pooled features LiteRT computes (a model cut before the FC)
    feats = litert_reference(src, xs, [fc.inputs[0]])[0].astype(np.int64).ravel()
    w = np.frombuffer(m.buffers[w_t.buffer], np.int8).reshape(w_t.shape).astype(np.int64)
    b = np.frombuffer(m.buffers[b_t.buffer], np.int32).astype(np.int64)
    acc = int(w[5] @ (feats - int(x_t.zero_point[0])) + b[5])
    real = float(x_t.scale[0]) * float(w_t.scale[0]) / float(y_t.scale[0])
    frac, e = math.frexp(real)
    q = round(frac * (1 << 31))
    zp = int(y_t.zero_point[0])
    single = ((acc * q + (1 << (30 - e))) >> (31 - e)) + zp
    ab = acc * q
    hi = (abs(ab) + (1 << 30) - (ab < 0)) >> 31  # SRDHM: nudge, then toward zero
    hi = hi if ab >= 0 else -hi
    mask = (1 << -e) - 1
    double = (hi >> -e) + ((hi & mask) > (mask >> 1) + (hi < 0)) + zp
    assert abs(acc * real + zp - (-58.4985)) < 1e-3
    assert (single, double) == (-58, -59)


#: networks run again and again on one device (kept runs, then a replayed block)
AGAIN = ("mobilenet_v2_035", "resnet8", "ds_cnn", "mobilenet_v1_025_logits")


@needs_vela
@needs_litert
@pytest.mark.parametrize("name", AGAIN)
def test_network_runs_again_with_new_inputs(compiled, name):
    """The same program run four times on one device with a new input each time, as a driver
    does it (its setup, then the run to the IRQ): the first run goes through the general path
    and keeps the operations' runs, the second records a block, the third and fourth replay it
    (EthosU85.run_block). Every output is bit-exact with LiteRT's reference kernels for its
    input, so the kept views, kernels and replays of real networks are checked, not only the
    first run."""
    from accelstub.devices import open_device
    from accelstub.devices.ethos_u85.vela import place_vela_program, read_vela

    src, out = compiled(name, 256)
    dev = open_device("ethos-u85", macs=256)
    replays = []
    real = dev.blocks.replay
    dev.blocks.replay = lambda blk, halt: replays.append(len(blk.steps)) or real(blk, halt)
    prog = read_vela(out)
    per_run = []
    for seed in range(4):
        xs = sample_inputs(src.read_bytes(), seed=seed)
        place_vela_program(dev, prog, xs)
        assert_outputs_equal(run_vela_program(dev, prog, timeout=300), litert_reference(src, xs))
        per_run.append(len(replays))
    assert per_run[1] == 0 and per_run[2] > 0 and per_run[3] > per_run[2]  # replays: 3rd, 4th
