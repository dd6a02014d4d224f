"""The Helm chart and the examples against a real kube-apiserver: `helm lint`, and
`helm template` output and every example accepted by a server-side dry run (schema,
RBAC objects, the example WeaselDB against the CRD)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.operator.helpers import REPO
from tests.support.kube import TOOLS, ControlPlane

CHART = str(REPO / "charts/weaseldb")
VALUES = sorted((REPO / "examples").glob("values-*.yaml"))


def test_helm_lint_is_clean(control_plane: ControlPlane) -> None:
    for extra in ([], ["--set", "example.enabled=true"], *(["-f", str(v)] for v in VALUES)):
        result = control_plane.helm("lint", "--strict", CHART, *extra)
        assert "0 chart(s) failed" in result.stdout
        assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


@pytest.mark.parametrize("values", [None, *VALUES], ids=lambda v: v.name if v else "defaults")
def test_rendered_chart_passes_a_server_side_dry_run(
    control_plane: ControlPlane, namespace: str, values: Path | None
) -> None:
    extra = ["-f", str(values)] if values else ["--set", "example.enabled=true"]
    rendered = control_plane.helm("template", "wdb", CHART, "-n", namespace, *extra).stdout
    assert "kind: Deployment" in rendered
    result = control_plane.kubectl(
        "apply", "--server-side", "--dry-run=server", "-n", namespace, "-f", "-", stdin=rendered
    )
    assert "serverside-applied (server dry run)" in result.stdout


def test_operator_service_account_has_what_it_uses(
    control_plane: ControlPlane, namespace: str
) -> None:
    rendered = control_plane.helm("template", "wdb", CHART, "-n", namespace).stdout
    control_plane.apply(rendered, "-n", namespace)
    account = f"system:serviceaccount:{namespace}:wdb-weaseldb-operator"
    allowed = [
        ("watch", "weaseldbs.weaseldb.io"),
        ("patch", "weaseldbs.weaseldb.io/status"),
        ("patch", "statefulsets.apps"),
        ("delete", "poddisruptionbudgets.policy"),
        ("patch", "pods"),
        ("delete", "pods"),  # the rollout of a configuration change
        ("get", "statefulsets.apps"),  # its update revision
        ("create", "events"),
        ("create", "sparkapplications.sparkoperator.k8s.io"),
        ("list", "sparkapplications.sparkoperator.k8s.io"),
        ("create", "secrets"),  # each database's copy of the admin token
        ("patch", "secrets"),
        ("get", "secrets"),  # NAME-tls to renew and trust, NAME-operator-token (spec.auth)
        ("patch", "networkpolicies.networking.k8s.io"),
        ("delete", "networkpolicies.networking.k8s.io"),  # the readers' at replicas 0
        ("patch", "deployments.apps"),  # spec.readers
        ("delete", "deployments.apps"),
        (
            "delete",
            "sparkapplications.sparkoperator.k8s.io",
        ),  # a run past its deadline; deletionPolicy Delete
    ]
    denied = [
        ("list", "secrets"),  # only the Secrets it names: no list, no watch
        ("create", "pods"),
        ("delete", "weaseldbs"),
        ("patch", "sparkapplications.sparkoperator.k8s.io/status"),
    ]
    for verb, resource in allowed + denied:
        answer = control_plane.kubectl(
            "auth", "can-i", verb, resource, "--as", account, "-n", namespace, check=False
        ).stdout.strip()
        assert answer == ("yes" if (verb, resource) in allowed else "no"), (verb, resource)


@pytest.mark.parametrize(
    "example", sorted((REPO / "examples").glob("weaseldb-*.yaml")), ids=lambda p: p.name
)
def test_examples_apply(control_plane: ControlPlane, namespace: str, example: Path) -> None:
    result = control_plane.kubectl("apply", "--server-side", "-n", namespace, "-f", str(example))
    assert "serverside-applied" in result.stdout
    assert (TOOLS / "helm").exists()


MONITORING_APIS = ["--api-versions", "monitoring.coreos.com/v1/PodMonitor"]
MONITORING_APIS += ["--api-versions", "monitoring.coreos.com/v1/PrometheusRule"]


def rendered_objects(control_plane: ControlPlane, *extra: str) -> list[dict[str, Any]]:
    rendered = control_plane.helm("template", "wdb", CHART, "-n", "db", *extra).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def kinds(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in objects}


def podmonitors(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in objects if doc["kind"] == "PodMonitor"}


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("operator.watchAllNamespaces=maybe", ("watchAllNamespaces", "boolean")),  # a type
        (
            "operator.watchAllNamespace=false",
            ("watchAllNamespace", "not allowed"),
        ),  # a misspelt key
        (
            "monitoring.podMonitor.intervall=10s",
            ("intervall", "not allowed"),
        ),  # a misspelt nested key
        ("example.spec.replicas=two", ("replicas", "integer")),  # the CRD's spec schema
    ],
)
def test_values_schema_refuses_bad_values(
    control_plane: ControlPlane, setting: str, complaint: tuple[str, ...]
) -> None:
    """values.schema.json is enforced by helm itself: install, upgrade, template and lint
    all refuse these (before, each was silently ignored or rendered as given)."""
    for command in (["template", "wdb"], ["lint", "--strict"]):
        result = control_plane.helm(*command, CHART, "--set", setting, check=False)
        said = result.stderr + result.stdout
        assert result.returncode != 0, (command, setting, said)
        assert "schema" in said and all(word in said for word in complaint), said


def test_monitoring_objects_only_where_the_crds_are(control_plane: ControlPlane) -> None:
    without = kinds(rendered_objects(control_plane))
    assert "PodMonitor" not in without and "PrometheusRule" not in without
    dashboard = json.loads(without["ConfigMap"]["data"]["weaseldb-dashboard.json"])
    assert dashboard == json.loads((REPO / "charts/weaseldb/monitoring/dashboard.json").read_text())
    assert without["ConfigMap"]["metadata"]["labels"]["grafana_dashboard"] == "1"

    found = kinds(rendered_objects(control_plane, *MONITORING_APIS))
    rules = yaml.safe_load((REPO / "charts/weaseldb/monitoring/alerts.yaml").read_text())
    assert found["PrometheusRule"]["spec"] == rules  # embedded as it is, not templated
    monitors = podmonitors(rendered_objects(control_plane, *MONITORING_APIS))
    assert set(monitors) == {"wdb-weaseldb-databases", "wdb-weaseldb-operator"}
    monitor = monitors["wdb-weaseldb-databases"]["spec"]
    assert monitor["namespaceSelector"] == {"any": True}
    ports = {endpoint["port"] for endpoint in monitor["podMetricsEndpoints"]}
    assert ports == {"gateway", "sequencer", "resolver", "persister", "reader"}
    # The client ports serve TLS by default (spec.tls); the stage ports plain HTTP.
    schemes = {e["port"]: e.get("scheme", "http") for e in monitor["podMetricsEndpoints"]}
    assert {p for p, scheme in schemes.items() if scheme == "https"} == {"gateway", "reader"}
    plain = ["--set", "monitoring.podMonitor.clientTls=false", *MONITORING_APIS]
    endpoints = kinds(rendered_objects(control_plane, *plain))["PodMonitor"]["spec"]
    assert all("scheme" not in e for e in endpoints["podMetricsEndpoints"])
    off = ["--set", "monitoring.podMonitor.enabled=false", *MONITORING_APIS]
    assert "PodMonitor" not in kinds(rendered_objects(control_plane, *off))


def test_the_operators_podmonitor_selects_the_operator_pod_and_its_metrics_port(
    control_plane: ControlPlane,
) -> None:
    """Its series keep their own `namespace` and `database` (honorLabels): the WeaselDB's,
    which the dashboard and the alerts select on, not the operator pod's namespace."""
    objects = rendered_objects(control_plane, *MONITORING_APIS)
    monitor = podmonitors(objects)["wdb-weaseldb-operator"]["spec"]
    deployment = kinds(objects)["Deployment"]
    pod = deployment["spec"]["template"]
    assert monitor["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert monitor["namespaceSelector"] == {"matchNames": ["db"]}
    (endpoint,) = monitor["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["honorLabels"]) == (
        "metrics",
        "/metrics",
        True,
    )
    ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert ports["metrics"] == 8081


def test_helm_test_pod_commits_through_the_database_service(control_plane: ControlPlane) -> None:
    assert "Pod" not in kinds(rendered_objects(control_plane))  # no database to test
    pod = kinds(rendered_objects(control_plane, "--set", "example.enabled=true"))["Pod"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    # Over TLS by default, trusting the database's CA (ca.crt of DATABASE-tls).
    assert env["WEASELDB_URL"] == "https://weaseldb.db.svc:8080"
    assert env["CACERT"] == "--cacert=/etc/weaseldb-tls/ca.crt"
    ca = next(v for v in pod["spec"]["volumes"] if v["name"] == "ca")
    assert ca["secret"]["secretName"] == "weaseldb-tls"
    assert "WEASELDB_TOKEN" not in env
    named = ["--set", "test.database=orders", "--set", "test.namespace=shop",
             "--set", "test.tokenSecret=orders-test-token"]  # fmt: skip
    pod = kinds(rendered_objects(control_plane, *named))["Pod"]
    assert pod["metadata"]["namespace"] == "shop"  # beside the Secrets it mounts
    assert "https://orders.shop.svc:8080" in json.dumps(pod)
    token = next(e for e in pod["spec"]["containers"][0]["env"] if e["name"] == "WEASELDB_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": "orders-test-token", "key": "token"}
    plain = kinds(rendered_objects(control_plane, *named, "--set", "test.tls=false"))["Pod"]
    assert "http://orders.shop.svc:8080" in json.dumps(plain)
    assert [v["name"] for v in plain["spec"]["volumes"]] == ["tmp"]


def test_promtool_checks_the_alert_rules() -> None:
    promtool = TOOLS / "promtool"
    if not promtool.exists():
        pytest.fail("promtool is not built: run `make tools` (make test does this first)")
    rules = REPO / "charts/weaseldb/monitoring/alerts.yaml"
    checked = subprocess.run(
        [str(promtool), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout
    tested = subprocess.run(
        [str(promtool), "test", "rules", str(Path(__file__).parent / "alerts_test.yaml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert tested.returncode == 0, tested.stdout + tested.stderr
