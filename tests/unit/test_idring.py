"""IdRing: packed request ids oldest first, found by key (weaseldb/core/idring.py)."""

import random
from collections import OrderedDict

import numpy as np
import pytest

from services.persister.answers import Answers
from services.sequencer.window import FadedIds, RequestIdWindow
from weaseldb.core import idring
from weaseldb.core.idring import INDEX_BYTES_PER_ID, IdRing
from weaseldb.core.requestids import BANNED, make_entries


@pytest.mark.parametrize("distance_bits", [32, 1, 2])
@pytest.mark.parametrize("capacity", [1, 3, 64, 1000])
def test_ring_behaves_like_an_ordered_dict(
    capacity: int, distance_bits: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random pushes (some keys crowding a few home slots) and pops, past the capacity
    (the ring grows): every key held is found with its column, none other is."""
    monkeypatch.setattr(idring, "_DISTANCE_BITS", distance_bits)
    rng = random.Random(capacity * 100 + distance_bits)
    ring = IdRing(capacity, value=np.uint64)
    model: OrderedDict[int, int] = OrderedDict()
    for step in range(6_000):
        if rng.random() < 0.55:
            key = rng.getrandbits(64) if rng.random() < 0.6 else rng.randrange(capacity * 3)
            if key in model:
                assert ring.find(key) >= 0
                continue
            assert ring.find(key) == -1
            position = ring.push(key, step)  # may grow the ring: columns are taken after
            ring.column("value")[position] = step
            model[key] = step
        elif model:
            position = ring.pop()
            key, value = model.popitem(last=False)
            assert (ring.column("key")[position], ring.column("value")[position]) == (key, value)
        assert len(ring) == len(model)
        if step % 50 == 0:
            for key, value in model.items():
                assert ring.column("value")[ring.find(key)] == value
            assert ring.find(rng.getrandbits(64)) == -1


def test_the_oldest_ids_age_is_known_to_a_mark() -> None:
    ring = IdRing(10)
    for i, now_ms in enumerate([0, 50, 120, 130, 400]):
        ring.push(i + 1, now_ms)
    assert ring.oldest_pushed_by() == 120  # the oldest is before the mark at 120
    ring.pop()
    ring.pop()
    assert ring.oldest_pushed_by() == 400  # ... now in the mark of 120, before 400
    ring.pop()
    ring.pop()
    assert ring.oldest_pushed_by() == 400  # the newest mark: the newest push


def test_bytes_per_id_are_what_the_memory_limits_assume() -> None:
    """The arrays behind each id: the figures the chart's memory limits are derived from."""
    cap = 100_000
    window = RequestIdWindow(cap, 0, cap, FadedIds(1024))._ids
    answers = Answers(cap, hard_cap=cap)._outcomes
    for ring, columns in ((window, RequestIdWindow.BYTES_PER_ID), (answers, Answers.BYTES_PER_ID)):
        allocated = sum(a.nbytes for a in ring._arrays.values()) + ring._index.nbytes
        assert allocated / cap == pytest.approx(columns + INDEX_BYTES_PER_ID, rel=0.001)


def test_window_versions_beyond_31_bits_come_back_whole() -> None:
    window = RequestIdWindow(10, 0, 10, FadedIds(1024))
    base = (1 << 31) - 2
    for offset in range(4):  # the low 31 bits wrap between these
        window.add(offset + 1, base + offset, 0)
    window.add(99, BANNED, 0)
    assert [window.get(offset + 1) for offset in range(4)] == [base + o for o in range(4)]
    assert window.get(99) == BANNED


def test_a_loaded_id_too_far_below_the_newest_version_is_faded_not_kept() -> None:
    window = RequestIdWindow(10, 0, 10, FadedIds(1024))
    newest = 5 << 30
    window.load(make_entries([(1, newest - (1 << 30) - 1, 0), (2, newest, 0), (3, BANNED, 0)]))
    assert window.get(1) is None and 1 in window.faded
    assert window.get(2) == newest and window.get(3) == BANNED


@pytest.mark.parametrize("count", [0, 1, 500, 1_500])
def test_a_window_loaded_at_once_is_the_window_loaded_id_by_id(count: int) -> None:
    """A new term's window file (oldest first, distinct ids, some bans, more than the cap
    when `count` is): the vectorised load keeps what adding one id after another keeps."""
    rng = random.Random(count)
    rows = sorted(
        (rng.getrandbits(128), v if rng.random() < 0.9 else BANNED, 1_000 + v * 7 // 3)
        for v in range(1, count + 1)
    )
    rows.sort(key=lambda row: (row[2], row[1]))
    entries = make_entries(rows)
    at_once, one_by_one = (RequestIdWindow(200, 0, 1_000, FadedIds(4096)) for _ in range(2))
    at_once.load(entries)
    one_by_one._add_each(entries)
    assert len(at_once) == len(one_by_one) == min(count, 1_000)
    for hash_, _, _ in rows:
        assert at_once.get(hash_) == one_by_one.get(hash_)
        assert (hash_ in at_once.faded) == (hash_ in one_by_one.faded)
    for now_ms in (1_000, 2_000, 3_000, 5_000):
        assert at_once._ids.oldest_pushed_by() == one_by_one._ids.oldest_pushed_by()
        at_once.expire(now_ms)
        one_by_one.expire(now_ms)
        assert len(at_once) == len(one_by_one)
    fresh = rng.getrandbits(128)
    at_once.add(fresh, 10**6, 6_000)
    assert at_once.get(fresh) == 10**6
