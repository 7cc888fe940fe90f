"""The Ethos-U85 command-line tools (issue 11, point 3): `accelstub disasm` on Vela's output,
`run --macs` from the stream's configuration record, `--input` .npz for several inputs, `run -v`
output checksums with the per-operation reference of `--expect` / `--output-ops`, and the
bundled demo. Models are the project's own (testkit), compiled by Vela here."""
from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import pytest

from accelstub.devices import device_spec
from accelstub.devices.ethos_u85 import stream as es
from accelstub.devices.ethos_u85.vela import COP1, raw, read_vela
from accelstub.stub.cli import demo_program, main
from accelstub.testkit.ethosu85_models import build, sample_inputs
from tests.ethos_u85.test_ethosu85_vela import (  # noqa: F401
    HAVE_FLATBUFFERS,
    compiled,
    litert_reference,
    needs_flatbuffers,
    needs_litert,
    needs_vela,
    vela,
)

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo" / "ethos-u85_demo"


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


# --- 3a: disasm finds the stream inside Vela's output --------------------------------------------

@needs_vela
@pytest.mark.parametrize("kind", ["tflite", "npz"])
def test_disasm_lists_the_command_stream_inside_vela_output(compiled, capsys, kind):
    _, out = compiled("add", kind)
    code, text, err = cli(capsys, "disasm", out)
    assert code == 0 and err == ""
    lines = text.splitlines()
    prog = read_vela(out)
    assert lines[1:] == es.disassemble(prog.command_stream).splitlines()
    assert lines[-1].endswith("NPU_OP_STOP                 mask=0xffff")
    assert lines[0].startswith(f"# {out}: ") and f"{prog.command_words} command words at " \
        f"payload offset {prog.command_offset:#x}" in lines[0]
    assert lines[0].endswith("compiled for CONFIG 0x20000118 ID 0x20007000 (Ethos-U85 with 256 "
                             "MACs/cycle)")


def test_disasm_refuses_a_cop1_payload_the_driver_refuses(tmp_path, capsys):
    """Command words at payload offset 0x1c: the driver wants them 16-byte aligned."""
    body = es.encode_stream([("NPU_SET_IFM_REGION", dict(region=1)), "NPU_OP_STOP"])
    words = [COP1, 0x00000001, 0x20000119, 0x20007000, 5, 5, 0x00000002 | len(body) << 16] + body
    f = tmp_path / "payload.bin"
    f.write_bytes(np.asarray(words, "<u4").tobytes())
    code, text, err = cli(capsys, "disasm", f)
    assert (code, text) == (2, "")
    assert err == (f"accelstub: error: {f}: COP1 payload: command stream at payload offset 0x1c "
                   "is not 16-byte aligned (the driver refuses it)\n")


def test_disasm_of_an_aligned_cop1_payload(tmp_path, capsys):
    body = es.encode_stream([("NPU_SET_IFM_REGION", dict(region=1)), "NPU_OP_STOP"])
    words = [COP1, 0x00000001, 0x20000119, 0x20007000, 5, 5, 5, 0x00000002 | len(body) << 16]
    f = tmp_path / "payload.bin"
    f.write_bytes(np.asarray(words + body, "<u4").tobytes())
    code, text, _ = cli(capsys, "disasm", f)
    assert code == 0
    assert text.splitlines() == [
        f"# {f}: COP1 payload: 2 command words at payload offset 0x20 (offsets below are QREAD "
        "values); compiled for CONFIG 0x20000119 ID 0x20007000 (Ethos-U85 with 512 MACs/cycle)",
        "0x0000: 0001010f           NPU_SET_IFM_REGION          region=1",
        "0x0004: 00000000           NPU_OP_STOP                 mask=0x0"]


