"""Publishing: two compactions racing publish exactly one manifest; a run that dies before
publishing leaves nothing a reader trips on (and GC removes its files after the grace
period); the fetch verifies checksums."""

from __future__ import annotations

import asyncio
import tempfile
import threading
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.support.logs import BatchSpec, build_log, keys_at, write_log_at
from weaseldb.core import batchfile, gc, history, layout, manifest
from weaseldb.core.errors import CorruptObject
from weaseldb.core.protocol import RangeDelete, Write
from weaseldb.runtime.stores import open_store
from weaseldb_compaction import fetch, job


def make_store(count: int = 20) -> str:
    specs = [
        BatchSpec(0, [[Write(b"k%03d" % i, b"v%d" % i)], [RangeDelete(b"k000", b"k002")]])
        for i in range(count)
    ]
    root = Path(tempfile.mkdtemp(prefix="publish-"))
    url = f"dir:{root}"

    write_log_at(url, build_log(specs))
    return url


def quiet(_line: str) -> None:
    pass


def test_concurrent_compactions_publish_exactly_one_manifest(spark: SparkSession) -> None:
    url = make_store()
    outcomes: list[job.Outcome] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def compact() -> None:
        start.wait()
        try:
            outcomes.append(job.run(spark, job.Options(url), quiet))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=compact) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    assert not errors, errors
    statuses = sorted(o.status for o in outcomes)
    assert statuses in (["lost_race", "published"], ["published", "up_to_date"]), statuses
    manifests = [k for k in keys_at(url, layout.SNAPSHOTS) if k.endswith(".manifest")]
    assert len(manifests) == 1
    (winner,) = [o.manifest for o in outcomes if o.manifest]
    snapshot_keys = keys_at(url, layout.snapshot_dir(winner.version))
    assert all(k.startswith(winner.location) for k in snapshot_keys), snapshot_keys
    loser = [o for o in outcomes if o.status == "lost_race"]
    if loser:
        assert "another compaction published version" in loser[0].message


def test_a_run_that_dies_before_publishing_publishes_nothing(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = make_store()

    def killed(_m: manifest.Manifest) -> bytes:
        raise KeyboardInterrupt("killed half-way")

    with monkeypatch.context() as patch:
        patch.setattr(manifest, "encode", killed)
        with pytest.raises(KeyboardInterrupt):
            job.run(spark, job.Options(url), quiet)
    left = keys_at(url, layout.SNAPSHOTS)
    assert left and not [k for k in left if k.endswith(".manifest")]  # files, no manifest

    async def readers() -> tuple[object, int]:
        store = open_store(url)
        try:
            newest = await manifest.newest(store)
            start = await history.retained_start(store)
            return newest, start
        finally:
            await store.close()

    assert asyncio.run(readers()) == (None, 1)  # nothing published, nothing truncated
    outcome = job.run(spark, job.Options(url), quiet)  # a later run publishes normally
    assert outcome.status == "published" and outcome.manifest is not None

    async def collect(grace: float) -> gc.GcResult:
        store = open_store(url)
        try:
            return await gc.collect(store, grace_s=grace)
        finally:
            await store.close()

    assert asyncio.run(collect(3600)).abandoned_runs == 0  # it might still be running
    assert asyncio.run(collect(0)).abandoned_runs == 1
    assert all(
        k.startswith(outcome.manifest.location) or k.endswith(".manifest")
        for k in keys_at(url, layout.SNAPSHOTS)
    )


def test_fetch_verifies_checksums() -> None:
    url = make_store(2)
    root = Path(url.removeprefix("dir:"))
    number = 2**64 - 1
    path = next(p for p in root.rglob("*") if p.is_file() and p.name == str(number)[-3:])
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptObject, match="checksum"):
        list(fetch.survey(url, [0]))
    with pytest.raises(CorruptObject, match="checksum"):
        list(fetch.points(url, [0], frozenset()))
    assert batchfile.MAGIC  # the same decoder the services use


def test_snapshot_queries_as_docs_show(spark: SparkSession) -> None:
    """docs/api.md, "Bootstrapping a reader": pyarrow and DuckDB over the manifest's files."""
    import json

    import duckdb
    import pyarrow.parquet as pq

    url = make_store(30)
    outcome = job.run(spark, job.Options(url), quiet)
    assert outcome.manifest is not None
    root = url.removeprefix("dir:")
    with open(f"{root}/snapshots/{outcome.manifest.version:020d}.manifest") as f:
        published = json.load(f)
    files = [f"{root}/{f['path']}" for f in published["files"]]
    table = pq.read_table(files)
    state = dict(
        zip(table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True)
    )
    assert len(state) == outcome.manifest.keys == 28  # k000 and k001 range-deleted
    found = duckdb.execute(
        "SELECT count(*) AS keys, max(version) AS newest FROM read_parquet($files)",
        {"files": files},
    ).fetchall()
    assert found == [(28, outcome.manifest.version - 1)]
    in_range = duckdb.execute(
        "SELECT key, value FROM read_parquet($files) WHERE key >= 'k010' AND key < 'k012'",
        {"files": files},
    ).fetchall()
    assert in_range == [(b"k010", b"v10"), (b"k011", b"v11")]
