"""Golden-output tests of the OpenOCD-compatible command table (stub/commands/).

Expected strings are written from OpenOCD's formats (the OpenOCD User's Guide, chapter "General
Commands", and OpenOCD's src/target/target.c), not from running the code.
"""
from __future__ import annotations

import re

import pytest

from accelstub.devices import DeviceError, open_device
from accelstub.devices.runcontrol import RunControl
from accelstub.stub.commands import CommandContext, CommandError, execute, split_words
from accelstub.stub.commands.registers import register_list
from tests.max78000 import programs

SRAM = 0x50400000
RATE = r"in \d+\.\d{6}s \(\d+\.\d{3} KiB/s\)"


@pytest.fixture
def logs():
    return []


@pytest.fixture
def ctx(rc, logs, tmp_path):
    return CommandContext(targets=[rc], log=logs.append, cwd=tmp_path)


def start_program(rc: RunControl, last_layer: int = 3) -> None:
    programs.apply(rc.device, last_layer + 1)  # LCNT_MAX = last_layer, cnn_en 0->1


def err(ctx: CommandContext, line: str) -> str:
    with pytest.raises(CommandError) as e:
        execute(ctx, line)
    return str(e.value)


# -- memory display -------------------------------------------------------------------------------

def test_mdw_ten_words_two_lines(ctx):
    values = " ".join(f"0x{i * 0x11111111:08x}" for i in range(10))
    assert execute(ctx, f"write_memory 0x50400000 32 {{{values}}}") == ""
    assert execute(ctx, "mdw 0x50400000 10") == (
        "0x50400000: 00000000 11111111 22222222 33333333 44444444 55555555 66666666 77777777 \n"
        "0x50400020: 88888888 99999999 ")


def test_mdw_default_count_and_decimal_address(ctx):
    execute(ctx, "mww 0x50400004 0xdeadbeef")
    assert execute(ctx, f"mdw {SRAM + 4}") == "0x50400004: deadbeef "
    assert execute(ctx, "mdw phys 0x50400004") == "0x50400004: deadbeef "


def test_mdh_and_mdb(ctx):
    execute(ctx, "mww 0x50400000 0xdeadbeef")
    assert execute(ctx, "mdh 0x50400000 3") == "0x50400000: beef dead 0000 "
    assert execute(ctx, "mdb 0x50400000 4") == "0x50400000: ef be ad de "


def test_mdb_33_bytes_wraps_after_32(ctx):
    execute(ctx, "mwb 0x50400000 0x5a 33")
    assert execute(ctx, "mdb 0x50400000 33") == (
        "0x50400000: " + "5a " * 32 + "\n"
        "0x50400020: 5a ")


def test_mdh_17_halfwords(ctx):
    execute(ctx, "mwh 0x50400000 0x1234 17")
    assert execute(ctx, "mdh 0x50400000 17") == (
        "0x50400000: " + "1234 " * 16 + "\n0x50400020: 1234 ")


def test_mww_fill_count_and_read_memory(ctx):
    assert execute(ctx, "mww 0x50400100 0xcafef00d 3") == ""
    assert execute(ctx, "read_memory 0x50400100 32 4") == "0xcafef00d 0xcafef00d 0xcafef00d 0x0"


def test_read_write_memory_round_trip_widths(ctx):
    execute(ctx, "write_memory 0x50400200 8 {1 2 0xff 0x10}")
    assert execute(ctx, "read_memory 0x50400200 8 4") == "0x1 0x2 0xff 0x10"
    assert execute(ctx, "read_memory 0x50400200 16 2") == "0x201 0x10ff"
    assert execute(ctx, "read_memory 0x50400200 32 1 phys") == "0x10ff0201"
    execute(ctx, "write_memory 0x50400208 64 {0x0123456789abcdef}")
    assert execute(ctx, "read_memory 0x50400208 64 1") == "0x123456789abcdef"
    assert execute(ctx, "read_memory 0x50400200 32 0") == ""


