"""Issue 27 on Ethos-U85 programs Vela leaves partly on the CPU: the per-layer diff maps every
unit -- each command stream's NPU operations through the one debug database (stream number +
offset in that stream) and each CPU operator by its output tensor's TFLite name -- and a
reference defect (LiteRT's int8 SUM) is reported by a rule of its own.

Models: testkit/ethosu85_cpu_models.py (layernorm_neg: NPU, CPU x3, NPU; encoder: 3 streams,
6 CPU operators) and testkit/ethosu85_operators.py (SUM, SUM_HW), compiled here by Vela 5.2
for ethos-u85-256 with --enable-debug-db. The program runs as ``accelstub diff`` runs it (the
host program starts each stream and runs each CPU operator).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from accelstub.devices.layer_diff import LayerReference, ReferenceFileError, compare
from accelstub.devices.tensors import TensorSpec
from tests.ethos_u85.test_ethosu85_vela import needs_litert, needs_vela


def vela_test(fn):
    """A test that compiles with Vela and runs LiteRT (slow)."""
    for mark in (pytest.mark.slow, needs_vela, needs_litert):
        fn = mark(fn)
    return fn


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """get(name, patch=None) -> (model before Vela, Vela's output with its debug database,
    the input .npy); ``patch`` changes the model bytes before Vela compiles them."""
    from accelstub.testkit import ethosu85_cpu_models as cpu_models
    from accelstub.testkit.ethosu85_models import compile_with_vela, sample_inputs
    from accelstub.testkit.ethosu85_operators import build_operator

    root = tmp_path_factory.mktemp("ethosu85_diff_cpu")
    cache: dict = {}

    def get(name: str, patch=None) -> tuple[Path, Path, Path]:
        key = (name, patch and patch.__name__)
        if key not in cache:
            src = root / f"{name}.tflite"
            if not src.exists():
                src.write_bytes(cpu_models.build(name) if name in cpu_models.MODELS
                                else build_operator(name))
                np.save(root / f"{name}_x.npy", sample_inputs(src.read_bytes())[0])
            d = root / (patch.__name__ if patch else "clean")
            d.mkdir(exist_ok=True)
            model = d / src.name
            model.write_bytes(patch(src.read_bytes()) if patch else src.read_bytes())
            cache[key] = src, compile_with_vela(model, d / "out", 256, cpu_operators=True,
                                                debug_db=True), root / f"{name}_x.npy"
        return cache[key]
    return get


def run_diff(program: Path, src: Path, x: Path):
    """(device, references, differ) after running the whole program with the diff attached
    (no stop at a divergence), as ``accelstub diff --all`` does."""
    from accelstub.devices import open_device
    from accelstub.devices.device import ProgramOptions
    from accelstub.devices.layer_diff import start_diff
    from accelstub.devices.runcontrol import RunControl
    from accelstub.stub.commands import CommandContext
    from accelstub.stub.program import load_program

    rc = RunControl(open_device("ethos-u85", macs=256))
    load_program(CommandContext(targets=[rc]), program, ProgramOptions(input=str(x)))
    differ = start_diff(rc, src, stop=False)
    refs = [r for rs in differ.by_unit.values() for r in rs]
    stop = rc.run_here()
    differ.detach()
    assert stop.reason == "done", stop
    return rc.device, refs, differ


def produced_names(src: Path) -> set[str]:
    from accelstub.devices.ethos_u85.vela import read_tflite

    m = read_tflite(src.read_bytes())
    return {m.tensors[t].name for op in m.operators for t in op.outputs}


def _patch_buffer(data: bytes, name: str, slot: int, change) -> bytes:
    from tests.ethos_u85.test_ethosu85_diff_reference import _patch_buffer as patch
    return patch(data, name, slot, change)


def encoder_fc6_weight(data: bytes) -> bytes:
    """encoder fc6 (second stream, after three CPU operators): its largest weight negated."""
    def flip(a):
        i = int(np.argmax(np.abs(a)))
        a[i] = -a[i]
    return _patch_buffer(data, "encoder.fc6.out", 1, flip)


def encoder_fc6_bias(data: bytes) -> bytes:
    """encoder fc6: the bias of channel 3 moved by a large amount."""
    def bump(a):
        a[3] += 1 << 14
    return _patch_buffer(data, "encoder.fc6.out", 2, bump)


def layernorm_conv4_bias(data: bytes) -> bytes:
    """layernorm_neg conv4 (the second stream): the bias of channel 5 moved."""
    def bump(a):
        a[5] += 1 << 14
    return _patch_buffer(data, "layernorm_neg.conv4.out", 2, bump)


@vela_test
@pytest.mark.parametrize("name", ["layernorm_neg", "encoder", "l2norm"])
def test_every_unit_mapped_and_clean(compiled, name):
    """Every operator's output of the model before Vela is paired with a unit -- NPU
    operations of every stream (not only the first) and every CPU operator (float tensors
    as float32) -- and the clean program has no unexplained divergence at any of them; each
    CPU operator's pc names its own unit (the diff finds the unit that ran by it)."""
    src, prog, x = compiled(name)
    dev, refs, differ = run_diff(prog, src, x)
    assert {r.name for r in refs} == produced_names(src)
    units = dev.units()
    labels = {r.unit: units[r.unit].label for r in refs}
    assert any(v.startswith("cpu") for v in labels.values())
    first_stream_end = next(i for i, u in enumerate(units) if u.label.startswith("cpu"))
    assert any(u > first_stream_end and labels[u].startswith("cmd") for u in labels)
    for i, u in enumerate(units):
        if u.label.startswith("cpu"):
            assert dev.window_index(u.address) == i
    if name != "l2norm":
        assert any(r.array.dtype == np.float32 for r in refs)
    assert sorted(d.index for d in differ.results) == sorted(r.unit for r in refs)
    assert differ.first_divergence is None, differ.table()


