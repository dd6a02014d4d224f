"""Recovery scan and the validity rule (storage.md, "Recovery" and "Terms and fencing").

Pure functions decide; `recover` only adds the reads. Numbers count down, so "older" is a
higher number and a listing in ascending key order is newest first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from weaseldb.core import batchfile, layout, logstart
from weaseldb.core.errors import NotFound
from weaseldb.core.store import BlobStore
from weaseldb.core.types import MAX_IN_FLIGHT_LIMIT, NUMBER_TOP, BatchNumber, Term, Version
from weaseldb.core.validity import GENESIS, valid_flags

#: A deposed leader can only still write within this many numbers newer than the batch that
#: fenced it (its in-flight window), so a new leader fills that many numbers with empty
#: fence batches after its opening batch, and recovery looks back at most this far.
FENCE_LENGTH = MAX_IN_FLIGHT_LIMIT - 1


@dataclass(frozen=True)
class ListingScan:
    watermark: BatchNumber | None  # newest batch of the gapless durable region; None: empty
    next_number: BatchNumber  # the first gap: where the next batch goes


def scan_listing(numbers: Sequence[int], *, complete: bool, first: int = NUMBER_TOP) -> ListingScan:
    """Find the durability watermark in one listing of batch numbers (ascending = newest first).

    `complete` says the listing returned fewer keys than asked, so it holds every batch.
    Garbage collection never deletes any of the newest 1000 batches, so in a complete
    listing the oldest batch must be the very first one; if it is not, the first batch was
    never written and the durable region is empty. A backup (weaseldb.core.backup) holds no
    batch before its log-start marker and may hold fewer than 1000: its readers pass the
    first batch after the marker as `first`, and a complete listing that reaches it (or
    older) is durable.
    """
    if not numbers or (complete and numbers[-1] < first):
        return ListingScan(watermark=None, next_number=BatchNumber(NUMBER_TOP))
    watermark = numbers[-1]
    for number in reversed(numbers[:-1]):
        if number != watermark - 1:
            break
        watermark = number
    return ListingScan(watermark=BatchNumber(watermark), next_number=BatchNumber(watermark - 1))


@dataclass(frozen=True)
class Recovered:
    watermark: BatchNumber | None
    next_number: BatchNumber
    last_version: Version  # last version of the newest valid batch (0 for an empty log)
    newest_term: Term | None  # newest term among valid batches


async def list_numbers(store: BlobStore, prefix: str, limit: int) -> list[int]:
    return [layout.number_of(key) for key in await store.list(prefix, limit=limit)]


async def newest_claim(store: BlobStore) -> Term | None:
    """The newest term claimed so far: one LIST of one key."""
    numbers = await list_numbers(store, layout.TERMS, limit=1)
    return Term(numbers[0]) if numbers else None


async def recover(
    store: BlobStore, *, prior_term: Term | None, first: int = NUMBER_TOP
) -> Recovered:
    """One LIST of at most 1000 batch keys, then reads of the watermark batch (and, only when
    the watermark's term is not the newest claim, of up to FENCE_LENGTH batches before it
    to apply the validity rule). `first`: see `scan_listing`."""
    numbers = await list_numbers(store, layout.BATCHES, limit=MAX_IN_FLIGHT_LIMIT)
    scan = scan_listing(numbers, complete=len(numbers) < MAX_IN_FLIGHT_LIMIT, first=first)
    if scan.watermark is None:
        return Recovered(None, scan.next_number, Version(0), None)
    newest = await read_batch(store, scan.watermark)
    if newest.term == prior_term:
        return Recovered(scan.watermark, scan.next_number, newest.last_version, newest.term)
    run, start = await _read_back(store, newest)
    flags = valid_flags([b.term for b in run], start.seed if start else GENESIS)
    valid = [b for b, ok in zip(run, flags, strict=True) if ok]
    if not valid and start is not None:
        # Seeded at a log-start marker and nothing after it is valid (or the watermark is
        # the marker's own batch): the state is the marker's. (A walk from the genesis
        # always admits its first batch.)
        return Recovered(scan.watermark, scan.next_number, start.version, start.term)
    last_valid = valid[-1]
    return Recovered(scan.watermark, scan.next_number, last_valid.last_version, last_valid.term)


#: Reads in flight while reading back before the watermark.
READ_BACK_PARALLELISM = 64


async def _read_back(
    store: BlobStore, newest: batchfile.Batch
) -> tuple[list[batchfile.Batch], logstart.LogStart | None]:
    """The batches from up to FENCE_LENGTH numbers older than `newest` to `newest`, oldest
    first, read in parallel, and the log-start marker to seed their walk with when the run
    reaches it (None: seed at the genesis). A batch of a newer term than `newest` can only
    be that close (the fence). Needed only when the newest claim never wrote its opening
    batch.

    Garbage collection may have deleted (or, crashing, left behind) batches at and before
    the newest marker's batch: the run stops there and the marker's seed stands for them."""
    start = await logstart.newest(store)
    stop = start.after_batch if start is not None else NUMBER_TOP + 1
    if newest.batch >= stop:
        return [], start  # the watermark is the marker's own batch
    numbers = [n for n in range(newest.batch + 1, newest.batch + 1 + FENCE_LENGTH) if n < stop]
    limit = asyncio.Semaphore(READ_BACK_PARALLELISM)

    async def read(number: BatchNumber) -> batchfile.Batch | None:
        async with limit:
            try:
                return await read_batch(store, number)
            except NotFound:
                return None  # garbage-collected: the marker's seed covers it

    older = await asyncio.gather(*(read(BatchNumber(n)) for n in numbers))
    run = [newest]
    for found in older:
        if found is None:
            break
        run.append(found)
    reached_start = len(run) <= len(numbers) or run[-1].batch == stop - 1
    run.reverse()
    return run, start if start is not None and reached_start else None


async def read_batch(store: BlobStore, number: BatchNumber) -> batchfile.Batch:
    key = layout.batch_key(number)
    return batchfile.decode(await store.get(key), key=key)
