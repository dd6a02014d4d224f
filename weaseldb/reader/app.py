"""The reader's HTTP API (docs/reader.md; the routes of ISSUE 26's "Reader HTTP API"), as
plain ASGI: a point read is one dictionary lookup for the route, one SQLite lookup and one
orjson dump, with no framework in between.

    GET /v1/kv/{key}      one key at a version
    GET /v1/kv            a range (begin/end or prefix), paged
    GET /v1/version       the reader's own position
    GET /v1/subscribe     the change stream, served again from the reader's kept events
    GET /healthz, /readyz, /metrics
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import sqlite3
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, unquote

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, generate_latest
from starlette.types import Receive, Scope, Send

from weaseldb.core import access, channels, manifest, types
from weaseldb.core.changes import (
    KEEPALIVE,
    Frame,
    KeyFilter,
    checkpoint_frame,
    decode_frame,
    parse_key_filter,
    transaction_frame,
)
from weaseldb.core.channels import Readiness, Role
from weaseldb.core.config import ReaderConfig
from weaseldb.core.errors import (
    BAD_REQUEST,
    FORBIDDEN,
    JSON_MEDIA_TYPE,
    LIMIT_EXCEEDED,
    BadRequest,
    Forbidden,
    LogTruncated,
    MethodNotAllowed,
    NotFound,
    RequestError,
    Unavailable,
    WeaselError,
    error_body,
)
from weaseldb.core.protocol import point_range
from weaseldb.core.store import BlobStore
from weaseldb.reader.fanout import Item, Subscriber
from weaseldb.reader.replica import Replica, snapshot_entry
from weaseldb.reader.state import TooOld
from weaseldb.runtime.access import GRANT
from weaseldb.runtime.sse import start_event_stream, wait_disconnect

log = logging.getLogger("weaseldb.reader")


DEFAULT_LIMIT = 1000
MAX_LIMIT = 10_000
HISTORY_PAGE = 1000

READS = Counter("weaseldb_reader_reads_total", "Reads answered", ["kind", "status"])
APPLIED = Gauge("weaseldb_reader_applied_version", "The version the reader has applied")
OLDEST = Gauge("weaseldb_reader_oldest_version", "The reader's horizon (oldest readable)")
EVENTS = Gauge("weaseldb_reader_events_applied", "Transactions applied since start")
SUBSCRIBERS = Gauge("weaseldb_reader_subscribers", "Open change-stream subscribers")
CUT_OFF = Gauge("weaseldb_reader_subscribers_cut_off", "Subscribers cut off for falling behind")


class TooOldVersion(RequestError):
    """410 too_old: below the reader's horizon."""


class NotCaughtUp(Unavailable):
    """503 not_caught_up: the version asked for was not applied within the wait."""


#: (error class, status, code) matched in order along the class hierarchy.
_ANSWERS: list[tuple[type[WeaselError], int, str]] = [
    (BadRequest, 400, BAD_REQUEST),
    (Forbidden, 403, FORBIDDEN),
    (NotFound, 404, "not_found"),
    (MethodNotAllowed, 405, "method_not_allowed"),
    (LogTruncated, 410, "log_truncated"),
    (TooOldVersion, 410, "too_old"),
    (RequestError, 400, BAD_REQUEST),
    (NotCaughtUp, 503, "not_caught_up"),
    (Unavailable, 503, "unavailable"),
]


def render_error(error: WeaselError) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    status, code = next(
        ((status, code) for cls, status, code in _ANSWERS if isinstance(error, cls)),
        (503, "unavailable"),
    )
    if isinstance(error, BadRequest):
        code = error.code
    headers = [(b"content-type", JSON_MEDIA_TYPE.encode())]
    if status == 503:
        headers.append((b"retry-after", b"1"))
    if isinstance(error, MethodNotAllowed):
        headers.append((b"allow", ", ".join(error.allow).encode()))
    return status, error_body(code, error.message, **error.extra), headers


