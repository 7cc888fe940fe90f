"""MAX78000 layer decoder and configs/max78000.toml agree on every register field (issue 33 #1).

The decoder reads fields by name from the description, so a disagreement shows as: a field it
reads that the description lacks or gives another width than the decoder relies on (``ASSUMED``,
widths from [UG-CNN]'s register tables), or a decoded value that does not come from the field
written. Programs are the project's own (testkit/max78000_build.py writes the registers from
[UG-CNN]'s bit positions, independently of the description).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from accelstub.devices import open_device
from accelstub.devices.host import apply_steps
from accelstub.devices.max78000.ai8x import import_ai8x_project
from accelstub.devices.max78000.layer import WEIGHT_BITS, decode_layer
from accelstub.testkit.max78000_build import ELTWISE_FN, Layer, Network, build, demo_network
from tests.helpers import FieldReads

#: (register definition, field) -> width the decoder relies on ([UG-CNN] lines)
ASSUMED = {
    ("CTRL", "qupac"): 1, ("CTRL", "ffifo_en"): 1, ("CTRL", "simple1b"): 1,  # [UG-CNN: Table 27-19]
    # [UG-CNN: Table 27-19]
    ("CTRL", "fifo_en"): 1, ("CTRL", "stream_en"): 1, ("CTRL", "poolrnd"): 1,
    ("CTRL", "bigdata"): 1, ("CTRL", "pool_en"): 1, ("CTRL", "calcmax"): 1,  # [UG-CNN: Table 27-19]
    ("Sn_STRM0", "strm_isval"): 14,  # [UG-CNN: Table 27-41]
    ("Ln_RCNT", "rcnt_max"): 10, ("Ln_RCNT", "rcnt_pad"): 2,  # [UG-CNN: Table 27-23]
    ("Ln_CCNT", "ccnt_max"): 10, ("Ln_CCNT", "ccnt_pad"): 2,  # [UG-CNN: Table 27-24]
    ("Ln_ONED", "ewise_cnt"): 4, ("Ln_ONED", "conv2d_en"): 1, ("Ln_ONED", "prepool"): 1,
    ("Ln_ONED", "ewise_func"): 2, ("Ln_ONED", "ewise_en"): 1, ("Ln_ONED", "oned_en"): 1,
    ("Ln_ONED", "oned_width"): 4, ("Ln_ONED", "oned_sad"): 4,
    ("Ln_ONED", "tscnt_max"): 4,  # [UG-CNN: Table 27-25]
    # [UG-CNN: Table 27-26, Table 27-27]
    ("Ln_PRCNT", "prcnt_max"): 4, ("Ln_PCCNT", "pccnt_max"): 4,
    ("Ln_STRIDE", "stride"): 4,  # [UG-CNN: Table 27-28], R7#33
    # [UG-CNN: Table 27-29, Table 27-30]
    ("Ln_WPTR_BASE", "wptr_base"): 17, ("Ln_WPTR_TOFF", "wptr_toff"): 17,
    # [UG-CNN: Table 27-31, Table 27-32]
    ("Ln_WPTR_MOFF", "wptr_moff"): 17, ("Ln_WPTR_CHOFF", "wptr_choff"): 17,
    ("Ln_RPTR_BASE", "rptr_base"): 17,  # [UG-CNN: Table 27-33]
    # one bit per quadrant, [UG-CNN: Table 27-34]
    ("Ln_LCTRL0", "bigdwrt"): 1, ("Ln_LCTRL0", "cnnsi_en"): 4,
    ("Ln_LCTRL0", "sramlsrc"): 1, ("Ln_LCTRL0", "cpad_only"): 1, ("Ln_LCTRL0", "act_en"): 1,
    ("Ln_LCTRL0", "maxpl_en"): 1, ("Ln_LCTRL0", "pool_en"): 1, ("Ln_LCTRL0", "parallel"): 1,
    ("Ln_LCTRL0", "mslave"): 1, ("Ln_LCTRL0", "sslave"): 4,  # [UG-CNN: Table 27-34]
    ("Ln_MCNT", "mcnt_sad"): 16, ("Ln_MCNT", "mcnt_max"): 16,  # [UG-CNN: Table 27-35]
    ("Ln_TPTR", "tptr_sad"): 11, ("Ln_TPTR", "tptr_max"): 11,  # [UG-CNN: Table 27-36]
    # one bit per processor, [UG-CNN: Table 27-37]
    ("Ln_EN", "mask_en"): 16, ("Ln_EN", "pro_en"): 16,
    ("Ln_POST", "deconv_en"): 1, ("Ln_POST", "flatten_en"): 1, ("Ln_POST", "out_abs"): 1,
    ("Ln_POST", "onexone_en"): 1, ("Ln_POST", "ts_en"): 1,
    ("Ln_POST", "mask_size"): 2,  # WEIGHT_BITS has 4 entries, [UG-CNN: Table 27-38]
    ("Ln_POST", "xpmp_cnt"): 4, ("Ln_POST", "scale_shft"): 1, ("Ln_POST", "scale_reg"): 4,
    ("Ln_POST", "bptr_en"): 1, ("Ln_POST", "bptr_sad"): 12,  # [UG-CNN: Table 27-38]
    ("Ln_LCTRL1", "xpch_max"): 9, ("Ln_LCTRL1", "wptr_inc"): 4,
    ("Ln_LCTRL1", "inpchexp"): 4,  # [UG-CNN: Table 27-39]
}

NETWORKS = [
    demo_network(),
    Network(4, 6, 6, [Layer(8, operands=2, eltwise="xor", pool="avg", pool_size=2,
                            pool_stride=1, activation="abs", shift=3, weight_bits=2),
                      Layer(8, op="passthrough", pad=0),
                      Layer(6, op="deconv", weight_bits=1, bias=True)],
            avg_pool_rounding=True, name="mixed"),
    Network(8, 2, 2, [Layer(16, op="linear", kernel=1, pad=0, weight_bits=4, shift=-4)],
            name="linear"),
    Network(3, 12, 1, [Layer(5, op="conv1d", kernel=5, pad=2, activation="relu")],
            name="conv1d"),
]


def _armed(net: Network, tmp_path: Path):
    """A device with the program's registers written (setup and start, no layer run)."""
    prog = import_ai8x_project(build(net, seed=1).write(tmp_path / net.name))
    dev = open_device("max78000")
    apply_steps(dev, prog.setup + prog.start)
    return dev


