"""Arm Ethos-U85 NPU: the device model (model.py), the command-stream codec (stream.py), the
operations over NPU_SET_* state (ops.py), the Vela output importer (vela.py) and the
``accelstub disasm`` tool (disasm.py)."""

from ..device import DeviceOption, DeviceSpec, DeviceTool

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
                      "accelstub.devices.ethos_u85.disasm:disasm"),))
