"""The compaction driver: read, transform, write, publish (style.md 12). Then, if asked,
garbage collection as a separate step (weaseldb.core.gc).

1. The previous snapshot's manifest (or the log-start marker) seeds the validity walk;
   one paged LIST finds the batches after it, and the gapless run of them is what is
   durable (the watermark is where it ends).
2. Survey: executors fetch and decode those batches in parallel (fetch.survey); the driver
   collects one header per batch, the range deletes and a sample of keys, applies the
   shared validity rule (plan.choose_target), picks the target batch and version, and
   cuts the key space into ranges of about equal weight (plan.partition_bounds).
3. The fold (transforms): executors read the batches again, their point operations only
   (fetch.points); one shuffle by key range; zstd Parquet under a directory of its own,
   `snapshots/{version:020d}/{run}/`, after a start record that tells GC the run is live
   (renewed every minute while the run writes: GC removes a run only once it stopped).
   On a directory store every file and directory of the run is then fsynced.
4. Publish: the manifest, created with If-None-Match: *. Losing that race to another run
   at the same version removes this run's files and ends cleanly; a run killed before it
   publishes nothing (GC removes its files after a grace period).

Longer than most modules, on purpose: this is the driver's whole sequence, each step a short
function; the work each step hands to executors lives in fetch.py, plan.py and
transforms.py.
"""

from __future__ import annotations

import asyncio
import base64
import enum
import itertools
import math
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from pyspark.sql import DataFrame, SparkSession

from weaseldb.core import gc, history, logstart, manifest
from weaseldb.core.errors import AlreadyExists
from weaseldb.core.fold import RangeFragments
from weaseldb.core.manifest import Manifest, SnapshotFile, SourceBatches
from weaseldb.core.store import BlobStore, list_all
from weaseldb.core.timestamps import now_iso
from weaseldb.core.types import BatchNumber, Term, Version
from weaseldb.core.validity import Seed
from weaseldb.runtime.heartbeat import RunHeartbeat
from weaseldb.runtime.stores import open_store
from weaseldb.runtime.stores.directory import DirectoryStore
from weaseldb_compaction import fetch, plan, transforms
from weaseldb_compaction.session import ParquetPlace, configure_job, parquet_place, use_store

T = TypeVar("T")
#: Aim for Parquet files of about this much encoded input (the files come out smaller).
TARGET_FILE_BYTES = 128 * 1024 * 1024
#: Batches per fetch task, at least.
BATCHES_PER_TASK = 256
SNAPSHOT_SCHEMA = "key binary, value binary, version long"


class CompactionError(Exception):
    """A run cannot start; the message names the problem."""


class NoBatches(CompactionError):
    pass


@dataclass(frozen=True)
class Options:
    store_url: str
    upto_batch: int | None = None  # fold no batch newer than this (numbers count down)
    collect_garbage: bool = False
    gc_grace_s: float = gc.DEFAULT_GRACE_S
    keep: gc.KeepHistory = gc.NO_WINDOW  # GC's keep-history window


class RunStatus(enum.StrEnum):
    """How a run ended (a failed run raises instead)."""

    PUBLISHED = "published"  # this run's snapshot is the newest
    UP_TO_DATE = "up_to_date"  # nothing newer to fold: nothing written
    LOST_RACE = "lost_race"  # another run published the same version first: its files removed


@dataclass
class Outcome:
    status: RunStatus
    message: str
    manifest: Manifest | None = None
    batches_read: int = 0
    operations: int = 0
    seconds: float = 0.0
    garbage: gc.GcResult | None = None
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.manifest is None:
            return f"compaction: {self.message} ({self.seconds:.1f} s)"
        m = self.manifest
        return (
            f"compaction: published version {m.version}: {m.keys} keys, {m.bytes} bytes, "
            f"{self.operations} operations from {self.batches_read} batches in "
            f"{self.seconds:.1f} s"
        )


