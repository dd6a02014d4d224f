"""A store that refuses writes for space (docs/architecture.md, "When the store is full"):
the directory store on a real, full tmpfs and the S3 store's error codes become
`StoreFull`, a refused write leaves nothing behind, and the persister's engine waits a full
store out instead of giving up its term."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from services.persister.engine import Engine
from services.persister.fullness import Fullness
from services.persister.leadership import claim, open_term
from services.persister.release import Slot
from tests.support.tmpfs import SmallFilesystem, can_mount, small_filesystem
from weaseldb.core import layout, recovery
from weaseldb.core.config import PersisterConfig
from weaseldb.core.errors import NotFound, StoreFull, TransientError
from weaseldb.core.protocol import CommitEntry, CommitState, RingEntry, Write
from weaseldb.core.types import BatchNumber, RequestId, Version
from weaseldb.runtime.stores.directory import SPARE_FILES, DirectoryStore
from weaseldb.runtime.stores.s3 import _translate

needs_mount = pytest.mark.skipif(not can_mount(), reason="mounting a tmpfs needs root")
FAST = PersisterConfig(retry_base_delay_ms=1, batch_timeout_ms=1, max_in_flight_requests=4)
BATCH = b"b" * 200_000  # larger than the inline limit: the pool path
SMALL = b"s" * 1000  # the inline path


@pytest.fixture
def full_fs(tmp_path: Path) -> Iterator[SmallFilesystem]:
    with small_filesystem(tmp_path / "fs", 8) as fs:
        yield fs


def leftovers(root: Path) -> list[str]:
    """Every file under `root` but the filler: objects and temporary files alike."""
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != ".filler"
    )


@needs_mount
@pytest.mark.parametrize("data", [SMALL, BATCH], ids=["inline", "pool"])
@pytest.mark.parametrize("unnamed", [True, False], ids=["unnamed-file", "named-temp-file"])
def test_a_write_refused_for_space_is_store_full_and_leaves_nothing(
    full_fs: SmallFilesystem, data: bytes, unnamed: bool
) -> None:
    async def scenario() -> None:
        store = DirectoryStore(full_fs.path / "db")
        store._unnamed_files = store._unnamed_files and unnamed
        await store.put_if_absent("batches/first", b"x")  # directories and spares exist
        before = leftovers(full_fs.path)
        full_fs.fill()
        key = layout.batch_key(BatchNumber(2**64 - 7))
        with pytest.raises(StoreFull):
            await store.put_if_absent(key, data)
        with pytest.raises(StoreFull):
            await store.put("retention/policy", data)
        assert leftovers(full_fs.path) == before  # no partial object, no temporary file
        assert await store.list("batches/") == ["batches/first"]
        full_fs.free()
        await store.put_if_absent(key, data)  # the same write, once space is back
        assert await store.get(key) == data
        await store.close()

    asyncio.run(scenario())


@needs_mount
def test_a_write_with_room_for_part_of_it_leaves_no_torn_object(
    full_fs: SmallFilesystem,
) -> None:
    async def scenario() -> None:
        store = DirectoryStore(full_fs.path / "db")
        await store.put_if_absent("batches/first", b"x")
        full_fs.fill(leave_kb=64)
        with pytest.raises(StoreFull):
            await store.put_if_absent("batches/big", b"z" * 1_000_000)
        with pytest.raises(NotFound):
            await store.get("batches/big")
        assert await store.list("batches/") == ["batches/first"]
        await store.close()

    asyncio.run(scenario())
    assert leftovers(full_fs.path) == ["db/batches/first"]


@needs_mount
def test_failed_writes_use_up_no_spare_files_nor_descriptors(full_fs: SmallFilesystem) -> None:
    """Each failed write closes the unnamed file it took (its pages go with it); no
    descriptor is left open however long the store stays full."""

    async def scenario() -> tuple[int, int, int]:
        store = DirectoryStore(full_fs.path / "db")
        await store.put_if_absent("batches/first", b"x")
        await asyncio.sleep(0.2)  # the spare files are made in a pool thread
        open_before = len(os.listdir("/proc/self/fd"))
        full_fs.fill()
        for n in range(3 * SPARE_FILES):
            with pytest.raises(StoreFull):
                await store.put_if_absent(f"batches/{n}", SMALL)
        open_after = len(os.listdir("/proc/self/fd"))
        full_fs.free()
        await store.put_if_absent("batches/again", SMALL)
        await asyncio.sleep(0.2)
        spares = len(store._spare_files)
        await store.close()
        return open_before, open_after, spares

    before, after, spares = asyncio.run(scenario())
    assert after <= before
    assert spares == SPARE_FILES  # refilled once writes succeed again


def client_error(status: int, code: str) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "PutObject",
    )


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (507, "XMinioStorageFull"),
        (507, "InsufficientStorage"),
        (507, ""),
        (400, "XMinioAdminBucketQuotaExceeded"),
        (403, "QuotaExceeded"),
    ],
)
def test_s3_refusals_for_space_or_quota_are_store_full(status: int, code: str) -> None:
    assert isinstance(_translate(client_error(status, code), "k"), StoreFull)


def test_other_s3_server_errors_stay_transient() -> None:
    error = _translate(client_error(503, "SlowDown"), "k")
    assert isinstance(error, TransientError) and not isinstance(error, StoreFull)


def accepted(version: int) -> CommitEntry:
    entry = CommitEntry(
        0, version, RequestId(f"req-{version:016d}"), [], [Write(b"k", b"v" * 2000)]
    )
    entry.state, entry.version = CommitState.ACCEPTED, Version(version)
    return entry


@needs_mount
def test_the_engine_waits_a_full_store_out_and_writes_the_same_batches(
    full_fs: SmallFilesystem,
) -> None:
    """Refused for space, a batch is tried again until it lands: the term holds, nothing
    fails, the answers go out in order once space returns, and the store says full (once)
    meanwhile."""
    changes: list[bool] = []

    async def scenario() -> tuple[list[Slot], list[BaseException], list[int]]:
        store = DirectoryStore(full_fs.path / "db")
        claimed = await claim(store, leader_id="a", pod_name="a", config=FAST)
        term = await open_term(store, claimed, FAST)
        released: list[Slot] = []
        failures: list[BaseException] = []

        def failed(_: list[RingEntry], __: list[RingEntry], error: BaseException) -> None:
            failures.append(error)

        fullness = Fullness(changes.append)
        engine = Engine(
            store, FAST, term, on_release=released.extend, on_fail=failed, fullness=fullness
        )
        full_fs.fill()
        for version in range(1, 9):
            engine.submit([accepted(version)])
            await asyncio.sleep(0.01)
        await asyncio.sleep(2.5)  # two probes at least
        assert fullness.full and not released and engine.failure is None
        full_fs.free()
        await asyncio.wait_for(engine.drain(), 10)
        found = await recovery.recover(store, prior_term=term.term)
        await store.close()
        return released, failures, [found.last_version]

    released, failures, last = asyncio.run(scenario())
    assert not failures
    versions = [e.version for s in released for e in s.riders if isinstance(e, CommitEntry)]
    assert versions == list(range(1, 9))
    assert last == [8]
    assert changes == [True, False]


def test_fullness_reports_changes_once() -> None:
    changes: list[bool] = []
    fullness = Fullness(changes.append)
    error = StoreFull("k: No space left on device")
    fullness.refused("a", error)
    fullness.refused("b", error)
    fullness.refused("a", error)
    fullness.landed("a")
    assert fullness.full
    fullness.landed("b")
    fullness.landed("b")
    assert changes == [True, False] and not fullness.full


def test_a_term_that_opens_clears_what_the_last_one_left_waiting() -> None:
    """A segment refused under the last term has no writer any more: the new term's
    writes landed, so the store takes writes and commits must not stay refused."""
    changes: list[bool] = []
    fullness = Fullness(changes.append)
    fullness.refused("request-id index", StoreFull("requestids/x: No space left on device"))
    fullness.term_opened()
    fullness.term_opened()
    assert changes == [True, False] and not fullness.full
