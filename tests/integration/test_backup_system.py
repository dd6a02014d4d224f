"""A backup of a running database (docs/backup.md, "A second copy"): `weaseldb backup`
runs while a real `weaseldb up` takes commits and garbage collection deletes batches and
old snapshots under it; the backup then holds the whole history, verifies, and after the
source's prefix is deleted entirely `weaseldb restore` rebuilds the state from it."""

from __future__ import annotations

import asyncio
import base64
import io
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.integration.test_backup import copy, verify
from tests.support.cluster import ProcessSet, free_port_block
from tests.support.logs import keys_at
from tests.support.reader import read_snapshot
from tests.support.waiting import wait_for
from weaseldb.core import gc, history, layout, logstart, manifest
from weaseldb.core.fold import reference_fold
from weaseldb.core.holdings import holdings
from weaseldb.core.manifest import Manifest, SnapshotFile, SourceBatches
from weaseldb.core.timestamps import now_iso
from weaseldb.core.types import NUMBER_TOP, BatchNumber
from weaseldb.runtime.stores import open_store


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Writer(threading.Thread):
    """Commits one transaction after another (writes, deletes, range deletes) until told
    to stop: one batch each, so the log grows past what GC keeps."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.count, self.done = url, 0, threading.Event()

    def reached(self, count: int) -> Callable[[], bool]:
        return lambda: self.count >= count

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while not self.done.is_set():
                i = self.count
                ops = [{"type": "write", "key": b64(b"k%02d" % (i % 97)), "value": b64(b"%d" % i)}]
                if i % 5 == 0:
                    ops.append({"type": "delete", "key": b64(b"k%02d" % (i * 7 % 97))})
                if i % 37 == 0:
                    ops.append({"type": "range_delete", "begin": b64(b"k20"), "end": b64(b"k25")})
                answer = client.post("/v1/commit", json={"operations": ops})
                assert answer.status_code == 200, answer.text
                self.count += 1


def publish_snapshot(url: str, run: str) -> Manifest:
    """What the compaction job would publish: the log start's snapshot (or the empty state)
    with every valid batch after it folded in."""

    async def build() -> Manifest:
        store = open_store(url)
        try:
            start = await logstart.newest(store)
            base = [] if start is None else read_snapshot_rows(url, start.version)
            batches = [b async for b in history.valid_batches(store)]
            state = reference_fold(base, [t for b in batches for t in b.transactions])
            last = batches[-1]
            sink = io.BytesIO()
            pq.write_table(
                pa.table({
                    "key": pa.array(list(state.keys()), pa.binary()),
                    "value": pa.array([v for v, _ in state.values()], pa.binary()),
                    "version": pa.array([m for _, m in state.values()], pa.int64()),
                }),
                sink,
            )  # fmt: skip
            data, location = sink.getvalue(), f"{layout.snapshot_dir(last.last_version)}{run}/"
            path = f"{location}part-00000.parquet"
            await store.put_if_absent(path, data)
            published = Manifest(
                format=manifest.FORMAT_VERSION, version=last.last_version, batch=last.batch,
                term=last.term, created_at=now_iso(6), location=location,
                files=[SnapshotFile(path, len(data), len(state), "", "")], keys=len(state),
                bytes=len(data), source_batches=SourceBatches(None, None, len(batches)),
                previous=None if start is None else start.version,
            )  # fmt: skip
            await store.put_if_absent(published.key, manifest.encode(published))
            return published
        finally:
            await store.close()

    return asyncio.run(build())


def read_snapshot_rows(url: str, version: int) -> list[tuple[bytes, bytes, int]]:
    # read_snapshot runs its own event loop: in a thread of its own from inside ours.
    rows: list[tuple[bytes, bytes, int]] = []
    thread = threading.Thread(target=lambda: rows.extend(read_snapshot(url, version)))
    thread.start()
    thread.join()
    return rows


def collect(url: str) -> gc.GcResult:
    async def run() -> gc.GcResult:
        store = open_store(url)
        try:
            return await gc.collect(store, grace_s=0)
        finally:
            await store.close()

    return asyncio.run(run())


def newest_version(url: str) -> int:
    async def run() -> int:
        store = open_store(url)
        try:
            held = await holdings(store)
            assert held is not None
            return held.newest_version
        finally:
            await store.close()

    return asyncio.run(run())


def backup_state(url: str) -> dict[bytes, tuple[bytes, int]]:
    """The reference fold of the backup's whole log (it starts at the genesis)."""

    async def run() -> dict[bytes, tuple[bytes, int]]:
        store = open_store(url)
        try:
            return dict(reference_fold([], await history.committed_transactions(store)))
        finally:
            await store.close()

    return asyncio.run(run())


def batches_reach(url: str, count: int) -> Callable[[], bool]:
    return lambda: len(keys_at(url, layout.BATCHES)) >= count


@pytest.mark.slow
def test_backup_while_the_database_runs_and_gc_deletes_then_restore(
    tmp_path: Path, run_dir: Path
) -> None:
    source, dest = f"dir:{tmp_path / 'db'}", f"dir:{tmp_path / 'backup'}"
    cluster = ProcessSet(source, free_port_block(), run_dir).start()
    writer = Writer(cluster.url)
    writer.start()
    try:
        wait_for(writer.reached(100), 120, "100 commits")
        assert copy(source, dest).code == 0  # from the genesis: nothing collected yet
        deleted, killed = 0, False
        for round_ in range(1, 5):
            wait_for(writer.reached(400 * round_), 300, f"{400 * round_} commits")
            publish_snapshot(source, f"run{round_}")
            held = len(keys_at(dest, layout.BATCHES))
            running = subprocess.Popen(
                [sys.executable, "-m", "weaseldb_cli", "backup", "--from", source, "--to", dest,
                 "--parallelism", "2"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            if round_ == 2:  # killed half-way: the next round resumes it
                wait_for(batches_reach(dest, held + 20), 120, "copying")
                running.kill()
                running.communicate(timeout=30)
                killed = running.returncode == -signal.SIGKILL
                continue
            deleted += collect(source).batches  # while the copy runs
            _, err = running.communicate(timeout=300)
            assert running.returncode == 0, err
        assert deleted > 0, "GC never deleted a batch: the test raced nothing"
        assert killed, "the second round's copy finished before it was killed"
        writer.done.set()
        writer.join(60)
    finally:
        writer.done.set()
        assert cluster.stop() == 0, cluster.log()
    final = copy(source, dest)
    assert final.code == 0, final.stderr
    newest = newest_version(source)
    assert final.line["newest_version"] == newest == writer.count
    assert layout.batch_key(BatchNumber(NUMBER_TOP)) not in keys_at(
        source, layout.BATCHES
    )  # collected
    assert verify(dest).line == {
        "ok": True, "oldest_version": 0, "newest_version": newest, "problems": [],
    }  # fmt: skip
    expected = backup_state(dest)
    source_snapshot = publish_snapshot(source, "final")
    assert source_snapshot.version == newest
    assert {k: (v, m) for k, v, m in read_snapshot(source, newest)} == expected

    # The source is gone; the backup restores its newest state.
    shutil.rmtree(tmp_path / "db")
    restored = f"dir:{tmp_path / 'restored'}"
    done = subprocess.run(
        [sys.executable, "-m", "weaseldb_cli", "restore", "--from", dest, "--into", restored,
         "--master", "local[1]"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1].startswith(f"restored version {newest} ")
    assert {k: (v, m) for k, v, m in read_snapshot(restored, newest)} == expected
