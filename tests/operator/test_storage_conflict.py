"""Two WeaselDBs on one prefix, or on nested prefixes (issue 25, safe edits), against the
real API server and the operator: the older keeps running, the newer is refused with a
condition and an Event naming the older, and nothing is created for it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.operator.helpers import condition, get_or_none, weaseldb
from tests.operator.test_reconcile import list_objects, put_object
from tests.support.kube import ControlPlane
from tests.support.minio import MinioServer

pytestmark = pytest.mark.slow


def storage(prefix: str) -> dict[str, Any]:
    return {"storage": {"bucket": "shared", "prefix": prefix, "endpoint": "http://127.0.0.1:9"}}


def test_a_newer_database_on_a_nested_prefix_is_refused(
    control_plane: ControlPlane, operator: Path, namespace: str
) -> None:
    control_plane.apply(weaseldb("ledger", namespace, storage("db")))
    control_plane.wait_for(
        lambda: get_or_none(control_plane, "statefulset", "ledger", "-n", namespace),
        what="the older database runs",
    )
    time.sleep(1.1)  # creation times have whole seconds: make the order unambiguous
    control_plane.apply(weaseldb("shadow", namespace, storage("db/x")))
    control_plane.apply(weaseldb("sibling", namespace, storage("db2")))

    body = control_plane.wait_for(
        lambda: (
            (b := control_plane.get("wdb", "shadow", "-n", namespace))
            and condition(b, "SpecValid").get("reason") == "StorageConflict"
            and b
        ),
        what="shadow refused",
    )
    message = condition(body, "SpecValid")["message"]
    assert f"older WeaselDB {namespace}/ledger" in message and "s3://shared/db/x" in message
    assert condition(body, "Ready")["reason"] == "StorageConflict"
    control_plane.wait_for(
        lambda: get_or_none(control_plane, "statefulset", "sibling", "-n", namespace),
        what='"db2" is not nested in "db": sibling runs',
    )
    for kind in ("statefulset", "service", "configmap"):
        found = control_plane.get(kind, "-n", namespace)["items"]
        assert not [o for o in found if o["metadata"]["name"].startswith("shadow")], kind
    events = control_plane.get("events", "-n", namespace)["items"]
    refusals = [
        e
        for e in events
        if e["reason"] == "StorageConflict" and e["involvedObject"]["name"] == "shadow"
    ]
    assert len(refusals) == 1 and refusals[0]["type"] == "Warning", refusals
    assert "LeaderElected" not in {c["type"] for c in body["status"]["conditions"]}
    older = control_plane.get("wdb", "ledger", "-n", namespace)
    assert condition(older, "SpecValid")["status"] == "True"


def test_deleting_the_refused_database_never_purges_the_shared_prefix(
    control_plane: ControlPlane, operator: Path, minio: MinioServer, namespace: str
) -> None:
    bucket = minio.new_bucket()
    put_object(minio, bucket, "db/batches/00000000000000000001")
    on_minio = {"storage": {"bucket": bucket, "prefix": "db", "endpoint": minio.endpoint}}
    control_plane.apply(weaseldb("ledger", namespace, on_minio))
    time.sleep(1.1)
    control_plane.apply(weaseldb("shadow", namespace, {**on_minio, "deletionPolicy": "Delete"}))
    control_plane.wait_for(
        lambda: (
            condition(control_plane.get("wdb", "shadow", "-n", namespace), "SpecValid").get(
                "reason"
            )
            == "StorageConflict"
        ),
        what="shadow refused",
    )
    control_plane.kubectl("delete", "wdb", "shadow", "-n", namespace, "--timeout=60s")
    assert list_objects(minio, bucket) == ["db/batches/00000000000000000001"]
    events = control_plane.get("events", "-n", namespace)["items"]
    assert any(e["reason"] == "PurgeRefused" for e in events), events
