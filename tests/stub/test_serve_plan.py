"""`accelstub serve` compiles the device's kernel plan (DeviceSpec.kernel_plan, emu/kernel_plan.py)
before it serves, as `accelstub run` does: the first gdb step then compiles none of those kernels
one after the other (issue 31 #5). Checked in an empty numba cache of the test's own."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

#: the child that checks a cache: which of the plan's entries for this machine it holds
CACHED = textwrap.dedent('''
    import json, sys
    from accelstub.devices import device_spec
    from accelstub.emu import kernel_plan as KP
    plan = KP.for_this_machine(device_spec(sys.argv[1]).kernel_plan)
    print(json.dumps([KP.load_cached(KP.kernel(e[0], e[1]), e[2]) for e in plan]))
''')


def cached(device: str, env: dict) -> list[bool]:
    out = subprocess.run([sys.executable, "-c", CACHED, device], capture_output=True,
                         text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.slow
def test_serve_has_the_plan_compiled_when_it_says_ready(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    assert not any(cached("max78000", env))  # nothing there before
    server = subprocess.Popen([sys.executable, "-m", "accelstub.stub.cli", "serve", "max78000",
                               "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
    try:
        deadline = time.monotonic() + 300
        ready = ""
        while time.monotonic() < deadline and not ready:
            line = server.stdout.readline()
            if not line:
                break  # it exited
            ready = line if line.startswith("accelstub ready ") else ""
        assert ready, server.stderr.read() if server.poll() is not None else "no ready line"
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=60)
    assert all(cached("max78000", env))
