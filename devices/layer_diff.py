"""Per-layer comparison with a framework's own tensors (issue 27): what a reference for one unit
is, so that every reference reader (a generic .npz, ai8xize's log.txt, LiteRT running the
pre-Vela .tflite, pulp-nnx's golden output, an NVDLA trace) hands the comparison the same thing.

A reader turns the user's file into a list of :class:`LayerReference`, one per unit it has a
tensor for; the comparison reads that unit's declared tensor (devices/tensors.py) after the unit
ran and compares the two arrays element by element.
"""
from __future__ import annotations

import io
import weakref
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .device import Stop, unit_indices
from .errors import AccelstubError, DeviceError
from .files import FileRefused, mib, read_bounded
from .tensors import read_tensor, tensor_gather

if TYPE_CHECKING:
    from .device import Device
    from .runcontrol import RunControl
    from .tensors import TensorSpec


@dataclass
class LayerReference:
    """What the framework computed for one unit's tensor.

    ``unit``: the unit (layer, NPU operation, job) whose tensor this is. ``name``: the
    reference's own name for it (a TFLite tensor name, ``layer 3`` of log.txt, an .npz key), shown
    in each diff line. ``array``: the framework's values in the layout and shape of the unit's
    declared tensor (``TensorSpec.layout``/``shape``), so the reader, not the comparison, converts
    layouts. ``tensor``: which declared tensor of the unit it is compared with.

    ``explain``: for differences the hardware makes on purpose (issue 27 point 4):
    given (device array, reference array), a boolean mask of the differing elements that ``rule``
    explains; those are reported as explained, never as divergences, and never hidden.
    ``crc``: a reference that is only a checksum (an NVDLA trace's per-layer CRC) gives ``array``
    None and compares ``crc(device array)`` with this value.
    ``part``: for a unit the hardware runs in parts (NE16's output subtiles): given the mask of
    the differences reported first (unexplained ones, else the explained), the part of the unit
    that holds the first of them in the order the hardware runs the parts (e.g. "subtile 3
    (Ko 0, Ho 1, Wo 0)"), shown in the line and the JSON."""

    unit: int
    name: str
    array: np.ndarray | None
    tensor: str = "output"
    explain: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    rule: str = ""
    crc: tuple[Callable[[np.ndarray], int], int] | None = None
    part: Callable[[np.ndarray], str] | None = None


class ReferenceFileError(ValueError, AccelstubError):
    """A reference file that cannot be used; the message is one line naming the file (and the
    key or line inside it). A ValueError, as every importer error is."""


#: largest reference file read (an .npz of every layer's tensors, a log.txt of printed arrays)
MAX_REFERENCE = 256 << 20


@dataclass
class LayerDiff:
    """The comparison of one unit's tensor with its reference (issue 27 point 1).

    ``differing``: elements that differ, explained ones included (None: a checksum reference,
    which cannot count them); ``explained``: how many of those ``rule`` explains (point 4:
    reported, never hidden, never a divergence); ``first_index``: the first differing element
    no rule explains (else the first explained one), in the framework's coordinates -- the
    index into the unit tensor's declared layout (NHWC, CHW, HWC ...); ``crc``: (expected,
    got) for a checksum reference."""

    index: int
    label: str
    reference: str
    tensor: str
    layout: str
    shape: tuple[int, ...]
    differing: int | None
    max_abs_diff: int | float | None  # float for a float tensor
    first_index: tuple[int, ...] | None
    explained: int = 0
    rule: str = ""
    crc: tuple[int, int] | None = None
    part: str = ""  # the part of the unit holding the first difference (LayerReference.part)

    @property
    def diverges(self) -> bool:
        """Whether the unit departs from its reference beyond what a rule explains."""
        if self.crc is not None:
            return self.crc[0] != self.crc[1]
        d = self.differing
        return d is not None and d != 0 and d > self.explained

    def line(self) -> str:
        """The one diff line of this unit (CLI, ``monitor diff``, the divergence stop)."""
        shape = "x".join(map(str, self.shape))
        head = (f"{self.index:>4}  {self.label:<14} ref {self.reference!r:<14} "
                f"{self.tensor} {shape} {self.layout}:")
        if self.crc is not None:
            want, got = self.crc
            return (f"{head} crc32 {got:#010x}, reference {want:#010x}"
                    + ("  DIVERGES" if want != got else "  equal"))
        if not self.differing:
            return f"{head} equal"
        text = (f"{head} {self.differing} differ, max |diff| {self.max_abs_diff}, first at "
                f"{self.first_index}" + (f" in {self.part}" if self.part else ""))
        if self.explained:
            text += (f"; {self.explained} explained by {self.rule}" if self.rule else
                     f"; {self.explained} explained")
        return text + ("  DIVERGES" if self.diverges else "")

    def as_json(self) -> dict[str, Any]:
        return {"index": self.index, "label": self.label, "reference": self.reference,
                "tensor": self.tensor, "layout": self.layout, "shape": list(self.shape),
                "differing": self.differing, "max_abs_diff": self.max_abs_diff,
                "first_index": None if self.first_index is None else list(self.first_index),
                "explained": self.explained, "rule": self.rule,
                "crc": None if self.crc is None else list(self.crc),
                "part": self.part or None, "diverges": self.diverges}


