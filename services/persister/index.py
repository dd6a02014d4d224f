"""The persister's side of the request-id index (weaseldb/core/requestids.py).

- While leading, `IndexWriter` turns released batches into index segments: one covering
  every batch since the previous segment, written after `index_segment_batches` batches,
  `index_segment_ids` ids or `index_segment_interval_s`, whichever comes first, and at a
  graceful stop. Segments only ever cover released batches, which are valid.
- When a term opens, `read_tail` reads the batches written after the newest segment (a
  crashed leader's last stretch), the term's first segment covers them, and `load_window`
  reads the newest segments back until they hold the idempotency window for the sequencer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

import numpy as np
from prometheus_client import Counter

from services.persister.fullness import Fullness
from weaseldb.core import batchfile, layout, logstart, recovery, requestids
from weaseldb.core.clock import now_ms
from weaseldb.core.config import IdempotencyConfig, PersisterConfig
from weaseldb.core.errors import AlreadyExists, StoreError, StoreFull
from weaseldb.core.requestids import BANNED, Entries, id_hash, make_entries
from weaseldb.core.store import BlobStore
from weaseldb.core.types import BatchNumber, Term, Version
from weaseldb.core.validity import GENESIS, Seed, ValidityWalk
from weaseldb.runtime import heap
from weaseldb.runtime.retries import with_retries

log = logging.getLogger("weaseldb.persister")

SEGMENTS = Counter("weaseldb_index_segments_total", "Request-id index segments written")
SEGMENT_ERRORS = Counter(
    "weaseldb_index_segment_errors_total", "Request-id index segments that failed to write"
)
MERGES = Counter("weaseldb_index_merges_total", "Request-id index segments merged into one")
MERGE_ERRORS = Counter(
    "weaseldb_index_merge_errors_total", "Request-id index merges that failed (retried later)"
)

Row = tuple[int, int, int]  # (id hash, version or BANNED, ms)
#: How the index's writes show in `Fullness` while the store refuses them.
FULLNESS_KEY = "request-id index"
#: Batch reads in flight while reading a tail.
TAIL_PARALLELISM = 64


def rows_of(batch: batchfile.Batch) -> list[Row]:
    rows: list[Row] = [
        (id_hash(t.request_id), t.version, t.timestamp_ms) for t in batch.transactions
    ]
    rows += [(id_hash(r), BANNED, batch.created_at_ms) for r in batch.banned]
    return rows


@dataclass
class Stretch:
    """Batches not yet in a segment: from `oldest_batch` down to `newest_batch`."""

    oldest_batch: BatchNumber
    first_version: Version
    newest_batch: BatchNumber | None = None
    last_version: Version = Version(0)
    batches: int = 0
    rows: list[Row] = field(default_factory=list)


async def write_segment(
    store: BlobStore,
    config: PersisterConfig,
    stretch: Stretch,
    term: Term,
    *,
    promise: requestids.Promise | None = None,
) -> None:
    """Create the segment (a 412 means it exists already: the same batches, the same facts).
    It records `promise` (the idempotency settings) for garbage collection."""
    assert stretch.newest_batch is not None
    data = requestids.encode_segment(
        make_entries(stretch.rows),
        newest_batch=stretch.newest_batch,
        oldest_batch=stretch.oldest_batch,
        term=term,
        first_version=stretch.first_version,
        last_version=stretch.last_version,
        created_at_ms=now_ms(),
        promise=promise,
    )
    key = layout.request_index_key(stretch.newest_batch, stretch.oldest_batch)
    with contextlib.suppress(AlreadyExists):
        await with_retries(lambda: store.put_if_absent(key, data), config, key)
    SEGMENTS.inc()


def _after(stretch: Stretch) -> Stretch:
    """The (empty) stretch right after `stretch`."""
    assert stretch.newest_batch is not None
    return Stretch(BatchNumber(stretch.newest_batch - 1), Version(stretch.last_version + 1))


class IndexWriter:
    """Collects released batches; writes a segment when one is due (one write at a time)."""

    def __init__(
        self,
        store: BlobStore,
        config: PersisterConfig,
        *,
        term: Term,
        after: Stretch,
        fullness: Fullness | None = None,
        promise: requestids.Promise | None = None,
    ) -> None:
        self._store = store
        self._fullness = fullness or Fullness()
        self._config = config
        self._term = term
        self._promise = promise
        # `after` is the stretch the term's first segment covered: continue right after it.
        self.indexed_through = after.last_version
        self._open = _after(after)
        self._opened_at = time.monotonic()
        self._writing: asyncio.Task[None] | None = None
        self._merging: asyncio.Task[None] | None = None
        self._headers: dict[str, requestids.SegmentHeader] = {}

    def add(self, batch: batchfile.Batch) -> None:
        stretch = self._open
        if stretch.newest_batch is None:
            self._opened_at = time.monotonic()
        stretch.newest_batch = batch.batch
        stretch.last_version = batch.last_version
        stretch.batches += 1
        stretch.rows += rows_of(batch)
        if self._due():
            self._start_write()

    def _due(self) -> bool:
        stretch, config = self._open, self._config
        return stretch.newest_batch is not None and (
            stretch.batches >= config.index_segment_batches
            or len(stretch.rows) >= config.index_segment_ids
            or time.monotonic() - self._opened_at >= config.index_segment_interval_s
        )

    def tick(self) -> None:
        """Called now and then, so a quiet stretch is still written within the interval."""
        if self._due():
            self._start_write()

    def _start_write(self) -> None:
        if self._writing is not None and not self._writing.done():
            return  # the next write picks up everything added meanwhile
        stretch = self._open
        self._open = _after(stretch)
        self._writing = asyncio.create_task(self._write(stretch))

    async def _write(self, stretch: Stretch) -> None:
        try:
            await write_segment(
                self._store, self._config, stretch, self._term, promise=self._promise
            )
        except StoreError as e:
            SEGMENT_ERRORS.inc()
            if isinstance(e, StoreFull):  # said once, by `fullness`; tried again next tick
                self._fullness.refused(FULLNESS_KEY, e)
            else:
                log.warning("request-id index segment not written (will retry): %s", e)
            self._merge_back(stretch)
            return
        self._fullness.landed(FULLNESS_KEY)
        self.indexed_through = stretch.last_version
        if self._merging is None or self._merging.done():
            self._merging = asyncio.create_task(self._merge())

    async def _merge(self) -> None:
        """Merge while there is something to merge; any failure waits for the next segment
        (readers are correct with or without merging, it only makes lookups cheaper)."""
        try:
            while await self._merge_once():
                MERGES.inc()
            heap.give_back()  # a merge's arrays would otherwise stay as RSS
        except Exception as e:
            MERGE_ERRORS.inc()
            log.warning("request-id index merge failed (will retry): %r", e)

    async def _merge_once(self) -> bool:
        store = self._store
        spans = await requestids.list_spans(store)
        chosen = requestids.cover(spans)
        await self._drop_covered(spans, chosen)
        headers = [await self._header(span.key) for span in chosen]
        run = requestids.plan_merge(headers)
        if run is None:
            return False
        parts = [requestids.decode_segment(await store.get(h.key), key=h.key) for h in run]
        data = await asyncio.to_thread(requestids.merge, parts, now_ms(), self._promise)
        merged = layout.request_index_key(run[-1].newest_batch, run[0].oldest_batch)
        with contextlib.suppress(AlreadyExists):
            await with_retries(lambda: store.put_if_absent(merged, data), self._config, merged)
        for header in run:  # only once the merged segment exists: readers re-list on a miss
            await store.delete(header.key)
            self._headers.pop(header.key, None)
        return True

    async def _drop_covered(
        self, spans: list[requestids.SegmentSpan], chosen: list[requestids.SegmentSpan]
    ) -> None:
        """Segments a merged one covers whole, left by a merge that stopped half-way."""
        for span in set(spans) - set(chosen):
            if any(
                c.newest_batch <= span.newest_batch and span.oldest_batch <= c.oldest_batch
                for c in chosen
            ):
                await self._store.delete(span.key)
                self._headers.pop(span.key, None)

    async def _header(self, key: str) -> requestids.SegmentHeader:
        if key not in self._headers:
            self._headers[key] = (await requestids.read_header(self._store, key))[0]
        return self._headers[key]

    def _merge_back(self, failed: Stretch) -> None:
        """Put a stretch that failed to write in front of what was added since."""
        newer = self._open
        failed.rows += newer.rows
        failed.batches += newer.batches
        if newer.newest_batch is not None:
            failed.newest_batch, failed.last_version = newer.newest_batch, newer.last_version
        self._open = failed

    async def flush(self) -> None:
        """Write whatever is open (a graceful stop), after any write in progress."""
        if self._writing is not None:
            await self._writing
        if self._open.newest_batch is not None:
            self._start_write()
            assert self._writing is not None
            await self._writing
        if self._merging is not None:
            await self._merging


# Opening a term


async def _seed_after_segments(
    store: BlobStore, spans: list[requestids.SegmentSpan]
) -> tuple[Seed, Version]:
    """Where the batches not yet indexed start, and the first version there (0: learn it
    from the first batch read, for a log that was never indexed)."""
    if spans:
        header, _ = await requestids.read_header(store, spans[0].key)
        return Seed(header.newest_batch, header.term), Version(header.last_version + 1)
    # A log never indexed: from where the retained log starts (the garbage collector's
    # marker; the first batch when nothing was collected).
    start = await logstart.newest(store)
    return (GENESIS, Version(0)) if start is None else (start.seed, Version(start.version + 1))


async def read_tail(store: BlobStore, config: PersisterConfig, *, opening: BatchNumber) -> Stretch:
    """The valid batches from the newest segment up to (not including) our opening batch,
    as a stretch the term's first segment will cover."""
    spans = requestids.cover(await requestids.list_spans(store))
    seed, first_version = await with_retries(
        lambda: _seed_after_segments(store, spans), config, "read the index"
    )
    numbers = [BatchNumber(n) for n in range(seed.first_number, opening, -1)]
    batches = await _read_batches(store, config, numbers)
    stretch = Stretch(seed.first_number, first_version)
    walk = ValidityWalk(seed)
    for batch in batches:
        if stretch.first_version == 0:  # an index-less log: starts where its front does
            stretch.first_version = batch.first_version
        if walk.admit(batch.term):
            stretch.rows += rows_of(batch)
            stretch.last_version = batch.last_version
    if stretch.first_version == 0:
        stretch.first_version = Version(1)
    return stretch


