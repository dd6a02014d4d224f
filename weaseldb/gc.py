"""Garbage collection of the batch log (docs/architecture.md, "GC and the validity rule").

A separate step from compaction, safe to crash and rerun at any point:
1. Pick the cut M: the newest published snapshot whose version is at or below every
   retention policy's version (no policy: the newest snapshot).
2. Create the log-start marker for M (create-only; "exists" means a previous run did).
   From here on every reader starts after M, so what follows only frees space.
3. Delete the batches at M and older (never one of the newest 1000: recovery's single
   LIST must still reach the durable region), the request-id index segments whose every
   batch is gone, snapshots older than M (manifest first, then its files), runs of the
   compaction job that never published (after a grace period: one may still be running),
   and older log-start markers.

`choose_cut` and `deletable_from` decide; `collect` does the reads and deletes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import msgspec
import orjson

from weaseldb import layout, logstart, manifest
from weaseldb.blobstore import BlobStore, NotFound, list_all
from weaseldb.manifest import Manifest
from weaseldb.types import MAX_IN_FLIGHT_LIMIT

#: How old an unpublished compaction run must be before GC deletes its files.
DEFAULT_GRACE_S = 3600.0
#: Deletes in flight.
PARALLEL_DELETES = 32
#: Suffix of the object a compaction run creates (with its start time) before writing
#: anything under its directory `snapshots/{v:020d}/{run}/`.
RUN_STARTED_SUFFIX = ".started"


class RunStarted(msgspec.Struct, frozen=True):
    run: str
    version: int
    started_at: float  # seconds since the epoch


def run_started_key(version: int, run: str) -> str:
    return f"{layout.snapshot_dir(version)}{run}{RUN_STARTED_SUFFIX}"


def run_location(version: int, run: str) -> str:
    return f"{layout.snapshot_dir(version)}{run}/"


@dataclass
class GcResult:
    cut: Manifest | None = None
    batches: int = 0
    index_segments: int = 0
    snapshots: int = 0
    abandoned_runs: int = 0
    markers: int = 0
    objects: int = 0
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.cut is None:
            return "gc: nothing to do (" + "; ".join(self.notes) + ")"
        return (
            f"gc: log starts after version {self.cut.version} (batch {self.cut.batch}); "
            f"deleted {self.batches} batches, {self.index_segments} index segments, "
            f"{self.snapshots} old snapshots, {self.abandoned_runs} abandoned runs, "
            f"{self.markers} old markers ({self.objects} objects)"
        )


# Decisions (pure)


def choose_cut(newest_first: Iterable[Manifest], policy_versions: list[int]) -> Manifest | None:
    """The newest snapshot at or below every retention policy's version."""
    floor = min(policy_versions, default=None)
    for candidate in newest_first:
        if floor is None or candidate.version <= floor:
            return candidate
    return None


def deletable_from(cut_batch: int, newest_keys: list[int]) -> int | None:
    """The newest batch number GC may delete (it deletes that one and every older one):
    the cut's batch, unless that is among the newest MAX_IN_FLIGHT_LIMIT batches present
    (`newest_keys`, one LIST, newest first), which recovery's LIST must still find.
    None: nothing may go."""
    if len(newest_keys) < MAX_IN_FLIGHT_LIMIT:
        return None
    return max(cut_batch, newest_keys[-1] + 1)


def run_of(key: str, version: int) -> str | None:
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
    for key in await list_all(store, layout.RETENTION):
        entry = layout.policy_entry(key)
        if entry is None:
            continue
        policy_id, version = entry
        if version is None:
            try:
                version = int(orjson.loads(await store.get(key))["version"])
            except NotFound:
                continue  # deleted between LIST and GET: it pins nothing any more
        newest[policy_id] = max(version, newest.get(policy_id, version))
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


