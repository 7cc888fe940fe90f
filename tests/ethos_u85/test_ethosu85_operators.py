"""Every operator Vela 5.2 places on the Ethos-U85, one single-operator model each (issue 28 #2).

Models: testkit/ethosu85_operators.py (int8, and int16 as ``<op>_i16`` where LiteRT and Vela
take it), compiled by Vela here for 256 and 2048 MACs (compile_with_vela refuses a model with
CPU operators, so each runs wholly on the NPU), run in the device and compared bit for bit with
LiteRT's reference kernels (BUILTIN_REF), or where those have no kernel (ELU, the int16x8 LSTM,
int16 SQUARED_DIFFERENCE and SUM) with TFLite Micro's (tflm_reference). The status of each
operator is the table in the design notes ("Ethos-U85 operators as Vela lowers them"). Known
failures are strict xfails with what is known of them; a difference the hardware makes by its
rules has its own test naming the rule.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from accelstub.testkit.ethosu85_models import litert_reference, sample_inputs, tflm_reference
from accelstub.testkit.ethosu85_operators import (
    NETWORK_MODELS,
    build_network_model,
    build_operator,
    operator_models,
)
from tests.ethos_u85.compiled import compile_cache, run_compiled
from tests.ethos_u85.test_ethosu85_vela import IN_CI, assert_outputs_equal, needs_litert, needs_vela

try:
    import tflite_micro  # noqa: F401
    HAVE_TFLM = True
except ImportError:
    HAVE_TFLM = False
needs_tflm = pytest.mark.skipif(not HAVE_TFLM and not IN_CI, reason="tflite-micro is not "
                                "installed (pip install -e '.[test]')")

MACS = (256, 2048)

#: models the device does not yet answer as LiteRT does (strict: they must fail until fixed)
XFAIL: dict[str, str] = {}
#: LiteRT refusing a model: at load (open_litert's ValueError naming the file) or when it runs
LITERT_REFUSES = (ValueError, RuntimeError)
#: models where the answer is not LiteRT's by a rule, a LiteRT reference defect or Vela's
#: lowering (each has its own test below, recomputing both answers)
BY_RULE = {"NEG", "DIV", "SUM", "SUM_HW", "FULLY_CONNECTED_i16", "DIV_i16", "SUM_i16",
           "SUM_HW_i16"}
#: models BUILTIN_REF has no kernel for: compared with another reference in their own test
#: (ELU: LiteRT's default kernels and TFLM; the int16x8 LSTM and SQUARED_DIFFERENCE: TFLM)
OTHER_REFERENCE = {"ELU", "UNIDIRECTIONAL_SEQUENCE_LSTM_i16", "SQUARED_DIFFERENCE_i16"}


def _params():
    out = []
    for name in operator_models():
        if name in BY_RULE or name in OTHER_REFERENCE:
            continue
        for macs in MACS:
            marks = [pytest.mark.xfail(strict=True, reason=XFAIL[name])] if name in XFAIL else []
            out.append(pytest.param(name, macs, marks=marks, id=f"{name}-{macs}"))
    return out


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """(name, macs) -> (model .tflite, Vela's .tflite), each compiled once per module."""
    return compile_cache(tmp_path_factory.mktemp("ethosu85_operators"), build_operator)


def run(out: Path, xs, macs: int) -> list[np.ndarray]:
    return run_compiled(out, xs, macs, timeout=120)


@needs_vela
@needs_litert
@pytest.mark.parametrize("name,macs", _params())
def test_operator_matches_litert(compiled, name, macs):
    src, out = compiled(name, macs)
    xs = sample_inputs(src.read_bytes())
    want = litert_reference(src, xs)
    assert any(len(np.unique(w)) > 1 for w in want), "a constant output tests nothing"
    assert_outputs_equal(run(out, xs, macs), want)


@needs_vela
@needs_litert
def test_neg_saturates_where_litert_wraps(compiled):
    """NEG (zero points 0): LiteRT's reference negates the int8 value in int8, so -(-128) wraps
    to -128; the NPU adds the zero point and clamps to the OFM range (TRM activation(),
    "Add zero point and clamp range", [U85-TRM: §3.6.7]): 127. Everywhere else the two agree."""
    src, out = compiled("NEG")
    xs = sample_inputs(src.read_bytes())
    got, want = run(out, xs, 256)[0], litert_reference(src, xs)[0]
    x = xs[0]
    assert (x == -128).any(), "the sample input no longer holds -128"
    assert np.array_equal(got[x != -128], want[x != -128])
    assert (got[x == -128] == 127).all() and (want[x == -128] == -128).all()


def tflm_elu_table(x_t, y_t) -> np.ndarray:
    """TFLite Micro's int8 ELU (kernels/elu.cc, PopulateLookupTable): a 256-entry table built
    in float32 from the float function, x < 0 ? exp(x) - 1 : x, of each dequantized input,
    times 1/output scale, rounded half away from zero (TfLiteRound), + the output zero point,
    clamped to int8; indexed by the input's byte."""
    v = np.arange(-128, 128)
    x = np.float32(x_t.scale[0]) * (v - int(x_t.zero_point[0])).astype(np.float32)
    f = np.where(x < 0, np.expm1(x).astype(np.float32), x)  # float32 as the kernel computes
    r = f * (np.float32(1) / np.float32(y_t.scale[0]))
    q = np.sign(r) * np.floor(np.abs(r) + np.float32(0.5)) + int(y_t.zero_point[0])
    return np.clip(q, -128, 127).astype(np.int8)


@needs_vela
@needs_litert
@needs_tflm
@pytest.mark.parametrize("macs", MACS)
def test_elu_matches_the_lookup_table_of_tflm_and_litert(compiled, macs):
    """ELU (int8): LiteRT's BUILTIN_REF resolver has no ELU kernel (it refuses the model), so
    the references are TFLite Micro's kernel (tflite-micro's interpreter, and recomputed:
    tflm_elu_table) and LiteRT's own kernel (BUILTIN_WITHOUT_DEFAULT_DELEGATES: no XNNPACK),
    the same lookup table built from the float function; Vela lowers ELU to a POOL with
    lut_s8_s8. An input holding each of the 256 int8 values: the device gives every table
    entry as the references do."""
    from accelstub.devices.ethos_u85.vela import read_tflite

    src, out = compiled("ELU", macs)
    m = read_tflite(src.read_bytes())
    x_t = m.tensors[m.operators[0].inputs[0]]
    y_t = m.tensors[m.operators[0].outputs[0]]
    x = np.arange(-128, 128, dtype=np.int8).reshape(x_t.shape)
    with pytest.raises(ValueError, match="Didn't find op for builtin opcode 'ELU'"):
        litert_reference(src, [x])
    want = tflm_reference(src, [x])[0]
    assert np.array_equal(want.ravel(), tflm_elu_table(x_t, y_t))
    assert_outputs_equal(litert_reference(src, [x], resolver="BUILTIN_WITHOUT_DEFAULT_DELEGATES"),
                         [want])
    assert len(np.unique(want)) > 64 and want.min() < int(y_t.zero_point[0])
    assert_outputs_equal(run(out, [x], macs), [want])


@needs_vela
def test_elu_int16_stays_on_the_cpu(tmp_path):
    """Vela 5.2.0 places only int8 ELU on the U85 ("IFM and OFM datatypes must match, and must
    be Int8"), and neither LiteRT nor TFLM has an int16 ELU kernel: no int16 model to test."""
    from accelstub.testkit.ethosu85_models import INT16, Graph, compile_with_vela
    from accelstub.testkit.ethosu85_operators import OPERATORS

    g = Graph("elu_i16", 1111)
    OPERATORS["ELU"][0](g, INT16)
    src = tmp_path / "elu_i16.tflite"
    src.write_bytes(g.to_tflite())
    with pytest.raises(RuntimeError, match="(?s)Unsupported IFM type: Int16.*CPU operators = 1"):
        compile_with_vela(src, tmp_path / "out")


@needs_vela
@needs_litert
@needs_tflm
@pytest.mark.parametrize("macs", MACS)
@pytest.mark.parametrize("name,litert", [
    ("UNIDIRECTIONAL_SEQUENCE_LSTM_i16", "input_gate_bias->type != kTfLiteFloat32"),
    ("SQUARED_DIFFERENCE_i16", "SquaredDifference only supports")])
def test_int16_matches_tflm_where_litert_refuses(compiled, macs, name, litert):
    """int16x8 operators Vela 5.2.0 places on the U85 that LiteRT 2.3.0 refuses, and TFLite
    Micro computes: UNIDIRECTIONAL_SEQUENCE_LSTM 16x8 (int16 input, output and output state,
    int8 weights, int64 biases, int16 cell state; LiteRT's kernel takes only an int8 input as
    integer and wants float biases otherwise; TFLM's EvalLstm<int16_t, int8_t, int16_t,
    int64_t>) and SQUARED_DIFFERENCE (LiteRT's kernel takes no int16): the device's every
    output equals TFLM's."""
    src, out = compiled(name, macs)
    xs = sample_inputs(src.read_bytes())
    with pytest.raises(LITERT_REFUSES, match=litert):
        litert_reference(src, xs)
    want = tflm_reference(src, xs)
    assert want[0].dtype == np.int16 and len(np.unique(want[0])) > 16
    assert_outputs_equal(run(out, xs, macs), want)


@needs_vela
@needs_litert
@needs_tflm
def test_lstm_state_starts_at_its_zero_point(compiled):
    """An int8 LSTM whose output state has zero point -20: TFLM (MicroInterpreterGraph::
    ResetVariableTensors) and LiteRT (ResetVariableTensor) fill an int8 variable tensor with
    its zero point (real 0), and Vela's output keeps the state tensors variable with their
    quantization, so the program loader does the same (VelaProgram.state): the state's bytes
    hold -20 before the first command, and the device's answer is both references'. Started
    at the arena's zeros (real 20/128) instead, the answer differs."""
    from accelstub.devices import open_device
    from accelstub.devices.ethos_u85.vela import load_vela_program
    from tests.ethos_u85.compiled import run_vela_program

    src, out = compiled("UNIDIRECTIONAL_SEQUENCE_LSTM_STATE_ZP")
    xs = sample_inputs(src.read_bytes())
    want = litert_reference(src, xs)
    assert_outputs_equal(tflm_reference(src, xs), want)
    dev = open_device("ethos-u85", macs=256)
    prog = load_vela_program(dev, out, xs)
    h = [t for t, fill in prog.state if t.dtype == np.int8]
    assert h and all(fill == 0xEC for t, fill in prog.state if t.dtype == np.int8)
    assert all(dev.read(t.address, t.nbytes) == b"\xec" * t.nbytes for t in h)
    assert_outputs_equal(run_vela_program(dev, prog, 120), want)
    dev = open_device("ethos-u85", macs=256)
    prog = load_vela_program(dev, out, xs)
    for t in h:
        dev.write(t.address, bytes(t.nbytes))
    assert not np.array_equal(run_vela_program(dev, prog, 120)[0], want[0])


@needs_vela
@needs_litert
@pytest.mark.parametrize("name", ["DIV", "DIV_i16"])
def test_div_is_the_hardware_integer_divide(compiled, name):
    """DIV: the NPU's div is an integer divide truncating toward zero that asserts scales 1 and
    zero points 0 [U85-TRM: §3.10.6]; Vela 5.2 maps a quantized int8 or int16 DIV onto it as it
    is (the stream programs scale 1, zero point 0 for IFM, IFM2 and OFM), so the device divides
    the stored integers, not the real values LiteRT divides (x=122 / 53: LiteRT 20, device 2).
    int16: LiteRT's BUILTIN_REF divides int16 (TFLM has no int16 DIV); same rule."""
    from accelstub.devices.ethos_u85 import stream as es
    from accelstub.devices.ethos_u85.vela import read_tflite, read_vela

    src, out = compiled(name)
    cmds = es.decode(read_vela(out).command_stream)
    assert any(c.name == "NPU_OP_ELEMENTWISE" and c.fields["elementwise_mode"] == 11 for c in cmds)
    m = read_tflite(src.read_bytes())
    divisor = next(t for t in m.tensors if t.name.endswith("divisor"))
    b = np.frombuffer(m.buffers[divisor.buffer], divisor.dtype).reshape(divisor.shape)
    b = b.astype(np.int64)
    xs = sample_inputs(src.read_bytes())
    got = run(out, xs, 256)[0]
    a = xs[0].astype(np.int64)
    lim = np.iinfo(divisor.dtype)
    want_hw = np.clip(np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b)), lim.min, lim.max)
    assert got.dtype == divisor.dtype and np.array_equal(got, want_hw.astype(divisor.dtype))
    assert not np.array_equal(got, litert_reference(src, xs)[0])


