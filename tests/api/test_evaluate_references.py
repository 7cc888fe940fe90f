"""accelstub.evaluate against independent references (issue 30 #1): Ethos-U85 with the pre-Vela
.tflite run by LiteRT's reference kernels in the workers (BUILTIN_REF: testkit's
litert_reference is the independent check), the model input taken from the Vela program's
input slots when Vela stripes the first operation (Device.program_io), and NVDLA against
testkit/nvdla_reference.py; LiteRT missing is one line naming the package."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from accelstub.evaluation import evaluate
from accelstub.session import Session
from accelstub.testkit import nvdla_build as nb
from accelstub.testkit import nvdla_reference as nref
from accelstub.testkit.ethosu85_models import RELU, SAME, Graph, compile_with_vela
from tests.ethos_u85.test_ethosu85_vela import litert_reference, needs_litert, needs_vela


def _striped_model(tmp_path):
    """Three convolutions over a 128x128x16 input: Vela cuts the first one into stripes of
    65 rows (its IFM is then part of the input)."""
    g = Graph("striped", 3)
    x = g.input("input", (1, 128, 128, 16))
    y = g.conv(x, 16, (3, 3), (1, 1), SAME, RELU)
    y = g.conv(y, 16, (3, 3), (1, 1), SAME, RELU)
    g.output(g.conv(y, 8, (3, 3), (2, 2), SAME, RELU))
    src = tmp_path / "striped.tflite"
    src.write_bytes(g.to_tflite())
    return src, compile_with_vela(src, tmp_path / "vela")


@needs_vela
@needs_litert
@pytest.mark.slow
def test_ethos_u85_striped_input_and_litert_reference_in_the_workers(tmp_path):
    src, prog = _striped_model(tmp_path)
    with Session.open("ethos-u85", prog) as s:
        (inp,), (out,) = s.backend.device.program_io()
        first = next(t for u in s.units() for t in s.tensors(u.index) if t.name == "input")
    assert inp.shape == (1, 128, 128, 16) and out.shape == (1, 64, 64, 8)
    assert first.shape[1] < 128  # the premise: the first operation sees a stripe only
    xs = np.random.default_rng(5).integers(-128, 128, (4, 128, 128, 16)).astype(np.int8)
    np.save(tmp_path / "x.npy", xs)  # without the batch axis
    res = evaluate("ethos-u85", tmp_path / "x.npy", prog, reference=src, workers=2,
                   out=tmp_path / "r.npz")
    assert res.complete and res.count == 4
    for i, x in enumerate(xs):
        (want,) = litert_reference(src, [x[None]])
        assert np.array_equal(res.outputs[i], want), i
        assert np.array_equal(res.reference[i], want), i
    assert res.exact.all() and res.top1_agree.all() and len(res.differing) == 0
    assert len({res.outputs[i].tobytes() for i in range(4)}) == 4
    saved = np.load(tmp_path / "r.npz")
    assert saved["exact"].all() and np.array_equal(saved["outputs"], res.outputs)


@needs_vela
def test_a_tflite_reference_without_litert_is_one_line(tmp_path):
    src, prog = _striped_model(tmp_path)
    np.save(tmp_path / "x.npy", np.zeros((2, 128, 128, 16), np.int8))
    code = ("import sys; sys.modules['ai_edge_litert'] = None\n"
            "from accelstub.stub.cli import main\n"
            f"sys.exit(main(['eval', 'ethos-u85', '--program', {str(prog)!r}, '--inputs', "
            f"{str(tmp_path / 'x.npy')!r}, '--reference', {str(src)!r}, '--workers', '1']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        (f"accelstub: error: {src}: a .tflite reference is run by LiteRT, which is not "
         "installed: pip install ai-edge-litert")]


def test_nvdla_outputs_equal_the_reference(tmp_path):
    layer = nb.Conv(8, 8, 16, 16, clip=4, cvt=(0, 1, 3))
    nb.build([layer], name="conv", seed=7).write(tmp_path / "prog")
    rng = np.random.default_rng(7)  # the builder's draws, in its order: input, weights
    rng.integers(-128, 128, (layer.c, layer.h, layer.w))
    weights = rng.integers(-128, 128, (layer.k, layer.r, layer.s, layer.c))
    xs = np.random.default_rng(3).integers(-128, 128, (5, 16, 8, 8)).astype(np.int8)
    np.save(tmp_path / "x.npy", xs)
    res = evaluate("nvdla", tmp_path / "x.npy", tmp_path / "prog", workers=2)
    assert res.complete and len({res.outputs[i].tobytes() for i in range(5)}) == 5
    for i, x in enumerate(xs):
        sums = nref.conv(x.astype(np.int64), weights, layer.stride, layer.dilation, layer.pad,
                         layer.pad_value, layer.out_hw)
        acc = np.vectorize(lambda v: nref.cacc(int(v), layer.clip))(sums)
        want = nref.sdp(acc, nref.SdpRef([], layer.cvt))
        got = res.outputs[i].astype(np.int64)
        assert np.array_equal(got, want.reshape(got.shape)), i


def test_ethos_u85_program_io_is_the_vela_graph_tensors_until_qbase_moves():
    from accelstub.devices.device import Device

    with Session.open("ethos-u85") as s:  # the bundled demo, a Vela program
        dev = s.backend.device
        (inp,), (out,) = dev.program_io()
        for spec, slot in ((inp, dev.vela.inputs[0]), (out, dev.vela.outputs[0])):
            assert int(np.prod(spec.shape)) == int(np.prod(slot.shape)) and spec.layout == "NHWC"
            assert spec.ranges() == [(slot.address, slot.address + slot.nbytes)]
        s.write_register("QBASE_LO", dev.vela.qbase + 0x100)  # another command stream queued
        assert dev.program_io() == Device.program_io(dev) != ((inp,), (out,))


def _numba_threads(q) -> None:
    import numba

    q.put(numba.config.NUMBA_NUM_THREADS)


def test_pool_workers_share_the_cores_between_numba_threads(monkeypatch):
    import multiprocessing
    import os

    from accelstub.evaluation import worker_threads

    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
    ctx = multiprocessing.get_context("spawn")
    got = {}
    for workers, user in ((2, None), (1, None), (2, "3")):
        if user is not None:
            monkeypatch.setenv("NUMBA_NUM_THREADS", user)
        q = ctx.Queue()
        with worker_threads(workers):
            proc = ctx.Process(target=_numba_threads, args=(q,))
            proc.start()
        got[workers, user] = q.get(timeout=60)
        proc.join()
        assert os.environ.get("NUMBA_NUM_THREADS") == user  # as it was
    cores = os.cpu_count() or 1
    assert got == {(2, None): max(1, cores // 2), (1, None): cores, (2, "3"): 3}
