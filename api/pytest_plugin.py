"""The accelstub pytest plugin (registered through the ``pytest11`` entry point, so installing
the package activates it): a fixture that yields a :class:`accelstub.Session`, configured by a
marker or by indirect parametrisation, closed even when the test fails, and on failure an
artifact directory that lets a person pick the failure up in gdb.

    @pytest.mark.accelstub(device="max78000", program="build/cnn", remote=False)
    def test_layer_2(accelstub_session):
        accelstub_session.run_to(2)
        assert (accelstub_session.tensor(1) >= 0).all()

    @pytest.mark.parametrize("accelstub_session", ["ne16", {"device": "nvdla"}], indirect=True)
    def test_runs(accelstub_session): ...

Marker and parameter keys: ``device`` (required), ``program`` (None: the bundled demo),
``input``, ``remote`` (True: serve the device on a free 127.0.0.1 port in this process and
connect over the GDB remote protocol, exercising the same path CI uses against ``accelstub
serve``), ``address`` ("HOST:PORT": connect to a stub that is already running), and the
device's construction options (``macs=...``).

On failure the directory (``--accelstub-artifacts DIR``, else under pytest's temporary
directory) holds: ``reproduce.gdb`` (target remote, ``monitor reset init``, run to the unit
the test stopped at, then its breakpoints and watchpoints), ``registers.txt`` (``monitor reg``),
``tensors.npz`` (the tensors of the unit at pc and of the unit before it), ``stop.txt`` (the
stop reason) and ``status.json``. Its path is printed in the test's report.

Why nothing is imported at load: pytest loads this module for every run of every project in
the environment, the project's own tests included; the emulators load when a test asks for a
session.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

MARKER = "accelstub"
_KEYS = ("device", "program", "input", "remote", "address")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("accelstub")
    group.addoption("--accelstub-artifacts", metavar="DIR", default=None,
                    help="write accelstub failure artifacts (gdb script, registers, tensors, "
                         "stop reason) under DIR (default: pytest's temporary directory)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "accelstub(device, program=None, input=None, remote=False, address=None, "
        "**device_options): the device and program of the accelstub_session fixture")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Remember each phase's report on the item, so the fixture's teardown knows whether the
    test failed."""
    outcome = yield
    report = outcome.get_result()
    item.stash.setdefault(_REPORTS, {})[report.when] = report


_REPORTS = pytest.StashKey[dict]()


