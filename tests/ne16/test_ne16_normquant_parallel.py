"""NE16's normalisation on several threads for large jobs (emu/conv/ne16.py normquant_parallel,
launched by devices/ne16/job.py normquant from PARALLEL_ELEMENTS outputs on, issue 31 #2): a
job from the threshold on runs it on the launch's threads and a smaller one the serial kernel
over all its rows, both equal to the test application's golden output (testkit/ne16_build.py,
plain numpy), and NE16's kernel plan names the types a job launches it with (`accelstub
compile` compiles it ahead). Splits into any ranges of rows: tests/ne16/test_ne16_job_path.py
``test_normquant_from_the_work_array_matches_the_reference``."""
from __future__ import annotations

import re
from unittest.mock import patch

import numba
import pytest

from accelstub.devices import device_spec
from accelstub.devices.ne16 import job as J
from accelstub.emu import kernel_plan as KP
from accelstub.emu.conv import int_conv as IC
from accelstub.emu.conv import ne16 as K
from accelstub.stub.cli import main as cli_main
from accelstub.testkit.ne16_build import Layer, build

THREADS = numba.config.NUMBA_NUM_THREADS


class _Spy:
    """emu/conv/ne16.py as job.py sees it, its normalisation kernels' calls recorded: (name,
    the parallel kernel's part count or the serial one's row range)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def __getattr__(self, name: str):
        real = getattr(K, name)
        if name not in ("normquant", "normquant_parallel"):
            return real

        def call(*args):
            self.calls.append((name, args[-1] if name == "normquant_parallel" else args[-2:]))
            return real(*args)
        return call


@pytest.mark.parametrize("rows, cols", [(16, 16), (16, 15), (8, 8)])
def test_a_job_normalises_on_the_launchs_threads_from_the_threshold_on(tmp_path, capsys, rows,
                                                                       cols):
    """A 64->64 3x3 'same' job of 16x16 outputs (16384, PARALLEL_ELEMENTS) launches the
    parallel kernel where numba has more than one thread; 16x15 (15360) and 8x8 run the serial
    one over all their rows; each passes the application's golden check."""
    layer = Layer(rows, cols, 64, 64, padding=(1, 1, 1, 1), name="par")
    app = build(layer, seed=9).write(tmp_path / "par")
    spy = _Spy()
    with patch.object(J, "K", spy):
        assert cli_main(["run", "ne16", "--program", str(app)]) == 0
    assert re.match(r"PASS \(\d+ outputs checked", capsys.readouterr().out)
    big = rows * cols * 64 >= J.PARALLEL_ELEMENTS
    assert IC.parallel_for_elements(rows * cols * 64, J.PARALLEL_ELEMENTS).threads == \
        (THREADS if big else 1)
    if big and THREADS > 1:
        assert spy.calls == [("normquant_parallel", THREADS)]
    else:
        assert spy.calls == [("normquant", (0, rows))]
    if big and THREADS > 1:  # the types it ran with are the plan's, compiled ahead
        (entry,) = [e for e in device_spec("ne16").kernel_plan if e[1] == "normquant_parallel"]
        assert entry[0] == "accelstub.emu.conv.ne16" and entry[4] == KP.AHEAD
        assert entry[2] in [str(tuple(s)) for s in K.normquant_parallel.signatures]
