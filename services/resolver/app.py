"""Resolver process: ring wiring around `services.resolver.logic.Resolver`.

Besides forwarding each ring batch to the persister, it publishes the transactions it
accepted to every gateway worker (one `AcceptedEvents` message per ring batch and worker,
whatever the number of subscribers) for `durable=false` change streams.
"""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import FastAPI
from prometheus_client import Counter

from services.resolver.logic import Resolver, Window
from weaseldb.config import Config
from weaseldb.protocol import (
    AcceptedEvents,
    CommitEntry,
    CommitState,
    EventTransaction,
    GatewayMessage,
    RingEntry,
    TermStart,
    encode_batch,
)
from weaseldb.relay import RelayStage
from weaseldb.ring import Endpoints, Outbox, Ring
from weaseldb.service import Health, HttpServer, stage_app

#: Unsent accepted-event frames kept before the backlog is dropped.
ACCEPTED_BACKLOG_BYTES = 16 * 1024 * 1024
DROPPED = Counter(
    "weaseldb_resolver_accepted_dropped_total",
    "Accepted-event frames dropped because a gateway worker did not keep up",
)


class AcceptedPublisher:
    """Collects accepted transactions per ring batch; one task sends them, so publishing
    never delays forwarding to the persister. The backlog is bounded: when gateway workers
    do not keep up, it is dropped, and the next frame's `prev_version` shows the gap, so
    workers close their durable=false streams (those clients resume after a checkpoint)."""

    def __init__(self, outboxes: list[Outbox], limit_bytes: int = ACCEPTED_BACKLOG_BYTES) -> None:
        self._outboxes = outboxes
        self._limit = limit_bytes
        self._frames: list[bytes] = []
        self.backlog_bytes = 0
        self._ready = asyncio.Event()
        self._term = 0
        self._prev = 0  # newest accepted version published
        self._through = 0

    def collect(self, entries: list[RingEntry], resolved_through: int) -> None:
        transactions: list[EventTransaction] = []
        prev = self._prev
        for entry in entries:
            if isinstance(entry, TermStart) and entry.term != self._term:
                if transactions:
                    self._emit(transactions, prev)
                transactions = []
                self._term = entry.term
                self._prev = prev = self._through = entry.first_version - 1
            elif isinstance(entry, CommitEntry) and entry.state is CommitState.ACCEPTED:
                transactions.append(
                    EventTransaction(
                        entry.version, entry.request_id, entry.timestamp_ms, entry.operations
                    )
                )
        if self._term and (transactions or resolved_through > self._through):
            self._through = max(self._through, resolved_through)
            self._emit(transactions, prev)

    def _emit(self, transactions: list[EventTransaction], prev: int) -> None:
        message = AcceptedEvents(self._term, prev, self._through, transactions)
        frame = encode_batch(list[GatewayMessage]([message]))
        if self.backlog_bytes + len(frame) > self._limit:
            DROPPED.inc(len(self._frames))
            self._frames, self.backlog_bytes = [], 0
        self._frames.append(frame)
        self.backlog_bytes += len(frame)
        if transactions:
            self._prev = transactions[-1].version
        self._ready.set()

    async def run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            frames, self._frames, self.backlog_bytes = self._frames, [], 0
            for frame in frames:
                for outbox in self._outboxes:
                    await outbox.send(frame)


class ResolverStage(RelayStage):
    publisher: AcceptedPublisher

    async def run(self, http: HttpServer) -> int:
        task = asyncio.create_task(self.publisher.run())
        try:
            return await super().run(http)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def build(config: Config, ring: Ring) -> tuple[RelayStage, FastAPI]:
    endpoints = Endpoints(config)
    resolver = Resolver(Window(config.resolver.window_seconds, config.resolver.window_versions))
    health = Health(reason="waiting for a term")
    publisher = AcceptedPublisher(
        [ring.outbox(endpoints.gateway(i)) for i in range(config.gateway.workers)]
    )

    def process(entries: list[RingEntry]) -> list[RingEntry]:
        resolver.resolve(entries)
        publisher.collect(entries, resolver.newest if resolver.leading else 0)
        if not health.ready and any(isinstance(e, TermStart) for e in entries):
            health.set(True, "leading")
        return entries

    stage = ResolverStage(
        "resolver",
        ring.inbox(endpoints.resolver),
        ring.outbox(endpoints.persister),
        process,
        shutdowns_expected=1,
        drain_timeout_s=config.drain_timeout_s,
        health=health,
    )
    stage.publisher = publisher
    return stage, stage_app("resolver", health)
