"""Package discovery (pyproject.toml holds everything else): ``api/`` is the package root
``accelstub`` (the public Python API), each other top-level folder is a subpackage of it
(``devices/`` -> ``accelstub.devices``), and
every folder with an ``__init__.py`` below it is found here, so adding a device package needs no
edit of the packaging."""
import os

from setuptools import setup

TOP = ("stub", "devices", "tui", "emu", "configs", "testkit")
packages = ["accelstub." + d.replace(os.sep, ".") for top in TOP for d, _, files in os.walk(top)
            if "__init__.py" in files]
# the package root itself (``from accelstub import Session``): the Python API in api/
setup(packages=["accelstub"] + sorted(packages),
      package_dir={"accelstub": "api"} | {f"accelstub.{t}": t for t in TOP})
