"""Files named by users (``load_image``, ``verify_image``, ``dump_image``, ``svd``, ``accelstub
disasm``), read and written so that no file can exhaust memory or hang a connection.

``/dev/zero`` or a file that keeps growing never ends, a huge file would be read whole before
anything checks its size, and opening a FIFO that has no writer (or no reader) blocks the
thread that serves the connection forever. So reads stop one byte past a limit the caller
states, and the server's commands accept regular files only: files are opened non-blocking and
checked with fstat before a byte is read or written.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

# the bounded reader lives in devices/ (the program importers read through it); re-exported
from accelstub.devices.files import FileRefused, file_kind, open_named, read_bounded

__all__ = ["FileRefused", "read_bounded", "write_regular"]


def write_regular(path: Path, data: bytes, *, name: str | None = None) -> None:
    """Create or replace the regular file ``path`` with ``data``. A FIFO, device or directory
    there is refused (FileRefused) instead of blocking on a FIFO without a reader; OSError for
    other failures."""
    name = name or str(path)
    try:
        fd = open_named(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, name, 0o666)
    except OSError as e:
        if e.errno == errno.ENXIO:  # a FIFO with no reader
            raise FileRefused(f"{name} is a FIFO; only regular files are written") from None
        raise
    with os.fdopen(fd, "wb", buffering=0) as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(f"{name} is {file_kind(st.st_mode)}; only regular files are written")
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[f.write(view):]
