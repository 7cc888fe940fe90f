"""The Ethos-U85 model by concern (issue 33 #3): the parts talk through the members they
declare. An operation runs against a memory port alone (ops.MemoryPort, memport.NpuPort), with
no model; the port offers every member the protocol declares and nothing probes it for
optional ones; the operation parts never import the model's parts (decode -> operation table ->
execute, the accounting apart), so an executor of the command stream can sit beside them."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np

from accelstub.devices.device import Touched, UnitContext
from accelstub.devices.ethos_u85 import ops
from accelstub.devices.ethos_u85 import stream as es
from accelstub.devices.ethos_u85.accounting import UnitAccount
from accelstub.devices.ethos_u85.memport import NpuPort
from tests.ethos_u85.test_ethosu85_device import BUF, STOP, Host
from tests.ethos_u85.test_ethosu85_fastpath import conv_program, fresh

PACKAGE = Path(ops.__file__).resolve().parent
#: the operation side (ops.py and the modules it is made of)
OPERATION_PARTS = ("setstate", "operands", "weightscale", "output", "kept", "op_conv",
                   "op_pool", "op_eltwise", "op_resize", "ops")
#: the model side (model.py and the parts it is composed of)
MODEL_PARTS = ("model", "memport", "cmdstream", "dma", "accounting", "blocks", "listing")


def imported_siblings(module: str) -> set[str]:
    """The modules of the ethos_u85 package that ``module`` imports (``from .x import``,
    ``from . import x``), at run time or for types."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module)
            else:
                out |= {a.name for a in node.names}
    return out


def test_an_operation_runs_against_the_memory_port_alone():
    """NPU_OP_CONV through ops.run_operation over a new NpuPort on the device's bus and
    registers (no model): the same OFM bytes, writes and MAC count as the device's unit."""
    d = fresh()
    rng = np.random.default_rng(7)
    cmds = conv_program(d, rng, "nhcwb16", "nhwc", "HWC", (5, 4, 20), 18)
    before = d.read(BUF, 0x8000)
    Host(d).start(es.encode_stream(cmds + STOP))
    unit = d.execute_unit(UnitContext())
    want = d.read(BUF, 0x8000)
    assert want != before and d.stats["kernel_operations"] == 1

    d.write(BUF, before)
    state = ops.SetState()
    (op,) = [c for c in es.decode(es.to_bytes(es.encode_stream(cmds))) if c.is_operation]
    for c in es.decode(es.to_bytes(es.encode_stream(cmds[:-1]))):
        state.set(c)
    port = NpuPort(d.bus, d.regs)
    port.account = UnitAccount(Touched())
    result = ops.run_operation(op, state, port, d.cfg)
    assert d.read(BUF, 0x8000) == want
    assert port.account.touched.writes == unit.writes
    assert result.macs == d.stats["macs"]


def test_the_port_offers_every_member_the_protocol_declares():
    """Every attribute and method of ops.MemoryPort is on NpuPort (methods with the same
    parameters), so an operation never has to ask whether the port has one."""
    d = fresh()
    port = NpuPort(d.bus, d.regs)
    declared = dict(vars(ops.MemoryPort).get("__annotations__", {}))
    methods = {n: v for n, v in vars(ops.MemoryPort).items()
               if callable(v) and not n.startswith("_")}
    assert {"lut", "npu", "kept_runs", "trace"} <= set(declared)
    assert {"gather", "scatter", "gather_boxes", "scatter_boxes", "box_access", "record",
            "placement", "set_result_flag"} <= set(methods)
    for name in declared:
        assert hasattr(port, name), name
    for name, fn in methods.items():
        want = list(inspect.signature(fn).parameters)[1:]  # (without self)
        assert list(inspect.signature(getattr(port, name)).parameters) == want, name


def test_no_part_probes_for_optional_members():
    """No getattr / hasattr in the model's or the operations' parts: what a part needs of
    another is declared (ops.MemoryPort, blocks.BlockHost) and always there."""
    for module in OPERATION_PARTS + MODEL_PARTS:
        tree = ast.parse((PACKAGE / f"{module}.py").read_text())
        probes = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
                  and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr")]
        assert not probes, (module, probes)


def test_the_operation_parts_do_not_import_the_model_parts():
    """Data flows one way: the operations know the port only as the protocol they declare,
    and the accounting knows neither side (an executor can feed it a unit's accesses)."""
    for module in OPERATION_PARTS:
        assert not imported_siblings(module) & set(MODEL_PARTS), module
    assert not imported_siblings("accounting") & set(OPERATION_PARTS + MODEL_PARTS)
    for module in MODEL_PARTS:
        if module not in ("model", "listing"):  # (listing: the model's type, for annotations)
            assert "model" not in imported_siblings(module), module
