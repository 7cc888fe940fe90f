"""MAX78000 per-layer references from the log that ai8xize.py writes (``--verbose``; stdout
goes to ``log.txt`` by default, or ``--log-filename``), for the per-layer diff (issue 27,
devices/layer_diff.py).

ai8xize.py simulates the network in integer arithmetic while it generates the C code and, with
``--verbose``, prints each layer: a section starting with a line ``LAYER n (OP)...``, or
``LAYER n (name) (OP)...`` for a layer the YAML names, and after the layer's operation its
output as ``CxHxW OUTPUT ...:`` (``CxL`` for 1-D layers), each followed by the array as numpy
prints it (whole: ai8xize sets numpy's print threshold to the maximum). Every layer's data is
printed by default; ``--short-log`` (aliases ``--log-last-only`` and, despite its name,
``--verbose-all``) prints the data of output layers only, and a section without data gives no
reference. The software classification layer (``--softmax``'s CPU linear layer, a section
``CLASSIFICATION LAYER (LINEAR)...`` printing ``OUTPUT (size N)``) is not the accelerator's:
its section ends the last layer's. Facts read in analogdevicesinc/ai8x-synthesis (commit
ab4f4c01, 2024-08-30): izer/simulate.py show_data (the LAYER header), names.py layer_str
(``n`` or ``n (name)``), conv2d_layer / conv1d_layer / eltwise_layer (the OUTPUT headers),
linear_layer (the classification section), izer.py (np.set_printoptions threshold),
commandline.py (``--short-log``/``--verbose-all`` store_false into verbose_all, default all
layers). Within a section the last printed
output is the layer's: ``FULL-RES OUTPUT`` (the 32-bit sums) comes before the rounded
``OUTPUT BEFORE ACTIVATION`` / ``(NO ACTIVATION)`` and the ``ACTIVATED OUTPUT``, so a wide
(32-bit) layer's last one is its full-resolution output, as the hardware writes it ([AI8X]
"wide" output). The arrays are CHW, as ai8x-training has them and unit_tensors declares.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..files import FileRefused, read_program_text
from ..layer_diff import (
    MAX_REFERENCE,
    LayerReference,
    ReferenceFileError,
    to_spec_layout,
    unit_spec,
)

if TYPE_CHECKING:
    from .model import Max78000

_LAYER = re.compile(r"^\s*LAYER\s+(\d+)\b", re.I)
_OUTPUT = re.compile(r"^(\d+)x(\d+)(?:x(\d+))?\s+(?:FULL-RES OUTPUT|OUTPUT|ACTIVATED OUTPUT)\b"
                     r".*:\s*$|^(?:ACTIVATED )?OUTPUT \(size (\d+)\).*:\s*$")
_INT = re.compile(r"-?\d+")
_SOFTWARE = re.compile(r"^\s*CLASSIFICATION LAYER\b")  # the CPU's linear layer: not a unit


def is_log(path: Path) -> bool:
    """A regular text file, not an .npz or .npy (whose first bytes say so). Regular files
    only are opened (a FIFO would block): the others go to the .npz reader, which refuses them
    with one line."""
    try:
        if not path.is_file():
            return False
        with open(path, "rb") as f:
            head = f.read(6)
    except (OSError, ValueError):
        return False
    return not head.startswith((b"PK\x03\x04", b"\x93NUMPY"))


def parse_log(text: str, name: str) -> dict[int, tuple[np.ndarray, int]]:
    """{layer: (CHW array, line of its header)} of the last output printed in each section."""
    out: dict[int, tuple[np.ndarray, int]] = {}
    lines = text.splitlines()
    layer = None
    i = 0
    while i < len(lines):
        m = _LAYER.match(lines[i])
        if m:
            layer = int(m.group(1))
            i += 1
            continue
        if _SOFTWARE.match(lines[i]):
            layer = None
            i += 1
            continue
        h = _OUTPUT.match(lines[i].strip())
        if h is None or layer is None:
            i += 1
            continue
        head = i + 1
        if h.group(4) is not None:
            shape = (int(h.group(4)), 1, 1)
        else:
            shape = (int(h.group(1)), int(h.group(2)), int(h.group(3) or 1))
        body, depth, i = [], 0, i + 1
        while i < len(lines):  # the array: until its brackets close
            s = lines[i]
            body.append(s)
            depth += s.count("[") - s.count("]")
            i += 1
            if depth <= 0 and "[" in "".join(body):
                break
        flat = "\n".join(body)
        if "..." in flat:
            raise ReferenceFileError(f"{name}:{head}: layer {layer}'s output is summarised "
                                     "('...'); ai8xize prints whole arrays only when numpy's "
                                     "print threshold allows")
        values = np.array([int(v) for v in _INT.findall(flat)], dtype=np.int64)
        if values.size != shape[0] * shape[1] * shape[2]:
            raise ReferenceFileError(f"{name}:{head}: layer {layer}: {values.size} values "
                                     f"for an output of {'x'.join(map(str, shape))}")
        out[layer] = (values.reshape(shape), head)
    return out


def log_references(device: Max78000, path: Path) -> list[LayerReference]:
    """The references of ai8xize's log ``path`` for the loaded program's layers."""
    try:
        text = read_program_text(path, MAX_REFERENCE, "an ai8xize log")
    except FileRefused as e:
        raise ReferenceFileError(str(e)) from None
    except OSError as e:
        raise ReferenceFileError(f"{path}: cannot read: {e.strerror}") from None
    layers = parse_log(text, path.name)
    if not layers:
        raise ReferenceFileError(f"{path}: no layer output in it (ai8xize.py --verbose "
                                 "prints every layer's; --short-log/--verbose-all only the "
                                 "output layers')")
    count = len(device.units())
    refs = []
    for layer, (chw, line) in sorted(layers.items()):
        if layer >= count:
            raise ReferenceFileError(f"{path.name}:{line}: layer {layer}, the program has "
                                     f"layers 0..{count - 1}")
        ref = LayerReference(layer, f"log.txt layer {layer}" if path.name == "log.txt"
                             else f"{path.name} layer {layer}", None)
        spec = unit_spec(device, ref)
        if chw.shape[1:] == (1, 1) and spec.shape != chw.shape:  # a linear layer's vector
            chw = chw.reshape(spec.from_layout(np.zeros(spec.shape, np.int8)).shape)
        ref.array = to_spec_layout(chw, "CHW", spec, f"{path.name}:{line}")
        refs.append(ref)
    return refs