def test_mwb_mwh_write_lanes(ctx):
    execute(ctx, "mww 0x50400300 0")
    execute(ctx, "mwb 0x50400301 0xaa")
    execute(ctx, "mwh 0x50400302 0x1234")
    assert execute(ctx, "mdw 0x50400300") == "0x50400300: 1234aa00 "


# -- errors ---------------------------------------------------------------------------------------

def test_bad_address_and_usage(ctx):
    assert err(ctx, "mdw zz") == "mdw: invalid address 'zz'"
    assert err(ctx, "mdw 0x50400000 x1") == "mdw: invalid count 'x1'"
    assert err(ctx, "mdw") == "usage: mdw ['phys'] address [count]"
    assert err(ctx, "mww 0x50400000") == "usage: mww ['phys'] address value [count]"
    assert err(ctx, "read_memory 0x50400000 12 1") == (
        "read_memory: invalid width '12' (must be one of: 8, 16, 32 or 64)")
    assert err(ctx, "mwb 0x50400000 0x1ff") == "mwb: value 0x1ff does not fit in 8 bits"


def test_unmapped_memory_names_address(ctx):
    msg = err(ctx, "mdw 0x60000000 2")
    assert msg.startswith("mdw: cannot read memory: 0x60000000")
    assert "0x60000000" in err(ctx, "mww 0x60000000 1")


def test_unknown_and_not_applicable_commands(ctx):
    assert err(ctx, "xyz") == 'invalid command name "xyz"'
    assert err(ctx, "flash write_image x.bin") == (
        "flash does not apply to max78000 (an accelerator has no flash memory)")
    assert err(ctx, "arm semihosting enable").startswith("arm does not apply to max78000 "
                                                         "(an accelerator has no ")
    assert err(ctx, "adapter speed 1000").startswith("adapter does not apply to max78000")
    assert err(ctx, "jtag names").startswith("jtag does not apply to max78000")


def test_nothing_is_evaluated(ctx):
    assert "not supported" in err(ctx, "mdw [expr 0x50400000]")
    assert "not supported" in err(ctx, "mdw $addr")
    assert err(ctx, "exec rm -rf /") == 'invalid command name "exec"'
    assert err(ctx, "python print(1)") == 'invalid command name "python"'


def test_ocd_prefix_echo_and_tcl_builtins(ctx):
    assert execute(ctx, "ocd_mdw 0x50400000") == execute(ctx, "mdw 0x50400000")
    assert execute(ctx, "echo hello  world") == "hello world"
    assert execute(ctx, "echo -n {two words}") == "two words"
    assert err(ctx, "ocd_nothing") == 'invalid command name "ocd_nothing"'
    assert err(ctx, "set x 1").startswith("set: Tcl is not evaluated here")
    assert err(ctx, "proc f {} {}").startswith("proc: Tcl is not evaluated here")


def test_split_words():
    assert split_words('a "b c" {d {e}} f\\ g') == ["a", "b c", "d {e}", "f g"]
    assert split_words("  mdw   0x1  ") == ["mdw", "0x1"]
    assert split_words("") == []
    with pytest.raises(CommandError):
        split_words("a [b]")
    with pytest.raises(CommandError):
        split_words('a "b')
    with pytest.raises(CommandError):
        split_words("a {b")


def test_running_target_refuses_writes_and_step(ctx, rc, logs):
    rc.device.write_register("EMU_THROTTLE_US", 200_000)
    start_program(rc)
    assert execute(ctx, "resume") == ""
    assert rc.running
    assert execute(ctx, "poll") == "target state: running"
    assert err(ctx, "mww 0x50400000 1").startswith("target running")
    assert err(ctx, "reg r0 1").startswith("target running")  # worded once, by dispatch
    assert err(ctx, "step").startswith("target running")
    assert err(ctx, "resume").startswith("target running")
    assert execute(ctx, "halt") == ""
    assert not rc.running
    assert re.fullmatch(r"\[max78000\.cnn\] halted due to debug-request, layer: Layer \d\n"
                        r"pc: 0x501000[0-9a-f]{2}", logs[-1])


