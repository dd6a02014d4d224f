"""Placement of the pods (docs/operator.md "Placement"): the pure builder, the CRD's
checks against a real kube-apiserver, and the operator carrying the fields into the
StatefulSet (or refusing a spec the API server refuses)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from weaseldb_operator.resources import (
    CONFIG_HASH,
    NODE_TOPOLOGY,
    ROLE_LABEL,
    labels,
    selector_labels,
    statefulset_for,
)
from weaseldb_operator.spec import (
    OPERATOR_KEY_PREFIX,
    RESERVED_POD_LABELS,
    SpecError,
    database_from,
    reserved_key,
)

from tests.operator.helpers import REPO, assert_refused, get_or_none, weaseldb
from tests.operator.test_builders import body
from tests.support.kube import ControlPlane
from tests.support.minio import MinioServer

SELECTOR = {"app.kubernetes.io/name": "weaseldb", "app.kubernetes.io/instance": "orders"}
TERM = {"labelSelector": {"matchLabels": SELECTOR}, "topologyKey": "kubernetes.io/hostname"}
NODE_AFFINITY = {
    "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["db"]}]}
        ]
    }
}
#: Every placement field, as a user would write it.
PLACEMENT: dict[str, Any] = {
    "affinity": {"nodeAffinity": NODE_AFFINITY},
    "topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
        },
    ],
    "nodeSelector": {"disk": "ssd"},
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}
    ],
    "priorityClassName": "db-critical",
    "serviceAccountName": "orders-s3",
    "podLabels": {"team": "payments"},
    "podAnnotations": {"example.com/owner": "payments"},
    "imagePullSecrets": [{"name": "registry"}],
}


def template(**spec: Any) -> dict[str, Any]:
    found: dict[str, Any] = statefulset_for(database_from(body(**spec)))["spec"]["template"]
    return found


# --- the pure builder -----------------------------------------------------------------------


def test_default_prefers_other_nodes_and_mounts_no_token() -> None:
    pod = template()["spec"]
    assert pod["affinity"] == {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": TERM}
            ]
        }
    }
    assert TERM["topologyKey"] == NODE_TOPOLOGY
    assert pod["automountServiceAccountToken"] is False
    for absent in ("nodeSelector", "tolerations", "serviceAccountName", "imagePullSecrets"):
        assert absent not in pod, absent


@pytest.mark.parametrize(
    ("knob", "expected"),
    [
        pytest.param(
            "required",
            {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [TERM]}},
            id="required",
        ),
        pytest.param("none", None, id="none"),
    ],
)
def test_anti_affinity_knob(knob: str, expected: dict[str, Any] | None) -> None:
    assert template(antiAffinity=knob)["spec"].get("affinity") == expected


def test_user_affinity_keeps_the_default_unless_it_has_its_own_anti_affinity() -> None:
    beside = template(affinity={"nodeAffinity": NODE_AFFINITY})["spec"]["affinity"]
    assert beside["nodeAffinity"] == NODE_AFFINITY
    assert beside["podAntiAffinity"] == template()["spec"]["affinity"]["podAntiAffinity"]
    own = {"requiredDuringSchedulingIgnoredDuringExecution": [{**TERM, "topologyKey": "zone"}]}
    replaced = template(antiAffinity="required", affinity={"podAntiAffinity": own})
    assert replaced["spec"]["affinity"] == {"podAntiAffinity": own}


def test_every_field_reaches_the_pod_template() -> None:
    made = template(**PLACEMENT)
    pod = made["spec"]
    assert pod["affinity"]["nodeAffinity"] == NODE_AFFINITY
    (spread,) = pod["topologySpreadConstraints"]
    # Without a labelSelector a constraint counts no pods: it gets the database's own.
    assert spread == PLACEMENT["topologySpreadConstraints"][0] | {
        "labelSelector": {"matchLabels": SELECTOR}
    }
    assert pod["nodeSelector"] == {"disk": "ssd"}
    assert pod["tolerations"] == PLACEMENT["tolerations"]
    assert (pod["priorityClassName"], pod["serviceAccountName"]) == ("db-critical", "orders-s3")
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["automountServiceAccountToken"] is False
    meta = made["metadata"]
    assert meta["labels"]["team"] == "payments"
    assert (
        meta["annotations"]["example.com/owner"] == "payments"
        and CONFIG_HASH in meta["annotations"]
    )


def test_a_spread_constraint_keeps_its_own_selector() -> None:
    own = {
        "maxSkew": 1,
        "topologyKey": "zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"tier": "db"}},
    }
    assert template(topologySpreadConstraints=[own])["spec"]["topologySpreadConstraints"] == [own]


@pytest.mark.parametrize(
    ("field", "key"),
    [
        ("podLabels", "app.kubernetes.io/instance"),
        ("podLabels", "app.kubernetes.io/managed-by"),
        ("podLabels", ROLE_LABEL),
        ("podAnnotations", CONFIG_HASH),
    ],
)
def test_the_operators_own_keys_are_refused(field: str, key: str) -> None:
    with pytest.raises(SpecError, match=f"spec.{field}: {key} is the operator's own"):
        database_from(body(**{field: {key: "x"}}))


def test_reserved_keys_are_every_key_the_operator_sets_on_pods() -> None:
    made = template()
    db = database_from(body())
    set_by_operator = {
        *labels(db),
        *selector_labels(db),
        ROLE_LABEL,
        *made["metadata"]["annotations"],
    }
    assert all(reserved_key(k) for k in set_by_operator), set_by_operator


def test_the_crds_rule_names_the_same_keys() -> None:
    crd = yaml.safe_load((REPO / "charts/weaseldb/crds/weaseldb.io_weaseldbs.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for field in ("podLabels", "podAnnotations"):
        (rule,) = spec["properties"][field]["x-kubernetes-validations"]
        assert f"!k.startsWith('{OPERATOR_KEY_PREFIX}')" in rule["rule"], field
        named = re.findall(r"'(app\.kubernetes\.io/[\w-]+)'", rule["rule"])
        assert sorted(named) == sorted(RESERVED_POD_LABELS), field


# --- the CRD, on a real API server ----------------------------------------------------------

STORAGE = {"bucket": "weasel-data", "prefix": "orders"}


def test_the_crd_keeps_every_field(control_plane: ControlPlane, namespace: str) -> None:
    control_plane.apply(weaseldb("placed", namespace, {"storage": STORAGE, **PLACEMENT}))
    stored = control_plane.get("wdb", "placed", "-n", namespace)["spec"]
    assert {k: stored[k] for k in PLACEMENT} == PLACEMENT
    assert stored["antiAffinity"] == "preferred"


def test_the_api_server_accepts_the_built_statefulset(
    control_plane: ControlPlane, namespace: str
) -> None:
    """The builder's output is a valid StatefulSet (server-side dry run)."""
    for spec in ({}, {"antiAffinity": "required"}, PLACEMENT):
        sts = statefulset_for(database_from(body(**spec)))
        sts["metadata"]["namespace"] = namespace
        sts["metadata"].pop("ownerReferences")  # the owner does not exist here
        control_plane.apply(sts, "--dry-run=server")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        pytest.param(
            {"nodeSelector": {"disk": 1}}, ".spec.nodeSelector.disk: expected string", id="type"
        ),
        pytest.param(
            {"tolerations": {"key": "x"}}, ".spec.tolerations: expected list", id="not-a-list"
        ),
        pytest.param(
            {"tolerations": [{"key": "x", "effect": "NoSchedul"}]},
            'spec.tolerations[0].effect: Unsupported value: "NoSchedul"',
            id="effect",
        ),
        pytest.param(
            {"antiAffinity": "always"},
            'spec.antiAffinity: Unsupported value: "always"',
            id="anti-affinity",
        ),
        pytest.param(
            {"topologySpreadConstraints": [{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]},
            "spec.topologySpreadConstraints[0].topologyKey: Required value",
            id="spread-key",
        ),
        pytest.param(
            {"imagePullSecrets": [{}]}, "spec.imagePullSecrets[0].name: Required value", id="secret"
        ),
        pytest.param(
            {"podLabels": {"app.kubernetes.io/instance": "other"}},
            "spec.podLabels: Invalid value",
            id="selector-label",
        ),
        pytest.param(
            {"podLabels": {ROLE_LABEL: "leader"}},
            "weaseldb.io/* belong to the operator",
            id="role-label",
        ),
        pytest.param(
            {"podAnnotations": {CONFIG_HASH: "x"}},
            "spec.podAnnotations: Invalid value",
            id="config-hash",
        ),
        pytest.param(
            {"podLabels": {"team": "two words"}}, "spec.podLabels.team: Invalid value", id="value"
        ),
    ],
)
def test_the_crd_refuses(
    control_plane: ControlPlane, namespace: str, extra: dict[str, Any], message: str
) -> None:
    assert_refused(control_plane, namespace, {"storage": STORAGE, **extra}, message)


