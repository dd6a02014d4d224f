"""Pods without a kubelet: each Pod object in the API server stands for one real `weaseldb
up` process set whose `pod_name` names it, started by the test. `Kubelet` plays the
kubelet's part: it reports the pod's IP (127.0.0.1, each set on its own ports) and keeps
the Ready condition equal to what the set's gateway `/readyz` answers."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from tests.operator.helpers import condition
from tests.support.cluster import ProcessSet, free_port_block, short_run_dir
from tests.support.kube import ControlPlane
from tests.support.minio import MinioServer
from tests.support.waiting import http_ok

SELECTOR = {"app.kubernetes.io/name": "weaseldb", "app.kubernetes.io/instance": "ledger"}
STAGES = ("gateway", "sequencer", "resolver", "persister")


def pod_manifest(name: str, namespace: str, port: int, node: str | None = None) -> dict[str, Any]:
    ports = [{"name": stage, "containerPort": port + i} for i, stage in enumerate(STAGES)]
    spec: dict[str, Any] = {
        "containers": [{"name": "ring", "image": "weaseldb:test", "ports": ports}]
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": SELECTOR},
        "spec": spec,
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
        "patch", "pod", name, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps(status),
    )  # fmt: skip


def node_manifest(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


class Kubelet(threading.Thread):
    """Keeps each started pod's Ready condition equal to its gateway's /readyz, twice a
    second, as the readiness probe does on a node."""

    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        super().__init__(daemon=True, name="kubelet")
        self.plane, self.namespace = plane, namespace
        self.sets: dict[str, ProcessSet] = {}
        self.reported: dict[str, bool] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.5):
            for name, process_set in list(self.sets.items()):
                ready = http_ok(f"{process_set.url}/readyz")
                if self.reported.get(name) != ready:
                    try:
                        set_ready(self.plane, self.namespace, name, ready)
                    except RuntimeError:
                        continue  # the pod is gone
                    self.reported[name] = ready


class Pods:
    """Process sets standing for pods; stopped at the end of the test.

    `start` runs a set the way `weaseldb up` does (it claims the next term whatever holds
    it) and reports it Ready once. `start_pod` runs it the way the operator's pods do
    (`claim_on_start = unclaimed_or_own`: a second pod is a standby until promoted) and
    leaves readiness to the `Kubelet`. Every set's persister asks for the admin token in
    `token_file` (the operator's, tests/operator/conftest.py) unless given another."""

    def __init__(
        self,
        plane: ControlPlane,
        minio: MinioServer,
        namespace: str,
        store: str,
        token_file: Path,
        lease_timeout_s: float = 10.0,
    ):
        self.plane, self.minio, self.namespace, self.store = plane, minio, namespace, store
        self.token_file = token_file
        # What the operator renders for the database (spec.lease_timeout_for): a standby
        # claims on its own only after the operator had its chance.
        self.lease_timeout_s = lease_timeout_s
        self.sets: dict[str, ProcessSet] = {}
        self.kubelet = Kubelet(plane, namespace)

    def start(self, name: str) -> ProcessSet:
        process_set = self._launch(name, "always", None, self.token_file).start()
        set_ready(self.plane, self.namespace, name, True)
        return process_set

    def start_pod(
        self, name: str, node: str | None = None, token_file: Path | None = None
    ) -> ProcessSet:
        claim, token = "unclaimed_or_own", token_file or self.token_file
        process_set = self._launch(name, claim, node, token).launch()
        self.kubelet.sets[name] = process_set
        if not self.kubelet.is_alive():
            self.kubelet.start()
        return process_set

    def restart(self, name: str) -> ProcessSet:
        """Start the set again after it exited (a deposed leader's persister exits; on
        Kubernetes its container restarts and comes back as a standby)."""
        process_set = self.sets[name]
        assert process_set.process is not None
        process_set.process.wait(30)
        return process_set.launch()

    def _launch(self, name: str, claim: str, node: str | None, token: Path) -> ProcessSet:
        port = free_port_block()
        run_dir = short_run_dir()
        config = run_dir / "pod.toml"
        config.write_text(
            f'pod_name = "{name}"\nadmin_token_file = "{token}"\n\n'
            f'[persister]\nclaim_on_start = "{claim}"\n'
            f"lease_timeout_s = {self.lease_timeout_s}\n"
        )
        self.plane.apply(pod_manifest(name, self.namespace, port, node))
        process_set = ProcessSet(self.store, port, run_dir, ["--config", str(config)])
        self.sets[name] = process_set
        return process_set

    def stop(self) -> None:
        self.kubelet.stopping.set()
        for process_set in self.sets.values():
            if process_set.process is not None and process_set.process.poll() is None:
                process_set.kill()


def leader_of(plane: ControlPlane, namespace: str) -> dict[str, Any]:
    leader: dict[str, Any] = (
        plane.get("wdb", "ledger", "-n", namespace)["status"].get("leader") or {}
    )
    return leader


def leads_ready(
    plane: ControlPlane, namespace: str, pod: str, timeout: float = 60
) -> dict[str, Any]:
    """Wait until `pod` holds the term and the observer has seen it Ready; the database.
    A pod is not Ready from its creation until its process set answers, which under load
    can outlast leaderFailoverSeconds: a failover test that starts before this would read
    a status written about the start, not about the fault it makes."""

    def ready() -> dict[str, Any] | None:
        body: dict[str, Any] = plane.get("wdb", "ledger", "-n", namespace)
        leader = body.get("status", {}).get("leader") or {}
        serving = condition(body, "LeaderElected").get("reason") == "LeaderReady"
        return body if leader.get("pod") == pod and serving else None

    return plane.wait_for(ready, timeout=timeout, what=f"{pod} leads and is Ready")


def standbys_answer(plane: ControlPlane, namespace: str, count: int) -> None:
    """Wait until the observer counts `count` live standbys (Degraded's message)."""

    def counted() -> bool:
        body = plane.get("wdb", "ledger", "-n", namespace)
        return f"{count}/" in condition(body, "Degraded").get("message", "").split("; ")[-1]

    plane.wait_for(counted, timeout=60, what=f"{count} standby answers")


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
