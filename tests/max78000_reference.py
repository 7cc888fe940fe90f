"""The independent MAX78000 layer reference lives in accelstub.testkit.max78000_reference (the
program builder uses it too); re-exported here for the tests."""
from accelstub.testkit.max78000_reference import *  # noqa: F401,F403
from accelstub.testkit.max78000_reference import _round  # noqa: F401
