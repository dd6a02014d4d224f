"""A second copy of a database (docs/backup.md, "A second copy"): the decisions of
`weaseldb backup` and `weaseldb backup verify`. The copier and the verifier that do the
reads and writes are weaseldb.runtime.backup.

A backup is a store with a database prefix's layout: published snapshots, at most one
log-start marker (the source's newest when the backup was started), and the batches from
that marker (or the genesis) on, gapless. It keeps everything it copied: a later marker of
the source is never copied, since it would cut history off the backup. So
`weaseldb.core.holdings` and `weaseldb restore` read a backup as they read a database.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from weaseldb.core.batchfile import Batch
from weaseldb.core.holdings import Holdings
from weaseldb.core.logstart import LogStart
from weaseldb.core.manifest import SnapshotFile
from weaseldb.core.types import NUMBER_TOP, BatchNumber, Version
from weaseldb.core.validity import GENESIS, Seed, ValidityWalk

#: Objects a run copies at once, at most: a run killed half-way leaves holes only this close
#: to the backup's end, well inside the one LIST of 1000 keys the next run finds its
#: watermark with (weaseldb.core.recovery.scan_listing).
MAX_PARALLELISM = 256


class BackupError(Exception):
    """The copy cannot go on; nothing it wrote is wrong, and a rerun resumes."""


class FellBehind(BackupError):
    """A batch the backup still needs was garbage-collected from the source."""


# Copying


def judge_existing(key: str, ours: bytes, theirs: bytes) -> None:
    """An object already in the backup: identical bytes are a copy an earlier run made (it
    is skipped); anything else is not ours to overwrite."""
    if ours != theirs:
        raise BackupError(
            f"{key} already exists in the backup with different content: the destination "
            "is not a backup of this source (or was written by something else)"
        )


def marker_to_copy(
    backup_marker: LogStart | None, backup_has_batches: bool, source_marker: LogStart | None
) -> LogStart | None:
    """The source's newest log-start marker goes into a backup only while the backup holds
    neither a marker nor a batch (its first run, or a first run that crashed before any
    batch landed): a later marker would cut off history the backup holds."""
    if backup_marker is not None or backup_has_batches:
        return None
    return source_marker


def seed_of(marker: LogStart | None) -> Seed:
    return GENESIS if marker is None else marker.seed


def next_number(watermark: BatchNumber | None, seed: Seed) -> BatchNumber:
    """The first batch the backup lacks: after its watermark (the newest batch of its
    gapless run from `seed`), or the seed's first when it holds none."""
    return BatchNumber(watermark - 1) if watermark is not None else seed.first_number


def listing_seed(number: BatchNumber) -> Seed:
    """A seed whose walk (or listing) starts at batch `number` (its term is not used)."""
    return GENESIS if number == NUMBER_TOP else Seed(after_batch=BatchNumber(number + 1))


def snapshots_to_copy(
    source: list[Version], backup: list[Version], oldest: Version
) -> list[Version]:
    """Published source snapshots at or above the backup's oldest restorable version that
    the backup has not published yet, oldest first (older ones can restore nothing the
    backup holds)."""
    held = set(backup)
    return [v for v in source if v >= oldest and v not in held]


def needed_but_gone(number: BatchNumber, source_marker: LogStart | None) -> bool:
    """Batch `number`, which the backup needs next, is missing from the source: True when
    the source's garbage collection explains it (its log now starts after that batch)."""
    return source_marker is not None and number >= source_marker.after_batch


def fell_behind(number: BatchNumber, held: Holdings | None, source_marker: LogStart) -> FellBehind:
    newest = 0 if held is None else held.newest_version
    oldest = 0 if held is None else held.oldest_version
    return FellBehind(
        f"the backup fell behind the source's retention: batch {number} was garbage-collected "
        f"from the source before it was copied (the source's log now starts after version "
        f"{source_marker.version}); the backup holds versions {oldest}..{newest}, so versions "
        f"{newest + 1}..{source_marker.version} are lost to it. Keep history at the source "
        "longer than the interval between backups (compact --gc --keep-history, "
        "spec.backup.keepHistory), or start a new backup into an empty destination"
    )


def file_problem(entry: SnapshotFile, size: int, rows: int | None) -> str | None:
    """What is wrong with a snapshot file read back (None: it is what the manifest says).
    `rows`: from its Parquet footer, None when the footer is unreadable."""
    if size != entry.size:
        return f"{entry.path}: {size} bytes, the manifest says {entry.size}"
    if rows is None:
        return f"{entry.path}: not a readable Parquet file"
    if rows != entry.rows:
        return f"{entry.path}: {rows} rows, the manifest says {entry.rows}"
    return None


