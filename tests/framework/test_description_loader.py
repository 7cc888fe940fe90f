"""Malformed descriptions are refused with a DescriptionError naming the file and the entry
(docs/description-format.md "Rules the loader checks")."""
from __future__ import annotations

import tomllib

import pytest

from accelstub.devices.description import parse_description
from accelstub.devices.errors import DescriptionError

HEAD = """
[device]
name = "x"
"""

REGION = """
[[region]]
name = "regs"
kind = "registers"
base = 0x1000
size = 0x100
block = "b"
"""


def block(registers: str, base: int = 0x1000, size: int = 0x10) -> str:
    return f"""
[[block]]
name = "b"
base = {base:#x}
size = {size:#x}
{registers}
"""


def parse(text: str):
    return parse_description(tomllib.loads(text), "x.toml")


def refused(text: str, *names: str) -> str:
    with pytest.raises(DescriptionError) as ei:
        parse(text)
    msg = str(ei.value)
    assert msg.startswith("x.toml: "), msg
    for n in names:
        assert n in msg, msg
    return msg


GOOD_REG = """
  [[block.register]]
  name = "R"
  offset = 0
  doc = "a register"
    [[block.register.field]]
    name = "a"
    bits = "3:0"
    reset = 5
"""


def test_valid_minimal_description_parses():
    d = parse(HEAD + block(GOOD_REG) + REGION)
    r = d.register("R")
    assert r.address == 0x1000 and r.reset == 5 and r.fields[0].name == "a"


def test_overlapping_fields():
    text = HEAD + block(GOOD_REG + """
    [[block.register.field]]
    name = "b"
    bits = "2"
""") + REGION
    msg = refused(text, "register 'R'", "field 'b'")
    assert "overlap" in msg


def test_unknown_key_in_field():
    text = HEAD + block("""
  [[block.register]]
  name = "R"
  offset = 0
    [[block.register.field]]
    name = "a"
    bitz = "3:0"
""") + REGION
    msg = refused(text, "register 'R'", "field 'a'", "bitz")
    assert "unknown key" in msg


def test_unknown_key_in_register():
    text = HEAD + block("""
  [[block.register]]
  name = "R"
  offest = 0
""") + REGION
    refused(text, "block 'b'", "register 'R'", "offest")


def test_unknown_key_in_region():
    text = HEAD + block(GOOD_REG) + REGION.replace('kind = "registers"',
                                                     'kind = "registers"\nsise = 4')
    refused(text, "region 'regs'", "sise")


def test_reset_does_not_fit_field():
    text = HEAD + block("""
  [[block.register]]
  name = "R"
  offset = 0
    [[block.register.field]]
    name = "a"
    bits = "3:0"
    reset = 16
""") + REGION
    msg = refused(text, "register 'R'", "field 'a'")
    assert "does not fit" in msg


def test_register_reset_disagrees_with_fields():
    text = HEAD + block(GOOD_REG.replace('doc = "a register"', 'reset = 0x6')) + REGION
    refused(text, "register 'R'", "disagrees")


def test_array_without_index_placeholder():
    text = HEAD + block("""
  [[block.register]]
  name = "ARR"
  offset = 0
  count = 2
""") + REGION
    msg = refused(text, "register 'ARR'")
    assert "{i}" in msg


def test_duplicate_address():
    text = HEAD + block(GOOD_REG + """
  [[block.register]]
  name = "R2"
  offset = 0
""") + REGION
    msg = refused(text, "register 'R2'")
    assert "0x00001000" in msg and "'R'" in msg


def test_duplicate_name():
    text = HEAD + block(GOOD_REG + """
  [[block.register]]
  name = "R"
  offset = 4
""") + REGION
    refused(text, "register 'R'", "twice")


def test_register_outside_any_region():
    text = HEAD + block(GOOD_REG, base=0x2000) + REGION.replace('block = "b"\n', "")
    msg = refused(text, "register 'R'", "0x00002000")
    assert "no populated registers region" in msg


def test_register_in_unpopulated_part_of_region():
    text = HEAD + block(GOOD_REG) + REGION.replace('block = "b"',
                                                     'block = "b"\npopulated = [[0x10, 0x20]]')
    refused(text, "register 'R'", "no populated")


def test_overlapping_regions():
    text = HEAD + block(GOOD_REG) + REGION + """
[[region]]
name = "ram2"
kind = "ram"
base = 0x1080
size = 0x100
"""
    msg = refused(text, "region 'ram2'", "'regs'")
    assert "overlaps" in msg


def test_register_outside_block_size():
    text = HEAD + block("""
  [[block.register]]
  name = "FAR"
  offset = 0x10
""") + REGION
    refused(text, "register 'FAR'", "outside the block")


def test_field_beyond_register_width():
    text = HEAD + block("""
  [[block.register]]
  name = "R"
  offset = 0
    [[block.register.field]]
    name = "big"
    bits = "32"
""") + REGION
    refused(text, "register 'R'", "field 'big'")


def test_bad_access_kind():
    text = HEAD + block("""
  [[block.register]]
  name = "R"
  offset = 0
  access = "rx"
""") + REGION
    refused(text, "register 'R'", "'rx'")


def test_populated_range_outside_region():
    text = HEAD + block(GOOD_REG) + REGION.replace('block = "b"',
                                                     'block = "b"\npopulated = [[0x0, 0x200]]')
    refused(text, "region 'regs'", "populated")


def test_ascii_text_is_only_for_whole_bytes_without_enum():
    """``text = "ascii"`` (NVDLA's version register, issue 25 #16): whole bytes, no enum."""
    field = """
  [[block.register]]
  name = "R"
  offset = 0
    [[block.register.field]]
    name = "f"
    bits = "{bits}"
    text = "ascii"
"""
    ok = parse(HEAD + block(field.format(bits="15:0")) + REGION)
    assert ok.register("R").fields[0].text_of(0x4241) == '"AB"'
    msg = refused(HEAD + block(field.format(bits="11:0")) + REGION, "field 'f'")
    assert "text 'ascii': only \"ascii\", for a field of whole bytes without enum" in msg

