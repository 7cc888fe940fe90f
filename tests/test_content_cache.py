"""devices/content_cache.py: a value is kept while the bytes it came from are the same (issue 31
#2: NE16's and NVDLA's decoded weights), computed again when one byte or the shape changes,
and only the most recently used keys are kept."""
from __future__ import annotations

import threading

import numpy as np

from accelstub.devices.content_cache import ContentCache, kept_for


def test_a_value_is_kept_while_the_bytes_are_the_same_and_computed_again_after():
    cache, calls = ContentCache(), []

    def compute(data: np.ndarray) -> int:
        calls.append(data.copy())
        return int(data.sum())

    data = np.arange(64, dtype=np.uint8)
    assert cache.get("w", data, compute) == data.sum()
    assert cache.get("w", data.copy(), compute) == data.sum()  # equal bytes, another array
    assert len(calls) == 1
    data[5] += 1  # the memory changed in place: the kept copy is not the caller's array
    assert cache.get("w", data, compute) == data.sum()
    assert len(calls) == 2
    assert cache.get("w", data.reshape(8, 8), compute) == data.sum()  # same bytes, new shape
    assert len(calls) == 3
    assert cache.get("other key", data.reshape(8, 8), compute) == data.sum()
    assert len(calls) == 4
    signed = data.reshape(8, 8).astype(np.int8)  # equal values for these bytes, another dtype
    assert cache.get("other key", signed, compute) == signed.sum()
    assert len(calls) == 5


def test_only_the_most_recently_used_keys_are_kept():
    cache, calls = ContentCache(size=2), []
    data = np.zeros(4, np.uint8)

    def compute(d: np.ndarray) -> int:
        calls.append(1)
        return len(calls)

    assert [cache.get(k, data, compute) for k in ("a", "b", "a", "c")] == [1, 2, 1, 3]
    assert cache.get("a", data, compute) == 1  # used after "b": kept
    assert cache.get("b", data, compute) == 4  # the least recently used: gone


def test_threads_sharing_a_cache_get_the_value_of_their_bytes():
    cache = ContentCache(size=3)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(300):
                data = rng.integers(0, 4, 8, dtype=np.uint8)
                key = int(rng.integers(0, 5))
                assert cache.get(key, data, lambda d: d.tobytes()) == data.tobytes()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_kept_for_keeps_a_dict_while_its_owner_is_the_same_object():
    """kept_for (conv_sums' launches per weights array): the same dict for the same key and
    owner; a new, empty one when the owner is another object (weights decoded again after a
    byte changed), even an equal one; all dropped past ``size`` keys."""
    table: dict = {}
    w = np.arange(8)
    first = kept_for(table, "layer", w)
    first["launch"] = 1
    assert kept_for(table, "layer", w) is first
    other = kept_for(table, "layer", w.copy())
    assert other is not first and other == {}
    assert kept_for(table, "layer", w) is not first  # the key now holds the copy's dict
    for i in range(3):
        kept_for(table, i, w, size=3)
    assert len(table) == 1
