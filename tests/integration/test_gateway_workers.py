"""Several gateway worker processes share the client port; the persister must route each
answer to the worker that owns the request, and a scrape of the port answers for all of
them (weaseldb/runtime/workermetrics.py)."""

from __future__ import annotations

import asyncio
import base64
import uuid
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cluster import ProcessSet, assert_ring_in_use, free_port_block
from weaseldb.runtime.workermetrics import metrics_dir


async def commit_each_on_its_own_connection(
    url: str, count: int
) -> list[tuple[str, dict[str, Any]]]:
    """`count` commits, each on a fresh connection, which spreads them over both workers."""

    async def one(i: int) -> tuple[str, dict[str, Any]]:
        request_id = f"worker-test-{i:04d}-{uuid.uuid4().hex}"
        key = base64.b64encode(b"w%d" % i).decode()
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            answer = await client.post(
                "/v1/commit",
                json={
                    "request_id": request_id,
                    "operations": [{"type": "write", "key": key, "value": key}],
                },
            )
        return request_id, dict(answer.json())

    return await asyncio.gather(*(one(i) for i in range(count)))


def test_two_workers_answer_every_request_with_its_own_outcome(
    tmp_path: Path, run_dir: Path, ring: str
) -> None:
    """On shared memory too, where the sequencer reads one ring per worker and each worker
    one from the resolver and one from the persister."""
    cluster = ProcessSet(
        f"dir:{tmp_path / 'data'}", free_port_block(), run_dir, extra=["--workers", "2"]
    ).start()
    try:
        assert len([p for p in cluster.pids()]) == 5  # persister, resolver, sequencer, 2 gateways
        assert_ring_in_use(run_dir, ring)

        answers = asyncio.run(commit_each_on_its_own_connection(cluster.url, 300))
        assert all(a["request_id"] == r and a["status"] == "committed" for r, a in answers)
        versions = sorted(a["version"] for _, a in answers)
        assert len(set(versions)) == 300
        # /v1/version on any worker covers every acknowledged commit.
        for _ in range(10):
            assert httpx.get(f"{cluster.url}/v1/version").json()["version"] >= versions[-1]
        assert cluster.stop() == 0
    finally:
        if cluster.process and cluster.process.poll() is None:
            cluster.kill()


COMMITS = "weaseldb_gateway_commits"
LAG = "weaseldb_event_loop_lag_seconds"


def committed_in(text: str) -> float:
    for family in text_string_to_metric_families(text):
        if family.name == COMMITS:
            return sum(
                s.value
                for s in family.samples
                if s.name.endswith("_total") and s.labels.get("status") == "committed"
            )
    return 0.0


def committed_by(run_dir: Path, worker: str) -> float:
    """What one worker alone counted, read from its own file."""
    path = str(metrics_dir(run_dir) / f"counter_{worker}.db")
    families = MultiProcessCollector.merge([path])  # type: ignore[no-untyped-call]
    return float(
        sum(
            s.value
            for family in families
            if family.name == COMMITS
            for s in family.samples
            if s.name.endswith("_total") and s.labels.get("status") == "committed"
        )
    )


def test_a_scrape_of_two_workers_sums_both_workers_counters_exactly(
    tmp_path: Path, run_dir: Path
) -> None:
    """Whichever worker a scrape reaches, it answers for both: the exact total of commits,
    and each worker's own event-loop histogram (its `process` label)."""
    cluster = ProcessSet(
        f"dir:{tmp_path / 'data'}", free_port_block(), run_dir, extra=["--workers", "2"]
    ).start()
    try:
        count = 200
        answers = asyncio.run(commit_each_on_its_own_connection(cluster.url, count))
        assert all(a["status"] == "committed" for _, a in answers)
        for _ in range(10):  # a fresh connection each time: either worker answers
            text = httpx.get(f"{cluster.url}/metrics").text
            assert committed_in(text) == count
            processes = {
                s.labels["process"]
                for family in text_string_to_metric_families(text)
                if family.name == LAG
                for s in family.samples
            }
            assert {"gateway-0", "gateway-1"} <= processes
        each = [committed_by(run_dir, f"gateway-{w}") for w in range(2)]
        assert all(n > 0 for n in each) and sum(each) == count, each  # both took commits
        assert cluster.stop() == 0
    finally:
        if cluster.process and cluster.process.poll() is None:
            cluster.kill()
