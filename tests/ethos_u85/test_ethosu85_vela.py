"""Vela's output in the Ethos-U85 model, bit for bit against LiteRT's reference kernels.

Models: the project's own generator (testkit/ethosu85_models.py), compiled here with
``vela --accelerator-config ethos-u85-256`` (ethos-u-vela, PyPI) into ``*_vela.tflite`` and
``--output-format raw`` ``*_vela.npz``; both are loaded with devices/ethos_u85/vela.py the way the
Ethos-U driver stack does and run in the device; the answer is LiteRT's interpreter
(ai-edge-litert) with its *reference* kernels (OpResolverType.BUILTIN_REF, the kernels TFLM
runs): LiteRT's optimized and XNNPACK kernels are not bit-exact with them for some of these
models (depthwise, mul, the small CNN), so they are no reference.

Tests that need vela or LiteRT skip with the reason when those are not installed; the importer's
error handling runs everywhere (it needs only the ``flatbuffers`` package for the generator).
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from accelstub.devices import open_device
from accelstub.devices.device import ProgramOptions
from accelstub.devices.ethos_u85 import stream as es
from accelstub.devices.ethos_u85 import vela as vela_mod
from accelstub.devices.ethos_u85.vela import (
    COP1,
    TFLiteOperator,
    VelaImportError,
    load_input,
    load_vela_program,
    operator_name,
    parse_payload,
    read_output,
    read_vela,
)
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.cli import main
from accelstub.stub.commands import CommandContext
from accelstub.stub.program import load_program, run_to_end
from accelstub.testkit.ethosu85_models import litert_reference
from tests.ethos_u85.compiled import run_vela_program
from tests.helpers import step


def run_cli(out, **options) -> tuple[int, str, str]:
    """What `accelstub run ethos-u85 --program OUT --input .. --output .. --expect ..` does:
    (exit code, the loaded program's summary, the line printed)."""
    rc = RunControl(open_device("ethos-u85"))
    summary = load_program(CommandContext(targets=[rc]), out, ProgramOptions(**options))
    outcome = run_to_end(rc)
    return outcome.code, summary, "\n".join(outcome.lines)

HAVE_FLATBUFFERS = importlib.util.find_spec("flatbuffers") is not None
HAVE_VELA = importlib.util.find_spec("ethosu") is not None and \
    importlib.util.find_spec("ethosu.vela") is not None
HAVE_LITERT = importlib.util.find_spec("ai_edge_litert") is not None

IN_CI = bool(os.environ.get("CI"))  # in CI the test extra is installed: never skip there

needs_flatbuffers = pytest.mark.skipif(not HAVE_FLATBUFFERS and not IN_CI,
                                       reason="the model generator needs the 'flatbuffers' "
                                       "package (pip install -e '.[test]')")
needs_vela = pytest.mark.skipif(not (HAVE_VELA and HAVE_FLATBUFFERS) and not IN_CI,
                                reason="ethos-u-vela is not installed (pip install -e '.[test]')")
needs_litert = pytest.mark.skipif(not HAVE_LITERT and not IN_CI,
                                  reason="ai-edge-litert is not installed "
                                  "(pip install -e '.[test]')")

from accelstub.testkit.ethosu85_models import (  # noqa: E402
    CPU_MODELS,
    MODELS,
    build,
    compile_with_vela,
    sample_inputs,
)

#: models the device cannot run yet, with the reason (strict: they must fail until fixed)
XFAIL: dict[str, str] = {}


def _params():
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=XFAIL[n]))
            if n in XFAIL else n for n in MODELS]


vela = compile_with_vela  # (model, outdir, macs=256, raw=False) -> Vela's output


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """name -> (model .tflite, {"tflite": vela .tflite, "npz": vela .npz}), compiled on demand."""
    root = tmp_path_factory.mktemp("ethosu85_vela")
    cache: dict[str, tuple[Path, dict[str, Path]]] = {}

    def get(name: str, kind: str = "tflite") -> tuple[Path, Path]:
        if name not in cache:
            src = root / f"{name}.tflite"
            src.write_bytes(build(name))
            cache[name] = (src, {})
        src, outs = cache[name]
        if kind not in outs:
            d = root / kind
            d.mkdir(exist_ok=True)
            outs[kind] = vela(src, d, raw=kind == "npz")
        return src, outs[kind]
    return get


