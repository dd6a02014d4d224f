"""The Helm chart and the examples against a real kube-apiserver: `helm lint`, and
`helm template` output and every example accepted by a server-side dry run (schema,
RBAC objects, the example WeaselDB against the CRD)."""

from __future__ import annotations

from pathlib import Path

import pytest

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
        ("get", "secrets"),  # it reads no Secret through the API, its own is a file
        ("list", "secrets"),
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
