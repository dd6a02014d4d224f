"""Two writers of one status (the reconciler and the observer) never drop each other's
conditions: a write computed from a stale read is refused by the API server (the
resourceVersion precondition) and recomputed from a fresh one."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration
from weaseldb_operator.kube import Kube, path_for
from weaseldb_operator.spec import API_VERSION, KIND

from tests.operator.helpers import condition, weaseldb
from tests.support.kube import ControlPlane


def adding(kind: str, calls: list[str]) -> Any:
    def status(current: dict[str, Any]) -> dict[str, Any]:
        calls.append(current["metadata"]["resourceVersion"])
        kept = [
            c for c in (current.get("status") or {}).get("conditions") or [] if c["type"] != kind
        ]
        return {"conditions": [*kept, {"type": kind, "status": "True", "reason": "Test"}]}

    return status


async def kube_of(plane: ControlPlane) -> Kube:
    configuration = Configuration()
    await config.load_kube_config(str(plane.kubeconfig), client_configuration=configuration)
    return Kube(ApiClient(configuration))


def test_a_write_from_a_stale_read_keeps_the_other_writers_condition(
    control_plane: ControlPlane, namespace: str
) -> None:
    storage = {"bucket": "racing", "prefix": "db", "endpoint": "http://127.0.0.1:9"}
    control_plane.apply(weaseldb("racing", namespace, {"storage": storage}))
    stale = control_plane.get("wdb", "racing", "-n", namespace)
    path = path_for(API_VERSION, KIND, namespace, "racing")
    first_calls: list[str] = []
    second_calls: list[str] = []

    async def two_writers() -> None:
        kube = await kube_of(control_plane)
        try:
            await kube.patch_status(path, adding("FirstWriter", first_calls))
            await kube.patch_status(path, adding("SecondWriter", second_calls), stale)
        finally:
            await kube.close()

    asyncio.run(two_writers())
    body = control_plane.get("wdb", "racing", "-n", namespace)
    assert condition(body, "FirstWriter")["status"] == "True"
    assert condition(body, "SecondWriter")["status"] == "True"
    # The stale read was tried first and refused; a fresh read was merged instead.
    assert second_calls[0] == stale["metadata"]["resourceVersion"]
    assert len(second_calls) >= 2 and second_calls[-1] != second_calls[0]
