"""accelstub.evaluate (api/evaluation.py) and `accelstub eval` (issue 30 #1, #2, #4): every
device's demo over a few samples with 1 and 2 workers, outputs against independent references
(MAX78000's numpy reference, NE16's golden model), labels/reference/differing indices, resume
after a stop, and the CLI's errors for bad DATA."""
from __future__ import annotations

import subprocess
import sys
from unittest.mock import patch

import numpy as np
import pytest

from accelstub import Session
from accelstub.devices import history
from accelstub.devices.tensors import read_tensor, write_tensor
from accelstub.evaluation import DataError, Evaluator, evaluate
from accelstub.testkit import max78000_build as mb
from accelstub.testkit import ne16_build as nb

DEVICES = ["max78000", "ethos-u85", "ne16", "nvdla"]


def _samples(tmp_path, device: str, n: int = 6, seed: int = 1) -> tuple:
    ev = Evaluator(device, None)
    spec = ev.input
    ev.close()
    info = np.iinfo(spec.dtype)
    rng = np.random.default_rng(seed)
    x = rng.integers(max(info.min, -60), min(info.max, 120), (n,) + spec.shape).astype(spec.dtype)
    path = tmp_path / f"{device}.npy"
    np.save(path, x)
    return path, x


@pytest.mark.parametrize("device", DEVICES)
def test_one_and_two_workers_give_the_same_outputs(tmp_path, device):
    path, x = _samples(tmp_path, device)
    one = evaluate(device, path, workers=1)
    two = evaluate(device, path, workers=2)
    assert one.complete and two.complete and one.count == len(x)
    assert np.array_equal(one.outputs, two.outputs)
    assert len({one.outputs[i].tobytes() for i in range(len(x))}) > 1  # the samples matter


@pytest.mark.parametrize("device", DEVICES)
def test_a_dataset_run_records_no_reverse_history(device):
    """An evaluator's session records nothing to go back through (nothing steps back in a
    dataset run; recording cost each sample up to 13x, NVDLA's demo): no run of it calls the
    history's kernels, and its outputs are those of a session that records (the default, as
    `accelstub serve`'s, 256 MiB)."""
    ev = Evaluator(device, None)
    spec = ev.input
    info = np.iinfo(spec.dtype)
    x = np.random.default_rng(4).integers(max(info.min, -60), min(info.max, 120),
                                          spec.shape).astype(spec.dtype)

    def recorded(*args):
        raise AssertionError("the evaluator's run journaled history")
    try:
        with patch.object(history, "diff_out", recorded), \
                patch.object(history, "swap_out", recorded):
            got = [ev.run(x) for _ in range(2)]
        assert not ev.session.backend.rc.history.enabled
    finally:
        ev.close()
    with Session.open(device) as s:
        rc = s.backend.rc
        assert rc.history.budget == 256 << 20
        ev_in, ev_out = s.backend.device.program_io()
        armed = rc.checkpoint()
        write_tensor(ev_in[0], x, s.write_memory)
        assert s.cont().reason == "done" and rc.history.started
        want = read_tensor(ev_out[0], s.read_memory)
        rc.rewind(armed)
    assert np.array_equal(got[0], want) and np.array_equal(got[1], want)


def test_a_samples_rewind_puts_the_input_back_in_few_ranges():
    """The armed state a sample rewinds to keeps the input's elements less than
    WRITE_MERGE_GAP bytes apart as one range (the MAX78000 demo's input uses 3 bytes of every
    4: 256 runs, each put back on its own per sample before), and every input byte is in it."""
    ev = Evaluator("max78000", None)
    try:
        runs = ev.input.ranges()
        kept = [(s, s + len(d)) for s, d in ev._armed["ranges"]]
        assert len(runs) == 256 and len(kept) < 10
        assert all(any(a <= s and e <= b for a, b in kept) for s, e in runs)
    finally:
        ev.close()


def test_max78000_outputs_equal_the_numpy_reference(tmp_path):
    net = mb.demo_network()
    x0, ws, bs = mb.random_arrays(net, seed=5)
    mb.build(net, x0, ws, bs).write(tmp_path / "prog")
    rng = np.random.default_rng(2)
    xs = rng.integers(-128, 128, (5, 1, 3, 16, 16)).astype(np.int8)  # with a batch axis of 1
    np.save(tmp_path / "x.npy", xs)
    res = evaluate("max78000", tmp_path / "x.npy", tmp_path / "prog", workers=1)
    for i, x in enumerate(xs):
        want = mb.reference_outputs(net, x[0].astype(np.int64), ws, bs)[-1]
        assert np.array_equal(res.outputs[i], want.reshape(res.outputs[i].shape)), i


