"""A line on stderr when numba compiles kernels, so a first run after install (compilation, then
cached on disk) is never silent: ``accelstub: compiling kernels for the first run (cached
afterwards): pool_hwc, gather_weights, ...``, updated as kernels finish on a terminal, one line
at the end otherwise."""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO


def _named(e) -> tuple[str, str]:
    """The function name and module of the kernel a numba compile event is about."""
    func = getattr(e.data.get("dispatcher"), "py_func", None)
    return getattr(func, "__name__", "kernel"), getattr(func, "__module__", "")


class CompileNotice:
    """Listens to numba's compile events; prints only if compilation takes a noticeable time."""

    DELAY_S = 0.5  # below this, say nothing

    def __init__(self, out: TextIO | Callable[[str], None] | None = None,
                 on_kernel: Callable[[str, str, str], None] | None = None) -> None:
        #: a stream (the one of the moment: tests swap sys.stderr), or a function given each
        #: piece of text (a gdb session's console)
        self.out = out or sys.stderr
        #: called with ("start" or "end", module, function) as each kernel's compilation starts
        #: and ends (accelstub compile's progress)
        self.on_kernel = on_kernel
        self.tty = not callable(self.out) and self.out.isatty()
        self.names: list[str] = []
        self.t0: float | None = None
        self.total = 0.0
        self.depth = 0
        self.shown = False
        self._lock = threading.Lock()

    def install(self) -> CompileNotice:
        from numba.core import event

        self._event = event
        notice = self

        class _Listener(event.Listener):
            def on_start(self, e: event.Event) -> None:
                notice._start(*_named(e))

            def on_end(self, e: event.Event) -> None:
                notice._end(*_named(e))

        self._listener = _Listener()
        event.register("numba:compile", self._listener)
        return self

    def uninstall(self) -> None:
        if getattr(self, "_listener", None) is not None:
            self._event.unregister("numba:compile", self._listener)
            self._listener = None

    def __enter__(self) -> CompileNotice:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def _say(self, text: str, end: str = "\n") -> None:
        """Print to the stream; a stream that has gone (closed by its owner) ends the notice
        instead of failing the compilation it reports on."""
        try:
            if callable(self.out):
                self.out(text + end)
            else:
                print(text, end=end, file=self.out, flush=True)
        except (ValueError, OSError):
            self.uninstall()

    def _start(self, name: str = "kernel", module: str = "") -> None:
        with self._lock:
            if self.depth == 0:
                self.t0 = time.perf_counter()
                if self.on_kernel is not None:
                    self.on_kernel("start", module, name)
            self.depth += 1

    def _end(self, name: str = "kernel", module: str = "") -> None:
        with self._lock:
            self.depth -= 1
            if self.depth:
                return  # a kernel called by the one being compiled: counted with it
            self.total += time.perf_counter() - (self.t0 or time.perf_counter())
            self.names.append(name)
            if self.on_kernel is not None:
                self.on_kernel("end", module, name)
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
