"""Reading the committed log back from the store, applying the validity rule.

Every reader (recovery's callers, tests, status lookups, subscribers, compaction) goes
through here, so void batches are skipped in exactly one place.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from weaseldb import batchfile, layout
from weaseldb.blobstore import BlobStore
from weaseldb.recovery import read_batch
from weaseldb.types import NUMBER_TOP
from weaseldb.validity import ValidityWalk


async def all_batch_numbers(store: BlobStore) -> list[int]:
    """Every batch number in the store, oldest first (pages through LIST)."""
    numbers: list[int] = []
    after = ""
    while True:
        keys = await store.list(layout.BATCHES, start_after=after, limit=1000)
        numbers.extend(layout.number_of(k) for k in keys)
        if len(keys) < 1000:
            break
        after = keys[-1]
    numbers.reverse()
    return numbers


async def valid_batches(store: BlobStore) -> AsyncIterator[batchfile.Batch]:
    """The valid batches, oldest first, up to the first gap (nothing after a gap is durable
    history yet). Void batches (an older term after a newer one) are skipped."""
    numbers = await all_batch_numbers(store)
    walk = ValidityWalk()
    expected = numbers[0] if numbers else None
    for number in numbers:
        if number != expected:
            return
        expected = number - 1
        batch = await read_batch(store, number)
        if walk.admit(batch.term):
            yield batch


async def committed_transactions(store: BlobStore) -> list[batchfile.Transaction]:
    return [t async for b in valid_batches(store) for t in b.transactions]


async def retained_start(store: BlobStore) -> int:
    """The first version the store still holds: 1 while nothing was garbage collected, else
    the first version of the oldest remaining batch (history below it is truncated)."""
    keys = await store.list(layout.BATCHES, limit=1)
    if not keys:
        return 1
    numbers = await all_batch_numbers(store)
    if numbers[0] == NUMBER_TOP:
        return 1
    return (await read_batch(store, numbers[0])).first_version


async def log_after(
    store: BlobStore, after: int
) -> AsyncIterator[tuple[int, str, batchfile.Transaction]]:
    """(prev_version, leader_id, transaction) for every valid transaction with a version
    above `after`, oldest first. `prev_version` is the previous transaction's version in the
    valid log (for the oldest retained batch: its first version - 1)."""
    prev: int | None = None
    async for batch in valid_batches(store):
        if prev is None:
            prev = batch.first_version - 1
        if batch.last_version <= after:
            prev = batch.last_version
            continue
        for tx in batch.transactions:
            if tx.version > after:
                yield prev, batch.leader_id, tx
            prev = tx.version
