"""Issue 28 point 5: Ethos-U85 models that Vela leaves partly on the CPU run as the device would --
each ethos-u operator's command stream in the emulated NPU, the operators between them by
LiteRT's reference kernels on the arena (as TFLM runs them on the Cortex-M), each CPU operator a
unit of its own (pc in the emu_program window).

Models: testkit/ethosu85_cpu_models.py (the project's own), compiled here with Vela; the answer is
LiteRT's reference kernels (BUILTIN_REF) on the whole model before Vela.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from accelstub.devices import open_device
from accelstub.devices.device import ProgramOptions
from accelstub.devices.ethos_u85.vela import VelaImportError, read_vela
from accelstub.devices.runcontrol import RunControl
from accelstub.devices.tensors import read_tensor
from accelstub.stub.cli import main
from accelstub.stub.commands import CommandContext, execute
from accelstub.stub.program import load_program, run_to_end
from accelstub.testkit import ethosu85_cpu_models as cpu_models
from accelstub.testkit.ethosu85_models import (
    build,
    compile_with_vela,
    litert_reference,
    sample_inputs,
)
from tests.ethos_u85.test_ethosu85_vela import needs_litert, needs_vela

pytestmark = [needs_vela, needs_litert]

WINDOW = 0xF000_1000  # the emu_program window: CPU operator k at WINDOW + 4k
RUNNABLE = ("layernorm_neg", "encoder", "l2norm")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> (model before Vela, its input .npy, LiteRT's output .npy)."""
    root = tmp_path_factory.mktemp("ethosu85_cpu_ops")
    out = {}
    for name in RUNNABLE + ("cumsum_int8",):
        p = root / f"{name}.tflite"
        p.write_bytes(cpu_models.build(name))
        x = sample_inputs(p.read_bytes())
        np.save(root / f"{name}_x.npy", x[0])
        if name in RUNNABLE:
            np.save(root / f"{name}_ref.npy", litert_reference(p, x)[0])
        out[name] = (p, root / f"{name}_x.npy", root / f"{name}_ref.npy")
    return out


_compiled: dict = {}


def vela(models, name: str, macs: int = 256) -> Path:
    """Vela's output of model ``name`` for ``macs`` MACs (compiled once per module run)."""
    key = (name, macs)
    if key not in _compiled:
        p = models[name][0]
        _compiled[key] = compile_with_vela(p, p.parent / f"out{macs}", macs, cpu_operators=True)
    return _compiled[key]


def loaded(models, name: str, macs: int = 256) -> RunControl:
    """A device with the program loaded as `accelstub serve --program` does (halted before its
    first unit), with the model's input and LiteRT's output as --input/--expect."""
    _, x, ref = models[name]
    rc = RunControl(open_device("ethos-u85", macs=macs))
    load_program(CommandContext(targets=[rc]), vela(models, name, macs),
                 ProgramOptions(input=str(x), expect=str(ref)))
    return rc


@pytest.mark.parametrize("macs", [256, 512, 2048])
@pytest.mark.parametrize("name", RUNNABLE)
def test_whole_output_bit_exact_with_litert_reference(models, name, macs):
    """NPU streams emulated, CPU operators by LiteRT between them: the graph's output equals
    LiteRT's reference kernels on the whole model before Vela, element for element."""
    rc = loaded(models, name, macs)
    outcome = run_to_end(rc)
    assert outcome.code == 0 and outcome.lines[0].startswith("PASS (1 output(s)"), outcome.lines
    cpu = sum(1 for u in rc.device.units() if u.label.startswith("cpu "))
    assert f" and {cpu} CPU operator" in outcome.lines[0]
    got = np.frombuffer(rc.device.read(rc.device.vela.outputs[0].address,
                                       rc.device.vela.outputs[0].nbytes), np.int8)
    want = np.load(models[name][2]).ravel()
    assert np.array_equal(got, want)
    assert len(np.unique(want)) > 16  # a real answer, not a saturated constant


def test_the_encoder_has_three_streams_and_six_cpu_operators(models):
    """The small encoder compiles into several NPU streams with six CPU operators between
    them (two DEQUANTIZE, NEG, QUANTIZE groups, Keras's LayerNormalization pattern)."""
    prog = read_vela(vela(models, "encoder"))
    kinds = [type(s).__name__ for s in prog.segments]
    assert kinds.count("NpuStream") == 3 and kinds.count("CpuOperator") == 6
    assert [s.name for s in prog.segments if type(s).__name__ == "CpuOperator"] == \
        ["DEQUANTIZE", "NEG", "QUANTIZE"] * 2


