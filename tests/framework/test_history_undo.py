"""The byte-range kernels of reverse-execution history (emu/memory/ranges.py) against a byte
mask, and the history's undo over memory stacks and memories in no stack (devices/history.py,
issue 29 #5): a boundary recorded over writes to several stores, and a change no range names
(the safety net), are undone byte for byte."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from accelstub.devices import open_device
from accelstub.devices.device import Touched
from accelstub.devices.history import PIECES_KEPT, History
from accelstub.emu.memory.ranges import BLOCK, diff_out, put_back, range_pieces, swap_out

SPACE = 512


def mask_pieces(ranges, segments) -> list[tuple[int, int, int, int]]:
    """The reference: mark every byte a range covers, then each maximal run of marked bytes
    inside a segment is one piece (segment, store, offset in the store, length)."""
    covered = np.zeros(SPACE, bool)
    for s, e in ranges:
        covered[s:e] = True
    out = []
    for k, (start, end, store, base) in enumerate(segments):
        a = start
        while a < end:
            if not covered[a]:
                a += 1
                continue
            b = a
            while b < end and covered[b]:
                b += 1
            out.append((k, store, base + a - start, b - a))
            a = b
    return sorted(out, key=lambda p: (p[1], p[2]))


@st.composite
def layouts(draw):
    """Sorted disjoint segments (gaps, adjacent ones) over 0..SPACE, each in one of three
    stores at a distinct offset, and ranges anywhere (overlapping, touching, empty, across
    segment bounds and gaps)."""
    cuts = sorted(draw(st.sets(st.integers(0, SPACE), min_size=2, max_size=12)))
    segments, next_base = [], [0, 0, 0]
    for s, e in zip(cuts, cuts[1:]):
        if draw(st.booleans()):  # else a gap (a register window, unmapped)
            store = draw(st.integers(0, 2))
            segments.append((s, e, store, next_base[store]))
            next_base[store] += e - s + draw(st.integers(0, 7))
    starts = st.integers(0, SPACE - 1)
    ranges = draw(st.lists(st.tuples(starts, st.integers(0, 40)), max_size=30))
    return segments, [(s, min(SPACE, s + n)) for s, n in ranges]


@settings(max_examples=300, deadline=None)
@given(layouts())
def test_range_pieces_are_the_covered_bytes_of_each_segment(layout):
    segments, ranges = layout
    table = np.array(segments, np.int64).reshape(-1, 4).T.copy()
    got = range_pieces(np.array(ranges, np.int64).reshape(-1, 2), table)
    assert [tuple(int(x) for x in col) for col in got.T] == mask_pieces(ranges, segments)


def differing_runs(a: np.ndarray, b: np.ndarray, pieces) -> list[tuple[int, int, int]]:
    """The reference for swap_out's runs: each piece (segment, offset, length) cut into
    BLOCK-byte blocks from its start; a block where ``a`` and ``b`` differ is kept, kept
    blocks next to each other in one piece are one run (segment, offset, length)."""
    runs: list[tuple[int, int, int]] = []
    for seg, o, n in pieces:
        last_kept = False
        for b0 in range(o, o + n, BLOCK):
            e = min(b0 + BLOCK, o + n)
            kept = not np.array_equal(a[b0:e], b[b0:e])
            if kept and last_kept:
                runs[-1] = (seg, runs[-1][1], e - runs[-1][1])
            elif kept:
                runs.append((seg, b0, e - b0))
            last_kept = kept
    return runs


def _pieces_and_arrays(cuts: set[int], seed: int, share: float, changed: str):
    """Disjoint pieces from ``cuts`` (every other interval between the cut points, last first,
    each named by a segment of its own), their (segment, offset, length) columns, and a
    memory and shadow of 600 random bytes that differ at a ``share`` of them, the ``changed``
    one ("shadow" or "data") carrying the differences."""
    edges = sorted(cuts)
    pieces = [(i, a, b - a) for i, (a, b) in enumerate(zip(edges[::2], edges[1::2]))
              if b > a][::-1]
    rng = np.random.default_rng(seed)
    segs, offs, lens = (np.array([p[i] for p in pieces], np.int64) for i in range(3))
    data = rng.integers(0, 256, 600, dtype=np.uint8)
    shadow = data.copy()
    flip = rng.random(600) < share
    target = shadow if changed == "shadow" else data
    target[flip] ^= rng.integers(1, 256, int(flip.sum()), dtype=np.uint8)
    return pieces, segs, offs, lens, data, shadow


def _inside(pieces) -> np.ndarray:
    """The mask of the 600 bytes that lie in one of ``pieces`` (segment, offset, length)."""
    inside = np.zeros(600, bool)
    for _, o, n in pieces:
        inside[o:o + n] = True
    return inside


@settings(max_examples=150, deadline=None)
@given(st.sets(st.integers(0, 600), max_size=16), st.integers(0, 2**32 - 1),
       st.sampled_from([0.0, 0.002, 0.02, 1.0]))
def test_swap_out_then_put_back_restores_memory_and_shadow(cuts, seed, share):
    """swap_out keeps, of each piece, the runs of BLOCK-byte blocks where memory and shadow
    differ: it returns the shadow's bytes there and the runs, and copies the memory's bytes
    into the shadow; put_back writes them into both, which brings both back to the shadow's
    bytes (elsewhere they were equal already). Pieces are disjoint, as range_pieces gives
    them: every other interval between the cut points, taken last first (the kernels need no
    order), each named by a segment of its own; memory and shadow differ at a ``share`` of
    the bytes (none, a few, many, all), so blocks with and without a change mix."""
    pieces, segs, offs, lens, data, shadow = _pieces_and_arrays(cuts, seed, share, "shadow")
    data0, shadow0 = data.copy(), shadow.copy()
    want = differing_runs(data0, shadow0, pieces)
    saved, runs = swap_out(data, shadow, segs, offs, lens)
    assert [tuple(int(x) for x in col) for col in runs.T] == want
    assert saved.tobytes() == b"".join(shadow0[o:o + n].tobytes() for _, o, n in want)
    inside = _inside(pieces)
    assert np.array_equal(shadow, np.where(inside, data0, shadow0))
    assert np.array_equal(data, data0)
    put_back(data, shadow, runs[1], runs[2], saved)  # memory equals the shadow, as after settle
    assert np.array_equal(data, np.where(inside, shadow0, data0))
    assert np.array_equal(shadow, shadow0)


@settings(max_examples=100, deadline=None)
@given(st.sets(st.integers(0, 600), max_size=16), st.integers(0, 2**32 - 1),
       st.sampled_from([0.0, 0.002, 0.02, 1.0]))
def test_diff_out_keeps_the_bytes_after_and_put_back_into_one_array_replays_them(cuts, seed,
                                                                                  share):
    """diff_out (a journaled host change: the bytes after) finds swap_out's runs but returns
    the memory's bytes there and leaves both arrays as they were; put_back with one array for
    both writes them back into a copy of the shadow (the checkpoint's bytes), which then
    equals the memory in every piece (a replay from the checkpoint, History.prepare and
    apply_redo)."""
    pieces, segs, offs, lens, data, shadow = _pieces_and_arrays(cuts, seed, share, "data")
    data0, shadow0 = data.copy(), shadow.copy()
    want = differing_runs(data0, shadow0, pieces)
    after, runs = diff_out(data, shadow, segs, offs, lens)
    assert [tuple(int(x) for x in col) for col in runs.T] == want
    assert after.tobytes() == b"".join(data0[o:o + n].tobytes() for _, o, n in want)
    assert np.array_equal(data, data0) and np.array_equal(shadow, shadow0)
    replay = shadow0.copy()
    put_back(replay, replay, runs[1], runs[2], after)
    inside = _inside(pieces)
    assert np.array_equal(replay, np.where(inside, data0, shadow0))


def memories(dev) -> dict[str, bytes]:
    return {k: m.data.tobytes() for k, m in dev.bus.memories.items()}


def test_one_boundary_over_two_stacks_and_loose_memories_is_undone_exactly():
    """A transition whose writes fall in both MAX78000 memory stacks (a bus write crossing
    from one data memory into the next: one store, two segments; a unit's store noted with
    its range; MRAM) and in two memories in no stack (two TRAMs: two stores), plus a change
    written straight into a memory's array with no range recorded (caught by its change
    counter): one record, and undo puts every byte back."""
    dev = open_device("max78000")
    bus = dev.bus
    sram, mram = bus.stack_members["sram"], bus.stack_members["mram"]
    tram0, tram1 = bus.memories["tram_q0_p0"], bus.memories["tram_q0_p1"]
    assert sram[0].region.end == sram[1].region.base
    h = History(bus, dev.regs, budget=1 << 30, every=1)  # every boundary a checkpoint
    bus.write(sram[0].region.base + 100, bytes(range(1, 9)))  # before the history: kept
    h.begin({"at": 0})
    before = memories(dev)
    bus.write(sram[0].region.end - 8, b"\xaa" * 16)
    bus.write(mram[5].region.base + 32, b"\xbb" * 16)
    bus.write(tram0.region.base + 4, b"\xcc" * 8)
    bus.write(tram1.region.base + 8, b"\xdd" * 8)
    sram[2].data[10:20] = 0x55  # a unit's store, noted with its range
    sram[2].touch()
    h.note(sram[2].region.base, Touched(writes=[(sram[2].region.base + 10,
                                                 sram[2].region.base + 20)]))
    sram[3].data[7] ^= 0xFF  # a kernel's store that no range names
    sram[3].touch()
    h.record({"at": 1})
    assert memories(dev) != before
    assert len({s.store for s in h.entries[-1].undo}) == 4  # two stacks, two TRAMs
    applied = []
    h.undo_last(applied.append)
    assert applied == [{"at": 0}]
    assert memories(dev) == before
    h.record({"at": 2})  # the shadow agrees with memory again: nothing to save
    assert h.entries[-1].undo == []


def test_a_write_of_what_memory_holds_saves_only_the_blocks_that_differ():
    """A host write over a whole data memory that stores the bytes already there except in
    two places (a driver loading the same input again after the layers overwrote a little of
    it) is kept in the history as those places' blocks only, and undone exactly."""
    dev = open_device("max78000")
    bus = dev.bus
    mem = bus.stack_members["sram"][3]
    rng = np.random.default_rng(7)
    bus.write(mem.region.base, rng.integers(0, 256, mem.data.size, dtype=np.uint8).tobytes())
    h = History(bus, dev.regs, budget=1 << 30, every=1)  # every boundary a checkpoint
    h.begin({"at": 0})
    before = memories(dev)
    image = mem.data.copy()
    image[100] ^= 1  # block 1
    image[5000:5200] ^= 0xFF  # blocks 78..81
    bus.write(mem.region.base, image.tobytes())
    h.record({"at": 1})
    (saved,) = h.entries[-1].undo
    assert saved.data.size == BLOCK + 4 * BLOCK
    assert memories(dev) != before
    h.undo_last(lambda state: None)
    assert memories(dev) == before


