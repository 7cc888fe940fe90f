"""The TUI's step-back key (issue 29 #3): S goes one unit back through the stub's history
(``bs``) and the status line says when the start of the history is reached."""
from __future__ import annotations

from .test_tui import make_app, run, started, statusline, target, wait_for  # noqa: F401


def test_shift_s_steps_back_one_unit_and_names_the_start_of_history(target):
    async def go():
        app = make_app(target)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(pilot)
            await pilot.press("s")
            await wait_for(pilot, lambda: "pc 0x50100014" in statusline(app), what="pc+4")
            await pilot.press("S")
            await wait_for(pilot, lambda: "pc 0x50100010" in statusline(app), what="pc back")
            await pilot.press("S")
            await wait_for(pilot, lambda: app.last_stop ==
                           "start of the reverse-execution history", what="the start")
            await wait_for(pilot, lambda: "start of the recorded history" in statusline(app),
                           what="the stub's line in the status line")
            assert "pc 0x50100010" in statusline(app)
    run(go())
