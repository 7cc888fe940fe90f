"""NVDLA traces that mix every unit in varying orders: each unit alternates its own register
groups, and a layer is made of the units its own registers name.

A trace of a convolution whose SDP read an operand through SDP_RDMA, an offline SDP layer, a
PDP, a CDP and then an image convolution failed with "the driver waits for interrupt SDP_0, but
the nvdla has no layer to run": the model decided whether SDP_RDMA belongs to a flying SDP layer
from SDP_RDMA's D_*RDMA_CFG in SDP_RDMA's consumer group -- a group the driver does not program
or arm for a layer that reads nothing from memory, so it still held the first convolution's
configuration. SDP's own registers decide ([EXT] NV_NVDLA_SDP_core.v; devices/nvdla/sdp.py
reads_rdma). The traces come from the project's builder (testkit/nvdla_build.py) and each
layer's output is checked by CRC against the independent reference.
"""
from __future__ import annotations

import itertools
from collections import Counter

import pytest

from accelstub.devices import open_device
from accelstub.devices.nvdla import sdp as S
from accelstub.devices.nvdla.model import CONV_UNITS, UNITS
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.commands import CommandContext
from accelstub.stub.program import load_program, run_to_end
from accelstub.testkit.nvdla_build import Cdp, Conv, Pdp, Pixel, Sdp, Stage, build

#: one layer of each kind, and the units that run it (hardware rule, not the builder's code):
#: a flying convolution is CDMA..CACC + SDP (+ SDP_RDMA only when SDP reads an operand from
#: memory), an offline SDP layer SDP + SDP_RDMA, PDP and CDP each with their own RDMA
KINDS = {
    "conv": (Conv(5, 4, 8, 8, clip=3, cvt=(0, 1, 2),
                  bn=Stage(mul=True, mul_shift=4, mem="kernel")),
             CONV_UNITS + ("SDP", "SDP_RDMA")),
    "sdp": (Sdp(4, 3, 9, bs=Stage(alu="max", alu_shift=1, mem="kernel")), ("SDP", "SDP_RDMA")),
    "pdp": (Pdp(6, 5, 8, "max", (2, 2), (2, 2)), ("PDP", "PDP_RDMA")),
    "cdp": (Cdp(3, 3, 8), ("CDP", "CDP_RDMA")),
    "image": (Conv(6, 4, 4, 8, r=3, s=2, pad=(1, 1, 0, 0), clip=2, cvt=(0, 1, 1),
                   pixel=Pixel("A8B8G8R8", x_offset=1), bs=Stage(alu="sum", alu_operand=3)),
              CONV_UNITS + ("SDP",)),
}
#: the unit whose done interrupt the driver waits for, per kind
LAST = {"conv": "SDP", "sdp": "SDP", "pdp": "PDP", "cdp": "CDP", "image": "SDP"}


