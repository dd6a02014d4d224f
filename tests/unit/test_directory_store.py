"""The directory store's durability: what it fsyncs, watched through the real syscalls."""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weaseldb.core import layout
from weaseldb.core.errors import AlreadyExists
from weaseldb.core.types import BatchNumber
from weaseldb.runtime.stores.directory import DirectoryStore


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
    key = layout.batch_key(BatchNumber(2**64 - 1))
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


def test_sync_tree_fsyncs_what_another_writer_left_and_every_parent(
    tmp_path: Path, spy: FsyncSpy
) -> None:
    """What Spark writes through Hadoop's local file system (no fsync at all) is made
    durable before a manifest names it: each file, each directory, each parent to the root."""
    store = DirectoryStore(tmp_path / "db")
    run = store.root / "snapshots" / f"{7:020d}" / "run-1"
    (run / "nested").mkdir(parents=True)
    files = [run / "part-00000.parquet", run / ".part-00000.parquet.crc", run / "nested" / "f"]
    for f in files:
        f.write_bytes(b"data")
    count = asyncio.run(store.sync_tree(f"snapshots/{7:020d}/run-1/"))
    with pytest.raises(ValueError):
        asyncio.run(store.sync_tree("../elsewhere"))
    asyncio.run(store.close())
    expected = {*files, run / "nested", run, run.parent, run.parent.parent, store.root}
    assert set(spy.paths) == expected and count == len(expected)
    # A directory after what it holds.
    assert spy.paths.index(run) > max(spy.paths.index(f) for f in files)


def _no_temporary_names(*args: object, **kwargs: object) -> tuple[int, str]:
    raise AssertionError("a named temporary file was made")


@pytest.mark.parametrize("unnamed", [True, False], ids=["O_TMPFILE", "named-temporary"])
def test_create_only_writes_are_fsynced_whole_before_their_name_appears(
    tmp_path: Path, spy: FsyncSpy, monkeypatch: pytest.MonkeyPatch, unnamed: bool
) -> None:
    """Both ways of writing a batch: from a file with no name (where the file system has
    O_TMPFILE, as here) and from a named temporary file (elsewhere). Either way the data
    is fsynced before the link and the directory after it, a second write of the key is
    refused, and nothing else is left in the directory."""
    from weaseldb.core.errors import AlreadyExists
    from weaseldb.runtime.stores import directory

    if unnamed:
        monkeypatch.setattr(tempfile, "mkstemp", _no_temporary_names)
    else:
        monkeypatch.setattr(directory, "_link_unnamed", None)
    store = DirectoryStore(tmp_path / "db")
    assert store._unnamed_files is unnamed
    key = layout.batch_key(BatchNumber(7))
    asyncio.run(store.put_if_absent(key, b"first"))
    spy.paths.clear()
    with pytest.raises(AlreadyExists):
        asyncio.run(store.put_if_absent(key, b"second"))
    assert asyncio.run(store.get(key)) == b"first"
    asyncio.run(store.put_if_absent(layout.batch_key(BatchNumber(8)), b"next"))
    asyncio.run(store.close())
    batch = store._path(layout.batch_key(BatchNumber(8)))
    assert spy.paths[-1] == batch.parent, "the directory is fsynced after the link"
    assert spy.paths[-2] != batch.parent, "the data is fsynced before it"
    assert sorted(p.name for p in batch.parent.iterdir()) == [
        store._path(key).name,
        batch.name,
    ]


