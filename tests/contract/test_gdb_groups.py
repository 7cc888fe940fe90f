"""Every register group of every device, as real gdb-multiarch reaches it: ``info registers
GROUP`` must list exactly that group's registers. gdb takes the first group whose name starts with
what was typed (its registers_info), so a group whose name begins another's (nvdla's sdp and
sdp_rdma) must come first in target.xml (stub/target_xml.group_order). Skips without gdb locally;
in CI (CI=true) a missing gdb fails (tests/helpers.require_gdb)."""
from __future__ import annotations

import re

import pytest

from accelstub.devices import DEVICES, open_device
from accelstub.stub.server import StubServer
from accelstub.stub.target_xml import group_order, target_xml
from tests.helpers import require_gdb, run_gdb

from .toy_device import Toy

FACTORIES = {name: (lambda name=name: open_device(name)) for name in DEVICES} | {"toy": Toy}


def _groups(xml: str) -> dict[str, set[str]]:
    """group -> register names, as target.xml tells gdb (the core feature's general group
    aside: gdb's own group, which it fills with more than the core registers)."""
    groups: dict[str, set[str]] = {}
    for name, group in re.findall(r'<reg name="([^"]+)"[^>]* group="([^"]+)"', xml):
        if group != "general":
            groups.setdefault(group, set()).add(name)
    return groups


def test_group_order_puts_an_exact_name_before_the_names_it_begins():
    assert group_order(["glb", "sdp_rdma", "sdp", "pdp_rdma", "pdp", "emu"]) == \
        ["glb", "sdp", "sdp_rdma", "pdp", "pdp_rdma", "emu"]
    assert group_order(["npu_base", "npu_base_pointers"]) == ["npu_base", "npu_base_pointers"]


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_info_registers_group_shows_that_group(name):
    require_gdb()
    dev = FACTORIES[name]()
    groups = _groups(target_xml(dev.description))
    assert groups
    server = StubServer([dev], gdb_port=0, telnet_port=None, tcl_port=None)
    server.start()
    try:
        commands = []
        for g in groups:
            commands += [f"echo @@{g}\\n", f"info registers {g}"]
        out = run_gdb(commands + ["echo @@end\\n"], server.gdb[0].port, timeout=300)
    finally:
        server.stop()
    shown = dict(re.findall(r"^@@(\S+)\n(.*?)(?=^@@)", out, re.S | re.M))
    assert set(shown) == set(groups), out[-2000:]
    for g, names in groups.items():
        listed = {line.split()[0] for line in shown[g].splitlines() if line.strip()}
        assert listed == names, (f"info registers {g}: missing {sorted(names - listed)[:5]}, "
                                 f"foreign {sorted(listed - names)[:5]}")
