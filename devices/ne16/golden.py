"""NE16 per-job references from pulp-nnx's golden output, for the per-layer diff (issue 27,
devices/layer_diff.py).

pulp-nnx's test generator writes the layer's golden output (``golden_output[]`` in
gen/src/output.c, HWC: row, column, channel, the order the output lies in L1). The driver splits
a layer into jobs (a strided layer into one job per 2x2 output block, pulp_nnx.py), so each job
writes some of the output's elements: a job's reference is the golden values of exactly the
elements its declared output tensor holds (ne16/tensors.py), found by their offsets from the
output's first element -- the lowest address any job's output has, since together the jobs
write the whole output.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import DeviceError
from ..layer_diff import LayerReference, ReferenceFileError, unit_spec
from .pulp_nnx import TestAppError, is_test_app, read_arrays
from .tensors import output_subtiles, subtile_name

if TYPE_CHECKING:
    from .model import Ne16


def golden_references(device: Ne16, path: Path) -> list[LayerReference]:
    """One reference per job of the loaded program from the test application at ``path``
    (the app directory holding gen/, or gen/ itself)."""
    gen = path / "gen" if (path / "gen" / "src").is_dir() else path
    src = gen / "src" / "output.c"
    try:
        golden = read_arrays(src).get("golden_output")
    except (TestAppError, OSError) as e:
        raise ReferenceFileError(f"{src}: {getattr(e, 'strerror', None) or e}") from None
    if golden is None or golden.values is None:
        raise ReferenceFileError(f"{src}: no golden_output[] with values")
    refs, specs = [], []
    for k in range(len(device.units())):
        ref = LayerReference(k, f"golden_output (job {k})", None)
        try:
            specs.append((ref, unit_spec(device, ref)))
        except DeviceError:
            continue  # a job not decoded: no reference for it
    if not specs:
        raise ReferenceFileError(f"{path}: the loaded program declares no job output")
    base = min(int(s.addresses().min()) for _, s in specs)
    values = np.asarray(golden.values, dtype=np.int64)
    for ref, spec in specs:
        offsets = spec.addresses() - base
        if offsets.max() // spec.itemsize >= values.size or np.any(offsets % spec.itemsize):
            raise ReferenceFileError(f"{golden.where}: golden_output has {values.size} "
                                     f"elements, job {ref.unit}'s output reaches element "
                                     f"{int(offsets.max()) // spec.itemsize} (another layer?)")
        ref.array = spec.to_layout(values[offsets // spec.itemsize])
        cfg = device.job_config(ref.unit)
        if cfg is not None:
            ref.part = _first_subtile(cfg)
        refs.append(ref)
    return refs


def _first_subtile(cfg):
    """``LayerReference.part`` of a job: the first output subtile (in the order the job runs
    them, Ko > Ho > Wo) holding a difference, so a diff line names it (issue 27: the golden
    output per job and per output subtile)."""
    numbers = output_subtiles(cfg)

    def part(mask):
        return subtile_name(cfg, int(numbers[mask].min()))
    return part


def is_golden(path: Path) -> bool:
    return path.is_dir() and is_test_app(path)
