"""spec.backup and spec.bootstrap.recovery against a real kube-apiserver and MinIO: the API
server refuses bad specs, the operator creates the CronJob and the restore Job with the
right commands, and the status follows the Jobs' outcomes. No Job controller runs here:
the tests make the Jobs a CronJob would and move a Job's status as the Job controller
does (docs/operator.md "Backup and recovery")."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.operator.helpers import assert_refused, condition, get_or_none, weaseldb
from tests.support.kube import ControlPlane
from tests.support.minio import MinioServer
from tests.support.waiting import stop_process

pytestmark = pytest.mark.slow
DATABASE_LABEL = "weaseldb.io/database"
COMPONENT = "app.kubernetes.io/component"
STORAGE = {"bucket": "weasel-data", "prefix": "orders"}
DESTINATION = {"bucket": "weasel-backups", "prefix": "orders", "credentialsSecret": "bk"}
SOURCE = {"bucket": "weasel-backups", "prefix": "orders"}


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def finish(plane: ControlPlane, ns: str, name: str, succeeded: bool, message: str = "") -> None:
    """What the Job controller writes when a Job ends (the conditions the API server asks
    to come first: SuccessCriteriaMet before Complete, FailureTarget before Failed)."""
    moment = now()

    def cond(kind: str, reason: str) -> dict[str, Any]:
        return {"type": kind, "status": "True", "reason": reason, "message": message,
                "lastProbeTime": moment, "lastTransitionTime": moment}  # fmt: skip

    if succeeded:
        status = {"startTime": moment, "completionTime": moment, "succeeded": 1, "active": 0,
                  "conditions": [cond("SuccessCriteriaMet", "CompletionsReached"),
                                 cond("Complete", "CompletionsReached")]}  # fmt: skip
    else:
        status = {"startTime": moment, "failed": 1, "active": 0,
                  "conditions": [cond("FailureTarget", "BackoffLimitExceeded"),
                                 cond("Failed", "BackoffLimitExceeded")]}  # fmt: skip
    plane.kubectl("patch", "job", name, "-n", ns, "--subresource=status", "--type=merge",
                  "-p", json.dumps({"status": status}))  # fmt: skip


def start(plane: ControlPlane, ns: str, name: str) -> None:
    plane.kubectl("patch", "job", name, "-n", ns, "--subresource=status", "--type=merge",
                  "-p", json.dumps({"status": {"startTime": now(), "active": 1}}))  # fmt: skip


def backup_job(plane: ControlPlane, ns: str, db: str, name: str) -> None:
    """A Job as the CronJob controller makes it: the template's labels and spec."""
    cron = plane.get("cronjob", f"{db}-backup", "-n", ns)
    template = cron["spec"]["jobTemplate"]
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "namespace": ns, **template["metadata"]},
           "spec": template["spec"]}  # fmt: skip
    plane.apply(job)


def storage(minio: MinioServer) -> dict[str, Any]:
    return {"bucket": minio.new_bucket(), "prefix": "db", "endpoint": minio.endpoint}


# --- the API server refuses bad specs ------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param({"backup": {"destination": DESTINATION}},
                     "spec.backup.schedule: Required value", id="no-schedule"),
        pytest.param({"backup": {"destination": DESTINATION, "schedule": "0 * * * *",
                                 "keepHistory": {"duration": "7 days"}}},
                     "spec.backup.keepHistory.duration in body should match", id="duration"),
        pytest.param({"backup": {"destination": DESTINATION, "schedule": "0 * * * *",
                                 "keepHistory": {"versions": -1}}},
                     "spec.backup.keepHistory.versions: Invalid value: -1", id="versions"),
        pytest.param({"backup": {"destination": {"bucket": "weasel-backups"},
                                 "schedule": "0 * * * *"}},
                     "spec.backup.destination.prefix: Required value", id="no-prefix"),
        pytest.param({"bootstrap": {"recovery": {"source": SOURCE, "image": "s:1",
                                                 "targetVersion": 5,
                                                 "targetTime": "2026-11-26T14:03:00Z"}}},
                     "give targetVersion or targetTime, not both", id="two-targets"),
        pytest.param({"bootstrap": {"recovery": {"source": SOURCE, "image": "s:1",
                                                 "targetTime": "yesterday"}}},
                     "spec.bootstrap.recovery.targetTime", id="time-format"),
        pytest.param({"bootstrap": {"recovery": {"source": SOURCE}}},
                     "spec.bootstrap.recovery.image (the Spark image) is required", id="image"),
        pytest.param({"bootstrap": {"recovery": {"image": "s:1"}}},
                     "spec.bootstrap.recovery.source: Required value", id="no-source"),
    ],
)  # fmt: skip
def test_bad_backup_and_recovery_specs_are_refused(
    control_plane: ControlPlane, namespace: str, spec: dict[str, Any], message: str
) -> None:
    assert_refused(control_plane, namespace, {"storage": STORAGE, **spec}, message)


