"""`spec.readers`, pure: the reader Deployment, its Service and NetworkPolicy, what goes
when replicas drops to 0, and which retention policies the operator removes. No cluster."""

from __future__ import annotations

from typing import Any

import pytest
from weaseldb_operator.door import Operator, secured
from weaseldb_operator.readers import (
    READER_PORT,
    STATE_DIR,
    policy_owner,
    reader_children,
    reader_deployment_for,
    reader_leftovers,
    reader_selector,
    readers_service_for,
    stale_policies,
)
from weaseldb_operator.resources import children_for, selector_labels
from weaseldb_operator.spec import SpecError, database_from

from tests.operator.test_builders import body


def readers(**fields: Any) -> dict[str, Any]:
    return body(readers={"replicas": 2, **fields}, storage={
        "bucket": "b1", "prefix": "db", "endpoint": "http://s3:9000",
        "credentialsSecret": "s3-keys",
    })  # fmt: skip


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def test_no_readers_by_default_and_what_zero_leaves_to_delete() -> None:
    db = database_from(body())
    assert (db.readers.replicas, db.readers.horizon_seconds) == (0, 300)
    assert reader_children(db) == []
    assert reader_leftovers(db) == [
        ("apps/v1", "Deployment", "orders-reader"),
        ("v1", "Service", "orders-readers"),
        ("networking.k8s.io/v1", "NetworkPolicy", "orders-readers"),
        ("policy/v1", "PodDisruptionBudget", "orders-readers"),
    ]
    assert reader_leftovers(database_from(readers())) == []


def test_deployment_runs_the_reader_command_against_the_client_service() -> None:
    db = database_from(readers(horizonSeconds=60))
    deployment = reader_deployment_for(db)
    assert deployment is not None
    assert deployment["metadata"]["name"] == "orders-reader"
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    (container,) = _pod(deployment)["containers"]
    assert container["command"] == [
        "weaseldb", "reader",
        "--config", "/etc/weaseldb/config.json",
        "--upstream", "https://orders.shop.svc:8080",
        "--store", db.storage.url,
        "--state-dir", STATE_DIR,
        "--host", "0.0.0.0",
        "--port", "8090",
        "--horizon-seconds", "60",
        "--policy-id", "reader-$(POD_NAME)",
    ]  # fmt: skip
    # $(POD_NAME) is expanded by Kubernetes from the container's own environment.
    pod_name = {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    assert pod_name in container["env"]
    # The store's keys as the ring containers get them.
    assert container["envFrom"] == [{"secretRef": {"name": "s3-keys"}}]
    https = {"scheme": "HTTPS"}  # spec.tls is on by default
    assert (
        container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": READER_PORT} | https
    )
    assert (
        container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": READER_PORT} | https
    )
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in _pod(deployment)["volumes"]}
    assert volumes[mounts[STATE_DIR]] == {"name": "state", "emptyDir": {}}
    assert _pod(deployment)["automountServiceAccountToken"] is False


def test_readers_are_never_counted_as_the_database_pods() -> None:
    """The ring's selectors (StatefulSet, headless Service, PDB, the leadership loop) and
    the readers' must not overlap: a reader counted as a ring pod would be labelled,
    promoted or waited for."""
    spec = readers(replicas=3)
    spec["spec"]["replicas"] = 2  # the ring's: a PDB too
    db = database_from(spec)
    deployment = reader_deployment_for(db)
    assert deployment is not None
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    ring = selector_labels(db)
    assert not ring.items() <= pod_labels.items()
    assert reader_selector(db).items() <= pod_labels.items()
    selectors = [
        (c["kind"], c["spec"]["selector"].get("matchLabels", c["spec"]["selector"]))
        for c in children_for(db)
        if "selector" in c.get("spec", {})
    ]
    assert [kind for kind, _ in selectors] == [
        "Service",
        "Service",
        "StatefulSet",
        "PodDisruptionBudget",
    ]
    for kind, selector in selectors:
        assert not selector.items() <= pod_labels.items(), kind


def test_service_selects_the_readers_on_their_port() -> None:
    db = database_from(readers())
    service = readers_service_for(db)
    assert service is not None
    assert service["metadata"]["name"] == "orders-readers"
    assert service["spec"]["selector"] == reader_selector(db)
    assert service["spec"]["ports"] == [{"name": "http", "port": 8090, "targetPort": "reader"}]
    assert [c["kind"] for c in reader_children(db)] == [
        "Service",
        "Deployment",
        "PodDisruptionBudget",
    ]