def test_a_continue_long_after_the_last_stop_is_one_boundary(tmp_path, monkeypatch):
    """CHECKPOINT_S counts run time: a continue started long after the last boundary (a user
    looking at the stop for minutes, here the boundary's clock set back an hour, CHECKPOINT_S
    ten minutes, so that a slow machine's run time cannot reach it) still journals one
    boundary for all its units at its stop, not a checkpoint after its first unit and a leg
    for the rest."""
    from accelstub.devices import history
    from accelstub.stub.server import StubServer
    from accelstub.testkit import max78000_build as M

    monkeypatch.setattr(history, "CHECKPOINT_S", 600.0)

    net = M.Network(3, 8, 8, [M.Layer(8, kernel=3, pad=1, activation="relu", shift=-1)
                              for _ in range(5)], name="five")
    server = StubServer([open_device("max78000")], gdb_port=None, telnet_port=None,
                        tcl_port=None)  # records history (no port is opened)
    server.load_program(M.build(net, seed=2).write(tmp_path / "five"), log=lambda s: None)
    rc = server.targets[0]
    assert rc.step(300).reason == "step"
    rc.history.t_mark -= 3600.0
    assert rc.run(300).reason == "done"
    assert not rc.history.entries
    assert [len(leg.units) for leg in rc.history.legs] == [1, 4]


