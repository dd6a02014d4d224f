"""GET /v1/snapshots: the published compaction snapshots, newest first (manifests are
checksum-verified; see weaseldb/core/manifest.py), and the window a point-in-time restore
can rebuild (weaseldb.core.holdings; docs/backup.md, "The keep-history window")."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec

from services.gateway import retention
from weaseldb.core import manifest
from weaseldb.core.errors import CorruptObject, NotFound
from weaseldb.core.holdings import Holdings, holdings
from weaseldb.core.store import BlobStore
from weaseldb.core.timestamps import iso_ms

log = logging.getLogger("weaseldb.gateway")


#: How long one reading of the restorable window is served: it costs four LISTs and a GET
#: (`holdings`), and moves only with commits (its newest end) and GC (its oldest).
RESTORABLE_TTL_S = 5.0


def restorable_entry(held: Holdings | None) -> dict[str, Any] | None:
    """The window as `GET /v1/snapshots` shows it (None: the store holds nothing yet)."""
    if held is None:
        return None
    return {
        "oldest_version": held.oldest_version,
        "oldest_time": None if held.oldest_time_ms is None else iso_ms(held.oldest_time_ms),
        "newest_version": held.newest_version,
        "newest_time": None if held.newest_time_ms is None else iso_ms(held.newest_time_ms),
    }


class SnapshotListing:
    def __init__(self, store: BlobStore, clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._clock = clock
        self._restorable: tuple[float, dict[str, Any] | None] | None = None  # (read at, window)
        self._reading = asyncio.Lock()  # one reading for concurrent requests

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

    async def restorable(self) -> dict[str, Any] | None:
        """The restorable window, read at most once per RESTORABLE_TTL_S (so up to that
        stale). A damaged object it needs shows as no window, logged, as a damaged manifest
        is left out of the listing; a failing store fails the request (503)."""
        async with self._reading:
            cached = self._restorable
            if cached is not None and self._clock() - cached[0] < RESTORABLE_TTL_S:
                return cached[1]
            try:
                window = restorable_entry(await holdings(self._store))
            except CorruptObject as e:
                log.error("no restorable window: %s", e)
                window = None
            self._restorable = (self._clock(), window)
            return window