def test_a_drain_evicts_one_reader_at_a_time_but_a_lone_reader_is_never_held() -> None:
    db = database_from(readers(replicas=3))
    (pdb,) = [c for c in reader_children(db) if c["kind"] == "PodDisruptionBudget"]
    assert pdb["metadata"]["name"] == "orders-readers"
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"] == {"matchLabels": reader_selector(db)}
    lone = database_from(readers(replicas=1))
    assert "PodDisruptionBudget" not in [c["kind"] for c in reader_children(lone)]
    assert reader_leftovers(lone) == [("policy/v1", "PodDisruptionBudget", "orders-readers")]


def test_resources_and_replicas_come_from_the_spec() -> None:
    resources = {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}
    deployment = reader_deployment_for(database_from(readers(replicas=5, resources=resources)))
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 5
    assert _pod(deployment)["containers"][0]["resources"] == resources


def test_placement_defaults_to_spreading_the_readers_over_nodes() -> None:
    db = database_from(readers())
    affinity = _pod(reader_deployment_for(db) or {})["affinity"]
    (term,) = affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["labelSelector"] == {"matchLabels": reader_selector(db)}


def test_placement_fields_and_what_the_database_lends() -> None:
    spread = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
              "whenUnsatisfiable": "ScheduleAnyway"}  # fmt: skip
    toleration = {"key": "dedicated", "operator": "Equal", "value": "readers"}
    own_anti: dict[str, Any] = {"requiredDuringSchedulingIgnoredDuringExecution": []}
    spec = readers(
        antiAffinity="required",
        affinity={"podAntiAffinity": own_anti},
        nodeSelector={"pool": "readers"},
        tolerations=[toleration],
        topologySpreadConstraints=[spread],
    )
    spec["spec"] |= {
        "imagePullSecrets": [{"name": "registry"}],
        "priorityClassName": "high",
        "podLabels": {"team": "orders"},
        "nodeSelector": {"pool": "ring"},  # the database's own: not the readers'
    }
    db = database_from(spec)
    deployment = reader_deployment_for(db)
    assert deployment is not None
    pod = _pod(deployment)
    assert pod["affinity"] == {"podAntiAffinity": own_anti}  # replaces the default
    assert pod["nodeSelector"] == {"pool": "readers"}
    assert pod["tolerations"] == [toleration]
    assert pod["topologySpreadConstraints"] == [
        {"labelSelector": {"matchLabels": reader_selector(db)}, **spread}
    ]
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["priorityClassName"] == "high"
    assert deployment["spec"]["template"]["metadata"]["labels"]["team"] == "orders"


def test_a_bad_anti_affinity_names_the_readers_field() -> None:
    with pytest.raises(SpecError, match=r"spec\.readers\.antiAffinity"):
        database_from(readers(antiAffinity="sometimes"))


def test_network_policy_for_readers_only_beside_the_database_one() -> None:
    identity = Operator(b"t", "weaseldb-system", {"app.kubernetes.io/name": "op"})
    db = database_from(readers())
    kinds = [(c["kind"], c["metadata"]["name"]) for c in secured(db, identity, reader_children(db))]
    assert kinds[-2:] == [("NetworkPolicy", "orders"), ("NetworkPolicy", "orders-readers")]
    (policy,) = [c for c in secured(db, identity, []) if c["metadata"]["name"] == "orders-readers"]
    assert policy["spec"]["podSelector"] == {"matchLabels": reader_selector(db)}
    assert policy["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8090}]}]
    # No readers: none; no operator identity: no NetworkPolicy at all (as for the ring).
    no_readers = database_from(body())
    policies = [c for c in secured(no_readers, identity, []) if c["kind"] == "NetworkPolicy"]
    assert [p["metadata"]["name"] for p in policies] == ["orders"]
    assert [c for c in secured(db, Operator(b"t"), []) if c["kind"] == "NetworkPolicy"] == []


def test_only_this_databases_gone_readers_policies_are_stale() -> None:
    db = database_from(readers())
    alive, gone = "orders-reader-5d8f7c9b4-abcde", "orders-reader-5d8f7c9b4-zzzzz"
    policies = [
        f"reader-{alive}",
        f"reader-{gone}",
        "reader-laptop",  # a reader a user runs elsewhere: `reader-<hostname>`
        "reader-orders-readers",  # not a pod of the Deployment orders-reader
        "nightly-export",
        "orders-reader-5d8f7c9b4-zzzzz",  # no reader- prefix
    ]
    assert policy_owner(db, f"reader-{gone}") == gone
    assert policy_owner(db, "reader-laptop") is None
    assert stale_policies(db, policies, [alive]) == [f"reader-{gone}"]
    assert stale_policies(db, policies, [alive, gone]) == []
