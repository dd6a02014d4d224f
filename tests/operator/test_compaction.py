"""Scheduled compaction against a real kube-apiserver with the Spark operator's CRD (its
schema validates every SparkApplication the operator creates) and MinIO. No Spark operator
runs here: the tests move a SparkApplication's state by patching its status, as the Spark
operator would."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from weaseldb_operator.spec import Storage

from tests.operator.helpers import condition, weaseldb
from tests.support import snapshots
from tests.support.kube import ControlPlane
from tests.support.logs import BatchSpec, build_log, write_log
from tests.support.minio import MinioServer
from weaseldb.core.protocol import Write
from weaseldb.runtime.stores import open_store

pytestmark = pytest.mark.slow
DATABASE_LABEL = "weaseldb.io/database"


def storage(minio: MinioServer, bucket: str) -> dict[str, Any]:
    return {"bucket": bucket, "prefix": "db", "endpoint": minio.endpoint}


def apps(plane: ControlPlane, ns: str, db: str) -> list[dict[str, Any]]:
    found = plane.get("sparkapplications", "-n", ns, "-l", f"{DATABASE_LABEL}={db}")
    items: list[dict[str, Any]] = found["items"]
    return sorted(items, key=lambda a: a["metadata"]["creationTimestamp"])


def move(plane: ControlPlane, ns: str, name: str, state: str, error: str = "") -> None:
    """What the Spark operator does: set applicationState on the status subresource."""
    app_state: dict[str, Any] = {"state": state}
    if error:
        app_state["errorMessage"] = error
    status = {"status": {"applicationState": app_state, "driverInfo": {}}}
    plane.kubectl("patch", "sparkapplication", name, "-n", ns, "--subresource=status",
                  "--type=merge", "-p", json.dumps(status))  # fmt: skip


def running(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    done = {"COMPLETED", "FAILED", "SUBMISSION_FAILED"}
    return [
        a for a in items
        if ((a.get("status") or {}).get("applicationState") or {}).get("state") not in done
    ]  # fmt: skip


def observed_again(plane: ControlPlane, ns: str, db: str) -> None:
    """Return once the operator has observed `db` again after this call, compaction
    included, so that a test can then assert what that observation did not do.

    It bumps the database's generation (leaderFailoverSeconds: with no pods and no term
    claim, nothing reads it here) and waits for the LeaderElected condition to carry the
    new generation. Only the observer writes LeaderElected (the reconciler writes Ready
    and observedGeneration), and Observer.observe decides compaction before it writes the
    status: the observation that wrote it listed the SparkApplications after this call."""
    seconds = int(plane.get("wdb", db, "-n", ns)["spec"].get("leaderFailoverSeconds", 30)) + 1
    generation = int(plane.kubectl(
        "patch", "wdb", db, "-n", ns, "--type=merge", "-o", "jsonpath={.metadata.generation}",
        "-p", json.dumps({"spec": {"leaderFailoverSeconds": seconds}}),
    ).stdout)  # fmt: skip

    def leader_elected_generation() -> bool:
        body = plane.get("wdb", db, "-n", ns)
        return condition(body, "LeaderElected").get("observedGeneration") == generation

    plane.wait_for(leader_elected_generation, 30, f"the observer at generation {generation}")


def write_batches(store_url: str, count: int) -> None:
    async def write() -> None:
        store = open_store(store_url)
        await write_log(store, build_log([BatchSpec(0, [[Write(b"k", b"v")]])] * count))
        await store.close()

    asyncio.run(write())


def publish_snapshot(store_url: str, version: int) -> None:
    async def publish() -> None:
        store = open_store(store_url)
        await snapshots.publish(store, snapshots.placeholder(version))
        await store.close()

    asyncio.run(publish())


def test_threshold_creates_one_application_and_status_follows_it(
    control_plane: ControlPlane, operator: Path, minio: MinioServer, namespace: str
) -> None:
    bucket = minio.new_bucket()
    store_url = f"s3://{bucket}/db?endpoint={minio.endpoint}&region=us-east-1"
    write_batches(store_url, 3)
    spec = {
        "storage": storage(minio, bucket),
        "compaction": {"image": "weaseldb-spark:test", "batchThreshold": 2, "executors": 3,
                       "executor": {"cores": 2, "memory": "2g"}, "backoffSeconds": 1},
    }  # fmt: skip
    control_plane.apply(weaseldb("eager", namespace, spec))
    owner = control_plane.get("wdb", "eager", "-n", namespace)["metadata"]["uid"]

    (first,) = control_plane.wait_for(
        lambda: apps(control_plane, namespace, "eager"), 40, "first run"
    )
    name = first["metadata"]["name"]
    assert name.startswith("eager-compaction-t")
    assert first["metadata"]["ownerReferences"][0]["uid"] == owner
    app_spec = first["spec"]
    assert (app_spec["type"], app_spec["image"], app_spec["mode"]) == (
        "Python", "weaseldb-spark:test", "cluster"
    )  # fmt: skip
    url = Storage(bucket=bucket, prefix="db", endpoint=minio.endpoint).url
    assert app_spec["arguments"] == ["--store", url, "--gc"]
    assert app_spec["executor"]["instances"] == 3 and app_spec["executor"]["memory"] == "2g"

    def recorded(state: str) -> dict[str, Any] | None:
        body = control_plane.get("wdb", "eager", "-n", namespace)
        last = body.get("status", {}).get("lastCompaction") or {}
        return body if last.get("application") == name and last.get("state") == state else None

    body = control_plane.wait_for(lambda: recorded("PENDING"), 30, "lastCompaction PENDING")
    assert condition(body, "CompactionHealthy")["reason"] == "NoCompactionYet"

    move(control_plane, namespace, name, "RUNNING")
    control_plane.wait_for(lambda: recorded("RUNNING"), 30, "lastCompaction RUNNING")
    observed_again(control_plane, namespace, "eager")
    # The threshold is still met, and yet no second run while this one is not finished.
    assert [a["metadata"]["name"] for a in apps(control_plane, namespace, "eager")] == [name]

    move(control_plane, namespace, name, "FAILED", "driver OOMKilled")
    body = control_plane.wait_for(lambda: recorded("FAILED"), 30, "lastCompaction FAILED")
    healthy = condition(body, "CompactionHealthy")
    assert (healthy["status"], healthy["reason"]) == ("False", "CompactionFailed")
    assert "driver OOMKilled" in healthy["message"]
    assert body["status"]["lastCompaction"]["outcome"] == "Failed"

    # After the backoff (1 s here) the next minute's slot runs again (the threshold is still
    # met), one at a time.
    def second_run() -> dict[str, Any] | None:
        found = apps(control_plane, namespace, "eager")
        return found[1] if len(found) == 2 else None

    second = control_plane.wait_for(second_run, 90, "second run")
    assert len(running(apps(control_plane, namespace, "eager"))) == 1
    publish_snapshot(store_url, 3)
    move(control_plane, namespace, second["metadata"]["name"], "COMPLETED")
    name = second["metadata"]["name"]
    body = control_plane.wait_for(
        lambda: (
            (b := recorded("COMPLETED")) and b["status"]["lastCompaction"].get("version") == 3 and b
        ),
        40,
        "lastCompaction COMPLETED with the snapshot version",
    )
    healthy = condition(body, "CompactionHealthy")
    assert (healthy["status"], healthy["reason"]) == ("True", "CompactionSucceeded")
    assert body["status"]["lastCompaction"]["outcome"] == "Succeeded"


def test_schedule_creates_an_application_per_slot(
    control_plane: ControlPlane, operator: Path, minio: MinioServer, namespace: str
) -> None:
    bucket = minio.new_bucket()
    spec = {
        "storage": storage(minio, bucket),
        "compaction": {"image": "weaseldb-spark:test", "schedule": "* * * * *", "gc": False},
    }
    control_plane.apply(weaseldb("nightly", namespace, spec))
    (first,) = control_plane.wait_for(
        lambda: apps(control_plane, namespace, "nightly"), 90, "scheduled run"
    )
    slot = first["metadata"]["labels"]["weaseldb.io/compaction-slot"]
    assert slot.startswith("c") and first["metadata"]["name"] == f"nightly-compaction-{slot}"
    assert "--gc" not in first["spec"]["arguments"]
    observed_again(control_plane, namespace, "nightly")
    assert len(apps(control_plane, namespace, "nightly")) == 1  # idempotent within the slot


def test_operator_applications_pass_the_spark_crd_schema(
    control_plane: ControlPlane, namespace: str
) -> None:
    """The builder's output as is, validated by the real SparkApplication CRD (dry run)."""
    from weaseldb_operator.compaction import spark_application_for
    from weaseldb_operator.spec import database_from

    body = weaseldb("shop", namespace, {
        "storage": {"bucket": "b1", "prefix": "db", "credentialsSecret": "keys"},
        "compaction": {"image": "weaseldb-spark:1", "schedule": "0 3 * * *"},
    })  # fmt: skip
    body["metadata"]["uid"] = "00000000-0000-0000-0000-000000000001"
    db = database_from(body)
    assert db.compaction is not None
    app = spark_application_for(db, db.compaction, "c202601010300")
    app["metadata"].pop("ownerReferences")  # the owner does not exist in a dry run
    control_plane.apply(app, "--dry-run=server")
    bad = json.loads(json.dumps(app))
    bad["spec"]["executor"]["instances"] = 0
    result = control_plane.kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", stdin=json.dumps(bad), check=False
    )
    assert result.returncode != 0 and "spec.executor.instances" in result.stderr
