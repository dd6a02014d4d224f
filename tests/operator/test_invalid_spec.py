"""An invalid spec on a running database (issue 25, safe edits): labels and failover go on
with the last valid spec, SpecValid and an Event say why. Real API server, MinIO and
`weaseldb up` process sets standing for pods (tests/operator/pods.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from weaseldb_operator.kube import Kube
from weaseldb_operator.lastvalid import LastValidSpecs

from tests.operator.helpers import condition, weaseldb
from tests.operator.pods import Pods, failover_due, leads_ready, roles, set_ready
from tests.support.kube import ControlPlane

pytestmark = pytest.mark.slow
#: Passes the CRD's pattern (five fields) but is no cron expression: only the operator
#: can refuse it.
BAD_SCHEDULE = {"compaction": {"image": "spark:1", "schedule": "61 25 * * *"}}


def spec_invalid(plane: ControlPlane, namespace: str) -> dict[str, Any]:
    def invalid() -> dict[str, Any] | None:
        body: dict[str, Any] = plane.get("wdb", "ledger", "-n", namespace)
        found = condition(body, "SpecValid")
        return body if found.get("status") == "False" else None

    return plane.wait_for(invalid, what="SpecValid False")


def test_an_invalid_spec_keeps_labels_and_failover_running(
    control_plane: ControlPlane, operator: Path, namespace: str, pods: Pods
) -> None:
    control_plane.wait_for(
        lambda: condition(control_plane.get("wdb", "ledger", "-n", namespace), "SpecValid")
        .get("status") == "True",
        what="first spec applied",
    )  # fmt: skip
    patch = json.dumps({"spec": BAD_SCHEDULE})
    control_plane.kubectl("patch", "wdb", "ledger", "-n", namespace, "--type=merge", "-p", patch)
    body = spec_invalid(control_plane, namespace)
    found = condition(body, "SpecValid")
    assert found["reason"] == "InvalidSpec"
    assert "spec.compaction.schedule" in found["message"]
    events = control_plane.get("events", "-n", namespace)["items"]
    assert any(
        e["reason"] == "InvalidSpec" and e["type"] == "Warning" and "schedule" in e["message"]
        for e in events
    ), events

    pods.start("ledger-0")  # labelling goes on: the new pod claims and is labelled leader
    leads_ready(control_plane, namespace, "ledger-0")
    control_plane.wait_for(
        lambda: roles(control_plane, namespace) == {"ledger-0": "leader"}, what="label"
    )
    set_ready(control_plane, namespace, "ledger-0", False)  # and so does failover
    body = failover_due(control_plane, namespace, "failover due under an invalid spec")
    assert "ledger-0 (term 1) is not Ready" in condition(body, "LeaderElected")["message"]
    assert condition(body, "SpecValid")["reason"] == "InvalidSpec"


async def _lead_from_scratch(body: dict[str, Any]) -> int | None:
    kube = await Kube.from_environment()
    try:
        db = await LastValidSpecs(kube).database_for(body)
        return db.generation if db else None
    finally:
        await kube.close()


def test_an_operator_that_restarts_reads_the_last_valid_spec_back(
    control_plane: ControlPlane,
    operator: Path,
    namespace: str,
    pods: Pods,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new observer (as after an operator restart) has no memory of the valid spec: it
    reads the one the reconciler stamped on the StatefulSet."""
    control_plane.wait_for(
        lambda: control_plane.get("statefulset", "ledger", "-n", namespace), what="statefulset"
    )
    patch = json.dumps({"spec": BAD_SCHEDULE})
    control_plane.kubectl("patch", "wdb", "ledger", "-n", namespace, "--type=merge", "-p", patch)
    body = spec_invalid(control_plane, namespace)
    assert body["metadata"]["generation"] == 2
    monkeypatch.setenv("KUBECONFIG", control_plane.env["KUBECONFIG"])
    assert asyncio.run(_lead_from_scratch(body)) == 1


def test_a_database_that_never_had_a_valid_spec_says_so(
    control_plane: ControlPlane, operator: Path, namespace: str
) -> None:
    storage = {"bucket": "never", "prefix": "db", "endpoint": "http://127.0.0.1:9"}
    control_plane.apply(weaseldb("ledger", namespace, {"storage": storage, **BAD_SCHEDULE}))
    body = control_plane.wait_for(
        lambda: (
            (b := control_plane.get("wdb", "ledger", "-n", namespace))
            and condition(b, "SpecValid").get("reason") == "NoValidSpec"
            and b
        ),
        what="SpecValid NoValidSpec",
    )
    assert "spec.compaction.schedule" in condition(body, "SpecValid")["message"]
    assert condition(body, "Ready")["reason"] == "InvalidSpec"
