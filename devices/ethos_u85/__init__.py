"""Arm Ethos-U85 NPU: the device model (model.py), the command-stream codec (stream.py), the
operations over NPU_SET_* state (ops.py) and the Vela output importer (vela.py)."""
