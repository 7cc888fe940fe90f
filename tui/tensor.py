"""Tensor view: a unit's declared tensor (its input or output, where the device says it lies,
in the layout of the toolchain that made the program), or a feature map at an address typed by
the user (shape C,H,W, layout HWC or CHW, dtype int8 or uint8), drawn as a heat map — one
channel at a time (values in the cells) or all channels as a grid (colour only). ``[``/``]``
change the channel, ``v`` switches the mode. When a per-layer diff reference is loaded
(``monitor diff load``, issue 27) and covers the tensor shown, the channel is drawn three times
side by side: the device's values, the reference's (``monitor json reference K TENSOR``), and
the difference map (device - reference; "." where equal).

The source selector lists "address" (the typed address), "follow" (the output of the unit that
ran last: after a step, what it wrote) and every unit's tensors. The view starts on the typed
address and turns to "follow" at the first stop after the pc moved, unless the user chose a
source. Declarations come from the stub (``monitor json tensors K``), values through
:func:`accelstub.devices.tensors.read_tensor`: nothing here knows a device."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.color import Color
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, ScrollableContainer
from textual.widgets import Input, Select, Static

from .registers import parse_value
from .target import RspError, Target, TensorSpec
from .view import View

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


def heat(v: int, dtype: str, peak: int = 0) -> Style:
    """Blue (negative) - black (0) - red (positive) for signed types; black - yellow for
    unsigned. 8-bit types span their range; wider ones (int16/int32 accumulators) span
    ``peak``, the largest magnitude on screen, so their picture is not all black."""
    signed = dtype.startswith("int")
    wide = dtype not in ("int8", "uint8")
    if signed:
        pos, neg = (max(1, peak), max(1, peak)) if wide else (127, 128)
        x = max(-neg, min(pos, v))
        if x >= 0:
            k = x / pos
            bg = Color.from_rgb(40 + 215 * k, 40 + 40 * (1 - k), 40 * (1 - k))
        else:
            k = -x / neg
            bg = Color.from_rgb(40 * (1 - k), 40 + 80 * k, 40 + 215 * k)
    else:
        k = max(0, min(v, max(1, peak) if wide else 255)) / (max(1, peak) if wide else 255)
        bg = Color.from_rgb(255 * k, 220 * k, 40 * (1 - k))
    lum = 0.3 * bg.triplet.red + 0.59 * bg.triplet.green + 0.11 * bg.triplet.blue  # type: ignore
    return Style(bgcolor=bg, color="black" if lum > 140 else "white")


#: source values of the selector that are not a unit's tensor
ADDRESS, FOLLOW = "address", "follow"


@dataclass
class Declared:
    """What a poll learnt about the declared tensors: the selector's options (None: unchanged),
    the tensor shown (its unit's label and spec) and its values (C,H,W), or why not."""
    options: list[tuple[str, str]] | None
    source: str
    label: str = ""
    spec: TensorSpec | None = None
    values: list[int] | None = None
    note: str = ""
    #: the typed address's (address, shape, bytes) when the source is ADDRESS
    manual: tuple[int, tuple, list[int | None]] | None = None
    #: the diff reference of the tensor shown, (C, H, W) flattened, and its name
    reference: list[int] | None = None
    ref_name: str = ""


def followed(units: list[Any], pc: int | None) -> int | None:
    """The unit whose output "follow" shows: the one before the unit at pc (the unit that ran
    last), the last one once pc is past them all, the first before any has run."""
    if not units:
        return None
    at = next((i for i, u in enumerate(units) if u["address"] == pc), None)
    return len(units) - 1 if at is None else max(0, at - 1)


class TensorView(View):
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
        #: the typed address's shape, layout and dtype, kept while a declared tensor is shown
        self.manual = (shape, layout, dtype)
        self.source = ADDRESS
        self.auto = True  # the user has not chosen a source: turn to FOLLOW at the first stop
        self.first_pc: int | None = None
        self.options: list[tuple[str, str]] = [(ADDRESS, ADDRESS)]
        self.units_key: tuple | None = None  # the listing the options were made from
        self.spec: TensorSpec | None = None  # the declared tensor shown
        self.label = ""  # its unit's label
        self.note = ""
        self.channel = 0
        self.grid = False
        self.data: list[int | None] | None = None
        self.previous: list[int | None] | None = None
        #: the per-layer diff's reference of the declared tensor shown (C, H, W flattened)
        self.reference: list[int] | None = None
        self.ref_name = ""
        self.stale = True

    def compose(self) -> ComposeResult:
        with Horizontal(id="tensor-controls"):
            yield Select(self.options, value=ADDRESS, allow_blank=False, id="tensor-source")
            yield Input(f"{self.address:#010x}", id="tensor-addr", placeholder="address",
                        classes="manual")
            yield Input(",".join(map(str, self.shape)), id="tensor-shape", placeholder="C,H,W",
                        classes="manual")
            yield Select([("HWC", "HWC"), ("CHW", "CHW")], value=self.order,
                         allow_blank=False, id="tensor-layout", classes="manual")
            yield Select([("int8", "int8"), ("uint8", "uint8")], value=self.dtype,
                         allow_blank=False, id="tensor-dtype", classes="manual")
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
                self.manual = (self.shape,) + self.manual[1:]
                self.channel = min(self.channel, self.shape[0] - 1)
        except ValueError as e:
            self.app.notify(str(e), severity="error")
            return
        self._changed()

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        if not isinstance(event.value, str):
            return
        if event.select.id == "tensor-source":
            if event.value == self.source:
                return  # the view's own setting (options refreshed, the turn to follow)
            self.auto = False
            self._set_source(event.value)
        elif event.select.id == "tensor-layout":
            self.order = event.value
            self.manual = (self.manual[0], event.value, self.manual[2])
        elif event.select.id == "tensor-dtype":
            self.dtype = event.value
            self.manual = self.manual[:2] + (event.value,)
            self._draw()
            return
        self._changed()

    def _set_source(self, source: str) -> None:
        self.source = source
        self.spec, self.note = None, ""
        if source == ADDRESS:
            self.shape, self.order, self.dtype = self.manual
            self.channel = min(self.channel, self.shape[0] - 1)
        for w in self.query(".manual"):
            w.display = source == ADDRESS
        self.set_class(source != ADDRESS, "declared")
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

    # -- polling (fetch runs in the poll thread, apply in the UI thread) ------------------------
    def fetch(self, target: Target, full: bool) -> Declared | None:
        if not (full or self.stale):
            return None
        source = self.source
        if full or source != ADDRESS:  # the listing only on a refresh (a stop, a request)
            decl = self._fetch_declared(target, source)
        else:
            decl = Declared(None, ADDRESS)
        if decl.source == ADDRESS:
            c, h, w = self.shape
            decl.manual = (self.address, self.shape,
                           target.read_memory(self.address, c * h * w))
        return decl

    def _fetch_declared(self, target: Target, source: str) -> Declared:
        """The listing and, when the source is a declared tensor, its declaration and values."""
        try:
            units = target.json("units")["units"]  # type: ignore[index]
        except RspError as e:  # a stub without `json`: only the typed address
            if "closed" in str(e):
                raise
            return Declared(None, ADDRESS)
        key = tuple((u["address"], u["label"]) for u in units)
        options = None
        if key != self.units_key:
            options = [(ADDRESS, ADDRESS), (f"{FOLLOW} (last run)", FOLLOW)]
            for i, u in enumerate(units):
                options += [(f"{u['label']} {s.name}", f"{i}:{s.name}")
                            for s in target.unit_tensors(i)]
            if len(options) == 2:
                options = options[:1]  # the device declares none: nothing to follow
            self.units_key = key
        pc = target.pc()
        if self.first_pc is None:
            self.first_pc = pc
        if source == ADDRESS and self.auto and pc != self.first_pc and \
                any(v == FOLLOW for _, v in (options or self.options)):
            source = FOLLOW  # the first stop after pc moved: show what the last unit wrote
        if source == ADDRESS:
            return Declared(options, ADDRESS)
        if source == FOLLOW:
            index, name = followed(units, pc), "output"
        else:
            i, _, name = source.partition(":")
            index = int(i)
        if index is None or index >= len(units):
            return Declared(options, source, note="the program lists no such unit now")
        label = units[index]["label"]
        specs = target.unit_tensors(index)
        spec = next((s for s in specs if s.name == name), specs[-1] if specs and
                    source == FOLLOW else None)
        if spec is None:
            return Declared(options, source, label, note=f"{label} declares no tensor {name}")
        try:
            values = spec.from_layout(target.read_tensor(spec)).ravel().tolist()
        except RspError as e:
            if "closed" in str(e):
                raise
            return Declared(options, source, label, spec, note=f"cannot read {label} "
                            f"{spec.name}: {e}")
        ref, ref_name = self._fetch_reference(target, index, spec)
        return Declared(options, source, label, spec, values, reference=ref, ref_name=ref_name)

    @staticmethod
    def _fetch_reference(target: Target, index: int, spec: TensorSpec
                         ) -> tuple[list[int] | None, str]:
        """The loaded diff reference of the tensor (None: none, or a stub without it)."""
        try:
            r = target.json(f"reference {index} {spec.name}")
        except RspError as e:
            if "closed" in str(e):
                raise
            return None, ""
        if not isinstance(r, dict) or r.get("values") is None:
            return None, ""
        return list(r["values"]), str(r.get("name") or "")

    def apply(self, data: Declared | None, status: dict[str, str]) -> None:
        if data is None:
            return
        if data.options is not None and data.options != self.options:
            self.options = data.options
            sel = self.query_one("#tensor-source", Select)
            with sel.prevent(Select.Changed):
                sel.set_options(self.options)
                values = [v for _, v in self.options]
                sel.value = self.source if self.source in values else ADDRESS
            if self.source not in values:
                self._set_source(ADDRESS)
                return
        if data.source != self.source:
            if self.source != ADDRESS or not self.auto:
                return  # the user changed the source meanwhile; the next poll brings it
            sel = self.query_one("#tensor-source", Select)
            with sel.prevent(Select.Changed):
                sel.value = data.source
            self._set_source(data.source)
            return
        if data.source == ADDRESS:
            if data.manual is not None:
                self._apply_manual(data.manual, status)
            return
        self.label, self.note = data.label, data.note
        self.reference, self.ref_name = data.reference, data.ref_name
        if data.spec is None or data.values is None:
            self.spec, self.data = data.spec, None
            self.stale = False
            self._draw()
            return
        spec = data.spec
        dims = dict(zip(spec.layout, spec.shape))
        shape = (dims["C"], dims["H"], dims["W"])
        if spec != self.spec:
            self.previous = self.data = None  # another tensor: nothing to highlight
            self.channel = min(self.channel, shape[0] - 1)
        self.spec, self.shape, self.order, self.dtype = spec, shape, "CHW", spec.dtype
        self._take(data.values, status)

    def _apply_manual(self, data: tuple[int, tuple, list[int | None]],
                      status: dict[str, str]) -> None:
        addr, shape, values = data
        if self.source != ADDRESS or addr != self.address or shape != self.shape:
            return  # the user changed the request meanwhile; the next poll brings it
        self._take(values, status)

    def _take(self, values: list[int | None], status: dict[str, str]) -> None:
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

    def _peak(self) -> int:
        """The largest magnitude shown (the colour scale of types wider than a byte)."""
        vals = [abs(v) for v in self.data or () if v is not None]
        return max(vals, default=0) if self.dtype not in ("int8", "uint8") else 0

    def _draw(self) -> None:
        if not self.is_mounted:
            return
        C, H, W = self.shape
        info = Text(no_wrap=True, overflow="ellipsis")
        if self.source == ADDRESS:
            info.append(f"{self.dtype} {self.order} C={C} H={H} W={W} at {self.address:#010x} "
                        f"({C * H * W} bytes) ", style="dim")
        elif self.spec is not None:
            spec = self.spec
            info.append(f"{self.label} {spec.name}: {spec.layout} "
                        f"{'x'.join(map(str, spec.shape))} {spec.dtype} at "
                        f"{spec.ranges()[0][0]:#010x} ", style="dim")
        else:
            info.append(f"{self.label} " if self.label else "", style="dim")
        if self.grid:
            info.append("all channels", style="bold")
        else:
            info.append(f"channel {self.channel}/{C - 1}", style="bold")
        if self.shown_reference() is not None:
            n = sum(a != b for a, b in zip(self.data or (), self.reference or ()))
            info.append(f"  | device | reference {self.ref_name!r} | difference: "
                        f"{n} differ", style="bold red" if n else "dim")
        self.query_one("#tensor-info", Static).update(info)
        out = Text(no_wrap=True)
        if self.note:
            out.append(self.note, style="bold")
        elif self.data is None:
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

    def shown_reference(self) -> list[int] | None:
        """The diff reference beside the declared tensor, when it has the tensor's size."""
        ref = self.reference
        if ref is None or self.source == ADDRESS or self.data is None or len(ref) != len(
                self.data):
            return None
        return ref

    def reference_at(self, c: int, h: int, w: int) -> int | None:
        ref = self.shown_reference()
        return None if ref is None else ref[element_index(c, h, w, self.shape, self.order)]

    def _draw_channel(self, out: Text, c: int) -> None:
        C, H, W = self.shape
        peak = self._peak()
        ref = self.shown_reference()
        # every value whole: as wide as the widest (an int32 accumulator needs 11 columns)
        n = max([5] + [len(str(v)) + 1 for v in list(self.data or ()) + list(ref or ())
                       if v is not None])
        cols = "".join(f"{w:>{n}}" for w in range(W))
        out.append("     " + cols + ("   " + cols + "   " + cols if ref else "") + "\n",
                   style="dim")
        for h in range(H):
            out.append(f"{h:>4} ", style="dim")
            for w in range(W):
                v = self.value_at(c, h, w)
                if v is None:
                    out.append(f"{'--':>{n}}", style="dim")
                    continue
                style = heat(v, self.dtype, peak)
                if self._cell_changed(c, h, w):
                    style += Style(bold=True, underline=True)
                out.append(f"{v:>{n}}", style=style)
            if ref is not None:
                self._draw_reference_row(out, c, h, n, peak)
            out.append("\n")

    def _draw_reference_row(self, out: Text, c: int, h: int, n: int, peak: int) -> None:
        """The reference's row, then the difference map's (device - reference)."""
        W = self.shape[2]
        out.append(" | ", style="dim")
        for w in range(W):
            r = self.reference_at(c, h, w)
            out.append(f"{r:>{n}}", style=heat(int(r), self.dtype, peak))  # type: ignore[arg-type]
        out.append(" | ", style="dim")
        for w in range(W):
            v, r = self.value_at(c, h, w), self.reference_at(c, h, w)
            d = None if v is None or r is None else v - r
            if d == 0:
                out.append(f"{'.':>{n}}", style="dim")
            else:
                out.append(f"{'--' if d is None else d:>{n}}", style=Style(
                    bgcolor="red3" if d and d > 0 else "blue3", color="white", bold=True))

    def _draw_grid(self, out: Text) -> None:
        C, H, W = self.shape
        peak = self._peak()
        width = max(20, self.size.width - 2)
        per_row = max(1, width // (2 * W + 2))
        for c0 in range(0, C, per_row):
            chans = range(c0, min(C, c0 + per_row))
            out.append("".join(f"c{c:<{2 * W + 1}}" for c in chans) + "\n", style="dim")
            for h in range(H):
                for c in chans:
                    for w in range(W):
                        v = self.value_at(c, h, w)
                        out.append("  ", style="dim" if v is None else heat(v, self.dtype, peak))
                    out.append("  ")
                out.append("\n")
