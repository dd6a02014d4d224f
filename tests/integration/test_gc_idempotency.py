"""GC never shortens the idempotency promise (docs/architecture.md, "Idempotency and the
request-id index"), black box through the CLI and HTTP only (slow tier): commit R, ban B
with a status lookup, push the log past GC's floor (more than the 1,000 newest batches
and whole index segments), `weaseldb compact --gc`, then SIGKILL and restart the whole set
or one stage: a retry of R gets its original version, B never commits, and the status of
both is right. On the directory store and on MinIO."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.cluster import ProcessSet, ServiceSet, free_port_block
from tests.support.minio import MinioServer
from tests.support.waiting import wait_for
from weaseldb.core.types import Stage

pytestmark = pytest.mark.slow

#: Segments every 50 batches, merged eight to one: 400-batch segments, whole ones of which
#: GC's cut passes with PUSHED commits (one batch each: one client, nothing in flight).
SETTINGS = "[persister]\nindex_segment_batches = 50\n"
PUSHED = 1_800
VALUE = "dg=="


def commit(client: httpx.Client, request_id: str) -> httpx.Response:
    body = {
        "request_id": request_id,
        "operations": [{"type": "write", "key": "aw==", "value": VALUE}],
    }
    return client.post("/v1/commit", json=body)


def status(client: httpx.Client, request_id: str) -> dict[str, Any]:
    answer = client.get("/v1/status", params={"request_id": request_id})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def version(client: httpx.Client) -> int:
    return int(client.get("/v1/version").json()["version"])


R = "gc-retried-request-0001"
B = "gc-banned-request-00001"


def before_gc(url: str) -> int:
    """Commit R, ban B, push the log on; R's version."""
    with httpx.Client(base_url=url, timeout=30) as client:
        first = commit(client, R)
        assert first.json()["status"] == "committed", first.text
        assert status(client, B)["status"] == "not_committed"  # banned from now on
        for i in range(PUSHED):
            answer = commit(client, f"gc-push-{i:06d}-{'x' * 12}")
            assert answer.status_code == 200, answer.text
        return int(first.json()["version"])


def compact_and_collect(store_url: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "weaseldb_cli", "compact", "--store", store_url, "--gc"],
        capture_output=True, text=True, timeout=600, env=os.environ,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    summary = [line for line in result.stdout.splitlines() if line.startswith("gc: ")]
    assert summary and "log starts after version" in summary[-1], result.stdout
    return summary[-1]


def answered(client: httpx.Client, request_id: str) -> httpx.Response:
    """A commit's answer once a leader takes it (not_leader: nothing was applied while
    the set changes term after a restart)."""

    def taken() -> httpx.Response | None:
        answer = commit(client, request_id)
        leaderless = answer.status_code == 503 and answer.json()["error"] == "not_leader"
        return None if leaderless else answer

    return wait_for(taken, 60, f"a leader taking {request_id}", interval=0.2)


def assert_promise_holds(url: str, r_version: int) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        again = answered(client, R)
        newest = version(client)
        assert again.status_code == 200, again.text
        assert (again.json()["status"], again.json()["version"]) == ("committed", r_version)
        banned = answered(client, B)
        assert banned.status_code == 200, banned.text
        assert banned.json()["status"] == "not_committed", banned.text
        assert banned.json().get("reason") == "request_id_banned"
        assert version(client) == newest  # neither applied anything
        assert (status(client, R)["status"], status(client, R).get("version")) == (
            "committed",
            r_version,
        )
        assert status(client, B)["status"] == "not_committed"


@pytest.fixture(params=["dir", "minio"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "dir":
        return f"dir:{tmp_path / 'data'}"
    server: MinioServer = request.getfixturevalue("minio")
    return server.store_url(server.new_bucket())


@pytest.fixture
def settings(tmp_path: Path) -> list[str]:
    path = tmp_path / "settings.toml"
    path.write_text(SETTINGS)
    return ["--config", str(path)]


def test_whole_set_killed_after_gc(store_url: str, settings: list[str], run_dir: Path) -> None:
    cluster = ProcessSet(store_url, free_port_block(), run_dir, extra=settings).start()
    try:
        r_version = before_gc(cluster.url)
        summary = compact_and_collect(store_url)
    finally:
        cluster.kill()  # SIGKILL, every process at once
    restarted = ProcessSet(store_url, cluster.port, run_dir, extra=settings).start()
    try:
        assert_promise_holds(restarted.url, r_version)
    finally:
        restarted.kill()
    assert_segments_outlived_their_batches(summary)


def assert_segments_outlived_their_batches(summary: str) -> None:
    """GC did delete R's batch, and kept index segments whose batches it deleted."""
    found = re.search(r"deleted (\d+) batches, .* kept (\d+) index segments for", summary)
    assert found and int(found.group(1)) >= PUSHED - 1000 and int(found.group(2)) >= 1, summary


@pytest.fixture
def services(store_url: str, run_dir: Path) -> Iterator[ServiceSet]:
    started = ServiceSet(store_url, free_port_block(), run_dir, settings=SETTINGS).start()
    yield started
    started.kill()


def test_the_sequencer_killed_after_gc(store_url: str, services: ServiceSet) -> None:
    """The sequencer loses its window and its faded set; the persister opens a new term
    and hands it the window it rebuilds from the index."""
    r_version = before_gc(services.url)
    summary = compact_and_collect(store_url)
    services.kill_stage(Stage.SEQUENCER)  # SIGKILL
    services.start_stage(Stage.SEQUENCER)
    services.wait_ready(timeout=60)
    assert_promise_holds(services.url, r_version)
    assert_segments_outlived_their_batches(summary)
