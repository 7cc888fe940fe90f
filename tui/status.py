"""Status view: run state, stop reason, pc, and the interrupt lines and counters with their
history as sparklines, updating live while the device runs.

The values come from ``monitor status`` (``key: value`` lines) or, on a stub without it, from
``monitor poll`` and the EMU_* registers (see :meth:`Target.status`). A sample joins the history
while the target runs and whenever a value changes, so an idle target draws a still picture.
Interrupt lines (``irq.*``) are drawn as levels; other counters as their increase per sample.
"""
from __future__ import annotations

from collections import deque
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Label, Sparkline, Static

from .target import Target, parse_int

HISTORY = 120  # samples kept: 12 s at the running poll rate
HIDDEN = {"state", "pc", "stop"}


class Metric(Horizontal):
    def __init__(self, key: str, **kw: Any) -> None:
        super().__init__(classes="metric", **kw)
        self.key = key
        self.level = key.startswith("irq.")

    def compose(self) -> ComposeResult:
        label = self.key + ("" if self.level else " Δ")
        yield Label(label, classes="metric-name")
        yield Sparkline([0], classes="metric-spark")
        yield Label("", classes="metric-value")


class StatusView(Widget):
    MAIN = "#status-metrics"  # focused when the view is shown
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.history: dict[str, deque[float]] = {}
        self.last: dict[str, int] = {}
        self.samples = 0
        self.status: dict[str, str] = {}

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield Static(id="status-table")
            with Vertical(id="status-right"):
                yield Label("history (newest right)", id="status-caption")
                yield VerticalScroll(id="status-metrics")

    def fetch(self, target: Target, full: bool) -> None:
        return None  # the status itself is polled by the app on every tick

    def apply(self, data: Any, status: dict[str, str]) -> None:
        pass

    def record(self, status: dict[str, str], running: bool, visible: bool = True) -> None:
        """Called by the app with every status poll (whichever view is visible): the history
        grows at every poll; the widgets are redrawn only while ``visible`` (hidden, they would
        still cost a layout and a render at every poll), and by :meth:`shown`."""
        numeric = {k: v for k, v in ((k, parse_int(s)) for k, s in status.items()
                                     if k not in HIDDEN) if v is not None}
        changed = status != self.status
        self.status = dict(status)
        if not (running or changed):
            return
        self.samples += 1
        for k, v in numeric.items():
            hist = self.history.setdefault(k, deque(maxlen=HISTORY))
            if k.startswith("irq."):
                hist.append(float(v))
            else:
                hist.append(float(max(0, v - self.last.get(k, v))))
            self.last[k] = v
        if self.is_mounted and visible:
            self._update()
        else:
            self._stale = True

    def shown(self) -> None:
        """The view became visible: draw what was recorded while it was hidden."""
        if getattr(self, "_stale", False) and self.is_mounted:
            self._stale = False
            self._update()

    def _update(self) -> None:
        st = self.status
        t = Text()
        state = st.get("state", "?")
        t.append("state   ", style="dim")
        t.append(f"{state}\n", style="bold green" if state == "halted" else "bold yellow")
        for k in ("pc", "stop", "reason"):
            if k in st:
                t.append(f"{k:<8}", style="dim")
                t.append(f"{st[k]}\n")
        for k, v in st.items():
            if k in HIDDEN or k == "reason":
                continue
            t.append(f"{k:<8.8}" if len(k) <= 8 else f"{k}\n        ", style="dim")
            style = "bold red" if k.startswith("irq.") and v not in ("0", "") else ""
            t.append(f"{v}\n", style=style)
        self.query_one("#status-table", Static).update(t)
        box = self.query_one("#status-metrics", VerticalScroll)
        have = {m.key: m for m in box.query(Metric)}
        for k in self.history:
            if k not in have:
                m = Metric(k)
                box.mount(m)
                have[k] = m
        for k, m in have.items():
            if not m.is_mounted or not m.children:
                self.call_after_refresh(self._update_metric, m)
            else:
                self._update_metric(m)

    def _update_metric(self, m: Metric) -> None:
        hist = self.history.get(m.key)
        if not hist or not m.children:
            return
        # a fixed-length window (zeros before the first sample): the newest sample is always at
        # the right edge and an all-zero history draws as a flat low line
        m.query_one(".metric-spark", Sparkline).data = [0.0] * (HISTORY - len(hist)) + list(hist)
        m.query_one(".metric-value", Label).update(self.status.get(m.key, ""))

    def on_mount(self) -> None:
        if self.status:
            self._update()
