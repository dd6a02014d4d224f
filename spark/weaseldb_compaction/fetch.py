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

import pyarrow as pa

from weaseldb import batchfile, layout
from weaseldb.blobstore import BlobStore, open_store
from weaseldb.protocol import Delete, RangeDelete, Write
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


class _Columns:
    def __init__(self) -> None:
        self.data: dict[str, list[object]] = {name: [] for name in SCHEMA.names}

    def header(self, seq: int, batch: batchfile.Batch, operations: int, size: int) -> None:
        self._row(seq, True, NUMBER_TOP - batch.term, batch.first_version, batch.last_version,
                  operations, size, None, None, None, None, None, None)  # fmt: skip

    def operation(self, seq: int, key: bytes, end: bytes | None, value: bytes | None,
                  op: int, version: int, idx: int) -> None:  # fmt: skip
        self._row(seq, False, None, None, None, None, None, key, end, value, op, version, idx)

    def _row(self, *values: object) -> None:
        for column, value in zip(self.data.values(), values, strict=True):
            column.append(value)

    def take(self) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_pydict(self.data, schema=SCHEMA)
        self.data = {name: [] for name in SCHEMA.names}
        return batch


def _add(columns: _Columns, seq: int, batch: batchfile.Batch, size: int) -> None:
    operations = 0
    for tx in batch.transactions:
        for idx, op in enumerate(tx.operations):
            operations += 1
            if isinstance(op, Write):
                columns.operation(seq, op.key, None, op.value, WRITE, tx.version, idx)
            elif isinstance(op, Delete):
                columns.operation(seq, op.key, None, None, DELETE, tx.version, idx)
            elif isinstance(op, RangeDelete):
                columns.operation(seq, op.begin, op.end, None, RANGE_DELETE, tx.version, idx)
    columns.header(seq, batch, operations, size)


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
            columns = _Columns()
            for seq, (blob, key) in zip(chunk, blobs, strict=True):
                _add(columns, seq, batchfile.decode(blob, key=key), len(blob))
            yield columns.take()
    finally:
        loop.run_until_complete(store.close())
        loop.close()


def arrow_record_batches(
    store_url: str, batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The `mapInArrow` function: input batches carry a `seq` column."""
    for batch in batches:
        yield from record_batches(store_url, batch.column("seq").to_pylist())
