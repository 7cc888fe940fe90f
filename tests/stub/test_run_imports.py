"""What a warm `accelstub run` loads (issue 31 #5: the warm run toward Python + numba's own
start): nothing it does not use. Importing the CLI and running the MAX78000 demo must not
import xml.sax.saxutils (it imports urllib.request and ssl, ~40 ms; only target.xml needs it),
nor multiprocessing (numba imports it when it starts its thread pool, which the demo's small
layers never need, emu/conv/int_conv.py parallel)."""
from __future__ import annotations

import gc
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


def child(code: str, *args: str, timeout: float = 300, **run: object) -> object:
    """What ``python -c code args`` printed last, as JSON, from a fresh process (what a command
    imports is only seen in one); its exit status 0 asserted with its stderr shown."""
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         timeout=timeout, **run)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_the_cli_and_a_demo_run_import_nothing_they_do_not_use():
    assert child(CODE.format(unused=UNUSED)) == [0, [], []]


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


LOADED = """
import contextlib, io, json, sys
import accelstub.stub.cli
with contextlib.redirect_stdout(io.StringIO()):
    code = accelstub.stub.cli.main(["run", sys.argv[1]])
print(json.dumps([code, sorted(sys.modules),
                  sorted(m for m in ("scipy", "cffi", "yaml") if m in sys.modules
                         and sys.modules[m] is None)]))
"""

#: optional packages numba probes and the run's kernels never use (stub/numba_start.py)
PROBED = ["scipy", "cffi", "pycparser", "yaml"]


@pytest.mark.parametrize("device", DEVICES)
def test_a_demo_run_imports_no_command_table_and_no_other_device(device):
    """A run of a demo that is not a command script (issue 31 #5, the warm `run`) imports of the
    stub's command table only CommandContext's module (stub/commands/__init__ imports the
    command modules on first use of a name), of the other devices only their light registry
    ``__init__`` (the parser's options), and no TUI, server, test kit or API layer; nor the
    optional packages numba probes (SciPy, cffi, PyYAML: stub/numba_start.py), which stay
    importable afterwards (not left hidden). The second of two runs loads the description the
    first one parsed and kept (devices/description.py, in the kernel cache folder): it does not
    even import tomllib."""
    from accelstub.devices import REGISTRY

    for _ in range(2):
        code, modules, left_hidden = child(LOADED, device)
        check_demo_run_modules(device, REGISTRY, code, modules, left_hidden)
    assert "tomllib" not in modules  # the second run's


def check_demo_run_modules(device: str, registry: dict, code: int, modules: list[str],
                           left_hidden: list[str]) -> None:
    """What one demo run of ``device`` may have imported (LOADED's output)."""
    assert code == 0
    assert [m for m in PROBED if m in modules] == [] and left_hidden == []
    commands = [m for m in modules if m.startswith("accelstub.stub.commands.")]
    assert commands == ["accelstub.stub.commands.table"]
    others = [m for d, pkg in registry.items() if d != device
              for m in modules if m.startswith(pkg + ".")]
    assert others == []
    assert any(m.startswith(registry[device] + ".") for m in modules)  # its own code did
    unused = [m for m in modules if m.split(".")[:2] in (["accelstub", "tui"],
              ["accelstub", "testkit"], ["accelstub", "evaluation"], ["textual"])
              or m in ("accelstub.stub.server", "accelstub.stub.session", "accelstub.stub.svd")]
    assert unused == []


