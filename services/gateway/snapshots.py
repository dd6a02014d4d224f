"""GET /v1/snapshots: the published compaction snapshots, newest first (manifests are
checksum-verified; see weaseldb/core/manifest.py)."""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from services.gateway import retention
from weaseldb.core import manifest
from weaseldb.core.errors import CorruptObject, NotFound
from weaseldb.core.store import BlobStore

log = logging.getLogger("weaseldb.gateway")


class SnapshotListing:
    def __init__(self, store: BlobStore) -> None:
        self._store = store

    async def all(self) -> list[dict[str, Any]]:
        found = []
        for version in reversed(await manifest.manifest_versions(self._store)):
            try:
                published = await manifest.read(self._store, version)
            except NotFound:
                continue  # garbage-collected since the LIST
            except CorruptObject as e:
                # One damaged manifest must not hide the others (or fail the listing).
                log.error("not listing snapshot %d: %s", version, e)
                continue
            found.append(retention.snapshot_entry(msgspec.to_builtins(published)))
        return found

    async def newest(self) -> dict[str, Any] | None:
        found = await self.all()
        return found[0] if found else None
