"""Executor side of the read: fetch batches with the project's blob client and decode
them (checksum verified by weaseldb.batchfile) into Arrow record batches.

No Spark here: `transforms.decode_batches` runs `record_batches` inside `mapInArrow`, one
call per partition of batch ordinals, and the tests call it directly.

Every output row is either a batch header (`is_header`) or one operation:
op 0 write(key, value), 1 delete(key), 2 range delete [key, end).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from weaseldb import batchfile, layout
from weaseldb.blobstore import BlobStore, open_store
from weaseldb.protocol import Delete, Write
from weaseldb.types import NUMBER_TOP

WRITE, DELETE, RANGE_DELETE = 0, 1, 2
#: GETs in flight per partition.
FETCH_PARALLELISM = 16
#: Batches decoded per Arrow record batch sent back to Spark.
BATCHES_PER_CHUNK = 64

SCHEMA = pa.schema(
    [
        ("seq", pa.int64()),
        ("is_header", pa.bool_()),
        ("term_seq", pa.int64()),
        ("first_version", pa.int64()),
        ("last_version", pa.int64()),
        ("operations", pa.int64()),
        ("size", pa.int64()),
        ("key", pa.binary()),
        ("end", pa.binary()),
        ("value", pa.binary()),
        ("op", pa.int8()),
        ("version", pa.int64()),
        ("idx", pa.int32()),
    ]
)
#: The same schema as a Spark DDL string (for mapInArrow).
SPARK_DDL = (
    "seq long, is_header boolean, term_seq long, first_version long, last_version long, "
    "operations long, size long, key binary, end binary, value binary, op tinyint, "
    "version long, idx int"
)


class _Operations:
    """Column lists of the operation rows of a chunk of batches (one list per column:
    far cheaper than building rows)."""

    def __init__(self) -> None:
        self.seq: list[int] = []
        self.key: list[bytes] = []
        self.end: list[bytes | None] = []
        self.value: list[bytes | None] = []
        self.op: list[int] = []
        self.version: list[int] = []
        self.idx: list[int] = []

    def add(self, seq: int, batch: batchfile.Batch) -> int:
        """Append `batch`'s operations, but of each key only its newest point operation in
        the batch (the fold keeps no older one, and a hot key then brings one row per batch
        to the fold, not one per update); returns how many operations the batch has."""
        key, end, value, op = self.key.append, self.end.append, self.value.append, self.op.append
        version, idx = self.version.append, self.idx.append
        start = row = len(self.key)
        ranges = 0
        newest: dict[bytes, int] = {}  # key -> row of its newest point operation
        for tx in batch.transactions:
            for i, operation in enumerate(tx.operations):
                if isinstance(operation, Write):
                    k, e, v, o = operation.key, None, operation.value, WRITE
                    newest[k] = row
                elif isinstance(operation, Delete):
                    k, e, v, o = operation.key, None, None, DELETE
                    newest[k] = row
                else:
                    k, e, v, o = operation.begin, operation.end, None, RANGE_DELETE
                    ranges += 1
                key(k)
                end(e)
                value(v)
                op(o)
                version(tx.version)
                idx(i)
                row += 1
        count = row - start
        if len(newest) < count - ranges:
            self._drop_older(start, newest)
        self.seq.extend([seq] * (len(self.key) - start))
        return count

    def _drop_older(self, start: int, newest: dict[bytes, int]) -> None:
        """Keep, of the rows from `start` on, the range deletes and each key's newest."""
        kept = [
            r
            for r in range(start, len(self.key))
            if self.op[r] == RANGE_DELETE or newest[self.key[r]] == r
        ]
        for column in (self.key, self.end, self.value, self.op, self.version, self.idx):
            _keep_rows(column, start, kept)

    def record_batch(self) -> pa.RecordBatch:
        n = len(self.seq)
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.seq, pa.int64()),
                pa.array([False] * n, pa.bool_()),
                *(pa.nulls(n, pa.int64()) for _ in range(5)),
                pa.array(self.key, pa.binary()),
                pa.array(self.end, pa.binary()),
                pa.array(self.value, pa.binary()),
                pa.array(self.op, pa.int8()),
                pa.array(self.version, pa.int64()),
                pa.array(self.idx, pa.int32()),
            ],
            schema=SCHEMA,
        )


def _headers(rows: list[tuple[int, batchfile.Batch, int, int]]) -> pa.RecordBatch:
    """One row per batch: (seq, batch, operations, encoded size)."""
    n = len(rows)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r[0] for r in rows], pa.int64()),
            pa.array([True] * n, pa.bool_()),
            pa.array([NUMBER_TOP - r[1].term for r in rows], pa.int64()),
            pa.array([r[1].first_version for r in rows], pa.int64()),
            pa.array([r[1].last_version for r in rows], pa.int64()),
            pa.array([r[2] for r in rows], pa.int64()),
            pa.array([r[3] for r in rows], pa.int64()),
            pa.nulls(n, pa.binary()),
            pa.nulls(n, pa.binary()),
            pa.nulls(n, pa.binary()),
            pa.nulls(n, pa.int8()),
            pa.nulls(n, pa.int64()),
            pa.nulls(n, pa.int32()),
        ],
        schema=SCHEMA,
    )


async def _fetch(store: BlobStore, numbers: list[int]) -> list[tuple[bytes, str]]:
    limit = asyncio.Semaphore(FETCH_PARALLELISM)

    async def get(number: int) -> tuple[bytes, str]:
        key = layout.batch_key(number)
        async with limit:
            return await store.get(key), key

    return await asyncio.gather(*(get(n) for n in numbers))


def record_batches(store_url: str, seqs: Iterable[int]) -> Iterator[pa.RecordBatch]:
    """Fetch and decode the batches with these ordinals; one header row per batch and one
    row per operation. A checksum mismatch raises CorruptObject: never skipped. One store
    client and one event loop serve the whole partition."""
    pending = list(seqs)
    loop = asyncio.new_event_loop()
    store = open_store(store_url, pool_size=FETCH_PARALLELISM)
    try:
        for start in range(0, len(pending), BATCHES_PER_CHUNK):
            chunk = pending[start : start + BATCHES_PER_CHUNK]
            blobs = loop.run_until_complete(_fetch(store, [NUMBER_TOP - s for s in chunk]))
            operations = _Operations()
            headers = []
            for seq, (blob, key) in zip(chunk, blobs, strict=True):
                batch = batchfile.decode(blob, key=key)
                headers.append((seq, batch, operations.add(seq, batch), len(blob)))
            yield operations.record_batch()
            yield _headers(headers)
    finally:
        loop.run_until_complete(store.close())
        loop.close()


def arrow_record_batches(
    store_url: str, batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The `mapInArrow` function: input batches carry a `seq` column."""
    for batch in batches:
        yield from record_batches(store_url, batch.column("seq").to_pylist())


def _keep_rows(column: list[Any], start: int, kept: list[int]) -> None:
    column[start:] = [column[r] for r in kept]
