"""Persister process: leads terms one after another, runs an `Engine` for each, and answers
each gateway worker in release order.

A process leads a new term when it starts (or is promoted), and again, in the same process,
when a sequencer or resolver restarted after the ring carried the current term: their state
(versions handed out, conflict history) is gone, so the ring re-forms under a new term and
entries stamped with the old one are answered not_leader (nothing of them was written). A
restarted gateway worker only needs the current term announced to it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import uuid
from collections import defaultdict
from pathlib import Path

import msgspec
from fastapi import FastAPI
from prometheus_client import Counter, Gauge

from services.persister.answers import Answers
from services.persister.engine import Engine
from services.persister.fullness import PROBE_INTERVAL_S, Fullness
from services.persister.index import IndexWriter, load_window, read_tail, write_segment
from services.persister.leadership import (
    Holder,
    LostClaim,
    OpenedTerm,
    claim,
    newest_claim_holder,
    now_ms,
    open_term,
)
from services.persister.outboxes import WorkerQueues
from services.persister.release import Slot
from services.persister.watch import watch_terms
from weaseldb.core import requestids
from weaseldb.core.config import Config
from weaseldb.core.errors import NotLeader, StoreFull
from weaseldb.core.protocol import (
    CommitEntry,
    CommitState,
    DurableEvents,
    EventTransaction,
    GatewayMessage,
    Hello,
    Interest,
    LeaderLost,
    Progress,
    RingEntry,
    Shutdown,
    StatusEntry,
    TermJoined,
    TermStart,
    decode_batch,
    encode_batch,
    encode_shared,
)
from weaseldb.core.store import BlobStore
from weaseldb.core.types import BatchNumber, Stage, Version
from weaseldb.runtime import tracing
from weaseldb.runtime.ring import Endpoints, Ring
from weaseldb.runtime.service import Health, HttpServer, read_port_file, replace_file, stage_app
from weaseldb.runtime.stores.metered import MeteredStore
from weaseldb.runtime.versioncell import VersionCell

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
RING_RESETS = Counter(
    "weaseldb_ring_resets_total", "New terms opened because a stage restarted", ["stage"]
)

#: How long a first term waits for the sequencer's and resolver's Hello before announcing.
RING_ASSEMBLY_S = 5.0
#: Frames a gateway worker may have waiting before the persister stops reading the ring.
WORKER_BACKLOG_BYTES = 64 * 1024 * 1024
RESET = -1
#: How often an idle persister tells the gateway workers it is alive.
HEARTBEAT_S = 1.0


async def _any_set(events: tuple[asyncio.Event, ...], *, at_most_s: float | None = None) -> None:
    """Wait until one of `events` is set, or `at_most_s` seconds have passed."""
    waits = [asyncio.create_task(event.wait()) for event in events]
    await asyncio.wait(waits, timeout=at_most_s, return_when=asyncio.FIRST_COMPLETED)
    for task in waits:
        task.cancel()


def new_leader_id(pod_name: str) -> str:
    return f"{pod_name or socket.gethostname()}-{uuid.uuid4().hex[:12]}"


class PersisterStage:
    def __init__(self, config: Config, ring: Ring, store: BlobStore) -> None:
        endpoints = Endpoints(config)
        ids = config.idempotency
        self.health = Health(reason="recovering")
        self._config = config
        self._store = store
        self._run_dir = Path(config.run_dir)
        self._inbox = ring.inbox(endpoints.persister)
        self._queues = WorkerQueues(
            [ring.outbox(endpoints.gateway(i)) for i in range(config.gateway.workers)],
            WORKER_BACKLOG_BYTES,
        )
        self._answers = Answers(
            ids.request_id_memory,
            window_ms=int(ids.request_id_window_s * 1000),
            hard_cap=ids.request_id_max,
        )
        self._cell = VersionCell(self._run_dir / "committed.version")
        self._fullness = Fullness(self._store_full_changed)
        self._promote = asyncio.Event()
        self._stop = asyncio.Event()
        self._term: OpenedTerm | None = None
        self._window_file = ""
        self._engine: Engine | None = None
        self._index: IndexWriter | None = None
        self._announced = False  # TermStart of `_term` was sent to the gateways
        self._ring_closed = False  # ... and a copy of it came back around the ring
        self._heard: set[Stage] = set()  # stages whose Hello arrived
        self._ring_assembled = asyncio.Event()  # ... the sequencer's and the resolver's
        self._reset = asyncio.Event()  # a sequencer or resolver restarted: new term
        self._shutdown = asyncio.Event()  # Shutdown came around the ring
        self._committed = Version(0)
        self._outgoing: dict[int, list[GatewayMessage]] = defaultdict(list)
        self._puts_counted = 0
        # Released transactions not yet sent as DurableEvents, and the version released
        # just before them (the change stream's prev_version).
        self._events: list[EventTransaction] = []
        self._events_prev = Version(0)
        self._last_released_tx = Version(0)
        # What each gateway worker subscribes to (only workers with subscribers are here):
        # the others get no events, and no Progress but the heartbeat.
        self._interest: dict[int, Interest] = {}

    # Lifecycle

    async def run(self, http: HttpServer) -> int:
        self._queues.start()
        reader = asyncio.create_task(self._read_loop(), name="persister-reader")
        reader.add_done_callback(self._reader_ended)
        try:
            return await self._lead_terms()
        finally:
            self._flush_outgoing()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await self._queues.drain()
            reader.cancel()
            self._queues.stop()

    def _reader_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled():
            log.error("the ring reader stopped: %r", task.exception())
            self._stop.set()

    def on_signal(self) -> None:
        # The drain travels the ring as Shutdown; a signal only bounds how long we wait.
        asyncio.get_running_loop().call_later(self._config.drain_timeout_s, self._stop.set)
        if self._term is None:
            self._stop.set()

    def promote(self) -> None:
        self._promote.set()

    async def _lead_terms(self) -> int:
        renewing = False
        while True:
            try:
                term = await self._lead(renewing)
            except NotLeader as e:
                log.error("not leading: %s", e)
                self._broadcast([LeaderLost(str(e))])
                return 1
            except StoreFull as e:
                # Opening a term writes (a claim, batches, a segment): wait for space and
                # start over. The claim may have landed, so the next try claims afresh,
                # with a fence, rather than as the renewal of our own drained term.
                self._fullness.refused("opening a term", e)
                self.health.set(False, f"the store is full: {e}")
                if await self._stopped_within(PROBE_INTERVAL_S):
                    return 0
                renewing = False
                continue
            self._fullness.term_opened()
            if term is None:
                return 0  # stopped while standby
            code = await self._serve(term, first=not renewing)
            if code != RESET:
                return code
            renewing = True

    async def _start_decision(self) -> tuple[bool, Holder | None]:
        """Whether to claim at start, and the newest claim the decision rests on (None with
        `always`: claim whatever term comes next)."""
        if self._config.persister.claim_on_start == "always":
            return True, None
        holder = await newest_claim_holder(self._store, self._config.persister)
        if holder.pod is None or holder.pod == self._config.pod_name:
            return True, holder
        self.health.set(False, f"standby: the newest term is held by pod {holder.pod}")
        return False, None

    async def _lead(self, renewing: bool) -> OpenedTerm | None:
        """Claim, recover and open a term, index the last leader's tail and load the
        idempotency window. `renewing`: this process led the term before and drained it."""
        leader_id = new_leader_id(self._config.pod_name)
        observed: Holder | None
        if renewing and self._term is not None:
            # The term after our own drained one; anyone claiming since wins over us.
            may_claim, observed = True, Holder(self._term.term, self._config.pod_name)
        else:
            may_claim, observed = await self._start_decision()
        if not may_claim and not await self._wait_for_promotion():
            return None
        while True:
            try:
                # Pods starting together all see "unclaimed": each claims the first term
                # create-only, one wins, the others stay standbys (none deposes the winner).
                claimed = await claim(
                    self._store,
                    leader_id=leader_id,
                    pod_name=self._config.pod_name,
                    config=self._config.persister,
                    observed=observed,
                )
                break
            except LostClaim as e:
                if renewing:
                    raise NotLeader(f"another process claimed the next term: {e}") from e
                observed = None  # a promotion claims the term after the newest by then
                self.health.set(False, f"standby: {e}")
                if not await self._wait_for_promotion():
                    return None
        self.health.set(False, f"recovering term {claimed.term}")
        persister = self._config.persister
        term = await open_term(self._store, claimed, persister, fence=not renewing)
        await self._index_and_load_window(term)
        self._term = term
        self._committed = term.last_version
        self._answers.start_term(Version(term.last_version + 1))
        self._last_released_tx = self._events_prev = term.last_version
        self._cell.write(term.last_version)
        COMMITTED.set(term.last_version)
        TERM.set(term.term)
        log.info(
            "leading term %d as %s from version %d", term.term, leader_id, term.last_version + 1
        )
        return term

    async def _index_and_load_window(self, term: OpenedTerm) -> None:
        persister = self._config.persister
        tail = await read_tail(self._store, persister, opening=term.opening_batch)
        # The term's first segment covers the tail and our own opening (and fence) batches.
        tail.newest_batch = BatchNumber(term.next_number + 1)
        tail.last_version = term.last_version
        promise = requestids.Promise.of(self._config.idempotency)
        await write_segment(self._store, persister, tail, term.term, promise=promise)
        self._index = IndexWriter(
            self._store,
            persister,
            term=term.term,
            after=tail,
            fullness=self._fullness,
            promise=promise,
        )
        self._answers.indexed_through = term.last_version
        window = await load_window(self._store, self._config.idempotency, now_ms())
        self._window_file = self._write_window(term.term, window)

    def _write_window(self, term: int, window: requestids.Entries) -> str:
        """The sequencer reads it when the term's announcement reaches it."""
        name = f"idwindow-{term:020d}.bin"
        replace_file(self._run_dir / name, requestids.encode_window(window))
        for old in self._run_dir.glob("idwindow-*.bin"):
            if old.name != name:
                old.unlink(missing_ok=True)
        return name

    def _stopping(self) -> bool:
        return self._stop.is_set() or self._shutdown.is_set()

    async def _stopped_within(self, seconds: float) -> bool:
        """Wait up to `seconds`; whether a stop or a shutdown came meanwhile."""
        await _any_set((self._stop, self._shutdown), at_most_s=seconds)
        return self._stopping()

    async def _wait_for_promotion(self) -> bool:
        await _any_set((self._promote, self._stop, self._shutdown))
        self._promote.clear()
        return not self._stopping()

    async def _serve(self, term: OpenedTerm, *, first: bool) -> int:
        engine = Engine(
            self._store,
            self._config.persister,
            term,
            on_release=self._released,
            on_fail=self._failed,
            fullness=self._fullness,
        )
        self._engine = engine
        self._puts_counted = 0
        self._reset.clear()
        if first:
            await self._wait_for_ring_stages()
        self._announce(term)
        watcher = asyncio.create_task(
            watch_terms(
                self._store,
                term.term,
                interval_s=self._config.persister.term_watch_interval_s,
                on_newer=lambda newest: engine.depose(
                    f"term {newest} was claimed after ours ({term.term})"
                ),
                leading=lambda: engine.failure is None,
                give_up_after=self._config.persister.max_retry_attempts + 1,
                on_unreachable=engine.depose,
            )
        )
        ticker = asyncio.create_task(self._tick())
        waits = {
            "reset": asyncio.create_task(self._reset.wait()),
            "shutdown": asyncio.create_task(self._shutdown.wait()),
            "failed": asyncio.create_task(engine.failed.wait()),
            "stop": asyncio.create_task(self._stop.wait()),
        }
        await asyncio.wait(waits.values(), return_when=asyncio.FIRST_COMPLETED)
        for task in (*waits.values(), watcher, ticker):
            task.cancel()
        code = await self._end_term(engine, waits["reset"].done(), waits["shutdown"].done())
        self._announced = self._ring_closed = False
        self._engine = None
        return code

    async def _end_term(self, engine: Engine, reset: bool, shutdown: bool) -> int:
        index = self._index
        if engine.failure is None and (reset or shutdown):
            await engine.drain()
            if index is not None and engine.failure is None:
                await index.flush()
        if engine.failure is not None:
            self._broadcast([LeaderLost(str(engine.failure))])
            return 1
        if reset:
            self.health.set(False, "a stage restarted: opening a new term")
            return RESET
        if shutdown:
            self._broadcast([Shutdown()])
            return 0
        log.warning("persister: drain timed out")
        return 1

    async def _wait_for_ring_stages(self) -> None:
        """At the first term, give the sequencer and resolver a moment to say Hello, so a
        stage that merely started late is not taken for one that restarted. A stage that
        already holds a term (this persister restarted alone) says nothing: its /readyz
        answering 200 is enough. One still waiting for a term (503) has just started and its
        Hello is on the way (through the resolver, for the sequencer's): announcing before
        it arrives would take it for a restart and open a second term at once."""
        deadline = time.monotonic() + RING_ASSEMBLY_S
        while not self._ring_assembled.is_set() and time.monotonic() < deadline:
            missing = {Stage.SEQUENCER, Stage.RESOLVER} - self._heard
            if all([await self._holds_a_term(stage) for stage in missing]):
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ring_assembled.wait(), 0.1)

    async def _holds_a_term(self, stage: str) -> bool:
        # The port it really has (port 0 picks one), once it wrote it.
        written = read_port_file(self._run_dir, stage)
        port = written if written is not None else getattr(self._config.ports, stage)
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 0.5)
            writer.write(b"GET /readyz HTTP/1.0\r\n\r\n")
            status = await asyncio.wait_for(reader.readline(), 0.5)
            writer.close()
            return b" 200 " in status
        except (OSError, TimeoutError):
            return False

    def _announce(self, term: OpenedTerm) -> None:
        self.health.set(False, "announcing the term on the ring")
        self._broadcast([self._term_start(term)])
        self._announced, self._ring_closed = True, False

    def _term_start(self, term: OpenedTerm) -> TermStart:
        return TermStart(
            term.term,
            term.leader_id,
            Version(term.last_version + 1),
            term.last_version,
            self._window_file,
        )

    # Reading the ring

    async def _read_loop(self) -> None:
        while True:
            entries = [e for frame in await self._inbox.receive() for e in decode_batch(frame)]
            self._take(entries)
            engine = self._engine
            if engine is not None:
                IN_FLIGHT.set(engine.in_flight)
                await engine.wait_for_capacity()
            await self._queues.room()

    def _take(self, entries: list[RingEntry]) -> None:
        work: list[RingEntry] = []
        for entry in entries:
            if isinstance(entry, Hello):
                self._on_hello(entry)
            elif isinstance(entry, TermStart):
                if self._is_current(entry.term):
                    self._close_ring()
                    work.append(entry)  # released in order: then the worker hears TermJoined
            elif isinstance(entry, Shutdown):
                self._submit(work)
                work = []
                self._shutdown.set()
            elif isinstance(entry, Interest):
                self._on_interest(entry)
            elif isinstance(entry, CommitEntry | StatusEntry):
                if self._is_current(entry.term):
                    work.append(entry)
                else:
                    self._answer_stale(entry)
        self._submit(work)

    def _is_current(self, term: int) -> bool:
        return (
            self._announced
            and self._term is not None
            and term == self._term.term
            and self._engine is not None
            and not self._reset.is_set()
        )

    def _submit(self, work: list[RingEntry]) -> None:
        if work and self._engine is not None:
            self._engine.submit(work)

    def _close_ring(self) -> None:
        if not self._ring_closed:
            self._ring_closed = True
            self.health.set(True, "leading")

    def _on_interest(self, interest: Interest) -> None:
        """A worker's subscribers changed. A new durable sync number is answered at once,
        with the version released last: every later round reaches the worker, so its live
        stream starts right after that version."""
        worker = interest.worker
        before = self._interest.pop(worker, None)
        if interest.durable or interest.accepted:
            self._interest[worker] = interest
        if interest.durable and (before is None or before.durable != interest.durable):
            sync: list[GatewayMessage] = [
                DurableEvents(self._last_released_tx, [], interest.durable)
            ]
            self._queues.put(worker, encode_batch(sync + self._progress()))

    def _on_hello(self, hello: Hello) -> None:
        self._heard.add(hello.stage)
        if hello.stage == Stage.GATEWAY:
            self._interest.pop(hello.worker, None)  # a new process: it has no subscribers
        if {Stage.SEQUENCER, Stage.RESOLVER} <= self._heard:
            self._ring_assembled.set()
        if not self._announced or self._term is None or self._reset.is_set():
            # The coming announcement reaches it. While a reset is pending the current term
            # is over: a worker told of it would pass it on to a sequencer that restarted
            # too, and that one would number the old term's versions again.
            return
        if hello.stage == Stage.GATEWAY:
            log.info("gateway worker %d (re)started: announcing the term to it", hello.worker)
            self._queues.put(hello.worker, encode_batch([self._term_start(self._term)]))
            return
        log.warning("the %s restarted: the ring lost its state, opening a new term", hello.stage)
        RING_RESETS.labels(hello.stage).inc()
        self._reset.set()

    def _answer_stale(self, entry: CommitEntry | StatusEntry) -> None:
        """An entry of a term that ended (or of none): nothing of it was written."""
        if isinstance(entry, StatusEntry):
            self._outgoing[entry.origin].append(Answers.stale_status(entry))
        else:
            self._outgoing[entry.origin].append(
                Answers.not_leader(entry, "sequenced in a term that has ended")
            )
        self._flush_outgoing()

    async def _tick(self) -> None:
        """Once a second: a quiet stretch still gets its index segment, and every gateway
        worker hears from us (a Progress), so a worker that hears nothing for a while knows
        this persister is gone and stops taking commits (gateway.leader_silence_s)."""
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            if self._index is not None:
                self._index.tick()
            self._flush_outgoing(everyone=True)

    # Answers

    def _released(self, slots: list[Slot]) -> None:
        released_ns = time.time_ns()
        now = now_ms()
        for slot in slots:
            tracing.record_stage(Stage.PERSISTER, slot.riders, slot.opened_ns, released_ns)
            if slot.batch is not None:
                self._committed = slot.last_version
                BATCHES.inc()
                if self._index is not None:
                    self._index.add(slot.batch)
            for entry in slot.riders:
                self._release_entry(entry, slot, now)
        if self._index is not None:
            self._answers.indexed_through = self._index.indexed_through
        # Raise the shared version before any answer leaves (see weaseldb.runtime.versioncell).
        self._cell.write(self._committed)
        COMMITTED.set(self._committed)
        self._flush_outgoing()

    def _release_entry(self, entry: RingEntry, slot: Slot, now: int) -> None:
        if isinstance(entry, TermStart):
            self._outgoing[entry.origin].append(TermJoined(entry.term))
            return
        if (
            slot.batch is not None
            and isinstance(entry, CommitEntry)
            and entry.state is CommitState.ACCEPTED
        ):
            if self._durable_wanted():
                if not self._events:
                    self._events_prev = self._last_released_tx
                self._events.append(
                    EventTransaction(
                        entry.version, entry.request_id, entry.timestamp_ms, entry.operations
                    )
                )
            self._last_released_tx = entry.version
        reply = self._answers.reply(entry, self._committed, now)
        if reply is not None and isinstance(entry, CommitEntry | StatusEntry):
            self._outgoing[entry.origin].append(reply)

    def _failed(
        self, written: list[RingEntry], not_written: list[RingEntry], error: BaseException
    ) -> None:
        why = f"the leader stopped: {error}"
        for entries, maybe_written in ((written, True), (not_written, False)):
            for entry in entries:
                if isinstance(entry, CommitEntry):
                    reply = Answers.failed(entry, maybe_written=maybe_written, why=why)
                    self._outgoing[entry.origin].append(reply)
                elif isinstance(entry, StatusEntry):
                    self._outgoing[entry.origin].append(Answers.stale_status(entry))
        self._flush_outgoing()

    def _store_full_changed(self, full: bool) -> None:
        """Tell every gateway worker now (not at the next heartbeat): while the store is
        full they refuse commits with 503 store_full, and answer the waiting ones."""
        self.health.details["store_full"] = full
        self._flush_outgoing(everyone=True)

    def _durable_wanted(self) -> bool:
        return any(i.durable for i in self._interest.values())

    def _progress(self) -> list[GatewayMessage]:
        if self._term is None:
            return []
        return [
            Progress(self._committed, self._term.leader_id, self._term.term, self._fullness.full)
        ]

    def _flush_outgoing(self, *, everyone: bool = False) -> None:
        """Queue this round's events, progress and answers as one frame per worker that
        needs them, in that order (a worker that has seen Progress(v) has seen every
        transaction up to v). A worker with no answers and no subscribers hears nothing
        but the heartbeat (`everyone`): waking it would cost a context switch per round."""
        outgoing, self._outgoing = self._outgoing, defaultdict(list)
        if self._engine is not None:
            PUTS.inc(self._engine.puts - self._puts_counted)
            self._puts_counted = self._engine.puts
        events = None
        if self._events:
            # Encoded once for every worker: the cost is per release round, not per
            # worker or subscriber.
            events = encode_shared(DurableEvents(self._events_prev, self._events))
            self._events = []
        progress = self._progress()
        for queue in self._queues:
            interest = self._interest.get(queue.worker)
            answers = outgoing.get(queue.worker, [])
            if not (answers or interest or everyone):
                continue
            batch: list[GatewayMessage | msgspec.Raw] = [*progress, *answers]
            if events is not None and interest and interest.durable:
                batch.insert(0, events)
            if batch:
                queue.put(encode_batch(batch))

    def _broadcast(self, messages: list[GatewayMessage]) -> None:
        self._flush_outgoing()
        self._queues.put_all(encode_batch(messages))


def build(config: Config, ring: Ring, store: BlobStore) -> tuple[PersisterStage, FastAPI]:
    metered = MeteredStore(store, lambda op, area: STORE_REQUESTS.labels(op, area).inc())
    stage = PersisterStage(config, ring, metered)
    app = stage_app(Stage.PERSISTER, stage.health)

    @app.post("/promote", tags=["operations"], summary="Let a standby claim the next term")
    async def promote() -> dict[str, str]:
        stage.promote()
        return {"status": "promoting"}

    return stage, app
