"""The Prometheus metric names the code exports, read from its source, and the metric names
a PromQL expression uses: what tests/unit/test_chart_files.py compares so the chart's
dashboard and alerts cannot name a metric nobody exports (a typo, a rename)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

#: prometheus_client's metric classes and the series names each exports.
SUFFIXES = {
    "Counter": ("_total", "_created"),
    "Gauge": ("",),
    "Histogram": ("_bucket", "_sum", "_count", "_created"),
    "Summary": ("_sum", "_count", "_created"),
    "Info": ("_info",),
    "Enum": ("",),
}
#: Where metrics are defined: the shared core, the stages, the operator.
SOURCES = ("weaseldb", "services", "operator/weaseldb_operator")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_NAME = re.compile(r"\bweaseldb_[a-zA-Z0-9_]+")


def defined(root: Path) -> dict[str, str]:
    """Metric name -> class, for every `Counter("name", ...)` (and Gauge, Histogram, ...)
    whose name is a literal, in the code under `root`."""
    found: dict[str, str] = {}
    for source in SOURCES:
        for path in sorted((root / source).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                kind = _metric_class(node)
                if kind and isinstance(node, ast.Call):
                    first = node.args[0] if node.args else None
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        found[first.value] = kind
    return found


def _metric_class(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Name):
        name = func.id
    elif isinstance(func, ast.Attribute):
        name = func.attr
    else:
        return None
    return name if name in SUFFIXES else None


def exported(root: Path) -> set[str]:
    """Every series name a scrape shows, e.g. `weaseldb_gateway_commit_seconds_bucket`
    (prometheus_client names a counter's series NAME_total whether or not NAME ends so)."""
    series: set[str] = set()
    for name, kind in defined(root).items():
        base = name.removesuffix("_total") if kind == "Counter" else name
        series.update(base + suffix for suffix in SUFFIXES[kind])
    return series


def used(expression: str) -> set[str]:
    """The weaseldb_* metric names in a PromQL expression (string literals, such as label
    values, left out)."""
    return set(_NAME.findall(_STRING.sub('""', expression)))