@vela_test
def test_diff_loaded_after_the_first_stream(compiled):
    """``monitor diff load`` once the program has moved past its first stream (QBASE is then
    a later stream's, or the pc a CPU operator's): the reference still maps every unit, and
    the units still to run compare with no divergence."""
    from accelstub.devices import open_device
    from accelstub.devices.device import ProgramOptions
    from accelstub.devices.layer_diff import start_diff
    from accelstub.devices.runcontrol import RunControl
    from accelstub.stub.commands import CommandContext
    from accelstub.stub.program import load_program

    src, prog, x = compiled("encoder")
    rc = RunControl(open_device("ethos-u85", macs=256))
    load_program(CommandContext(targets=[rc]), prog, ProgramOptions(input=str(x)))
    first_qbase = rc.device.qbase
    while next(u.label for u in rc.device.units() if u.address == rc.device.pc) != "cmd 5":
        rc.step(300)
    assert rc.device.qbase != first_qbase  # the second stream is running
    differ = start_diff(rc, src, stop=False)
    assert {r.name for rs in differ.by_unit.values() for r in rs} == produced_names(src)
    assert rc.run_here().reason == "done"
    differ.detach()
    assert differ.results and min(d.index for d in differ.results) == 5
    assert differ.first_divergence is None, differ.table()


@vela_test
def test_encoder_near_ties_explained_across_streams(compiled):
    """encoder: fc5 (second stream) has a FULLY_CONNECTED near-tie, reported and explained by
    the rounding rule; the one value it moves is carried through fc6 (rounding rule on the
    device's input) and the CPU's DEQUANTIZE and NEG (float32, compared exactly, explained
    as carried: LiteRT's own kernel on the device's input)."""
    src, prog, x = compiled("encoder")
    _, _, differ = run_diff(prog, src, x)
    rows = {d.reference: d for d in differ.results}
    assert rows["encoder.fc5.out"].differing == rows["encoder.fc5.out"].explained == 1
    assert rows["encoder.fc5.out"].rule.startswith("double rounding")
    for name in ("encoder.dequantize7.out", "encoder.neg8.out"):
        d = rows[name]
        assert d.differing == d.explained == 1 and d.rule.startswith("carried"), d.line()
        assert isinstance(d.max_abs_diff, float) and 0 < d.max_abs_diff < 1