def test_units_list_the_cpu_operators_by_name(models):
    """units() and `monitor units` list every stream's operations and the CPU operators, in
    model order, each CPU operator at its own program-window word with its operator name."""
    rc = loaded(models, "layernorm_neg")
    dev = rc.device
    units = dev.units()
    labels = [u.label for u in units]
    assert labels == ["cmd 0", "cmd 1", "cpu 0", "cpu 1", "cpu 2", "cmd 5", "cmd 6"]
    cpu = units[2:5]
    assert [u.address for u in cpu] == [WINDOW, WINDOW + 4, WINDOW + 8]
    assert [u.summary.split()[0] for u in cpu] == ["DEQUANTIZE", "NEG", "QUANTIZE"]
    assert "1x8x8x8 float32 -> 1x8x8x8 float32" in cpu[1].summary
    assert units[0].summary.startswith("CONV") and units[5].summary.startswith("CONV")
    assert units[5].address != units[0].address  # the second stream has addresses of its own
    text = execute(CommandContext(targets=[rc], log=lambda s: None), "units")
    for u in cpu:
        assert f"{u.address:#010x}" in text and u.summary in text


def test_step_stops_before_and_after_each_cpu_unit(models):
    """stepi walks the program: the NPU's first stream, then each CPU operator (pc = its window
    word before it runs, the next unit's after), then the second stream, then the end."""
    rc = loaded(models, "layernorm_neg")
    dev = rc.device
    units = dev.units()
    assert dev.pc == units[0].address
    seen = []
    for u in units:
        assert dev.pc == u.address, (u.label, hex(dev.pc))
        seen.append(dev.unit_label(dev.pc))
        stop = rc.step(60)
        assert stop.reason == ("done" if u is units[-1] else "step"), stop
    assert dev.at_end()
    assert seen[2:5] == ["cpu 0 (DEQUANTIZE, TFLite operator 1, on the CPU)",
                         "cpu 1 (NEG, TFLite operator 2, on the CPU)",
                         "cpu 2 (QUANTIZE, TFLite operator 3, on the CPU)"]
    assert seen[5].startswith("cmd 5 (NPU_OP_CONV")


def test_a_breakpoint_on_a_cpu_unit_stops_before_it(models):
    rc = loaded(models, "layernorm_neg")
    rc.add_breakpoint(WINDOW + 4)  # NEG
    stop = rc.run(60)
    assert stop.reason == "breakpoint" and rc.device.pc == WINDOW + 4
    assert rc.device.counters()["cpu_operations"] == 1  # DEQUANTIZE ran, NEG not yet


def test_cpu_unit_tensors_are_readable_and_hold_its_result(models):
    """unit_tensors of a CPU unit: its arena inputs and outputs (float32 for NEG), read back
    after the unit as LiteRT computed them; a watchpoint on its output stops after it."""
    rc = loaded(models, "layernorm_neg")
    dev = rc.device
    neg = [u.label for u in dev.units()].index("cpu 1")
    specs = {s.name: s for s in dev.unit_tensors(neg)}
    assert set(specs) == {"input", "output"}
    assert specs["input"].dtype == specs["output"].dtype == "float32"
    assert specs["output"].shape == (1, 8, 8, 8)
    out = specs["output"]
    start = out.row[0] + out.col[0] + out.channel[0]
    rc.add_watchpoint("w", start, 4)
    # Vela reuses the arena: the first convolution's output lies there too
    stops = [rc.run(60), rc.run(60)]
    assert [s.reason for s in stops] == ["watchpoint", "watchpoint"], stops
    assert dev.pc == WINDOW + 8  # the second stop: after NEG, before QUANTIZE
    x, y = read_tensor(specs["input"], dev.read), read_tensor(out, dev.read)
    assert np.array_equal(y, -x) and np.abs(x).max() > 0


def test_run_v_names_the_cpu_units(models, capsys):
    _, x, ref = models["layernorm_neg"]
    code = main(["run", "ethos-u85", "--program", str(vela(models, "layernorm_neg")),
                 "--input", str(x), "--expect", str(ref), "-v"])
    out = capsys.readouterr()
    assert code == 0, out
    text = out.out + out.err
    for k, name, op in ((0, "DEQUANTIZE", 1), (1, "NEG", 2), (2, "QUANTIZE", 3)):
        assert f"  cpu {k} ({name}, TFLite operator {op}, on the CPU): 0 cycles modelled, wrote" \
            in text


