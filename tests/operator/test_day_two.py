"""Day two against a real API server, MinIO and real process sets standing for pods
(tests/operator/pods.py): the failure detector, switchover for a cordoned node, for
spec.targetLeader and for a scale-down, and spec.paused."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.operator.helpers import condition
from tests.operator.pods import Pods, leader_of, leads_ready, node_manifest, standbys_answer
from tests.support.kube import ControlPlane

pytestmark = pytest.mark.slow


def patch_spec(plane: ControlPlane, namespace: str, spec: dict[str, Any]) -> None:
    plane.kubectl(
        "patch", "wdb", "ledger", "-n", namespace, "--type=merge", "-p", json.dumps({"spec": spec})
    )


def events(plane: ControlPlane, namespace: str) -> list[tuple[str, str]]:
    items = plane.get("events", "-n", namespace)["items"]
    return [(e["reason"], e["message"]) for e in items if e["involvedObject"]["kind"] == "WeaselDB"]


def switchover_cli(
    plane: ControlPlane, namespace: str, *args: str
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "weaseldb_cli", "switchover", "ledger", "-n", namespace]
    return subprocess.run(
        [*command, *args], env=plane.env, capture_output=True, text=True, timeout=120
    )


def leader_with_standby(
    plane: ControlPlane, namespace: str, pods: Pods, nodes: tuple[str, str] | None = None
) -> None:
    pods.start_pod("ledger-0", nodes[0] if nodes else None)
    leads_ready(plane, namespace, "ledger-0")
    pods.start_pod("ledger-1", nodes[1] if nodes else None)
    standbys_answer(plane, namespace, 1)


def test_a_killed_leader_fails_over_to_its_standby_in_seconds(
    control_plane: ControlPlane, operator: Path, namespace: str, pods: Pods
) -> None:
    """SIGKILL of the leader's whole process set: its pod object stays, and nobody tells
    the API server it is not Ready for a while (the kubelet here reports twice a second;
    a node that died reports nothing) - the operator's own probe of the persister is the
    detector, with the default leaderFailoverSeconds."""
    patch_spec(control_plane, namespace, {"leaderFailoverSeconds": None})
    leader_with_standby(control_plane, namespace, pods)
    killed_at = time.monotonic()
    pods.sets["ledger-0"].kill()
    body = leads_ready(control_plane, namespace, "ledger-1", timeout=60)
    print(f"killed leader -> new leader Ready in status: {time.monotonic() - killed_at:.1f} s")
    assert body["status"]["leader"]["term"] == 2
    assert any(reason == "FailingOver" for reason, _ in events(control_plane, namespace))


def test_switchover_for_a_cordoned_node_a_target_and_a_scale_down(
    control_plane: ControlPlane, operator: Path, namespace: str, pods: Pods
) -> None:
    nodes = (f"{namespace}-a", f"{namespace}-b")
    for node in nodes:
        control_plane.apply(node_manifest(node))
    try:
        leader_with_standby(control_plane, namespace, pods, nodes)

        # kubectl drain starts with a cordon; the PDB holds the leader until it moved.
        control_plane.kubectl("cordon", nodes[0])
        assert leads_ready(control_plane, namespace, "ledger-1")["status"]["leader"]["term"] == 2
        moved = [m for r, m in events(control_plane, namespace) if r == "SwitchingOver"]
        assert any("cordoned" in m for m in moved), moved
        control_plane.kubectl("uncordon", nodes[0])
        pods.restart("ledger-0")  # deposed: its persister exited; back as a standby

        patch_spec(control_plane, namespace, {"targetLeader": "ledger-0"})
        assert leads_ready(control_plane, namespace, "ledger-0")["status"]["leader"]["term"] == 3
        pods.restart("ledger-1")
        standbys_answer(control_plane, namespace, 1)

        # The CLI verb: no --to, so the first live standby the operator reported.
        moved_to = switchover_cli(control_plane, namespace)
        assert moved_to.returncode == 0, moved_to.stderr
        assert "ledger-1 leads" in moved_to.stdout
        leads_ready(control_plane, namespace, "ledger-1")
        pods.restart("ledger-0")
        standbys_answer(control_plane, namespace, 1)

        # Scaling to one replica removes ordinal 1, which leads: switch over first.
        patch_spec(control_plane, namespace, {"replicas": 1, "targetLeader": None})
        assert leads_ready(control_plane, namespace, "ledger-0")["status"]["leader"]["term"] == 5
        control_plane.wait_for(
            lambda: control_plane.get("sts", "ledger", "-n", namespace)["spec"]["replicas"] == 1,
            what="scaled to 1",
        )
    finally:
        for node in nodes:
            control_plane.kubectl("delete", "node", node, "--wait=false", check=False)


def test_paused_holds_failover_until_resumed(
    control_plane: ControlPlane, operator: Path, namespace: str, pods: Pods
) -> None:
    leader_with_standby(control_plane, namespace, pods)
    patch_spec(control_plane, namespace, {"paused": True})
    control_plane.wait_for(
        lambda: (
            condition(control_plane.get("wdb", "ledger", "-n", namespace), "Paused").get("status")
            == "True"
        ),
        what="Paused",
    )
    pods.sets["ledger-0"].kill()

    def held() -> dict[str, Any] | None:
        body: dict[str, Any] = control_plane.get("wdb", "ledger", "-n", namespace)
        message = condition(body, "LeaderElected").get("message", "")
        return body if "spec.paused: no failover" in message else None

    control_plane.wait_for(held, timeout=30, what="a due failover held by spec.paused")
    # Past the standby's own lease timeout too: the store's failover-hold stops it.
    time.sleep(pods.lease_timeout_s)
    assert leader_of(control_plane, namespace)["pod"] == "ledger-0"
    assert "failover is held (paused)" in pods.sets["ledger-1"].log()
    patch_spec(control_plane, namespace, {"paused": False})
    assert leads_ready(control_plane, namespace, "ledger-1")["status"]["leader"]["term"] == 2


def test_switchover_refuses_a_pod_that_is_not_the_databases(
    control_plane: ControlPlane, operator: Path, namespace: str, pods: Pods
) -> None:
    refused = switchover_cli(control_plane, namespace, "--to", "ledger-7")
    assert refused.returncode == 1
    assert "ledger-7 is not one of its pods (ledger-0, ledger-1)" in refused.stderr
    spec = control_plane.get("wdb", "ledger", "-n", namespace)["spec"]
    assert "targetLeader" not in spec  # nothing changed
