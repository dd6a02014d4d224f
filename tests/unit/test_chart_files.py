"""The chart's generated and shipped files, without a cluster: values.schema.json is what
weaseldb_operator.chartschema generates; the Grafana dashboard loads and is well formed;
every metric its panels and the alert rules name is one the code exports (weaseldb.core.
metricnames, held to the code by tests/unit/test_metric_names.py); every alert has
its runbook in docs/operator.md. (`helm` with the schema and `promtool check rules` on the
alerts: tests/operator/test_chart.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from weaseldb_operator import chartschema

from tests.support import metric_names
from weaseldb.core.metricnames import all_series

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts/weaseldb"
DASHBOARD = CHART / "monitoring/dashboard.json"
ALERTS = CHART / "monitoring/alerts.yaml"
#: Grafana's 24-column grid.
GRID_COLUMNS = 24


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard_expressions() -> list[str]:
    board = dashboard()
    targets = [t["expr"] for panel in board["panels"] for t in panel["targets"]]
    variables = [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    return targets + variables


def test_values_schema_is_the_generated_one() -> None:
    committed = (CHART / "values.schema.json").read_text()
    assert committed == chartschema.render(CHART), (
        "regenerate: python -m weaseldb_operator.chartschema charts/weaseldb "
        "> charts/weaseldb/values.schema.json"
    )


def test_schema_closes_every_object_with_keys() -> None:
    """additionalProperties: false wherever values.yaml lists keys (outside the CRD's own
    spec schema and the free-form overrides): an unknown key is refused there."""

    def walk(node: dict[str, Any], path: str) -> None:
        if path == chartschema.CRD_SPEC or path in chartschema.OVERRIDES:
            return
        if "properties" in node:
            assert node.get("additionalProperties") is False, path
            for key, child in node["properties"].items():
                walk(child, f"{path}.{key}".lstrip("."))

    schema = json.loads((CHART / "values.schema.json").read_text())
    walk(schema, "")
    example = schema["properties"]["example"]["properties"]["spec"]
    assert "storage" in example["required"]  # the CRD's spec schema, not an inferred one


def test_the_crds_openapi_bounds_become_json_schema_ones() -> None:
    """Helm validates values.schema.json against draft-07, which refuses OpenAPI v3.0's
    boolean exclusiveMinimum (every `> 0` field of the CRD)."""
    openapi = {"type": "number", "minimum": 0, "exclusiveMinimum": True, "nullable": True}
    assert chartschema.json_schema({"properties": {"x": openapi}}) == {
        "properties": {"x": {"type": ["number", "null"], "exclusiveMinimum": 0}}
    }


def test_schema_generation_refuses_an_empty_map_without_an_override() -> None:
    with pytest.raises(ValueError, match=r"operator\.extra is an empty map"):
        chartschema.from_default({}, "operator.extra", {})


def test_dashboard_is_well_formed() -> None:
    board = dashboard()
    for key in ("uid", "title", "schemaVersion", "panels", "templating", "time"):
        assert key in board, key
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"] for v in board["templating"]["list"]}
    assert {"datasource", "namespace", "database"} <= variables
    for panel in board["panels"]:
        where = panel["title"]
        assert panel["type"] in {"timeseries", "stat"}, where
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= GRID_COLUMNS and grid["h"] > 0, where
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert ref_ids and len(ref_ids) == len(set(ref_ids)), where
        for target in panel["targets"]:
            # Every query is scoped to the selected database.
            assert 'namespace="$namespace", database="$database"' in target["expr"], where


def test_dashboard_covers_what_the_issue_asks_for() -> None:
    """Commit rate and p99, batch PUT latency, the in-flight window, subscriber and reader
    lag, the distance to the retention floor, failovers and switchovers: each has a panel
    on its metric."""
    used: set[str] = set()
    for expression in dashboard_expressions():
        used |= metric_names.used(expression)
    for metric in (
        "weaseldb_gateway_commits_total",
        "weaseldb_gateway_commit_seconds_bucket",
        "weaseldb_persister_put_seconds_bucket",
        "weaseldb_persister_puts_total",
        "weaseldb_persister_in_flight",
        "weaseldb_gateway_subscriber_lag_versions",
        "weaseldb_reader_applied_version",
        "weaseldb_retention_floor_version",
        "weaseldb_operator_failovers_total",
        "weaseldb_operator_switchovers_total",
        "weaseldb_term",
    ):
        assert metric in used, metric


def test_every_metric_in_the_dashboard_and_the_alerts_is_exported() -> None:
    exported = all_series()
    expressions = dashboard_expressions() + [rule["expr"] for rule in alert_rules()]
    for expression in expressions:
        used = metric_names.used(expression)
        assert used, f"no weaseldb metric in {expression!r}"
        assert used <= exported, f"not exported by the code: {used - exported}"


def test_the_metric_check_catches_a_name_nobody_exports() -> None:
    exported = all_series()
    typo = 'rate(weaseldb_gateway_commit_total{status="weaseldb_x"}[5m])'
    assert metric_names.used(typo) == {"weaseldb_gateway_commit_total"}
    assert not metric_names.used(typo) <= exported


def test_every_alert_has_a_runbook_section() -> None:
    operator_md = (ROOT / "docs/operator.md").read_text()
    headings = set(re.findall(r"^#### (\w+)$", operator_md, re.M))
    for rule in alert_rules():
        name = rule["alert"]
        assert name in headings, f"docs/operator.md has no '#### {name}' runbook"
        assert rule["annotations"]["runbook"] == f"docs/operator.md#{name.lower()}"
        assert rule["labels"]["severity"] in {"warning", "critical"}
