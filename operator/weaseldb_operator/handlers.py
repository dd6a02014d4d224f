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
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import kopf

from weaseldb.core.errors import StoreError
from weaseldb.core.timestamps import now_iso
from weaseldb_operator import bootstrap, conditions
from weaseldb_operator.backup import cronjob_for, cronjob_name
from weaseldb_operator.conditions import Condition, Reason, Type, paused_condition
from weaseldb_operator.deletion import POLL_PODS_S, Deletion, PodsLeft
from weaseldb_operator.door import Operator, secured
from weaseldb_operator.edits import (
    conflict_message,
    overlapping,
    refused_by,
    with_applied_spec,
)
from weaseldb_operator.kube import Kube, KubeError, path_for
from weaseldb_operator.metrics import RECONCILE_ERRORS
from weaseldb_operator.observer import Observer
from weaseldb_operator.readers import reader_children, reader_leftovers
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
from weaseldb_operator.storage import Stores, unserved_restore
from weaseldb_operator.tlssecrets import ensure_secrets

VERSION = API_VERSION.split("/")[1]
#: The only finalizer the operator sets, and only with `deletionPolicy: Delete`.
FINALIZER = "weaseldb.io/delete-data"
PURGE_TIMEOUT_S = 600


class Waiting(kopf.TemporaryError):
    """Call the handler again after `delay`: nothing failed, something is under way (a
    restore, pods going away). Not counted as a reconcile error."""


Handler = Callable[..., Awaitable[None]]


def counts_errors(handler: Handler) -> Handler:
    """Count what `handler` raises, but a `Waiting`, in the operator's metrics
    (weaseldb_operator_reconcile_errors_total{handler=...}); kopf retries it as before."""

    @functools.wraps(handler)
    async def counted(*args: Any, **kwargs: Any) -> None:
        try:
            await handler(*args, **kwargs)
        except Waiting:
            raise
        except Exception:
            RECONCILE_ERRORS.labels(handler.__name__).inc()
            raise

    return counted


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
    memo.operator = Operator.from_environment()
    if memo.operator.token is None:
        logging.getLogger("weaseldb.operator").warning(
            "no admin token (WEASELDB_ADMIN_TOKEN_FILE): POST /promote on the pods is open"
        )
    observer = Observer(memo.kube, memo.get("namespace"), admin_headers=memo.operator.admin_headers)
    memo.observer = asyncio.create_task(observer.run(), name="weaseldb-leadership")


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    task: asyncio.Task[None] = memo.observer
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await memo.kube.close()


async def _set_conditions(
    kube: Kube,
    body: kopf.Body,
    updates: list[Condition],
    extra: dict[str, Any],
    drop: tuple[Type, ...] = (),
) -> None:
    def status(current: dict[str, Any]) -> dict[str, Any]:
        kept = list((current.get("status") or {}).get("conditions") or [])
        for kind in drop:
            kept = conditions.without(kept, kind)
        merged = conditions.merged(
            kept,
            updates,
            now=now_iso(fraction=0),
            generation=int(current["metadata"].get("generation", 0)),
        )
        return {"conditions": merged, **extra}

    meta = body["metadata"]
    await kube.patch_status(path_for(API_VERSION, KIND, meta["namespace"], meta["name"]), status)


async def _reject(
    kube: Kube, body: kopf.Body, error: SpecError, done: str = "nothing was changed in the cluster"
) -> None:
    message = f"{error}; fix the spec, {done}"
    await _set_conditions(
        kube,
        body,
        [
            Condition(Type.READY, "False", Reason.INVALID_SPEC, message),
            Condition(Type.DEGRADED, "True", Reason.INVALID_SPEC, message),
            Condition(Type.SPEC_VALID, "False", Reason.INVALID_SPEC, message),
        ],
        {},
    )
    await kube.event(
        dict(body),
        Reason.INVALID_SPEC,
        f"{error}; nothing was changed in the cluster, running pods keep the last valid spec",
        warning=True,
    )


