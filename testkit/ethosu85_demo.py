"""The bundled Ethos-U85 demo (configs/demo/ethos-u85_demo), written by the project's own tools.

``accelstub serve ethos-u85`` loads it so there is something to step, as ``serve max78000``
has its ai8x project. The network is the project's small CNN (testkit/ethosu85_models.py:
conv 3x3 + ReLU, max pool, depthwise 3x3 + ReLU, a residual add of a conv 1x1, conv 1x1,
global average pooling (MEAN), fully connected; 25 NPU operations once Vela has compiled it)
under the name ``demo``. The residual add and the MEAN are there so that ``accelstub
compile``, which runs the demo, compiles the elementwise kernels and the output stage of a
32-bit OFM (Vela's MEAN) too: without them a network's first run with an add, a softmax or a
global average pooling compiled them (~3 s). The directory holds:

* ``demo.tflite``: the int8 model as the generator writes it (run it with LiteRT to compare);
* ``demo_vela.tflite``: that model compiled by Vela 5.2.0 for ``ethos-u85-256``;
* ``demo_debug.xml``: Vela's debug database of that compilation (``--enable-debug-db``; it does
  not change ``demo_vela.tflite``), which pairs each NPU operation with its TFLite tensor, so
  ``accelstub diff ethos-u85 --reference demo.tflite`` works on the demo (issue 27); its
  ``source`` attribute, Vela's output path, is written as ``demo`` so the file is the same on
  every machine;
* ``input.npy``: the generator's sample input (seed 1234);
* ``expected.npy``: LiteRT 2.3.0's answer with its reference kernels (BUILTIN_REF), the
  known answer ``accelstub run`` checks.

Vela's output is the same bytes on every run for the same input and version, so
tests/ethos_u85/test_ethosu85_tools.py rebuilds the directory and compares it byte for byte.

    python -m accelstub.testkit.ethosu85_demo DIR     (needs ethos-u-vela and ai-edge-litert)
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from .ethosu85_models import MODELS, Graph, compile_with_vela, litert_reference, sample_inputs

NAME = "demo"
MACS = 256  # the demo is compiled for ethos-u85-256


def build_model() -> bytes:
    """The demo network's .tflite: the small CNN's layers and seed under the name ``demo``."""
    fn, seed = MODELS["small_cnn"]
    g = Graph(NAME, seed)
    fn(g)
    return g.to_tflite()


def write_demo(outdir: str | Path) -> Path:
    """Write the demo directory (module docstring) into ``outdir``; returns it."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    src = outdir / f"{NAME}.tflite"
    src.write_bytes(build_model())
    with tempfile.TemporaryDirectory() as tmp:  # Vela also writes a summary .csv: not kept
        out = compile_with_vela(src, tmp, macs=MACS, debug_db=True)
        (outdir / out.name).write_bytes(out.read_bytes())
        db = out.with_name(f"{NAME}_debug.xml").read_text()
        head = f'<debug source="{Path(tmp) / NAME}">'
        if head not in db:
            raise RuntimeError(f"{NAME}_debug.xml: no {head!r} line to make reproducible")
        (outdir / f"{NAME}_debug.xml").write_text(db.replace(head, f'<debug source="{NAME}">'))
    xs = sample_inputs(src.read_bytes())
    (want,) = litert_reference(src, xs)
    np.save(outdir / "input.npy", xs[0])
    np.save(outdir / "expected.npy", want)
    return outdir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m accelstub.testkit.ethosu85_demo",
                                 description="Write the bundled Ethos-U85 demo into DIR.")
    ap.add_argument("dir")
    args = ap.parse_args(argv)
    print(write_demo(args.dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
