"""Registers view: block -> register -> fields, from target.xml; values read with ``p``.

Only the rows on screen (and the one under the cursor) are read, so a 574-register block costs
one screenful of ``p`` packets per refresh. A value that differs from the previous read of the
same register is highlighted. Enter (or ``e``) opens an Input under the table; its value is
written with ``P`` — a real bus write with the hardware's side effects.
"""
from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Input, OptionList, Static
from textual.widgets.option_list import Option

from .target import RegInfo, Target, TargetDescription
from .view import View

CHANGED = "bold black on yellow"


def parse_value(text: str) -> int:
    """``0x1f``, ``31``, ``0b11`` or bare hex digits with a letter (``1f``)."""
    t = text.strip().replace("_", "")
    if not t:
        raise ValueError("empty value")
    try:
        return int(t, 0)
    except ValueError:
        return int(t, 16)


#: narrowest block list (prompt cells), register name column, and fields pane (cells)
BLOCKS_MIN, NAME_MIN, FIELDS_MIN = 12, 12, 22


def value_width(bits: int) -> int:
    """Cells of a whole ``bits``-bit value in hex: ``0x`` and one digit per nibble."""
    return 2 + (bits + 3) // 4


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` cells with an ellipsis (whole when it fits)."""
    return text if len(text) <= width or width <= 0 else text[:max(width - 1, 0)] + "…"


def block_prompt(name: str, count: int, width: int | None = None) -> str:
    """``name (count)``, in ``width`` cells when given: the name cut with an ellipsis and the
    count kept (an OptionList wraps a long prompt into lines that look like entries of their
    own)."""
    tail = f" ({count})"
    return name + tail if width is None else fit(name, max(width - len(tail), 2)) + tail


class RegistersView(View):
    MAIN = "#reg-table"  # focused when the view is shown
    BINDINGS = [Binding("e", "edit", "Edit")]

    def __init__(self, desc: TargetDescription, **kw: Any) -> None:
        super().__init__(**kw)
        self.desc = desc
        self.blocks = [b for b in desc.blocks if b.registers]
        self.block = self.blocks[0] if self.blocks else None
        # prefer the first accelerator block over the core view
        for b in self.blocks:
            if b.name != "core":
                self.block = b
                break
        self.values: dict[str, int | None] = {}
        self.changed: set[str] = set()
        self.editing: RegInfo | None = None
        self._shown: dict[str, tuple[int | None, bool]] = {}  # what each cell shows now
        regs = [r for b in self.blocks for r in b.registers]
        #: the value column fits the widest register's whole value (never cut: see _layout)
        self.value_width = max((value_width(r.bits) for r in regs), default=10)
        self.name_width = 0  # set by _layout from the terminal's width
        self.blocks_width = 0

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield OptionList(*[Option(block_prompt(b.name, len(b.registers)), id=b.name)
                               for b in self.blocks], id="reg-blocks")
            with Vertical(id="reg-main"):
                yield DataTable(id="reg-table", cursor_type="row", zebra_stripes=False)
                yield Input(id="reg-edit", placeholder="value (0x.. or decimal), Enter writes, "
                            "Esc cancels")
            yield Static(id="reg-fields")

    def on_mount(self) -> None:
        self.query_one("#reg-edit", Input).display = False
        if self.block is not None:
            ol = self.query_one("#reg-blocks", OptionList)
            ol.highlighted = self.blocks.index(self.block)
        self._layout(self.app.size.width)

    def on_resize(self, event: events.Resize) -> None:
        self._layout(event.size.width)

    def _layout(self, width: int) -> None:
        """Size the block list and the table's columns for ``width`` cells (issue 25 #14).

        Why: with fixed widths the table's scrollbar covered the value column's last digit
        (0x1000100 shown for 0x10001000) and long block names wrapped into lines that looked
        like blocks of their own. So the value column is as wide as the widest value and the
        table always keeps room for its scrollbar (``scrollbar-gutter: stable``); what does not
        fit is cut from the names, with an ellipsis (the fields pane shows the selected
        register's whole name and group). Never a value."""
        if width <= 0:
            return
        ol = self.query_one("#reg-blocks", OptionList)
        table = self.query_one("#reg-table", DataTable)
        prompts = max((len(block_prompt(b.name, len(b.registers))) for b in self.blocks),
                      default=8)
        inner = min(prompts, max(BLOCKS_MIN, width // 6))
        # the list's border, padding and (stable) scrollbar gutter around the prompts
        blocks_width = inner + ol.styles.gutter.width + ol.styles.scrollbar_size_vertical
        # two columns with cell padding on both sides, and the (stable) scrollbar gutter
        fixed = self.value_width + 4 * table.cell_padding + table.styles.scrollbar_size_vertical
        longest = max((len(r.name) for b in self.blocks for r in b.registers), default=8)
        name_width = max(NAME_MIN, min(longest, width - blocks_width - fixed - FIELDS_MIN))
        if blocks_width != self.blocks_width:
            self.blocks_width = blocks_width
            ol.styles.width = blocks_width
            for b in self.blocks:
                ol.replace_option_prompt(b.name, block_prompt(b.name, len(b.registers), inner))
        if name_width != self.name_width:
            self.name_width = name_width
            self.query_one("#reg-main").styles.width = name_width + fixed
            row = table.cursor_row
            table.clear(columns=True)
            table.add_column("Register", key="name", width=name_width)
            table.add_column("Value", key="value", width=self.value_width)
            self._fill()
            if self.block is not None and 0 < row < len(self.block.registers):
                table.move_cursor(row=row)

    # -- table contents --------------------------------------------------------------------
    def _fill(self) -> None:
        table = self.query_one("#reg-table", DataTable)
        table.clear()
        self._shown = {}
        if self.block is None:
            return
        for r in self.block.registers:
            table.add_row(fit(r.name, self.name_width), self._cell(r.name), key=r.name)
            if r.name in self.values:
                self._shown[r.name] = (self.values[r.name], r.name in self.changed)
        self._show_fields()

    def _cell(self, name: str) -> Text:
        v = self.values.get(name)
        if v is None:
            return Text("—" if name in self.values else "", style="dim")
        reg = self.desc.register(name)
        digits = value_width(reg.bits if reg else 32) - 2
        return Text(f"0x{v:0{digits}x}", style=CHANGED if name in self.changed else "")

    def current_register(self) -> RegInfo | None:
        if self.block is None or not self.block.registers:
            return None
        row = self.query_one("#reg-table", DataTable).cursor_row
        if 0 <= row < len(self.block.registers):
            return self.block.registers[row]
        return None

    def _show_fields(self) -> None:
        reg = self.current_register()
        key = (reg, self.values.get(reg.name) if reg else None, reg is not None and
               reg.name in self.changed, reg is not None and reg.name in self.values)
        if key == getattr(self, "_fields_key", None):
            return  # unchanged: no re-render
        self._fields_key = key
        out = Text(no_wrap=True, overflow="ellipsis")
        if reg is not None:
            v = self.values.get(reg.name)
            out.append(f"{reg.name}\n", style="bold")
            out.append(f"regnum {reg.regnum}\ngroup {reg.group}\n", style="dim")
            if v is None:
                out.append("not read yet\n" if reg.name not in self.values else "unreadable\n",
                           style="dim")
            width = max((len(f.name) for f in reg.fields), default=0)  # whole names, aligned
            for f in reg.fields:
                val = "" if v is None else f.describe(v)
                style = ""
                old = getattr(self, "_old", {}).get(reg.name)
                if v is not None and old is not None and reg.name in self.changed and \
                        f.extract(old) != f.extract(v):
                    style = CHANGED
                out.append(f"{f.bits:>5} ", style="dim")
                out.append(f"{f.name:<{width}}")
                out.append(f" {val}\n", style=style)
        self.query_one("#reg-fields", Static).update(out)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        blk = next((b for b in self.blocks if b.name == event.option.id), None)
        if blk is not None and blk is not self.block:
            self.block = blk
            self._fill()
            self.app.request_refresh()  # type: ignore[attr-defined]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_fields()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_edit()

    # -- polling (fetch runs in the poll thread, apply in the UI thread) -----------------------
    def visible_registers(self) -> list[RegInfo]:
        if self.block is None:
            return []
        table = self.query_one("#reg-table", DataTable)
        first = max(0, int(table.scroll_y))
        height = max(1, table.size.height)
        regs = self.block.registers[first:first + height]
        cur = table.cursor_row
        if 0 <= cur < len(self.block.registers) and self.block.registers[cur] not in regs:
            regs.append(self.block.registers[cur])
        return regs

    def fetch(self, target: Target, full: bool) -> dict[str, int | None]:
        regs = self.visible_registers()
        if not full:  # halted: only what was never read (scrolling, a new block)
            regs = [r for r in regs if r.name not in self.values]
        return target.read_regs(regs)

    def apply(self, data: dict[str, int | None], status: dict[str, str]) -> None:
        if not data:
            return
        halted = status.get("state") != "running" if status else True
        if halted and all(n in self.values and self.values[n] == v for n, v in data.items()):
            # nothing new: the highlights (what the last stop or write changed) stay, however
            # many times the registers are re-read while halted (one stop may cause one
            # refresh or two)
            return
        table = self.query_one("#reg-table", DataTable)
        self._old = {n: self.values.get(n) for n in data}
        for name, v in data.items():
            old = self.values.get(name)
            if name in self.values and old is not None and v is not None and old != v:
                self.changed.add(name)
            else:
                self.changed.discard(name)
            self.values[name] = v
            if self.block is not None and name in table.rows and \
                    self._shown.get(name) != (v, name in self.changed):
                table.update_cell(name, "value", self._cell(name))
                self._shown[name] = (v, name in self.changed)
        self._show_fields()

    # -- editing ---------------------------------------------------------------------------
    def action_edit(self) -> None:
        reg = self.current_register()
        if reg is None:
            return
        self.editing = reg
        inp = self.query_one("#reg-edit", Input)
        v = self.values.get(reg.name)
        inp.value = "" if v is None else f"{v:#x}"
        inp.placeholder = f"{reg.name} = (0x.. or decimal), Enter writes, Esc cancels"
        inp.border_title = f"write {reg.name}"
        inp.display = True
        inp.focus()
        self.call_after_refresh(inp.focus)  # a widget shown in this call may refuse focus yet

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "reg-edit" or self.editing is None:
            return
        event.stop()
        reg = self.editing
        try:
            value = parse_value(event.value)
        except ValueError:
            self.app.notify(f"not a number: {event.value!r}", severity="error")
            return
        if value < 0 or value >> reg.bits:
            self.app.notify(f"{value:#x} does not fit in {reg.bits} bits", severity="error")
            return
        self._close_editor()
        self.app.write_register(reg.name, value)  # type: ignore[attr-defined]

    def cancel_edit(self) -> bool:
        """Close the editor without writing; False if it was not open. The app calls this on
        Esc wherever the focus is (Tab may have moved it out of this view)."""
        if self.editing is None:
            return False
        self._close_editor()
        return True

    def _close_editor(self) -> None:
        self.editing = None
        inp = self.query_one("#reg-edit", Input)
        inp.display = False
        self.query_one("#reg-table", DataTable).focus()

    def on_key(self, event: Any) -> None:
        if event.key == "escape" and self.cancel_edit():
            event.stop()
