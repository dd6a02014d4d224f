"""The admin door against a real API server and real process sets: the reconciler creates
each database's token Secret and NetworkPolicy (accepted by the API server), and the
operator, holding the admin token (tests/operator/conftest.py), promotes a standby that
asks for it. Pods never run here (no kubelet): process sets stand for them
(tests/operator/pods.py)."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest

from tests.operator.conftest import ADMIN_TOKEN, OPERATOR_LABELS, OPERATOR_NAMESPACE
from tests.operator.helpers import get_or_none, weaseldb
from tests.operator.pods import Pods, leader_of, leads_ready
from tests.support.cluster import metric
from tests.support.kube import ControlPlane
from tests.support.minio import MinioServer
from weaseldb.core.types import Stage

pytestmark = pytest.mark.slow


def test_the_reconciler_creates_the_token_secret_and_the_network_policy(
    control_plane: ControlPlane, operator: Path, minio: MinioServer, namespace: str
) -> None:
    spec = {"replicas": 2, "storage": {"bucket": minio.new_bucket(), "prefix": "db"}}
    control_plane.apply(weaseldb("shop", namespace, spec))
    policy = control_plane.wait_for(
        lambda: get_or_none(control_plane, "networkpolicy", "shop", "-n", namespace),
        what="NetworkPolicy",
    )
    clients, admin = policy["spec"]["ingress"]
    assert clients == {"ports": [{"protocol": "TCP", "port": 8080}]}
    assert admin["ports"] == [{"protocol": "TCP", "port": 8083}]
    assert admin["from"][0]["podSelector"]["matchLabels"] == OPERATOR_LABELS
    assert admin["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": OPERATOR_NAMESPACE
    }
    listed = control_plane.kubectl("get", "networkpolicy", "-n", namespace).stdout
    assert "shop" in listed and "app.kubernetes.io/instance=shop" in listed

    secret = get_or_none(control_plane, "secret", "shop-admin-token", "-n", namespace)
    assert secret is not None
    assert base64.b64decode(secret["data"]["token"]).decode() == ADMIN_TOKEN
    owner = control_plane.get("wdb", "shop", "-n", namespace)["metadata"]["uid"]
    for obj in (policy, secret):
        assert obj["metadata"]["ownerReferences"][0]["uid"] == owner
    sts = control_plane.get("statefulset", "shop", "-n", namespace)
    (persister,) = [
        c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "persister"
    ]
    assert {"name": "WEASELDB_ADMIN_TOKEN_FILE", "value": "/etc/weaseldb-admin/token"} in (
        persister["env"]
    )


def test_the_operator_promotes_a_standby_with_the_admin_token(
    control_plane: ControlPlane, operator: Path, operator_metrics: str, namespace: str, pods: Pods
) -> None:
    leader = pods.start_pod("ledger-0")
    leads_ready(control_plane, namespace, "ledger-0")
    standby = pods.start_pod("ledger-1")
    persister = standby.stage_url(Stage.PERSISTER)
    standby.wait_for_standby(timeout=30)
    assert httpx.post(f"{persister}/promote").status_code == 401  # not without the token

    leader.kill()
    control_plane.wait_for(
        lambda: leader_of(control_plane, namespace).get("pod") == "ledger-1",
        timeout=60,
        what="the operator promoted ledger-1 (failover after 5 s)",
    )
    assert leader_of(control_plane, namespace)["term"] == 2
    standby.wait_ready(60)
    assert f"{namespace}/ledger: /promote answered 200" in operator.read_text()
    labels = f'{{database="ledger",namespace="{namespace}"}}'  # as exposed: sorted
    assert metric(operator_metrics, "weaseldb_operator_failovers_total", labels) == 1


def test_a_standby_with_another_token_is_not_promoted_and_the_pod_says_why(
    control_plane: ControlPlane,
    operator: Path,
    namespace: str,
    pods: Pods,
    tmp_path: Path,
) -> None:
    leader = pods.start_pod("ledger-0")
    leads_ready(control_plane, namespace, "ledger-0")
    other = tmp_path / "other-token"
    other.write_text("not-the-operators-token")
    standby = pods.start_pod("ledger-1", token_file=other)
    persister = standby.stage_url(Stage.PERSISTER)
    standby.wait_for_standby(timeout=30)

    leader.kill()

    def refused() -> bool:
        events = control_plane.get("events", "-n", namespace)["items"]
        return any(
            e["reason"] == "AdminTokenRefused" and e["involvedObject"]["name"] == "ledger-1"
            for e in events
        )

    control_plane.wait_for(refused, timeout=60, what="AdminTokenRefused on ledger-1")
    assert httpx.get(f"{persister}/readyz").json()["role"] == "standby"  # not promoted
