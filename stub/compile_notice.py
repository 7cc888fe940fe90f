"""A line on stderr when numba compiles kernels, so a first run after install (compilation, then
cached on disk) is never silent: ``accelstub: compiling kernels for the first run (cached
afterwards): pool_hwc, gather_weights, ...``, updated as kernels finish on a terminal, one line
at the end otherwise."""
from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


class CompileNotice:
    """Listens to numba's compile events; prints only if compilation takes a noticeable time."""

    DELAY_S = 0.5  # below this, say nothing

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stderr  # the stream of the moment (tests swap sys.stderr)
        self.tty = self.out.isatty()
        self.names: list[str] = []
        self.t0: float | None = None
        self.total = 0.0
        self.depth = 0
        self.shown = False
        self._lock = threading.Lock()

    def install(self) -> "CompileNotice":
        from numba.core import event

        self._event = event
        notice = self

        class _Listener(event.Listener):
            def on_start(self, e: event.Event) -> None:
                notice._start()

            def on_end(self, e: event.Event) -> None:
                d = e.data.get("dispatcher")
                notice._end(getattr(getattr(d, "py_func", None), "__name__", "kernel"))

        self._listener = _Listener()
        event.register("numba:compile", self._listener)
        return self

    def uninstall(self) -> None:
        if getattr(self, "_listener", None) is not None:
            self._event.unregister("numba:compile", self._listener)
            self._listener = None

    def __enter__(self) -> "CompileNotice":
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def _say(self, text: str, end: str = "\n") -> None:
        """Print to the stream; a stream that has gone (closed by its owner) ends the notice
        instead of failing the compilation it reports on."""
        try:
            print(text, end=end, file=self.out, flush=True)
        except (ValueError, OSError):
            self.uninstall()

    def _start(self) -> None:
        with self._lock:
            if self.depth == 0:
                self.t0 = time.perf_counter()
            self.depth += 1

    def _end(self, name: str) -> None:
        with self._lock:
            self.depth -= 1
            if self.depth:
                return  # a kernel called by the one being compiled: counted with it
            self.total += time.perf_counter() - (self.t0 or time.perf_counter())
            self.names.append(name)
            if self.tty and self.total > self.DELAY_S:
                self.shown = True
                self._say(f"\raccelstub: compiling kernels for the first run (cached "
                          f"afterwards): {len(self.names)} done, {self.total:.1f} s, last "
                          f"{name}\033[K", end="")
            elif not self.tty and not self.shown and self.total > self.DELAY_S:
                self.shown = True
                self._say("accelstub: compiling kernels for the first run (cached afterwards)...")

    def finish(self) -> None:
        """End the progress line (a terminal's) with the totals, and stop listening."""
        self.uninstall()
        if self.shown:
            line = (f"accelstub: compiled {len(self.names)} kernels in {self.total:.1f} s "
                    "(cached for later runs)")
            self._say(f"\r{line}\033[K" if self.tty else line)
            self.shown = False
