"""The per-layer diff (issue 27, devices/layer_diff.py) on whole networks the project builds, on
every device: a clean program reports no divergence over every referenced unit; a program with
one corrupted weight, bias or shift in unit k reports unit k first. References come from the
independent references of testkit/ (MAX78000's per-layer integer reference as an .npz and as
ai8xize's log.txt; NE16's golden output; NVDLA's trace CRCs) or, for Ethos-U85's generic .npz,
from the emulator's clean run of the same program. Plus the reference readers' one-line
errors, explained differences and the divergence stop of run control."""
from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import numpy as np
import pytest

from accelstub.devices import open_device
from accelstub.devices.device import ProgramOptions
from accelstub.devices.layer_diff import (
    LayerDiffer,
    LayerReference,
    ReferenceFileError,
    compare,
    input_tensors,
    start_diff,
    unit_spec,
)
from accelstub.devices.runcontrol import RunControl
from accelstub.devices.tensors import read_tensor
from accelstub.stub.cli import demo_program
from accelstub.stub.commands import CommandContext
from accelstub.stub.program import load_program
from accelstub.testkit import max78000_build as mb
from accelstub.testkit import ne16_build as eb
from accelstub.testkit import nvdla_build as nb


def _load(device: str, program: Path, options: ProgramOptions = ProgramOptions()) -> RunControl:
    rc = RunControl(open_device(device))
    load_program(CommandContext(targets=[rc]), program, options)
    return rc


def _diff(rc: RunControl, reference: Path, stop: bool = True) -> LayerDiffer:
    differ = start_diff(rc, reference, stop=stop)
    stopped = rc.run_here()
    assert stopped.reason in ("done", "breakpoint"), stopped
    return differ


# -- MAX78000: .npz and log.txt from the independent integer reference ----------------------------
NET = mb.Network(3, 10, 10, [
    mb.Layer(8, activation="relu", shift=-1, bias=True),
    mb.Layer(8, pool="max", pool_size=2, pool_stride=2, activation="relu", shift=-1, bias=True),
    mb.Layer(6, kernel=1, pad=0, shift=-2, bias=True),
    mb.Layer(4, kernel=1, pad=0, wide=True, bias=True)])


@pytest.fixture(scope="module")
def max78000_net(tmp_path_factory):
    root = tmp_path_factory.mktemp("m78")
    x, ws, bs = mb.random_arrays(NET, seed=5)
    proj = mb.build(NET, x, ws, bs)
    proj.write(root / "clean")
    np.savez(root / "ref.npz", **{str(i): o for i, o in enumerate(proj.outputs)})
    (root / "log.txt").write_text(ai8xize_log(proj.outputs))
    return root, x, ws, bs


def ai8xize_log(outputs: list[np.ndarray]) -> str:
    """A log.txt as ai8xize.py --verbose prints each layer (module docstring of
    devices/max78000/ai8x_log.py: the format of ai8x-synthesis' izer/simulate.py), numpy's own
    printing of the arrays: odd layers carry a YAML name in their header (``LAYER 1 (l1)
    (CONV2D)...``), and the software classification layer's section ends the log."""
    parts = []
    with np.printoptions(threshold=np.inf, linewidth=190):
        for k, out in enumerate(outputs):
            c, h, w = out.shape
            full = out if k == len(outputs) - 1 else out * 3  # a FULL-RES block comes first
            name = f"{k} (l{k})" if k % 2 else f"{k}"
            parts += [f"LAYER {name} (CONV2D)...", "", "BIAS SIZE: 8", "",
                      f"{c}x{h}x{w} FULL-RES OUTPUT:", str(full), "",
                      f"{c}x{h}x{w} OUTPUT (NO ACTIVATION):", str(out), ""]
        n = outputs[-1].size
        parts += ["CLASSIFICATION LAYER (LINEAR)...", "", f"INPUT DATA (size {n}):",
                  str(outputs[-1].reshape(-1)), "", "OUTPUT (size 3):", str(np.arange(3) + 99),
                  ""]
    return "\n".join(parts) + "\n"


