"""Scenario 0: the cluster the tier runs on. Two nodes (control plane and worker), both
Ready and schedulable, and one pod network across them (hack/e2e-cluster.sh
`ensure_pod_network` stands in for kindnetd on the assembled node): a pod on each node
reaches a pod on the other through a Service by its DNS name (CoreDNS, kube-proxy) and
sees the caller's own pod address, and the NodePort kind publishes on the control plane
reaches a pod on the worker."""

from __future__ import annotations

import functools
from typing import Any

import httpx

from tests.e2e import KIND_TIER
from tests.e2e.databases import containers_ready, node_port_holders
from tests.support.kind import GATEWAY_NODE_PORT, KindCluster

pytestmark = KIND_TIER

PORT = 8080
HOSTNAME_LABEL = "kubernetes.io/hostname"
# What every client pod runs: GET each URL given (retrying for 60 s: a new Service takes
# a moment to reach every node's kube-proxy), print the answer.
FETCH = """
import sys, time, urllib.request
for url in sys.argv[1:]:
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                print(url, answer.status, flush=True)
                break
        except OSError as e:
            print(url, e, flush=True)
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
"""


def ready_nodes(cluster: KindCluster) -> list[dict[str, Any]]:
    nodes = cluster.get_all("nodes", None)
    return [
        n
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
    ]


def test_two_ready_schedulable_nodes(kind_cluster: KindCluster) -> None:
    nodes = ready_nodes(kind_cluster)
    assert len(nodes) == 2, [n["metadata"]["name"] for n in nodes]
    roles = sorted(
        "control-plane"
        if "node-role.kubernetes.io/control-plane" in n["metadata"]["labels"]
        else "worker"
        for n in nodes
    )
    assert roles == ["control-plane", "worker"]
    for node in nodes:
        # No NoSchedule/NoExecute taint: pods land on either node.
        assert not node["spec"].get("taints"), (node["metadata"]["name"], node["spec"]["taints"])
        assert not node["spec"].get("unschedulable")
    assert len({n["spec"]["podCIDR"] for n in nodes}) == 2


def test_pods_reach_each_other_across_nodes_through_services(
    kind_cluster: KindCluster, images: dict[str, str], namespace: str
) -> None:
    cluster = kind_cluster
    nodes = sorted(n["metadata"]["name"] for n in ready_nodes(cluster))
    for i, node in enumerate(nodes):
        cluster.apply(server(f"server-{i}", node, images["weaseldb"]), namespace)
    # The worker's server behind the NodePort kind publishes on the control plane.
    worker = next(i for i, n in enumerate(nodes) if n.endswith("-worker"))
    cluster.wait_for(
        lambda: not node_port_holders(cluster, GATEWAY_NODE_PORT, besides=""),
        120,
        f"NodePort {GATEWAY_NODE_PORT} free",
    )
    cluster.apply(service(f"server-{worker}", GATEWAY_NODE_PORT), namespace)
    for i in range(len(nodes)):
        if i != worker:
            cluster.apply(service(f"server-{i}"), namespace)
    servers = {i: wait_ready(cluster, namespace, f"server-{i}") for i in range(len(nodes))}
    assert {servers[i]["spec"]["nodeName"] for i in servers} == set(nodes)

    # From each node, the other node's server: by Service name and by pod address.
    for i, node in enumerate(nodes):
        other = 1 - i
        urls = [
            f"http://server-{other}.{namespace}.svc.cluster.local:{PORT}/",
            f"http://{servers[other]['status']['podIP']}:{PORT}/",
        ]
        cluster.apply(client(f"client-{i}", node, images["weaseldb"], urls), namespace)
    for i in range(len(nodes)):
        cluster.wait_for(
            functools.partial(succeeded, cluster, namespace, f"client-{i}"),
            120,
            f"client-{i} fetched the other node's server",
            namespace,
        )
    clients = {i: cluster.get("pod", f"client-{i}", namespace) for i in range(len(nodes))}
    for i in range(len(nodes)):
        # No masquerade between pods: the server logs the client's own pod address.
        log = cluster.kubectl("-n", namespace, "logs", f"server-{1 - i}")
        assert f"{clients[i]['status']['podIP']} - -" in log, log

    url = cluster.node_port_url(GATEWAY_NODE_PORT)
    cluster.wait_for(lambda: reaches(url), 60, f"{url} (NodePort) answering from the worker's pod")


def server(name: str, node: str, image: str) -> dict[str, Any]:
    """A pod serving HTTP on PORT on `node` (through the scheduler: a nodeSelector)."""
    found = pod(
        name, node, image, ["python", "-m", "http.server", str(PORT), "-d", "/tmp"], "Always"
    )
    found["spec"]["containers"][0]["readinessProbe"] = {
        "tcpSocket": {"port": PORT},
        "periodSeconds": 1,
    }
    return found


def client(name: str, node: str, image: str, urls: list[str]) -> dict[str, Any]:
    return pod(name, node, image, ["python", "-c", FETCH, *urls], "Never")


def pod(name: str, node: str, image: str, command: list[str], restart: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeSelector": {HOSTNAME_LABEL: node},
            "restartPolicy": restart,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": command,
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                }
            ],
        },
    }


def service(name: str, node_port: int | None = None) -> dict[str, Any]:
    port: dict[str, Any] = {"port": PORT, "targetPort": PORT}
    if node_port:
        port["nodePort"] = node_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "type": "NodePort" if node_port else "ClusterIP",
            "selector": {"app": name},
            "ports": [port],
        },
    }


def wait_ready(cluster: KindCluster, namespace: str, name: str) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        found = cluster.get("pod", name, namespace)
        return found if containers_ready(found) else None

    return cluster.wait_for(ready, 120, f"pod {name} Ready", namespace)


def reaches(url: str) -> bool:
    try:
        return httpx.get(url, timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


def succeeded(cluster: KindCluster, namespace: str, name: str) -> bool:
    phase = cluster.get("pod", name, namespace)["status"].get("phase")
    assert phase != "Failed", cluster.kubectl("-n", namespace, "logs", name)
    return bool(phase == "Succeeded")
