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
    newest_term = NUMBER_TOP + 1
    expected = numbers[0] if numbers else None
    for number in numbers:
        if number != expected:
            return
        expected = number - 1
        batch = await read_batch(store, number)
        if batch.term <= newest_term:
            newest_term = batch.term
            yield batch


async def committed_transactions(store: BlobStore) -> list[batchfile.Transaction]:
    return [t async for b in valid_batches(store) for t in b.transactions]
