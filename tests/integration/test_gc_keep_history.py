"""GC with a keep-history window on real stores (directory store, MinIO): it keeps exactly
what a restore to any version inside the window needs (a snapshot at or below it and every
valid batch after that snapshot), and deletes the rest it may.

The log has writes, deletes, range deletes and a leader change whose deposed leader left
void batches behind (tests.support.logs.synthetic_log). The snapshots are manifests whose
state is taken to be the reference fold up to their version (the Spark job is checked
against that fold in tests/spark); what this checks is the log GC leaves after them."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.logs import stamped, synthetic_log, write_log
from tests.support.minio import MinioServer
from tests.unit.test_gc import manifest_at, publish, valid
from weaseldb.core import gc, history, layout, recovery
from weaseldb.core.batchfile import Batch, Transaction
from weaseldb.core.fold import reference_fold
from weaseldb.core.holdings import Holdings, holdings
from weaseldb.core.store import list_all
from weaseldb.runtime.stores import open_store

STEP_MS = 1000  # one batch a second


@pytest.fixture(params=["dir"])  # MinIO where a test asks for it (indirect)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "dir":
        yield f"dir:{tmp_path / 'store'}"
    else:
        minio: MinioServer = request.getfixturevalue("minio")
        yield minio.store_url(minio.new_bucket(), "db")


def history_log(now_ms: int) -> list[Batch]:
    """1500 valid batches of 5 transactions (and 3 void ones), one a second, the newest
    committed at `now_ms`. The windows below reach more than 1000 batches back, so GC's
    deletes reach the cut (it never deletes one of the newest 1000)."""
    batches = synthetic_log(15_000, per_batch=10, per_transaction=2, keys=400, seed=7)
    return stamped(batches, now_ms - (len(batches) - 1) * STEP_MS, STEP_MS)


async def collect_with_window(
    url: str, batches: list[Batch], snapshot_at: list[int], keep: gc.KeepHistory, now: float
) -> tuple[gc.GcResult, Holdings | None, list[Transaction], set[int]]:
    store = open_store(url)
    try:
        limit = asyncio.Semaphore(32)

        async def write(batch: Batch) -> None:
            async with limit:
                await write_log(store, [batch])

        await asyncio.gather(*(write(b) for b in batches))
        for index in snapshot_at:
            await publish(store, manifest_at(batches[index]))  # type: ignore[arg-type]
        result = await gc.collect(store, keep=keep, now=now, grace_s=0)
        held = await holdings(store)
        kept = await history.committed_transactions(store)
        left = {layout.number_of(k) for k in await list_all(store, layout.BATCHES)}
        found = await recovery.recover(store, prior_term=None)
        assert held is None or found.last_version == held.newest_version
        return result, held, kept, left
    finally:
        await store.close()


def state_at(transactions: list[Transaction], version: int) -> dict[bytes, bytes]:
    fold = reference_fold([], (t for t in transactions if t.version <= version))
    return {key: value for key, (value, _) in fold.items()}


def restored_at(
    full: list[Transaction], kept: list[Transaction], held: Holdings, version: int
) -> dict[bytes, bytes]:
    """The state a restore to `version` rebuilds from what the store holds: the newest
    snapshot at or below it (its state: the reference fold up to its version) plus the
    kept transactions after it."""
    snapshot = max(v for v in held.snapshots if v <= version)
    rows = [(k, v, 0) for k, v in state_at(full, snapshot).items()]
    after = [t for t in kept if snapshot < t.version <= version]
    assert [t.version for t in after] == list(range(snapshot + 1, version + 1))
    return {key: value for key, (value, _) in reference_fold(rows, after).items()}


@pytest.mark.parametrize(
    ("store_url", "keep_seconds", "keep_versions"),
    [pytest.param("dir", 1200, 0, id="dir-time"), pytest.param("dir", 0, 5500, id="dir-versions"),
     pytest.param("dir", 1200, 5000, id="dir-both"), pytest.param("s3", 1200, 5000, id="s3-both")],
    indirect=["store_url"],
)  # fmt: skip
def test_gc_keeps_exactly_the_window(store_url: str, keep_seconds: int, keep_versions: int) -> None:
    now_ms = int(time.time() * 1000)
    batches = history_log(now_ms)
    good = valid(batches)
    snapshot_at = [batches.index(b) for b in good[99::100]]  # every 100th valid batch
    keep = gc.KeepHistory(keep_seconds, keep_versions)

    result, held, kept, left = asyncio.run(
        collect_with_window(store_url, batches, snapshot_at, keep, now_ms / 1000)
    )

    full = [t for b in good for t in b.transactions]
    committed = full[-1].version
    # The window's oldest version: the last one committed by its start, and N below the head.
    edges = [committed - keep_versions] if keep_versions else []
    if keep_seconds:
        start_ms = now_ms - keep_seconds * 1000
        edges.append(max(t.version for t in full if t.timestamp_ms <= start_ms))
    oldest_in_window = min(edges)
    assert result.cut is not None and held is not None
    snapshot_versions = sorted(batches[i].last_version for i in snapshot_at)
    # The cut: the newest snapshot at or below the window (the next one is inside it).
    assert result.cut.version == max(v for v in snapshot_versions if v <= oldest_in_window)
    assert held.oldest_version == result.cut.version <= oldest_in_window
    assert held.newest_version == committed
    assert held.oldest_time_ms == next(
        t.timestamp_ms for t in full if t.version == result.cut.version
    )
    # Exactly the batches after the cut are left (the deletes reached it: more than 1000
    # batches stay anyway), so nothing a restore inside the window needs is gone.
    assert left == {b.batch for b in batches if b.batch < result.cut.batch}
    assert result.batches == len(batches) - len(left)
    # Every version in the window restores to the reference fold of the whole history.
    rng = random.Random(3)
    window = range(oldest_in_window, committed + 1)
    for version in {oldest_in_window, held.oldest_version, committed, *rng.sample(window, 12)}:
        assert held.holds(version)
        assert restored_at(full, kept, held, version) == state_at(full, version), version
    assert not held.holds(held.oldest_version - 1)


def test_a_window_larger_than_the_history_deletes_nothing(store_url: str) -> None:
    now_ms = int(time.time() * 1000)
    batches = history_log(now_ms)
    snapshot_at = [batches.index(b) for b in valid(batches)[99::100]]
    keep = gc.KeepHistory(seconds=len(batches) + 60)
    result, held, _, left = asyncio.run(
        collect_with_window(store_url, batches, snapshot_at, keep, now_ms / 1000)
    )
    assert result.cut is None and len(left) == len(batches)
    assert held is not None and held.oldest_version == 0 and held.oldest_time_ms is None
