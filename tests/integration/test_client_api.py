"""Status lookups, the change stream, retention policies and snapshots against a real
four-process set on the directory store."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import snapshots
from tests.support.cluster import ProcessSet, configured_set
from tests.support.load import Load
from tests.support.sse import Subscription
from tests.support.waiting import wait_for
from weaseldb.core.history import committed_transactions
from weaseldb.runtime.stores.directory import DirectoryStore


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def commit(url: str, request_id: str | None = None, value: bytes = b"v") -> dict[str, Any]:
    body: dict[str, Any] = {
        "operations": [{"type": "write", "key": b64(b"k"), "value": b64(value)}]
    }
    if request_id is not None:
        body["request_id"] = request_id
    return dict(httpx.post(f"{url}/v1/commit", json=body, timeout=30).json())


def status(url: str, request_id: str, **params: Any) -> dict[str, Any]:
    answer = httpx.get(f"{url}/v1/status", params={"request_id": request_id, **params}, timeout=30)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def log_versions(data: Path) -> list[int]:
    return [t.version for t in asyncio.run(committed_transactions(DirectoryStore(data)))]


@pytest.fixture
def cluster(tmp_path: Path, run_dir: Path) -> Iterator[ProcessSet]:
    config = (
        "[gateway]\ncheckpoint_interval_s = 0.2\nkeepalive_interval_s = 0.5\n"
        "subscriber_buffer_bytes = 262144\n"
    )
    with configured_set(tmp_path, run_dir, config) as cluster:
        yield cluster


# Status


def test_status_of_a_racing_commit_is_committed_or_never_commits(cluster: ProcessSet) -> None:
    async def race(client: httpx.AsyncClient, i: int) -> tuple[dict[str, Any], dict[str, Any]]:
        request_id = f"race-{i:04d}-{uuid.uuid4().hex}"
        body = {
            "request_id": request_id,
            "operations": [{"type": "write", "key": b64(b"r%d" % i), "value": b64(b"x")}],
        }
        committed, looked_up = await asyncio.gather(
            client.post("/v1/commit", json=body),
            client.get("/v1/status", params={"request_id": request_id}),
        )
        again = (await client.post("/v1/commit", json=body)).json()
        return committed.json() | {"again": again}, looked_up.json()

    async def run() -> list[tuple[dict[str, Any], dict[str, Any]]]:
        async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as client:
            return await asyncio.gather(*(race(client, i) for i in range(200)))

    outcomes = {"committed": 0, "not_committed": 0}
    for answer, looked_up in asyncio.run(run()):
        outcomes[looked_up["status"]] += 1
        if looked_up["status"] == "committed":
            assert answer["status"] == "committed" and answer["version"] == looked_up["version"]
            assert answer["again"]["version"] == answer["version"]
        else:
            assert looked_up["status"] == "not_committed"
            assert answer["status"] == "not_committed", answer
            assert answer["reason"] == "request_id_banned"
            assert answer["again"]["status"] == "not_committed"  # and never afterwards
    assert sum(outcomes.values()) == 200


def test_status_answers(cluster: ProcessSet) -> None:
    done = commit(cluster.url, "status-known-" + uuid.uuid4().hex)
    assert status(cluster.url, done["request_id"]) == {
        "request_id": done["request_id"],
        "status": "committed",
        "version": done["version"],
        "leader_id": done["leader_id"],
    }
    assert status(cluster.url, "status-unknown-" + uuid.uuid4().hex)["status"] == "not_committed"
    # The unknown id is now banned: it can never commit.
    banned = "status-banned-" + uuid.uuid4().hex
    status(cluster.url, banned)
    assert commit(cluster.url, banned)["reason"] == "request_id_banned"
    bad = httpx.get(f"{cluster.url}/v1/status", params={"request_id": "x", "min_version": -1})
    assert bad.status_code == 400 and bad.json()["error"] == "bad_request"


# Subscribe


def more_commits(load: Load, count: int) -> bool:
    return len(load.acknowledged) >= count


def test_subscribers_at_different_points_see_one_gapless_sequence(
    cluster: ProcessSet, tmp_path: Path
) -> None:
    for i in range(20):
        commit(cluster.url, value=b"before-%d" % i)
    load = Load(cluster.url, concurrency=8).start()
    subs: list[Subscription] = []
    try:
        for after in (0, 5, 12):
            subs.append(Subscription(cluster.url, {"after": str(after)}).start())
            subs.append(
                Subscription(cluster.url, {"after": str(after), "durable": "false"}).start()
            )
            # The next pair joins at a later point: only after more commits went through.
            wait_for(partial(more_commits, load, len(load.acknowledged) + 20), what="20 more")
        subs.append(Subscription(cluster.url, {}).start())  # live only
        wait_for(lambda: len(load.acknowledged) >= 300, what="300 commits")
    finally:
        load.stop()
    final = httpx.get(f"{cluster.url}/v1/version").json()["version"]
    for sub in subs:

        def caught_up(s: Subscription = sub) -> bool:
            return bool(s.checkpoints) and s.checkpoints[-1] >= final

        wait_for(caught_up)
        sub.stop()
    log = log_versions(tmp_path / "data")
    for sub, after in zip(subs, (0, 0, 5, 5, 12, 12), strict=False):
        versions = sub.versions()
        assert versions == [v for v in log if v > after], f"after={after} {sub.params}"
        prevs = [t["prev_version"] for t in sub.transactions]
        assert prevs[1:] == versions[:-1], "prev_version chains every transaction"
    live = subs[-1].versions()
    assert live and live == [v for v in log if v > live[0] - 1]


def test_resume_with_last_event_id_and_checkpoints_and_keepalive(cluster: ProcessSet) -> None:
    first = [commit(cluster.url)["version"] for _ in range(5)]
    sub = Subscription(cluster.url, {"after": "0"}).start()
    wait_for(lambda: len(sub.versions()) == 5)
    sub.stop()
    more = [commit(cluster.url)["version"] for _ in range(3)]
    resumed = Subscription(cluster.url, headers={"Last-Event-ID": str(first[2])}).start()
    wait_for(lambda: len(resumed.versions()) == 5)
    assert resumed.versions() == first[3:] + more
    assert resumed.transactions[0]["prev_version"] == first[2]
    wait_for(lambda: len(resumed.checkpoints) >= 3 and bool(resumed.comments))
    assert resumed.checkpoints[-1] == more[-1]
    assert resumed.comments[0] == ": keepalive"
    resumed.stop()
    bad = httpx.get(f"{cluster.url}/v1/subscribe", params={"after": "x"})
    assert bad.status_code == 400 and bad.json()["error"] == "bad_request"


def test_slow_subscriber_is_cut_off_alone(cluster: ProcessSet) -> None:
    fast = Subscription(cluster.url, {}).start()
    with (
        httpx.Client(timeout=60) as client,
        client.stream("GET", f"{cluster.url}/v1/subscribe") as slow,
    ):
        assert slow.status_code == 200
        big = b"x" * 90_000
        versions = [commit(cluster.url, value=big)["version"] for _ in range(300)]  # ~36 MB
        wait_for(lambda: fast.versions() == versions, what="the fast subscriber")
        metrics = httpx.get(f"{cluster.url}/metrics").text
        assert "weaseldb_gateway_subscribers_dropped_total 1.0" in metrics
        with pytest.raises(httpx.HTTPError):  # the server dropped the connection
            for _ in slow.iter_bytes():
                pass
    fast.stop()


# Retention and snapshots


def test_retention_crud_and_validation(cluster: ProcessSet) -> None:
    url = f"{cluster.url}/v1/retention"
    assert httpx.get(f"{url}/").json() == {"policies": []}
    assert httpx.get(f"{url}/reader-1").status_code == 404
    put = httpx.put(f"{url}/reader-1", json={"version": 10})
    assert put.status_code == 200 and put.json()["version"] == 10 and put.json()["updated_at"]
    assert httpx.put(f"{url}/reader-1", json={"version": 12}).json()["version"] == 12
    assert httpx.put(f"{url}/reader-1", json={"version": 12}).status_code == 200
    back = httpx.put(f"{url}/reader-1", json={"version": 11})
    assert back.status_code == 409 and back.json()["error"] == "conflict"
    for bad_id, body in (
        ("reader-1", {"version": -1}),
        ("reader-1", {"version": 2**64}),
        ("reader-1", {"version": "1"}),
        ("reader-1", {"v": 1}),
        ("bad id!", {"version": 1}),
        ("x" * 129, {"version": 1}),
    ):
        answer = httpx.put(f"{url}/{bad_id}", json=body)
        assert answer.status_code == 400 and answer.json()["error"] == "bad_request", bad_id
    assert httpx.put(f"{url}/reader-2", content=b"{").status_code == 400
    httpx.put(f"{url}/reader-2", json={"version": 3})
    listed = httpx.get(f"{url}/").json()["policies"]
    assert [(p["policy_id"], p["version"]) for p in listed] == [("reader-1", 12), ("reader-2", 3)]
    assert httpx.delete(f"{url}/reader-2").status_code == 204
    assert httpx.delete(f"{url}/reader-2").status_code == 404
    assert httpx.get(f"{url}/reader-1").json()["policy_id"] == "reader-1"


def test_snapshots_lists_published_manifests_newest_first(
    cluster: ProcessSet, tmp_path: Path
) -> None:
    empty = httpx.get(f"{cluster.url}/v1/snapshots").json()
    assert empty["snapshots"] == []
    # Nothing collected yet: restorable from the empty state (version 0) on.
    assert (empty["restorable"]["oldest_version"], empty["restorable"]["oldest_time"]) == (0, None)
    store = DirectoryStore(tmp_path / "data")

    async def publish(version: int) -> None:
        published = snapshots.placeholder(version, keys=version * 10, size=version * 100)
        await store.put_if_absent(f"snapshots/{version:020d}/run/part-0.parquet", b"PAR1")
        await snapshots.publish(store, published)

    asyncio.run(publish(7))
    asyncio.run(publish(42))
    # A damaged manifest is not a snapshot anyone can trust: logged, not listed.
    asyncio.run(store.put_if_absent("snapshots/00000000000000000050.manifest", b"{}"))
    listed = httpx.get(f"{cluster.url}/v1/snapshots").json()["snapshots"]
    assert [s["version"] for s in listed] == [42, 7]
    assert set(listed[0]) == {"version", "batch", "location", "created_at", "keys", "bytes"}