def test_ne16_outputs_equal_the_golden_model(tmp_path):
    layer, seed, shift = nb.DEMO, 3, 2
    app = nb.build(layer, seed=seed, shift=shift)
    app.write(tmp_path / "app")
    # the builder's random draws, in its order: input, weights, scales, biases
    rng = np.random.default_rng(seed)
    x0 = rng.integers(0, 256, (layer.height, layer.width, layer.in_channels))
    lo = -(1 << (layer.weight_bits - 1))
    w = rng.integers(lo, -lo, (layer.out_channels, layer.in_channels, layer.kernel,
                               layer.kernel))
    top = 256 if layer.scale_bits == 8 else 1 << 16
    scale = rng.integers(0, top, layer.out_channels)
    bias = rng.integers(-(1 << 20), 1 << 20, layer.out_channels)
    assert layer.norm_quant and layer.bias
    assert np.array_equal(nb.golden(layer, x0, w, scale, bias, shift).ravel(),
                          app.arrays["golden_output"][1])
    xs = np.random.default_rng(4).integers(0, 256, (4,) + x0.shape).astype(np.uint8)
    np.save(tmp_path / "x.npy", xs)
    res = evaluate("ne16", tmp_path / "x.npy", tmp_path / "app", workers=1)
    for i, x in enumerate(xs):
        assert np.array_equal(res.outputs[i], nb.golden(layer, x, w, scale, bias, shift)), i


def test_labels_reference_and_differing_samples(tmp_path):
    path, _ = _samples(tmp_path, "ne16", n=6)
    first = evaluate("ne16", path, workers=1)
    labels = first.top1.copy()
    labels[[1, 4]] = (labels[[1, 4]] + 1) % first.outputs[0].size
    np.save(tmp_path / "lab.npy", labels)
    ref = np.array(first.outputs).astype(np.int64)
    ref[2].flat[0] += 1  # bit-exact no longer, same top-1 unless that was the maximum
    ref[5] = 0
    ref[5].flat[7] = 1000  # another top-1
    np.savez(tmp_path / "ref.npz", outputs=ref)
    res = evaluate("ne16", path, labels=tmp_path / "lab.npy", reference=tmp_path / "ref.npz",
                   out=tmp_path / "r.npz", workers=1)
    assert res.accuracy == pytest.approx(4 / 6)
    assert list(res.differing) == [2, 5]
    assert not res.top1_agree[5] and res.top1_agree[0]
    saved = np.load(tmp_path / "r.npz")
    assert list(saved["differing"]) == [2, 5] and list(saved["correct"]) == [1, 0, 1, 1, 0, 1]
    assert np.array_equal(saved["outputs"], res.outputs)
    assert not (tmp_path / "r.npz.partial").exists()


def test_an_interrupted_run_resumes(tmp_path):
    path, _ = _samples(tmp_path, "max78000", n=8)
    out = tmp_path / "r.npz"

    def stop_after_3(done: int, total: int) -> None:
        if done == 3:
            raise KeyboardInterrupt  # as ^C
    stopped = evaluate("max78000", path, out=out, workers=1, progress=stop_after_3)
    assert not stopped.complete and stopped.count == 3 and not out.exists()
    seen: list[int] = []
    res = evaluate("max78000", path, out=out, workers=2, resume=True,
                   progress=lambda d, t: seen.append(d))
    assert res.complete and seen[0] > 3 and seen[-1] == 8  # only the 5 left ran
    whole = evaluate("max78000", path, workers=1)
    assert np.array_equal(np.load(out)["outputs"], whole.outputs)


def test_the_package_root_exports_evaluate():
    import accelstub
    import accelstub.evaluation

    assert accelstub.evaluate is evaluate and accelstub.EvalResults.__module__ == \
        "accelstub.evaluation"


def test_bad_data_is_one_line_naming_the_file(tmp_path):
    np.save(tmp_path / "bad.npy", np.zeros((3, 3, 16, 15), np.int8))
    np.save(tmp_path / "float.npy", np.zeros((3, 3, 16, 16), np.float32))
    with pytest.raises(DataError, match=r"float\.npy: dtype float32"):
        evaluate("max78000", tmp_path / "float.npy", workers=1)
    cli = [sys.executable, "-m", "accelstub.stub.cli", "eval", "max78000", "--inputs"]
    p = subprocess.run(cli + [str(tmp_path / "bad.npy")], capture_output=True, text=True)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        f"accelstub: error: {tmp_path / 'bad.npy'}: samples of shape (3, 16, 15); the "
        "program's input is (3, 16, 16) CHW int8, so DATA must be (N, 3, 16, 16) or "
        "(N, 1, 3, 16, 16)"]
    p = subprocess.run(cli + [str(tmp_path / "nothing.npy")], capture_output=True, text=True)
    assert p.returncode == 2 and "nothing.npy: cannot read it" in p.stderr


def test_cli_reports_and_exit_codes(tmp_path):
    path, _ = _samples(tmp_path, "nvdla", n=4)
    cli = [sys.executable, "-m", "accelstub.stub.cli", "eval", "nvdla", "--inputs", str(path),
           "--workers", "1", "--out", str(tmp_path / "r.npz")]
    p = subprocess.run(cli, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "eval: 4/4 samples" in p.stdout and "nvdla: 4/4 samples" in p.stdout
    outs = np.load(tmp_path / "r.npz")["outputs"]
    outs[3].flat[0] ^= 1
    np.savez(tmp_path / "ref.npz", outputs=outs)
    p = subprocess.run(cli + ["--reference", str(tmp_path / "ref.npz")], capture_output=True,
                       text=True)
    assert p.returncode == 1 and "bit-exact with the reference 3/4" in p.stdout
    assert "differing samples (1): 3" in p.stdout
