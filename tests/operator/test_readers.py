"""`spec.readers` against the real kube-apiserver, MinIO and the operator (a subprocess):
the CRD's defaults and refusals, the Deployment and Service the API server accepts (with
owner references), a replicas/resources edit patching them, replicas 0 removing them, a
`deletionPolicy: Delete` waiting for the reader pods, and the retention policies of reader
pods that are gone removed through the leader's gateway (real `weaseldb up` process sets
stand for the ring's pods, tests/operator/pods.py). No kubelet or controller-manager runs
here: reader pods are Pod objects the test creates; the kind tier runs real readers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from weaseldb_operator.readersweep import SWEEP_INTERVAL_S

from tests.operator.helpers import assert_refused, get_or_none, weaseldb
from tests.operator.pods import Pods, leads_ready
from tests.support.kube import ControlPlane
from tests.support.minio import MinioServer

pytestmark = pytest.mark.slow
STORAGE = {"bucket": "weasel-data", "prefix": "orders"}
READER_LABELS = {"app.kubernetes.io/name": "weaseldb-reader", "app.kubernetes.io/instance": "shop"}


def test_crd_defaults_and_refuses_bad_readers(control_plane: ControlPlane, namespace: str) -> None:
    control_plane.apply(weaseldb("defaults", namespace, {"storage": STORAGE, "readers": {}}))
    readers = control_plane.get("wdb", "defaults", "-n", namespace)["spec"]["readers"]
    assert (readers["replicas"], readers["horizonSeconds"]) == (0, 300)
    assert readers["antiAffinity"] == "preferred"
    bad = [
        ({"replicas": -1}, "spec.readers.replicas: Invalid value: -1"),
        ({"horizonSeconds": 0}, "spec.readers.horizonSeconds: Invalid value: 0"),
        ({"replicas": "two"}, ".spec.readers.replicas: expected numeric"),
        (
            {"antiAffinity": "sometimes"},
            'spec.readers.antiAffinity: Unsupported value: "sometimes"',
        ),
        (
            {"resources": {"limits": {"memory": "lots"}}},
            "spec.readers.resources.limits.memory: Invalid value",
        ),
        (
            {"tolerations": [{"operator": "Maybe"}]},
            'spec.readers.tolerations[0].operator: Unsupported value: "Maybe"',
        ),
    ]
    for readers_spec, message in bad:
        assert_refused(control_plane, namespace, {"storage": STORAGE, "readers": readers_spec},
                       message)  # fmt: skip


def reader_objects(plane: ControlPlane, ns: str) -> tuple[dict[str, Any] | None, ...]:
    return (
        get_or_none(plane, "deployment", "shop-reader", "-n", ns),
        get_or_none(plane, "service", "shop-readers", "-n", ns),
    )


def test_readers_are_applied_patched_and_removed(
    control_plane: ControlPlane, operator: Path, minio: MinioServer, namespace: str
) -> None:
    storage = {"bucket": minio.new_bucket(), "prefix": "db", "endpoint": minio.endpoint}
    readers = {"replicas": 2, "horizonSeconds": 120, "nodeSelector": {"pool": "readers"}}
    control_plane.apply(weaseldb("shop", namespace, {"storage": storage, "readers": readers}))
    owner = control_plane.get("wdb", "shop", "-n", namespace)["metadata"]["uid"]

    def both() -> tuple[dict[str, Any], dict[str, Any]] | None:
        deployment, service = reader_objects(control_plane, namespace)
        return (deployment, service) if deployment and service else None

    deployment, service = control_plane.wait_for(both, what="the readers' Deployment and Service")
    for obj in (deployment, service):
        (ref,) = obj["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("WeaselDB", owner, True)
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["selector"]["matchLabels"] == READER_LABELS
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "readers"}
    (container,) = pod["containers"]
    command = container["command"]
    assert command[:2] == ["weaseldb", "reader"]
    # TLS by default: the readers follow the client Service over https.
    assert command[command.index("--upstream") + 1] == f"https://shop.{namespace}.svc:8080"
    assert command[command.index("--horizon-seconds") + 1] == "120"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert service["spec"]["selector"] == READER_LABELS
    assert [p["port"] for p in service["spec"]["ports"]] == [8090]
    # The operator here knows its identity (conftest), so the database has its
    # NetworkPolicy, and the readers theirs beside it.
    policy = control_plane.get("networkpolicy", "shop-readers", "-n", namespace)
    assert policy["spec"]["podSelector"] == {"matchLabels": READER_LABELS}
    assert policy["spec"]["ingress"] == [{"ports": [{"port": 8090, "protocol": "TCP"}]}]
    budget = control_plane.get("pdb", "shop-readers", "-n", namespace)
    assert budget["spec"]["selector"] == {"matchLabels": READER_LABELS}
    assert budget["spec"]["maxUnavailable"] == 1

    # An edit of replicas and resources patches the Deployment.
    resources = {"requests": {"cpu": "200m"}, "limits": {"memory": "768Mi"}}
    patch = {"spec": {"readers": {"replicas": 3, "resources": resources}}}
    control_plane.kubectl("patch", "wdb", "shop", "-n", namespace, "--type=merge",
                          "-p", json.dumps(patch))  # fmt: skip

    def patched() -> bool:
        found = get_or_none(control_plane, "deployment", "shop-reader", "-n", namespace) or {}
        spec = found.get("spec") or {}
        reader = spec.get("template", {}).get("spec", {}).get("containers", [{}])[0]
        return spec.get("replicas") == 3 and reader.get("resources") == {
            "requests": {"cpu": "200m"},
            "limits": {"memory": "768Mi"},
        }

    control_plane.wait_for(patched, what="replicas and resources patched")

    # One reader: no budget (it would block every node drain).
    control_plane.kubectl("patch", "wdb", "shop", "-n", namespace, "--type=merge",
                          "-p", json.dumps({"spec": {"readers": {"replicas": 1}}}))  # fmt: skip
    control_plane.wait_for(
        lambda: get_or_none(control_plane, "pdb", "shop-readers", "-n", namespace) is None,
        what="the readers' PodDisruptionBudget removed at one reader",
    )

    # Zero readers: the Deployment and the Service go.
    control_plane.kubectl("patch", "wdb", "shop", "-n", namespace, "--type=merge",
                          "-p", json.dumps({"spec": {"readers": {"replicas": 0}}}))  # fmt: skip
    control_plane.wait_for(
        lambda: reader_objects(control_plane, namespace) == (None, None), what="readers removed"
    )
    control_plane.wait_for(
        lambda: (
            get_or_none(control_plane, "networkpolicy", "shop-readers", "-n", namespace) is None
        ),
        what="the readers' NetworkPolicy removed",
    )
    # The ring is untouched by all of it.
    assert get_or_none(control_plane, "statefulset", "shop", "-n", namespace) is not None


def reader_pod(name: str, namespace: str) -> dict[str, Any]:
    """A Pod object standing for one reader pod of `shop` (no kubelet runs it)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": READER_LABELS},
        "spec": {"containers": [{"name": "reader", "image": "weaseldb:test"}]},
    }