def test_host_md_lists_as_md_does(ctx):
    """``host mdw`` reads as the driver's CPU does; plain SRAM has no read side effects, so it
    lists what mdw lists, in OpenOCD's md format."""
    execute(ctx, f"mww {SRAM:#x} 0x11223344 2")
    assert execute(ctx, f"host mdw {SRAM:#x} 2") == "0x50400000: 11223344 11223344 "
    assert execute(ctx, f"host mdb {SRAM:#x}") == "0x50400000: 44 "
    assert err(ctx, "host mdw") == err(ctx, "host mdx 0") == \
        "usage: host mdw|mdh|mdb address [count]"


def test_device_errors_of_writes_name_the_command(ctx, rc, monkeypatch):
    """mw*, write_memory and reg word only their bus errors; a model's DeviceError
    (say an unselectable bank) reaches the dispatcher, which prefixes the command once."""
    def refuse(*args):
        raise DeviceError("no bank selected")

    monkeypatch.setattr(rc.device, "write", refuse)
    monkeypatch.setattr(rc.device, "write_register", refuse)
    assert err(ctx, "mww 0x50400000 1") == "mww: no bank selected"
    assert err(ctx, "write_memory 0x50400000 32 {1}") == "write_memory: no bank selected"
    name = next(e.name for e in register_list(rc) if not e.core)
    assert err(ctx, f"reg {name} 1") == "reg: no bank selected"


# -- run control ----------------------------------------------------------------------------------

def test_step_logs_halted_message_and_poll(ctx, rc, logs):
    start_program(rc)
    assert execute(ctx, "reg pc") == "pc (/32): 0x50100010"
    assert execute(ctx, "step") == ""
    assert logs == ["[max78000.cnn] halted due to single-step, layer: Layer 1\npc: 0x50100014"]
    assert execute(ctx, "poll") == "target halted due to single-step, pc: 0x50100014"
    assert execute(ctx, "reg pc") == "pc (/32): 0x50100014"


def test_step_to_the_end_is_program_exit(ctx, rc, logs):
    start_program(rc, last_layer=1)
    execute(ctx, "step")
    execute(ctx, "step")
    assert logs[-1] == "[max78000.cnn] halted due to program-exit, layer: none\npc: 0xf000001c"
    assert execute(ctx, "poll") == "target halted due to program-exit, pc: 0xf000001c"
    assert err(ctx, "step") == ("step: the program has ended: pc 0xf000001c is its end address "
                                "(EMU_END), no layer left to run")
    assert err(ctx, "resume") == "resume: no layer left to run (start the accelerator first)"
    rc.init_handler = lambda: start_program(rc)  # as the stub sets it when it loads a program
    execute(ctx, "reset halt")
    assert err(ctx, "resume") == ("resume: no layer left to run ('reset init' loads the program "
                                  "again; a plain 'reset' only resets the registers)")
    execute(ctx, "reset init")
    assert execute(ctx, "resume") == ""


def test_step_with_address_sets_pc(ctx, rc, logs):
    start_program(rc)
    execute(ctx, "step 0x50100018")  # layer 2
    assert logs[-1] == "[max78000.cnn] halted due to single-step, layer: Layer 3\npc: 0x5010001c"


def test_resume_wait_halt_program_exit(ctx, rc, logs):
    start_program(rc)
    assert execute(ctx, "resume") == ""
    assert execute(ctx, "wait_halt 5000") == ""
    assert not rc.running
    assert logs[-1] == "[max78000.cnn] halted due to program-exit, layer: none\npc: 0xf000001c"
    # a halted target: halt and wait_halt do nothing
    n = len(logs)
    assert execute(ctx, "halt") == "" and execute(ctx, "wait_halt") == ""
    assert len(logs) == n


def test_resume_stops_at_breakpoint(ctx, rc, logs):
    start_program(rc)
    assert execute(ctx, "bp 0x50100018 4 hw") == "breakpoint set at 0x50100018"
    execute(ctx, "resume")
    execute(ctx, "wait_halt")
    assert logs[-1] == "[max78000.cnn] halted due to breakpoint, layer: Layer 2\npc: 0x50100018"


