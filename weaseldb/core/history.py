"""Reading the committed log back from the store, applying the validity rule.

Every reader (status lookups, subscribers, tests, the compaction job's planning) goes
through here, so void batches are skipped in exactly one place. The walk starts at the
newest log-start marker (weaseldb.core.logstart): batches garbage collection cut off, or left
behind by a crash half-way through GC, are never read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from weaseldb.core import batchfile, layout, logstart
from weaseldb.core.errors import LogTruncated, NotFound
from weaseldb.core.recovery import read_batch
from weaseldb.core.store import BlobStore
from weaseldb.core.types import BatchNumber
from weaseldb.core.validity import GENESIS, Seed, ValidityWalk


async def batch_numbers_after(store: BlobStore, seed: Seed = GENESIS) -> list[BatchNumber]:
    """Every batch number newer than the seed's batch, oldest first (pages through LIST;
    keys list newest first, so the listing stops where the seed's batch would be)."""
    numbers: list[BatchNumber] = []
    after = ""
    while True:
        keys = await store.list(layout.BATCHES, start_after=after, limit=1000)
        page = [BatchNumber(layout.number_of(k)) for k in keys]
        numbers.extend(n for n in page if n <= seed.first_number)
        if len(keys) < 1000 or (page and page[-1] > seed.first_number):
            break
        after = keys[-1]
    numbers.reverse()
    return numbers


async def all_batch_numbers(store: BlobStore) -> list[BatchNumber]:
    """Every batch number in the store, oldest first (pages through LIST)."""
    return await batch_numbers_after(store, GENESIS)


def gapless_prefix(numbers: list[BatchNumber], seed: Seed = GENESIS) -> list[BatchNumber]:
    """The numbers (oldest first) that follow the seed without a gap: the durable history.
    Nothing after the first gap is durable history yet."""
    run: list[BatchNumber] = []
    expected = seed.first_number
    for number in numbers:
        if number != expected:
            break
        run.append(number)
        expected = BatchNumber(number - 1)
    return run


async def valid_batches(
    store: BlobStore, seed: Seed | None = None
) -> AsyncIterator[batchfile.Batch]:
    """The valid batches, oldest first, from the log start (or `seed`) up to the first
    gap. Void batches (an older term after a newer one) are skipped."""
    if seed is None:
        seed = await logstart.seed(store)
    walk = ValidityWalk(seed)
    for number in gapless_prefix(await batch_numbers_after(store, seed), seed):
        batch = await read_batch(store, number)
        if walk.admit(batch.term):
            yield batch


async def committed_transactions(store: BlobStore) -> list[batchfile.Transaction]:
    return [t async for b in valid_batches(store) for t in b.transactions]


async def retained_start(store: BlobStore) -> int:
    """The first version the store still holds: 1 while nothing was garbage collected, else
    the version after the newest log-start marker (history at or below it is truncated)."""
    start = await logstart.newest(store)
    return 1 if start is None else start.version + 1


async def log_after(
    store: BlobStore, after: int
) -> AsyncIterator[tuple[int, str, batchfile.Transaction]]:
    """(prev_version, leader_id, transaction) for every valid transaction with a version
    above `after`, oldest first. `prev_version` is the previous transaction's version in the
    valid log (for the oldest retained batch: its first version - 1).

    Never a silent gap when GC runs meanwhile: the log start is read again after the walk,
    and if it moved (batches the walk listed or was about to list may be gone) the walk
    goes on from the new start, after what it already gave; LogTruncated when the new start
    is past that (nothing is skipped, the caller answers 410 or ends the stream)."""
    last = after
    start = await logstart.newest(store)
    while True:
        _check_retained(start, last)
        missing: NotFound | None = None
        try:
            async for prev, leader_id, tx in _log_from(store, start, last):
                yield prev, leader_id, tx
                last = tx.version
        except NotFound as e:  # a listed batch is gone: GC, or something worse
            missing = e
        moved = await logstart.newest(store)
        if moved == start:
            if missing is not None:
                raise missing  # not GC (it writes its marker first): never skip it
            return
        start = moved


def _check_retained(start: logstart.LogStart | None, after: int) -> None:
    if start is not None and start.version > after:
        raise LogTruncated(
            f"history before version {start.version + 1} is no longer retained",
            oldest_version=start.version + 1,
        )


async def _log_from(
    store: BlobStore, start: logstart.LogStart | None, after: int
) -> AsyncIterator[tuple[int, str, batchfile.Transaction]]:
    """log_after's walk from one log start (NotFound for a batch deleted after the LIST)."""
    prev: int | None = None
    async for batch in valid_batches(store, GENESIS if start is None else start.seed):
        if prev is None:
            prev = batch.first_version - 1
        if batch.last_version <= after:
            prev = batch.last_version
            continue
        for tx in batch.transactions:
            if tx.version > after:
                yield prev, batch.leader_id, tx
            prev = tx.version
