"""Where numba keeps the compiled kernels on disk: a per-user cache directory, never the package.

Why: with ``cache=True`` numba writes its cache beside the module (``emu/**/__pycache__``) when
that folder is writable. In a regular install that is ``site-packages/accelstub/emu/...``; pip
uninstalls only the files it installed, so after ``pip install . && accelstub compile`` a later
``pip install -e .`` left ``site-packages/accelstub/`` holding nothing but cache files, an
implicit namespace package that hid the editable install (``cannot import name 'int_conv' from
'accelstub.emu.conv' (unknown location)``). Numba takes ``NUMBA_CACHE_DIR`` before any other
place; we point it at ``$XDG_CACHE_HOME/accelstub/numba`` (``~/.cache/accelstub/numba``) unless
the user set it. Numba files each module's cache under a folder named after the module's own
folder and a hash of its path, so an editable and a regular install never share entries, and a
stale entry is recompiled (the index holds the source file's timestamp and size).

This module is imported by ``emu/__init__.py``, before any kernel is decorated: numba picks a
function's cache locator when ``@njit(cache=True)`` runs.
"""
from __future__ import annotations

import getpass
import os
import sys
import tempfile
from pathlib import Path


def user_cache_dir() -> Path:
    """The per-user cache folder: $XDG_CACHE_HOME (or ~/.cache; %LOCALAPPDATA% on Windows,
    ~/Library/Caches on macOS) / accelstub / numba."""
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        base = Path(os.environ["LOCALAPPDATA"])
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "accelstub" / "numba"


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            return True
    except OSError:
        return False


def use_user_cache_dir() -> str:
    """Point numba's on-disk cache at the per-user folder (a temporary-directory folder of this
    user's when home is not writable), unless NUMBA_CACHE_DIR is set; the folder in use.

    Both the environment (read again by numba's compiler, and inherited by the processes
    ``accelstub compile`` starts) and numba's loaded configuration are set, so it holds whether
    or not numba was imported first."""
    chosen = os.environ.get("NUMBA_CACHE_DIR")
    if not chosen:
        path = user_cache_dir()
        if not _writable(path):
            path = Path(tempfile.gettempdir()) / f"accelstub-numba-{getpass.getuser()}"
        chosen = os.environ["NUMBA_CACHE_DIR"] = str(path)
    from numba.core import config

    config.CACHE_DIR = chosen
    return chosen
