"""Point-in-time restore on Spark: the compaction job's fold, started from a chosen snapshot
and cut at version V, read from one store and written into another (docs/backup.md,
"Point-in-time restore"; the planning is weaseldb.core.restore).

1. Checks, before anything is written: what the source holds (weaseldb.core.holdings), V
   (or the time T) inside it, and a destination that is empty or holds only an unfinished
   restore's leftovers (removed, then the restore starts again).
2. With --to-time, the survey reads the source's whole retained log and each header says
   the greatest version committed by T; V is the greatest among the valid batches.
3. The base snapshot: the newest published one at or below V (none: the empty state).
   The survey reads the batches after it, up to the oldest snapshot above V (its batch
   holds V), the validity rule seeded from the base decides which are void, and the fold
   reads the valid ones up to the batch holding V, dropping the transactions after V.
4. Parquet into the destination (fsynced on a directory store), then the destination's
   objects in order: manifest, term claim, empty batch, log-start marker (last: the mark
   of a finished restore).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from pyspark.sql import SparkSession

from weaseldb.core import batchfile, history, layout, logstart, manifest
from weaseldb.core import restore as planning
from weaseldb.core.claims import TermClaim
from weaseldb.core.errors import CorruptObject, NotFound
from weaseldb.core.holdings import Holdings, holdings
from weaseldb.core.manifest import Manifest, SourceBatches
from weaseldb.core.recovery import read_batch
from weaseldb.core.restore import RestoreRefused
from weaseldb.core.store import BlobStore, list_all
from weaseldb.core.timestamps import now_iso
from weaseldb.core.types import BatchNumber, Term, Version
from weaseldb.core.validity import GENESIS, Seed, valid_flags
from weaseldb.runtime.stores import open_store
from weaseldb_compaction import fetch, job, plan, transforms
from weaseldb_compaction.session import configure_job, parquet_place, per_bucket, use_settings

T = TypeVar("T")


@dataclass(frozen=True)
class RestoreOptions:
    source_url: str
    into_url: str
    to_version: int | None = None  # neither: the newest restorable version (a clone)
    to_time_ms: int | None = None


@dataclass
class Restored:
    version: Version
    keys: int
    base: Version | None  # the snapshot folded onto (None: the empty state)
    batches_read: int
    operations: int
    seconds: float = 0.0
    committed_at_ms: int = 0

    def summary(self, into: str) -> str:
        return f"restored version {self.version} ({self.keys} keys) into {into.split('?')[0]}"


@dataclass(frozen=True)
class _Plan:
    version: Version
    base: Manifest | None
    leftovers: list[str]
    seed: Seed  # the validity seed after the base
    committed_at_ms: int | None  # known from the time survey


class _Restore:
    def __init__(
        self, spark: SparkSession, options: RestoreOptions, progress: Callable[[str], None]
    ):
        self.spark = spark
        self.options = options
        self.progress = progress
        self.loop = asyncio.new_event_loop()
        self.source: BlobStore = open_store(options.source_url)
        self.into: BlobStore = open_store(options.into_url)
        self.read_place = parquet_place(options.source_url)
        self.write_place = parquet_place(options.into_url)

    def sync(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def close(self) -> None:
        self.sync(self.source.close())
        self.sync(self.into.close())
        self.loop.close()


def run(
    spark: SparkSession, options: RestoreOptions, progress: Callable[[str], None] = print
) -> Restored:
    """Restore; RestoreRefused (nothing written) when it cannot be done as asked."""
    started = time.monotonic()
    r = _Restore(spark, options, progress)
    try:
        use_settings(spark, {**r.read_place.hadoop, **per_bucket([r.read_place, r.write_place])})
        configure_job(spark)
        result = _restore(r)
    finally:
        r.close()
    result.seconds = time.monotonic() - started
    return result


def _restore(r: _Restore) -> Restored:
    held, leftovers = r.sync(_checks(r))
    if r.options.to_time_ms is not None:
        target = _plan_for_time(r, held, r.options.to_time_ms, leftovers)
    else:
        version = held.newest_version if r.options.to_version is None else r.options.to_version
        target = r.sync(_plan_for_version(r.source, held, version, leftovers))
    r.progress(
        f"restoring version {target.version} from "
        f"{'snapshot ' + str(target.base.version) if target.base else 'the empty state'}"
    )
    for key in target.leftovers:  # an unfinished restore's: start again
        r.sync(r.into.delete(key))
    return _fold_and_write(r, target)


async def _checks(r: _Restore) -> tuple[Holdings, list[str]]:
    where = r.options.into_url.split("?")[0]
    held = await holdings(r.source)
    if held is None:
        source = r.options.source_url.split("?")[0]
        raise RestoreRefused(f"the source {source} holds no database (no batches, no snapshot)")
    leftovers = await destination_leftovers(r.into, where)
    if r.options.to_version is not None:
        planning.check_version(r.options.to_version, held)
    if r.options.to_time_ms is not None:
        planning.check_time(r.options.to_time_ms, held, int(time.time() * 1000))
    return held, leftovers


async def destination_leftovers(into: BlobStore, where: str) -> list[str]:
    """An unfinished restore's keys in the destination (planning.destination_leftovers)."""
    keys = await list_all(into, "")
    leaders: dict[str, str] = {}
    for key in planning.owned_keys():
        if key in keys:
            leaders[key] = _leader_of(key, await into.get(key))
    return planning.destination_leftovers(keys, where, leaders)


