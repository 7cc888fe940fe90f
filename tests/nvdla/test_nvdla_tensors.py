"""NVDLA unit tensors (Device.unit_tensors): each hardware layer's input and output cube, read
through devices/tensors.read_tensor as C, H, W, against the independent integer reference
(testkit/nvdla_reference.py) that computed the traces' expected outputs (testkit/nvdla_build.py):
the expected bytes are unpacked with the reference's own feature format, the shapes come from
the layers the test describes, not from the device."""
from __future__ import annotations

import numpy as np
import pytest

from accelstub.devices import DeviceError, open_device
from accelstub.devices.tensors import read_tensor, write_tensor
from accelstub.stub.commands import CommandContext
from accelstub.stub.program import load_program
from accelstub.testkit import nvdla_reference as ref
from accelstub.testkit.nvdla_build import DEMO, Cdp, Conv, Pdp, Pixel, Sdp, Stage, build
from tests.helpers import ROOT, control, step

CASES = {
    "demo": DEMO,
    "conv_then_sdp_then_conv": [Conv(8, 8, 16, 16, clip=4, cvt=(0, 1, 3)),
                                Sdp(chain=True, bs=Stage(alu="sum", alu_operand=3, mul=True,
                                                         mul_operand=5, mul_shift=2)),
                                Conv(6, 5, 13, 21, r=2, s=3, pad=(0, 1, 2, 0), clip=5)],
    "sdp_offline": [Sdp(7, 3, 19, bs=Stage(alu="max", alu_shift=1, mem="kernel"))],
    "pdp_cdp": [Pdp(9, 7, 11, "max", (3, 2), (2, 1), (1, 0, 1, 1)),
                Cdp(5, 4, 21, normalz=2, datin=(3, 2, 1), datout=(-40, 3, 6))],
    "conv_reuse": [Conv(8, 6, 12, 10, clip=3, cvt=(0, 1, 2), keep=(True, True)),
                   Conv(8, 6, 12, 10, clip=4, cvt=(0, 1, 1), reuse=(True, True))],
    "image": [Conv(6, 5, 4, 8, pixel=Pixel("A8B8G8R8"), clip=2)],
}


def out_shape(layer, prev: tuple[int, int, int] | None) -> tuple[int, int, int]:
    if isinstance(layer, Conv):
        return (layer.k, *layer.out_hw)
    if isinstance(layer, Pdp):
        return (layer.c, *layer.out_hw)
    if isinstance(layer, Sdp) and layer.chain:
        return prev
    return (layer.c, layer.h, layer.w)


def expected(trace, k: int, shape: tuple[int, int, int]) -> np.ndarray:
    """Layer k's output by the reference, as the builder packed it (line = W*8, surface =
    H*line)."""
    c, h, w = shape
    return ref.unpack_feature(trace.outputs[k][1], c, h, w, w * 8, w * 8 * h)


def loaded(tmp_path, name: str, layers, seed: int = 3):
    """(device, trace): the trace written by the builder (the demo: the bundled directory,
    which the builder writes from DEMO with [U85-TRM]) and loaded as `accelstub` loads it."""
    if name == "demo":
        trace = build(DEMO, "nvdla_demo", 1)
        path = ROOT / "configs" / "demo" / "nvdla_demo"
        assert (path / "nvdla_demo.cfg").read_text() == "\n".join(trace.cfg) + "\n"
    else:
        trace = build(layers, name, seed)
        path = trace.write(tmp_path / name)
    dev = open_device("nvdla")
    load_program(CommandContext([control(dev)]), path)
    return dev, trace


@pytest.mark.parametrize("name", CASES)
def test_each_layers_cubes_equal_the_reference(tmp_path, name):
    layers = CASES[name]
    dev, trace = loaded(tmp_path, name, layers)
    assert len(dev.units()) == len(layers)
    planned = [dev.unit_tensors(k) for k in range(len(layers))]  # before anything ran
    prev = None
    for k, layer in enumerate(layers):
        specs = {s.name: s for s in dev.unit_tensors(k)}
        assert tuple(specs.values()) == planned[k]  # the plan is what the layer arms
        shape = out_shape(layer, prev)
        if isinstance(layer, Conv) and (layer.pixel is not None or layer.reuse[0]):
            assert "input" not in specs  # image input / kept in the buffer: left out
        else:
            x = read_tensor(specs["input"], dev.read)
            if isinstance(layer, Sdp) and layer.chain:
                assert np.array_equal(x, expected(trace, k - 1, prev))
            else:
                c, h, w = layer.c, layer.h, layer.w
                want = ref.unpack_feature(trace.files[f"{trace.name}_l{k}_in.dat"], c, h, w,
                                          w * 8, w * 8 * h)
                assert np.array_equal(x, want)
        step(dev)
        out = specs["output"]
        assert out.layout == "CHW" and out.shape == shape and out.dtype == "int8"
        assert np.array_equal(read_tensor(out, dev.read), expected(trace, k, shape))
        assert dev.unit_tensors(k) == planned[k]  # as run
        prev = shape
    for k in (len(layers), -1):
        with pytest.raises(DeviceError, match=f"no layer {k}: the program has layers "):
            dev.unit_tensors(k)


def test_write_input_then_step_gives_that_inputs_pooling(tmp_path):
    """write_tensor on an armed layer's input: the layer then pools the new cube (the
    reference's max pooling of it)."""
    a = Pdp(6, 6, 8, "max", (2, 2), (2, 2))
    b = Pdp(9, 7, 11, "max", (3, 2), (2, 1), (1, 0, 1, 1))
    dev, _ = loaded(tmp_path, "pdp_write", [a, b])
    step(dev)
    assert dev.ready() is not None  # layer 1 armed: the driver has loaded its input
    spec_in, spec_out = dev.unit_tensors(1)
    new = np.random.default_rng(5).integers(-128, 128, (b.c, b.h, b.w)).astype(np.int8)
    write_tensor(spec_in, new, dev.write)
    step(dev)
    want = ref.pool(new, "max", b.kernel, b.stride, b.pad, [], (0, 0), b.out_hw)
    assert np.array_equal(read_tensor(spec_out, dev.read), want)


def test_no_program_declares_nothing():
    dev = open_device("nvdla")
    assert dev.units() == []
    with pytest.raises(DeviceError, match=f"no {dev.unit_name} 0: the program has no "):
        dev.unit_tensors(0)
