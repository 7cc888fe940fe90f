"""``monitor tensor``: a unit's declared tensors (Device.unit_tensors) listed, one channel shown
as text and the array dumped as .npy, the same on every device (no per-device case in stub/)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from accelstub.devices import open_device
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.cli import demo_program
from accelstub.stub.client import RspClient
from accelstub.stub.commands import CommandContext, CommandError, execute
from accelstub.stub.program import load_program
from accelstub.stub.server import StubServer
from tests.contract.toy_device import BASE, RAM, Toy


def w32(dev, addr: int, value: int) -> None:
    dev.write(addr, value.to_bytes(4, "little"))


@pytest.fixture
def toy(tmp_path):
    """The toy with one job queued: 3 words RAM -> RAM+0x100; RAM holds bytes 0, 1, 2, ..."""
    dev = Toy()
    dev.write(RAM, bytes(range(64)))
    for off, v in ((0x08, 0), (0x20, RAM), (0x24, RAM + 0x100), (0x28, 3), (0x2C, 1)):
        w32(dev, BASE + off, v)
    return CommandContext([RunControl(dev)], log=lambda s: None, cwd=tmp_path)


def err(ctx, line: str) -> str:
    with pytest.raises(CommandError) as e:
        execute(ctx, line)
    return str(e.value)


def test_tensor_lists_the_current_units_tensors_with_layout_shape_dtype_and_ranges(toy):
    text = execute(toy, "tensor")
    assert text.splitlines()[0] == "job C0 (index 0): copy 3 words 0x20000000 -> 0x20000100"
    assert "  input    HWC   1x3x4        int8   12 bytes in 1 range: 0x20000000+12" in text
    assert "  output   HWC   1x3x4        int8   12 bytes in 1 range: 0x20000100+12" in text
    assert execute(toy, "tensor 0") == text == execute(toy, "tensor {job C0}")


def test_tensor_show_renders_one_channel_in_the_toolchains_layout(toy):
    # HWC over words: channel 1 is byte 1 of each word
    assert execute(toy, "tensor show 0 input 1") == (
        "job C0 (index 0) input channel 1 of 4: HWC 1x3x4 int8\n"
        "        0   1   2\n"
        "   0    1   5   9")
    toy.target.device.write(RAM + 0x100, bytes([0x80, 0, 0, 0]))
    lines = execute(toy, "tensor show 0 output").splitlines()
    assert lines[1:] == ["         0    1    2", "   0  -128    0    0"]  # as wide as -128


def test_tensor_dump_writes_the_array_as_npy(toy, tmp_path):
    assert execute(toy, "tensor dump {job C0} input in.npy") == \
        "wrote in.npy: input of job C0 (index 0), HWC 1x3x4 int8"
    arr = np.load(tmp_path / "in.npy")
    assert arr.dtype == np.int8 and arr.shape == (1, 3, 4)
    assert arr.ravel().tolist() == list(range(12))


def test_tensor_dump_refuses_a_fifo(toy, tmp_path):
    os.mkfifo(tmp_path / "pipe")
    assert err(toy, "tensor dump 0 input pipe") == \
        "tensor dump: pipe is a FIFO; only regular files are written"


def test_errors_name_the_unit_and_the_tensor(toy):
    assert err(toy, "tensor show 0 weights") == \
        "tensor show: job C0 (index 0) has no tensor 'weights' (it has input, output)"
    assert err(toy, "tensor show 0 input 4") == \
        "tensor show: channel 4 out of range: input of job C0 (index 0) has 4 channels"
    assert err(toy, "tensor 5") == \
        "tensor: no job '5' (an index 0..0 or a label such as 'job C0')"
    assert err(toy, "tensor show 0") == \
        "usage: tensor [UNIT] | show UNIT NAME [channel] | dump UNIT NAME file.npy"
    execute(toy, "step")
    assert err(toy, "tensor") == ("tensor: pc 0x1000002c is at no job (the program has "
                                  "ended); name one: tensor UNIT")


def test_a_unit_without_a_declaration_says_so():
    """The base contract's default: no declaration (the device cannot say)."""
    dev = open_device("ethos-u85")
    ctx = CommandContext([RunControl(dev)], log=lambda s: None)
    load_program(ctx, demo_program("ethos-u85"))
    if dev.unit_tensors(0):
        pytest.fail("ethos-u85 now declares cmd 0's tensors: pick a unit without any here")
    assert err(ctx, "tensor 0") == "tensor: cmd 0 (index 0) declares no tensors on ethos-u85"


def test_max78000_layer_output_after_a_step_matches_its_memory():
    """A real device: after layer 0 runs, `tensor show` gives each value at the address the
    declaration names for it (read byte by byte here), in ai8x-training's CHW."""
    dev = open_device("max78000")
    ctx = CommandContext([RunControl(dev)], log=lambda s: None)
    load_program(ctx, demo_program("max78000"))
    execute(ctx, "step")
    spec = next(s for s in dev.unit_tensors(0) if s.name == "output")
    assert spec.layout == "CHW"
    lines = execute(ctx, "tensor show {Layer 0} output 5").splitlines()
    assert lines[0] == "Layer 0 (index 0) output channel 5 of 16: CHW 16x16x16 int8"
    shown = [[int(v) for v in line.split()[1:]] for line in lines[2:]]
    byte = [[int.from_bytes(dev.read(spec.channel[5] + r + c, 1), "little", signed=True)
             for c in spec.col] for r in spec.row]
    assert shown == byte and any(any(row) for row in byte)


def test_the_same_command_over_gdbs_monitor(tmp_path):
    """The command table's tensor command reached through qRcmd (gdb's `monitor`): its text,
    its error, and the session still served after the error."""
    dev = Toy()
    dev.write(RAM, bytes(range(64)))
    for off, v in ((0x08, 0), (0x20, RAM), (0x24, RAM + 0x100), (0x28, 3), (0x2C, 1)):
        w32(dev, BASE + off, v)
    server = StubServer([dev], gdb_port=0, telnet_port=None, tcl_port=None)
    server.start()
    try:
        with RspClient("127.0.0.1", server.gdb[0].port) as c:
            assert c.monitor("tensor show 0 input 2").splitlines()[2] == "   0    2   6  10"
            with pytest.raises(Exception, match="job C0 \\(index 0\\) has no tensor 'x'"):
                c.monitor("tensor show 0 x")
            assert c.monitor("tensor").startswith("job C0 (index 0)")  # still served
    finally:
        server.stop()
