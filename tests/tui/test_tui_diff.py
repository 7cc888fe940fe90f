"""The Tensor view beside a per-layer diff reference (issue 27 point 3): with ``monitor diff
load`` done, the output of the layer that just ran is drawn next to the reference's tensor and
the difference map; the values shown are the reference file's, and the map marks exactly the
elements where the device departs from it."""
from __future__ import annotations

import numpy as np

from accelstub.devices import open_device
from accelstub.testkit import max78000_build as mb

from .test_tui import make_app, run, served, show, started, wait_for

NET = mb.Network(3, 6, 6, [mb.Layer(4, activation="relu", shift=-1, bias=True),
                           mb.Layer(4, kernel=1, pad=0, shift=-1, bias=True)])


def test_reference_and_difference_map_beside_the_layer_output(tmp_path):
    x, ws, bs = mb.random_arrays(NET, seed=4)
    clean = mb.build(NET, x, ws, bs)
    ref = tmp_path / "ref.npz"
    np.savez(ref, **{str(i): o for i, o in enumerate(clean.outputs)})
    bs = [bs[0].copy(), bs[1]]
    bs[0][2] = 127 if bs[0][2] != 127 else -128  # layer 0's bias of channel 2 corrupted
    mb.build(NET, x, ws, bs).write(tmp_path / "bad")
    with served(open_device("max78000"), tmp_path / "bad") as t:
        t.poll.monitor(f"diff load {ref}")  # through the stub, as a gdb user loads it

        async def go(t):
            app = make_app(t)
            async with app.run_test(size=(120, 30)) as pilot:
                await started(pilot)
                tv = await show(pilot, "5", "tensor-view")
                await pilot.press("s")
                await wait_for(pilot, lambda: tv.label == "Layer 0" and tv.data is not None
                               and tv.shown_reference() is not None, what="reference shown")
                want = clean.outputs[0]
                C, H, W = want.shape
                assert all(tv.reference_at(c, h, w) == want[c, h, w]
                           for c in range(C) for h in range(H) for w in range(W))
                differ = {(c, h, w) for c in range(C) for h in range(H) for w in range(W)
                          if tv.value_at(c, h, w) != tv.reference_at(c, h, w)}
                assert differ and {c for c, _, _ in differ} == {2}
                tv.channel = 2
                tv._draw()
                text = str(tv.query_one("#tensor-map").render())
                assert text.count(" | ") == 2 * H  # three maps per row
                info = str(tv.query_one("#tensor-info").render())
                assert f"{len(differ)} differ" in info and "reference '0'" in info
        run(go(t))
        assert "first divergence at layer 0" in t.poll.monitor("diff")
