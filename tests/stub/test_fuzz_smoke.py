"""Issue 14 #7: a short run of the port fuzzer (accelstub.testkit.port_fuzz) against every
device (a server in a subprocess, gdb, telnet and Tcl ports at once), and what the full run
found."""
from __future__ import annotations

import pytest

from accelstub.devices import open_device
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.commands import CommandContext, CommandError, execute
from accelstub.testkit import port_fuzz as fuzz


@pytest.mark.parametrize("device", ["max78000", "ethos-u85", "ne16", "nvdla"])
def test_fuzz_smoke(device, tmp_path):
    """1200 random and mutated packets (400 per port): no crash, no hang, and no traceback in
    the server's log (each one would be a request without a clean error)."""
    res = fuzz.fuzz_device(device, packets=1200, batch=200, seed=7, workdir=str(tmp_path),
                           probe_timeout=10, batch_timeout=60)
    assert res.sent >= 1200 * 0.95  # a batch may end early on a D/k/^D that closes
    assert min(res.packets.values()) > 0
    assert res.crashes == [] and res.hangs == []
    assert res.tracebacks == []
    assert 0 < res.peak_rss_mib < 1024


def test_fuzz_generators_make_the_three_kinds():
    import random

    target = fuzz.Target.load("max78000")
    gen = fuzz.Generator(target, random.Random(1))
    gdb = [gen.gdb() for _ in range(2000)]
    assert sum(p.startswith(b"$") and p[-3:-2] == b"#" for p in gdb) > 1000
    valid = [p for p in gdb if p.startswith(b"$") and len(p) > 3 and
             p[-3:] == b"#%02x" % (sum(p[1:-3]) & 0xFF)]
    assert len(valid) > 900  # most are framed right, so they reach the handlers
    tcl = [gen.tcl() for _ in range(500)]
    assert sum(p.endswith(b"\x1a") for p in tcl) > 450
    telnet = [gen.telnet() for _ in range(500)]
    assert sum(p.endswith((b"\n", b"\r", b"\r\x00")) for p in telnet) > 450


# -- what the fuzzer found ---------------------------------------------------------------------

@pytest.fixture
def ctx(tmp_path):
    return CommandContext(targets=[RunControl(open_device("max78000"))], log=lambda s: None,
                          cwd=tmp_path)


@pytest.mark.parametrize("line", ["halt 99999999999999999999", "wait_halt 2147483648"])
def test_wait_timeout_out_of_range_is_an_error(ctx, line):
    """Was OverflowError (timestamp out of range for platform time_t) from Event.wait."""
    with pytest.raises(CommandError) as e:
        execute(ctx, line)
    assert str(e.value) == (f"{line.split()[0]}: timeout {line.split()[1]} out of range (at most "
                            "2147483647 ms)")
    assert execute(ctx, "halt 2147483647") == ""  # halted: returns at once


@pytest.mark.parametrize("cmd", ["load_image a\0b 0x50400000", "verify_image a\0b 0x50400000",
                                 "dump_image a\0b 0x50400000 4"])
def test_file_name_with_nul_is_an_error(ctx, cmd):
    """Was ValueError (embedded null byte) from os.open, logged as a traceback."""
    with pytest.raises(CommandError) as e:
        execute(ctx, cmd)
    assert str(e.value) == f"{cmd.split()[0]}: 'a\\x00b': a file name cannot contain a NUL byte"


def test_read_running_into_an_unmapped_address_returns_the_readable_bytes(stub, caplog):
    """x f000001f,8 on max78000: the read fails at 0xf0000020 (the unmapped end of the emu
    block, after EMU_END): the reply is the one readable byte, no traceback (was E01 with a
    traceback when the word before the end was a reserved hole)."""
    from accelstub.stub.client import RspClient

    caplog.set_level("DEBUG", logger="accelstub")
    c = RspClient(port=stub.gdb[0].port)
    try:
        assert c.request(b"mf000001f,8") == b"00"  # EMU_END's top byte: not at the end
        assert c.request(b"mf0000020,4") == b"E0e"
        assert len(c.request(b"mf0000008,100")) == 2 * 24  # 0xf0000008 up to the end
    finally:
        c.close()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


def test_reg_number_of_thousands_of_digits_is_an_error(ctx):
    """Was ValueError (int() refuses more than 4300 digits), logged as a traceback."""
    with pytest.raises(CommandError) as e:
        execute(ctx, "reg " + "9" * 15181)
    assert str(e.value).startswith("reg: no register number 99999999999999999999... (gdb's")
    with pytest.raises(CommandError) as e:
        execute(ctx, "reg 1234567890")
    assert str(e.value).startswith("reg: no register number 1234567890 (gdb's")