@pytest.mark.parametrize("content, message", [
    (b"# a text file\nnot a stream\n", r"not an Ethos-U85 command stream: the command at offset "
     r"0x0 \(word 0x20612023\) is a reserved encoding \(reserved bits \[13:10\] set"),
    (b"\x7fELF\x02\x01\x01\x00" + bytes(56), r"not an Ethos-U85 command stream: the command "
     r"at offset 0x0 \(word 0x464c457f\)"),
    (b"\x01\x02", r"2 bytes, not one command word"),
    # a valid first command, then a word with control bits 11
    (np.asarray([0x0001010F, 0x0000C000], "<u4").tobytes(), r"not an Ethos-U85 command stream: "
     r"the command at offset 0x4 \(word "
     r"0x0000c000\) is a reserved encoding \(reserved control 11"),
])
def test_disasm_refuses_what_is_not_a_command_stream(tmp_path, capsys, content, message):
    f = tmp_path / "file.bin"
    f.write_bytes(content)
    code, text, err = cli(capsys, "disasm", f)
    assert code == 2 and text == ""
    assert re.fullmatch(rf"accelstub: error: {re.escape(str(f))}: {message}.*\n", err), err
    assert "Traceback" not in err


def test_disasm_refuses_containers_without_a_command_stream(tmp_path, capsys):
    npy, npz = tmp_path / "x.npy", tmp_path / "y.npz"
    np.save(npy, np.zeros(4, np.int8))
    np.savez(npz, weights=np.zeros(4))
    code, text, err = cli(capsys, "disasm", npy)
    assert (code, text) == (2, "") and err == (f"accelstub: error: {npy}: a NumPy .npy array, not "
                                               "a command stream (Vela's raw output is an .npz "
                                               "with cmd_data)\n")
    code, text, err = cli(capsys, "disasm", npz)
    assert (code, text) == (2, "") and err == (f"accelstub: error: {npz}: an .npz without Vela's "
                                               "cmd_data array (it holds weights): not Vela's "
                                               "--output-format raw output\n")


@needs_flatbuffers
def test_disasm_refuses_a_model_vela_has_not_compiled(tmp_path, capsys):
    f = tmp_path / "conv.tflite"
    f.write_bytes(build("conv"))
    code, text, err = cli(capsys, "disasm", f)
    assert (code, text) == (2, "")
    assert err == (f"accelstub: error: {f}: a TFLite model with no NPU operator, so no command "
                   "stream (no 'ethos-u' custom operator: compile it with vela first)\n")


def test_disasm_warns_about_a_reserved_encoding_after_the_first_commands(tmp_path, capsys):
    words = es.encode_stream([("NPU_SET_IFM_REGION", dict(region=1))] * 20) + [0x0000C000]
    f = tmp_path / "s.bin"
    f.write_bytes(np.asarray(words, "<u4").tobytes())
    code, text, err = cli(capsys, "disasm", f)
    assert code == 0 and "UNKNOWN" in text.splitlines()[-1]
    assert err == (f"accelstub: warning: {f}: reserved encodings (UNKNOWN) from offset 0x0050 "
                   "on: the NPU stops there with cmd_parse_error\n")


# --- 3b: --macs from the stream's configuration record -------------------------------------------

@pytest.fixture(scope="module")
def add_1024(tmp_path_factory):
    d = tmp_path_factory.mktemp("macs1024")
    src = d / "add.tflite"
    src.write_bytes(build("add"))
    return src, vela(src, d, raw=True, macs=1024)


@needs_vela
def test_run_takes_macs_from_the_stream(add_1024, capsys):
    """A stream compiled for 1024 MACs runs without --macs (the driver would refuse it on the
    default 256-MAC device); -v says where the value came from."""
    _, out = add_1024
    assert device_spec("ethos-u85").program_device_options(out) == {"macs": 1024}
    code, text, err = cli(capsys, "run", "ethos-u85", "--program", out, "-v")
    assert code == 0 and text.startswith("DONE (1 output(s)"), (text, err)
    assert err.splitlines()[0] == f"accelstub: --macs 1024 (from {out})"


@needs_vela
def test_run_refuses_macs_that_contradict_the_stream(add_1024, capsys):
    _, out = add_1024
    code, text, err = cli(capsys, "run", "ethos-u85", "--program", out, "--macs", "256")
    assert (code, text) == (2, "")
    assert err == (f"accelstub: error: {out}: compiled for an NPU with macs_per_cc (log2 "
                   "MACs/cycle) 10, this ethos-u85 has 8 (CONFIG 0x20000118; run with --macs "
                   "1024, or without --macs: it is taken from the stream; or compile with "
                   "--accelerator-config ethos-u85-256)\n")