def _run_and_check(kinds: list[str], tmp_path, name: str) -> None:
    """Build and run a trace of ``kinds`` in order; every CRC check passes, no group is left
    armed, every unit's CONSUMER moved once per layer it ran, and the done interrupts came
    from the group each layer used (0, 1, 0, ... per unit)."""
    rc = RunControl(open_device("nvdla"))
    dev = rc.device
    trace = build([KINDS[k][0] for k in kinds], name, seed=7).write(tmp_path / name)
    load_program(CommandContext(targets=[rc]), trace)
    stop = run_to_end(rc)
    crc = [ln for ln in stop.lines if ln.startswith("check_crc")]
    assert stop.code == 0 and len(crc) == len(kinds), stop.lines
    assert all(": PASS" in ln for ln in crc), stop.lines
    assert dev.units_done == len(kinds)

    runs = Counter(u for k in kinds for u in KINDS[k][1])
    status = {u: int.from_bytes(dev.read(dev.description.register(f"{u}_S_STATUS").address, 4),
                                "little") for u in UNITS}
    assert status == dict.fromkeys(UNITS, 0)  # IDLE in both groups: every armed group ran
    assert {u: dev.consumer_group(u) for u in UNITS} == {u: runs[u] % 2 for u in UNITS}

    done = Counter(LAST[k] for k in kinds)
    want = {f"{u}_{g}": (done[u] + 1 - g) // 2 for u in ("SDP", "PDP", "CDP") for g in (0, 1)}
    counts = dev.interrupt_counts()
    assert {k: counts[k] for k in want} == want


def test_the_reported_sequence_runs_in_one_trace(tmp_path):
    """conv (SDP operand through SDP_RDMA), SDP, PDP, CDP, image conv: the image conv's SDP runs
    in group 0 without SDP_RDMA, whose group 0 still holds the first layer's NRDMA setup."""
    _run_and_check(["conv", "sdp", "pdp", "cdp", "image"], tmp_path, "reported")


def test_smallest_failing_trace(tmp_path):
    """Three layers: SDP_RDMA's group 0 configured with NRDMA on (conv), its group 1 used
    (offline SDP), then a convolution whose SDP reads nothing from memory."""
    layers = [Conv(4, 4, 8, 8, bn=Stage(mul=True, mem="kernel")), Sdp(4, 4, 8), Conv(4, 4, 8, 8)]
    rc = RunControl(open_device("nvdla"))
    load_program(CommandContext(targets=[rc]), build(layers, "small", seed=1)
                 .write(tmp_path / "small"))
    stop = run_to_end(rc)
    assert stop.code == 0 and sum(": PASS" in ln for ln in stop.lines) == 3, stop.lines


@pytest.mark.parametrize("order", list(itertools.permutations(KINDS)),
                         ids=lambda order: "-".join(order))
def test_every_order_of_the_units_runs_twice_over(order, tmp_path):
    """Every order of the five layer kinds, run twice in a row in one trace: every unit runs in
    both of its groups and meets the registers the first pass left in the other group."""
    _run_and_check(list(order) * 2, tmp_path, "order")


def test_builder_refuses_memory_operands_no_stage_reads():
    """A BS stage with operands in memory but neither ALU nor MUL on: SDP would not read them
    (reads_rdma), so the driver must not arm SDP_RDMA for them; the builder says why."""
    with pytest.raises(ValueError, match=r"^BS stage: operands from memory \(kernel\) need its "
                                         r"ALU or MUL$"):
        build([Sdp(4, 4, 8, bs=Stage(mem="kernel"))], "refused")


def _write(dev, name: str, **fields: int) -> None:
    """A bus write of register ``name`` (``SDP_D_DP_BS_CFG``) in the producer group."""
    reg = dev.description.register(f"{name}_G0")
    dev.write(dev.description.slot_address(name),
              reg.definition.encode(**fields).to_bytes(4, "little"))


#: the D_DP_<X>_CFG fields that turn each X stage off (a case turns one stage's fields on)
_OFF = {x: {f"{x}_bypass": 1, f"{x}_alu_bypass": 1, f"{x}_mul_bypass": 1} for x in
        ("bs", "bn", "ew")}


@pytest.mark.parametrize("flying, stage, cfg, src, expected", [
    (0, None, {}, {}, True),  # offline: the input comes through SDP_RDMA
    (1, None, {}, {}, False),  # flying, every stage off
    (1, "bs", {"bs_bypass": 1, "bs_alu_bypass": 0}, {"alu": 1}, False),  # stage off
    (1, "bs", {"bs_bypass": 0, "bs_alu_bypass": 1, "bs_mul_bypass": 1}, {"alu": 1}, False),
    (1, "bs", {"bs_bypass": 0, "bs_alu_bypass": 0, "bs_mul_bypass": 1}, {"alu": 1}, True),
    (1, "bs", {"bs_bypass": 0, "bs_alu_bypass": 0, "bs_mul_bypass": 1}, {"alu": 0}, False),
    (1, "bn", {"bn_bypass": 0, "bn_alu_bypass": 1, "bn_mul_bypass": 0}, {"mul": 1}, True),
    (1, "bn", {"bn_bypass": 0, "bn_alu_bypass": 1, "bn_mul_bypass": 0}, {"alu": 1}, False),
    (1, "ew", {"ew_bypass": 0, "ew_alu_bypass": 1, "ew_mul_bypass": 0}, {"mul": 1}, True),
])
def test_sdps_own_registers_decide_whether_sdp_rdma_joins(flying, stage, cfg, src, expected):
    """reads_rdma from SDP's consumer group only: SDP_RDMA's group, programmed with BRDMA,
    NRDMA and ERDMA on (as an earlier layer or the kmd driver's unconditional writes leave it),
    changes nothing."""
    dev = open_device("nvdla")
    _write(dev, "SDP_RDMA_D_BRDMA_CFG")  # brdma_disable 0: on
    _write(dev, "SDP_RDMA_D_NRDMA_CFG")
    _write(dev, "SDP_RDMA_D_ERDMA_CFG")
    _write(dev, "SDP_D_FEATURE_MODE_CFG", flying_mode=flying)
    for x, off in _OFF.items():
        mine = x == stage
        _write(dev, f"SDP_D_DP_{x.upper()}_CFG", **({**off, **cfg} if mine else off))
        _write(dev, f"SDP_D_DP_{x.upper()}_ALU_CFG",
               **{f"{x}_alu_src": src.get("alu", 0) if mine else 0})
        _write(dev, f"SDP_D_DP_{x.upper()}_MUL_CFG",
               **{f"{x}_mul_src": src.get("mul", 0) if mine else 0})
    assert S.reads_rdma(dev.view) is expected
