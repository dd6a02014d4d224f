"""Published snapshots without Spark: a manifest and nothing else, for the tests of what
reads manifests (the snapshot listing, GC, the operator's lag check)."""

from __future__ import annotations

from weaseldb.core import manifest
from weaseldb.core.manifest import Manifest, SourceBatches
from weaseldb.core.store import BlobStore
from weaseldb.core.types import NUMBER_TOP, BatchNumber, Term, Version

CREATED_AT = "2026-01-01T00:00:00.000Z"


def placeholder(
    version: int, *, keys: int = 0, size: int = 0, source: SourceBatches | None = None
) -> Manifest:
    """The manifest of a snapshot at `version` with no files, folded from the batches
    down to `NUMBER_TOP - version` (numbers count down) unless `source` says otherwise."""
    return Manifest(
        format=manifest.FORMAT_VERSION,
        version=Version(version),
        batch=BatchNumber(NUMBER_TOP - version),
        term=Term(NUMBER_TOP),
        created_at=CREATED_AT,
        location=f"snapshots/{version:020d}/run/",
        files=[],
        keys=keys,
        bytes=size,
        source_batches=source
        or SourceBatches(BatchNumber(NUMBER_TOP), BatchNumber(NUMBER_TOP - version), version),
        previous=None,
    )


async def publish(store: BlobStore, snapshot: Manifest) -> None:
    """Create the manifest as the compaction job does: once, create-only."""
    await store.put_if_absent(snapshot.key, manifest.encode(snapshot))
