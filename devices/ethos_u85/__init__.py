"""Arm Ethos-U85 NPU: the device model (model.py), the command-stream codec (stream.py), the
operations over NPU_SET_* state (ops.py), the Vela output importer (vela.py) and the
``accelstub disasm`` tool (disasm.py)."""

from ..device import DeviceOption, DeviceSpec, DeviceTool
from ..device import numba_array as _a
from ..device import numba_signature as _sig

_I, _A = "int64", "accelstub.emu."
_FINISH_FAST = (_a("int32", 3), _a(_I, 1, True), _a(_I, 1, True), _a(_I, 2))
#: the kernels a run of the demo calls from Python (their callees are compiled inside them),
#: with the CPU seconds each took to compile on the 2-core AMD EPYC (Zen 4) and the machines
#: that use it (emu/kernel_plan.py NEEDS: the 8-bit convolution is the byte kernel with AVX-512
#: VNNI, the int16-pair kernel and its input packing elsewhere); a first run of the demo
#: compiled them one after the other, ~10 s of CPU (DeviceSpec.kernel_plan)
KERNEL_PLAN = (
    (_A + "pool.ethosu85", "_pool_kernel",
     _sig(_a(_I, 3), _a(_I, 3), *[_a(_I, 1)] * 5, _a("uint8", 1)), 2.35, ""),
    (_A + "eltwise.ethosu85", "_ew_kernel",
     _sig(_a(_I, 3), _a(_I, 3), _a(_I, 1), _a(_I, 1), _a("uint8", 1)), 1.5, ""),
    (_A + "weights.ethosu85", "_walk", _sig(_a(_I, 1), "bool", _a(_I, 1), _a(_I, 1)), 1.47, ""),
    (_A + "weights.ethosu85", "_swd_decode", _sig(_a("uint8", 1, True), _a(_I, 1)), 1.03, ""),
    (_A + "conv.int_conv", "_vnni_conv_serial",
     _sig(_a("int32", 3, True), _I, _I, _I, _I, _a(_I, 1), _a("int32", 1), _a("int32", 1),
          _a(_I, 1), _a("int32", 1), *[_I] * 9, _a(_I, 1), _a(_I, 1), "bool"), 1.0, "vnni"),
    (_A + "conv.int_conv", "_pointwise8",
     _sig(_a("int32", 1, True), "int32", *[_a("int32", 1)] * 3, _I, _I, _I), 0.47, "vnni"),
    (_A + "conv.int_conv", "_conv_blocks_serial",
     _sig(*[_a("int32", 1)] * 3, *[_I] * 9, _a(_I, 1), _a(_I, 1), "bool"), 0.5, "int16"),
    (_A + "conv.int_conv", "_pack_input_serial",
     _sig(_a("int8", 3, True, "A"), _I, _I, _I, _a(_I, 1), "bool", _a("int16", 4)), 0.3,
     "int16"),
    (_A + "conv.int_conv", "_pack_input_serial",
     _sig(_a("int8", 3, True), _I, _I, _I, _a(_I, 1), "bool", _a("int16", 4)), 0.3, "int16"),
    (_A + "conv.int_conv", "_depthwise_pixels",
     _sig(_a("int8", 3, True), "int32", _a("int32", 3), _a("int32", 3), *[_I] * 6), 0.7, ""),
    (_A + "conv.ethosu85", "_finish_terms", _sig(*[_a(_I, 1)] * 4, _I), 0.55, ""),
    (_A + "conv.ethosu85", "_finish_fast_serial", _sig(*_FINISH_FAST, _a("int32", 3)), 0.24,
     ""),
    (_A + "conv.ethosu85", "_finish_fast_serial", _sig(*_FINISH_FAST, _a("int8", 3)), 0.24,
     ""),
    (_A + "memory.ethosu85_axi", "burst_counts", _sig(_a(_I, 2), _I, _a(_I, 1), _I), 0.45, ""),
    (_A + "numeric.ethosu85", "sign_extend", _sig(_I, _I), 0.1, ""),
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