@pytest.mark.parametrize("net", NETWORKS, ids=lambda n: n.name)
def test_decoded_layers_match_the_builders_fields(net, tmp_path):
    """Round trip: the builder writes each layer's registers from [UG-CNN]'s fields, the
    decoder reads them by name; the decoded layer is the one the builder was asked for, and
    every field read is in the description with the width the decoder relies on."""
    dev = _armed(net, tmp_path)
    reads = FieldReads()
    for y, lay in enumerate(net.layers):
        cfg = decode_layer(reads.reader(dev.regs.view), range(4), y)
        assert cfg.activation == lay.activation
        assert cfg.shift == (0 if lay.op == "passthrough" else lay.shift)
        assert cfg.weight_bits == (8 if lay.op == "passthrough" else lay.weight_bits)
        assert cfg.wide == lay.wide
        assert bool(cfg.bias) == lay.bias
        assert cfg.passthrough == (lay.op == "passthrough")
        assert cfg.deconv == (lay.op == "deconv")
        assert cfg.oned == (lay.op == "conv1d")
        assert cfg.operands == lay.operands
        if lay.operands > 1:
            assert cfg.ewise_func == ELTWISE_FN[lay.eltwise]
            assert cfg.prepool == lay.pool_first
        assert cfg.pool_kind == lay.pool
        if lay.pool != "none":
            assert (cfg.pool_rows, cfg.pool_stride) == (lay.pool_size, lay.pool_stride)
            assert cfg.pool_round == net.avg_pool_rounding
        if lay.op in ("conv2d", "conv1d"):
            assert cfg.pad_rows == lay.pad
    reads.check(dev.description, ASSUMED)
    assert len(reads.seen) > 40  # the recorder saw the decoder's reads


