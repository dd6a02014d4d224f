"""The admin door against a real API server and real process sets: the reconciler creates
each database's token Secret and NetworkPolicy (accepted by the API server), and the
operator, holding the admin token (tests/operator/conftest.py), promotes a standby that
asks for it. Pods never run here (no kubelet): process sets stand for them, as in
tests/operator/test_leadership.py."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.operator.conftest import ADMIN_TOKEN, OPERATOR_LABELS, OPERATOR_NAMESPACE
from tests.operator.helpers import get_or_none, weaseldb
from tests.operator.test_leadership import leader_of, leads_ready, pod_manifest, set_ready
from tests.support.cluster import ProcessSet, free_port_block, short_run_dir
from tests.support.kube import ControlPlane
from tests.support.minio import MinioServer
from tests.support.waiting import wait_for

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


def standby_role(persister: str) -> bool:
    try:
        return bool(httpx.get(f"{persister}/readyz").json().get("role") == "standby")
    except httpx.HTTPError:
        return False  # not listening yet


class TokenPods:
    """Process sets with the admin token file, standing for pods."""

    def __init__(self, plane: ControlPlane, namespace: str, store: str, tmp: Path) -> None:
        self.plane, self.namespace, self.store = plane, namespace, store
        self.token_file = tmp / "token"
        self.token_file.write_text(ADMIN_TOKEN + "\n")
        self.sets: list[ProcessSet] = []

    def start(
        self, name: str, *, standby: bool = False, token_file: Path | None = None
    ) -> ProcessSet:
        port, run_dir = free_port_block(), short_run_dir()
        config = run_dir / "pod.toml"
        claim = '[persister]\nclaim_on_start = "unclaimed_or_own"\n' if standby else ""
        token = token_file or self.token_file
        config.write_text(f'pod_name = "{name}"\nadmin_token_file = "{token}"\n{claim}')
        self.plane.apply(pod_manifest(name, self.namespace, port))
        process_set = ProcessSet(self.store, port, run_dir, ["--config", str(config)])
        self.sets.append(process_set)
        if standby:
            with pytest.raises(TimeoutError):
                process_set.start(timeout=6)  # a standby is never ready until promoted
        else:
            process_set.start()
        set_ready(self.plane, self.namespace, name, not standby)
        return process_set

    def stop(self) -> None:
        for process_set in self.sets:
            if process_set.process is not None and process_set.process.poll() is None:
                process_set.kill()


@pytest.fixture
def token_pods(
    control_plane: ControlPlane, minio: MinioServer, namespace: str, tmp_path: Path
) -> Iterator[TokenPods]:
    bucket = minio.new_bucket()
    spec = {
        "replicas": 2,
        "leaderFailoverSeconds": 5,
        "storage": {"bucket": bucket, "prefix": "db", "endpoint": minio.endpoint},
    }
    control_plane.apply(weaseldb("ledger", namespace, spec))
    started = TokenPods(control_plane, namespace, minio.store_url(bucket, "db"), tmp_path)
    yield started
    started.stop()


def test_the_operator_promotes_a_standby_with_the_admin_token(
    control_plane: ControlPlane, operator: Path, namespace: str, token_pods: TokenPods
) -> None:
    leader = token_pods.start("ledger-0")
    leads_ready(control_plane, namespace, "ledger-0")
    standby = token_pods.start("ledger-1", standby=True)
    persister = f"http://127.0.0.1:{standby.port + 3}"
    wait_for(lambda: standby_role(persister), what="ledger-1 answers as a standby")
    assert httpx.post(f"{persister}/promote").status_code == 401  # not without the token

    leader.kill()
    set_ready(control_plane, namespace, "ledger-0", False)
    control_plane.wait_for(
        lambda: leader_of(control_plane, namespace).get("pod") == "ledger-1",
        timeout=60,
        what="the operator promoted ledger-1 (failover after 5 s)",
    )
    assert leader_of(control_plane, namespace)["term"] == 2
    standby.wait_ready(60)
    assert f"{namespace}/ledger: /promote answered 200" in operator.read_text()


def test_a_standby_with_another_token_is_not_promoted_and_the_pod_says_why(
    control_plane: ControlPlane,
    operator: Path,
    namespace: str,
    token_pods: TokenPods,
    tmp_path: Path,
) -> None:
    leader = token_pods.start("ledger-0")
    leads_ready(control_plane, namespace, "ledger-0")
    other = tmp_path / "other-token"
    other.write_text("not-the-operators-token")
    standby = token_pods.start("ledger-1", standby=True, token_file=other)
    persister = f"http://127.0.0.1:{standby.port + 3}"
    wait_for(lambda: standby_role(persister), what="ledger-1 answers as a standby")

    leader.kill()
    set_ready(control_plane, namespace, "ledger-0", False)

    def refused() -> bool:
        events = control_plane.get("events", "-n", namespace)["items"]
        return any(
            e["reason"] == "AdminTokenRefused" and e["involvedObject"]["name"] == "ledger-1"
            for e in events
        )

    control_plane.wait_for(refused, timeout=60, what="AdminTokenRefused on ledger-1")
    assert httpx.get(f"{persister}/readyz").json()["role"] == "standby"  # not promoted
