"""MAX78000 CNN accelerator: the device model (model.py), its layer decoder (layer.py) and
datapath (datapath.py), FIFOs, streaming, the test unit, packed MRAM loading, the ai8x-synthesis
project importer (ai8x.py), the program listing (listing.py) and its monitor commands."""

from ..device import DeviceSpec

SPEC = DeviceSpec(
    name="max78000", title="MAX78000 CNN accelerator",
    factory="accelstub.devices.max78000.model:Max78000",
    program_help="an ai8xize.py project directory (cnn.c, main.c, weights.h, sampledata.h, "
                 "sampleoutput.h) or a command script (mww/mwb/load_image lines)")