def _config(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The marker's keywords, overridden by an indirect parameter (a device name or a dict)."""
    cfg: dict[str, Any] = {}
    marker = request.node.get_closest_marker(MARKER)
    if marker is not None:
        if marker.args:
            cfg["device"] = marker.args[0]
        cfg.update(marker.kwargs)
    param = getattr(request, "param", None)
    if isinstance(param, str):
        cfg["device"] = param
    elif isinstance(param, dict):
        cfg.update(param)
    elif param is not None:
        raise pytest.UsageError(f"accelstub_session: a parameter is a device name or a dict, "
                                f"not {param!r}")
    if "device" not in cfg and "address" not in cfg:
        raise pytest.UsageError(f"{request.node.nodeid}: accelstub_session needs a device: "
                                "@pytest.mark.accelstub(device=...) or indirect parametrisation")
    return cfg


@pytest.fixture
def accelstub_session(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A :class:`accelstub.Session` for the test's device and program (see the module
    docstring); closed afterwards, with failure artifacts written first."""
    from accelstub.session import Session

    cfg = _config(request)
    options = {k: v for k, v in cfg.items() if k not in _KEYS}
    server = None
    if cfg.get("address"):
        session = Session.connect(cfg["address"])
    elif cfg.get("remote"):
        from accelstub.devices import device_spec, open_device
        from accelstub.devices.device import ProgramOptions
        from accelstub.stub.cli import demo_program
        from accelstub.stub.server import StubServer

        program = cfg.get("program") or demo_program(cfg["device"])
        if program is not None:
            options = device_spec(cfg["device"]).program_device_options(program) | options
        server = StubServer([open_device(cfg["device"], **options)], host="127.0.0.1",
                            gdb_port=0, telnet_port=None, tcl_port=None)
        try:
            if program is not None:
                inp = cfg.get("input")
                server.load_program(program, log=lambda s: None, options=ProgramOptions(
                    input=str(inp) if inp is not None else None))
            server.start()
            session = Session.connect(f"127.0.0.1:{server.gdb[0].port}")
        except BaseException:
            server.stop()
            raise
        session.program = Path(program) if program is not None else None
    else:
        session = Session.open(cfg["device"], cfg.get("program"), input=cfg.get("input"),
                               **options)
    try:
        yield session
    finally:
        try:
            report = request.node.stash.get(_REPORTS, {}).get("call")
            if report is not None and report.failed:
                where = _artifact_dir(request, tmp_path_factory)
                write_artifacts(session, where, request.node.nodeid)
                request.node.add_report_section("teardown", "accelstub",
                                                f"failure artifacts: {where}")
        finally:
            session.close()
            if server is not None:
                server.stop()


def _artifact_dir(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Path:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid).strip("_")[:120]
    base = request.config.getoption("accelstub_artifacts")
    root = Path(base) if base else tmp_path_factory.getbasetemp() / "accelstub-artifacts"
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_artifacts(session: Any, where: Path, title: str = "") -> list[str]:
    """Write the failure artifacts of ``session`` into ``where``; returns the files written.
    One that cannot be made (the connection is gone) is named in ``errors.txt`` instead, so
    the test's own failure stays the one reported."""
    written, errors = [], []
    for name, make in (("stop.txt", _stop_text), ("status.json", _status_json),
                       ("registers.txt", lambda s: s.monitor("reg")),
                       ("reproduce.gdb", lambda s: gdb_script(s, title)),
                       ("tensors.npz", None)):
        try:
            if make is None:
                if _save_tensors(session, where / name):
                    written.append(name)
                continue
            (where / name).write_text(make(session))
            written.append(name)
        except Exception as e:  # noqa: BLE001 - an artifact must never mask the failure
            errors.append(f"{name}: {type(e).__name__}: {e}")
    if errors:
        (where / "errors.txt").write_text("\n".join(errors) + "\n")
    return written


def _stop_text(s: Any) -> str:
    stop = s.stop
    label = s.units()[stop.unit].label if stop.unit is not None else "end of program"
    lines = [f"reason: {stop.reason}", f"pc: {stop.pc:#010x} ({label})"]
    if stop.watch:
        lines.append(f"watch: {stop.watch[0]} {stop.watch[1]:#010x}")
    if stop.message:
        lines.append("message: " + stop.message.replace("\n", "\n  "))
    return "\n".join(lines) + "\n"


def _status_json(s: Any) -> str:
    return json.dumps(s.status(), indent=2) + "\n"


def _save_tensors(s: Any, path: Path) -> bool:
    """The tensors of the unit at pc (its inputs are ready) and of the unit before it (what
    just ran), as ``unitK_NAME`` arrays; False when neither declares any."""
    import numpy as np

    units = s.units()
    here = s.unit
    wanted = [k for k in ((len(units) if here is None else here) - 1, here)
              if k is not None and 0 <= k < len(units)]
    arrays = {f"unit{k}_{spec.name}": s.tensor(k, spec.name)
              for k in wanted for spec in s.tensors(k)}
    if not arrays:
        return False
    np.savez(path, **arrays)
    return True


def gdb_script(s: Any, title: str = "") -> str:
    """gdb commands that bring a fresh stub to the session's state: reset init (the program
    loaded again), run to the unit the session is at, then its breakpoints and watchpoints."""
    units = s.units()
    here = s.unit
    program = f" --program {s.program}" if getattr(s, "program", None) else ""
    target = s.address or "127.0.0.1:3333"
    lines = [f"# accelstub: the state of {title}".rstrip(),
             f"# start the stub first:  accelstub serve {s.device}{program}",
             "# then:                  gdb-multiarch -x reproduce.gdb",
             "set pagination off", f"target remote {target}", "monitor reset init"]
    if here is None:
        lines += ["# the session had run past the last unit", "continue"]
    elif here > 0:
        lines += [f"tbreak *{units[here].address:#x}", "continue"]
    lines.append(f"# stopped before {units[here].label}" if here is not None else
                 "# stopped at the end of the program")
    for addr in s.breakpoints:
        label = next((u.label for u in units if u.address == addr), "")
        lines.append(f"break *{addr:#x}" + (f"  # {label}" if label else ""))
    for kind, start, length in s.watchpoints:
        lines.append(f"monitor wp {start:#x} {length} {kind}")
    return "\n".join(lines) + "\n"
