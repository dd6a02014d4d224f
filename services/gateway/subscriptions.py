"""Change-stream fan-out inside one gateway worker (no framework, no transport).

The persister sends `DurableEvents` and the resolver `AcceptedEvents` once per round to
the workers that asked for them; the `Hub` renders each transaction once and hands the
same bytes to every subscriber of that kind, so a round costs one render per transaction
plus one append per subscriber. Each `Subscriber` has a bounded buffer: when its unsent
bytes exceed the limit it is cut off (only it; nobody else waits for it).

Feeds: a worker asks for a kind of events only while it has subscribers of that kind
(`Hub.wanted`, sent upstream as an `Interest`), so a worker without subscribers is not
woken for every commit. Each time a feed is wanted anew it gets a new sync number; the
publisher answers it with an empty message carrying the number and the version before
everything it sends next. Until that answer the feed ignores what arrives (leftovers of an
earlier want), after it nothing is missing.

Hand-over from history to live: a new subscriber registers first (live events buffer from
that moment), waits until its feed is synced (`Hub.ready`), then the caller streams history
from the store up to at least what the hub had seen then (`Hub.seen`), and `go_live(h)`
drops buffered events at or below the last history version h, so the stream has no gap
and no duplicate.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from services.gateway import sse
from weaseldb.protocol import AcceptedEvents, DurableEvents, EventTransaction

CLOSED_SLOW = "slow_consumer"
CLOSED_LEADER = "leader_changed"
CLOSED_GAP = "events_dropped"
ENDED = "ended"


@dataclass(eq=False)
class Subscriber:
    durable: bool
    limit: int
    live: bool = False
    last_version: int = 0  # newest transaction version enqueued
    closed: str = ""  # why the stream stops ("" while open)
    flush_first: bool = True  # deliver what is buffered before stopping
    pending_bytes: int = 0
    # Rounds of rendered events: ((version, event) per transaction, all of them joined).
    _chunks: deque[tuple[list[tuple[int, bytes]], bytes]] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    on_cut: Callable[[], object] | None = None  # called when cut off for falling behind

    def offer(self, items: list[tuple[int, bytes]], joined: bytes) -> bool:
        """Append one round of rendered events; False when this overflowed the buffer."""
        if self.closed or not items:
            return True
        if self.live:
            if items[-1][0] <= self.last_version:
                return True
            if items[0][0] <= self.last_version:  # overlap with what was sent: de-duplicate
                items = [(v, data) for v, data in items if v > self.last_version]
                joined = b"".join(data for _, data in items)
            self.last_version = items[-1][0]
        self._chunks.append((items, joined))
        self.pending_bytes += len(joined)
        self.wake.set()
        if self.pending_bytes > self.limit:
            self.close(CLOSED_SLOW, flush=False)
            if self.on_cut is not None:
                self.on_cut()
            return False
        return True

    def go_live(self, history_last: int) -> None:
        """History was sent up to `history_last`: keep only newer buffered events."""
        self.last_version = history_last
        self.live = True
        chunks, self._chunks, self.pending_bytes = self._chunks, deque(), 0
        for items, joined in chunks:
            if items[-1][0] <= self.last_version:
                continue
            kept, data = items, joined
            if items[0][0] <= self.last_version:
                kept = [(v, d) for v, d in items if v > self.last_version]
                data = b"".join(d for _, d in kept)
            self._chunks.append((kept, data))
            self.pending_bytes += len(data)
            self.last_version = kept[-1][0]
        self.wake.set()

    def take(self) -> bytes:
        data = b"".join(joined for _, joined in self._chunks)
        self._chunks.clear()
        self.pending_bytes = 0
        self.wake.clear()
        return data

    def close(self, reason: str, *, flush: bool) -> None:
        if not self.closed:
            self.closed = reason
            self.flush_first = flush
            if not flush:
                self._chunks.clear()
                self.pending_bytes = 0
        self.wake.set()


@dataclass(eq=False)
class Feed:
    """One kind of events coming into this worker: wanted while it has subscribers."""

    subscribers: set[Subscriber] = field(default_factory=set)
    number: int = 0  # the sync number of the current want (0: not wanted)
    issued: int = 0  # sync numbers handed out so far
    synced: bool = False  # the publisher answered `number`: nothing from here is missing
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def want(self) -> None:
        if not self.number:
            self.issued += 1
            self.number, self.synced = self.issued, False
            self.ready = asyncio.Event()

    def settle(self) -> None:
        """No subscriber left: stop wanting (and wake whoever still waits for a sync)."""
        if not self.subscribers and self.number:
            self.number, self.synced = 0, False
            self.ready.set()

    def answer(self, sync: int) -> bool:
        """Whether this sync answer is the one the feed waits for."""
        if sync != self.number or self.synced:
            return False
        self.synced = True
        self.ready.set()
        return True


class Hub:
    def __init__(self, buffer_limit: int) -> None:
        self.buffer_limit = buffer_limit
        self.leader_id = ""
        self.term = 0
        self.committed = 0  # durable version (Progress); events up to it were offered
        self.durable_seen = 0  # newest durable transaction version seen
        self.accepted_seen = 0  # newest accepted transaction version seen
        self.accepted_through = 0  # every version up to it was resolved (accepted or not)
        self._feeds = {True: Feed(), False: Feed()}
        self._durable = self._feeds[True].subscribers
        self._accepted = self._feeds[False].subscribers
        self.dropped = 0

    @property
    def subscribers(self) -> int:
        return len(self._durable) + len(self._accepted)

    def wanted(self) -> tuple[int, int]:
        """(durable, accepted) sync numbers of the feeds this worker wants (0: not wanted)."""
        return self._feeds[True].number, self._feeds[False].number

    def register(self, durable: bool) -> Subscriber:
        sub = Subscriber(durable, self.buffer_limit)
        feed = self._feeds[durable]
        feed.subscribers.add(sub)
        feed.want()
        return sub

    def unregister(self, sub: Subscriber) -> None:
        feed = self._feeds[sub.durable]
        feed.subscribers.discard(sub)
        feed.settle()

    def ready(self, durable: bool) -> asyncio.Event:
        """Set once the feed of this kind is synced (or stopped being wanted)."""
        return self._feeds[durable].ready

    def synced(self, durable: bool) -> bool:
        return self._feeds[durable].synced

    def seen(self, durable: bool) -> int:
        return self.durable_seen if durable else self.accepted_seen

    def checkpoint(self, durable: bool) -> int:
        return self.committed if durable else min(self.committed, self.accepted_through)

    # Inputs from the ring

    def on_progress(self, committed: int, leader_id: str, term: int) -> None:
        self.committed = max(self.committed, committed)
        self.leader_id, self.term = leader_id, term

    def on_term_start(self, term: int, leader_id: str, committed: int) -> None:
        if self.term and term != self.term:
            self.on_leader_lost()
        self.term, self.leader_id = term, leader_id
        self.committed = max(self.committed, committed)
        self.durable_seen = max(self.durable_seen, committed)
        self.accepted_seen = max(self.accepted_seen, committed)
        self.accepted_through = max(self.accepted_through, committed)

    def on_durable(self, message: DurableEvents) -> None:
        feed = self._feeds[True]
        if message.sync:
            if feed.answer(message.sync):
                self.durable_seen = max(self.durable_seen, message.prev_version)
            return
        if not feed.synced:
            return  # a leftover of an earlier want: history covers it
        items = self._render(message.prev_version, message.transactions, self.durable_seen)
        if items:
            self.durable_seen = items[-1][0]
            self._fan_out(self._durable, items)

    def on_accepted(self, message: AcceptedEvents) -> None:
        if self.term and message.term != self.term:
            return  # a stale round of another term
        feed = self._feeds[False]
        if message.sync:
            if feed.answer(message.sync):
                self.accepted_seen = max(self.accepted_seen, message.prev_version)
                self.accepted_through = max(self.accepted_through, message.resolved_through)
            return
        if not feed.synced:
            return  # a leftover of an earlier want: history covers it
        if message.transactions and message.prev_version > self.accepted_seen:
            # The resolver dropped rounds nobody could take in time: these streams would
            # skip transactions, so they end; their clients resume after a checkpoint.
            self._close(False, CLOSED_GAP, flush=True)
            return
        self.accepted_through = max(self.accepted_through, message.resolved_through)
        items = self._render(message.prev_version, message.transactions, self.accepted_seen)
        if items:
            self.accepted_seen = items[-1][0]
            self._fan_out(self._accepted, items)

    def on_leader_lost(self) -> None:
        """Non-durable streams may hold transactions that will never be durable: close them
        now. Durable streams end cleanly after what they hold (every byte is durable)."""
        self._close(False, CLOSED_LEADER, flush=False)
        self._close(True, CLOSED_LEADER, flush=True)

    def close_all(self) -> None:
        self._close(True, ENDED, flush=True)
        self._close(False, ENDED, flush=True)

    def _close(self, durable: bool, reason: str, *, flush: bool) -> None:
        feed = self._feeds[durable]
        for sub in list(feed.subscribers):
            sub.close(reason, flush=flush)
        feed.subscribers.clear()
        feed.settle()

    def _render(
        self, prev: int, transactions: list[EventTransaction], seen: int
    ) -> list[tuple[int, bytes]]:
        items: list[tuple[int, bytes]] = []
        leader = self.leader_id
        for tx in transactions:
            if tx.version > seen:
                data = sse.transaction_event(tx, prev, leader)
                items.append((tx.version, data))
            prev = tx.version
        return items

    def _fan_out(self, subs: set[Subscriber], items: list[tuple[int, bytes]]) -> None:
        joined = b"".join(data for _, data in items)
        for sub in list(subs):
            if not sub.offer(items, joined):
                subs.discard(sub)
                self.dropped += 1
        if not subs:
            self._feeds[subs is self._durable].settle()
