"""A first run compiles numba kernels: the CLI says so on stderr instead of sitting silent."""
from __future__ import annotations

import io

from numba import njit

from accelstub.stub.compile_notice import CompileNotice


def test_compiling_a_kernel_prints_a_line_and_the_total():
    out = io.StringIO()
    notice = CompileNotice(out)
    notice.DELAY_S = 0.0
    notice.install()

    @njit  # a fresh function: numba compiles it on the first call (no cache)
    def twice(x):
        return 2 * x

    assert twice(21) == 42
    notice.finish()
    lines = out.getvalue().splitlines()
    assert lines[0] == "accelstub: compiling kernels for the first run (cached afterwards)..."
    assert lines[1].startswith("accelstub: compiled 1 kernels in ") and lines[1].endswith(
        "s (cached for later runs)")
    assert notice.names == ["twice"]


def test_nothing_is_printed_when_compilation_is_quick():
    out = io.StringIO()
    notice = CompileNotice(out)
    notice.DELAY_S = 60.0
    notice.install()

    @njit
    def thrice(x):
        return 3 * x

    assert thrice(2) == 6
    notice.finish()
    assert out.getvalue() == "" and notice.names == ["thrice"]


def test_a_closed_stream_ends_the_notice_instead_of_failing_the_compilation():
    """A notice whose stream was closed (a test's captured stderr, a closed pipe) stops
    listening; the compilation it reports on goes on."""
    import io

    out = io.StringIO()
    notice = CompileNotice(out)
    notice.DELAY_S = 0.0
    notice.install()
    out.close()
    notice._start()
    notice._end("kernel")  # would print: the stream is closed
    assert notice._listener is None  # uninstalled, nothing raised
    notice.finish()