@pytest.mark.parametrize("device", DEVICES)
def test_a_warm_demo_run_does_not_import_numpy_ma(device):
    """numpy.ma (~7 ms) stays out of a warm demo run (issue 31 #5): np.unique calls
    np.ma.is_masked, and numba's ``typeof`` of an array asks whether it is a masked one, so the
    run's distinct values are taken by sorting (MAX78000's written memories, NVDLA's
    unique_bytes, Ethos-U85's output-stage shifts) and kernel_plan.tiered types its arguments
    by emu/jit.py argument_type. The first of two runs may compile or parse; the second is
    the warm one."""
    for _ in range(2):
        code, modules, _ = child(LOADED, device)
    assert code == 0 and "numpy" in modules
    assert [m for m in modules if m == "numpy.ma" or m.startswith("numpy.ma.")] == []


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["serve", "--help"]])
def test_the_help_imports_no_numba(argv):
    """Building the parser needs the devices' registry entries and the history budget only
    (devices/__init__.py): ``--help`` (and every command's start before it runs) imports no
    numba, no kernel and no device model."""
    code = ("import contextlib, io, json, sys\n"
            "from accelstub.stub.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    try:\n        main(sys.argv[1:])\n    except SystemExit as e:\n"
            "        code = e.code\n"
            "print(json.dumps([code, 'usage:' in out.getvalue(),\n"
            "    sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite')\n"
            "           or m.startswith('accelstub.emu') or m.endswith('.model'))]))\n")
    assert child(code, *argv, timeout=120) == [0, True, []]


def test_the_command_table_fills_on_the_first_use_of_a_name():
    """stub/commands/__init__ imports its modules lazily: the package alone leaves the table
    empty, any name of it (here ``execute``) imports every command module first, so a command
    script or a server always sees the whole table; a name it does not have is an
    AttributeError."""
    code = ("import json, accelstub.stub.commands as c\n"
            "from accelstub.stub.commands.table import COMMANDS\n"
            "before = len(COMMANDS)\n"
            "c.execute\n"
            "try:\n    c.no_such_name\n    missing = False\n"
            "except AttributeError:\n    missing = True\n"
            "print(json.dumps([before, sorted(COMMANDS), missing, c.run.__name__]))\n")
    before, names, missing, run = child(code, timeout=120)
    assert before == 0
    assert {"mww", "mdw", "reg", "load_image", "reset", "help", "version"} <= set(names)
    assert missing and run == "accelstub.stub.commands.run"


def test_numba_keeps_pyyaml_where_it_has_a_config_file_to_read(tmp_path):
    """A ``.numba_config.yaml`` in the working folder is numba's to read (numba.core.config),
    so PyYAML is not hidden there; elsewhere it is, and numba starts without it."""
    code = ("import json, sys\n"
            "from accelstub.stub.numba_start import start_numba_lean\n"
            "start_numba_lean()\n"
            "from numba.core import config\n"
            "print(json.dumps(['yaml' in sys.modules, config._HAVE_YAML]))\n")
    plain = tmp_path / "plain"
    configured = tmp_path / "configured"
    plain.mkdir()
    configured.mkdir()
    (configured / ".numba_config.yaml").write_text("{}\n")
    got = []
    for cwd in (plain, configured):
        got.append(child(code, timeout=120, cwd=cwd))
    assert got == [[False, False], [True, True]]


FROZEN = """
import contextlib, gc, io, json
full = []
gc.callbacks.append(lambda phase, info: phase == "start" and info["generation"] == 2
                    and full.append(len(gc.get_objects(2))))  # what it traverses
import accelstub.stub.cli
with contextlib.redirect_stdout(io.StringIO()):
    code = accelstub.stub.cli.main(["run", "max78000"])
print(json.dumps([code, gc.isenabled(), gc.get_freeze_count(), len(gc.get_objects()),
                  max(full, default=0)]))
"""


def test_a_demo_runs_start_up_is_frozen_and_the_collector_left_on():
    """A warm run's start-up (numba's registries, the device, its program) is built with the
    cyclic garbage collector paused and then frozen (stub/numba_start.py collector_paused,
    issue 31 #5): no full collection during a warm demo run traverses them (~100 000 objects,
    ~30 ms each time), most of the objects alive after it sit in the permanent generation (so
    neither later collections nor the one at the interpreter's exit traverse them), and the
    collector is on again afterwards."""
    for _ in range(2):  # the first one may compile or parse: the second is a warm run
        code, enabled, frozen, young, most_traversed = child(FROZEN)
    assert code == 0 and enabled
    assert frozen > 50_000 and frozen > 4 * young
    assert most_traversed < frozen // 4