def test_reset_halt_and_init(ctx, rc, logs):
    start_program(rc)
    execute(ctx, "step")
    assert execute(ctx, "reset halt") == ""
    assert logs[-1] == "[max78000.cnn] halted due to debug-request, layer: none\npc: 0x50100010"
    assert execute(ctx, "reg CNNx16_0_LCNT_MAX") == "CNNx16_0_LCNT_MAX (/32): 0x00000000"
    execute(ctx, "reset init")
    assert logs[-1].startswith("[max78000.cnn] halted due to debug-request")
    assert execute(ctx, "reset") == ""
    rc.wait(5)
    assert err(ctx, "reset now") == "usage: reset [run|halt|init]"


# -- registers ------------------------------------------------------------------------------------

def test_reg_list_caches_and_lines(ctx, rc):
    start_program(rc)
    lines = execute(ctx, "reg").split("\n")
    assert lines[0] == "===== accelstub host core"
    assert lines[1] == "(0) r0 (/32): 0x00000000"
    assert lines[14] == "(13) sp (/32): 0x00000000"
    assert lines[16] == "(15) pc (/32): 0x50100010"
    assert lines[17] == "(25) xpsr (/32): 0x01000000"  # gdb's numbers (m-profile layout)
    assert lines[18] == "===== cnn_global"
    assert lines[19].startswith("(26) ")
    headers = [line for line in lines if line.startswith("=====")]
    assert headers == ["===== accelstub host core", "===== cnn_global", "===== cnn_q0",
                       "===== cnn_q1", "===== cnn_q2", "===== cnn_q3", "===== emu"]
    lcnt = [line for line in lines if " CNNx16_0_LCNT_MAX " in line]
    assert len(lcnt) == 1
    assert re.fullmatch(r"\(\d+\) CNNx16_0_LCNT_MAX \(/32\): 0x00000003", lcnt[0])
    # the numbers are gdb's register numbers from target.xml, for every register
    from accelstub.stub.target_xml import register_table

    gdb = {e.name: e.regnum for e in register_table(rc.device.description)}
    listed = {line.split()[1]: int(line[1:line.index(")")]) for line in lines
              if line.startswith("(")}
    assert listed == gdb


def test_reg_read_write_single(ctx, rc):
    assert execute(ctx, "reg r0 0x1234") == "r0 (/32): 0x00001234"
    assert execute(ctx, "reg r0") == "r0 (/32): 0x00001234"
    assert execute(ctx, "reg 0") == "r0 (/32): 0x00001234"
    assert execute(ctx, "reg xpsr") == "xpsr (/32): 0x01000000"
    assert execute(ctx, "reg CNNx16_0_LCNT_MAX 3") == "CNNx16_0_LCNT_MAX (/32): 0x00000003"
    assert rc.device.read_register("CNNx16_0_LCNT_MAX") == 3
    assert err(ctx, "reg nosuchreg") == "reg: register nosuchreg not found in current target"
    assert err(ctx, "reg r0 zz") == "reg: invalid value 'zz'"


def test_reg_by_number_matches_listing(ctx):
    lines = execute(ctx, "reg").split("\n")
    line = next(x for x in lines if " CNNx16_1_CTRL " in x)
    num = line[1:line.index(")")]
    single = execute(ctx, f"reg {num}")
    assert single == line[line.index(") ") + 2:]


def test_get_set_reg(ctx):
    execute(ctx, "set_reg {r1 0x10 r2 32}")
    assert execute(ctx, "get_reg {r1 r2}") == "r1 0x00000010 r2 0x00000020"


# -- targets --------------------------------------------------------------------------------------

def test_targets_table(ctx):
    assert execute(ctx, "targets") == (
        "    TargetName         Type       Endian TapName            State       \n"
        "--  ------------------ ---------- ------ ------------------ ------------\n"
        " 0* max78000.cnn       max78000   little max78000.cnn       halted")


