"""Register fields by name (issue 33 #1): FieldView, RegisterDef.encode and hooks registered by
the description's register names, over every bundled description."""
from __future__ import annotations

import pytest

from accelstub.devices import REGISTRY, open_device
from accelstub.devices.description import load_description, parse_description
from accelstub.devices.errors import DescriptionError, RegisterNotFound


@pytest.mark.parametrize("device", sorted(REGISTRY))
def test_every_field_reads_back_by_name(device):
    """For every register definition and field: a value built from that field alone (all
    ones) reads back as all ones through the view, and every other field of the register as
    0; the view's raw value is the register value."""
    desc = load_description(device)
    for rdef in {id(r.definition): r.definition for r in desc.registers}.values():
        for f in rdef.fields:
            value = rdef.encode(**{f.name: (1 << f.width) - 1})
            view = rdef.view(value)
            assert view.raw == value == f.mask
            for other in rdef.fields:
                want = (1 << other.width) - 1 if other is f else 0
                assert getattr(view, other.name) == want, (rdef.name, f.name, other.name)


def test_unknown_field_names_fail_naming_the_register():
    post = load_description("max78000").register("CNNx16_0_L3_POST").definition
    with pytest.raises(AttributeError, match=r"register Ln_POST has no field 'mask_sz' "
                                             r"\(its fields: deconv_en, .*mask_size"):
        post.view(0).mask_sz  # noqa: B018 (the read is the test)
    with pytest.raises(ValueError, match=r"register Ln_POST has no field 'mask_sz'"):
        post.encode(mask_sz=1)
    with pytest.raises(ValueError, match=r"Ln_POST.mask_size: 0x4 does not fit in its 2 bits "
                                         r"\(23:22\)"):
        post.encode(mask_size=4)


def test_register_file_view_reads_the_stored_value():
    dev = open_device("max78000")
    reg = dev.description.register("CNNx16_1_L2_RCNT")
    dev.write(reg.address, reg.definition.encode(rcnt_max=0x155, rcnt_pad=2).to_bytes(4, "little"))
    view = dev.regs.view("CNNx16_1_L2_RCNT")
    assert (view.rcnt_max, view.rcnt_pad, view.raw) == (0x155, 2, dev.regs.peek(reg))


def test_hooks_by_definition_name_reach_every_instance_and_refuse_unknown_names():
    dev = open_device("max78000")
    regs = dev.regs
    assert [(r.name, r.instance) for r in regs.instances("CTRL")] == \
        [(f"CNNx16_{q}_CTRL", q) for q in range(4)]
    seen: list[tuple[str, int]] = []
    regs.on_write_each("L{i}_EN", lambda reg, old, new: seen.append((reg.name, new)))
    regs.write("CNNx16_3_L31_EN", 5)
    assert seen == [("CNNx16_3_L31_EN", 5)]
    for _ in range(2):  # an unknown name is refused every time, not only on its first lookup
        with pytest.raises(RegisterNotFound, match=r"no register 'CTLR' on configs/max78000.toml "
                                                   r"\(register definitions\); did you mean CTRL"):
            regs.on_write_each("CTLR", lambda reg, old, new: None)
    with pytest.raises(RegisterNotFound, match=r"no register 'CNNx16_9_CTRL'"):
        regs.on_write("CNNx16_9_CTRL", lambda reg, old, new: None)


def test_field_names_must_be_attribute_names():
    data = {"device": {"name": "toy"},
            "region": [{"name": "regs", "kind": "registers", "base": 0, "size": 0x10}],
            "block": [{"name": "b", "base": 0, "size": 0x10, "register": [
                {"name": "R", "offset": 0, "field": [{"name": "2d_conv", "bits": "0"}]}]}]}
    with pytest.raises(DescriptionError, match=r"toy.toml.*register 'R' field '2d_conv'.*"
                                               r"identifier"):
        parse_description(data, "toy.toml")
    data["block"][0]["register"][0]["field"][0]["name"] = "raw"
    with pytest.raises(DescriptionError, match=r"field 'raw'.*other than raw"):
        parse_description(data, "toy.toml")
