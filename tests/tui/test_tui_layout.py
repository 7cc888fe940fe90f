"""What the TUI draws, read back from the screen, on every device with its bundled demo, at
80x24 and 120x40 (issue 25 #14).

A view must never show a wrong value: every register row on screen is compared with the value
read through a client of its own (gdb's ``p``), in every register block, at the top and at the
end of the block. Block names must not wrap into lines that look like blocks of their own, the
footer must show every binding of every view whole, and the Program view's marked row must carry
the label the status line names.

The screen is read from the compositor (``render_strips``: the cells Textual would send to the
terminal) and cut to a widget's region.
"""
from __future__ import annotations

import re

import pytest

from accelstub.devices import open_device
from accelstub.stub.cli import demo_program
from accelstub.stub.client import RspClient, RspError

from .test_tui import (
    make_app,
    run,
    served,
    show,
    started,
    statusline,
    target,  # noqa: F401  (the fixture)
    wait_for,
)

pytestmark = pytest.mark.slow  # each test runs a stub and the app for several seconds

DEVICES = ("max78000", "ethos-u85", "ne16", "nvdla")
SIZES = ((80, 24), (120, 40))


def screen_lines(app) -> list[str]:
    return ["".join(seg.text for seg in strip)
            for strip in app.screen._compositor.render_strips()]


def widget_lines(app, widget) -> list[str]:
    """The text of ``widget``'s cells on screen, one string per row of its region."""
    r = widget.region
    return [line[r.x:r.x + r.width] for line in screen_lines(app)[r.y:r.y + r.height]]


def inner(line: str) -> str:
    """A line of a bordered widget without its border cells and padding."""
    return line.strip().strip("▊▎▔▁").strip()


def shown_as(name: str, text: str) -> bool:
    """``text`` is ``name`` whole, or its beginning cut with an ellipsis."""
    return text == name or (text.endswith("…") and len(text) > 1 and name.startswith(text[:-1]))


async def check_register_rows(pilot, view, client: RspClient) -> int:
    """Every register row on screen shows its register's (cut) name and its whole value as
    read by ``client``; returns the rows checked."""
    app = pilot.app
    table = app.query_one("#reg-table")
    block = view.block

    def on_screen():
        first = int(table.scroll_y)
        return block.registers[first:first + table.size.height - 1]  # minus the header row

    await wait_for(pilot, lambda: all(r.name in view.values for r in on_screen()),
                   what=f"the values of block {block.name}")
    await pilot.pause(0.15)  # the cells' repaint
    first = int(table.scroll_y)
    rows = [line.split() for line in widget_lines(app, table)[1:]]
    checked = 0
    for i, cells in enumerate(rows):
        if first + i >= len(block.registers):
            assert not [c for c in cells if c.isalnum()], \
                f"row {i} after the last register: {cells}"
            continue
        reg = block.registers[first + i]
        assert len(cells) >= 2, f"{block.name} row {i}: {cells} (register {reg.name})"
        name, value = cells[0], cells[1]
        assert shown_as(reg.name, name), f"row {i} shows {name!r} for {reg.name}"
        try:
            actual = client.read_register(reg.name)
        except RspError:
            assert value == "—", f"{reg.name} is unreadable but shows {value!r}"
        else:
            digits = (reg.bits + 3) // 4
            assert value == f"0x{actual:0{digits}x}", \
                (f"{reg.name} shows {value!r}, reads {actual:#x} "
                 f"({app.size.width}x{app.size.height})")
        checked += 1
    return checked


def check_block_list(app, view) -> None:
    """One line per block: ``name (count)`` with the name whole or cut with an ellipsis, in the
    blocks' order; never a line that is a fragment of a wrapped name."""
    ol = app.query_one("#reg-blocks")
    lines = [inner(line) for line in widget_lines(app, ol)[1:-1]]  # without the border rows
    entries = [line for line in lines if line]
    first = int(ol.scroll_y)
    expected = view.blocks[first:first + len(entries)]
    assert len(entries) == min(len(view.blocks) - first, len(lines)), \
        f"{len(entries)} lines for {len(view.blocks)} blocks: {entries}"
    for text, block in zip(entries, expected):
        m = re.fullmatch(r"(\S+) \((\d+)\)", text)
        assert m, f"block list line {text!r} is not 'name (count)'"
        assert shown_as(block.name, m.group(1)), f"{text!r} for block {block.name}"
        assert int(m.group(2)) == len(block.registers), f"{text!r}: {block.name}"


