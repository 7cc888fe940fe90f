"""Whether the accelstub being imported is whole: a folder left in site-packages by an earlier
install can hide the installed package.

Why: pip uninstalls only the files it installed. Any other file left under
``site-packages/accelstub/`` (numba's kernel cache, before it moved to a per-user folder) keeps
that folder alive without its ``__init__.py``; Python then takes it for an implicit namespace
package, found on sys.path before an editable install's finder is asked, and ``accelstub``
becomes that empty folder: every import from it fails ("cannot import name ... (unknown
location)"). The package root is a regular package (api/), so the root is the one place a stale
folder can hide the rest. Said once, in one line, with the folder to remove.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path


def shadowing_folders() -> list[Path]:
    """The folders Python takes for the package ``accelstub`` although none holds its
    ``__init__.py`` (an implicit namespace package): they hide the installed package."""
    spec = importlib.util.find_spec("accelstub")
    if spec is None or spec.origin is not None:
        return []
    return [Path(p) for p in spec.submodule_search_locations or ()]


def install_problem() -> str | None:
    """One line saying which stale folder hides the package and what to remove, or None."""
    folders = [str(f) for f in shadowing_folders()]
    if not folders:
        return None
    return (f"{', '.join(folders)}: left over from an earlier install (no module, only files "
            f"such as numba's kernel cache) and hides the installed accelstub; remove it (rm -r "
            f"{' '.join(folders)}) and run again")
