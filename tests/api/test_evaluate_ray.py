"""``evaluate(..., ray=...)`` and ``accelstub eval --ray`` (issue 30 #3, api/cluster.py): on a
local Ray started here (loopback only, no dashboard, stopped at the end) the same samples give
bit for bit the local pool's outputs and results on every device (and Ethos-U85's LiteRT
reference, computed in the actors), a run stopped on Ray resumes locally, the program's files
travel as bytes, the CLI reaches an existing cluster by address, and without Ray ``--ray`` is
one line naming the extra."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from accelstub.cluster import EXTRA, pack_program, unpack_program
from accelstub.evaluation import Evaluator, evaluate
from accelstub.testkit import max78000_build as mb

from .test_evaluate import DEVICES, _samples

#: Ray's node on 127.0.0.1 with every server bound there (Ray reads it when imported), and no
#: usage report sent anywhere
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture(scope="module")
def local_ray():
    with pytest.MonkeyPatch.context() as mp:
        for k, v in RAY_ENV.items():
            mp.setenv(k, v)
        import ray

        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
                 object_store_memory=100 << 20, log_to_driver=False)
        try:
            assert [n["NodeManagerAddress"] for n in ray.nodes()] == ["127.0.0.1"]
            yield ray
        finally:
            ray.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_ray_gives_the_local_pools_results_bit_for_bit(tmp_path, local_ray, device):
    path, x = _samples(tmp_path, device, n=7)
    ev = Evaluator(device, None)
    size = int(np.prod(ev.output.shape))
    ev.close()
    np.save(tmp_path / "lab.npy", np.random.default_rng(3).integers(0, size, len(x)))
    pool = evaluate(device, path, labels=tmp_path / "lab.npy", workers=2,
                    out=tmp_path / "pool.npz")
    ref = np.array(pool.outputs).astype(np.int64)
    ref[5].flat[0] += 1
    np.savez(tmp_path / "ref.npz", outputs=ref)
    on_ray = evaluate(device, path, labels=tmp_path / "lab.npy", reference=tmp_path / "ref.npz",
                      out=tmp_path / "ray.npz", ray=True)
    assert on_ray.complete and on_ray.count == len(x)
    assert len({pool.outputs[i].tobytes() for i in range(len(x))}) > 1  # the samples matter
    mine, theirs = np.load(tmp_path / "ray.npz"), np.load(tmp_path / "pool.npz")
    for key in ("outputs", "done", "top1", "labels", "correct"):
        assert mine[key].dtype == theirs[key].dtype and np.array_equal(mine[key], theirs[key])
    assert list(mine["differing"]) == [5] and on_ray.accuracy == pool.accuracy
    assert not (tmp_path / "ray.npz.partial").exists()


@pytest.mark.slow
def test_a_run_stopped_on_ray_resumes_in_the_local_pool(tmp_path, local_ray):
    net = mb.demo_network()
    x0, ws, bs = mb.random_arrays(net, seed=5)
    mb.build(net, x0, ws, bs).write(tmp_path / "prog")  # a program directory, not the demo
    xs = np.random.default_rng(2).integers(-128, 128, (40, 3, 16, 16)).astype(np.int8)
    np.save(tmp_path / "x.npy", xs)
    out = tmp_path / "r.npz"

    def stop_after_chunk(done: int, total: int) -> None:
        raise KeyboardInterrupt  # as ^C, after the first chunk came back
    stopped = evaluate("max78000", tmp_path / "x.npy", tmp_path / "prog", out=out,
                       workers=2, ray=True, progress=stop_after_chunk)
    assert not stopped.complete and 0 < stopped.count < len(xs) and not out.exists()
    res = evaluate("max78000", tmp_path / "x.npy", tmp_path / "prog", out=out, workers=2,
                   resume=True)
    assert res.complete
    for i in (0, 17, 39):
        want = mb.reference_outputs(net, xs[i].astype(np.int64), ws, bs)[-1]
        assert np.array_equal(res.outputs[i], want.reshape(res.outputs[i].shape)), i


def test_a_program_travels_as_bytes(tmp_path):
    (tmp_path / "p" / "sub").mkdir(parents=True)
    (tmp_path / "p" / "cnn.c").write_bytes(b"int x;\n")
    (tmp_path / "p" / "sub" / "w.bin").write_bytes(bytes(range(256)))
    (tmp_path / "one.tflite").write_bytes(b"TFL3")
    for src in (tmp_path / "p", tmp_path / "one.tflite"):
        dest = unpack_program(pack_program(src), tmp_path / "node")
        assert dest.name == src.name
        mine = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file()) \
            if src.is_dir() else [None]
        theirs = sorted(p.relative_to(dest) for p in dest.rglob("*") if p.is_file()) \
            if dest.is_dir() else [None]
        assert mine == theirs
        for rel in mine:
            a, b = (src, dest) if rel is None else (src / rel, dest / rel)
            assert a.read_bytes() == b.read_bytes()
    assert pack_program(None) is None and unpack_program(None, tmp_path) is None


@pytest.mark.slow
def test_cli_reaches_an_existing_cluster_by_address(tmp_path, local_ray):
    path, _ = _samples(tmp_path, "ne16", n=5)
    address = local_ray.get_runtime_context().gcs_address
    assert address.startswith("127.0.0.1:")
    cli = [sys.executable, "-m", "accelstub.stub.cli", "eval", "ne16", "--inputs", str(path),
           "--out", str(tmp_path / "r.npz")]
    p = subprocess.run(cli + ["--ray", address], capture_output=True, text=True,
                       env=os.environ | RAY_ENV, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "ne16: 5/5 samples" in p.stdout and "eval: 5/5 samples" in p.stdout
    whole = evaluate("ne16", path, workers=1)
    assert np.array_equal(np.load(tmp_path / "r.npz")["outputs"], whole.outputs)


def test_without_ray_the_flag_names_the_extra(tmp_path):
    path, _ = _samples(tmp_path, "ne16", n=2)
    code = ("import sys; sys.modules['ray'] = None  # as if not installed\n"
            "from accelstub.stub.cli import main\n"
            f"sys.exit(main(['eval', 'ne16', '--inputs', {str(path)!r}, '--ray']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        f"accelstub: error: --ray needs Ray, which is not installed: {EXTRA}"]
    assert EXTRA == "pip install 'accelstub[cluster]'"


@pytest.mark.slow
def test_ethos_u85_litert_reference_runs_in_the_actors(tmp_path, local_ray):
    from accelstub.testkit.ethosu85_models import RELU, SAME, Graph, compile_with_vela

    g = Graph("small", 7)
    x = g.input("input", (1, 16, 16, 8))
    g.output(g.conv(g.conv(x, 8, (3, 3), (1, 1), SAME, RELU), 4, (3, 3), (2, 2), SAME, RELU))
    src = tmp_path / "small.tflite"
    src.write_bytes(g.to_tflite())
    prog = compile_with_vela(src, tmp_path / "vela")
    xs = np.random.default_rng(6).integers(-128, 128, (5, 16, 16, 8)).astype(np.int8)
    np.save(tmp_path / "x.npy", xs)
    pool = evaluate("ethos-u85", tmp_path / "x.npy", prog, reference=src, workers=2)
    on_ray = evaluate("ethos-u85", tmp_path / "x.npy", prog, reference=src, ray=True,
                      out=tmp_path / "r.npz")
    assert on_ray.complete and pool.complete
    assert np.array_equal(on_ray.outputs, pool.outputs)
    assert np.array_equal(on_ray.reference, pool.reference)  # LiteRT's, computed in the actors
    assert len({pool.reference[i].tobytes() for i in range(5)}) == 5
    assert np.array_equal(np.load(tmp_path / "r.npz")["exact"], pool.exact)