@pytest.mark.parametrize("reference", ["ref.npz", "log.txt"])
def test_max78000_clean_network_has_no_divergence_over_every_layer(max78000_net, reference):
    root = max78000_net[0]
    differ = _diff(_load("max78000", root / "clean"), root / reference)
    assert [d.index for d in differ.results] == list(range(len(NET.layers)))
    assert differ.first_divergence is None
    assert all(d.differing == 0 for d in differ.results)


def _corrupt(kind: str, k: int, x, ws, bs) -> tuple[mb.Network, list, list]:
    ws = [None if w is None else w.copy() for w in ws]
    bs = [None if b is None else b.copy() for b in bs]
    net = NET
    if kind == "weight":
        ws[k].flat[0] = 127 if ws[k].flat[0] != 127 else -128
    elif kind == "bias":
        bs[k][0] = 127 if bs[k][0] != 127 else -128
    else:
        layers = list(NET.layers)
        layers[k] = dataclasses.replace(layers[k], shift=layers[k].shift + 1)
        net = dataclasses.replace(NET, layers=layers)
    return net, ws, bs


#: (kind, layer): a 32-bit ("wide") layer writes its sums unshifted, so no shift there
CORRUPTIONS = [(kind, k) for kind in ("weight", "bias", "shift") for k in range(len(NET.layers))
               if not (kind == "shift" and NET.layers[k].wide)]


@pytest.mark.parametrize("reference", ["ref.npz", "log.txt"])
@pytest.mark.parametrize("kind, k", CORRUPTIONS)
def test_max78000_corrupted_layer_k_is_reported_first(max78000_net, tmp_path, kind, k,
                                                      reference):
    root, x, ws, bs = max78000_net
    net, ws2, bs2 = _corrupt(kind, k, x, ws, bs)
    mb.build(net, x, ws2, bs2).write(tmp_path / "bad")
    differ = _diff(_load("max78000", tmp_path / "bad"), root / reference)
    assert differ.first_divergence == k
    assert differ.results[-1].index == k  # stopped right after layer k
    bad = differ.results[-1]
    assert bad.diverges and bad.differing > 0 and bad.first_index is not None


def test_all_compares_every_layer_past_the_divergence(max78000_net, tmp_path):
    root, x, ws, bs = max78000_net
    net, ws2, bs2 = _corrupt("weight", 1, x, ws, bs)
    mb.build(net, x, ws2, bs2).write(tmp_path / "bad")
    differ = _diff(_load("max78000", tmp_path / "bad"), root / "ref.npz", stop=False)
    assert [d.index for d in differ.results] == list(range(len(NET.layers)))
    assert differ.first_divergence == 1 and not differ.results[0].diverges


# -- NE16: pulp-nnx's golden output, per job -------------------------------------------------------
LAYER16 = eb.Layer(8, 8, 16, 20, stride=2, padding=(1, 1, 1, 1))  # four jobs (2x2 blocks)


OUTSHIFT16 = eb.build(LAYER16, seed=3).defines["OUTSHIFT"]


@pytest.fixture(scope="module")
def ne16_app(tmp_path_factory):
    root = tmp_path_factory.mktemp("ne16")
    eb.build(LAYER16, seed=3).write(root / "app")
    return root / "app"


def test_ne16_clean_layer_has_no_divergence_over_every_job(ne16_app):
    rc = _load("ne16", ne16_app)
    jobs = len(rc.device.units())
    assert jobs == 4
    differ = _diff(rc, ne16_app)
    assert [d.index for d in differ.results] == list(range(jobs))
    assert differ.first_divergence is None


