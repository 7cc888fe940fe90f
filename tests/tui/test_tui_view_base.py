"""Issue 33 #5: every tab of the app is a View (tui/view.py), which the app relies on instead of
reading members of untyped views with getattr: each tab has its own fetch and apply and names
the widget to focus."""
import pytest

from accelstub.tui.app import VIEWS
from accelstub.tui.memory import MemoryView
from accelstub.tui.program import ProgramView
from accelstub.tui.registers import RegistersView
from accelstub.tui.status import StatusView
from accelstub.tui.tensor import TensorView
from accelstub.tui.view import View

TABS = {"registers": RegistersView, "memory": MemoryView, "program": ProgramView,
        "status": StatusView, "tensor": TensorView}


def test_the_app_has_one_view_class_per_tab():
    assert [key for key, _ in VIEWS] == list(TABS)


@pytest.mark.parametrize("key", list(TABS))
def test_each_tab_is_a_view_with_its_own_fetch_and_apply(key):
    cls = TABS[key]
    assert issubclass(cls, View)
    assert cls.fetch is not View.fetch and cls.apply is not View.apply, cls.__name__
    assert cls.MAIN.startswith("#"), cls.__name__


def test_the_base_defaults_are_what_the_poll_loop_assumed():
    # the former getattr defaults: follow every poll, re-read live while running
    assert View.RUN_PERIOD == 0.0 and View.LIVE is True
    assert ProgramView.LIVE is False and ProgramView.RUN_PERIOD == 0.25
    assert RegistersView.RUN_PERIOD == 0.0 and StatusView.LIVE is True
