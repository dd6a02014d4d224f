"""Compaction decisions and the SparkApplication builder (pure: no cluster, no store)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from weaseldb_operator import compaction, supervision
from weaseldb_operator.spec import Compaction, SpecError, database_from

REPO = Path(__file__).resolve().parents[2]
UTC = datetime.UTC
CREATED = datetime.datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)


def body(**compaction_spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1", "generation": 1},
        "spec": {
            "storage": {"bucket": "b1", "prefix": "db", "endpoint": "http://s3:9000",
                        "credentialsSecret": "s3-keys"},
            "compaction": compaction_spec,
        },
    }  # fmt: skip


def app(slot: str, state: str | None) -> dict[str, Any]:
    found: dict[str, Any] = {
        "metadata": {"name": f"orders-compaction-{slot}", "labels": {compaction.SLOT_LABEL: slot}}
    }
    if state:
        found["status"] = {"applicationState": {"state": state}}
    return found


def at(hour: int, minute: int, second: int = 0) -> datetime.datetime:
    return datetime.datetime(2026, 1, 1, hour, minute, second, tzinfo=UTC)


NIGHTLY = Compaction(image="spark:1", schedule="0 3 * * *")
EAGER = Compaction(image="spark:1", batch_threshold=100)


@pytest.mark.parametrize(
    ("spec", "now", "apps", "lag", "slot"),
    [
        pytest.param(NIGHTLY, at(2, 59), [], None, None, id="before-the-first-slot"),
        pytest.param(NIGHTLY, at(3, 0, 5), [], None, "c202601010300", id="slot-reached"),
        pytest.param(NIGHTLY, at(9, 0), [], None, "c202601010300", id="late-still-runs"),
        pytest.param(
            NIGHTLY, at(9, 0), [app("c202601010300", "FAILED")], None, None, id="slot-taken"
        ),
        pytest.param(EAGER, at(5, 7), [], 99, None, id="below-threshold"),
        pytest.param(EAGER, at(5, 7), [], 100, "t202601010507", id="threshold"),
        pytest.param(
            EAGER, at(5, 7), [app("t202601010506", "RUNNING")], 500, None, id="one-at-a-time"
        ),
        pytest.param(
            EAGER, at(5, 7), [app("t202601010506", None)], 500, None, id="not-yet-submitted"
        ),
        pytest.param(
            EAGER,
            at(5, 7),
            [app("t202601010506", "COMPLETED")],
            500,
            "t202601010507",
            id="after-the-previous-finished",
        ),
    ],
)
def test_due(
    spec: Compaction,
    now: datetime.datetime,
    apps: list[dict[str, Any]],
    lag: int | None,
    slot: str | None,
) -> None:
    found = compaction.due(spec, now=now, created_at=CREATED, apps=apps, batches_since_snapshot=lag)
    assert (found.slot if found else None) == slot


def test_a_recorded_slot_is_not_run_again_after_its_application_expired() -> None:
    found = compaction.due(
        NIGHTLY, now=at(9, 0), created_at=CREATED, apps=[], batches_since_snapshot=None,
        recorded_slot="c202601010300",
    )  # fmt: skip
    assert found is None


def test_spark_application_shape() -> None:
    db = database_from(
        body(image="weaseldb-spark:1", schedule="*/5 * * * *", executors=3,
             executor={"cores": 2, "memory": "3g"}, driver={"coreRequest": "200m"}, gc=False)
    )  # fmt: skip
    assert db.compaction is not None
    obj = compaction.spark_application_for(db, db.compaction, "c202601010300")
    meta, spec = obj["metadata"], obj["spec"]
    assert (obj["apiVersion"], obj["kind"]) == ("sparkoperator.k8s.io/v1beta2", "SparkApplication")
    assert meta["name"] == "orders-compaction-c202601010300"
    assert meta["ownerReferences"][0]["uid"] == "u-1"
    assert meta["labels"][compaction.DATABASE_LABEL] == "orders"
    assert spec["type"] == "Python" and spec["image"] == "weaseldb-spark:1"
    assert spec["arguments"] == ["--store", db.storage.url]  # gc: false
    assert spec["executor"]["instances"] == 3
    assert (spec["executor"]["cores"], spec["executor"]["memory"]) == (2, "3g")
    assert "coreRequest" not in spec["executor"]  # the pod requests `cores`
    assert (spec["driver"]["cores"], spec["driver"]["coreRequest"]) == (1, "200m")
    conf = spec["sparkConf"]
    for role in ("driver", "executor"):
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert conf[f"spark.kubernetes.{role}.secretKeyRef.{key}"] == f"s3-keys:{key}"
    assert spec["mainApplicationFile"] == compaction.MAIN_APPLICATION_FILE


def test_long_database_names_give_valid_application_names() -> None:
    long = body(image="i", schedule="0 3 * * *")
    long["metadata"]["name"] = "x" * 63
    db = database_from(long)
    assert len(compaction.application_name(db, "c202601010300")) <= 63


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param(
            {"image": "i", "schedule": "61 * * * *"}, "spec.compaction.schedule", id="cron"
        ),
        pytest.param({"image": "i"}, "spec.compaction", id="no-trigger"),
        pytest.param({"schedule": "0 3 * * *"}, "spec.compaction.image", id="no-image"),
    ],
)
def test_bad_compaction_specs_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError, match=field):
        database_from(body(**spec))


def test_the_crd_allows_exactly_the_outcomes_the_operator_writes() -> None:
    crd = yaml.safe_load((REPO / "charts/weaseldb/crds/weaseldb.io_weaseldbs.yaml").read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    outcome = status["properties"]["lastCompaction"]["properties"]["outcome"]
    assert set(outcome["enum"]) == set(compaction.RunOutcome)
    states = {None: "Running", "COMPLETED": "Succeeded", "FAILED": "Failed"}
    # DeadlineExceeded is written by supervision.plan (tests/operator/test_compaction_plan.py).
    for state, written in states.items():
        assert supervision.last_compaction(app("x", state), None)["outcome"] == written
