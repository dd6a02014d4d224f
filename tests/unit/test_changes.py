"""The change stream's consumer side (weaseldb/core/changes.py): SSE framing across any
split, typed decoding, and the key filters."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from weaseldb.core.changes import (
    ChangeEvent,
    Checkpoint,
    Continuity,
    Frame,
    KeyFilter,
    SseParser,
    StreamError,
    continuity,
    decode_frame,
    prefix_end,
)
from weaseldb.core.protocol import Delete, RangeDelete, Write
from weaseldb.core.types import RequestId, Version

STREAM = (
    b": keepalive\r\n\r\n"
    b'id: 7\nevent: transaction\ndata: {"request_id":"r","version":7,"prev_version":3,'
    b'"timestamp":"2026-01-01T00:00:00.000Z","leader_id":"L","operations":['
    b'{"type":"write","key":"YQ==","value":"w6k="},{"type":"delete","key":"Yg=="},'
    b'{"type":"range_delete","begin":"Yw==","end":"ZA=="}]}\n\n'
    b'event: checkpoint\ndata: {"committed_version":9,"leader_id":"L"}\n\n'
)


@given(st.lists(st.integers(0, len(STREAM)), max_size=6))
def test_frames_are_the_same_however_the_bytes_are_split(cuts: list[int]) -> None:
    parser, frames, last = SseParser(), [], 0
    for cut in [*sorted(cuts), len(STREAM)]:
        frames += parser.feed(STREAM[last:cut])
        last = cut
    assert [f.event for f in frames] == ["transaction", "checkpoint"]
    assert frames[0].id == "7"
    event = decode_frame(frames[0])
    assert event == ChangeEvent(
        Version(7), Version(3), RequestId("r"), "2026-01-01T00:00:00.000Z", "L",
        (Write(b"a", "é".encode()), Delete(b"b"), RangeDelete(b"c", b"d")),
    )  # fmt: skip
    assert decode_frame(frames[1]) == Checkpoint(Version(9), "L")


def test_unknown_events_are_skipped_and_malformed_ones_raise() -> None:
    assert decode_frame(Frame("future", "{}")) is None
    with pytest.raises(StreamError):
        decode_frame(Frame("checkpoint", '{"committed_version":"x"}'))
    with pytest.raises(StreamError):
        decode_frame(Frame("transaction", '{"request_id":"r","version":1}'))


def test_prefix_end_is_the_first_key_after_the_prefix() -> None:
    assert prefix_end(b"ab") == b"ac"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") is None
    assert prefix_end(b"") is None


def test_a_filter_touches_what_writes_deletes_or_range_deletes_into_it() -> None:
    f = KeyFilter(b"b", b"d")
    assert f.touches([Write(b"c", b"")])
    assert f.touches([Delete(b"b")])
    assert not f.touches([Write(b"d", b""), Delete(b"a")])
    assert f.touches([RangeDelete(b"a", b"b\x00")])
    assert not f.touches([RangeDelete(b"d", b"z"), RangeDelete(b"a", b"b")])
    assert KeyFilter.of_prefix(b"\xff").touches([Write(b"\xff\x01", b"")])
    assert not KeyFilter.of_prefix(b"ab").contains(b"ac")
    with pytest.raises(ValueError):
        KeyFilter(b"b", b"b")


def test_continuity_is_the_gap_rule() -> None:
    def tx(version: int, prev: int) -> ChangeEvent:
        return ChangeEvent(Version(version), Version(prev), RequestId("r"), "t", "L", ())

    assert continuity(tx(5, 3), None, None, chained=True) == Continuity.NEXT
    assert continuity(tx(5, 3), 5, 5, chained=True) == Continuity.REPEAT
    assert continuity(tx(9, 6), 5, 5, chained=False) == Continuity.GAP
    # A checkpoint moved the position to 8: a filtered stream may follow its last
    # transaction (3) across it, an unfiltered one may not.
    assert continuity(tx(9, 3), 8, 3, chained=False) == Continuity.NEXT
    assert continuity(tx(9, 6), 8, 3, chained=True) == Continuity.UNCHAINED
