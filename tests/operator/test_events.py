"""`Kube.event` against a real API server: what the operator did reaches `kubectl
describe` as an Event on the resource."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from weaseldb_operator.kube import Kube

from tests.operator.helpers import weaseldb
from tests.support.kube import ControlPlane


async def _record(body: dict[str, Any]) -> None:
    kube = await Kube.from_environment()
    try:
        await kube.event(body, "SwitchedOver", "asked ledger-1 to claim the next term")
        await kube.event(body, "FailoverStalled", "no standby answers", warning=True)
    finally:
        await kube.close()


def test_events_are_recorded_on_the_resource(
    control_plane: ControlPlane, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = {"storage": {"bucket": "events", "prefix": "db", "endpoint": "http://127.0.0.1:9"}}
    control_plane.apply(weaseldb("ledger", namespace, spec))
    body = control_plane.get("wdb", "ledger", "-n", namespace)
    monkeypatch.setenv("KUBECONFIG", control_plane.env["KUBECONFIG"])
    asyncio.run(_record(body))
    events = control_plane.get("events", "-n", namespace)["items"]
    seen = {
        (e["reason"], e["type"], e["involvedObject"]["name"], e["involvedObject"]["uid"])
        for e in events
    }
    uid = body["metadata"]["uid"]
    assert ("SwitchedOver", "Normal", "ledger", uid) in seen
    assert ("FailoverStalled", "Warning", "ledger", uid) in seen
