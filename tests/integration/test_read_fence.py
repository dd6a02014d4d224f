"""Reads fenced like writes (api.md, "GET /v1/version"): a leader cut off from news of its
successor (its term watch slowed to 30 s) never answers `/v1/version`, or a commit's
`leader_id` check, below a version the successor already acknowledged (slow tier)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.test_client_api import commit
from tests.support.cluster import ProcessSet, free_port_block, short_run_dir

pytestmark = pytest.mark.slow
WRITE = [{"type": "write", "key": base64.b64encode(b"k").decode(), "value": ""}]


def not_behind(response: httpx.Response, acknowledged: int, *fenced: int) -> None:
    """503 not_leader, or an answer carrying a version at least `acknowledged`."""
    body: dict[str, Any] = response.json()
    if response.status_code == 503:
        assert body["error"] == "not_leader", body
        return
    assert response.status_code in fenced, (response.status_code, body)
    assert body["version"] >= acknowledged, body


def test_a_deposed_leader_never_answers_behind_its_successor(tmp_path: Path) -> None:
    data = tmp_path / "data"
    slow_watch = tmp_path / "old.toml"
    slow_watch.write_text("[persister]\nterm_watch_interval_s = 30\n")
    old = ProcessSet(
        f"dir:{data}", free_port_block(), short_run_dir(), ["--config", str(slow_watch)]
    ).start()
    try:
        for _ in range(5):
            commit(old.url)
        old_leader = httpx.get(f"{old.url}/v1/version").json()["leader_id"]
        new = ProcessSet(f"dir:{data}", free_port_block(), short_run_dir()).start()
        try:
            acknowledged = max(commit(new.url)["version"] for _ in range(20))
            new_leader = httpx.get(f"{new.url}/v1/version").json()["leader_id"]
            for _ in range(20):
                not_behind(httpx.get(f"{old.url}/v1/version"), acknowledged, 200)
            for leader_id in (new_leader, old_leader):
                body = {"leader_id": leader_id, "operations": WRITE}
                answer = httpx.post(f"{old.url}/v1/commit", json=body, timeout=30)
                not_behind(answer, acknowledged, 200, 409)
            assert httpx.get(f"{new.url}/v1/version").json()["version"] == acknowledged
        finally:
            assert new.stop() == 0, new.log()
    finally:
        old.stop()
