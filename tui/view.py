"""The base of the app's tabs: what the poll loop and the tab switch ask of every view, typed
and with its defaults in one place (issue 33 #5: the app held its views as ``Any`` and read
these members with getattr)."""
from __future__ import annotations

from typing import Any, ClassVar

from textual.widget import Widget

from .target import Target


class View(Widget):
    """One tab. The poll thread calls :meth:`fetch` (reads the target, no widget changes), the
    app's thread then :meth:`apply` with its result, so a slow target never blocks drawing."""

    #: selector of the widget focused when the view is shown (its keys work, the footer shows
    #: them); "" for none
    MAIN: ClassVar[str] = ""
    #: while the target runs, fetched at most every RUN_PERIOD s (0: at every poll): a large
    #: view's redraw costs the emulation more than it shows
    RUN_PERIOD: ClassVar[float] = 0.0
    #: whether the view re-reads at every poll while the target runs (else only on a refresh
    #: while halted: what it shows does not change during a run)
    LIVE: ClassVar[bool] = True

    def fetch(self, target: Target, full: bool) -> Any:
        """What :meth:`apply` needs, read in the poll thread; ``full``: re-read everything."""
        raise NotImplementedError

    def apply(self, data: Any, status: dict[str, str]) -> None:
        """Show ``data`` (from :meth:`fetch`) and the polled ``status``, in the app's thread."""
        raise NotImplementedError

    def shown(self) -> None:
        """Its tab became the active one: views skip drawing while hidden, so catch up."""
