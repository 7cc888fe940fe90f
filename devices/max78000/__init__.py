"""MAX78000 CNN accelerator: the device model (model.py), its layer decoder (layer.py) and
datapath (datapath.py), FIFOs, streaming, the test unit, packed MRAM loading, the ai8x-synthesis
project importer (ai8x.py), the program listing (listing.py) and its monitor commands."""

from ..device import DeviceSpec, conv_plan
from ..device import numba_array as _a
from ..device import numba_signature as _sig

_I = "int64"
#: the kernels a run of the demo calls from Python (their callees are compiled inside them),
#: with the CPU seconds each took to compile on the 2-core AMD EPYC (Zen 4) and the machines
#: that use it (emu/kernel_plan.py NEEDS: the convolution is the byte kernel with AVX-512 VNNI,
#: the int16-pair kernel elsewhere); every MAX78000 layer of the usual layout needs most of
#: them (DeviceSpec.kernel_plan)
KERNEL_PLAN = conv_plan() + (
    ("accelstub.emu.pool.max78000", "_pool_into",
     _sig(_a("int8", 3), _I, _I, _I, _I, _I, _a("int8", 3), _a("int32", 1)), 0.41, ""),
    ("accelstub.emu.conv.max78000", "_finish",
     _sig(_a("int32", 3), _a(_I, 1), _I, _I, _a("int32", 3)), 0.34, ""),
    ("accelstub.emu.memory.max78000", "scatter_words",
     _sig(_a("uint32", 2), _a("int32", 2), _a(_I, 1), _I), 0.28, ""),
    ("accelstub.emu.memory.max78000", "_gather_hwc_words",
     _sig(_a("uint32", 2), _a(_I, 1), _a(_I, 1), _I, _I, _I, _I, _a("uint32", 2)), 0.17, ""),
)

SPEC = DeviceSpec(
    name="max78000", title="MAX78000 CNN accelerator",
    factory="accelstub.devices.max78000.model:Max78000",
    program_help="an ai8xize.py project directory (cnn.c, main.c, weights.h, sampledata.h, "
                 "sampleoutput.h) or a command script (mww/mwb/load_image lines)",
    kernel_plan=KERNEL_PLAN)