# --- the operator ---------------------------------------------------------------------------


def _spec(minio: MinioServer, **extra: Any) -> dict[str, Any]:
    return {
        "storage": {"bucket": minio.new_bucket(), "prefix": "db", "endpoint": minio.endpoint},
        "replicas": 2,
        **extra,
    }


@pytest.mark.slow
def test_the_statefulset_carries_the_placement(
    control_plane: ControlPlane, operator: Path, minio: MinioServer, namespace: str
) -> None:
    control_plane.apply(weaseldb("placed", namespace, _spec(minio, **PLACEMENT)))
    sts = control_plane.wait_for(
        lambda: get_or_none(control_plane, "statefulset", "placed", "-n", namespace),
        what="statefulset",
    )
    made = sts["spec"]["template"]
    pod = made["spec"]
    selector = {"app.kubernetes.io/name": "weaseldb", "app.kubernetes.io/instance": "placed"}
    assert pod["affinity"]["nodeAffinity"] == NODE_AFFINITY
    (preferred,) = pod["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert preferred["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    assert pod["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"] == selector
    assert pod["tolerations"] == PLACEMENT["tolerations"]
    assert pod["nodeSelector"] == {"disk": "ssd"}
    assert (pod["priorityClassName"], pod["serviceAccountName"]) == ("db-critical", "orders-s3")
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["automountServiceAccountToken"] is False
    assert made["metadata"]["labels"]["team"] == "payments"
    assert made["metadata"]["annotations"]["example.com/owner"] == "payments"
    assert sts["spec"]["selector"]["matchLabels"] == selector

    # Dropping the knob to none removes the default anti-affinity (server-side apply).
    control_plane.kubectl(
        "patch",
        "wdb",
        "placed",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"antiAffinity": "none", "affinity": null}}',
    )
    control_plane.wait_for(
        lambda: (
            "affinity"
            not in control_plane.get("statefulset", "placed", "-n", namespace)["spec"]["template"][
                "spec"
            ]
        ),
        what="affinity removed",
    )


@pytest.mark.slow
def test_a_placement_the_api_server_refuses_is_an_invalid_spec(
    control_plane: ControlPlane, operator: Path, minio: MinioServer, namespace: str
) -> None:
    """affinity's inner terms are passed through: the API server checks them when the
    StatefulSet is applied, and the operator reports its refusal instead of retrying."""
    term = {"matchExpressions": [{"key": "pool", "operator": "Near"}]}
    bad = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    control_plane.apply(
        weaseldb("refused", namespace, _spec(minio, affinity={"nodeAffinity": bad}))
    )

    def refusal() -> dict[str, Any] | None:
        events = control_plane.get("events", "-n", namespace)["items"]
        found = [e for e in events if e["involvedObject"]["name"] == "refused"]
        return next((e for e in found if e["reason"] == "InvalidSpec"), None)

    event = control_plane.wait_for(refusal, what="InvalidSpec event")
    assert event["type"] == "Warning"
    assert 'StatefulSet.apps "refused" is invalid' in event["message"]
    assert '"Near"' in event["message"], event["message"]
    assert get_or_none(control_plane, "statefulset", "refused", "-n", namespace) is None
