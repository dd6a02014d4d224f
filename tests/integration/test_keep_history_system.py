"""The keep-history window end to end (slow tier): commits through a real `weaseldb up`,
two `weaseldb compact` runs (Spark local[*]), the second with GC, `--keep-history` and
`--keep-history-versions`; `/v1/snapshots` shows the restorable window, the change stream
still serves the window, and every version in it rebuilds from the snapshot GC kept plus
the batches after it (the reference fold of the whole history up to that version)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from tests.integration.test_compaction_system import commit_many, compact, operation
from tests.support.cluster import ProcessSet, free_port_block, short_run_dir
from tests.support.sse import Subscription
from tests.support.waiting import wait_for
from weaseldb.core import manifest
from weaseldb.core.batchfile import Transaction
from weaseldb.core.fold import reference_fold
from weaseldb.core.timestamps import parse_iso
from weaseldb.core.types import RequestId, Version
from weaseldb.runtime.stores import open_store

pytestmark = pytest.mark.slow

Rows = list[tuple[bytes, bytes, int]]


@pytest.fixture
def database(tmp_path: Path) -> Iterator[tuple[str, ProcessSet]]:
    store_url = f"dir:{tmp_path / 'data'}"
    cluster = ProcessSet(store_url, free_port_block(), short_run_dir()).start()
    yield store_url, cluster
    assert cluster.stop() == 0, cluster.log()


def streamed(url: str, after: int, upto: int) -> list[Transaction]:
    sub = Subscription(url, {"after": str(after)}).start()
    try:
        wait_for(lambda: sub.checkpoints and sub.checkpoints[-1] >= upto, 60, "catch-up")
    finally:
        sub.stop()
    return [
        Transaction(Version(int(t["version"])), RequestId(t["request_id"]), 0,
                    [operation(o) for o in t["operations"]])
        for t in sub.transactions if int(t["version"]) <= upto
    ]  # fmt: skip


def snapshot_rows(store_url: str, version: int) -> Rows:
    async def read() -> Rows:
        store = open_store(store_url)
        try:
            published = await manifest.read(store, Version(version))
            rows: Rows = []
            for f in published.files:
                table = pq.read_table(io.BytesIO(await store.get(f.path)))
                rows += [(r["key"], r["value"], r["version"]) for r in table.to_pylist()]
            return rows
        finally:
            await store.close()

    return asyncio.run(read())


def window(url: str) -> dict[str, object]:
    answer = httpx.get(f"{url}/v1/snapshots", timeout=30).json()
    restorable: dict[str, object] = answer["restorable"]
    return restorable


def test_keep_history_keeps_the_window_restorable(database: tuple[str, ProcessSet]) -> None:
    store_url, cluster = database
    url = cluster.url
    first = commit_many(url, 30, seed=1)
    compact(store_url)
    last = commit_many(url, 60, seed=2)
    history = streamed(url, 0, last)  # before GC truncates the stream's history
    fresh = window(url)
    assert (fresh["oldest_version"], fresh["oldest_time"]) == (0, None)  # nothing collected
    assert fresh["newest_version"] == last

    # Both bounds: the last 45 versions (last - 45 lies between the two snapshots) and the
    # last 2 s (the first snapshot's version was committed a Spark run ago): the cut is the
    # first snapshot, not the newest, which this run publishes.
    output = compact(store_url, "--gc", "--keep-history", "2s", "--keep-history-versions", "45")
    assert f"gc: log starts after version {first} " in output
    wait_for(lambda: window(url)["oldest_version"] == first, 30, "the window read again")
    held = window(url)
    assert held["oldest_version"] == first and held["newest_version"] == last
    assert isinstance(held["oldest_time"], str) and isinstance(held["newest_time"], str)
    assert parse_iso(held["oldest_time"]) <= parse_iso(held["newest_time"])
    assert httpx.get(f"{url}/v1/subscribe", params={"after": str(first - 1)}).status_code == 410

    # Every version in the window: the kept snapshot, then the stream after it.
    rows = snapshot_rows(store_url, first)
    kept = streamed(url, first, last)
    for version in range(first, last + 1):
        restored = reference_fold(rows, (t for t in kept if t.version <= version))
        assert restored == reference_fold([], (t for t in history if t.version <= version))
