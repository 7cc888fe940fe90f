"""Whether the accelstub being imported is whole: a folder left in site-packages by an earlier
install can hide the installed package.

Why: pip uninstalls only the files it installed. Any other file left under
``site-packages/accelstub/<sub>/`` (numba's kernel cache, before it moved to a per-user folder)
keeps that folder alive; it has no ``__init__.py``, so Python takes it as an implicit namespace
package, found on sys.path before an editable install's finder is asked, and every import from
it fails with "cannot import name ... (unknown location)". Said once, in one line, with the
folder to remove.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

#: the subpackages of the accelstub namespace (setup.py's TOP): each is a regular package
SUBPACKAGES = ("stub", "devices", "tui", "emu", "configs", "testkit")


def shadowing_folders() -> list[Path]:
    """Folders that Python takes for an accelstub subpackage although they hold no package
    (no ``__init__.py``): each hides the installed subpackage of that name."""
    found = []
    for name in SUBPACKAGES:
        spec = importlib.util.find_spec(f"accelstub.{name}")
        if spec is not None and spec.origin is None:  # an implicit namespace package
            found += [Path(p) for p in spec.submodule_search_locations or ()]
    return found


def install_problem() -> str | None:
    """One line saying which stale folder hides the package and what to remove, or None."""
    folders = shadowing_folders()
    if not folders:
        return None
    stale = sorted({str(f.parent) for f in folders})
    return (f"{', '.join(str(f) for f in folders)}: left over from an earlier install (no "
            f"module, only files such as numba's kernel cache) and hides the installed "
            f"accelstub; remove it (rm -r {' '.join(stale)}) and run again")
