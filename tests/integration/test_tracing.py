"""One commit is one trace across the four processes (OpenTelemetry, JSON-lines exporter)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.support.cluster import ProcessSet, free_port_block

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


def test_a_commit_is_one_trace_across_the_ring(
    tmp_path: Path, run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEASELDB_TRACE_FILE", str(tmp_path / "trace-{service}.jsonl"))
    cluster = ProcessSet(f"dir:{tmp_path / 'data'}", free_port_block(), run_dir).start()
    try:
        traced = httpx.post(
            f"{cluster.url}/v1/commit",
            json={"operations": [{"type": "write", "key": "YQ==", "value": "YQ=="}]},
            headers={"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"},
        ).json()
        untraced = httpx.post(
            f"{cluster.url}/v1/commit",
            json={"operations": [{"type": "write", "key": "Yg==", "value": "Yg=="}]},
        ).json()
    finally:
        assert cluster.stop() == 0  # a clean stop flushes every exporter

    spans = [
        json.loads(line)
        for path in tmp_path.glob("trace-*.jsonl")
        for line in path.read_text().splitlines()
    ]
    ours = [s for s in spans if s["trace_id"] == TRACE_ID]
    by_name = {s["name"]: s for s in ours}
    assert set(by_name) == {"commit", "sequencer", "resolver", "persister"}
    commit = by_name["commit"]
    assert commit["parent_id"] == CLIENT_SPAN
    assert commit["attributes"]["weaseldb.version"] == traced["version"]
    for stage in ("sequencer", "resolver", "persister"):
        assert by_name[stage]["parent_id"] == commit["span_id"], stage
        assert by_name[stage]["attributes"]["weaseldb.version"] == traced["version"]
        assert commit["start_ns"] <= by_name[stage]["start_ns"] <= commit["end_ns"], stage
    services = {s["service"] for s in ours}
    assert services == {
        "weaseldb-gateway-0",
        "weaseldb-sequencer",
        "weaseldb-resolver",
        "weaseldb-persister",
    }
    # A commit without a traceparent gets a trace of its own, also across the ring.
    other = {
        s["trace_id"]
        for s in spans
        if s["attributes"].get("weaseldb.version") == untraced["version"]
    }
    assert len(other) == 1 and TRACE_ID not in other
