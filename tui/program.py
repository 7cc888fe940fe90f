"""Program view: the units (layers / commands / jobs) from ``monitor units``, the unit at pc
marked, and a key (``b``) that toggles a breakpoint (``Z0``/``z0``) on the selected unit."""
from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from .target import Target, Unit, parse_int
from .view import View


class ProgramView(View):
    MAIN = "#prog-table"  # focused when the view is shown
    #: while the target runs, updated at most every RUN_PERIOD s (the Status and Registers
    #: views follow every poll; a large view's redraw costs the emulation more than it shows)
    RUN_PERIOD = 0.25
    #: the units do not change while the target runs (only register writes and resets change
    #: them, and both need a halted target): the app re-reads them after stops, never live;
    #: the pc marker follows the status poll
    LIVE = False
    BINDINGS = [Binding("b", "toggle_breakpoint", "Breakpoint")]

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.units: list[Unit] | None = None
        self.pc: int | None = None
        self.breakpoints: set[int] = set()
        self.note = ""

    def compose(self) -> ComposeResult:
        yield Static(id="prog-note")
        yield DataTable(id="prog-table", cursor_type="row")
        yield Static(id="prog-detail")  # the selected unit's whole summary, wrapped

    def on_mount(self) -> None:
        t = self.query_one("#prog-table", DataTable)
        t.add_column(" ", key="mark", width=3)
        t.add_column("Address", key="addr", width=10)
        t.add_column("Unit", key="label", width=12)
        t.add_column("Summary", key="summary")

    def fetch(self, target: Target, full: bool) -> tuple[list[Unit], str] | None:
        """Read the units when they are unknown: at start, after our own reset, step or
        continue, and when the view is shown (another client may have rewritten the registers).
        Not after every stop: ``monitor units`` decodes the whole program on the stub, and
        re-reading it at each end of another client's run slowed the next run by ~15 %."""
        if self.units is not None:
            return None
        return target.units(), target.units_note

    def shown(self) -> None:
        self.units = None

    def apply(self, data: tuple[list[Unit], str] | None, status: dict[str, str]) -> None:
        """Follow pc (two marker cells change) and take new units; unchanged, nothing is
        redrawn: a DataTable update repaints the whole table."""
        pc = parse_int(status.get("pc", "")) if status else None
        if data is not None and data == (self.units, self.note) and \
                self.query_one("#prog-table", DataTable).row_count == len(self.units or []):
            data = None  # the same units as on screen
        if data is None and pc == self.pc:
            return
        old_pc, self.pc = self.pc, pc
        if data is not None:
            self.units, self.note = data
            self._render_table()
        else:
            self._update_marks({old_pc, pc})
            self._render_note()

    def _mark(self, u: Unit) -> Text:
        t = Text()
        t.append("▶" if u.address == self.pc else " ", style="bold green")
        t.append("●" if u.address in self.breakpoints else " ", style="bold red")
        return t

    def _update_marks(self, addresses: set[int | None]) -> None:
        table = self.query_one("#prog-table", DataTable)
        for u in self.units or []:
            if u.address in addresses and str(u.address) in table.rows:
                table.update_cell(str(u.address), "mark", self._mark(u))

    def _render_table(self) -> None:
        table = self.query_one("#prog-table", DataTable)
        units = self.units or []
        keys = [str(u.address) for u in units]
        if [k.value for k in table.rows] != keys:
            row = table.cursor_row
            table.clear()
            for u in units:
                table.add_row(self._mark(u), f"{u.address:#010x}", u.label, u.summary,
                              key=str(u.address))
            if units:
                table.move_cursor(row=min(max(row, 0), len(units) - 1))
        else:  # the same addresses: a unit's label and summary may still be new (issue 25
            # #14: NVDLA's armed layer kept the label "layer 0" beside a status line at layer 1)
            for u in units:
                table.update_cell(str(u.address), "mark", self._mark(u))
                table.update_cell(str(u.address), "label", u.label)
                table.update_cell(str(u.address), "summary", u.summary)
        self._render_note()
        self._render_detail()

    def _render_note(self) -> None:
        units = self.units or []
        note = self.note
        if units and self.pc is not None and all(u.address != self.pc for u in units):
            note = f"pc {self.pc:#010x}: no unit left to run" if not note else note
        text = note or f"{len(units)} units; b toggles a breakpoint on the selected one"
        if text == getattr(self, "_note_shown", None):
            return
        self._note_shown = text
        self.query_one("#prog-note", Static).update(
            Text(text, style="yellow" if note else "dim"))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._render_detail()

    def _render_detail(self) -> None:
        """Rows are cut at the screen's edge; the selected unit is shown whole below."""
        u = self.selected()
        self.query_one("#prog-detail", Static).update(
            Text("") if u is None else Text.assemble((f"{u.label} at {u.address:#010x}: ", "bold"),
                                                    u.summary))

    def selected(self) -> Unit | None:
        units = self.units or []
        row = self.query_one("#prog-table", DataTable).cursor_row
        return units[row] if 0 <= row < len(units) else None

    def action_toggle_breakpoint(self) -> None:
        u = self.selected()
        if u is None:
            self.app.notify("no unit selected", severity="warning")
            return
        self.app.toggle_breakpoint(u.address)  # type: ignore[attr-defined]

    def breakpoint_changed(self, address: int, on: bool) -> None:
        (self.breakpoints.add if on else self.breakpoints.discard)(address)
        self._update_marks({address})
