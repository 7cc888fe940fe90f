"""accelstub.emu.jit.njit (issue 31 #5): a kernel called from another kernel with constant
arguments compiles once, for the arguments' types, not once per constant; every kernel of
accelstub.emu is made with it."""
from __future__ import annotations

import os
import subprocess
import sys

import numba
from numba.core import types

from accelstub.emu.jit import is_nonliteral, njit
from tests.helpers import emu_kernels


def _callee_and_caller(decorator):
    @decorator
    def shift(v, n):
        return (v << n) >> 1

    @decorator
    def caller(v):
        return shift(v, 3) + shift(v, 5) + shift(v, 3)

    return shift, caller


def test_constants_passed_to_a_kernel_compile_it_once_for_their_type():
    shift, caller = _callee_and_caller(njit(nogil=True))
    assert caller(7) == (7 << 3 >> 1) * 2 + (7 << 5 >> 1)
    assert len(shift.signatures) == 1
    assert not any(isinstance(t, types.Literal) for t in shift.signatures[0])


def test_numbas_own_njit_compiles_one_version_per_constant():
    """What emu.jit avoids (so the test above can tell the two apart)."""
    shift, caller = _callee_and_caller(numba.njit(nogil=True))
    assert caller(7) == (7 << 3 >> 1) * 2 + (7 << 5 >> 1)
    assert len(shift.signatures) == 2
    assert all(isinstance(sig[1], types.Literal) for sig in shift.signatures)


def test_every_kernel_of_emu_is_made_with_emu_jit():
    found = [(module, name, is_nonliteral(obj)) for module, name, obj in emu_kernels()]
    assert len(found) > 50
    assert [f for f in found if not f[2]] == []


def test_a_run_loads_numba_without_scipy_and_scipy_still_imports_after(tmp_path):
    """`accelstub run` has numba's implementations loaded with SciPy hidden from its BLAS
    probe (a quarter of a warm run's start-up); SciPy itself still imports afterwards. A
    stand-in ``scipy`` package first on the path takes the real one's place (CI's fresh venv
    has none), so the test sees the probe's import whether SciPy is installed or not."""
    (tmp_path / "scipy" / "linalg").mkdir(parents=True)
    (tmp_path / "scipy" / "__init__.py").write_text("__version__ = \"1.14.1\"\n")
    (tmp_path / "scipy" / "linalg" / "__init__.py").write_text("STAND_IN = True\n")
    code = ("import sys\n"
            "from accelstub.stub.cli import main\n"
            "code = main(['run', 'ne16'])\n"
            "print('scipy.linalg loaded:', 'scipy.linalg' in sys.modules)\n"
            "import scipy.linalg\n"
            "print('exit', code, scipy.linalg.__name__, scipy.linalg.STAND_IN)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "scipy.linalg loaded: False" in lines and lines[-1] == "exit 0 scipy.linalg True"