def compare(ref: LayerReference, spec: TensorSpec, got: np.ndarray, label: str) -> LayerDiff:
    """Compare the device's tensor ``got`` (in ``spec``'s layout) with ``ref``, element by
    element in int64 (no wrap-around can hide a difference)."""
    def result(**found: Any) -> LayerDiff:
        return LayerDiff(index=ref.unit, label=label, reference=ref.name, tensor=spec.name,
                         layout=spec.layout, shape=tuple(spec.shape), **found)

    if ref.crc is not None:
        fn, crc = ref.crc
        return result(differing=None, max_abs_diff=None, first_index=None,
                      crc=(int(crc), int(fn(got))))
    want = np.asarray(ref.array)
    if want.shape != got.shape:
        raise DeviceError(f"reference {ref.name!r}: shape {want.shape}, {label}'s {spec.name} "
                          f"is {got.shape} ({spec.layout})")
    diff: np.ndarray  # float64 or int64
    if np.issubdtype(got.dtype, np.floating) or np.issubdtype(want.dtype, np.floating):
        # a float tensor (an Ethos-U85 CPU operator's DEQUANTIZE/NEG output) compares exactly,
        # as floats: int64 would truncate a difference away; NaN differs from everything
        diff = got.astype(np.float64) - want.astype(np.float64)
        mask = got != want
        diff[mask & np.isnan(diff)] = np.inf
    else:
        diff = got.astype(np.int64) - want.astype(np.int64)
        mask = diff != 0
    n = int(np.count_nonzero(mask))
    if n == 0:
        return result(differing=0, max_abs_diff=0, first_index=None)
    explained = np.zeros_like(mask)
    if ref.explain is not None:
        explained = np.asarray(ref.explain(got, want), dtype=np.bool_) & mask
    open_ = mask & ~explained
    shown = open_ if open_.any() else mask
    first = np.argwhere(shown)[0]
    biggest = np.abs(diff).max()
    return result(differing=n, max_abs_diff=float(biggest)
                  if diff.dtype.kind == "f" else int(biggest),
                  first_index=tuple(int(i) for i in first),
                  explained=int(np.count_nonzero(explained)), rule=ref.rule,
                  part=ref.part(shown) if ref.part is not None else "")


def unit_spec(device: Device, ref: LayerReference) -> TensorSpec:
    """The declared tensor ``ref`` is compared with; DeviceError naming the unit if none."""
    for spec in device.unit_tensors(ref.unit):
        if spec.name == ref.tensor:
            return spec
    raise DeviceError(f"reference {ref.name!r}: {device.unit_name} {ref.unit} declares no "
                      f"tensor {ref.tensor!r}")