def _sum_operands(src: Path):
    """SUM's input and output tensors in the model before Vela, and the sample input."""
    from accelstub.devices.ethos_u85.vela import read_tflite

    m = read_tflite(src.read_bytes())
    op = m.operators[0]
    return m.tensors[op.inputs[0]], m.tensors[op.outputs[0]], sample_inputs(src.read_bytes())[0]


def litert_ref_sum_int8(x: np.ndarray, axes: tuple[int, ...], x_t, y_t) -> np.ndarray:
    """What LiteRT's reference SUM gives for int8 (tflite/kernels/reduce.cc, the kReference
    branch of QuantizedMeanOrSum: it hands reference_ops::QuantizedMeanOrSum the input and
    output as ``GetTensorData<uint8_t>`` whatever the type; LiteRT issue 4079): each stored
    int8 is read as its uint8 byte, the sum less n * zero point is rescaled by
    MultiplyByQuantizedMultiplier (in/out scale, double rounding), the output zero point is
    added, the result is clamped to 0..255 and stored as a byte, which the int8 output reads
    back signed."""
    from tests.ethos_u85.ethosu85_reference import tflite_requantize

    n = int(np.prod([x.shape[a] for a in axes]))
    s = (x.view(np.uint8).astype(np.int64)).sum(axis=axes, keepdims=True) - n * x_t.zero_point[0]
    real = float(x_t.scale[0]) / float(y_t.scale[0])
    v = [min(max(tflite_requantize(int(a), real, int(y_t.zero_point[0]), True), 0), 255)
         for a in s.ravel()]
    return np.array(v, np.uint8).view(np.int8).reshape(s.shape)