@needs_vela
def test_stream_configured_for_no_u85_is_refused_with_the_valid_values(add_1024, tmp_path,
                                                                        capsys):
    """A configuration record naming 64 MACs on another product (a U55 stream, say): the
    valid MAC counts are listed, no traceback."""
    import io
    import zipfile

    _, out = add_1024
    with np.load(out) as z:
        payload = bytearray(raw(z["cmd_data"]))
    assert int.from_bytes(payload[4:8], "little") & 0xFF == 1  # OPTIMIZER_CONFIG
    payload[8:12] = (0x00000016).to_bytes(4, "little")  # product 0, macs_per_cc 6
    bad = tmp_path / "u55_vela.npz"
    with zipfile.ZipFile(out) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():  # the other entries as they are (some are object arrays)
            data = src.read(item)
            if item.filename == "cmd_data.npy":
                buf = io.BytesIO()
                np.save(buf, np.frombuffer(bytes(payload), np.uint8))
                data = buf.getvalue()
            dst.writestr(item, data)
    code, text, err = cli(capsys, "run", "ethos-u85", "--program", bad)
    assert (code, text) == (2, "")
    assert err == (f"accelstub: error: {bad}: the stream's configuration record (CONFIG "
                   "0x00000016: product 0, macs_per_cc 6, i.e. 64 MACs/cycle) is not an "
                   "Ethos-U85 configuration; the Ethos-U85 has 128, 256, 512, 1024, 2048 "
                   "MACs/cycle (compile with vela --accelerator-config ethos-u85-N)\n")


def test_macs_value_outside_the_configurations_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "ethos-u85", "--program", "x_vela.tflite", "--macs", "100"])
    assert e.value.code == 2
    assert "argument --macs: invalid choice: 100 (choose from 128, 256, 512, 1024, 2048)" in \
        capsys.readouterr().err


# --- 3c: --input .npz for several inputs ---------------------------------------------------------

