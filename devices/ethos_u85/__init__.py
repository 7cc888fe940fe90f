"""Arm Ethos-U85 NPU: the device model (model.py), the command-stream codec (stream.py), the
operations over NPU_SET_* state (ops.py), the Vela output importer (vela.py) and the
``accelstub disasm`` tool (disasm.py)."""

from ..device import DeviceOption, DeviceSpec, DeviceTool, conv_plan
from ..device import numba_array as _a
from ..device import numba_signature as _sig

_I, _A = "int64", "accelstub.emu."
_FINISH_FAST = (_a("int32", 3), _a(_I, 1, True), _a(_I, 1, True), _a(_I, 2))
#: the kernels a run of the demo calls from Python (their callees are compiled inside them),
#: with the CPU seconds each took to compile on the 2-core AMD EPYC (Zen 4) and the machines
#: that use it (emu/kernel_plan.py NEEDS: the 8-bit convolution is the byte kernel with AVX-512
#: VNNI, the int16-pair kernel and its input packing elsewhere); a first run of the demo
#: compiled them one after the other, ~10 s of CPU (DeviceSpec.kernel_plan). Its max pool,
#: MUL and output-stage terms run in numpy, not on the general pooling and elementwise
#: kernels (~4 s of compiling, issue 31 #5; design notes "Ethos-U85 kernel plan"); its few
#: weights are decoded, its 288-element add done and its AXI bursts counted interpreted: the
#: decoder, the walk, _addsub_fast and the burst counter are compiled ahead only (NEEDS "ahead": by
#: `accelstub compile`, for larger programs)
KERNEL_PLAN = conv_plan(byte_kernel_s=1.1) + (
    (_A + "eltwise.ethosu85", "_addsub_fast",
     _sig(_a(_I, 3), _a(_I, 3), "bool", _a(_I, 1), _a(_I, 1), _a(_I, 3)), 0.65,
     "ahead"),  # the demo's small add runs interpreted (kernel_plan.tiered)
    (_A + "weights.ethosu85", "_walk", _sig(_a(_I, 1), "bool", _a(_I, 1), _a(_I, 1)), 1.47,
     "ahead"),
    (_A + "weights.ethosu85", "_swd_decode", _sig(_a("uint8", 1, True), _a(_I, 1)), 1.03,
     "ahead"),
    (_A + "conv.int_conv", "_pointwise8",
     _sig(_a("int32", 1, True), "int32", *[_a("int32", 1)] * 3, _I, _I, _I), 0.45, "vnni"),
    (_A + "conv.int_conv", "_pack_pixels",
     _sig(_a("int8", 1, True), "int32", _I, _I, _a("int16", 1)), 0.2, "int16"),
    (_A + "conv.int_conv", "_pointwise16", _sig(*[_a("int32", 1)] * 3, *[_I] * 5), 0.6, "int16"),
    (_A + "conv.int_conv", "_depthwise_pixels",
     _sig(_a("int8", 3, True), "int32", _a("int32", 3), _a("int32", 3), *[_I] * 6), 1.0, ""),
    (_A + "conv.ethosu85", "_finish_fast_serial", _sig(*_FINISH_FAST, _a("int8", 3)), 0.3,
     ""),  # every OFM type, as bytes
    (_A + "memory.ethosu85_axi", "_burst_counts", _sig(_a(_I, 2), _I, _a(_I, 1), _a(_I, 2)), 0.3,
     "ahead"),
)

#: what ``accelstub disasm`` takes (its help, and its error for a file that is none of them)
DISASM_TAKES = ("a raw command stream (little-endian 32-bit words), a COP1 payload, Vela's "
                "*_vela.tflite or its --output-format raw *_vela.npz")

SPEC = DeviceSpec(
    name="ethos-u85", title="Arm Ethos-U85 NPU",
    factory="accelstub.devices.ethos_u85.model:EthosU85",
    options=(DeviceOption("macs", int, (128, 256, 512, 1024, 2048), None,
                          "MACs per cycle of the configuration (default: the one a Vela "
                          "program was compiled for, else 256)"),),
    program_help="Vela's *_vela.tflite or --output-format raw .npz, a directory holding one "
                 "with input.npy and expected.npy (the bundled demo's form), or a command script",
    program_options=("input", "output", "expect", "output_ops"),
    options_from_program="accelstub.devices.ethos_u85.vela:device_options_of",
    tools=(DeviceTool("disasm", "disassemble an Ethos-U85 command stream: " + DISASM_TAKES,
                      "file", "raw command stream, COP1 payload, *_vela.tflite or *_vela.npz",
                      "accelstub.devices.ethos_u85.disasm:disasm"),),
    kernel_plan=KERNEL_PLAN)
