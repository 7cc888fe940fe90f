"""NVDLA nv_small: the units' register groups, hardware layers and GLB interrupts (model.py), the
convolution pipeline (conv.py) with its image input (pixel.py), SDP (sdp.py), PDP (pdp.py), CDP
(cdp.py), the in-memory data formats (feature.py), the trace-test player (trace.py) and the
monitor command (monitor.py)."""

from ..device import DeviceSpec, conv_plan
from ..device import numba_array as _a
from ..device import numba_signature as _sig

_I = "int64"
#: the kernels a run of the demo calls from Python (their callees are compiled inside them),
#: with the CPU seconds each took to compile on the 2-core AMD EPYC (Zen 4) and the machines
#: that use it (emu/kernel_plan.py NEEDS: the convolution is the byte kernel with AVX-512 VNNI,
#: the int16-pair kernel elsewhere): a first run compiles them two at a time, and `accelstub
#: compile` queues them beside the other devices' kernels, so the demo it runs at the end only
#: loads them (SDP's post_process had been the last compile of the command, one core idle;
#: DeviceSpec.kernel_plan, issue 31 #5). post_process_parallel, which only cubes larger than
#: the demo's run (devices/nvdla/sdp.py PARALLEL_ELEMENTS), is compiled ahead only (NEEDS "ahead":
#: by `accelstub compile`, not by a run's plan), so that a large layer's first run finds it
_POST = (_a("int32", 3), _I, _a(_I, 1), _I, *[_a(_I, 2)] * 5, *[_I] * 6, _a("uint64", 1),
         *[_I] * 3)
KERNEL_PLAN = conv_plan() + (
    ("accelstub.emu.numeric.nvdla", "post_process", _sig(*_POST, _I, _I, _I), 1.1, ""),
    ("accelstub.emu.numeric.nvdla", "post_process_parallel", _sig(*_POST, _I), 1.0, "ahead"),
)

SPEC = DeviceSpec(
    name="nvdla", title="NVDLA nv_small",
    factory="accelstub.devices.nvdla.model:Nvdla",
    program_help="an NVDLA trace test (the .cfg of verif/tests/trace_tests, or its directory, with "
                 "its memory files) or a command script",
    kernel_plan=KERNEL_PLAN)
