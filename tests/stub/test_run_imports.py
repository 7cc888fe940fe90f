"""What a warm `accelstub run` loads (issue 31 #5: the warm run toward Python + numba's own
start): nothing it does not use. Importing the CLI and running the MAX78000 demo must not
import xml.sax.saxutils (it imports urllib.request and ssl, ~40 ms; only target.xml needs it),
nor multiprocessing (numba imports it when it starts its thread pool, which the demo's small
layers never need, emu/conv/int_conv.py parallel)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from accelstub.devices import DEVICES

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



WARM = """
import contextlib, io, json, sys
import accelstub.stub.cli
with contextlib.redirect_stdout(io.StringIO()):
    code = accelstub.stub.cli.main(["run", sys.argv[1]])
print(json.dumps([code, "tomllib" in sys.modules]))
"""


@pytest.mark.parametrize("device", DEVICES)
def test_a_warm_run_takes_its_description_as_kept_without_the_toml_parser(device):
    """The second run of a demo loads the description the first one parsed and kept
    (devices/description.py, in the kernel cache folder): it does not even import tomllib."""
    outs = [subprocess.run([sys.executable, "-c", WARM, device], capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for out in outs:
        assert out.returncode == 0, out.stderr
    assert json.loads(outs[1].stdout.splitlines()[-1]) == [0, False]


def test_the_version_is_looked_up_only_for_version(monkeypatch, capsys):
    """Building the parser does not ask the package metadata (a search of sys.path on every
    command's start); ``--version`` does, and prints it on stdout."""
    from accelstub.stub import cli

    asked = []
    monkeypatch.setattr(cli, "version", lambda: asked.append(1) or "9.9")
    assert cli.main(["describe", "ne16"]) == 0
    assert asked == []
    capsys.readouterr()
    with pytest.raises(SystemExit) as ei:
        cli.main(["--version"])
    assert ei.value.code == 0 and asked == [1]
    assert capsys.readouterr().out == "accelstub 9.9\n"
