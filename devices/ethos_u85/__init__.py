"""Arm Ethos-U85 NPU: the device model (model.py), the command-stream codec (stream.py), the
operations over NPU_SET_* state (ops.py) and the Vela output importer (vela.py)."""

from ..device import DeviceOption, DeviceSpec

SPEC = DeviceSpec(
    name="ethos-u85", title="Arm Ethos-U85 NPU",
    factory="accelstub.devices.ethos_u85.model:EthosU85",
    options=(DeviceOption("macs", int, (128, 256, 512, 1024, 2048), None,
                          "MACs per cycle of the configuration (default: the one a Vela "
                          "program was compiled for, else 256)"),),
    program_help="Vela's *_vela.tflite or --output-format raw .npz, a directory holding one "
                 "with input.npy and expected.npy (the bundled demo's form), or a command script",
    program_options=("input", "output", "expect", "output_ops"),
    options_from_program="accelstub.devices.ethos_u85.vela:device_options_of")
