"""The compiled executor of block replays (devices/ethos_u85/executor.py, issue 32 #1): whole
networks that Vela compiles (MobileNet v2 0.35, ResNet-8, DS-CNN) run four times each with new
inputs (a) unit by unit, (b) with blocks replayed through the steps' closures, (c) with the
operation table's compiled runs, and end every run in the same memory, registers, model state,
statistics, cycles, counters and units done; (b) and (c) report the same units with the same
written ranges. The executor's row counter shows the rows ran (not the closures). Stepping,
breakpoints and watchpoints keep the per-operation path."""
from __future__ import annotations

import numpy as np
import pytest

from accelstub.devices import open_device
from accelstub.devices.ethos_u85.vela import place_vela_program, read_outputs, read_vela
from accelstub.devices.runcontrol import RunControl
from accelstub.testkit.ethosu85_models import sample_inputs
from accelstub.testkit.ethosu85_networks import build_network
from tests.ethos_u85.compiled import compile_cache
from tests.ethos_u85.test_ethosu85_vela import needs_vela

pytestmark = pytest.mark.slow

NETWORKS = ("mobilenet_v2_035", "resnet8", "ds_cnn")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compile_cache(tmp_path_factory.mktemp("ethosu85_executor"), build_network)


def state(d) -> tuple:
    """Everything a run leaves: every memory, the registers, the model's state, cycles,
    counters, units done."""
    s = d._state()
    npu = s.pop("npu")
    s["lut"] = bytes(s["lut"])
    fifos = {k: (v[0].tolist(), v[1]) for k, v in npu.fifo.items()}
    mems = {n: m.data.tobytes() for n, m in d.port.bus.memories.items()}
    return (mems, d.regs.snapshot(), s, (npu.chain_length, npu.num_ifm, npu.fifo_valid, fifos),
            d.cycles, d.units_done, d.counters())


def runs(path, src, mode: str, n: int = 4) -> tuple[list, list, object]:
    """``n`` inferences with new inputs on one device: mode "units" (no blocks), "closures"
    (blocks, executor off) or "executor"; (states, run_block's returns (units: per run, each
    unit's pc and written ranges), the device)."""
    d = open_device("ethos-u85", macs=256)
    if mode == "units":
        d.blocks.stored = None
    d.blocks.executor = mode == "executor"
    returned: list = []
    if mode != "units":
        real = d.run_block
        d.run_block = lambda halt: returned.append(real(halt)) or returned[-1]
    else:  # each unit's (pc, written ranges), as a replay returns them
        unit = d.execute_unit

        def execute_unit(ctx):
            pc = d.pc
            t = unit(ctx)
            returned[-1].append((pc, t.writes))
            return t
        d.execute_unit = execute_unit
    rc = RunControl(d)
    prog = read_vela(path)
    out = []
    for seed in range(n):
        place_vela_program(d, prog, sample_inputs(src.read_bytes(), seed=seed))
        if mode == "units":
            returned.append([])
        stop = rc.run_here()
        assert stop.reason == "done", stop
        out.append((state(d), [o.tobytes() for o in read_outputs(d, prog)]))
    return out, returned, d


@needs_vela
@pytest.mark.parametrize("name", NETWORKS)
def test_executor_equals_closures_and_units(compiled, name):
    src, path = compiled(name, 256)
    units, by_units, _ = runs(path, src, "units")
    closures, by_closures, dc = runs(path, src, "closures")
    executed, by_executor, de = runs(path, src, "executor")
    for k, (a, b, c) in enumerate(zip(units, closures, executed)):
        assert a == b, f"{name} run {k}: closures"
        assert a == c, f"{name} run {k}: executor"
    assert by_closures == by_executor  # the same units, pcs and written ranges
    assert by_executor[-1] == by_units[-1]  # the last run: one replay, as unit by unit
    assert dc.blocks.rows_run == 0
    assert de.blocks.rows_run > 0  # the table ran (runs 3 and 4 replay the block)
    assert len({o[1][0] for o in executed}) == 4  # the inputs made four outputs


