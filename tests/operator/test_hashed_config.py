"""Configuration in content-hashed, immutable ConfigMaps (issue 25, safe edits), against
the real API server and the operator: an edit makes a new ConfigMap and a new pod
template, a pod not rolled yet keeps mounting the old one, and the old one goes once no
pod mounts it. (No kubelet or StatefulSet controller runs here: the test makes the Pod
objects a StatefulSet would, mounting what its template named.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from weaseldb_operator.edits import mounted_configmaps

from tests.operator.helpers import condition, get_or_none, weaseldb
from tests.support.kube import ControlPlane
from tests.support.minio import MinioServer

pytestmark = pytest.mark.slow
SELECTOR = {"app.kubernetes.io/name": "weaseldb", "app.kubernetes.io/instance": "cfg"}


def mounted(plane: ControlPlane, namespace: str) -> str:
    sts = plane.get("statefulset", "cfg", "-n", namespace)
    (name,) = mounted_configmaps(sts["spec"]["template"]["spec"])
    return name


def pod_mounting(name: str, namespace: str, config: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": SELECTOR},
        "spec": {
            "containers": [{"name": "ring", "image": "weaseldb:test"}],
            "volumes": [{"name": "config", "configMap": {"name": config}}],
        },
    }


def in_flight(plane: ControlPlane, namespace: str, config: str) -> int:
    cm = plane.get("configmap", config, "-n", namespace)
    assert cm["immutable"] is True
    return int(json.loads(cm["data"]["config.json"])["persister"]["max_in_flight_requests"])


def test_an_edit_makes_a_new_configmap_and_the_old_goes_after_the_roll(
    control_plane: ControlPlane, operator: Path, minio: MinioServer, namespace: str
) -> None:
    storage = {"bucket": minio.new_bucket(), "prefix": "db", "endpoint": minio.endpoint}
    control_plane.apply(weaseldb("cfg", namespace, {"replicas": 2, "storage": storage}))
    control_plane.wait_for(
        lambda: get_or_none(control_plane, "statefulset", "cfg", "-n", namespace),
        what="statefulset",
    )
    old = mounted(control_plane, namespace)
    assert old.startswith("cfg-config-") and in_flight(control_plane, namespace, old) == 50
    control_plane.apply(pod_mounting("cfg-0", namespace, old))  # a pod not rolled yet

    edit = json.dumps({"spec": {"pipeline": {"maxInFlightRequests": 10}}})
    control_plane.kubectl("patch", "wdb", "cfg", "-n", namespace, "--type=merge", "-p", edit)
    new = str(
        control_plane.wait_for(
            lambda: (name := mounted(control_plane, namespace)) != old and name,
            what="new template",
        )
    )
    assert in_flight(control_plane, namespace, new) == 10
    control_plane.wait_for(
        lambda: (
            condition(control_plane.get("wdb", "cfg", "-n", namespace), "LeaderElected").get(
                "observedGeneration"
            )
            == 2
        ),
        what="an observer pass at generation 2",
    )
    assert in_flight(control_plane, namespace, old) == 50, "the pod's ConfigMap is unchanged"
    refused = control_plane.kubectl(
        "patch", "configmap", old, "-n", namespace, "--type=merge",
        "-p", json.dumps({"data": {"config.json": "{}"}}), check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "immutable" in refused.stderr, refused.stderr

    control_plane.apply(pod_mounting("cfg-1", namespace, new))  # rolled
    control_plane.kubectl("delete", "pod", "cfg-0", "-n", namespace, "--wait=true")
    control_plane.wait_for(
        lambda: get_or_none(control_plane, "configmap", old, "-n", namespace) is None,
        what="the old ConfigMap deleted once no pod mounts it",
    )
    left = control_plane.get("configmap", "-n", namespace, "-l", "app.kubernetes.io/instance=cfg")
    assert [c["metadata"]["name"] for c in left["items"]] == [new]
