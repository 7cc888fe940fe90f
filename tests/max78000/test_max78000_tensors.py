"""MAX78000 unit tensors (Device.unit_tensors, issue 26 #3): each layer's input(s) and output
declared in data SRAM, CHW as ai8x-training has them. Whole networks built by the project's
builder (testkit/max78000_build.py) are run layer by layer; every layer's output read through
its declaration equals the independent integer reference (testkit/max78000_reference.py, via
the builder's per-layer reference), the last one also sampleoutput.h's known answer, and an
input written through its declaration, then stepped, gives the reference for that input."""
from __future__ import annotations

import numpy as np
import pytest

from accelstub.devices import open_device
from accelstub.devices.errors import DeviceError
from accelstub.devices.max78000.ai8x import import_ai8x_project
from accelstub.devices.runcontrol import RunControl
from accelstub.devices.tensors import read_tensor, write_tensor
from accelstub.stub.cli import demo_program
from accelstub.stub.commands import CommandContext
from accelstub.stub.program import load_program
from accelstub.testkit.max78000_build import Layer, Network, build, build_demo, reference_outputs

NETS = {
    "pool-wide": Network(4, 9, 7, [Layer(8, activation="relu", shift=-2, bias=True),
                                   Layer(6, pool="max", pool_size=2, pool_stride=2, shift=-1),
                                   Layer(5, kernel=1, pad=0, pool="avg", pool_size=2,
                                         pool_stride=1, wide=True, bias=True)]),
    "conv1d": Network(70, 15, 1, [Layer(9, kernel=3, pad=1, shift=-4),
                                  Layer(6, op="conv1d", kernel=5, pad=2, shift=-2, bias=True,
                                        pool="max", pool_size=2, pool_stride=2)]),
    "multipass": Network(100, 5, 4, [Layer(70, shift=-5, activation="relu"),
                                     Layer(130, kernel=1, pad=0, shift=-4),
                                     Layer(10, kernel=1, pad=0, shift=-5, wide=True)]),
    "eltwise": Network(5, 6, 6, [Layer(5, op="passthrough", pad=0, operands=3, eltwise="sub",
                                       pool="max", pool_size=2, pool_stride=2),
                                 Layer(3, kernel=1, pad=0, shift=-5, wide=True)]),
    "eltwise-conv": Network(70, 5, 5, [Layer(6, operands=2, eltwise="add", shift=-4,
                                             bias=True, activation="relu"),
                                       Layer(3, kernel=1, pad=0, shift=-3)]),
    "chw": Network(3, 12, 10, [Layer(8, activation="relu", shift=-2, bias=True),
                               Layer(4, kernel=1, pad=0, shift=-1)], chw=True),
    "linear": Network(3, 8, 8, [Layer(12, shift=-3, activation="relu", pool="max"),
                                Layer(10, op="linear", kernel=1, pad=0, shift=-4, weight_bits=2,
                                      bias=True)]),
    "linear-flatten": Network(2, 6, 5, [Layer(7, op="linear", kernel=1, pad=0, shift=1,
                                              weight_bits=4, wide=True)]),
    "linear-multipass": Network(300, 1, 1, [Layer(20, op="linear", kernel=1, pad=0, shift=0,
                                                  weight_bits=2)]),
    "deconv-passthrough": Network(5, 4, 5, [Layer(6, op="deconv", pad=1, shift=-2, bias=True),
                                            Layer(6, op="passthrough", pad=0, pool="max",
                                                  pool_size=2, pool_stride=2),
                                            Layer(3, kernel=1, pad=0, shift=-3)]),
}


def _load(path) -> RunControl:
    rc = RunControl(open_device("max78000"))
    load_program(CommandContext(targets=[rc]), path)
    return rc


@pytest.fixture(params=["demo", *NETS])
def project(request, tmp_path):
    if request.param == "demo":
        return build_demo(), demo_program("max78000")
    net = NETS[request.param]
    proj = build(net, seed=len(request.param))
    return proj, proj.write(tmp_path / request.param)


def test_every_layer_output_equals_the_reference_and_the_last_the_known_answer(project):
    proj, path = project
    rc = _load(path)
    dev = rc.device
    n = len(proj.network.layers)
    assert len(dev.units()) == n
    specs = [dev.unit_tensors(k) for k in range(n)]
    for k in range(n):
        assert specs[k][-1].name == "output" and specs[k][-1].layout == "CHW"
        assert rc.step(60).reason in ("step", "done")
        out = read_tensor(specs[k][-1], dev.read)
        want = proj.outputs[k]
        assert out.dtype == np.dtype("int32" if proj.network.layers[k].wide else "int8")
        assert out.shape == want.shape, (k, out.shape, want.shape)
        np.testing.assert_array_equal(out, want, err_msg=f"layer {k}")
        assert dev.unit_tensors(k) == specs[k]  # the declaration does not depend on the state
    # sampleoutput.h as the importer reads it: (address, word, mask) of the last layer's
    # output; the tensor written into an empty image through its declaration gives those words
    image: dict[int, int] = {}

    def put(addr: int, data: bytes) -> None:
        image.update({addr + i: b for i, b in enumerate(data)})

    write_tensor(specs[-1][-1], proj.outputs[-1].astype(specs[-1][-1].dtype), put)
    known = import_ai8x_project(path).expected
    assert known
    for addr, value, mask in known:
        word = int.from_bytes(bytes(image.get(addr + i, 0) for i in range(4)), "little")
        assert word & mask == value & mask, hex(addr)


