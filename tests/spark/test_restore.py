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
from weaseldb.core.types import BatchNumber, Term, Version
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
            assert layout.term_key(Term(planning.TOP)) in keys
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


def _collect_garbage(url: str) -> None:
    async def collect() -> None:
        store = open_store(url)
        try:
            await gc.collect(store, grace_s=0)
        finally:
            await store.close()

    asyncio.run(collect())


def compacted_source(spark: SparkSession, url: str, batches: Sequence[Batch]) -> list[Version]:
    """The log, compacted at a third (then garbage collected: the log starts there) and at
    two thirds: snapshot versions, oldest first."""
    write_log_at(url, batches)
    first = job.run(spark, job.Options(url, upto_batch=batches[len(batches) // 3].batch), _quiet)
    _collect_garbage(url)
    second = job.run(
        spark, job.Options(url, upto_batch=batches[2 * len(batches) // 3].batch), _quiet
    )
    assert first.manifest is not None and second.manifest is not None
    return [first.manifest.version, second.manifest.version]


def _holdings(url: str) -> holdings.Holdings:
    async def read() -> holdings.Holdings | None:
        store = open_store(url)
        try:
            return await holdings.holdings(store)
        finally:
            await store.close()

    found = asyncio.run(read())
    assert found is not None
    return found


def test_restore_from_a_compacted_and_collected_source(spark: SparkSession) -> None:
    batches = history(seed=2)
    source = f"dir:{tempfile.mkdtemp(prefix='pitr-src-')}"
    oldest, middle = compacted_source(spark, source, batches)
    held = _holdings(source)
    assert held.oldest_version == oldest and held.snapshots == (oldest, middle)
    inside = next(
        v
        for b in batches
        for v in range(b.first_version, b.last_version)  # not a batch's last version
        if v > middle
    )
    for version in sorted({oldest, middle, inside, held.newest_version}):
        into = f"dir:{tempfile.mkdtemp(prefix='pitr-into-')}"
        result = restore(spark, source, into, to_version=version)
        assert result.base == (middle if version >= middle else oldest)
        check_restored(into, batches, version)


def test_restore_on_minio(spark: SparkSession, minio: MinioServer) -> None:
    """Source and destination in two buckets of MinIO, the destination's keys named by
    credentials=NAME (per-bucket S3A settings)."""
    import os

    os.environ["PITR_ACCESS_KEY_ID"] = os.environ["AWS_ACCESS_KEY_ID"]
    os.environ["PITR_SECRET_ACCESS_KEY"] = os.environ["AWS_SECRET_ACCESS_KEY"]
    batches = history(seed=3)
    source = minio.store_url(minio.new_bucket())
    compacted_source(spark, source, batches)
    held = _holdings(source)
    rng = random.Random(3)
    for version in sorted(
        {held.oldest_version, rng.randint(held.oldest_version, held.newest_version)}
    ):
        into = minio.store_url(minio.new_bucket(), "restored") + "&credentials=PITR"
        restore(spark, source, into, to_version=version)
        check_restored(into, batches, version)
    stamps = [(v, ts) for v, ts in valid_times(batches) if v > held.oldest_version]
    at = stamps[len(stamps) // 2][1]
    into = minio.store_url(minio.new_bucket(), "by-time")
    assert restore(spark, source, into, to_time_ms=at).version == stamps[len(stamps) // 2][0]
    check_restored(into, batches, stamps[len(stamps) // 2][0])


def test_refusals_write_nothing(spark: SparkSession, tmp_path: Path) -> None:
    batches = history(seed=4)
    source = f"dir:{tmp_path / 'src'}"
    oldest, _ = compacted_source(spark, source, batches)
    held = _holdings(source)
    into = tmp_path / "into"
    into.mkdir()
    for kw in ({"to_version": oldest - 1}, {"to_version": held.newest_version + 1}):
        with pytest.raises(
            planning.RestoreRefused, match=f"versions {oldest}..{held.newest_version}"
        ):
            restore(spark, source, f"dir:{into}", **kw)
    with pytest.raises(planning.RestoreRefused, match="in the future"):
        restore(spark, source, f"dir:{into}", to_time_ms=START_MS * 2)
    assert list(into.iterdir()) == []
    (into / "something").write_text("x")
    with pytest.raises(planning.RestoreRefused, match="not empty"):
        restore(spark, source, f"dir:{into}")
    assert [p.name for p in into.iterdir()] == ["something"]


def test_an_unfinished_restore_is_started_again(spark: SparkSession, tmp_path: Path) -> None:
    """Killed before its log-start marker: the rerun removes its leftovers and finishes; a
    finished restore's destination is refused."""
    batches = history(seed=5)
    source = f"dir:{tmp_path / 'src'}"
    write_log_at(source, batches)
    into = f"dir:{tmp_path / 'into'}"
    restore(spark, source, into, to_version=3)
    _delete(into, layout.log_start_key(BatchNumber(planning.TOP)))  # as if killed before the marker
    restore(spark, source, into, to_version=5)
    check_restored(into, batches, 5)
    with pytest.raises(planning.RestoreRefused, match="already holds a database"):
        restore(spark, source, into, to_version=5)


def _delete(url: str, key: str) -> None:
    async def delete() -> None:
        store = open_store(url)
        try:
            await store.delete(key)
        finally:
            await store.close()

    asyncio.run(delete())
