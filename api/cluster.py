"""``accelstub eval --ray [ADDRESS]`` / ``evaluate(..., ray=ADDRESS)`` (issue 30 #3): the local
pool's evaluation on a Ray cluster. Ray is an optional extra (``accelstub[cluster]``) and is
imported only here, only when asked for.

The same shape as the local pool (api/evaluation.py), so results are bit for bit the same: one
actor per CPU holds one warm :class:`~accelstub.evaluation.Evaluator` (a Session with the program
loaded once), tasks are the same index chunks, and the driver writes each returned chunk into
the same ``outputs``/``done`` arrays (memory-mapped in ``OUT.partial/`` with ``out``), so
progress, ^C and ``resume`` behave as they do locally. A cluster's nodes need not share a file
system: the program's files travel as bytes through the object store and each actor writes them
to its own temporary directory; the samples are one numpy array in the object store, which
every actor on a node maps read-only without a copy.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from accelstub.devices.errors import AccelstubError

from .evaluation import Evaluator, Samples, _chunks

#: what to install for ``--ray``
EXTRA = "pip install 'accelstub[cluster]'"
#: chunks queued per actor: one running, one waiting, so an actor never idles on a round trip
IN_FLIGHT = 2

#: a program as it travels: its name and {path relative to its parent: bytes}
Packed = tuple[str, dict[str, bytes]]


class ClusterError(AccelstubError, RuntimeError):
    """Ray is not installed, the cluster cannot be reached, or an actor failed (one line)."""


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ClusterError(f"--ray needs Ray, which is not installed: {EXTRA}") from None
    return ray


def pack_program(program: str | Path | None) -> Packed | None:
    """The program's files as bytes (a directory with everything under it, or the one file;
    None: the bundled demo, which every node has installed)."""
    if program is None:
        return None
    p = Path(program).absolute()
    files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    return p.name, {str(f.relative_to(p.parent)): f.read_bytes() for f in files}


def unpack_program(packed: Packed | None, where: Path) -> Path | None:
    """Write ``packed`` under ``where``; the path to load (None: the bundled demo)."""
    if packed is None:
        return None
    name, files = packed
    for rel, data in files.items():
        f = where / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
    return where / name


class EvalActor:
    """One warm emulator on a cluster node (wrapped by ``ray.remote`` when used): the program
    materialised in a temporary directory, the samples the object store's array."""

    def __init__(self, device: str, program: Packed | None, options: dict,
                 inputs: np.ndarray, reference_model: Packed | None = None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="accelstub-ray-")
        tmp = Path(self._tmp.name)
        model = unpack_program(reference_model, tmp / "reference")
        self.evaluator = Evaluator(device, unpack_program(program, tmp / "program"), options,
                                   model)
        self.inputs = inputs

    def run(self, indices: list[int]) -> tuple[list[int], np.ndarray, np.ndarray | None]:
        return (indices, *self.evaluator.run_chunk(self.inputs, indices))


def _one_line(e: BaseException) -> str:
    lines = [s.strip() for s in str(e).splitlines() if s.strip()]
    return lines[-1] if lines else type(e).__name__


def run_on_ray(address: str | bool, device: str, program: str | Path | None, options: dict,
               samples: Samples, todo: np.ndarray, workers: int | None, outputs: np.ndarray,
               done: np.ndarray, progress, n: int, reference_model: str | None = None,
               ref_out: np.ndarray | None = None) -> None:
    """Run samples ``todo`` on Ray, writing ``outputs``/``done`` (and, with Ethos-U85's
    ``reference_model``, LiteRT's outputs ``ref_out``) as chunks come back.
    ``address``: "auto", "ray://HOST:10001", a GCS "HOST:PORT", or True/"" for Ray's default
    (RAY_ADDRESS, else a cluster started on this machine, else a new local one). A driver
    already connected (``ray.init`` done by the caller) is used as it is. ``workers``: actors
    (default and at most: the cluster's CPUs, so none waits for a CPU that never comes)."""
    ray = _import_ray()
    started = not ray.is_initialized()
    if started:
        where = None if address is True or address == "" else str(address)
        try:
            ray.init(address=where)
        except Exception as e:  # ConnectionError, ValueError for a malformed address, ...
            raise ClusterError(f"--ray{' ' + where if where else ''}: cannot start or reach "
                               f"Ray: {_one_line(e)}") from None
    actors: list = []
    try:
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        count = max(1, min(workers or cpus, cpus, len(todo)))
        if samples.files is None:
            data = np.asarray(samples.array)  # an ndarray view of the mapped file
        else:
            data = np.stack([samples[i] for i in range(len(samples))])
        program_ref, data_ref = ray.put(pack_program(program)), ray.put(data)
        model_ref = ray.put(pack_program(reference_model))
        del data
        # one CPU per actor, so numba's parallel kernels get one thread each (as the local
        # pool's workers get cores // workers: evaluation.worker_threads), unless the user set it
        threads = {} if "NUMBA_NUM_THREADS" in os.environ else {"NUMBA_NUM_THREADS": "1"}
        actor_class = ray.remote(num_cpus=1, runtime_env={"env_vars": threads})(EvalActor)
        actors = [actor_class.remote(device, program_ref, options, data_ref, model_ref)
                  for _ in range(count)]
        chunks = _chunks(todo, count)
        pending: dict = {}

        def submit(actor) -> None:
            chunk = next(chunks, None)
            if chunk is not None:
                pending[actor.run.remote(chunk)] = actor

        for actor in actors:
            for _ in range(IN_FLIGHT):
                submit(actor)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            actor = pending.pop(ready[0])
            try:
                idx, outs, refs = ray.get(ready[0])
            except ray.exceptions.RayError as e:
                raise ClusterError(f"a Ray actor of {device} failed: {_one_line(e)}") from None
            outputs[idx] = outs
            if refs is not None:
                ref_out[idx] = refs
            done[idx] = True
            submit(actor)
            if progress:
                progress(int(done.sum()), n)
    finally:
        for actor in actors:
            ray.kill(actor)
        if started:
            ray.shutdown()
