"""A 3x3 layer big enough for conv_sums' Winograd F(2x2, 3x3) (int_conv.winograd_for) through
MAX78000, NE16 and NVDLA on a machine without AVX-512 VNNI (HAVE_VNNI false, as on AVX2-only
x86 and arm64), each checked bit-exact against its builder's independent reference (testkit/):
the devices read Winograd's padded work array (rows and columns past Ho, Wo; K rounded up to
16) where they read the direct kernel's."""
from __future__ import annotations

import numpy as np
import pytest

from accelstub.devices import open_device
from accelstub.devices.host import apply_steps
from accelstub.devices.ne16.model import BASE as NE16
from accelstub.devices.ne16.pulp_nnx import Array, driver_tasks, place_arrays
from accelstub.devices.runcontrol import RunControl
from accelstub.emu.conv import int_conv as IC
from accelstub.emu.conv import winograd as W
from accelstub.stub.commands import CommandContext
from accelstub.stub.program import load_program, run_to_end
from accelstub.testkit import max78000_build as M
from accelstub.testkit import ne16_build as N
from accelstub.testkit import nvdla_build as V


@pytest.fixture
def no_vnni(monkeypatch):
    """HAVE_VNNI false for the shared kernel (weights packed without the byte layout, so no
    byte launch); the Winograd launches made, counted."""
    monkeypatch.setattr(IC, "HAVE_VNNI", False)
    monkeypatch.setattr(IC, "_PACKED", {})  # weights packed here stay here
    made = []
    real = W.winograd_launch

    def counted(*args, **kwargs):
        made.append(args[2])  # out_hw
        return real(*args, **kwargs)
    monkeypatch.setattr(W, "winograd_launch", counted)
    return made


def run_program(device: str, path) -> list[str]:
    """`accelstub run`'s loading and run to the end (the program's own checks), its lines."""
    rc = RunControl(open_device(device))
    load_program(CommandContext(targets=[rc]), path)
    out = run_to_end(rc)
    assert out.code == 0, out.lines
    return out.lines


@pytest.mark.parametrize("wide", [False, True])
def test_max78000_big_3x3_layer_without_vnni_is_bit_exact(no_vnni, tmp_path, wide):
    """Odd output sizes (Winograd computes a row and a column more) and the 32-bit output,
    whose sums conv_int reads through a slice of the padded array."""
    layer = M.Layer(40, kernel=3, pad=1, shift=-3, wide=wide,
                    activation="none" if wide else "relu")
    net = M.Network(32, 31, 29, [layer], name="wino")
    lines = run_program("max78000", M.build(net, seed=4).write(tmp_path / "wino"))
    assert no_vnni == [(31, 29)]
    assert any("PASS" in line for line in lines), lines


@pytest.mark.parametrize("out_type", ["int8", "int32"])
def test_ne16_big_3x3_job_without_vnni_is_bit_exact(no_vnni, out_type):
    """A padded 3x3 job (its input read in place) with odd sizes; int32 output (no
    normalisation) reads the sums array's rows below Ho only."""
    layer = N.Layer(31, 33, 32, 40, padding=(1, 1, 1, 1), out_type=out_type,
                    norm_quant=out_type != "int32", name="wino")
    app = N.build(layer, seed=2)
    dev = open_device("ne16", l1_kib=512)
    arrays = {name: Array(ctype, values, size, "wino")
              for name, (ctype, values, size) in app.arrays.items()}
    steps, addr = place_arrays(arrays, (dev.l1.region.base, dev.l1.region.size), "wino")
    apply_steps(dev, steps)
    regs = driver_tasks(app.defines, addr)[0]
    rc = RunControl(dev)
    dev.host_read(NE16 + 0x04, 4)  # ACQUIRE, as the driver does
    for i, value in enumerate(regs):
        dev.write(NE16 + 0x20 + 4 * i, value.to_bytes(4, "little"))
    dev.write(NE16, bytes(4))  # TRIGGER
    assert rc.run_here().reason == "done"
    ctype, values, _ = app.arrays["golden_output"]
    golden = np.asarray(values).astype(np.dtype(ctype.removesuffix("_t")).newbyteorder("<"))
    got = np.frombuffer(dev.read(addr["output"], golden.nbytes), golden.dtype)
    assert no_vnni == [(31, 33)]
    np.testing.assert_array_equal(got, golden.reshape(-1))


def test_nvdla_big_3x3_layer_without_vnni_is_bit_exact(no_vnni, tmp_path):
    """A pad value (the kernel's zero point) and odd sizes; the trace's CRC check is the
    reference's (testkit/nvdla_reference.py)."""
    conv = V.Conv(29, 31, 32, 40, pad_value=-5, clip=6, cvt=(0, 1, 2))
    lines = run_program("nvdla", V.build([conv], "wino", seed=3).write(tmp_path / "wino"))
    assert no_vnni == [(31, 29)]
    assert sum(": PASS" in line for line in lines) == 1, lines
