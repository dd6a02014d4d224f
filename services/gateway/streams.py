"""GET /v1/subscribe: the change stream as Server-Sent Events (api.md; decisions in
docs/api.md). Served as plain ASGI: the response streams for as long as the client stays.

History comes from the store (weaseldb.core.history), live events from the worker's `Hub`
(services/gateway/subscriptions.py), handed over with no gap and no duplicate. A filtered
stream (`begin`/`end` or `prefix`) applies its `KeyFilter` to both, with its own
`prev_version` chain (docs/api.md, "GET /v1/subscribe").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from urllib.parse import parse_qs

from prometheus_client import Counter, Gauge
from starlette.types import Receive, Scope, Send

from services.gateway import sse
from services.gateway.errors import send_error
from services.gateway.pipeline import PipelineClient
from services.gateway.snapshots import SnapshotListing
from services.gateway.subscriptions import CloseReason, Hub, Subscriber
from weaseldb.core import access, history
from weaseldb.core.changes import KEEPALIVE, KeyFilter, checkpoint_frame, parse_key_filter
from weaseldb.core.config import Config
from weaseldb.core.errors import BadRequest, LogTruncated, MethodNotAllowed, NotLeader, WeaselError
from weaseldb.core.protocol import (
    AcceptedEvents,
    DurableEvents,
    EventTransaction,
    LeaderLost,
    Progress,
    Shutdown,
    TermStart,
)
from weaseldb.core.store import BlobStore
from weaseldb.runtime.access import GRANT
from weaseldb.runtime.sse import start_event_stream, wait_disconnect

log = logging.getLogger("weaseldb.gateway")

#: livesum: the pod's workers' subscribers added up (weaseldb.runtime.workermetrics).
SUBSCRIBERS = Gauge(
    "weaseldb_gateway_subscribers",
    "Open change-stream subscribers",
    ["durable"],
    multiprocess_mode="livesum",
)
DROPPED = Counter(
    "weaseldb_gateway_subscribers_dropped_total", "Subscribers cut off for falling behind"
)
EVENTS = Counter("weaseldb_gateway_subscriber_events_total", "Change-stream rounds fanned out")
#: livemax: the pod's slowest subscriber (of the workers running now).
LAG = Gauge(
    "weaseldb_gateway_subscriber_lag_versions",
    "Versions the slowest live subscriber is behind the committed version",
    multiprocess_mode="livemax",
)
SUBSCRIBE_PATH = "/v1/subscribe"
#: How long a durable=false subscriber waits for accepted history to become durable.
ACCEPTED_CATCH_UP_S = 30.0
#: How long a new subscriber waits for its feed's first answer (one trip around the ring).
FEED_SYNC_S = 10.0


class ChangeStreams:
    def __init__(
        self, config: Config, client: PipelineClient, store: BlobStore, snapshots: SnapshotListing
    ) -> None:
        self._config = config
        self._client = client
        self._store = store
        self._snapshots = snapshots
        self.hub = Hub(config.gateway.subscriber_buffer_bytes)
        self._declared = (0, 0)  # the feeds this worker last told the pipeline it wants
        self._lag = 0  # what LAG was last set to (set only when it changes)

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
        self._declare()
        self._sample_lag()

    def _sample_lag(self) -> None:
        """On every message from the ring (rounds, and the leader's Progress each second)
        and when a subscriber leaves: one look at the slowest of each feed."""
        lag = self.hub.lag()
        if lag != self._lag:
            self._lag = lag
            LAG.set(lag)

    def _declare(self) -> None:
        """Tell the pipeline when the feeds this worker wants change (subscribers came to a
        kind that had none, or the last one left)."""
        wanted = self.hub.wanted()
        if wanted != self._declared:
            self._declared = wanted
            self._client.declare_interest(*wanted)

    def close_all(self) -> None:
        self.hub.close_all()

    async def subscribe(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            after, durable, keys = self._parse(scope)
            _check_grant(scope, keys)
            if not self._client.leadership.leading:
                raise NotLeader(f"this node is not leading: {self._client.leadership.reason}")
        except WeaselError as e:
            await send_error(send, e)
            return
        sub = self.hub.register(durable, keys)
        self._declare()
        label = "true" if durable else "false"
        SUBSCRIBERS.labels(label).inc()
        try:
            await self._stream(sub, after, scope, receive, send)
        finally:
            self.hub.unregister(sub)
            self._declare()
            SUBSCRIBERS.labels(label).dec()
            self._sample_lag()

    @staticmethod
    def _parse(scope: Scope) -> tuple[int | None, bool, KeyFilter | None]:
        if scope["method"] != "GET":
            raise MethodNotAllowed(f"{SUBSCRIBE_PATH} accepts GET only", ["GET"])
        try:
            query = {
                k: v[-1]
                for k, v in parse_qs(
                    scope["query_string"].decode("ascii"),
                    keep_blank_values=True,
                    strict_parsing=False,
                ).items()
            }
            headers = dict(scope["headers"])
            last_event_id = headers.get(b"last-event-id", b"").decode("ascii") or None
            return (
                sse.parse_after(query.get("after"), last_event_id),
                sse.parse_bool(query.get("durable"), True),
                parse_key_filter(query.get("begin"), query.get("end"), query.get("prefix")),
            )
        except (ValueError, UnicodeDecodeError) as e:
            raise BadRequest(str(e)) from e

    async def _stream(
        self, sub: Subscriber, after: int | None, scope: Scope, receive: Receive, send: Send
    ) -> None:
        try:
            target = await self._live_start(sub)  # history must reach it to meet the live stream
            # ... and what the stream will checkpoint: a worker that had no subscriber of
            # this kind heard Progress but no events, so `seen` can lag `committed`.
            target = max(target, self.hub.checkpoint(sub.durable))
            if after is None:
                after = self._client.committed_version
            oldest = await history.retained_start(self._store)
            if after + 1 < oldest:
                raise LogTruncated(
                    f"history before version {oldest} is no longer retained",
                    oldest_version=oldest,
                    snapshot=await self._snapshots.newest(),
                )
            if not sub.durable and after < target:
                await self._wait_durable(target)
        except Exception as e:  # store errors included: 503 with Retry-After, not a 500
            await send_error(send, e)
            return
        await start_event_stream(send)
        listener = asyncio.create_task(
            wait_disconnect(receive, lambda: sub.close(CloseReason.DISCONNECTED, flush=False))
        )
        pump = asyncio.create_task(self._history_then_live(sub, after, target, send))
        sub.on_cut = pump.cancel  # a slow subscriber is cut off even while a send waits
        try:
            await pump
        except (OSError, asyncio.CancelledError):
            if not sub.closed:
                raise
        except WeaselError as e:
            # The store failed while history was streaming: the 200 is sent, so the stream
            # ends without its final chunk and the client resumes with Last-Event-ID.
            log.warning("change stream ended: %s", e)
            return
        finally:
            listener.cancel()
            pump.cancel()
        if sub.closed == CloseReason.SLOW:
            log.warning("subscriber cut off: more than %d bytes unsent", sub.limit)
            return  # return without ending the body: the server drops the connection
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _history_then_live(
        self, sub: Subscriber, after: int, target: int, send: Send
    ) -> None:
        sub.start_history(after)
        if after < target:
            await self._send_history(sub, after, send)
            if sub.closed:
                return  # history stopped short of `target`: what is live would leave a gap
        sub.go_live()
        await self._pump(sub, send)

    async def _live_start(self, sub: Subscriber) -> int:
        """The version after which live events reach `sub`, once its feed is synced."""
        ready = self.hub.ready(sub.durable)
        try:
            async with asyncio.timeout(FEED_SYNC_S):
                await ready.wait()
        except TimeoutError:
            raise NotLeader("the pipeline did not start the change stream in time") from None
        if sub.closed or not self.hub.synced(sub.durable):
            raise NotLeader("the leader changed while the change stream was starting")
        return self.hub.seen(sub.durable)

    async def _wait_durable(self, version: int) -> None:
        deadline = time.monotonic() + ACCEPTED_CATCH_UP_S
        while self._client.committed_version < version:
            if not self._client.leadership.leading or time.monotonic() > deadline:
                raise NotLeader("accepted history did not become durable")
            await asyncio.sleep(0.005)

    async def _send_history(self, sub: Subscriber, after: int, send: Send) -> None:
        pending: list[bytes] = []
        size = 0
        async for prev, leader_id, tx in history.log_after(self._store, after):
            if sub.closed:
                break
            event = EventTransaction(tx.version, tx.request_id, tx.timestamp_ms, tx.operations)
            data = sub.history_event(prev, leader_id, event)
            if data is None:
                continue  # outside the stream's filter
            pending.append(data)
            size += len(data)
            if size >= 64 * 1024:
                await send(
                    {"type": "http.response.body", "body": b"".join(pending), "more_body": True}
                )
                pending, size = [], 0
        if pending:
            await send({"type": "http.response.body", "body": b"".join(pending), "more_body": True})

    async def _pump(self, sub: Subscriber, send: Send) -> None:
        interval = self._config.gateway.checkpoint_interval_s
        keepalive = self._config.gateway.keepalive_interval_s
        linger = self._config.gateway.subscriber_linger_s
        loop = asyncio.get_running_loop()
        next_keepalive = loop.time() + keepalive
        next_checkpoint = loop.time()  # one right away, so a client learns where live starts
        while True:
            data = sub.take()
            if sub.closed and not sub.flush_first:
                return
            now = loop.time()
            if data:
                next_checkpoint = now + interval
            elif now >= next_checkpoint and not sub.closed:
                # Nothing sent for `interval`: for a filtered stream also while it reads
                # rounds that all miss its keys, so its clients' position keeps moving.
                version = max(0, self.hub.checkpoint(sub.durable))
                data = checkpoint_frame(version, self.hub.leader_id)
                next_checkpoint = now + interval
            if now >= next_keepalive:
                data += KEEPALIVE
                next_keepalive = now + keepalive
            if data:
                await send({"type": "http.response.body", "body": data, "more_body": True})
            if sub.closed:
                rest = sub.take() if sub.flush_first else b""
                if rest:
                    await send({"type": "http.response.body", "body": rest, "more_body": True})
                return
            if linger and (data or sub.filter is not None):
                # Let the next rounds gather: one wake-up and one write per subscriber per
                # `linger`, not per round (the cost of many subscribers is per wake-up). A
                # filtered one reads at that pace too, even when it sent nothing.
                await asyncio.sleep(linger)
                if sub.pending_bytes:
                    continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, min(next_checkpoint, next_keepalive) - now)):
                    await sub.wake.wait()


def _check_grant(scope: Scope, keys: KeyFilter | None) -> None:
    """With auth on, the stream's filter must lie inside the client's grant (403)."""
    grant = scope.get(GRANT)
    if grant is not None:
        access.check_subscribe(grant, keys)
