"""The compaction loop when the Kubernetes API refuses it (the Spark operator's CRD not
installed, RBAC): the condition says so on every pass, the log once per distinct error."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from weaseldb_operator.compactor import CompactionLoop
from weaseldb_operator.conditions import Reason
from weaseldb_operator.kube import KubeError
from weaseldb_operator.spec import database_from

BODY = {
    "apiVersion": "weaseldb.io/v1alpha1",
    "kind": "WeaselDB",
    "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1", "generation": 1},
    "spec": {
        "storage": {"bucket": "b", "prefix": "orders", "endpoint": "http://s3:9000"},
        "compaction": {"image": "weaseldb-spark:test", "batchThreshold": 1},
    },
}


class RefusingKube:
    """Answers every LIST as an API server without the SparkApplication CRD does."""

    def __init__(self) -> None:
        self.error = KubeError(404, "the server could not find the requested resource")

    async def list(self, path: str, labels: dict[str, str]) -> list[dict[str, Any]]:
        raise self.error


def test_a_refused_list_is_logged_once_and_reported_every_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube = RefusingKube()
    loop = CompactionLoop(kube, stores=None)  # type: ignore[arg-type]
    db = database_from(BODY)

    async def passes(count: int) -> list[Reason]:
        reasons: list[Reason] = []
        for _ in range(count):
            conditions, status = await loop.observe(db, BODY)
            assert status == {}
            reasons += [c.reason for c in conditions]
        return reasons

    with caplog.at_level(logging.WARNING, logger="weaseldb"):
        assert asyncio.run(passes(5)) == [Reason.SPARK_UNAVAILABLE] * 5
        kube.error = KubeError(403, "forbidden")
        asyncio.run(passes(3))
    logged = [r.getMessage() for r in caplog.records if "compaction" in r.getMessage()]
    assert len(logged) == 2, logged
    assert "404" in logged[0] and "403" in logged[1]
