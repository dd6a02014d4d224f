"""Scenario 2: commits, status lookups and a live SSE subscription from the host, through
the gateway Service (NodePort published by kind on 127.0.0.1, kube-proxy, the leader
pod); the subscriber sees every acknowledged commit, and the batches are in MinIO.

This database runs the shared-memory ring (`spec.pipeline.ring: shm`), the other
scenarios the default: its rings live in the pod's memory-backed emptyDir, and a
container SIGKILLed and restarted by the kubelet rejoins them."""

from __future__ import annotations

import base64
import collections
import uuid
from typing import Any

import httpx

from tests.e2e import KIND_TIER
from tests.e2e.databases import (
    answers,
    example_database,
    expose_gateway,
    pods_of,
    wait_serving,
)
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
    spec = {
        "replicas": 1,
        "gateway": {"serviceType": "NodePort", "workers": 2},
        "pipeline": {"maxInFlightRequests": 50, "batchTimeoutMs": 1, "ring": "shm"},
    }
    cluster.apply(example_database(NAME, prefix, images["weaseldb"], **spec), namespace)
    wait_serving(cluster, namespace, NAME, replicas=1)
    (pod,) = pods_of(cluster, namespace, NAME)
    before = ring_files(cluster, namespace, pod)
    assert inboxes(before) == RINGS_PER_INBOX, before
    (run,) = [v for v in pod["spec"]["volumes"] if v["name"] == "run"]
    assert run["emptyDir"] == {"medium": "Memory"}
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
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

    # The resolver SIGKILLed: the kubelet restarts it, it makes new rings (a new
    # generation) into the persister and the workers, the persister opens a new term, the
    # consumers delete the old rings once drained, and commits go on.
    cluster.kill_container(pod, "resolver")
    cluster.wait_for(
        lambda: commits(url, "after-kill"), 120, "a commit after the resolver's restart"
    )

    def rejoined() -> list[str] | None:
        after = ring_files(cluster, namespace, pod)
        old = [f for f in before if f.startswith("persister.sock.")]
        fresh = not set(old) & set(after)
        return after if fresh and inboxes(after) == RINGS_PER_INBOX else None

    cluster.wait_for(rejoined, 60, "the resolver's new rings, its old ones deleted", namespace)


#: Rings per inbox with two gateway workers: one per sender.
RINGS_PER_INBOX = {
    "sequencer": 2,  # from each gateway worker
    "resolver": 1,  # from the sequencer
    "persister": 1,  # from the resolver
    "gateway-0": 2,  # from the resolver (accepted commits) and the persister (answers)
    "gateway-1": 2,
}


def inboxes(files: list[str]) -> dict[str, int]:
    """Ring files per inbox: `persister.sock.<generation>.ring` is one into the persister."""
    return dict(collections.Counter(f.split(".sock.")[0] for f in files))


def ring_files(cluster: KindCluster, namespace: str, pod: dict[str, Any]) -> list[str]:
    """The ring files in the pod's shared run dir, seen from the persister's container."""
    listing = cluster.kubectl(
        "-n", namespace, "exec", pod["metadata"]["name"], "-c", "persister", "--",
        "python", "-c", "import os; print(*sorted(os.listdir('/run/weasel')))",
    )  # fmt: skip
    return [name for name in listing.split() if name.endswith(".ring")]


def commits(url: str, prefix: str) -> bool:
    try:
        answer = commit(url, f"{prefix}-{uuid.uuid4().hex}", b"after")
    except (httpx.HTTPError, AssertionError):
        return False  # the new term is being opened
    return bool(answer["status"] == "committed")