def npu_sum(out: Path, stored_sum: np.ndarray, zp_out: int,
            dtype: type = np.int8) -> tuple[np.ndarray, int]:
    """What the NPU makes of Vela's SUM: POOL reduce_sum gives the sum of the stored values
    (IFM zero point 0); the ELEMENTWISE sub takes the scalar Vela programs (n * the input zero
    point) off (int16: no sub, the reduce_sum itself rescales; scalar 0) and rescales with the
    stream's OFM_SCALE, round_mode natural: (v * scale + 2^(shift-1)) >> shift (TRM
    rounded_shift_right, [U85-TRM: §3.6.6]), + the OFM zero point, clamped to the OFM type
    ``dtype``. Returns that answer and the scalar."""
    from accelstub.devices.ethos_u85 import stream as es
    from accelstub.devices.ethos_u85.vela import read_vela

    cmds = es.decode(read_vela(out).command_stream)
    last = max(i for i, c in enumerate(cmds) if c.name in ("NPU_OP_ELEMENTWISE", "NPU_OP_POOL"))
    sc = next(c.fields for c in reversed(cmds[:last]) if c.name == "NPU_SET_OFM_SCALE")
    if cmds[last].name == "NPU_OP_POOL":  # int16 (zero point 0): the reduce_sum rescales
        assert cmds[last].fields["pooling_mode"] == 2
        scalar = 0
    else:
        assert cmds[last].fields["elementwise_mode"] == 2  # sub
        scalar = next(c.fields["scalar"] for c in reversed(cmds[:last])
                      if c.name == "NPU_SET_OP_SCALAR")
    assert sc["round_mode"] == 1  # natural
    v = [((int(a) - scalar) * sc["scale"] + (1 << (sc["shift"] - 1)) >> sc["shift"]) + zp_out
         for a in stored_sum.ravel()]
    lim = np.iinfo(dtype)
    return np.clip(np.array(v), lim.min, lim.max).astype(dtype).reshape(stored_sum.shape), scalar


