"""Tensor view: a feature map or weight tensor at an address, shape (C,H,W), layout HWC or CHW,
dtype int8 or uint8, drawn as a heat map — one channel at a time (values in the cells) or all
channels as a grid (colour only). ``[``/``]`` change the channel, ``v`` switches the mode."""
from __future__ import annotations

from typing import Any

from rich.color import Color
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, ScrollableContainer
from textual.widget import Widget
from textual.widgets import Input, Select, Static

from .registers import parse_value
from .target import Target

MAX_ELEMENTS = 1 << 16


def parse_shape(text: str) -> tuple[int, int, int]:
    parts = [p for p in text.replace("x", ",").replace(" ", ",").split(",") if p]
    if len(parts) != 3:
        raise ValueError("shape is C,H,W")
    c, h, w = (int(p, 0) for p in parts)
    if min(c, h, w) < 1 or c * h * w > MAX_ELEMENTS:
        raise ValueError(f"shape must be positive and hold at most {MAX_ELEMENTS} elements")
    return c, h, w


def element_index(c: int, h: int, w: int, shape: tuple[int, int, int], layout: str) -> int:
    C, H, W = shape
    if layout == "HWC":
        return (h * W + w) * C + c
    return (c * H + h) * W + w


def to_value(b: int, dtype: str) -> int:
    return b - 256 if dtype == "int8" and b >= 128 else b


def heat(v: int, dtype: str) -> Style:
    """Blue (negative) - black (0) - red (positive) for int8; black - yellow for uint8."""
    if dtype == "int8":
        x = max(-128, min(127, v))
        if x >= 0:
            k = x / 127
            bg = Color.from_rgb(40 + 215 * k, 40 + 40 * (1 - k), 40 * (1 - k))
        else:
            k = -x / 128
            bg = Color.from_rgb(40 * (1 - k), 40 + 80 * k, 40 + 215 * k)
    else:
        k = v / 255
        bg = Color.from_rgb(255 * k, 220 * k, 40 * (1 - k))
    lum = 0.3 * bg.triplet.red + 0.59 * bg.triplet.green + 0.11 * bg.triplet.blue  # type: ignore
    return Style(bgcolor=bg, color="black" if lum > 140 else "white")


