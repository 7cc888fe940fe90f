"""Set-up and first run (issue 25 #1-#3): the kernel cache never lives in the package tree, a
folder left by an earlier install is named instead of breaking imports, the installed command
runs the demo, `accelstub compile` shows progress, and gdb's console hears of compilation."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from numba import njit

import accelstub.emu
from accelstub.stub import compile_notice, precompile
from accelstub.stub.rsp_codec import PacketReader, frame

PACKAGE_ROOTS = [Path(p).resolve() for p in accelstub.emu.__path__]


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    return subprocess.run([sys.executable, "-c", code], env={**base, **env},
                          capture_output=True, text=True, timeout=120)


def test_kernels_are_cached_in_the_users_cache_folder_not_the_package(tmp_path):
    """With no NUMBA_CACHE_DIR, numba's cache goes to $XDG_CACHE_HOME/accelstub/numba: a cache
    file beside an installed module survived `pip uninstall` and hid the next install."""
    out = _python("from accelstub.emu.pool import max78000 as m; "
                  "print(m._pool_into._cache._cache_path)", XDG_CACHE_HOME=str(tmp_path))
    assert out.returncode == 0, out.stderr
    path = Path(out.stdout.strip()).resolve()
    assert path.is_relative_to((tmp_path / "accelstub" / "numba").resolve())
    assert not any(path.is_relative_to(root) for root in PACKAGE_ROOTS)


def test_a_users_numba_cache_dir_is_kept(tmp_path):
    out = _python("from accelstub.emu.pool import max78000 as m; "
                  "print(m._pool_into._cache._cache_path)", NUMBA_CACHE_DIR=str(tmp_path / "mine"))
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).resolve().is_relative_to((tmp_path / "mine").resolve())


def test_this_process_caches_outside_the_package_tree():
    from accelstub.emu.pool import max78000 as m

    path = Path(m._pool_into._cache._cache_path).resolve()
    assert not any(path.is_relative_to(root) for root in PACKAGE_ROOTS)


def test_a_stale_folder_that_hides_the_package_is_named_in_one_line(tmp_path):
    """What an earlier install left behind: site-packages/accelstub/emu/conv/__pycache__ with
    numba's files and no module. Found before the real package, it made every import from
    accelstub.emu fail with "(unknown location)"."""
    stale = tmp_path / "site" / "accelstub" / "emu" / "conv" / "__pycache__"
    stale.mkdir(parents=True)
    (stale / "int_conv.int_conv-40.py311.nbi").write_bytes(b"\0" * 16)
    env = {k: v for k, v in os.environ.items()}
    env["PYTHONPATH"] = str(tmp_path / "site")
    out = subprocess.run([sys.executable, "-m", "accelstub.stub.cli", "run", "nvdla"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert lines[0].startswith(f"accelstub: error: {tmp_path / 'site' / 'accelstub'}: "
                               "left over from an earlier install")
    assert lines[0].endswith(f"(rm -r {tmp_path / 'site' / 'accelstub'}) and run again")


def test_this_install_is_whole():
    from accelstub.stub.install_check import install_problem

    assert install_problem() is None


def test_the_installed_command_runs_the_demo():
    """The console script beside this interpreter (what README's commands install) imports the
    package and runs the bundled demo to PASS."""
    script = Path(sys.executable).parent / "accelstub"
    out = subprocess.run([str(script), "run", "max78000"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PASS" in out.stdout


def test_compile_prints_progress_with_device_and_kernel_family(tmp_path, monkeypatch):
    """A child that compiles for a while: the parent says, at least every PROGRESS_EVERY_S,
    which device (n of m) and which kernel family it is on."""
    monkeypatch.setattr(precompile, "PROGRESS_EVERY_S", 0.2)
    fake = tmp_path / "python"
    mark = precompile.KERNEL_MARK
    fake.write_text("#!/bin/sh\n"
                    f"echo '{mark} start accelstub.emu.conv.max78000 conv2d' >&2\n"
                    "sleep 0.7\n"
                    f"echo '{mark} end accelstub.emu.conv.max78000 conv2d' >&2\n"
                    f"echo '{mark} start accelstub.emu.pool.max78000 pool_hwc' >&2\n"
                    "sleep 0.7\n"
                    f"echo '{mark} end accelstub.emu.pool.max78000 pool_hwc' >&2\n"
                    "echo PASS\n")
    fake.chmod(0o755)
    lines: list[tuple[float, str]] = []
    code = precompile.compile_devices(["max78000"], python=str(fake),
                                      say=lambda s: lines.append((time.perf_counter(), s)))
    assert code == 0
    progress = [(t, s) for t, s in lines if s.startswith("accelstub: ") and " s: " in s]
    assert len(progress) >= 4
    assert all(": max78000: " in s for _, s in progress)
    assert any(s.endswith("0 kernels compiled, compiling conv.max78000") for _, s in progress)
    assert any(s.endswith("1 kernel compiled, compiling pool.max78000") for _, s in progress)
    gaps = [b[0] - a[0] for a, b in zip(lines, lines[1:])]
    assert max(gaps) < 0.2 + 0.5  # never silent much longer than the interval
    assert lines[-2][1].startswith("accelstub: max78000: done in ") and \
        lines[-2][1].endswith("(2 kernels compiled)")


def test_a_first_step_that_compiles_tells_gdbs_console(stub, monkeypatch):
    """The unit gdb runs compiles a kernel: gdb's console gets O packets saying so, before the
    stop reply, not only the server's terminal."""
    monkeypatch.setattr(compile_notice.CompileNotice, "DELAY_S", 0.0)

    @njit  # a new function: numba compiles it on its first call
    def fresh_kernel(x):
        return x + 1

    device = stub.gdb[0].rc.device
    run_unit = device.execute_unit

    def unit_that_compiles(ctx):
        fresh_kernel(1)
        return run_unit(ctx)

    monkeypatch.setattr(device, "execute_unit", unit_that_compiles)
    texts = []
    with socket.create_connection(("127.0.0.1", stub.gdb[0].port), timeout=30) as s:
        s.sendall(frame(b"s"))
        reader = PacketReader(1 << 20)
        stop = None
        while stop is None:
            for ev in reader.feed(s.recv(65536)):
                if ev.kind != "packet":
                    continue
                s.sendall(b"+")
                if ev.payload.startswith(b"O"):
                    texts.append(bytes.fromhex(ev.payload[1:].decode()).decode())
                elif ev.payload.startswith(b"T"):
                    stop = ev.payload
    assert texts[0] == "accelstub: compiling kernels for the first run (cached afterwards)...\n"
    assert texts[-1].startswith("accelstub: compiled 1 kernels in ") and \
        texts[-1].endswith("(cached for later runs)\n")
