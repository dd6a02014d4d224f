"""kopf wiring: thin handlers around the pure builders (resources.py), the condition
table (conditions.py) and the leadership loop (observer.py).

- create / update / resume: apply every child with server-side apply, drop the PDB when
  there is a single replica, record observedGeneration and conditions.
- delete: only resources with `deletionPolicy: Delete` get a finalizer (and so this
  handler); it scales the database to zero, waits for its pods to be gone, fences and
  empties the prefix (deletion.py). Children go with Kubernetes' garbage collector
  (owner references), so a Retain database never waits for the operator.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import kopf

from weaseldb.core.errors import StoreError
from weaseldb.core.timestamps import now_iso
from weaseldb_operator import conditions
from weaseldb_operator.conditions import Condition, Reason, Type
from weaseldb_operator.deletion import POLL_PODS_S, Deletion, PodsLeft
from weaseldb_operator.kube import Kube, KubeError, path_for
from weaseldb_operator.observer import Observer
from weaseldb_operator.resources import children_for, pdb_for
from weaseldb_operator.spec import (
    API_GROUP,
    API_VERSION,
    KIND,
    PLURAL,
    Database,
    SpecError,
    database_from,
)
from weaseldb_operator.storage import Stores

VERSION = API_VERSION.split("/")[1]
#: The only finalizer the operator sets, and only with `deletionPolicy: Delete`.
FINALIZER = "weaseldb.io/delete-data"
PURGE_TIMEOUT_S = 600


def configure(settings: kopf.OperatorSettings) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=API_GROUP, key="last-handled-configuration"
    )
    settings.peering.standalone = True
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 60


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    configure(settings)
    memo.kube = await Kube.from_environment()
    observer = Observer(memo.kube, memo.get("namespace"))
    memo.observer = asyncio.create_task(observer.run(), name="weaseldb-leadership")


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    task: asyncio.Task[None] = memo.observer
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await memo.kube.close()


async def _set_conditions(
    kube: Kube, body: kopf.Body, updates: list[Condition], extra: dict[str, Any]
) -> None:
    def status(current: dict[str, Any]) -> dict[str, Any]:
        merged = conditions.merged(
            list((current.get("status") or {}).get("conditions") or []),
            updates,
            now=now_iso(fraction=0),
            generation=int(current["metadata"].get("generation", 0)),
        )
        return {"conditions": merged, **extra}

    meta = body["metadata"]
    await kube.patch_status(path_for(API_VERSION, KIND, meta["namespace"], meta["name"]), status)


async def _reject(kube: Kube, body: kopf.Body, error: SpecError) -> None:
    message = f"{error}; fix the spec, nothing was changed in the cluster"
    await _set_conditions(
        kube,
        body,
        [
            Condition(Type.READY, "False", Reason.INVALID_SPEC, message),
            Condition(Type.DEGRADED, "True", Reason.INVALID_SPEC, message),
        ],
        {},
    )


@kopf.on.resume(API_GROUP, VERSION, PLURAL)
@kopf.on.create(API_GROUP, VERSION, PLURAL)
@kopf.on.update(API_GROUP, VERSION, PLURAL, field="spec")
async def reconcile(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    kube: Kube = memo.kube
    try:
        db = database_from(dict(body))
    except SpecError as e:
        await _reject(kube, body, e)
        raise kopf.PermanentError(str(e)) from e
    try:
        for child in children_for(db):
            await kube.apply(child)
        if pdb_for(db) is None:
            await kube.delete(path_for("policy/v1", "PodDisruptionBudget", db.namespace, db.name))
    except KubeError as e:
        raise kopf.TemporaryError(f"applying children: {e}", delay=10) from e
    updates = _compaction_updates(db)
    ready = [c for c in body.get("status", {}).get("conditions") or [] if c["type"] == "Ready"]
    if not ready or ready[0]["status"] != "True":
        updates.append(
            Condition(
                Type.READY,
                "False",
                Reason.RECONCILING,
                f"applied generation {db.generation}; waiting for a leader",
            )
        )
    await _set_conditions(
        kube, body, updates, {"observedGeneration": db.generation, "replicas": db.replicas}
    )
    logger.info("applied %d objects for generation %d", len(children_for(db)), db.generation)


def _compaction_updates(db: Database) -> list[Condition]:
    """NotConfigured without spec.compaction; with it, the compaction loop owns the
    condition (it starts at NoCompactionYet there)."""
    if db.compaction is not None:
        return []
    return [
        Condition(
            Type.COMPACTION_HEALTHY,
            "Unknown",
            Reason.NOT_CONFIGURED,
            "spec.compaction is not set: nothing compacts this database's log",
        )
    ]


def _deletes_data(spec: kopf.Spec, **_: Any) -> bool:
    return bool(spec.get("deletionPolicy") == "Delete")


@kopf.on.delete(API_GROUP, VERSION, PLURAL, when=_deletes_data, timeout=PURGE_TIMEOUT_S)
async def delete_data(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """Scale to zero, wait until no pod is left, fence, purge (deletion.py); called again
    after each TemporaryError until it returns."""
    try:
        db = database_from(dict(body))
    except SpecError as e:
        logger.error("not deleting data: %s", e)
        return
    deletion = Deletion(memo.kube, db, dict(body))
    try:
        await deletion.stop_pods()
    except PodsLeft as e:
        raise kopf.TemporaryError(
            f"{e}; the data is deleted once none is left", delay=POLL_PODS_S
        ) from e
    except KubeError as e:
        raise kopf.TemporaryError(f"scaling down: {e}", delay=10) from e
    stores = Stores()
    url = db.storage.url.split("?")[0]
    try:
        count = await deletion.purge(stores.get(db.storage))
    except (StoreError, OSError, ValueError) as e:
        raise kopf.TemporaryError(f"deleting {url}: {e}", delay=15) from e
    finally:
        await stores.close()
    await deletion.phase(f"Purged: {count} objects deleted")
    await deletion.event("Purged", f"deleted {count} objects under {url}")
    logger.info("deleted %d objects under %s", count, url)