def _set_field(dev, name: str, field: str, value: int) -> None:
    """A bus write of register ``name`` with ``field`` = ``value``, its other fields kept."""
    reg = dev.description.register(name)
    f = reg.definition.view.fields[field]
    new = dev.regs.peek(reg) & ~f.mask | reg.definition.encode(**{field: value})
    dev.write(reg.address, new.to_bytes(4, "little"))


#: decoded attribute <- (register of layer 0 on quadrant 0, field): fields the decoder copies
COPIED = [("tptr_sad", "L0_TPTR", "tptr_sad"), ("tptr_max", "L0_TPTR", "tptr_max"),
          ("wptr_toff", "L0_WPTR_TOFF", "wptr_toff"), ("wptr_moff", "L0_WPTR_MOFF", "wptr_moff"),
          ("wptr_choff", "L0_WPTR_CHOFF", "wptr_choff"), ("xpmp_cnt", "L0_POST", "xpmp_cnt"),
          ("ewise_func", "L0_ONED", "ewise_func"), ("tscnt_max", "L0_ONED", "tscnt_max"),
          ("prepool", "L0_ONED", "prepool"), ("ewise_cnt", "L0_ONED", "ewise_cnt")]


@pytest.mark.parametrize("attr,reg,field", COPIED, ids=[c[0] for c in COPIED])
def test_copied_fields_round_trip(attr, reg, field, tmp_path):
    """A value built from the named field (its largest and a mixed pattern) written through
    the bus comes back in the decoded layer's attribute of that name."""
    dev = _armed(demo_network(), tmp_path)
    width = dev.description.register(f"CNNx16_0_{reg}").definition.view.fields[field].width
    for value in ((1 << width) - 1, 0b1010101010101010101 & ((1 << width) - 1)):
        _set_field(dev, f"CNNx16_0_{reg}", field, value)
        assert getattr(decode_layer(dev.regs.view, range(4), 0), attr) == value


def test_shift_and_activation_round_trip(tmp_path):
    dev = _armed(demo_network(), tmp_path)
    for scale in range(16):
        for right in (0, 1):
            _set_field(dev, "CNNx16_0_L0_POST", "scale_reg", scale)
            _set_field(dev, "CNNx16_0_L0_POST", "scale_shft", right)
            assert decode_layer(dev.regs.view, range(4), 0).shift == (-scale if right else scale)
    _set_field(dev, "CNNx16_0_L0_LCTRL0", "act_en", 0)
    assert decode_layer(dev.regs.view, range(4), 0).activation == "none"
    _set_field(dev, "CNNx16_0_L0_POST", "out_abs", 1)
    assert decode_layer(dev.regs.view, range(4), 0).activation == "abs"


def test_weight_bits_follow_the_mask_size_enum():
    """WEIGHT_BITS (the decoder's table) and POST.mask_size's enum name the same widths."""
    post = open_device("max78000").description.register("CNNx16_0_L0_POST")
    enum = {e.value: e.name for e in post.definition.view.fields["mask_size"].enums}
    assert {v: f"bits{b}" for v, b in enumerate(WEIGHT_BITS)} == enum


def test_ctrl_hook_reaches_every_quadrant():
    """The CTRL write hook is registered by the description's name "CTRL" on all four
    quadrants, and tells them apart: a start edge without clk_en warns naming the quadrant."""
    dev = open_device("max78000")
    ctrl = dev.description.register("CNNx16_0_CTRL").definition
    for q in range(4):
        reg = dev.description.register(f"CNNx16_{q}_CTRL")
        dev.write(reg.address, ctrl.encode(cnn_en=1).to_bytes(4, "little"))
        assert dev.warnings[-1].startswith(f"CNNx16_{q}_CTRL: cnn_en 0->1 with clk_en = 0")
