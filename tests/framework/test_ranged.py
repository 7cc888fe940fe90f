"""Kernels over a range of their loop, called through their address by thin serial and parallel
wrappers (emu/ranged.py; the parallel twins, emu/conv/int_conv.py Twin, issue 31 #5)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from accelstub.emu import ranged as R
from accelstub.emu.conv import ethosu85 as E

#: the child: a small int16 convolution (its serial twins), then what numba did for the twins
#: and their bodies in this process (compiled: a miss; loaded from the disk cache: a hit)
CACHE_CHILD = """
import json
import numpy as np
from accelstub.emu.conv import int_conv as IC
v = np.arange(2 * 5 * 5, dtype=np.int16).reshape(2, 5, 5) % 7 - 3
w = IC.pack_weights(np.arange(3 * 3 * 3 * 2).reshape(3, 3, 3, 2) % 5 - 2)
sums = IC.conv_sums(v, w, (3, 3), kernel="int16")
stats = {}
for t in (IC._PACK_INPUT_TWIN, IC._CONV_BLOCKS_TWIN):
    for k in (t.serial, t.body):
        s = k.stats
        stats[k.py_func.__name__] = [sum(s.cache_hits.values()), sum(s.cache_misses.values())]
print(json.dumps([sums.tolist(), stats]))
"""


def test_a_wrapper_loaded_from_the_disk_cache_finds_its_body_loaded_with_it(tmp_path):
    """A later process loads the serial wrappers from the disk cache, whose code does not
    compile their bodies: each wrapper has its body loaded as it is loaded (ranged_wrapper),
    so its calls find the body's address, and the sums are those the first process got."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", CACHE_CHILD], env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout))
    (first, compiled), (second, loaded) = runs
    assert np.any(first) and second == first
    names = {"_pack_input_serial", "_pack_input_rows", "_conv_blocks_serial",
             "_conv_blocks_tasks"}
    assert set(compiled) == set(loaded) == names
    assert all(hits == 0 and misses == 1 for hits, misses in compiled.values()), compiled
    assert all(hits == 1 and misses == 0 for hits, misses in loaded.values()), loaded


def test_a_call_whose_body_is_not_in_the_table_raises_and_names_it():
    """A wrapper whose body this process has no address for (never so in use: the wrapper
    loads it) raises RuntimeError naming the body, rather than jumping to address 0."""
    twin = E._FINISH_FAST_TWIN
    out = np.zeros((2, 3, 4), np.int8)
    args = (np.zeros((2, 3, 4), np.int32), np.ones(2, np.int64), np.ones(3, np.int64),
            np.zeros((6, 4), np.int64), out)
    k = args[3]
    k[1], k[5, 1], k[5, 2], k[5, 3] = 1, -128, 127, 4
    twin.serial(*args)  # compiled (or loaded), with its body
    table = R._TABLES[R._symbol(twin.body)]
    kept = table.copy()
    try:
        table[:] = 0
        with pytest.raises(RuntimeError, match="_finish_fast_rows: not compiled for"):
            twin.serial(*args)
    finally:
        table[:] = kept
    twin.serial(*args)  # the entry back: it runs again
