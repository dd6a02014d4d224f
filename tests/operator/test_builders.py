"""Pure builders, spec reading and the leadership decision: no cluster, no store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from weaseldb_operator import conditions
from weaseldb_operator.conditions import Reason
from weaseldb_operator.resources import (
    CONFIG_HASH,
    ROLE_LABEL,
    children_for,
    configmap_for,
    gateway_service_for,
    headless_service_for,
    pdb_for,
    statefulset_for,
)
from weaseldb_operator.spec import SpecError, database_from

from weaseldb.core import config as config_module

REPO = Path(__file__).resolve().parents[2]


def body(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "storage": {"bucket": "b1", "prefix": "db", "endpoint": "http://s3:9000"}
    }
    return {
        "apiVersion": "weaseldb.io/v1alpha1",
        "kind": "WeaselDB",
        "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1", "generation": 3},
        "spec": {**base, **spec},
    }


def test_configmap_holds_a_config_the_services_accept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = database_from(body(pipeline={"maxInFlightRequests": 7}, gateway={"workers": 2}))
    path = tmp_path / "config.json"
    path.write_text(configmap_for(db)["data"]["config.json"])
    monkeypatch.setenv("WEASELDB_POD_NAME", "orders-0")  # what the downward API sets
    loaded = config_module.load(path)
    assert loaded.persister.claim_on_start == "unclaimed_or_own"
    assert loaded.store == "s3://b1/db?endpoint=http%3A%2F%2Fs3%3A9000&region=us-east-1"
    assert (loaded.persister.max_in_flight_requests, loaded.gateway.workers) == (7, 2)
    assert (loaded.pod_name, loaded.run_dir, loaded.host) == ("orders-0", "/run/weasel", "0.0.0.0")


@pytest.mark.parametrize(("ring", "run_volume"), [("unix", {}), ("shm", {"medium": "Memory"})])
def test_the_ring_reaches_every_container_and_shm_shares_memory(
    ring: str, run_volume: dict[str, str]
) -> None:
    """spec.pipeline.ring is the set's `ring` (one ConfigMap for every container, so they
    cannot disagree); with shm the run dir they share is memory-backed."""
    db = database_from(body(pipeline={"ring": ring}))
    assert json.loads(configmap_for(db)["data"]["config.json"])["ring"] == ring
    pod = statefulset_for(db)["spec"]["template"]["spec"]
    (run,) = [v for v in pod["volumes"] if v["name"] == "run"]
    assert run["emptyDir"] == run_volume
    mounts = [m["mountPath"] for c in pod["containers"] for m in c["volumeMounts"]]
    assert mounts.count("/run/weasel") == len(pod["containers"])
    arch = pod.get("nodeSelector", {}).get("kubernetes.io/arch")
    assert arch == ("amd64" if ring == "shm" else None)  # shm runs on x86-64 only


def test_shm_keeps_the_users_node_selector_and_adds_the_architecture() -> None:
    db = database_from(body(pipeline={"ring": "shm"}, nodeSelector={"disk": "ssd"}))
    pod = statefulset_for(db)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"disk": "ssd", "kubernetes.io/arch": "amd64"}


def test_the_ring_defaults_to_unix_sockets() -> None:
    assert database_from(body()).config.ring == "unix"


def test_a_stopping_gateway_lingers_past_its_endpoint_going_not_serving() -> None:
    """The rendered gateway.stop_linger_s outlasts the readiness probes that take the pod
    out of the Service (plus a second for kube-proxy), and the grace period covers it."""
    db = database_from(body())
    pod = statefulset_for(db)["spec"]["template"]["spec"]
    (gateway,) = [c for c in pod["containers"] if c["name"] == "gateway"]
    readiness = gateway["readinessProbe"]
    not_serving_after = readiness["periodSeconds"] * readiness["failureThreshold"]
    assert db.config.gateway.stop_linger_s >= not_serving_after + 1
    grace = db.config.drain_timeout_s + db.config.gateway.stop_linger_s
    assert pod["terminationGracePeriodSeconds"] > grace


def test_the_client_service_routes_by_the_leader_label_alone() -> None:
    service = gateway_service_for(database_from(body()))["spec"]
    assert service["selector"][ROLE_LABEL] == "leader"
    assert service["publishNotReadyAddresses"] is True


def test_statefulset_runs_the_ring_in_one_pod() -> None:
    db = database_from(
        body(
            replicas=2,
            resources={
                "default": {"limits": {"memory": "1Gi"}},
                "persister": {"limits": {"memory": "2Gi"}},
            },
        )
    )
    sts = statefulset_for(db)
    # The operator rolls the pods itself (rollout.py): standbys are never Ready.
    assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}
    pod = sts["spec"]["template"]["spec"]
    names = [c["name"] for c in pod["containers"]]
    assert names == ["gateway", "sequencer", "resolver", "persister"]
    for container, port in zip(pod["containers"], (8080, 8081, 8082, 8083), strict=True):
        # The gateway's port is the client port: TLS by default (spec.tls); stages plain.
        https = {"scheme": "HTTPS"} if port == 8080 else {}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port} | https
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        # Liveness waits for the process to answer at all (up to 3 minutes).
        startup = container["startupProbe"]
        assert startup["httpGet"] == {"path": "/healthz", "port": port} | https
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 180
        assert {"name": "run", "mountPath": "/run/weasel"} in container["volumeMounts"]
    memory = {c["name"]: c["resources"]["limits"]["memory"] for c in pod["containers"]}
    assert memory == {"gateway": "1Gi", "sequencer": "1Gi", "resolver": "1Gi", "persister": "2Gi"}
    assert {"name": "run", "emptyDir": {}} in pod["volumes"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert sts["spec"]["replicas"] == 2


def test_extra_gateway_workers_are_extra_containers() -> None:
    pod = statefulset_for(database_from(body(gateway={"workers": 3})))["spec"]["template"]["spec"]
    gateways = [c for c in pod["containers"] if c["name"].startswith("gateway")]
    assert [c["command"][-1] for c in gateways] == ["0", "1", "2"]


def test_config_change_changes_the_pod_template() -> None:
    before = statefulset_for(database_from(body()))["spec"]["template"]["metadata"]
    after = statefulset_for(database_from(body(pipeline={"maxInFlightRequests": 9})))
    assert (
        after["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH]
        != before["annotations"][CONFIG_HASH]
    )


def test_services_select_the_leader_and_every_pod() -> None:
    db = database_from(body())
    assert gateway_service_for(db)["spec"]["selector"][ROLE_LABEL] == "leader"
    headless = headless_service_for(db)["spec"]
    assert headless["clusterIP"] == "None" and ROLE_LABEL not in headless["selector"]


@pytest.mark.parametrize(
    ("replicas", "has_pdb"),
    [pytest.param(1, False, id="single"), pytest.param(3, True, id="three")],
)
def test_pdb_only_with_standbys(replicas: int, has_pdb: bool) -> None:
    assert (pdb_for(database_from(body(replicas=replicas))) is not None) is has_pdb


def test_every_child_is_owned_by_the_database() -> None:
    for child in children_for(database_from(body(replicas=2))):
        (owner,) = child["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("WeaselDB", "u-1", True)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param(
            {"pipeline": {"maxInFlightRequests": 5000}},
            "max_in_flight_requests",
            id="in-flight-range",
        ),
        pytest.param({"storage": {"bucket": "b1"}}, "spec.storage.prefix", id="no-prefix"),
    ],
)
def test_unusable_specs_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError, match=field):
        database_from(body(**spec))


def test_conditions_table_in_docs_matches_the_module() -> None:
    docs = (REPO / "docs/operator.md").read_text()
    assert conditions.markdown_table() in docs, "regenerate with conditions.markdown_table()"


def test_only_declared_conditions_can_be_built() -> None:
    with pytest.raises(ValueError, match="undeclared"):
        conditions.Condition(conditions.Type.READY, "True", Reason.NO_CLAIM, "x")


def test_examples_are_valid_yaml_objects() -> None:
    import yaml

    for path in sorted((REPO / "examples").glob("weaseldb-*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        for doc in docs:
            if doc["kind"] == "WeaselDB":
                database_from({**doc, "metadata": {**doc["metadata"], "namespace": "x"}})
    assert json.dumps(docs)
