"""Scenario 1: `helm install` of the chart, then `kubectl apply` of the example WeaselDB
(2 replicas, the in-cluster MinIO): every container of the ring starts from the project
image, probes pass, the operator publishes the leader pod and its term, status says
Ready and the printer columns are filled."""

from __future__ import annotations

from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from weaseldb_operator.edits import mounted_configmaps

from tests.e2e import KIND_TIER
from tests.e2e.databases import (
    OPERATOR_NAMESPACE,
    ROLE,
    condition,
    containers_ready,
    example_database,
    pods_of,
    wait_serving,
)
from tests.support.kind import KindCluster

pytestmark = KIND_TIER

NAME = "orders"
# The example runs two gateway workers: containers gateway and gateway-1.
CONTAINERS = {"gateway", "gateway-1", "sequencer", "resolver", "persister"}


def test_chart_installs_the_operator(weaseldb_operator: KindCluster) -> None:
    cluster = weaseldb_operator
    deployment = cluster.get("deployment", "weaseldb-operator", OPERATOR_NAMESPACE)
    assert deployment["status"].get("readyReplicas") == 1
    pod = cluster.get_all("pods", OPERATOR_NAMESPACE, "app.kubernetes.io/name=weaseldb-operator")[0]
    assert pod["spec"]["containers"][0]["image"] == "weaseldb:dev"
    assert containers_ready(pod)
    assert cluster.kubectl("get", "crd", "weaseldbs.weaseldb.io", "-o", "name").strip()
    # The chart grants what kopf reads at start (no LIST refused, retried and warned of).
    logs = cluster.kubectl("-n", OPERATOR_NAMESPACE, "logs", "deployment/weaseldb-operator")
    assert "Not enough permissions" not in logs and "APIForbiddenError" not in logs, logs[-3000:]


def test_example_weaseldb_with_two_replicas_becomes_ready(
    weaseldb_operator: KindCluster, images: dict[str, str], namespace: str
) -> None:
    cluster = weaseldb_operator
    cluster.apply(example_database(NAME, f"e2e/{namespace}", images["weaseldb"]), namespace)
    db = wait_serving(cluster, namespace, NAME, replicas=2)

    pods = {p["metadata"]["name"]: p for p in pods_of(cluster, namespace, NAME)}
    leader = db["status"]["leader"]
    assert leader["pod"] in pods
    assert leader["term"] >= 1
    assert leader["leaderId"]
    roles = {name: p["metadata"]["labels"].get(ROLE) for name, p in pods.items()}
    assert roles == {n: "leader" if n == leader["pod"] else "standby" for n in pods}

    # The leader runs the whole ring, every container Ready; the standby runs the whole
    # ring too, with the persister holding back (not Ready) until promoted.
    for name, pod in pods.items():
        statuses = {s["name"]: s for s in pod["status"]["containerStatuses"]}
        assert set(statuses) == CONTAINERS, name
        assert all("running" in s["state"] for s in statuses.values()), (name, statuses)
        for container in pod["spec"]["containers"]:
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert containers_ready(pods[leader["pod"]])
    # The standby's persister says why it holds back (through a port-forward to 127.0.0.1).
    (standby,) = [name for name in pods if name != leader["pod"]]
    with cluster.port_forward(namespace, f"pod/{standby}", 8083) as persister:
        answer = httpx.get(f"{persister}/readyz", timeout=10)
    assert answer.status_code == 503
    assert answer.json()["reason"].startswith("standby"), answer.json()

    assert condition(db, "Ready")["reason"] == "Serving"
    assert condition(db, "LeaderElected")["status"] == "True"
    assert condition(db, "Degraded")["reason"] == "AsExpected"  # the standby answers as one
    assert db["status"]["observedGeneration"] == db["metadata"]["generation"]

    columns = printer_columns(cluster, namespace)
    assert columns["READY"] == "True"
    assert columns["LEADER"] == leader["pod"]
    assert columns["TERM"] == str(leader["term"])
    assert columns["VERSION"].isdigit()

    owned = owned_children(cluster, namespace, db["metadata"]["uid"])
    (mounted,) = mounted_configmaps(next(iter(pods.values()))["spec"])
    assert mounted.startswith(f"{NAME}-config-")
    assert owned == {
        ("ConfigMap", mounted),
        ("Service", NAME),
        ("Service", f"{NAME}-pods"),
        ("StatefulSet", NAME),
        ("PodDisruptionBudget", NAME),
    }

    # Probes keep passing: once the kubelet has probed every container's liveness
    # failureThreshold more times (that many misses in a row restart a container, so each
    # container had its chance to fail), nothing restarted and no liveness probe failed.
    wait_probed(cluster, namespace, list(pods.values()))
    for pod in pods_of(cluster, namespace, NAME):
        restarts = {s["name"]: s["restartCount"] for s in pod["status"]["containerStatuses"]}
        assert not any(restarts.values()), (pod["metadata"]["name"], restarts)
    assert not liveness_failures(cluster, namespace)