def _leader_of(key: str, body: bytes) -> str:
    try:
        if key.startswith(layout.TERMS):
            return TermClaim.decode(body).leader_id
        return batchfile.decode(body, key=key).leader_id
    except (ValueError, CorruptObject):
        return ""  # not a restore's: refused


async def _plan_for_version(
    source: BlobStore, held: Holdings, version: int, leftovers: list[str]
) -> _Plan:
    base_version = planning.base_snapshot(version, held)
    base = None if base_version is None else await manifest.read(source, base_version)
    seed = base.seed if base is not None else GENESIS
    return _Plan(Version(version), base, leftovers, seed, None)


def _plan_for_time(r: _Restore, held: Holdings, time_ms: int, leftovers: list[str]) -> _Plan:
    """V from the whole retained log's survey (each header: what it committed by T)."""
    oldest = r.sync(logstart.seed(r.source))
    numbers = _numbers(r, oldest, None)
    times: list[planning.BatchTimes] = []
    if numbers:
        survey = _survey(r, numbers, time_ms)
        headers = sorted(survey.headers, key=lambda h: -h.number)
        flags = valid_flags([h.term for h in headers], oldest)
        times = [
            planning.BatchTimes(ok, *survey.times[plan.seq_of(h.number)])
            for h, ok in zip(headers, flags, strict=True)
        ]
    version, committed_at = planning.version_at_time(times, time_ms, held)
    r.progress(f"--to-time {planning.format_time(time_ms)} is version {version}")
    found = r.sync(_plan_for_version(r.source, held, version, leftovers))
    return dataclasses.replace(found, committed_at_ms=committed_at)


def _numbers(r: _Restore, seed: Seed, upto: int | None) -> list[BatchNumber]:
    """The durable batches after `seed`, none newer than batch `upto`."""
    found = history.gapless_prefix(r.sync(history.batch_numbers_after(r.source, seed)), seed)
    return [n for n in found if upto is None or n >= upto]


def _survey(r: _Restore, numbers: list[BatchNumber], at_ms: int | None = None) -> job.Survey:
    first, last = plan.seq_of(numbers[0]), plan.seq_of(numbers[-1])
    ordinals = job.ordinals(r.spark, first, last)
    return job.Survey(transforms.survey(ordinals, r.options.source_url, at_ms).collect())