@pytest.mark.parametrize("k", range(4))
def test_ne16_corrupted_shift_of_job_k_is_reported_first(ne16_app, k):
    rc = RunControl(open_device("ne16"))
    host = rc.device.load_program(ne16_app, ProgramOptions())  # the driver's steps, not run yet
    steps = host.steps
    i = next(i for i, s in enumerate(steps)
             if getattr(s, "where", "").endswith(f"(job {k} of 4): CONFIG0"))
    c0 = int.from_bytes(steps[i].data, "little")
    assert (c0 >> 16) & 0x1F == OUTSHIFT16  # CONFIG0.right_shift, bits 20:16 (job.py)
    c0 = c0 & ~(0x1F << 16) | ((OUTSHIFT16 + 1) & 0x1F) << 16  # job k's shift corrupted
    steps[i] = dataclasses.replace(steps[i], data=c0.to_bytes(4, "little"))
    rc.attach(host)
    differ = _diff(rc, ne16_app)
    assert differ.first_divergence == k


def test_ne16_corrupted_bias_is_reported_at_the_first_job(ne16_app, tmp_path):
    """A channel's bias enters every output element of that channel, and every job writes
    all channels of its block: job 0 is the first to depart from the golden output (which
    the corrupted file still holds: only the bias array is changed)."""
    app = eb.build(LAYER16, seed=3)
    ctype, b, size = app.arrays["bias"]
    b = b.copy()
    b[0] += 1 << 22
    app.arrays["bias"] = (ctype, b, size)
    app.write(tmp_path / "bad")
    differ = _diff(_load("ne16", tmp_path / "bad"), ne16_app)
    assert differ.first_divergence == 0


LAYER_SUBTILES = eb.Layer(8, 8, 16, 40, padding=(1, 1, 1, 1))  # one job, 2x3x3 output subtiles


def test_ne16_diff_names_the_first_differing_output_subtile(tmp_path):
    """The golden output changed at two elements of one job: (h 0, w 0, k 33), in subtile
    Ko 1, Ho 0, Wo 0, and (h 4, w 1, k 2), in Ko 0, Ho 1, Wo 0. Subtiles run Ko > Ho > Wo, 3x3
    pixels by 32 channels (N§3.2), so the first differing subtile is the second element's
    (number (0*3 + 1)*3 + 0 = 3), though the first differing index (HWC) is the first's; the
    line and the JSON name it."""
    app = eb.build(LAYER_SUBTILES, seed=5)
    app.write(tmp_path / "app")
    ctype, g, size = app.arrays["golden_output"]
    g = g.copy()
    h_n, w_n = LAYER_SUBTILES.out_hw
    for h, w, k in ((0, 0, 33), (4, 1, 2)):
        g[(h * w_n + w) * 40 + k] += 1
    app.arrays["golden_output"] = (ctype, g, size)
    app.write(tmp_path / "ref")
    differ = _diff(_load("ne16", tmp_path / "app"), tmp_path / "ref", stop=False)
    (d,) = differ.results
    assert d.differing == 2 and d.first_index == (0, 0, 33)
    assert d.part == "subtile 3 (Ko 0, Ho 1, Wo 0)"
    assert d.line().endswith("first at (0, 0, 33) in subtile 3 (Ko 0, Ho 1, Wo 0)  DIVERGES")
    assert d.as_json()["part"] == "subtile 3 (Ko 0, Ho 1, Wo 0)"
    g[(4 * w_n + 1) * 40 + 2] -= 1  # only the first element left: its own subtile, Ko 1
    app.arrays["golden_output"] = (ctype, g, size)
    app.write(tmp_path / "ref2")
    differ = _diff(_load("ne16", tmp_path / "app"), tmp_path / "ref2", stop=False)
    assert differ.results[0].part == "subtile 9 (Ko 1, Ho 0, Wo 0)"


# -- NVDLA: the trace's per-layer CRCs -------------------------------------------------------------
def _nvdla_trace(root: Path) -> Path:
    t = nb.build([nb.Conv(8, 8, 8, 16), nb.Sdp(chain=True, bs=nb.Stage(alu="sum",
                                                                          alu_operand=3)),
                  nb.Conv(6, 6, 8, 8)], name="diff3")
    return t.write(root / "trace")