def patch(plane: ControlPlane, ns: str, name: str, spec: dict[str, Any]) -> Any:
    return plane.kubectl("patch", "wdb", name, "-n", ns, "--type=merge",
                         "-p", json.dumps({"spec": spec}), check=False)  # fmt: skip


def test_bootstrap_is_immutable(control_plane: ControlPlane, namespace: str) -> None:
    recovery = {"recovery": {"source": SOURCE, "image": "s:1", "targetVersion": 5}}
    control_plane.apply(weaseldb("plain", namespace, {"storage": STORAGE}))
    added = patch(control_plane, namespace, "plain", {"bootstrap": recovery})
    assert added.returncode != 0 and "bootstrap cannot be added or removed" in added.stderr
    other = {**STORAGE, "prefix": "restored"}
    control_plane.apply(weaseldb("restored", namespace, {"storage": other, "paused": True,
                                                         "bootstrap": recovery}))  # fmt: skip
    changed = patch(control_plane, namespace, "restored",
                    {"bootstrap": {"recovery": {"targetVersion": 6}}})  # fmt: skip
    assert changed.returncode != 0 and "bootstrap cannot change after creation" in changed.stderr
    removed = patch(control_plane, namespace, "restored", {"bootstrap": None})
    assert removed.returncode != 0 and "bootstrap cannot be added or removed" in removed.stderr
    assert patch(control_plane, namespace, "restored", {"replicas": 2}).returncode == 0


# --- spec.backup ---------------------------------------------------------------------------


