"""The metric names a PromQL expression uses: what tests/unit/test_chart_files.py compares
with `weaseldb.core.metricnames.all_series()` (the one list of what the code exports, held
to the code by tests/unit/test_metric_names.py), so the chart's dashboard and alerts cannot
name a metric nobody exports (a typo, a rename)."""

from __future__ import annotations

import re

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_NAME = re.compile(r"\bweaseldb_[a-zA-Z0-9_]+")


def used(expression: str) -> set[str]:
    """The weaseldb_* metric names in a PromQL expression (string literals, such as label
    values, left out)."""
    return set(_NAME.findall(_STRING.sub('""', expression)))