def _unique_reads(rc: RunControl) -> dict[int, list[tuple[int, int]]]:
    """Per unit, the ranges it reads that no other unit touches and no declared tensor holds
    (its weights), from a clean run on a copy."""
    reads: dict[int, list] = {}
    rc.add_unit_listener(lambda done: reads.setdefault(done - 1, list(rc.last_touched.reads)))
    assert rc.run_here().reason == "done"
    out = {}
    for k, rs in reads.items():
        others = [r for j, o in reads.items() if j != k for r in o]
        mine = [s for s in rc.device.unit_tensors(k)]
        held = [r for s in mine for r in s.ranges()]
        out[k] = [(a, b) for a, b in rs if b - a >= 8 and not any(
            a < e and s < b for s, e in others + held)]
    return out


def test_nvdla_clean_trace_has_no_divergence_over_every_layer(tmp_path):
    trace = _nvdla_trace(tmp_path)
    rc = _load("nvdla", trace)
    differ = _diff(rc, trace)
    assert [d.index for d in differ.results] == [0, 1, 2]
    assert differ.first_divergence is None and all(d.crc for d in differ.results)


@pytest.mark.parametrize("k", [0, 2])  # the convolutions (layer 1, an SDP, has no weights)
def test_nvdla_corrupted_weights_of_layer_k_are_reported_first(tmp_path, k):
    trace = _nvdla_trace(tmp_path)
    weights = _unique_reads(_load("nvdla", trace))[k]
    assert weights, f"layer {k} reads nothing of its own"
    rc = _load("nvdla", trace)
    differ = start_diff(rc, trace)
    for _ in range(k):  # the trace loads a layer's weights after the layer before it ran
        assert rc.run_here(single=True).reason == "step"
    start, end = max(weights, key=lambda r: r[1] - r[0])
    # the layer's weights inverted: a single weight seldom shows, the random test layers'
    # sums saturate at the int8 output range (cvt 0, 1, 0)
    rc.device.write(start, bytes(v ^ 0xFF for v in rc.device.read(start, end - start)))
    assert rc.run_here().reason == "breakpoint"
    assert differ.first_divergence == k
    assert differ.results[-1].crc[0] != differ.results[-1].crc[1]


def _nvdla_dump_trace(root: Path, corrupt_layer: int | None = None) -> tuple[Path, Path]:
    """(the trace, the same trace with each check_crc replaced by nv_small's per-layer dump,
    ``check_file(SYNC, 1, ADDR, SIZE, "dump_n.dat")``, the layer's expected bytes in mem_load's
    memory-file form); ``corrupt_layer``: that dump's byte 5 changed."""
    from accelstub.testkit.nvdla_build import memory_file

    t = nb.build([nb.Conv(8, 8, 8, 16), nb.Sdp(chain=True, bs=nb.Stage(alu="sum",
                                                                          alu_operand=3)),
                  nb.Conv(6, 6, 8, 8)], name="diff3")
    trace = t.write(root / "trace")
    dumps = root / "dumps"
    dumps.mkdir()
    lines, n = [], 0
    for line in t.cfg:
        if line.startswith("check_crc("):
            sync = line[len("check_crc("):].split(",")[0]
            at, want = t.outputs[n]
            if n == corrupt_layer:
                want = want[:5] + bytes([want[5] ^ 0x10]) + want[6:]
            (dumps / f"dump_{n}.dat").write_text(memory_file(want))
            line = f'check_file({sync}, 1, {at:#x}, {len(want):#x}, "dump_{n}.dat");'
            n += 1
        lines.append(line)
    for f, data in t.files.items():
        (dumps / f).write_text(memory_file(data))
    (dumps / "diff3.cfg").write_text("\n".join(lines) + "\n")
    return trace, dumps


