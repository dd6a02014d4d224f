"""Garbage collection and the log start (weaseldb.core.gc, weaseldb.core.logstart): what it deletes,
what it keeps, and that every reader ignores what is left at the front, even after a crash
half-way through. Real batch format, in-memory store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import orjson
import pytest

from services.gateway.status_lookup import IndexSearch
from services.persister.index import load_window, read_tail
from tests.support.logs import BatchSpec, build_log, write_log
from weaseldb.core import gc, history, layout, logstart, manifest, recovery, requestids
from weaseldb.core.batchfile import Batch
from weaseldb.core.config import IdempotencyConfig, PersisterConfig
from weaseldb.core.manifest import Manifest, SourceBatches
from weaseldb.core.protocol import Write
from weaseldb.core.requestids import id_hash, make_entries
from weaseldb.core.types import NUMBER_TOP, BatchNumber, Outcome, Term, Version
from weaseldb.core.validity import valid_flags
from weaseldb.runtime.heartbeat import RunHeartbeat
from weaseldb.runtime.stores import open_store
from weaseldb.runtime.stores.memory import MemoryStore

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


def manifest_at(batch: Batch, previous: Version | None = None) -> Manifest:
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
                source_batches=SourceBatches(
                    BatchNumber(NUMBER_TOP), batch.batch, NUMBER_TOP - batch.batch + 1
                ),
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


@dataclass
class OnBatchPage:
    """A `before_delete` hook: runs `action` with the keys of the `page`th page of batches
    GC is about to delete, and counts the pages it saw."""

    page: int
    action: Callable[[list[str]], Awaitable[None]]
    pages: int = 0

    async def __call__(self, what: str, keys: list[str]) -> None:
        if what == "batches":
            self.pages += 1
            if self.pages == self.page:
                await self.action(keys)


def test_crash_between_deletes_leaves_the_log_readable_and_recovery_correct() -> None:
    batches = log_with_void_after(cut_index=2100, count=3200, void_run=3)
    store = run(setup(batches, 2100))
    expected = [t.version for b in valid(batches) for t in b.transactions]
    cut_version = batches[2100].last_version

    async def crash(keys: list[str]) -> None:
        raise Crash(f"killed before deleting {len(keys)} batches")

    with pytest.raises(Crash):
        run(gc.collect(store, before_delete=OnBatchPage(2, crash)))
    left = {layout.number_of(k) for k in batch_keys(store)}
    assert batches[0].batch in left and batches[1500].batch not in left  # half done
    assert versions(store) == [v for v in expected if v > cut_version]
    found = run(recovery.recover(store, prior_term=Term(NUMBER_TOP - 7)))  # forces the read-back
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
    found = run(recovery.recover(store, prior_term=Term(NUMBER_TOP - 7)))
    assert (found.last_version, found.newest_term) == (batches[150].last_version, NUMBER_TOP - 1)


def segment_of(
    batches: Sequence[Batch], ts_ms: int = 0, promise: requestids.Promise | None = None
) -> tuple[str, bytes]:
    """A real index segment over `batches` (oldest first), every id stamped `ts_ms`."""
    rows: list[tuple[int, int, int]] = [
        (id_hash(t.request_id), t.version, ts_ms) for b in batches for t in b.transactions
    ]
    rows += [(id_hash(r), requestids.BANNED, ts_ms) for b in batches for r in b.banned]
    key = layout.request_index_key(batches[-1].batch, batches[0].batch)
    return key, requestids.encode_segment(
        make_entries(rows),
        newest_batch=batches[-1].batch,
        oldest_batch=batches[0].batch,
        term=batches[-1].term,
        first_version=batches[0].first_version,
        last_version=batches[-1].last_version,
        created_at_ms=ts_ms,
        promise=promise,
    )


async def index_every(
    store: MemoryStore,
    batches: Sequence[Batch],
    per: int,
    promise: requestids.Promise | None,
    ts_of: Any = lambda _start: 0,
) -> list[str]:
    keys = []
    for start in range(0, len(batches), per):
        key, blob = segment_of(batches[start : start + per], ts_of(start), promise)
        await store.put_if_absent(key, blob)
        keys.append(key)
    return keys


def test_old_snapshots_index_segments_markers_and_abandoned_runs() -> None:
    batches = build_log([data(0, i) for i in range(1500)])
    store = run(setup(batches, 100, 300))
    run(gc.collect(store))  # cut at 300: snapshot 100 goes (manifest and files)
    assert run(manifest.manifest_versions(store)) == [batches[300].last_version]
    assert not [k for k in store.objects if k.startswith(layout.snapshot_dir(Version(101)))]

    # A window of one id: a new term reads only the newest group of four segments.
    tiny = requestids.Promise(1, 0, 1)
    segments = []
    for i in (0, 400, 700, 1000, 1100, 1200, 1300):
        key, blob = segment_of(batches[i : i + 100], promise=tiny)
        run(store.put_if_absent(key, blob))
        segments.append(key)
    abandoned = gc.run_location(Version(1401), "dead")
    live = gc.run_location(Version(1402), "live")
    run(store.put_if_absent(abandoned + "part-0.parquet", b"x"))
    run(
        store.put_if_absent(
            gc.run_started_key(Version(1401), "dead"), _started("dead", 1401, 1000.0)
        )
    )
    run(store.put_if_absent(live + "part-0.parquet", b"x"))
    run(
        store.put_if_absent(
            gc.run_started_key(Version(1402), "live"), _started("live", 1402, 5000.0)
        )
    )
    run(publish(store, manifest_at(batches[450])))

    result = run(gc.collect(store, now=5100.0, grace_s=3600.0))

    assert result.cut is not None and result.cut.batch == batches[450].batch
    # 0..99 is wholly deleted; 400..499 spans the cut (450) and stays, as does 700..799.
    assert [k for k in segments if k in store.objects] == segments[1:]
    assert (result.index_segments, result.kept_index_segments) == (1, 0)
    assert not [k for k in store.objects if k.startswith(layout.snapshot_dir(Version(1401)))]
    assert live + "part-0.parquet" in store.objects  # inside its grace period
    markers = [k for k in store.objects if k.startswith(layout.LOG_START)]
    assert markers == [layout.log_start_key(batches[450].batch)]


def window_of(store: MemoryStore, config: IdempotencyConfig, now_ms: int) -> set[int]:
    return set(requestids.hashes_of(run(load_window(store, config, now_ms))))


NOW_MS = 1_800_000_000_000


@pytest.mark.parametrize(
    ("config", "ts_of", "kept"),
    [
        # By count: 2 x 600 ids (the window, then as many for the faded set) reach back to
        # batch 300, below the 1,000 newest that stay anyway (12 segments: 3 groups of 4).
        pytest.param(
            IdempotencyConfig(request_id_memory=600, request_id_window_s=0),
            lambda _start: 0,
            range(3, 15),
            id="by-count",
        ),
        # By time: every id of the last 10 minutes (batches 500 on), then 10 older ones
        # (segment 400..499): 11 segments, and load_window reads whole groups of four.
        pytest.param(
            IdempotencyConfig(request_id_memory=10, request_id_window_s=600),
            lambda start: NOW_MS - (3_600_000 if start < 500 else 60_000),
            range(3, 15),
            id="by-time",
        ),
        # Never more than request_id_max + request_id_memory ids.
        pytest.param(
            IdempotencyConfig(request_id_memory=100, request_id_window_s=3600, request_id_max=1050),
            lambda _start: NOW_MS,
            range(3, 15),
            id="capped",
        ),
    ],
)
def test_gc_keeps_every_index_segment_the_idempotency_window_reads(
    config: IdempotencyConfig, ts_of: Any, kept: range
) -> None:
    """The window a new term loads after GC is the one it loaded before, although the
    batches under it are gone; segments beyond it go with their batches."""
    batches = build_log([data(0, i) for i in range(1500)])
    store = run(setup(batches, 1200))
    promise = requestids.Promise.of(config)
    segments = run(index_every(store, batches, 100, promise, ts_of))
    before = window_of(store, config, NOW_MS)

    result = run(gc.collect(store, now=NOW_MS / 1000))

    assert result.batches == 500  # 0..499: the 1,000 newest stay
    assert [k for k in segments if k in store.objects] == [segments[i] for i in kept]
    assert window_of(store, config, NOW_MS) == before
    assert result.index_segments == 15 - len(kept)
    assert result.kept_index_segments == 5 - (15 - len(kept))


def test_a_segment_straddling_the_time_window_counts_as_young() -> None:
    promise = requestids.Promise(memory=5, window_ms=1000, max_ids=100)
    tally = gc.WindowTally.at(promise, now_ms=NOW_MS)
    batches = build_log([data(0, i) for i in range(10)])

    def header(ts_ms: int) -> requestids.SegmentHeader:
        return requestids.decode_segment(segment_of(batches, ts_ms)[1])[0]

    # The newest id of a segment decides: anything younger than window + margin is young.
    assert not tally.add(header(NOW_MS - 1000 - gc.CLOCK_MARGIN_MS + 1))
    assert (tally.total, tally.older) == (10, 0)
    assert tally.add(header(NOW_MS - 1000 - gc.CLOCK_MARGIN_MS))
    assert (tally.total, tally.older) == (20, 10)


def test_the_promise_comes_from_the_newest_segment_or_the_defaults() -> None:
    batches = build_log([data(0, i) for i in range(4)])
    recorded = requestids.Promise(7, 8, 9)
    newer = requestids.decode_segment(segment_of(batches[2:], 5, recorded)[1])[0]
    older = requestids.decode_segment(segment_of(batches[:2], 5)[1])[0]
    assert (newer.promise, newer.newest_time_ms) == (recorded, 5)
    assert older.promise is None
    assert requestids.Promise.of(IdempotencyConfig()) == gc.DEFAULT_PROMISE
    merged = requestids.decode_segment(
        requestids.merge(
            [requestids.decode_segment(segment_of(b, 5)[1]) for b in (batches[:2], batches[2:])],
            created_at_ms=99,
            promise=recorded,
        )
    )[0]
    assert (merged.promise, merged.newest_ms, merged.created_at_ms) == (recorded, 5, 99)


def test_status_of_an_id_whose_batch_gc_removed_is_answered_from_the_index() -> None:
    config = IdempotencyConfig(request_id_memory=600, request_id_window_s=0)
    batches = build_log([data(0, i) for i in range(1500)])
    store = run(setup(batches, 1200))
    run(index_every(store, batches, 100, requestids.Promise.of(config)))
    run(gc.collect(store))
    gone, forgotten = batches[350].transactions[0], batches[50].transactions[0]
    assert layout.batch_key(batches[350].batch) not in store.objects
    search = IndexSearch(store)
    found = run(search.search(gone.request_id, 0, 1500, upward=False))
    assert (found.status, found.version) == (Outcome.COMMITTED, gone.version)
    # Past the window and its batch gone: the index cannot know, and says so.
    lost = run(search.search(forgotten.request_id, 0, 1500, upward=False))
    assert lost.status == Outcome.LOG_TRUNCATED


def test_gc_never_deletes_a_batch_no_index_segment_covers_yet() -> None:
    """A new term reads the batches after the newest segment for their ids (read_tail)."""
    batches = build_log([data(0, i) for i in range(1500)])
    store = run(setup(batches, 1200))
    run(index_every(store, batches[:200], 100, requestids.Promise(1, 0, 1)))
    result = run(gc.collect(store))
    assert result.batches == 200  # 0..199: the ones indexed
    tail = run(read_tail(store, PersisterConfig(), opening=BatchNumber(batches[-1].batch - 1)))
    assert len(tail.rows) == 1300 and tail.last_version == batches[-1].last_version


def test_old_snapshots_stay_for_the_grace_after_a_newer_one_is_published() -> None:
    batches = build_log([data(0, i) for i in range(1500)])
    store = run(setup(batches, 100, 300))
    newest = manifest_at(batches[300])
    published_at = _epoch(newest.created_at)
    result = run(gc.collect(store, now=published_at + 3599, grace_s=3600))
    assert (result.snapshots, result.kept_snapshots) == (0, 1)
    assert run(manifest.manifest_versions(store)) == [
        batches[100].last_version,
        batches[300].last_version,
    ]
    assert gc.run_location(batches[100].last_version, "run1") + "part-00000.parquet" in (
        store.objects
    )
    result = run(gc.collect(store, now=published_at + 3600, grace_s=3600))
    assert (result.snapshots, result.kept_snapshots) == (1, 0)
    assert run(manifest.manifest_versions(store)) == [batches[300].last_version]


def _epoch(created_at: str) -> float:
    import datetime

    return datetime.datetime.fromisoformat(created_at).timestamp()


def test_a_run_is_abandoned_when_its_heartbeat_stops_not_by_its_start() -> None:
    old_start = gc.RunStarted("r", Version(5), started_at=1000.0, alive_at=9000.0)
    assert not gc.abandoned(old_start, grace_s=3600, now=10_000.0)  # beat 1,000 s ago
    assert gc.abandoned(old_start, grace_s=3600, now=12_600.0)
    assert gc.abandoned(None, grace_s=3600, now=0.0)
    assert not gc.abandoned(gc.RunStarted("r", Version(5), 1000.0), grace_s=3600, now=4000.0)

    batches = build_log([data(0, i) for i in range(3)])
    store = run(setup(batches, 2))
    long_run = gc.run_location(Version(9), "long")
    run(store.put_if_absent(long_run + "part-0.parquet", b"x"))
    run(store.put_if_absent(gc.run_started_key(Version(9), "long"), msgspec.json.encode(old_start)))
    assert run(gc.collect(store, now=10_000.0, grace_s=3600)).abandoned_runs == 0
    assert long_run + "part-0.parquet" in store.objects
    assert run(gc.collect(store, now=12_600.0, grace_s=3600)).abandoned_runs == 1


def test_the_heartbeat_renews_the_start_record_until_stopped(tmp_path: Path) -> None:
    url = f"dir:{tmp_path}"
    started = gc.RunStarted("r1", Version(9), started_at=time.time())
    key = gc.run_started_key(Version(9), "r1")

    def record() -> gc.RunStarted:
        async def read() -> bytes:
            store = open_store(url)
            try:
                return await store.get(key)
            finally:
                await store.close()

        return msgspec.json.decode(run(read()), type=gc.RunStarted)

    with RunHeartbeat(lambda: open_store(url), started, every_s=0.05):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if (tmp_path / key).exists() and record().alive_at > started.started_at:
                break
            time.sleep(0.05)
    beat = record()
    assert beat.alive_at > started.started_at and beat.run == "r1"
    time.sleep(0.2)
    assert record() == beat  # stopped: no renewal after the run is done


class PolicyOnMarker(MemoryStore):
    """A retention PUT that lands while GC writes its log-start marker."""

    def __init__(self, version: int) -> None:
        super().__init__()
        self.version = version

    async def put_if_absent(self, key: str, data: bytes) -> None:
        if key.startswith(layout.LOG_START):
            await self.put(layout.retention_key("late"), orjson.dumps({"version": self.version}))
        await super().put_if_absent(key, data)


def test_a_policy_accepted_while_the_marker_is_written_stops_gc() -> None:
    batches = build_log([data(0, i) for i in range(1500)])
    store = PolicyOnMarker(version=250)
    run(write_log(store, batches))
    run(publish(store, manifest_at(batches[400])))
    result = run(gc.collect(store))
    assert result.cut is None and "pins version 250" in result.summary()
    assert len(batch_keys(store)) == 1500
    assert run(logstart.newest(store)) is None  # the marker it wrote is gone again
    assert min(t.version for t in run(history.committed_transactions(store))) == 1


def test_a_policy_that_appears_between_delete_rounds_stops_gc() -> None:
    batches = build_log([data(0, i) for i in range(3200)])
    store = run(setup(batches, 2100))

    async def late_policy(_keys: list[str]) -> None:
        await store.put(layout.retention_key("late"), orjson.dumps({"version": 1500}))

    hook = OnBatchPage(1, late_policy)
    result = run(gc.collect(store, before_delete=hook))
    assert hook.pages == 1
    assert "stopped: a retention policy now pins version 1500" in result.summary()
    assert len(batch_keys(store)) == 3200 - 1000  # the first page only


def _started(run_id: str, version: int, at: float) -> bytes:
    import msgspec

    return msgspec.json.encode(gc.RunStarted(run_id, Version(version), at))


def test_choose_cut_and_deletable_from() -> None:
    batches = build_log([data(0, i) for i in range(3)])
    ms = [manifest_at(b) for b in reversed(batches)]
    assert gc.choose_cut(ms, gc.CutBounds.of([])) == ms[0]
    assert gc.choose_cut(ms, gc.CutBounds.of([2, 9])) == ms[1]
    assert gc.choose_cut(ms, gc.CutBounds.of([0])) is None
    assert gc.deletable_from(500, list(range(10))) is None
    assert gc.deletable_from(500, list(range(1000))) == 1000
    assert gc.deletable_from(5000, list(range(1000))) == 5000
