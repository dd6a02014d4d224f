"""Small helpers shared by the operator tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests.support.kube import ControlPlane

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]


def eventually(check: Callable[[], T | None], timeout: float = 30, what: str = "") -> T:
    """Poll `check` until it returns something truthy; its last exception or result explains
    a timeout."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
            last = result
        except (AssertionError, KeyError, RuntimeError, StopIteration) as e:
            last = e
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}: last {last!r}")


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
