"""Several gateway worker processes share the client port; the persister must route each
answer to the worker that owns the request."""

from __future__ import annotations

import asyncio
import base64
import uuid
from pathlib import Path
from typing import Any

import httpx

from tests.support.cluster import ProcessSet, free_port_block


def test_two_workers_answer_every_request_with_its_own_outcome(
    tmp_path: Path, run_dir: Path
) -> None:
    cluster = ProcessSet(
        f"dir:{tmp_path / 'data'}", free_port_block(), run_dir, extra=["--workers", "2"]
    ).start()
    try:
        assert len([p for p in cluster.pids()]) == 5  # persister, resolver, sequencer, 2 gateways

        async def load() -> list[tuple[str, dict[str, Any]]]:
            # A fresh connection per request spreads requests over both workers.
            async def one(i: int) -> tuple[str, dict[str, Any]]:
                request_id = f"worker-test-{i:04d}-{uuid.uuid4().hex}"
                key = base64.b64encode(b"w%d" % i).decode()
                async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
                    answer = await client.post(
                        "/v1/commit",
                        json={
                            "request_id": request_id,
                            "operations": [{"type": "write", "key": key, "value": key}],
                        },
                    )
                return request_id, dict(answer.json())

            return await asyncio.gather(*(one(i) for i in range(300)))

        answers = asyncio.run(load())
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