def test_backup_cronjob_and_health_follow_its_jobs(
    control_plane: ControlPlane, operator: Path, minio: MinioServer, namespace: str
) -> None:
    own = storage(minio)
    spec = {"storage": own,
            "backup": {"destination": DESTINATION, "schedule": "*/30 * * * *"}}  # fmt: skip
    control_plane.apply(weaseldb("shop", namespace, spec))
    uid = control_plane.get("wdb", "shop", "-n", namespace)["metadata"]["uid"]
    cron = control_plane.wait_for(
        lambda: get_or_none(control_plane, "cronjob", "shop-backup", "-n", namespace), 30,
        "the backup CronJob",
    )  # fmt: skip
    assert cron["metadata"]["ownerReferences"][0]["uid"] == uid
    assert (cron["spec"]["schedule"], cron["spec"]["concurrencyPolicy"]) == ("*/30 * * * *",
                                                                             "Forbid")  # fmt: skip
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[:3] == ["weaseldb", "backup", "--from"]
    assert command[3].startswith(f"s3://{own['bucket']}/db?") and "credentials" not in command[3]
    assert command[4] == "--to" and command[5].startswith("s3://weasel-backups/orders?")
    assert command[5].endswith("credentials=BACKUP")

    def healthy(status: str, reason: str) -> dict[str, Any] | None:
        body = control_plane.get("wdb", "shop", "-n", namespace)
        found = condition(body, "BackupHealthy")
        return body if (found.get("status"), found.get("reason")) == (status, reason) else None

    control_plane.wait_for(lambda: healthy("Unknown", "NoBackupYet"), 30, "NoBackupYet")

    backup_job(control_plane, namespace, "shop", "shop-backup-1")
    finish(control_plane, namespace, "shop-backup-1", succeeded=True)
    body = control_plane.wait_for(lambda: healthy("True", "BackupSucceeded"), 30, "succeeded")
    last = body["status"]["lastBackup"]
    assert last["job"] == "shop-backup-1" and last["succeeded"] is True
    assert last["lastSucceeded"] == last["finished"]

    backup_job(control_plane, namespace, "shop", "shop-backup-2")
    finish(control_plane, namespace, "shop-backup-2", succeeded=False, message="wrong keys")
    body = control_plane.wait_for(lambda: healthy("False", "BackupFailed"), 30, "failed")
    assert (
        "shop-backup-2 failed: BackoffLimitExceeded: wrong keys"
        in condition(body, "BackupHealthy")["message"]
    )
    assert body["status"]["lastBackup"]["succeeded"] is False
    assert body["status"]["lastBackup"]["lastSucceeded"] == last["finished"]

    # Removing spec.backup removes the CronJob, the record and the condition.
    assert patch(control_plane, namespace, "shop", {"backup": None}).returncode == 0

    def gone() -> bool:
        body = control_plane.get("wdb", "shop", "-n", namespace)
        cron = get_or_none(control_plane, "cronjob", "shop-backup", "-n", namespace)
        return (
            cron is None
            and not condition(body, "BackupHealthy")
            and ("lastBackup" not in body["status"])
        )

    control_plane.wait_for(gone, 30, "the CronJob, lastBackup and BackupHealthy gone")


# --- spec.bootstrap.recovery ---------------------------------------------------------------


def recovering(minio: MinioServer, **recovery: Any) -> dict[str, Any]:
    source = {"bucket": "weasel-backups", "prefix": "orders", "endpoint": minio.endpoint,
              "credentialsSecret": "source-keys"}  # fmt: skip
    given = {"source": source, "image": "weaseldb-spark:test", "targetVersion": 1200, **recovery}
    return {
        "storage": {**storage(minio), "credentialsSecret": "db-keys"},
        "bootstrap": {"recovery": {k: v for k, v in given.items() if v is not None}},
    }


def bootstrap_status(plane: ControlPlane, ns: str, name: str, phase: str) -> dict[str, Any] | None:
    body = plane.get("wdb", name, "-n", ns)
    found = (body.get("status") or {}).get("bootstrap") or {}
    return body if found.get("phase") == phase else None


def statefulset(plane: ControlPlane, ns: str, name: str) -> dict[str, Any] | None:
    return get_or_none(plane, "statefulset", name, "-n", ns)