def test_the_same_range_tuples_reuse_their_pieces_and_other_ranges_do_not():
    """A record over the very tuples of a recent one (a device that keeps a unit's write
    ranges, as the MAX78000's layers do; another record, an input reload's, in between)
    reuses their joined pieces; ranges of the same count but other tuples (other bytes) are
    joined anew; every boundary is undone exactly either way. At most PIECES_KEPT lists are
    kept, and a new history over the same memories keeps them."""
    dev = open_device("max78000")
    sram = dev.bus.stack_members["sram"]
    h = History(dev.bus, dev.regs, budget=1 << 30, every=1)  # every boundary a checkpoint
    h.begin({"at": 0})
    a = [(sram[0].region.base + 10, sram[0].region.base + 20)]
    b = [(sram[1].region.base + 30, sram[1].region.base + 45)]
    states, tables = [memories(dev)], []
    for i, ranges in enumerate([a, a, b, list(a)]):  # list(a): a's tuples in a new list
        for start, end in ranges:
            mem, off = dev.bus.memory_at(start)
            mem.data[off:off + end - start] ^= 0x5A + i  # a unit's store
            mem.touch()
        h.note(start, Touched(writes=ranges))
        h.record({"at": i + 1})
        states.append(memories(dev))
        tables.append(h.last_pieces[id(ranges[0])][1])
    assert [x is y for x, y in zip(tables, tables[1:])] == [True, False, False]
    assert tables[3] is tables[0] and not np.array_equal(tables[2], tables[0])
    for want in states[-2::-1]:
        h.undo_last(lambda state: None)
        assert memories(dev) == want
    h.clear()  # a new history over the same memories (a reset, a load) keeps them
    h.begin({"at": 0})
    h.note(0, Touched(writes=a))
    h.record({"at": 1})
    assert h.last_pieces[id(a[0])][1] is tables[0]
    for n in range(PIECES_KEPT):
        h.note(0, Touched(writes=[(sram[2].region.base + n, sram[2].region.base + n + 1)]))
        h.record({"at": 2 + n})
    assert len(h.last_pieces) == PIECES_KEPT and id(a[0]) not in h.last_pieces


