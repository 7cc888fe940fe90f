"""MAX78000 CNN accelerator: the device model (model.py), its layer decoder (layer.py) and
datapath (datapath.py), FIFOs, streaming, the test unit, packed MRAM loading, the ai8x-synthesis
project importer (ai8x.py), the program listing (listing.py) and its monitor commands."""
