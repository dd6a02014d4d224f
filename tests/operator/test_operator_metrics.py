"""The operator's own metrics (weaseldb_operator/metrics.py), served by the `operator`
fixture's process as the chart has it serve them (WEASELDB_OPERATOR_METRICS)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cluster import metric
from tests.support.waiting import wait_for
from weaseldb.core.metricnames import METRICS

pytestmark = pytest.mark.slow

#: Every family the operator defines; labelled ones are listed before their first sample.
FAMILIES = {name for name in METRICS if name.startswith("weaseldb_operator_")}


def test_the_operators_metrics_endpoint_answers(operator: Path, operator_metrics: str) -> None:
    passes = "weaseldb_operator_observe_pass_seconds_count"
    wait_for(
        lambda: metric(operator_metrics, passes) > 0,
        timeout=60,
        what="a leadership pass counted",
        retry_on=(httpx.HTTPError,),
    )
    text = httpx.get(f"{operator_metrics}/metrics").text
    assert {family.name for family in text_string_to_metric_families(text)} >= FAMILIES