def test_targets_two_and_select(rc, logs):
    rc2 = RunControl(open_device("max78000"))
    ctx = CommandContext(targets=[rc, rc2], log=logs.append)
    rc2.device.write_register("EMU_THROTTLE_US", 200_000)
    start_program(rc2)
    rc2.resume()
    try:
        assert execute(ctx, "targets 1") == ""
        assert ctx.current == 1 and ctx.target is rc2
        assert execute(ctx, "targets").split("\n")[2:] == [
            " 0  max78000.cnn       max78000   little max78000.cnn       halted",
            " 1* max78000.cnn       max78000   little max78000.cnn       running"]
        assert err(ctx, "targets 7").startswith("Target: 7 is unknown")
    finally:
        rc2.halt_and_wait(2)


# -- breakpoints and watchpoints ------------------------------------------------------------------

def test_bp_list_and_remove(ctx, rc):
    assert execute(ctx, "bp") == ""
    assert execute(ctx, "bp 0x50100014 4") == "breakpoint set at 0x50100014"
    assert execute(ctx, "bp 0x5010001c 4 hw") == "breakpoint set at 0x5010001c"
    assert execute(ctx, "bp") == ("Breakpoint(IVA): 0x50100014, 0x4, 1\n"
                                  "Breakpoint(IVA): 0x5010001c, 0x4, 1")
    assert rc.breakpoints == {0x50100014, 0x5010001c}
    assert execute(ctx, "rbp 0x50100014") == ""
    assert execute(ctx, "bp") == "Breakpoint(IVA): 0x5010001c, 0x4, 1"
    assert err(ctx, "rbp 0x50100014") == "no breakpoint at address 0x50100014 found"
    assert execute(ctx, "rbp all") == ""
    assert execute(ctx, "bp") == "" and rc.breakpoints == set()
    assert err(ctx, "rbp") == err(ctx, "rbp 1 2") == "usage: rbp 'all' | address"


def test_wp_list_and_remove(ctx, rc):
    assert execute(ctx, "wp") == ""
    assert execute(ctx, "wp 0x50400000 4 w") == ""
    assert execute(ctx, "wp 0x50408000 16") == ""
    assert execute(ctx, "wp 0x50410000 8 r") == ""
    assert execute(ctx, "wp") == (
        "address: 0x50400000, len: 0x00000004, r/w/a: 1, value: 0x00000000, mask: 0xffffffff\n"
        "address: 0x50408000, len: 0x00000010, r/w/a: 2, value: 0x00000000, mask: 0xffffffff\n"
        "address: 0x50410000, len: 0x00000008, r/w/a: 0, value: 0x00000000, mask: 0xffffffff")
    assert execute(ctx, "rwp 0x50408000") == ""
    assert len(rc.watchpoints) == 2
    assert execute(ctx, "rwp all") == ""
    assert execute(ctx, "wp") == ""
    assert err(ctx, "wp 0x50400000 4 x") == "usage: wp [address length [('r'|'w'|'a')]]"
    assert err(ctx, "rwp") == "usage: rwp 'all' | address"


def test_watchpoint_stops_run(ctx, rc, logs):
    start_program(rc)
    execute(ctx, "wp 0x50400100 4 w")  # layer 0 writes its output at 0x50400100-0x5040010f
    execute(ctx, "resume")
    execute(ctx, "wait_halt")
    assert logs[-1] == "[max78000.cnn] halted due to watchpoint, layer: Layer 1\npc: 0x50100014"


# -- images ---------------------------------------------------------------------------------------

def ihex_record(kind: int, offset: int, data: bytes) -> str:
    body = bytes([len(data), offset >> 8, offset & 0xFF, kind]) + data
    return ":" + (body + bytes([(-sum(body)) & 0xFF])).hex().upper()