def test_restore_job_runs_before_any_pod_and_a_failure_stops_there(
    control_plane: ControlPlane, operator: Path, minio: MinioServer, namespace: str
) -> None:
    control_plane.apply(weaseldb("clone", namespace, recovering(minio)))
    job = control_plane.wait_for(
        lambda: get_or_none(control_plane, "job", "clone-restore", "-n", namespace), 30,
        "the restore Job",
    )  # fmt: skip
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "weaseldb-spark:test"
    command = container["command"]
    assert command[:3] == ["weaseldb", "restore", "--from"]
    assert command[3].startswith("s3://weasel-backups/orders?")
    assert command[3].endswith("credentials=SOURCE")
    assert command[4] == "--into" and command[5].endswith("credentials=DATABASE")
    assert command[6:] == ["--to-version", "1200", "--master", "local[2]", "--driver-memory", "1g"]
    env = {e["name"]: e.get("valueFrom", {}).get("secretKeyRef", {}) for e in container["env"]}
    assert env["SOURCE_ACCESS_KEY_ID"] == {"name": "source-keys", "key": "AWS_ACCESS_KEY_ID"}
    body = control_plane.wait_for(
        lambda: bootstrap_status(control_plane, namespace, "clone", "Restoring"), 30, "Restoring"
    )
    assert condition(body, "Bootstrapped")["reason"] == "Restoring"
    assert condition(body, "Ready")["reason"] == "Restoring"
    assert statefulset(control_plane, namespace, "clone") is None

    start(control_plane, namespace, "clone-restore")
    finish(control_plane, namespace, "clone-restore", succeeded=False, message="exit code 2")
    body = control_plane.wait_for(
        lambda: bootstrap_status(control_plane, namespace, "clone", "Failed"), 40, "Failed"
    )
    failed = condition(body, "Bootstrapped")
    assert (failed["status"], failed["reason"]) == ("False", "RestoreFailed")
    assert (
        "exit code 2" in failed["message"] and "kubectl logs job/clone-restore" in failed["message"]
    )
    assert statefulset(control_plane, namespace, "clone") is None

    # Deleting the failed Job tries again (within RESTORE_FAILED_POLL_S); a success then
    # creates the workload.
    first_uid = job["metadata"]["uid"]
    control_plane.kubectl("delete", "job", "clone-restore", "-n", namespace)
    again = control_plane.wait_for(
        lambda: (j := get_or_none(control_plane, "job", "clone-restore", "-n", namespace))
        and j["metadata"]["uid"] != first_uid and j, 60, "the restore Job again",
    )  # fmt: skip
    finish(control_plane, namespace, "clone-restore", succeeded=True)
    control_plane.wait_for(
        lambda: statefulset(control_plane, namespace, "clone"), 40, "the StatefulSet"
    )
    body = control_plane.wait_for(
        lambda: bootstrap_status(control_plane, namespace, "clone", "Restored"), 30, "Restored"
    )
    assert condition(body, "Bootstrapped")["status"] == "True"
    job = control_plane.get("job", "clone-restore", "-n", namespace)
    assert job["metadata"]["uid"] == again["metadata"]["uid"]  # followed, never made twice


@pytest.fixture
def own_operator(control_plane: ControlPlane, namespace: str) -> Iterator[list[Any]]:
    """`weaseldb operator --namespace NS` as a process the test stops and starts; yields
    a list whose last item is the running process."""
    log_path = control_plane.root / f"operator-{namespace}.log"
    running: list[subprocess.Popen[bytes]] = []

    def launch() -> None:
        with open(log_path, "ab") as log:
            running.append(subprocess.Popen(
                [sys.executable, "-m", "weaseldb_cli", "operator", "--namespace", namespace],
                env=control_plane.env, stdout=log, stderr=subprocess.STDOUT,
            ))  # fmt: skip

    launch()
    yield [running, launch]
    for process in running:
        stop_process(process, grace=20)


def test_an_operator_restarted_half_way_follows_the_same_job(
    control_plane: ControlPlane, minio: MinioServer, namespace: str, own_operator: list[Any]
) -> None:
    running, launch = own_operator
    control_plane.apply(weaseldb("clone", namespace, recovering(minio, targetVersion=None)))
    job = control_plane.wait_for(
        lambda: get_or_none(control_plane, "job", "clone-restore", "-n", namespace), 30,
        "the restore Job",
    )  # fmt: skip
    assert "--to-version" not in job["spec"]["template"]["spec"]["containers"][0]["command"]
    control_plane.wait_for(
        lambda: bootstrap_status(control_plane, namespace, "clone", "Restoring"), 30, "Restoring"
    )
    stop_process(running[-1], grace=20)  # the operator goes away mid-restore...
    finish(control_plane, namespace, "clone-restore", succeeded=True)  # ...the Job ends
    assert statefulset(control_plane, namespace, "clone") is None
    launch()
    control_plane.wait_for(
        lambda: statefulset(control_plane, namespace, "clone"), 60, "the StatefulSet"
    )
    control_plane.wait_for(
        lambda: bootstrap_status(control_plane, namespace, "clone", "Restored"), 30, "Restored"
    )
    after = control_plane.get("job", "clone-restore", "-n", namespace)
    assert after["metadata"]["uid"] == job["metadata"]["uid"]
