"""accelstub: a GDB remote-protocol debug stub in front of bit-exact emulators of AI
accelerators (MAX78000, Ethos-U85, NE16, NVDLA), and a Python API for scripted sessions.

    from accelstub import Session

    with Session.open("max78000") as s:       # in-process: the bundled demo, no socket
        s.run_to(2)                            # stop before layer 2
        out = s.tensor(1, "output")            # layer 1's output, CHW as ai8x-training has it

``Session.connect("127.0.0.1:3333")`` drives a running ``accelstub serve`` the same way. The
names below are imported on first use, so ``import accelstub.devices`` stays light.
"""
from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module that defines it
_EXPORTS = {
    "Session": "accelstub.session",
    "StopInfo": "accelstub.session",
    "UnitInfo": "accelstub.session",
    "DiffReport": "accelstub.session",
    "TensorSpec": "accelstub.devices.tensors",
    "AccelstubError": "accelstub.devices.errors",
    "DeviceError": "accelstub.devices.errors",
    "TargetError": "accelstub.devices.errors",
    "RegisterNotFound": "accelstub.devices.errors",
    "BusError": "accelstub.devices.errors",
    "TargetRunning": "accelstub.devices.errors",
    "ProgramError": "accelstub.devices.errors",
    "evaluate": "accelstub.evaluation",
    "EvalResults": "accelstub.evaluation",
    "DataError": "accelstub.evaluation",
    "Timeout": "accelstub.errors",
    "ConnectionLost": "accelstub.errors",
}



def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'accelstub' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
