"""Tests here have halt/step time limits: compile the kernels before the first of them."""
import pytest


@pytest.fixture(autouse=True)
def _warm(warm_kernels):
    pass
