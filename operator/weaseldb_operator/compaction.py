"""Scheduled compaction: when a run is due, the SparkApplication that runs it, and what
its state is (pure: no kopf, no client). What the outcomes mean over time - deadline,
backoff, suspend, run now, status - is supervision.py.

- A run is due in a *slot*: `c<YYYYMMDDHHMM>` for the newest cron fire time (UTC) after the
  database was created, or `t<YYYYMMDDHHMM>` (the current minute) when at least
  `batchThreshold` batches follow the newest snapshot.
- One SparkApplication per slot, named `<db>-compaction-<slot>`, so a retried handler or a
  restarted operator creates the same object (the API server answers 409) and never a
  second one; and none at all while another run of the database is not finished.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from croniter import croniter

from weaseldb_operator.resources import labels, owner_reference
from weaseldb_operator.spec import Compaction, Database, SparkResources

SPARK_API_VERSION = "sparkoperator.k8s.io/v1beta2"
SPARK_KIND = "SparkApplication"
#: The pyspark the Spark image bundles (pyproject.toml pins it).
SPARK_VERSION = "4.3.0"
#: The job's entry point inside the Spark image (Dockerfile, target `spark`).
MAIN_APPLICATION_FILE = "local:///opt/weaseldb/compaction/main.py"
DATABASE_LABEL = "weaseldb.io/database"
SLOT_LABEL = "weaseldb.io/compaction-slot"
#: On the WeaselDB: any new value starts one run now (if none is running), whatever the
#: schedule, suspend or backoff; the value is also put on the run it started.
RUN_NOW_ANNOTATION = "weaseldb.io/compact-now"
COMPONENT = "compaction"
#: applicationState.state values after which a run is over.
SUCCEEDED = frozenset({"COMPLETED"})
FAILED = frozenset({"FAILED", "SUBMISSION_FAILED", "FAILED_SUBMISSION"})
TERMINAL = SUCCEEDED | FAILED


class RunOutcome(enum.StrEnum):
    """`status.lastCompaction.outcome`: the newest run's state in a word."""

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    RUNNING = "Running"
    DEADLINE_EXCEEDED = "DeadlineExceeded"


#: Kubernetes names are at most 63 characters for what the driver pod derives from them.
_MAX_NAME = 63


def _minute(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y%m%d%H%M")


def scheduled_slot(schedule: str, now: datetime.datetime, since: datetime.datetime) -> str | None:
    """The slot of the newest fire time at or before `now`, if it is after `since`."""
    minute = now.astimezone(datetime.UTC).replace(second=0, microsecond=0)
    start = minute + datetime.timedelta(seconds=1)  # so `now`'s own minute can be the slot
    fired: datetime.datetime = croniter(schedule, start).get_prev(datetime.datetime)
    return f"c{_minute(fired)}" if fired > since else None


def threshold_slot(now: datetime.datetime) -> str:
    return f"t{_minute(now)}"


def application_name(db: Database, slot: str) -> str:
    suffix = f"-compaction-{slot}"
    return f"{db.name[: _MAX_NAME - len(suffix)].rstrip('-')}{suffix}"


def state_of(app: dict[str, Any]) -> str:
    """The SparkApplication's applicationState.state ("" before the Spark operator saw it)."""
    return str(((app.get("status") or {}).get("applicationState") or {}).get("state") or "")


def is_finished(app: dict[str, Any]) -> bool:
    return state_of(app) in TERMINAL


@dataclass(frozen=True)
class Due:
    slot: str
    why: str


def due(
    compaction: Compaction,
    *,
    now: datetime.datetime,
    created_at: datetime.datetime,
    apps: Iterable[dict[str, Any]],
    batches_since_snapshot: int | None,
    recorded_slot: str | None = None,
) -> Due | None:
    """The slot to run now, or None (nothing due, or a run is still going).
    `recorded_slot` is status.lastCompaction.slot: it stays taken after its
    SparkApplication expired (timeToLiveSeconds)."""
    apps = list(apps)
    if any(not is_finished(a) for a in apps):
        return None
    taken = {(a["metadata"].get("labels") or {}).get(SLOT_LABEL) for a in apps}
    taken.add(recorded_slot)
    if compaction.schedule:
        slot = scheduled_slot(compaction.schedule, now, created_at)
        if slot is not None and slot not in taken:
            return Due(slot, f"schedule {compaction.schedule!r}")
    threshold = compaction.batch_threshold
    if threshold is not None and batches_since_snapshot is not None:
        slot = threshold_slot(now)
        if batches_since_snapshot >= threshold and slot not in taken:
            return Due(slot, f"{batches_since_snapshot} batches since the last snapshot")
    return None


#: The variables the job's S3 client reads, each from the key of the same name in
#: `spec.storage.credentialsSecret`.
CREDENTIAL_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def credentials_conf(db: Database) -> dict[str, str]:
    """The store's keys as environment variables of the driver and executor pods, through
    Spark's own `secretKeyRef` settings: spark-submit sets them on the pods it creates, so
    they arrive whether or not the Spark operator runs its mutating webhook (pod fields
    such as `envFrom` need the webhook)."""
    secret = db.storage.credentials_secret
    if not secret:
        return {}
    return {
        f"spark.kubernetes.{role}.secretKeyRef.{key}": f"{secret}:{key}"
        for role in ("driver", "executor")
        for key in CREDENTIAL_KEYS
    }


def _cpu_and_memory(resources: SparkResources) -> dict[str, Any]:
    out: dict[str, Any] = {"cores": resources.cores, "memory": resources.memory}
    if resources.core_request is not None:
        out["coreRequest"] = resources.core_request
    return out


def spark_application_for(db: Database, compaction: Compaction, slot: str) -> dict[str, Any]:
    """The SparkApplication that runs the compaction job for `slot`."""
    app_labels = {**labels(db), DATABASE_LABEL: db.name, SLOT_LABEL: slot,
                  "app.kubernetes.io/component": COMPONENT}  # fmt: skip
    arguments = ["--store", db.storage.url]
    if compaction.gc:
        arguments.append("--gc")
        if db.backup is not None:  # GC keeps the restorable window (spec.backup.keepHistory)
            arguments += db.backup.keep_history.arguments()
    pod_labels = {DATABASE_LABEL: db.name, "app.kubernetes.io/component": COMPONENT}
    return {
        "apiVersion": SPARK_API_VERSION,
        "kind": SPARK_KIND,
        "metadata": {
            "name": application_name(db, slot),
            "namespace": db.namespace,
            "labels": app_labels,
            "ownerReferences": [owner_reference(db)],
        },
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "image": compaction.image,
            "imagePullPolicy": db.image_pull_policy,
            "mainApplicationFile": MAIN_APPLICATION_FILE,
            "arguments": arguments,
            "sparkVersion": SPARK_VERSION,
            "restartPolicy": {"type": "Never"},
            "timeToLiveSeconds": compaction.ttl_seconds,
            "sparkConf": {"spark.ui.enabled": "false", **credentials_conf(db)},
            "driver": {
                **_cpu_and_memory(compaction.driver),
                "serviceAccount": compaction.service_account,
                "labels": pod_labels,
            },
            "executor": {
                "instances": compaction.executors,
                **_cpu_and_memory(compaction.executor),
                "labels": pod_labels,
            },
        },
    }
