"""Hardware-exact results over a whole dataset (issue 30): every sample through the emulator,
the program loaded once per worker, top-1 accuracy against labels and bit-exact agreement with
a framework's outputs. ``accelstub eval`` (stub/cli.py) is a thin layer over :func:`evaluate`
(``accelstub.evaluate``; the module is not named evaluate, so that importing it never turns the
package's ``evaluate`` into a module).

How a sample gets in: loading a program runs its driver up to its first wait (docs/design-notes.md
"Host programs"), so the program's own input is in memory and the device sits before unit 0. The
network's input is the "input" tensor of the first unit that declares one, its output the
"output" of the last (devices/device.py, unit_tensors), so no device has a case here. Per sample the
worker rewinds to that armed state (RunControl.checkpoint/rewind: registers, model state, the
driver's position and only the memory a run writes, learnt from one warm-up run), writes the
sample over the program's input and continues to the end.

Workers are processes of the 'spawn' context (numba's threads and fork do not mix), each with
one warm Session; DATA is memory-mapped in each (an .npz is unpacked once to a temporary .npy),
so a task carries only indices. Results stream into ``OUT.partial/`` (outputs.npy and done.npy,
memory-mapped), so ^C keeps what is done and ``resume=True`` continues it.
"""
from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from accelstub.devices.errors import AccelstubError, TargetError
from accelstub.devices.ethos_u85.litert import open_litert
from accelstub.devices.ranges import merge_ranges
from accelstub.devices.tensors import (
    WRITE_MERGE_GAP,
    TensorSpec,
    read_tensor,
    tensor_gather,
    write_tensor,
)

#: seconds one sample may take before it is a Timeout
SAMPLE_TIMEOUT = 600.0


class DataError(AccelstubError, ValueError):
    """DATA, labels or a reference that does not fit the program (the message names the file)."""


# -- samples -----------------------------------------------------------------------------------
class Samples:
    """The samples of DATA, read lazily: an .npy memory-mapped (one copy in the page cache for
    every worker), or a directory of .npy files, one sample each (sorted by name)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            self.files: list[Path] | None = sorted(self.path.glob("*.npy"))
            if not self.files:
                raise DataError(f"{self.path}: a directory without .npy files")
            self.array = None
            first = _np_load(self.files[0])
            self.shape, self.dtype = (len(self.files),) + first.shape, first.dtype
        else:
            self.files = None
            self.array = _np_load(self.path, mmap=True)
            self.shape, self.dtype = self.array.shape, self.array.dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, i: int) -> np.ndarray:
        if self.files is None:
            return np.asarray(self.array[i])
        x = _np_load(self.files[i])
        if x.shape != self.shape[1:] or x.dtype != self.dtype:
            raise DataError(f"{self.files[i]}: {x.shape} {x.dtype}, the first sample is "
                            f"{self.shape[1:]} {self.dtype}")
        return x


def _np_load(path: Path, mmap: bool = False) -> np.ndarray:
    try:
        obj = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: cannot read it as .npy/.npz ({e})") from None
    if isinstance(obj, np.lib.npyio.NpzFile):
        with obj:
            names = obj.files
            if len(names) != 1 and "outputs" not in names and "inputs" not in names:
                raise DataError(f"{path}: an .npz with {len(names)} arrays "
                                f"({', '.join(names)}); give one array, or one named 'inputs'")
            return obj["inputs" if "inputs" in names else
                       "outputs" if "outputs" in names else names[0]]
    return obj


def _shared(path: Path, tmp: Path) -> Path:
    """A path every worker can memory-map: an .npz (not mappable) is unpacked once."""
    if path.is_dir() or path.suffix != ".npz":
        return path
    out = tmp / "inputs.npy"
    np.save(out, _np_load(path))
    return out


def sample_shapes(spec: TensorSpec) -> tuple[tuple[int, ...], ...]:
    """The sample shapes DATA may hold for input ``spec``: its shape, and that with or without
    the batch axis of 1."""
    if "N" in spec.layout:
        n = spec.layout.index("N")
        return spec.shape, spec.shape[:n] + spec.shape[n + 1:]
    return spec.shape, (1,) + spec.shape


def check_data(samples: Samples, spec: TensorSpec) -> None:
    """One line naming the file and the shape the program expects, for DATA that cannot be the
    program's input."""
    want = " or ".join(f"(N, {', '.join(map(str, s))})" for s in sample_shapes(spec))
    if samples.shape[1:] not in sample_shapes(spec):
        raise DataError(f"{samples.path}: samples of shape {samples.shape[1:]}; the program's "
                        f"input is {spec.shape} {spec.layout} {spec.dtype}, so DATA must be "
                        f"{want}")
    if samples.dtype.kind not in "iub":
        raise DataError(f"{samples.path}: dtype {samples.dtype}; the program's input is "
                        f"{spec.dtype} (quantize the samples with the input's scale and zero "
                        "point first)")


