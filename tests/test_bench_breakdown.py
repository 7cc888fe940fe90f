"""benchmarks/bench_nvdla.py breakdown (issue 31 #2), used by bench_nvdla and bench_ne16
--breakdown: each part's seconds are summed per run, the rest is the run minus its parts, and
every wrapped attribute is put back afterwards, even when a run fails."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_nvdla  # noqa: E402


class _Clock:
    """A perf_counter that moves only when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class _Unit:
    def work(self) -> str:
        return "class"


def _module_part() -> str:
    return "module"


def test_parts_are_summed_per_run_the_rest_is_what_is_left_and_all_is_put_back(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(bench_nvdla, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    mod = types.SimpleNamespace(part=_module_part)
    unit = _Unit()
    original_part, original_work = mod.part, _Unit.work

    def slow(f, seconds):
        def g(*a):
            clock.now += seconds
            return f(*a)
        return g

    mod.part = slow(_module_part, 3e-6)  # 3 us a call
    original_part = mod.part
    monkeypatch.setattr(_Unit, "work", slow(original_work, 5e-6))  # 5 us a call
    original_work = _Unit.work

    def run() -> float:
        start = clock.now
        assert mod.part() == "module"
        assert unit.work() == "class" and unit.work() == "class"  # twice a run: summed
        clock.now += 1e-6  # the run's own 1 us
        return clock.now - start

    lines = bench_nvdla.breakdown({"a": (mod, "part"), "b": (_Unit, "work"),
                                   "c": (unit, "work")}, run, 4)
    assert lines[0] == "breakdown, medians of 4 runs: 14.0 us a run"
    # "c" wraps the instance's attribute: it times the calls through the instance, which
    # then reach "b"'s wrapper on the class: parts that call each other count twice
    assert lines[1:] == ["  a: 3.0 us (21%)", "  b: 10.0 us (71%)", "  c: 10.0 us (71%)",
                         "  the rest (run control, registers, Python): -9.0 us (-64%)"]
    assert mod.part is original_part and _Unit.work is original_work
    assert "work" not in vars(unit)  # found on its class again, not left on the instance


def test_the_rest_is_the_run_minus_its_parts_and_a_failed_run_still_puts_everything_back(
        monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(bench_nvdla, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))

    def part() -> None:
        clock.now += 2e-6

    mod = types.SimpleNamespace(part=part)

    def run() -> float:
        start = clock.now
        mod.part()
        clock.now += 6e-6
        return clock.now - start

    lines = bench_nvdla.breakdown({"p": (mod, "part")}, run, 3)
    assert lines == ["breakdown, medians of 3 runs: 8.0 us a run", "  p: 2.0 us (25%)",
                     "  the rest (run control, registers, Python): 6.0 us (75%)"]

    def failing() -> float:
        mod.part()
        raise RuntimeError("the layer failed")

    with pytest.raises(RuntimeError, match="the layer failed"):
        bench_nvdla.breakdown({"p": (mod, "part")}, failing, 3)
    assert mod.part is part
