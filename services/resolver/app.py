"""Resolver process: ring wiring around `services.resolver.logic.Resolver`.

Besides forwarding each ring batch to the persister, it publishes the transactions it
accepted to the gateway workers that have `durable=false` subscribers (one
`AcceptedEvents` message per ring batch and such worker, whatever the number of
subscribers); a worker says so with an `Interest` entry on the ring.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from fastapi import FastAPI
from prometheus_client import Counter

from services.resolver.logic import Resolver
from weaseldb.core.config import Config
from weaseldb.core.protocol import (
    AcceptedEvents,
    CommitEntry,
    CommitState,
    EventTransaction,
    Hello,
    Interest,
    RingEntry,
    TermStart,
    encode_batch,
)
from weaseldb.core.types import Stage, Term, Version
from weaseldb.runtime.relay import RelayStage
from weaseldb.runtime.ring import Endpoints, Sender, Transport
from weaseldb.runtime.service import Health, stage_app

#: Unsent accepted-event frames kept before the backlog is dropped.
ACCEPTED_BACKLOG_BYTES = 16 * 1024 * 1024
DROPPED = Counter(
    "weaseldb_resolver_accepted_dropped_total",
    "Accepted-event frames dropped because a gateway worker did not keep up",
)


@dataclass
class _Frame:
    data: bytes
    workers: list[int]  # the gateway workers it goes to
    sync: bool  # answers an Interest: never dropped, or that worker's stream would not start


class AcceptedPublisher:
    """Collects accepted transactions per ring batch; one task sends them, so publishing
    never delays forwarding to the persister. Only workers that asked (`Interest`) get
    them. The backlog is bounded: when gateway workers do not keep up, it is dropped, and
    the next frame's `prev_version` shows the gap, so workers close their durable=false
    streams (those clients resume after a checkpoint)."""

    def __init__(self, outboxes: list[Sender], limit_bytes: int = ACCEPTED_BACKLOG_BYTES) -> None:
        self._outboxes = outboxes
        self._limit = limit_bytes
        self._frames: list[_Frame] = []
        self.backlog_bytes = 0
        self._ready = asyncio.Event()
        self._term = Term(0)
        self._prev = Version(0)  # newest accepted version (published, if anyone listens)
        self._through = Version(0)
        self._wanted: dict[int, int] = {}  # worker -> the sync number of its interest

    def collect(self, entries: list[RingEntry], resolved_through: Version) -> None:
        transactions: list[EventTransaction] = []
        prev = self._prev
        for entry in entries:
            if isinstance(entry, TermStart) and entry.term != self._term:
                self._emit(transactions, prev)
                transactions = []
                self._term = entry.term
                self._prev = prev = self._through = Version(entry.first_version - 1)
            elif isinstance(entry, CommitEntry) and entry.state is CommitState.ACCEPTED:
                if not self._wanted:
                    self._prev = entry.version  # nobody listens: only keep count
                    continue
                transactions.append(
                    EventTransaction(
                        entry.version, entry.request_id, entry.timestamp_ms, entry.operations
                    )
                )
            elif isinstance(entry, Interest | Hello):
                # What came before goes to the workers that wanted it before.
                self._emit(transactions, prev)
                transactions, prev = [], self._prev
                self._take_interest(entry)
        if self._term and (transactions or resolved_through > self._through):
            self._through = max(self._through, resolved_through)
            self._emit(transactions, prev, always=True)

    def _take_interest(self, entry: Interest | Hello) -> None:
        if isinstance(entry, Hello):
            if entry.stage == Stage.GATEWAY:
                self._wanted.pop(entry.worker, None)  # a new process: no subscribers yet
            return
        if not 0 <= entry.worker < len(self._outboxes):
            return
        if not entry.accepted:
            self._wanted.pop(entry.worker, None)
        elif self._wanted.get(entry.worker) != entry.accepted:
            self._wanted[entry.worker] = entry.accepted
            message = AcceptedEvents(self._term, self._prev, self._through, [], entry.accepted)
            self._queue(message, [entry.worker], sync=True)

    def _emit(
        self, transactions: list[EventTransaction], prev: Version, *, always: bool = False
    ) -> None:
        if not (transactions or always):
            return
        if transactions:
            self._prev = transactions[-1].version
        if self._wanted:
            message = AcceptedEvents(self._term, prev, self._through, transactions)
            self._queue(message, list(self._wanted), sync=False)

    def _queue(self, message: AcceptedEvents, workers: list[int], *, sync: bool) -> None:
        frame = _Frame(encode_batch([message]), workers, sync)
        if self.backlog_bytes + len(frame.data) > self._limit:
            kept = [f for f in self._frames if f.sync]
            DROPPED.inc(len(self._frames) - len(kept))
            self._frames = kept
            self.backlog_bytes = sum(len(f.data) for f in kept)
        self._frames.append(frame)
        self.backlog_bytes += len(frame.data)
        self._ready.set()

    async def run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            frames, self._frames, self.backlog_bytes = self._frames, [], 0
            for frame in frames:
                for worker in frame.workers:
                    await self._outboxes[worker].send(frame.data)


def build(config: Config, ring: Transport) -> tuple[RelayStage, FastAPI]:
    endpoints = Endpoints(config)
    resolver = Resolver(config.resolver)
    health = Health(reason="waiting for a term")
    publisher = AcceptedPublisher(
        [ring.outbox(endpoints.gateway(i)) for i in range(config.gateway.workers)]
    )

    def process(entries: list[RingEntry]) -> list[RingEntry]:
        resolver.resolve(entries)
        publisher.collect(entries, resolver.newest if resolver.leading else Version(0))
        if not health.ready and any(isinstance(e, TermStart) for e in entries):
            health.set(True, "leading")
        return entries

    stage = RelayStage(
        Stage.RESOLVER,
        ring.inbox(endpoints.resolver),
        ring.outbox(endpoints.persister),
        process,
        shutdowns_expected=1,
        drain_timeout_s=config.drain_timeout_s,
        health=health,
        companions=[publisher.run],  # publishing never delays forwarding to the persister
    )
    return stage, stage_app(Stage.RESOLVER, health)
