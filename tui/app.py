"""The Textual app: a client of the stub over RSP, beside gdb or against a remote stub.

Threads: the UI thread never talks to the stub. One *poll* thread reads status and the visible
view over the ``poll`` connection — every ``poll_period`` (0.08 s, 12.5/s) while the target
runs, every ``idle_period`` while it is halted, and sooner (but never more often than
``poll_period``) when a view asks for a refresh or a stop is reported. Run control
(step, continue, halt, reset), register writes and breakpoints go over the ``ctl`` connection in
short worker threads, one at a time; while a continue is pending, only ``interrupt()`` touches
``ctl``. Results come back to the UI as messages (``post_message`` is thread-safe).
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Footer, Header, Static, TabbedContent, TabPane

from .memory import MemoryView
from .program import ProgramView
from .registers import RegistersView
from .status import StatusView
from .target import RspError, Target, describe_stop, parse_int
from .tensor import TensorView
from .view import View

HELP = """\
[b]accelstub TUI[/b] — a client of the stub over RSP

[b]Run control[/b]
  s / S    step one unit (layer / command / job) / one unit back
  c        continue until a breakpoint, a watchpoint or the end
  h        halt (also while running)
  r        reset: monitor reset init (reloads the program)
  q        quit (the stub keeps running when attached with --connect)

[b]Views[/b]
  1..5     Registers, Memory, Program, Status, Tensor
  e/Enter  Registers: edit the selected register (a real bus write)
  g        Memory: go to an address; arrows/PgUp/PgDn move the cursor
  b        Program: toggle a breakpoint on the selected unit
  [ ] v    Tensor: previous/next channel, channel/grid; its first box:
           a unit's input/output, follow (last unit run) or address

Values changed by the last stop, write or poll are highlighted.
Press Escape or ? to close this help."""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        yield Static(Text.from_markup(HELP), id="help")

    def action_dismiss(self, result: Any = None) -> None:  # type: ignore[override]
        self.dismiss(None)


class Call(Message):
    """Run ``fn(*args)`` in the UI thread (posted from worker threads)."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        super().__init__()
        self.fn, self.args = fn, args


class PollResult(Message):
    """One poll: the status, and the data the visible view asked for."""

    def __init__(self, status: dict[str, str], view: View | None, data: Any, running: bool,
                 units: Any = None, notified: str | None = None, stops: int = 0) -> None:
        super().__init__()
        self.status, self.view, self.data, self.running = status, view, data, running
        self.units, self.notified = units, notified
        self.stops = stops  # the app's stop count when the poll began


VIEWS = (("registers", "Registers"), ("memory", "Memory"), ("program", "Program"),
         ("status", "Status"), ("tensor", "Tensor"))


class AccelApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "accelstub"
    BINDINGS = [
        Binding("s", "step", "Step"),
        Binding("S", "step_back", "Back", show=False),
        Binding("c", "continue", "Continue"),
        Binding("h", "halt", "Halt"),
        Binding("r", "reset", "Reset"),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
        *[Binding(str(i + 1), f"show_view('{key}')", title, show=False)
          for i, (key, title) in enumerate(VIEWS)],
    ]

    def __init__(self, target: Target, label: str | None = None, poll_period: float = 0.08,
                 idle_period: float = 0.5, message: str = "") -> None:
        super().__init__()
        self.target = target
        self.label = label if label is not None else f"{target.host}:{target.port}"
        self.poll_period, self.idle_period = poll_period, idle_period
        self.status: dict[str, str] = {}
        self.running = False  # the target runs (our continue, or someone else's)
        self.continue_pending = False  # our ctl connection waits for a stop reply
        self.ctl_busy = False  # a ctl request (step, reset, write, breakpoint) is in flight
        self.interrupt_sent = False
        self.reset_after_stop = False
        self.last_stop = ""
        self.message = message
        self.error = ""
        self.lost = False
        self.polls = 0  # poll results applied while running (the live update rate)
        self.applied = 0  # all poll results applied
        self._console_seen = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._refresh = threading.Event()
        self._view_at = 0.0  # when the active view was last read/updated by a poll
        self._applied = threading.Event()
        self._poll_thread: threading.Thread | None = None
        self._notified_stop: str | None = None
        self.stops = 0  # our own stops so far (see on_poll_result)
        self.active_view: View | None = None
        self._views: dict[str, View] = {}
        self.program_view: ProgramView | None = None

    # -- layout --------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="◆")
        yield Static(id="statusline")
        with TabbedContent(id="views"):
            with TabPane("Registers", id="registers"):
                yield RegistersView(self.target.desc, id="registers-view")
            with TabPane("Memory", id="memory"):
                yield MemoryView(self.target, id="memory-view")
            with TabPane("Program", id="program"):
                yield ProgramView(id="program-view")
            with TabPane("Status", id="status"):
                yield StatusView(id="status-view")
            with TabPane("Tensor", id="tensor"):
                yield TensorView(self.target.data_address, id="tensor-view")
        # without the command palette's entry (^p still opens it), and with short binding names:
        # at 80 columns every view's bindings fit (issue 25 #14: the footer was cut)
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self.title = f"accelstub — {self.target.desc.device}"
        self.sub_title = self.label
        self._statusline = self.query_one("#statusline", Static)
        self._views = {key: self.query_one(f"#{key}-view", View) for key, _ in VIEWS}
        self.active_view = self._views["registers"]
        self.program_view = self._views["program"]
        self.call_after_refresh(self._focus_view, self.active_view)
        self.target.set_stop_listener(self._on_notification)
        self._update_statusline()
        self._poll_thread = threading.Thread(target=self._poll_loop, daemon=True,
                                             name="tui-poll")
        self._poll_thread.start()

    def on_unmount(self) -> None:
        self._stop.set()
        self._wake.set()
        self._applied.set()
        self.target.set_stop_listener(None)
        if self._poll_thread is not None:
            self._poll_thread.join(timeout=2)

    def view(self, key: str) -> View:
        return self._views[key]

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self.active_view = self._views.get(event.pane.id or "")
        if self.active_view is not None:
            self._focus_view(self.active_view)
            self.active_view.shown()  # views skip drawing while hidden: catch up now
        self.request_refresh()

    def _focus_view(self, view: View) -> None:
        """Focus the view's main widget, so its keys work and show in the footer.

        Only while ``view``'s tab is still the active one: the first focus waits for a refresh,
        and if the user has switched views meanwhile, focusing the old view's widget would make the
        TabbedContent switch back to it (and eat the key that switched)."""
        shown = self.query_one("#views", TabbedContent).active
        if self._views.get(shown) is not view:
            return
        if view.MAIN:
            try:
                view.query_one(view.MAIN).focus()
            except Exception:
                pass

    def on_key(self, event: Any) -> None:
        """Esc closes the register editor even after Tab moved the focus out of its view."""
        if event.key == "escape" and self._views["registers"].cancel_edit():
            event.stop()

    def action_show_view(self, key: str) -> None:
        self.query_one("#views", TabbedContent).active = key

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def on_call(self, message: Call) -> None:
        message.fn(*message.args)

    # -- polling -------------------------------------------------------------------------------
    def request_refresh(self) -> None:
        """Re-read the visible view at the next poll (now)."""
        self._refresh.set()
        self._wake.set()

    def _poll_loop(self) -> None:
        # the views' fetch() reads widget geometry (scroll offsets, sizes) from this thread;
        # some of those properties look up the active app, so give this thread the context
        from textual._context import active_app

        active_app.set(self)
        t = self.target
        first = True
        while not self._stop.is_set():
            t0 = time.perf_counter()
            full = first or self._refresh.is_set()
            self._refresh.clear()
            notified, self._notified_stop = self._notified_stop, None
            first = False
            stops = self.stops
            try:
                status = t.status()
                running = status.get("state") == "running" or self.continue_pending
                view = self.active_view
                data = None
                if view is not None and running and not full and \
                        time.perf_counter() - self._view_at < view.RUN_PERIOD:
                    view = None  # this view follows a run at its own, lower rate
                if view is not None:
                    self._view_at = time.perf_counter()
                    # a LIVE view re-reads at every poll while the target runs (the target
                    # changes what it shows); the others only on a refresh while halted
                    live = view.LIVE
                    data = view.fetch(t, (full or running) if live else (full and not running))
                prog = self.program_view
                units = None
                if view is not prog and prog is not None and prog.units is None:
                    units = prog.fetch(t, True)  # the status line names the unit at pc
            except (RspError, OSError) as e:
                self.post_message(Call(self._connection_lost, str(e)))
                return
            except Exception as e:  # a bug in a view must not stop the polling
                self.post_message(Call(self._show_error, f"poll: {type(e).__name__}: {e}"))
                status, view, data, running = self.status, None, None, self.running
                units = None
            self._applied.clear()
            result = PollResult(status, view, data, running, units, notified, stops)
            if not self.post_message(result):
                return
            self._applied.wait(1.0)
            # never more often than poll_period (stop notifications and view requests only
            # shorten the idle wait), so the polling cannot crowd out the emulation
            if running:
                wait = self.poll_period
            else:
                self._wake.wait(max(0.0, self.idle_period - (time.perf_counter() - t0)))
                self._wake.clear()
                wait = self.poll_period
            left = wait - (time.perf_counter() - t0)
            if left > 0 and not self._stop.is_set():
                self._stop.wait(left)

    def on_poll_result(self, msg: PollResult) -> None:
        try:
            if self._exit or not self.is_running:
                return  # closing: the views' widgets are being removed, a poll may still land
            if msg.running and msg.stops != self.stops:
                return  # begun before our latest stop: it would show a run that is over
            self.status = msg.status
            was_running = self.running
            self.running = msg.running
            self.applied += 1
            if msg.notified is not None:
                self._notified(msg.notified)
            if msg.running:
                self.polls += 1
            status_view = self.view("status")
            status_view.record(msg.status, msg.running, visible=self.active_view is status_view)
            if msg.view is not None:
                msg.view.apply(msg.data, msg.status)
            if msg.units is not None and self.program_view is not None:
                self.program_view.apply(msg.units, msg.status)
            if was_running and not msg.running and not self.continue_pending:
                self.request_refresh()  # someone else's run ended: re-read everything
            self._update_statusline()
        finally:
            self._applied.set()

    # -- status line -----------------------------------------------------------------------------
    def _update_statusline(self) -> None:
        line = getattr(self, "_statusline", None)
        if line is None or not line.is_attached:
            return
        t = Text(no_wrap=True, overflow="ellipsis")
        line.set_class(self.running, "running")
        line.set_class(bool(self.error) or self.lost, "error")
        if self.lost:
            t.append("✖ connection lost ", style="bold")
            t.append(self.error)
            self._set_statusline(line, t)
            return
        if self.running:
            t.append("▶ RUNNING", style="bold")
        else:
            t.append("■ halted", style="bold")
        pc = parse_int(self.status.get("pc", ""))
        if pc is not None:
            t.append(f"  pc {pc:#010x}")
            units = self.view("program").units or []
            label = next((u.label for u in units if u.address == pc), None)
            if label:
                t.append(f" ({label})")
        reason = self.status.get("stop") or self.last_stop
        if "watchpoint" in self.last_stop or self.last_stop == "reset":
            reason = self.last_stop
        if reason and not self.running:
            t.append(f"  stop: {reason}", style="dim")
        note = self.error or self.message
        if note:
            t.append("  │ ")
            t.append(note, style="bold" if self.error else "")
        self._set_statusline(line, t)

    def _set_statusline(self, line: Static, text: Text) -> None:
        """Update the line only when its text changes: every poll calls this, and an update
        re-lays out the screen (the line mostly changes once per unit)."""
        key = (text.plain, tuple(text.spans))
        if key != getattr(self, "_statusline_key", None):
            self._statusline_key = key
            line.update(text)

    def _show_error(self, text: str) -> None:
        self.error = text
        self.notify(text, severity="error", timeout=6)
        self._update_statusline()

    def _connection_lost(self, text: str) -> None:
        self.lost = True
        self.running = self.continue_pending = False
        self.error = text
        self.notify(f"connection to the stub lost: {text}", severity="error", timeout=10)
        self._update_statusline()

    def _take_console(self) -> str:
        lines = self.target.ctl.console[self._console_seen:]
        self._console_seen += len(lines)
        text = "".join(lines).strip().splitlines()
        return text[-1] if text else ""

    # -- run control ---------------------------------------------------------------------------
    def _ctl(self, name: str, fn: Callable[[], Any], done: Callable[[Any], None]) -> None:
        """Run ``fn`` (a ctl request) in a worker thread; ``done(result)`` in the UI thread."""
        if self.lost:
            self.notify("not connected", severity="error")
            return
        self.ctl_busy = True

        def work() -> None:
            try:
                result = fn()
            except (RspError, OSError) as e:
                self.post_message(Call(self._ctl_failed, name, str(e)))
                return
            except Exception as e:
                self.post_message(Call(self._ctl_failed, name, f"{type(e).__name__}: {e}"))
                return
            self.post_message(Call(self._ctl_done, done, result))

        self.run_worker(work, thread=True, group="ctl", exit_on_error=False, name=name)

    def _ctl_done(self, done: Callable[[Any], None], result: Any) -> None:
        self.ctl_busy = False
        done(result)

    def _ctl_failed(self, name: str, text: str) -> None:
        self.ctl_busy = False
        console = self._take_console()
        self._show_error(f"{name}: {console or text}")
        if "closed" in text:
            self._connection_lost(text)

    def _can_control(self, what: str) -> bool:
        if self.lost:
            self.notify("not connected to the stub", severity="error")
            return False
        if self.continue_pending or self.running:
            self.notify(f"the target is running: halt (h) before {what}", severity="warning")
            return False
        if self.ctl_busy:
            self.notify("busy: the previous request has not finished", severity="warning")
            return False
        return True

    def action_step(self) -> None:
        if self._can_control("stepping"):
            self.error = ""
            self._ctl("step", lambda: self.target.ctl.step(timeout=60), self._stopped)

    def action_step_back(self) -> None:
        """One unit back through the stub's history (reverse-stepi; devices/history.py)."""
        if self._can_control("stepping back"):
            self.error = ""
            self._ctl("step back", lambda: self.target.ctl.step_back(timeout=60), self._stopped)

    def action_continue(self) -> None:
        if not self._can_control("continuing"):
            return
        self.error = ""
        try:
            self.target.ctl.start_continue()
        except OSError as e:
            self._connection_lost(str(e))
            return
        self.continue_pending = self.running = True
        self.interrupt_sent = False
        self._update_statusline()
        self.run_worker(self._wait_continue, thread=True, group="continue",
                        exit_on_error=False, name="continue")
        self._wake.set()

    def _wait_continue(self) -> None:
        ctl = self.target.ctl
        while True:
            try:
                reply = ctl.wait_stop(timeout=0.25)
                break
            except RspError as e:
                if "no reply" in str(e) and not self._stop.is_set():
                    continue
                self.post_message(Call(self._ctl_failed, "continue", str(e)))
                self.post_message(Call(self._continue_over))
                return
        if self.interrupt_sent and reply[:1] in ("T", "S"):
            # the 0x03 may have crossed the stop: its own stop reply follows; drop it
            try:
                ctl.wait_stop(timeout=0.2)
            except RspError:
                pass
        self.post_message(Call(self._continue_stopped, reply))

    def _continue_over(self) -> None:
        self.continue_pending = self.running = False
        self._update_statusline()

    def _continue_stopped(self, reply: str) -> None:
        self.continue_pending = False
        self._stopped(reply)
        if self.reset_after_stop:
            self.reset_after_stop = False
            self.action_reset()

    def action_halt(self) -> None:
        if self.lost:
            return
        if self.continue_pending:
            self.interrupt_sent = True
            try:
                self.target.ctl.interrupt()
            except OSError as e:
                self._connection_lost(str(e))
            return
        if self.running and not self.ctl_busy:  # someone else's run: ask through ctl
            def halt() -> str:
                self.target.ctl.interrupt()
                return self.target.ctl.wait_stop(timeout=10)
            self._ctl("halt", halt, self._stopped)
            return
        self.notify("the target is already halted")

    def action_reset(self) -> None:
        if self.continue_pending:
            self.reset_after_stop = True
            self.action_halt()
            return
        if self._can_control("reset"):
            self.error = ""
            self._ctl("reset", lambda: self.target.ctl.monitor("reset init"), self._after_reset)

    def _after_reset(self, text: str) -> None:
        self.last_stop = "reset"
        self.message = (text.strip().splitlines() or ["reset init"])[-1]
        self.view("program").units = None
        self.request_refresh()
        self._update_statusline()

    def _stopped(self, reply: str) -> None:
        """A stop reply to our own step/continue/halt."""
        self.running = False
        self.stops += 1
        console = self._take_console()
        if reply.startswith("E"):
            self._show_error(console or f"the stub refused ({reply})")
        else:
            self.last_stop = describe_stop(reply)
            self.message = console
        self.view("program").units = None  # summaries may change with the registers
        self.request_refresh()
        self._update_statusline()

    def _on_notification(self, reply: str) -> None:
        """A %Stop notification (stops caused by gdb or another client, and our own), in the
        poll connection's reader thread: noted and handed to the next poll, so a client that
        stops the target hundreds of times a second costs one UI update per poll, not one each."""
        self._notified_stop = reply
        self.request_refresh()

    def _notified(self, reply: str) -> None:
        if self.continue_pending or self.ctl_busy:
            return  # our own request: its reply is on the way
        self.last_stop = describe_stop(reply)

    # -- requests from the views ------------------------------------------------------------------
    def write_register(self, name: str, value: int) -> None:
        if not self._can_control(f"writing {name}"):
            return

        def done(_: Any) -> None:
            self.message = f"wrote {name} = {value:#x}"
            self.request_refresh()
            self._update_statusline()

        self._ctl("write", lambda: self.target.ctl.write_register(name, value), done)

    def toggle_breakpoint(self, address: int) -> None:
        if not self._can_control("changing breakpoints"):
            return
        prog = self.view("program")
        on = address not in prog.breakpoints
        ctl = self.target.ctl

        def req() -> None:
            (ctl.set_breakpoint if on else ctl.clear_breakpoint)(address)

        def done(_: Any) -> None:
            prog.breakpoint_changed(address, on)
            self.message = f"breakpoint {'set' if on else 'removed'} at {address:#010x}"
            self._update_statusline()

        self._ctl("breakpoint", req, done)


