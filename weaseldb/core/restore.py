"""Point-in-time restore, the planning (docs/backup.md, "Point-in-time restore"). Pure: no
I/O; the Spark job (weaseldb_compaction.restore) reads and writes.

A restore rebuilds the source's state at version V into an empty destination prefix:
the newest published snapshot at or below V (the base; none: the empty state, when the
source's log starts at the genesis) plus the valid transactions after it up to V, cut in
the middle of a batch when V is. `--to-time T` names V as the greatest version of a valid
transaction committed at or before T.

The destination is a database whose log starts at V with a fresh term (`objects`): a
snapshot of the state at V, the restore's own term claim, an empty batch and a log-start
marker, all numbered NUMBER_TOP, written in that order; the marker last is the mark of a
finished restore.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from weaseldb.core import batchfile, layout, logstart
from weaseldb.core.claims import TermClaim
from weaseldb.core.holdings import Holdings
from weaseldb.core.types import NUMBER_TOP, BatchNumber, Term, Version

#: The batch kind of the restore's empty batch (readers treat every kind alike).
RESTORE_KIND = "restore"
#: Batch number and term of everything the restore writes: a fresh log with a fresh term.
TOP = NUMBER_TOP


class RestoreRefused(Exception):
    """The restore cannot be done as asked; the message names the problem. Nothing was
    written to the destination."""


def parse_time(text: str) -> int:
    """An RFC 3339 time (`2026-11-26T14:03:00Z`, offsets and fractions allowed) in ms since
    the epoch; RestoreRefused for anything else (a time without a zone is ambiguous)."""
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise RestoreRefused(
            f"--to-time {text!r} is not an RFC 3339 time like 2026-11-26T14:03:00Z"
        )
    return int(moment.timestamp() * 1000)


def format_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def describe(holdings: Holdings) -> str:
    """The range a source holds, with the commit times where known, for refusals."""
    times = ""
    if holdings.oldest_time_ms is not None or holdings.newest_time_ms is not None:
        oldest = format_time(holdings.oldest_time_ms) if holdings.oldest_time_ms else "?"
        newest = format_time(holdings.newest_time_ms) if holdings.newest_time_ms else "?"
        times = f" (committed {oldest} to {newest})"
    return f"the source holds {holdings.describe()}{times}"


def check_version(version: int, holdings: Holdings) -> Version:
    if not holdings.holds(version):
        raise RestoreRefused(f"version {version} cannot be restored: {describe(holdings)}")
    return Version(version)


def check_time(time_ms: int, holdings: Holdings, now_ms: int) -> None:
    """Refuse a time before the oldest restorable commit (when that is known) or in the
    future (the state at a time still to come is not decided yet)."""
    at = format_time(time_ms)
    if time_ms > now_ms:
        raise RestoreRefused(f"--to-time {at} is in the future: {describe(holdings)}")
    oldest = holdings.oldest_time_ms
    if holdings.oldest_version > 0 and oldest is not None and time_ms < oldest:
        raise RestoreRefused(
            f"--to-time {at} is before what the source holds: {describe(holdings)}"
        )


@dataclass(frozen=True)
class BatchTimes:
    """What a batch says about time, from the survey: the greatest version of its
    transactions committed at or before the requested time (None: none), and when."""

    valid: bool
    version_at: int | None
    committed_at_ms: int | None


def version_at_time(
    batches: Iterable[BatchTimes], time_ms: int, holdings: Holdings
) -> tuple[Version, int]:
    """(V, commit time of V) for `--to-time`: the greatest version of a valid transaction
    committed at or before the time, over the batches the source holds after its oldest
    restorable version. None of them that early: the oldest restorable version itself
    (its commit time is not after the time, or check_time refused)."""
    best: tuple[int, int] | None = None
    for b in batches:
        if b.valid and b.version_at is not None and (best is None or b.version_at > best[0]):
            best = (b.version_at, b.committed_at_ms or 0)
    if best is None or best[0] < holdings.oldest_version:
        return holdings.oldest_version, holdings.oldest_time_ms or 0
    return Version(best[0]), best[1]


def base_snapshot(version: int, holdings: Holdings) -> Version | None:
    """The newest published snapshot at or below `version` and at or above the oldest
    restorable version; None: fold from the empty state (the log starts at the genesis).
    RestoreRefused when neither is possible (a source whose log-start snapshot is gone)."""
    below = [v for v in holdings.snapshots if holdings.oldest_version <= v <= version]
    if below:
        return max(below)
    if holdings.oldest_version == 0:
        return None
    raise RestoreRefused(
        f"no snapshot at or below version {version} from {holdings.oldest_version} on: "
        f"the source is missing its log-start snapshot ({describe(holdings)})"
    )


def upper_batch(version: int, snapshot_batches: Sequence[tuple[int, int]]) -> int | None:
    """The newest batch a restore to `version` needs to read, from the published snapshots'
    (version, batch): the batch of the oldest snapshot above `version` (its state holds
    every version up to its own, so `version` is folded in by then); None: read to the end."""
    above = [batch for v, batch in snapshot_batches if v > version]
    return max(above) if above else None  # numbers count down: max is the oldest


# -- The destination -----------------------------------------------------------------------

_STEP = re.compile(
    rf"^(?:{layout.SNAPSHOTS}\d{{20}}/restore-[^/]+/.*"
    rf"|{layout.SNAPSHOTS}\d{{20}}{re.escape(layout.MANIFEST_SUFFIX)}"
    rf"|{layout.TERMS}{TOP:020d}|{layout.BATCHES}{TOP:020d})$"
)


def owned_keys() -> tuple[str, str]:
    """The keys a restore shares with a database (its term claim and empty batch): the
    caller reads their leader id for `destination_leftovers`."""
    return layout.term_key(Term(TOP)), layout.batch_key(BatchNumber(TOP))


def destination_leftovers(keys: Sequence[str], where: str, leaders: Mapping[str, str]) -> list[str]:
    """The keys of an unfinished restore to remove before starting again; RestoreRefused
    when the destination is anything else than empty or such leftovers: a finished
    restore (its log-start marker), or any key a restore does not write (a database, a
    backup, files of someone else). `leaders`: the leader id in each of `owned_keys()`
    present, so a database's own first term or batch is never taken for a leftover."""
    if any(k.startswith(layout.LOG_START) for k in keys):
        raise RestoreRefused(
            f"the destination {where} already holds a database (a log-start marker): "
            "restore only into an empty prefix"
        )
    foreign = [
        k
        for k in keys
        if not _STEP.match(k) or not leaders.get(k, "restore-").startswith("restore-")
    ]
    if foreign:
        raise RestoreRefused(
            f"the destination {where} is not empty ({len(keys)} objects, e.g. {foreign[0]}): "
            "restore only into an empty prefix"
        )
    return list(keys)


