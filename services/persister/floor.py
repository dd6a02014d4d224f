"""The retention floor, exported by the leader: where the retained log starts (the newest
log-start marker's version, written by garbage collection before it deletes anything; 0
while nothing was collected). It is also the oldest version a point-in-time restore can
rebuild (weaseldb.core.holdings). `weaseldb_committed_version` minus it is how much log
the store holds; a floor that stays while commits go on is GC not running, failing, or
held back by a retention policy (docs/operator.md, "WeaselDBRetentionFloorStuck").

One LIST of one key every `persister.retention_floor_interval_s` while leading. A failed
read leaves the gauge as it was (the floor only moves up): the term watch and the batch
writes already say when the store is down.
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import Gauge

from weaseldb.core import logstart
from weaseldb.core.store import BlobStore

log = logging.getLogger("weaseldb.persister")

FLOOR = Gauge(
    "weaseldb_retention_floor_version",
    "Where the retained log starts: history at or below it was garbage collected",
)


async def watch_floor(store: BlobStore, interval_s: float) -> None:
    """Set FLOOR now and every `interval_s` until cancelled."""
    while True:
        try:
            start = await logstart.newest(store)
        except Exception as e:
            log.debug("retention floor not read (will retry): %r", e)
        else:
            FLOOR.set(0 if start is None else start.version)
        await asyncio.sleep(interval_s)
