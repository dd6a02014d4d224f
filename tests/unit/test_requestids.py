"""Request-id index segments and the window file (pure format plus reads from a store)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from weaseldb.core import layout, requestids
from weaseldb.core.errors import CorruptObject
from weaseldb.core.requestids import BANNED, SegmentHeader, SegmentSpan, id_hash, make_entries
from weaseldb.core.types import BatchNumber, RequestId, Term, Version
from weaseldb.runtime.stores.memory import MemoryStore

TOP = 2**64 - 1


def rows(n: int, *, start: int = 1) -> list[tuple[int, int, int]]:
    return [(id_hash(RequestId(f"request-{i:08d}")), i, 1_000 + i) for i in range(start, start + n)]


def segment(n: int, *, newest: int = TOP - 10, oldest: int = TOP) -> bytes:
    return requestids.encode_segment(
        make_entries(rows(n)),
        newest_batch=BatchNumber(newest),
        oldest_batch=BatchNumber(oldest),
        term=Term(TOP),
        first_version=Version(1),
        last_version=Version(n),
        created_at_ms=5,
    )


@pytest.mark.parametrize("count", [0, 1, 128, 129, 5_000])
def test_a_segment_round_trips_and_every_id_is_found_in_its_bucket(count: int) -> None:
    blob = segment(count)
    header, entries = requestids.decode_segment(blob)
    assert header.count == count == len(entries)
    assert sorted(entries["version"].tolist()) == list(range(1, count + 1))

    store = MemoryStore()
    asyncio.run(store.put_if_absent(header.key, blob))

    async def lookups() -> list[list[int]]:
        found_header, body = await requestids.read_header(store, header.key)
        probes = [f"request-{i:08d}" for i in (1, max(1, count // 2), count)]
        probes.append("never-sent-id-00000")
        return [
            (await requestids.find(store, found_header, body, id_hash(RequestId(p))))[
                "version"
            ].tolist()
            for p in probes
        ]

    found = asyncio.run(lookups())
    if count:
        assert found[:3] == [[1], [max(1, count // 2)], [count]]
    assert found[-1] == []


def test_bans_are_entries_with_version_zero() -> None:
    banned = make_entries([(id_hash(RequestId("asked-about-00000000")), BANNED, 7)])
    blob = requestids.encode_segment(
        banned,
        newest_batch=BatchNumber(TOP),
        oldest_batch=BatchNumber(TOP),
        term=Term(TOP),
        first_version=Version(1),
        last_version=Version(0),
        created_at_ms=0,
    )
    assert requestids.decode_segment(blob)[1]["version"].tolist() == [BANNED]


def test_a_damaged_bucket_is_an_error_never_a_miss() -> None:
    blob = bytearray(segment(1_000))
    blob[-5] ^= 0xFF  # inside the last bucket's entries
    with pytest.raises(CorruptObject, match="checksum"):
        requestids.decode_segment(bytes(blob))
    header, body = requestids.decode_segment(segment(1_000))[0], len(segment(1_000)) - 32_000
    store = MemoryStore()
    asyncio.run(store.put_if_absent(header.key, bytes(blob)))
    last = requestids.hashes_of(np.sort(make_entries(rows(1_000)), order=["hi", "lo"])[-1:])[0]
    with pytest.raises(CorruptObject, match="checksum"):
        asyncio.run(requestids.find(store, header, body, last))


def test_cover_skips_segments_inside_wider_ones() -> None:
    def span(newest: int, oldest: int) -> SegmentSpan:
        return SegmentSpan(
            BatchNumber(newest),
            BatchNumber(oldest),
            layout.request_index_key(BatchNumber(newest), BatchNumber(oldest)),
        )

    merged, part_a, part_b, newer, late = (
        span(80, 100),
        span(80, 90),
        span(91, 100),
        span(70, 79),
        span(75, 85),  # a late segment overlapping two others partly
    )
    chosen = requestids.cover([part_a, part_b, merged, newer, late])
    assert chosen == [newer, late, merged]


def test_window_file_round_trips_oldest_first() -> None:
    entries = make_entries(list(reversed(rows(50))))
    decoded = requestids.decode_window(requestids.encode_window(entries))
    assert decoded["version"].tolist() == list(range(1, 51))
    with pytest.raises(CorruptObject):
        requestids.decode_window(b"nope")


def headers(levels: list[int], *, first: int = 1000, width: int = 10) -> list[SegmentHeader]:
    """Adjacent segments, newest first, covering `width` batches each from `first` down."""
    found = []
    for i, level in enumerate(levels):
        oldest = first - i * width
        found.append(
            requestids.SegmentHeader(
                newest_batch=BatchNumber(oldest - width + 1),
                oldest_batch=BatchNumber(oldest),
                term=Term(TOP),
                first_version=Version(1),
                last_version=Version(1),
                count=0,
                created_at_ms=0,
                bucket_bits=0,
                offsets=b"",
                checksums=b"",
                level=level,
            )
        )
    return list(reversed(found))


def test_a_merge_takes_the_oldest_run_of_eight_adjacent_segments_of_one_level() -> None:
    newest_first = headers([1] * 8 + [0] * 9)  # oldest first: eight level-1, nine level-0
    run = requestids.plan_merge(newest_first)
    assert run is not None and [h.level for h in run] == [1] * 8
    assert run == list(reversed(newest_first))[:8]
    assert requestids.plan_merge(headers([0] * 7 + [1] * 7)) is None
    assert requestids.plan_merge(headers([2] * 9)) is None  # the top level is not merged


def test_a_merged_segment_holds_every_entry_of_its_parts() -> None:
    parts = []
    for i in range(3):
        blob = requestids.encode_segment(
            make_entries(rows(200, start=1 + 200 * i)),
            newest_batch=BatchNumber(TOP - 10 * (i + 1) + 1),
            oldest_batch=BatchNumber(TOP - 10 * i),
            term=Term(TOP - i),
            first_version=Version(1 + 200 * i),
            last_version=Version(200 * (i + 1)),
            created_at_ms=0,
        )
        parts.append(requestids.decode_segment(blob))
    header, entries = requestids.decode_segment(requestids.merge(parts, created_at_ms=1))
    assert (header.newest_batch, header.oldest_batch) == (TOP - 29, TOP)
    assert (header.first_version, header.last_version, header.level) == (1, 600, 1)
    assert header.term == TOP - 2  # the seed at its newest batch
    assert sorted(entries["version"].tolist()) == list(range(1, 601))
