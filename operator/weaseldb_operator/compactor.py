"""The compaction loop, run by the observer for each database with `spec.compaction`:
observe (its SparkApplications, the snapshot lag), decide (compaction.due), act (create
the SparkApplication), and report what the status should say (lastCompaction and the
CompactionHealthy condition), which the observer writes with everything else.
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import Any

import aiohttp

from weaseldb.core.errors import StoreError
from weaseldb.core.timestamps import parse_iso
from weaseldb_operator import compaction
from weaseldb_operator.conditions import Condition, Reason, Type
from weaseldb_operator.kube import Kube, KubeError, path_for
from weaseldb_operator.spec import Database
from weaseldb_operator.storage import Stores, snapshot_lag

log = logging.getLogger("weaseldb.operator.compaction")
#: How often the store is read for the snapshot lag (batches since the last snapshot).
LAG_INTERVAL_S = 10.0


def _parse(timestamp: str | None) -> datetime.datetime:
    if not timestamp:
        return datetime.datetime.now(datetime.UTC)
    return parse_iso(timestamp)


class CompactionLoop:
    def __init__(self, kube: Kube, stores: Stores) -> None:
        self._kube = kube
        self._stores = stores
        self._lag: dict[str, tuple[float, int | None, int]] = {}  # uid -> (at, version, n)

    async def observe(
        self, db: Database, body: dict[str, Any]
    ) -> tuple[list[Condition], dict[str, Any]]:
        """Conditions and status fields to write (empty when nothing changes). A failing
        Kubernetes call is reported in the condition; it never stops the observer."""
        try:
            return await self._observe(db, body)
        except (KubeError, aiohttp.ClientError, TimeoutError) as e:
            log.warning("%s/%s: compaction: %s", db.namespace, db.name, e)
            message = f"cannot list or create SparkApplications: {e}"
            unavailable = Condition(
                Type.COMPACTION_HEALTHY, "Unknown", Reason.SPARK_UNAVAILABLE, message[:1000]
            )
            return [unavailable], {}

    async def _observe(
        self, db: Database, body: dict[str, Any]
    ) -> tuple[list[Condition], dict[str, Any]]:
        spec = db.compaction
        if spec is None:
            return [], {}
        path = path_for(compaction.SPARK_API_VERSION, compaction.SPARK_KIND, db.namespace)
        apps = await self._kube.list(path, {compaction.DATABASE_LABEL: db.name})
        version, lag = await self._snapshot_lag(db)
        now = datetime.datetime.now(datetime.UTC)
        created_at = _parse(body["metadata"].get("creationTimestamp"))
        recorded = ((body.get("status") or {}).get("lastCompaction") or {}).get("slot")
        wanted = compaction.due(
            spec,
            now=now,
            created_at=created_at,
            apps=apps,
            batches_since_snapshot=lag,
            recorded_slot=recorded,
        )
        if wanted is not None:
            app = compaction.spark_application_for(db, spec, wanted.slot)
            if await self._kube.create(app):
                log.info("%s/%s: created %s (%s)", db.namespace, db.name,
                         app["metadata"]["name"], wanted.why)  # fmt: skip
                apps.append(app)
        finished = compaction.newest(a for a in apps if compaction.is_finished(a))
        return self._report(body, compaction.newest(apps), finished, version)

    def _report(
        self,
        body: dict[str, Any],
        app: dict[str, Any] | None,
        finished: dict[str, Any] | None,
        version: int | None,
    ) -> tuple[list[Condition], dict[str, Any]]:
        current = [
            c for c in (body.get("status") or {}).get("conditions") or []
            if c.get("type") == Type.COMPACTION_HEALTHY
        ]  # fmt: skip
        reason = current[0].get("reason") if current else None
        update = compaction.condition_for(app, reason, finished)
        extra: dict[str, Any] = {}
        if app is not None:
            succeeded = compaction.state_of(app) in compaction.SUCCEEDED
            extra["lastCompaction"] = compaction.last_compaction(
                app, version if succeeded else None
            )
        return ([update] if update else []), extra

    async def _snapshot_lag(self, db: Database) -> tuple[int | None, int | None]:
        """(newest snapshot version, batches since it), read at most every LAG_INTERVAL_S."""
        cached = self._lag.get(db.uid)
        if cached is not None and time.monotonic() - cached[0] < LAG_INTERVAL_S:
            return cached[1], cached[2]
        enough = (db.compaction.batch_threshold if db.compaction else None) or 1
        try:
            version, lag = await snapshot_lag(self._stores.get(db.storage), enough)
        except (StoreError, OSError) as e:
            log.warning("%s/%s: cannot read the snapshot lag: %s", db.namespace, db.name, e)
            return None, None
        self._lag[db.uid] = (time.monotonic(), version, lag)
        return version, lag
