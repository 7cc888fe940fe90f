"""NVDLA trace tests the project writes itself (testkit/nvdla_build.py, the hardware repository's
trace format), each layer's output checked by CRC against the independent integer reference
(testkit/nvdla_reference.py): `accelstub run nvdla --program DIR`."""
from __future__ import annotations

import pytest

from accelstub.stub.cli import main as cli_main
from accelstub.testkit.nvdla_build import Cdp, Conv, Pdp, Sdp, Stage, build

CASES = {
    "conv_3x3_pad": [Conv(9, 7, 16, 16, clip=3, cvt=(0, 1, 2))],
    "conv_remainders": [Conv(11, 5, 13, 21, r=2, s=3, pad=(0, 1, 2, 0), pad_value=-7,
                             clip=5, cvt=(-3, 7, 6))],
    "conv_input_converter": [Conv(7, 6, 12, 9, pad=(1, 0, 2, 1), pad_value=9, clip=4,
                                  cvt_in=(-20, 3, 2), cvt=(0, 1, 1))],
    "conv_stride_dilation": [Conv(13, 12, 9, 10, r=3, s=2, stride=(2, 3), dilation=(2, 1),
                                  pad=(1, 2, 0, 1), pad_value=5, clip=8, cvt=(11, -9, 4))],
    "conv_1x1_bs_bn_reg": [Conv(6, 6, 40, 24, r=1, s=1, pad=(0, 0, 0, 0), clip=2,
                                bs=Stage(alu="sum", alu_operand=-300, alu_shift=3, mul=True,
                                         mul_operand=-77, mul_shift=9, relu=True),
                                bn=Stage(alu="max", alu_operand=20, mul=True,
                                         mul_operand=3, mul_shift=1),
                                cvt=(5, 300, 9))],
    "conv_prelu_kernel_operands": [Conv(5, 4, 8, 12, clip=6,
                                        bs=Stage(alu="sum", mul=True, mul_shift=4, prelu=True,
                                                 mem="kernel"),
                                        cvt=(0, 1, 1))],
    "sdp_element_two_bytes": [Sdp(7, 3, 19, bs=Stage(alu="min", alu_shift=2, mul=True,
                                                     mul_shift=3, mem="element",
                                                     two_bytes=True),
                                  bn=Stage(mul=True, mul_shift=1, mem="kernel", relu=True),
                                  cvt=(-2, 13, 3))],
    "sdp_alu_only_kernel": [Sdp(4, 4, 9, bs=Stage(alu="max", alu_shift=1, mem="kernel"))],
    "chain_conv_then_sdp": [Conv(8, 8, 16, 16, clip=4, cvt=(0, 1, 3)),
                            Sdp(chain=True, bs=Stage(alu="sum", alu_operand=3, mul=True,
                                                     mul_operand=5, mul_shift=2, relu=True)),
                            Conv(6, 5, 8, 9, clip=7, cvt=(1, 2, 1))],
    # the second layer's own input and weights are in memory too: using them fails the CRC
    "conv_reuse_data_and_weights": [Conv(8, 6, 12, 10, clip=3, cvt_in=(-5, 3, 1), cvt=(0, 1, 2),
                                         keep=(True, True)),
                                    Conv(8, 6, 12, 10, clip=4, cvt=(0, 1, 1),
                                         reuse=(True, True))],
    "conv_reuse_weights_across_sdp": [Conv(7, 5, 8, 9, clip=3, cvt=(0, 1, 3), keep=(False, True)),
                                      Sdp(chain=True, bs=Stage(alu="max", alu_operand=-4)),
                                      Conv(9, 4, 8, 9, pad=(0, 0, 1, 1), clip=3, cvt=(0, 1, 3),
                                           reuse=(False, True), keep=(True, True)),
                                      Conv(9, 4, 8, 9, pad=(0, 0, 1, 1), clip=2, cvt=(0, 1, 2),
                                           reuse=(True, False))],
    "pdp_max_min": [Pdp(9, 7, 11, "max", (3, 2), (2, 1), (1, 0, 1, 1)),
                    Pdp(6, 6, 8, "min", (2, 3), (1, 2), (0, 1, 2, 0))],
    "pdp_average_padding": [Pdp(7, 9, 19, "average", (3, 3), (2, 2), (1, 2, 2, 1), 5),
                            Pdp(1, 3, 8, "average", (3, 4), (1, 1), (1, 1, 1, 2), -3)],
    "cdp_lrn_linear": [Cdp(5, 4, 21, normalz=2, datin=(3, 2, 1), datout=(-40, 3, 6))],
    "cdp_lrn_exponent_wide": [Cdp(3, 3, 16, normalz=4, le_linear=False, le_select=2,
                                  lo_select=7, priority=(True, False, True),
                                  datout=(100, -2, 8))],
    "cdp_bypasses": [Cdp(4, 2, 9, sqsum_bypass=True, mul_bypass=True, datin=(-5, 7, 2),
                         datout=(7, 5, 3), le_select=1, lo_select=0)],
}