# --------------------------------------------------------------------------------------------
# Entry point


def parse_connect(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"--connect wants HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)


class StubProcess:
    """``accelstub serve DEVICE --port 0`` in a child process: the emulator then has an
    interpreter (and GIL) of its own, so the TUI's polling does not slow it down."""

    def __init__(self, device: str, program: str | None) -> None:
        import json
        import subprocess

        # an unknown device name is the child's to refuse (its last line says which exist)
        cmd = [sys.executable, "-m", "accelstub.stub.cli", "serve", device, "--port", "0"]
        if program:
            cmd += ["--program", program]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True)
        self.summary = "no program loaded"
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("accelstub: loaded "):
                # the program's name, short enough for the status line at 120 columns (its
                # one-line summary is `monitor units`' and the Program view's business)
                self.summary = line[len("accelstub: "):].split(";")[0].split(":")[0]
            if line.startswith("accelstub ready "):
                self.port = json.loads(line.split(" ", 2)[2])["gdb"][0]
                return
        err = self.proc.stderr.read().strip().splitlines() if self.proc.stderr else []
        self.proc.wait()
        raise RuntimeError(err[-1].split(" error: ", 1)[-1] if err else "the stub did not start")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except Exception:
            self.proc.kill()


#: how far below the emulator the TUI runs (os.nice): on a busy machine the scheduler then gives
#: the emulation's threads the cores first, and the TUI the time they leave
NICE = 10