def test_nvdla_per_layer_dumps_are_a_reference(tmp_path):
    """check_file lines (nv_small's per-layer dump form) compare element by element: a clean
    trace has no difference in any layer; one byte changed in layer 2's dump is one differing
    element of layer 2, the first divergence."""
    trace, dumps = _nvdla_dump_trace(tmp_path)
    differ = _diff(_load("nvdla", trace), dumps / "diff3.cfg")
    assert [(d.index, d.differing, d.crc) for d in differ.results] == [(0, 0, None),
                                                                       (1, 0, None),
                                                                       (2, 0, None)]
    assert differ.results[0].reference.startswith("check_file(sync_id_")
    trace, dumps = _nvdla_dump_trace(tmp_path / "bad", corrupt_layer=2)
    differ = _diff(_load("nvdla", trace), dumps / "diff3.cfg", stop=False)
    assert [d.differing for d in differ.results] == [0, 0, 1]
    assert differ.first_divergence == 2 and differ.results[2].max_abs_diff == 16


def test_nvdla_trace_with_check_file_runs_its_checks(tmp_path):
    """A trace whose layers are checked with check_file loads and runs as a program: the
    checks pass on the clean dumps, and the one with a changed byte fails naming its address."""
    from accelstub.stub.program import run_to_end

    _, dumps = _nvdla_dump_trace(tmp_path, corrupt_layer=1)
    outcome = run_to_end(_load("nvdla", dumps))
    text = "\n".join(outcome.lines)
    assert text.count(": PASS") == 2 and text.count(": FAIL") == 1, text
    assert "check_file(sync_id_1)" in next(ln for ln in outcome.lines if ": FAIL" in ln)


# -- Ethos-U85: the generic .npz from the emulator's clean run ----------------------------------
def _ethos_demo() -> tuple[Path, ProgramOptions]:
    d = demo_program("ethos-u85")
    return d / "demo_vela.tflite", ProgramOptions(input=str(d / "input.npy"))


@pytest.fixture(scope="module")
def ethos_reference(tmp_path_factory):
    """The demo's per-operation outputs as LiteRT's reference kernels compute them (the model
    before Vela, mapped by Vela's debug database: an independent reference, not the emulator's
    own run) written as a generic .npz, and what each DMA command copies."""
    program, options = _ethos_demo()
    rc = _load("ethos-u85", program, options)
    dev, reads, writes = rc.device, {}, {}
    outs = {str(r.unit): r.array for r in
            dev.layer_references(program.parent / "demo.tflite", input_tensors(dev))}

    def after(done: int) -> None:
        reads[done - 1] = list(rc.last_touched.reads)
        writes[done - 1] = list(rc.last_touched.writes)
    rc.add_unit_listener(after)
    assert rc.run_here().reason == "done"
    path = tmp_path_factory.mktemp("eu85") / "ref.npz"
    np.savez(path, **outs)
    dmas = {}  # DMA command -> (the block it copies, the first command that reads the copy)
    for k, r in reads.items():
        if dev.units()[k].summary.startswith("DMA_START"):
            user = next(j for j in range(k + 1, len(reads)) if any(
                a < e and s < b for a, b in reads[j] for s, e in writes[k]))
            dmas[k] = (max(r, key=lambda ab: ab[1] - ab[0]), user)
    return path, sorted(int(k) for k in outs), dmas


def test_ethos_u85_clean_program_has_no_divergence_over_every_operation(ethos_reference):
    path, referenced, _ = ethos_reference
    differ = _diff(_load("ethos-u85", *_ethos_demo()), path)
    assert [d.index for d in differ.results] == referenced
    assert differ.first_divergence is None


def test_ethos_u85_corrupted_bias_of_operation_k_is_reported_first(ethos_reference):
    """Byte 1 of a block a DMA command copies to SRAM is in the biases of the kernel command
    that reads the copy (found by running; byte 0 happened to change nothing): that command,
    or where it declares no output the first command after it that does, is reported."""
    path, referenced, dmas = ethos_reference
    seen = set()
    for dma, ((a, _), user) in dmas.items():
        rc = _load("ethos-u85", *_ethos_demo())
        rc.device.write(a + 1, bytes([(rc.device.read(a + 1, 1)[0] + 1) & 0xFF]))
        differ = _diff(rc, path)
        assert differ.first_divergence == min(i for i in referenced if i >= user), dma
        seen.add(differ.first_divergence)
    assert len(seen) >= 3


