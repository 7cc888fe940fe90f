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


class FileRefused(Exception):
    """The file is not one we read or write; the message names it and says why."""


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def _open(path: Path, flags: int, name: str, mode: int = 0o777) -> int:
    """os.open, with a NUL byte in the name refused (os.open raises ValueError for it, which
    no caller expects: a fuzzed `verify_image a\\x00b` logged a traceback)."""
    if "\0" in os.fspath(path):
        raise FileRefused(f"{name!r}: a file name cannot contain a NUL byte")
    return os.open(path, flags, mode)


def read_bounded(path: Path, limit: int, limit_text: str, *, name: str | None = None,
                 regular_only: bool = True) -> bytes:
    """The contents of ``path``, at most ``limit`` bytes. A longer file raises FileRefused
    "<name> is N bytes; at most <limit_text>" (a regular file's size is checked before reading,
    so a 10 GB file costs nothing). With ``regular_only`` (the server's commands) FIFOs, devices
    and sockets are refused without blocking; without it (a command-line tool reading a pipe)
    they are read up to the limit. OSError for files that cannot be opened."""
    name = name or str(path)
    flags = os.O_RDONLY | (os.O_NONBLOCK if regular_only else 0)
    fd = _open(path, flags, name)
    with os.fdopen(fd, "rb", buffering=0) as f:
        st = os.fstat(fd)
        regular = stat.S_ISREG(st.st_mode)
        if stat.S_ISDIR(st.st_mode) or (regular_only and not regular):
            raise FileRefused(f"{name} is {_kind(st.st_mode)}; only regular files are read")
        if regular and st.st_size > limit:
            raise FileRefused(f"{name} is {st.st_size} bytes; at most {limit_text}")
        if regular_only:
            os.set_blocking(fd, True)  # a regular file: nothing to wait for
        chunks, total = [], 0
        while total <= limit:
            chunk = f.read(min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    if total > limit:  # a file that grew, or a device / pipe without end
        raise FileRefused(f"{name} has more than {limit} bytes; at most {limit_text}")
    return b"".join(chunks)


def write_regular(path: Path, data: bytes, *, name: str | None = None) -> None:
    """Create or replace the regular file ``path`` with ``data``. A FIFO, device or directory
    there is refused (FileRefused) instead of blocking on a FIFO without a reader; OSError for
    other failures."""
    name = name or str(path)
    try:
        fd = _open(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, name, 0o666)
    except OSError as e:
        if e.errno == errno.ENXIO:  # a FIFO with no reader
            raise FileRefused(f"{name} is a FIFO; only regular files are written") from None
        raise
    with os.fdopen(fd, "wb", buffering=0) as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(f"{name} is {_kind(st.st_mode)}; only regular files are written")
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[f.write(view):]
