"""WeaselDB resources on the kind cluster: the example CR with the local image, waiting
until a database serves, and reaching its gateway Service from the host."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.histories import Workload
from tests.support.kind import GATEWAY_NODE_PORT, REPO, KindCluster

EXAMPLE = REPO / "examples/weaseldb-minio.yaml"
OPERATOR_NAMESPACE = "weaseldb-system"
ROLE = "weaseldb.io/role"


# The example asks 650m CPU per pod; the kind cluster's two nodes share one 2-core CI
# machine with its control plane, so tests ask less (limits stay as they are).
SMALL_REQUESTS = {
    "default": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
    "persister": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}},
}


def example_database(name: str, prefix: str, image: str, **spec: Any) -> list[dict[str, Any]]:
    """examples/weaseldb-minio.yaml (its Secret and WeaselDB) with this name, prefix, the
    locally built image, SMALL_REQUESTS and plain HTTP (no tls, no auth); `spec` overrides
    top-level spec fields."""
    docs = [d for d in yaml.safe_load_all(Path(EXAMPLE).read_text()) if d]
    out = []
    for doc in copy.deepcopy(docs):
        if doc["kind"] == "WeaselDB":
            doc["metadata"]["name"] = name
            doc["spec"]["storage"]["prefix"] = prefix
            doc["spec"]["image"] = image
            doc["spec"]["imagePullPolicy"] = "Never"
            doc["spec"]["resources"] = SMALL_REQUESTS
            # The tier's tests reach the gateways over plain HTTP from the host; TLS and
            # auth, on by default, have their own test (test_security.py).
            doc["spec"]["tls"] = {"mode": "Disabled"}
            doc["spec"].pop("auth", None)
            doc["spec"].update(spec)
        out.append(doc)
    return out


def selector(name: str) -> str:
    return f"app.kubernetes.io/name=weaseldb,app.kubernetes.io/instance={name}"


def pods_of(cluster: KindCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    return cluster.get_all("pods", namespace, selector(name))


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == kind:
            found: dict[str, Any] = c
            return found
    return {}


def containers_ready(pod: dict[str, Any]) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses", [])
    return bool(statuses) and all(s["ready"] for s in statuses)


def serving(
    cluster: KindCluster, namespace: str, name: str, replicas: int
) -> dict[str, Any] | None:
    """The WeaselDB when the operator reports it Ready, with a leader and `replicas` pods
    that all run (a leader Ready, the others live standbys); else None."""
    db = cluster.get("weaseldb", name, namespace)
    pods = pods_of(cluster, namespace, name)
    running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
    ready = condition(db, "Ready").get("status") == "True"
    if not (ready and len(running) == replicas and db["status"].get("leader", {}).get("pod")):
        return None
    if replicas > 1 and condition(db, "Degraded").get("status") != "False":
        return None  # a standby is not yet seen as live
    return db


def wait_serving(
    cluster: KindCluster, namespace: str, name: str, replicas: int, timeout: float = 420
) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def check() -> bool:
        db = serving(cluster, namespace, name, replicas)
        if db:
            found.append(db)
        return db is not None

    cluster.wait_for(check, timeout, f"WeaselDB {namespace}/{name} serving", namespace)
    return found[-1]


def node_port_holders(cluster: KindCluster, node_port: int, besides: str) -> list[str]:
    """namespace/name of every Service but `besides` that holds `node_port`."""
    services = cluster.get_all("services", None, all_namespaces=True)
    names = [
        f"{s['metadata']['namespace']}/{s['metadata']['name']}"
        for s in services
        if any(p.get("nodePort") == node_port for p in s["spec"].get("ports", []))
    ]
    return [n for n in names if n != besides]


def expose_gateway(cluster: KindCluster, namespace: str, name: str) -> str:
    """Give the database's gateway Service (spec.gateway.serviceType NodePort) the NodePort
    kind publishes on 127.0.0.1 and return that URL: host traffic then crosses the Service
    (kube-proxy) to whichever pod is the leader. The operator's server-side apply does not
    own nodePort, so it keeps this value. One database at a time holds the port."""
    me = f"{namespace}/{name}"
    cluster.wait_for(
        lambda: not node_port_holders(cluster, GATEWAY_NODE_PORT, me),
        120,
        f"NodePort {GATEWAY_NODE_PORT} released by other Services",
    )
    cluster.wait_for(
        lambda: cluster.get("service", name, namespace)["spec"]["type"] == "NodePort",
        60,
        f"Service {me} of type NodePort",
        namespace,
    )
    patch = f'[{{"op": "replace", "path": "/spec/ports/0/nodePort", "value": {GATEWAY_NODE_PORT}}}]'
    cluster.kubectl("-n", namespace, "patch", "service", name, "--type=json", "-p", patch)
    return cluster.node_port_url(GATEWAY_NODE_PORT)


def answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/v1/version", timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


def start_database(
    cluster: KindCluster, image: str, namespace: str, name: str, prefix: str = "", **spec: Any
) -> str:
    """A WeaselDB reached through its gateway Service's published NodePort; the URL. Its
    prefix is `e2e/NAMESPACE` unless given."""
    spec = {"gateway": {"serviceType": "NodePort", "workers": 1}, **spec}
    prefix = prefix or f"e2e/{namespace}"
    cluster.apply(example_database(name, prefix, image, **spec), namespace)
    wait_serving(cluster, namespace, name, replicas=spec["replicas"])
    url = expose_gateway(cluster, namespace, name)
    cluster.wait_for(lambda: answers(url), 60, f"the gateway at {url}", namespace)
    return url


def the_leader(cluster: KindCluster, namespace: str, name: str) -> dict[str, Any] | None:
    """The one pod labelled leader, or None: during a hand-over no pod carries the label
    for a moment."""
    pods = pods_of(cluster, namespace, name)
    leaders = [p for p in pods if p["metadata"]["labels"].get(ROLE) == "leader"]
    assert len(leaders) <= 1, f"two pods labelled leader: {leaders}"
    return leaders[0] if leaders else None


def leader_name(cluster: KindCluster, namespace: str, name: str) -> str | None:
    leader = the_leader(cluster, namespace, name)
    return str(leader["metadata"]["name"]) if leader else None


def leader_pod(cluster: KindCluster, namespace: str, name: str) -> dict[str, Any]:
    """The leader pod, once one carries the label (a hand-over may be under way)."""
    return cluster.wait_for(
        lambda: the_leader(cluster, namespace, name), 120, "a pod labelled leader", namespace
    )


def commits_grow_by(
    cluster: KindCluster, workload: Workload, count: int, namespace: str, timeout: float = 180
) -> None:
    target = workload.count("committed") + count
    cluster.wait_for(
        lambda: workload.count("committed") >= target,
        timeout,
        f"{count} more commits (unexpected answers: {workload.unexpected[:3]})",
        namespace,
    )


def term(cluster: KindCluster, namespace: str, name: str) -> int:
    return int(cluster.get("weaseldb", name, namespace)["status"]["leader"]["term"])


def wait_new_term(cluster: KindCluster, namespace: str, name: str, old: int) -> None:
    cluster.wait_for(
        lambda: term(cluster, namespace, name) != old, 120, "a leader in a newer term", namespace
    )


def wait_standby_back(cluster: KindCluster, namespace: str, name: str) -> None:
    """Both pods run again: a leader serving and a live standby (a candidate)."""
    cluster.wait_for(
        lambda: serving(cluster, namespace, name, replicas=2) is not None,
        300,
        "the leader and a live standby",
        namespace,
    )


def kill_pod(cluster: KindCluster, pod: dict[str, Any]) -> None:
    """SIGKILL every container of the pod at once (a crash of everything it runs)."""
    cluster.kill_containers(pod, [s["name"] for s in pod["status"]["containerStatuses"]])
