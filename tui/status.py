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
from textual.containers import Horizontal, Vertical
from textual.widgets import Label, Static

from .target import Target, parse_int
from .view import View

HISTORY = 120  # samples kept: 12 s at the running poll rate
HIDDEN = {"state", "pc", "stop"}


BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int) -> str:
    """The newest ``width`` values as bar characters, scaled to their maximum (zeros and a flat
    history draw as the lowest bar). Drawn as text so the whole history panel is one widget:
    a Sparkline widget per metric cost a layout and a render each at every poll."""
    vals = values[-width:]
    top = max(vals, default=0.0)
    if top <= 0:
        return BARS[0] * len(vals)
    n = len(BARS) - 1
    return "".join(BARS[int(round(n * max(0.0, v) / top))] for v in vals)


class History(Static, can_focus=True):
    """The history panel (focusable, so the view has a place for the keyboard focus)."""


class StatusView(View):
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
                yield History(id="status-metrics")

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
        shown = [k for k in st if k not in HIDDEN and k != "reason"]
        w = max((len(k) for k in shown), default=6) + 2  # whole labels, values aligned
        t.append("state".ljust(w), style="dim")
        t.append(f"{state}\n", style="bold green" if state == "halted" else "bold yellow")
        for k in ("pc", "stop", "reason"):
            if k in st:
                t.append(f"{k:<{w}}", style="dim")
                t.append(f"{st[k]}\n")
        for k in shown:
            v = st[k]
            t.append(f"{k:<{w}}", style="dim")
            style = "bold red" if k.startswith("irq.") and v not in ("0", "") else ""
            t.append(f"{v}\n", style=style)
        self.query_one("#status-table", Static).update(t)
        box = self.query_one("#status-metrics", Static)
        labels = {k: k + ("" if k.startswith("irq.") else " Δ") for k in self.history}
        lw = max((len(x) for x in labels.values()), default=14) + 1
        width = max(8, (box.size.width or 60) - lw - 13)
        lines = Text()
        for k, hist in self.history.items():
            lines.append(f"{labels[k]:<{lw}}", style="dim")
            lines.append(sparkline(list(hist), width), style="cyan")
            lines.append(f" {self.status.get(k, '')[:12]}\n")
        box.update(lines)

    def on_mount(self) -> None:
        if self.status:
            self._update()