@needs_vela
def test_executor_rows_cover_mobilenet(compiled):
    """MobileNet v2's replay runs every data step as a row (146 with Vela 4.x: DMAs,
    convolutions, the adds, the convolutions into the chaining FIFO with the adds that read
    it, and since issue 32 #1/#3 its tail too: the global average pool's depthwise with an
    int32 OFM into the FIFO, the poolings, the softmax's element-wise operations). On a VNNI
    machine the general and pointwise convolutions are byte-kernel rows (CONV, POINTWISE);
    without the byte kernels (ACCELSTUB_VNNI=0, an AVX2-only CPU) int16-pair kernel rows
    (CONV16: the 3x3 stem as it is, the 1x1 layers' H*W pixels as one row)."""
    import collections

    from accelstub.emu.conv.vnni import HAVE_VNNI
    from accelstub.emu.executor import ethosu85 as X

    src, path = compiled("mobilenet_v2_035", 256)
    _, _, d = runs(path, src, "executor", n=3)
    (blk, table), = d.blocks._tables.values()
    kinds = collections.Counter(int(k) for k in table.ops[:, X.K_KIND])
    data_steps = sum(type(s).__name__ == "partial" for s in blk.steps)
    assert d.blocks.rows_run == table.rows
    assert kinds[X.COPY] >= 40 and kinds[X.DEPTHWISE] >= 15
    assert kinds[X.ELEMENTWISE] >= 20 and kinds[X.POOL] == 2
    depthwise = table.ops[table.ops[:, X.K_KIND] == X.DEPTHWISE]
    assert (depthwise[:, X.K_OUT32] == 1).any()  # the global average pool's int32 OFM
    assert kinds[X.ADDSUB] >= 10
    assert table.rows == data_steps and len(table.runs) == 1
    if HAVE_VNNI:
        assert kinds[X.POINTWISE] >= 40 and kinds[X.CONV] >= 1 and not kinds[X.CONV16]
    else:
        assert kinds[X.CONV16] >= 41 and not kinds[X.CONV] and not kinds[X.POINTWISE]
        c16 = table.ops[table.ops[:, X.K_KIND] == X.CONV16]
        assert (c16[:, X.K_CV_KH] == 3).any()  # the stem, a general convolution
        flat = c16[(c16[:, X.K_C16_VH] == 1) & (c16[:, X.K_H] > 1)]
        assert len(flat) >= 30 and (flat[:, X.K_C16_TW] == flat[:, X.K_W]).all()
        # the 1x1 layers on the pointwise int16-pair kernel (int_conv._pointwise16), the
        # stem on the general one
        pw = c16[c16[:, X.K_C16_PW] == 1]
        assert len(pw) >= 41 and (pw[:, X.K_CV_KH] == 1).all() and (pw[:, X.K_CV_KW] == 1).all()
        assert (c16[c16[:, X.K_CV_KH] == 3][:, X.K_C16_PW] == 0).all()


@needs_vela
@pytest.mark.parametrize("name", NETWORKS)
def test_the_tails_kinds_are_rows(compiled, name):
    """The kinds issue 32 #1/#3 converts appear as rows in the networks the equality test
    runs (so that test compares them with the closures and the units): element-wise
    operations on 8- and 32-bit tensors, unary, with a scalar, a broadcast operand, a LUT
    function, from and into the chaining FIFO, 1x1x1 OFMs (the result flag); poolings; every
    data step of the block is a row (the convolutions: byte-kernel rows on a VNNI machine,
    int16-pair kernel rows without, ACCELSTUB_VNNI=0)."""
    from accelstub.emu.conv.vnni import HAVE_VNNI
    from accelstub.emu.executor import ethosu85 as X
    from accelstub.emu.numeric import ethosu85 as P

    src, path = compiled(name, 256)
    _, _, d = runs(path, src, "executor", n=3)
    (blk, table), = d.blocks._tables.values()
    o = table.ops
    ew = o[o[:, X.K_KIND] == X.ELEMENTWISE]
    operand = np.concatenate([ew[:, [X.K_SRC1, X.K_BITS1, X.K_BC1, X.K_CHAIN_IN1]],
                              ew[:, [X.K_SRC2, X.K_BITS2, X.K_BC2, X.K_CHAIN_IN2]]])
    tensor = operand[operand[:, 0] == X.OPERAND_TENSOR]
    assert (tensor[:, 1] == 32).any() and (tensor[:, 1] == 8).any()
    assert (operand[:, 0] == X.OPERAND_SCALAR).any() and (tensor[:, 2] != 0).any()
    assert (operand[:, 0] == X.OPERAND_NONE).any()  # a unary operation
    assert (tensor[:, 3] > 0).any() and (ew[:, X.K_CHAIN_OUT] > 0).any()
    assert (ew[:, X.K_OE] == 4).any() and (ew[:, X.K_OE] == 1).any()
    assert (table.c64w[ew[:, X.K_CFG] + P.C_FUNC] != P.LUT_NONE).any()
    one = o[o[:, X.K_H] * o[:, X.K_W] * o[:, X.K_K] == 1]
    assert {X.ELEMENTWISE, X.POOL} <= set(one[:, X.K_KIND].tolist())
    assert (o[:, X.K_KIND] == X.POOL).sum() >= 2
    assert table.rows == sum(type(s).__name__ == "partial" for s in blk.steps)
    conv = {X.CONV, X.POINTWISE} if HAVE_VNNI else {X.CONV16}
    assert conv & set(o[:, X.K_KIND].tolist())


