"""Compaction end to end through the CLI (slow tier): commits through the API, `weaseldb
compact` (its own Spark local[*]), the Parquet read with pyarrow equals the state folded
from `/v1/subscribe?after=0`; then `--gc`, `/v1/snapshots`, the 410 that names the
snapshot and a subscriber bootstrapping from it. On the directory store (`file://`) and
on MinIO (S3A for the Parquet side)."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from tests.support.cluster import ProcessSet, free_port_block, short_run_dir
from tests.support.minio import MinioServer
from tests.support.sse import Subscription
from tests.support.waiting import wait_for
from weaseldb.core import manifest
from weaseldb.core.batchfile import Transaction
from weaseldb.core.fold import reference_fold
from weaseldb.core.protocol import Delete, Operation, RangeDelete, Write
from weaseldb.core.types import Version
from weaseldb.runtime.stores import open_store

pytestmark = pytest.mark.slow


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def random_operations(rng: random.Random) -> list[dict[str, str]]:
    ops = []
    for _ in range(rng.randint(1, 4)):
        key = b"key-%03d" % rng.randrange(60)
        kind = rng.random()
        if kind < 0.7:
            ops.append({"type": "write", "key": b64(key), "value": b64(rng.randbytes(8))})
        elif kind < 0.9:
            ops.append({"type": "delete", "key": b64(key)})
        else:
            end = b"key-%03d" % (int(key[4:]) + rng.randint(1, 6))
            ops.append({"type": "range_delete", "begin": b64(key), "end": b64(end)})
    return ops


def commit_many(url: str, count: int, seed: int) -> int:
    rng = random.Random(seed)
    last = 0
    with httpx.Client(timeout=30) as client:
        for _ in range(count):
            answer = client.post(f"{url}/v1/commit", json={"operations": random_operations(rng)})
            assert answer.json()["status"] == "committed", answer.text
            last = int(answer.json()["version"])
    return last


def operation(op: dict[str, str]) -> Operation:
    raw = {k: base64.b64decode(v) for k, v in op.items() if k != "type"}
    if op["type"] == "write":
        return Write(raw["key"], raw["value"])
    if op["type"] == "delete":
        return Delete(raw["key"])
    return RangeDelete(raw["begin"], raw["end"])


def subscribed_state(url: str, upto: int, after: int = 0) -> dict[bytes, tuple[bytes, int]]:
    """The state folded from the change stream, up to version `upto`."""
    sub = Subscription(url, {"after": str(after)}).start()
    try:
        wait_for(lambda: sub.checkpoints and sub.checkpoints[-1] >= upto, 60, "catch-up")
    finally:
        sub.stop()
    txs = [
        Transaction(
            Version(int(t["version"])), t["request_id"], 0, [operation(o) for o in t["operations"]]
        )
        for t in sub.transactions
        if int(t["version"]) <= upto
    ]
    return dict(reference_fold([], txs))


def compact(store_url: str, *extra: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "weaseldb_cli", "compact", "--store", store_url, *extra],
        capture_output=True, text=True, timeout=600, env=os.environ,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def published(store_url: str) -> tuple[manifest.Manifest, dict[bytes, tuple[bytes, int]]]:
    async def read() -> tuple[manifest.Manifest, dict[bytes, tuple[bytes, int]]]:
        store = open_store(store_url)
        try:
            newest = await manifest.newest(store)
            assert newest is not None
            rows: list[dict[str, Any]] = []
            for f in newest.files:
                data = await store.get(f.path)
                assert len(data) == f.size
                table = pq.read_table(io.BytesIO(data))
                assert table.num_rows == f.rows
                assert table.schema.names == ["key", "value", "version"]
                rows += table.to_pylist()
            return newest, {r["key"]: (r["value"], r["version"]) for r in rows}
        finally:
            await store.close()

    return asyncio.run(read())


@pytest.fixture(params=["dir", "minio"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "dir":
        return f"dir:{tmp_path / 'data'}"
    server: MinioServer = request.getfixturevalue("minio")
    bucket = server.new_bucket()
    return f"s3://{bucket}/db?endpoint={server.endpoint}&region=us-east-1"


@pytest.fixture
def database(store_url: str) -> Iterator[ProcessSet]:
    run = short_run_dir()
    cluster = ProcessSet(store_url, free_port_block(), run).start()
    yield cluster
    assert cluster.stop() == 0, cluster.log()


def test_compact_equals_the_change_stream_then_gc_and_bootstrap(
    store_url: str, database: ProcessSet
) -> None:
    url = database.url
    last = commit_many(url, 150, seed=7)

    output = compact(store_url)

    snapshot, state = published(store_url)
    assert "read " in output and "folding " in output  # progress lines
    summary = output.strip().splitlines()[-1]
    assert summary.startswith(f"compaction: published version {snapshot.version}: ")
    assert f"{snapshot.keys} keys, {snapshot.bytes} bytes" in summary
    assert snapshot.version == last  # everything committed was durable before it ran
    assert state == subscribed_state(url, snapshot.version)
    assert snapshot.keys == len(state)
    listed = httpx.get(f"{url}/v1/snapshots").json()["snapshots"]
    assert [(s["version"], s["location"], s["keys"]) for s in listed] == [
        (snapshot.version, snapshot.location, snapshot.keys)
    ]

    # More commits, a second snapshot folded onto the first, then garbage collection.
    last = commit_many(url, 40, seed=8)
    streamed = subscribed_state(url, last)  # before GC truncates the stream's history
    output = compact(store_url, "--gc")
    second, state = published(store_url)
    assert (second.previous, second.version) == (snapshot.version, last)
    assert state == streamed
    assert "gc: log starts after version" in output

    # History at or below the snapshot is gone for readers: 410 names the snapshot...
    gone = httpx.get(f"{url}/v1/subscribe", params={"after": "0"})
    assert gone.status_code == 410
    body = gone.json()
    assert body["error"] == "log_truncated" and body["oldest_version"] == second.version + 1
    assert body["snapshot"]["version"] == second.version
    # ...and a reader bootstraps: the snapshot, then the stream after its version.
    later = commit_many(url, 10, seed=9)
    sub = Subscription(url, {"after": str(second.version)}).start()
    wait_for(lambda: sub.versions() and sub.versions()[-1] == later, 60, "stream after snapshot")
    sub.stop()
    assert sub.versions()[0] == second.version + 1
