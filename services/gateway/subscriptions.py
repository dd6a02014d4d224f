"""Change-stream fan-out inside one gateway worker (no framework, no transport).

The persister sends `DurableEvents` and the resolver `AcceptedEvents` once per round to
the workers that asked for them; the `Hub` renders each transaction once and appends the
round to that kind's `Journal` (weaseldb/core/journal.py), which every subscriber of the
kind reads through its own cursor when it wakes (at most once per linger). So a round
costs one render per transaction and one append, whatever the number of subscribers; a
subscriber costs one read and one write per wake-up. Filtered subscribers (`?begin=&end=`
or `?prefix=`) pay for themselves: a round keeps its transactions beside their rendered
bytes, tests them against a filter the first time a subscriber with that filter reads it,
and renders again an event whose `prev_version` must differ once per item and
prev_version (so subscribers sharing a filter share the work); unfiltered subscribers
never look.
A subscriber that falls more than its limit behind the journal is cut off (only it; nobody
else waits for it), and the journal keeps a round only until every subscriber has read it.

Feeds: a worker asks for a kind of events only while it has subscribers of that kind
(`Hub.wanted`, sent upstream as an `Interest`), so a worker without subscribers is not
woken for every commit. Each time a feed is wanted anew it gets a new sync number; the
publisher answers it with an empty message carrying the number and the version before
everything it sends next. Until that answer the feed ignores what arrives (leftovers of an
earlier want), after it nothing is missing.

Hand-over from history to live: a new subscriber registers first (the journal keeps what
arrives from that moment for it), waits until its feed is synced (`Hub.ready`), then the
caller streams history from the store up to at least what the hub had seen then
(`Hub.seen`), and `go_live(h)` makes the subscriber skip what it reads at or below the last
history version h, so the stream has no gap and no duplicate.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from services.gateway import sse
from weaseldb.core.changes import KeyFilter
from weaseldb.core.journal import Journal
from weaseldb.core.protocol import AcceptedEvents, DurableEvents, EventTransaction


class CloseReason(enum.StrEnum):
    """Why a change stream stops."""

    SLOW = "slow_consumer"  # fell more than its buffer behind: cut off, nothing more sent
    LEADER_CHANGED = "leader_changed"
    EVENTS_DROPPED = "events_dropped"  # its feed skipped transactions: it would miss some
    ENDED = "ended"  # the gateway is stopping
    DISCONNECTED = "disconnected"  # the client went away


@dataclass(frozen=True, slots=True)
class Source:
    """What a round's events were rendered from. Only filtered subscribers read it: they
    send a subset, each with the previous version *they* sent as `prev_version`."""

    transactions: list[EventTransaction]  # one for one beside `Round.items`
    prev: int  # the prev_version rendered into the first item (the others: the item before)
    leader_id: str  # rendered into every item


@dataclass(eq=False)
class Round:
    """One round of rendered events, shared by every subscriber of its kind."""

    items: list[tuple[int, bytes]]  # (version, rendered event) per transaction
    data: bytes  # all of them joined
    source: Source
    # Filtered subscribers' work, done once per round for all who share a filter (and a
    # position): made on first use, so rounds nobody filters carry none of it.
    _touching: dict[KeyFilter, list[int]] | None = None
    _renders: dict[tuple[int, int], bytes] | None = None

    @classmethod
    def of(cls, items: list[tuple[int, bytes]], source: Source) -> Round:
        return cls(items, b"".join(event for _, event in items), source)

    def touching(self, keys: KeyFilter) -> list[int]:
        """Indexes of the items whose transaction touches `keys`."""
        if self._touching is None:
            self._touching = {}
        found = self._touching.get(keys)
        if found is None:
            transactions = self.source.transactions
            found = [i for i, tx in enumerate(transactions) if keys.touches(tx.operations)]
            self._touching[keys] = found
        return found

    def event(self, index: int, prev: int) -> bytes:
        """Item `index` with `prev` as its prev_version: the shared bytes when they already
        say so, else rendered again (once per item and prev_version)."""
        rendered_prev = self.source.prev if index == 0 else self.items[index - 1][0]
        if prev == rendered_prev:
            return self.items[index][1]
        if self._renders is None:
            self._renders = {}
        own = self._renders.get((index, prev))
        if own is None:
            tx = self.source.transactions[index]
            own = self._renders[index, prev] = sse.transaction_event(
                tx, prev, self.source.leader_id
            )
        return own


@dataclass(eq=False)
class Subscriber:
    durable: bool
    limit: int
    feed: Feed
    cursor: int = 0  # the next round of the journal to read
    offset: int = 0  # the journal's offset at `cursor`
    live: bool = False
    last_version: int = 0  # newest transaction version taken (or sent as history)
    filter: KeyFilter | None = None  # send only transactions touching it (None: all)
    sent: int = 0  # filtered: the last version sent, the next one's prev_version
    closed: CloseReason | None = None  # why the stream stops (None while open)
    flush_first: bool = True  # deliver what is buffered before stopping
    _kept: list[Round] | None = None  # what was unread when it closed (journal: no longer)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    on_cut: Callable[[], object] | None = None  # called when cut off for falling behind

    @property
    def journal(self) -> Journal[Round, Subscriber]:
        return self.feed.journal

    @property
    def pending_bytes(self) -> int:
        if self._kept is not None:
            return sum(len(r.data) for r in self._kept)
        return self.journal.end - self.offset

    def start_history(self, after: int) -> None:
        """The stream starts after version `after` (history from the store comes first)."""
        self.last_version = self.sent = after

    def history_event(self, prev: int, leader_id: str, tx: EventTransaction) -> bytes | None:
        """The event of a transaction read from the store before going live (`prev`: the
        version before it in the log), or None when the filter leaves it out."""
        self.last_version = tx.version
        if self.filter is not None:
            if not self.filter.touches(tx.operations):
                return None
            prev = self.sent  # a filtered stream chains what it sends
        self.sent = tx.version
        return sse.transaction_event(tx, prev, leader_id)

    def go_live(self, history_last: int | None = None) -> None:
        """History was sent up to `history_last` (None: as far as `history_event` read):
        what is buffered at or below it is not sent again."""
        if history_last is not None:
            self.last_version = self.sent = history_last
        self.live = True
        self.wake.set()

    def take(self) -> bytes:
        """Everything not yet taken, without what history already sent."""
        if self._kept is not None:
            rounds, self._kept = self._kept, []
        else:
            rounds = self.journal.read(self)
        self.wake.clear()
        if self.filter is not None:
            return self._filtered(rounds, self.filter)
        chunks: list[bytes] = []
        for round_ in rounds:
            if round_.items[-1][0] <= self.last_version:
                continue
            if round_.items[0][0] <= self.last_version:
                chunks += [event for v, event in round_.items if v > self.last_version]
            else:
                chunks.append(round_.data)
            self.last_version = round_.items[-1][0]
        return b"".join(chunks)

    def _filtered(self, rounds: list[Round], keys: KeyFilter) -> bytes:
        """The transactions of `rounds` touching `keys`, each with the previous version this
        stream sent as `prev_version`."""
        chunks: list[bytes] = []
        for round_ in rounds:
            for index in round_.touching(keys):
                version = round_.items[index][0]
                if version > self.last_version:
                    chunks.append(round_.event(index, self.sent))
                    self.sent = version
            self.last_version = max(self.last_version, round_.items[-1][0])
        return b"".join(chunks)

    def close(self, reason: CloseReason, *, flush: bool) -> None:
        if not self.closed:
            self.closed = reason
            self.flush_first = flush
            # Keep what it has not read: once it leaves the hub, the journal may drop it.
            self._kept = self.journal.since(self.cursor) if flush else []
        self.wake.set()


@dataclass(eq=False)
class Feed:
    """One kind of events coming into this worker: wanted while it has subscribers (the
    journal's readers, slowest first)."""

    limit: int  # bytes a subscriber may fall behind before it is cut off
    journal: Journal[Round, Subscriber] = field(default_factory=Journal)
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

    @property
    def subscribers(self) -> dict[Subscriber, None]:
        return self.journal.readers

    def add(self, sub: Subscriber) -> None:
        self.journal.join(sub)
        self.want()

    def remove(self, sub: Subscriber) -> None:
        self.journal.leave(sub)
        self.settle()

    def publish(self, items: list[tuple[int, bytes]], source: Source) -> list[Subscriber]:
        """Append one round and wake every subscriber; returns the ones it cut off for
        being more than their limit behind (only those: nobody waits for them)."""
        self.journal.append(Round.of(items, source))
        cut = self.journal.cut_behind(self.limit)
        for sub in cut:
            sub.close(CloseReason.SLOW, flush=False)
            if sub.on_cut is not None:
                sub.on_cut()
        for sub in self.subscribers:
            sub.wake.set()
        self.settle()
        return cut


class Hub:
    def __init__(self, buffer_limit: int) -> None:
        self.buffer_limit = buffer_limit
        self.leader_id = ""
        self.term = 0
        self.committed = 0  # durable version (Progress); events up to it were offered
        self.durable_seen = 0  # newest durable transaction version seen
        self.accepted_seen = 0  # newest accepted transaction version seen
        self.accepted_through = 0  # every version up to it was resolved (accepted or not)
        self._feeds = {True: Feed(buffer_limit), False: Feed(buffer_limit)}
        self.dropped = 0

    @property
    def subscribers(self) -> int:
        return sum(len(feed.subscribers) for feed in self._feeds.values())

    def lag(self) -> int:
        """Versions the slowest live subscriber of this worker is behind the newest version
        it could have been sent (the committed version; an accepted stream's newest): the
        journal keeps its readers slowest first, so this looks at the first live one of each
        feed (the ones still sending history come before it, and only they)."""
        lag = 0
        for durable, feed in self._feeds.items():
            slowest = next((sub for sub in feed.subscribers if sub.live), None)
            if slowest is not None:
                newest = max(self.committed, self.seen(durable))
                lag = max(lag, newest - slowest.last_version)
        return lag

    def wanted(self) -> tuple[int, int]:
        """(durable, accepted) sync numbers of the feeds this worker wants (0: not wanted)."""
        return self._feeds[True].number, self._feeds[False].number

    def register(self, durable: bool, keys: KeyFilter | None = None) -> Subscriber:
        feed = self._feeds[durable]
        sub = Subscriber(durable, self.buffer_limit, feed, filter=keys)
        feed.add(sub)
        return sub

    def unregister(self, sub: Subscriber) -> None:
        self._feeds[sub.durable].remove(sub)

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
        if self.term and term != self.term:
            # A new term heard first in a Progress (it can overtake the TermStart): what
            # the new leader recovered never comes as events, so end the streams as
            # TermStart does, before a checkpoint could claim versions they were not sent.
            self.on_term_start(term, leader_id, committed)
            return
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
        items, source = self._render(message.prev_version, message.transactions, self.durable_seen)
        if items:
            self.durable_seen = items[-1][0]
            self._fan_out(True, items, source)

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
            self._close(False, CloseReason.EVENTS_DROPPED, flush=True)
            return
        self.accepted_through = max(self.accepted_through, message.resolved_through)
        items, source = self._render(message.prev_version, message.transactions, self.accepted_seen)
        if items:
            self.accepted_seen = items[-1][0]
            self._fan_out(False, items, source)

    def on_leader_lost(self) -> None:
        """Non-durable streams may hold transactions that will never be durable: close them
        now. Durable streams end cleanly after what they hold (every byte is durable)."""
        self._close(False, CloseReason.LEADER_CHANGED, flush=False)
        self._close(True, CloseReason.LEADER_CHANGED, flush=True)

    def close_all(self) -> None:
        self._close(True, CloseReason.ENDED, flush=True)
        self._close(False, CloseReason.ENDED, flush=True)

    def _close(self, durable: bool, reason: CloseReason, *, flush: bool) -> None:
        feed = self._feeds[durable]
        for sub in list(feed.subscribers):
            sub.close(reason, flush=flush)
            feed.remove(sub)

    def _render(
        self, prev: int, transactions: list[EventTransaction], seen: int
    ) -> tuple[list[tuple[int, bytes]], Source]:
        items: list[tuple[int, bytes]] = []
        kept: list[EventTransaction] = []
        first_prev = prev
        leader = self.leader_id
        for tx in transactions:
            if tx.version > seen:
                if not items:
                    first_prev = prev
                items.append((tx.version, sse.transaction_event(tx, prev, leader)))
                kept.append(tx)
            prev = tx.version
        return items, Source(kept, first_prev, leader)

    def _fan_out(self, durable: bool, items: list[tuple[int, bytes]], source: Source) -> None:
        self.dropped += len(self._feeds[durable].publish(items, source))