PAUSED = """
import gc, json
from accelstub.stub.numba_start import collector_paused
seen = []
for enabled in (True, False):
    (gc.enable if enabled else gc.disable)()
    kept = []
    try:
        with collector_paused():
            inside = gc.isenabled()
            kept.append([[i] for i in range(1000)])
            raise KeyError
    except KeyError:
        pass
    seen.append([inside, gc.isenabled(), gc.get_freeze_count() >= 1000])
    gc.unfreeze()
print(json.dumps(seen))
"""


def test_the_collector_pause_restores_its_state_and_freezes_what_was_built():
    """collector_paused disables the collector inside, freezes what was built there (even when
    the block raises) and leaves the collector as it found it: on in a CLI process, off where
    a caller had turned it off."""
    assert child(PAUSED, timeout=120) == [[False, True, True], [False, False, True]]


SERVE_FROZEN = """
import contextlib, gc, io, json
import accelstub.stub.cli as cli
seen = []
plan = cli._compile_plan
cli._compile_plan = lambda device, **kw: (seen.append(gc.get_threshold()[0]), plan(device, **kw))
with contextlib.redirect_stdout(io.StringIO()):
    code = cli.main(["serve", "max78000", "--stdio"])  # stdin at its end: serves, then stops
print(json.dumps([code, gc.isenabled(), gc.get_freeze_count(), len(gc.get_objects()), seen,
                  gc.get_threshold()[0]]))
"""


def test_serves_start_up_is_frozen_like_a_runs_and_its_plan_compiles_relaxed():
    """`accelstub serve` opens its device and loads its program as `run` does: with the
    collector paused, then frozen (stub/cli.py _serve_until_stopped, issue 31 #5), so what
    is alive after it is nearly all in the permanent generation; its kernel plan runs with the
    first generation raised to numba_start.COMPILING_GEN0 (collector_for_compiling), and
    CPython's threshold is back once it serves. Over a pipe (--stdio, stdin at its end): no
    port is opened."""
    from accelstub.stub.numba_start import COMPILING_GEN0
    for _ in range(2):  # the first one may compile or parse: the second is a warm start
        code, enabled, frozen, young, during_plan, after = child(SERVE_FROZEN,
                                                                 stdin=subprocess.DEVNULL)
    assert code == 0 and enabled
    assert frozen > 50_000 and frozen > 4 * young
    # back to the interpreter's own first-generation threshold (this process has it too)
    assert during_plan == [COMPILING_GEN0] and after == gc.get_threshold()[0]


def test_the_compiling_threshold_is_raised_inside_and_restored_even_on_an_error():
    """collector_for_compiling raises the first generation's threshold to COMPILING_GEN0 (a
    caller's larger one is kept), leaves the others and the collector's on/off state, and
    restores all of it when the block ends, also by an exception."""
    import gc

    from accelstub.stub.numba_start import COMPILING_GEN0, collector_for_compiling
    old = gc.get_threshold()
    try:
        for start in ((700, 10, 10), (50_000, 7, 3)):
            gc.set_threshold(*start)
            with pytest.raises(KeyError):
                with collector_for_compiling():
                    assert gc.get_threshold() == (max(start[0], COMPILING_GEN0), *start[1:])
                    raise KeyError
            assert gc.get_threshold() == start
    finally:
        gc.set_threshold(*old)


REGISTRY = """
import gc, json
from accelstub.stub.numba_start import start_numba_lean
start_numba_lean()
from numba.core.registry import cpu_target
young, frozen = len(gc.get_objects()), gc.get_freeze_count()
cpu_target.target_context.refresh()  # what the first kernel load calls
print(json.dumps([len(gc.get_objects()) - young, frozen]))
"""


def test_numba_starts_with_its_registry_built_and_frozen():
    """start_numba_lean builds numba's implementation registry (~30 000 objects, which a
    run's first kernel load would build with the collector on) under the collector pause and
    freezes it: the first load's refresh then adds next to nothing."""
    added, frozen = child(REGISTRY, timeout=120)
    assert added < 100 and frozen > 50_000