async def _read_batches(
    store: BlobStore, config: PersisterConfig, numbers: list[BatchNumber]
) -> list[batchfile.Batch]:
    limit = asyncio.Semaphore(TAIL_PARALLELISM)

    async def read(number: BatchNumber) -> batchfile.Batch:
        async with limit:
            return await with_retries(
                lambda: recovery.read_batch(store, number), config, f"read batch {number}"
            )

    return list(await asyncio.gather(*(read(n) for n in numbers)))


async def load_window(store: BlobStore, idempotency: IdempotencyConfig, now_ms: int) -> Entries:
    """The newest segments' entries, oldest first, until they hold the exact window (the
    newest `request_id_memory` ids and every id of the last `request_id_window_s`) and then
    `request_id_memory` ids older than both, for the sequencer's faded set (or until
    `request_id_max` + `request_id_memory` ids in all): `requestids.window_loaded`, the
    rule garbage collection keeps segments by (weaseldb/core/gc.py, `WindowTally`)."""
    promise = requestids.Promise.of(idempotency)
    cutoff = now_ms - promise.window_ms

    def enough(entries: Entries) -> bool:
        older = int(np.searchsorted(entries["ts_ms"], cutoff, side="right"))
        return requestids.window_loaded(promise, len(entries), older)

    return await requestids.read_recent(store, enough)