# -- one warm emulator -------------------------------------------------------------------------
class Evaluator:
    """One Session with the program loaded once, run per sample from its armed state."""

    def __init__(self, device: str, program: str | Path | None,
                 options: dict[str, object] | None = None,
                 reference_model: str | Path | None = None) -> None:
        from .session import Session

        #: LiteRT on the pre-Vela model, run beside the emulator (None without one); first,
        #: so that a missing LiteRT is refused before the emulator starts
        self.litert = LiteRTReference(reference_model) if reference_model is not None else None
        # no reverse-execution history: nothing steps back in a dataset run, and recording
        # one cost every sample (NVDLA's demo 9.7 ms against 0.7 ms, Ethos-U85's 4.6 against
        # 2.1) and the first run ~4 s compiling its kernels (emu/memory/ranges.py)
        self.session = s = Session.open(device, program, history_mib=0, **(options or {}))
        self.input, self.output = self._program_io()
        # where the output's bytes are, found once (~0.25 ms of a NE16 demo sample's ~0.7 ms)
        self._gather = tensor_gather(self.output)
        rc = s.backend.rc
        armed = rc.checkpoint()
        self._finish()  # the warm-up run: what a run writes, and kernels compiled
        written = [r for _, writes in (rc.host.history if rc.host else ()) for r in writes]
        rc.rewind(armed)
        # the input's elements less than WRITE_MERGE_GAP apart as one range: the MAX78000
        # demo's 3 of every 4 bytes were 256 ranges to put back per sample (0.45 ms a rewind)
        self._armed = rc.checkpoint(merge_ranges(written + self.input.ranges(WRITE_MERGE_GAP))) \
            if rc.host is not None else armed

    def _program_io(self) -> tuple[TensorSpec, TensorSpec]:
        """The program's input and output (Device.program_io: no device has a case here)."""
        s = self.session
        ins, outs = s.backend.device.program_io()
        for name, specs in (("input", ins), ("output", outs)):
            if not specs:
                raise TargetError(f"{s.device}: {s.program} declares no {name} tensor (at its "
                                  f"{'first' if name == 'input' else 'last'} unit with "
                                  "tensors), so samples cannot be placed and read")
        if len(ins) > 1:
            raise TargetError(f"{s.device}: {s.program} has {len(ins)} inputs "
                              f"({', '.join(t.name for t in ins)}); eval feeds one")
        return ins[0], outs[0]

    def _finish(self) -> None:
        stop = self.session.cont(timeout=SAMPLE_TIMEOUT)
        if stop.reason != "done":
            raise TargetError(f"the program stopped with {stop.reason}: {stop.message}")

    def run(self, sample: np.ndarray) -> np.ndarray:
        """The program's output for ``sample`` (its input, with or without the batch axis)."""
        s = self.session
        s.backend.rc.rewind(self._armed)
        write_tensor(self.input, np.asarray(sample).reshape(self.input.shape), s.write_memory,
                     s.read_memory)
        self._finish()
        return read_tensor(self.output, s.read_memory, self._gather)

    def run_chunk(self, samples: Samples, indices: list[int]
                  ) -> tuple[np.ndarray, np.ndarray | None]:
        """The outputs of samples ``indices`` and, with a reference model, its outputs."""
        outs = np.stack([self.run(samples[i]) for i in indices])
        refs = None if self.litert is None else \
            np.stack([self.litert(samples[i]) for i in indices])
        return outs, refs

    def close(self) -> None:
        self.session.close()