@needs_vela
@needs_litert
@pytest.mark.parametrize("macs", MACS)
def test_sum_is_the_npu_rescale_where_litert_reads_int8_as_uint8(compiled, macs):
    """SUM over W (keep_dims): the device gives the NPU's answer to Vela's stream (npu_sum:
    the exact integer sum, one natural rounding), which is what LiteRT's kernel means to
    compute (TFLite's rescale of the same sum; equal here, no value near a .5 tie); LiteRT's
    BUILTIN_REF answer is its int8-as-uint8 defect (litert_ref_sum_int8), recomputed exactly.
    Neither side is the emulator's to change."""
    from tests.ethos_u85.ethosu85_reference import tflite_requantize

    src, out = compiled("SUM", macs)
    x_t, y_t, x = _sum_operands(src)
    npu, scalar = npu_sum(out, x.astype(np.int64).sum(axis=2, keepdims=True),
                          int(y_t.zero_point[0]))
    assert scalar == 5 * x_t.zero_point[0]
    got, want = run(out, [x], macs)[0], litert_reference(src, [x])[0]
    assert np.array_equal(got, npu)
    assert np.array_equal(want, litert_ref_sum_int8(x, (2,), x_t, y_t))
    meant = (x.astype(np.int64) - x_t.zero_point[0]).sum(axis=2, keepdims=True)
    real = float(x_t.scale[0]) / float(y_t.scale[0])
    meant = np.clip([tflite_requantize(int(a), real, int(y_t.zero_point[0]), True)
                     for a in meant.ravel()], -128, 127).reshape(got.shape)
    assert np.array_equal(got, meant) and not np.array_equal(got, want)


@needs_vela
@needs_litert
@pytest.mark.parametrize("macs", MACS)
def test_sum_hw_is_what_vela_programs(compiled, macs):
    """SUM over H and W of [1, 4, 5, 8] (keep_dims): Vela 5.2.0 views the input as 1 x 4 x 40
    (W and C merged), sums the 4 rows of each of the 40 columns (POOL sum +transpose, POOL
    reduce_sum) and takes 4 * zero point off (OP_SCALAR): 40 sums of 4 values where the model
    sums 20 values into each of 8; the 8-value output holds the first 8 (column W = 0). The
    device runs that stream as the TRM says (npu_sum over H of x[:, :, 0, :]); LiteRT's
    BUILTIN_REF gives its int8-as-uint8 answer (litert_ref_sum_int8); the true sum is a third
    answer. Vela's lowering, not the emulator, is what differs from the model."""
    src, out = compiled("SUM_HW", macs)
    x_t, y_t, x = _sum_operands(src)
    rows = x.astype(np.int64)[:, :, :1, :].sum(axis=1, keepdims=True)
    npu, scalar = npu_sum(out, rows, int(y_t.zero_point[0]))
    assert scalar == 4 * x_t.zero_point[0]
    got, want = run(out, [x], macs)[0], litert_reference(src, [x])[0]
    assert np.array_equal(got, npu)
    assert np.array_equal(want, litert_ref_sum_int8(x, (1, 2), x_t, y_t))
    true_sum = (x.astype(np.float64) - x_t.zero_point[0]).sum(axis=(1, 2), keepdims=True)
    true_sum = np.clip(np.floor(true_sum * float(x_t.scale[0]) / float(y_t.scale[0]) + 0.5)
                       + y_t.zero_point[0], -128, 127)
    assert not np.array_equal(got, true_sum)


