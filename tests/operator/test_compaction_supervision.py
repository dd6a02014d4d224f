"""Compaction supervision against a real kube-apiserver (the Spark operator's CRD, no Spark
operator: a run stays where the test leaves it, as a stuck one would): a run past its
deadline is failed and deleted, failures back off, suspend and the run-now annotation."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.operator.helpers import condition, weaseldb
from tests.operator.test_compaction import apps, move, observed_again, storage, write_batches
from tests.support.cluster import metric
from tests.support.kube import ControlPlane
from tests.support.minio import MinioServer
from weaseldb.core.timestamps import parse_iso

pytestmark = pytest.mark.slow
RUN_NOW = "weaseldb.io/compact-now"


def eager(plane: ControlPlane, minio: MinioServer, ns: str, name: str, **extra: Any) -> None:
    """A database whose threshold (one batch) is met from the start."""
    bucket = minio.new_bucket()
    write_batches(f"s3://{bucket}/db?endpoint={minio.endpoint}&region=us-east-1", 1)
    compaction = {"image": "weaseldb-spark:test", "batchThreshold": 1, **extra}
    spec = {"storage": storage(minio, bucket), "compaction": compaction}
    plane.apply(weaseldb(name, ns, spec))


def status_where(
    plane: ControlPlane, ns: str, db: str, check: Any, timeout: float, what: str
) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        body = plane.get("wdb", db, "-n", ns)
        return body if check(body) else None

    return plane.wait_for(found, timeout, what)


def failures(body: dict[str, Any]) -> int:
    return int((body.get("status", {}).get("compaction") or {}).get("consecutiveFailures") or 0)


def events(plane: ControlPlane, ns: str, db: str) -> list[tuple[str, str]]:
    items = plane.get("events", "-n", ns)["items"]
    return [(e["reason"], e["type"]) for e in items if e["involvedObject"]["name"] == db]


def nth_run(plane: ControlPlane, ns: str, n: int) -> dict[str, Any] | None:
    found = apps(plane, ns, "flaky")
    return found[n] if len(found) > n else None


def run_now(plane: ControlPlane, ns: str, db: str, value: str) -> None:
    plane.kubectl("annotate", "wdb", db, "-n", ns, f"{RUN_NOW}={value}", "--overwrite")


def test_a_stuck_run_is_failed_and_deleted_at_its_deadline(
    control_plane: ControlPlane,
    operator: Path,
    minio: MinioServer,
    namespace: str,
    operator_metrics: str,
) -> None:
    eager(control_plane, minio, namespace, "stuck", deadlineSeconds=30, backoffSeconds=3600)
    (run,) = control_plane.wait_for(lambda: apps(control_plane, namespace, "stuck"), 40, "a run")
    # The counters exist at 0 before any run ends: WeaselDBCompactionFailing's increase()
    # sees the first failure.
    expired = f'{{database="stuck",namespace="{namespace}",outcome="DeadlineExceeded"}}'
    scraped = httpx.get(f"{operator_metrics}/metrics").text
    assert f"weaseldb_operator_compactions_total{expired} 0.0" in scraped
    created = parse_iso(run["metadata"]["creationTimestamp"])
    # Nothing moves the run (no Spark operator): past 30 s it is failed and deleted.
    control_plane.wait_for(lambda: not apps(control_plane, namespace, "stuck"), 60, "the deletion")
    body = status_where(control_plane, namespace, "stuck", lambda b: failures(b) == 1, 10,
                        "the stuck run counted as a failure")  # fmt: skip
    healthy = condition(body, "CompactionHealthy")
    assert (healthy["status"], healthy["reason"]) == ("False", "DeadlineExceeded")
    assert "1 failed run in a row" in healthy["message"]
    last = body["status"]["lastCompaction"]
    assert (last["application"], last["outcome"]) == (run["metadata"]["name"], "DeadlineExceeded")
    after = parse_iso(body["status"]["compaction"]["nextAttemptAfter"])
    assert 3600 <= (after - created).total_seconds() <= 3600 + 30 + 15
    observed_again(control_plane, namespace, "stuck")
    assert apps(control_plane, namespace, "stuck") == []  # the backoff holds the threshold
    body = control_plane.get("wdb", "stuck", "-n", namespace)
    assert body["status"]["lastCompaction"]["outcome"] == "DeadlineExceeded"  # still
    assert failures(body) == 1  # counted once
    assert metric(operator_metrics, "weaseldb_operator_compactions_total", expired) == 1
    seen = events(control_plane, namespace, "stuck")
    assert ("CompactionStarted", "Normal") in seen
    assert seen.count(("CompactionDeadlineExceeded", "Warning")) == 1


def test_repeated_failures_back_off_and_a_success_resets(
    control_plane: ControlPlane, operator: Path, minio: MinioServer, namespace: str
) -> None:
    eager(control_plane, minio, namespace, "flaky", backoffSeconds=600)
    (first,) = control_plane.wait_for(lambda: apps(control_plane, namespace, "flaky"), 40, "a run")
    move(control_plane, namespace, first["metadata"]["name"], "FAILED", "driver OOMKilled")
    status_where(control_plane, namespace, "flaky", lambda b: (
        condition(b, "CompactionHealthy").get("reason") == "CompactionFailed"
    ), 30, "the failure reported")  # fmt: skip

    # The threshold is still met: without the backoff the next minute's slot would run.
    minute = datetime.datetime.now(datetime.UTC).replace(second=0, microsecond=0)
    control_plane.wait_for(
        lambda: datetime.datetime.now(datetime.UTC) >= minute + datetime.timedelta(seconds=61),
        65, "the next minute",
    )  # fmt: skip
    observed_again(control_plane, namespace, "flaky")
    assert len(apps(control_plane, namespace, "flaky")) == 1
    body = control_plane.get("wdb", "flaky", "-n", namespace)
    assert failures(body) == 1
    healthy = condition(body, "CompactionHealthy")
    assert (
        "driver OOMKilled" in healthy["message"] and "1 failed run in a row" in healthy["message"]
    )
    first_wait = parse_iso(body["status"]["compaction"]["nextAttemptAfter"])

    # Run now ignores the backoff; its failure doubles the wait.
    run_now(control_plane, namespace, "flaky", "retry-1")
    second = control_plane.wait_for(lambda: nth_run(control_plane, namespace, 1), 30, "run now")
    assert second["metadata"]["annotations"][RUN_NOW] == "retry-1"
    move(control_plane, namespace, second["metadata"]["name"], "FAILED")
    body = status_where(control_plane, namespace, "flaky", lambda b: failures(b) == 2, 30,
                        "the second failure counted")  # fmt: skip
    assert body["status"]["compaction"]["compactNowHandled"] == "retry-1"
    second_wait = parse_iso(body["status"]["compaction"]["nextAttemptAfter"])
    now = datetime.datetime.now(datetime.UTC)
    assert 1200 - 15 <= (second_wait - now).total_seconds() <= 1200 and second_wait > first_wait

    run_now(control_plane, namespace, "flaky", "retry-2")
    third = control_plane.wait_for(lambda: nth_run(control_plane, namespace, 2), 30, "run now")
    move(control_plane, namespace, third["metadata"]["name"], "COMPLETED")
    body = status_where(control_plane, namespace, "flaky", lambda b: (
        condition(b, "CompactionHealthy").get("reason") == "CompactionSucceeded"
    ), 30, "the success")  # fmt: skip
    assert failures(body) == 0 and "nextAttemptAfter" not in body["status"]["compaction"]
    seen = events(control_plane, namespace, "flaky")
    assert seen.count(("CompactionFailed", "Warning")) == 2
    assert ("CompactionSucceeded", "Normal") in seen
    assert seen.count(("CompactionStarted", "Normal")) >= 3


def test_suspend_stops_new_runs_and_run_now_starts_one_once(
    control_plane: ControlPlane, operator: Path, minio: MinioServer, namespace: str
) -> None:
    eager(control_plane, minio, namespace, "paused", suspend=True)
    observed_again(control_plane, namespace, "paused")
    assert apps(control_plane, namespace, "paused") == []  # the threshold is met, and yet
    healthy = condition(control_plane.get("wdb", "paused", "-n", namespace), "CompactionHealthy")
    assert (healthy["status"], healthy["reason"]) == ("Unknown", "Suspended")

    run_now(control_plane, namespace, "paused", "once")
    (run,) = control_plane.wait_for(lambda: apps(control_plane, namespace, "paused"), 30, "run now")
    move(control_plane, namespace, run["metadata"]["name"], "COMPLETED")
    status_where(control_plane, namespace, "paused", lambda b: (
        (b["status"].get("compaction") or {}).get("countedRun") == run["metadata"]["name"]
    ), 30, "the run counted")  # fmt: skip
    observed_again(control_plane, namespace, "paused")
    assert len(apps(control_plane, namespace, "paused")) == 1  # "once" is not run twice

    resume = json.dumps({"spec": {"compaction": {"suspend": False}}})
    control_plane.kubectl("patch", "wdb", "paused", "-n", namespace, "--type=merge", "-p", resume)
    control_plane.wait_for(
        lambda: len(apps(control_plane, namespace, "paused")) == 2, 30, "the threshold run"
    )