async def respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    head = headers or [(b"content-type", JSON_MEDIA_TYPE.encode())]
    head.append((b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


# Parsing


def parse_version(raw: str, name: str = "version") -> int:
    try:
        return types.parse_version(raw)
    except ValueError as e:
        raise BadRequest(f"{name}: {e}") from e


def b64_path(raw: str) -> bytes:
    """A key in the path: either alphabet, padding optional."""
    text = unquote(raw).replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError) as e:
        raise BadRequest(f"key: not base64: {e}") from e


def query_of(scope: Scope) -> dict[str, str]:
    raw = scope.get("query_string", b"")
    if not raw:
        return {}
    try:
        parsed = parse_qs(raw.decode("ascii"), keep_blank_values=True)
    except (UnicodeDecodeError, ValueError) as e:
        raise BadRequest(f"query string: {e}") from e
    return {k: v[-1] for k, v in parsed.items()}


def key_range(query: dict[str, str]) -> KeyFilter | None:
    """begin/end or prefix, by the change stream's rules (docs/api.md); None when neither
    is given (the whole key space)."""
    try:
        return parse_key_filter(query.get("begin"), query.get("end"), query.get("prefix"))
    except ValueError as e:
        raise BadRequest(str(e)) from e


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _check(scope: Scope, rule: Callable[[access.Grant], None]) -> None:
    """With auth on (the gate left a grant on the scope), `rule` must pass: 403 if not."""
    grant = scope.get(GRANT)
    if grant is not None:
        rule(grant)


class ReaderApp:
    def __init__(self, replica: Replica, config: ReaderConfig, store: BlobStore | None) -> None:
        self.replica = replica
        self.config = config
        self.store = store
        self.stopping = False
        self._routes = {
            "/v1/kv": self.range,
            "/v1/version": self.version,
            "/v1/subscribe": self.subscribe,
            "/healthz": self.healthz,
            "/readyz": self.readyz,
            "/metrics": self.metrics,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        handler = self._routes.get(path)
        try:
            if handler is None and path.startswith("/v1/kv/"):
                if scope["method"] != "GET":
                    raise MethodNotAllowed(f"{path} accepts GET only", ["GET"])
                await self.get(scope, send)
                return
            if handler is None:
                raise NotFound(f"no route {path}")
            if scope["method"] != "GET":
                raise MethodNotAllowed(f"{path} accepts GET only", ["GET"])
            await handler(scope, receive, send)
        except WeaselError as e:
            await respond(send, *render_error(e))
        except sqlite3.Error as e:  # the disk under the state: try again, maybe elsewhere
            log.error("reading the state failed: %s", e)
            await respond(send, *render_error(Unavailable(f"the reader's state failed: {e}")))

    # Reads

    async def _version(self, query: dict[str, str]) -> tuple[int, int]:
        """The version to read at (waiting for it when ahead) and the horizon then."""
        replica = self.replica
        raw_timeout = query.get("timeout")
        timeout = self.config.default_wait_s
        if raw_timeout is not None:
            try:
                timeout = float(raw_timeout)
            except ValueError:
                raise BadRequest(f"timeout: not a number of seconds: {raw_timeout!r}") from None
            if not 0 <= timeout <= self.config.max_wait_s:
                raise BadRequest(f"timeout: must be 0..{self.config.max_wait_s:g} seconds")
        raw = query.get("version")
        if not replica.bootstrapped:
            raise NotCaughtUp("the reader has not loaded its state yet", version=0)
        version = replica.applied if raw is None else parse_version(raw)
        if (version > replica.applied or replica.resetting) and not await replica.wait_for(
            version, timeout
        ):
            raise NotCaughtUp(
                f"version {version} is not applied here yet (applied: {replica.applied})",
                version=replica.applied,
            )
        if version < replica.oldest:
            raise TooOldVersion(
                f"version {version} is below this reader's horizon {replica.oldest}",
                oldest_version=replica.oldest,
            )
        return version, replica.oldest

    async def get(self, scope: Scope, send: Send) -> None:
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
        key = b64_path(raw_path.split(b"?", 1)[0][len(b"/v1/kv/") :].decode("latin-1"))
        _check(scope, lambda grant: access.check_read(grant, *point_range(key)))
        version, oldest = await self._version(query_of(scope))
        try:
            item = self.replica.state.get(key, version, oldest=oldest)
        except TooOld as e:
            raise TooOldVersion(str(e), oldest_version=e.oldest) from e
        if item is None:
            READS.labels("get", "404").inc()
            body = error_body("not_found", "no such key at this version", version=version)
            await respond(send, 404, body)
            return
        READS.labels("get", "200").inc()
        await respond(
            send,
            200,
            orjson.dumps(
                {
                    "key": _b64(key),
                    "value": _b64(item.value),
                    "version": version,
                    "modified_version": item.modified_version,
                }
            ),
        )

    async def range(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = query_of(scope)
        span = key_range(query)
        limit = DEFAULT_LIMIT
        if "limit" in query:
            raw = query["limit"]
            if not raw.isascii() or not raw.isdigit() or int(raw) < 1:
                raise BadRequest(f"limit: a positive integer, not {raw!r}")
            limit = int(raw)
            if limit > MAX_LIMIT:
                raise BadRequest(f"limit: at most {MAX_LIMIT}", LIMIT_EXCEEDED)
        begin, end = (b"", None) if span is None else (span.begin, span.end)
        _check(scope, lambda grant: access.check_read(grant, begin, end))
        version, oldest = await self._version(query)
        try:
            items, more = self.replica.state.range(begin, end, version, limit, oldest=oldest)
        except TooOld as e:
            raise TooOldVersion(str(e), oldest_version=e.oldest) from e
        READS.labels("range", "200").inc()
        body = {
            "version": version,
            "items": [
                {"key": _b64(i.key), "value": _b64(i.value), "modified_version": i.modified_version}
                for i in items
            ],
            "more": more,
        }
        await respond(send, 200, orjson.dumps(body))

    async def version(self, scope: Scope, receive: Receive, send: Send) -> None:
        r = self.replica
        body = {"version": r.applied, "oldest_version": r.oldest, "leader_id": r.leader_id}
        await respond(send, 200, orjson.dumps(body))

    # Operations

    async def healthz(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond(send, 200, b'{"status":"ok"}')

    def readiness(self) -> Readiness:
        r = self.replica
        if self.stopping:
            return Readiness(False, Role.STOPPING, "shutting down")
        if not r.bootstrapped:
            reason = "loading state"
        elif r.resetting:
            reason = "loading a newer snapshot"
        elif not r.following:
            reason = f"not connected to {self.config.upstream}: serving up to {r.applied}"
        else:
            reason = f"following {self.config.upstream} at version {r.applied}"
        return Readiness(r.ready, Role.READER, reason, leader_id=r.leader_id or None)

    async def readyz(self, scope: Scope, receive: Receive, send: Send) -> None:
        readiness = self.readiness()
        await respond(
            send, channels.readiness_status(readiness), channels.encode_readiness(readiness)
        )

    async def metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        r = self.replica
        APPLIED.set(r.applied)
        OLDEST.set(r.oldest)
        EVENTS.set(r.events_applied)
        SUBSCRIBERS.set(len(r.fan.subscribers))
        CUT_OFF.set(r.fan.cut_off)
        await respond(
            send, 200, generate_latest(), [(b"content-type", CONTENT_TYPE_LATEST.encode())]
        )

    # The change stream

    async def _truncated(self, after: int) -> LogTruncated:
        snapshot = None
        if self.store is not None:
            with contextlib.suppress(WeaselError):
                newest = await manifest.newest(self.store)
                snapshot = None if newest is None else snapshot_entry(newest)
        oldest = self.replica.oldest + 1
        return LogTruncated(
            f"this reader keeps the change stream after version {oldest - 1} only",
            oldest_version=oldest,
            snapshot=snapshot,
        )

    async def subscribe(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = query_of(scope)
        if query.get("durable", "true") != "true":
            raise BadRequest(
                "a reader serves the durable stream only (durable=false: ask the leader)"
            )
        headers = dict(scope["headers"])
        raw_after = query.get("after") or headers.get(b"last-event-id", b"").decode("latin-1")
        after = parse_version(raw_after, "after") if raw_after else None
        key_filter = key_range(query)
        _check(scope, lambda grant: access.check_subscribe(grant, key_filter))
        replica = self.replica
        if not replica.ready:
            raise Unavailable("the reader is not following its upstream yet")
        live_start = replica.applied
        if after is None:
            after = live_start
        if after < replica.oldest:
            raise await self._truncated(after)
        sub = replica.fan.register(after, key_filter)
        await start_event_stream(send)
        listener = asyncio.create_task(wait_disconnect(receive, lambda: sub.close("disconnected")))
        pump = asyncio.create_task(self._history_then_live(sub, after, live_start, send))
        sub.on_cut = pump.cancel
        try:
            await pump
        except (OSError, asyncio.CancelledError):
            if not sub.closed:
                raise
        finally:
            listener.cancel()
            pump.cancel()
            replica.fan.unregister(sub)
        if sub.closed == "slow_consumer":
            log.warning("subscriber cut off: more than %d bytes unsent", replica.fan.limit)
            return  # without the final chunk: the connection drops
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _history_then_live(
        self, sub: Subscriber, after: int, live_start: int, send: Send
    ) -> None:
        last = after
        while last < live_start and not sub.closed:
            page = self.replica.state.events_after(last, HISTORY_PAGE)
            page = [e for e in page if e.version <= live_start]
            if not page or page[0].prev_version > last:
                sub.close("truncated")  # pruned or reset meanwhile: the client resumes
                return
            items = [
                Item(
                    e.version,
                    e.data,
                    self._operations(sub, e.data),
                    transaction_frame(e.version, e.data),
                )
                for e in page
            ]
            data = sub.render(items)
            last = page[-1].version
            if data:
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await asyncio.sleep(0)
        sub.position = max(sub.position, live_start)
        await self._pump(sub, send)

    @staticmethod
    def _operations(sub: Subscriber, data: bytes) -> tuple[Any, ...]:
        if sub.key_filter is None:
            return ()
        event = decode_frame(Frame("transaction", data.decode()))
        return event.operations if event is not None and hasattr(event, "operations") else ()

    async def _pump(self, sub: Subscriber, send: Send) -> None:
        config = self.config
        loop = asyncio.get_running_loop()
        next_keepalive = loop.time() + config.keepalive_interval_s
        last_sent = float("-inf")  # a checkpoint right away: the client learns where live is
        while True:
            data = sub.take()
            if sub.closed:
                return
            now = loop.time()
            if not data and now - last_sent >= config.checkpoint_interval_s:
                data = checkpoint_frame(max(self.replica.applied, 0), self.replica.leader_id)
            if now >= next_keepalive:
                data += KEEPALIVE
                next_keepalive = now + config.keepalive_interval_s
            if data:
                await send({"type": "http.response.body", "body": data, "more_body": True})
                last_sent = now
                if config.subscriber_linger_s:
                    # One wake-up and one write per subscriber per linger, not per round.
                    await asyncio.sleep(config.subscriber_linger_s)
                    if sub.pending_bytes:
                        continue
            wait = min(last_sent + config.checkpoint_interval_s, next_keepalive) - loop.time()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wait, 0.001)):
                    await sub.wake.wait()
