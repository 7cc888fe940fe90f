"""The documentation cannot rot (issue 26 #6): every Python example in README.md runs as written,
and the API reference builds from the docstrings with no warning, documenting every public name."""
from __future__ import annotations

import re
import subprocess
import sys
import warnings

import pytest

import accelstub

from ..helpers import ROOT

#: the modules the API reference documents (README, "Scripted sessions in CI"): the package's
#: own (session, errors, backends, pytest_plugin) and the two it re-exports from, not the
#: emulator's internals (pdoc walks every imported subpackage unless told not to)
API_MODULES = ("accelstub", "!accelstub.emu*", "!accelstub.stub*", "!accelstub.tui*",
               "!accelstub.configs*", "!accelstub.testkit*", "!accelstub.devices*",
               "accelstub.devices.errors", "accelstub.devices.tensors")


def readme_examples() -> list[tuple[int, str]]:
    """(line, code) of every ```python block of README.md."""
    text = (ROOT / "README.md").read_text()
    return [(text[:m.start()].count("\n") + 2, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```$", text, re.S | re.M)]


def test_the_readme_has_an_example_per_device():
    code = "\n".join(c for _, c in readme_examples())
    for device in ("max78000", "ethos-u85", "ne16", "nvdla"):
        assert f'"{device}"' in code, f"no Python example for {device}"


@pytest.mark.slow
@pytest.mark.parametrize("line,code", readme_examples(), ids=lambda v: f"line{v}"
                         if isinstance(v, int) else "")
def test_readme_example_runs_as_written(line, code, tmp_path):
    """Each block in a fresh interpreter, in an empty folder, as a user pastes it; a block
    of pytest tests (``def test_``) as a test file run by pytest, as a user's CI runs it."""
    if "def test_" in code:
        (tmp_path / "test_example.py").write_text(code)
        args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_example.py"]
    else:
        args = [sys.executable, "-c", code]
    out = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"README.md:{line}:\n{out.stdout}\n{out.stderr}"


def test_api_reference_builds_and_documents_every_public_name(tmp_path):
    import pdoc  # a test extra: README's test command installs it

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an unresolved name or a broken docstring fails here
        pdoc.pdoc(*API_MODULES, output_directory=tmp_path)
    text = "\n".join(p.read_text() for p in tmp_path.rglob("*.html"))
    for name in [n for n in dir(accelstub) if n[0].isupper() and n != "Any"]:
        obj = getattr(accelstub, name)
        assert obj.__doc__, f"accelstub.{name} has no docstring"
        assert f'id="{name}"' in text, f"accelstub.{name} is missing from the API reference"
