"""Typed errors of the device layer; stub/ turns them into ``Exx`` replies and command errors."""
from __future__ import annotations


class DescriptionError(ValueError):
    """A device description is malformed. Names the file and the entry."""

    def __init__(self, source: str, entry: str, message: str) -> None:
        self.source, self.entry = source, entry
        super().__init__(f"{source}: {entry}: {message}")


class BusError(Exception):
    """An access the device's bus does not accept (unmapped, unpopulated, read-only, ...).

    ``errno`` is the value the stub puts in its ``Exx`` reply (14 = EFAULT for bad addresses)."""

    def __init__(self, address: int, message: str, errno: int = 14) -> None:
        self.address, self.errno = address, errno
        super().__init__(f"{address:#010x}: {message}")


class TargetRunning(Exception):
    """The operation needs a halted device."""

    def __init__(self, what: str = "operation") -> None:
        super().__init__(f"target running: {what} needs the target halted (use 'halt' first)")


class DeviceError(Exception):
    """The device model reports a fault (bad program, UNPREDICTABLE configuration, ...)."""