def liveness_successes(cluster: KindCluster, namespace: str, node: str) -> dict[str, float]:
    """Successful liveness probes of each `pod/container` in `namespace`, as the kubelet of
    `node` counts them (prober_probe_total on its /metrics/probes, through the API
    server's node proxy)."""
    text = cluster.kubectl("get", "--raw", f"/api/v1/nodes/{node}/proxy/metrics/probes")
    return {
        f"{s.labels['pod']}/{s.labels['container']}": s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "prober_probe_total"
        and s.labels.get("namespace") == namespace
        and s.labels.get("probe_type") == "Liveness"
        and s.labels.get("result") == "successful"
    }


def wait_probed(cluster: KindCluster, namespace: str, pods: list[dict[str, Any]]) -> None:
    """Until every container of `pods` passed its liveness probe failureThreshold more
    times than now."""
    wanted = {
        f"{pod['metadata']['name']}/{c['name']}": c["livenessProbe"].get("failureThreshold", 3)
        for pod in pods
        for c in pod["spec"]["containers"]
    }
    nodes = {pod["spec"]["nodeName"] for pod in pods}  # each kubelet counts its own pods

    def successes() -> dict[str, float]:
        return {
            k: v for node in nodes for k, v in liveness_successes(cluster, namespace, node).items()
        }

    before = successes()
    slowest = max(
        c["livenessProbe"].get("periodSeconds", 10) * c["livenessProbe"].get("failureThreshold", 3)
        for pod in pods
        for c in pod["spec"]["containers"]
    )

    def probed() -> bool:
        now = successes()
        return all(now.get(k, 0) - before.get(k, 0) >= n for k, n in wanted.items())

    what = f"{len(wanted)} containers passing their liveness probe failureThreshold more times"
    cluster.wait_for(probed, 4 * slowest, what, namespace)


def printer_columns(cluster: KindCluster, namespace: str) -> dict[str, str]:
    """`kubectl get weaseldb -o wide` as header -> value."""
    header, row = cluster.kubectl(
        "-n", namespace, "get", "weaseldb", NAME, "-o", "wide"
    ).splitlines()
    return dict(zip(header.split(), row.split(), strict=True))


def owned_children(cluster: KindCluster, namespace: str, uid: str) -> set[tuple[str, str]]:
    found = set()
    for kind in ("configmaps", "services", "statefulsets", "poddisruptionbudgets"):
        for obj in cluster.get_all(kind, namespace):
            refs: list[dict[str, Any]] = obj["metadata"].get("ownerReferences", [])
            if any(r["uid"] == uid and r.get("controller") for r in refs):
                found.add((obj["kind"], obj["metadata"]["name"]))
    return found


def liveness_failures(cluster: KindCluster, namespace: str) -> list[str]:
    events = cluster.get_all("events", namespace)
    return [
        e["message"]
        for e in events
        if e.get("reason") == "Unhealthy" and e.get("message", "").startswith("Liveness")
    ]
