"""Every bad input gets a clean 4xx with a JSON body, no traceback in the log, and leaves
the store exactly as it was (table-driven, against a real process set)."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.cluster import ProcessSet, free_port_block, short_run_dir
from tests.support.waiting import wait_for

KEY = base64.b64encode(b"k").decode()
WRITE = {"type": "write", "key": KEY, "value": KEY}
REQUEST_TIMEOUT_S = 2


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass
class Running:
    cluster: ProcessSet
    data: Path

    @property
    def url(self) -> str:
        return self.cluster.url

    def store_state(self) -> dict[str, str]:
        """Every object in the store, by content."""
        return {
            str(p.relative_to(self.data)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(self.data.rglob("*"))
            if p.is_file() and not p.name.startswith(".tmp-")
        }

    def log_size(self) -> int:
        assert self.cluster.log_path is not None
        return self.cluster.log_path.stat().st_size

    def log_since(self, offset: int) -> str:
        assert self.cluster.log_path is not None
        with self.cluster.log_path.open("rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    data = tmp_path_factory.mktemp("data")
    settings = tmp_path_factory.mktemp("settings") / "settings.toml"
    settings.write_text(f"[gateway]\nrequest_timeout_s = {REQUEST_TIMEOUT_S}\n")
    cluster = ProcessSet(
        f"dir:{data}", free_port_block(), short_run_dir(), extra=["--config", str(settings)]
    ).start()
    # Something in the log and a policy, so "nothing changed" is checked against real data.
    assert httpx.post(f"{cluster.url}/v1/commit", json={"operations": [WRITE]}).status_code == 200
    assert httpx.put(f"{cluster.url}/v1/retention/kept", json={"version": 1}).status_code == 200
    yield Running(cluster, data)
    assert cluster.stop() == 0, cluster.log()


@dataclass(frozen=True)
class Case:
    method: str
    path: str
    status: int
    error: str
    body: bytes | None = None
    headers: dict[bytes, bytes] = field(default_factory=dict)
    allow: str | None = None


def commit(**fields: Any) -> bytes:
    return json.dumps({"operations": [WRITE], **fields}).encode()


def raw(text: str) -> bytes:
    return text.encode()


FUTURE = 2**62
CASES = {
    # The defects the hostile-input run found
    "non-utf8-body": Case("POST", "/v1/commit", 400, "bad_request", b'{"operations":[{"type":"write","key":"\xff"}]}'),
    "non-utf8-request-id": Case("POST", "/v1/commit", 400, "bad_request", b'{"request_id":"\xc3(xxxxxxxxxxxxxxxxxxxxxxx","operations":[]}'),
    "duplicate-preconditions-key": Case(
        "POST", "/v1/commit", 400, "bad_request",
        raw('{"read_version":0,"preconditions":[{"type":"point_read","key":"aw=="}],'
            '"preconditions":[],"operations":[' + json.dumps(WRITE) + "]}"),
    ),
    "duplicate-request-id": Case(
        "POST", "/v1/commit", 400, "bad_request",
        raw('{"request_id":"aaaaaaaaaaaaaaaaaaaaaa","request_id":"bbbbbbbbbbbbbbbbbbbbbb",'
            '"operations":[' + json.dumps(WRITE) + "]}"),
    ),
    "duplicate-key-in-an-operation": Case(
        "POST", "/v1/commit", 400, "bad_request",
        raw('{"operations":[{"type":"write","key":"aw==","key":"bA==","value":"aw=="}]}'),
    ),
    "duplicate-key-spelt-with-an-escape": Case(
        "POST", "/v1/commit", 400, "bad_request",
        raw('{"operations":[' + json.dumps(WRITE) + '],"\\u006fperations":[]}'),
    ),
    "future-read-version": Case(
        "POST", "/v1/commit", 400, "bad_request",
        commit(read_version=FUTURE, preconditions=[{"type": "point_read", "key": KEY}]),
    ),
    "future-precondition-version": Case(
        "POST", "/v1/commit", 400, "bad_request",
        commit(preconditions=[{"type": "range_read", "begin": KEY, "end": b64(b"l"), "version": FUTURE}]),
    ),
    "policy-id-with-a-trailing-newline": Case("PUT", "/v1/retention/abc%0A", 400, "bad_request", b'{"version": 1}'),
    "policy-id-starting-with-a-dot": Case("PUT", "/v1/retention/.hidden", 400, "bad_request", b'{"version": 1}'),
    "subscribe-after-arabic-indic-digits": Case("GET", "/v1/subscribe?after=%D9%A1%D9%A2", 400, "bad_request"),
    "subscribe-after-with-a-sign": Case("GET", "/v1/subscribe?after=%2B5", 400, "bad_request"),
    "subscribe-after-fraction": Case("GET", "/v1/subscribe?after=1.0", 400, "bad_request"),
    "subscribe-after-too-big": Case("GET", f"/v1/subscribe?after={2**63}", 400, "bad_request"),
    "subscribe-durable-not-a-boolean": Case("GET", "/v1/subscribe?durable=yes", 400, "bad_request"),
    "subscribe-last-event-id-not-ascii": Case("GET", "/v1/subscribe", 400, "bad_request", headers={b"Last-Event-ID": "١٢".encode()}),
    "retention-405-lists-every-method": Case("POST", "/v1/retention/abc", 405, "method_not_allowed", allow="DELETE, GET, PUT"),
    # Commit bodies
    "not-json": Case("POST", "/v1/commit", 400, "bad_request", b"{"),
    "json-array": Case("POST", "/v1/commit", 400, "bad_request", b"[]"),
    "json-null": Case("POST", "/v1/commit", 400, "bad_request", b"null"),
    "empty-body": Case("POST", "/v1/commit", 400, "bad_request", b""),
    "no-operations": Case("POST", "/v1/commit", 400, "bad_request", raw('{"operations":[]}')),
    "unknown-field": Case("POST", "/v1/commit", 400, "bad_request", commit(precondition=[])),
    "url-safe-base64": Case("POST", "/v1/commit", 400, "bad_request", raw('{"operations":[{"type":"write","key":"-_-_","value":"aw=="}]}')),
    "base64-without-padding": Case("POST", "/v1/commit", 400, "bad_request", raw('{"operations":[{"type":"delete","key":"aw"}]}')),
    "version-as-a-string": Case("POST", "/v1/commit", 400, "bad_request", commit(read_version="1")),
    "negative-version": Case("POST", "/v1/commit", 400, "bad_request", commit(read_version=-1)),
    "range-backwards": Case("POST", "/v1/commit", 400, "bad_request", raw('{"operations":[{"type":"range_delete","begin":"bA==","end":"aw=="}]}')),
    "precondition-without-a-version": Case("POST", "/v1/commit", 400, "bad_request", commit(preconditions=[{"type": "point_read", "key": KEY}])),
    "request-id-too-short": Case("POST", "/v1/commit", 400, "bad_request", commit(request_id="short")),
    "request-id-too-long": Case("POST", "/v1/commit", 400, "bad_request", commit(request_id="x" * 129)),
    "key-too-large": Case("POST", "/v1/commit", 400, "limit_exceeded", commit(operations=[{"type": "delete", "key": b64(b"k" * 10241)}])),
    "value-too-large": Case("POST", "/v1/commit", 400, "limit_exceeded", commit(operations=[{"type": "write", "key": KEY, "value": b64(b"v" * 102401)}])),
    "too-many-items": Case("POST", "/v1/commit", 400, "limit_exceeded", commit(operations=[{"type": "delete", "key": KEY}] * 10001)),
    "body-too-large": Case("POST", "/v1/commit", 413, "too_large", b"{" + b" " * (1 << 20)),
    "deeply-nested": Case("POST", "/v1/commit", 400, "bad_request", b'{"operations":' + b"[" * 5000 + b"]" * 5000 + b"}"),
    "leader-changed": Case("POST", "/v1/commit", 409, "leader_changed", commit(leader_id="somebody-else")),
    "commit-with-get": Case("GET", "/v1/commit", 405, "method_not_allowed", allow="POST"),
    "subscribe-with-post": Case("POST", "/v1/subscribe", 405, "method_not_allowed", allow="GET"),
    "version-with-post": Case("POST", "/v1/version", 405, "method_not_allowed", allow="GET"),
    # Status lookups
    "status-without-request-id": Case("GET", "/v1/status", 400, "bad_request"),
    "status-request-id-too-long": Case("GET", "/v1/status?request_id=" + "x" * 129, 400, "bad_request"),
    "status-min-version-not-a-number": Case("GET", "/v1/status?request_id=abc&min_version=x", 400, "bad_request"),
    "status-min-version-negative": Case("GET", "/v1/status?request_id=abc&min_version=-1", 400, "bad_request"),
    "status-min-version-with-spaces": Case("GET", "/v1/status?request_id=abc&min_version=%205", 400, "bad_request"),
    # Retention policies
    "policy-body-not-json": Case("PUT", "/v1/retention/abc", 400, "bad_request", b"nope"),
    "policy-body-extra-field": Case("PUT", "/v1/retention/abc", 400, "bad_request", b'{"version": 1, "x": 1}'),
    "policy-body-duplicate-version": Case("PUT", "/v1/retention/abc", 400, "bad_request", b'{"version": 9, "version": 1}'),
    "policy-version-negative": Case("PUT", "/v1/retention/abc", 400, "bad_request", b'{"version": -1}'),
    "policy-version-not-an-integer": Case("PUT", "/v1/retention/abc", 400, "bad_request", b'{"version": 1.5}'),
    "policy-version-too-big": Case("PUT", "/v1/retention/abc", 400, "bad_request", json.dumps({"version": 2**64}).encode()),
    "policy-moves-back": Case("PUT", "/v1/retention/kept", 409, "conflict", b'{"version": 0}'),
    "policy-body-too-large": Case("PUT", "/v1/retention/abc", 413, "too_large", b" " * (1 << 20 + 1)),
    "policy-id-too-long": Case("GET", "/v1/retention/" + "a" * 129, 400, "bad_request"),
    "policy-missing": Case("GET", "/v1/retention/nobody", 404, "not_found"),
    "delete-missing-policy": Case("DELETE", "/v1/retention/nobody", 404, "not_found"),
    "path-traversal": Case("GET", "/v1/retention/..%2F..%2Fterms", 404, "not_found"),
    "no-such-route": Case("GET", "/v2/anything", 404, "not_found"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_gets_a_clean_4xx_and_changes_nothing(running: Running, name: str) -> None:
    case = CASES[name]
    before, offset = running.store_state(), running.log_size()
    response = httpx.request(
        case.method, running.url + case.path, content=case.body, headers=case.headers, timeout=30
    )
    assert response.status_code == case.status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["error"] == case.error and body["message"]
    if case.status == 503:
        assert response.headers["retry-after"]
    if case.allow is not None:
        assert response.headers["allow"] == case.allow
    assert running.store_state() == before, "a rejected request changed the store"
    log = running.log_since(offset)
    assert "Traceback" not in log and " 500 " not in log, log


def raw_request(url: str, payload: bytes) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    connection = socket.create_connection((host, int(port)), timeout=30)
    connection.sendall(payload)
    return connection


def closed_by_server(connection: socket.socket, within: float) -> bool:
    connection.settimeout(within)
    try:
        while connection.recv(4096):
            pass
        return True
    except (TimeoutError, ConnectionResetError):
        return False


def test_a_body_cut_short_is_never_committed(running: Running) -> None:
    """The client sends part of its body and goes away: nothing is committed."""
    body = commit(request_id="cut-short-request-0001")
    before = running.store_state()
    connection = raw_request(
        running.url,
        b"POST /v1/commit HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body[: len(body) // 2]),
    )
    # Nothing observable marks the server done with a dropped request: these pauses give
    # it the time a wrong commit would take to show (milliseconds here); the lookup below
    # then bans the id, so none can land later either.
    time.sleep(0.3)
    connection.close()
    time.sleep(0.5)
    status = httpx.get(
        f"{running.url}/v1/status", params={"request_id": "cut-short-request-0001"}
    ).json()
    assert status["status"] == "not_committed"
    # The lookup's ban is the only thing written.
    written = set(running.store_state()) - set(before)
    assert all(k.startswith(("batches/", "requestids/")) for k in written)


def test_a_short_body_on_an_open_connection_is_closed_after_the_request_timeout(
    running: Running,
) -> None:
    with raw_request(
        running.url, b"POST /v1/commit HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"
    ) as connection:
        assert closed_by_server(connection, within=REQUEST_TIMEOUT_S + 5)


def test_trickled_headers_are_cut_off_after_the_request_timeout(running: Running) -> None:
    with raw_request(running.url, b"GET /v1/version HTTP/1.1\r\n") as connection:
        started = time.monotonic()
        for _ in range(int(REQUEST_TIMEOUT_S * 4)):
            try:
                connection.sendall(b"X-Slow: 1\r\n")
            except OSError:
                break
            time.sleep(0.5)  # a slow client's pace, not a wait
        assert closed_by_server(connection, within=5)
    assert time.monotonic() - started < REQUEST_TIMEOUT_S + 5


def test_an_idle_connection_that_never_speaks_is_closed(running: Running) -> None:
    with raw_request(running.url, b"") as connection:
        assert closed_by_server(connection, within=REQUEST_TIMEOUT_S + 5)


def test_not_http_at_all_gets_a_json_400(running: Running) -> None:
    with raw_request(running.url, b"\x16\x03\x01 this is not HTTP\r\n\r\n") as connection:
        answer = connection.recv(4096)
    assert answer.startswith(b"HTTP/1.1 400")
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"] == "bad_request"


def test_the_openapi_document_describes_subscribe(running: Running) -> None:
    spec = httpx.get(f"{running.url}/openapi.json").json()
    assert "/v1/subscribe" in spec["paths"] and "/v1/commit" in spec["paths"]
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            assert "422" not in operation["responses"], (path, method)


def test_the_set_still_serves(running: Running) -> None:
    wait_for(lambda: httpx.get(f"{running.url}/readyz").status_code == 200)
    answer = httpx.post(f"{running.url}/v1/commit", json={"operations": [WRITE]})
    assert answer.json()["status"] == "committed"
