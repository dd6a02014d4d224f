"""The admin door's builders (weaseldb_operator.door): pure, no cluster. That the API
server accepts what they build: tests/operator/test_admin_door.py."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from weaseldb_operator.door import (
    SCRAPERS_ENV,
    TOKEN_FILE_ENV,
    Operator,
    network_policy_for,
    secret_name,
    secured,
)
from weaseldb_operator.resources import children_for, selector_labels
from weaseldb_operator.spec import database_from

from tests.operator.test_builders import body
from weaseldb.core.config import load

LABELS = {"app.kubernetes.io/name": "weaseldb-operator", "app.kubernetes.io/instance": "ops"}
OPERATOR = Operator(b"tok3n", "weaseldb-system", LABELS)


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


def test_the_network_policy_admits_clients_to_the_gateway_and_the_operator_to_the_persister() -> (
    None
):
    db = database_from(body(replicas=2))
    policy = network_policy_for(db, OPERATOR)
    assert policy is not None
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": selector_labels(db)}
    assert spec["policyTypes"] == ["Ingress"]
    clients, operator = spec["ingress"]
    assert clients == {"ports": [{"protocol": "TCP", "port": 8080}]}  # from anywhere
    assert operator["ports"] == [{"protocol": "TCP", "port": 8083}]
    assert operator["from"] == [
        {
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": "weaseldb-system"}
            },
            "podSelector": {"matchLabels": LABELS},
        }
    ]
    # The sequencer's and resolver's ports (8081, 8082) admit nobody from outside the pod.
    assert {p["port"] for rule in spec["ingress"] for p in rule["ports"]} == {8080, 8083}
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_the_metrics_scrapers_reach_every_stage_port() -> None:
    """The chart's PodMonitor scrapes each stage's own port; without a rule for the
    scrapers the NetworkPolicy would let through the gateway's metrics only."""
    db = database_from(body(replicas=2))
    prometheus = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}}}
    operator = Operator.from_environment(
        {
            "WEASELDB_OPERATOR_NAMESPACE": "weaseldb-system",
            "WEASELDB_OPERATOR_POD_LABELS": json.dumps(LABELS),
            SCRAPERS_ENV: json.dumps([prometheus]),
        }
    )
    policy = network_policy_for(db, operator)
    assert policy is not None
    *_, scrapers = policy["spec"]["ingress"]
    assert scrapers["from"] == [prometheus]
    assert {p["port"] for p in scrapers["ports"]} == {8081, 8082, 8083}
    assert len(network_policy_for(db, OPERATOR)["spec"]["ingress"]) == 2  # type: ignore[index]


def test_the_pods_get_the_token_and_only_the_persister_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = database_from(body(replicas=2))
    objects = secured(db, OPERATOR, children_for(db))
    assert [o["kind"] for o in objects][:2] == ["Secret", "ConfigMap"]  # before its users
    assert objects[-1]["kind"] == "NetworkPolicy"
    found = by_kind(objects)
    secret = found["Secret"]
    assert secret["metadata"]["name"] == secret_name(db) == "orders-admin-token"
    assert base64.b64decode(secret["data"]["token"]) == b"tok3n"
    pod = found["StatefulSet"]["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "admin-token")
    assert volume["secret"]["secretName"] == "orders-admin-token"
    for container in pod["containers"]:
        env = {e["name"]: e.get("value") for e in container["env"]}
        mounts = {m["name"] for m in container["volumeMounts"]}
        if container["name"] == "persister":
            assert volume["name"] in mounts
            token_file = env[TOKEN_FILE_ENV]
        else:
            assert TOKEN_FILE_ENV not in env and volume["name"] not in mounts
    # The persister's configuration picks the file up from that variable.
    config = tmp_path / "config.json"
    config.write_text(found["ConfigMap"]["data"]["config.json"])
    monkeypatch.setenv(TOKEN_FILE_ENV, token_file)
    assert load(config).admin_token_file == "/etc/weaseldb-admin/token"


def test_without_a_token_or_identity_the_children_are_as_before() -> None:
    db = database_from(body(replicas=2))
    plain = json.dumps(children_for(db), sort_keys=True)
    assert json.dumps(secured(db, Operator(), children_for(db)), sort_keys=True) == plain
    # A token but no namespace or labels: the Secret, no NetworkPolicy (it could not
    # admit the operator, and would cut its /readyz probes and /promote).
    kinds = [o["kind"] for o in secured(db, Operator(b"t"), children_for(db))]
    assert "Secret" in kinds and "NetworkPolicy" not in kinds


def test_the_operator_reads_its_identity_from_its_environment(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("abc\n")
    operator = Operator.from_environment(
        {
            TOKEN_FILE_ENV: str(tmp_path / "token"),
            "WEASELDB_OPERATOR_NAMESPACE": "ops",
            "WEASELDB_OPERATOR_POD_LABELS": json.dumps(LABELS),
        }
    )
    assert operator == Operator(b"abc", "ops", LABELS)
    assert operator.admin_headers == {"Authorization": "Bearer abc"}
    assert Operator.from_environment({}).admin_headers == {}
