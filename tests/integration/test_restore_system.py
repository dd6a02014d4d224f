"""Point-in-time restore end to end (slow tier): commits through the API, `weaseldb
restore --to-version V` (its own Spark local[*]) from the stopped database's prefix into an
empty one, the restored snapshot equals the change stream folded up to V, then `weaseldb up`
on the restored prefix commits on top (versions continue above V), streams from V, and
answers 410 naming snapshot V below it. On the directory store and on MinIO."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.integration.test_compaction_system import commit_many, published, subscribed_state
from tests.support.cluster import ProcessSet, free_port_block, short_run_dir
from tests.support.minio import MinioServer
from tests.support.sse import Subscription
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow
EARLY_ID = "early-before-the-restore-0001"
EARLY = {"request_id": EARLY_ID, "operations": [{"type": "write", "key": "ZQ==", "value": "ZQ=="}]}


@pytest.fixture(params=["dir", "minio"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    if request.param == "dir":
        return f"dir:{tmp_path / 'source'}", f"dir:{tmp_path / 'restored'}"
    server: MinioServer = request.getfixturevalue("minio")
    return server.store_url(server.new_bucket()), server.store_url(server.new_bucket(), "copy")


def test_restore_then_commit_on_top(stores: tuple[str, str]) -> None:
    source, into = stores
    database = ProcessSet(source, free_port_block(), short_run_dir()).start()
    try:
        early = httpx.post(f"{database.url}/v1/commit", json=EARLY, timeout=30).json()
        assert early["status"] == "committed"
        last = commit_many(database.url, 60, seed=11)
        version = last // 2
        expected = subscribed_state(database.url, version)
    finally:
        assert database.stop() == 0, database.log()

    result = subprocess.run(
        [sys.executable, "-m", "weaseldb_cli", "restore", "--from", source, "--into", into,
         "--to-version", str(version), "--master", "local[2]"],
        capture_output=True, text=True, timeout=600, env=os.environ,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    snapshot, state = published(into)
    summary = result.stdout.strip().splitlines()[-1]
    assert summary == f"restored version {version} ({len(state)} keys) into {into.split('?')[0]}"
    assert snapshot.version == version and state == expected

    restored = ProcessSet(into, free_port_block(), short_run_dir()).start()
    try:
        sub = Subscription(restored.url, {"after": str(version)}).start()
        newer = commit_many(restored.url, 5, seed=12)
        assert newer == version + 5  # versions continue above V
        wait_for(lambda: sub.versions() and sub.versions()[-1] == newer, 60, "stream from V")
        sub.stop()
        assert sub.versions() == list(range(version + 1, newer + 1))
        gone = httpx.get(f"{restored.url}/v1/subscribe", params={"after": str(version - 1)})
        assert gone.status_code == 410
        assert gone.json()["snapshot"]["version"] == version
        listed = httpx.get(f"{restored.url}/v1/snapshots").json()["snapshots"]
        assert [s["version"] for s in listed] == [version]
        # Committed before V in the source: not in the restored log, never `not_committed`.
        status = httpx.get(f"{restored.url}/v1/status", params={"request_id": EARLY_ID}).json()
        assert status["status"] == "log_truncated", status
    finally:
        assert restored.stop() == 0, restored.log()
