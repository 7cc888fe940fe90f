"""NVDLA nv_small: the units' register groups, hardware layers and GLB interrupts (model.py), the
convolution pipeline (conv.py) with its image input (pixel.py), SDP (sdp.py), PDP (pdp.py), CDP
(cdp.py), the in-memory data formats (feature.py), the trace-test player (trace.py) and the
monitor command (monitor.py)."""

from ..device import DeviceSpec

SPEC = DeviceSpec(
    name="nvdla", title="NVDLA nv_small",
    factory="accelstub.devices.nvdla.model:Nvdla",
    program_help="an NVDLA trace test (the .cfg of verif/tests/trace_tests, or its directory, with "
                 "its memory files) or a command script")