def test_help_documents_npz_inputs(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert ("ethos-u85: input tensor(s) for --program: a .npy for a model with one input; an .npz "
            "with one array per model input, named as the model's inputs or else taken in file "
            "order (np.savez(f, x0, x1))") in text


@needs_vela
@needs_litert
def test_input_npz_gives_each_model_input(compiled, tmp_path, capsys):
    """The add model has inputs 'a' and 'b' (a - b would show a swap too: add with different
    input scales is not symmetric)."""
    src, out = compiled("add")
    a, b = sample_inputs("add")
    np.save(tmp_path / "want.npy", litert_reference(src, [a, b])[0])
    np.savez(tmp_path / "ordered.npz", a, b)  # arr_0, arr_1: file order
    np.savez(tmp_path / "named.npz", b=b, a=a)  # by name, whatever the order
    np.savez(tmp_path / "swapped.npz", b, a)
    np.savez(tmp_path / "one.npz", a)
    for name in ("ordered", "named"):
        code, text, err = cli(capsys, "run", "ethos-u85", "--program", out, "--input",
                              tmp_path / f"{name}.npz", "--expect", tmp_path / "want.npy")
        assert code == 0 and text.startswith("PASS (1 output(s)"), (name, text, err)
    code, text, _ = cli(capsys, "run", "ethos-u85", "--program", out, "--input",
                        tmp_path / "swapped.npz", "--expect", tmp_path / "want.npy")
    assert code == 1 and text.startswith("FAIL output 0: ")
    code, text, err = cli(capsys, "run", "ethos-u85", "--program", out, "--input",
                          tmp_path / "one.npz")
    assert (code, text) == (2, "")
    assert err == f"accelstub: error: {out}: the model has 2 input(s), 1 given\n"
    (tmp_path / "x.bin").write_bytes(b"\x01\x02\x03")
    code, text, err = cli(capsys, "run", "ethos-u85", "--program", out, "--input",
                          tmp_path / "x.bin")
    assert code == 2 and err == (f"accelstub: error: {tmp_path / 'x.bin'}: not a .npy or .npz "
                                 "file (a .npy array, or an .npz with one array per model input "
                                 "or output)\n")


# --- 3d: -v checksums per operation, the per-operation reference ---------------------------------

#: a run -v line of the Ethos-U85: the unit, its operation and that operation's stream offset as
#: `accelstub disasm` lists it, then what the operation wrote
VLINE = re.compile(r"  (?P<unit>cmd (?P<n>\d+) \((?P<op>NPU_OP_[A-Z_]+) at "
                   r"(?P<offset>0x[0-9a-f]{4})\)): \d+ cycles modelled, "
                   r"(?:wrote nothing|wrote (?P<size>\d+) B at "
                   r"(?P<at>0x[0-9a-f]{8}), crc32 (?P<crc>0x[0-9a-f]{8}))")


@needs_vela
@needs_litert
def test_verbose_prints_each_operations_output_checksum(compiled, tmp_path, capsys):
    """One -v line per operation, naming the operation as `accelstub disasm` lists it (kind and
    stream offset); its CRC-32 is that of the bytes --output-ops keeps for it, and the operation
    that writes the model's output wrote LiteRT's answer."""
    src, out = compiled("small_cnn")
    xs = sample_inputs("small_cnn")
    np.save(tmp_path / "x.npy", xs[0])
    code, text, _ = cli(capsys, "run", "ethos-u85", "--program", out, "--input",
                        tmp_path / "x.npy", "--output-ops", tmp_path / "ops.npz", "-v")
    assert code == 0
    lines = text.splitlines()
    n = int(re.match(r"DONE \(1 output\(s\), (\d+) operations", lines[0]).group(1))
    per_op = [VLINE.fullmatch(ln) for ln in lines[1:-1]]
    assert len(per_op) == n and all(per_op), lines
    assert [int(m["n"]) for m in per_op] == list(range(n))
    code, listing, _ = cli(capsys, "disasm", out)
    listed = {}
    for ln in listing.splitlines()[1:]:  # "0x0150: 00000002           NPU_OP_CONV  ..."
        offset, *rest = ln.split()
        listed[offset.rstrip(":")] = next(w for w in rest if w.startswith("NPU_"))
    assert code == 0 and all(listed[m["offset"]] == m["op"] for m in per_op), lines
    ops = np.load(tmp_path / "ops.npz")
    assert sorted(ops.files, key=lambda k: int(k[2:])) == [f"op{i}" for i in range(n)]
    for m in per_op:
        data = ops[f"op{m['n']}"].tobytes()
        if m["size"] is None:
            assert data == b""
        else:
            assert len(data) == int(m["size"])
            assert zlib.crc32(data) == int(m["crc"], 16)
    want = litert_reference(src, xs)[0]
    prog = read_vela(out)
    writer = [m for m in per_op if m["at"] and m["size"] == str(want.nbytes)]
    assert [ops[f"op{m['n']}"].tobytes() for m in writer][-1] == want.tobytes()
    assert prog.outputs[0].offset == 0 and writer[-1]["at"] == "0x10000000"  # arena start


@needs_vela
def test_expect_names_the_first_operation_whose_output_differs(compiled, tmp_path, capsys):
    _, out = compiled("small_cnn")
    code, text, _ = cli(capsys, "run", "ethos-u85", "--program", out, "--output-ops",
                        tmp_path / "ops.npz", "-v")
    assert code == 0
    vlines = [m for m in map(VLINE.fullmatch, text.splitlines()) if m]
    where = {int(m["n"]): int(m["at"], 16) for m in vlines if m["at"]}
    unit = {int(m["n"]): m["unit"] for m in vlines}
    ops = dict(np.load(tmp_path / "ops.npz"))
    code, text, _ = cli(capsys, "run", "ethos-u85", "--program", out, "--expect",
                        tmp_path / "ops.npz")
    assert code == 0 and re.match(rf"PASS \(.*; {len(ops)} operation output\(s\) checked\)",
                                  text), text
    k, j = sorted(where)[2], sorted(where)[4]  # two operations that write: the first one counts
    for i, byte in ((k, 5), (j, 0)):
        ops[f"op{i}"] = ops[f"op{i}"].copy()
        ops[f"op{i}"][byte] ^= 0x40
    np.savez(tmp_path / "bad.npz", **ops)
    code, text, _ = cli(capsys, "run", "ethos-u85", "--program", out, "--expect",
                        tmp_path / "bad.npz")
    assert code == 1
    first = text.splitlines()[0]
    # the operation named as its -v line names it (kind and disasm offset), and its pc
    assert re.fullmatch(rf"FAIL operation {k}, {re.escape(unit[k])} at pc 0x[0-9a-f]{{8}}: 1/"
                        rf"{ops[f'op{k}'].size} bytes differ, first at {where[k] + 5:#010x}: "
                        r"expected 0x[0-9a-f]{2}, got 0x[0-9a-f]{2}", first), first
    # a reference naming more operations than the run has
    np.savez(tmp_path / "long.npz", **{**dict(np.load(tmp_path / "ops.npz")),
                                       "op99": np.zeros(1, np.uint8)})
    code, text, _ = cli(capsys, "run", "ethos-u85", "--program", out, "--expect",
                        tmp_path / "long.npz")
    assert code == 1 and text.startswith(f"FAIL the reference has op99, the run had {len(ops)} "
                                         f"operation(s) (op0..op{len(ops) - 1})")


# --- 3e: the bundled demo ------------------------------------------------------------------------

def test_serve_finds_the_bundled_demo():
    assert demo_program("ethos-u85").resolve() == DEMO.resolve()
    assert sorted(p.name for p in DEMO.iterdir()) == ["demo.tflite", "demo_debug.xml",
                                                      "demo_vela.tflite", "expected.npy",
                                                      "input.npy"]


def test_bundled_demo_passes_with_its_known_answer(capsys):
    code, text, err = cli(capsys, "run", "ethos-u85", "--program", DEMO)
    assert code == 0 and text.startswith("PASS (1 output(s), 25 operations"), (text, err)


@needs_vela
@needs_litert
def test_bundled_demo_is_current(tmp_path):
    """Rebuilt from the generator with Vela and LiteRT: the same bytes (Vela is deterministic
    for a given model and version)."""
    from accelstub.testkit.ethosu85_demo import write_demo

    fresh = write_demo(tmp_path / "demo")
    for f in sorted(fresh.iterdir()):
        assert (DEMO / f.name).read_bytes() == f.read_bytes(), \
            f"{f.name}: regenerate with python -m accelstub.testkit.ethosu85_demo " \
            "configs/demo/ethos-u85_demo"


def test_serve_steps_the_bundled_demo_operation_by_operation():
    """What `accelstub serve ethos-u85` holds: the demo armed before its first command; a step
    runs one operation (pc = the next operation's first command)."""
    from accelstub.devices import open_device
    from accelstub.stub.server import StubServer

    dev = open_device("ethos-u85")
    server = StubServer([dev], gdb_port=None, telnet_port=None, tcl_port=None)
    server.load_program(DEMO, log=lambda s: None)
    units = dev.units()
    assert len(units) == 25 and dev.pc == units[0].address and not dev.finished()
    rc = server.targets[0]
    assert rc.step(60).reason == "step" and dev.pc == units[1].address and dev.units_done == 1
    stop = rc.run(120)
    assert stop.reason == "done" and stop.message.splitlines()[-1].startswith("PASS (1 output(s)")


def test_serve_with_other_macs_than_the_demo_serves_no_program(capsys):
    import argparse

    from accelstub.stub.cli import _demo_for

    assert _demo_for(argparse.Namespace(device="ethos-u85", macs=None)).resolve() == \
        DEMO.resolve()
    assert _demo_for(argparse.Namespace(device="ethos-u85", macs=1024)) is None
    assert capsys.readouterr().err == ("accelstub: the bundled demo is built for --macs 256; "
                                       "serving with no program (give one with --program)\n")