async def _refused(kube: Kube, body: kopf.Body, error: KubeError) -> NoReturn:
    """A child the API server found invalid (422) was built from the spec: the placement
    fields reach the pod template as given, and only the API server checks their inner
    shape (a node selector term, a label key). That is an invalid spec, not a retry."""
    refused = SpecError(f"the API server refused a child: {error}")
    await _reject(kube, body, refused, done="the pods were not changed")
    raise kopf.PermanentError(str(refused)) from error


@kopf.on.resume(API_GROUP, VERSION, PLURAL)
@kopf.on.create(API_GROUP, VERSION, PLURAL)
@kopf.on.update(API_GROUP, VERSION, PLURAL, field="spec")
@counts_errors
async def reconcile(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    kube: Kube = memo.kube
    try:
        db = database_from(dict(body))
    except SpecError as e:
        await _reject(kube, body, e)
        raise kopf.PermanentError(str(e)) from e
    if db.paused:
        await _set_conditions(kube, body, [paused_condition(db.paused)], {})
        logger.info("spec.paused: generation %d not applied", db.generation)
        return
    await _refuse_shared_storage(kube, body, memo.get("namespace"))
    await _bootstrap(kube, body, db)
    leader_pod = ((body.get("status") or {}).get("leader") or {}).get("pod")
    children = with_applied_spec(children_for(db, leader_pod) + reader_children(db), dict(body))
    cronjob = cronjob_for(db)
    try:
        await ensure_secrets(kube, db)  # before the pods that mount them
        for child in secured(db, memo.operator, children):
            await kube.apply(child)
        if pdb_for(db) is None:
            await kube.delete(path_for("policy/v1", "PodDisruptionBudget", db.namespace, db.name))
        for api_version, kind, name in reader_leftovers(db):
            await kube.delete(path_for(api_version, kind, db.namespace, name))
        if cronjob is not None:
            await kube.apply(cronjob)
        else:
            await kube.delete(path_for("batch/v1", "CronJob", db.namespace, cronjob_name(db)))
    except KubeError as e:
        if e.status == 422:
            await _refused(kube, body, e)
        raise kopf.TemporaryError(f"applying children: {e}", delay=10) from e
    updates = [*_compaction_updates(db), SPEC_APPLIED, paused_condition(db.paused)]
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
    extra: dict[str, Any] = {"observedGeneration": db.generation, "replicas": db.replicas}
    # Without spec.backup, its condition and record go with the CronJob.
    drop = () if db.backup is not None else (Type.BACKUP_HEALTHY,)
    if db.backup is None:
        extra["lastBackup"] = None
    await _set_conditions(kube, body, updates, extra, drop)
    logger.info("applied the objects of generation %d", db.generation)


#: How often a restoring database is looked at again; and a failed one (its Job deleted
#: by hand starts the restore again).
RESTORE_POLL_S = 5
RESTORE_FAILED_POLL_S = 30


async def _bootstrap(kube: Kube, body: kopf.Body, db: Database) -> None:
    """spec.bootstrap.recovery: return once the restore is done (or there is none); until
    then create or follow the restore Job (bootstrap.decide), write status.bootstrap and
    raise, so kopf calls the reconciler again - also after an operator restart (resume)."""
    current = (body.get("status") or {}).get("bootstrap")
    if db.recovery is None or (current or {}).get("phase") == bootstrap.Phase.RESTORED:
        return
    try:
        job = await kube.get(path_for("batch/v1", "Job", db.namespace, bootstrap.job_name(db)))
        sts = await kube.get(path_for("apps/v1", "StatefulSet", db.namespace, db.name))
        version = await _unserved_restore(db) if sts is None else None
        step = bootstrap.decide(db, current, job, workload_exists=sts is not None,
                                restored_version=version)  # fmt: skip
        if step.create_job:
            await kube.create(bootstrap.restore_job_for(db))
    except KubeError as e:
        if e.status == 422:
            await _refused(kube, body, e)
        raise kopf.TemporaryError(f"bootstrap: {e}", delay=10) from e
    written = {k: v for k, v in (step.status or {}).items() if v is not None}  # as stored
    if step.status is not None and written != current:
        await _set_conditions(kube, body, list(step.conditions), {"bootstrap": step.status})
    if step.proceed:
        return
    failed = step.status is not None and step.status["phase"] == bootstrap.Phase.FAILED
    message = step.status["message"] if step.status else "bootstrapping"
    raise Waiting(message, delay=RESTORE_FAILED_POLL_S if failed else RESTORE_POLL_S)


async def _unserved_restore(db: Database) -> int | None:
    """The version a finished restore left in the prefix (storage.unserved_restore)."""
    stores = Stores()
    try:
        return await unserved_restore(stores.get(db.storage))
    except (StoreError, OSError, ValueError) as e:
        raise kopf.TemporaryError(f"reading {db.storage.location}: {e}", delay=10) from e
    finally:
        await stores.close()


SPEC_APPLIED = Condition(Type.SPEC_VALID, "True", Reason.AS_EXPECTED, "the newest spec was applied")


#: How often a refused database looks again whether the older one is gone.
CONFLICT_RETRY_S = 60


async def _refuse_shared_storage(kube: Kube, body: kopf.Body, namespace: str | None) -> None:
    """Raise (and retry later) while an older WeaselDB overlaps this one's storage:
    nothing is created or changed for it, a condition and an Event say which one."""
    try:
        others = await kube.list(path_for(API_VERSION, KIND, namespace))
    except KubeError as e:
        raise kopf.TemporaryError(f"listing WeaselDBs: {e}", delay=10) from e
    older = refused_by(dict(body), others)
    if older is None:
        return
    message = conflict_message(dict(body), older)
    current = [
        c for c in (body.get("status") or {}).get("conditions") or [] if c["type"] == "SpecValid"
    ]
    if not current or current[0].get("message") != message:  # one Event, not one a retry
        await kube.event(dict(body), Reason.STORAGE_CONFLICT, message, warning=True)
    await _set_conditions(
        kube,
        body,
        [
            Condition(Type.READY, "False", Reason.STORAGE_CONFLICT, "refused: see SpecValid"),
            Condition(Type.SPEC_VALID, "False", Reason.STORAGE_CONFLICT, message),
        ],
        {},
    )
    raise kopf.TemporaryError(message, delay=CONFLICT_RETRY_S)


async def _shares_storage(kube: Kube, body: kopf.Body, namespace: str | None) -> bool:
    """True (and an Event) when another WeaselDB's storage overlaps this one's: a purge
    would empty that one too, so the data is left in place."""
    try:
        others = await kube.list(path_for(API_VERSION, KIND, namespace))
    except KubeError as e:
        raise kopf.TemporaryError(f"listing WeaselDBs: {e}", delay=10) from e
    shared = overlapping(dict(body), others)
    if shared:
        names = ", ".join(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in shared)
        message = f"not purging the prefix: it overlaps the storage of {names}; data left"
        await kube.event(dict(body), "PurgeRefused", message, warning=True)
    return bool(shared)


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
@counts_errors
async def delete_data(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """Scale to zero, wait until no pod is left, fence, purge (deletion.py); called again
    after each TemporaryError until it returns."""
    try:
        db = database_from(dict(body))
    except SpecError as e:
        logger.error("not deleting data: %s", e)
        return
    if await _shares_storage(memo.kube, body, memo.get("namespace")):
        return
    deletion = Deletion(memo.kube, db, dict(body))
    try:
        await deletion.stop_pods()
    except PodsLeft as e:
        raise Waiting(f"{e}; the data is deleted once none is left", delay=POLL_PODS_S) from e
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
