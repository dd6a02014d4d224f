"""One contract for every blob store: memory, directory, and S3 against a real MinIO."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.support.minio import MinioServer
from weaseldb.core import layout
from weaseldb.core.errors import AlreadyExists, NotFound
from weaseldb.core.store import BlobStore
from weaseldb.core.types import BatchNumber, Term
from weaseldb.runtime.stores import open_store
from weaseldb.runtime.stores.directory import DirectoryStore
from weaseldb.runtime.stores.memory import MemoryStore

T = TypeVar("T")


@pytest.fixture(params=["memory", "dir", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BlobStore]:
    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "dir":
        yield DirectoryStore(tmp_path / "store")
    else:
        minio: MinioServer = request.getfixturevalue("minio")
        yield open_store(minio.store_url(minio.new_bucket(), "db"))


def run(store: BlobStore, coro: Coroutine[Any, Any, T]) -> T:
    """`coro`, then the store closed, in one event loop: the S3 store's HTTP session
    belongs to the loop that opened it, and an unclosed one leaks its sockets."""

    async def and_close() -> T:
        try:
            return await coro
        finally:
            await store.close()

    return asyncio.run(and_close())


def test_put_if_absent_is_create_only(store: BlobStore) -> None:
    async def scenario() -> None:
        await store.put_if_absent("batches/00000000000000000009", b"first")
        with pytest.raises(AlreadyExists):
            await store.put_if_absent("batches/00000000000000000009", b"second")
        assert await store.get("batches/00000000000000000009") == b"first"

    run(store, scenario())


def test_get_missing_is_not_found(store: BlobStore) -> None:
    with pytest.raises(NotFound):
        run(store, store.get("batches/00000000000000000001"))


def test_list_is_ascending_newest_batch_first_with_limit_and_start_after(store: BlobStore) -> None:
    numbers = [2**64 - 1, 2**64 - 2, 5000, 4999, 10_000_000]

    async def scenario() -> None:
        for n in numbers:
            await store.put_if_absent(layout.batch_key(BatchNumber(n)), b"x")
        await store.put_if_absent(layout.term_key(Term(7)), b"t")
        listed = await store.list(layout.BATCHES)
        assert listed == [layout.batch_key(BatchNumber(n)) for n in sorted(numbers)]
        assert await store.list(layout.BATCHES, limit=2) == listed[:2]
        assert await store.list(layout.BATCHES, start_after=listed[1]) == listed[2:]
        assert await store.list(layout.TERMS) == [layout.term_key(Term(7))]
        assert await store.list("nothing/") == []

    run(store, scenario())


def test_put_overwrites_and_delete_removes(store: BlobStore) -> None:
    async def scenario() -> None:
        await store.put("retention/p1", b"a")
        await store.put("retention/p1", b"b")
        assert await store.get("retention/p1") == b"b"
        await store.delete("retention/p1")
        await store.delete("retention/p1")  # deleting twice is fine
        assert await store.list("retention/") == []

    run(store, scenario())


def test_snapshot_keys_sort_like_s3(store: BlobStore) -> None:
    keys = ["snapshots/00000000000000000123.manifest", "snapshots/00000000000000000123/part-0"]

    async def scenario() -> None:
        for key in reversed(keys):
            await store.put_if_absent(key, b"x")
        assert await store.list("snapshots/") == sorted(keys)

    run(store, scenario())


def test_directory_store_lists_in_order_across_split_directories(tmp_path: Path) -> None:
    """Numbered keys live in directories of at most 1,000 (split 14/3/3 digits), so a
    listing must walk directory boundaries in key order. 2**64-1 ends in 551615: 1700
    batches counting down from it span the directories 551, 550 and 549."""
    store = DirectoryStore(tmp_path)
    top = 2**64 - 1
    numbers = [top - i for i in range(1700)]

    async def scenario() -> None:
        for n in numbers:
            await store.put_if_absent(layout.batch_key(BatchNumber(n)), b"")
        listed = await store.list(layout.BATCHES, limit=1000)
        assert listed == [layout.batch_key(BatchNumber(n)) for n in sorted(numbers)[:1000]]
        after = await store.list(layout.BATCHES, start_after=listed[-1], limit=1000)
        assert after == [layout.batch_key(BatchNumber(n)) for n in sorted(numbers)[1000:]]

    run(store, scenario())
    (top_dir,) = list((tmp_path / "batches").iterdir())
    leaves: list[Path] = list(top_dir.iterdir())
    assert sorted(leaf.name for leaf in leaves) == ["549", "550", "551"]
    assert max(len(list(leaf.iterdir())) for leaf in leaves) <= 1000


def test_get_range_reads_a_slice_and_stops_at_the_end(store: BlobStore) -> None:
    async def scenario() -> None:
        await store.put_if_absent("requestids/x", bytes(range(100)))
        assert await store.get_range("requestids/x", 10, 5) == bytes(range(10, 15))
        assert await store.get_range("requestids/x", 0, 1 << 20) == bytes(range(100))
        assert await store.get_range("requestids/x", 95, 50) == bytes(range(95, 100))
        with pytest.raises(NotFound):
            await store.get_range("requestids/missing", 0, 10)

    run(store, scenario())
