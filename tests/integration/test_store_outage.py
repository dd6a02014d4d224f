"""The object store goes away: every read path (retention, snapshots, subscribe, status)
answers 503 with Retry-After and a JSON body, never a 500 or a traceback."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest

from tests.support.cluster import ProcessSet, free_port_block
from tests.support.minio import MinioServer

pytestmark = pytest.mark.slow
KEY = base64.b64encode(b"k").decode()


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"]
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"] in ("store_unavailable", "not_leader")


def test_store_outage_answers_503_with_retry_after(minio: MinioServer, run_dir: Path) -> None:
    own = MinioServer(minio.binary).start()  # a server of our own, to stop
    try:
        cluster = ProcessSet(own.store_url(own.new_bucket()), free_port_block(), run_dir).start()
        url = cluster.url
        committed = httpx.post(f"{url}/v1/commit", json={"operations": [
            {"type": "write", "key": KEY, "value": KEY}
        ]}).json()  # fmt: skip
        assert committed["status"] == "committed"
        assert httpx.put(f"{url}/v1/retention/kept", json={"version": 1}).status_code == 200
        own.stop()

        assert_unavailable(httpx.get(f"{url}/v1/retention/kept"))
        assert_unavailable(httpx.get(f"{url}/v1/retention/"))
        assert_unavailable(httpx.put(f"{url}/v1/retention/new", json={"version": 3}))
        assert_unavailable(httpx.delete(f"{url}/v1/retention/kept"))
        assert_unavailable(httpx.get(f"{url}/v1/snapshots"))
        assert_unavailable(httpx.get(f"{url}/v1/subscribe", params={"after": "0"}))
        # Writing the lookup's ban fails too: the leader gives up and says so.
        assert_unavailable(
            httpx.get(
                f"{url}/v1/status", params={"request_id": committed["request_id"]}, timeout=60
            )
        )
        assert cluster.process is not None
        cluster.process.wait(60)
        assert cluster.log_path is not None
        log = cluster.log_path.read_text(errors="replace")
        assert "Traceback" not in log, log[-5000:]
    finally:
        own.destroy()
