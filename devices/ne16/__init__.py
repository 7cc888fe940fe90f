"""GAP9 NE16 neural engine: the device model and job queue (model.py), one job decoded and
executed (job.py), the pulp-nnx test-application importer (pulp_nnx.py) and its monitor command
(monitor.py)."""

from ..device import DeviceOption, DeviceSpec, conv_plan
from ..device import numba_array as _a
from ..device import numba_signature as _sig

_I = "int64"
#: the kernels a run of the demo calls from Python (their callees are compiled inside them),
#: with the CPU seconds each took to compile on the 2-core AMD EPYC (Zen 4) and the machines
#: that use it (emu/kernel_plan.py NEEDS: the convolution is the byte kernel with AVX-512 VNNI,
#: the int16-pair kernel and its packing of the unsigned input elsewhere): a first run compiles
#: them two at a time, and `accelstub compile` queues them beside the other devices' kernels,
#: so the demo it runs at the end only loads them (DeviceSpec.kernel_plan, issue 31 #5);
#: normquant_parallel, which only jobs larger than the demo's run (devices/ne16/job.py
#: PARALLEL_ELEMENTS), is compiled ahead only (NEEDS "ahead"), as NVDLA's post_process_parallel
_NORM = (_a("int32", 3), *[_a(_I, 1)] * 3, "bool", "bool", *[_I] * 4, _a("uint8", 1), *[_I] * 3,
         _I)
KERNEL_PLAN = conv_plan("uint8") + (
    ("accelstub.emu.conv.ne16", "normquant", _sig(*_NORM, _I, _I), 0.45, ""),
    ("accelstub.emu.conv.ne16", "normquant_parallel", _sig(*_NORM), 0.4, "ahead"),
)

SPEC = DeviceSpec(
    name="ne16", title="GAP9 NE16 neural engine",
    factory="accelstub.devices.ne16.model:Ne16",
    options=(DeviceOption("l1_kib", int, (), None,
                          "size of the L1 window in KiB (default 128, GAP9's; more lets one "
                          "job hold bigger tensors than the chip's L1)"),),
    program_help="a pulp-nnx NE16 test application (the app directory with gen/inc/layer_conf.h "
                 "and gen/src/*.c that test/testgen.py writes) or a command script",
    kernel_plan=KERNEL_PLAN)
