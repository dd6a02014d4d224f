"""What the persister sends the gateway workers, and when: the answers of each release
round, the change events their subscribers asked for, Progress (the committed version, the
term, whether the store is full) and the heartbeat, each worker's share queued as one frame
on its own queue (outboxes.py).

A release round first indexes its batches and raises the shared version (the version cell)
before any answer leaves, so a client that got "committed" reads its own write. What the
answers are, and which outcomes are remembered for retries, is `Answers` (answers.py).
"""

from __future__ import annotations

import time
from collections import defaultdict

import msgspec
from prometheus_client import Counter, Gauge

from services.persister.answers import Answers
from services.persister.index import IndexWriter
from services.persister.leadership import OpenedTerm
from services.persister.outboxes import WorkerQueues
from services.persister.release import Slot
from services.persister.termstate import TermState
from weaseldb.core.clock import now_ms
from weaseldb.core.protocol import (
    CommitEntry,
    CommitState,
    DurableEvents,
    EventTransaction,
    GatewayMessage,
    Interest,
    Progress,
    RingEntry,
    StatusEntry,
    TermJoined,
    TermStart,
    encode_batch,
    encode_shared,
)
from weaseldb.core.types import Stage, Version
from weaseldb.runtime import tracing
from weaseldb.runtime.versioncell import VersionCell

COMMITTED = Gauge("weaseldb_committed_version", "Last durable, released version")
BATCHES = Counter("weaseldb_persister_batches_total", "Data batches made durable and released")
PUTS = Counter("weaseldb_persister_puts_total", "Batch PUT attempts")


class Outgoing:
    def __init__(
        self, queues: WorkerQueues, state: TermState, answers: Answers, cell: VersionCell
    ) -> None:
        self.queues = queues
        self._state = state
        self._answers = answers
        self._cell = cell
        self._index: IndexWriter | None = None
        self.committed = Version(0)
        self._store_full = False  # as Fullness last said
        self._pending: dict[int, list[GatewayMessage]] = defaultdict(list)  # answers by worker
        self._puts_counted = 0
        # Released transactions not yet sent as DurableEvents, and the version released
        # just before them (the change stream's prev_version).
        self._events: list[EventTransaction] = []
        self._events_prev = Version(0)
        self._last_released_tx = Version(0)
        # What each gateway worker subscribes to (only workers with subscribers are here):
        # the others get no events, and no Progress but the heartbeat.
        self._interest: dict[int, Interest] = {}

    def start_term(self, term: OpenedTerm, index: IndexWriter) -> None:
        """A term opened: releases continue from its first version, indexed by `index`."""
        self._index = index
        self._answers.indexed_through = term.last_version
        self.committed = term.last_version
        self._answers.start_term(Version(term.last_version + 1))
        self._last_released_tx = self._events_prev = term.last_version
        self._puts_counted = 0
        self._cell.write(term.last_version)
        COMMITTED.set(term.last_version)

    # Release rounds (the engine's callbacks)

    def released(self, slots: list[Slot]) -> None:
        released_ns = time.time_ns()
        now = now_ms()
        for slot in slots:
            tracing.record_stage(Stage.PERSISTER, slot.riders, slot.opened_ns, released_ns)
            if slot.batch is not None:
                self.committed = slot.last_version
                BATCHES.inc()
                if self._index is not None:
                    self._index.add(slot.batch)
            for entry in slot.riders:
                self._release_entry(entry, slot, now)
        if self._index is not None:
            self._answers.indexed_through = self._index.indexed_through
        # Raise the shared version before any answer leaves (see weaseldb.runtime.versioncell).
        self._cell.write(self.committed)
        COMMITTED.set(self.committed)
        self.flush()

    def _release_entry(self, entry: RingEntry, slot: Slot, now: int) -> None:
        if isinstance(entry, TermStart):
            self._pending[entry.origin].append(TermJoined(entry.term))
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
        reply = self._answers.reply(entry, self.committed, now)
        if reply is not None and isinstance(entry, CommitEntry | StatusEntry):
            self._pending[entry.origin].append(reply)

    def failed(
        self, written: list[RingEntry], not_written: list[RingEntry], error: BaseException
    ) -> None:
        why = f"the leader stopped: {error}"
        for entries, maybe_written in ((written, True), (not_written, False)):
            for entry in entries:
                if isinstance(entry, CommitEntry):
                    reply = Answers.failed(entry, maybe_written=maybe_written, why=why)
                    self._pending[entry.origin].append(reply)
                elif isinstance(entry, StatusEntry):
                    self._pending[entry.origin].append(Answers.stale_status(entry))
        self.flush()

    def answer_stale(self, entry: CommitEntry | StatusEntry) -> None:
        """An entry of a term that ended (or of none): nothing of it was written."""
        if isinstance(entry, StatusEntry):
            self._pending[entry.origin].append(Answers.stale_status(entry))
        else:
            self._pending[entry.origin].append(
                Answers.not_leader(entry, "sequenced in a term that has ended")
            )
        self.flush()

    # The workers' side

    def on_interest(self, interest: Interest) -> None:
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
            self.queues.put(worker, encode_batch(sync + self._progress()))

    def restarted(self, worker: int) -> None:
        """A new gateway process at `worker`: it has no subscribers."""
        self._interest.pop(worker, None)

    def tell(self, worker: int, messages: list[GatewayMessage]) -> None:
        self.queues.put(worker, encode_batch(messages))

    def store_full_changed(self, full: bool) -> None:
        """Tell every gateway worker now (not at the next heartbeat): while the store is
        full they refuse commits with 503 store_full, and answer the waiting ones."""
        self._store_full = full
        self.flush(everyone=True)

    def _durable_wanted(self) -> bool:
        return any(i.durable for i in self._interest.values())

    def _progress(self) -> list[GatewayMessage]:
        term = self._state.term
        if term is None:
            return []
        return [Progress(self.committed, term.leader_id, term.term, self._store_full)]

    def flush(self, *, everyone: bool = False) -> None:
        """Queue this round's events, progress and answers as one frame per worker that
        needs them, in that order (a worker that has seen Progress(v) has seen every
        transaction up to v). A worker with no answers and no subscribers hears nothing
        but the heartbeat (`everyone`): waking it would cost a context switch per round."""
        outgoing, self._pending = self._pending, defaultdict(list)
        self._count_puts()
        events = None
        if self._events:
            # Encoded once for every worker: the cost is per release round, not per
            # worker or subscriber.
            events = encode_shared(DurableEvents(self._events_prev, self._events))
            self._events = []
        progress = self._progress()
        for queue in self.queues:
            interest = self._interest.get(queue.worker)
            answers = outgoing.get(queue.worker, [])
            if not (answers or interest or everyone):
                continue
            batch: list[GatewayMessage | msgspec.Raw] = [*progress, *answers]
            if events is not None and interest and interest.durable:
                batch.insert(0, events)
            if batch:
                queue.put(encode_batch(batch))

    def _count_puts(self) -> None:
        engine = self._state.engine
        if engine is not None:
            PUTS.inc(engine.puts - self._puts_counted)
            self._puts_counted = engine.puts

    def broadcast(self, messages: list[GatewayMessage]) -> None:
        self.flush()
        self.queues.put_all(encode_batch(messages))
