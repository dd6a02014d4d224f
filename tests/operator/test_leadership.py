"""Leader status from real term claims: MinIO, real `weaseldb up` process sets whose
`pod_name` names Pod objects in the API server (tests/operator/pods.py), and the operator
in between."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.operator.helpers import condition
from tests.operator.pods import Pods, failover_due, leader_of, leads_ready, roles, set_ready
from tests.support.kube import ControlPlane

pytestmark = pytest.mark.slow


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