# -- reading references: layouts and one-line errors ---------------------------------------------
def test_npz_layout_entry_converts_pytorch_nchw(max78000_net, tmp_path):
    root = max78000_net[0]
    with np.load(root / "ref.npz") as z:
        arrays = {"Layer 0": z["0"][None].astype(np.float32), "2": z["2"][None]}
    np.savez(tmp_path / "nchw.npz", layout="NCHW", **arrays)
    differ = _diff(_load("max78000", root / "clean"), tmp_path / "nchw.npz")
    assert [(d.index, d.reference) for d in differ.results] == [(0, "Layer 0"), (2, "2")]
    assert differ.first_divergence is None


@pytest.mark.parametrize("make, words", [
    (lambda p: np.savez(p, **{"9": np.zeros((4, 8, 8))}), "key '9' names no layer"),
    (lambda p: np.savez(p, **{"0": np.zeros((8, 10))}), "cannot be in layout 'CHW'"),
    (lambda p: np.savez(p, **{"0": np.zeros((8, 10, 9))}), "the output tensor is (8, 10, 10)"),
    (lambda p: np.savez(p, **{"0": np.full((8, 10, 10), 0.5)}), "values are not integers"),
    (lambda p: np.savez(p, **{"0:weights": np.zeros((8, 10, 10))}), "declares no tensor"),
    (lambda p: p.write_bytes(b"garbage"), "no layer output in it"),
])
def test_bad_reference_files_are_one_line_errors_naming_the_file(max78000_net, tmp_path, make,
                                                                  words):
    root = max78000_net[0]
    path = tmp_path / "bad.npz"
    make(path)
    rc = _load("max78000", root / "clean")
    with pytest.raises(ReferenceFileError) as e:
        start_diff(rc, path)
    msg = str(e.value)
    assert "\n" not in msg and str(path.name) in msg and words in msg, msg


def test_a_summarised_log_array_is_refused_with_its_line(max78000_net, tmp_path):
    root = max78000_net[0]
    log = tmp_path / "log.txt"
    log.write_text("LAYER 0 (CONV2D)...\n\n8x10x10 OUTPUT (NO ACTIVATION):\n[[[ 1 2 ... 3]]]\n")
    with pytest.raises(ReferenceFileError, match=r"log.txt:3: layer 0's output is summarised"):
        start_diff(_load("max78000", root / "clean"), log)


def test_special_files_are_refused_without_blocking(max78000_net, tmp_path):
    rc = _load("max78000", max78000_net[0] / "clean")
    with pytest.raises(ReferenceFileError, match="/dev/zero"):
        start_diff(rc, Path("/dev/zero"))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: opening it to read would block
    with pytest.raises(ReferenceFileError, match="fifo is a FIFO"):
        start_diff(rc, fifo)


# -- explained differences (issue 27 point 4) and the divergence stop ----------------------------
def test_explained_differences_are_reported_with_their_rule_and_do_not_diverge(max78000_net):
    """A reference one off at some elements, with a rule that explains exactly those: counted
    as differing and as explained, with the rule, and no divergence; an element the rule does
    not explain is still a divergence."""
    root = max78000_net[0]
    rc = _load("max78000", root / "clean")
    with np.load(root / "ref.npz") as z:
        want = z["1"].astype(np.int64)
    ref = want.copy()
    ref[0, 0, :3] += 1
    rule = "a test rule: elements of row 0 of channel 0 may be one lower"

    def explain(got, r):
        m = np.zeros(got.shape, bool)
        m[0, 0, :] = (r[0, 0, :] - got[0, 0, :]) == 1
        return m
    differ = LayerDiffer(rc.device, [LayerReference(1, "tie", ref, explain=explain, rule=rule)])
    differ.attach(rc)
    assert rc.run_here().reason == "done"
    d = differ.results[0]
    assert (d.differing, d.explained, d.rule, d.diverges) == (3, 3, rule, False)
    assert "3 explained by a test rule" in d.line() and "DIVERGES" not in d.line()
    ref[2, 1, 1] += 2  # one the rule does not explain
    rc = _load("max78000", root / "clean")
    rc.run_here(single=True)
    rc.run_here(single=True)  # layers 0 and 1 ran
    spec = unit_spec(rc.device, LayerReference(1, "", None))
    d2 = compare(LayerReference(1, "tie", ref, explain=explain, rule=rule), spec,
                 read_tensor(spec, rc.device.read), "Layer 1")
    assert d2.diverges and d2.first_index == (2, 1, 1) and d2.explained == 3


