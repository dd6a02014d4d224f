"""The directory store's durability: what it fsyncs, watched through the real syscalls."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from weaseldb import layout
from weaseldb.blobstore.directory import DirectoryStore


class FsyncSpy:
    """Records the path behind every fd passed to os.fsync (then really fsyncs it)."""

    def __init__(self) -> None:
        self.paths: list[Path] = []
        self._fsync = os.fsync

    def __call__(self, fd: int) -> None:
        self.paths.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        self._fsync(fd)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[FsyncSpy]:
    recorder = FsyncSpy()
    monkeypatch.setattr(os, "fsync", recorder)
    yield recorder


def test_every_new_directory_and_its_parent_is_fsynced(tmp_path: Path, spy: FsyncSpy) -> None:
    store = DirectoryStore(tmp_path / "db")
    key = layout.batch_key(2**64 - 1)
    asyncio.run(store.put_if_absent(key, b"batch"))
    asyncio.run(store.close())

    batch_file = store._path(key)
    created = [batch_file.parent, batch_file.parent.parent, store.root / "batches", store.root]
    synced = set(spy.paths)
    for directory in created:
        assert directory in synced, f"{directory} was created but never fsynced"
        assert directory.parent in synced, f"the entry for {directory} was never fsynced"
    # The file itself, and its directory entry after the link that publishes it.
    assert spy.paths.index(batch_file.parent) < len(spy.paths) - 1
    assert spy.paths[-1] == batch_file.parent


def test_a_directory_made_by_someone_else_is_still_fsynced_once(
    tmp_path: Path, spy: FsyncSpy
) -> None:
    """A directory that already exists (a concurrent writer, or a crash before its fsync)
    may not be durable yet: the store fsyncs it before relying on it, once per process."""
    root = tmp_path / "db"
    (root / "retention").mkdir(parents=True)
    store = DirectoryStore(root)
    asyncio.run(store.put(layout.retention_key("a"), b"{}"))
    asyncio.run(store.put(layout.retention_key("b"), b"{}"))
    asyncio.run(store.close())
    assert spy.paths.count(root / "retention") == 1 + 2  # once as new, then after each write
