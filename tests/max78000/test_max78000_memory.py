"""MAX78000 memory kernels (accelstub.emu.memory.max78000: gathers, scatter, touched ranges)
against straightforward per-element Python written from the address formulas in
devices/max78000/datapath.py's docstrings (no code shared with the kernels)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from accelstub.devices.max78000.datapath import _written, sram_address
from accelstub.emu.memory import max78000 as M

K_BYTES = [0, 7, 6, 5, 4, 11, 10, 9, 8]  # k0..k8 byte positions in a 16-byte MRAM word


def byte_ranges(addresses) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for a in sorted(set(addresses)):
        if out and out[-1][1] == a:
            out[-1][1] = a + 1
        else:
            out.append([a, a + 1])
    return [(s, e) for s, e in out]


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(1, 5), st.integers(1, 3),
       st.integers(1, 3), st.booleans(), st.integers(0, 2**32 - 1))
def test_gather_hwc_matches_word_formula(n, h, w, passes, ops, grouped, seed):
    rng = np.random.default_rng(seed)
    sram = rng.integers(0, 256, (16, 0x8000)).astype(np.uint8)
    span = 8192 - h * w * passes * ops + 1
    if grouped:  # n groups of four processors on lanes 0-3 of one memory and read pointer
        g_mem, g_word = rng.integers(0, 16, n), rng.integers(0, span, n)
        memory, read_word = np.repeat(g_mem, 4), np.repeat(g_word, 4)
        lane, n = np.tile(np.arange(4), n), 4 * n
    else:
        memory, lane = rng.integers(0, 16, n), rng.integers(0, 4, n)
        read_word = rng.integers(0, span, n)
    x, bad = M.gather_hwc(sram, memory, lane, read_word, h, w, passes, ops)
    assert bad == -1
    for j in range(n):
        for r in range(h):
            for c in range(w):
                for e in range(passes):
                    for o in range(ops):
                        word = read_word[j] + ((r * w + c) * passes + e) * ops + o
                        byte = int(sram[memory[j], 4 * word + lane[j]])
                        assert x[r, c, (o * passes + e) * n + j] == (byte ^ 0x80) - 0x80
    if grouped:  # the word form the datapath uses for such groups: the same bytes
        got, bad = M.gather_hwc_words(sram, g_mem, g_word, h, w, passes, ops, n)
        assert bad == -1
        np.testing.assert_array_equal(got, x)
        g_word[-1] = span  # one word too far: the last group's first processor is named
        assert M.gather_hwc_words(sram, g_mem, g_word, h, w, passes, ops, n)[1] == n - 4


def test_gathers_refuse_reads_past_the_memory():
    sram = np.zeros((16, 0x8000), np.uint8)
    ok = np.array([0, 8192 - 4], np.int64)
    _, bad = M.gather_hwc(sram, np.array([0, 1]), np.array([0, 0]), ok, 2, 2, 1, 1)
    assert bad == -1
    _, bad = M.gather_hwc(sram, np.array([0, 1]), np.array([0, 0]), ok + [0, 1], 2, 2, 1, 1)
    assert bad == 1
    _, bad = M.gather_chw(sram, np.array([3]), np.array([8190]), 3, 3)  # 9 bytes = 3 words
    assert bad == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 2), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([9, 1, 5]), st.integers(0, 8), st.integers(0, 2**32 - 1))
def test_gather_weights_matches_mask_counter_formula(n, slots, passes, bits, ks, oned, seed):
    rng = np.random.default_rng(seed)
    mram = rng.integers(0, 256, (64, 0x4000)).astype(np.uint8)
    proc = rng.choice(64, n, replace=False)
    mcnt = rng.integers(0, 4000, n)
    w, used, bad = M.gather_weights(mram, proc, mcnt, slots, passes, bits, ks, oned)
    assert bad == -1
    assert w.flags.c_contiguous  # a strided view would be copied by every use of the layer
    words = set()
    for j in range(n):
        for t in range(slots):
            for e in range(passes):
                cnt = mcnt[j] + (t * passes + e) * bits
                start = (cnt >> 3) * ks + oned
                for i in range(ks):
                    byte = start + ks - 1 - i
                    raw = int(mram[proc[j], 16 * (byte // 9) + K_BYTES[8 - byte % 9]])
                    v = (raw >> (cnt & 7)) & ((1 << bits) - 1)
                    v -= (v >> (bits - 1)) << bits  # two's complement of the field
                    assert w[t, e * n + j, i] == v
                    words.add((j, byte // 9))
    assert {(j, c) for j, c in zip(*np.nonzero(used))} == words
    _, _, bad = M.gather_weights(mram, proc[:1], np.array([767 * 72 + 8]), 2, 1, 8, 9, 0)
    assert bad == 0  # the second kernel would start in word 768


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 40), st.integers(1, 3),
       st.sampled_from(["bytes", "wide", "grouped"]), st.integers(0, 2**32 - 1))
def test_scatter_writes_and_reports_exactly_the_addressed_bytes(slots, pixels, step, kind, seed):
    rng = np.random.default_rng(seed)
    sram = rng.integers(0, 256, (16, 0x8000)).astype(np.uint8)
    want, before = sram.copy(), sram.copy()
    wide, groups = kind == "wide", slots
    if kind == "grouped":  # groups of four slots on lanes 0-3 of one write pointer
        slots *= 4
    out = rng.integers(-(1 << 31), 1 << 31, (slots, pixels)).astype(np.int32)  # as _finish
    # some slots start near the end of a data memory, so their pixels cross into the next one
    slot_word = rng.integers(0, (1 << 17) - pixels * step, groups)
    slot_word[0] = min(8190, (1 << 17) - pixels * step - 1)
    if kind == "grouped":
        group_word, slot_word = slot_word, np.repeat(slot_word, 4)
        lanes = np.tile(np.arange(4), groups)
    else:
        lanes = np.full(slots, -1) if wide else rng.integers(0, 4, slots)
    written = []
    for s in range(slots):
        for p in range(pixels):
            g = slot_word[s] + p * step
            m, b = g >> 13, 4 * (g & 0x1FFF)
            if wide:
                word = (int(out[s, p]) & 0xFFFFFFFF).to_bytes(4, "little")
                want[m, b:b + 4] = np.frombuffer(word, np.uint8)
                written += [m * 0x8000 + b + i for i in range(4)]
            else:
                want[m, b + lanes[s]] = out[s, p] & 0xFF
                written.append(m * 0x8000 + b + lanes[s])
    M.scatter(sram, out, slot_word, lanes, step)
    np.testing.assert_array_equal(sram, want)
    if kind == "grouped":  # one word per group and pixel: the same bytes
        sram4 = before.copy()
        M.scatter_words(sram4.view(np.uint32), out, group_word, step)
        np.testing.assert_array_equal(sram4, want)
    # what the datapath reports as written: exactly these bytes, as CPU address ranges
    cpu = sorted({int(sram_address(a // 0x8000, 0)) + a % 0x8000 for a in written})
    ranges, memories = _written(slot_word, lanes, pixels, step, wide)
    assert ranges == byte_ranges(cpu)
    assert memories == sorted({a // 0x8000 for a in written})


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=40, max_size=40), min_size=1, max_size=3),
       st.integers(1, 16))
def test_mask_ranges_finds_every_run(rows, unit):
    mask = np.zeros((len(rows), 40), np.uint8)
    mask[:, :] = rows
    base = np.arange(len(rows)) * 10_000
    got = M.mask_ranges(mask, base, unit, np.zeros(len(rows), np.int64),
                        np.full(len(rows), 40, np.int64)).tolist()
    want = []
    for r, row in enumerate(rows):
        for s, e in byte_ranges([i for i, v in enumerate(row) if v]):
            want.append([base[r] + s * unit, base[r] + e * unit])
    assert got == want
