"""The persister's index writer against an in-memory store: segments are written as batches
are released, merged as they accumulate, and every id stays findable by a status lookup."""

from __future__ import annotations

import asyncio
from itertools import pairwise

from services.gateway.status_lookup import IndexSearch
from services.persister.index import IndexWriter, Stretch, write_segment
from weaseldb.core import batchfile, requestids
from weaseldb.core.config import PersisterConfig
from weaseldb.core.protocol import Write
from weaseldb.core.types import NUMBER_TOP, BatchNumber, Outcome, RequestId, Term, Version
from weaseldb.runtime.stores.memory import MemoryStore

CONFIG = PersisterConfig(index_segment_batches=1, retry_base_delay_ms=1)
TERM = NUMBER_TOP


def released(number: int, version: int) -> batchfile.Batch:
    tx = batchfile.Transaction(
        Version(version), RequestId(f"request-{version:016d}"), 0, [Write(b"k", b"v")]
    )
    return batchfile.Batch(
        format=batchfile.FORMAT_VERSION,
        batch=BatchNumber(number),
        term=Term(TERM),
        leader_id="L",
        first_version=Version(version),
        last_version=Version(version),
        created_at_ms=0,
        transactions=[tx],
    )


def test_segments_merge_as_they_accumulate_and_every_id_stays_findable() -> None:
    store = MemoryStore()

    async def scenario() -> tuple[list[requestids.SegmentSpan], list[int], list[str]]:
        opening = Stretch(
            BatchNumber(NUMBER_TOP),
            Version(1),
            newest_batch=BatchNumber(NUMBER_TOP),
            last_version=Version(0),
        )
        await write_segment(store, CONFIG, opening, Term(TERM))
        writer = IndexWriter(store, CONFIG, term=Term(TERM), after=opening)
        for version in range(1, 81):
            writer.add(released(NUMBER_TOP - version, version))
            await asyncio.sleep(0)
            await writer.flush()  # each batch is one segment, then merges catch up
        spans = requestids.cover(await requestids.list_spans(store))
        levels = [(await requestids.read_header(store, s.key))[0].level for s in spans]
        search = IndexSearch(store)
        answers = [
            (await search.search(RequestId(f"request-{v:016d}"), 0, 80, upward=False)).status.value
            for v in (1, 40, 80)
        ]
        return spans, levels, answers

    spans, levels, answers = asyncio.run(scenario())
    # 81 level-0 segments written: 64 became one level-2 segment, 16 two level-1 ones.
    assert sorted(levels, reverse=True)[:3] == [2, 1, 1]
    assert len(spans) <= 1 + 2 + 7
    assert len(store.objects) == len(spans)  # no merged-away segment left behind
    # The cover is gapless from the first batch to the last.
    for newer, older in pairwise(spans):
        assert newer.oldest_batch + 1 == older.newest_batch
    assert spans[-1].oldest_batch == NUMBER_TOP and spans[0].newest_batch == NUMBER_TOP - 80
    assert answers == [Outcome.COMMITTED.value] * 3