class _Driver:
    """One run; async store calls go through one event loop (the S3 client is bound to it)."""

    def __init__(self, spark: SparkSession, options: Options, progress: Callable[[str], None]):
        self.spark = spark
        self.options = options
        self.progress = progress
        self.loop = asyncio.new_event_loop()
        self.store: BlobStore = open_store(options.store_url)
        self.place: ParquetPlace = parquet_place(options.store_url)
        self.heartbeat: RunHeartbeat | None = None

    def sync(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def beat(self, started: gc.RunStarted) -> None:
        """Renew the run's start record while it writes, so GC sees it alive."""
        url = self.options.store_url
        self.heartbeat = RunHeartbeat(lambda: open_store(url, pool_size=1), started).start()

    def stop_beating(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()
            self.heartbeat = None

    def close(self) -> None:
        self.stop_beating()
        self.sync(self.store.close())
        self.loop.close()


def run(spark: SparkSession, options: Options, progress: Callable[[str], None] = print) -> Outcome:
    started = time.monotonic()
    driver = _Driver(spark, options, progress)
    try:
        outcome = _compact(driver)
        if options.collect_garbage:
            garbage = gc.collect(driver.store, grace_s=options.gc_grace_s, keep=options.keep)
            outcome.garbage = driver.sync(garbage)
            progress(outcome.garbage.summary())
    finally:
        driver.close()
    outcome.seconds = time.monotonic() - started
    return outcome


def _compact(d: _Driver) -> Outcome:
    use_store(d.spark, d.place)
    configure_job(d.spark)
    previous = d.sync(manifest.newest(d.store))
    seed = previous.seed if previous else d.sync(logstart.seed(d.store))
    numbers = history.gapless_prefix(d.sync(history.batch_numbers_after(d.store, seed)), seed)
    if not numbers and previous is None:
        raise NoBatches(f"no batches under {d.options.store_url.split('?')[0]}: nothing to compact")
    d.progress(
        f"previous snapshot: {'version ' + str(previous.version) if previous else 'none'}; "
        f"{len(numbers)} durable batches after it"
    )
    if not numbers:
        return Outcome(
            RunStatus.UP_TO_DATE, f"snapshot {previous.version if previous else 0} is current"
        )
    with _StageProgress(d.spark, d.progress):
        return _fold_and_publish(d, previous, seed, numbers)


def _fold_and_publish(
    d: _Driver, previous: Manifest | None, seed: Seed, numbers: list[BatchNumber]
) -> Outcome:
    first, last = plan.seq_of(numbers[0]), plan.seq_of(numbers[-1])
    survey = Survey(transforms.survey(_ordinals(d, first, last), d.options.store_url).collect())
    headers = sorted(survey.headers, key=lambda h: -h.number)
    target = plan.choose_target(headers, seed, upto_batch=d.options.upto_batch)
    read_bytes = sum(h.size for h in headers)
    d.progress(f"read {len(headers)} batches ({read_bytes / 1e6:.1f} MB)")
    if target is None or (previous is not None and target.version <= previous.version):
        version = previous.version if previous else 0
        return Outcome(RunStatus.UP_TO_DATE, f"no new versions after {version}", None, len(headers))
    d.progress(
        f"folding {target.operations} operations of {target.count - len(target.void_seqs)} "
        f"valid batches ({len(target.void_seqs)} void) up to version {target.version}"
    )
    points = transforms.point_operations(
        _ordinals(d, first, target.last_seq), d.options.store_url, target.void_seqs
    )
    return _write_and_publish(d, points, survey, previous, target)


def _ordinals(d: _Driver, first: int, last: int) -> DataFrame:
    return ordinals(d.spark, first, last)


def ordinals(spark: SparkSession, first: int, last: int) -> DataFrame:
    """Batch ordinals first..last in slices for the parallel fetch."""
    count = last - first + 1
    parallelism = spark.sparkContext.defaultParallelism
    tasks = min(count, max(2 * parallelism, math.ceil(count / BATCHES_PER_TASK)))
    return transforms.batch_ordinals(spark, first, last, tasks)


class Survey:
    """The collected survey (fetch.survey): headers, range deletes, sampled point keys."""

    def __init__(self, rows: list[Any]) -> None:
        self.headers: list[plan.Header] = []
        self.cuts: list[tuple[int, bytes, bytes, int, int]] = []  # seq, begin, end, stamp
        self.samples: list[tuple[bytes, int]] = []  # key, operations it stands for
        # seq -> (greatest version committed by the time asked for, when): a restore's
        # --to-time (fetch.survey's at_ms)
        self.times: dict[int, tuple[int | None, int | None]] = {}
        for row in rows:
            if row.kind == fetch.HEADER:
                self.headers.append(_header(row))
                self.times[row.seq] = (row.at_version, row.at_ms)
            elif row.kind == fetch.CUT:
                self.cuts.append((row.seq, bytes(row.key), bytes(row.end), row.version, row.idx))
            else:
                self.samples.append((bytes(row.key), row.operations))

    def fragments(self, target: plan.Target, first_seq: int = 0) -> RangeFragments:
        """The range deletes of the batches `target` folds (from `first_seq` on), as
        disjoint fragments; none after `target.version` (a restore may cut inside a batch)."""
        void = set(target.void_seqs)
        return transforms.fragments_from(
            [
                c[1:]
                for c in self.cuts
                if first_seq <= c[0] <= target.last_seq
                and c[0] not in void
                and c[3] <= target.version
            ]
        )


def _header(row: Any) -> plan.Header:
    return plan.Header(
        number=BatchNumber(plan.number_of(row.seq)),
        term=Term(plan.number_of(row.term_seq)),
        first_version=Version(row.first_version),
        last_version=Version(row.last_version),
        operations=row.operations,
        size=row.size,
    )


def _write_and_publish(
    d: _Driver, points: DataFrame, survey: Survey, previous: Manifest | None, target: plan.Target
) -> Outcome:
    run_id = f"{int(time.time())}-{uuid.uuid4().hex[:8]}"
    location = gc.run_location(target.version, run_id)
    started = gc.RunStarted(run_id, target.version, time.time())
    d.sync(d.store.put_if_absent(gc.run_started_key(target.version, run_id), _json(started)))
    d.beat(started)
    fold = Fold(points, survey.samples, survey.fragments(target), target.size)
    written = write_snapshot(d.spark, fold, previous, d.place, d.place, location, d.progress)
    d.sync(make_durable(d.store, location))
    result = manifest.decode(manifest.encode(_manifest(previous, target, location, written)))
    d.progress(f"wrote {len(written)} Parquet files: {result.keys} keys, {result.bytes} bytes")
    try:
        d.sync(d.store.put_if_absent(result.key, manifest.encode(result)))
    except AlreadyExists:
        d.stop_beating()
        d.sync(_remove_run(d.store, target.version, run_id))
        return Outcome(
            RunStatus.LOST_RACE,
            f"another compaction published version {target.version} first; "
            "this run's files were removed",
            None,
            target.count,
            target.operations,
        )
    d.stop_beating()
    d.sync(d.store.delete(gc.run_started_key(target.version, run_id)))
    return Outcome(RunStatus.PUBLISHED, "published", result, target.count, target.operations)


@dataclass(frozen=True)
class Fold:
    """What a run folds onto its previous snapshot: the point operations (a DataFrame),
    the survey's sampled keys, the range deletes, and the encoded bytes of the batches."""

    points: DataFrame
    samples: list[tuple[bytes, int]]
    fragments: RangeFragments
    size: int


def write_snapshot(
    spark: SparkSession,
    fold: Fold,
    previous: Manifest | None,
    read_place: ParquetPlace,
    write_place: ParquetPlace,
    location: str,
    progress: Callable[[str], None],
) -> list[SnapshotFile]:
    """Fold `fold` onto `previous` (its files under `read_place`) and write the Parquet
    files under `location` of `write_place` (compaction: the same store; a restore: the
    destination). The files written, for the manifest."""
    points = fold.points
    samples = list(fold.samples)
    if previous is not None and previous.files:
        urls = [read_place.url(f.path) for f in previous.files]
        old = spark.read.schema(SNAPSHOT_SCHEMA).parquet(*urls)
        points = points.unionByName(transforms.snapshot_as_writes(old))
        samples += [(base64.b64decode(f.min_key), f.rows) for f in previous.files]
    if len(fold.fragments):
        progress(f"{len(fold.fragments)} disjoint range-delete fragments")
    shared = spark.sparkContext.broadcast(fold.fragments) if len(fold.fragments) else None
    files = max(1, math.ceil((fold.size + (previous.bytes if previous else 0)) / TARGET_FILE_BYTES))
    # Every operation is folded in these partitions: at least one per core, even when the
    # files would come out smaller than the target.
    partitions = max(files, spark.sparkContext.defaultParallelism)
    bounds = plan.partition_bounds(samples, partitions)
    stats = spark.sparkContext.accumulator([], transforms.StatsParam())
    partitioned = transforms.by_key_range(points, bounds, partitions)
    rows = transforms.snapshot_rows(partitioned, shared, stats)
    rows.write.mode("errorifexists").parquet(write_place.url(location))
    return _written_files(spark, write_place, location, stats.value)


def _written_files(
    spark: SparkSession, place: ParquetPlace, location: str, stats: transforms.FileStats
) -> list[SnapshotFile]:
    """Path, size, rows and key range of every Parquet file the run wrote. Spark names a
    task's file `part-<partition id>-...`; the rows and key range come from that task. A
    file no task reported rows for is empty (Spark writes one when nothing is left): it is
    not listed."""
    sizes = _file_sizes(spark, place.url(location))
    by_partition = {f"part-{pid:05d}-": (rows, first, last) for pid, rows, first, last in stats}
    files = []
    for name, size in sorted(sizes.items()):
        found = [v for prefix, v in by_partition.items() if name.startswith(prefix)]
        if not found:
            continue
        if len(found) > 1:
            raise CompactionError(f"{location}{name}: ambiguous row statistics")
        rows, first, last = found[0]
        files.append(
            SnapshotFile(location + name, size, rows, manifest.b64(first), manifest.b64(last))
        )
    if sum(f.rows for f in files) != sum(s[1] for s in stats):
        raise CompactionError(f"{location}: files and row statistics disagree")
    ranges = [(first, last) for _, _, first, last in sorted(stats)]
    if any(before[1] >= after[0] for before, after in itertools.pairwise(ranges)):
        # Readers rely on it (file i holds keys below file i+1's): never publish otherwise.
        raise CompactionError(f"{location}: the files' key ranges overlap or are out of order")
    return files


def _file_sizes(spark: SparkSession, url: str) -> dict[str, int]:
    jvm = spark.sparkContext._jvm
    if jvm is None:
        raise RuntimeError("the Spark session has no JVM (stopped?)")
    path = jvm.org.apache.hadoop.fs.Path(url)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return {
        str(s.getPath().getName()): int(s.getLen())
        for s in fs.listStatus(path)
        if str(s.getPath().getName()).endswith(".parquet")
    }


def _manifest(
    previous: Manifest | None, target: plan.Target, location: str, files: list[SnapshotFile]
) -> Manifest:
    return Manifest(
        format=manifest.FORMAT_VERSION,
        version=target.version,
        batch=target.batch,
        term=target.term,
        created_at=now_iso(fraction=6),
        location=location,
        files=files,
        keys=sum(f.rows for f in files),
        bytes=sum(f.size for f in files),
        source_batches=SourceBatches(oldest=target.oldest, newest=target.batch, count=target.count),
        previous=previous.version if previous else None,
    )


async def make_durable(store: BlobStore, location: str) -> None:
    """On a directory store, fsync every Parquet file and directory of the run before the
    manifest is created: Hadoop's local file system never syncs, and once the manifest is
    durable GC durably deletes the batches it covers and the previous snapshot. An S3 PUT
    is durable when acknowledged: nothing to do there."""
    if isinstance(store, DirectoryStore):
        await store.sync_tree(location)


def _json(started: gc.RunStarted) -> bytes:
    return msgspec.json.encode(started)


async def _remove_run(store: BlobStore, version: Version, run_id: str) -> None:
    keys = await list_all(store, gc.run_location(version, run_id))
    for key in [*keys, gc.run_started_key(version, run_id)]:
        await store.delete(key)


class _StageProgress:
    """Prints Spark's task progress every few seconds while a run works."""

    def __init__(self, spark: SparkSession, progress: Callable[[str], None], every: float = 5):
        self._tracker = spark.sparkContext.statusTracker()
        self._progress = progress
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="progress")

    def __enter__(self) -> _StageProgress:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            for stage_id in self._tracker.getActiveStageIds():
                info = self._tracker.getStageInfo(stage_id)
                if info is not None:
                    self._progress(
                        f"  stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks"
                    )