def yield_cpu() -> None:
    """Lower this process's CPU priority (after any stub child has started: children inherit
    it). The emulation's BLAS threads wait for each other, so a TUI that takes part of one core
    at equal priority slowed a run by more than the CPU it used."""
    try:
        os.nice(NICE)
    except OSError:
        pass


def run_tui(connect: str | None = None, device: str | None = None,
            program: str | None = None) -> int:
    """Attach to a stub at ``connect`` (HOST:PORT), or start one for ``device`` in the
    background (with ``program`` or the bundled demo) and attach to it. Returns an exit code."""
    server = None
    message = ""
    try:
        if connect:
            host, port = parse_connect(connect)
        elif device:
            server = StubProcess(device, program)
            host, port, message = "127.0.0.1", server.port, server.summary
        else:
            print("accelstub tui: give --connect HOST:PORT or a device", file=sys.stderr)
            return 2
        target = Target(host, port)
        yield_cpu()
    except Exception as e:  # unknown device, bad program, nothing listening, ...
        print(f"accelstub tui: error: {e}", file=sys.stderr)
        if server is not None:
            server.stop()
        return 1
    try:
        label = f"{host}:{port}" + (" (stub started by the TUI)" if server else "")
        app = AccelApp(target, label=label, message=message)
        rc = app.run()
    finally:
        target.close()
        if server is not None:
            server.stop()
    return rc or 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m accelstub.tui",
                                 description="Terminal UI for the accelstub GDB stub")
    ap.add_argument("device", nargs="?", help="start a stub for this device (e.g. max78000)")
    ap.add_argument("--device", dest="device_opt", help="same as the positional DEVICE")
    ap.add_argument("--connect", metavar="HOST:PORT", help="attach to a running stub")
    ap.add_argument("--program", help="program to load into the started stub")
    args = ap.parse_args(argv)
    device = args.device_opt or args.device
    if not args.connect and not device:
        ap.error("give --connect HOST:PORT or a device")
    return run_tui(connect=args.connect, device=device, program=args.program)