def restore_id(now_ms: int, token: str) -> str:
    return f"restore-{now_ms}-{token}"


def location(version: int, run_id: str) -> str:
    """Directory of the restored snapshot's Parquet files."""
    return f"{layout.snapshot_dir(Version(version))}{run_id}/"


def claim(run_id: str, now_ms: int) -> TermClaim:
    return TermClaim(term=Term(TOP), leader_id=run_id, pod="", started_at_ms=now_ms, in_flight=1)


def empty_batch(version: int, run_id: str, now_ms: int) -> batchfile.Batch:
    """The restored log's only batch: no transactions, last version V."""
    return batchfile.empty_batch(
        number=BatchNumber(TOP),
        term=Term(TOP),
        leader_id=run_id,
        last_version=Version(version),
        now_ms=now_ms,
        kind=RESTORE_KIND,
    )


def log_start(version: int, committed_at_ms: int) -> logstart.LogStart:
    """Written last: history at or below V is not in the restored log, and the marker says
    so to every reader (/v1/subscribe below V answers 410, holdings' oldest is V)."""
    return logstart.LogStart(
        after_batch=BatchNumber(TOP),
        term=Term(TOP),
        version=Version(version),
        committed_at_ms=committed_at_ms,
    )


def objects_after_snapshot(
    version: int, run_id: str, now_ms: int, committed_at_ms: int
) -> list[tuple[str, bytes]]:
    """(key, body) written after the snapshot's manifest, in this order."""
    start = log_start(version, committed_at_ms)
    return [
        (layout.term_key(Term(TOP)), claim(run_id, now_ms).encode()),
        (
            layout.batch_key(BatchNumber(TOP)),
            batchfile.encode(empty_batch(version, run_id, now_ms)),
        ),
        (start.key, logstart.encode(start)),
    ]
