"""Arm Ethos-U85 NPU: the device model (model.py), the command-stream codec (stream.py), the
operations over NPU_SET_* state (ops.py) and the Vela output importer (vela.py)."""

from ..device import DeviceOption, DeviceSpec

SPEC = DeviceSpec(
    name="ethos-u85", title="Arm Ethos-U85 NPU",
    factory="accelstub.devices.ethos_u85.model:EthosU85",
    options=(DeviceOption("macs", int, (128, 256, 512, 1024, 2048), None,
                          "MACs per cycle of the configuration (default 256)"),),
    program_help="Vela's *_vela.tflite or --output-format raw .npz, or a command script",
    program_options=("input", "output", "expect"))
