"""Garbage collection and the log start (weaseldb.gc, weaseldb.logstart): what it deletes,
what it keeps, and that every reader ignores what is left at the front, even after a crash
half-way through. Real batch format, in-memory store."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import orjson
import pytest

from tests.support.logs import BatchSpec, build_log, write_log
from weaseldb import gc, history, layout, logstart, manifest, recovery
from weaseldb.batchfile import Batch
from weaseldb.blobstore.memory import MemoryStore
from weaseldb.manifest import Manifest, SourceBatches
from weaseldb.protocol import Write
from weaseldb.types import NUMBER_TOP
from weaseldb.validity import valid_flags

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def data(term: int, i: int) -> BatchSpec:
    return BatchSpec(term, [[Write(b"k%05d" % i, b"v%d" % i)]])


def log_with_void_after(cut_index: int, count: int, void_run: int = 1) -> list[Batch]:
    """Term 0 up to just before `cut_index`, term 1 opens at `cut_index`, then `void_run`
    late term-0 batches (void), then term 1 again up to `count` batches."""
    specs = [data(0, i) for i in range(cut_index)] + [data(1, cut_index)]
    specs += [data(0, cut_index + 1 + j) for j in range(void_run)]
    specs += [data(1, i) for i in range(cut_index + 1 + void_run, count)]
    return build_log(specs)


def valid(batches: Sequence[Batch]) -> list[Batch]:
    flags = valid_flags([b.term for b in batches])
    return [b for b, ok in zip(batches, flags, strict=True) if ok]


def manifest_at(batch: Batch, previous: int | None = None) -> Manifest:
    return manifest.decode(
        manifest.encode(
            Manifest(
                format=manifest.FORMAT_VERSION,
                version=batch.last_version,
                batch=batch.batch,
                term=batch.term,
                created_at="2026-01-01T00:00:00Z",
                location=gc.run_location(batch.last_version, "run1"),
                files=[],
                keys=0,
                bytes=0,
                source_batches=SourceBatches(NUMBER_TOP, batch.batch, NUMBER_TOP - batch.batch + 1),
                previous=previous,
            )
        )
    )


async def publish(store: MemoryStore, m: Manifest) -> None:
    await store.put_if_absent(m.key, manifest.encode(m))
    await store.put_if_absent(m.location + "part-00000.parquet", b"PAR1")


async def setup(batches: Sequence[Batch], *cuts: int) -> MemoryStore:
    store = MemoryStore()
    await write_log(store, batches)
    for index in cuts:
        await publish(store, manifest_at(batches[index]))
    return store


def versions(store: MemoryStore) -> list[int]:
    return [t.version for t in run(history.committed_transactions(store))]


def batch_keys(store: MemoryStore) -> list[str]:
    return [k for k in store.objects if k.startswith(layout.BATCHES)]


def test_gc_deletes_covered_batches_and_readers_skip_the_void_front() -> None:
    batches = log_with_void_after(cut_index=100, count=1200)
    store = run(setup(batches, 100))
    expected = [t.version for b in valid(batches) for t in b.transactions]
    assert versions(store) == expected

    result = run(gc.collect(store))

    assert result.cut is not None and result.cut.batch == batches[100].batch
    assert result.batches == 101  # batches 0..100: covered by the snapshot
    oldest = max(layout.number_of(k) for k in batch_keys(store))
    assert oldest == batches[101].batch  # a void batch is now at the front
    cut_version = batches[100].last_version
    # The void batch's write (it reuses version cut_version + 1) never comes back.
    assert versions(store) == [v for v in expected if v > cut_version]
    assert run(history.retained_start(store)) == cut_version + 1
    streamed = run(_collect(history.log_after(store, cut_version)))
    assert [tx.version for _, _, tx in streamed] == [v for v in expected if v > cut_version]
    assert streamed[0][0] == cut_version  # prev_version continues from the snapshot
    found = run(recovery.recover(store, prior_term=None))
    assert found.last_version == expected[-1]
    assert run(logstart.newest(store)) == logstart.LogStart(
        batches[100].batch, batches[100].term, cut_version
    )


async def _collect(iterator: Any) -> list[Any]:
    return [item async for item in iterator]


def test_gc_never_deletes_the_newest_thousand_batches() -> None:
    batches = build_log([data(0, i) for i in range(1100)])
    store = run(setup(batches, 1050))
    result = run(gc.collect(store))
    assert result.batches == 100
    assert len(batch_keys(store)) == 1000
    assert versions(store) == list(range(1052, 1101))  # the log starts after the snapshot
    found = run(recovery.recover(store, prior_term=None))
    assert (found.watermark, found.last_version) == (batches[-1].batch, 1100)


@pytest.mark.parametrize(
    ("policies", "cut_index"),
    [
        pytest.param([], 300, id="no-policy-newest-snapshot"),
        pytest.param([250], 200, id="policy-between-snapshots"),
        pytest.param([301, 5000], 300, id="policies-above"),
    ],
)
def test_retention_policies_bound_the_cut(policies: list[int], cut_index: int) -> None:
    batches = build_log([data(0, i) for i in range(1400)])
    store = run(setup(batches, 200, 300))
    for i, version in enumerate(policies):
        run(store.put(layout.retention_key(f"p{i}"), orjson.dumps({"version": version})))
    result = run(gc.collect(store))
    assert result.cut is not None and result.cut.batch == batches[cut_index].batch
    assert min(t.version for t in run(history.committed_transactions(store))) == cut_index + 2
    remaining = {layout.number_of(k) for k in batch_keys(store)}
    assert batches[cut_index].batch not in remaining
    assert batches[cut_index + 1].batch in remaining
    for version in policies:  # nothing a policy pins was deleted
        assert all(b.batch in remaining for b in batches if b.last_version > version)


def test_policy_below_every_snapshot_deletes_nothing() -> None:
    batches = build_log([data(0, i) for i in range(1200)])
    store = run(setup(batches, 200))
    run(store.put(layout.retention_key("reader"), orjson.dumps({"version": 10})))
    result = run(gc.collect(store))
    assert result.cut is None and len(batch_keys(store)) == 1200
    assert run(logstart.newest(store)) is None


class Crash(Exception):
    pass


def test_crash_between_deletes_leaves_the_log_readable_and_recovery_correct() -> None:
    batches = log_with_void_after(cut_index=2100, count=3200, void_run=3)
    store = run(setup(batches, 2100))
    expected = [t.version for b in valid(batches) for t in b.transactions]
    cut_version = batches[2100].last_version
    pages = 0

    async def crash_on_second_page(what: str, keys: list[str]) -> None:
        nonlocal pages
        if what == "batches":
            pages += 1
            if pages == 2:
                raise Crash(f"killed before deleting {len(keys)} {what}")

    with pytest.raises(Crash):
        run(gc.collect(store, before_delete=crash_on_second_page))
    left = {layout.number_of(k) for k in batch_keys(store)}
    assert batches[0].batch in left and batches[1500].batch not in left  # half done
    assert versions(store) == [v for v in expected if v > cut_version]
    found = run(recovery.recover(store, prior_term=NUMBER_TOP - 7))  # forces the read-back
    assert found.last_version == expected[-1]

    result = run(gc.collect(store))  # a rerun finishes the job
    remaining = {layout.number_of(k) for k in batch_keys(store)}
    assert result.batches == len(left) - (len(batches) - 2101)
    assert remaining == {b.batch for b in batches[2101:]}
    assert versions(store) == [v for v in expected if v > cut_version]


def test_recovery_read_back_seeds_at_the_marker() -> None:
    """Only void batches after the cut: recovery seeded at the genesis would take them as
    valid and continue from their versions; seeded at the marker it keeps the snapshot's."""
    specs = [data(0, i) for i in range(150)] + [data(1, 150)]
    specs += [data(0, i) for i in range(151, 1100)]  # a deposed leader's late writes
    batches = build_log(specs)
    store = run(setup(batches, 150))
    run(gc.collect(store))
    assert run(logstart.newest(store)) is not None
    found = run(recovery.recover(store, prior_term=NUMBER_TOP - 7))
    assert (found.last_version, found.newest_term) == (batches[150].last_version, NUMBER_TOP - 1)