def _sum_rescaled(sums: np.ndarray, x_t, y_t, double: bool) -> np.ndarray:
    """TFLite's rescale of exact int16 sums (zero points 0) to the SUM's output, rounded once
    (single) or twice (double: gemmlowp's, what TFLM's int16 SUM gives), clamped to int16."""
    from tests.ethos_u85.ethosu85_reference import tflite_requantize

    real = float(x_t.scale[0]) / float(y_t.scale[0])
    v = [tflite_requantize(int(a), real, 0, double) for a in sums.ravel()]
    return np.clip(v, -32768, 32767).astype(np.int16).reshape(sums.shape)


@needs_vela
@needs_litert
@needs_tflm
@pytest.mark.parametrize("macs", MACS)
def test_sum_int16_is_the_npu_rescale_where_tflm_rounds_twice(compiled, macs):
    """SUM over W, int16x8: Vela 5.2.0 places it (POOL sum +transpose, POOL reduce_sum with
    the OFM scale, round_mode natural; no sub, the zero point is 0), so the device
    rounds the exact sum once (npu_sum from the stream; = TFLite's single rounding). TFLM's
    int16 SUM rescales with gemmlowp's two roundings: where the first rounding lands on a .5
    (13522 * 0.0463 = 626.47 -> 627 twice rounded, 626 once) the two differ by one, the same
    near-tie rule as FULLY_CONNECTED (design notes). LiteRT's BUILTIN_REF is neither (its
    reference SUM reads the data as uint8 whatever the type, LiteRT issue 4079): compared with
    TFLM here."""
    src, out = compiled("SUM_i16", macs)
    x_t, y_t, x = _sum_operands(src)
    sums = x.astype(np.int64).sum(axis=2, keepdims=True)
    npu, scalar = npu_sum(out, sums, 0, np.int16)
    assert scalar == 0
    got, want = run(out, [x], macs)[0], tflm_reference(src, [x])[0]
    assert np.array_equal(got, npu) and np.array_equal(got, _sum_rescaled(sums, x_t, y_t, False))
    assert np.array_equal(want, _sum_rescaled(sums, x_t, y_t, True))
    assert 0 < np.count_nonzero(got != want) <= 2 and np.abs(got.astype(int) - want).max() == 1
    assert not np.array_equal(litert_reference(src, [x])[0], want)


@needs_vela
@needs_tflm
@pytest.mark.parametrize("macs", MACS)
def test_sum_hw_int16_is_what_vela_programs(compiled, macs):
    """SUM over H and W, int16x8: Vela 5.2.0's lowering as for int8 (test_sum_hw_is_what_vela_
    programs: 4 rows of column W = 0 summed where the model sums 20 values); the device runs
    that stream (npu_sum), TFLM's answer is the true sum (twice rounded); they differ."""
    src, out = compiled("SUM_HW_i16", macs)
    x_t, y_t, x = _sum_operands(src)
    rows = x.astype(np.int64)[:, :, :1, :].sum(axis=1, keepdims=True)
    npu, scalar = npu_sum(out, rows, 0, np.int16)
    assert scalar == 0
    got, want = run(out, [x], macs)[0], tflm_reference(src, [x])[0]
    assert np.array_equal(got, npu)
    assert np.array_equal(want, _sum_rescaled(x.astype(np.int64).sum(axis=(1, 2), keepdims=True),
                                              x_t, y_t, True))
    assert not np.array_equal(got, want)


def _int16_model(name: str, path: Path, alpha_int8: bool = False) -> Path:
    """The int16x8 version of an operator model that OPERATORS keeps int8-only (its builder
    with int16 activations, seed + 1000 as build_operator would); ``alpha_int8``: PRELU with
    the int8 alpha TFLM's 16x8 kernel asks for."""
    from accelstub.testkit.ethosu85_models import INT8, INT16, Graph
    from accelstub.testkit.ethosu85_operators import OPERATORS

    fn, seed, _ = OPERATORS[name]
    g = Graph(f"{name.lower()}_i16", seed + 1000)
    fn(g, INT16)
    if alpha_int8:
        g.tensors[g.ops[-1].inputs[1]].type = INT8
    path.write_bytes(g.to_tflite())
    return path


