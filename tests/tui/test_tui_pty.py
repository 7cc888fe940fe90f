"""The real TUI in a real terminal: ``python -m accelstub.tui --device max78000`` under tmux.

It starts its own in-process stub with the bundled demo (halted before layer 0 at pc
0x50100010), so this also covers run_tui's background-stub path and the argparse entry point.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid

import pytest

TMUX = shutil.which("tmux")


@pytest.fixture(autouse=True)
def require_tmux():
    """tmux, or a skip with a reason; in CI (CI=true) a missing tmux fails instead."""
    if TMUX is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is required in CI (apt-get install -y tmux)")
        pytest.skip("tmux is not installed (apt-get install tmux)")


def capture(session: str) -> str:
    return subprocess.run([TMUX, "capture-pane", "-p", "-t", session], capture_output=True,
                          text=True).stdout


def alive(session: str) -> bool:
    return subprocess.run([TMUX, "has-session", "-t", session],
                          capture_output=True).returncode == 0


def wait_screen(session: str, *needles: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = capture(session)
        if all(n in screen for n in needles):
            return screen
        time.sleep(0.2)
    raise AssertionError(f"{needles} not on screen:\n{screen}")


def start_tui(device: str, cols: int, rows: int) -> str:
    """``accelstub.tui`` on ``device`` in a new detached tmux session of cols x rows; its name."""
    session = f"accelstub-tui-{uuid.uuid4().hex[:8]}"
    cmd = " ".join(shlex.quote(a) for a in
                   [sys.executable, "-m", "accelstub.tui", "--device", device])
    env = dict(os.environ, TERM="xterm-256color")
    subprocess.run([TMUX, "new-session", "-d", "-s", session, "-x", str(cols), "-y", str(rows),
                    cmd], check=True, env=env)
    return session


@pytest.mark.slow
def test_tui_in_tmux():
    session = start_tui("max78000", 100, 30)
    try:
        wait_screen(session, "halted", "pc 0x50100010", "Registers", "Memory", "Program",
                    "Status", "Tensor", "Step", "Continue", "Quit")
        subprocess.run([TMUX, "send-keys", "-t", session, "s"], check=True)
        wait_screen(session, "pc 0x50100014")
        subprocess.run([TMUX, "send-keys", "-t", session, "3"], check=True)
        wait_screen(session, "Layer 0", "Layer 2", "▶", "0x50100014")
        subprocess.run([TMUX, "send-keys", "-t", session, "q"], check=True)
        deadline = time.monotonic() + 15
        while alive(session) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(session), "q did not quit the TUI"
    finally:
        if alive(session):
            subprocess.run([TMUX, "kill-session", "-t", session], capture_output=True)


@pytest.mark.slow
def test_tui_in_tmux_at_80x24():
    """Ethos-U85 at 80x24 in a real terminal (issue 25 #14: ``ID 0x2000700`` for 0x20007001,
    block names wrapped into fake entries, the footer cut): every register row shows a whole
    32-bit value, every block-list line is one ``name (count)`` entry, the footer ends with Quit."""
    session = start_tui("ethos-u85", 80, 24)
    try:
        screen = wait_screen(session, "halted", "QBASE_LO", "q Quit")
        deadline = time.monotonic() + 30
        # the values arrive a few rows at a time: wait until a screenful has them
        while len(re.findall(r"▎ (\w+) +(0x[0-9a-f]+)", screen)) < 10:
            assert time.monotonic() < deadline, screen
            time.sleep(0.2)
            screen = capture(session)
        lines = screen.splitlines()
        assert lines[-1].rstrip().endswith("q Quit"), lines[-1]
        rows = re.findall(r"▎ (\w+) +(0x[0-9a-f]+)", screen)
        for name, value in rows:
            assert len(value) == 10, f"{name} shows {value} at 80x24:\n{screen}"
        entries = [m.strip() for m in re.findall(r"^▊ (.*?)▎", screen, re.M)]
        entries = [e for e in entries if e]
        assert len(entries) >= 5, screen
        for e in entries:
            assert re.fullmatch(r"\S+ \(\d+\)", e), f"block list line {e!r}:\n{screen}"
    finally:
        subprocess.run([TMUX, "kill-session", "-t", session], capture_output=True)
