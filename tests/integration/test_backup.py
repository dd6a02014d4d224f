"""`weaseldb backup` and `weaseldb backup verify` (docs/backup.md, "A second copy") as a
user runs them, on the directory store and on MinIO: incremental copies, a backup that
fell behind the source's garbage collection, corruption found by verify, refusals that
write nothing, and a copy killed half-way that resumes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.logs import BatchSpec, build_log, keys_at, write_log_at
from tests.support.minio import MinioServer
from tests.support.reader import collect_garbage, snapshot_now
from tests.support.waiting import wait_for
from weaseldb.core import layout, manifest
from weaseldb.core.batchfile import Batch
from weaseldb.core.protocol import Delete, Operation, RangeDelete, Write
from weaseldb.core.store import list_all
from weaseldb.core.types import NUMBER_TOP, BatchNumber, Version
from weaseldb.runtime import backup as backup_runtime
from weaseldb.runtime.stores import open_store
from weaseldb.runtime.stores.directory import DirectoryStore
from weaseldb.runtime.stores.dirwalk import split_name


@dataclass
class Result:
    code: int
    line: dict[str, Any]
    stderr: str


def backup(*args: str, env: dict[str, str] | None = None) -> Result:
    done = subprocess.run(
        [sys.executable, "-m", "weaseldb_cli", "backup", *args],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    return Result(done.returncode, json.loads(lines[-1]) if lines else {}, done.stderr)


def copy(source: str, dest: str, *extra: str, env: dict[str, str] | None = None) -> Result:
    return backup("--from", source, "--to", dest, *extra, env=env)


def verify(store: str) -> Result:
    return backup("verify", "--store", store)


def log(batches: int, *, term_change_at: int | None = None) -> list[Batch]:
    """`batches` one-transaction batches of writes, deletes and range deletes; with a
    leader change (and a deposed leader's void batch) at `term_change_at`."""
    specs = []
    for i in range(batches):
        term = 1 if term_change_at is not None and i >= term_change_at else 0
        key = b"k%03d" % (i % 50)
        ops: list[Operation] = [Write(key, b"v%d" % i)]
        if i % 7 == 3:
            ops.append(Delete(b"k%03d" % ((i * 3) % 50)))
        if i % 31 == 5:
            ops.append(RangeDelete(b"k010", b"k015"))
        specs.append(BatchSpec(term, [ops]))
        if i == term_change_at:
            specs.append(BatchSpec(0, [[Write(b"void", b"never")]]))
    return build_log(specs)


def contents(url: str, prefix: str = "") -> dict[str, bytes]:
    async def read() -> dict[str, bytes]:
        store = open_store(url)
        try:
            return {k: await store.get(k) for k in await list_all(store, prefix)}
        finally:
            await store.close()

    return asyncio.run(read())


def assert_copied_faithfully(source: str, dest: str) -> None:
    """Every object of the backup is the source's, byte for byte (where the source still
    has it), and the backup holds no terms, leases, policies or request-id index."""
    ours, theirs = contents(dest), contents(source)
    assert ours
    for key, data in ours.items():
        assert key.split("/")[0] in ("batches", "snapshots", "logstart"), key
        if key in theirs:
            assert theirs[key] == data, key


@pytest.fixture(params=["dir", "minio"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(source URL, backup URL): two directories, or two MinIO buckets (the backup's
    reached through credentials=BACKUP, as a second account's would be)."""
    if request.param == "dir":
        yield f"dir:{tmp_path / 'db'}", f"dir:{tmp_path / 'backup'}"
        return
    minio: MinioServer = request.getfixturevalue("minio")
    os.environ["BACKUP_ACCESS_KEY_ID"] = minio.env["AWS_ACCESS_KEY_ID"]
    os.environ["BACKUP_SECRET_ACCESS_KEY"] = minio.env["AWS_SECRET_ACCESS_KEY"]
    source = minio.store_url(minio.new_bucket())
    yield source, minio.store_url(minio.new_bucket(), "copy") + "&credentials=BACKUP"


def test_a_second_run_copies_only_what_is_new(stores: tuple[str, str]) -> None:
    source, dest = stores
    batches = log(60, term_change_at=30)  # 61 batches with the void one
    write_log_at(source, batches[:40])
    first_snapshot = snapshot_now(source)
    first = copy(source, dest)
    assert first.code == 0, first.stderr
    # 40 batches, one Parquet file and its manifest; no marker: nothing was ever collected.
    assert first.line == {"copied": 42, "skipped": 0, "oldest_version": 0, "newest_version": 39}
    again = copy(source, dest)
    assert again.line == {"copied": 0, "skipped": 0, "oldest_version": 0, "newest_version": 39}

    write_log_at(source, batches[40:])
    second_snapshot = snapshot_now(source)
    assert collect_garbage(source) == second_snapshot.version + 1  # a marker, no batch deleted
    third = copy(source, dest)
    assert third.code == 0, third.stderr
    # The new batches and snapshot; the source's new marker is not copied: the backup keeps
    # the history from the genesis that the source's log start now hides.
    assert third.line == {"copied": 23, "skipped": 0, "oldest_version": 0, "newest_version": 60}
    assert keys_at(dest, layout.LOG_START) == []
    assert_copied_faithfully(source, dest)
    checked = verify(dest)
    assert checked.code == 0, checked.line
    assert checked.line == {"ok": True, "oldest_version": 0, "newest_version": 60, "problems": []}

    # A new backup of the collected source starts at its log start, with its snapshot.
    fresh = dest.replace("/copy?", "/fresh?") if "?" in dest else dest + "-fresh"
    started = copy(source, fresh)
    assert started.code == 0, started.stderr
    assert started.line["oldest_version"] == second_snapshot.version == 60
    assert keys_at(fresh, layout.LOG_START) == keys_at(source, layout.LOG_START)
    assert verify(fresh).line["ok"] is True
    assert first_snapshot.version < second_snapshot.version


def test_a_backup_that_fell_behind_the_sources_gc_says_what_is_lost(tmp_path: Path) -> None:
    source, dest = f"dir:{tmp_path / 'db'}", f"dir:{tmp_path / 'backup'}"
    batches = log(1300)
    write_log_at(source, batches[:100])
    assert copy(source, dest).line["newest_version"] == 100
    # 1200 more, a snapshot, and GC: it deletes all but the newest 1000 batches, among them
    # batch 101 that the backup needs next.
    write_log_at(source, batches[100:])
    snapshot_now(source)
    collect_garbage(source)
    before = contents(dest)
    behind = copy(source, dest)
    assert behind.code == 2
    assert "fell behind the source's retention" in behind.stderr
    assert "versions 101..1300 are lost to it" in behind.stderr
    assert "--keep-history" in behind.stderr and "Traceback" not in behind.stderr
    assert contents(dest) == before  # nothing written: the snapshot is not copied either
    assert verify(dest).line == {
        "ok": True, "oldest_version": 0, "newest_version": 100, "problems": [],
    }  # fmt: skip


def test_verify_finds_a_flipped_byte_and_a_missing_parquet_file(tmp_path: Path) -> None:
    source, dest = f"dir:{tmp_path / 'db'}", tmp_path / "backup"
    write_log_at(source, log(30))
    snapshot = snapshot_now(source)
    assert copy(source, f"dir:{dest}").code == 0
    key = layout.batch_key(BatchNumber(NUMBER_TOP - 19))  # the batch of version 20
    batch = dest / "batches" / split_name(key.removeprefix("batches/"))
    assert batch.exists()
    data = bytearray(batch.read_bytes())
    data[-1] ^= 0x01
    batch.write_bytes(bytes(data))
    flipped = verify(f"dir:{dest}")
    assert flipped.code == 1
    assert flipped.line["ok"] is False and flipped.line["newest_version"] == 19
    assert any("checksum mismatch" in p for p in flipped.line["problems"]), flipped.line

    batch.write_bytes(bytes(data[:-1]) + bytes([data[-1] ^ 0x01]))  # repaired
    assert verify(f"dir:{dest}").code == 0
    (dest / snapshot.files[0].path).unlink()
    missing = verify(f"dir:{dest}")
    assert missing.code == 1
    assert (
        f"snapshot {snapshot.version}: {snapshot.files[0].path} is missing"
        in (missing.line["problems"])
    )


def test_an_object_with_other_bytes_in_the_backup_is_an_error(tmp_path: Path) -> None:
    source, dest = f"dir:{tmp_path / 'db'}", f"dir:{tmp_path / 'backup'}"
    write_log_at(source, log(10))
    write_log_at(dest, build_log([BatchSpec(0, [[Write(b"other", b"db")]])]))  # another TOP
    refused = copy(source, dest)
    assert refused.code == 2
    assert "already exists in the backup with different content" in refused.stderr


def test_refusals_write_nothing(tmp_path: Path, minio: MinioServer) -> None:
    dest = tmp_path / "backup"
    empty = copy(f"dir:{tmp_path / 'nothing'}", f"dir:{dest}")
    assert empty.code == 2 and "holds no database" in empty.stderr
    assert not dest.exists() or not any(dest.rglob("*"))

    source = minio.store_url(minio.new_bucket())
    write_log_at(source, log(5))
    bucket = minio.new_bucket()
    env = {**os.environ, "BAD_ACCESS_KEY_ID": "nobody", "BAD_SECRET_ACCESS_KEY": "wrong-secret"}
    for src, dst in (
        (source + "&credentials=BAD", minio.store_url(bucket)),
        (source, minio.store_url(bucket) + "&credentials=BAD"),
    ):
        refused = copy(src, dst, env=env)
        assert refused.code == 2, refused
        assert refused.stderr.startswith("weaseldb backup: error: ")
        assert "Traceback" not in refused.stderr
        assert keys_at(minio.store_url(bucket)) == []
    unreadable = backup("verify", "--store", source + "&credentials=BAD", env=env)
    assert unreadable.code == 2 and "weaseldb backup: error: " in unreadable.stderr
    unset = copy(source + "&credentials=NOSUCH", minio.store_url(bucket))
    assert unset.code == 2 and "NOSUCH_ACCESS_KEY_ID" in unset.stderr
    assert verify(f"dir:{tmp_path / 'nothing'}").line["problems"] == ["the store holds no backup"]


def test_a_backup_killed_half_way_resumes(tmp_path: Path) -> None:
    source, dest = f"dir:{tmp_path / 'db'}", tmp_path / "backup"
    write_log_at(source, log(50))
    snapshot_now(source)
    collect_garbage(source)  # a marker at version 50
    write_log_at(source, log(1500)[50:])
    process = subprocess.Popen(
        [sys.executable, "-m", "weaseldb_cli", "backup", "--from", source, "--to", f"dir:{dest}",
         "--parallelism", "4"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(lambda: len(keys_at(f"dir:{dest}", layout.BATCHES)) >= 200, 120, "copying")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    held = len(keys_at(f"dir:{dest}", layout.BATCHES))
    assert held < 1450, "the copy finished before it was killed"
    resumed = copy(source, f"dir:{dest}")
    assert resumed.code == 0, resumed.stderr
    assert resumed.line["copied"] + resumed.line["skipped"] >= 1450 - held
    assert (resumed.line["oldest_version"], resumed.line["newest_version"]) == (50, 1500)
    assert_copied_faithfully(source, f"dir:{dest}")
    assert verify(f"dir:{dest}").line == {
        "ok": True, "oldest_version": 50, "newest_version": 1500, "problems": [],
    }  # fmt: skip
    assert len(keys_at(f"dir:{dest}", layout.BATCHES)) == 1450


class CollectedWhileRead(DirectoryStore):
    """A source whose GC deletes a snapshot right after the copier read its manifest."""

    def __init__(self, root: Path, version: int) -> None:
        super().__init__(root)
        self.manifest_key = layout.manifest_key(Version(version))

    async def get(self, key: str) -> bytes:
        data = await super().get(key)
        if key == self.manifest_key:
            published = manifest.decode(data)
            await self.delete(key)
            for entry in published.files:
                await self.delete(entry.path)
        return data


def test_a_snapshot_collected_mid_copy_is_skipped_not_half_published(tmp_path: Path) -> None:
    source_url, dest_url = f"dir:{tmp_path / 'db'}", f"dir:{tmp_path / 'backup'}"
    write_log_at(source_url, log(20))
    snapshot = snapshot_now(source_url)

    async def run() -> dict[str, Any]:
        source = CollectedWhileRead(tmp_path / "db", snapshot.version)
        dest = open_store(dest_url)
        try:
            return await backup_runtime.copy(source, dest)
        finally:
            await source.close()
            await dest.close()

    line = asyncio.run(run())
    assert line == {"copied": 20, "skipped": 0, "oldest_version": 0, "newest_version": 20}
    assert keys_at(dest_url, layout.SNAPSHOTS) == []  # neither its file nor its manifest
    assert verify(dest_url).line["ok"] is True
