"""Ethos-U85 unit tensors (Device.unit_tensors) against LiteRT, an independent reference.

Each program is one of the project's models compiled by Vela (testkit/ethosu85_models.py) or the
bundled demo; the answer is LiteRT's interpreter with its reference kernels (BUILTIN_REF) keeping
every intermediate tensor. After each NPU command runs, the OFM it declares, read through
devices/tensors.read_tensor in TFLite's (1, H, W, C) layout, must equal LiteRT's output of the
TFLite operator the command implements. Vela lowers CONV_2D to NPU_OP_CONV, DEPTHWISE_CONV_2D to
NPU_OP_DEPTHWISE, MAX/AVERAGE_POOL_2D to NPU_OP_POOL and ADD to an elementwise add; an operator
whose command chains its OFM into the next command (no memory) is not compared. Vela may
reorder independent branches (a residual's shortcut first), so an operator is matched to the one
command of its kind whose declared OFM holds its values, each command to one operator.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from accelstub.devices import DeviceError, open_device
from accelstub.devices.ethos_u85.vela import load_vela_program, read_output
from accelstub.devices.tensors import read_tensor, write_tensor
from accelstub.testkit.ethosu85_models import (
    build,
    compile_with_vela,
    litert_reference,
    sample_inputs,
)
from accelstub.testkit.ethosu85_networks import build_network
from tests.ethos_u85.test_ethosu85_vela import needs_litert, needs_vela
from tests.helpers import ROOT, run, step

DEMO = ROOT / "configs" / "demo" / "ethos-u85_demo"

#: TFLite operator -> (NPU command, elementwise mode for NPU_OP_ELEMENTWISE)
ONE_TO_ONE = {"CONV_2D": ("NPU_OP_CONV", None), "DEPTHWISE_CONV_2D": ("NPU_OP_DEPTHWISE", None),
              "MAX_POOL_2D": ("NPU_OP_POOL", None), "AVERAGE_POOL_2D": ("NPU_OP_POOL", None),
              "ADD": ("NPU_OP_ELEMENTWISE", "add")}


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    """name -> (source .tflite, Vela's .tflite); "demo" is the bundled demo."""
    root = tmp_path_factory.mktemp("ethosu85_tensors")

    def get(name: str) -> tuple[Path, Path]:
        if name == "demo":
            return DEMO / "demo.tflite", DEMO / "demo_vela.tflite"
        src = root / f"{name}.tflite"
        if not src.exists():
            src.write_bytes(build(name))
        out = root / "out" / f"{name}_vela.tflite"
        return src, out if out.exists() else compile_with_vela(src, root / "out")
    return get


def litert_all(src: Path, xs: list[np.ndarray]):
    """(operators as (name, output tensor index), every tensor by index, the outputs)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_path=str(src), experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                     experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), xs):
        it.set_tensor(d["index"], x)
    it.invoke()
    ops = [(o["op_name"], int(o["outputs"][0])) for o in it._get_ops_details()]
    tensors = {t["index"]: it.get_tensor(t["index"]) for t in it.get_tensor_details()
               if t["index"] in {i for _, i in ops}}
    return ops, tensors, [it.get_tensor(d["index"]) for d in it.get_output_details()]


def _kind(summary: str) -> tuple[str, str | None]:
    """(NPU command, elementwise mode) of a listing line ("ELEMENTWISE elementwise_mode=add,
    ...")."""
    head = summary.split(",")[0].split()
    mode = next((w.split("=")[1] for w in head[1:] if w.startswith("elementwise_mode=")), None)
    return "NPU_OP_" + head[0], mode


def run_collecting(dev) -> dict[int, dict[str, np.ndarray]]:
    """Step every command; per kernel command its declared tensors (inputs read before it
    runs, the output after)."""
    seen: dict[int, dict[str, np.ndarray]] = {}
    for k in range(len(dev.units())):
        specs = dev.unit_tensors(k)
        got = {s.name: read_tensor(s, dev.read) for s in specs if s.name != "output"}
        step(dev)
        got.update({s.name: read_tensor(s, dev.read) for s in specs if s.name == "output"})
        if specs:
            seen[k] = got
    return seen


def check_against_litert(src: Path, out: Path, dev) -> int:
    """Step the program in ``dev`` and compare (module docstring); the number of operators
    compared."""
    xs = sample_inputs(src.read_bytes())
    ops, tensors, outputs = litert_all(src, xs)
    prog = load_vela_program(dev, out, xs)
    units = dev.units()
    seen = run_collecting(dev)
    kernels = list(seen)
    first = seen[kernels[0]]["input"]  # the first operation reads the model's input
    assert np.array_equal(first, xs[0].reshape(first.shape))
    used: set[int] = set()
    missed: dict[tuple, int] = {}
    for op_name, t in ops:
        if op_name not in ONE_TO_ONE:
            continue
        want = tensors[t].reshape(1, *tensors[t].shape[-3:]) if tensors[t].ndim >= 3 else None
        hits = [k for k in kernels if _kind(units[k].summary) == ONE_TO_ONE[op_name]
                and "output" in seen[k] and want is not None
                and seen[k]["output"].dtype == want.dtype
                and np.array_equal(seen[k]["output"], want)]
        if hits:
            assert not used & set(hits), f"{op_name}: units {hits} already matched"
            used.add(hits[0])
        else:
            missed[ONE_TO_ONE[op_name]] = missed.get(ONE_TO_ONE[op_name], 0) + 1
    # an operator without its OFM in memory is one whose command chains it (no output declared)
    for kind, n in missed.items():
        chained = [k for k in kernels
                   if _kind(units[k].summary) == kind and "output" not in seen[k]]
        assert n <= len(chained), f"{n} {kind} operators match no declared OFM: {missed}"
    last = seen[kernels[-1]]["output"]
    assert np.array_equal(last.ravel(), outputs[0].ravel())
    assert np.array_equal(last.ravel(), read_output(dev, prog).ravel())
    return len(used)


MODELS = ["demo", "conv", "conv_2ch", "depthwise", "max_pool", "avg_pool", "add", "add_int16",
          "max_pool_int16", "small_cnn"]


@needs_vela
@needs_litert
@pytest.mark.parametrize("name", MODELS)
def test_ofm_of_each_operation_equals_litert(program, name):
    src, out = program(name)
    compared = check_against_litert(src, out, open_device("ethos-u85"))
    assert compared >= (5 if name in ("demo", "small_cnn") else 1)


@needs_vela
@needs_litert
@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet8", "mobilenet_v1_025"])
def test_whole_network_ofms_equal_litert(tmp_path, name):
    """Whole networks (testkit/ethosu85_networks.py): Vela reorders independent branches (a
    residual's shortcut), so operators are matched to commands by kind and value, each to its
    own command; NHCWB16 tensors of more than 16 channels."""
    src = tmp_path / f"{name}.tflite"
    src.write_bytes(build_network(name))
    out = compile_with_vela(src, tmp_path / "out")
    assert check_against_litert(src, out, open_device("ethos-u85")) >= 8


@needs_vela
@needs_litert
def test_add_declares_both_operands(program):
    src, out = program("add")
    xs = sample_inputs(src.read_bytes())
    dev = open_device("ethos-u85")
    load_vela_program(dev, out, xs)
    seen = run_collecting(dev)
    (got,) = seen.values()
    assert {"input", "input2", "output"} == set(got)
    pair = [got["input"].tobytes(), got["input2"].tobytes()]
    assert sorted(pair) == sorted(x.tobytes() for x in xs)


@needs_vela
@needs_litert
@pytest.mark.parametrize("name", ["demo", "depthwise"])
def test_write_input_then_run_gives_that_inputs_output(program, name):
    """write_tensor on the first operation's IFM replaces the model input: the program's
    output is then LiteRT's answer for the new input."""
    src, out = program(name)
    dev = open_device("ethos-u85")
    prog = load_vela_program(dev, out, sample_inputs(src.read_bytes()))
    first = next(k for k in range(len(dev.units())) if dev.unit_tensors(k))
    spec = next(s for s in dev.unit_tensors(first) if s.name == "input")
    new = sample_inputs(src.read_bytes(), seed=99)
    write_tensor(spec, new[0].reshape(spec.shape), dev.write)
    assert np.array_equal(read_tensor(spec, dev.read).ravel(), new[0].ravel())
    run(dev)
    want = litert_reference(src, new)
    assert np.array_equal(read_output(dev, prog).ravel(), want[0].ravel())


@needs_vela
def test_non_kernel_commands_declare_nothing(program):
    """DMA, waits and STOP declare no tensor; an index outside the program is refused."""
    _, out = program("demo")
    dev = open_device("ethos-u85")
    load_vela_program(dev, out, None)
    units = dev.units()
    for k, u in enumerate(units):
        kind = _kind(u.summary)[0]
        if kind in ("NPU_OP_DMA_START", "NPU_OP_DMA_WAIT", "NPU_OP_KERNEL_WAIT", "NPU_OP_STOP"):
            assert dev.unit_tensors(k) == ()
    for k in (len(units), -1):
        with pytest.raises(DeviceError, match=f"no command {k}: the program has commands "
                           f"0..{len(units) - 1}"):
            dev.unit_tensors(k)


def test_no_program_declares_nothing():
    dev = open_device("ethos-u85")
    assert dev.units() == []
    with pytest.raises(DeviceError, match=f"no {dev.unit_name} 0: the program has no "):
        dev.unit_tensors(0)


def _seed_address(t, y: int, x: int, c: int) -> int:
    """element_address_in_region [U85-TRM: §3.6.5], written out per element: tile2x2 picks the
    right tiles at x >= width0, then the lower tiles at y >= height of that column."""
    tile = 0
    if x >= t.width0:
        x, tile = x - t.width0, 1
    h = t.heights[1] if tile == 1 else t.heights[0]
    if y >= h:
        y, tile = y - h, tile + 2
    a = t.bases[tile] + y * t.stride_y
    if t.fmt == 0:
        return a + x * t.stride_x + c * t.size
    return a + (c // 16) * t.stride_c + (16 * x + c % 16) * t.size


@pytest.mark.parametrize("fmt,bases,heights", [
    (0, (0x000, 0x400, 0x800, 0xC00), (3, 3)),    # 2x2 split, tiles line up
    (1, (0x000, 0x600, 0x1000, 0x1600), (2, 2)),  # NHCWB16, 2x2 split
    (0, (0x000, 0x400, 0x800, 0x900), (3, 3)),    # BASE3 - BASE2 != BASE1 - BASE0
    (0, (0x000, 0x400, 0x800, 0xC00), (3, 4)),    # HEIGHT0 != HEIGHT1
])
def test_tiled_tensor_is_declared_where_it_is_a_sum_of_axis_offsets(fmt, bases, heights):
    """Tiles (HEIGHT0/WIDTH0 splits): the declaration holds every element's address as the
    TRM places it, or the tensor is left out where no row + column + channel sum can."""
    from accelstub.devices.ethos_u85 import ops
    from accelstub.devices.ethos_u85.listing import nhwc_spec

    H, W, C = 6, 5, 20
    t = ops.Tensor("OFM", 2, bases, 20 * 2 if fmt == 0 else 0, 0x80, 0x100 if fmt else 0,
                   3, heights, 16, True, fmt, 0)
    spec = nhwc_spec("output", t, ops.addresses(t, (H, W, C)), 0x2000_0000)
    want = np.array([[[0x2000_0000 + _seed_address(t, y, x, c) for y in range(H)]
                      for x in range(W)] for c in range(C)]).transpose(0, 2, 1)
    lines_up = heights[0] == heights[1] and bases[3] - bases[2] == bases[1] - bases[0]
    if lines_up:
        assert spec is not None and spec.shape == (1, H, W, C) and spec.dtype == "int16"
        assert np.array_equal(spec.addresses(), want)
    else:
        assert spec is None
