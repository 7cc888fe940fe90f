"""Device models: bus, register file, run control and one module per accelerator.

``open_device(name)`` is the single entry point the stub, the CLI and the tests use.
"""
from __future__ import annotations

from .device import Device
from .errors import BusError, DescriptionError, DeviceError, TargetRunning

DEVICES = ("max78000", "ethos-u85")


def open_device(name: str, **options: object) -> Device:
    """Create the device model ``name`` (one of :data:`DEVICES`); ethos-u85 takes ``macs``
    (MACs per cycle: 128, 256 (default), 512, 1024 or 2048)."""
    if name == "max78000":
        from .max78000.model import Max78000
        return Max78000(**options)
    if name == "ethos-u85":
        from .ethos_u85.model import EthosU85
        return EthosU85(**options)  # options: macs=128|256|512|1024|2048
    raise ValueError(f"unknown device {name!r}; known devices: {', '.join(DEVICES)}")


__all__ = ["Device", "open_device", "DEVICES", "BusError", "DescriptionError", "DeviceError",
           "TargetRunning"]
