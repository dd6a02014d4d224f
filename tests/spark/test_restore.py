"""Point-in-time restore (weaseldb_compaction.restore) equals the reference fold of the
source's valid log up to V: at random versions and times of a generated history (writes,
deletes, range deletes, void batches, a leader change), on the directory store and on
MinIO, from a source that was compacted and garbage collected (a base snapshot in the
middle), at V exactly at a snapshot, inside a batch, the oldest and the newest."""

from __future__ import annotations

import asyncio
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from tests.support.logs import BatchSpec, build_log, with_times, write_log_at
from tests.support.minio import MinioServer
from weaseldb.core import gc, holdings, layout, logstart, manifest, recovery
from weaseldb.core import restore as planning
from weaseldb.core.batchfile import Batch
from weaseldb.core.fold import reference_fold
from weaseldb.core.protocol import Delete, Operation, RangeDelete, Write
from weaseldb.core.store import list_all
from weaseldb.core.types import Version
from weaseldb.core.validity import valid_flags
from weaseldb.runtime.stores import open_store
from weaseldb_compaction import job
from weaseldb_compaction import restore as pitr

START_MS = 1_790_000_000_000
KEYS = [b"", b"a", b"ab", b"b", b"b\x00", b"c", b"d", b"\xff", b"\xff\xff"]
#: Term ordinals of the generated batches: a leader change (0 -> 1) whose deposed leader
#: writes two void batches, then another (1 -> 2) with one more.
TERMS = [0, 0, 0, 1, 0, 0, 1, 1, 2, 1, 2, 2, 2]


def _operation(rng: random.Random) -> Operation:
    roll = rng.random()
    if roll < 0.15:
        begin, end = sorted(rng.sample(KEYS, 2))
        return RangeDelete(begin, end)
    if roll < 0.35:
        return Delete(rng.choice(KEYS))
    return Write(rng.choice(KEYS), rng.randbytes(rng.randint(0, 4)))


def history(seed: int) -> list[Batch]:
    rng = random.Random(seed)
    specs = [
        BatchSpec(term, [[_operation(rng) for _ in range(rng.randint(1, 4))]
                         for _ in range(rng.randint(0, 4))])
        for term in TERMS
    ]  # fmt: skip
    return with_times(build_log(specs), start_ms=START_MS)


def expected(batches: Sequence[Batch], version: int) -> dict[bytes, tuple[bytes, int]]:
    flags = valid_flags([b.term for b in batches])
    valid = [t for b, ok in zip(batches, flags, strict=True) if ok for t in b.transactions]
    return dict(reference_fold([], [t for t in valid if t.version <= version]))


def valid_times(batches: Sequence[Batch]) -> list[tuple[int, int]]:
    flags = valid_flags([b.term for b in batches])
    return [(t.version, t.timestamp_ms) for b, ok in zip(batches, flags, strict=True) if ok
            for t in b.transactions]  # fmt: skip


def restored_state(url: str) -> tuple[manifest.Manifest, dict[bytes, tuple[bytes, int]]]:
    """The destination's snapshot, read back with pyarrow through the blob client."""

    async def read() -> tuple[manifest.Manifest, list[bytes]]:
        store = open_store(url)
        try:
            found = await manifest.newest(store)
            assert found is not None
            return found, [await store.get(f.path) for f in found.files]
        finally:
            await store.close()

    found, blobs = asyncio.run(read())
    rows = [r for blob in blobs for r in pq.read_table(pa.BufferReader(blob)).to_pylist()]
    keys = [r["key"] for r in rows]
    assert keys == sorted(keys)
    return found, {r["key"]: (r["value"], r["version"]) for r in rows}


def _quiet(_line: str) -> None:
    pass


def restore(spark: SparkSession, source: str, into: str, **kw: int) -> pitr.Restored:
    return pitr.run(spark, pitr.RestoreOptions(source, into, **kw), _quiet)


def check_restored(url: str, batches: Sequence[Batch], version: int) -> None:
    """The snapshot is the state at V, and the prefix is a database whose log starts at V."""
    found, state = restored_state(url)
    assert found.version == version
    assert state == expected(batches, version)
    assert (found.batch, found.term, found.previous) == (planning.TOP, planning.TOP, None)

    async def layout_of() -> None:
        store = open_store(url)
        try:
            keys = await list_all(store, "")
            assert layout.term_key(planning.TOP) in keys
            start = await logstart.newest(store)
            assert start is not None and start.version == version
            assert start.after_batch == planning.TOP
            recovered = await recovery.recover(store, prior_term=None)
            assert recovered.last_version == version
            held = await holdings.holdings(store)
            assert held is not None and (held.oldest_version, held.newest_version) == (version,) * 2
        finally:
            await store.close()

    asyncio.run(layout_of())


def test_restore_at_random_versions_and_times(spark: SparkSession) -> None:
    rng = random.Random(27)
    batches = history(seed=1)
    source = f"dir:{tempfile.mkdtemp(prefix='pitr-src-')}"
    write_log_at(source, batches)
    newest = max(
        b.last_version
        for b, ok in zip(batches, valid_flags([b.term for b in batches]), strict=True)
        if ok
    )
    versions = {0, newest, *rng.sample(range(1, newest), 4)}
    for version in sorted(versions):
        into = f"dir:{tempfile.mkdtemp(prefix='pitr-into-')}"
        assert restore(spark, source, into, to_version=version).version == version
        check_restored(into, batches, version)
    stamps = valid_times(batches)
    for _ in range(3):
        at = rng.randint(START_MS, stamps[-1][1] + 100)
        want = max((v for v, ts in stamps if ts <= at), default=0)
        into = f"dir:{tempfile.mkdtemp(prefix='pitr-into-')}"
        result = restore(spark, source, into, to_time_ms=at)
        assert result.version == want
        check_restored(into, batches, want)