class LayerDiffer:
    """Compares units with their references as they run (run control's unit listener, see
    :meth:`attach`), and keeps the table so far. ``stop``: a unit that diverges stops the run
    after it (the divergence breakpoint of ``monitor diff load``); off with ``--all``."""

    def __init__(self, device: Device, references: list[LayerReference],
                 source: str = "", stop: bool = True) -> None:
        self.device = device
        self.source = source
        self.stop = stop
        self.by_unit: dict[int, list[LayerReference]] = {}
        for r in references:
            self.by_unit.setdefault(r.unit, []).append(r)
        self.results: list[LayerDiff] = []
        self._index: dict[int, int] = {}
        self._rc: RunControl | None = None
        # each referenced tensor's declaration and its unit's label, taken once before the
        # run: a declaration is the program's (it does not change as units run), and finding
        # it again after every unit cost more than the unit on Ethos-U85 (a stream decode)
        units = device.units()
        self._labels = {k: units[k].label for k in self.by_unit if k < len(units)}
        self._specs: dict[tuple[int, str],
                          tuple[TensorSpec, tuple[list[tuple[int, int]], np.ndarray]]] = {}
        for r in references:
            try:
                spec = unit_spec(device, r)
            except DeviceError:
                continue  # not declared yet (a unit not decoded): looked up when it has run
            self._specs[r.unit, r.tensor] = spec, tensor_gather(spec)

    @property
    def first_divergence(self) -> int | None:
        return next((d.index for d in self.results if d.diverges), None)

    def check_unit(self, index: int) -> list[LayerDiff]:
        """Compare unit ``index`` (which has just run) with its references."""
        dev = self.device
        label = self._labels.get(index) or f"{dev.unit_name} {index}"
        # a unit compared before runs again (the program started over: reset init): the
        # table starts over from it
        self.results = [d for d in self.results if d.index < index]
        out = []
        for ref in self.by_unit.get(index, ()):
            spec, gather = self._specs.get((index, ref.tensor)) or (unit_spec(dev, ref), None)
            out.append(compare(ref, spec, read_tensor(spec, dev.read, gather), label))
        self.results += out
        return out

    def reference(self, index: int, tensor: str = "output") -> LayerReference | None:
        """The reference of unit ``index``'s ``tensor`` (the TUI shows it beside the device's)."""
        return next((r for r in self.by_unit.get(index, ()) if r.tensor == tensor), None)

    def unit_index(self, pc: int) -> int | None:
        """The unit index of the pc a unit started at (program window or listing address)."""
        k = self.device.window_index(pc)
        if k is not None:
            return k
        if pc not in self._index:
            self._index = unit_indices(self.device.units())
        return self._index.get(pc)

    # -- on a run control ------------------------------------------------------------------
    def attach(self, rc: RunControl) -> None:
        """Compare after every unit ``rc`` runs (a unit listener: run control then runs unit
        by unit), and remember this differ as ``rc``'s (:func:`differ_of`)."""
        self.detach()
        self._rc = rc
        rc.add_unit_listener(self._after_unit)
        _DIFFERS[rc] = self

    def detach(self) -> None:
        if self._rc is not None:
            self._rc.remove_unit_listener(self._after_unit)
            if _DIFFERS.get(self._rc) is self:
                del _DIFFERS[self._rc]
            self._rc = None

    def _after_unit(self, done: int) -> Stop | None:
        rc = self._rc
        if rc is None or rc.last_touched is None or rc.last_touched.partial:
            return None
        index = self.unit_index(rc.last_unit_pc)
        if index is None or index not in self.by_unit:
            return None
        first = self.first_divergence
        found = self.check_unit(index)
        if self.stop and first is None:
            bad = next((d for d in found if d.diverges), None)
            if bad is not None:  # the divergence breakpoint: stop after this unit
                return Stop("breakpoint", message=f"accelstub: diff: {bad.label} diverges "
                            f"from {self.source or 'the reference'}:\n{bad.line()}")
        return None

    # -- reports ---------------------------------------------------------------------------
    def table(self) -> str:
        """One line per compared unit so far, then the summary line."""
        lines = [d.line() for d in self.results]
        compared = {d.index for d in self.results}
        first = self.first_divergence
        lines.append(f"{len(compared)} of {len(self.by_unit)} referenced "
                     f"{self.device.unit_name}s compared; "
                     + ("no divergence" if first is None else
                        f"first divergence at {self.device.unit_name} {first}"))
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        """The ``--json`` form (issue 27 point 1)."""
        return {"layers": [d.as_json() for d in self.results],
                "first_divergence": self.first_divergence}


#: the differ attached to each run control (``monitor diff load``), without a field on it
_DIFFERS: weakref.WeakKeyDictionary[RunControl, LayerDiffer] = weakref.WeakKeyDictionary()


def differ_of(rc: RunControl) -> LayerDiffer | None:
    return _DIFFERS.get(rc)


