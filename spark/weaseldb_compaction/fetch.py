"""Executor side of the read: fetch batches with the project's blob client and decode
them (checksum verified by weaseldb.core.batchfile) into Arrow record batches.

No Spark here: transforms.py runs these inside `mapInArrow`, one call per partition of
batch ordinals, and the tests call them directly. A run reads the log twice, and keeps
nothing in Spark's cache between the two (building that cache cost more than the
second read; docs/compaction.md, "Why the log is read twice and sorted in Arrow"):

- `survey`: what the driver needs to plan, and nothing per point operation: one header row
  per batch, one row per range delete, and a thinned sample of point keys (`SAMPLE`) that
  sets the key ranges of the fold's partitions;
- `points`: the point operations of the batches the run folds, of each key only its newest
  in each batch.

Operation codes: 0 write(key, value), 1 delete(key), 2 range delete [key, end).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from weaseldb.core import batchfile, layout
from weaseldb.core.protocol import Delete, Operation, RangeDelete, Write
from weaseldb.core.store import BlobStore
from weaseldb.core.types import NUMBER_TOP, BatchNumber
from weaseldb.runtime.stores import open_store, url_credentials

#: S3 keys the driver read for the store (weaseldb.runtime.stores.url_credentials): a
#: Python worker's environment is the one its Spark session started with.
Keys = tuple[str, str] | None
WRITE, DELETE, RANGE_DELETE = 0, 1, 2
#: Row kinds of the survey.
HEADER, CUT, SAMPLE = 0, 1, 2
#: GETs in flight per partition.
FETCH_PARALLELISM = 16
#: Batches decoded per Arrow record batch sent back to Spark.
BATCHES_PER_CHUNK = 64
#: Sampled point keys a survey partition sends at most (a thinned stride: see _Sampler).
SAMPLES_PER_PARTITION = 64

SURVEY_SCHEMA = pa.schema(
    [
        ("kind", pa.int8()),
        ("seq", pa.int64()),
        ("term_seq", pa.int64()),
        ("first_version", pa.int64()),
        ("last_version", pa.int64()),
        ("operations", pa.int64()),  # header: operations; sample: operations it stands for
        ("size", pa.int64()),
        ("key", pa.binary()),  # range delete: begin
        ("end", pa.binary()),
        ("version", pa.int64()),
        ("idx", pa.int32()),
        # Header, when asked for a time (a restore's --to-time): the greatest version of the
        # batch's transactions committed at or before it, and when.
        ("at_version", pa.int64()),
        ("at_ms", pa.int64()),
    ]
)
SURVEY_DDL = (
    "kind tinyint, seq long, term_seq long, first_version long, last_version long, "
    "operations long, size long, key binary, end binary, version long, idx int, "
    "at_version long, at_ms long"
)
POINTS_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("op", pa.int8()),
        ("version", pa.int64()),
        ("idx", pa.int32()),
    ]
)
POINTS_DDL = "key binary, value binary, op tinyint, version long, idx int"


def survey(
    store_url: str, seqs: Iterable[int], at_ms: int | None = None, keys: Keys = None
) -> Iterator[pa.RecordBatch]:
    """Headers, range deletes and sampled point keys of the batches with these ordinals
    (with `at_ms`, each header also says what the batch committed by then)."""
    sampler = _Sampler(SAMPLES_PER_PARTITION)
    for chunk in _decoded(store_url, seqs, keys):
        rows: list[tuple[Any, ...]] = []
        for seq, batch, size in chunk:
            operations = [op for tx in batch.transactions for op in tx.operations]
            if any(type(op) is RangeDelete for op in operations):
                rows += _cut_rows(seq, batch)
            sampler.offer(operations)
            rows.append((HEADER, seq, batch, len(operations), size, _at(batch, at_ms)))
        yield _survey_rows(rows)
    yield _sample_rows(sampler)


def _at(batch: batchfile.Batch, at_ms: int | None) -> tuple[int | None, int | None]:
    """(greatest version committed at or before `at_ms`, its timestamp) of the batch."""
    if at_ms is None:
        return None, None
    found = [(tx.version, tx.timestamp_ms) for tx in batch.transactions if tx.timestamp_ms <= at_ms]
    return max(found) if found else (None, None)


def _cut_rows(seq: int, batch: batchfile.Batch) -> list[tuple[Any, ...]]:
    return [
        (CUT, seq, op.begin, op.end, tx.version, i)
        for tx in batch.transactions
        for i, op in enumerate(tx.operations)
        if isinstance(op, RangeDelete)
    ]


def points(
    store_url: str,
    seqs: Iterable[int],
    void: frozenset[int],
    upto_version: int | None = None,
    keys: Keys = None,
) -> Iterator[pa.RecordBatch]:
    """Point operations of the batches with these ordinals, void ones left out (and, for a
    restore, the transactions after `upto_version`)."""
    for chunk in _decoded(store_url, (s for s in seqs if s not in void), keys):
        columns = _PointColumns()
        for _, batch, _ in chunk:
            columns.add(batch, upto_version)
        yield columns.record_batch()


def _decoded(
    store_url: str, seqs: Iterable[int], keys: Keys = None
) -> Iterator[list[tuple[int, batchfile.Batch, int]]]:
    """(ordinal, batch, encoded size) in chunks. A checksum mismatch raises CorruptObject:
    never skipped. One store client and one event loop serve the whole partition."""
    pending = list(seqs)
    loop = asyncio.new_event_loop()
    store = open_store(store_url, pool_size=FETCH_PARALLELISM, credentials=keys)
    try:
        for start in range(0, len(pending), BATCHES_PER_CHUNK):
            chunk = pending[start : start + BATCHES_PER_CHUNK]
            numbers = [BatchNumber(NUMBER_TOP - s) for s in chunk]
            blobs = loop.run_until_complete(_fetch(store, numbers))
            yield [
                (seq, batchfile.decode(blob, key=key), len(blob))
                for seq, (blob, key) in zip(chunk, blobs, strict=True)
            ]
    finally:
        loop.run_until_complete(store.close())
        loop.close()


async def _fetch(store: BlobStore, numbers: list[BatchNumber]) -> list[tuple[bytes, str]]:
    limit = asyncio.Semaphore(FETCH_PARALLELISM)

    async def get(number: BatchNumber) -> tuple[bytes, str]:
        key = layout.batch_key(number)
        async with limit:
            return await store.get(key), key

    return await asyncio.gather(*(get(n) for n in numbers))


class _Sampler:
    """Every `stride`-th operation's key; when more than `limit` are kept, every other one
    is dropped and the stride doubles. So the sample stays evenly spread over everything
    offered and bounded, and each key stands for `stride` operations. (A range delete's
    begin key counts like a point key: the sample only balances the partitions.)"""

    def __init__(self, limit: int) -> None:
        if limit % 2:
            raise ValueError("the sample limit must be even")
        self.limit = limit
        self.stride = 1
        self.keys: list[bytes] = []
        self._next = 0  # position of the next sample, counted from the current offer

    def offer(self, operations: list[Operation]) -> None:
        while self._next < len(operations):
            op = operations[self._next]
            self.keys.append(op.begin if isinstance(op, RangeDelete) else op.key)
            if len(self.keys) > self.limit:  # limit + 1 keys, an odd count: the newest stays
                del self.keys[1::2]
                self.stride *= 2
            self._next += self.stride
        self._next -= len(operations)


def _survey_rows(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    columns: dict[str, list[Any]] = {name: [] for name in SURVEY_SCHEMA.names}
    for row in rows:
        values = _header_values(row) if row[0] == HEADER else _cut_values(row)
        for name, value in zip(SURVEY_SCHEMA.names, values, strict=True):
            columns[name].append(value)
    return pa.RecordBatch.from_pydict(columns, schema=SURVEY_SCHEMA)


def _header_values(row: tuple[Any, ...]) -> tuple[Any, ...]:
    _, seq, batch, count, size, (at_version, at_ms) = row
    term_seq = NUMBER_TOP - batch.term
    return (HEADER, seq, term_seq, batch.first_version, batch.last_version, count, size,
            None, None, None, None, at_version, at_ms)  # fmt: skip


def _cut_values(row: tuple[Any, ...]) -> tuple[Any, ...]:
    _, seq, begin, end, version, idx = row
    return (CUT, seq, None, None, None, None, None, begin, end, version, idx, None, None)


def _sample_rows(sampler: _Sampler) -> pa.RecordBatch:
    n = len(sampler.keys)
    columns: dict[str, Any] = {name: [None] * n for name in SURVEY_SCHEMA.names}
    columns["kind"] = [SAMPLE] * n
    columns["operations"] = [sampler.stride] * n
    columns["key"] = sampler.keys
    return pa.RecordBatch.from_pydict(columns, schema=SURVEY_SCHEMA)


class _PointColumns:
    """Column lists of point operations (one list per column: far cheaper than rows)."""

    def __init__(self) -> None:
        self.key: list[bytes] = []
        self.value: list[bytes | None] = []
        self.op: list[int] = []
        self.version: list[int] = []
        self.idx: list[int] = []

    def add(self, batch: batchfile.Batch, upto_version: int | None = None) -> None:
        """Append `batch`'s point operations, but of each key only its newest in the batch
        (the fold keeps no older one, and a hot key then brings one row per batch, not one
        per update). Never across batches: a batch's validity is the driver's to decide."""
        key, value, op = self.key.append, self.value.append, self.op.append
        version, idx = self.version.append, self.idx.append
        start = row = len(self.key)
        newest: dict[bytes, int] = {}  # key -> row of its newest point operation
        for tx in batch.transactions:
            if upto_version is not None and tx.version > upto_version:
                break  # a restore cut inside this batch: versions increase within it
            for i, operation in enumerate(tx.operations):
                if isinstance(operation, Write):
                    key(operation.key)
                    value(operation.value)
                    op(WRITE)
                elif isinstance(operation, Delete):
                    key(operation.key)
                    value(None)
                    op(DELETE)
                else:
                    continue
                version(tx.version)
                idx(i)
                newest[self.key[row]] = row
                row += 1
        if len(newest) < row - start:
            kept = [r for r in range(start, row) if newest[self.key[r]] == r]
            for column in (self.key, self.value, self.op, self.version, self.idx):
                _keep_rows(column, start, kept)

    def record_batch(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.key, pa.binary()),
                pa.array(self.value, pa.binary()),
                pa.array(self.op, pa.int8()),
                pa.array(self.version, pa.int64()),
                pa.array(self.idx, pa.int32()),
            ],
            schema=POINTS_SCHEMA,
        )


def _keep_rows(column: list[Any], start: int, kept: list[int]) -> None:
    column[start:] = [column[r] for r in kept]


#: The `mapInArrow` functions: their input batches carry a `seq` column.
ArrowMap = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def survey_map(store_url: str, at_ms: int | None = None) -> ArrowMap:
    keys = url_credentials(store_url)  # read by the driver, shipped with the function

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return survey(
            store_url, (s for b in batches for s in b.column("seq").to_pylist()), at_ms, keys
        )

    return run


def points_map(store_url: str, void: frozenset[int], upto_version: int | None = None) -> ArrowMap:
    keys = url_credentials(store_url)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        seqs = (s for b in batches for s in b.column("seq").to_pylist())
        return points(store_url, seqs, void, upto_version, keys)

    return run
