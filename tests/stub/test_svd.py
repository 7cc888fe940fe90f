"""The SVD export (stub/svd.py) read back with the cmsis_svd parser: every peripheral, register
and field of the description must be there with the right offsets, bit positions and resets."""
from __future__ import annotations

import pytest

from accelstub.devices.description import load_description
from accelstub.stub.svd import description_to_svd, peripheral_name, svd_identifier


@pytest.fixture(scope="module")
def svd_lib():
    try:
        import lxml.etree
        from cmsis_svd.parser import SVDParser
    except ImportError as e:  # a test dependency (pyproject [test]); fail, never skip
        pytest.fail(f"cmsis_svd is required for the SVD tests (pip install -e '.[test]'): {e}")
    return SVDParser, lxml.etree


@pytest.fixture(scope="module")
def desc():
    return load_description("max78000")


@pytest.fixture(scope="module")
def svd_text(desc):
    return description_to_svd(desc)


@pytest.fixture(scope="module")
def device(svd_lib, svd_text):
    SVDParser, etree = svd_lib
    tree = etree.ElementTree(etree.fromstring(svd_text.encode("utf-8")))
    return SVDParser(tree).get_device()


def test_svd_validates_against_cmsis_svd_1_3_schema(svd_lib, svd_text):
    SVDParser, etree = svd_lib
    ok, err = SVDParser.validate_xml_tree(etree.ElementTree(etree.fromstring(svd_text.encode())),
                                          schema_version="1.3.9", schema_version_detection=False)
    assert ok, err


def test_svd_is_cmsis_1_3(svd_text):
    assert 'schemaVersion="1.3"' in svd_text


def test_svd_peripherals(desc, device):
    names = [p.name for p in device.peripherals]
    assert names == ["CNN_GLOBAL", "CNN_GLOBAL_AOD", "CNN_Q0", "CNN_Q1", "CNN_Q2", "CNN_Q3", "EMU"]
    assert len(set(names)) == len(desc.blocks)
    for blk, p in zip(desc.blocks, device.peripherals):
        assert p.name == peripheral_name(desc, blk)
        assert p.base_address == blk.base
        assert p.address_blocks[0].size == blk.size


def test_svd_emu_peripheral_says_emulator_only(device):
    emu = next(p for p in device.peripherals if p.name == "EMU")
    assert "emulator-only" in emu.description.lower()
    assert emu.base_address == 0xF000_0000


def test_svd_register_count_2311(device):
    assert sum(len(p.registers) for p in device.peripherals) == 2311  # with EMU_END


def test_svd_every_register_and_field(desc, device):
    access = {"rw": "read-write", "ro": "read-only", "wo": "write-only", "w1c": "read-write",
              "w1s": "read-write", "rsvd": "read-only"}
    by_periph = {p.name: p for p in device.peripherals}
    for blk in desc.blocks:
        p = by_periph[peripheral_name(desc, blk)]
        regs = {r.name: r for r in p.registers}
        assert len(regs) == len(blk.registers)
        for reg in blk.registers:
            sr = regs[svd_identifier(reg.name)]
            assert p.base_address + sr.address_offset == reg.address, reg.name
            assert sr.size == 32
            assert sr.reset_value == reg.reset, reg.name
            assert sr.reset_mask == 0xFFFF_FFFF
            fields = {f.name: f for f in sr.fields}
            assert len(fields) == len(reg.fields), reg.name
            for f in reg.fields:
                sf = fields[svd_identifier(f.name)]
                assert (sf.bit_offset, sf.bit_width) == (f.lsb, f.width), (reg.name, f.name)
                assert sf.access.value == access[f.access], (reg.name, f.name)
                if f.enums:
                    evs = sf.enumerated_values[0].enumerated_values
                    assert [(e.value, e.name) for e in evs] == \
                        [(e.value, svd_identifier(e.name)) for e in f.enums]
                else:
                    assert not sf.enumerated_values


def test_svd_known_values(device):
    q3 = next(p for p in device.peripherals if p.name == "CNN_Q3")
    regs = {r.name: r for r in q3.registers}
    assert q3.base_address == 0x50D0_0000
    # [UG-CNN: CNNx16_n Per Layer Registers (CNNx16_n_Ly)]
    assert regs["CNNx16_3_L21_RCNT"].address_offset == 0x64
    # [UG-CNN: CNNx16_n Processor Stream Registers]
    assert regs["CNNx16_3_S5_STRM0"].address_offset == 0x824
    assert regs["CNNx16_3_CTRL"].reset_value == 0x6  # [UG-CNN: Table 27-19]
    assert regs["CNNx16_3_SRAM"].reset_value == 0xE  # [UG-CNN: Table 27-20]
    assert regs["CNNx16_3_MLAT"].access.value == "read-only"  # [UG-CNN: Table 27-40]
    oned = {f.name: f for f in regs["CNNx16_3_L0_ONED"].fields}
    assert oned["conv2d_en"].bit_offset == 17  # doc "2d_conv" [UG-CNN: Table 27-25]
    mask = {f.name: f for f in regs["CNNx16_3_L0_POST"].fields}["mask_size"]
    assert [e.name for e in mask.enumerated_values[0].enumerated_values] == \
        ["bits8", "bits1", "bits2", "bits4"]  # [UG-CNN: Table 27-38]


def test_svd_write_one_to_clear_mapping(svd_lib):
    """w1c/w1s fields become read-write with modifiedWriteValues oneToClear/oneToSet."""
    import tomllib

    from accelstub.devices.description import parse_description
    SVDParser, etree = svd_lib
    d = parse_description(tomllib.loads("""
[device]
name = "t"
[[block]]
name = "b"
base = 0x1000
size = 4
  [[block.register]]
  name = "IRQ"
  offset = 0
    [[block.register.field]]
    name = "done"
    bits = "0"
    access = "w1c"
    [[block.register.field]]
    name = "force"
    bits = "1"
    access = "w1s"
    [[block.register.field]]
    name = "go"
    bits = "2"
    access = "wo"
[[region]]
name = "r"
kind = "registers"
base = 0x1000
size = 0x100
block = "b"
"""), "t.toml")
    tree = etree.ElementTree(etree.fromstring(description_to_svd(d).encode()))
    dev = SVDParser(tree).get_device()
    fields = {f.name: f for f in dev.peripherals[0].registers[0].fields}
    assert fields["done"].access.value == "read-write"
    assert fields["done"].modified_write_values.value == "oneToClear"
    assert fields["force"].modified_write_values.value == "oneToSet"
    assert fields["go"].access.value == "write-only"
