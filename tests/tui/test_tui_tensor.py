"""The Tensor view on a unit's declared tensors (Device.unit_tensors through `monitor json
tensors K`): the selector lists each unit's tensors, a step turns the view to the output of the
unit that just ran, a chosen tensor stays chosen, and the typed address still works."""
from __future__ import annotations

from accelstub.devices import open_device
from accelstub.stub.cli import demo_program
from accelstub.tui.tensor import FOLLOW, heat

from .test_tui import make_app, run, served, show, started, wait_for


def memory_value(dev, spec, c: int, h: int, w: int) -> int:
    """The element's byte where the declaration says it lies, read here one by one."""
    return int.from_bytes(dev.read(spec.channel[c] + spec.row[h] + spec.col[w], 1), "little",
                          signed=True)


def test_a_step_shows_the_output_of_the_unit_that_ran_and_a_choice_stays():
    dev = open_device("max78000")

    async def go(t):
        app = make_app(t)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(pilot)
            tv = await show(pilot, "5", "tensor-view")
            await wait_for(pilot, lambda: ("Layer 2 output", "2:output") in tv.options,
                           what="the selector lists the declared tensors")
            assert tv.source == "address" and tv.data is not None  # the typed address first
            await pilot.press("s")
            await wait_for(pilot, lambda: tv.source == FOLLOW and tv.data is not None
                           and tv.label == "Layer 0", what="follow after the step")
            spec = tv.spec
            assert spec.name == "output" and spec == dev.unit_tensors(0)[-1]
            assert tv.shape == (16, 16, 16) and not tv.query_one("#tensor-addr").display
            for c, h, w in ((0, 0, 0), (5, 3, 7), (15, 15, 15)):
                assert tv.value_at(c, h, w) == memory_value(dev, spec, c, h, w)
            assert any(tv.value_at(3, h, w) for h in range(16) for w in range(16))
            info = str(tv.query_one("#tensor-info").render())
            assert info.startswith("Layer 0 output: CHW 16x16x16 int8 at 0x")
            # choose Layer 1's input: it stays through the next step
            tv.query_one("#tensor-source").value = "1:input"
            await wait_for(pilot, lambda: tv.label == "Layer 1" and tv.spec is not None
                           and tv.spec.name == "input" and tv.data is not None)
            await pilot.press("s")
            await wait_for(pilot, lambda: "Layer 2" in str(app.query_one("#statusline").render()),
                           what="second step")
            await pilot.pause(0.3)
            assert tv.source == "1:input" and tv.label == "Layer 1"
            # back to the typed address: its controls, shape and layout as they were
            tv.query_one("#tensor-source").value = "address"
            await wait_for(pilot, lambda: tv.source == "address" and tv.data is not None)
            assert tv.shape == (4, 4, 4) and tv.order == "HWC"
            assert tv.query_one("#tensor-addr").display

    with served(dev, demo_program("max78000")) as t:
        run(go(t))


def test_the_selector_offers_exactly_what_the_device_declares():
    """ethos-u85's demo (whatever its commands declare: none before its declaration lands,
    none for a DMA command after): the options are the declared tensors as the stub lists
    them, and with none the view stays on the typed address after a step."""
    async def go(t):
        app = make_app(t)
        async with app.run_test(size=(80, 24)) as pilot:
            await started(pilot)
            tv = await show(pilot, "5", "tensor-view")
            await wait_for(pilot, lambda: tv.units_key is not None, what="listing read")
            await pilot.press("s")
            await wait_for(pilot, lambda: "cmd 1" in str(app.query_one("#statusline").render()),
                           what="step")
            await pilot.pause(0.3)
            want = [f"{i}:{s.name}" for i in range(len(t.json("units")["units"]))
                    for s in t.unit_tensors(i)]
            assert [v for _, v in tv.options] == (["address", FOLLOW] + want if want
                                                  else ["address"])
            assert tv.source == (FOLLOW if want else "address")

    with served(open_device("ethos-u85"), demo_program("ethos-u85")) as t:
        run(go(t))


def test_heat_spans_wide_types_by_their_peak():
    """int32 accumulators are coloured against the largest value shown, int8 by its range."""
    assert heat(1000, "int32", 1000) == heat(127, "int8")
    assert heat(-1000, "int32", 1000) == heat(-128, "int8")
    assert heat(200, "uint16", 200) == heat(255, "uint8")
