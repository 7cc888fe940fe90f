"""Device models: bus, register file, run control and one module per accelerator.

``open_device(name)`` is the single entry point the stub, the CLI and the tests use.
"""
from __future__ import annotations

from .device import Device
from .errors import BusError, DescriptionError, DeviceError, TargetRunning

DEVICES = ("max78000",)


def open_device(name: str, **options: object) -> Device:
    """Create the device model ``name`` (one of :data:`DEVICES`)."""
    if name == "max78000":
        from .max78000 import Max78000
        return Max78000(**options)
    raise ValueError(f"unknown device {name!r}; known devices: {', '.join(DEVICES)}")


__all__ = ["Device", "open_device", "DEVICES", "BusError", "DescriptionError", "DeviceError",
           "TargetRunning"]
