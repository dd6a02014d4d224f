"""The persister's write loop, with no transport: batching, in-flight limit, retries,
fencing on 412, ordered release and drain (storage.md, "Writing batches").

- A batch goes out at once when nothing is in flight (an idle leader adds no delay), when it
  reaches `batch_size_threshold` bytes, or when the PUTs in flight have all completed.
  Otherwise it waits at most one PUT's time: the moving average of recent PUT latencies
  (never less than `batch_timeout_ms`). Under load that is group commit, one batch taking
  what arrived during the PUT before it, so PUTs per commit fall as the load grows; when
  the store is slow, batches still overlap rather than queue.
- The window rule (storage.md, "Recovery"): a new batch number is assigned only while it
  stays fewer than `max_in_flight_requests` numbers past the oldest batch not yet durable.
  A batch stuck in retries therefore holds back every newer one, not only the PUT count,
  so at most that many batches are ever incomplete and one LIST of 1000 keys reaches the
  durable region. It also bounds the PUTs in flight (each has its own number in the window).
- A 412 on our number means someone else owns it: our own batch (a retried PUT that had
  landed) is success; a newer term means we are deposed; an older term cannot happen after
  the fence run and is treated as fatal rather than silently renumbered.
- A PUT refused for space (`StoreFull`) is tried again, the same batch at the same number,
  every `fullness.PROBE_INTERVAL_S` until it lands: the term, the numbering and the version
  order stay as they were, and nothing is torn. Meanwhile `fullness` says the store is full
  (the gateways refuse new commits); see docs/architecture.md, "When the store is full".
- A status lookup's id is written into the next batch as banned, and its answer released
  with that batch, so the ban survives a restart.
- Any fatal error stops the engine: `failure` is set and every unreleased entry is handed to
  `on_fail`, split into the entries whose batch PUT had started (they may have landed) and
  the rest (certainly not written), so the caller answers each correctly and exits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from prometheus_client import Histogram

from services.persister.fullness import PROBE_INTERVAL_S, Fullness
from services.persister.leadership import OpenedTerm
from services.persister.release import OrderedRelease, Slot
from weaseldb.core import batchfile, layout, recovery
from weaseldb.core.batchfile import Transaction
from weaseldb.core.clock import now_ms
from weaseldb.core.config import PersisterConfig
from weaseldb.core.errors import AlreadyExists, Deposed, StoreFull, WeaselError
from weaseldb.core.protocol import (
    CommitEntry,
    CommitState,
    RangeDelete,
    RingEntry,
    StatusEntry,
    Write,
)
from weaseldb.core.store import BlobStore
from weaseldb.core.types import BatchNumber, RequestId, Version
from weaseldb.runtime.retries import with_retries

log = logging.getLogger("weaseldb.persister")

ReleaseHandler = Callable[[list[Slot]], None]
#: Weight of the newest PUT in the moving average of PUT latency.
PUT_LATENCY_WEIGHT = 0.2
#: Unreleased slots (batches and answer-only rounds) kept behind the oldest batch not yet
#: durable before the engine stops taking input: rejected commits and status lookups keep
#: arriving while a batch is stuck in retries, and their answers must wait for it.
MAX_UNRELEASED_SLOTS = 10_000
#: (entries whose batch PUT had started, entries certainly not written, the error)
FailHandler = Callable[[list[RingEntry], list[RingEntry], BaseException], None]

#: Each batch PUT attempt (the create-only write), by how it ended: `landed`, `exists` (a
#: 412: our own retried PUT or a newer term's batch), `full` (refused for space), `failed`
#: (anything else, retried or fatal). One observe per attempt, on children made here.
PUT_SECONDS = Histogram(
    "weaseldb_persister_put_seconds",
    "Batch PUT attempts' wall time by outcome",
    ["outcome"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
_LANDED, _EXISTS, _FULL, _FAILED = (
    PUT_SECONDS.labels(outcome) for outcome in ("landed", "exists", "full", "failed")
)


def _put_outcome(error: Exception) -> Histogram:
    if isinstance(error, AlreadyExists):
        return _EXISTS
    return _FULL if isinstance(error, StoreFull) else _FAILED


def _encoded_size(entry: CommitEntry) -> int:
    size = 32 + len(entry.request_id)
    for op in entry.operations:
        if isinstance(op, Write):
            size += len(op.key) + len(op.value) + 8
        elif isinstance(op, RangeDelete):
            size += len(op.begin) + len(op.end) + 8
        else:
            size += len(op.key) + 4
    return size


class Engine:
    def __init__(
        self,
        store: BlobStore,
        config: PersisterConfig,
        term: OpenedTerm,
        *,
        on_release: ReleaseHandler,
        on_fail: FailHandler,
        fullness: Fullness | None = None,
    ) -> None:
        self._store = store
        self._fullness = fullness or Fullness()
        self._config = config
        self._term = term
        self._on_release = on_release
        self._on_fail = on_fail
        self._next_number = term.next_number
        self._last_version = term.last_version  # last version handed to a batch
        self._release = OrderedRelease()
        self._pending: list[Transaction] = []
        self._bans: list[RequestId] = []
        self._riders: list[RingEntry] = []
        self._pending_bytes = 0
        self._in_flight = 0
        self._timer: asyncio.TimerHandle | None = None
        self._due = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._capacity = asyncio.Event()
        self._capacity.set()
        # Moving average of how long a successful PUT takes: how long a batch may wait.
        self.put_seconds = config.batch_timeout_ms / 1000
        self.failure: BaseException | None = None
        self.failed = asyncio.Event()
        self.puts = 0

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def window_used(self) -> int:
        """Batch numbers assigned from the oldest batch not yet durable to the newest."""
        oldest = self._release.oldest_pending_number()
        return 0 if oldest is None else oldest - self._next_number

    def _window_open(self) -> bool:
        return self.window_used < self._config.max_in_flight_requests

    def submit(self, entries: list[RingEntry]) -> None:
        """Take one ring batch of resolved entries of this term (and riders to release in
        order with them)."""
        if self.failure is not None:
            self._on_fail([], entries, self.failure)
            return
        for entry in entries:
            if isinstance(entry, CommitEntry) and entry.state is CommitState.ACCEPTED:
                self._pending.append(
                    Transaction(
                        entry.version, entry.request_id, entry.timestamp_ms, entry.operations
                    )
                )
                self._pending_bytes += _encoded_size(entry)
                self._last_version = entry.version
            elif isinstance(entry, StatusEntry):
                self._bans.append(entry.request_id)
                self._pending_bytes += 16 + len(entry.request_id)
            self._riders.append(entry)
        self._maybe_flush()

    async def wait_for_capacity(self) -> None:
        """Block the caller while the window is full and a closed batch waits for a number,
        or while too many answers wait behind the oldest batch not yet durable."""
        await self._capacity.wait()

    @property
    def unreleased(self) -> int:
        return len(self._release)

    def _update_capacity(self) -> None:
        waiting_for_number = self._due and bool(self._pending or self._bans)
        full = (waiting_for_number and not self._window_open()) or len(
            self._release
        ) >= MAX_UNRELEASED_SLOTS
        if full and self.failure is None:
            self._capacity.clear()
        else:
            self._capacity.set()

    async def drain(self) -> None:
        """Send whatever is open and wait until every batch is released (or failed)."""
        self._due = True
        self._maybe_flush()
        await self._idle.wait()

    # Batching

    def _maybe_flush(self) -> None:
        if not self._riders or self.failure is not None:
            return
        if not self._pending and not self._bans:
            self._flush()  # answers only: nothing to write, release in order
        elif (
            self._in_flight == 0
            or self._due
            or self._pending_bytes >= self._config.batch_size_threshold
        ):
            if self._window_open():
                self._flush()
            else:
                self._due = True
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            wait = max(self._config.batch_timeout_ms / 1000, self.put_seconds)
            self._timer = loop.call_later(wait, self._on_timer)
        self._update_capacity()

    def _on_timer(self) -> None:
        self._timer = None
        self._due = True
        self._maybe_flush()

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._due = False
        self._idle.clear()
        transactions, bans, riders = self._pending, self._bans, self._riders
        self._pending, self._bans, self._riders, self._pending_bytes = [], [], [], 0
        if not transactions and not bans:
            slot = Slot(None, self._last_version, riders)
            self._release.open(slot)
            self._completed(slot)
            return
        number = self._next_number
        self._next_number = BatchNumber(number - 1)
        last = transactions[-1].version if transactions else self._last_version
        slot = Slot(number, last, riders)
        self._release.open(slot)
        batch = batchfile.Batch(
            format=batchfile.FORMAT_VERSION,
            batch=number,
            term=self._term.term,
            leader_id=self._term.leader_id,
            first_version=transactions[0].version if transactions else Version(last + 1),
            last_version=last,
            created_at_ms=now_ms(),
            transactions=transactions,
            banned=bans,
        )
        slot.batch = batch
        self._in_flight += 1
        task = asyncio.create_task(self._write(slot, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # Writing

    async def _write(self, slot: Slot, batch: batchfile.Batch) -> None:
        key = layout.batch_key(batch.batch)
        data = batchfile.encode(batch)

        # The loop's clock (monotonic), so a simulation with a virtual clock is repeatable.
        clock = asyncio.get_running_loop().time

        async def put() -> None:
            slot.attempts += 1
            self.puts += 1
            started = clock()
            try:
                await self._store.put_if_absent(key, data)
            except Exception as e:  # not a cancellation: no answer, no latency
                _put_outcome(e).observe(clock() - started)
                raise
            took = clock() - started
            _LANDED.observe(took)
            self.put_seconds += PUT_LATENCY_WEIGHT * (took - self.put_seconds)

        try:
            try:
                await self._put_until_landed(put, key)
            except AlreadyExists:
                await self._check_taken(batch)
        except BaseException as e:
            self._in_flight -= 1
            self._fail(e)
            return
        self._in_flight -= 1
        self._completed(slot)

    async def _put_until_landed(self, put: Callable[[], Awaitable[None]], key: str) -> None:
        """`put` with retries; refused for space, the same PUT again after a pause, until it
        lands or the engine stops for another reason."""
        try:
            while True:
                try:
                    return await with_retries(put, self._config, key)
                except StoreFull as e:
                    if self.failure is not None:
                        raise
                    self._fullness.refused(key, e)
                    await asyncio.sleep(PROBE_INTERVAL_S)
        finally:
            self._fullness.landed(key)

    async def _check_taken(self, mine: batchfile.Batch) -> None:
        found = await with_retries(
            lambda: recovery.read_batch(self._store, mine.batch), self._config, "read taken batch"
        )
        if found.term == mine.term and found.first_version == mine.first_version:
            return  # our own PUT landed before its answer was lost
        if layout.is_newer_term(found.term, mine.term):
            raise Deposed(f"batch {mine.batch} belongs to newer term {found.term}")
        raise WeaselError(
            f"batch {mine.batch} was taken by older term {found.term} after our fence; "
            "refusing to renumber (version order would break)"
        )

    def _completed(self, slot: Slot) -> None:
        released = self._release.mark_durable(slot)
        if released:
            self._on_release(released)
        if self._riders:
            self._maybe_flush()
        self._update_capacity()
        if not len(self._release) and not self._riders:
            self._idle.set()

    def depose(self, reason: str) -> None:
        """A newer term exists (seen outside a PUT): stop as if a PUT had been fenced."""
        self._fail(Deposed(reason))

    def _fail(self, error: BaseException) -> None:
        if self.failure is None:
            log.error("persister stops leading: %s", error)
            self.failure = error
            self.failed.set()
        unreleased = self._release.unreleased()
        written = [e for slot in unreleased if slot.number is not None for e in slot.riders]
        not_written = [e for slot in unreleased if slot.number is None for e in slot.riders]
        not_written += self._riders
        self._release = OrderedRelease()
        self._pending, self._bans, self._riders = [], [], []
        self._capacity.set()
        if written or not_written:
            self._on_fail(written, not_written, error)
        self._idle.set()