@vela_test
@pytest.mark.parametrize("patch,name", [(encoder_fc6_weight, "encoder"),
                                        (encoder_fc6_bias, "encoder"),
                                        (layernorm_conv4_bias, "layernorm_neg")])
def test_corruption_in_a_later_stream_is_first_divergence(compiled, patch, name):
    """A program compiled from the model with one weight or bias of an operation in a later
    stream changed, compared with the original model: the first unit that diverges is that
    operation's, after the CPU operators of the earlier streams compared equal."""
    src, _, x = compiled(name)
    _, prog, _ = compiled(name, patch)
    target = {"encoder": "encoder.fc6.out", "layernorm_neg": "layernorm_neg.conv4.out"}[name]
    _, _, differ = run_diff(prog, src, x)
    first = differ.first_divergence
    assert first is not None
    row = next(d for d in differ.results if d.index == first)
    assert row.reference == target and row.label.startswith("cmd")
    earlier_cpu = [d for d in differ.results if d.index < first and d.label.startswith("cpu")]
    assert earlier_cpu and all(not d.diverges for d in differ.results if d.index < first)


def _cli_diff(capsys, program: Path, reference: Path, x: Path) -> tuple[int, list[str]]:
    from accelstub.stub.cli import main

    code = main(["diff", "ethos-u85", "--program", str(program), "--reference", str(reference),
                 "--input", str(x)])
    return code, capsys.readouterr().out.splitlines()


@vela_test
def test_accelstub_diff_end_to_end(compiled, capsys):
    """``accelstub diff ethos-u85 --program encoder_vela.tflite --reference encoder.tflite``:
    exit 0 on the clean program, a line for every operator of the model (CPU operators
    "cpu k"); exit 1 on the program with fc6's bias corrupted, stopping at fc6's command."""
    src, prog, x = compiled("encoder")
    code, lines = _cli_diff(capsys, prog, src, x)
    assert code == 0, lines
    rows = [ln for ln in lines if " ref '" in ln]
    assert len(rows) == len(produced_names(src))
    assert sum(ln.split()[1] == "cpu" for ln in rows) == 6
    assert lines[-1].endswith("no divergence")

    _, bad, _ = compiled("encoder", encoder_fc6_bias)
    code, lines = _cli_diff(capsys, bad, src, x)
    assert code == 1, lines
    diverging = [ln for ln in lines if ln.endswith("DIVERGES")]
    assert len(diverging) == 1 and "ref 'encoder.fc6.out'" in diverging[0]


@vela_test
def test_debug_database_of_several_streams(compiled, tmp_path):
    """Vela 5.2.0 writes one debug database for all the streams, each queue offset relative to
    its own stream (encoder's two residual ADDs, in streams 2 and 3, are both at one offset);
    a database of another compilation is refused in one line naming it."""
    from accelstub.devices import open_device
    from accelstub.devices.ethos_u85.framework_reference import (
        debug_db_path,
        read_debug_db,
    )
    from accelstub.devices.ethos_u85.vela import load_vela_program
    from accelstub.devices.layer_diff import input_tensors

    _, prog, _ = compiled("encoder")
    names, streams = read_debug_db(debug_db_path(prog))
    assert streams == 3
    adds = {k: v for k, v in names.items() if v.startswith("encoder.add")}
    assert {s for s, _ in adds} == {1, 2} and len({off for _, off in adds}) == 1

    other, oprog, ox = compiled("layernorm_neg")
    fake = tmp_path / oprog.name
    fake.write_bytes(oprog.read_bytes())
    debug_db_path(fake).write_bytes(debug_db_path(prog).read_bytes())
    dev = open_device("ethos-u85", macs=256)
    load_vela_program(dev, fake, [np.load(ox)])
    with pytest.raises(ReferenceFileError) as e:
        dev.layer_references(other, input_tensors(dev))
    msg = str(e.value)
    assert "\n" not in msg and str(debug_db_path(fake)) in msg
    assert "names 3 command stream(s), the loaded program has 2" in msg


