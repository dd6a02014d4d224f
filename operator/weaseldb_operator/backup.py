"""`spec.backup` (pure: no kopf, no client): the CronJob that runs `weaseldb backup` on
the schedule, and what its Jobs say - `status.lastBackup` and the BackupHealthy condition.

- The CronJob `NAME-backup` (owner reference to the WeaselDB) runs the database's own
  image: `weaseldb backup --from <the database's store> --to <the destination>`. Each store
  URL names its keys (`credentials=DATABASE`, `credentials=BACKUP`): the Job's environment
  carries DATABASE_* and BACKUP_* from the two credentials Secrets, so one process reaches
  two stores with different keys. `concurrencyPolicy: Forbid`: never two copies at once
  (the copy is incremental and resumable, a late run picks up where the last stopped).
- BackupHealthy follows the newest Job: False when it failed, or when no Job succeeded
  since two schedule intervals passed (`overdue_after`); True after a success; Unknown
  before the first run ends and while `suspend` is set.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from croniter import croniter

from weaseldb.core.timestamps import iso, parse_iso
from weaseldb_operator.compaction import CREDENTIAL_KEYS, DATABASE_LABEL
from weaseldb_operator.conditions import Condition, Reason, Type
from weaseldb_operator.resources import (
    POD_SECURITY_CONTEXT,
    SECURITY_CONTEXT,
    labels,
    owner_reference,
)
from weaseldb_operator.spec import Backup, Database, Storage

COMPONENT = "backup"
#: The names the two store URLs give their keys (weaseldb.runtime.stores.named_credentials).
DATABASE_CREDENTIALS = "DATABASE"
BACKUP_CREDENTIALS = "BACKUP"
#: CronJob names are at most 52 characters (the Jobs it creates add 11).
_MAX_CRONJOB_NAME = 52
#: Jobs of each outcome the CronJob keeps (status.lastBackup outlives them).
HISTORY = 3
#: A run that could not start within this long after its fire time is skipped (the next
#: one copies what it would have).
STARTING_DEADLINE_S = 300
#: Retries of a failed copy inside one Job (each resumes: the copy is create-only).
BACKOFF_LIMIT = 2


def cronjob_name(db: Database) -> str:
    suffix = "-backup"
    return f"{db.name[: _MAX_CRONJOB_NAME - len(suffix)].rstrip('-')}{suffix}"


def credentials_env(name: str, store: Storage) -> list[dict[str, Any]]:
    """NAME_ACCESS_KEY_ID and NAME_SECRET_ACCESS_KEY from the store's credentials Secret
    (its AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY keys); none without a Secret."""
    if not store.credentials_secret:
        return []
    return [
        {
            "name": f"{name}_{key.removeprefix('AWS_')}",
            "valueFrom": {"secretKeyRef": {"name": store.credentials_secret, "key": key}},
        }
        for key in CREDENTIAL_KEYS
    ]


def store_url(name: str, store: Storage) -> str:
    """The store's URL naming its keys when it has a Secret (else the process's AWS_*)."""
    return store.url_with(name if store.credentials_secret else "")


def backup_command(db: Database, backup: Backup) -> list[str]:
    return [
        "weaseldb", "backup",
        "--from", store_url(DATABASE_CREDENTIALS, db.storage),
        "--to", store_url(BACKUP_CREDENTIALS, backup.destination),
    ]  # fmt: skip


def job_labels(db: Database, component: str) -> dict[str, str]:
    return {DATABASE_LABEL: db.name, "app.kubernetes.io/component": component}


def job_pod_spec(db: Database, container: dict[str, Any]) -> dict[str, Any]:
    """A one-container pod that runs to completion: non-root, read-only root with a
    writable /tmp, no API token, the database's pull secrets and node placement."""
    placement = db.placement
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": POD_SECURITY_CONTEXT,
        "containers": [
            {
                "imagePullPolicy": db.image_pull_policy,
                "securityContext": SECURITY_CONTEXT,
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                "env": [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
                **container,
            }
        ],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    }
    optional = {
        "nodeSelector": dict(placement.node_selector),
        "tolerations": list(placement.tolerations),
        "imagePullSecrets": [{"name": n} for n in placement.image_pull_secrets],
    }
    return spec | {k: v for k, v in optional.items() if v}


def cronjob_for(db: Database) -> dict[str, Any] | None:
    """The CronJob of `spec.backup`, or None without it."""
    backup = db.backup
    if backup is None:
        return None
    env = [
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        *credentials_env(DATABASE_CREDENTIALS, db.storage),
        *credentials_env(BACKUP_CREDENTIALS, backup.destination),
    ]
    container = {"name": "backup", "image": db.image, "command": backup_command(db, backup),
                 "env": env}  # fmt: skip
    job_meta = {"labels": {**labels(db), **job_labels(db, COMPONENT)}}
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {
            "name": cronjob_name(db),
            "namespace": db.namespace,
            "labels": {**labels(db), **job_labels(db, COMPONENT)},
            "ownerReferences": [owner_reference(db)],
        },
        "spec": {
            "schedule": backup.schedule,
            "timeZone": "Etc/UTC",
            "suspend": backup.suspend,
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": STARTING_DEADLINE_S,
            "successfulJobsHistoryLimit": HISTORY,
            "failedJobsHistoryLimit": HISTORY,
            "jobTemplate": {
                "metadata": job_meta,
                "spec": {
                    "backoffLimit": BACKOFF_LIMIT,
                    "template": {"metadata": job_meta, "spec": job_pod_spec(db, container)},
                },
            },
        },
    }


# --- what the Jobs say -------------------------------------------------------------------