@dataclass
class Tally:
    """What one run did, object by object."""

    copied: int = 0
    skipped: int = 0  # already in the backup with identical bytes (a resumed run)
    vanished: list[Version] = field(default_factory=list)  # snapshots GC deleted mid-copy

    def line(self, held: Holdings | None) -> dict[str, Any]:
        """The last line `weaseldb backup` prints (docs/backup.md)."""
        return {
            "copied": self.copied,
            "skipped": self.skipped,
            "oldest_version": None if held is None else held.oldest_version,
            "newest_version": None if held is None else held.newest_version,
        }


# Verifying


class LogCheck:
    """Feed it the backup's batches oldest first, from its marker (or the genesis): it
    checks that they follow without a gap, that each decoded (its checksum held) under its
    own number, and that valid batches move versions forward; it applies the validity rule
    (weaseldb.core.validity) and keeps the last version restorable before the first
    problem."""

    def __init__(self, start: LogStart | None) -> None:
        seed = seed_of(start)
        self.expected = seed.first_number
        self.walk = ValidityWalk(seed)
        self.newest = Version(0) if start is None else start.version
        self.versions: dict[BatchNumber, Version] = {}  # valid batch -> its last version
        self.problems: list[str] = []
        self.batches = 0  # batch keys seen
        self.broken = False  # past the first problem: later batches restore nothing

    def add(self, number: BatchNumber, batch: Batch | None, error: str | None = None) -> None:
        """One batch key in listing order; `batch` None with `error` when it failed to
        decode (checksum, format)."""
        self.batches += 1
        if number != self.expected and not self.broken:
            self._break(f"gap: batch {self.expected} is missing (the log stops there)")
        self.expected = BatchNumber(number - 1)
        if batch is None:
            self._break(error or f"batch {number} is unreadable")
            return
        if batch.batch != number:
            self._break(f"batch {number}: its header says batch {batch.batch}")
            return
        if self.broken or not self.walk.admit(batch.term):
            return
        if batch.first_version <= self.newest or batch.last_version < self.newest:
            self._break(
                f"batch {number}: versions {batch.first_version}..{batch.last_version} do "
                f"not follow version {self.newest}"
            )
            return
        self.newest = batch.last_version
        self.versions[number] = batch.last_version

    def _break(self, problem: str) -> None:
        self.problems.append(problem)
        self.broken = True


def snapshot_problem(
    version: Version, batch: BatchNumber, log: LogCheck, start: LogStart | None
) -> str | None:
    """A manifest whose batch the backup holds must name that batch's last version."""
    if start is not None and batch == start.after_batch:
        found: Version | None = start.version
    else:
        found = log.versions.get(batch)
    if found is not None and found != version:
        return f"snapshot {version}: its batch {batch} ends at version {found}"
    return None


@dataclass(frozen=True)
class Report:
    ok: bool
    oldest_version: Version | None  # None: nothing is restorable
    newest_version: Version | None
    problems: tuple[str, ...]

    def line(self) -> dict[str, Any]:
        """The last line `weaseldb backup verify` prints (docs/backup.md)."""
        return {
            "ok": self.ok,
            "oldest_version": self.oldest_version,
            "newest_version": self.newest_version,
            "problems": list(self.problems),
        }


def report(
    start: LogStart | None,
    log: LogCheck,
    snapshots: list[Version],
    good_snapshots: list[Version],
    problems: list[str],
    held: Holdings | None,
) -> Report:
    """The restorable range: from the oldest good snapshot at or above the marker (the
    empty state when the log starts at the genesis) to the last version before the first
    problem in the log. `snapshots`: every published one; `problems`: the snapshots' and
    anything else found; `held`: what weaseldb.core.holdings says (None: it failed, a
    problem already), which the walk must agree with."""
    found = list(log.problems) + problems
    if start is None and not log.batches and not snapshots:
        return Report(False, None, None, ("the store holds no backup", *found))
    newest = log.newest
    oldest: Version | None = Version(0)  # from the genesis: the empty state is the base
    if start is not None:
        bases = [v for v in good_snapshots if start.version <= v <= newest]
        oldest = bases[0] if bases else None
        if oldest != start.version:
            found.append(f"no good snapshot at the log start, version {start.version}")
    if held is not None and not log.problems and held.newest_version != newest:
        found.append(
            f"the log's walk ends at version {newest}, its recovery scan at {held.newest_version}"
        )
    if oldest is None:
        return Report(False, None, None, tuple(found))
    return Report(not found, oldest, newest, tuple(found))