class TensorView(Widget):
    MAIN = "#tensor-scroll"  # focused when the view is shown
    #: while the target runs, updated at most every RUN_PERIOD s (the Status and Registers
    #: views follow every poll; a large view's redraw costs the emulation more than it shows)
    RUN_PERIOD = 0.25
    BINDINGS = [
        Binding("left_square_bracket", "channel(-1)", "Ch-"),
        Binding("right_square_bracket", "channel(1)", "Ch+"),
        Binding("v", "toggle_grid", "Grid"),
    ]

    def __init__(self, address: int = 0x50400000, shape: tuple[int, int, int] = (4, 4, 4),
                 layout: str = "HWC", dtype: str = "int8", **kw: Any) -> None:
        super().__init__(**kw)
        self.address, self.shape, self.order, self.dtype = address, shape, layout, dtype
        self.channel = 0
        self.grid = False
        self.data: list[int | None] | None = None
        self.previous: list[int | None] | None = None
        self.stale = True

    def compose(self) -> ComposeResult:
        with Horizontal(id="tensor-controls"):
            yield Input(f"{self.address:#010x}", id="tensor-addr", placeholder="address")
            yield Input(",".join(map(str, self.shape)), id="tensor-shape", placeholder="C,H,W")
            yield Select([("HWC", "HWC"), ("CHW", "CHW")], value=self.order,
                         allow_blank=False, id="tensor-layout")
            yield Select([("int8", "int8"), ("uint8", "uint8")], value=self.dtype,
                         allow_blank=False, id="tensor-dtype")
        yield Static(id="tensor-info")
        with ScrollableContainer(id="tensor-scroll"):
            yield Static(id="tensor-map")

    def on_mount(self) -> None:
        self._draw()

    # -- controls -----------------------------------------------------------------------------
    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            if event.input.id == "tensor-addr":
                self.address = parse_value(event.value) & 0xFFFFFFFF
            elif event.input.id == "tensor-shape":
                self.shape = parse_shape(event.value)
                self.channel = min(self.channel, self.shape[0] - 1)
        except ValueError as e:
            self.app.notify(str(e), severity="error")
            return
        self._changed()

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        if event.select.id == "tensor-layout" and isinstance(event.value, str):
            self.order = event.value
        elif event.select.id == "tensor-dtype" and isinstance(event.value, str):
            self.dtype = event.value
            self._draw()
            return
        self._changed()

    def _changed(self) -> None:
        self.data = self.previous = None
        self.stale = True
        self._draw()
        self.app.request_refresh()  # type: ignore[attr-defined]

    def action_channel(self, delta: int) -> None:
        self.channel = (self.channel + delta) % self.shape[0]
        self.grid = False
        self._draw()

    def action_toggle_grid(self) -> None:
        self.grid = not self.grid
        self._draw()

    # -- polling -------------------------------------------------------------------------------
    def fetch(self, target: Target, full: bool) -> tuple[int, tuple, list[int | None]] | None:
        if not (full or self.stale):
            return None
        c, h, w = self.shape
        return self.address, self.shape, target.read_memory(self.address, c * h * w)

    def apply(self, data: Any, status: dict[str, str]) -> None:
        if data is None:
            return
        addr, shape, values = data
        if addr != self.address or shape != self.shape:
            return  # the user changed the request meanwhile; the next poll brings it
        halted = status.get("state") != "running" if status else True
        if not self.stale and values == self.data and (halted or self.previous == self.data):
            # the picture on screen is current; halted, the highlights (what the last stop
            # changed) stay however many times the tensor is re-read, running they clear
            return
        self.previous = self.data
        self.data = values
        self.stale = False
        self._draw()

    # -- drawing ---------------------------------------------------------------------------------
    def value_at(self, c: int, h: int, w: int) -> int | None:
        if self.data is None:
            return None
        i = element_index(c, h, w, self.shape, self.order)
        b = self.data[i] if i < len(self.data) else None
        return None if b is None else to_value(b, self.dtype)

    def _draw(self) -> None:
        if not self.is_mounted:
            return
        C, H, W = self.shape
        info = Text()
        info.append(f"{self.dtype} {self.order} C={C} H={H} W={W} at {self.address:#010x} "
                    f"({C * H * W} bytes) ", style="dim")
        if self.grid:
            info.append("all channels", style="bold")
        else:
            info.append(f"channel {self.channel}/{C - 1}", style="bold")
        info.append("   [ ] channel, v grid", style="dim")
        self.query_one("#tensor-info", Static).update(info)
        out = Text(no_wrap=True)
        if self.data is None:
            out.append("reading…", style="dim")
        elif self.grid:
            self._draw_grid(out)
        else:
            self._draw_channel(out, self.channel)
        self.query_one("#tensor-map", Static).update(out)

    def _cell_changed(self, c: int, h: int, w: int) -> bool:
        if self.previous is None:
            return False
        i = element_index(c, h, w, self.shape, self.order)
        return i < len(self.previous) and self.previous[i] != self.data[i]  # type: ignore

    def _draw_channel(self, out: Text, c: int) -> None:
        C, H, W = self.shape
        out.append("     " + "".join(f"{w:>5}" for w in range(W)) + "\n", style="dim")
        for h in range(H):
            out.append(f"{h:>4} ", style="dim")
            for w in range(W):
                v = self.value_at(c, h, w)
                if v is None:
                    out.append("   --", style="dim")
                    continue
                style = heat(v, self.dtype)
                if self._cell_changed(c, h, w):
                    style += Style(bold=True, underline=True)
                out.append(f"{v:>5}", style=style)
            out.append("\n")

    def _draw_grid(self, out: Text) -> None:
        C, H, W = self.shape
        width = max(20, self.size.width - 2)
        per_row = max(1, width // (2 * W + 2))
        for c0 in range(0, C, per_row):
            chans = range(c0, min(C, c0 + per_row))
            out.append("".join(f"c{c:<{2 * W + 1}}" for c in chans) + "\n", style="dim")
            for h in range(H):
                for c in chans:
                    for w in range(W):
                        v = self.value_at(c, h, w)
                        out.append("  ", style="dim" if v is None else heat(v, self.dtype))
                    out.append("  ")
                out.append("\n")
