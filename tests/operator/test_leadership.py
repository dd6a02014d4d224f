"""Leader status from real term claims: MinIO, real `weaseldb up` process sets whose
`pod_name` names Pod objects in the API server, and the operator in between.

Pods never run without a kubelet, so each Pod object stands for one process set: the
test sets its status (podIP 127.0.0.1, Ready) through the status subresource and gives it
the set's ports, as a kubelet would report a running pod."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.operator.helpers import condition, weaseldb
from tests.support.cluster import ProcessSet, free_port_block, short_run_dir
from tests.support.kube import ControlPlane
from tests.support.minio import MinioServer

pytestmark = pytest.mark.slow
SELECTOR = {"app.kubernetes.io/name": "weaseldb", "app.kubernetes.io/instance": "ledger"}


def pod_manifest(name: str, namespace: str, port: int) -> dict[str, Any]:
    ports = [
        {"name": stage, "containerPort": port + i}
        for i, stage in enumerate(("gateway", "sequencer", "resolver", "persister"))
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": SELECTOR},
        "spec": {"containers": [{"name": "ring", "image": "weaseldb:test", "ports": ports}]},
    }


def set_ready(plane: ControlPlane, namespace: str, name: str, ready: bool) -> None:
    status = {
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        }
    }
    plane.kubectl(
        "patch",
        "pod",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )


class Pods:
    """Process sets standing for pods; stopped at the end of the test."""

    def __init__(self, plane: ControlPlane, minio: MinioServer, namespace: str, store: str):
        self.plane, self.minio, self.namespace, self.store = plane, minio, namespace, store
        self.sets: list[ProcessSet] = []

    def start(self, name: str) -> ProcessSet:
        port = free_port_block()
        run_dir = short_run_dir()
        config = run_dir / "pod.toml"
        config.write_text(f'pod_name = "{name}"\n')
        self.plane.apply(pod_manifest(name, self.namespace, port))
        process_set = ProcessSet(self.store, port, run_dir, ["--config", str(config)]).start()
        self.sets.append(process_set)
        set_ready(self.plane, self.namespace, name, True)
        return process_set

    def stop(self) -> None:
        for process_set in self.sets:
            process_set.kill()


@pytest.fixture
def pods(control_plane: ControlPlane, minio: MinioServer, namespace: str) -> Iterator[Pods]:
    bucket = minio.new_bucket()
    spec = {
        "replicas": 2,
        "leaderFailoverSeconds": 5,
        "leaderNotReadySeconds": 5,
        "storage": {"bucket": bucket, "prefix": "db", "endpoint": minio.endpoint},
    }
    control_plane.apply(weaseldb("ledger", namespace, spec))
    started = Pods(control_plane, minio, namespace, minio.store_url(bucket, "db"))
    yield started
    started.stop()


def leader_of(plane: ControlPlane, namespace: str) -> dict[str, Any]:
    leader: dict[str, Any] = (
        plane.get("wdb", "ledger", "-n", namespace)["status"].get("leader") or {}
    )
    return leader


def leads_ready(plane: ControlPlane, namespace: str, pod: str) -> None:
    """Wait until `pod` holds the term and the observer has seen it Ready. A pod is not
    Ready from its creation until its process set answers, which under load can outlast
    leaderFailoverSeconds: a failover test that starts before this would read a status
    written about the start, not about the fault it makes."""

    def ready() -> bool:
        body = plane.get("wdb", "ledger", "-n", namespace)
        leader = body.get("status", {}).get("leader") or {}
        return (
            leader.get("pod") == pod
            and condition(body, "LeaderElected").get("reason") == "LeaderReady"
        )

    plane.wait_for(ready, what=f"{pod} leads and is Ready")


def roles(plane: ControlPlane, namespace: str) -> dict[str, str]:
    items = plane.get("pods", "-n", namespace)["items"]
    return {
        p["metadata"]["name"]: p["metadata"]["labels"].get("weaseldb.io/role", "") for p in items
    }


def failover_due(plane: ControlPlane, namespace: str, what: str) -> dict[str, Any]:
    """The database once the observer decided a failover is due and found no standby to
    ask (these tests start one pod, so NoStandby is what a due failover looks like)."""

    def due() -> dict[str, Any] | None:
        body: dict[str, Any] = plane.get("wdb", "ledger", "-n", namespace)
        return body if condition(body, "LeaderElected").get("reason") == "NoStandby" else None

    return plane.wait_for(due, timeout=30, what=what)


def test_status_and_labels_follow_the_claims(
    control_plane: ControlPlane, operator: Path, namespace: str, pods: Pods
) -> None:
    pods.start("ledger-0")
    first = control_plane.wait_for(
        lambda: (
            (lead := leader_of(control_plane, namespace)) and lead.get("pod") == "ledger-0" and lead
        ),
        timeout=30,
        what="ledger-0 leads",
    )
    assert first["term"] == 1 and first["leaderId"].startswith("ledger-0-")
    control_plane.wait_for(
        lambda: roles(control_plane, namespace) == {"ledger-0": "leader"}, what="label"
    )
    body = control_plane.wait_for(
        lambda: (
            (b := control_plane.get("wdb", "ledger", "-n", namespace))
            and condition(b, "Ready").get("status") == "True"
            and b
        ),
        what="Ready",
    )
    assert condition(body, "LeaderElected")["reason"] == "LeaderReady"
    assert body["status"]["committedVersion"] == 0
    assert "ledger-0" in control_plane.kubectl("get", "wdb", "ledger", "-n", namespace).stdout

    pods.start("ledger-1")  # a new set claims the next term: it deposes ledger-0
    second = control_plane.wait_for(
        lambda: (
            (lead := leader_of(control_plane, namespace)) and lead.get("pod") == "ledger-1" and lead
        ),
        timeout=30,
        what="ledger-1 leads",
    )
    assert second["term"] == 2
    control_plane.wait_for(
        lambda: roles(control_plane, namespace) == {"ledger-0": "standby", "ledger-1": "leader"},
        what="labels flipped",
    )


def test_leader_not_ready_beyond_the_timeout_starts_failover(
    control_plane: ControlPlane, operator: Path, namespace: str, pods: Pods
) -> None:
    pods.start("ledger-0")
    leads_ready(control_plane, namespace, "ledger-0")
    set_ready(control_plane, namespace, "ledger-0", False)
    body = failover_due(control_plane, namespace, "failover due, no standby")
    assert (
        "leader pod ledger-0 (term 1) is not Ready" in condition(body, "LeaderElected")["message"]
    )
    assert condition(body, "Ready")["reason"] == "NoLeader"
    assert condition(body, "Degraded")["status"] == "True"


def test_a_leader_pod_stuck_terminating_fails_over(
    control_plane: ControlPlane, operator: Path, namespace: str, pods: Pods
) -> None:
    """A pod being deleted will not serve again, even while it still reports Ready (its
    node is gone, or a finalizer holds it): the failover clock runs from the first
    observation of the deletion instead of starting over at every pass."""
    pods.start("ledger-0")
    leads_ready(control_plane, namespace, "ledger-0")
    held = json.dumps({"metadata": {"finalizers": ["weaseldb.io/test-hold"]}})
    control_plane.kubectl("patch", "pod", "ledger-0", "-n", namespace, "--type=merge", "-p", held)
    try:
        control_plane.kubectl("delete", "pod", "ledger-0", "-n", namespace, "--wait=false")
        body = failover_due(
            control_plane, namespace, "failover due for the terminating leader (5 s), no standby"
        )
        message = condition(body, "LeaderElected")["message"]
        assert "leader pod ledger-0 (term 1) is being deleted" in message
    finally:
        released = json.dumps({"metadata": {"finalizers": None}})
        control_plane.kubectl(
            "patch", "pod", "ledger-0", "-n", namespace, "--type=merge", "-p", released
        )
