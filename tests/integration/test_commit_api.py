"""The commit API against a real four-process set on the directory store."""

from __future__ import annotations

import asyncio
import base64
import uuid
from typing import Any

import httpx
import pytest

from tests.support.cluster import ProcessSet, metric


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write(key: bytes, value: bytes = b"v") -> dict[str, str]:
    return {"type": "write", "key": b64(key), "value": b64(value)}


def commit(url: str, body: dict[str, Any] | bytes, **kw: Any) -> httpx.Response:
    if isinstance(body, bytes):
        return httpx.post(
            f"{url}/v1/commit", content=body, headers={"content-type": "application/json"}, **kw
        )
    return httpx.post(f"{url}/v1/commit", json=body, **kw)


def version(url: str) -> int:
    return int(httpx.get(f"{url}/v1/version").json()["version"])


def test_commit_then_version_and_conflict(weasel: ProcessSet) -> None:
    first = commit(weasel.url, {"operations": [write(b"k1", b"one")]}).json()
    assert first["status"] == "committed" and first["version"] > 0
    assert len(first["request_id"]) == 32 and first["leader_id"]
    current = httpx.get(f"{weasel.url}/v1/version").json()
    assert current["version"] >= first["version"]
    assert current["leader_id"] == first["leader_id"]

    stale = first["version"] - 1
    rejected = commit(
        weasel.url,
        {
            "read_version": stale,
            "preconditions": [
                {"type": "point_read", "key": b64(b"other")},
                {"type": "point_read", "key": b64(b"k1")},
                {"type": "range_read", "begin": b64(b"k"), "end": b64(b"l")},
            ],
            "operations": [write(b"k1", b"two")],
        },
    ).json()
    assert rejected["status"] == "not_committed"
    assert rejected["conflicts"] == [
        {"index": 1, "reason": "conflict"},
        {"index": 2, "reason": "conflict"},
    ]
    assert rejected["version"] >= first["version"]  # a version to re-read at

    retried = commit(
        weasel.url,
        {
            "read_version": rejected["version"],
            "preconditions": [{"type": "point_read", "key": b64(b"k1")}],
            "operations": [write(b"k1", b"two")],
        },
    ).json()
    assert retried["status"] == "committed" and retried["version"] > first["version"]


def test_retried_request_id_returns_the_original_outcome(weasel: ProcessSet) -> None:
    body = {"request_id": "retry-" + uuid.uuid4().hex, "operations": [write(b"idem")]}
    first = commit(weasel.url, body).json()
    again = commit(weasel.url, body).json()
    assert first["status"] == again["status"] == "committed"
    assert again["version"] == first["version"]
    later = commit(weasel.url, {"operations": [write(b"other")]}).json()
    assert later["version"] == first["version"] + 1  # the retry used no version


def test_leader_id_mismatch_is_409_with_the_current_leader(weasel: ProcessSet) -> None:
    leader = httpx.get(f"{weasel.url}/v1/version").json()["leader_id"]
    answer = commit(weasel.url, {"leader_id": "someone-else", "operations": [write(b"x")]})
    assert answer.status_code == 409
    body = answer.json()
    assert body["error"] == "leader_changed" and body["leader_id"] == leader
    assert isinstance(body["version"], int)
    ok = commit(weasel.url, {"leader_id": leader, "operations": [write(b"x")]})
    assert ok.json()["status"] == "committed"


def test_concurrent_commits_get_unique_gapless_versions(weasel: ProcessSet) -> None:
    async def load() -> list[dict[str, Any]]:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(base_url=weasel.url, limits=limits, timeout=30) as client:

            async def one(i: int) -> dict[str, Any]:
                r = await client.post("/v1/commit", json={"operations": [write(b"c%d" % (i % 50))]})
                return dict(r.json())

            return await asyncio.gather(*(one(i) for i in range(400)))

    before = version(weasel.url)
    answers = asyncio.run(load())
    assert {a["status"] for a in answers} == {"committed"}
    versions = sorted(a["version"] for a in answers)
    assert versions == list(range(before + 1, before + 401))