@needs_vela
@pytest.mark.parametrize("name,reason", [
    ("ARG_MAX", "ARGMAX .* Does not have valid TFLite Semantics"),
    ("HARD_SWISH", "HARD_SWISH .* Does not have valid TFLite Semantics"),
    ("GELU", "(?s)Unsupported IFM type: Int16.*CPU operators = 1"),
    ("GELU_APPROX", "(?s)Unsupported IFM type: Int16.*CPU operators = 1")])
def test_int16_not_placed_by_vela(tmp_path, name, reason):
    """Operators of the table Vela 5.2.0 does not place on the U85 with int16 activations:
    it refuses ARG_MAX and HARD_SWISH on int16 as invalid TFLite (LiteRT has no int16 kernel
    of either), and leaves GELU on the CPU ("must be Int8 or UInt8")."""
    from accelstub.testkit.ethosu85_models import compile_with_vela

    src = _int16_model(name, tmp_path / f"{name}_i16.tflite")
    with pytest.raises(RuntimeError, match=reason):
        compile_with_vela(src, tmp_path / "out")


@needs_vela
@needs_litert
@needs_tflm
@pytest.mark.parametrize("name,litert", [
    ("RELU_N1_TO_1", "Only float32, uint8, int8 supported"),
    ("RELU_0_TO_1", "Only float32, uint8, int8 supported"),
    ("SCATTER_ND", "Updates of type 'INT16' are not supported")])
def test_int16_placed_without_a_reference(tmp_path, name, litert):
    """Vela 5.2.0 places these int16 operators on the U85, but neither LiteRT 2.3.0 (which
    refuses int16) nor TFLM (which has no kernel of them) computes them: no reference to hold
    the device to, so they stay without an int16 row of the operator test."""
    from accelstub.testkit.ethosu85_models import compile_with_vela

    src = _int16_model(name, tmp_path / f"{name}_i16.tflite")
    compile_with_vela(src, tmp_path / "out")  # raises if any operator stays on the CPU
    xs = sample_inputs(src.read_bytes())
    with pytest.raises(LITERT_REFUSES, match=litert):
        litert_reference(src, xs)
    with pytest.raises(RuntimeError, match="TFLM failed to allocate tensors"):
        tflm_reference(src, xs)


@needs_vela
@needs_litert
@needs_tflm
def test_prelu_int16_has_no_reference(tmp_path):
    """PRELU, int16 input: Vela 5.2.0 places the form with an int16 alpha and refuses the one
    with an int8 alpha ("could not run on NPU"); TFLM's kernel (prelu_common.cc) requires an
    int8 alpha, and LiteRT's BUILTIN_REF reads the int16 alpha's bytes as int8 (alpha
    [14, 18, ...] becomes [14, 0, 18, 0, ...]: every negative input of an odd channel gives 0).
    So no reference computes the form the NPU runs; the device's answer is the real PReLU
    within one step."""
    from accelstub.devices.ethos_u85.vela import read_tflite
    from accelstub.testkit.ethosu85_models import compile_with_vela

    with pytest.raises(RuntimeError, match=r"Non-passthrough operation \(Mul\) could not run"):
        compile_with_vela(_int16_model("PRELU", tmp_path / "a8.tflite", True), tmp_path / "o8")
    src = _int16_model("PRELU", tmp_path / "PRELU_i16.tflite")
    out = compile_with_vela(src, tmp_path / "out")
    xs = sample_inputs(src.read_bytes())
    with pytest.raises(RuntimeError, match="TFLM failed to allocate tensors"):
        tflm_reference(src, xs)
    m = read_tflite(src.read_bytes())
    x_t, a_t = (m.tensors[i] for i in m.operators[0].inputs)
    y_t = m.tensors[m.operators[0].outputs[0]]
    alpha = np.frombuffer(m.buffers[a_t.buffer], np.int16)
    assert (alpha != 0).all()
    x, want = xs[0], litert_reference(src, xs)[0]
    odd_neg = (x < 0) & (np.arange(8) % 2 == 1)
    got = run(out, xs, 256)[0]
    assert odd_neg.any() and (want[odd_neg] == 0).all() and (got[odd_neg] != 0).all()
    xr = x.astype(np.float64) * float(x_t.scale[0])
    real = np.where(x >= 0, xr, xr * alpha * float(a_t.scale[0])) / float(y_t.scale[0])
    assert np.abs(got - np.round(real)).max() <= 1


