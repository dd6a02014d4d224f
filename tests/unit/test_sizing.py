"""Memory limits derived from the idempotency cap (weaseldb/core/sizing.py): the figures agree
with the data structures, and the operator, the chart and the example use them."""

from pathlib import Path
from typing import Any

import pytest
import yaml
from weaseldb_operator.spec import database_from

from services.persister.answers import Answers
from services.persister.app import WORKER_BACKLOG_BYTES
from services.sequencer.window import RequestIdWindow
from weaseldb.core import config, requestids, sizing
from weaseldb.core.types import Stage

REPO = Path(__file__).resolve().parents[2]
DEFAULTS = config.build({}).idempotency


def mib(quantity: str) -> float:
    units = {"Mi": 1, "Gi": 1024, "Ki": 1 / 1024}
    return float(quantity[:-2]) * units[quantity[-2:]]


def test_the_figures_are_the_data_structures() -> None:
    assert sizing.WINDOW_BYTES_PER_ID == RequestIdWindow.BYTES_PER_ID
    assert sizing.OUTCOME_BYTES_PER_ID == Answers.BYTES_PER_ID
    assert sizing.BACKLOG_BYTES == WORKER_BACKLOG_BYTES
    assert requestids.ENTRY.itemsize == sizing.ENTRY_BYTES
    assert sizing.SEGMENTS_PER_TOP_MERGE == requestids.MERGE_FAN_IN**requestids.MAX_MERGE_LEVEL


def test_the_defaults_at_the_5m_cap() -> None:
    """The derivation written in examples/weaseldb-minio.yaml and the chart's values."""
    assert (DEFAULTS.request_id_max, DEFAULTS.request_id_memory) == (5_000_000, 1_000_000)
    two, one = config.build({"gateway": {"workers": 2}}), config.build({})
    assert sizing.memory_limit_mib(Stage.SEQUENCER, two) == 768
    assert sizing.memory_limit_mib(Stage.PERSISTER, two) == 1408
    assert sizing.memory_limit_mib(Stage.PERSISTER, one) == 1280


def _spec_limits(spec: dict[str, Any]) -> dict[Stage, float]:
    resources = spec.get("resources") or {}
    out = {}
    for stage in sizing.STAGES_WITH_IDS:
        given = resources.get(stage) or resources.get("default") or {}
        assert mib(given["requests"]["memory"]) == mib(given["limits"]["memory"])
        out[stage] = mib(given["limits"]["memory"])
    return out


@pytest.mark.parametrize(
    ("where", "spec"),
    [
        (
            "examples/weaseldb-minio.yaml",
            lambda text: next(d for d in yaml.safe_load_all(text) if d["kind"] == "WeaselDB")[
                "spec"
            ],
        ),
        ("charts/weaseldb/values.yaml", lambda text: yaml.safe_load(text)["example"]["spec"]),
    ],
)
def test_shipped_limits_fit_the_cap_with_margin(where: str, spec: Any) -> None:
    found = spec((REPO / where).read_text())
    workers = (found.get("gateway") or {}).get("workers", 1)
    cfg = config.build({"gateway": {"workers": workers}})
    for stage, limit in _spec_limits(found).items():
        assert limit == sizing.memory_limit_mib(stage, cfg), (where, stage)
        assert limit * 2**20 >= sizing.MARGIN * sizing.needed_bytes(stage, cfg)


def _database(resources: dict[str, Any]) -> Any:
    storage = {"bucket": "b", "prefix": "p", "endpoint": "http://minio:9000"}
    spec = {"storage": storage, "gateway": {"workers": 2}, "resources": resources}
    return database_from({"metadata": {"name": "db"}, "spec": spec})


def test_the_operator_derives_a_limit_only_where_none_is_given() -> None:
    db = _database({"default": {"requests": {"cpu": "100m"}}})
    assert db.container_resources(Stage.PERSISTER) == {
        "requests": {"memory": "1408Mi", "cpu": "100m"},
        "limits": {"memory": "1408Mi"},
    }
    assert db.container_resources(Stage.SEQUENCER)["limits"] == {"memory": "768Mi"}
    assert db.container_resources(Stage.RESOLVER) == {"requests": {"cpu": "100m"}}
    chosen = _database({"default": {"limits": {"memory": "3Gi"}}})
    assert chosen.container_resources(Stage.PERSISTER) == {"limits": {"memory": "3Gi"}}