def test_load_dump_verify_bin(ctx, tmp_path):
    payload = bytes(range(16))
    (tmp_path / "in.bin").write_bytes(payload)
    out = execute(ctx, "load_image in.bin 0x50400040 bin")
    first, second = out.split("\n")
    assert first == "16 bytes written at address 0x50400040"
    assert re.fullmatch(r"downloaded 16 bytes " + RATE, second)
    assert execute(ctx, "mdw 0x50400040 4") == "0x50400040: 03020100 07060504 0b0a0908 0f0e0d0c "
    out = execute(ctx, f"dump_image {tmp_path / 'out.bin'} 0x50400040 16")
    assert re.fullmatch(r"dumped 16 bytes " + RATE, out)
    assert (tmp_path / "out.bin").read_bytes() == payload
    assert re.fullmatch(r"verified 16 bytes " + RATE,
                        execute(ctx, "verify_image out.bin 0x50400040"))


def test_verify_mismatch_names_first_address(ctx, tmp_path):
    (tmp_path / "img.bin").write_bytes(b"\x11\x22\x33\x44")
    execute(ctx, "load_image img.bin 0x50400080")
    execute(ctx, "mwb 0x50400082 0x99")
    msg = err(ctx, "verify_image img.bin 0x50400080 bin")
    assert msg.split("\n") == [
        "diff 0 address 0x50400082. Was 0x99 instead of 0x33",
        "verify_image: 1 byte(s) differ; first at 0x50400082: expected 0x33, got 0x99"]


def test_load_verify_ihex(ctx, tmp_path):
    text = "\n".join([
        ihex_record(4, 0, b"\x50\x40"),            # extended linear address 0x5040xxxx
        ihex_record(0, 0x0300, b"\xde\xad\xbe\xef"),
        ihex_record(0, 0x0304, b"\x01\x02"),       # contiguous: merged into one section
        ihex_record(0, 0x0400, b"\xaa"),
        ihex_record(1, 0, b""),
    ]) + "\n"
    (tmp_path / "prog.hex").write_text(text)
    out = execute(ctx, "load_image prog.hex")
    lines = out.split("\n")
    assert lines[:2] == ["6 bytes written at address 0x50400300",
                         "1 bytes written at address 0x50400400"]
    assert re.fullmatch(r"downloaded 7 bytes " + RATE, lines[2])
    assert execute(ctx, "mdb 0x50400300 6") == "0x50400300: de ad be ef 01 02 "
    assert execute(ctx, "mdb 0x50400400") == "0x50400400: aa "
    assert re.fullmatch(r"verified 7 bytes " + RATE, execute(ctx, "verify_image prog.hex"))
    # with an offset (OpenOCD relocates ihex sections by the address argument)
    execute(ctx, "load_image prog.hex 0x1000 ihex")
    assert execute(ctx, "mdb 0x50401300 4") == "0x50401300: de ad be ef "


def test_image_errors(ctx, tmp_path):
    assert err(ctx, "load_image missing.bin 0x50400000").startswith(
        "load_image: couldn't open missing.bin")
    (tmp_path / "bad.hex").write_text(":0400000001020304FF\n")
    assert "checksum" in err(ctx, "load_image bad.hex 0 ihex")
    (tmp_path / "x.bin").write_bytes(b"1234")
    assert "0x60000000" in err(ctx, "load_image x.bin 0x60000000")
    assert err(ctx, "load_image x.bin 0x50400000 elf") == (
        "load_image: image format 'elf' is not supported (use bin or ihex)")
    assert err(ctx, "dump_image x.bin") == "usage: dump_image filename address size"


# -- misc -----------------------------------------------------------------------------------------

def test_capture_returns_log_and_result(ctx, rc, logs):
    start_program(rc)
    assert execute(ctx, 'capture "step"') == (
        "[max78000.cnn] halted due to single-step, layer: Layer 1\npc: 0x50100014\n")
    assert logs == []  # captured, not logged
    execute(ctx, "mww 0x50400000 0x12345678")
    assert execute(ctx, "capture {mdw 0x50400000}") == "0x50400000: 12345678 "
    assert err(ctx, 'capture "nosuch"') == 'invalid command name "nosuch"'