def test_delete_scales_readers_down_and_waits_for_their_pods(
    control_plane: ControlPlane, operator: Path, minio: MinioServer, namespace: str
) -> None:
    storage = {"bucket": minio.new_bucket(), "prefix": "db", "endpoint": minio.endpoint}
    spec = {"deletionPolicy": "Delete", "storage": storage, "readers": {"replicas": 2}}
    control_plane.apply(weaseldb("shop", namespace, spec))
    control_plane.wait_for(lambda: all(reader_objects(control_plane, namespace)) or None,
                           what="readers")  # fmt: skip
    control_plane.apply(reader_pod("shop-reader-7d4b9c-x1x1x", namespace))
    control_plane.kubectl("delete", "wdb", "shop", "-n", namespace, "--wait=false")

    def waiting() -> str | None:
        body = get_or_none(control_plane, "wdb", "shop", "-n", namespace) or {}
        phase = str((body.get("status") or {}).get("phase", ""))
        return phase if phase.startswith("Deleting") else None

    phase = control_plane.wait_for(waiting, what="the deletion waits for the reader pod")
    assert phase == "Deleting: waiting for 1 pod (shop-reader-7d4b9c-x1x1x)"
    deployment = control_plane.get("deployment", "shop-reader", "-n", namespace)
    assert deployment["spec"]["replicas"] == 0
    control_plane.kubectl("delete", "pod", "shop-reader-7d4b9c-x1x1x", "-n", namespace)
    control_plane.wait_for(
        lambda: get_or_none(control_plane, "wdb", "shop", "-n", namespace) is None,
        timeout=90,
        what="purged once the reader pod is gone",
    )


def test_policies_of_gone_reader_pods_are_removed(
    control_plane: ControlPlane, operator: Path, pods: Pods, namespace: str
) -> None:
    """The `pods` fixture's WeaselDB is `ledger`; its reader pods are `ledger-reader-*`
    (Pod objects: no controller makes the Deployment's)."""
    readers = json.dumps({"spec": {"readers": {"replicas": 1}}})
    control_plane.kubectl("patch", "wdb", "ledger", "-n", namespace, "--type=merge", "-p", readers)
    leader = pods.start("ledger-0")
    leads_ready(control_plane, namespace, "ledger-0")
    labels = {**READER_LABELS, "app.kubernetes.io/instance": "ledger"}
    alive, gone = "ledger-reader-5f6d7-alive", "ledger-reader-5f6d7-gone0"
    control_plane.apply({**reader_pod(alive, namespace), "metadata": {
        "name": alive, "namespace": namespace, "labels": labels}})  # fmt: skip
    with httpx.Client(base_url=leader.url, timeout=10) as http:
        version = http.get("/v1/version").json()["version"]
        kept = [f"reader-{alive}", "reader-laptop", "nightly-export"]
        for policy in [*kept, f"reader-{gone}"]:
            http.put(f"/v1/retention/{policy}", json={"version": version}).raise_for_status()

        def policies() -> list[str]:
            return sorted(p["policy_id"] for p in http.get("/v1/retention/").json()["policies"])

        control_plane.wait_for(
            lambda: policies() == sorted(kept),
            timeout=SWEEP_INTERVAL_S * 2 + 30,
            what=f"reader-{gone} removed, the others kept",
        )
    events = control_plane.get("events", "-n", namespace, "--field-selector",
                               "involvedObject.name=ledger")  # fmt: skip
    messages = [e["message"] for e in events["items"] if e["reason"] == "ReaderPolicyRemoved"]
    assert len(messages) == 1 and f"reader-{gone}" in messages[0]
