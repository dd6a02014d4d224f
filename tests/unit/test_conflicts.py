"""WriteHistory: the newest writing version per key, queried by ranges."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.resolver.conflicts import WriteHistory
from weaseldb.core.protocol import point_range

Range = tuple[bytes, bytes]


def point(key: bytes) -> Range:
    return point_range(key)


def history(*records: tuple[bytes, bytes, int], load: int = 8) -> WriteHistory:
    """A small chunk load so that even a few records span several chunks."""
    h = WriteHistory(load=load)
    for begin, end, version in records:
        h.record(begin, end, version)
        h.check_invariants()
    return h


@pytest.mark.parametrize(
    ("records", "query", "expected"),
    [
        pytest.param([], point(b"a"), 0, id="empty-history"),
        pytest.param([(*point(b"a"), 5)], point(b"a"), 5, id="point-hit"),
        pytest.param([(*point(b"a"), 5)], point(b"b"), 0, id="point-miss"),
        pytest.param([(*point(b"a"), 5)], point(b"a\x00"), 0, id="point-successor-untouched"),
        pytest.param([(*point(b"a\x00"), 5)], point(b"a"), 0, id="point-predecessor-untouched"),
        pytest.param([(*point(b"a"), 5), (*point(b"a"), 7)], point(b"a"), 7, id="point-rewritten"),
        pytest.param([(b"b", b"d", 3)], point(b"c"), 3, id="range-covers-point"),
        pytest.param([(b"b", b"d", 3)], point(b"b"), 3, id="range-begin-included"),
        pytest.param([(b"b", b"d", 3)], point(b"d"), 0, id="range-end-excluded"),
        pytest.param([(b"b", b"d", 3)], point(b"a\xff"), 0, id="before-range"),
        pytest.param([(b"b", b"d", 3)], (b"a", b"b"), 0, id="adjacent-left-range"),
        pytest.param([(b"b", b"d", 3)], (b"d", b"e"), 0, id="adjacent-right-range"),
        pytest.param([(b"b", b"d", 3)], (b"a", b"b\x00"), 3, id="range-overlaps-begin"),
        pytest.param([(b"b", b"d", 3)], (b"c\xff", b"z"), 3, id="range-overlaps-end"),
        pytest.param([(*point(b"c"), 2)], (b"a", b"z"), 2, id="range-query-covers-point"),
        pytest.param(
            [(*point(b"b"), 2), (*point(b"x"), 9), (*point(b"m"), 11)],
            (b"a", b"n"),
            11,
            id="range-query-max-of-points",
        ),
        pytest.param(
            [(b"a", b"m", 2), (b"f", b"z", 4)], point(b"c"), 2, id="overlap-old-part-left"
        ),
        pytest.param(
            [(b"a", b"m", 2), (b"f", b"z", 4)], point(b"g"), 4, id="overlap-new-part-wins"
        ),
        pytest.param(
            [(*point(b"c"), 2), (*point(b"e"), 3), (b"b", b"f", 4)],
            point(b"e"),
            4,
            id="range-overwrites-points",
        ),
        pytest.param(
            [(*point(b"c"), 2), (b"b", b"f", 4), (*point(b"d"), 6)],
            (b"b", b"d"),
            4,
            id="point-inside-range-then-query-around",
        ),
        pytest.param([(b"b", b"c", 2), (b"c", b"d", 3)], point(b"b\xff"), 2, id="adjacent-left"),
        pytest.param([(b"b", b"c", 2), (b"c", b"d", 3)], point(b"c"), 3, id="adjacent-right"),
        pytest.param([(b"", b"\x00", 4)], point(b""), 4, id="empty-key-as-range"),
        pytest.param([(*point(b""), 4)], (b"", b"a"), 4, id="empty-key-point"),
        pytest.param([(*point(b""), 4)], point(b"\x00"), 0, id="empty-key-not-nul-key"),
        pytest.param([(*point(b"\x00"), 4)], point(b""), 0, id="nul-key-not-empty-key"),
        pytest.param([(*point(b"\x00\x00"), 4)], (b"\x00", b"\x00\x01"), 4, id="nul-bytes"),
        pytest.param([(*point(b"\xff"), 4)], (b"\xfe", b"\xff"), 0, id="ff-key-outside"),
        pytest.param([(*point(b"\xff\xff"), 4)], (b"\xff", b"\xff\xff\x00"), 4, id="ff-bytes"),
        pytest.param([(b"", b"\xff\xff\xff", 8)], point(b"\xff\xff"), 8, id="range-from-empty"),
        pytest.param([(b"b", b"d", 3)], (b"c", b"c"), 0, id="empty-query-range"),
        pytest.param([(b"d", b"b", 3)], point(b"c"), 0, id="backwards-record-ignored"),
    ],
)
def test_newest_in(records: list[tuple[bytes, bytes, int]], query: Range, expected: int) -> None:
    assert history(*records).newest_in(*query) == expected


def test_many_points_span_chunks() -> None:
    """Enough boundaries for many chunks: range queries use the per-chunk maxima."""
    h = WriteHistory(load=8)
    keys = [i.to_bytes(2, "big") for i in range(0, 2000, 3)]
    for version, key in enumerate(keys, start=1):
        h.record(*point(key), version)
    h.check_invariants()
    assert len(h._keys) > 50
    assert h.newest_in(b"", b"\xff") == len(keys)
    assert h.newest_in(keys[0], keys[-1]) == len(keys) - 1
    assert h.newest_in(keys[10], keys[500]) == 500
    assert h.newest_in(*point(keys[123])) == 124
    h.record(keys[5], keys[600], len(keys) + 1)  # one range over hundreds of chunks
    h.check_invariants()
    assert h.newest_in(*point(keys[300])) == len(keys) + 1
    assert h.newest_in(*point(keys[600])) == 601
    assert h.newest_in(*point(keys[4])) == 5


def test_versions_must_not_decrease() -> None:
    h = history((*point(b"a"), 5))
    h.record(*point(b"b"), 5)  # equal is fine: one transaction writes several ranges
    with pytest.raises(ValueError):
        h.record(*point(b"c"), 4)


def test_forget_before_hides_old_versions_and_keeps_newer() -> None:
    h = history((*point(b"a"), 1), (*point(b"b"), 2), (b"c", b"e", 3), (*point(b"d"), 4))
    h.forget_before(3)
    h.check_invariants()
    assert h.newest_in(*point(b"a")) == 0
    assert h.newest_in(*point(b"b")) == 0
    assert h.newest_in(*point(b"c")) == 3
    assert h.newest_in(*point(b"d")) == 4
    assert h.newest_in(b"", b"\xff") == 4
    assert h.floor == 3


def test_forget_before_reclaims_memory() -> None:
    h = WriteHistory(load=8)
    for version in range(1, 1001):
        h.record(*point(version.to_bytes(2, "big")), version)
    full = len(h)
    assert full == 2001  # two boundaries per point plus b""
    h.forget_before(501)
    h.check_invariants()
    assert len(h) <= full // 2 + 2
    assert h.newest_in(b"", b"\xff") == 1000
    assert h.newest_in(*point((500).to_bytes(2, "big"))) == 0
    assert h.newest_in(*point((501).to_bytes(2, "big"))) == 501
    h.forget_before(1001)  # past everything: the whole history goes
    h.check_invariants()
    assert len(h) == 1
    assert h.newest_in(b"", b"\xff") == 0


def test_memory_stays_proportional_to_the_window() -> None:
    """A sliding window over an endless stream of distinct keys holds a bounded history."""
    h = WriteHistory(load=16)
    window = 500
    for version in range(1, 20_001):
        h.record(*point(version.to_bytes(3, "big")), version)
        if version % 50 == 0:
            h.forget_before(version - window)
    h.check_invariants()
    # 2 boundaries per live point; the lazy sweep may lag by about as much again.
    assert len(h) <= 4 * 2 * window


def test_record_below_floor_is_not_kept() -> None:
    h = history((*point(b"a"), 3))
    h.forget_before(10)
    h.record(*point(b"b"), 5)  # not decreasing, but already forgotten
    assert h.newest_in(*point(b"b")) == 0
    h.record(*point(b"b"), 10)
    assert h.newest_in(*point(b"b")) == 10


# -- against a brute-force model ----------------------------------------------------------

_KEYS = [b"", b"\x00", b"a", b"a\x00", b"a\xff", b"b", b"ba", b"\xff", b"\xff\x00", b"\xff\xff"]
_keys = st.sampled_from(_KEYS)


@st.composite
def _ranges(draw: st.DrawFn) -> Range:
    if draw(st.booleans()):
        return point(draw(_keys))
    begin, end = sorted(draw(st.lists(_keys, min_size=2, max_size=2, unique=True)))
    return begin, end


_steps = st.lists(
    st.tuples(st.sampled_from(["record", "forget", "query"]), _ranges(), st.integers(0, 3)),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(steps=_steps, load=st.sampled_from([8, 16, 512]))
def test_matches_brute_force_model(steps: list[tuple[str, Range, int]], load: int) -> None:
    """Every answer equals the max version among kept records overlapping the query."""
    h = WriteHistory(load=load)
    records: list[tuple[int, bytes, bytes]] = []
    version = floor = 0
    for kind, (begin, end), number in steps:
        if kind == "record":
            version = max(1, version + number)
            h.record(begin, end, version)
            records.append((version, begin, end))
        elif kind == "forget":
            floor = max(floor, version + 1 - number)  # sometimes past everything recorded
            h.forget_before(floor)
        else:
            expected = max(
                (v for v, b, e in records if v >= floor and b < end and begin < e), default=0
            )
            assert h.newest_in(begin, end) == expected
        h.check_invariants()
