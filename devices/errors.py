"""Typed errors of the device layer; stub/ turns them into ``Exx`` replies and command errors.

The hierarchy is the public one of the Python API (``from accelstub import ...``; the API adds
Timeout and ConnectionLost in accelstub.errors), so a script catches one base for everything
accelstub reports about its input or its target:

    AccelstubError
      TargetError            what the target reports
        DeviceError          a model fault (bad program, UNPREDICTABLE configuration)
        BusError             an access the bus refuses (.address)
        TargetRunning        the operation needs a halted target
        RegisterNotFound     a register name the device does not have (.name, .close)
      ProgramError           a program file that cannot be loaded (names file and line)
      DescriptionError       a malformed device description

ProgramError and DescriptionError stay ValueErrors and RegisterNotFound a KeyError, so callers
written before the hierarchy existed keep working.
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable


class AccelstubError(Exception):
    """Base of every error accelstub reports (catch this one to catch them all)."""


class TargetError(AccelstubError):
    """Something the target (device model, bus, run control) reports."""


class DescriptionError(ValueError, AccelstubError):
    """A device description is malformed. Names the file and the entry."""

    def __init__(self, source: str, entry: str, message: str) -> None:
        self.source, self.entry = source, entry
        super().__init__(f"{source}: {entry}: {message}")


class ProgramError(ValueError, AccelstubError):
    """A program cannot be loaded; the message names the file (and line)."""


class BusError(TargetError):
    """An access the device's bus does not accept (unmapped, unpopulated, read-only, ...).

    ``errno`` is the value the stub puts in its ``Exx`` reply (14 = EFAULT for bad addresses)."""

    def __init__(self, address: int, message: str, errno: int = 14) -> None:
        self.address, self.errno = address, errno
        super().__init__(f"{address:#010x}: {message}")


class TargetRunning(TargetError):
    """The operation needs a halted device."""

    def __init__(self, what: str = "operation") -> None:
        super().__init__(f"target running: {what} needs the target halted (use 'halt' first)")


class DeviceError(TargetError):
    """The device model reports a fault (bad program, UNPREDICTABLE configuration, ...)."""


class RegisterNotFound(TargetError, KeyError):
    """A register name the device does not have. ``close`` lists the nearest names (difflib),
    so a typo's message says what was meant: a bare KeyError said only the name.

    A KeyError too, so code that looked names up in a dict before keeps working."""

    def __init__(self, name: str, device: str, close: Iterable[str] = ()) -> None:
        self.name, self.device, self.close = name, device, tuple(close)
        hint = f"; did you mean {', '.join(self.close)}?" if self.close else ""
        self.message = f"no register {name!r} on {device}{hint}"
        super().__init__(self.message)

    @classmethod
    def among(cls, name: str, device: str, names: Iterable[str]) -> RegisterNotFound:
        """The error for ``name`` with the close matches among ``names`` (case-insensitive)."""
        names = list(names)
        by_upper = {n.upper(): n for n in names}
        close = difflib.get_close_matches(name.upper(), list(by_upper), n=3, cutoff=0.6)
        return cls(name, device, [by_upper[c] for c in close])

    def __str__(self) -> str:  # KeyError's own __str__ would quote the message
        return self.message

    def __reduce__(self):  # picklable with its fields (pytest-xdist, multiprocessing)
        return (type(self), (self.name, self.device, self.close))