def test_init_version_help(ctx):
    assert execute(ctx, "init") == ""
    assert execute(ctx, "version") == "accelstub 0.1.0 (OpenOCD-compatible command set)"
    lines = execute(ctx, "help").split("\n")
    assert "mdw ['phys'] address [count]" in lines
    assert "reset [run|halt|init]" in lines
    assert execute(ctx, "help mdw").split("\n")[0] == "mdw ['phys'] address [count]"


def test_shutdown(ctx):
    called = []
    ctx.shutdown = lambda: called.append(1)
    assert execute(ctx, "shutdown") == "shutdown command invoked"
    assert called == [1]


def test_several_commands_on_one_line(ctx):
    assert execute(ctx, "mww 0x50400000 7; mdw 0x50400000") == "0x50400000: 00000007 "


def test_device_monitor_commands(ctx, rc):
    from accelstub.devices.device import MonitorCommand

    rc.device.monitor_commands = lambda: {
        "hello": MonitorCommand("name", lambda c, args: f"hello {args[0]} from "
                                f"{c.target.device.name}")}
    assert execute(ctx, "hello world") == "hello world from max78000"
    assert "hello name" in execute(ctx, "help").split("\n")


def test_units_lists_the_program_one_line_per_unit():
    from accelstub.devices import open_device
    from accelstub.devices.runcontrol import RunControl
    from accelstub.stub.commands import CommandContext, execute

    rc = RunControl(open_device("max78000"))
    programs.apply(rc.device, 2)
    lines = execute(CommandContext([rc]), "units").splitlines()
    # the wording of the ai8x tools' cnn.c comments (devices/max78000/listing.py); the unit at
    # pc marked "=>" (gdb's x/i marker), then the end address
    assert lines == [f"{mark} 0x5010001{4 * y:x} Layer {y}: 4x2x2, no pooling, conv2d with "
                     "kernel size 1x1, stride 1/1, pad 0/0, no activation, 4x2x2 output"
                     for mark, y in (("=>", 0), ("  ", 1))] + [
        "   0xf000001c end: end of program (pc once every layer has run)"]


def test_status_reports_state_pc_interrupts_and_counters():
    from accelstub.devices import open_device
    from accelstub.devices.runcontrol import RunControl
    from accelstub.stub.commands import CommandContext, execute

    rc = RunControl(open_device("max78000"))
    # writing 1 to cnn_irq forces it [UG-CNN: Table 27-19]
    rc.device.write_register("CNNx16_0_CTRL", 0x1000)
    out = execute(CommandContext([rc]), "status").splitlines()
    assert out[:2] == ["state: halted", "pc: 0x50100010"]
    assert "irq.CNN: 1" in out and "units: 0" in out


def test_svd_command_writes_a_file(tmp_path):
    from accelstub.devices import open_device
    from accelstub.devices.runcontrol import RunControl
    from accelstub.stub.commands import CommandContext, execute

    rc = RunControl(open_device("max78000"))
    out = execute(CommandContext([rc], cwd=tmp_path), "svd m.svd")
    assert out == f"wrote {tmp_path / 'm.svd'}"
    assert "<name>CNN_Q0</name>" in (tmp_path / "m.svd").read_text()


def test_reset_init_runs_the_init_handler_and_reset_halt_does_not(ctx, rc, logs):
    start_program(rc)
    rc.init_handler = lambda: programs.apply(rc.device, 4)
    rc.step(5)
    execute(ctx, "reset halt")
    assert rc.device.finished()  # registers back to reset values: no program
    execute(ctx, "reset init")
    assert not rc.device.finished() and rc.device.pc == 0x50100010
    assert logs[-1] == "[max78000.cnn] halted due to debug-request, layer: Layer 0\npc: 0x50100010"


def test_regions_lists_named_populated_ranges(ctx):
    lines = execute(ctx, "regions").splitlines()
    assert "0x50400000 0x50408000 sram_q0_g0 ram" in lines
    assert "0x50180000 0x50183000 mram_q0_p0 weights" in lines  # 12 KiB of the 16 KiB block
