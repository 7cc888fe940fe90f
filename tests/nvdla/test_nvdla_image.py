"""NVDLA image (pixel) input: project-made traces of image convolutions in every pixel format
nv_small reads, checked by CRC against the independent reference (testkit/nvdla_reference.py,
which derives each format's byte order from its name), and the settings nv_small cannot run
refused with the register named."""
from __future__ import annotations

import re

import numpy as np
import pytest

from accelstub.stub.cli import main as cli_main
from accelstub.testkit import nvdla_reference as ref
from accelstub.testkit.nvdla_build import Conv, Pixel, build


def _mean(fmt: str) -> tuple[int, int, int, int]:
    return (100, -20, 7, 300) if ref.pixel_elements(fmt) > 1 else (50, 0, 0, 0)


def _format_case(fmt: str) -> list[Conv]:
    """A 3x3 kernel over a padded image with an x stride, the mean and the converter."""
    return [Conv(9, 6, ref.pixel_elements(fmt), 10, stride=(1, 2), pad=(1, 2, 2, 1),
                 pad_value=-5, clip=4, cvt_in=(3, 5, 2), cvt=(0, 1, 2),
                 pixel=Pixel(fmt, x_offset=1, mean=_mean(fmt)))]


CASES = {
    # two rows per weight atom, a line starting at the atom's sixth pixel
    "r8_post_extension_2": [Conv(7, 5, 1, 9, r=5, s=4, pad=(0, 0, 0, 0), clip=2, cvt=(0, 1, 3),
                                 pixel=Pixel("R8", x_offset=5, y_ext=2))],
    # four rows per atom (R = 7: the last atom holds three), signed pixels, no mean
    "r8_post_extension_4_signed": [Conv(7, 9, 1, 17, r=7, s=2, pad=(1, 1, 0, 0), clip=2,
                                        cvt_in=(-3, 2, 1), cvt=(0, 1, 3),
                                        pixel=Pixel("R8", y_ext=4, signed=True))],
    # the kernel's last pixel without its X element (WEIGHT_CHANNEL_EXT = 7 of 8)
    "rgbx_partial_last_pixel": [Conv(8, 5, 4, 9, r=2, s=2, pad=(0, 0, 0, 0), clip=2,
                                     cvt=(0, 1, 3), pixel=Pixel("R8G8B8X8", kc=7))],
    # semi-planar, converter off: the bytes themselves enter the convolution
    "yuv_semi_planar_raw": [Conv(8, 5, 3, 9, r=3, s=3, pad=(1, 0, 1, 0), pad_value=3, clip=3,
                                 cvt=(0, 1, 3), pixel=Pixel("Y8___V8U8_N444", x_offset=6))],
    # more than one block of 8 weights per row (kc = 20) and more than 8 kernels
    "rgba_wide_kernel": [Conv(12, 4, 4, 12, r=2, s=5, stride=(2, 1), pad=(0, 1, 0, 0), clip=6,
                              cvt_in=(0, 1, 0), cvt=(0, 1, 3),
                              pixel=Pixel("B8G8R8A8", mean=(128, 128, 128, 0)))],
}


def _run(layers: list[Conv], name: str, tmp_path, capsys) -> str:
    trace = build(layers, name, seed=5).write(tmp_path / name)
    rc = cli_main(["run", "nvdla", "--program", str(trace)])
    out = capsys.readouterr().out
    assert rc == 0, out
    return out


@pytest.mark.parametrize("fmt", ref.PIXEL_CODES)
def test_every_pixel_format_of_nv_small_is_bit_exact(fmt, tmp_path, capsys):
    out = _run(_format_case(fmt), fmt, tmp_path, capsys)
    assert out.count(": PASS") == 1, out


@pytest.mark.parametrize("name", CASES)
def test_image_convolution_settings_are_bit_exact(name, tmp_path, capsys):
    out = _run(CASES[name], name, tmp_path, capsys)
    assert out.count(": PASS") == 1, out


def _retarget(tmp_path, name: str, fmt: str, register: str, value: int) -> str:
    """The trace of ``fmt``'s case with one CDMA/CSC register write changed."""
    trace = build(_format_case(fmt), name, seed=5).write(tmp_path / name)
    cfg = trace / f"{name}.cfg"
    text, n = re.subn(rf"reg_write\(NVDLA_{register}_0, 0x[0-9a-f]+\);",
                      f"reg_write(NVDLA_{register}_0, {value:#x});", cfg.read_text())
    assert n == 1
    cfg.write_text(text)
    return str(cfg)


def test_the_byte_order_of_the_format_matters(tmp_path, capsys):
    """The same bytes read as R8G8B8A8 instead of A8B8G8R8 give other sums: the CRC fails."""
    cfg = _retarget(tmp_path, "order", "A8B8G8R8", "CDMA.D_DATAIN_FORMAT",
                    ref.PIXEL_CODES["R8G8B8A8"] << 8 | 1)
    assert cli_main(["run", "nvdla", "--program", cfg]) == 1
    assert ": FAIL (expected" in capsys.readouterr().out