def run_in_device(path: Path, inputs) -> list[np.ndarray]:
    dev = open_device("ethos-u85")
    prog = load_vela_program(dev, path, inputs)
    return run_vela_program(dev, prog, timeout=120)


def _explain(got: np.ndarray, want: np.ndarray) -> str:
    d = got.astype(np.int64).ravel() - want.astype(np.int64).ravel()
    bad = np.flatnonzero(d)
    first = ", ".join(f"[{i}] got {got.ravel()[i]} want {want.ravel()[i]}" for i in bad[:6])
    return f"{bad.size}/{d.size} elements differ (max |diff| {abs(d).max()}): {first}"


def assert_outputs_equal(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    """Every output the same type, shape and values (the first differences named)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        assert np.array_equal(g, w), _explain(g, w)


# --- every generated model, bit for bit ---------------------------------------------------------

@needs_vela
@needs_litert
@pytest.mark.parametrize("name", _params())
def test_vela_tflite_matches_litert(compiled, name):
    src, out = compiled(name)
    xs = sample_inputs(name)
    want = litert_reference(src, xs)
    assert_outputs_equal(run_in_device(out, xs), want)


@needs_vela
@needs_litert
@pytest.mark.parametrize("name", ["add", "conv", "max_pool_int16"])
def test_vela_raw_npz_matches_litert(compiled, name):
    """The raw .npz (regions named in the file) gives the same answer as the .tflite."""
    src, out = compiled(name, "npz")
    xs = sample_inputs(name)
    want = litert_reference(src, xs)
    got = run_in_device(out, xs)
    for g, w in zip(got, want):
        assert np.array_equal(g.reshape(w.shape), w), _explain(g, w)


@needs_vela
@needs_litert
def test_second_input_of_the_same_program(compiled):
    """Another input through the same file: a fresh load gives that input's answer."""
    src, out = compiled("max_pool")
    for seed in (7, 8):
        xs = sample_inputs("max_pool", seed=seed)
        assert np.array_equal(run_in_device(out, xs)[0], litert_reference(src, xs)[0])


@needs_vela
@needs_litert
def test_sparse_weights_decode_to_the_model_weights(compiled, monkeypatch):
    """Vela picks sparse_2_4 for a 2-channel convolution; its stream decodes to exactly the
    int8 weights of the model it compiled (Vela's own encoder as the reference)."""
    from accelstub.devices.ethos_u85 import weightscale
    from accelstub.devices.ethos_u85.vela import read_tflite

    src, out = compiled("conv_2ch")
    sparse = [c for c in es.decode(read_vela(out).command_stream)
              if c.name == "NPU_SET_WEIGHT_FORMAT" and c.fields["weight_sparsity"]]
    assert sparse, "Vela no longer stores this layer as sparse_2_4"
    decoded = []
    real = weightscale.Wt.decode_weights_memo

    def spy(streams, p, **kw):
        w = real(streams, p, **kw)
        decoded.append((int(p[12]), w))
        return w
    monkeypatch.setattr(weightscale.Wt, "decode_weights_memo", spy)
    xs = sample_inputs("conv_2ch")
    got = run_in_device(out, xs)[0]
    assert np.array_equal(got, litert_reference(src, xs)[0])
    m = read_tflite(src.read_bytes())
    wt = next(t for t in m.tensors if t.name.endswith(".w"))
    want = np.frombuffer(m.buffers[wt.buffer], np.int8).reshape(wt.shape)
    assert [s for s, _ in decoded] == [1]
    assert np.array_equal(decoded[0][1], want)


# --- what the loader leaves in the device -----------------------------------------------------

@needs_vela
def test_program_is_armed_before_its_first_command(compiled):
    _, out = compiled("conv")
    dev = open_device("ethos-u85")
    xs = sample_inputs("conv")
    prog = load_vela_program(dev, out, xs)
    # the NPU runs, halted by the debugger before the command at QBASE (QREAD = 0)
    assert dev.running and not dev.finished()
    assert dev.pc == prog.qbase and prog.qbase % 16 == 0
    first = es.decode(prog.command_stream)[0]
    assert dev.units()[0].address == prog.qbase, first
    # memories hold what the driver put there
    assert dev.read(prog.qbase, len(prog.command_stream)) == prog.command_stream
    assert dev.read(prog.basep[0], len(prog.flash)) == prog.flash
    assert dev.read(prog.inputs[0].address, xs[0].nbytes) == xs[0].tobytes()
    # base pointers in TFLM's order: flash, arena, fast scratch, inputs, outputs
    assert prog.basep[1] == prog.inputs[0].address - prog.inputs[0].offset
    assert prog.basep[3] == prog.inputs[0].address and prog.basep[4] == prog.outputs[0].address
    reg = lambda n: int.from_bytes(dev.read(dev.description.register(n).address, 4),  # noqa
                                   "little")
    assert reg("QSIZE") == 4 * prog.command_words
    assert reg("BASEP0_LO") == prog.basep[0] and reg("BASEP1_LO") == prog.basep[1]
    assert reg("REGIONCFG") & 3 == 3 and (reg("REGIONCFG") >> 2) & 3 == 0  # flash EXT, arena SRAM
    # one step runs the first operation (the whole program here: one conv + STOP)
    assert step(dev).reason in ("step", "done")


@needs_vela
def test_compiled_for_another_mac_configuration_is_refused(compiled):
    """The driver refuses a payload built for another configuration (OPTIMIZER_CONFIG)."""
    _, out = compiled("add")
    dev = open_device("ethos-u85", macs=512)
    with pytest.raises(VelaImportError, match=r"add_vela\.tflite: compiled for an NPU with "
                       r"macs_per_cc \(log2 MACs/cycle\) 8, this ethos-u85 has 9"):
        load_vela_program(dev, out, sample_inputs("add"))


@needs_vela
def test_input_errors_name_the_file(compiled):
    _, out = compiled("add")
    dev = open_device("ethos-u85")
    with pytest.raises(VelaImportError, match=r"add_vela\.tflite: the model has 2 input\(s\), "
                       r"1 given"):
        load_vela_program(dev, out, np.zeros((1, 4, 4, 8), np.int8))
    with pytest.raises(VelaImportError, match=r"input 'a' is \(1, 4, 4, 8\) int8, the given "
                       r"array has shape \(3,\)"):
        load_vela_program(dev, out, [np.zeros(3, np.int8)] * 2)
    with pytest.raises(VelaImportError, match="is int8, the given array is int32 with values"):
        load_vela_program(dev, out, [np.full((1, 4, 4, 8), 300, np.int32)] * 2)
    # in-range integers of another type are accepted
    xs = [x.astype(np.int32) for x in sample_inputs("add")]
    assert load_vela_program(dev, out, xs).inputs[0].dtype == np.int8


@needs_vela
def test_read_output_and_load_input(compiled, tmp_path):
    _, out = compiled("max_pool")
    xs = sample_inputs("max_pool")
    np.save(tmp_path / "x.npy", xs[0])
    assert np.array_equal(load_input(tmp_path / "x.npy")[0], xs[0])
    dev = open_device("ethos-u85")
    prog = load_vela_program(dev, out, load_input(tmp_path / "x.npy"))
    before = read_output(dev, prog)
    after = run_vela_program(dev, prog)[0]
    assert before.shape == after.shape == (1, 4, 4, 8)
    assert np.array_equal(read_output(dev, prog), after)
    with pytest.raises(VelaImportError, match="no output 1"):
        read_output(dev, prog, 1)


@needs_vela
@needs_litert
def test_cli_entry_points(compiled, tmp_path):
    """What `accelstub run/serve ethos-u85 --program ... --input ...` call."""
    src, out = compiled("avg_pool")
    xs = sample_inputs("avg_pool")
    np.save(tmp_path / "x.npy", xs[0])
    want = litert_reference(src, xs)[0]
    np.save(tmp_path / "want.npy", want)
    code, summary, line = run_cli(out)
    assert code == 0 and "(input: zeros" in summary and line.startswith("DONE (1 output(s)")
    code, summary, line = run_cli(out, input=str(tmp_path / "x.npy"),
                                  output=str(tmp_path / "y.npy"),
                                  expect=str(tmp_path / "want.npy"))
    assert summary.startswith("avg_pool_vela.tflite: Vela tflite")
    assert code == 0 and line.startswith("PASS (1 output(s)"), line
    assert np.array_equal(np.load(tmp_path / "y.npy"), want)
    bad = want.copy()
    bad.ravel()[3] ^= 1
    np.save(tmp_path / "bad.npy", bad)
    code, _, line = run_cli(out, input=str(tmp_path / "x.npy"), expect=str(tmp_path / "bad.npy"))
    assert code == 1 and line.startswith("FAIL output 0: 1/72 elements differ, first at flat "
                                         "index 3"), line


# --- files that are not (runnable) Vela output -------------------------------------------------

def test_not_a_vela_file(tmp_path):
    p = tmp_path / "junk_vela.tflite"
    p.write_bytes(b"hello world, not a model")
    with pytest.raises(VelaImportError, match=r"junk_vela\.tflite: neither a Vela \.tflite"):
        read_vela(p)
    with pytest.raises(VelaImportError, match=r"missing\.tflite: cannot read"):
        read_vela(tmp_path / "missing.tflite")
    z = tmp_path / "other.npz"
    np.savez(z, a=np.zeros(3))
    with pytest.raises(VelaImportError, match=r"other\.npz: not Vela's raw output: missing "
                       r"cmd_data"):
        read_vela(z)


@needs_flatbuffers
def test_uncompiled_model_is_refused(tmp_path):
    p = tmp_path / "conv.tflite"
    p.write_bytes(build("conv"))
    with pytest.raises(VelaImportError, match=r"conv\.tflite: a TFLite model with no NPU operator "
                       r"\(no 'ethos-u' custom operator: compile it with vela first\)$"):
        read_vela(p)


@pytest.fixture(scope="module")
def cpu_compiled(tmp_path_factory):
    """Vela's output of the models it leaves (partly) on the CPU: name -> *_vela.tflite."""
    root = tmp_path_factory.mktemp("ethosu85_cpu")
    out = {}
    for name in CPU_MODELS:
        (root / f"{name}.tflite").write_bytes(build(name))
        out[name] = compile_with_vela(root / f"{name}.tflite", root / "out", cpu_operators=True)
    return out


@needs_vela
@needs_litert
def test_a_cpu_operator_is_run_not_refused(cpu_compiled):
    """Vela leaves DEQUANTIZE (BuiltinOperator 6) on the CPU: no longer refused (issue 28
    point 5), it becomes a CPU operator of the program, named (test_ethosu85_cpu_ops.py runs
    such models against LiteRT)."""
    prog = read_vela(cpu_compiled["conv_dequantize"])
    assert [getattr(s, "name", "ethos-u") for s in prog.segments] == ["ethos-u", "DEQUANTIZE"]
    assert prog.outputs[0].dtype == np.float32


def test_operator_names_come_from_the_installed_schema(monkeypatch):
    """Names from Vela's generated TFLite schema module; without it, the number."""
    dequantize = TFLiteOperator(0, 6, "", [0], [1])
    if HAVE_VELA or IN_CI:
        assert operator_name(dequantize) == "DEQUANTIZE"
    assert operator_name(TFLiteOperator(0, 6, "ethos-u", [], [])) == "ethos-u"
    monkeypatch.setitem(sys.modules, "ethosu.vela.tflite.BuiltinOperator", None)  # not installed
    vela_mod._builtin_names.cache_clear()
    try:
        assert operator_name(dequantize) == "builtin operator 6"
    finally:
        monkeypatch.undo()
        vela_mod._builtin_names.cache_clear()


@needs_vela
def test_a_float_model_vela_left_on_the_cpu_is_named_as_such(cpu_compiled, tmp_path, capsys):
    out = cpu_compiled["float_max_pool"]
    why = ("Vela placed every operator on the CPU: MAX_POOL_2D on float32 tensors, which the NPU "
           "does not take; quantize the model to int8/int16 and compile it again")
    with pytest.raises(VelaImportError) as e:
        read_vela(out)
    assert str(e.value) == f"{out}: a TFLite model with no NPU operator ({why})"
    assert main(["disasm", str(out)]) == 2
    assert capsys.readouterr().err == (f"accelstub: error: {out}: a TFLite model with no NPU "
                                       f"operator, so no command stream ({why})\n")
    src = tmp_path / "float_max_pool.tflite"  # the same model before Vela
    src.write_bytes(build("float_max_pool"))
    with pytest.raises(VelaImportError) as e:
        read_vela(src)
    assert str(e.value) == (f"{src}: a TFLite model with no NPU operator (not compiled by Vela, "
                            "and its float32 tensors would stay on the CPU: quantize the model "
                            "to int8/int16, then compile it with vela)")


@needs_vela
def test_an_input_of_another_type_is_refused_naming_both_types(compiled, tmp_path, capsys):
    """A float array (not quantized) or a uint8 one for an int8 input is refused, even when its
    values would fit; an integer array of the same signedness is taken when its values fit."""
    _, out = compiled("add")
    dev = open_device("ethos-u85")
    xs = sample_inputs("add")
    cases = [(xs[0].astype(np.float32), "float32: quantize it with the model's input scale and "
              "zero point"),
             (np.clip(xs[0], 0, None).astype(np.uint8), "uint8: give an array of type int8"),
             (np.full(xs[0].shape, 300, np.int32), "int32 with values outside int8's range "
              "-128..127 (300..300)")]
    for x, why in cases:
        with pytest.raises(VelaImportError) as e:
            load_vela_program(dev, out, [x, xs[1]])
        assert str(e.value) == f"{out}: input 'a' is int8, the given array is {why}"
    np.savez(tmp_path / "in.npz", a=xs[0].astype(np.float32), b=xs[1])
    assert main(["run", "ethos-u85", "--program", str(out), "--input",
                 str(tmp_path / "in.npz")]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"accelstub: error: {out}: input 'a' is int8, the given array is {cases[0][1]}")
    prog = load_vela_program(dev, out, [x.astype(np.int16) for x in xs])
    assert prog.inputs[0].dtype == np.int8


@needs_flatbuffers
def test_truncated_flatbuffer(tmp_path):
    p = tmp_path / "cut_vela.tflite"
    p.write_bytes(build("conv")[:200])
    with pytest.raises(VelaImportError, match=r"cut_vela\.tflite: corrupt TFLite flatbuffer"):
        read_vela(p)


def _payload(*words: int) -> bytes:
    return np.asarray(words, dtype="<u4").tobytes()


def test_payload_parsing():
    stop = 0xFFFF0000
    ok = _payload(COP1, 0x00100001, 0x20000118, 0x20007000, 5, 5, 5, 0x00010002, stop)
    assert parse_payload(ok, "f") == (32, 1, (0x20000118, 0x20007000))
    with pytest.raises(VelaImportError, match="f: custom operator payload does not start with "
                       "'COP1'"):
        parse_payload(_payload(0, 0x00010002, stop), "f")
    with pytest.raises(VelaImportError, match="f: COMMAND_STREAM record at word 1 says 2 words "
                       "but only 1 follow"):
        parse_payload(_payload(COP1, 0x00020002, stop), "f")
    with pytest.raises(VelaImportError, match="not 16-byte aligned"):
        parse_payload(_payload(COP1, 0x00010002, stop), "f")
    with pytest.raises(VelaImportError, match="unsupported driver action 9 at word 1"):
        parse_payload(_payload(COP1, 9), "f")
    with pytest.raises(VelaImportError, match="no COMMAND_STREAM record"):
        parse_payload(_payload(COP1, 5), "f")
    # the length's high bits ride in the tag's reserved byte
    big = _payload(COP1, 5, 5, 0x00000102) + bytes(4 * 0x10000)
    assert parse_payload(big, "f") == (16, 0x10000, None)


@needs_flatbuffers
def test_generator_is_deterministic_and_complete():
    assert len(MODELS) >= 9
    for name in MODELS:
        a, b = build(name), build(name)
        assert a == b and a[4:8] == b"TFL3", name
        xs = sample_inputs(a)
        assert all(x.dtype in (np.int8, np.int16) for x in xs)
    with pytest.raises(KeyError, match="unknown model 'nope'"):
        build("nope")