def test_divergence_breakpoint_stops_after_the_unit_with_its_line(max78000_net, tmp_path):
    root, x, ws, bs = max78000_net
    net, ws2, bs2 = _corrupt("bias", 2, x, ws, bs)
    mb.build(net, x, ws2, bs2).write(tmp_path / "bad")
    rc = _load("max78000", tmp_path / "bad")
    differ = start_diff(rc, root / "ref.npz")
    stop = rc.run_here()
    assert stop.reason == "breakpoint" and differ.results[-1].line() in stop.message
    assert rc.device.pc == rc.device.units()[3].address  # halted after layer 2
    assert rc.run_here().reason == "done"  # continue goes on (one stop per diff)


def _programs(tmp: Path) -> dict[str, tuple[Path, ProgramOptions]]:
    eu, eu_options = _ethos_demo()
    m = tmp / "m78"
    mb.build(NET, seed=1).write(m)
    eb.build(LAYER16, seed=1).write(tmp / "ne16")
    return {"max78000": (m, ProgramOptions()), "ethos-u85": (eu, eu_options),
            "ne16": (tmp / "ne16", ProgramOptions()),
            "nvdla": (_nvdla_trace(tmp), ProgramOptions())}


@pytest.mark.parametrize("name", ["max78000", "ethos-u85", "ne16", "nvdla"])
def test_every_device_reads_the_generic_npz_through_layer_references(tmp_path, name):
    """Device.layer_references falls back to the generic .npz on every device (a device's
    override reads its own formats and hands anything else to the default): an .npz of the
    last unit's output, keyed by its label, made from a clean run, compares equal."""
    program, options = _programs(tmp_path)[name]
    rc = _load(name, program, options)
    dev = rc.device
    assert rc.run_here().reason == "done"
    last = max(k for k in range(len(dev.units()))
               if any(s.name == "output" for s in dev.unit_tensors(k)))
    spec = unit_spec(dev, LayerReference(last, "", None))
    np.savez(tmp_path / "last.npz", **{dev.units()[last].label: read_tensor(spec, dev.read)})
    refs = _load(name, program, options).device.layer_references(tmp_path / "last.npz", [])
    assert [(r.unit, r.tensor) for r in refs] == [(last, "output")]
    differ = _diff(_load(name, program, options), tmp_path / "last.npz")
    assert [(d.index, d.differing) for d in differ.results] == [(last, 0)]


def test_log_sections_as_ai8x_synthesis_prints_them():
    """ai8x-synthesis' izer/simulate.py: a named layer's header is ``LAYER n (name) (OP)...``;
    a 1x1 output is printed squeezed; the CPU's classification layer (``CLASSIFICATION LAYER
    (LINEAR)...``, its ``OUTPUT (size N)``) ends the last section and is no layer's reference;
    a header without data (``--short-log``: ``CxHxW OUTPUT (NONE)``) gives none."""
    from accelstub.devices.max78000.ai8x_log import parse_log

    text = "\n".join([
        "LAYER 0 (conv0) (CONV2D)...", "", "2x1x1 FULL-RES OUTPUT:", "[ 640 -768]", "",
        "2x1x1 OUTPUT (NO ACTIVATION):", "[ 5 -6]", "",
        "LAYER 1 (CONV2D)...", "", "2x1x1 OUTPUT (NONE)", "",
        "CLASSIFICATION LAYER (LINEAR)...", "", "INPUT DATA (size 2):", "[ 5 -6]", "",
        "OUTPUT (size 2):", "[7 8]", ""])
    layers = parse_log(text, "log.txt")
    assert list(layers) == [0]
    assert layers[0][0].reshape(-1).tolist() == [5, -6] and layers[0][1] == 6  # its header