BAD_BODIES = [
    pytest.param(b"{not json", 400, "bad_request", id="malformed-json"),
    pytest.param(b"[]", 400, "bad_request", id="not-an-object"),
    pytest.param(b'{"operations": []}', 400, "bad_request", id="empty-operations"),
    pytest.param(b'{"preconditions": []}', 400, "bad_request", id="missing-operations"),
    pytest.param(
        b'{"operations": [{"type": "write", "key": 5, "value": "dg=="}]}',
        400,
        "bad_request",
        id="key-wrong-type",
    ),
    pytest.param(
        b'{"operations": [{"type": "write", "key": "a$b", "value": "dg=="}]}',
        400,
        "bad_request",
        id="bad-base64",
    ),
    pytest.param(
        b'{"operations": [{"type": "write", "key": "YQ", "value": "dg=="}]}',
        400,
        "bad_request",
        id="unpadded-base64",
    ),
    pytest.param(
        b'{"operations": [{"type": "upsert", "key": "YQ=="}]}',
        400,
        "bad_request",
        id="unknown-operation",
    ),
    pytest.param(
        b'{"operations": [{"type": "range_delete", "begin": "Yg==", "end": "YQ=="}]}',
        400,
        "bad_request",
        id="reversed-range",
    ),
    pytest.param(
        b'{"operations": [{"type": "range_delete", "begin": "YQ==", "end": "YQ=="}]}',
        400,
        "bad_request",
        id="empty-range",
    ),
    pytest.param(
        b'{"preconditions": [{"type": "point_read", "key": "YQ=="}], '
        b'"operations": [{"type": "delete", "key": "YQ=="}]}',
        400,
        "bad_request",
        id="precondition-without-version",
    ),
    pytest.param(
        b'{"request_id": "short", "operations": [{"type": "delete", "key": "YQ=="}]}',
        400,
        "bad_request",
        id="short-request-id",
    ),
    pytest.param(
        b'{"read_version": -1, "operations": [{"type": "delete", "key": "YQ=="}]}',
        400,
        "bad_request",
        id="negative-version",
    ),
    pytest.param(
        b'{"opertions": [{"type": "delete", "key": "YQ=="}]}',
        400,
        "bad_request",
        id="misspelt-field",
    ),
    pytest.param(
        b'{"operations": [{"type": "delete", "key": "' + base64.b64encode(b"k" * 10241) + b'"}]}',
        400,
        "limit_exceeded",
        id="huge-key",
    ),
    pytest.param(
        b'{"operations": [' + b",".join([b'{"type": "delete", "key": "YQ=="}'] * 10001) + b"]}",
        400,
        "limit_exceeded",
        id="too-many-operations",
    ),
    pytest.param(
        b'{"operations": [{"type": "write", "key": "YQ==", "value": "'
        + base64.b64encode(b"v" * (1024 * 1024))
        + b'"}]}',
        413,
        "too_large",
        id="oversize-body",
    ),
]


@pytest.mark.parametrize(("body", "status", "code"), BAD_BODIES)
def test_bad_input_gets_a_json_4xx_and_writes_nothing(
    weasel: ProcessSet, body: bytes, status: int, code: str
) -> None:
    before = version(weasel.url)
    answer = commit(weasel.url, body)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    error = answer.json()
    assert error["error"] == code and error["message"]
    assert commit(weasel.url, {"operations": [write(b"probe")]}).json()["version"] == before + 1


def test_unknown_route_and_method_are_json_errors(weasel: ProcessSet) -> None:
    missing = httpx.get(f"{weasel.url}/v1/nope")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    wrong = httpx.get(f"{weasel.url}/v1/commit")
    assert wrong.status_code == 405 and wrong.json()["error"] == "method_not_allowed"


def test_openapi_describes_the_commit_body(weasel: ProcessSet) -> None:
    spec = httpx.get(f"{weasel.url}/openapi.json").json()
    body = spec["paths"]["/v1/commit"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"]["$ref"] == "#/components/schemas/CommitRequest"
    assert "operations" in spec["components"]["schemas"]["CommitRequest"]["required"]


def test_every_service_has_health_readiness_and_metrics(weasel: ProcessSet) -> None:
    commit(weasel.url, {"operations": [write(b"m")]})
    for offset, name in enumerate(["gateway", "sequencer", "resolver", "persister"]):
        base = f"http://127.0.0.1:{weasel.port + offset}"
        assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}, name
        assert httpx.get(f"{base}/readyz").status_code == 200, name
        metrics = httpx.get(f"{base}/metrics").text
        assert "weaseldb_" in metrics, name
        # Every stage samples its event loop's lag from the start (a timer each 0.1 s).
        process = '{process="%s"}' % ("gateway-0" if name == "gateway" else name)
        assert metric(base, "weaseldb_event_loop_lag_seconds_count", process) > 0, name
        assert "weaseldb_gc_pause_seconds_bucket" in metrics, name
    persister_metrics = httpx.get(f"http://127.0.0.1:{weasel.port + 3}/metrics").text
    assert "weaseldb_committed_version" in persister_metrics
