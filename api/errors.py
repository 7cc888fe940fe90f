"""Errors only the Python API raises (the rest of the hierarchy is accelstub.devices.errors,
re-exported from the package root): waiting too long, and losing the stub.

Both derive from AccelstubError and from the standard error of their kind, so ``except
TimeoutError`` / ``except ConnectionError`` in a test harness catch them too.
"""
from __future__ import annotations

from accelstub.devices.errors import AccelstubError


class Timeout(AccelstubError, TimeoutError):
    """A call that waits (step, cont, run_to, halt, a remote request) did not finish in its
    timeout. A run is halted before this is raised, so the target is never left running
    behind a test's back; the message names the verb, the timeout and where the target
    halted."""


class ConnectionLost(AccelstubError, ConnectionError):
    """The remote stub closed the connection or stopped answering mid-session. Raised at once
    (no call waits out its timeout on a dead socket); the session cannot be used again."""
