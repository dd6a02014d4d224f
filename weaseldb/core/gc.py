"""Garbage collection of the batch log (docs/architecture.md, "GC and the validity rule").

A separate step from compaction, safe to crash and rerun at any point:
1. Pick the cut M: the newest published snapshot whose version is at or below every
   retention policy's version (no policy: the newest snapshot) and, with a keep-history
   window (`KeepHistory`), old enough that every version inside the window is restorable:
   M's version at least `versions` below the committed version and committed at least
   `seconds` ago. The window never moves the cut back (the history before it is gone).
2. Create the log-start marker for M (create-only; "exists" means a previous run did).
   From here on every reader starts after M, so what follows only frees space. Then read
   the policies again: one accepted while the marker was being written may pin history
   below M; then nothing is deleted (and a marker this run created is removed again). The
   policies are read again before every round of deletes too.
3. Delete the batches at M and older (never one of the newest 1000: recovery's single
   LIST must still reach the durable region; never one no request-id index segment
   covers yet), the index segments whose every batch is gone and which a new term's
   idempotency window does not read (`WindowTally`: the window outlives the batches),
   snapshots older than M a grace period after a newer one was published (a reader or a
   compaction may still be reading them), runs of the compaction job that stopped
   writing without publishing (their heartbeat is older than the grace period), and
   older log-start markers.

`CutBounds`, `choose_cut`, `deletable_from`, `WindowTally`, `expired_snapshots` and
`abandoned` decide; `collect` does the reads and deletes.

One module, longer than most, on purpose: the order of the steps above is the safety
argument (a reader never needs what was deleted), so the rules and the one function that
applies them in that order are read together, top to bottom.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import msgspec

from weaseldb.core import layout, logstart, manifest, policies, recovery, requestids
from weaseldb.core.batchfile import Batch
from weaseldb.core.config import IdempotencyConfig
from weaseldb.core.durations import format_duration
from weaseldb.core.errors import CorruptObject, NotFound
from weaseldb.core.manifest import Manifest
from weaseldb.core.requestids import Promise, SegmentHeader, SegmentSpan
from weaseldb.core.store import BlobStore, list_all
from weaseldb.core.timestamps import parse_iso
from weaseldb.core.types import MAX_IN_FLIGHT_LIMIT, NUMBER_TOP, BatchNumber, Version

#: Readers' grace: an old snapshot is deleted this long after a newer one was published,
#: and an unpublished compaction run once its heartbeat is this old.
DEFAULT_GRACE_S = 3600.0
#: A running compaction renews its start record this often (`RunHeartbeat`); a grace
#: period should be several of these.
HEARTBEAT_S = 60.0
#: Clocks of the GC host and of the leader that stamped the request ids may disagree by up
#: to this much: the time window GC keeps is this much longer.
CLOCK_MARGIN_MS = 60_000
#: The promise assumed for segments that do not record one (written before they did).
DEFAULT_PROMISE = Promise.of(IdempotencyConfig())
#: Deletes in flight.
PARALLEL_DELETES = 32
#: Suffix of the object a compaction run creates (with its start time) before writing
#: anything under its directory `snapshots/{v:020d}/{run}/`.
RUN_STARTED_SUFFIX = ".started"


class RunStarted(msgspec.Struct, frozen=True):
    run: str
    version: Version
    started_at: float  # seconds since the epoch
    alive_at: float = 0.0  # the run's last heartbeat (0: none yet)

    @property
    def last_sign_of_life(self) -> float:
        return max(self.started_at, self.alive_at)


def run_started_key(version: Version, run: str) -> str:
    return f"{layout.snapshot_dir(version)}{run}{RUN_STARTED_SUFFIX}"


def run_location(version: Version, run: str) -> str:
    return f"{layout.snapshot_dir(version)}{run}/"


@dataclass
class GcResult:
    cut: Manifest | None = None
    batches: int = 0
    index_segments: int = 0
    snapshots: int = 0
    abandoned_runs: int = 0
    markers: int = 0
    kept_index_segments: int = 0  # whose batches are gone, kept for the idempotency window
    kept_snapshots: int = 0  # older than the cut, still inside the readers' grace
    objects: int = 0
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.cut is None:
            return "gc: nothing to do (" + "; ".join(self.notes) + ")"
        return (
            f"gc: log starts after version {self.cut.version} (batch {self.cut.batch}); "
            f"deleted {self.batches} batches, {self.index_segments} index segments, "
            f"{self.snapshots} old snapshots, {self.abandoned_runs} abandoned runs, "
            f"{self.markers} old markers ({self.objects} objects); kept "
            f"{self.kept_index_segments} index segments for the idempotency window and "
            f"{self.kept_snapshots} old snapshots for readers"
            + "".join(f"; {note}" for note in self.notes)
        )


# Decisions (pure)


@dataclass(frozen=True)
class KeepHistory:
    """The keep-history window: every version committed in the last `seconds`, and the last
    `versions` versions, stay restorable (a snapshot at or below each, and every batch
    after it). 0: no bound of that kind."""

    seconds: int = 0
    versions: int = 0

    def __post_init__(self) -> None:
        if self.seconds < 0 or self.versions < 0:
            raise ValueError(f"a keep-history window is not negative: {self}")

    def describe(self) -> str:
        parts = [format_duration(self.seconds)] if self.seconds else []
        parts += [f"{self.versions} versions"] if self.versions else []
        return "the keep-history window (" + " and ".join(parts or ["none"]) + ")"


#: No keep-history window: the cut is the newest snapshot the policies allow.
NO_WINDOW = KeepHistory()


@dataclass(frozen=True)
class CutBounds:
    """What the cut may be. `policy`: every retention policy's version (None: no policy), a
    hard bound. `version` and `time_ms`, the keep-history window's: the cut's version at or
    below `version` and committed at or before `time_ms` (None: no bound)."""

    policy: int | None = None
    version: int | None = None
    time_ms: int | None = None

    @classmethod
    def of(
        cls,
        policy_versions: Iterable[int],
        keep: KeepHistory = NO_WINDOW,
        *,
        committed: int = 0,
        now_ms: int = 0,
    ) -> CutBounds:
        """`committed`: the newest committed version; `now_ms`: the time GC runs."""
        return cls(
            policy=min(policy_versions, default=None),
            version=committed - keep.versions if keep.versions else None,
            time_ms=now_ms - keep.seconds * 1000 if keep.seconds else None,
        )

    def allows_version(self, version: int) -> bool:
        return all(bound is None or version <= bound for bound in (self.policy, self.version))

    def old_enough(self, committed_at_ms: int | None) -> bool:
        """A version committed at `committed_at_ms` is before the window's time (an unknown
        time, None or 0, is not: the window keeps what it cannot place)."""
        if self.time_ms is None:
            return True
        return committed_at_ms is not None and 0 < committed_at_ms <= self.time_ms

    def lets_go(self, version: int, committed_at_ms: int | None) -> bool:
        """A snapshot at `version`, committed at `committed_at_ms`, may be the cut."""
        return self.allows_version(version) and self.old_enough(committed_at_ms)


def choose_cut(
    newest_first: Iterable[Manifest],
    bounds: CutBounds,
    committed_at: Mapping[int, int] | None = None,
    current: int | None = None,
) -> Manifest | None:
    """The newest snapshot `bounds` let go, its commit time looked up by version in
    `committed_at`. `current`: the newest log-start marker's version. A snapshot at or
    below it needs only the policies' leave: the history before it is already gone, so the
    window cannot keep it and the cut stays where it is (its own batch may be deleted)."""
    times = committed_at or {}
    for candidate in newest_first:
        if bounds.policy is not None and candidate.version > bounds.policy:
            continue
        if current is not None and candidate.version <= current:
            return candidate
        if bounds.lets_go(candidate.version, times.get(candidate.version)):
            return candidate
    return None


def committed_at_ms(batch: Batch, version: int) -> int:
    """When `version` was committed, as `batch` (the batch holding it, or a later one)
    records it: its transaction's timestamp, else the batch's creation time (later than the
    commit, so a window bound by it keeps more, never less). 0: not recorded."""
    for tx in reversed(batch.transactions):
        if tx.version == version and tx.timestamp_ms:
            return tx.timestamp_ms
    return batch.created_at_ms


def deletable_from(
    cut_batch: int, newest_keys: list[int], indexed_from: int | None = None
) -> int | None:
    """The newest batch number GC may delete (it deletes that one and every older one):
    the cut's batch, unless that is among the newest MAX_IN_FLIGHT_LIMIT batches present
    (`newest_keys`, one LIST, newest first), which recovery's LIST must still find, or
    newer than `indexed_from`, the newest batch a request-id index segment covers (a new
    term reads the batches after it for their request ids). None: nothing may go."""
    if len(newest_keys) < MAX_IN_FLIGHT_LIMIT:
        return None
    return max(cut_batch, newest_keys[-1] + 1, indexed_from or 0)


@dataclass
class WindowTally:
    """Counts segments, newest first, until they hold what a new term's idempotency window
    reads (`requestids.window_loaded`). From headers alone, so conservatively: a segment's
    ids count as older than the time window only when its newest one is, by `cutoff_ms`
    (the window and CLOCK_MARGIN_MS before now). It never stops before `load_window` would."""

    promise: Promise
    cutoff_ms: int
    total: int = 0
    older: int = 0

    @classmethod
    def at(cls, promise: Promise, now_ms: int) -> WindowTally:
        return cls(promise, now_ms - promise.window_ms - CLOCK_MARGIN_MS)

    def add(self, header: SegmentHeader) -> bool:
        """Count one more segment; True once the ones counted hold the whole window."""
        self.total += header.count
        if header.newest_time_ms <= self.cutoff_ms:
            self.older += header.count
        return requestids.window_loaded(self.promise, self.total, self.older)


def expired_snapshots(
    newest_first: Sequence[Manifest], cut: Manifest, grace_s: float, now: float
) -> tuple[list[Manifest], list[Manifest]]:
    """(deletable, kept): the snapshots older than the cut, split by whether the snapshot
    published right after each was published at least `grace_s` before `now`. A reader or
    a compaction that started on an old snapshot while it was the newest has that long to
    finish."""
    deletable: list[Manifest] = []
    kept: list[Manifest] = []
    for newer, older in itertools.pairwise(newest_first):
        if older.version >= cut.version:
            continue
        superseded_at = _published_at(newer)
        expired = superseded_at is not None and now - superseded_at >= grace_s
        (deletable if expired else kept).append(older)
    return deletable, kept


def _published_at(m: Manifest) -> float | None:
    """When a snapshot was published (its manifest's `created_at`; None: unreadable)."""
    try:
        return parse_iso(m.created_at).timestamp()
    except ValueError:
        return None


def abandoned(started: RunStarted | None, grace_s: float, now: float) -> bool:
    """An unpublished run stopped writing: it has no start record (a live job creates one
    before anything else), or its last heartbeat is older than `grace_s`."""
    return started is None or now - started.last_sign_of_life >= grace_s


def pinned_below(policy_versions: list[int], cut: Manifest) -> int | None:
    """The lowest retention policy version below the cut (history after it must stay), or
    None when every policy allows the cut."""
    low = min(policy_versions, default=None)
    return low if low is not None and low < cut.version else None


def run_of(key: str, version: Version) -> str | None:
    """The run a key under `snapshots/{version}/` belongs to."""
    rest = key[len(layout.snapshot_dir(version)) :]
    if not rest:
        return None
    head = rest.split("/", 1)[0]
    return head.removesuffix(RUN_STARTED_SUFFIX)


# Reads


async def policy_versions(store: BlobStore) -> list[int]:
    """The version of every retention policy: the highest of its create-only documents
    (`layout.policy_document_key`, the version is in the key), or the version in a single
    `retention/{id}` JSON document."""
    newest: dict[str, int] = {}
    for policy_id, version, _ in await policies.documents(store):  # lowest first
        newest[policy_id] = version
    return list(newest.values())


async def manifests_newest_first(store: BlobStore) -> list[Manifest]:
    found = []
    for version in reversed(await manifest.manifest_versions(store)):
        try:
            found.append(await manifest.read(store, version))
        except NotFound:
            continue
    return found


# The collection


async def _delete_all(store: BlobStore, keys: list[str]) -> None:
    limit = asyncio.Semaphore(PARALLEL_DELETES)

    async def delete(key: str) -> None:
        async with limit:
            await store.delete(key)

    await asyncio.gather(*(delete(k) for k in keys))


#: Called between deletions with what is about to go; a test injects a crash here.
Hook = Callable[[str, list[str]], Awaitable[None]]


async def _no_hook(_what: str, _keys: list[str]) -> None:
    return None


class PolicyPinned(Exception):
    """A retention policy now pins history below the cut: stop deleting."""


async def collect(
    store: BlobStore,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    now: float | None = None,
    keep: KeepHistory = NO_WINDOW,
    before_delete: Hook = _no_hook,
) -> GcResult:
    result = GcResult()
    now = time.time() if now is None else now
    published = await manifests_newest_first(store)
    if not published:
        result.notes.append("no published snapshot")
        return result
    current = await logstart.newest(store)
    bounds = await cut_bounds(store, keep, now)
    times = await _commit_times(store, published, bounds, current)
    cut = choose_cut(published, bounds, times, None if current is None else current.version)
    if cut is None:
        result.notes.append(_no_cut(published, bounds, keep))
        return result
    if current is None or current.after_batch != cut.batch:
        at_ms = times[cut.version] if cut.version in times else await _commit_time(store, cut)
        marker = logstart.LogStart(cut.batch, cut.term, cut.version, committed_at_ms=at_ms)
        created = await logstart.write(store, marker)
    else:
        created = False  # the cut stays: its marker exists (and its batch may be gone)
    low = pinned_below(await policy_versions(store), cut)
    if low is not None:
        # A policy accepted while the marker was written: nothing was deleted, so the
        # marker can go again and readers see the history the policy pins.
        if created:
            await store.delete(layout.log_start_key(cut.batch))
        result.notes.append(f"a retention policy now pins version {low}: nothing deleted")
        return result
    result.cut = cut
    try:
        await _collect_below(store, cut, published, grace_s, now, before_delete, result)
    except PolicyPinned as e:
        result.notes.append(f"stopped: {e}")
    return result


async def cut_bounds(store: BlobStore, keep: KeepHistory, now: float) -> CutBounds:
    """The bounds on the cut: the policies' and `keep`'s. The committed version is read
    only for a window in versions (recovery's LIST and one GET; no read-back while the
    newest batch is of the newest claimed term)."""
    committed = 0
    if keep.versions:
        claimed = await recovery.newest_claim(store)
        committed = (await recovery.recover(store, prior_term=claimed)).last_version
    return CutBounds.of(
        await policy_versions(store), keep, committed=committed, now_ms=int(now * 1000)
    )


async def _commit_times(
    store: BlobStore,
    newest_first: Sequence[Manifest],
    bounds: CutBounds,
    current: logstart.LogStart | None,
) -> dict[int, int]:
    """The commit times `choose_cut` needs for a window in time: of the snapshots newer
    than the current cut, oldest first, up to the first one too young (versions commit in
    order, so every newer one is too). One GET of a batch per snapshot the cut moves past,
    plus one."""
    times: dict[int, int] = {}
    if bounds.time_ms is None:
        return times
    for candidate in reversed(newest_first):
        if current is not None and candidate.version <= current.version:
            continue
        if not bounds.allows_version(candidate.version):
            break
        times[candidate.version] = await _commit_time(store, candidate)
        if not bounds.old_enough(times[candidate.version]):
            break
    return times


async def _commit_time(store: BlobStore, snapshot: Manifest) -> int:
    """When the snapshot's version was committed (0: its batch is gone or unreadable)."""
    try:
        return committed_at_ms(await recovery.read_batch(store, snapshot.batch), snapshot.version)
    except (NotFound, CorruptObject):
        return 0


def _no_cut(newest_first: Sequence[Manifest], bounds: CutBounds, keep: KeepHistory) -> str:
    """Why no snapshot may be the cut."""
    if bounds.policy is not None and all(m.version > bounds.policy for m in newest_first):
        return "every snapshot is newer than a retention policy's version"
    return f"every snapshot is inside {keep.describe()}: nothing deleted"


async def _collect_below(
    store: BlobStore,
    cut: Manifest,
    published: list[Manifest],
    grace_s: float,
    now: float,
    before_delete: Hook,
    result: GcResult,
) -> None:
    async def delete(what: str, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            page = keys[start : start + 1000]
            low = pinned_below(await policy_versions(store), cut)
            if low is not None:
                raise PolicyPinned(f"a retention policy now pins version {low}")
            await before_delete(what, page)
            await _delete_all(store, page)
        result.objects += len(keys)

    spans = requestids.cover(await requestids.list_spans(store))
    newest = [layout.number_of(k) for k in await store.list(layout.BATCHES, limit=1000)]
    first = deletable_from(cut.batch, newest, spans[0].newest_batch if spans else None)
    if first is None:
        result.notes.append(f"fewer than {MAX_IN_FLIGHT_LIMIT} batches: none deleted")
    else:
        result.batches = await _delete_batches(store, first, delete)
        result.index_segments, result.kept_index_segments = await _delete_index_segments(
            store, first, spans, int(now * 1000), delete
        )
    result.snapshots, result.kept_snapshots = await _delete_snapshots(
        store, cut, published, grace_s, now, delete
    )
    result.abandoned_runs = await _delete_abandoned_runs(store, published, grace_s, now, delete)
    markers = [
        k for k in await list_all(store, layout.LOG_START) if k > layout.log_start_key(cut.batch)
    ]
    await delete("markers", markers)
    result.markers = len(markers)


Delete = Callable[[str, list[str]], Awaitable[None]]


async def _delete_batches(store: BlobStore, first: int, delete: Delete) -> int:
    after = layout.batch_key(BatchNumber(first - 1))
    keys = await list_all(store, layout.BATCHES, start_after=after)
    await delete("batches", keys)
    return len(keys)


async def _delete_index_segments(
    store: BlobStore, first: int, spans: list[SegmentSpan], now_ms: int, delete: Delete
) -> tuple[int, int]:
    """Segments whose every batch is gone (their newest batch is deleted) and which lie
    wholly beyond what a new term's idempotency window reads. (deleted, kept although
    their batches are gone)."""
    reach = await _window_reach(store, spans, now_ms)
    gone, kept = [], 0
    for key in await list_all(store, layout.REQUEST_IDS):
        try:
            newest_batch, _ = layout.request_index_span(key)
        except ValueError:
            continue
        if newest_batch < first:
            continue  # some of its batches remain
        if reach is not None and newest_batch <= reach:
            kept += 1  # the window reads it
        else:
            gone.append(key)
    await delete("index", gone)
    return len(gone), kept


async def _window_reach(store: BlobStore, spans: list[SegmentSpan], now_ms: int) -> int | None:
    """The oldest batch a new term's window reads (None: no segment), reading headers
    newest first only as far as needed. The promise is the one the newest segment records
    (its leader's). `load_window` reads segments a few at a time (whole groups): so does
    this. A segment gone while read was merged: keep every segment this time."""
    tally: WindowTally | None = None
    for needed, span in enumerate(spans, start=1):
        try:
            header, _ = await requestids.read_header(store, span.key)
        except NotFound:
            return NUMBER_TOP
        if tally is None:
            tally = WindowTally.at(header.promise or DEFAULT_PROMISE, now_ms)
        if tally.add(header):
            return spans[requestids.segments_read(needed, len(spans)) - 1].oldest_batch
    return spans[-1].oldest_batch if spans else None


async def _delete_snapshots(
    store: BlobStore,
    cut: Manifest,
    published: list[Manifest],
    grace_s: float,
    now: float,
    delete: Delete,
) -> tuple[int, int]:
    """Snapshots older than the cut and past the readers' grace (manifest first, so no
    reader finds a manifest without its files). (deleted, kept for the grace)."""
    old, kept = expired_snapshots(published, cut, grace_s, now)
    for stale in old:
        await delete("manifests", [stale.key])
        await delete("snapshots", await list_all(store, layout.snapshot_dir(stale.version)))
    return len(old), len(kept)


async def _delete_abandoned_runs(
    store: BlobStore,
    published: list[Manifest],
    grace_s: float,
    now: float,
    delete: Delete,
) -> int:
    """Files of compaction runs that never published and stopped writing."""
    locations = {m.location for m in published}
    count = 0
    for version, runs in (await _runs(store)).items():
        for run, keys in runs.items():
            if run_location(version, run) in locations:
                continue
            if not abandoned(await _run_started(store, version, run), grace_s, now):
                continue
            await delete("abandoned", keys)
            count += 1
    return count


async def _runs(store: BlobStore) -> dict[Version, dict[str, list[str]]]:
    """Keys under snapshot directories, by version and run."""
    runs: dict[Version, dict[str, list[str]]] = {}
    for key in await list_all(store, layout.SNAPSHOTS):
        if key.endswith(layout.MANIFEST_SUFFIX):
            continue
        parts = key.split("/")
        if len(parts) < 3 or not (len(parts[1]) == 20 and parts[1].isdigit()):
            continue
        version = Version(int(parts[1]))
        run = run_of(key, version)
        if run:
            runs.setdefault(version, {}).setdefault(run, []).append(key)
    return runs


async def _run_started(store: BlobStore, version: Version, run: str) -> RunStarted | None:
    try:
        return msgspec.json.decode(await store.get(run_started_key(version, run)), type=RunStarted)
    except (NotFound, msgspec.DecodeError):
        return None