def test_a_host_change_keeps_every_block_that_differs_from_the_checkpoint(monkeypatch):
    """A journaled host change (a driver's input reload between continues) keeps as redo the
    blocks of what it wrote that differ from the shadow (the checkpoint's bytes). Here a unit
    wrote two places of a data memory, then the host rewrites the whole memory with what it
    holds but two other blocks (one inside a place the unit wrote): the redo laid over the
    shadow gives memory as it is after the change, byte for byte (the places the unit wrote
    differ from the shadow though the host's store changed nothing there), and it holds
    exactly the blocks that differ. (CHECKPOINT_S out of reach: a first kernel load must not
    close the journal.)"""
    from accelstub.devices import history

    monkeypatch.setattr(history, "CHECKPOINT_S", 3600.0)
    dev = open_device("max78000")
    bus = dev.bus
    mem = bus.stack_members["sram"][3]
    base = mem.region.base
    rng = np.random.default_rng(3)
    bus.write(base, rng.integers(0, 256, mem.data.size, dtype=np.uint8).tobytes())
    h = History(bus, dev.regs, budget=1 << 30)  # journaled: a checkpoint every 16 legs
    h.begin({"at": 0})
    mem.data[1000:1100] ^= 0x3C  # the unit's stores, noted with their ranges
    mem.data[9000:9004] ^= 0x01
    mem.touch()
    h.note(base, Touched(writes=[(base + 1000, base + 1100), (base + 9000, base + 9004)]))
    h.record({"at": 1})
    image = mem.data.copy()
    image[1050] ^= 0x80  # inside what the unit wrote
    image[20000:20010] ^= 0xFF  # elsewhere
    bus.write(base, image.tobytes())
    h.record({"at": 2}, host=True)
    (leg,) = [g for g in h.legs if g.redo is not None]
    _, shadow = h.stores[h.segments[2, h.seg_of[mem.region.name]]]
    k = h.seg_of[mem.region.name]
    after = shadow.copy()
    kept = 0
    for saved in leg.redo.mem:
        put_back(after, after, saved.runs[1], saved.runs[2], saved.data)
        kept += saved.data.size
    off = h.segments[3, k]
    assert np.array_equal(after[off:off + mem.data.size], mem.data)
    differ = mem.data != shadow[off:off + mem.data.size]
    blocks = np.unique(np.flatnonzero(differ) // BLOCK)
    assert kept == BLOCK * len(blocks)


def test_units_and_redo_bytes_since_the_checkpoint_close_the_journal_and_count_anew(
        monkeypatch):
    """CHECKPOINT_UNITS and REDO_BYTES count what was journaled since the last checkpoint
    (running totals, History.journal_units and journal_redo): with 5 units, legs of two units
    close a checkpoint at their third leg, and the next two legs are journaled again (a total
    carried over the checkpoint would close one at every leg); with five times the first
    host change's redo (each change one more block off the checkpoint), one closes at the
    third change, and the count begins anew. Every
    boundary is undone exactly."""
    from accelstub.devices import history

    monkeypatch.setattr(history, "CHECKPOINT_S", 3600.0)
    monkeypatch.setattr(history, "CHECKPOINT_UNITS", 5)
    dev = open_device("max78000")
    bus = dev.bus
    mem = bus.stack_members["sram"][4]
    base = mem.region.base
    h = History(bus, dev.regs, budget=1 << 30)
    h.begin({"at": 0})
    states = [memories(dev)]
    for i in range(5):  # two units a leg
        for j in range(2):
            at = 256 * (2 * i + j)
            mem.data[at:at + 16] ^= 0x11
            mem.touch()
            h.note(base + at, Touched(writes=[(base + at, base + at + 16)]))
        h.record({"at": i + 1})
        states.append(memories(dev))
    assert [len(e.legs) for e in h.entries] == [3] and len(h.legs) == 2
    assert h.journal_units == 4
    h.settle(lambda: {"at": "settled"}, lambda state: None)
    for i in range(5):  # host changes of one more differing block each
        image = mem.data.copy()
        image[8192 + 640 * i] ^= 0xFF
        bus.write(base, image.tobytes())
        h.record({"at": 10 + i}, host=True)
        states.append(memories(dev))
        if i == 0:
            size = h.legs[-1].redo.nbytes
            monkeypatch.setattr(history, "REDO_BYTES", 5 * size)
    assert [len(e.legs) for e in h.entries] == [3, 2, 3] and len(h.legs) == 2
    assert h.journal_redo == sum(leg.redo.nbytes for leg in h.legs)
    h.settle(lambda: {"at": "settled"}, lambda state: None)
    while h.entries:
        h.undo_last(lambda state: None)
    assert memories(dev) == states[0]


def test_a_host_change_between_continues_leaves_the_units_pieces_kept(monkeypatch):
    """A host change's record joins its log's ranges without keeping them in last_pieces
    (new tuples each time, never met again): after more host changes than PIECES_KEPT, the
    next checkpoint over the same units' range tuples reuses the pieces the last one joined
    (one inference is a reload and a continue; the MAX78000's eight reloads per checkpoint
    used to push the units' pieces out). Every boundary is undone exactly."""
    from accelstub.devices import history

    monkeypatch.setattr(history, "CHECKPOINT_S", 3600.0)
    dev = open_device("max78000")
    bus = dev.bus
    sram = bus.stack_members["sram"]
    a = [(sram[0].region.base + 64, sram[0].region.base + 200),
         (sram[1].region.base, sram[1].region.base + 100)]  # a layer's kept ranges
    h = History(bus, dev.regs, budget=1 << 30)
    h.begin({"at": 0})
    before = memories(dev)
    tables = []
    for rnd in range(2):
        for start, end in a:  # the unit
            mem, off = bus.memory_at(start)
            mem.data[off:off + end - start] ^= 0x21 + rnd
            mem.touch()
        h.note(a[0][0], Touched(writes=a))
        h.record({"at": "unit"})
        for i in range(PIECES_KEPT + 1):  # reloads: new log tuples each
            bus.write(sram[2].region.base + 64 * i, bytes([rnd + 1, i + 1]))
            h.record({"at": "host"}, host=True)
        assert id(a[0]) not in h.last_pieces or rnd == 1
        assert len(h.last_pieces) == rnd  # the logs' pieces are not kept
        h.settle(lambda: {"at": "settled"}, lambda state: None)
        tables.append(h.last_pieces[id(a[0])][1])
    assert tables[1] is tables[0]
    while h.entries:
        h.undo_last(lambda state: None)
    assert memories(dev) == before
