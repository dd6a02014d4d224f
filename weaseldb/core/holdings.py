"""What a store can restore: the range of versions a point-in-time restore can rebuild from
it (a database's own prefix, or a backup of one).

A version V is restorable when a published snapshot at or below V exists and every batch
after that snapshot up to V is still held. Garbage collection keeps exactly that from its
cut on (weaseldb.core.gc): the oldest restorable version is the newest log-start marker's
version (its snapshot is the cut, never deleted while it is the cut), or 0 (the empty state)
while nothing was ever garbage collected. The newest is the last version of the durable
valid log (weaseldb.core.recovery's single LIST).

A backup (weaseldb.core.backup) holds batches only from its log-start marker on, possibly
fewer than a database's newest 1000: the recovery scan is told where its log starts.

Reads only: one LIST of markers, of snapshots and of term claims, one recovery scan, one
GET of the newest batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from weaseldb.core import logstart, manifest, recovery
from weaseldb.core.store import BlobStore
from weaseldb.core.types import Version
from weaseldb.core.validity import GENESIS


@dataclass(frozen=True)
class Holdings:
    """The versions a point-in-time restore can rebuild, inclusive at both ends."""

    oldest_version: Version  # 0: the empty state before the first commit
    oldest_time_ms: int | None  # when `oldest_version` was committed (None: not recorded)
    newest_version: Version
    newest_time_ms: int | None  # when the newest durable batch was written
    snapshots: tuple[Version, ...]  # published snapshots at or above `oldest_version`

    def holds(self, version: int) -> bool:
        return self.oldest_version <= version <= self.newest_version

    def describe(self) -> str:
        """The range in words, for error messages."""
        return f"versions {self.oldest_version}..{self.newest_version}"


async def holdings(store: BlobStore) -> Holdings | None:
    """What `store` can restore; None when it holds no log and no snapshot at all."""
    start = await logstart.newest(store)
    snapshots = await manifest.manifest_versions(store)
    # A backup holds no batch before its marker (and may hold fewer than 1000): its log is
    # durable from the first batch after the marker (a database's always reaches further).
    # No read-back while the newest batch is of the newest claimed term (the usual case).
    first = (GENESIS if start is None else start.seed).first_number
    newest_claim = await recovery.newest_claim(store)
    found = await recovery.recover(store, prior_term=newest_claim, first=first)
    if found.watermark is None and start is None and not snapshots:
        return None
    oldest = Version(0) if start is None else start.version
    oldest_time = None if start is None or not start.committed_at_ms else start.committed_at_ms
    newest_time = None
    if found.watermark is not None:
        newest_time = (await recovery.read_batch(store, found.watermark)).created_at_ms
    newest = max(found.last_version, oldest)
    return Holdings(
        oldest_version=oldest,
        oldest_time_ms=oldest_time,
        newest_version=Version(newest),
        newest_time_ms=newest_time,
        snapshots=tuple(v for v in snapshots if v >= oldest),
    )