@pytest.mark.parametrize("name", CASES)
def test_generated_traces_pass(name, tmp_path, capsys):
    trace = build(CASES[name], name, seed=3).write(tmp_path / name)
    assert cli_main(["run", "nvdla", "--program", str(trace)]) == 0
    out = capsys.readouterr().out
    assert out.count(": PASS") == len(CASES[name]), out


def test_a_wrong_crc_fails_with_the_check_and_its_line(tmp_path, capsys):
    trace = build(CASES["conv_3x3_pad"], "bad", seed=3).write(tmp_path / "bad")
    cfg = trace / "bad.cfg"
    text = cfg.read_text()
    crc = text.rsplit(", ", 1)[1].split(")")[0]
    cfg.write_text(text.replace(crc, f"{int(crc, 16) ^ 1:#010x}"))
    assert cli_main(["run", "nvdla", "--program", str(cfg)]) == 1
    out = capsys.readouterr().out
    line = text.splitlines().index(next(ln for ln in text.splitlines()
                                        if ln.startswith("check_crc"))) + 1
    assert f"FAIL (expected {int(crc, 16) ^ 1:#010x}, got {crc}" in out
    assert f"[bad.cfg:{line}]" in out


def test_trace_errors_name_the_file_and_line(tmp_path, capsys):
    trace = build(CASES["conv_3x3_pad"], "err", seed=3).write(tmp_path / "err")
    cfg = trace / "err.cfg"
    lines = cfg.read_text().splitlines()
    bad = next(i for i, ln in enumerate(lines) if "NVDLA_CDMA.D_MISC_CFG_0" in ln)
    lines[bad] = "reg_write(NVDLA_CDMA.D_NO_SUCH_0, 0x1);"
    cfg.write_text("\n".join(lines) + "\n")
    assert cli_main(["run", "nvdla", "--program", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert f"err.cfg:{bad + 1}: no register CDMA_D_NO_SUCH" in err
    lines[bad] = "frobnicate(1);"
    cfg.write_text("\n".join(lines) + "\n")
    assert cli_main(["run", "nvdla", "--program", str(cfg)]) == 2
    assert f"err.cfg:{bad + 1}: unknown trace command frobnicate" in capsys.readouterr().err


def test_inconsistent_units_are_an_error_naming_the_registers(tmp_path, capsys):
    trace = build(CASES["conv_3x3_pad"], "mix", seed=3).write(tmp_path / "mix")
    cfg = trace / "mix.cfg"
    text = cfg.read_text().replace("reg_write(NVDLA_CSC.D_CONV_STRIDE_EXT_0, 0x0);",
                                   "reg_write(NVDLA_CSC.D_CONV_STRIDE_EXT_0, 0x10001);")
    cfg.write_text(text)
    assert cli_main(["run", "nvdla", "--program", str(cfg)]) == 2
    assert "CSC_D_CONV_STRIDE_EXT differs from CDMA_D_CONV_STRIDE" in capsys.readouterr().err


def test_a_kernel_larger_than_the_padded_input_is_named(tmp_path, capsys):
    """Dilation 10 across: a 3-wide kernel spans 21 columns of a 9-column input padded by 1."""
    trace = build(CASES["conv_3x3_pad"], "wide", seed=3).write(tmp_path / "wide")
    cfg = trace / "wide.cfg"
    cfg.write_text(cfg.read_text().replace("reg_write(NVDLA_CSC.D_DILATION_EXT_0, 0x0);",
                                           "reg_write(NVDLA_CSC.D_DILATION_EXT_0, 0x9);"))
    assert cli_main(["run", "nvdla", "--program", str(cfg)]) == 2
    assert "the kernel spans 21x3 (CSC_D_WEIGHT_SIZE_EXT_0, D_DILATION_EXT), more than the " \
           "padded input's 11x9" in capsys.readouterr().err


def test_read_only_registers_written_by_a_trace_are_counted_not_failed(tmp_path, capsys):
    trace = build(CASES["conv_3x3_pad"], "ro", seed=3).write(tmp_path / "ro")
    cfg = trace / "ro.cfg"
    text = cfg.read_text()
    cfg.write_text(text.replace("poll_reg_equal", "reg_write(NVDLA_CACC.S_STATUS_0, 0x0);\n"
                                "reg_write(NVDLA_CDMA.D_NAN_INPUT_DATA_NUM_0, 0x5);\n"
                                "poll_reg_equal", 1))
    assert cli_main(["run", "nvdla", "--program", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "2 writes to read-only registers ignored (CACC_S_STATUS, " \
           "CDMA_D_NAN_INPUT_DATA_NUM_G0)" in out


def test_bundled_demo_is_current(tmp_path):
    from accelstub.testkit.nvdla_build import DEMO
    from tests.helpers import ROOT

    fresh = build(DEMO, "nvdla_demo", seed=1).write(tmp_path / "nvdla_demo")
    demo = ROOT / "configs" / "demo" / "nvdla_demo"
    assert sorted(p.name for p in demo.iterdir()) == sorted(p.name for p in fresh.iterdir())
    for f in fresh.iterdir():
        assert (demo / f.name).read_text() == f.read_text(), \
            f"{f.name}: regenerate with python -m accelstub.testkit.nvdla_build --demo " \
            "configs/demo/nvdla_demo"


def test_memory_commands_outside_the_windows_are_refused_when_read(tmp_path, capsys):
    cfg = tmp_path / "big.cfg"
    cfg.write_text("mem_init(pri_mem, 0x80000000, 0xffffffff, ALL_ZERO);\n")
    assert cli_main(["run", "nvdla", "--program", str(cfg)]) == 2
    assert "big.cfg:1: 0xffffffff bytes at 0x80000000 are not all in the NVDLA's memory " \
           "windows" in capsys.readouterr().err


def test_cdp_lut_statistics_count_which_table_gave_each_result(tmp_path):
    """CDP_D_PERF_LUT_UFLOW/OFLOW/HYBRID/LE_HIT/LO_HIT of the layer's group after an LRN layer
    equal the independent reference's count over every lane (RTL: saturating counters latched
    at layer end, not gated by D_PERF_ENABLE)."""
    from accelstub.devices import open_device
    from accelstub.devices.runcontrol import RunControl
    from accelstub.stub.commands import CommandContext
    from accelstub.stub.program import load_program, run_to_end

    seen: dict[str, int] = {}
    for name in ("cdp_lrn_linear", "cdp_lrn_exponent_wide", "cdp_bypasses"):
        trace = build(CASES[name], name, seed=3)
        rc = RunControl(open_device("nvdla"))
        load_program(CommandContext(targets=[rc]), trace.write(tmp_path / name))
        assert run_to_end(rc).code == 0
        assert len(trace.status) == 5
        for (reg, group), want in trace.status.items():
            assert rc.device.regs.peek(f"{reg}_G{group}") == want, (name, reg)
            seen[reg] = seen.get(reg, 0) + want
    assert all(seen.values()), seen  # together the cases reach every kind of result


def test_reuse_after_other_buffer_settings_reads_memory(tmp_path, capsys):
    """With D_BANK changed the buffer is not reused (the C model refetches): the layer reads
    its own data from memory, and the CRC computed with the kept data fails."""
    trace = build(CASES["conv_reuse_data_and_weights"], "bank", seed=3).write(tmp_path / "bank")
    cfg = trace / "bank.cfg"
    lines = cfg.read_text().splitlines()
    for unit in ("CDMA", "CSC"):  # the second layer's
        last = max(i for i, ln in enumerate(lines)
                   if ln.startswith(f"reg_write(NVDLA_{unit}.D_BANK_0"))
        lines[last] = f"reg_write(NVDLA_{unit}.D_BANK_0, 0xe000e);"
    cfg.write_text("\n".join(lines) + "\n")
    assert cli_main(["run", "nvdla", "--program", str(cfg)]) == 1
    out = capsys.readouterr().out
    assert out.count(": PASS") == 1 and out.count(": FAIL") == 1, out


def test_weight_reuse_after_released_weights_is_an_error(tmp_path, capsys):
    layers = [Conv(5, 5, 8, 8, clip=3), Conv(5, 5, 8, 8, clip=3, reuse=(False, True))]
    trace = build(layers, "rls", seed=3).write(tmp_path / "rls")
    assert cli_main(["run", "nvdla", "--program", str(trace)]) == 2
    assert "CDMA_D_MISC_CFG.weight_reuse is set, but the previous convolution released its " \
           "weights" in capsys.readouterr().err
