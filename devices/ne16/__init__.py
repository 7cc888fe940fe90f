"""GAP9 NE16 neural engine: the device model and job queue (model.py), one job decoded and
executed (job.py), the pulp-nnx test-application importer (pulp_nnx.py) and its monitor command
(monitor.py)."""

from ..device import DeviceOption, DeviceSpec

SPEC = DeviceSpec(
    name="ne16", title="GAP9 NE16 neural engine",
    factory="accelstub.devices.ne16.model:Ne16",
    options=(DeviceOption("l1_kib", int, (), None,
                          "size of the L1 window in KiB (default 128, GAP9's; more lets one "
                          "job hold bigger tensors than the chip's L1)"),),
    program_help="a pulp-nnx NE16 test application (the app directory with gen/inc/layer_conf.h "
                 "and gen/src/*.c that test/testgen.py writes) or a command script")
