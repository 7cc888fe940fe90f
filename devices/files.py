"""Reading the files users name -- programs and every file a program's importer opens, images
of ``load_image``, inputs -- so that no file can exhaust memory or hang the reader.

``/dev/zero`` or a file that keeps growing never ends, a huge file would be read whole before
anything checks its size (``accelstub run nvdla --program /dev/zero`` grew to 23 GB), and
opening a FIFO that has no writer blocks the thread forever. So reads stop one byte past a
limit the caller states (each format's importer keeps its limit as a constant next to where
it reads), and only regular files are read: files are opened non-blocking and checked with
fstat before a byte is read. Lives in devices/ because the importers read through it; the
stub's commands use the same functions (stub/files.py).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path


class FileRefused(ValueError):
    """The file is not one we read or write; the message names it and says why. A ValueError,
    as every importer error is (stub/program.py turns those into one-line program errors)."""


def file_kind(mode: int) -> str:
    """"a FIFO", "a character device", ... for the message that refuses such a file."""
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


def open_named(path: Path, flags: int, name: str, mode: int = 0o777) -> int:
    """os.open, with a NUL byte in the name refused (os.open raises ValueError for it, which
    no caller expects: a fuzzed `verify_image a\\x00b` logged a traceback)."""
    if "\0" in os.fspath(path):
        raise FileRefused(f"{name!r}: a file name cannot contain a NUL byte")
    return os.open(path, flags, mode)


def mib(n: int) -> str:
    """A limit as messages give it: "16 MiB" (the limits are whole MiB)."""
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"


def read_bounded(path: Path, limit: int, limit_text: str, *, name: str | None = None,
                 regular_only: bool = True) -> bytes:
    """The contents of ``path``, at most ``limit`` bytes. A longer file raises FileRefused
    "<name> is N bytes; at most <limit_text>" (a regular file's size is checked before reading,
    so a 10 GB file costs nothing). With ``regular_only`` (programs, the server's commands)
    FIFOs, devices and sockets are refused without blocking; without it (a command-line tool
    reading a pipe) they are read up to the limit. OSError for files that cannot be opened."""
    name = name or str(path)
    flags = os.O_RDONLY | (os.O_NONBLOCK if regular_only else 0)
    fd = open_named(path, flags, name)
    with os.fdopen(fd, "rb", buffering=0) as f:
        st = os.fstat(fd)
        regular = stat.S_ISREG(st.st_mode)
        if stat.S_ISDIR(st.st_mode) or (regular_only and not regular):
            raise FileRefused(f"{name} is {file_kind(st.st_mode)}; only regular files are read")
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


def read_program_file(path: Path, limit: int, what: str, *, name: str | None = None) -> bytes:
    """A file of a program (``what``: "an NVDLA trace", "an ai8x-synthesis source file", ...),
    regular files only, at most ``limit`` bytes: the one reader of every program format, so
    every format refuses devices, FIFOs and oversized files with the same line, e.g.
    "x.cfg is 143654912 bytes; at most 16 MiB for an NVDLA trace"."""
    return read_bounded(path, limit, f"{mib(limit)} for {what}", name=name)


def read_program_text(path: Path, limit: int, what: str, *, name: str | None = None,
                      encoding: str = "utf-8", errors: str = "replace") -> str:
    """:func:`read_program_file` decoded (the C and trace importers read text)."""
    return read_program_file(path, limit, what, name=name).decode(encoding, errors)
