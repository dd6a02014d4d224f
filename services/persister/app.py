"""Persister process: claims and opens a term, then runs the `Engine` on ring input and
sends answers to the gateway worker that owns each request."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections import defaultdict
from pathlib import Path

from fastapi import FastAPI
from prometheus_client import Counter, Gauge

from services.persister.answers import Answers
from services.persister.engine import Engine
from services.persister.leadership import (
    LostClaim,
    OpenedTerm,
    claim,
    newest_claim_pod,
    open_term,
)
from services.persister.release import Slot
from weaseldb import recovery, tracing
from weaseldb.blobstore import BlobError, BlobStore
from weaseldb.blobstore.metered import MeteredStore
from weaseldb.config import Config
from weaseldb.layout import is_newer_term
from weaseldb.protocol import (
    CommitEntry,
    CommitState,
    DurableEvents,
    EventTransaction,
    GatewayMessage,
    LeaderLost,
    Progress,
    RingEntry,
    Shutdown,
    StatusEntry,
    TermStart,
    decode_batch,
    encode_batch,
)
from weaseldb.ring import Endpoints, Outbox, Ring
from weaseldb.service import Health, HttpServer, stage_app
from weaseldb.types import NotLeader
from weaseldb.versioncell import VersionCell

log = logging.getLogger("weaseldb.persister")

COMMITTED = Gauge("weaseldb_committed_version", "Last durable, released version")
TERM = Gauge("weaseldb_term", "Term this process set leads (0 when not leading)")
IN_FLIGHT = Gauge("weaseldb_persister_in_flight", "Batch PUTs in flight (incl. backoff)")
BATCHES = Counter("weaseldb_persister_batches_total", "Data batches made durable and released")
PUTS = Counter("weaseldb_persister_puts_total", "Batch PUT attempts")
STORE_REQUESTS = Counter(
    "weaseldb_store_requests_total",
    "Object-store requests by operation and key area",
    ["op", "area"],
)


def new_leader_id(pod_name: str) -> str:
    return f"{pod_name or socket.gethostname()}-{uuid.uuid4().hex[:12]}"


class PersisterStage:
    def __init__(self, config: Config, ring: Ring, store: BlobStore) -> None:
        endpoints = Endpoints(config)
        self.health = Health(reason="recovering")
        self._config = config
        self._store = store
        self._inbox = ring.inbox(endpoints.persister)
        self._gateways: list[Outbox] = [
            ring.outbox(endpoints.gateway(i)) for i in range(config.gateway.workers)
        ]
        self._answers = Answers(config.persister.request_id_memory)
        self._cell = VersionCell(Path(config.run_dir) / "committed.version")
        self._promote = asyncio.Event()
        self._stop = asyncio.Event()
        self._term: OpenedTerm | None = None
        self._engine: Engine | None = None
        self._committed = 0
        self._outgoing: dict[int, list[GatewayMessage]] = defaultdict(list)
        self._outgoing_ready = asyncio.Event()
        self._puts_counted = 0
        # Released transactions not yet sent as DurableEvents, and the version released
        # just before them (the change stream's prev_version).
        self._events: list[EventTransaction] = []
        self._events_prev = 0
        self._last_released_tx = 0

    # Lifecycle

    async def run(self, http: HttpServer) -> int:
        try:
            term = await self._lead()
        except NotLeader as e:
            log.error("not leading: %s", e)
            await self._broadcast([LeaderLost(str(e))])
            return 1
        if term is None:
            return 0  # stopped while standby
        engine = Engine(
            self._store,
            self._config.persister,
            term,
            on_release=self._released,
            on_fail=self._failed,
        )
        self._engine = engine
        return await self._serve(engine, term)

    def on_signal(self) -> None:
        # The drain travels the ring as Shutdown; a signal only bounds how long we wait.
        asyncio.get_running_loop().call_later(self._config.drain_timeout_s, self._stop.set)
        if self._term is None:
            self._stop.set()

    def promote(self) -> None:
        self._promote.set()

    async def _may_claim_at_start(self) -> bool:
        if self._config.persister.claim_on_start == "always":
            return True
        holder = await newest_claim_pod(self._store, self._config.persister)
        if holder is None or holder == self._config.pod_name:
            return True
        self.health.set(False, f"standby: the newest term is held by pod {holder}")
        return False

    async def _lead(self) -> OpenedTerm | None:
        leader_id = new_leader_id(self._config.pod_name)
        if not await self._may_claim_at_start() and not await self._wait_for_promotion():
            return None
        while True:
            try:
                claimed = await claim(
                    self._store,
                    leader_id=leader_id,
                    pod_name=self._config.pod_name,
                    config=self._config.persister,
                )
                break
            except LostClaim as e:
                self.health.set(False, f"standby: {e}")
                if not await self._wait_for_promotion():
                    return None
        self.health.set(False, f"recovering term {claimed.term}")
        term = await open_term(self._store, claimed, self._config.persister)
        self._term = term
        self._committed = term.last_version
        self._answers.start_term(term.last_version + 1)
        self._last_released_tx = self._events_prev = term.last_version
        self._cell.write(term.last_version)
        COMMITTED.set(term.last_version)
        TERM.set(term.term)
        log.info(
            "leading term %d as %s from version %d", term.term, leader_id, term.last_version + 1
        )
        return term

    async def _wait_for_promotion(self) -> bool:
        promote = asyncio.create_task(self._promote.wait())
        stop = asyncio.create_task(self._stop.wait())
        await asyncio.wait({promote, stop}, return_when=asyncio.FIRST_COMPLETED)
        promote.cancel()
        stop.cancel()
        self._promote.clear()
        return not self._stop.is_set()

    async def _serve(self, engine: Engine, term: OpenedTerm) -> int:
        self.health.set(False, "announcing the term on the ring")
        await self._broadcast(
            [TermStart(term.term, term.leader_id, term.last_version + 1, term.last_version)]
        )
        sender = asyncio.create_task(self._send_outgoing())
        watcher = asyncio.create_task(self._watch_terms(engine, term))
        reader = asyncio.create_task(self._read(engine))
        stop = asyncio.create_task(self._stop.wait())
        failed = asyncio.create_task(engine.failed.wait())
        await asyncio.wait({reader, stop, failed}, return_when=asyncio.FIRST_COMPLETED)
        for task in (stop, failed):
            task.cancel()
        if reader.done():
            code = reader.result()
        else:
            reader.cancel()
            if engine.failure is None:
                log.warning("persister: drain timed out")
            code = 1
        if engine.failure is not None:
            await self._broadcast([LeaderLost(str(engine.failure))])
        sender.cancel()
        watcher.cancel()
        return code

    async def _read(self, engine: Engine) -> int:
        while True:
            entries = [e for frame in await self._inbox.receive() for e in decode_batch(frame)]
            if any(isinstance(e, TermStart) for e in entries):
                self.health.set(True, "leading")
            work: list[RingEntry] = [e for e in entries if not isinstance(e, TermStart | Shutdown)]
            if work:
                engine.submit(work)
            if engine.failure is not None:
                return 1
            if any(isinstance(e, Shutdown) for e in entries):
                await engine.drain()
                await self._broadcast([Shutdown()])
                return 1 if engine.failure is not None else 0
            IN_FLIGHT.set(engine.in_flight)
            await engine.wait_for_capacity()

    async def _watch_terms(self, engine: Engine, term: OpenedTerm) -> None:
        while engine.failure is None:
            await asyncio.sleep(self._config.persister.term_watch_interval_s)
            try:
                newest = await recovery.newest_claim(self._store)
            except BlobError as e:
                log.warning("term watch: %s", e)  # the write path decides about the store
                continue
            if newest is not None and is_newer_term(newest, term.term):
                engine.depose(f"term {newest} was claimed after ours ({term.term})")

    # Answers

    def _released(self, slots: list[Slot]) -> None:
        released_ns = time.time_ns()
        for slot in slots:
            tracing.record_stage("persister", slot.riders, slot.opened_ns, released_ns)
            if slot.number is not None:
                self._committed = slot.last_version
                BATCHES.inc()
            for entry in slot.riders:
                if (
                    slot.number is not None
                    and isinstance(entry, CommitEntry)
                    and entry.state is CommitState.ACCEPTED
                ):
                    if not self._events:
                        self._events_prev = self._last_released_tx
                    self._events.append(
                        EventTransaction(
                            entry.version, entry.request_id, entry.timestamp_ms, entry.operations
                        )
                    )
                    self._last_released_tx = entry.version
                reply = self._answers.reply(entry, self._committed)
                if reply is not None and isinstance(entry, (CommitEntry, StatusEntry)):
                    self._outgoing[entry.origin].append(reply)
        # Raise the shared version before any answer leaves (see weaseldb.versioncell).
        self._cell.write(self._committed)
        COMMITTED.set(self._committed)
        self._outgoing_ready.set()

    def _failed(self, entries: list[RingEntry], error: BaseException) -> None:
        for entry in entries:
            if isinstance(entry, CommitEntry):
                self._outgoing[entry.origin].append(Answers.not_leader(entry))
        self._outgoing_ready.set()

    async def _send_outgoing(self) -> None:
        """The only sender of answers, so each worker gets them in release order."""
        while True:
            await self._outgoing_ready.wait()
            self._outgoing_ready.clear()
            await self._flush_outgoing()

    async def _flush_outgoing(self) -> None:
        if self._term is None:
            return
        outgoing, self._outgoing = self._outgoing, defaultdict(list)
        if self._engine is not None:
            PUTS.inc(self._engine.puts - self._puts_counted)
            self._puts_counted = self._engine.puts
        events: bytes | None = None
        if self._events:
            # Encoded once for every worker: the cost is per release round, not per
            # worker or subscriber. Sent before Progress, so a worker that has seen
            # Progress(v) has seen every transaction up to v.
            events = encode_batch(
                list[GatewayMessage]([DurableEvents(self._events_prev, self._events)])
            )
            self._events = []
        progress = Progress(self._committed, self._term.leader_id, self._term.term)
        for worker, outbox in enumerate(self._gateways):
            if events is not None:
                await outbox.send(events)
            await outbox.send(encode_batch([progress, *outgoing.get(worker, [])]))

    async def _broadcast(self, messages: list[GatewayMessage]) -> None:
        await self._flush_outgoing()
        for outbox in self._gateways:
            await outbox.send(encode_batch(messages))


def build(config: Config, ring: Ring, store: BlobStore) -> tuple[PersisterStage, FastAPI]:
    metered = MeteredStore(store, lambda op, area: STORE_REQUESTS.labels(op, area).inc())
    stage = PersisterStage(config, ring, metered)
    app = stage_app("persister", stage.health)

    @app.post("/promote", tags=["operations"], summary="Let a standby claim the next term")
    async def promote() -> dict[str, str]:
        stage.promote()
        return {"status": "promoting"}

    return stage, app
