"""Package discovery for the accelstub namespace (pyproject.toml holds everything else): each
top-level folder is a subpackage of ``accelstub`` (``devices/`` -> ``accelstub.devices``), and
every folder with an ``__init__.py`` below it is found here, so adding a device package needs no
edit of the packaging."""
import os

from setuptools import setup

TOP = ("stub", "devices", "tui", "emu", "configs", "testkit")
packages = ["accelstub." + d.replace(os.sep, ".") for top in TOP for d, _, files in os.walk(top)
            if "__init__.py" in files]
setup(packages=sorted(packages), package_dir={f"accelstub.{t}": t for t in TOP})