# --- point 2: a reference defect (LiteRT's int8 SUM) ----------------------------------------

@vela_test
def test_sum_reference_defect_explained_exactly(compiled):
    """SUM over W: LiteRT's reference reads int8 as uint8 (LiteRT issue 4079). The diff
    reports the differences as explained by a rule that names a reference defect (not a
    hardware rule), and the explained mask is exact: the reference equals LiteRT's wrong
    answer recomputed (tests' litert_ref_sum_int8) and the device equals the NPU's rescale of
    the true sum with the OFM_SCALE Vela wrote in the stream (npu_sum); moving one device
    value by 1 leaves that element unexplained."""
    from tests.ethos_u85.test_ethosu85_operators import litert_ref_sum_int8, npu_sum

    src, prog, x = compiled("SUM")
    _, refs, differ = run_diff(prog, src, x)
    (ref,), (row,) = refs, differ.results
    assert ref.name == "sum.sum0.out" and ref.rule.startswith("reference defect")
    assert "hardware rule" not in ref.rule and "issue 4079" in ref.rule
    assert row.differing > 0 and row.explained == row.differing and not row.diverges

    from accelstub.devices.ethos_u85.vela import read_tflite
    m = read_tflite(src.read_bytes())
    x_t, y_t = m.tensors[m.operators[0].inputs[0]], m.tensors[m.operators[0].outputs[0]]
    xs = np.load(x)
    wrong = litert_ref_sum_int8(xs, (2,), x_t, y_t)
    right, _ = npu_sum(prog, xs.astype(np.int64).sum(axis=2, keepdims=True),
                       int(y_t.zero_point[0]))
    assert np.array_equal(ref.array.ravel(), wrong.ravel())
    dev_values = right.reshape(ref.array.shape)
    mask = ref.explain(dev_values, ref.array)
    assert np.array_equal(mask, dev_values != ref.array)
    i = int(np.argmax(mask.ravel()))
    moved = dev_values.copy()
    moved.ravel()[i] = np.int8(moved.ravel()[i] + (1 if moved.ravel()[i] < 127 else -1))
    assert not ref.explain(moved, ref.array).ravel()[i]


# --- float tensors compare exactly --------------------------------------------------------

def _spec(shape) -> TensorSpec:
    return TensorSpec("output", "NHWC", shape, "float32", (0, 4, 8, 12), (0,), (0,), "test")


def test_float_tensors_compare_exactly():
    """A float32 tensor (a CPU operator's DEQUANTIZE or NEG output) compares as floats, not
    truncated to integers: a difference of one ulp or of 0.3 counts, NaN differs even from
    NaN, and the largest difference is reported as a float."""
    want = np.array([[[[1.0, 2.5, -0.25, 7.0]]]], np.float32)
    got = want.copy()
    got[..., 0] = np.nextafter(np.float32(1.0), np.float32(2.0))
    got[..., 1] = 2.8
    d = compare(LayerReference(0, "t", want), _spec((1, 1, 1, 4)), got, "cpu 0")
    assert d.differing == 2 and d.first_index == (0, 0, 0, 0)
    assert abs(d.max_abs_diff - 0.3) < 1e-6 and d.diverges
    nan = np.full((1, 1, 1, 4), np.nan, np.float32)
    d = compare(LayerReference(0, "t", nan), _spec((1, 1, 1, 4)), nan.copy(), "cpu 0")
    assert d.differing == 4 and d.max_abs_diff == float("inf")
    same = compare(LayerReference(0, "t", want), _spec((1, 1, 1, 4)), want.copy(), "cpu 0")
    assert same.differing == 0 and not same.diverges
