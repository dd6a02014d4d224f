"""The compaction loop, run by the observer for each database with `spec.compaction`:
observe (its SparkApplications, the snapshot lag, its status and annotations), decide
(supervision.plan), act (delete a run past its deadline, create the next, record Events),
and report what the status should say (lastCompaction, compaction and the
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
from weaseldb_operator import compaction, supervision
from weaseldb_operator.conditions import Condition, Reason, Type
from weaseldb_operator.kube import Kube, KubeError, path_for
from weaseldb_operator.metrics import COMPACTIONS, compactions_from_zero
from weaseldb_operator.spec import API_VERSION, KIND, Database
from weaseldb_operator.storage import Stores, snapshot_lag

log = logging.getLogger("weaseldb.operator.compaction")
#: How often the store is read for the snapshot lag (batches since the last snapshot).
LAG_INTERVAL_S = 10.0


def _runs(db: Database, name: str = "") -> str:
    return path_for(compaction.SPARK_API_VERSION, compaction.SPARK_KIND, db.namespace, name)


def _regarding(body: dict[str, Any]) -> dict[str, Any]:
    """The WeaselDB as an Event's subject (a listed item may lack apiVersion and kind)."""
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": body["metadata"]}


def changed_fields(status: dict[str, Any], wanted: dict[str, Any | None]) -> dict[str, Any]:
    """The fields of `wanted` that differ from `status`. None inside an object removes the
    field (merge patch), so it is not compared: an unchanged status is not written again."""
    out: dict[str, Any] = {}
    for field, value in wanted.items():
        if value is None:
            continue
        kept = {k: v for k, v in value.items() if v is not None}
        if status.get(field) != kept:
            out[field] = value
    return out


def _parse(timestamp: str | None) -> datetime.datetime:
    if not timestamp:
        return datetime.datetime.now(datetime.UTC)
    return parse_iso(timestamp)


class CompactionLoop:
    def __init__(self, kube: Kube, stores: Stores) -> None:
        self._kube = kube
        self._stores = stores
        self._lag: dict[str, tuple[float, int | None, int]] = {}  # uid -> (at, version, n)
        self._failing: dict[str, str] = {}  # uid -> the error last logged

    async def observe(
        self, db: Database, body: dict[str, Any]
    ) -> tuple[list[Condition], dict[str, Any]]:
        """Conditions and status fields to write (empty when nothing changes). A failing
        Kubernetes call is reported in the condition; it never stops the observer."""
        try:
            observed = await self._observe(db, body)
        except (KubeError, aiohttp.ClientError, TimeoutError) as e:
            # The observer comes back every second: one line per new error, not per pass.
            if self._failing.get(db.uid) != str(e):
                log.warning("%s/%s: compaction: %s", db.namespace, db.name, e)
            self._failing[db.uid] = str(e)
            message = f"cannot list or create SparkApplications: {e}"
            unavailable = Condition(
                Type.COMPACTION_HEALTHY, "Unknown", Reason.SPARK_UNAVAILABLE, message[:1000]
            )
            return [unavailable], {}
        if self._failing.pop(db.uid, None) is not None:
            log.info("%s/%s: compaction: the Kubernetes API answers again", db.namespace, db.name)
        return observed

    async def _observe(
        self, db: Database, body: dict[str, Any]
    ) -> tuple[list[Condition], dict[str, Any]]:
        if db.compaction is None:
            return [], {}
        compactions_from_zero(db.namespace, db.name)
        apps = await self._kube.list(_runs(db), {compaction.DATABASE_LABEL: db.name})
        version, lag = await self._snapshot_lag(db)
        status = body.get("status") or {}
        plan = supervision.plan(
            db,
            now=datetime.datetime.now(datetime.UTC),
            created_at=_parse(body["metadata"].get("creationTimestamp")),
            apps=apps,
            batches_since_snapshot=lag,
            status=status,
            run_now=(body["metadata"].get("annotations") or {}).get(compaction.RUN_NOW_ANNOTATION),
            version=version,
        )
        await self._act(db, _regarding(body), plan)
        wanted = {"lastCompaction": plan.last, "compaction": plan.record.status()}
        return [plan.condition], changed_fields(status, wanted)

    async def _act(self, db: Database, regarding: dict[str, Any], plan: supervision.Plan) -> None:
        """Delete the runs past their deadline, record what was counted, start the next."""
        for name in plan.delete:
            log.warning("%s/%s: deleting %s: past its deadline", db.namespace, db.name, name)
            try:
                await self._kube.delete(_runs(db, name))
            except KubeError as e:
                # Still counted and reported once; the run stays expired (no new run
                # starts) and the delete is tried again on the next pass.
                log.warning("%s/%s: cannot delete %s: %s", db.namespace, db.name, name, e)
        for notice in plan.notices:
            if notice.outcome is not None:
                COMPACTIONS.labels(db.namespace, db.name, notice.outcome).inc()
            await self._kube.event(regarding, notice.reason, notice.message, warning=notice.warning)
        if plan.create is not None and await self._kube.create(plan.create):
            name = plan.create["metadata"]["name"]
            log.info("%s/%s: created %s (%s)", db.namespace, db.name, name, plan.why)
            await self._kube.event(
                regarding, "CompactionStarted", f"created SparkApplication {name} ({plan.why})"
            )

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
