"""Memory view: hex + ASCII, a byte cursor, go-to-address, changed bytes marked.

The range under the cursor comes from the stub's memory-map XML (which has no names: the view
shows the range). Addresses the map does not hold show as ``--`` and are never requested.
"""
from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.geometry import Region
from textual.reactive import reactive
from textual.strip import Strip
from textual.visual import Visual, visualize
from textual.widget import Widget
from textual.widgets import Input, Static

from .registers import parse_value
from .target import Target
from .view import View

CHANGED = "bold black on yellow"
CURSOR = "reverse"


class HexView(Widget, can_focus=True):
    """The dump itself: ``rows x bytes_per_row`` bytes starting at ``base``.

    Drawn line by line (Textual's line API) from a cache of one rendered strip per row, keyed by
    what the row shows: a poll that changes a few bytes re-renders those rows only, and one that
    changes nothing re-renders nothing. (Rendering the whole dump as one Text at every poll cost
    the emulation more than 10% at 12 polls/s on a 2-core machine.)
    """

    BINDINGS = [
        Binding("up", "move(-1, 0)", "Up", show=False),
        Binding("down", "move(1, 0)", "Down", show=False),
        Binding("left", "move(0, -1)", "Left", show=False),
        Binding("right", "move(0, 1)", "Right", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
    ]

    cursor: reactive[int] = reactive(0)

    def __init__(self, address: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.cursor = address
        self.base = address & ~0xF
        self.data: dict[int, int | None] = {}
        self.changed: set[int] = set()
        self._strips: dict[int, tuple[tuple, Strip]] = {}  # row -> (what it shows, strip)

    @property
    def bytes_per_row(self) -> int:
        w = self.size.width
        return 32 if w >= 148 else 16 if w >= 78 else 8

    @property
    def rows(self) -> int:
        return max(1, self.size.height)

    def window(self) -> tuple[int, int]:
        return self.base, self.rows * self.bytes_per_row

    def _ensure_visible(self) -> None:
        bpr = self.bytes_per_row
        start, length = self.window()
        if self.cursor < start:
            self.base = self.cursor - self.cursor % bpr
        elif self.cursor >= start + length:
            self.base = self.cursor - self.cursor % bpr - (self.rows - 1) * bpr
        self.base = max(0, self.base - self.base % bpr)

    def goto(self, address: int) -> None:
        self.cursor = address & 0xFFFFFFFF
        bpr = self.bytes_per_row
        self.base = self.cursor - self.cursor % bpr
        self.refresh()

    def action_move(self, rows: int, cols: int) -> None:
        self.cursor = max(0, min(0xFFFFFFFF, self.cursor + rows * self.bytes_per_row + cols))
        self._ensure_visible()
        self.refresh()
        self.app.request_refresh()  # type: ignore[attr-defined]

    def action_page(self, pages: int) -> None:
        self.action_move(pages * self.rows, 0)

    def on_resize(self) -> None:
        self._ensure_visible()

    def watch_cursor(self) -> None:
        try:
            self.parent.cursor_moved(self.cursor)  # type: ignore[union-attr]
        except AttributeError:
            pass

    def refresh_addresses(self, addresses: set[int]) -> None:
        """Repaint only the rows on screen that hold one of ``addresses``."""
        bpr, width = self.bytes_per_row, self.size.width
        rows = {(a - self.base) // bpr for a in addresses}
        for row in sorted(r for r in rows if 0 <= r < self.rows):
            self.refresh(Region(0, row, width, 1))

    def render_line(self, y: int) -> Strip:
        bpr = self.bytes_per_row
        a = self.base + y * bpr
        width = self.size.width
        if a > 0xFFFFFFFF or y >= self.rows:
            return Strip.blank(width, self.visual_style.rich_style)
        get, changed = self.data.get, self.changed
        cur = self.cursor - a if 0 <= self.cursor - a < bpr else -1
        key = (a, bpr, width, cur, self.has_focus, self.visual_style,
               tuple(get(a + i, -1) for i in range(bpr)),
               tuple(i for i in range(bpr) if a + i in changed) if changed else ())
        hit = self._strips.get(y)
        if hit is not None and hit[0] == key:
            return hit[1]
        strip = Visual.to_strips(self, visualize(self, self._row_text(a, bpr), markup=False),
                                 width, 1, self.visual_style)[0]
        self._strips[y] = (key, strip)
        return strip

    def render(self) -> Text:
        """The whole dump as one Text, the rows :meth:`render_line` draws (for tests and for
        anything that wants the screen's content; Textual itself draws through render_line)."""
        bpr = self.bytes_per_row
        out = Text(no_wrap=True, overflow="crop")
        for row in range(self.rows):
            a = self.base + row * bpr
            if a > 0xFFFFFFFF:
                break
            out.append_text(self._row_text(a, bpr))
            out.append("\n")
        return out

    def _row_text(self, a: int, bpr: int) -> Text:
        out = Text(no_wrap=True, overflow="crop")
        out.append(f"{a:08x} ", style="dim")
        asc = Text()
        for i in range(bpr):
            addr = a + i
            b = self.data.get(addr, -1)
            style = CURSOR if addr == self.cursor and self.has_focus else \
                "underline" if addr == self.cursor else \
                CHANGED if addr in self.changed else ""
            if i and i % 8 == 0:
                out.append(" ")
            if b is None:
                out.append(" --", style=style or "dim")
                asc.append("·", style="dim")
            elif b == -1:
                out.append("   ")
                asc.append(" ")
            else:
                out.append(" ")
                out.append(f"{b:02x}", style=style)
                asc.append(chr(b) if 32 <= b < 127 else ".", style=style if style else "")
        out.append("  ")
        out.append_text(asc)
        return out


class MemoryView(View):
    MAIN = "#mem-hex"  # focused when the view is shown
    #: while the target runs, updated at most every RUN_PERIOD s (the Status and Registers
    #: views follow every poll; a large view's redraw costs the emulation more than it shows)
    RUN_PERIOD = 0.25
    BINDINGS = [Binding("g", "goto", "Go to address")]

    def __init__(self, target: Target, address: int | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.target = target
        if address is None:
            # the first of the largest ranges: a data memory rather than a register window
            big = max((e - s for s, e, _ in target.memory), default=0)
            address = next((s for s, e, _ in target.memory if e - s == big), 0)
        self.start_address = address

    def compose(self) -> ComposeResult:
        yield Input(id="mem-goto", placeholder="go to address (g)", value="")
        yield Static(id="mem-info")
        yield HexView(self.start_address, id="mem-hex")

    def on_mount(self) -> None:
        self.cursor_moved(self.start_address)

    @property
    def hex(self) -> HexView:
        return self.query_one("#mem-hex", HexView)

    def action_goto(self) -> None:
        self.query_one("#mem-goto", Input).focus()

    def goto(self, address: int) -> None:
        self.hex.goto(address)
        self.cursor_moved(address)
        self.app.request_refresh()  # type: ignore[attr-defined]

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "mem-goto":
            return
        event.stop()
        try:
            addr = parse_value(event.value)
        except ValueError:
            self.app.notify(f"not an address: {event.value!r}", severity="error")
            return
        self.goto(addr)
        self.hex.focus()

    def cursor_moved(self, address: int) -> None:
        rng = self.target.readable(address)
        hv = self.query("#mem-hex")
        value = hv.first().data.get(address) if hv else None  # type: ignore[union-attr]
        key = (address, value)
        if key == getattr(self, "_info_key", None):
            return  # the line already says this (an update would re-layout the screen)
        self._info_key = key
        text = Text()
        text.append(f"cursor {address:#010x}", style="bold")
        if value is not None:
            text.append(f" = {value:#04x} ({value})")
        if rng is None:
            text.append("  not in the memory map", style="red")
        else:
            s, e = rng
            name = self.target.region_name(address)
            if name:
                text.append(f"  {name}", style="bold")
            text.append(f"  in {s:#010x}-{e - 1:#010x} ({_size(e - s)})", style="dim")
        self.query_one("#mem-info", Static).update(text)

    # -- polling -------------------------------------------------------------------------------
    def fetch(self, target: Target, full: bool) -> tuple[int, list[int | None]] | None:
        """The window on screen, in one ``m`` packet per readable range in it (``full``: the
        target may have changed it); else only when part of the window was never read."""
        start, length = self.hex.window()
        if not full and all(a in self.hex.data for a in range(start, start + length)):
            return None
        return start, target.read_memory(start, length)

    def apply(self, data: tuple[int, list[int | None]] | None, status: dict[str, str]) -> None:
        """Store the bytes and repaint the rows that show a difference: a byte that changed,
        or one highlighted by the previous read. A read that brings the same bytes as the last
        one costs nothing more; while the target is halted it also keeps the highlights (they
        show what the last stop or write changed, however many times the window is re-read:
        one stop may cause one refresh or two), while it runs it clears them."""
        if data is None:
            return
        start, values = data
        hv = self.hex
        halted = status.get("state") != "running" if status else True
        if (start, values) == getattr(self, "_last", None) and (halted or not hv.changed):
            return
        self._last = (start, values)
        changed, dirty = set(), set(hv.changed)
        get = hv.data.get
        for i, v in enumerate(values):
            a = start + i
            old = get(a, -1)
            if old != v:
                dirty.add(a)
                if old != -1 and old is not None and v is not None:
                    changed.add(a)
                hv.data[a] = v
        hv.changed = changed
        if len(hv.data) > 65536:  # forget what scrolled far away
            keep = set(range(start, start + len(values)))
            hv.data = {a: v for a, v in hv.data.items() if a in keep}
        if dirty:
            hv.refresh_addresses(dirty)
        self.cursor_moved(hv.cursor)


def _size(n: int) -> str:
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} bytes"