def _layer_reference(proj, k: int, x: np.ndarray) -> np.ndarray:
    """Layer k of the network alone, from input ``x`` (the reference's operand order)."""
    net = proj.network
    lay = net.layers[k]
    c = x.shape[0] // lay.operands
    single = Network(c, x.shape[1], x.shape[2], [lay], net.avg_pool_rounding)
    return reference_outputs(single, x, [proj.weights[k]], [proj.biases[k]])[0]


def test_a_layer_input_written_then_stepped_gives_the_reference(project):
    """For each layer k: run to it, write random input through its input declaration(s),
    step it, and its output is the reference layer's output for that input."""
    proj, path = project
    net = proj.network
    rng = np.random.default_rng(26)
    for k in range(len(net.layers)):
        rc = _load(path)
        dev = rc.device
        for _ in range(k):
            rc.step(60)
        specs = dev.unit_tensors(k)
        inputs = [s for s in specs if s.name.startswith("input")]
        lay = net.layers[k]
        assert [s.name for s in inputs] == ["input"] + [f"input{o + 1}"
                                                        for o in range(1, lay.operands)]
        # the channels this layer's reference has: the network input's, or the producer's
        c = net.in_channels if k == 0 else net.layers[k - 1].out_channels
        parts = []
        for s in inputs:
            x = rng.integers(-128, 128, s.shape, dtype=np.int64)
            write_tensor(s, x.astype(s.dtype), dev.write)
            assert np.array_equal(read_tensor(s, dev.read), x)
            h, w = proj.outputs[k - 1].shape[1:] if k else (net.in_rows, net.in_cols)
            if s.shape[1:] == (1, 1) and h * w > 1:  # flattened: PyTorch's c*H*W + pixel
                parts.append(x.reshape(c, h, w))
            else:
                assert s.shape[0] >= c and s.shape[1:] == (h, w)
                parts.append(x[:c])  # channels past c are unused slots of the last pass
        rc.step(60)
        got = read_tensor(specs[-1], dev.read)
        np.testing.assert_array_equal(got, _layer_reference(proj, k, np.concatenate(parts)),
                                      err_msg=f"layer {k}")


def test_inner_inputs_have_the_producers_channels_and_addresses(tmp_path):
    """Layer 1 of a 100 -> 70 -> 130 network reads 2 passes of 36 processors (72 channels);
    its input is the 70 channels layer 0 wrote, at the same addresses."""
    proj = build(NETS["multipass"], seed=1)
    rc = _load(proj.write(tmp_path / "net"))
    dev = rc.device
    out0 = dev.unit_tensors(0)[-1]
    in1 = dev.unit_tensors(1)[0]
    assert out0.shape == (70, 5, 4) and in1.shape == (70, 5, 4)
    assert (in1.channel, in1.row, in1.col) == (out0.channel, out0.row, out0.col)
    assert dev.unit_tensors(0)[0].shape == (104, 5, 4)  # 2 passes of 52: what the layer reads


def test_fifo_input_declares_only_an_output(tmp_path):
    net = Network(4, 5, 5, [Layer(6, shift=-3), Layer(3, kernel=1, pad=0, wide=True)])
    rc = _load(build(net, seed=2, fifo=True).write(tmp_path / "fifo"))
    assert [s.name for s in rc.device.unit_tensors(0)] == ["output"]
    assert [s.name for s in rc.device.unit_tensors(1)] == ["input", "output"]


def test_no_program_no_tensors_and_a_layer_out_of_range_is_named():
    dev = open_device("max78000")
    assert dev.unit_tensors(0) == ()  # layer 0 enables no processor: nothing to declare
    with pytest.raises(DeviceError, match=r"no layer 5: the program has layers 0\.\.0"):
        dev.unit_tensors(5)


@pytest.mark.parametrize("name", ["eltwise-conv", "linear", "multipass"])
def test_a_write_with_a_read_merges_runs_and_keeps_the_bytes_between(tmp_path, name):
    """write_tensor given the memory's read (Session.set_tensor, the dataset run's input)
    writes the elements as the per-run writes do, in one write per range of elements less
    than WRITE_MERGE_GAP bytes apart (a word per pixel with 3 of its 4 bytes used: 64 writes
    for an 8x8 input, 256 for the bundled demo's 16x16), and the bytes between the elements
    keep theirs."""
    from accelstub.devices.tensors import WRITE_MERGE_GAP

    net = NETS[name]
    path = build(net, seed=2).write(tmp_path / name)
    rng = np.random.default_rng(3)
    devs: list = []
    writes: list = []
    x = None
    for merged in (False, True):
        rc = RunControl(open_device("max78000"))
        load_program(CommandContext(targets=[rc]), path)
        dev = rc.device
        spec = next(s for s in dev.unit_tensors(0) if s.name == "input")
        spans = spec.ranges(WRITE_MERGE_GAP)
        noise = np.random.default_rng(1)
        for a, b in spans:  # every byte between the elements set, then kept
            dev.write(a, noise.integers(0, 256, b - a, dtype=np.uint8).tobytes())
        calls = []

        def write(addr: int, data: bytes, _dev=dev, _calls=calls) -> None:
            _calls.append((addr, len(data)))
            _dev.write(addr, data)
        if x is None:  # the same values into both devices
            x = rng.integers(-128, 128, spec.shape).astype(spec.dtype)
        write_tensor(spec, x, write, dev.read if merged else None)
        assert np.array_equal(read_tensor(spec, dev.read), x)
        devs.append([dev.read(a, b - a) for a, b in spans])
        writes.append(calls)
    assert devs[0] == devs[1]  # the same bytes, the gaps' noise included
    assert len(writes[0]) == len(spec.ranges())  # a write per run of touching elements
    assert len(writes[1]) == len(spans)  # eltwise-conv 450 -> 9, linear 64 -> 1, multipass 13
