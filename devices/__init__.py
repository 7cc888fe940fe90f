"""Device models: the contract (device.py), bus, register file, run control, host programs, the
description loader, and one package per accelerator.

The registry below is the one place that lists the devices: adding a device is its package (with
a ``SPEC``, a :class:`DeviceSpec`) and one line here. ``open_device(name)`` is the single entry
point the stub, the CLI and the tests use.
"""
from __future__ import annotations

import importlib

from .device import Device, DeviceSpec
from .errors import BusError, DescriptionError, DeviceError, TargetRunning

#: device key -> package holding its SPEC
REGISTRY = {
    "max78000": "accelstub.devices.max78000",
    "ethos-u85": "accelstub.devices.ethos_u85",
    "ne16": "accelstub.devices.ne16",
    "nvdla": "accelstub.devices.nvdla",
}
DEVICES = tuple(REGISTRY)

#: the default memory budget of reverse-execution history (``--history-mib``, devices/history.py):
#: here and not in history.py, which imports the numba kernels, so that building the CLI's parser
#: (even ``accelstub --help``) needs no numba (issue 31 #5)
DEFAULT_BUDGET_MIB = 256


def device_spec(name: str) -> DeviceSpec:
    """The registry entry of ``name`` (imports only the package's light ``__init__``)."""
    if name not in REGISTRY:
        raise ValueError(f"unknown device {name!r}; known devices: {', '.join(DEVICES)}")
    return importlib.import_module(REGISTRY[name]).SPEC


def open_device(name: str, **options: object) -> Device:
    """Create the device model ``name`` with its construction ``options`` (DeviceSpec.options,
    e.g. ethos-u85's ``macs``)."""
    spec = device_spec(name)
    known = {o.name for o in spec.options}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"{name} takes no option {', '.join(unknown)}"
                         + (f" (its options: {', '.join(sorted(known))})" if known else ""))
    return spec.create(**options)


__all__ = ["Device", "DeviceSpec", "open_device", "device_spec", "DEVICES", "REGISTRY",
           "DEFAULT_BUDGET_MIB",
           "BusError", "DescriptionError", "DeviceError", "TargetRunning"]