def _fold_and_write(r: _Restore, target: _Plan) -> Restored:
    upto = r.sync(_upper_batch(r.source, target.version))
    base_version = target.base.version if target.base is not None else Version(0)
    numbers = [] if target.version == base_version else _numbers(r, target.seed, upto)
    cut = None
    operations = 0
    if numbers:
        survey = _survey(r, numbers)
        cut = _cut(survey, target)
    run_id = planning.restore_id(int(time.time() * 1000), uuid.uuid4().hex[:8])
    location = planning.location(target.version, run_id)
    if cut is None:  # the base snapshot is the state at V: copied through the same fold
        nothing = r.spark.createDataFrame([], fetch.POINTS_DDL)
        fold = job.Fold(nothing, [], transforms.fragments_from([]), 0)
    else:
        survey, plan_target = cut
        operations = plan_target.operations
        r.progress(
            f"folding {operations} operations of {plan_target.count} batches "
            f"({len(plan_target.void_seqs)} void) onto "
            f"{'snapshot ' + str(base_version) if target.base else 'the empty state'}"
        )
        first = plan.seq_of(numbers[0])
        points = transforms.point_operations(
            job.ordinals(r.spark, first, plan_target.last_seq),
            r.options.source_url,
            plan_target.void_seqs,
            upto_version=target.version,
        )
        fold = job.Fold(
            points, survey.samples, survey.fragments(plan_target, first), plan_target.size
        )
    files = job.write_snapshot(
        r.spark, fold, target.base, r.read_place, r.write_place, location, r.progress
    )
    r.sync(job.make_durable(r.into, location))
    committed_at = target.committed_at_ms
    if committed_at is None:
        committed_at = r.sync(_commit_time(r.source, target, cut[1] if cut else None))
    result = _manifest(target.version, location, files)
    r.sync(_write_destination(r.into, result, run_id, committed_at))
    batches = cut[1].count if cut else 0
    base = target.base.version if target.base is not None else None
    return Restored(
        target.version, result.keys, base, batches, operations, committed_at_ms=committed_at
    )


def _cut(survey: job.Survey, target: _Plan) -> tuple[job.Survey, plan.Target] | None:
    """The fold's plan: the batches after the base up to the first valid one that holds V,
    void ones skipped by the validity rule seeded from the base; its version is V."""
    headers = sorted(survey.headers, key=lambda h: -h.number)
    flags = valid_flags([h.term for h in headers], target.seed)
    holding = next(
        (
            h
            for h, ok in zip(headers, flags, strict=True)
            if ok and h.last_version >= target.version
        ),
        None,
    )
    if holding is None:
        raise RestoreRefused(f"no valid batch of the source holds version {target.version}")
    chosen = plan.choose_target(headers, target.seed, upto_batch=holding.number)
    if chosen is None:
        return None
    return survey, dataclasses.replace(chosen, version=target.version)


async def _upper_batch(source: BlobStore, version: int) -> int | None:
    """The batch of the oldest snapshot above `version`: no batch after it is needed."""
    above = [v for v in await manifest.manifest_versions(source) if v > version]
    for v in above:
        try:
            return planning.upper_batch(version, [(v, (await manifest.read(source, v)).batch)])
        except NotFound:
            continue  # garbage-collected meanwhile: the next one bounds it too
    return None


async def _commit_time(source: BlobStore, target: _Plan, cut: plan.Target | None) -> int:
    """When V was committed in the source (0: unknown): from the batch that holds it, or
    the log-start marker at V."""
    candidates = [cut.batch] if cut is not None else []
    if target.base is not None:
        candidates.append(target.base.batch)
    for number in candidates:
        try:
            batch = await read_batch(source, number)
        except NotFound:
            continue
        for tx in batch.transactions:
            if tx.version == target.version:
                return tx.timestamp_ms
    start = await logstart.newest(source)
    if start is not None and start.version == target.version:
        return start.committed_at_ms
    return 0


def _manifest(version: Version, location: str, files: list[manifest.SnapshotFile]) -> Manifest:
    return manifest.decode(
        manifest.encode(
            Manifest(
                format=manifest.FORMAT_VERSION,
                version=version,
                batch=BatchNumber(planning.TOP),
                term=Term(planning.TOP),
                created_at=now_iso(fraction=6),
                location=location,
                files=files,
                keys=sum(f.rows for f in files),
                bytes=sum(f.size for f in files),
                source_batches=SourceBatches(oldest=None, newest=None, count=0),
                previous=None,
            )
        )
    )


async def _write_destination(
    into: BlobStore, result: Manifest, run_id: str, committed_at_ms: int
) -> None:
    """Manifest, term claim, empty batch, log-start marker: in this order, each create-only
    (a second restore into the same prefix at the same time fails on the first it loses)."""
    await into.put_if_absent(result.key, manifest.encode(result))
    now_ms = int(time.time() * 1000)
    for key, body in planning.objects_after_snapshot(
        result.version, run_id, now_ms, committed_at_ms
    ):
        await into.put_if_absent(key, body)
