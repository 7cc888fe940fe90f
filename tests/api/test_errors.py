"""The documented exception hierarchy (issue 26 #4): one base, the standard bases old callers
catch, RegisterNotFound with close matches from the device layer itself."""
from __future__ import annotations

import pickle

import pytest

import accelstub
from accelstub.devices import errors as dev_errors
from accelstub.devices import open_device


def test_hierarchy():
    A = accelstub.AccelstubError
    for name in ("TargetError", "ProgramError", "Timeout", "ConnectionLost", "BusError",
                 "TargetRunning", "DeviceError", "RegisterNotFound"):
        assert issubclass(getattr(accelstub, name), A), name
    for name in ("DeviceError", "BusError", "TargetRunning", "RegisterNotFound"):
        assert issubclass(getattr(accelstub, name), accelstub.TargetError), name
    assert issubclass(accelstub.RegisterNotFound, KeyError)
    assert issubclass(accelstub.ProgramError, ValueError)
    assert issubclass(dev_errors.DescriptionError, ValueError)
    assert issubclass(dev_errors.DescriptionError, A)
    assert issubclass(accelstub.Timeout, TimeoutError)
    assert issubclass(accelstub.ConnectionLost, ConnectionError)


def test_program_error_is_still_importable_from_stub_program():
    from accelstub.stub.program import ProgramError

    assert ProgramError is accelstub.ProgramError is dev_errors.ProgramError


def test_register_lookup_by_name_raises_register_not_found_with_close_matches():
    dev = open_device("max78000")
    with pytest.raises(accelstub.RegisterNotFound) as err:
        dev.read_register("CNNx16_0_CTL")
    e = err.value
    assert str(e).startswith("no register 'CNNx16_0_CTL' on max78000; did you mean "
                             "CNNx16_0_CTRL")
    assert (e.name, e.device, e.close[0]) == ("CNNx16_0_CTL", "max78000", "CNNx16_0_CTRL")
    with pytest.raises(KeyError):  # what callers before the hierarchy caught
        dev.description.register("CNNx16_0_CTL")
    with pytest.raises(accelstub.RegisterNotFound, match="no register 'ZZZZ' on max78000$"):
        dev.write_register("ZZZZ", 1)  # nothing close: no suggestion
    again = pickle.loads(pickle.dumps(e))
    assert (str(again), again.close) == (str(e), e.close)