class LiteRTReference:
    """The pre-Vela .tflite run by LiteRT with its reference kernels (OpResolverType.BUILTIN_REF,
    the kernels TFLM runs on the Cortex-M; LiteRT's default XNNPACK path is not bit-exact with
    them): Ethos-U85's reference per sample, one warm interpreter per worker (LiteRT is
    imported only when one is opened: devices/ethos_u85/litert.py)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise DataError(f"{self.path}: no such file")
        try:
            it = open_litert(self.path)
        except (ImportError, ValueError) as e:
            raise DataError(str(e)) from None
        ins, outs = it.get_input_details(), it.get_output_details()
        if len(ins) != 1:
            raise DataError(f"{self.path}: a model with {len(ins)} inputs; eval feeds one")
        self.it, self.inp, self.out = it, ins[0], outs[0]
        self.shape = tuple(int(v) for v in self.out["shape"])
        self.dtype = np.dtype(self.out["dtype"])

    def __call__(self, sample: np.ndarray) -> np.ndarray:
        x = np.asarray(sample).reshape(self.inp["shape"]).astype(self.inp["dtype"])
        self.it.set_tensor(self.inp["index"], x)
        self.it.invoke()
        return self.it.get_tensor(self.out["index"])


# -- results -----------------------------------------------------------------------------------
@dataclass
class EvalResults:
    """The outputs of every sample run so far and what they say. ``outputs`` is N x the output's
    shape (the toolchain's layout); ``done[i]`` says whether sample i ran; ``complete`` is
    False after an interruption (^C): ``evaluate(..., resume=True)`` continues it."""

    device: str
    outputs: np.ndarray
    done: np.ndarray
    labels: np.ndarray | None = None
    reference: np.ndarray | None = None
    seconds: float = 0.0
    complete: bool = True

    @property
    def count(self) -> int:
        return int(self.done.sum())

    @property
    def top1(self) -> np.ndarray:
        """argmax over each flattened output (-1 for a sample not run)."""
        flat = np.asarray(self.outputs).reshape(len(self.done), -1)
        return np.where(self.done, flat.argmax(axis=1), -1)

    @property
    def correct(self) -> np.ndarray | None:
        """Per sample: top-1 equals the label (None without labels)."""
        return None if self.labels is None else self.done & (self.top1 == self.labels)

    @property
    def accuracy(self) -> float | None:
        """Top-1 accuracy over the samples run (None without labels)."""
        return None if self.labels is None or not self.count else \
            float(self.correct.sum() / self.count)

    @property
    def exact(self) -> np.ndarray | None:
        """Per sample: bit-exact equal to the reference (None without one)."""
        if self.reference is None:
            return None
        n = len(self.done)
        mine = np.asarray(self.outputs).reshape(n, -1)
        return self.done & np.all(mine == self.reference.reshape(n, -1), axis=1)

    @property
    def top1_agree(self) -> np.ndarray | None:
        """Per sample: the same top-1 as the reference (None without one)."""
        if self.reference is None:
            return None
        ref = self.reference.reshape(len(self.done), -1).argmax(axis=1)
        return self.done & (self.top1 == ref)

    @property
    def differing(self) -> np.ndarray:
        """Indices of samples run whose output is not bit-exact the reference's."""
        if self.reference is None:
            return np.zeros(0, dtype=np.int64)
        return np.nonzero(self.done & ~self.exact)[0]

    def summary(self) -> str:
        """What ``accelstub eval`` prints."""
        n, k = len(self.done), self.count
        rate = k / self.seconds if self.seconds else 0.0
        lines = [f"{self.device}: {k}/{n} samples" + ("" if self.complete else " (stopped)")
                 + f", {self.seconds:.1f} s, {rate:.1f} samples/s"]
        if self.labels is not None and k:
            lines.append(f"top-1 accuracy {self.accuracy:.4f} ({int(self.correct.sum())}/{k})")
        if self.reference is not None and k:
            d = self.differing
            lines.append(f"bit-exact with the reference {k - len(d)}/{k}, top-1 agreement "
                         f"{int(self.top1_agree.sum())}/{k}")
            if len(d):
                shown = ", ".join(map(str, d[:20])) + (", ..." if len(d) > 20 else "")
                lines.append(f"differing samples ({len(d)}): {shown}")
        return "\n".join(lines)

    def save(self, path: str | Path) -> None:
        """An .npz: ``outputs``, ``done``, ``top1`` and, with labels or a reference, ``labels``,
        ``correct``, ``exact``, ``top1_agree``, ``differing``."""
        arrays = {"outputs": np.asarray(self.outputs), "done": np.asarray(self.done),
                  "top1": self.top1}
        if self.labels is not None:
            arrays |= {"labels": self.labels, "correct": self.correct}
        if self.reference is not None:
            arrays |= {"exact": self.exact, "top1_agree": self.top1_agree,
                       "differing": self.differing}
        tmp = Path(str(path) + ".tmp.npz")
        np.savez(tmp, **arrays)
        os.replace(tmp, path)


def _labels(path: str | Path | None, n: int) -> np.ndarray | None:
    if path is None:
        return None
    lab = _np_load(Path(path))
    if lab.shape != (n,) or lab.dtype.kind not in "iu":
        raise DataError(f"{path}: labels {lab.shape} {lab.dtype}; expected ({n},) integers, "
                        "one class index per sample")
    return np.asarray(lab, dtype=np.int64)


def _reference(path: str | Path | None, n: int, shape: tuple[int, ...]) -> np.ndarray | None:
    if path is None:
        return None
    ref = _np_load(Path(path))
    size = int(np.prod(shape))
    if ref.ndim < 1 or ref.shape[0] != n or ref[0].size != size:
        raise DataError(f"{path}: reference outputs {ref.shape}; expected ({n}, "
                        f"{', '.join(map(str, shape))}) (array 'outputs', one row per sample)")
    return np.asarray(ref)


# -- running -----------------------------------------------------------------------------------
_WORKER: tuple[Evaluator, Samples] | None = None


def _worker_init(device: str, program: str | None, options: dict, data: str,
                 reference_model: str | None = None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the pool on ^C
    global _WORKER
    _WORKER = (Evaluator(device, program, options, reference_model), Samples(data))


def _worker_run(indices: list[int]) -> tuple[list[int], np.ndarray, np.ndarray | None]:
    ev, samples = _WORKER  # type: ignore[misc]
    return (indices, *ev.run_chunk(samples, indices))


def _chunks(todo: np.ndarray, workers: int) -> Iterator[list[int]]:
    size = int(max(1, min(32, len(todo) // (workers * 4))))
    for i in range(0, len(todo), size):
        yield [int(x) for x in todo[i:i + size]]


def evaluate(device: str, inputs: str | Path, program: str | Path | None = None, *,
             labels: str | Path | None = None, reference: str | Path | None = None,
             out: str | Path | None = None, workers: int | None = None, resume: bool = False,
             progress: Callable[[int, int], None] | None = None,
             ray: str | bool | None = None,
             **device_options: object) -> EvalResults:
    """Run every sample of ``inputs`` (an .npy/.npz whose first axis counts the samples, or a
    directory of .npy files) through ``program`` on ``device`` (None: the bundled demo), with
    ``workers`` processes (default: every core; 1 runs here). ``labels``: an .npy of class
    indices; ``reference``: an .npz whose ``outputs`` are the framework's, N x the output shape,
    or (Ethos-U85) the pre-Vela .tflite, run per sample in the workers by LiteRT's reference
    kernels (:class:`LiteRTReference`; needs ai-edge-litert).
    With ``out`` the results stream to ``OUT.partial/`` and end in the .npz ``out``;
    ``resume`` continues a stopped run there. ``progress(done, total)`` is called as samples
    finish; ^C (a KeyboardInterrupt, also one ``progress`` raises) stops cleanly and returns
    the results so far with ``complete`` False. ``ray``: run on a Ray cluster instead
    ("auto", "ray://HOST:10001", or True for Ray's default; ``workers`` then counts actors,
    default the cluster's CPUs; api/cluster.py), with the same results."""
    asked, workers = workers, max(1, workers or os.cpu_count() or 1)
    model = None if reference is None or Path(reference).suffix != ".tflite" else str(reference)
    local = Evaluator(device, program, device_options, model)
    try:
        samples = Samples(inputs)
        check_data(samples, local.input)
        n, shape = len(samples), local.output.shape
        lab = _labels(labels, n)
        ref = None if model is not None else _reference(reference, n, shape)
        lite = local.litert
        if lite is not None and int(np.prod(lite.shape)) != int(np.prod(shape)):
            raise DataError(f"{reference}: the model's output is {lite.shape}, the program's "
                            f"{shape}: not the model Vela compiled into the program")
        outputs, done, ref_out, partial = _storage(
            out, resume, device, samples, shape, local.output.dtype,
            None if lite is None else (lite.shape, lite.dtype.name))
        ref = ref if ref_out is None else ref_out
        todo = np.nonzero(~np.asarray(done))[0]
        t0 = time.perf_counter()
        complete = True
        try:
            if ray is not None and len(todo):  # the same chunks on Ray actors
                from .cluster import run_on_ray
                run_on_ray(ray, device, program, device_options, samples, todo, asked,
                           outputs, done, progress, n, model, ref_out)
            elif workers == 1 or len(todo) <= 1:
                for i in todo:
                    outs, refs = local.run_chunk(samples, [int(i)])
                    outputs[i] = outs[0]
                    if refs is not None:
                        ref_out[i] = refs[0]
                    done[i] = True
                    if progress:
                        progress(int(done.sum()), n)
            else:
                _pool(device, program, device_options, Path(inputs), todo, workers,
                      outputs, done, progress, n, model, ref_out)
        except KeyboardInterrupt:
            complete = False
        seconds = time.perf_counter() - t0
        if partial is not None:
            outputs.flush(), done.flush()
            if ref_out is not None:
                ref_out.flush()
        res = EvalResults(device, outputs, done, lab, ref, seconds, complete and bool(done.all()))
        if out is not None and res.complete:
            res.outputs, res.done = np.array(outputs), np.array(done)
            if ref_out is not None:
                res.reference = np.array(ref_out)
            del outputs, done, ref, ref_out
            res.save(out)
            shutil.rmtree(partial, ignore_errors=True)
        return res
    finally:
        local.close()


@contextlib.contextmanager
def worker_threads(workers: int) -> Iterator[None]:
    """Processes started inside get NUMBA_NUM_THREADS = cores // ``workers`` (at least 1),
    unless the user set it. Why: numba's parallel kernels (emu/conv/int_conv.py) use every
    core by default, so one worker of a large network already keeps ~1.5 of 2 cores busy and
    two such workers oversubscribe the machine (bench_eval.py: MNIST shapes went no faster with
    2 workers than with 1). numba reads the variable when it is imported, so it is set in the
    environment the spawned workers inherit, only while they start (this process's own numba
    is left as it is)."""
    if "NUMBA_NUM_THREADS" in os.environ:
        yield
        return
    os.environ["NUMBA_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    try:
        yield
    finally:
        os.environ.pop("NUMBA_NUM_THREADS", None)


def _pool(device: str, program, options: dict, inputs: Path, todo: np.ndarray, workers: int,
          outputs: np.ndarray, done: np.ndarray, progress, n: int,
          reference_model: str | None = None, ref_out: np.ndarray | None = None) -> None:
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="accelstub-eval-") as tmp:
        data = _shared(inputs, Path(tmp))
        with worker_threads(workers):
            pool = ctx.Pool(workers, _worker_init,
                            (device, None if program is None else str(program), options,
                             str(data), reference_model))
        try:
            for idx, outs, refs in pool.imap_unordered(_worker_run, _chunks(todo, workers)):
                outputs[idx] = outs
                if refs is not None:
                    ref_out[idx] = refs
                done[idx] = True
                if progress:
                    progress(int(done.sum()), n)
            pool.close()
        except BaseException:
            pool.terminate()
            raise
        finally:
            pool.join()


def _storage(out, resume: bool, device: str, samples: Samples, shape: tuple[int, ...],
             dtype: str, ref_like: tuple[tuple[int, ...], str] | None = None):
    """(outputs, done, reference outputs, partial directory): memory-mapped in OUT.partial/
    with ``out``, else in memory. ``ref_like``: (shape, dtype) of a reference model's output,
    computed beside the emulator's (None: no such array)."""
    n = len(samples)
    if out is None:
        return (np.zeros((n,) + shape, dtype), np.zeros(n, bool),
                None if ref_like is None else np.zeros((n,) + ref_like[0], ref_like[1]), None)
    partial = Path(str(out) + ".partial")
    meta = {"device": device, "inputs": str(Path(samples.path).absolute()), "n": n,
            "shape": list(shape), "dtype": dtype}
    if ref_like is not None:
        meta["reference"] = [list(ref_like[0]), ref_like[1]]
    if resume and (partial / "meta.json").exists():
        old = json.loads((partial / "meta.json").read_text())
        if old != meta:
            raise DataError(f"{partial}: a stopped run of {old['device']} over {old['inputs']} "
                            f"({old['n']} samples); it cannot be resumed with these arguments")
        return (np.load(partial / "outputs.npy", mmap_mode="r+"),
                np.load(partial / "done.npy", mmap_mode="r+"),
                None if ref_like is None else np.load(partial / "reference.npy", mmap_mode="r+"),
                partial)
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    (partial / "meta.json").write_text(json.dumps(meta))
    outputs = np.lib.format.open_memmap(partial / "outputs.npy", "w+", dtype, (n,) + shape)
    done = np.lib.format.open_memmap(partial / "done.npy", "w+", bool, (n,))
    ref = None if ref_like is None else np.lib.format.open_memmap(
        partial / "reference.npy", "w+", ref_like[1], (n,) + ref_like[0])
    return outputs, done, ref, partial


class Progress:
    """The CLI's progress: a bar with samples/s and ETA on a terminal, a plain line every
    ``every`` seconds otherwise (CI logs)."""

    def __init__(self, stream=None, every: float = 5.0) -> None:
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.every = every
        self.t0 = time.perf_counter()
        self.start: int | None = None
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter() - self.t0
        if self.start is None:
            self.start = done - 1  # samples already done (resume) do not count in the rate
        rate = (done - self.start) / now if now > 0 else 0.0
        eta = (total - done) / rate if rate else 0.0
        if self.tty:
            bar = "#" * (30 * done // total)
            self.stream.write(f"\r[{bar:<30}] {done}/{total} {rate:.1f} samples/s "
                              f"ETA {eta:.0f} s ")
            if done == total:
                self.stream.write("\n")
        elif now - self.last >= self.every or done == total:
            self.last = now
            self.stream.write(f"eval: {done}/{total} samples, {rate:.1f} samples/s, "
                              f"ETA {eta:.0f} s\n")
        self.stream.flush()
