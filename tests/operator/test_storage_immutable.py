"""`spec.storage` is immutable after creation (issue 25, safe edits): the API server itself
refuses a change of bucket, prefix or endpoint (a CEL transition rule in the CRD), and
lets every other edit through."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.operator.helpers import weaseldb
from tests.support.kube import ControlPlane

STORAGE = {"bucket": "weasel-data", "prefix": "orders", "endpoint": "http://minio:9000"}
REFUSED = "storage cannot change after creation"


def patch(plane: ControlPlane, namespace: str, spec: dict[str, Any]) -> Any:
    body = json.dumps({"spec": spec})
    return plane.kubectl(
        "patch", "wdb", "db", "-n", namespace, "--type=merge", "-p", body, check=False
    )


@pytest.mark.parametrize(
    "storage",
    [
        pytest.param({"prefix": "orders/v2"}, id="prefix"),
        pytest.param({"bucket": "other-data"}, id="bucket"),
        pytest.param({"endpoint": "http://elsewhere:9000"}, id="endpoint"),
        pytest.param({"endpoint": None}, id="endpoint-removed"),
    ],
)
def test_a_storage_edit_is_refused_and_changes_nothing(
    control_plane: ControlPlane, namespace: str, storage: dict[str, Any]
) -> None:
    control_plane.apply(weaseldb("db", namespace, {"storage": STORAGE}))
    before = control_plane.get("wdb", "db", "-n", namespace)
    result = patch(control_plane, namespace, {"storage": storage, "replicas": 3})
    assert result.returncode != 0
    assert REFUSED in result.stderr and "create a new WeaselDB" in result.stderr, result.stderr
    after = control_plane.get("wdb", "db", "-n", namespace)
    assert after["spec"] == before["spec"]
    assert after["metadata"]["generation"] == before["metadata"]["generation"]


def test_other_edits_pass(control_plane: ControlPlane, namespace: str) -> None:
    control_plane.apply(weaseldb("db", namespace, {"storage": STORAGE}))
    edit = {"replicas": 3, "storage": {"credentialsSecret": "rotated", "region": "eu-west-1"}}
    result = patch(control_plane, namespace, edit)
    assert result.returncode == 0, result.stderr
    spec = control_plane.get("wdb", "db", "-n", namespace)["spec"]
    assert spec["replicas"] == 3
    assert spec["storage"] == {**STORAGE, "credentialsSecret": "rotated", "region": "eu-west-1"}