@pytest.mark.parametrize("register, value, message", [
    ("CDMA.D_DATAIN_FORMAT", 20 << 8 | 1,
     "CDMA_D_DATAIN_FORMAT.pixel_format is 20: nv_small reads the 8-bit pixel formats only"),
    ("CDMA.D_DATAIN_FORMAT", 1 << 16 | 12 << 8 | 1,
     "CDMA_D_DATAIN_FORMAT.pixel_mapping is RESERVED_LINEAR"),
    ("CDMA.D_DATAIN_FORMAT", 0 << 8 | 1,
     "CDMA_D_DATAIN_SIZE_1 gives 4 channels, a T_R8 pixel has 1 elements"),
    ("CSC.D_DATAIN_FORMAT", 0,
     "CSC_D_DATAIN_FORMAT.datain_format differs from CDMA_D_DATAIN_FORMAT's"),
    ("CSC.D_WEIGHT_SIZE_EXT_0", 2 << 16 | 2,
     "CSC_D_WEIGHT_SIZE_EXT_0.weight_width_ext is 2: with pixel input"),
    ("CSC.D_DILATION_EXT", 1, "CSC_D_DILATION_EXT is not 0: CSC's image path has no dilation"),
    ("CSC.D_POST_Y_EXTENSION", 1,
     "CSC_D_POST_Y_EXTENSION puts 2 rows in one atom: a row may hold 4 weights, "
     "CSC_D_WEIGHT_SIZE_EXT_1 gives 12"),
    ("CDMA.D_PIXEL_OFFSET", 2, "CDMA_D_PIXEL_OFFSET.pixel_x_offset is 2"),
    ("CDMA.D_LINE_STRIDE", 16, "CDMA_D_LINE_STRIDE (0x10) is shorter than a line"),
    ("CSC.D_BANK", 0x3,
        "CSC_D_BANK differs from CDMA_D_BANK [NVDLA-CONV: CDMA_D_BANK, CSC_D_BANK]"),
    ("CSC.D_ENTRY_PER_SLICE", 0x3,
     "CSC_D_ENTRY_PER_SLICE differs from CDMA_D_ENTRY_PER_SLICE "
     "[NVDLA-CONV: CDMA_D_ENTRY_PER_SLICE, CSC_D_ENTRY_PER_SLICE]"),
    ("CSC.D_ZERO_PADDING_VALUE", 0x7,
     "CSC_D_ZERO_PADDING_VALUE differs from CDMA_D_ZERO_PADDING_VALUE "
     "[NVDLA-CONV: CDMA_D_ZERO_PADDING_VALUE]"),
])
def test_settings_nv_small_cannot_run_name_the_register(register, value, message, tmp_path,
                                                         capsys):
    cfg = _retarget(tmp_path, "bad", "A8B8G8R8", register, value)
    assert cli_main(["run", "nvdla", "--program", cfg]) == 2
    assert message in capsys.readouterr().err


def test_the_program_view_names_the_pixel_format(tmp_path):
    """`monitor units` and the TUI's program view describe an armed image layer."""
    from accelstub.devices import open_device
    from accelstub.stub.server import StubServer

    trace = build(_format_case("Y8___U8V8_N444"), "view", seed=5).write(tmp_path / "view")
    server = StubServer([open_device("nvdla")], gdb_port=0, telnet_port=None, tcl_port=None)
    try:
        server.load_program(trace, log=lambda s: None)
        (unit,) = server.targets[0].device.units()
    finally:
        server.stop()
    assert unit.summary.startswith("conv (SDP G0): conv 3x3, image T_Y8___U8V8_N444 3x6x9 -> "
                                   "10x"), unit


def test_random_register_values_are_refused_or_run_never_crash(tmp_path, capsys):
    """A client may write anything: 60 traces of an image and a feature convolution with 1-3 of
    their CDMA/CSC/CACC/SDP data registers set to random values, bit flips or small numbers each
    run or stop with an error message (exit 2), never another exception."""
    rng = np.random.default_rng(7)
    cases = [_format_case("A8B8G8R8"), [Conv(8, 6, 12, 10, clip=3)]]
    traces = [build(c, f"rand{i}", seed=5).write(tmp_path / f"rand{i}")
              for i, c in enumerate(cases)]
    texts = [(t / f"rand{i}.cfg").read_text() for i, t in enumerate(traces)]
    outcomes = set()
    for n in range(60):
        trace = traces[n % 2]
        lines = texts[n % 2].splitlines()
        regs = [i for i, ln in enumerate(lines) if re.match(
            r"reg_write\(NVDLA_(CDMA|CSC|CACC|SDP)\.D_(?!OP_ENABLE)", ln)]
        for i in rng.choice(regs, size=int(rng.integers(1, 4)), replace=False):
            value = int(re.search(r"0x[0-9a-f]+", lines[i].split(",")[1]).group(0), 16)
            kind = rng.integers(0, 3)
            value = (int(rng.integers(0, 1 << 32)) if kind == 0 else
                     value ^ (1 << int(rng.integers(0, 32))) if kind == 1 else
                     int(rng.integers(0, 64)))
            lines[i] = f"{lines[i].split(',')[0]}, {value:#x});"
        mutated = trace / "mutated.cfg"
        mutated.write_text("\n".join(lines) + "\n")
        rc = cli_main(["run", "nvdla", "--program", str(mutated)])
        err = capsys.readouterr().err
        assert rc in (0, 1, 2), err
        assert "Traceback" not in err and "internal error" not in err, err
        if rc == 2:
            assert "accelstub: error: " in err, err
        outcomes.add(rc)
    assert 2 in outcomes and outcomes & {0, 1}  # refused ones and ones that ran

