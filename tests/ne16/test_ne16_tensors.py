"""NE16 unit tensors (Device.unit_tensors, issue 26 #3): each job's unpadded input and its output
in L1, HWC as pulp-nnx has them, from the job's registers (the driver's plan before the job is
queued). Checked against the pulp-nnx test application's own arrays and golden output (written
by testkit/ne16_build.py from a layer-level model) and against the independent per-job
reference (testkit/ne16_reference.py through tests/ne16/jobs.py)."""
from __future__ import annotations

import numpy as np
import pytest

from accelstub.devices import open_device
from accelstub.devices.errors import DeviceError
from accelstub.devices.ne16.job import JOB_REGISTERS
from accelstub.devices.runcontrol import RunControl
from accelstub.devices.tensors import read_tensor, write_tensor
from accelstub.stub.commands import CommandContext
from accelstub.stub.program import load_program
from accelstub.testkit.ne16_build import DEMO, Layer, build

from .jobs import APP_LAYERS, L1, L1_SIZE, Image, random_job, reference, submit

LAYERS = [DEMO, *APP_LAYERS,
          Layer(6, 6, 16, 32, padding=(2, 0, 2, 1), out_type="uint8", relu=True,
                name="pad_uneven")]


def _app(tmp_path, layer: Layer):
    app = build(layer, seed=11)
    rc = RunControl(open_device("ne16"))
    load_program(CommandContext(targets=[rc]), app.write(tmp_path / layer.name))
    return app, rc


def _index(spec, base: int, itemsize: int) -> np.ndarray:
    """Each element's index in the C array at ``base``, in the tensor's layout (H, W, C)."""
    off = spec.addresses() - base
    assert (off % itemsize == 0).all()
    return spec.to_layout(off // itemsize)


@pytest.mark.parametrize("layer", LAYERS, ids=lambda lay: lay.name)
def test_every_job_declares_its_part_of_the_apps_input_and_golden_output(tmp_path, layer):
    """Before anything runs, every job of the program has its tensors (from the driver's plan);
    each job's input is a part of the app's input[] (the whole of it for a single job: the
    unpadded input), its output after the job is that part of golden_output[]."""
    app, rc = _app(tmp_path, layer)
    dev = rc.device
    x = app.arrays["input"][1]
    golden = app.arrays["golden_output"][1]
    out_base = L1 + -(-x.size // 4) * 4  # the arrays follow each other in L1, word aligned
    specs = [dev.unit_tensors(k) for k in range(len(dev.units()))]
    assert len(specs) == (1 if layer.stride == 1 else
                          -(-layer.out_hw[0] // 2) * -(-layer.out_hw[1] // 2))
    item = np.dtype(layer.out_type).itemsize
    for k, (inp, out) in enumerate(specs):
        assert (inp.name, inp.layout, inp.dtype) == ("input", "HWC", "uint8")
        assert (out.name, out.layout, out.dtype) == ("output", "HWC", layer.out_type)
        assert inp.shape[2] == layer.in_channels and out.shape[2] == layer.out_channels
        np.testing.assert_array_equal(read_tensor(inp, dev.read), x[_index(inp, L1, 1)])
        assert rc.step(60).reason in ("step", "done")
        np.testing.assert_array_equal(read_tensor(out, dev.read),
                                      golden[_index(out, out_base, item)], err_msg=f"job {k}")
    if layer.stride == 1:
        assert specs[0][0].shape == (layer.height, layer.width, layer.in_channels)
        assert specs[0][1].shape == (*layer.out_hw, layer.out_channels)
    else:  # the jobs' outputs together are the whole output (the driver moves the last
        # block of an odd size back by one, so blocks may overlap)
        idx = np.concatenate([_index(o, out_base, item).ravel() for _, o in specs])
        assert set(idx.tolist()) == set(range(golden.size))


@pytest.mark.parametrize("layer", [LAYERS[1], LAYERS[3], LAYERS[4], LAYERS[6]],
                         ids=lambda lay: lay.name)
def test_an_input_written_then_stepped_gives_the_reference(tmp_path, layer):
    """Each job: random input written through its declaration, the job stepped: its declared
    output equals the independent per-job reference run on the same L1."""
    app, rc = _app(tmp_path, layer)
    dev = rc.device
    rng = np.random.default_rng(3)
    for k in range(len(dev.units())):
        assert dev.units_done == k
        inp, out = dev.unit_tensors(k)
        x = rng.integers(0, 256, inp.shape).astype(np.uint8)
        write_tensor(inp, x, dev.write)
        l1 = dev.read(L1, L1_SIZE)
        regs = dict(zip(JOB_REGISTERS, dev.queue[0].regs))
        rc.step(60)
        want = read_tensor(out, Image(reference(l1, regs)).read)
        np.testing.assert_array_equal(read_tensor(out, dev.read), want, err_msg=f"job {k}")


@pytest.mark.parametrize("seed", range(12))
def test_random_jobs_declare_exactly_what_they_read_and_write(seed):
    """Random jobs (any mode, padding, remainders, strides with gaps, strided 2x2, 8/16/32-bit
    output): the output declaration covers exactly the bytes the job writes, the input lies in
    what it reads, and the output read through it equals the reference's."""
    rng = np.random.default_rng(seed)
    regs = random_job(rng)
    rc = RunControl(open_device("ne16"))
    dev = rc.device
    dev.write(L1, rng.integers(0, 256, L1_SIZE, dtype=np.uint8).tobytes())
    submit(dev, regs)
    specs = {s.name: s for s in dev.unit_tensors(0)}
    out = specs["output"]
    l1 = dev.read(L1, L1_SIZE)
    assert rc.step(60).reason in ("step", "done")
    touched = rc.last_touched
    assert out.ranges() == touched.writes
    if "input" in specs:
        for s, e in specs["input"].ranges():
            assert any(a <= s and e <= b for a, b in touched.reads), (hex(s), hex(e))
    want = read_tensor(out, Image(reference(l1, regs)).read)
    np.testing.assert_array_equal(read_tensor(out, dev.read), want)


def test_no_program_no_tensors_and_a_job_out_of_range_is_named():
    dev = open_device("ne16")
    with pytest.raises(DeviceError, match="no job 0: the program has no job"):
        dev.unit_tensors(0)