# -- the generic .npz ------------------------------------------------------------------------
def read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz, bounded (MAX_REFERENCE) and without pickles."""
    try:
        data = read_bounded(path, MAX_REFERENCE, f"{mib(MAX_REFERENCE)} for a reference")
    except FileRefused as e:
        raise ReferenceFileError(str(e)) from None
    except OSError as e:
        raise ReferenceFileError(f"{path}: cannot read: {e.strerror}") from None
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise ValueError("a single array (.npy), not an .npz of per-layer arrays")
            return {k: z[k] for k in z.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise ReferenceFileError(f"{path}: not a readable .npz: {e}") from None


def to_spec_layout(array: np.ndarray, layout: str, spec: TensorSpec, where: str) -> np.ndarray:
    """``array`` given in ``layout`` (letters of N, C, H, W) in the layout of ``spec``; a batch
    axis must be 1. Integers only: the device's tensors are quantized."""
    arr = np.asarray(array)
    if len(layout) != arr.ndim or not set("CHW") <= set(layout) or not set(layout) <= set("NCHW"):
        raise ReferenceFileError(f"{where}: an array of shape {arr.shape} cannot be in layout "
                                 f"{layout!r} (letters N, C, H, W, one per axis)")
    if "N" in layout:
        if arr.shape[layout.index("N")] != 1:
            raise ReferenceFileError(f"{where}: a batch of {arr.shape[layout.index('N')]}; "
                                     "give one sample (N = 1)")
        arr = np.take(arr, 0, axis=layout.index("N"))
        layout = layout.replace("N", "")
    chw = np.transpose(arr, [layout.index(a) for a in "CHW"])
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(chw)) or not np.all(chw == np.round(chw)):
            raise ReferenceFileError(f"{where}: values are not integers (compare quantized "
                                     "tensors: the integer values the device holds)")
        chw = chw.astype(np.int64)
    elif arr.dtype.kind not in "iub":
        raise ReferenceFileError(f"{where}: dtype {arr.dtype} is not a number")
    want = spec.from_layout(np.zeros(spec.shape, np.int8)).shape
    if chw.shape != want:
        raise ReferenceFileError(f"{where}: shape {np.asarray(array).shape} in {layout!r}, "
                                 f"the {spec.name} tensor is {spec.shape} ({spec.layout})")
    return spec.to_layout(chw.astype(np.int64))


def npz_references(device: Device, path: Path) -> list[LayerReference]:
    """The generic .npz (issue 27 point 2): one array per unit, its key the unit's index
    ("3") or label as ``units()`` lists it ("layer 3"), ``:input`` appended for a tensor other
    than "output" ("3:input"). Each array is in the layout of the unit's declared tensor, or
    in the layout an entry ``layout`` states for all of them (a string such as "NCHW" for
    PyTorch's tensors); a batch axis of 1 may be given or left out."""
    arrays = read_npz(path)
    layout = None
    if "layout" in arrays:
        layout = str(arrays.pop("layout"))
    units = device.units()
    by_label = {u.label: i for i, u in enumerate(units)}
    refs = []
    for key, arr in arrays.items():
        unit_key, _, tensor = key.partition(":")
        tensor = tensor or "output"
        if unit_key in by_label:
            index = by_label[unit_key]
        elif unit_key.isdigit() and int(unit_key) < len(units):
            index = int(unit_key)
        else:
            known = (f"an index 0..{len(units) - 1} or a label such as {units[0].label!r}"
                     if units else "the program lists none")
            raise ReferenceFileError(f"{path}: key {key!r} names no {device.unit_name} "
                                     f"({known})")
        ref = LayerReference(index, key, None, tensor)
        where = f"{path}: {key}"
        try:
            spec = unit_spec(device, ref)
        except DeviceError as e:
            raise ReferenceFileError(f"{path}: {e}") from None
        lay = layout or spec.layout
        if layout is None and arr.ndim == len(spec.layout) - 1 and "N" in spec.layout:
            lay = spec.layout.replace("N", "")  # the batch axis left out
        ref.array = to_spec_layout(arr, lay, spec, where)
        refs.append(ref)
    if not refs:
        raise ReferenceFileError(f"{path}: no arrays")
    return sorted(refs, key=lambda r: r.unit)


def input_tensors(device: Device) -> list[np.ndarray]:
    """The program's input tensors as they are in memory now (Device.program_io), for the
    readers that run the framework themselves (Device.layer_references)."""
    return [read_tensor(s, device.read) for s in device.program_io()[0]]


def start_diff(rc: RunControl, path: Path, stop: bool = True) -> LayerDiffer:
    """Read the reference file ``path`` for ``rc``'s device and its loaded program (the
    device's reader, Device.layer_references, given the program's inputs as they are now,
    before the run) and compare every later unit with it (``stop``: halt after the first
    that diverges). Replaces an earlier diff of ``rc``. Errors: ReferenceFileError (one line
    naming the file), TargetRunning."""
    with rc.halted_access("diff load") as dev:
        try:
            refs = dev.layer_references(Path(path), input_tensors(dev))
        except ReferenceFileError:
            raise
        except (ValueError, OSError) as e:  # a reader's own error type: still one line
            raise ReferenceFileError(str(e) if str(path) in str(e) else f"{path}: {e}") from None
        if not refs:
            raise ReferenceFileError(f"{path}: no tensor in it matches a {dev.unit_name} of "
                                     "the loaded program")
        differ = LayerDiffer(dev, refs, source=Path(path).name, stop=stop)
        differ.attach(rc)
    return differ