def _condition(job: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            found: dict[str, Any] = c
            return found
    return None


def job_outcome(job: dict[str, Any]) -> bool | None:
    """True when the Job completed, False when it failed, None while it runs."""
    if _condition(job, "Complete") is not None:
        return True
    if _condition(job, "Failed") is not None:
        return False
    return None


def job_failure(job: dict[str, Any]) -> str:
    """Why a failed Job failed, as the Job controller says it."""
    failed = _condition(job, "Failed") or {}
    reason, message = failed.get("reason") or "Failed", failed.get("message") or ""
    return f"{reason}: {message}" if message else str(reason)


def _started(job: dict[str, Any]) -> str:
    status = job.get("status") or {}
    return str(status.get("startTime") or job["metadata"].get("creationTimestamp") or "")


def _finished(job: dict[str, Any]) -> str | None:
    status = job.get("status") or {}
    if status.get("completionTime"):
        return str(status["completionTime"])
    failed = _condition(job, "Failed")
    return str(failed.get("lastTransitionTime")) if failed else None


def _key(job: dict[str, Any]) -> tuple[str, str]:
    return str(job["metadata"].get("creationTimestamp") or ""), str(job["metadata"]["name"])


def last_backup(jobs: Iterable[dict[str, Any]], current: dict[str, Any] | None) -> dict[str, Any]:
    """`status.lastBackup`: the newest Job (`job`, `started`, `finished`, `succeeded`) and
    `lastSucceeded`, when the newest successful one finished - kept from `current` once
    the Job that set it has expired. Every field is present (None when not known)."""
    current = current or {}
    jobs = [j for j in jobs if not j["metadata"].get("deletionTimestamp")]
    successes = [f for j in jobs if job_outcome(j) and (f := _finished(j))]
    recorded = current.get("lastSucceeded")
    last_succeeded = max([*successes, *([recorded] if recorded else [])], default=None)
    if not jobs:
        return {**{k: current.get(k) for k in ("job", "started", "finished", "succeeded")},
                "lastSucceeded": last_succeeded}  # fmt: skip
    newest = max(jobs, key=_key)
    return {
        "job": newest["metadata"]["name"],
        "started": _started(newest),
        "finished": _finished(newest),
        "succeeded": job_outcome(newest),
        "lastSucceeded": last_succeeded,
    }


def newly_ended(current: dict[str, Any] | None, last: dict[str, Any]) -> str | None:
    """`Succeeded` or `Failed` when the newest Job in `last` (a `last_backup`) ended since
    `current` was recorded, else None: each Job once, as status.lastBackup moves on."""
    if last.get("succeeded") is None:
        return None
    current = current or {}
    if current.get("job") == last.get("job") and current.get("succeeded") is not None:
        return None
    return "Succeeded" if last["succeeded"] else "Failed"


def overdue_after(schedule: str, since: datetime.datetime) -> datetime.datetime:
    """When a backup is overdue if none succeeds after `since`: the third fire time after
    it, so two whole schedule intervals (each run's, from its fire time to the next) went
    by without a success."""
    fires = croniter(schedule, since)
    fires.get_next(datetime.datetime)
    fires.get_next(datetime.datetime)
    third: datetime.datetime = fires.get_next(datetime.datetime)
    return third


def health(
    backup: Backup, last: dict[str, Any], *, since: datetime.datetime, now: datetime.datetime
) -> Condition:
    """BackupHealthy from `status.lastBackup` (`last_backup`); `since`: when backups were
    configured (the CronJob's creation), the reference while nothing ever succeeded."""
    if backup.suspend:
        return Condition(Type.BACKUP_HEALTHY, "Unknown", Reason.COMPACTION_SUSPENDED,
                         "spec.backup.suspend is true: no scheduled backup starts")  # fmt: skip
    if last.get("succeeded") is False:
        message = f"Job {last['job']} failed: {last.get('failure') or 'see its pods'}"
        return Condition(Type.BACKUP_HEALTHY, "False", Reason.BACKUP_FAILED, message[:1000])
    succeeded = last.get("lastSucceeded")
    reference = parse_iso(succeeded) if succeeded else since
    deadline = overdue_after(backup.schedule, reference)
    if now >= deadline:
        what = f"the last one finished {succeeded}" if succeeded else "none ever did"
        return Condition(
            Type.BACKUP_HEALTHY, "False", Reason.BACKUP_OVERDUE,
            f"no backup succeeded in two intervals of {backup.schedule!r} ({what}; overdue "
            f"since {iso(deadline, 0)})",
        )  # fmt: skip
    if succeeded:
        return Condition(Type.BACKUP_HEALTHY, "True", Reason.BACKUP_SUCCEEDED,
                         f"the newest backup succeeded at {succeeded}")  # fmt: skip
    return Condition(Type.BACKUP_HEALTHY, "Unknown", Reason.NO_BACKUP_YET,
                     "spec.backup is set; no backup Job has finished yet")  # fmt: skip


def observe(
    backup: Backup,
    jobs: list[dict[str, Any]],
    current: dict[str, Any] | None,
    *,
    since: datetime.datetime,
    now: datetime.datetime,
) -> tuple[Condition, dict[str, Any]]:
    """One pass: (BackupHealthy, status.lastBackup) from the Jobs and the current record."""
    last = last_backup(jobs, current)
    newest = [j for j in jobs if j["metadata"]["name"] == last.get("job")]
    failure = job_failure(newest[0]) if newest and last.get("succeeded") is False else None
    last["failure"] = failure if newest else (current or {}).get("failure")
    return health(backup, last, since=since, now=now), last
