"""The one list of metric names (weaseldb/core/metricnames.py) is what the code defines:
every module that imports prometheus_client is imported, and the families the registry
then holds are compared with the list, name and type."""

from __future__ import annotations

import importlib
from pathlib import Path

from prometheus_client import REGISTRY

from weaseldb.core.metricnames import METRICS, all_series, series

REPO = Path(__file__).resolve().parents[2]
#: Source roots and the directory each one's modules are imported from.
ROOTS = {"weaseldb": REPO, "services": REPO, "operator/weaseldb_operator": REPO / "operator"}


def metric_modules() -> list[str]:
    found = []
    for root, base in ROOTS.items():
        for path in sorted((REPO / root).rglob("*.py")):
            if "from prometheus_client import" in path.read_text():
                found.append(".".join(path.relative_to(base).with_suffix("").parts))
    return found


def test_the_list_is_every_metric_the_code_defines() -> None:
    modules = metric_modules()
    assert "weaseldb_operator.metrics" in modules and "services.gateway.app" in modules
    for module in modules:
        importlib.import_module(module)
    defined = {
        family.name: family.type
        for family in REGISTRY.collect()
        if family.name.startswith("weaseldb_")
    }
    assert defined == {name: str(kind) for name, kind in METRICS.items()}


def test_series_are_the_names_a_query_uses() -> None:
    assert series("weaseldb_gateway_commits") == ("weaseldb_gateway_commits_total",)
    assert "weaseldb_gateway_commit_seconds_bucket" in all_series()
    assert "weaseldb_term" in all_series()