@needs_vela
def test_fully_connected_dynamic_int16x8_is_unpredictable(tmp_path):
    """FULLY_CONNECTED with non-constant weights, int16 input and int8 weights (16x8): Vela
    5.2.0 places it (int16 weights it leaves on the CPU) as a weights_ifm2 CONV with
    an int16 IFM and an int8 IFM2, which the TRM's NPU_OP_CONV asserts against
    (IFM precision == IFM2 precision, [U85-TRM: §3.10.2]): the device stops with that
    UNPREDICTABLE fault naming the line, and no answer is compared."""
    from accelstub.devices.errors import DeviceError
    from accelstub.testkit.ethosu85_models import INT8, INT16, Graph, compile_with_vela

    g = Graph("fc_dynamic_i16", 1024)
    x, w = g.input("x", (1, 5, 24), INT16), g.input("w", (12, 24), INT8)
    g.tensors[x].zero_point = g.tensors[w].zero_point = [0]
    y = g.fully_connected_dynamic(x, w)
    g.tensors[y].zero_point = [0]
    g.output(y)
    src = tmp_path / "fc_dynamic_i16.tflite"
    src.write_bytes(g.to_tflite())
    out = compile_with_vela(src, tmp_path / "out")
    with pytest.raises(DeviceError, match=r"UNPREDICTABLE: assert\(IFM precision == IFM2 "
                       r"precision\) fails \[U85-TRM: §3\.10\.2\]"):
        run(out, sample_inputs(src.read_bytes()), 256)


@needs_vela
@needs_litert
def test_fully_connected_int16_uses_the_15_bit_scale(compiled):
    """FULLY_CONNECTED 16x8: with 48-bit accumulators the output scale must fit a signed 16-bit
    value [U85-TRM: §3.6.6], so Vela programs the multiplier rounded to 15 bits (TFLite's own
    "reduced multiplier", (q + 2^15) >> 16, with the shift 15 - exponent) and the device's
    every output is that rescale, rounded once; LiteRT's reference keeps the 31-bit multiplier.
    At outputs of ~10^4 the two scales differ by about half a step (here 3 of 10 outputs)."""
    import math

    from accelstub.devices.ethos_u85.vela import read_tflite
    from tests.ethos_u85.ethosu85_reference import tflite_requantize

    src, out = compiled("FULLY_CONNECTED_i16")
    m = read_tflite(src.read_bytes())
    x_t, w_t, b_t = (m.tensors[i] for i in m.operators[0].inputs)
    y_t = m.tensors[m.operators[0].outputs[0]]
    w = np.frombuffer(m.buffers[w_t.buffer], np.int8).reshape(w_t.shape).astype(np.int64)
    b = np.frombuffer(m.buffers[b_t.buffer], np.int64)
    xs = sample_inputs(src.read_bytes())
    acc = xs[0].astype(np.int64) @ w.T + b
    real = float(x_t.scale[0]) * float(w_t.scale[0]) / float(y_t.scale[0])
    frac, e = math.frexp(real)
    reduced = (round(frac * (1 << 31)) + (1 << 15)) >> 16
    npu = [(int(a) * reduced + (1 << (14 - e))) >> (15 - e) for a in acc.ravel()]
    ref = [tflite_requantize(int(a), real, 0, False) for a in acc.ravel()]
    got, want = run(out, xs, 256)[0], litert_reference(src, xs)[0]
    assert got.ravel().tolist() == npu and want.ravel().tolist() == ref
    assert npu != ref


@needs_vela
def test_variable_is_operator_state_not_a_graph_input(compiled, tmp_path):
    """ASSIGN_VARIABLE / READ_VARIABLE: Vela's output passes the variable to the ethos-u
    operator as one more input and output of the same name (state in the arena); the importer
    takes that pair, keeps the program's inputs and outputs the graph's, and refuses an extra
    operator input that no output of the same name matches, naming the file."""
    from accelstub.devices.ethos_u85.vela import VelaImportError, read_vela

    _, out = compiled("ASSIGN_READ_VARIABLE")
    data = out.read_bytes()
    assert data.count(b".state") == 2
    prog = read_vela(out)
    assert [s.name for s in prog.inputs] == ["in0"]
    assert [s.name for s in prog.outputs] == ["assign_read_variable.read2.out"]
    bad = tmp_path / "bad_vela.tflite"
    bad.write_bytes(data.replace(b".state", b".stbte", 1))
    with pytest.raises(VelaImportError, match="bad_vela.tflite: the graph's inputs/outputs"):
        read_vela(bad)


# --- small networks heavy in these operators ---------------------------------------------------

#: LiteRT BUILTIN_REF rounds a FULLY_CONNECTED rescale once, Vela's double_symmetric twice
ROUNDING = ("a FULLY_CONNECTED rescale near-tie (LiteRT single rounding, the NPU double: "
            "test_network_differs_only_by_the_rounding_rule)")
NETWORK_XFAIL = {"vit_tiny": ROUNDING, "kws_transformer": ROUNDING}
#: the networks also run at 512 MACs (each compiles and runs in about a second)
NETWORK_MACS = (256, 512, 2048)


