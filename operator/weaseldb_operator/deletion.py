"""Deleting a database's data (`deletionPolicy: Delete`) so that nothing is left behind
(docs/operator.md, "Deletion policy"). The kopf delete handler calls `Deletion.run` until
it returns; each step is safe to repeat:

1. Scale the StatefulSet and the readers' Deployment to zero and delete the database's
   SparkApplications, its backup CronJob and its Jobs (backup, restore). Nothing scales
   them back up: the observer skips a WeaselDB with a
   deletion timestamp, and kopf calls no create/update/resume handler for one.
2. Wait (`PodsLeft`, the handler retries) until no pod of the database exists: ring pods,
   readers and compaction driver/executors (finished ones aside). Nothing is deleted
   while a pod can still write.
3. Fence: claim the next term as the operator, a deletion claim (weaseldb.core.claims). A
   leader Kubernetes lost sight of (a pod on a partitioned node, force-deleted) stops at
   its next term watch; no persister claims a term after it.
4. Purge everything but the claims; once every leader had twice its term watch interval
   (and `SETTLE_S` for writes in flight) to see the fence, purge again, then the claims.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from weaseldb.core import layout
from weaseldb.core.clock import now_ms
from weaseldb.core.store import BlobStore
from weaseldb.core.types import NUMBER_TOP
from weaseldb_operator import compaction
from weaseldb_operator.backup import cronjob_name
from weaseldb_operator.kube import Kube, KubeError, path_for
from weaseldb_operator.readers import deployment_name, reader_selector
from weaseldb_operator.resources import selector_labels
from weaseldb_operator.spec import API_VERSION, KIND, Database
from weaseldb_operator.storage import count_objects, fence, purge, sweep

log = logging.getLogger("weaseldb.operator.deletion")

#: Beyond twice the term watch interval: how long a fenced leader's writes in flight may
#: still take to land.
SETTLE_S = 5.0
#: How often the delete handler looks again while pods of the database exist.
POLL_PODS_S = 3
#: Pod phases in which no container runs again.
FINISHED = frozenset({"Succeeded", "Failed"})


class PodsLeft(Exception):
    """Pods of the database still exist: the purge must wait."""


def deletion_leader_id(db: Database) -> str:
    """The `leader_id` of the operator's deletion claim: one per WeaselDB resource."""
    return f"weaseldb-operator-delete-{db.namespace}-{db.name}-{db.uid}"


def fence_grace_s(db: Database) -> float:
    return 2 * db.config.persister.term_watch_interval_s + SETTLE_S


class Deletion:
    def __init__(self, kube: Kube, db: Database, body: dict[str, Any]) -> None:
        self._kube, self._db, self._body = kube, db, body

    async def stop_pods(self) -> None:
        """Step 1 and 2: raise `PodsLeft` while any pod of the database exists."""
        await self._scale_down()
        await self._delete_spark_applications()
        await self._delete_jobs()
        pods = await self._pods()
        if pods:
            shown = ", ".join(sorted(pods)[:5])
            count = f"{len(pods)} pod" + ("s" if len(pods) > 1 else "")
            await self.phase(f"Deleting: waiting for {count} ({shown})")
            raise PodsLeft(f"{count} of the database still exist: {shown}")

    async def purge(self, store: BlobStore) -> int:
        """Steps 3 and 4; the number of objects deleted."""
        claim = await fence(store, deletion_leader_id(self._db), now_ms())
        total = await count_objects(store)
        deleted = 0
        await self.event(
            "Purging",
            f"claimed term {NUMBER_TOP - claim.term + 1} to fence {layout.term_key(claim.term)}; "
            f"deleting {total} objects",
        )

        async def progress(done: int) -> None:
            await self.phase(f"Purging: {max(total - deleted - done, 0)} objects left")

        await self.phase(f"Purging: {total} objects left")
        deleted += await sweep(store, progress)
        wait_s = claim.started_at_ms / 1000 + fence_grace_s(self._db) - now_ms() / 1000
        if wait_s > 0:
            # A fenced leader may still write until its term watch sees the claim.
            await asyncio.sleep(wait_s)
        deleted += await sweep(store, progress)
        deleted += await purge(store)  # the claims last: nobody may claim before this
        return deleted

    async def phase(self, text: str) -> None:
        """status.phase (`kubectl describe`). Best effort: progress that cannot be shown
        is no reason to stop deleting."""
        meta = self._body["metadata"]
        path = path_for(API_VERSION, KIND, meta["namespace"], meta["name"])
        try:
            await self._kube.patch_status(path, lambda _: {"phase": text})
        except KubeError as e:
            log.warning("%s/%s: status.phase %r not written: %s", meta["namespace"],
                        meta["name"], text, e)  # fmt: skip

    async def event(self, reason: str, message: str) -> None:
        await self._kube.event(self._body, reason, message)

    async def _scale_down(self) -> None:
        """The ring's StatefulSet and the readers' Deployment (they read the store and
        write their retention policies through the gateway) to zero replicas."""
        db = self._db
        for kind, name in (("StatefulSet", db.name), ("Deployment", deployment_name(db))):
            path = path_for("apps/v1", kind, db.namespace, name)
            found = await self._kube.get(path)
            if found is None or found["spec"].get("replicas") == 0:
                continue
            await self._kube.merge_patch(path, {"spec": {"replicas": 0}})
            await self.event(
                "ScaledDown",
                f"{kind} {name} scaled from {found['spec'].get('replicas')} to 0 replicas: "
                "the data is deleted once no pod is left",
            )
            log.info("%s/%s: %s %s scaled to zero for deletion", db.namespace, db.name, kind,
                     name)  # fmt: skip

    async def _delete_spark_applications(self) -> None:
        db = self._db
        path = path_for(compaction.SPARK_API_VERSION, compaction.SPARK_KIND, db.namespace)
        try:
            apps = await self._kube.list(path, {compaction.DATABASE_LABEL: db.name})
        except KubeError as e:
            if e.status == 404:  # no Spark operator installed: nothing compacts
                return
            raise
        for app in apps:
            await self._kube.delete(f"{path}/{app['metadata']['name']}")

    async def _delete_jobs(self) -> None:
        """The backup CronJob (no new copy starts) and every Job of the database: a restore
        writes into the prefix, and a backup's pod would hold the purge back."""
        db = self._db
        await self._kube.delete(path_for("batch/v1", "CronJob", db.namespace, cronjob_name(db)))
        path = path_for("batch/v1", "Job", db.namespace)
        for job in await self._kube.list(path, {compaction.DATABASE_LABEL: db.name}):
            await self._kube.delete(f"{path}/{job['metadata']['name']}", propagation="Background")

    async def _pods(self) -> list[str]:
        """Pods of the database (ring, readers, compaction) that may still run a
        container: a finished compaction
        driver (phase Succeeded or Failed) writes nothing and may stay until its
        SparkApplication's TTL."""
        db = self._db
        path = path_for("v1", "Pod", db.namespace)
        ring = await self._kube.list(path, selector_labels(db))
        readers = await self._kube.list(path, reader_selector(db))
        spark = await self._kube.list(path, {compaction.DATABASE_LABEL: db.name})
        return sorted(
            {
                p["metadata"]["name"]
                for p in [*ring, *readers, *spark]
                if (p.get("status") or {}).get("phase") not in FINISHED
            }
        )