def check_footer(app) -> None:
    """Every binding the footer should show is on screen whole (key and description)."""
    footer = app.query_one("Footer")
    text = " ".join(line.strip() for line in widget_lines(app, footer))
    shown = [b for b in app.screen.active_bindings.values() if b.binding.show]
    assert shown
    for b in shown:
        want = f"{app.get_key_display(b.binding)} {b.binding.description}"
        assert want in text, f"footer {text!r} lacks {want!r} at {app.size.width} columns"


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("device", DEVICES)
def test_register_values_on_screen_are_whole_and_true(device, size):
    """Every register block of the device: the rows at the top and (after End) at the end of the
    block show the values a second client reads; the block list has one line per block; the
    footer is whole in every view."""
    async def go(t, port):
        client = RspClient("127.0.0.1", port)
        try:
            app = make_app(t)
            async with app.run_test(size=size) as pilot:
                await started(pilot)
                view = app.query_one("#registers-view")
                table = app.query_one("#reg-table")
                blocks = app.query_one("#reg-blocks")
                checked = 0
                for i, block in enumerate(view.blocks):
                    blocks.highlighted = i
                    await wait_for(pilot, lambda: view.block is block, what=block.name)
                    check_block_list(app, view)
                    checked += await check_register_rows(pilot, view, client)
                    if len(block.registers) > table.size.height - 1:  # it has a scrollbar
                        table.move_cursor(row=len(block.registers) - 1)
                        await wait_for(pilot, lambda: int(table.scroll_y) > 0, what="scrolled")
                        checked += await check_register_rows(pilot, view, client)
                assert checked >= sum(min(len(b.registers), 5) for b in view.blocks)
                for key, vid in (("1", "registers-view"), ("2", "memory-view"),
                                 ("3", "program-view"), ("4", "status-view"),
                                 ("5", "tensor-view")):
                    await show(pilot, key, vid)
                    await pilot.pause(0.1)
                    check_footer(app)
        finally:
            client.close()

    with served(open_device(device), demo_program(device)) as t:
        run(go(t, t.port))


def marked_labels(app) -> list[str]:
    """The Unit cell of every row the Program view marks with ▶ (read from the screen)."""
    table = app.query_one("#prog-table")
    labels = []
    for line in widget_lines(app, table)[1:]:
        if "▶" in line:
            m = re.search(r"0x[0-9a-f]{8}\s+(.+?)\s{2,}", line)
            assert m, f"marked row without address and label: {line!r}"
            labels.append(m.group(1))
    return labels


@pytest.mark.parametrize("device", DEVICES)
def test_program_view_marks_the_unit_the_status_line_names(device):
    """Before and after a step, the Program view marks the row of the unit at pc, with the
    label the status line names (NVDLA kept the row's label "layer 0" after a step to layer 1)
    and the label ``monitor units`` gives that unit; at the end of the program (NE16's demo is
    one job) no row is marked and the note says so."""
    async def go(t, port):
        client = RspClient("127.0.0.1", port)
        try:
            app = make_app(t)
            async with app.run_test(size=(80, 24)) as pilot:
                await started(pilot)
                await show(pilot, "3", "program-view")
                for step in range(2):
                    if step:
                        pc = statusline(app)
                        await pilot.press("s")
                        await wait_for(pilot, lambda: statusline(app) != pc, what="the step")
                    view = app.query_one("#program-view")
                    await wait_for(pilot, lambda: view.units is not None and view.pc is not None
                                   and f"pc {view.pc:#010x}" in statusline(app),
                                   what="the view at the polled pc")
                    await pilot.pause(0.2)
                    m = re.search(r"pc (0x[0-9a-f]{8})(?: \((.+?)\))?", statusline(app))
                    assert m, statusline(app)
                    pc, label = int(m.group(1), 16), m.group(2)
                    if label is None:  # the end of the program: no unit is next
                        assert step and marked_labels(app) == [], statusline(app)
                        note = " ".join(widget_lines(app, app.query_one("#prog-note")))
                        assert f"pc 0x{pc:08x}: no unit left to run" in note, note
                        continue
                    assert marked_labels(app) == [label], (marked_labels(app), statusline(app))
                    listing = client.monitor("units").splitlines()
                    assert any(re.match(rf"\s*\S*\s*0x{pc:08x}\s+{re.escape(label)}:", line)
                               for line in listing), (label, listing)
                    marked = [line for line in listing if line.lstrip().startswith("=>")]
                    assert all(f"0x{pc:08x} {label}:" in line for line in marked), marked
                    sel = view.selected()  # the cursor's row
                    detail = " ".join(widget_lines(app, app.query_one("#prog-detail")))
                    assert f"{sel.label} at 0x{sel.address:08x}: " in detail, detail
        finally:
            client.close()

    with served(open_device(device), demo_program(device)) as t:
        run(go(t, t.port))


def test_program_view_redraws_labels_of_units_at_the_same_addresses(target):
    """New units at the addresses already listed (NVDLA's armed layer before the whole program
    was listed: one address, "layer 0" then "layer 1") replace the labels and summaries on screen
    and the selected unit's detail, not only the pc marks."""
    from accelstub.tui.target import Unit

    async def go():
        app = make_app(target)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(pilot)
            view = await show(pilot, "3", "program-view")
            table = app.query_one("#prog-table")
            await wait_for(pilot, lambda: view.units and table.row_count == len(view.units),
                           what="the units")
            new = [Unit(u.address, f"renamed {k}", f"summary {k}")
                   for k, u in enumerate(view.units)]
            view.apply((new, ""), app.status)
            await pilot.pause(0.2)
            rows = widget_lines(app, table)[1:1 + len(new)]
            for k, line in enumerate(rows):
                assert f"renamed {k}" in line and f"summary {k}" in line, rows
            detail = " ".join(widget_lines(app, app.query_one("#prog-detail")))
            assert "renamed 0 at " in detail and "summary 0" in detail, detail
    run(go())
