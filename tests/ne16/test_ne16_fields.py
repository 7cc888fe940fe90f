"""NE16 job decoder and configs/ne16.toml agree on every register field (issue 33 #1).

The decoder reads the job registers' fields by name from the description; these tests fail when
it reads a field the description lacks or gives another width than the decoder relies on
(``ASSUMED``, widths from [NE16]'s register tables, [NE16: Register map]), or when a decoded value
does not come from the field written (round trip over every decoded field).
"""
from __future__ import annotations

import numpy as np
import pytest

from accelstub.devices import open_device
from accelstub.devices.description import load_description
from accelstub.devices.ne16 import job as J
from tests.helpers import FieldReads
from tests.ne16.jobs import random_job

ASSUMED = {
    ("CONFIG0", "qwm1"): 3, ("CONFIG0", "mode16"): 1, ("CONFIG0", "streamout"): 1,
    ("CONFIG0", "filter_mode"): 2, ("CONFIG0", "linear"): 1, ("CONFIG0", "strided_2x2"): 1,
    ("CONFIG0", "norm_bits"): 2, ("CONFIG0", "streamin"): 1, ("CONFIG0", "weight_offs"): 1,
    ("CONFIG0", "right_shift"): 5, ("CONFIG0", "quant_bits"): 2, ("CONFIG0", "quant_rect"): 1,
    ("CONFIG0", "norm_shift"): 1, ("CONFIG0", "norm_bias"): 1,  # [NE16: CONFIG0]
    ("SUBTILE_REM0", "ko"): 16, ("SUBTILE_REM0", "ki"): 16,
    ("SUBTILE_REM1", "ho"): 16, ("SUBTILE_REM1", "wo"): 16,
    ("SUBTILE_REM2", "hi"): 16, ("SUBTILE_REM2", "wi"): 16,
    ("SUBTILE_NB0", "ko"): 16, ("SUBTILE_NB0", "ki"): 16,
    ("SUBTILE_NB1", "ho"): 16, ("SUBTILE_NB1", "wo"): 16,  # [NE16: Overview]
    ("PADDING", "value"): 16, ("PADDING", "left"): 4, ("PADDING", "bottom"): 4,
    ("PADDING", "right"): 4, ("PADDING", "top"): 4,  # [NE16: PADDING]
    # [NE16: WEIGHT_OFFSET]; 9-bit signed, N§3.4
    ("WEIGHT_OFFSET", "value"): 8, ("WEIGHT_OFFSET", "sign"): 1,
    ("FILTER_MASK", "left"): 8, ("FILTER_MASK", "bottom"): 8, ("FILTER_MASK", "right"): 8,
    ("FILTER_MASK", "top"): 8,  # [NE16: FILTER_MASK]
}


#: (register, field) -> lsb from [NE16]'s register tables (as testkit/ne16_reference.py reads
#: them), so the round trip below encodes independently of configs/ne16.toml
LSB = {
    ("CONFIG0", "qwm1"): 0, ("CONFIG0", "mode16"): 3, ("CONFIG0", "streamout"): 4,
    ("CONFIG0", "filter_mode"): 5, ("CONFIG0", "linear"): 7, ("CONFIG0", "strided_2x2"): 8,
    ("CONFIG0", "norm_bits"): 12, ("CONFIG0", "streamin"): 14, ("CONFIG0", "weight_offs"): 15,
    ("CONFIG0", "right_shift"): 16, ("CONFIG0", "quant_bits"): 21, ("CONFIG0", "quant_rect"): 23,
    ("CONFIG0", "norm_shift"): 24, ("CONFIG0", "norm_bias"): 25,  # [NE16: CONFIG0]
    **{(f"SUBTILE_{r}", f): 16 * hi for r, names in (("REM0", ("ki", "ko")),
                                                     ("REM1", ("wo", "ho")),
                                                     ("REM2", ("wi", "hi")),
                                                     ("NB0", ("ki", "ko")), ("NB1", ("wo", "ho")))
       for hi, f in enumerate(names)},  # [NE16: Overview]
    ("PADDING", "value"): 0, ("PADDING", "left"): 16, ("PADDING", "bottom"): 20,
    ("PADDING", "right"): 24, ("PADDING", "top"): 28,  # [NE16: PADDING]
    ("WEIGHT_OFFSET", "value"): 0, ("WEIGHT_OFFSET", "sign"): 31,  # [NE16: WEIGHT_OFFSET]
    ("FILTER_MASK", "left"): 0, ("FILTER_MASK", "bottom"): 8, ("FILTER_MASK", "right"): 16,
    ("FILTER_MASK", "top"): 24,  # [NE16: FILTER_MASK]
}


def _encode(reg: str, values: dict[str, int]) -> int:
    """``reg`` holding ``values`` at the seed's bit positions (LSB, widths from ASSUMED)."""
    out = 0
    for name, v in values.items():
        assert 0 <= v < 1 << ASSUMED[reg, name], (reg, name, v)
        out |= v << LSB[reg, name]
    return out


def _regs(values: dict[str, int]) -> tuple[int, ...]:
    return tuple(values.get(n, 0) & 0xFFFFFFFF for n in J.JOB_REGISTERS)