def test_writes_take_unnamed_files_made_ahead_and_close_leaves_none_open(tmp_path: Path) -> None:
    """Creating an inode is the slowest step of a write here, so the store makes a few
    unnamed files after each write for the next ones; closing the store closes them."""
    from weaseldb.runtime.stores import directory

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    async def scenario() -> tuple[int, int, int]:
        store = DirectoryStore(tmp_path / "db")
        if not store._unnamed_files:
            pytest.skip("this file system has no O_TMPFILE")
        before = open_fds()
        await store.put_if_absent(layout.batch_key(BatchNumber(1)), b"first")
        for _ in range(200):  # made in a pool thread
            if len(store._spare_files) == directory.SPARE_FILES:
                break
            await asyncio.sleep(0.01)
        spares = len(store._spare_files)
        ready = {os.fstat(fd).st_ino for fd in store._spare_files}
        await store.put_if_absent(layout.batch_key(BatchNumber(2)), b"second")
        used = int(store._path(layout.batch_key(BatchNumber(2))).stat().st_ino in ready)
        await store.close()
        return spares, used, open_fds() - before

    spares, used, leaked = asyncio.run(scenario())
    assert spares == directory.SPARE_FILES
    assert used == 1, "the second write did not take a file made ahead"
    assert leaked == 0
    assert (
        asyncio.run(DirectoryStore(tmp_path / "db").get(layout.batch_key(BatchNumber(2))))
        == b"second"
    )


class ThreadSpy:
    """Records which thread ran each fsync (then really fsyncs)."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self._fsync = os.fsync

    def __call__(self, fd: int) -> None:
        self.threads.append(threading.get_ident())
        self._fsync(fd)


def test_a_lone_write_runs_on_the_loop_and_writes_asked_together_overlap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The persister's one batch in flight is written on its own thread (no hand-off to a
    pool thread and back); a fence run of many batches still goes to the pool at once."""
    spy = ThreadSpy()
    monkeypatch.setattr(os, "fsync", spy)

    async def scenario() -> tuple[set[int], set[int], int]:
        store = DirectoryStore(tmp_path / "db")
        loop_thread = threading.get_ident()
        await store.put_if_absent(
            layout.batch_key(BatchNumber(2**64 - 2)), b"warm"
        )  # makes directories
        spy.threads.clear()
        await store.put_if_absent(layout.batch_key(BatchNumber(2**64 - 3)), b"alone")
        alone = set(spy.threads)
        spy.threads.clear()
        keys = [layout.batch_key(BatchNumber(2**64 - 10 - n)) for n in range(16)]
        await asyncio.gather(*(store.put_if_absent(k, b"fence") for k in keys))
        together = set(spy.threads)
        await store.close()
        return alone, together, loop_thread

    alone, together, loop_thread = asyncio.run(scenario())
    assert alone == {loop_thread}
    assert loop_thread not in together and len(together) > 1


_NUMBER_TOP = 2**64 - 1
_names = st.sampled_from(["a", "a-b", "a.b", "a0", "ab", "b", "0", "00000000000000000001"])
_keys = st.one_of(
    st.integers(0, 3000).map(lambda i: layout.batch_key(BatchNumber(_NUMBER_TOP - i))),
    st.integers(0, 3000).map(lambda i: layout.batch_key(BatchNumber(5_000_000 + i * 997))),
    st.lists(_names, min_size=1, max_size=3).map(lambda parts: "x/" + "/".join(parts)),
)


@settings(max_examples=40, deadline=None)
@given(
    keys=st.sets(_keys, max_size=60),
    start=st.integers(0, 60),
    limit=st.integers(1, 30),
    prefix=st.sampled_from(["batches/", "x/", "x/a", ""]),
)
def test_listing_matches_plain_sorted_keys(
    keys: set[str], start: int, limit: int, prefix: str
) -> None:
    """LIST on the directory store (split directories, lazily walked) returns what sorting
    the keys as S3 does returns, from any start and with any limit."""
    wanted = sorted(k for k in keys if k.startswith(prefix))
    start_after = wanted[start] if start < len(wanted) else ""
    with tempfile.TemporaryDirectory() as root:
        store = DirectoryStore(root)

        async def scenario() -> list[str]:
            # Files, not directories, where a key is also another key's prefix path: a key
            # like x/a and x/a/b cannot both exist in a directory tree (nor in this test).
            for key in sorted(keys, key=len, reverse=True):
                try:
                    await store.put_if_absent(key, b"")
                except (AlreadyExists, NotADirectoryError, IsADirectoryError):
                    keys.discard(key)
            listed = await store.list(prefix, start_after=start_after, limit=limit)
            await store.close()
            return listed

        listed = asyncio.run(scenario())
    expected = [k for k in sorted(keys) if k.startswith(prefix) and k > start_after]
    assert listed == expected[:limit]
