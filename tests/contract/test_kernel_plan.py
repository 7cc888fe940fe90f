"""A device's kernel plan (DeviceSpec.kernel_plan, issue 31 #5) is exactly what a run of its
bundled demo calls: the (module, function, signature) of every kernel a warm run of the demo
loads from the cache (a warm run loads only the kernels called from Python; their callees are
compiled inside them, and emu/ranged.py's bodies with their wrappers), without the plan
applied. A kernel changed or added without its entry would otherwise compile one at a time
again on a first run, or the plan would compile one that no run needs. Checked for each
convolution kernel choice this CPU can run (NEEDS)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from accelstub.devices import DEVICES, device_spec
from accelstub.emu import kernel_plan as KP

PLANNED = [d for d in DEVICES if device_spec(d).kernel_plan]

#: the child: the demo run without the plan (compile_plan replaced), then every kernel numba
#: holds a compiled version of in the process
CHILD = textwrap.dedent('''
    import contextlib, io, json, sys
    import accelstub.emu.kernel_plan as KP
    KP.compile_plan = lambda plan, on_worker=None: []  # the demo's own calls only
    from accelstub.stub.cli import main
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["run", sys.argv[1]])
    from numba import types
    from accelstub.emu.jit import KERNELS
    # a ranged body is compiled or loaded with its wrapper's signature (emu/ranged.py): the
    # wrapper's entry covers it, as a callee's
    bodies = {(b.py_func.__module__, b.py_func.__name__, str(tuple(s) + (types.intp,) * 2))
              for d in KERNELS.values() for b in getattr(d, "ranged_kernels", ())
              for s in d.signatures}
    print(json.dumps(dict(code=code, kernels=sorted(
        [m, n, str(s)] for (m, n), d in KERNELS.items() for s in d.signatures
        if (d.py_func.__module__, d.py_func.__name__, str(s)) not in bodies))))
''')


def demo_kernels(device: str, env: dict) -> list[list[str]]:
    out = subprocess.run([sys.executable, "-c", CHILD, device], capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["code"] == 0
    return got["kernels"]


def test_a_device_has_a_plan():
    assert "max78000" in PLANNED


@pytest.mark.parametrize("needs", ["vnni", "int16"])
@pytest.mark.parametrize("device", PLANNED)
def test_the_plan_is_what_a_warm_demo_run_calls(device, needs):
    env = dict(os.environ)
    if needs == "int16":
        env["ACCELSTUB_VNNI"] = "0"  # the int16-pair kernel, as a CPU without VNNI runs it
    elif not KP.NEEDS["vnni"]():
        pytest.skip("this CPU has no AVX-512 VNNI: the byte kernel's entries cannot run here")
    demo_kernels(device, env)  # compiles what the cache lacks (their callees then show too)
    warm = demo_kernels(device, env)
    # an AHEAD entry is compiled by `accelstub compile` only: the demo interprets it, or loads
    # it where this cache has it from elsewhere (emu/kernel_plan.py tiered)
    ahead = {(e[0], e[1]) for e in device_spec(device).kernel_plan if e[4] == KP.AHEAD}
    warm = [k for k in warm if (k[0], k[1]) not in ahead]
    plan = [e for e in device_spec(device).kernel_plan if e[4] in ("", needs)]
    assert sorted([m, n, s] for m, n, s, _, _ in plan) == warm, \
        "the plan's entries should be:\n" + "\n".join(map(repr, warm))


#: the child: a session that records history (as `accelstub serve`'s) stepping, writing memory
#: while halted, continuing and going back, then every kernel of emu/memory/ranges.py numba
#: holds a compiled version of in the process
HISTORY_CHILD = textwrap.dedent('''
    import json, sys
    from accelstub import Session
    from accelstub.emu.jit import KERNELS
    with Session.open(sys.argv[1]) as s:
        mem = next(iter(s.backend.device.bus.memories.values()))
        s.step()
        base = mem.region.base  # a host change (its own bytes again): journaled
        s.write_memory(base, s.read_memory(base, 8))
        s.cont()  # (to the end; NE16's demo is one job: its step ran it, and this is idle)
        s.reverse_step()
        s.reverse_continue()
    print(json.dumps(sorted([m, n, str(sig)] for (m, n), d in KERNELS.items()
                            for sig in d.signatures if m == "accelstub.emu.memory.ranges")))
''')


@pytest.mark.parametrize("device", DEVICES)
def test_the_history_plan_is_what_a_warm_recording_session_calls(device):
    """HISTORY_PLAN (what `accelstub serve` compiles beside the device's plan, and `accelstub
    compile` queues) is exactly the history kernels a warm recording session loads: its
    stops, a host change journaled, going back."""
    from accelstub.devices.device import HISTORY_PLAN

    def run() -> list[list[str]]:
        out = subprocess.run([sys.executable, "-c", HISTORY_CHILD, device], capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.splitlines()[-1])
    run()  # compiles what the cache lacks (their callees then show too)
    assert sorted([m, n, s] for m, n, s, _, _ in HISTORY_PLAN) == run()