class _StandInTensor:
    """The few torch.Tensor methods the docs' hook script calls, over a numpy array."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self) -> np.ndarray:
        return self.a


class _StandInLayer:
    """An ai8x layer module (it has ``op``) whose output is fixed: a float NCHW batch of one
    holding integers, as ai8x's simulation mode computes them."""

    def __init__(self, out: np.ndarray) -> None:
        self.op, self.out, self.hooks = object(), out, []

    def register_forward_hook(self, fn) -> None:
        self.hooks.append(fn)

    def __call__(self, x):
        y = _StandInTensor(self.out[None].astype(np.float32))
        for fn in self.hooks:
            fn(self, (x,), y)
        return y


class _StandInModel:
    def __init__(self, outputs: list[np.ndarray]) -> None:
        self.layers = [_StandInLayer(o) for o in outputs]

    def modules(self):
        yield self  # torch's modules() yields the model itself too (it has no op)
        yield from reversed(self.layers)  # hooks record in run order, not module order

    def eval(self):
        return self

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_docs_pytorch_hook_script_saves_what_the_reader_expects(max78000_net, tmp_path,
                                                                monkeypatch):
    """docs/diff.md's forward-hook script, run as written (torch replaced by a stand-in of the
    module API it uses: torch is not installed here), on a model whose layers give the
    project's integer reference of the MAX78000 network: the .npz it saves is read by the
    generic reader with no divergence; with one value of layer 2 changed, layer 2 diverges."""
    import contextlib
    import sys
    import types

    text = (Path(__file__).parents[2] / "docs" / "diff.md").read_text()
    (code,) = re.findall(r"^```python\n(.*?)^```$", text, re.S | re.M)
    torch = types.ModuleType("torch")
    torch.no_grad = contextlib.nullcontext
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.chdir(tmp_path)
    root, x, ws, bs = max78000_net
    outputs = mb.build(NET, x, ws, bs).outputs
    for bad in (None, 2):
        outs = [o.copy() for o in outputs]
        if bad is not None:
            outs[bad][1, 0, 0] += 1
        exec(compile(code, "docs/diff.md", "exec"), {"model": _StandInModel(outs),
                                                       "sample": None})
        saved = np.load(tmp_path / "ref.npz")
        assert sorted(saved.files) == ["0", "1", "2", "3", "layout"]
        assert saved["0"].shape == (1,) + outputs[0].shape  # NCHW, batch of one
        differ = _diff(_load("max78000", root / "clean"), tmp_path / "ref.npz")
        assert differ.first_divergence == bad


def test_every_pc_to_unit_map_takes_the_first_unit_of_an_address_listed_twice():
    """A listing may name one address twice: the layer differ's unit_index and the stop data's
    unit_at_pc (scanned the first time, from its kept table after) both name the first unit
    there, as Device.unit_label does (devices/device.py unit_indices)."""
    from accelstub.devices.device import Unit
    from accelstub.stub.commands.target import unit_at_pc

    class Listed:  # what both maps ask of a device
        def __init__(self) -> None:
            self.listing = [Unit(0x100, "a", ""), Unit(0x104, "b", ""), Unit(0x100, "c", ""),
                            Unit(0x108, "d", ""), Unit(0x104, "e", "")]
            self.pc = 0x104

        def units(self) -> list[Unit]:
            return self.listing

        def window_index(self, pc: int) -> None:
            return None

    dev = Listed()
    differ = LayerDiffer(dev, [])  # type: ignore[arg-type]
    assert [differ.unit_index(pc) for pc in (0x100, 0x104, 0x108, 0x10C)] == [0, 1, 3, None]
    assert [unit_at_pc(dev) for _ in range(3)] == [1, 1, 1]  # type: ignore[arg-type]
    dev.pc = 0x100
    assert unit_at_pc(dev) == 0  # type: ignore[arg-type]
