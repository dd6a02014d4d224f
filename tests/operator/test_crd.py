"""The CRDs against a real kube-apiserver: they install, defaults apply, bad specs are
refused by the API server itself with a message that names the field."""

from __future__ import annotations

from typing import Any

import pytest

from tests.operator.helpers import assert_refused, weaseldb
from tests.support.kube import ControlPlane

STORAGE = {"bucket": "weasel-data", "prefix": "orders"}


def test_crds_are_established(control_plane: ControlPlane) -> None:
    names = control_plane.kubectl("get", "crd", "-o", "name").stdout.split()
    assert "customresourcedefinition.apiextensions.k8s.io/weaseldbs.weaseldb.io" in names
    assert any("sparkapplications.sparkoperator.k8s.io" in n for n in names)


def test_defaults_and_printer_columns(control_plane: ControlPlane, namespace: str) -> None:
    control_plane.apply(weaseldb("defaults", namespace, {"storage": STORAGE}))
    spec = control_plane.get("weaseldb", "defaults", "-n", namespace)["spec"]
    assert spec["replicas"] == 1
    assert spec["deletionPolicy"] == "Retain"
    assert spec["leaderFailoverSeconds"] == 1
    assert spec["leaderNotReadySeconds"] == 30
    assert spec["paused"] is False
    assert spec["pipeline"]["maxInFlightRequests"] == 50
    assert spec["pipeline"]["ring"] == "unix"
    header = control_plane.kubectl("get", "wdb", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "READY", "LEADER", "VERSION", "AGE"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            {"storage": STORAGE, "pipeline": {"maxInFlightRequests": 1001}},
            "spec.pipeline.maxInFlightRequests: Invalid value: 1001",
            id="in-flight-max",
        ),
        pytest.param(
            {"storage": STORAGE, "pipeline": {"maxInFlightRequests": 0}},
            "spec.pipeline.maxInFlightRequests: Invalid value: 0",
            id="in-flight-min",
        ),
        pytest.param(
            {"storage": STORAGE, "pipeline": {"ring": "zeromq"}},
            'spec.pipeline.ring: Unsupported value: "zeromq"',
            id="ring-enum",
        ),
        pytest.param(
            {"storage": STORAGE, "deletionPolicy": "Sometimes"},
            'spec.deletionPolicy: Unsupported value: "Sometimes"',
            id="policy-enum",
        ),
        pytest.param(
            {"storage": {"bucket": "weasel-data"}},
            "spec.storage.prefix: Required value",
            id="prefix-required",
        ),
        pytest.param({"replicas": 2}, "spec.storage: Required value", id="storage-required"),
        pytest.param(
            {"storage": STORAGE, "replicas": 0},
            "spec.replicas: Invalid value: 0",
            id="replicas-min",
        ),
        pytest.param(
            {"storage": {**STORAGE, "prefix": "/orders/"}},
            "spec.storage.prefix",
            id="prefix-slashes",
        ),
        pytest.param(
            {"storage": STORAGE, "gateway": {"maxBodyBytes": 10}},
            "spec.gateway.maxBodyBytes: Invalid value: 10",
            id="body-min",
        ),
        pytest.param(
            {"storage": STORAGE, "compaction": {"image": "spark:1", "schedule": "every day"}},
            "spec.compaction.schedule: Invalid value",
            id="compaction-cron",
        ),
        pytest.param(
            {
                "storage": STORAGE,
                "compaction": {"image": "spark:1", "schedule": "0 3 * * *", "executors": 0},
            },
            "spec.compaction.executors: Invalid value: 0",
            id="compaction-executors-min",
        ),
        pytest.param(
            {"storage": STORAGE, "compaction": {"image": "spark:1"}},
            "spec.compaction needs a schedule, a batchThreshold or both",
            id="compaction-trigger",
        ),
        pytest.param(
            {"storage": STORAGE, "compaction": {"schedule": "0 3 * * *"}},
            "spec.compaction.image: Required value",
            id="compaction-image",
        ),
        pytest.param(
            {
                "storage": STORAGE,
                "compaction": {
                    "image": "i",
                    "schedule": "0 3 * * *",
                    "driver": {"coreRequest": "a"},
                },
            },
            "spec.compaction.driver.coreRequest: Invalid value",
            id="compaction-core-request",
        ),
        pytest.param(
            {"storage": STORAGE, "resources": {"default": {"limits": {"memory": "lots"}}}},
            "spec.resources.default.limits.memory",
            id="quantity",
        ),
    ],
)
def test_invalid_specs_are_rejected(
    control_plane: ControlPlane, namespace: str, spec: dict[str, Any], message: str
) -> None:
    assert_refused(control_plane, namespace, spec, message)
    assert control_plane.kubectl("get", "wdb", "bad", "-n", namespace, check=False).returncode != 0
