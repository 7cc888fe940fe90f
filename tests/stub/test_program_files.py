"""Issue 25 points 4 and 5: every program path reads its files bounded (devices/files.py):
character devices and FIFOs are refused without reading or blocking, sizes are checked before
reading, errors are one line naming the file and the limit; a program that runs no unit is an
error; `reset init` of a program that became invalid is a user error and leaves a consistent
state. Programs are the project's own demos (configs/demo), changed in tmp_path."""
from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from accelstub.devices import DEVICES, open_device
from accelstub.devices.nvdla.trace import load_trace
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.commands import CommandContext, execute
from accelstub.stub.program import MAX_SCRIPT, ProgramError, load_program
from accelstub.stub.server import StubServer

from ..helpers import TelnetClient

DEMO = Path(__file__).resolve().parents[2] / "configs" / "demo"
#: address space a refused program may use: the interpreter with numpy and numba imported
#: fits; reading /dev/zero whole (what `run` did: 23 GB) does not
AS_LIMIT = 3 << 30


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def accelstub(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The CLI in a subprocess under AS_LIMIT."""
    return subprocess.run([sys.executable, "-m", "accelstub.stub.cli", *args],
                          capture_output=True, text=True, timeout=timeout,
                          preexec_fn=_limit_memory, stdin=subprocess.DEVNULL)


def load(device: str, path: Path) -> str:
    return load_program(CommandContext(targets=[RunControl(open_device(device))]), path)


def refused(device: str, path: Path) -> str:
    with pytest.raises(ProgramError) as e:
        load(device, path)
    return str(e.value)


@pytest.fixture
def fifo(tmp_path):
    p = tmp_path / "prog.fifo"
    os.mkfifo(p)
    return p


# -- point 4: devices and FIFOs, through the CLI ----------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["/dev/zero", "fifo"])
def test_run_refuses_devices_and_fifos_without_reading(device, kind, fifo):
    """`run --program /dev/zero` grew to 23 GB; a FIFO blocked. Both: one line, exit 2, under
    a 3 GiB address-space limit (a MemoryError traceback before)."""
    path = "/dev/zero" if kind == "/dev/zero" else str(fifo)
    proc = accelstub("run", device, "--program", path, timeout=60)
    what = "a character device" if kind == "/dev/zero" else "a FIFO"
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"accelstub: error: {path} is {what}; a program is a regular file or a directory"]
    assert "Traceback" not in proc.stderr


def test_serve_refuses_dev_zero():
    proc = accelstub("serve", "nvdla", "--port", "0", "--program", "/dev/zero", timeout=60)
    assert proc.returncode == 2
    assert "/dev/zero is a character device" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("device", DEVICES)
def test_dev_null_and_an_empty_file_are_empty_programs(device, tmp_path):
    (tmp_path / "empty.cfg").write_bytes(b"")
    assert refused(device, Path("/dev/null")) == "/dev/null: empty program"
    assert refused(device, tmp_path / "empty.cfg") == f"{tmp_path / 'empty.cfg'}: empty program"


def test_run_dev_null_says_empty_program():
    proc = accelstub("run", "ne16", "--program", "/dev/null", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "accelstub: error: /dev/null: empty program"


# -- point 4: sizes checked before reading, per format ----------------------------------------

def sparse(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that takes no disk (truncate)."""
    with open(path, "ab") as f:
        f.truncate(size)
    return path


@pytest.mark.parametrize("device", DEVICES)
def test_oversized_command_script_is_refused_naming_file_and_limit(device, tmp_path):
    big = sparse(tmp_path / "bringup.cfg", 20 << 30)  # 20 GiB, sparse
    assert refused(device, big) == (f"{big} is {20 << 30} bytes; at most "
                                    f"{MAX_SCRIPT >> 20} MiB for a command script")


def demo_copy(tmp_path: Path, device: str) -> Path:
    return Path(shutil.copytree(DEMO / f"{device}_demo", tmp_path / f"{device}_demo"))


#: (device, file in its demo directory, the limit's words) for every file a format reads
FORMAT_FILES = [
    ("nvdla", "nvdla_demo.cfg", "16 MiB for an NVDLA trace"),
    ("nvdla", "nvdla_demo_l0_wt.dat", "64 MiB for an NVDLA memory file"),
    ("max78000", "weights.h", "64 MiB for a file of an ai8x-synthesis project"),
    ("max78000", "cnn.c", "64 MiB for a file of an ai8x-synthesis project"),
    ("ne16", "gen/src/input.c", "16 MiB for a file of a pulp-nnx test application"),
    ("ne16", "conf.json", "1 MiB for a file of a pulp-nnx test application"),
    ("ethos-u85", "demo_vela.tflite", "256 MiB for Vela's output"),
    ("ethos-u85", "input.npy", "256 MiB for a tensor file (.npy/.npz)"),
]


@pytest.mark.parametrize("device,name,limit", FORMAT_FILES)
def test_oversized_file_of_a_program_directory_is_refused(device, name, limit, tmp_path):
    """Sparse 1 GiB files (no disk used) in a copy of the demo: refused before reading, with
    the file and the format's limit named (the .cfg's start is kept, so it is still a trace)."""
    d = demo_copy(tmp_path, device)
    sparse(d / name, 1 << 30)
    msg = refused(device, d)
    assert len(msg.splitlines()) == 1
    assert f"{name.split('/')[-1]} is {1 << 30} bytes; at most {limit}" in msg


@pytest.mark.parametrize("device,name", [(d, n) for d, n, _ in FORMAT_FILES])
def test_fifo_inside_a_program_directory_is_refused(device, name, tmp_path):
    """A FIFO where a program file belongs is refused (not opened for reading, which blocks
    without a writer; not skipped as missing)."""
    d = demo_copy(tmp_path, device)
    (d / name).unlink()
    os.mkfifo(d / name)
    msg = refused(device, d)
    assert f"{name.split('/')[-1]} is a FIFO; only regular files are read" in msg


def test_load_image_in_a_command_script_refuses_a_fifo(tmp_path, fifo):
    script = tmp_path / "boot.cfg"
    script.write_text(f"mww 0x50100000 1\nload_image {fifo} 0x50400000 bin\n")
    msg = refused("max78000", script)
    assert msg.startswith(f"{script}:2: load_image: ") and "is a FIFO" in msg


def test_a_file_inside_a_directory_program_is_read_bounded(tmp_path):
    """Giving one file of a program directory (cnn.c) reads it bounded as a script, then names
    the directory; an oversized weights.h there is refused on that path too."""
    d = demo_copy(tmp_path, "max78000")
    assert "give that directory" in refused("max78000", d / "cnn.c")
    sparse(d / "weights.h", 1 << 30)
    assert f"weights.h is {1 << 30} bytes; at most 16 MiB for a command script" in \
        refused("max78000", d / "weights.h")


# -- point 4: memory stays a small multiple of the program ------------------------------------

def test_mem_init_lines_share_one_zero_buffer(tmp_path):
    """mem_init of 64 MiB is a 50-byte line: the trace's 200 of them held 12.8 GB of zeros
    once read; now one buffer of the largest size serves every line (the program, read)."""
    d = demo_copy(tmp_path, "nvdla")
    cfg = d / "nvdla_demo.cfg"
    lines = cfg.read_text().splitlines()
    clear = "mem_init(pri_mem, 0x80000000, 0x4000000, ALL_ZERO);"
    cfg.write_text("\n".join(lines[:2] + [clear] * 200 + lines[2:]) + "\n")
    device = open_device("nvdla")
    tracemalloc.start()
    try:
        host = load_trace(d, device)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(host.steps) > 200
    assert peak < (64 << 20) + (8 << 20), peak  # one 64 MiB buffer and the steps


def test_npy_header_claiming_more_than_the_file_holds_is_refused(tmp_path):
    """numpy allocates what an .npy header declares before reading: a 128-byte input claiming
    2**40 int8 elements is refused by its declared size."""
    d = demo_copy(tmp_path, "ethos-u85")
    x = np.load(d / "input.npy")
    header = {"descr": np.lib.format.dtype_to_descr(x.dtype), "fortran_order": False,
              "shape": (1 << 40,)}
    with open(d / "input.npy", "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(b"\0" * 16)
    msg = refused("ethos-u85", d)
    assert f"input.npy: its header declares {1 << 40} bytes of array data" in msg


# -- point 4: a program that runs no unit -----------------------------------------------------

def test_nvdla_trace_with_no_armed_layer_is_an_error(tmp_path):
    """A valid trace without D_OP_ENABLE (no layer armed) printed `cycles: 0 modelled` and
    exited 0; now it exits 2 saying why."""
    d = demo_copy(tmp_path, "nvdla")
    cfg = d / "nvdla_demo.cfg"
    kept = [ln for ln in cfg.read_text().splitlines()
            if not any(w in ln for w in ("OP_ENABLE", "intr_notify", "check_"))]
    cfg.write_text("\n".join(kept) + "\n")
    proc = accelstub("run", "nvdla", "--program", str(d))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cycles: 0 modelled" not in proc.stdout
    assert proc.stderr.strip() == ("accelstub: error: the program ran no layer: no hardware "
                                   "layer armed (every unit of a layer needs D_OP_ENABLE in its "
                                   "consumer group)")


# -- point 5: reset init of a program that became invalid -------------------------------------

def telnet_client(port: int) -> TelnetClient:
    client = TelnetClient(port, timeout=60)
    client.until(b"> ")  # banner and prompt
    return client


def command(client: TelnetClient, line: str) -> str:
    return client.command(line).replace("\r\n", "\n").strip()


@pytest.fixture
def served(tmp_path):
    """A server over telnet with the MAX78000 chain script (configs/demo) loaded from a copy
    in tmp_path, run to its end (stop: program-exit)."""
    script = tmp_path / "chain.cfg"
    shutil.copy(DEMO / "max78000_chain.cfg", script)
    server = StubServer([open_device("max78000")], gdb_port=None, telnet_port=0,
                        tcl_port=None)
    server.load_program(script, log=lambda s: None)
    rc = server.targets[0]
    rc.resume()
    assert rc.wait(60).reason == "done"
    server.start()
    client = telnet_client(server.telnet.port)
    try:
        assert "stop: program-exit" in command(client, "status")
        yield server, client, script
    finally:
        client.sock.close()
        server.stop()


def check_reset_failed(client: TelnetClient, expected: str) -> None:
    reply = command(client, "reset init")
    assert reply == f"reset init: {expected}"
    assert "internal error" not in reply
    status = command(client, "status").splitlines()
    assert "stop: debug-request" in status  # the reset's stop, not the stale program-exit
    assert "state: halted" in status and "cycles: 0" in status
    assert "halted due to debug-request" in command(client, "poll")


def test_reset_init_of_a_program_now_invalid_is_the_run_error(served, tmp_path):
    """The same one line `accelstub run` prints for the file, after "reset init: "."""
    server, client, script = served
    script.write_text("mww 0x50100000 1\nbogus 1 2\n")
    proc = accelstub("run", "max78000", "--program", str(script), timeout=60)
    run_line = proc.stderr.strip()
    assert run_line.startswith("accelstub: error: ") and len(run_line.splitlines()) == 1
    check_reset_failed(client, run_line[len("accelstub: error: "):])
    assert server.targets[0].host is None


def test_reset_init_of_a_program_replaced_by_a_fifo(served):
    server, client, script = served
    script.unlink()
    os.mkfifo(script)
    check_reset_failed(client, f"{script} is a FIFO; a program is a regular file or a "
                               "directory")


def test_a_good_reset_init_after_a_failed_one_loads_again(served):
    server, client, script = served
    original = script.read_text()
    script.write_text("")
    check_reset_failed(client, f"{script}: empty program")
    script.write_text(original)
    assert "halted due to debug-request" in command(client, "reset init")
    rc = server.targets[0]
    assert rc.last_stop.message == "reset init"  # the script ran: layers armed again
    rc.resume()
    assert rc.wait(60).reason == "done"
    assert "stop: program-exit" in execute(server.context(log=lambda s: None), "status")
