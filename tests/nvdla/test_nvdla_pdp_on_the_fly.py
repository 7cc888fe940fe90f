"""PDP on the fly: SDP's output stream pooled by PDP, which writes the layer's output.

PDP's own D_OPERATION_MODE_CFG.flying_mode decides where its input comes from (ON_FLYING, 0 and
the reset value: from SDP, which sends it there with D_FEATURE_MODE_CFG.output_dst PDP;
OFF_FLYING: from memory through PDP_RDMA). A PDP armed on the fly is part of SDP's layer, never
a layer of its own: drivers arm downstream first, so it is armed before its SDP and may be armed
while an earlier layer still runs. The traces come from the project's builder
(testkit/nvdla_build.py, ``pool=``), each output checked against the independent reference
(testkit/nvdla_reference.py: sdp, then pool).
"""
from __future__ import annotations

from collections import Counter

from accelstub.devices import open_device
from accelstub.devices.host import Write
from accelstub.devices.nvdla.model import UNITS
from accelstub.devices.nvdla.trace import load_trace
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.commands import CommandContext, execute
from accelstub.stub.program import load_program, run_to_end
from accelstub.testkit.nvdla_build import Cdp, Conv, Pdp, Sdp, Stage, build


def _pool(method: str, kernel=(2, 2), stride=(2, 2), pad=(0, 0, 0, 0), pad_value=0) -> Pdp:
    return Pdp(0, 0, 0, method, kernel, stride, pad, pad_value)  # w, h, c: SDP's output


def test_sdp_output_pooled_on_the_fly_matches_the_reference(tmp_path):
    """A convolution and two SDP layers pooled on the fly (max, average with padding, min), an
    offline PDP between them, in one trace: every CRC passes; PDP_RDMA runs only for the
    offline PDP; SDP and PDP each raise their done interrupt in the flying layers."""
    layers = [Conv(6, 5, 8, 8, clip=3, cvt=(0, 1, 2), pool=_pool("max")),
              Sdp(chain=True, bs=Stage(alu="sum", alu_operand=-5, relu=True),
                  pool=_pool("average", (3, 3), (1, 1), (1, 1, 1, 1), pad_value=3)),
              Pdp(6, 5, 8, "max", (2, 2), (2, 2)),
              Sdp(7, 5, 12, bn=Stage(mul=True, mul_operand=3, mul_shift=1),
                  pool=_pool("min", (2, 3), (1, 2)))]
    rc = RunControl(open_device("nvdla"))
    dev = rc.device
    load_program(CommandContext(targets=[rc]), build(layers, "fly", seed=5).write(tmp_path))
    stop = run_to_end(rc)
    crc = [ln for ln in stop.lines if ln.startswith("check_crc")]
    assert stop.code == 0 and len(crc) == 4 and all(": PASS" in ln for ln in crc), stop.lines
    assert dev.units_done == 4
    runs = Counter({"PDP": 4, "PDP_RDMA": 1, "SDP": 3, "SDP_RDMA": 2, "CDMA": 1})
    assert {u: dev.consumer_group(u) for u in runs} == {u: n % 2 for u, n in runs.items()}
    counts = dev.interrupt_counts()
    assert (counts["SDP_0"], counts["SDP_1"], counts["PDP_0"], counts["PDP_1"]) == (2, 1, 2, 2)
    status = {u: int.from_bytes(dev.read(dev.description.register(f"{u}_S_STATUS").address, 4),
                                "little") for u in UNITS}
    assert status == dict.fromkeys(UNITS, 0)  # nothing left armed


def test_a_pdp_armed_on_the_fly_waits_for_its_sdp(tmp_path):
    """A CDP layer is armed, then the next layer's PDP on the fly (downstream first), before
    its SDP: CDP runs first, the flying PDP is no layer of its own (it used to be taken for an
    offline PDP layer); once SDP is armed the layer is SDP_RDMA + SDP + PDP, without PDP_RDMA,
    and both outputs are the reference's."""
    t = build([Cdp(3, 3, 8), Sdp(5, 4, 8, bs=Stage(alu="max", alu_operand=2),
                                 pool=_pool("average", (2, 2), (1, 1)))], "armed", seed=11)
    rc = RunControl(open_device("nvdla"))
    dev = rc.device
    ctx = CommandContext(targets=[rc])
    writes = [s for s in load_trace(t.write(tmp_path), dev).steps if isinstance(s, Write)]
    pdp_on = dev.description.slot_address("PDP_D_OP_ENABLE")
    k = next(i for i, s in enumerate(writes) if s.address == pdp_on)
    for s in writes[:k + 1]:  # the CDP layer, then the next layer's registers and PDP armed
        dev.write(s.address, s.data)
    assert dev.armed("PDP") and dev.armed("CDP") and not dev.armed("SDP")
    assert dev.ready().kind == "cdp"
    assert rc.step().reason != "fault"
    (cdp_at, cdp_out), (pool_at, pool_out) = t.outputs
    assert dev.read(cdp_at, len(cdp_out)) == cdp_out
    assert dev.ready() is None  # the flying PDP waits for SDP
    assert execute(ctx, "nvdla layer").endswith(
        "; PDP G0 is armed on the fly (PDP_D_OPERATION_MODE_CFG.flying_mode ON_FLYING) and "
        "waits for SDP armed with SDP_D_FEATURE_MODE_CFG.output_dst PDP")
    for s in writes[k + 1:]:
        dev.write(s.address, s.data)
    layer = dev.ready()
    assert layer.kind == "sdp" and {u for u, _ in layer.units} == {"SDP_RDMA", "SDP", "PDP"}
    assert rc.step().reason != "fault"
    assert dev.read(pool_at, len(pool_out)) == pool_out
    assert dev.consumer_group("PDP_RDMA") == 0 and dev.consumer_group("PDP") == 1


def test_sdp_sending_to_a_pdp_armed_offline_waits_for_it(tmp_path):
    """SDP armed with output_dst PDP while PDP's consumer group is an offline PDP layer: that
    layer runs first (it was armed first), and SDP's layer waits for PDP's next group, which
    the idle message names."""
    t = build([Sdp(4, 4, 8, pool=_pool("max"))], "offline", seed=2)
    rc = RunControl(open_device("nvdla"))
    dev = rc.device
    writes = [s for s in load_trace(t.write(tmp_path), dev).steps if isinstance(s, Write)]
    pdp_on = dev.description.slot_address("PDP_D_OP_ENABLE")
    mode = dev.description.slot_address("PDP_D_OPERATION_MODE_CFG")
    for s in writes:  # the PDP never armed: SDP's layer cannot start
        if s.address != pdp_on:
            dev.write(s.address, s.data)
    assert dev.ready() is None
    assert dev.idle_message().endswith(
        "; SDP G0 sends its output to PDP (SDP_D_FEATURE_MODE_CFG.output_dst PDP) and waits "
        "for PDP armed with PDP_D_OPERATION_MODE_CFG.flying_mode ON_FLYING")
    dev.write(mode, (1 << 4 | 1).to_bytes(4, "little"))  # OFF_FLYING, max
    dev.write(pdp_on, (1).to_bytes(4, "little"))
    assert dev.ready().kind == "pdp"  # PDP's group holds an offline layer: it goes first
