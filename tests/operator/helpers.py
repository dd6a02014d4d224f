"""Small helpers shared by the operator tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.kube import ControlPlane

REPO = Path(__file__).resolve().parents[2]


def weaseldb(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "weaseldb.io/v1alpha1",
        "kind": "WeaselDB",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def condition(body: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [c for c in body.get("status", {}).get("conditions", []) if c["type"] == kind]
    return found[0] if found else {}


def get_or_none(plane: ControlPlane, *args: str) -> dict[str, Any] | None:
    result = plane.kubectl("get", *args, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    import json

    found: dict[str, Any] = json.loads(result.stdout)
    return found


def assert_refused(plane: ControlPlane, namespace: str, spec: dict[str, Any], message: str) -> None:
    """A WeaselDB `bad` with `spec` is refused by the API server with `message`."""
    result = plane.kubectl(
        "apply", "--server-side", "-f", "-", check=False,
        stdin=json.dumps(weaseldb("bad", namespace, spec)),
    )  # fmt: skip
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
