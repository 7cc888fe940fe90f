"""Issue 27, the Ethos-U85 reference: the model before Vela run by LiteRT's reference kernels,
each NPU operation paired with its TFLite tensor through Vela's debug database
(devices/ethos_u85/framework_reference.py), on whole networks the project builds
(testkit/ethosu85_networks.py) compiled by Vela 5.2 for ethos-u85-256.

The comparison here is written in the test (step one unit, read its declared output, compare
with the reference, apply ``explain``), so the references are checked on their own; the
end-to-end test goes through ``accelstub diff``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from accelstub.devices.layer_diff import ReferenceFileError
from accelstub.testkit.ethosu85_models import compile_with_vela, sample_inputs
from accelstub.testkit.ethosu85_networks import build_network
from tests.ethos_u85.test_ethosu85_vela import needs_litert, needs_vela

pytestmark = [pytest.mark.slow, needs_vela, needs_litert]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """(model before Vela, Vela's output with its debug database), compiled once per module;
    ``patch`` names a variant whose model bytes are changed before Vela compiles it."""
    root = tmp_path_factory.mktemp("ethosu85_diff")
    cache: dict[tuple, tuple[Path, Path]] = {}

    def get(name: str, patch=None, debug_db: bool = True) -> tuple[Path, Path]:
        key = (name, patch and patch.__name__, debug_db)
        if key not in cache:
            src = root / f"{name}.tflite"
            if not src.exists():
                src.write_bytes(build_network(name))
            model = src
            if patch is not None or not debug_db:
                d = root / f"{patch.__name__ if patch else 'nodb'}"
                d.mkdir(exist_ok=True)
                model = d / src.name
                model.write_bytes(patch(src.read_bytes()) if patch else src.read_bytes())
            cache[key] = src, compile_with_vela(model, model.parent / "out", macs=256,
                                                debug_db=debug_db)
        return cache[key]
    return get


def load(program: Path, src: Path):
    from accelstub.devices import open_device
    from accelstub.devices.ethos_u85.vela import load_vela_program
    from accelstub.devices.tensors import read_tensor

    dev = open_device("ethos-u85", macs=256)
    load_vela_program(dev, program, sample_inputs(src.read_bytes()))
    inputs = [read_tensor(s, dev.read) for s in dev.program_io()[0]]
    return dev, inputs


def compare(dev, refs) -> list[tuple[int, str, int, int]]:
    """Run the program one unit at a time; for each referenced unit (unit, TFLite name,
    differing elements, of them explained by the reference's rule)."""
    from accelstub.devices.runcontrol import RunControl
    from accelstub.devices.tensors import read_tensor

    by_unit = {r.unit: r for r in refs}
    rc = RunControl(dev)
    out = []
    for i in range(len(dev.units())):
        rc.step(300)
        r = by_unit.get(i)
        if r is None:
            continue
        spec = next(s for s in dev.unit_tensors(i) if s.name == r.tensor)
        got = read_tensor(spec, dev.read)
        assert got.shape == r.array.shape and got.dtype == r.array.dtype
        diff = got != r.array
        explained = r.explain(got, r.array) & diff if r.explain is not None else diff & False
        out.append((i, r.name, int(diff.sum()), int(explained.sum())))
    return out


def first_divergence(rows) -> int | None:
    return next((u for u, _, d, e in rows if d > e), None)


#: TFLite tensors with no NPU output in memory, per network (Vela 5.2, ethos-u85-256)
NO_COUNTERPART = {
    "resnet8_logits": {"resnet8_logits.conv2.out", "resnet8_logits.conv5.out",
                       "resnet8_logits.conv9.out", "resnet8_logits.reshape13.out"},
    "ds_cnn": {"ds_cnn.reshape10.out"},
    "mobilenet_v1_025": set(),
    # the linear bottleneck's projection, chained into the residual ADD
    "mobilenet_v2_035": {f"mobilenet_v2_035.conv{k}.out"
                         for k in (8, 15, 19, 26, 30, 34, 41, 45, 52, 56)},
    "autoencoder": set(),
}


@pytest.mark.parametrize("name", sorted(NO_COUNTERPART))
def test_clean_network_no_divergence(compiled, name):
    """Every NPU operation whose output is a tensor of the model before Vela is paired with it
    (fused activations, convolutions chained into an ADD, MEAN and SOFTMAX lowered into several
    operations, an operation split in two), and the device's output equals LiteRT's
    everywhere, or differs only where a rule explains it (the autoencoder's near-ties)."""
    from accelstub.devices.ethos_u85.vela import read_tflite

    src, prog = compiled(name)
    dev, inputs = load(prog, src)
    refs = dev.layer_references(src, inputs)
    rows = compare(dev, refs)
    assert first_divergence(rows) is None, rows
    model = read_tflite(src.read_bytes())
    produced = {model.tensors[t].name for op in model.operators for t in op.outputs}
    names = {r.name for r in refs}
    assert names <= produced
    # every operator's output has a counterpart but where Vela leaves it no NPU output in
    # memory: a RESHAPE (no operation) and a convolution chained into an ADD (chaining FIFO)
    assert produced - names == NO_COUNTERPART[name]
    assert model.tensors[model.outputs[0]].name in names  # the graph output is compared
    assert len({r.unit for r in refs}) == len(refs)


def test_mapping_facts_lowered_and_split(compiled):
    """MEAN (a depthwise chained into a 32-bit mul) compares at the mul, SOFTMAX (~28
    operations writing Vela's own tensors) at its last operation; DS-CNN's first convolution,
    which Vela splits into two depth slices (16 + 48 channels), compares each slice."""
    src, prog = compiled("mobilenet_v1_025")
    dev, inputs = load(prog, src)
    refs = {r.name: r for r in dev.layer_references(src, inputs)}
    units = dev.units()
    mean = refs["mobilenet_v1_025.mean27.out"]
    assert "ELEMENTWISE" in units[mean.unit].summary and "mul" in units[mean.unit].summary
    assert "DEPTHWISE" in units[mean.unit - 1].summary  # the chained half has no counterpart
    soft = refs["mobilenet_v1_025.softmax29.out"]
    assert all(r.unit < soft.unit for r in refs.values() if r is not soft)
    assert units[soft.unit + 1].summary.startswith("STOP") and soft.array.shape == (1, 1, 1, 2)
    internal = [u for u in units[refs["mobilenet_v1_025.fc28.out"].unit + 1:soft.unit]
                if "ELEMENTWISE" in u.summary or "POOL" in u.summary]
    assert len(internal) > 20  # the lowered softmax's own operations: no counterpart

    src, prog = compiled("ds_cnn")
    dev, inputs = load(prog, src)
    parts = [r for r in dev.layer_references(src, inputs) if r.name == "ds_cnn.conv0.out"]
    assert [r.array.shape[-1] for r in parts] == [16, 48]


def test_rounding_tie_is_explained(compiled):
    """DS-CNN's head (FULLY_CONNECTED) meets a near-tie: LiteRT's reference kernel rounds once,
    the NPU twice [U85-TRM: §3.6.6]. That element is reported as explained by the rounding rule,
    the only difference in the network, and not as a divergence."""
    src, prog = compiled("ds_cnn_logits")
    dev, inputs = load(prog, src)
    refs = dev.layer_references(src, inputs)
    rows = compare(dev, refs)
    assert first_divergence(rows) is None
    differing = [(name, d, e) for _, name, d, e in rows if d]
    assert differing == [("ds_cnn_logits.fc11.out", 1, 1)]
    head = next(r for r in refs if r.name == "ds_cnn_logits.fc11.out")
    assert "double rounding" in head.rule and "[U85-TRM: §3.6.6]" in head.rule


def test_differences_carried_downstream_are_explained(compiled):
    """The autoencoder meets a near-tie in fc1; its one-element difference is carried through
    eight more FULLY_CONNECTED layers (recomputed from the device's own input with double
    rounding) and the softmax (LiteRT's kernel run alone on the device's input): hundreds of
    differing elements, every one explained by a named rule, none hidden, no divergence."""
    src, prog = compiled("autoencoder")
    dev, inputs = load(prog, src)
    refs = dev.layer_references(src, inputs)
    rows = compare(dev, refs)
    assert first_divergence(rows) is None, rows
    differing = {name: d for _, name, d, e in rows if d}
    assert next(iter(differing)) == "autoencoder.fc1.out" and differing["autoencoder.fc1.out"] == 1
    assert sum(differing.values()) > 100 and "autoencoder.softmax10.out" in differing
    rules = {r.name: r.rule for r in refs}
    assert rules["autoencoder.fc1.out"].startswith("double rounding")
    assert rules["autoencoder.softmax10.out"].startswith("carried")


def corrupt_fc6_bias(data: bytes) -> bytes:
    """autoencoder fc6 (downstream of the carried rounding differences): one bias moved."""
    def bump(a):
        a[7] += 1 << 12
    return _patch_buffer(data, "autoencoder.fc6.out", 2, bump)


def test_corruption_found_among_carried_differences(compiled):
    """With explained differences already in its input, a corrupted bias of fc6 is still the
    first divergence: the rule recomputes the layer from the device's input with the model's
    bias, which the device no longer has."""
    src, _ = compiled("autoencoder")
    _, prog = compiled("autoencoder", corrupt_fc6_bias)
    dev, inputs = load(prog, src)
    rows = compare(dev, dev.layer_references(src, inputs))
    first = first_divergence(rows)
    assert first is not None
    assert next(n for u, n, _, _ in rows if u == first) == "autoencoder.fc6.out"
    assert any(d for u, _, d, _ in rows if u < first)  # explained differences before it


def test_explain_is_precise(compiled):
    """The rule explains only elements the device computes with double rounding: the same
    element one further off is not explained, nor is the reference's own value."""
    src, prog = compiled("ds_cnn_logits")
    dev, inputs = load(prog, src)
    head = next(r for r in dev.layer_references(src, inputs)
                if r.name == "ds_cnn_logits.fc11.out")
    ref = head.array
    assert not head.explain(ref.copy(), ref).any()
    for delta in (-1, 1):
        moved = ref.copy()
        moved[..., 5] += delta
        mask = head.explain(moved, ref)
        assert mask.sum() <= 1 and not mask[..., :5].any() and not mask[..., 6:].any()
    explained = [d for d in (-1, 1) if head.explain(_moved(ref, 5, d), ref)[..., 5].all()]
    assert len(explained) == 1  # exactly one direction is the double-rounded value
    assert not head.explain(_moved(ref, 5, 2 * explained[0]), ref).any()


def _moved(a: np.ndarray, i: int, d: int) -> np.ndarray:
    b = a.copy()
    b[..., i] += d
    return b


def _patch_buffer(data: bytes, name: str, slot: int, change) -> bytes:
    """The model bytes with one constant of tensor ``name`` (input ``slot`` of the operator
    producing it: 1 weights, 2 bias) changed by ``change(array)`` in place."""
    from accelstub.devices.ethos_u85.vela import read_tflite

    m = read_tflite(data)
    op = next(o for o in m.operators if m.tensors[o.outputs[0]].name == name)
    t = m.tensors[op.inputs[slot]]
    old = m.buffers[t.buffer]
    assert data.count(old) == 1
    a = np.frombuffer(old, t.dtype).copy()
    change(a)
    return data.replace(old, a.tobytes())


def corrupt_weight(data: bytes) -> bytes:
    """resnet8_logits conv4 (the second block's first convolution): its largest weight negated."""
    def flip(a):
        i = int(np.argmax(np.abs(a)))
        a[i] = -a[i]
    return _patch_buffer(data, "resnet8_logits.conv4.out", 1, flip)


def corrupt_bias(data: bytes) -> bytes:
    """resnet8_logits conv4: bias of channel 3 moved by a large amount."""
    def bump(a):
        a[3] += 1 << 14
    return _patch_buffer(data, "resnet8_logits.conv4.out", 2, bump)


@pytest.mark.parametrize("patch", [corrupt_weight, corrupt_bias])
def test_corrupted_layer_is_first_divergence(compiled, patch):
    """A program compiled from the model with one weight or bias of conv4 changed, compared
    with the original model: the first unit whose output diverges is conv4's."""
    src, _ = compiled("resnet8_logits")
    _, prog = compiled("resnet8_logits", patch)
    dev, inputs = load(prog, src)
    refs = dev.layer_references(src, inputs)
    rows = compare(dev, refs)
    first = first_divergence(rows)
    assert first is not None
    assert next(n for u, n, _, _ in rows if u == first) == "resnet8_logits.conv4.out"
    assert all(d == 0 for u, _, d, _ in rows if u < first)


def test_layers_after_a_divergence_are_carried(compiled):
    """After conv4's corrupted bias, layers whose every input the comparison saw are
    recomputed from the device's inputs -- conv8 and conv10 and the pool by LiteRT's own
    kernel run on that operator alone, the head by the FULLY_CONNECTED integer rule (its
    input through the RESHAPE) -- and every difference there is explained as carried. add7
    reads conv5's output from the chaining FIFO, which no comparison sees: it stays a
    divergence."""
    src, _ = compiled("resnet8_logits")
    _, prog = compiled("resnet8_logits", corrupt_bias)
    dev, inputs = load(prog, src)
    refs = dev.layer_references(src, inputs)
    rows = {n: (d, e) for _, n, d, e in compare(dev, refs)}
    rule = {r.name: r.rule for r in refs}
    for name in ("conv8", "conv10", "pool12"):
        d, e = rows[f"resnet8_logits.{name}.out"]
        assert d > 0 and e == d, (name, d, e)
        assert rule[f"resnet8_logits.{name}.out"].startswith("carried")
    d, e = rows["resnet8_logits.fc14.out"]
    assert d > 0 and e == d and rule["resnet8_logits.fc14.out"].startswith("double rounding")
    d, e = rows["resnet8_logits.add7.out"]
    assert e < d


def test_reference_errors(compiled, tmp_path):
    """One line naming the file: not a .tflite, Vela's own output, another network's model,
    a missing file, a debug database of another compilation, no program loaded, and a
    program compiled without the debug database."""
    src, prog = compiled("resnet8_logits")
    dev, inputs = load(prog, src)
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"\0" * 64)
    with pytest.raises(ReferenceFileError, match=r"junk\.tflite: not a TFLite flatbuffer"):
        dev.layer_references(junk, inputs)
    with pytest.raises(ReferenceFileError, match=r"_vela\.tflite: this is Vela's output"):
        dev.layer_references(prog, inputs)
    other, _ = compiled("ds_cnn_logits")
    with pytest.raises(ReferenceFileError,
                       match=r"ds_cnn_logits\.tflite: input .* is not the loaded program's"):
        dev.layer_references(other, inputs)
    with pytest.raises(ReferenceFileError, match="no such file|cannot read"):
        dev.layer_references(tmp_path / "missing.tflite", inputs)
    _, alien = compiled("ds_cnn_logits")
    (tmp_path / "resnet8_logits_vela.tflite").write_bytes(prog.read_bytes())
    (tmp_path / "resnet8_logits_debug.xml").write_bytes(
        alien.with_name("ds_cnn_logits_debug.xml").read_bytes())
    dev2, inputs2 = load(tmp_path / "resnet8_logits_vela.tflite", src)
    with pytest.raises(ReferenceFileError, match=r"resnet8_logits_debug\.xml: Vela's debug "
                                                 r"database names an NPU operation .* another "
                                                 r"compilation"):
        dev2.layer_references(src, inputs2)
    from accelstub.devices import open_device
    with pytest.raises(ReferenceFileError, match=r"resnet8_logits\.tflite: no Vela program is "
                                                 r"loaded"):
        open_device("ethos-u85", macs=256).layer_references(src, [])
    _, bare = compiled("resnet8_logits", debug_db=False)
    dev, inputs = load(bare, src)
    with pytest.raises(ReferenceFileError, match=r"resnet8_logits_debug\.xml: cannot read .*"
                                           r"--enable-debug-db"):
        dev.layer_references(src, inputs)


def test_other_files_go_to_the_generic_reader(compiled, tmp_path):
    """A reference that is not a .tflite is the generic .npz (Device.layer_references):
    keyed by unit index, compared as given."""
    src, prog = compiled("resnet8_logits")
    dev, inputs = load(prog, src)
    conv0 = next(r for r in dev.layer_references(src, inputs)
                 if r.name == "resnet8_logits.conv0.out")
    np.savez(tmp_path / "ref.npz", **{str(conv0.unit): conv0.array})
    (ref,) = dev.layer_references(tmp_path / "ref.npz", inputs)
    assert ref.unit == conv0.unit and np.array_equal(ref.array, conv0.array)


def _cli_diff(capsys, program: Path, reference: Path, *extra: str) -> tuple[int, list[str]]:
    from accelstub.stub.cli import main

    code = main(["diff", "ethos-u85", "--program", str(program), "--reference", str(reference),
                 *extra])
    return code, capsys.readouterr().out.splitlines()


def test_accelstub_diff_end_to_end(compiled, capsys, tmp_path):
    """``accelstub diff ethos-u85 --program compiled.tflite --reference model.tflite``: exit 0
    on the clean program, every compared command's line naming its TFLite tensor; exit 1 on
    the program with conv4's bias corrupted, the first divergence at conv4's command."""
    src, prog = compiled("resnet8_logits")
    dev, inputs = load(prog, src)
    refs = dev.layer_references(src, inputs)
    np.save(tmp_path / "x.npy", sample_inputs(src.read_bytes())[0])
    x = ["--input", str(tmp_path / "x.npy")]
    code, lines = _cli_diff(capsys, prog, src, *x)
    assert code == 0, lines
    rows = [ln for ln in lines if " ref '" in ln]
    assert len(rows) == len(refs)
    for r, ln in zip(refs, rows):
        assert ln.split()[0] == str(r.unit) and f"ref '{r.name}'" in ln and ln.endswith("equal")

    _, bad = compiled("resnet8_logits", corrupt_bias)
    code, lines = _cli_diff(capsys, bad, src, *x)
    assert code == 1, lines
    diverging = [ln for ln in lines if ln.endswith("DIVERGES")]
    conv4 = next(r.unit for r in refs if r.name == "resnet8_logits.conv4.out")
    assert diverging[0].split()[0] == str(conv4)
    assert "ref 'resnet8_logits.conv4.out'" in diverging[0]


def test_accelstub_diff_explained_tie(compiled, capsys, tmp_path):
    """The DS-CNN head's rounding near-tie through ``accelstub diff``: exit 0, and the line of
    the head reports the difference (not hidden) with the rounding rule, not as a divergence."""
    src, prog = compiled("ds_cnn_logits")
    np.save(tmp_path / "x.npy", sample_inputs(src.read_bytes())[0])
    code, lines = _cli_diff(capsys, prog, src, "--input", str(tmp_path / "x.npy"))
    assert code == 0, lines
    head = next(ln for ln in lines if "ref 'ds_cnn_logits.fc11.out'" in ln)
    assert "DIVERGES" not in head and not head.endswith("equal"), head
    assert "double rounding" in "\n".join(lines)


def test_accelstub_diff_on_the_bundled_demo(capsys):
    """The bundled demo ships its model before Vela and Vela's debug database
    (configs/demo/ethos-u85_demo/demo_debug.xml, testkit/ethosu85_demo.py): ``accelstub diff
    ethos-u85 --reference demo.tflite`` on it pairs every NPU operation that writes a tensor of
    the model and finds no divergence."""
    from accelstub.stub.cli import demo_program

    demo = demo_program("ethos-u85")
    code, lines = _cli_diff(capsys, demo / "demo_vela.tflite", demo / "demo.tflite",
                            "--input", str(demo / "input.npy"))
    assert code == 0, lines
    rows = [ln for ln in lines if " ref '" in ln]
    assert len(rows) >= 6 and all("DIVERGES" not in ln for ln in rows), lines
    assert any("ref 'demo." in ln for ln in rows)
    assert lines[-1].endswith("no divergence"), lines
