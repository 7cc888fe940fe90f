"""Lint and types as part of the one test command (issue 33.5): ``ruff check`` over the tree and
``mypy`` over stub/ and devices/ with pyproject.toml's configuration (its baseline and its strict
modules), each run as a subprocess the way a developer runs it, its output shown on failure."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
API = ROOT / "api"
MIRROR = ROOT / ".mypy" / "accelstub"  # what mypy resolves `accelstub` to


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m TOOL`` in the source tree: the interpreter's own copy, not one on PATH."""
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=240)


def test_ruff_check_passes():
    r = run_tool("ruff", "check", "--no-cache", ".")
    assert r.returncode == 0, f"ruff check found problems:\n{r.stdout}{r.stderr}"


def test_mypy_passes_over_stub_and_devices():
    # no cache: none is left in the tree, and no stale one can hide an error
    r = run_tool("mypy", "--no-incremental", "--cache-dir", os.devnull)
    assert r.returncode == 0, f"mypy found problems:\n{r.stdout}{r.stderr}"
    assert "Success" in r.stdout, r.stdout


def test_mypy_mirror_matches_the_package_layout():
    """.mypy/accelstub must map every module setup.py installs (api/*.py as the package root,
    each top-level source folder as a subpackage): a module missing there would be invisible
    to mypy, and imports of it would silently become unchecked."""
    top = {"stub", "devices", "tui", "emu", "configs", "testkit"}
    want = {p.name: API / p.name for p in API.glob("*.py")} | {t: ROOT / t for t in top}
    have = {p.name: os.path.realpath(p) for p in MIRROR.iterdir() if p.name != "__pycache__"}
    assert have == {name: os.path.realpath(path) for name, path in want.items()}


def test_numba_and_textual_have_upper_bounds_the_installed_versions_meet():
    """pyproject.toml caps numba below its next minor and textual below its next major (design
    notes "Lint and types in CI"); the environment the tests run in must be inside the caps."""
    import tomllib
    from importlib.metadata import version

    from packaging.requirements import Requirement

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    reqs = {r.name: r for r in map(Requirement, deps)}
    for name in ("numba", "textual"):
        assert any(s.operator == "<" for s in reqs[name].specifier), reqs[name]
        assert reqs[name].specifier.contains(version(name)), (name, version(name), reqs[name])