async def collect(
    store: BlobStore,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    now: float | None = None,
    before_delete: Hook = _no_hook,
) -> GcResult:
    result = GcResult()
    published = await manifests_newest_first(store)
    if not published:
        result.notes.append("no published snapshot")
        return result
    cut = choose_cut(published, await policy_versions(store))
    if cut is None:
        result.notes.append("every snapshot is newer than a retention policy's version")
        return result
    result.cut = cut
    await logstart.write(store, logstart.LogStart(cut.batch, cut.term, cut.version))

    async def delete(what: str, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            page = keys[start : start + 1000]
            await before_delete(what, page)
            await _delete_all(store, page)
        result.objects += len(keys)

    newest = [layout.number_of(k) for k in await store.list(layout.BATCHES, limit=1000)]
    first = deletable_from(cut.batch, newest)
    if first is None:
        result.notes.append(f"fewer than {MAX_IN_FLIGHT_LIMIT} batches: none deleted")
    else:
        result.batches = await _delete_batches(store, first, delete)
        result.index_segments = await _delete_index_segments(store, first, delete)
    now = time.time() if now is None else now
    result.snapshots, result.abandoned_runs = await _delete_snapshots(
        store, cut, published, grace_s, now, delete
    )
    markers = [
        k for k in await list_all(store, layout.LOG_START) if k > layout.log_start_key(cut.batch)
    ]
    await delete("markers", markers)
    result.markers = len(markers)
    return result


Delete = Callable[[str, list[str]], Awaitable[None]]


async def _delete_batches(store: BlobStore, first: int, delete: Delete) -> int:
    keys = await list_all(store, layout.BATCHES, start_after=layout.batch_key(first - 1))
    await delete("batches", keys)
    return len(keys)


async def _delete_index_segments(store: BlobStore, first: int, delete: Delete) -> int:
    """Segments whose newest batch is deleted: every batch they cover is gone."""
    keys = []
    for key in await list_all(store, layout.REQUEST_IDS):
        try:
            newest_batch, _ = layout.request_index_span(key)
        except ValueError:
            continue
        if newest_batch >= first:
            keys.append(key)
    await delete("index", keys)
    return len(keys)


async def _delete_snapshots(
    store: BlobStore,
    cut: Manifest,
    published: list[Manifest],
    grace_s: float,
    now: float,
    delete: Delete,
) -> tuple[int, int]:
    """Older snapshots (manifest first, so no reader finds a manifest without its files),
    then unpublished runs older than the grace period."""
    old = [m for m in published if m.version < cut.version]
    for stale in old:
        await delete("manifests", [stale.key])
        await delete("snapshots", await list_all(store, layout.snapshot_dir(stale.version)))
    locations = {m.location for m in published if m.version >= cut.version}
    abandoned = 0
    for version, runs in (await _runs(store)).items():
        for run, keys in runs.items():
            if run_location(version, run) in locations:
                continue
            if await _is_running(store, version, run, grace_s, now):
                continue
            await delete("abandoned", keys)
            abandoned += 1
    return len(old), abandoned


async def _runs(store: BlobStore) -> dict[int, dict[str, list[str]]]:
    """Keys under snapshot directories, by version and run."""
    runs: dict[int, dict[str, list[str]]] = {}
    for key in await list_all(store, layout.SNAPSHOTS):
        if key.endswith(layout.MANIFEST_SUFFIX):
            continue
        parts = key.split("/")
        if len(parts) < 3 or not (len(parts[1]) == 20 and parts[1].isdigit()):
            continue
        version = int(parts[1])
        run = run_of(key, version)
        if run:
            runs.setdefault(version, {}).setdefault(run, []).append(key)
    return runs


async def _is_running(store: BlobStore, version: int, run: str, grace_s: float, now: float) -> bool:
    """A run without a start record was not made by a live job (it creates the record
    before anything else); one with a record is given `grace_s` to finish."""
    try:
        started = msgspec.json.decode(
            await store.get(run_started_key(version, run)), type=RunStarted
        )
    except (NotFound, msgspec.DecodeError):
        return False
    return now - started.started_at < grace_s
