"""spec.backup and spec.bootstrap.recovery, pure: the spec parsing, the CronJob and the
restore Job builders, BackupHealthy over time and each bootstrap decision (no cluster,
no store)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from weaseldb_operator import backup, bootstrap
from weaseldb_operator.compaction import spark_application_for
from weaseldb_operator.spec import SpecError, database_from

UTC = datetime.UTC
STORAGE = {"bucket": "b1", "prefix": "db", "endpoint": "http://s3:9000",
           "credentialsSecret": "db-keys"}  # fmt: skip
DESTINATION = {"bucket": "b2", "prefix": "backups/db", "endpoint": "http://s3:9000",
               "credentialsSecret": "backup-keys"}  # fmt: skip


def body(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1", "generation": 1},
        "spec": {"storage": STORAGE, "image": "weaseldb:1", **spec},
    }


def at(minute: int, second: int = 0) -> datetime.datetime:
    return datetime.datetime(2026, 1, 1, 10, minute, second, tzinfo=UTC)


def stamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def job(name: str, created: datetime.datetime, outcome: bool | None = None,
        message: str = "") -> dict[str, Any]:  # fmt: skip
    status: dict[str, Any] = {"startTime": stamp(created)}
    finished = created + datetime.timedelta(seconds=20)
    if outcome is True:
        status["completionTime"] = stamp(finished)
        status["conditions"] = [{"type": "Complete", "status": "True"}]
    elif outcome is False:
        failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
        status["conditions"] = [
            failed | {"message": message, "lastTransitionTime": stamp(finished)}
        ]
    return {"metadata": {"name": name, "creationTimestamp": stamp(created)}, "status": status}


# --- spec ----------------------------------------------------------------------------------


def test_backup_spec_is_read_with_its_window() -> None:
    spec = {"destination": DESTINATION, "schedule": "0 * * * *",
            "keepHistory": {"duration": "1d12h", "versions": 500}}  # fmt: skip
    db = database_from(body(backup=spec))
    assert db.backup is not None
    assert db.backup.destination.location == "s3://b2/backups/db"
    assert db.backup.keep_history.arguments() == [
        "--keep-history-seconds", "129600", "--keep-history-versions", "500"
    ]  # fmt: skip


def test_keep_history_reaches_the_compaction_job_only_with_gc() -> None:
    spec = {"destination": DESTINATION, "schedule": "0 * * * *", "keepHistory": {"duration": "7d"}}
    compaction = {"image": "spark:1", "schedule": "0 3 * * *"}
    db = database_from(body(backup=spec, compaction=compaction))
    assert db.compaction is not None
    arguments = spark_application_for(db, db.compaction, "c1")["spec"]["arguments"]
    assert arguments[-3:] == ["--gc", "--keep-history-seconds", "604800"]
    db = database_from(body(backup=spec, compaction={**compaction, "gc": False}))
    assert db.compaction is not None
    assert (
        "--keep-history-seconds"
        not in spark_application_for(db, db.compaction, "c1")["spec"]["arguments"]
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param({"backup": {"destination": DESTINATION, "schedule": "61 * * * *"}},
                     "spec.backup.schedule: '61 * * * *' is not a valid cron", id="cron"),
        pytest.param({"backup": {"destination": DESTINATION, "schedule": "0 * * * *",
                                 "keepHistory": {"duration": "1h1d"}}},
                     "spec.backup.keepHistory.duration", id="duration-order"),
        pytest.param({"backup": {"destination": {**STORAGE, "prefix": "db/backup"},
                                 "schedule": "0 * * * *"}},
                     "spec.backup.destination: s3://b1/db/backup overlaps this database's own",
                     id="destination-nested"),
        pytest.param({"bootstrap": {"recovery": {"source": DESTINATION, "image": "s:1",
                                                 "targetVersion": 3,
                                                 "targetTime": "2026-01-01T00:00:00Z"}}},
                     "give targetVersion or targetTime, not both", id="two-targets"),
        pytest.param({"bootstrap": {"recovery": {"source": DESTINATION, "image": "s:1",
                                                 "targetTime": "2026-01-01T00:00:00"}}},
                     "has no zone", id="time-without-zone"),
        pytest.param({"bootstrap": {"recovery": {"source": DESTINATION}}},
                     "spec.bootstrap.recovery.image is required", id="no-image"),
        pytest.param({"bootstrap": {"recovery": {"source": STORAGE, "image": "s:1"}}},
                     "spec.bootstrap.recovery.source: s3://b1/db overlaps", id="source-is-self"),
    ],
)  # fmt: skip
def test_bad_specs_name_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("*", r"\*")):
        database_from(body(**spec))


# --- the CronJob ---------------------------------------------------------------------------


def test_cronjob_runs_backup_with_each_store_s_keys() -> None:
    db = database_from(body(backup={"destination": DESTINATION, "schedule": "*/5 * * * *"},
                            imagePullSecrets=[{"name": "pull"}]))  # fmt: skip
    cron = backup.cronjob_for(db)
    assert cron is not None
    assert cron["metadata"]["name"] == "orders-backup"
    assert cron["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    spec = cron["spec"]
    assert (spec["schedule"], spec["concurrencyPolicy"], spec["suspend"]) == (
        "*/5 * * * *",
        "Forbid",
        False,
    )
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "weaseldb:1"
    assert container["command"] == [
        "weaseldb", "backup",
        "--from", "s3://b1/db?endpoint=http%3A%2F%2Fs3%3A9000&region=us-east-1&credentials=DATABASE",
        "--to", "s3://b2/backups/db?endpoint=http%3A%2F%2Fs3%3A9000&region=us-east-1&credentials=BACKUP",
    ]  # fmt: skip
    env = {e["name"]: e.get("valueFrom", {}).get("secretKeyRef") for e in container["env"]}
    assert env["DATABASE_ACCESS_KEY_ID"] == {"name": "db-keys", "key": "AWS_ACCESS_KEY_ID"}
    assert env["BACKUP_SECRET_ACCESS_KEY"] == {
        "name": "backup-keys",
        "key": "AWS_SECRET_ACCESS_KEY",
    }
    assert pod["imagePullSecrets"] == [{"name": "pull"}]
    assert pod["automountServiceAccountToken"] is False
    labels = spec["jobTemplate"]["metadata"]["labels"]
    assert labels["weaseldb.io/database"] == "orders"
    assert labels["app.kubernetes.io/component"] == "backup"


def test_a_store_without_a_secret_uses_the_process_keys() -> None:
    destination = {k: v for k, v in DESTINATION.items() if k != "credentialsSecret"}
    db = database_from(body(backup={"destination": destination, "schedule": "0 * * * *"}))
    cron = backup.cronjob_for(db)
    assert cron is not None
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert "credentials" not in container["command"][-1]
    assert not [e for e in container["env"] if e["name"].startswith("BACKUP_")]


def test_no_backup_no_cronjob() -> None:
    assert backup.cronjob_for(database_from(body())) is None


# --- BackupHealthy -------------------------------------------------------------------------

EVERY_MINUTE = {"destination": DESTINATION, "schedule": "* * * * *"}


def healthy(
    jobs: list[dict[str, Any]],
    now: datetime.datetime,
    current: dict[str, Any] | None = None,
    **spec: Any,
) -> tuple[Any, dict[str, Any]]:
    db = database_from(body(backup={**EVERY_MINUTE, **spec}))
    assert db.backup is not None
    return backup.observe(db.backup, jobs, current, since=at(0, 30), now=now)


def test_no_job_yet_is_unknown_then_overdue_after_two_intervals() -> None:
    condition, last = healthy([], at(2, 59))
    assert (condition.status, condition.reason) == ("Unknown", "NoBackupYet")
    assert last["job"] is None
    condition, _ = healthy([], at(3, 0))  # fires 10:01 and 10:02 passed a whole interval each
    assert (condition.status, condition.reason) == ("False", "BackupOverdue")
    assert "none ever did" in condition.message


def test_follows_the_newest_job() -> None:
    first = job("orders-backup-1", at(1), True)
    condition, last = healthy([first], at(1, 30))
    assert (condition.status, condition.reason) == ("True", "BackupSucceeded")
    assert last == {
        "job": "orders-backup-1", "started": stamp(at(1)), "finished": stamp(at(1, 20)),
        "succeeded": True, "lastSucceeded": stamp(at(1, 20)), "failure": None,
    }  # fmt: skip
    running = job("orders-backup-2", at(2))
    condition, last = healthy([first, running], at(2, 5), last)
    assert condition.status == "True" and last["succeeded"] is None
    failed = job("orders-backup-2", at(2), False, "Job has reached the specified backoff limit")
    condition, last = healthy([first, failed], at(2, 30), last)
    assert (condition.status, condition.reason) == ("False", "BackupFailed")
    assert "orders-backup-2 failed: BackoffLimitExceeded: Job has reached" in condition.message
    assert last["lastSucceeded"] == stamp(at(1, 20))


def test_a_success_outlives_its_expired_job() -> None:
    _, last = healthy([job("orders-backup-1", at(1), True)], at(1, 30))
    condition, kept = healthy([], at(2, 30), last)  # the Job expired from the history
    assert condition.status == "True" and kept == last
    condition, _ = healthy([], at(4, 0), last)  # 10:02 and 10:03 passed: overdue
    assert (condition.status, condition.reason) == ("False", "BackupOverdue")


def test_suspended_is_unknown() -> None:
    condition, _ = healthy([job("orders-backup-1", at(1), False)], at(9), suspend=True)
    assert (condition.status, condition.reason) == ("Unknown", "Suspended")


# --- bootstrap -----------------------------------------------------------------------------

RECOVERY = {"source": DESTINATION, "image": "weaseldb-spark:1", "targetVersion": 1200}


def recovering(**recovery: Any) -> Any:
    return database_from(body(bootstrap={"recovery": {**RECOVERY, **recovery}}))


def test_restore_job_runs_restore_on_the_spark_image() -> None:
    job_ = bootstrap.restore_job_for(recovering())
    assert job_["metadata"]["name"] == "orders-restore"
    assert job_["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert "ttlSecondsAfterFinished" not in job_["spec"]  # it stays as the record
    (container,) = job_["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "weaseldb-spark:1"
    assert container["command"] == [
        "weaseldb", "restore",
        "--from", "s3://b2/backups/db?endpoint=http%3A%2F%2Fs3%3A9000&region=us-east-1&credentials=SOURCE",
        "--into", "s3://b1/db?endpoint=http%3A%2F%2Fs3%3A9000&region=us-east-1&credentials=DATABASE",
        "--to-version", "1200", "--master", "local[2]", "--driver-memory", "1g",
    ]  # fmt: skip
    env = {e["name"]: e.get("valueFrom", {}).get("secretKeyRef") for e in container["env"]}
    assert env["SOURCE_ACCESS_KEY_ID"] == {"name": "backup-keys", "key": "AWS_ACCESS_KEY_ID"}
    assert env["DATABASE_SECRET_ACCESS_KEY"] == {"name": "db-keys", "key": "AWS_SECRET_ACCESS_KEY"}


def test_restore_targets() -> None:
    at_time = recovering(targetVersion=None, targetTime="2026-11-26T14:03:00Z")
    assert at_time.recovery is not None
    assert at_time.recovery.target_arguments() == ["--to-time", "2026-11-26T14:03:00Z"]
    clone = recovering(targetVersion=None)
    assert clone.recovery is not None and clone.recovery.target_arguments() == []
    with_compaction = database_from(body(
        bootstrap={"recovery": {"source": DESTINATION}},
        compaction={"image": "spark:7", "schedule": "0 3 * * *"},
    ))  # fmt: skip
    assert with_compaction.recovery is not None and with_compaction.recovery.image == "spark:7"


def decide(status: dict[str, Any] | None, job_: dict[str, Any] | None, *,
           workload: bool = False, version: int | None = None) -> bootstrap.Step:  # fmt: skip
    return bootstrap.decide(recovering(), status, job_, workload_exists=workload,
                            restored_version=version)  # fmt: skip


def test_bootstrap_creates_the_job_then_follows_it() -> None:
    step = decide(None, None)
    assert step.create_job and not step.proceed
    assert step.status is not None and step.status["phase"] == "Restoring"
    step = decide(step.status, job("orders-restore", at(0)))
    assert not step.create_job and not step.proceed
    step = decide(step.status, job("orders-restore", at(0), True), version=1200)
    assert step.proceed and step.status is not None
    assert (step.status["phase"], step.status["version"]) == ("Restored", 1200)
    assert [(c.type, c.status) for c in step.conditions] == [("Bootstrapped", "True")]


def test_a_failed_restore_stops_before_the_pods() -> None:
    step = decide({"phase": "Restoring"}, job("orders-restore", at(0), False, "exit 2"))
    assert not step.proceed and not step.create_job
    assert step.status is not None and step.status["phase"] == "Failed"
    reasons = {(c.type, c.reason) for c in step.conditions}
    assert reasons == {("Bootstrapped", "RestoreFailed"), ("Ready", "RestoreFailed")}
    assert (
        "exit 2" in step.status["message"]
        and "kubectl logs job/orders-restore" in step.status["message"]
    )


def test_never_restores_twice() -> None:
    assert decide({"phase": "Restored"}, None) == bootstrap.Step(proceed=True)
    served = decide({"phase": "Restoring"}, None, workload=True)  # status lost, pods made
    assert served.proceed and not served.create_job
    gone = decide({"phase": "Restoring"}, None, version=1200)  # the Job deleted after it finished
    assert gone.proceed and not gone.create_job
    assert gone.status is not None and gone.status["version"] == 1200


def test_without_recovery_nothing_to_do() -> None:
    db = database_from(body())
    assert bootstrap.decide(db, None, None, workload_exists=False, restored_version=None).proceed
