"""Batch logs made by hand for the compaction and GC tests: terms, void batches, any
operations, written through the real batch format into any blob store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from weaseldb.core import batchfile, layout
from weaseldb.core.batchfile import Batch, Transaction
from weaseldb.core.protocol import Delete, Operation, RangeDelete, Write
from weaseldb.core.store import BlobStore
from weaseldb.core.types import NUMBER_TOP, BatchNumber, RequestId, Term, Version
from weaseldb.core.validity import ValidityWalk
from weaseldb.runtime.stores import open_store


@dataclass(frozen=True)
class BatchSpec:
    """One batch: its term ordinal (0 = first term) and its transactions' operations."""

    term: int
    transactions: Sequence[Sequence[Operation]] = ()


def build_log(specs: Sequence[BatchSpec], *, first_number: int = NUMBER_TOP) -> list[Batch]:
    """Batches numbered down from `first_number`. Versions follow the persister's rule: a
    batch continues from the last version of the newest batch before it that is valid so
    far, so void batches reuse versions a valid batch also uses (as a deposed leader's
    late writes would)."""
    batches: list[Batch] = []
    last_version = 0
    walk = ValidityWalk()
    for i, spec in enumerate(specs):
        term = NUMBER_TOP - spec.term
        base = last_version
        txs = [
            Transaction(
                version=Version(base + j + 1),
                request_id=RequestId(f"r-{i}-{j}"),
                timestamp_ms=0,
                operations=list(ops),
            )
            for j, ops in enumerate(spec.transactions)
        ]
        batch = Batch(
            format=batchfile.FORMAT_VERSION,
            batch=BatchNumber(first_number - i),
            term=Term(term),
            leader_id=f"leader-{spec.term}",
            first_version=Version(base + 1),
            last_version=Version(base + len(txs)),
            created_at_ms=0,
            transactions=txs,
        )
        batches.append(batch)
        if walk.admit(Term(term)):  # valid: the log goes on from here
            last_version = batch.last_version
    return batches


async def write_log(store: BlobStore, batches: Sequence[Batch]) -> None:
    for batch in batches:
        await store.put_if_absent(layout.batch_key(batch.batch), batchfile.encode(batch))


def write_log_at(store_url: str, batches: Sequence[Batch]) -> None:
    """write_log into the store at `store_url`, from synchronous test code."""

    async def write() -> None:
        store = open_store(store_url)
        try:
            await write_log(store, batches)
        finally:
            await store.close()

    asyncio.run(write())


def synthetic_log(
    operations: int,
    *,
    per_batch: int = 1000,
    per_transaction: int = 10,
    keys: int = 100_000,
    value_bytes: int = 100,
    seed: int = 1,
) -> list[Batch]:
    """A log of about `operations` operations: 16-byte keys drawn from `keys`, mostly
    writes, 5 % deletes, 0.1 % range deletes over a few hundred keys, and one leader
    change in the middle whose deposed leader leaves three void batches behind."""
    import random

    rng = random.Random(seed)
    value = rng.randbytes(value_bytes)

    def key(i: int) -> bytes:
        return b"key-%012d" % i

    def op() -> Operation:
        roll = rng.random()
        if roll < 0.001:
            start = rng.randrange(keys)
            return RangeDelete(key(start), key(start + rng.randint(1, 300)))
        if roll < 0.051:
            return Delete(key(rng.randrange(keys)))
        return Write(key(rng.randrange(keys)), value)

    batch_count = max(1, operations // per_batch)
    per_batch_tx = max(1, per_batch // per_transaction)
    specs: list[BatchSpec] = []
    for i in range(batch_count):
        term = 0 if i < batch_count // 2 else 1
        txs = [[op() for _ in range(per_transaction)] for _ in range(per_batch_tx)]
        specs.append(BatchSpec(term, txs))
        if i == batch_count // 2:  # the deposed leader's late writes: void
            specs += [BatchSpec(0, [[op() for _ in range(per_transaction)]]) for _ in range(3)]
    return build_log(specs)


def stamped(batches: Sequence[Batch], start_ms: int, step_ms: int) -> list[Batch]:
    """`batches` as leaders at one clock would have written them: batch i created at
    `start_ms + i * step_ms`, its transactions stamped with that time."""
    return [
        msgspec.structs.replace(
            b,
            created_at_ms=start_ms + i * step_ms,
            transactions=[
                msgspec.structs.replace(tx, timestamp_ms=start_ms + i * step_ms)
                for tx in b.transactions
            ],
        )
        for i, b in enumerate(batches)
    ]


def with_times(batches: Sequence[Batch], *, start_ms: int, step_ms: int = 10) -> list[Batch]:
    """The same log with real, increasing commit times: each transaction `step_ms` after the
    one written before it (in batch order, so a void batch's transactions are later than
    the valid ones at the same versions, as a deposed leader's late writes are)."""
    import msgspec

    timed: list[Batch] = []
    now = start_ms
    for batch in batches:
        txs = []
        for tx in batch.transactions:
            now += step_ms
            txs.append(msgspec.structs.replace(tx, timestamp_ms=now))
        timed.append(msgspec.structs.replace(batch, transactions=txs, created_at_ms=now))
    return timed