def test_a_model_ending_with_a_cpu_dequantize_runs(tmp_path):
    """The model the importer used to refuse ("only models that Vela mapped entirely to the NPU
    can run here"): an int8 convolution whose output a CPU DEQUANTIZE turns into float32."""
    p = tmp_path / "conv_dequantize.tflite"
    p.write_bytes(build("conv_dequantize"))
    out = compile_with_vela(p, tmp_path / "out", cpu_operators=True)
    x = sample_inputs(p.read_bytes())
    np.save(tmp_path / "x.npy", x[0])
    want = litert_reference(p, x)[0]
    np.save(tmp_path / "ref.npy", want)
    assert want.dtype == np.float32
    assert main(["run", "ethos-u85", "--program", str(out), "--input", str(tmp_path / "x.npy"),
                 "--expect", str(tmp_path / "ref.npy"), "--output",
                 str(tmp_path / "got.npy")]) == 0
    assert np.array_equal(np.load(tmp_path / "got.npy"), want)


def test_an_operator_litert_cannot_run_is_refused_naming_file_and_operator(models, capsys):
    """int8 CUMSUM: Vela leaves it on the CPU, and LiteRT's reference kernels do not implement
    it for int8 -- what truly cannot run is refused at load, naming the file and the operator."""
    out = vela(models, "cumsum_int8")
    want = (f"{out}: operator 1 (CUMSUM) runs on the CPU, and LiteRT's reference kernels (the "
            "kernels TFLM runs there) refuse it: an operator, tensor type or option they do not "
            "implement")
    with pytest.raises(VelaImportError) as e:
        read_vela(out)
    assert str(e.value) == want
    assert main(["run", "ethos-u85", "--program", str(out)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"accelstub: error: {want}"


def test_snapshot_restore_keeps_the_queued_cpu_operator(models):
    """snapshot()/restore() (reverse execution, eval's checkpoints) at a CPU unit: the restored
    device runs the same CPU operator next."""
    rc = loaded(models, "layernorm_neg")
    dev = rc.device
    rc.add_breakpoint(WINDOW + 4)
    assert rc.run(60).reason == "breakpoint"
    snap = dev.snapshot()
    rc.step(60)
    assert dev.pc == WINDOW + 8
    dev.restore(snap)
    assert dev.pc == WINDOW + 4 and dev.unit_label(dev.pc).startswith("cpu 1 (NEG")


def test_each_stream_is_started_as_the_driver_does(models):
    """Before the second ethos-u operator's first command: QBASE/QSIZE name its own stream,
    BASEP0-2 flash, arena and fast scratch, BASEP3/BASEP4 its IFM (the QUANTIZE's output) and
    OFM; that unit's tensors are decoded from its own stream at those addresses."""
    rc = loaded(models, "layernorm_neg")
    dev = rc.device
    second = [s for s in dev.vela.segments if type(s).__name__ == "NpuStream"][1]
    quantize = dev.vela.segments[3]
    rc.add_breakpoint(second.qbase)
    assert rc.run(60).reason == "breakpoint"
    reg = dev.read_register
    assert (dev.qbase, reg("QSIZE")) == (second.qbase, 4 * second.command_words)
    assert reg("BASEP3_LO") == quantize.outputs[0].address == second.ifms[0].address
    assert reg("BASEP4_LO") == second.ofms[0].address
    assert reg("BASEP1_LO") == dev.vela.inputs[0].address - dev.vela.inputs[0].offset
    index = [u.address for u in dev.units()].index(second.qbase)
    specs = {s.name: s for s in dev.unit_tensors(index)}
    assert specs["input"].row[0] == quantize.outputs[0].address
    assert specs["output"].row[0] == second.ofms[0].address


def test_monitor_tensor_shows_a_cpu_units_float_tensor(models):
    """`tensor show` of the NEG unit's float32 output after it ran: the values LiteRT wrote,
    as floats (the int8 units print integers)."""
    rc = loaded(models, "layernorm_neg")
    ctx = CommandContext(targets=[rc], log=lambda s: None)
    rc.add_breakpoint(WINDOW + 8)  # QUANTIZE: NEG has run
    assert rc.run(60).reason == "breakpoint"
    text = execute(ctx, "tensor show 3 output 0")
    lines = text.splitlines()
    assert lines[0] == "cpu 1 (index 3) output channel 0 of 8: NHWC 1x8x8x8 float32"
    spec = {s.name: s for s in rc.device.unit_tensors(3)}["output"]
    y = read_tensor(spec, rc.device.read)[0, :, :, 0]
    assert lines[2].split()[1:] == [f"{float(v):.6g}" for v in y[0]]
    assert any("." in c for c in lines[2].split()[1:])  # not truncated to integers