@needs_vela
def test_the_rows_set_the_result_flag_as_the_units_do(compiled):
    """The result flag (COND_STATUS.result_flag) after a replay whose steps are all rows is
    the last 1x1x1 OFM's low bit, as unit by unit: set to the other value before each run,
    the replays end with the units' flag."""
    src, path = compiled("mobilenet_v2_035", 256)
    units, _, _ = runs(path, src, "units", n=4)
    d = open_device("ethos-u85", macs=256)
    rc = RunControl(d)
    prog = read_vela(path)
    flags = []
    for seed in range(4):
        place_vela_program(d, prog, sample_inputs(src.read_bytes(), seed=seed))
        rows = d.blocks.rows_run
        want = units[seed][0][1][d.description.register("COND_STATUS").key]
        d.regs.set_field("COND_STATUS", "result_flag", ~want & 1)
        assert rc.run_here().reason == "done"
        assert state(d) == units[seed][0], seed
        flags.append((want & 1, d.blocks.rows_run > rows))
    assert flags[2][1] and flags[3][1]  # the last two runs replayed rows


@needs_vela
@pytest.mark.parametrize("where", ["inside a run", "first of a run"])
def test_a_row_whose_stream_check_fails_stops_the_run_at_its_step(compiled, where,
                                                                  monkeypatch):
    """A row whose stream no longer holds the bytes its run was kept from stops the compiled
    run before it (here the table's copy of one stream altered, as a rewritten stream would
    look to it): that step and the steps after it in the run go through their closures, and
    the run ends as the run unit by unit does (also where it is a run's first row: the
    closure runs it, the replay goes on; every MobileNet step converts, so there the data
    step before a convolution in the block's second half is kept out of the table to start
    a run with it)."""
    from accelstub.devices.ethos_u85 import executor as E
    from accelstub.emu.executor import ethosu85 as X

    src, path = compiled("mobilenet_v2_035", 256)
    units, _, _ = runs(path, src, "units", n=4)
    d = open_device("ethos-u85", macs=256)
    rc = RunControl(d)
    prog = read_vela(path)
    for seed in range(4):
        place_vela_program(d, prog, sample_inputs(src.read_bytes(), seed=seed))
        if seed == 2 and where == "first of a run":  # the block is recorded, its table not made
            (_, blk), = d.blocks.stored.values()
            k = next(k for k, s in enumerate(blk.steps) if k > len(blk.steps) // 2
                     and getattr(s, "func", None) is E.op_conv._run_kept_conv)
            j = max(j for j in range(k) if type(blk.steps[j]).__name__ == "partial")
            real, before_conv = E.step_rows, blk.steps[j]  # (its last data step before)
            monkeypatch.setattr(E, "step_rows",
                                lambda pools, s: None if s is before_conv else real(pools, s))
        if seed == 3:
            (_, table), = d.blocks._tables.values()
            if where == "first of a run":
                row = next(r0 for _, r0, _, _ in table.runs.values()
                           if table.ops[r0, X.K_CHECK_N])
            else:
                row = next(r for r in range(table.rows // 2, table.rows)
                           if table.ops[r, X.K_CHECK_N])
            table.c8[table.checks[table.ops[row, X.K_CHECK], 3]] ^= 1
            before = d.blocks.rows_run
        assert rc.run_here().reason == "done"
        assert state(d) == units[seed][0], seed
    assert 0 < d.blocks.rows_run - before < table.rows


@needs_vela
def test_a_halt_during_a_run_of_rows_stops_between_compiled_calls(compiled, monkeypatch):
    """A halt requested while the table's rows run (here by the first compiled call of its
    longest run of rows) stops after that call, at a step's end, with the state the units
    before it left (units done, pc); the continue after it ends as the run unit by unit
    does."""
    from accelstub.devices.ethos_u85 import executor as E

    src, path = compiled("mobilenet_v2_035", 256)
    units, _, _ = runs(path, src, "units", n=4)
    d = open_device("ethos-u85", macs=256)
    rc = RunControl(d)
    prog = read_vela(path)
    xs = [sample_inputs(src.read_bytes(), seed=seed) for seed in range(4)]
    for seed in range(3):
        place_vela_program(d, prog, xs[seed])
        assert rc.run_here().reason == "done"
    (blk, table), = d.blocks._tables.values()
    longest = max(table.runs.values(), key=lambda run: run[2] - run[1])  # (end, r0, r1, _)
    real = E.X.run_rows
    calls = []

    def halting(*args):
        if args[1] == longest[1]:  # its first call
            calls.append(args[1:3])
            rc._halt.set()  # (what a Ctrl-C from a client does)
        return real(*args)
    monkeypatch.setattr(E.X, "run_rows", halting)
    place_vela_program(d, prog, xs[3])
    units0 = d.units_done
    assert rc.run_here().reason == "halt"
    (r0, r1), = calls
    assert r1 - r0 >= min(E.CHUNK_ROWS, longest[2] - longest[1])
    assert r1 == longest[2] or table.ops[r1, 1] != table.ops[r1 - 1, 1]  # at a step's end
    k = longest[0] if r1 == longest[2] else int(table.ops[r1, 1])  # the first step not run
    qread = d.description.register("QREAD").key
    assert d.units_done == units0 + k and d.regs.snapshot()[qread] == blk.states[k][0][qread]
    monkeypatch.setattr(E.X, "run_rows", real)
    assert rc.run_here().reason == "done"
    assert state(d) == units[3][0]


@needs_vela
def test_step_breakpoint_and_watchpoint_replay_no_block(compiled):
    """With a breakpoint, a watchpoint or a single step no block is replayed (no run of
    rows); the runs end as unit by unit. Units run one by one take their own rows where the
    state before them is the recording's (BlockReplay.step, issue 26 #7: single steps, a
    watchpoint's run), never with a breakpoint set (one may lie inside a unit)."""
    src, path = compiled("mobilenet_v2_035", 256)
    xs = sample_inputs(src.read_bytes())
    setups = {"breakpoint": lambda rc: rc.add_breakpoint(0xFFFF_FFF0),
              "watchpoint": lambda rc: rc.add_watchpoint("w", 0xFFFF_FF00, 4)}
    for name, setup in setups.items():
        d = open_device("ethos-u85", macs=256)
        rc = RunControl(d)
        prog = read_vela(path)
        for _ in range(3):  # a walk, a recording, a replay: the table exists
            place_vela_program(d, prog, xs)
            assert rc.run_here().reason == "done"
        rows, stepped = d.blocks.rows_run, d.blocks.units_stepped
        assert rows > 0
        setup(rc)
        place_vela_program(d, prog, xs)
        assert rc.run_here().reason == "done"
        assert d.blocks.rows_run == rows, name
        assert (d.blocks.units_stepped > stepped) == (name == "watchpoint"), name
    place_vela_program(d, prog, xs)
    rows, stepped = d.blocks.rows_run, d.blocks.units_stepped
    for _ in range(5):
        assert rc.run_here(single=True).reason == "step"
    assert d.blocks.rows_run == rows and d.blocks.units_stepped > stepped


@needs_vela
def test_compile_ahead_compiles_what_a_table_runs(compiled):
    """`accelstub compile` compiles the executor for the one set of argument types every table
    passes (emu/executor compile_ahead), so a first replay finds it compiled: a table's run
    adds no signature."""
    from accelstub.emu.executor import ethosu85 as X

    X.compile_ahead()
    sigs = list(X.run_rows.signatures)
    assert len(sigs) == 1
    src, path = compiled("mobilenet_v2_035", 256)
    _, _, d = runs(path, src, "executor", n=3)
    assert d.blocks.rows_run > 0 and list(X.run_rows.signatures) == sigs


@needs_vela
def test_the_arrays_kernels_return_through_their_addresses_are_freed(compiled, monkeypatch):
    """The element-wise and pooling kernels return new (NRT) arrays to run_rows through their
    addresses (emu/executor _call, issue 32 #3): each call of run_rows frees all it
    allocated, and MobileNet v2's calls do allocate (its 26 element-wise rows and 2 pools)."""
    from numba.core.runtime import _nrt_python, rtsys

    from accelstub.emu.executor import ethosu85 as X

    _nrt_python.memsys_enable_stats()
    src, path = compiled("mobilenet_v2_035", 256)
    d = open_device("ethos-u85", macs=256)
    rc = RunControl(d)
    prog = read_vela(path)
    real, calls = X.run_rows, []

    def counted(*args):
        s0 = rtsys.get_allocation_stats()
        done = real(*args)
        s1 = rtsys.get_allocation_stats()
        calls.append((s1.mi_alloc - s0.mi_alloc, s1.mi_free - s0.mi_free))
        return done
    monkeypatch.setattr(X, "run_rows", counted)
    for seed in range(3):  # a walk, a recording, a replay
        place_vela_program(d, prog, sample_inputs(src.read_bytes(), seed=seed))
        assert rc.run_here().reason == "done"
    assert calls and all(made == freed for made, freed in calls), calls
    assert sum(made for made, _ in calls) >= 28
