"""MAX78000 programs as users bring them: project directories in ai8xize.py's format, written by
the project's own builder (devices/max78000_build.py, never vendor files), read by the importer
(devices/max78000_import.py), run on the emulator and checked against the known answer that the
independent reference computed.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelstub.devices import open_device
from accelstub.devices.max78000_build import (BuildError, Layer, Network, build, build_demo,
                                              processors_per_pass)
from accelstub.devices.max78000_import import (Ai8xImportError, import_ai8x_project,
                                               load_ai8x_program, run_ai8x_program)
from accelstub.devices.max78000_mram import install_mram_hooks
from accelstub.stub.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]


def run_dir(path) -> "object":
    dev = open_device("max78000")
    load_ai8x_program(dev, path)
    return run_ai8x_program(dev, dev.ai8x_program)


def small_net() -> Network:
    return Network(4, 6, 6, [Layer(8, activation="relu", shift=-2, bias=True),
                             Layer(6, pool="max", pool_size=2, pool_stride=2, shift=-1),
                             Layer(3, kernel=1, pad=0, wide=True)])


@pytest.fixture
def project(tmp_path):
    return build(small_net(), seed=5).write(tmp_path / "net")


# -- builder -> directory -> importer -> run -> PASS ------------------------------------------
@st.composite
def networks(draw):
    c = draw(st.sampled_from([1, 3, 4, 7, 16, 70]))
    h = draw(st.integers(3, 9))
    w = draw(st.integers(3, 9))
    n = draw(st.integers(1, 3))
    layers = []
    ch, rows, cols = c, h, w
    for i in range(n):
        kernel = draw(st.sampled_from([1, 3]))
        pad = draw(st.integers(0, 2)) if kernel == 3 else 0
        pool = draw(st.sampled_from(["none", "max", "avg"]))
        size = stride = 1
        if pool != "none":
            size = draw(st.integers(1, min(3, rows, cols)))
            stride = draw(st.integers(1, 3))
            rows, cols = (rows - size) // stride + 1, (cols - size) // stride + 1
        rows, cols = rows + 2 * pad - kernel + 1, cols + 2 * pad - kernel + 1
        if rows < 1 or cols < 1:
            break
        last = i == n - 1
        wide = last and draw(st.booleans())
        out = draw(st.sampled_from([1, 2, 5, 8, 12, 66] if not wide else [1, 3, 4, 10]))
        layers.append(Layer(out, kernel=kernel, pad=pad, pool=pool, pool_size=size,
                            pool_stride=stride, shift=draw(st.integers(-8, 4)),
                            activation="none" if wide else draw(st.sampled_from(
                                ["none", "relu", "abs"])),
                            weight_bits=draw(st.sampled_from([8, 4, 2, 1])),
                            bias=draw(st.booleans()), wide=wide))
        ch = out
    if not layers:
        layers = [Layer(2, kernel=1, pad=0)]
    return Network(c, h, w, layers, avg_pool_rounding=draw(st.booleans()))


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(net=networks(), seed=st.integers(0, 2**16), mexpress=st.booleans(),
       loader=st.sampled_from(["new", "old"]), one_shot=st.booleans())
def test_random_networks_pass(tmp_path_factory, net, seed, mexpress, loader, one_shot):
    d = tmp_path_factory.mktemp("rnd")
    build(net, seed=seed, mexpress=mexpress, loader=loader, one_shot=one_shot).write(d)
    r = run_dir(d)
    assert r.ok, (r.line(), net)
    assert r.layers == len(net.layers)


def test_loader_variants_agree(tmp_path):
    """New record loop and old KERNELS_n loader, packed (mexpress) and plain: same MRAM."""
    images = []
    for mexpress in (True, False):
        for loader in ("new", "old"):
            d = build(small_net(), seed=1, mexpress=mexpress, loader=loader).write(
                tmp_path / f"{mexpress}{loader}")
            dev = open_device("max78000")
            load_ai8x_program(dev, d)
            images.append(dev.read(0x5018_0000, 0x3000) + dev.read(0x5018_4000, 0x3000))
    assert all(im == images[0] for im in images)
    assert any(images[0])


def test_multipass_and_quadrants(tmp_path):
    net = Network(70, 5, 5, [Layer(80, shift=-3, activation="relu", bias=True),
                             Layer(10, kernel=1, pad=0, wide=True)])
    assert processors_per_pass(70) == (2, 36) and processors_per_pass(80) == (2, 40)
    r = run_dir(build(net, seed=2).write(tmp_path / "mp"))
    assert r.ok, r.line()


def test_bundled_demo_is_current_and_passes(tmp_path):
    demo = ROOT / "configs" / "demo" / "max78000_demo"
    fresh = build_demo().write(tmp_path / "demo")
    for f in fresh.iterdir():
        assert (demo / f.name).read_text() == f.read_text(), \
            f"{f.name}: regenerate with python -m accelstub.devices.max78000_build --demo " \
            "configs/demo/max78000_demo"
    assert run_dir(demo).ok


def test_builder_shares_no_code_with_the_emulator():
    tree = ast.parse((ROOT / "devices" / "max78000_build.py").read_text())
    mods = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    bad = {"max78000_layer", "max78000_datapath", "emu", "max78000_kernels", "max78000"}
    assert not (bad & (mods | names)), mods | names


def test_builder_rejects_bad_descriptions():
    with pytest.raises(BuildError, match="32-bit output"):
        build(Network(2, 4, 4, [Layer(2, wide=True), Layer(2)]))
    with pytest.raises(BuildError, match="shift"):
        build(Network(2, 4, 4, [Layer(2, shift=16)]))


# -- the importer's model of the device ---------------------------------------------------------
def test_load_arms_device_and_stores_expected(project):
    dev = open_device("max78000")
    summary = load_ai8x_program(dev, project)
    assert re.match(r"net: ai8x project, 3 layers, \d+ bus writes \(\d+ bytes\), \d+ expected "
                    r"words$", summary)
    assert not dev.finished()
    assert dev.pc == dev.description.register("CNNx16_0_L0_RCNT").address
    assert dev.expected and all(len(e) == 3 for e in dev.expected)


def test_mexpress_packed_write_lands_in_plain_layout():
    dev = open_device("max78000")
    install_mram_hooks(dev)
    k = [bytes(range(1 + 9 * i, 10 + 9 * i)) for i in range(3)]  # 3 kernels k0..k8
    stream = b"".join(k) + bytes(1)
    words = [int.from_bytes(stream[i:i + 4], "big") for i in range(0, len(stream), 4)]
    blk = 0x5018_4000  # processor 1
    dev.write(0x5010_0000, (1 << 20 | 1 << 3).to_bytes(4, "little"))  # CTRL.mexpress, clk_en
    dev.write(blk + 5 * 4 | 1, b"\x01")  # set address: column 5
    for i, w in enumerate(words):
        dev.write(blk + 4 * i, w.to_bytes(4, "little"))
    for i, kk in enumerate(k):
        got = dev.read(blk + (5 + i) * 16, 16)
        assert got[0] == kk[0]
        assert int.from_bytes(got[4:8], "little") == int.from_bytes(kk[1:5], "big")
        assert int.from_bytes(got[8:12], "little") == int.from_bytes(kk[5:9], "big")
    assert dev.read(blk + 8 * 16, 16) == bytes(16)  # the partial 4th kernel is not stored
    dev.write(0x5010_0000, (1 << 3).to_bytes(4, "little"))  # mexpress off: plain write
    dev.write(blk, (0x7F).to_bytes(4, "little"))
    assert dev.read(blk, 1) == b"\x7f"


# -- importer errors name file and line ---------------------------------------------------------
def _edit(path: Path, old: str, new: str, count: int = 1) -> int:
    text = path.read_text()
    assert old in text, old
    line = text[:text.index(old)].count("\n") + 1
    path.write_text(text.replace(old, new, count))
    return line


def test_error_malformed_statement(project):
    line = _edit(project / "cnn.c", "= 0x0000040e; // SRAM control", "= 0x0000040e +; // oops")
    with pytest.raises(Ai8xImportError, match=rf"^cnn\.c:{line}: not a constant expression"):
        import_ai8x_project(project)


def test_error_unsupported_statement(project):
    line = _edit(project / "cnn.c", "  return CNN_OK;\n}\n\nint cnn_configure",
                 "  x = y + 1;\n  return CNN_OK;\n}\n\nint cnn_configure")
    with pytest.raises(Ai8xImportError, match=rf"^cnn\.c:{line}: unsupported statement: x = y"):
        import_ai8x_project(project)


def test_error_unknown_sdk_call(project):
    line = _edit(project / "cnn.c", "  MXC_NVIC_SetVector(", "  MXC_Frobnicate(3);\n"
                 "  MXC_NVIC_SetVector(")
    with pytest.raises(Ai8xImportError, match=rf"^cnn\.c:{line}: unknown SDK call MXC_Frobnicate"):
        import_ai8x_project(project)


def test_error_missing_header_array(project):
    text = (project / "sampledata.h").read_text()
    (project / "sampledata.h").write_text(text.replace("SAMPLE_INPUT_0", "SAMPLE_INPUT_X"))
    main = (project / "main.c").read_text()
    line = main[:main.index("static const uint32_t input_0[]")].count("\n") + 1
    with pytest.raises(Ai8xImportError,
                       match=rf"^main\.c:{line}: SAMPLE_INPUT_0 \(for input_0\) is not defined"):
        import_ai8x_project(project)


def test_error_malformed_header_record(project):
    line = _edit(project / "weights.h", "#define KERNELS { \\\n  0x",
                 "#define KERNELS { \\\n  0xZZ, 0x")
    with pytest.raises(Ai8xImportError, match=rf"^weights\.h:{line}: #define KERNELS: element 0 "
                       "is not an integer"):
        import_ai8x_project(project)


def test_error_truncated_kernel_record(project):
    text = (project / "weights.h").read_text()
    m = re.search(r"#define KERNELS \{ \\\n  (0x[0-9a-f]+), (0x[0-9a-f]+),", text)
    (project / "weights.h").write_text(text.replace(m.group(0), m.group(0).replace(
        m.group(2), "0x00100000"), 1))
    with pytest.raises(Ai8xImportError, match=r"^weights\.h:\d+: KERNELS: record at element 0 "):
        import_ai8x_project(project)


def test_error_not_a_project(tmp_path):
    with pytest.raises(Ai8xImportError, match="cnn.c: missing"):
        import_ai8x_project(tmp_path)


# -- accelstub run ------------------------------------------------------------------------------
def test_run_pass_exit_0(project, capsys):
    assert cli_main(["run", "max78000", "--program", str(project)]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"PASS \(\d+ words checked, 3 layers, \d+ ms\)\n", out)


def test_run_corrupted_expected_fails_with_address_and_layer(project, capsys):
    text = (project / "sampleoutput.h").read_text()
    m = re.search(r"\{ \\\n  (0x[0-9a-f]+), (0x[0-9a-f]+), (0x[0-9a-f]+), (0x[0-9a-f]+)", text)
    addr, first = int(m.group(1), 16), int(m.group(4), 16)
    bad = (first ^ 0x5A5A5A5A) & int(m.group(2), 16)
    (project / "sampleoutput.h").write_text(
        text.replace(m.group(0), m.group(0)[:-len(m.group(4))] + f"0x{bad:08x}", 1))
    assert cli_main(["run", "max78000", "--program", str(project)]) == 1
    out = capsys.readouterr().out
    assert out == (f"FAIL at 0x{addr:08x}: expected 0x{bad:08x}, got 0x{first:08x} "
                   "(written by layer 2)\n")


def test_run_bad_input_exit_2(tmp_path, project, capsys):
    assert cli_main(["run", "max78000", "--program", str(tmp_path / "nothing")]) == 2
    assert "not a directory" in capsys.readouterr().err
    _edit(project / "cnn.c", "  MXC_NVIC_SetVector(",
          "  MXC_Frobnicate(3);\n  MXC_NVIC_SetVector(")
    assert cli_main(["run", "max78000", "--program", str(project)]) == 2
    assert "unknown SDK call MXC_Frobnicate" in capsys.readouterr().err


def test_run_unsupported_layer_exit_2(project, capsys):
    # switch layer 0 to column-only padding (cpad_only): the datapath refuses it clearly
    _edit(project / "cnn.c", "0x50100590) = 0x00000b20", "0x50100590) = 0x00000f20")
    assert cli_main(["run", "max78000", "--program", str(project)]) == 2
    assert "cpad_only is not supported" in capsys.readouterr().err


def test_expected_matches_reference_words(project):
    prog = import_ai8x_project(project)
    proj = build(small_net(), seed=5)
    y = proj.outputs[-1]
    assert len(prog.expected) == y.size  # 32-bit output: one word per value
    vals = sorted(v for _, v, _ in prog.expected)
    assert vals == sorted(int(v) & 0xFFFFFFFF for v in np.asarray(y).ravel())