def _network_params():
    return [pytest.param(n, m, id=f"{n}-{m}", marks=[pytest.mark.xfail(
        strict=True, reason=NETWORK_XFAIL[n])] if n in NETWORK_XFAIL else [])
        for n in NETWORK_MODELS for m in NETWORK_MACS]


@pytest.fixture(scope="module")
def compiled_network(tmp_path_factory):
    """(name, macs, cut) -> (model .tflite, Vela's .tflite); ``cut``: the network's graph up to
    that operator (build_network_model), None: whole."""
    root = tmp_path_factory.mktemp("ethosu85_op_networks")
    per_cut: dict[int | None, Callable[..., tuple[Path, Path]]] = {}

    def get(name: str, macs: int = 256, cut: int | None = None) -> tuple[Path, Path]:
        if cut not in per_cut:
            per_cut[cut] = compile_cache(root / f"cut{cut}",
                                         lambda n: build_network_model(n, cut))
        return per_cut[cut](name, macs)
    return get


@needs_vela
@needs_litert
@pytest.mark.parametrize("name,macs", _network_params())
def test_network_matches_litert(compiled_network, name, macs):
    """The tiny transformer encoder (multi-head attention, softmax, layer norm as TFLite writes
    it for int8, GELU, residual ADDs), the ViT-like classifier, the keyword-spotting
    transformer (conv front-end, two encoder blocks, token MEAN, Dense head), the data-movement
    graph (PAD, TRANSPOSE, STRIDED_SLICE, RESIZE_BILINEAR, CONCATENATION, CONV_2D,
    TRANSPOSE_CONV, RESHAPE, RESIZE_NEAREST_NEIGHBOR) in int8 and int16x8, and the int16x8
    gated CNN: whole outputs bit-exact."""
    src, out = compiled_network(name, macs)
    xs = sample_inputs(src.read_bytes())
    want = litert_reference(src, xs)
    assert len(np.unique(want[0])) > 8, "a nearly constant output tests little"
    if name.endswith("_i16"):
        assert all(w.dtype == np.int16 for w in want)
    assert_outputs_equal(run(out, xs, macs), want)


@needs_vela
@needs_litert
@pytest.mark.parametrize("name,fc_out", [("vit_tiny", ".fc17.out"),
                                         ("kws_transformer", ".fc9.out")])
def test_network_differs_only_by_the_rounding_rule(compiled_network, name, fc_out):
    """vit_tiny's outputs differ by 1 at 2 of 10 places, kws_transformer's at 8 of 12. Where
    from: the network cut at the input of one FULLY_CONNECTED (vit_tiny: the attention's output
    Dense; kws_transformer: the first block's V projection) is bit-exact; cut after it, one element
    differs, and that layer recomputed in Python integers from its (equal) input gives the
    device's every value with the NPU's double rounding and LiteRT's with single rounding
    (design notes, "Ethos-U85", rounding near-ties); the rest of the network carries the
    difference on."""
    from accelstub.devices.ethos_u85.vela import read_tflite
    from tests.ethos_u85.ethosu85_reference import tflite_requantize

    g = read_tflite(build_network_model(name))
    fc = next(i for i, op in enumerate(g.operators)
              if g.tensors[op.outputs[0]].name.endswith(fc_out))
    xs = sample_inputs(build_network_model(name))
    op = g.operators[fc]
    producer = next(i for i, o in enumerate(g.operators) if op.inputs[0] in o.outputs)
    before, out_b = compiled_network(name, 256, producer)  # the FC's input, equal on both
    assert_outputs_equal(run(out_b, xs, 256), litert_reference(before, xs))
    src, out = compiled_network(name, 256, fc)
    m = read_tflite(src.read_bytes())
    x_t, w_t, b_t = (m.tensors[i] for i in op.inputs)
    y_t = m.tensors[op.outputs[0]]
    x = litert_reference(before, xs)[0].astype(np.int64).reshape(-1, x_t.shape[-1])
    w = np.frombuffer(m.buffers[w_t.buffer], np.int8).reshape(w_t.shape).astype(np.int64)
    b = np.frombuffer(m.buffers[b_t.buffer], np.int32).astype(np.int64)
    acc = (x - int(x_t.zero_point[0])) @ w.T + b
    real = float(x_t.scale[0]) * float(w_t.scale[0]) / float(y_t.scale[0])

    def rescaled(double: bool) -> np.ndarray:
        v = [tflite_requantize(int(a), real, int(y_t.zero_point[0]), double) for a in acc.ravel()]
        return np.clip(np.array(v), -128, 127).astype(np.int8).reshape(y_t.shape)
    got, want = run(out, xs, 256)[0], litert_reference(src, xs)[0]
    assert np.count_nonzero(got != want) == 1
    assert np.array_equal(got, rescaled(True)) and np.array_equal(want, rescaled(False))
