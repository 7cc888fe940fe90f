"""What a warm `accelstub run` loads (issue 31 #5: the warm run toward Python + numba's own
start): nothing it does not use. Importing the CLI and running the MAX78000 demo must not
import xml.sax.saxutils (it imports urllib.request and ssl, ~40 ms; only target.xml needs it),
nor multiprocessing (numba imports it when it starts its thread pool, which the demo's small
layers never need, emu/conv/int_conv.py parallel)."""
from __future__ import annotations

import json
import subprocess
import sys

UNUSED = ["xml.sax.saxutils", "ssl", "urllib.request", "multiprocessing"]

CODE = """
import contextlib, io, json, sys
import accelstub.stub.cli
after_import = sorted(m for m in {unused} if m in sys.modules)
with contextlib.redirect_stdout(io.StringIO()):
    code = accelstub.stub.cli.main(["run", "max78000"])
after_run = sorted(m for m in {unused} if m in sys.modules)
print(json.dumps([code, after_import, after_run]))
"""


def test_the_cli_and_a_demo_run_import_nothing_they_do_not_use():
    out = subprocess.run([sys.executable, "-c", CODE.format(unused=UNUSED)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == [0, [], []]

