"""Idempotent retries across restarts and leader changes, the window's edge, status
lookups served by the request-id index, and the two 503s, on real process sets."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cluster import ProcessSet, ServiceSet, free_port_block, metric, short_run_dir
from tests.support.waiting import wait_for
from weaseldb.core.history import committed_transactions
from weaseldb.core.types import Stage
from weaseldb.runtime.stores.directory import DirectoryStore

pytestmark = pytest.mark.slow
KEY = base64.b64encode(b"k").decode()


def blind_write(request_id: str) -> dict[str, Any]:
    return {"request_id": request_id, "operations": [{"type": "write", "key": KEY, "value": KEY}]}


def post(url: str, request_id: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/commit", json=blind_write(request_id), timeout=30)


def ids(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i:04d}-{'x' * 16}" for i in range(count)]


def log_of(data: Path) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for tx in asyncio.run(committed_transactions(DirectoryStore(data))):
        found.setdefault(tx.request_id, []).append(tx.version)
    return found


def settings_file(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "settings.toml"
    path.write_text(text)
    return ["--config", str(path)]


def test_retries_get_their_original_outcome_after_a_crash_and_a_leader_change(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    first = ProcessSet(f"dir:{data}", free_port_block(), short_run_dir()).start()
    before = {r: post(first.url, r).json()["version"] for r in ids("before-crash", 20)}
    first.kill()  # SIGKILL: the last stretch of batches is not in any index segment yet

    second = ProcessSet(f"dir:{data}", first.port, first.run_dir).start()
    after_crash = {r: post(second.url, r).json() for r in before}
    assert {r: a["version"] for r, a in after_crash.items()} == before
    assert all(a["status"] == "committed" for a in after_crash.values())
    during = {r: post(second.url, r).json()["version"] for r in ids("second-leader", 10)}

    # A third set claims the next term while the second still runs: a leader change.
    third = ProcessSet(f"dir:{data}", free_port_block(), short_run_dir()).start()
    assert second.process is not None and second.process.wait(30) != 0  # deposed
    try:
        for request_id, version in {**before, **during}.items():
            answer = post(third.url, request_id).json()
            assert (answer["status"], answer["version"]) == ("committed", version), request_id
        assert third.stop() == 0
    finally:
        if third.process and third.process.poll() is None:
            third.kill()
    log = log_of(data)
    assert all(log[r] == [v] for r, v in {**before, **during}.items())


def test_a_retry_past_the_window_is_commit_unknown_and_never_applied_twice(
    tmp_path: Path, run_dir: Path
) -> None:
    data = tmp_path / "data"
    extra = settings_file(
        tmp_path, "[idempotency]\nrequest_id_memory = 5\nrequest_id_window_s = 0\n"
    )
    cluster = ProcessSet(f"dir:{data}", free_port_block(), run_dir, extra=extra).start()
    old, *newer = ids("window", 9)
    assert post(cluster.url, old).json()["status"] == "committed"
    for request_id in newer:  # push `old` out of the five ids remembered exactly
        post(cluster.url, request_id)
    recent = post(cluster.url, newer[-1]).json()
    assert recent["status"] == "committed"  # still in the window: the original answer

    def past_the_window(url: str) -> None:
        answer = post(url, old)
        assert answer.status_code == 503, answer.text
        body = answer.json()
        assert (body["error"], body["request_id"]) == ("commit_unknown", old)
        assert answer.headers["retry-after"]

    past_the_window(cluster.url)
    assert cluster.stop() == 0
    restarted = ProcessSet(f"dir:{data}", cluster.port, run_dir, extra=extra).start()
    try:
        past_the_window(restarted.url)  # the faded set is loaded from the index too
        status = httpx.get(f"{restarted.url}/v1/status", params={"request_id": old}).json()
        assert status["status"] == "committed"  # and /v1/status covers all of history
    finally:
        assert restarted.stop() == 0
    assert len(log_of(data)[old]) == 1


def store_requests(url: str) -> dict[tuple[str, str], float]:
    text = httpx.get(f"{url}/metrics").text
    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "weaseldb_gateway_store_requests":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    counts[(sample.labels["op"], sample.labels["area"])] = sample.value
    return counts


def test_status_lookups_read_the_index_not_the_log(tmp_path: Path, run_dir: Path) -> None:
    """Right after a restart (nothing in memory), with many index segments: a lookup reads
    segment buckets, never a batch; bounded by min_version it reads one or two."""
    data = tmp_path / "data"
    extra = settings_file(tmp_path, "[persister]\nindex_segment_batches = 3\n")
    cluster = ProcessSet(f"dir:{data}", free_port_block(), run_dir, extra=extra).start()
    committed = {r: post(cluster.url, r).json()["version"] for r in ids("indexed", 60)}
    assert cluster.stop() == 0
    segments = len(os.listdir(data / "requestids"))
    assert 2 <= segments < 60 // 3  # written every 3 batches, then merged eight to one

    restarted = ProcessSet(f"dir:{data}", cluster.port, run_dir, extra=extra).start()
    try:
        first = next(iter(committed))

        def lookup(**params: Any) -> tuple[dict[str, Any], dict[tuple[str, str], float]]:
            before = store_requests(restarted.url)
            answer = httpx.get(
                f"{restarted.url}/v1/status", params={"request_id": first, **params}
            ).json()
            after = store_requests(restarted.url)
            return answer, {
                k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)
            }

        # The new term indexed its own opening: count the segments as the lookup finds them.
        segments = len(os.listdir(data / "requestids"))
        answer, reads = lookup()
        assert (answer["status"], answer["version"]) == ("committed", committed[first])
        assert reads.get(("get", "batches/"), 0) == reads.get(("list", "batches/"), 0) == 0
        assert reads[("get", "requestids/")] <= 2 * segments + 1

        answer, reads = lookup(min_version=committed[first])  # headers now cached
        assert answer["version"] == committed[first]
        assert reads[("get", "requestids/")] <= 2
        missing, reads = lookup(min_version=max(committed.values()))
        assert missing["status"] == "not_committed"  # it committed below the range asked
        assert reads[("get", "requestids/")] <= 2
    finally:
        assert restarted.stop() == 0


def test_nothing_applied_is_not_leader_and_maybe_applied_is_commit_unknown(
    tmp_path: Path, run_dir: Path
) -> None:
    services = ServiceSet(
        f"dir:{tmp_path / 'data'}",
        free_port_block(),
        run_dir,
        settings="[gateway]\ncommit_timeout_s = 120\n",
    ).start()
    try:
        assert post(services.url, ids("warm", 1)[0]).status_code == 200
        persister = services.processes[Stage.PERSISTER]
        os.kill(persister.pid, signal.SIGSTOP)  # commits now wait in the ring

        async def in_flight() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=60) as client:
                sends = [
                    client.post(f"{services.url}/v1/commit", json=blind_write(r))
                    for r in ids("in-flight", 5)
                ]
                return list(await asyncio.gather(*sends))

        resolver = services.stage_url(Stage.RESOLVER)
        passed = metric(resolver, "weaseldb_stage_entries_total", '{stage="resolver"}') + 5

        def past_the_resolver() -> bool:
            entries = metric(resolver, "weaseldb_stage_entries_total", '{stage="resolver"}')
            return entries >= passed

        waiting = asyncio.new_event_loop()
        pending = waiting.create_task(in_flight())
        # Until the five passed the resolver, the persister's neighbour upstream: they wait
        # in the ring for it (no other entries flow here: no subscriber, no new term).
        waiting.run_until_complete(
            asyncio.to_thread(wait_for, past_the_resolver, 30, "five commits past the resolver")
        )
        os.kill(persister.pid, signal.SIGKILL)
        persister.wait(10)
        started = time.monotonic()
        services.start_stage(Stage.PERSISTER)
        answers = waiting.run_until_complete(pending)
        waiting.close()
        # Lost with the persister: the new term's TermJoined answers them long before the
        # 120 s commit timeout.
        assert time.monotonic() - started < 60
        for answer in answers:
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"] == "commit_unknown"
            assert answer.json()["request_id"].startswith("in-flight-")

        services.kill_stage(Stage.PERSISTER)
        wait_for(lambda: httpx.get(f"{services.url}/readyz").status_code == 503, timeout=30)
        refused = post(services.url, ids("refused", 1)[0])
        assert refused.status_code == 503
        assert refused.json()["error"] == "not_leader"
        assert refused.json()["request_id"] == ids("refused", 1)[0]
    finally:
        services.kill()