def test_old_snapshots_index_segments_markers_and_abandoned_runs() -> None:
    batches = build_log([data(0, i) for i in range(1500)])
    store = run(setup(batches, 100, 300))
    run(gc.collect(store))  # cut at 300: snapshot 100 goes (manifest and files)
    assert run(manifest.manifest_versions(store)) == [batches[300].last_version]
    assert not [k for k in store.objects if k.startswith(layout.snapshot_dir(101))]

    segments = [
        layout.request_index_key(batches[i + 99].batch, batches[i].batch) for i in (0, 400, 700)
    ]
    for key in segments:
        run(store.put_if_absent(key, b"index"))
    abandoned = gc.run_location(1401, "dead")
    live = gc.run_location(1402, "live")
    run(store.put_if_absent(abandoned + "part-0.parquet", b"x"))
    run(store.put_if_absent(gc.run_started_key(1401, "dead"), _started("dead", 1401, 1000.0)))
    run(store.put_if_absent(live + "part-0.parquet", b"x"))
    run(store.put_if_absent(gc.run_started_key(1402, "live"), _started("live", 1402, 5000.0)))
    run(publish(store, manifest_at(batches[450])))

    result = run(gc.collect(store, now=5100.0, grace_s=3600.0))

    assert result.cut is not None and result.cut.batch == batches[450].batch
    # 0..99 is wholly deleted; 400..499 spans the cut (450) and stays, as does 700..799.
    assert [k for k in segments if k in store.objects] == segments[1:]
    assert not [k for k in store.objects if k.startswith(layout.snapshot_dir(1401))]
    assert live + "part-0.parquet" in store.objects  # inside its grace period
    markers = [k for k in store.objects if k.startswith(layout.LOG_START)]
    assert markers == [layout.log_start_key(batches[450].batch)]


def _started(run_id: str, version: int, at: float) -> bytes:
    import msgspec

    return msgspec.json.encode(gc.RunStarted(run_id, version, at))


def test_choose_cut_and_deletable_from() -> None:
    batches = build_log([data(0, i) for i in range(3)])
    ms = [manifest_at(b) for b in reversed(batches)]
    assert gc.choose_cut(ms, []) == ms[0]
    assert gc.choose_cut(ms, [2, 9]) == ms[1]
    assert gc.choose_cut(ms, [0]) is None
    assert gc.deletable_from(500, list(range(10))) is None
    assert gc.deletable_from(500, list(range(1000))) == 1000
    assert gc.deletable_from(5000, list(range(1000))) == 5000
