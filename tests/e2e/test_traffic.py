"""Scenario 2: commits, status lookups and a live SSE subscription from the host, through
the gateway Service (NodePort published by kind on 127.0.0.1, kube-proxy, the leader
pod); the subscriber sees every acknowledged commit, and the batches are in MinIO."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import httpx

from tests.e2e import KIND_TIER
from tests.e2e.databases import answers, example_database, expose_gateway, wait_serving
from tests.support.kind import KindCluster
from tests.support.load import Load
from tests.support.sse import Subscription

pytestmark = KIND_TIER

NAME = "ledger"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def commit(url: str, request_id: str, key: bytes) -> dict[str, Any]:
    body = {
        "request_id": request_id,
        "operations": [{"type": "write", "key": b64(key), "value": b64(b"value of " + key)}],
    }
    answer = httpx.post(f"{url}/v1/commit", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def status(url: str, request_id: str) -> dict[str, Any]:
    answer = httpx.get(f"{url}/v1/status", params={"request_id": request_id}, timeout=30)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_commits_status_and_live_subscription_through_the_gateway_service(
    weaseldb_operator: KindCluster, images: dict[str, str], namespace: str
) -> None:
    cluster = weaseldb_operator
    prefix = f"e2e/{namespace}"
    spec = {"replicas": 1, "gateway": {"serviceType": "NodePort", "workers": 2}}
    cluster.apply(example_database(NAME, prefix, images["weaseldb"], **spec), namespace)
    wait_serving(cluster, namespace, NAME, replicas=1)
    url = expose_gateway(cluster, namespace, NAME)
    cluster.wait_for(lambda: answers(url), 60, f"the gateway at {url}", namespace)

    live = Subscription(url, {}).start()
    assert live.status == 200

    acknowledged: dict[str, int] = {}
    for i in range(20):
        request_id = f"e2e-{i}-{uuid.uuid4().hex}"
        answer = commit(url, request_id, b"key-%d" % i)
        assert answer["status"] == "committed", answer
        acknowledged[request_id] = answer["version"]
    load = Load(url, concurrency=8).start()
    try:
        cluster.wait_for(lambda: len(load.acknowledged) >= 200, 120, "200 concurrent commits")
    finally:
        load.stop()
    acknowledged.update(load.acknowledged)

    # Status lookups answer what the commits answered; an unknown id is not committed.
    for request_id, version in list(acknowledged.items())[::10]:
        assert status(url, request_id)["status"] == "committed"
        assert status(url, request_id)["version"] == version
    assert status(url, f"never-sent-{uuid.uuid4().hex}")["status"] == "not_committed"

    final = httpx.get(f"{url}/v1/version", timeout=10).json()["version"]
    assert final >= max(acknowledged.values())
    cluster.wait_for(
        lambda: bool(live.versions()) and live.versions()[-1] >= max(acknowledged.values()),
        60,
        "the subscriber catching up",
    )
    live.stop()
    seen = live.versions()
    assert set(acknowledged.values()) <= set(seen), "every acknowledged commit is streamed"
    assert seen == sorted(set(seen)), "versions stream in order, once each"
    prevs = [t["prev_version"] for t in live.transactions]
    assert prevs[1:] == seen[:-1], "prev_version chains the stream without gaps"

    # Durable in the in-cluster MinIO (read from the host through its NodePort).
    keys = cluster.minio_keys(prefix)
    assert any("/terms/" in f"/{k}" for k in keys), keys[:20]
    assert len(keys) > 1
