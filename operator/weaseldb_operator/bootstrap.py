"""`spec.bootstrap.recovery` (pure: no kopf, no client): the Job that restores the source
into the database's prefix before any pod of the database exists, and the decision of
each reconcile pass - create the Job, wait, go on to the workload, or stop (`decide`).

- The Job `NAME-restore` (owner reference to the WeaselDB, no TTL: it stays as the record
  of how the database began) runs the Spark image (Java, pyspark and the `weaseldb`
  entry point): `weaseldb restore --from SOURCE --into DATABASE [--to-version V |
  --to-time T] --master local[2]`, keys from the two credentials Secrets (the
  `credentials=SOURCE` / `credentials=DATABASE` store URLs, as backup.py does).
- Progress is `status.bootstrap` (`phase` Restoring, Restored or Failed, `job`, `message`,
  `version`) and the Bootstrapped condition; the StatefulSet is applied only once the
  phase is Restored.
- Never twice: once Restored, or once the database's StatefulSet exists (it served, or
  was created before recovery was asked for), no restore Job is created again. A restart
  of the operator half-way finds the Job by its name and follows it; a Job that is gone
  (deleted by hand) is created again only while the prefix holds no finished restore
  (`restored_version`, read by the caller), and `weaseldb restore` itself refuses a
  destination holding anything it did not write.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from weaseldb_operator.backup import (
    credentials_env,
    job_failure,
    job_labels,
    job_outcome,
    job_pod_spec,
    store_url,
)
from weaseldb_operator.conditions import Condition, Reason, Type
from weaseldb_operator.resources import labels, owner_reference
from weaseldb_operator.spec import Database, Recovery

COMPONENT = "restore"
SOURCE_CREDENTIALS = "SOURCE"
DATABASE_CREDENTIALS = "DATABASE"
#: Spark in the Job's own pod: two worker threads (the Job asks for what they use).
MASTER = "local[2]"
#: Retries of a failed restore inside the Job (a rerun resumes a restore killed half-way).
BACKOFF_LIMIT = 1
_MAX_NAME = 63


class Phase(enum.StrEnum):
    RESTORING = "Restoring"
    RESTORED = "Restored"
    FAILED = "Failed"


def job_name(db: Database) -> str:
    suffix = "-restore"
    return f"{db.name[: _MAX_NAME - len(suffix)].rstrip('-')}{suffix}"


def restore_command(db: Database, recovery: Recovery) -> list[str]:
    return [
        "weaseldb", "restore",
        "--from", store_url(SOURCE_CREDENTIALS, recovery.source),
        "--into", store_url(DATABASE_CREDENTIALS, db.storage),
        *recovery.target_arguments(),
        "--master", MASTER,
        "--driver-memory", recovery.driver_memory,
    ]  # fmt: skip


def restore_job_for(db: Database) -> dict[str, Any]:
    """The restore Job of `spec.bootstrap.recovery` (which must be set)."""
    recovery = db.recovery
    assert recovery is not None
    env = [
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        *credentials_env(SOURCE_CREDENTIALS, recovery.source),
        *credentials_env(DATABASE_CREDENTIALS, db.storage),
    ]
    container: dict[str, Any] = {
        "name": "restore",
        "image": recovery.image,
        "command": restore_command(db, recovery),
        "env": env,
    }
    if recovery.resources:
        container["resources"] = recovery.resources
    meta = {"labels": {**labels(db), **job_labels(db, COMPONENT)}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            **meta,
            "name": job_name(db),
            "namespace": db.namespace,
            "ownerReferences": [owner_reference(db)],
        },
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            "template": {"metadata": meta, "spec": job_pod_spec(db, container)},
        },
    }


@dataclass(frozen=True)
class Step:
    """One reconcile pass of a database with spec.bootstrap.recovery."""

    proceed: bool  # apply the workload (the restore is done, or there is none to do)
    create_job: bool = False
    status: dict[str, Any] | None = None  # status.bootstrap to write; None: leave it
    conditions: tuple[Condition, ...] = ()


def _phase(status: dict[str, Any] | None) -> str:
    return str((status or {}).get("phase") or "")


def restored(version: int | None, job: str, message: str) -> Step:
    status = {"phase": Phase.RESTORED, "job": job, "message": message, "version": version}
    done = Condition(Type.BOOTSTRAPPED, "True", Reason.RESTORED, message)
    return Step(proceed=True, status=status, conditions=(done,))


def restoring(job: str, message: str, *, create: bool = False) -> Step:
    status = {"phase": Phase.RESTORING, "job": job, "message": message, "version": None}
    return Step(
        proceed=False,
        create_job=create,
        status=status,
        conditions=(
            Condition(Type.BOOTSTRAPPED, "False", Reason.RESTORING, message),
            Condition(Type.READY, "False", Reason.RESTORING, "bootstrapping: see Bootstrapped"),
        ),
    )


def failed(job: str, message: str) -> Step:
    status = {"phase": Phase.FAILED, "job": job, "message": message, "version": None}
    return Step(
        proceed=False,
        status=status,
        conditions=(
            Condition(Type.BOOTSTRAPPED, "False", Reason.RESTORE_FAILED, message[:1000]),
            Condition(Type.READY, "False", Reason.RESTORE_FAILED, "the restore failed: see "
                      "Bootstrapped"),
        ),
    )  # fmt: skip


def decide(
    db: Database,
    status: dict[str, Any] | None,
    job: dict[str, Any] | None,
    *,
    workload_exists: bool,
    restored_version: int | None,
) -> Step:
    """What to do this pass. `status`: status.bootstrap; `job`: the restore Job or None;
    `workload_exists`: the StatefulSet exists; `restored_version`: the version of a
    finished restore nobody served yet in the database's prefix (`storage.
    unserved_restore`), else None."""
    if db.recovery is None or _phase(status) == Phase.RESTORED:
        return Step(proceed=True)
    name = job_name(db)
    if workload_exists:
        return restored(None, name, "the database's StatefulSet exists: it was created "
                        "before, so it is not restored again")  # fmt: skip
    if job is None:
        if restored_version is not None:
            return restored(restored_version, name, f"restored version {restored_version} "
                            "(the restore finished; its Job is gone)")  # fmt: skip
        return restoring(name, f"created Job {name}: {describe(db.recovery)}", create=True)
    outcome = job_outcome(job)
    if outcome is None:
        return restoring(name, f"Job {name} is restoring {describe(db.recovery)}")
    if outcome is False:
        return failed(name, f"Job {name} failed ({job_failure(job)}); its pod's log says why "
                      f"(kubectl logs job/{name}); delete the Job to try again")  # fmt: skip
    version = restored_version
    what = f"version {version}" if version is not None else describe(db.recovery)
    return restored(version, name, f"restored {what} by Job {name}")


def describe(recovery: Recovery) -> str:
    target = (
        f"version {recovery.target_version}"
        if recovery.target_version is not None
        else f"the last version at {recovery.target_time}"
        if recovery.target_time is not None
        else "the newest version"
    )
    return f"{recovery.source.location} at {target}"