def test_fields_read_are_described_with_the_assumed_widths(monkeypatch):
    """Decoding random jobs (registers encoded from the seed's bit positions by the tests'
    own job builder) reads only fields the description has, with the widths relied on."""
    reads = FieldReads()
    views = J.job_views()
    monkeypatch.setattr(J, "job_views",
                        lambda: {n: (lambda v, c=c: reads.wrap(c(v))) for n, c in views.items()})
    rng = np.random.default_rng(33)
    for _ in range(40):
        J.decode(_regs(random_job(rng)))
    reads.check(load_description("ne16"), ASSUMED)
    assert len(reads.seen) > 30


@pytest.mark.parametrize("seed", range(20))
def test_every_decoded_field_round_trips(seed):
    """Registers built from random values of the named fields, at the seed's bit positions
    (not the description's), decode to those values."""
    rng = np.random.default_rng(seed)

    def r(n: int) -> int:
        return int(rng.integers(0, n))

    c0 = dict(qwm1=r(8), streamout=1, filter_mode=r(3), strided_2x2=r(2), norm_bits=r(3),
              streamin=r(2), weight_offs=r(2), right_shift=r(32), quant_bits=r(3),
              quant_rect=r(2), norm_shift=r(2), norm_bias=r(2))
    mode = c0["filter_mode"]
    ko_size = 16 if mode == 1 else 32
    nb0, nb1 = dict(ko=1 + r(4), ki=1 + r(4)), dict(ho=1 + r(4), wo=1 + r(4))
    rem0, rem1 = dict(ko=r(ko_size + 1), ki=r(17)), dict(ho=r(4), wo=r(4))
    rem2 = dict(hi=r(6), wi=r(6))
    pad = dict(value=r(1 << 16), left=r(16), bottom=r(16), right=r(16), top=r(16))
    mask = dict(left=r(256), bottom=r(256), right=r(256), top=r(256))
    wo = dict(value=r(256), sign=r(2))
    fields = {"CONFIG0": c0, "SUBTILE_NB0": nb0, "SUBTILE_NB1": nb1, "SUBTILE_REM0": rem0,
              "SUBTILE_REM1": rem1, "SUBTILE_REM2": rem2, "PADDING": pad, "FILTER_MASK": mask,
              "WEIGHT_OFFSET": wo}
    regs = {n: _encode(n, v) for n, v in fields.items()}
    cfg = J.decode(_regs(regs))
    win = 3 if mode == 2 else 5
    assert (cfg.mode, cfg.qw, cfg.normquant, cfg.strided) == \
        (mode, c0["qwm1"] + 1, True, bool(c0["strided_2x2"]))
    assert cfg.norm_bytes == J.NORM_BYTES[c0["norm_bits"]]
    assert cfg.out_bits == J.QUANT_BITS[c0["quant_bits"]]
    assert (cfg.streamin, cfg.right_shift, cfg.relu, cfg.norm_shift, cfg.norm_bias) == \
        (bool(c0["streamin"]), c0["right_shift"], not c0["quant_rect"], bool(c0["norm_shift"]),
         bool(c0["norm_bias"]))
    assert cfg.nb == (nb0["ko"], nb1["ho"], nb1["wo"], nb0["ki"])
    assert cfg.rem == tuple(v or full for v, full in zip(
        (rem0["ko"], rem1["ho"], rem1["wo"], rem0["ki"]), (ko_size, 3, 3, 16)))
    assert cfg.rem_in == (rem2["hi"] or win, rem2["wi"] or win)
    assert cfg.pad == (pad["top"], pad["bottom"], pad["left"], pad["right"])
    assert cfg.pad_value == pad["value"] & 0xFF  # 8-bit mode pads with VALUE[7:0]
    assert cfg.mask == (mask["top"], mask["bottom"], mask["left"], mask["right"])
    offset = wo["value"] - 256 if wo["sign"] else wo["value"]  # {sign, value} 9-bit signed
    assert cfg.w_offset == (offset if c0["weight_offs"] else 0)


def test_weight_offset_keeps_every_bit_the_driver_writes():
    """The fields added to WEIGHT_OFFSET (value, sign, and the undocumented bits between) keep
    the int32 the driver writes (0xFFFFFF80 = -128, N§3.4) readable as written."""
    dev = open_device("ne16")
    reg = dev.description.register("WEIGHT_OFFSET_C0")
    dev.regs.write(reg, 0xFFFFFF80)
    assert dev.regs.read(reg) == 0xFFFFFF80
    view = dev.regs.view(reg)
    assert (view.sign, view.value) == (1, 0x80)


def test_decoder_tables_follow_the_enums():
    """NORM_BYTES / QUANT_BITS (the decoder's tables) and CONFIG0's enums name the same sizes
    (norm_bits: 8/16/32-bit scales, quant_bits: 8/16/32-bit outputs, [NE16: CONFIG0])."""
    fields = load_description("ne16").register("CONFIG0_C0").definition.view.fields
    for name, table, unit in (("norm_bits", J.NORM_BYTES, 8), ("quant_bits", J.QUANT_BITS, 1)):
        enum = {e.value: e.name for e in fields[name].enums if e.name != "reserved"}
        assert enum == {v: f"bits{n * unit}" for v, n in enumerate(table)}
