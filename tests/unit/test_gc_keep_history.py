"""GC's keep-history window (weaseldb.core.gc.KeepHistory, CutBounds, choose_cut): the cut
stays far enough back that every version inside the window is restorable, and the duration
strings the window is written in (weaseldb.core.durations)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.logs import build_log, stamped, write_log
from tests.unit.test_gc import batch_keys, data, manifest_at, publish
from weaseldb.core import gc, layout, logstart
from weaseldb.core.batchfile import Batch
from weaseldb.core.durations import format_duration, parse_duration
from weaseldb.core.gc import CutBounds, KeepHistory
from weaseldb.core.holdings import holdings
from weaseldb.core.manifest import Manifest
from weaseldb.runtime.stores.memory import MemoryStore

T0_MS = 1_700_000_000_000
STEP_MS = 1000  # batch i is committed at T0_MS + i s; it holds version i + 1
NOW = (T0_MS + 1400 * STEP_MS) / 1000  # GC runs right after the last of 1400 batches


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def timed_log(count: int = 1400) -> list[Batch]:
    return stamped(build_log([data(0, i) for i in range(count)]), T0_MS, STEP_MS)


async def setup(batches: list[Batch], *cuts: int) -> MemoryStore:
    store = MemoryStore()
    await write_log(store, batches)
    for index in cuts:
        await publish(store, manifest_at(batches[index]))
    return store


# The duration strings


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("12h", 43_200), ("7d", 604_800), ("1d12h", 129_600),
     ("2h30m15s", 9015), ("0s", 0), (" 5m ", 300)],
)  # fmt: skip
def test_durations_parse(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "90", "-5m", "1.5h", "5 m", "7w", "30m1h", "1h1h", "h"])
def test_a_bad_duration_names_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration: " + repr(text).replace("\\", "\\\\")):
        parse_duration(text)


@given(st.integers(min_value=0, max_value=10**9))
def test_format_duration_reads_back(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


# The decision (pure)


def snapshots(*versions: int) -> list[Manifest]:
    """Manifests at these versions, newest first (version v at batch index v - 1)."""
    batches = build_log([data(0, i) for i in range(max(versions))])
    return [manifest_at(batches[v - 1]) for v in sorted(versions, reverse=True)]


def cut_of(
    ms: list[Manifest],
    bounds: CutBounds,
    times: dict[int, int] | None = None,
    current: int | None = None,
) -> int | None:
    cut = gc.choose_cut(ms, bounds, times, current)
    return None if cut is None else cut.version


def test_the_window_in_versions_and_time_bounds_the_cut() -> None:
    ms = snapshots(100, 200, 300)
    times = {100: 1_000, 200: 2_000, 300: 3_000}
    assert gc.choose_cut(ms, CutBounds.of([])) == ms[0]  # no window: the newest
    by_versions = CutBounds.of([], KeepHistory(versions=150), committed=400)  # keeps 250..400
    assert cut_of(ms, by_versions, times) == 200
    assert gc.choose_cut(ms, CutBounds.of([], KeepHistory(versions=100), committed=400)) == ms[0]
    by_time = CutBounds.of([], KeepHistory(seconds=2), now_ms=4_000)  # committed by 2000
    assert cut_of(ms, by_time, times) == 200
    assert cut_of(ms, by_time, {**times, 200: 2_001}) == 100
    both = CutBounds.of([], KeepHistory(seconds=1, versions=250), committed=400, now_ms=4_000)
    assert cut_of(ms, both, times) == 100  # the versions are the tighter bound
    with_policy = CutBounds.of([150], KeepHistory(seconds=1), now_ms=4_000)
    assert cut_of(ms, with_policy, times) == 100


def test_a_window_larger_than_the_history_lets_nothing_go() -> None:
    ms = snapshots(100, 200, 300)
    times = {100: 1_000, 200: 2_000, 300: 3_000}
    assert gc.choose_cut(ms, CutBounds.of([], KeepHistory(versions=500), committed=400)) is None
    assert gc.choose_cut(ms, CutBounds.of([], KeepHistory(seconds=9), now_ms=4_000), times) is None


def test_an_unknown_commit_time_keeps_the_snapshot() -> None:
    ms = snapshots(100, 200)
    bounds = CutBounds.of([], KeepHistory(seconds=1), now_ms=10_000)
    assert cut_of(ms, bounds, {200: 0, 100: 1_000}) == 100
    assert cut_of(ms, bounds, {100: 1_000}) == 100  # 200's time not read


def test_the_window_never_moves_the_cut_back() -> None:
    ms = snapshots(100, 200, 300)
    grown = CutBounds.of([], KeepHistory(versions=350), committed=400)  # would want 0..50
    assert cut_of(ms, grown, current=200) == 200
    assert gc.choose_cut(ms, grown, current=None) is None
    # A policy still may (the history it pins is gone; the existing rule, unchanged).
    assert cut_of(ms, CutBounds.of([150]), current=200) == 100


@given(
    versions=st.lists(st.integers(1, 1000), min_size=1, max_size=12, unique=True),
    keep_versions=st.integers(0, 1200),
    keep_seconds=st.integers(0, 1200),
    policies=st.lists(st.integers(0, 1100), max_size=3),
    current_index=st.integers(-1, 11),
)
def test_the_cut_is_the_newest_snapshot_outside_window_and_policies(
    versions: list[int],
    keep_versions: int,
    keep_seconds: int,
    policies: list[int],
    current_index: int,
) -> None:
    """Against the definition: commit time of version v is v s, committed = 1000, now =
    1000 s; the cut is the newest snapshot at or below every policy that is either at or
    below the current marker or outside the window."""
    ms = snapshots(*versions)
    times: dict[int, int] = {m.version: m.version * 1000 for m in ms}
    current = ms[current_index].version if 0 <= current_index < len(ms) else None
    keep = KeepHistory(seconds=keep_seconds, versions=keep_versions)
    bounds = CutBounds.of(policies, keep, committed=1000, now_ms=1_000_000)
    cut = gc.choose_cut(ms, bounds, times, current)

    def allowed(v: int) -> bool:
        if policies and v > min(policies):
            return False
        if current is not None and v <= current:
            return True
        return (not keep_versions or v <= 1000 - keep_versions) and (
            not keep_seconds or v * 1000 <= 1_000_000 - keep_seconds * 1000
        )

    expected = max((v for v in versions if allowed(v)), default=None)
    assert (cut.version if cut else None) == expected


def test_commit_time_of_a_version() -> None:
    batch = timed_log(3)[2]
    assert gc.committed_at_ms(batch, batch.last_version) == T0_MS + 2 * STEP_MS
    empty = msgspec.structs.replace(batch, transactions=[], created_at_ms=7)
    assert gc.committed_at_ms(empty, batch.last_version) == 7  # the batch's time bounds it


def test_keep_history_is_not_negative() -> None:
    with pytest.raises(ValueError, match="not negative"):
        KeepHistory(seconds=-1)


# The collection


def test_gc_keeps_the_window_in_versions() -> None:
    batches = timed_log()
    store = run(setup(batches, 200, 300, 1300))
    result = run(gc.collect(store, now=NOW, keep=KeepHistory(versions=1000)))
    assert result.cut is not None and result.cut.version == 301  # 1300's snapshot is inside
    assert result.batches == 301
    remaining = {layout.number_of(k) for k in batch_keys(store)}
    assert remaining == {b.batch for b in batches[301:]}
    marker = run(logstart.newest(store))
    assert marker.version == 301 and marker.committed_at_ms == T0_MS + 300 * STEP_MS
    held = run(holdings(store))
    assert (held.oldest_version, held.oldest_time_ms) == (301, T0_MS + 300 * STEP_MS)
    assert held.holds(1400 - 1000) and held.newest_version == 1400


@pytest.mark.parametrize(
    ("keep_seconds", "cut_version"),
    [(1100, 301), (1101, 201), (1099, 301), (101, 301), (100, 1301)],
)
def test_gc_keeps_the_window_in_time(keep_seconds: int, cut_version: int) -> None:
    batches = timed_log()
    store = run(setup(batches, 200, 300, 1300))
    result = run(gc.collect(store, now=NOW, keep=KeepHistory(seconds=keep_seconds)))
    assert result.cut is not None and result.cut.version == cut_version
    # The cut was committed by the window's start, so a restore to any time inside the
    # window (the last version committed by then) is at or above it.
    assert batches[cut_version - 1].created_at_ms <= NOW * 1000 - keep_seconds * 1000


def test_gc_with_both_bounds_and_a_policy_takes_the_lowest() -> None:
    batches = timed_log()
    store = run(setup(batches, 100, 200, 300, 1300))
    run(store.put(layout.retention_key("reader"), orjson.dumps({"version": 250})))
    keep = KeepHistory(seconds=50, versions=1150)  # time: 1301; versions: <= 250
    result = run(gc.collect(store, now=NOW, keep=keep))
    assert result.cut is not None and result.cut.version == 201
    keep = KeepHistory(seconds=1250, versions=10)  # time: committed by 150 s: 101
    store = run(setup(batches, 100, 200, 300, 1300))
    assert run(gc.collect(store, now=NOW, keep=keep)).cut.version == 101


def test_a_window_larger_than_the_history_deletes_nothing() -> None:
    batches = timed_log()
    for keep in (KeepHistory(versions=1400), KeepHistory(seconds=3600)):
        store = run(setup(batches, 200, 300))
        result = run(gc.collect(store, now=NOW, keep=keep))
        assert result.cut is None and len(batch_keys(store)) == 1400
        assert run(logstart.newest(store)) is None
        assert "inside the keep-history window" in result.summary()


def test_a_grown_window_keeps_the_cut_where_it_is() -> None:
    """GC cut at 301 (its batch now deleted); the window then grows past it: the cut stays,
    no older marker is written, and a rerun deletes nothing more."""
    batches = timed_log()
    store = run(setup(batches, 200, 300, 1300))
    run(gc.collect(store, now=NOW, keep=KeepHistory(versions=1000), grace_s=10**9))
    keys = set(store.objects)
    result = run(gc.collect(store, now=NOW, keep=KeepHistory(seconds=3600), grace_s=10**9))
    assert result.cut is not None and result.cut.version == 301 and result.batches == 0
    assert set(store.objects) == keys
    assert run(store.list(layout.LOG_START)) == [layout.log_start_key(batches[300].batch)]


def record_gets(store: MemoryStore) -> list[str]:
    """The keys `store.get` is called with from now on, in order."""
    reads: list[str] = []
    original_get = store.get

    async def recording_get(key: str) -> bytes:
        reads.append(key)
        found: bytes = await original_get(key)
        return found

    store.get = recording_get  # type: ignore[method-assign]
    return reads


def test_the_cut_moves_forward_as_the_window_slides() -> None:
    """A later GC (an hour on) moves the cut to a snapshot that has left the window, reading
    the commit times of only the snapshots newer than the current cut."""
    batches = timed_log()
    store = run(setup(batches, 200, 300, 1300))
    keep = KeepHistory(seconds=1150)  # committed by 250 s: 201
    assert run(gc.collect(store, now=NOW, keep=keep)).cut.version == 201
    reads = record_gets(store)
    result = run(gc.collect(store, now=NOW + 3600, keep=keep))
    assert result.cut is not None and result.cut.version == 1301
    batch_reads = [k for k in reads if k.startswith(layout.BATCHES)]
    # The two candidates above the cut (300's and 1300's), not the cut's own (deleted).
    assert batch_reads == [layout.batch_key(batches[i].batch) for i in (300, 1300)]
    assert run(logstart.newest(store)).committed_at_ms == T0_MS + 1300 * STEP_MS


# The window in GET /v1/snapshots


def test_the_restorable_window_is_read_once_per_ttl() -> None:
    from services.gateway.snapshots import RESTORABLE_TTL_S, SnapshotListing

    batches = timed_log()
    store = run(setup(batches, 300))
    clock = [100.0]
    listing = SnapshotListing(store, clock=lambda: clock[0])

    async def scenario() -> list[Any]:
        before = await listing.restorable()
        await gc.collect(store, now=NOW, keep=KeepHistory(versions=1000))
        cached = await listing.restorable()
        clock[0] += RESTORABLE_TTL_S
        return [before, cached, await listing.restorable()]

    before, cached, after = run(scenario())
    newest_time = "2023-11-14T22:36:39.000Z"  # T0_MS + 1399 s
    assert before == {"oldest_version": 0, "oldest_time": None, "newest_version": 1400,
                      "newest_time": newest_time}  # fmt: skip
    assert cached == before
    assert after == {"oldest_version": 301, "oldest_time": "2023-11-14T22:18:20.000Z",
                     "newest_version": 1400, "newest_time": newest_time}  # fmt: skip
    assert run(SnapshotListing(MemoryStore()).restorable()) is None


def test_the_window_reads_one_batch_when_the_newest_is_of_the_newest_claim() -> None:
    """holdings (what /v1/snapshots reads) reads back before the newest batch only when a
    newer term was claimed than the newest batch's (as recovery does for a new leader)."""
    batches = timed_log()
    store = run(setup(batches, 300))
    reads = record_gets(store)
    run(store.put(layout.term_key(batches[-1].term), b"{}"))
    assert run(holdings(store)).newest_version == 1400
    # (recovery's read of it, then holdings' own for its time)
    assert {k for k in reads if k.startswith(layout.BATCHES)} == {
        layout.batch_key(batches[-1].batch)
    }
