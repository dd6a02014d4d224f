"""`weaseldb backup`: copy a database's snapshots and batches into a second store, and read
a backup end to end (docs/backup.md, "A second copy"). The decisions are
weaseldb.core.backup; this module does the reads and writes.

A copy runs in this order, each object create-only: the snapshots not yet published in
the backup (Parquet files first, the manifest last: it publishes), the source's log-start
marker on the first run only, then the batches from the backup's watermark up to the
source's gapless durable region. A crash anywhere leaves a backup the next run resumes.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from weaseldb.core import backup, batchfile, history, layout, logstart, manifest
from weaseldb.core.backup import BackupError, LogCheck, Report, Tally
from weaseldb.core.config import PersisterConfig
from weaseldb.core.errors import AlreadyExists, CorruptObject, NotFound
from weaseldb.core.holdings import holdings
from weaseldb.core.logstart import LogStart
from weaseldb.core.store import BlobStore
from weaseldb.core.types import BatchNumber, Version
from weaseldb.runtime.retries import with_retries

log = logging.getLogger("weaseldb.backup")

#: Objects copied (or read back) at once by default.
DEFAULT_PARALLELISM = 16
#: The store's own retry rule (weaseldb.runtime.retries), with its default budget.
RETRIES = PersisterConfig()

T = TypeVar("T")


async def in_order(
    items: Iterable[T], work: Callable[[T], Coroutine[Any, Any, None]], width: int
) -> None:
    """Run `work` on each item, at most `width` at once, and never more than `width` items
    ahead of the oldest unfinished one: like the persister's window, what a crash leaves
    done beyond the first unfinished item is bounded. The first failure stops the rest."""
    window: deque[asyncio.Task[None]] = deque()
    try:
        for item in items:
            if len(window) >= width:
                await window.popleft()
            window.append(asyncio.create_task(work(item)))
        while window:
            await window.popleft()
    finally:
        for task in window:
            task.cancel()
        await asyncio.gather(*window, return_exceptions=True)


async def _get(store: BlobStore, key: str) -> bytes:
    return await with_retries(lambda: store.get(key), RETRIES, f"GET {key}")


async def _put(store: BlobStore, key: str, data: bytes, tally: Tally) -> None:
    """Create `key` in the backup; an object already there must hold the same bytes."""
    try:
        await with_retries(lambda: store.put_if_absent(key, data), RETRIES, f"PUT {key}")
    except AlreadyExists:
        backup.judge_existing(key, data, await _get(store, key))
        tally.skipped += 1
        return
    tally.copied += 1


def parquet_rows(data: bytes) -> int | None:
    """Rows of a Parquet file from its footer; None when it is not one."""
    try:
        return int(pq.read_metadata(pa.BufferReader(data)).num_rows)
    except (pa.ArrowException, OSError):
        return None


# Copying


async def copy(
    source: BlobStore, dest: BlobStore, parallelism: int = DEFAULT_PARALLELISM
) -> dict[str, Any]:
    """One backup run; the summary line `weaseldb backup` prints. BackupError when it
    cannot go on (what it wrote stays: the next run resumes)."""
    tally = Tally()
    source_marker = await logstart.newest(source)  # first: an unreadable source writes nothing
    dest_marker = await logstart.newest(dest)
    has_batches = bool(await dest.list(layout.BATCHES, limit=1))
    marker = backup.marker_to_copy(dest_marker, has_batches, source_marker)
    start = marker or dest_marker
    oldest = Version(0) if start is None else start.version
    run = await _batches_to_copy(source, dest, start)  # FellBehind here writes nothing
    await _copy_snapshots(source, dest, oldest, tally, parallelism)
    if marker is not None:
        if marker.version not in await manifest.manifest_versions(dest):
            raise BackupError(
                f"the source's log-start snapshot at version {marker.version} was deleted "
                "while the first backup ran (its garbage collection moved on): run it again"
            )
        await _put(dest, marker.key, logstart.encode(marker), tally)
    await _copy_batches(source, dest, run, tally, parallelism)
    return tally.line(await holdings(dest))


async def _copy_snapshots(
    source: BlobStore, dest: BlobStore, oldest: Version, tally: Tally, parallelism: int
) -> None:
    versions = backup.snapshots_to_copy(
        await manifest.manifest_versions(source), await manifest.manifest_versions(dest), oldest
    )
    for version in versions:
        if not await _copy_snapshot(source, dest, version, tally, parallelism):
            tally.vanished.append(version)
            log.warning("snapshot %d was garbage-collected while copied: skipped", version)


async def _copy_snapshot(
    source: BlobStore, dest: BlobStore, version: Version, tally: Tally, parallelism: int
) -> bool:
    """Copy one snapshot, its files first and its manifest last; False when the source's
    GC deleted it meanwhile (its manifest is then not copied: files already copied stay
    unpublished, as an abandoned compaction run's would)."""
    key = layout.manifest_key(version)
    try:
        data = await _get(source, key)
        published = manifest.decode(data, key=key)

        async def copy_file(entry: manifest.SnapshotFile) -> None:
            body = await _get(source, entry.path)
            problem = backup.file_problem(entry, len(body), parquet_rows(body))
            if problem is not None:
                raise CorruptObject(f"source snapshot {version}: {problem}")
            await _put(dest, entry.path, body, tally)

        await in_order(published.files, copy_file, parallelism)
    except NotFound:
        return False
    await _put(dest, key, data, tally)
    return True


async def _batches_to_copy(
    source: BlobStore, dest: BlobStore, start: LogStart | None
) -> list[BatchNumber]:
    """The source's batches the backup lacks, oldest first: from the first one after the
    backup's gapless run (from its marker, or the genesis) up to the source's first gap
    (its durable region: the database may be writing past it). FellBehind when the source's
    GC already deleted the first of them."""
    seed = backup.seed_of(start)
    held = history.gapless_prefix(await history.batch_numbers_after(dest, seed), seed)
    if held:  # the same history as the source's, where the source still has it
        await _same_as_source(source, dest, held[-1])
    first = backup.next_number(held, seed)
    from_first = backup.listing_seed(first)
    run = history.gapless_prefix(await history.batch_numbers_after(source, from_first), from_first)
    if not run:
        await _check_not_behind(source, dest, first)
    return run


async def _same_as_source(source: BlobStore, dest: BlobStore, number: BatchNumber) -> None:
    """The backup's newest batch must be the source's: else it is another database's."""
    key = layout.batch_key(number)
    try:
        theirs = await _get(source, key)
    except NotFound:
        return  # collected at the source since: the backup keeps it
    backup.judge_existing(key, theirs, await _get(dest, key))


async def _copy_batches(
    source: BlobStore, dest: BlobStore, run: list[BatchNumber], tally: Tally, parallelism: int
) -> None:
    async def copy_batch(number: BatchNumber) -> None:
        key = layout.batch_key(number)
        try:
            data = await _get(source, key)
        except NotFound:
            raise _Gone(number) from None
        batch = batchfile.decode(data, key=key)  # the checksum, on the way
        if batch.batch != number:
            raise CorruptObject(f"{key}: its header says batch {batch.batch}")
        await _put(dest, key, data, tally)

    try:
        await in_order(run, copy_batch, parallelism)
    except _Gone as gone:
        # After the window stopped, so the message names what the backup holds now.
        await _check_not_behind(source, dest, gone.number, listed=True)


class _Gone(Exception):
    """A listed source batch was not found when read."""

    def __init__(self, number: BatchNumber) -> None:
        super().__init__(f"batch {number}")
        self.number = number


async def _check_not_behind(
    source: BlobStore, dest: BlobStore, number: BatchNumber, *, listed: bool = False
) -> None:
    """Batch `number`, needed next, is not in the source: FellBehind when the source's GC
    took it; a listed batch that vanished otherwise is an error of the source's."""
    marker = await logstart.newest(source)
    if marker is not None and backup.needed_but_gone(number, marker):
        raise backup.fell_behind(number, await holdings(dest), marker)
    if listed:
        raise BackupError(
            f"batch {number} vanished from the source although its log start did not move "
            "past it: something other than garbage collection deleted it"
        )


# Verifying


async def verify(store: BlobStore, parallelism: int = DEFAULT_PARALLELISM) -> Report:
    """Read a backup end to end: every batch from its marker on (checksum, gaps, the
    validity walk), every published manifest (checksum) and snapshot file (present, its
    size and row count)."""
    start = await logstart.newest(store)
    check = LogCheck(start)
    await _check_log(store, start, check, parallelism)
    published = await manifest.manifest_versions(store)
    good, problems = await _check_snapshots(store, published, start, check, parallelism)
    try:
        held = await holdings(store)
    except CorruptObject as e:  # what a restore would trip on first
        held = None
        problems.append(f"the recovery scan fails: {e}")
    return backup.report(start, check, published, good, problems, held)


async def _check_log(
    store: BlobStore, start: LogStart | None, check: LogCheck, parallelism: int
) -> None:
    numbers = await history.batch_numbers_after(store, backup.seed_of(start))
    read: dict[BatchNumber, tuple[batchfile.Batch | None, str | None]] = {}

    async def read_one(number: BatchNumber) -> None:
        key = layout.batch_key(number)
        try:
            read[number] = (batchfile.decode(await _get(store, key), key=key), None)
        except (CorruptObject, NotFound) as e:
            read[number] = (None, f"{key}: {e}")

    # Windows of reads, each fed to the check in order, so memory stays bounded.
    for begin in range(0, len(numbers), parallelism * 4):
        chunk = numbers[begin : begin + parallelism * 4]
        await in_order(chunk, read_one, parallelism)
        for number in chunk:
            batch, error = read.pop(number)
            check.add(number, batch, error)


async def _check_snapshots(
    store: BlobStore,
    published: list[Version],
    start: LogStart | None,
    check: LogCheck,
    parallelism: int,
) -> tuple[list[Version], list[str]]:
    """(the published snapshots that checked out, oldest first; the problems found)."""
    good: list[Version] = []
    problems: list[str] = []
    for version in published:
        found = await _snapshot_problems(store, version, start, check, parallelism)
        problems += found
        if not found:
            good.append(version)
    return good, problems


async def _snapshot_problems(
    store: BlobStore, version: Version, start: LogStart | None, check: LogCheck, parallelism: int
) -> list[str]:
    try:
        published = await manifest.read(store, version)
    except (CorruptObject, NotFound) as e:
        return [f"snapshot {version}: {e}"]
    problems: list[str] = []
    seed_problem = backup.snapshot_problem(version, published.batch, check, start)
    if seed_problem:
        problems.append(seed_problem)

    async def check_file(entry: manifest.SnapshotFile) -> None:
        try:
            body = await _get(store, entry.path)
        except NotFound:
            problems.append(f"snapshot {version}: {entry.path} is missing")
            return
        problem = backup.file_problem(entry, len(body), parquet_rows(body))
        if problem:
            problems.append(f"snapshot {version}: {problem}")

    await in_order(published.files, check_file, parallelism)
    return problems
