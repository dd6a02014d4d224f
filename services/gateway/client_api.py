"""The client API beyond commit: status lookups, the change stream, retention policies and
snapshot listing (api.md; decisions in docs/api.md).

Slow work (store reads) happens here, in the gateway worker, never in the persister's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from typing import Any
from urllib.parse import parse_qs

import msgspec
from prometheus_client import Counter, Gauge
from starlette.types import Receive, Scope, Send

from services.gateway import errors, retention, sse
from services.gateway import status as status_logic
from services.gateway.pipeline import PipelineClient, PipelineUnavailable
from services.gateway.requests import BadRequest
from services.gateway.subscriptions import CLOSED_SLOW, Hub, Subscriber
from weaseldb import history, layout, manifest
from weaseldb.blobstore import BlobStore, NotFound
from weaseldb.config import Config
from weaseldb.protocol import (
    AcceptedEvents,
    DurableEvents,
    EventTransaction,
    LeaderLost,
    Progress,
    Shutdown,
    StatusEntry,
    StatusReply,
    TermStart,
)
from weaseldb.types import CorruptObject, Outcome

log = logging.getLogger("weaseldb.gateway")

SUBSCRIBERS = Gauge("weaseldb_gateway_subscribers", "Open change-stream subscribers", ["durable"])
DROPPED = Counter(
    "weaseldb_gateway_subscribers_dropped_total", "Subscribers cut off for falling behind"
)
EVENTS = Counter("weaseldb_gateway_subscriber_events_total", "Change-stream rounds fanned out")
STATUS = Counter(
    "weaseldb_gateway_status_lookups_total",
    "Status lookups by answer and source",
    ["status", "source"],
)
SUBSCRIBE_PATH = "/v1/subscribe"
#: How long a durable=false subscriber waits for accepted history to become durable.
ACCEPTED_CATCH_UP_S = 30.0


def _now_iso() -> str:
    moment = datetime.datetime.now(datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class ClientApi:
    def __init__(self, config: Config, client: PipelineClient, store: BlobStore) -> None:
        self.config = config
        self.client = client
        self.store = store
        self.hub = Hub(config.gateway.subscriber_buffer_bytes)
        self._retention_lock = asyncio.Lock()
        client.observer = self.observe

    # Ring input

    def observe(self, message: object) -> None:
        hub = self.hub
        if isinstance(message, DurableEvents):
            hub.on_durable(message)
            EVENTS.inc()
        elif isinstance(message, AcceptedEvents):
            hub.on_accepted(message)
        elif isinstance(message, Progress):
            hub.on_progress(message.committed_version, message.leader_id, message.term)
        elif isinstance(message, TermStart):
            hub.on_term_start(message.term, message.leader_id, message.committed_version)
        elif isinstance(message, LeaderLost | Shutdown):
            hub.on_leader_lost()
        dropped = hub.dropped
        if dropped:
            DROPPED.inc(dropped)
            hub.dropped = 0

    def close_streams(self) -> None:
        self.hub.close_all()

    # GET /v1/status

    async def status(self, request_id: str, min_version: int) -> dict[str, Any]:
        if not 1 <= len(request_id) <= 128:
            raise BadRequest("request_id must be 1..128 characters")
        client = self.client
        ticket = client.new_ticket()
        try:
            reply = await client.submit(StatusEntry(client.worker, ticket, request_id), ticket)
        except PipelineUnavailable as e:
            raise errors.NotLeader(f"status unknown: {e}", request_id=request_id) from e
        if not isinstance(reply, StatusReply):
            raise RuntimeError(f"ticket {ticket} answered with {type(reply).__name__}")
        decision = status_logic.decide(reply, min_version)
        if isinstance(decision, status_logic.ReadStore):
            decision = await self._search_store(request_id, decision)
        STATUS.labels(decision.status.value, decision.source).inc()
        body: dict[str, Any] = {"request_id": request_id, "status": decision.status.value}
        if decision.status == Outcome.COMMITTED:
            body["version"] = decision.version
        body["leader_id"] = client.leadership.leader_id
        return body

    async def _search_store(
        self, request_id: str, span: status_logic.ReadStore
    ) -> status_logic.Answer:
        oldest = await history.retained_start(self.store)
        found: list[status_logic.StoredTx] = []
        async for _, _, tx in history.log_after(self.store, max(span.low, 1) - 1):
            if tx.version > span.high:
                break
            if tx.request_id == request_id:
                found.append(status_logic.StoredTx(tx.version, tx.request_id))
                break
        return status_logic.search(request_id, span.low, span.high, oldest, found)

    # GET /v1/subscribe (raw ASGI: the response streams for as long as the client stays)

    async def subscribe(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if scope["method"] != "GET":
                raise errors.MethodNotAllowed(f"{SUBSCRIBE_PATH} accepts GET only")
            query = {k: v[-1] for k, v in parse_qs(scope["query_string"].decode()).items()}
            headers = dict(scope["headers"])
            last_event_id = headers.get(b"last-event-id", b"").decode("latin-1") or None
            try:
                after = sse.parse_after(query.get("after"), last_event_id)
                durable = sse.parse_bool(query.get("durable"), True)
            except ValueError as e:
                raise BadRequest(str(e)) from e
            if not self.client.leadership.leading:
                raise errors.NotLeader(f"this node is not leading: {self.client.leadership.reason}")
        except Exception as e:
            await _send_error(send, e)
            return
        sub = self.hub.register(durable)
        label = "true" if durable else "false"
        SUBSCRIBERS.labels(label).inc()
        try:
            await self._stream(sub, after, scope, receive, send)
        finally:
            self.hub.unregister(sub)
            SUBSCRIBERS.labels(label).dec()

    async def _stream(
        self, sub: Subscriber, after: int | None, scope: Scope, receive: Receive, send: Send
    ) -> None:
        target = self.hub.seen(sub.durable)  # history must reach this to meet the live stream
        if after is None:
            after = self.client.committed_version
        try:
            oldest = await history.retained_start(self.store)
            if after + 1 < oldest:
                snapshots = await self.snapshots()
                raise errors.LogTruncated(
                    f"history before version {oldest} is no longer retained",
                    oldest_version=oldest,
                    snapshot=snapshots[0] if snapshots else None,
                )
            if not sub.durable and after < target:
                await self._wait_durable(target)
        except Exception as e:
            await _send_error(send, e)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )
        listener = asyncio.create_task(_wait_disconnect(receive, sub))
        pump = asyncio.create_task(self._history_then_live(sub, after, target, send))
        sub.on_cut = pump.cancel  # a slow subscriber is cut off even while a send waits
        try:
            await pump
        except (OSError, asyncio.CancelledError):
            if not sub.closed:
                raise
        finally:
            listener.cancel()
            pump.cancel()
        if sub.closed == CLOSED_SLOW:
            log.warning("subscriber cut off: more than %d bytes unsent", sub.limit)
            return  # return without ending the body: the server drops the connection
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _history_then_live(
        self, sub: Subscriber, after: int, target: int, send: Send
    ) -> None:
        last = after
        if after < target:
            last = await self._send_history(sub, after, send)
        sub.go_live(last)
        await self._pump(sub, send)

    async def _wait_durable(self, version: int) -> None:
        deadline = time.monotonic() + ACCEPTED_CATCH_UP_S
        while self.client.committed_version < version:
            if not self.client.leadership.leading or time.monotonic() > deadline:
                raise errors.NotLeader("accepted history did not become durable")
            await asyncio.sleep(0.005)

    async def _send_history(self, sub: Subscriber, after: int, send: Send) -> int:
        last = after
        pending: list[bytes] = []
        size = 0
        async for prev, leader_id, tx in history.log_after(self.store, after):
            event = EventTransaction(tx.version, tx.request_id, tx.timestamp_ms, tx.operations)
            data = sse.transaction_event(event, prev, leader_id)
            pending.append(data)
            size += len(data)
            last = tx.version
            if size >= 64 * 1024:
                await send(
                    {"type": "http.response.body", "body": b"".join(pending), "more_body": True}
                )
                pending, size = [], 0
            if sub.closed:
                break
        if pending:
            await send({"type": "http.response.body", "body": b"".join(pending), "more_body": True})
        return last

    async def _pump(self, sub: Subscriber, send: Send) -> None:
        interval = self.config.gateway.checkpoint_interval_s
        keepalive = self.config.gateway.keepalive_interval_s
        loop = asyncio.get_running_loop()
        next_keepalive = loop.time() + keepalive
        checkpoint = True  # one right away, so a client learns where live starts
        while True:
            data = sub.take()
            if sub.closed and not sub.flush_first:
                return
            now = loop.time()
            if not data and checkpoint and not sub.closed:
                version = max(0, self.hub.checkpoint(sub.durable))
                data = sse.checkpoint_event(version, self.hub.leader_id)
            if now >= next_keepalive:
                data += sse.KEEPALIVE
                next_keepalive = now + keepalive
            if data:
                await send({"type": "http.response.body", "body": data, "more_body": True})
            if sub.closed:
                rest = sub.take() if sub.flush_first else b""
                if rest:
                    await send({"type": "http.response.body", "body": rest, "more_body": True})
                return
            try:
                await asyncio.wait_for(sub.wake.wait(), min(interval, next_keepalive - now))
                checkpoint = False
            except TimeoutError:
                checkpoint = True

    # Retention policies

    async def get_policy(self, policy_id: str) -> retention.Policy:
        retention.check_policy_id(policy_id)
        try:
            return retention.decode(await self.store.get(layout.retention_key(policy_id)))
        except NotFound:
            raise errors.NotFound(f"no retention policy {policy_id!r}") from None

    async def put_policy(self, policy_id: str, body: bytes) -> retention.Policy:
        retention.check_policy_id(policy_id)
        version = retention.parse_body(body)
        async with self._retention_lock:
            try:
                current: retention.Policy | None = await self.get_policy(policy_id)
            except errors.NotFound:
                current = None
            try:
                policy = retention.update(current, policy_id, version, _now_iso())
            except retention.MovesBack as e:
                raise errors.Conflict(str(e), version=current.version if current else None) from e
            await self.store.put(layout.retention_key(policy_id), policy.encode())
            return policy

    async def delete_policy(self, policy_id: str) -> None:
        await self.get_policy(policy_id)  # 404 when absent
        await self.store.delete(layout.retention_key(policy_id))

    async def list_policies(self) -> list[dict[str, Any]]:
        policies = []
        for key in await _list_all(self.store, layout.RETENTION):
            with contextlib.suppress(NotFound):
                policies.append(retention.decode(await self.store.get(key)).as_json())
        return policies

    # Snapshots

    async def snapshots(self) -> list[dict[str, Any]]:
        """Published snapshots, newest first (manifests are checksum-verified)."""
        found = []
        for version in reversed(await manifest.manifest_versions(self.store)):
            try:
                published = await manifest.read(self.store, version)
            except NotFound:
                continue  # garbage-collected since the LIST
            except CorruptObject as e:
                log.error("not listing snapshot %d: %s", version, e)
                continue
            found.append(retention.snapshot_entry(msgspec.to_builtins(published)))
        return found


async def _list_all(store: BlobStore, prefix: str) -> list[str]:
    keys: list[str] = []
    after = ""
    while True:
        page = await store.list(prefix, start_after=after, limit=1000)
        keys.extend(page)
        if len(page) < 1000:
            return keys
        after = page[-1]


async def _wait_disconnect(receive: Receive, sub: Subscriber) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            sub.close("disconnected", flush=False)
            return


async def _send_error(send: Send, error: Exception) -> None:
    status, body, extra = errors.render(error)
    headers = [(b"content-type", b"application/json")]
    headers += [(k.lower().encode(), v.encode()) for k, v in extra.items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
