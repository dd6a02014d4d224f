"""Change-stream fan-out inside the reader (no framework, no transport).

Each batch of transactions the reader applies becomes one `Round` of events rendered once
(the upstream's own bytes), appended to the `Journal` (weaseldb/core/journal.py); every
subscriber reads the journal through its own cursor when it wakes, so a round costs one
append whatever the number of subscribers, and a subscriber one read and one write per
wake-up. A subscriber more than its
limit behind is cut off (only it), and a round is dropped once every subscriber has read it.
The same shape as the gateway's hub (services/gateway/subscriptions.py), keyed by versions
because the reader serves durable events only.

Filtered subscribers (`KeyFilter`) get only the transactions touching their range, each
with `prev_version` rewritten to the previous transaction sent on that connection
(docs/api.md's filter rules); that is the one per-subscriber render, and only for the
events it is sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from weaseldb.core.changes import KeyFilter, transaction_frame
from weaseldb.core.journal import Journal
from weaseldb.core.protocol import Operation

_PREV = b',"prev_version":'


def with_prev_version(data: bytes, prev_version: int) -> bytes:
    """The event's JSON with its top-level `prev_version` replaced. The key follows
    `request_id` and `version` in every event the gateway renders, and a JSON string cannot
    hold an unescaped quote, so the first `,"prev_version":` is the field itself."""
    start = data.index(_PREV) + len(_PREV)
    stop = data.index(b",", start)
    return b"%s%d%s" % (data[:start], prev_version, data[stop:])


@dataclass(frozen=True, slots=True)
class Item:
    version: int
    data: bytes  # the event's JSON as the upstream sent it
    operations: tuple[Operation, ...]
    frame: bytes  # transaction_frame(version, data)


@dataclass(eq=False, slots=True)
class Round:
    items: list[Item]
    data: bytes  # every item's frame, joined

    @classmethod
    def of(cls, items: list[Item]) -> Round:
        return cls(items, b"".join(item.frame for item in items))


@dataclass(eq=False)
class Subscriber:
    """One `/v1/subscribe` connection. `position`: everything up to it was sent or is known
    to be skipped by the filter; `prev_sent`: the version of the last transaction sent
    (the next one's prev_version in a filtered stream)."""

    fan: FanOut
    position: int
    key_filter: KeyFilter | None = None
    prev_sent: int = 0
    cursor: int = 0
    offset: int = 0
    closed: str | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    on_cut: Callable[[], object] | None = None

    def __post_init__(self) -> None:
        self.prev_sent = self.position

    def render(self, items: list[Item]) -> bytes:
        """The frames of `items` this subscriber is owed (above its position, in its
        range), advancing its position."""
        chunks: list[bytes] = []
        for item in items:
            if item.version <= self.position:
                continue
            self.position = item.version
            if self.key_filter is None:
                chunks.append(item.frame)
            elif self.key_filter.touches(item.operations):
                data = with_prev_version(item.data, self.prev_sent)
                chunks.append(transaction_frame(item.version, data))
            else:
                continue
            self.prev_sent = item.version
        return b"".join(chunks)

    def take(self) -> bytes:
        """Everything the journal holds for it since its last take."""
        rounds = self.fan.journal.read(self)
        self.wake.clear()
        chunks: list[bytes] = []
        for round_ in rounds:
            first = round_.items[0].version
            if self.key_filter is None and first > self.position:
                chunks.append(round_.data)  # the common case: the round's bytes as they are
                self.position = self.prev_sent = round_.items[-1].version
            else:
                chunks.append(self.render(round_.items))
        return b"".join(chunks)

    @property
    def pending_bytes(self) -> int:
        return self.fan.journal.end - self.offset

    def close(self, reason: str) -> None:
        if self.closed is None:
            self.closed = reason
        self.wake.set()


class FanOut:
    """The subscribers: the journal's readers, slowest first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.journal: Journal[Round, Subscriber] = Journal()
        self.cut_off = 0

    @property
    def subscribers(self) -> dict[Subscriber, None]:
        return self.journal.readers

    def register(self, position: int, key_filter: KeyFilter | None) -> Subscriber:
        sub = Subscriber(self, position, key_filter)
        self.journal.join(sub)
        return sub

    def unregister(self, sub: Subscriber) -> None:
        self.journal.leave(sub)

    def publish(self, items: list[Item]) -> None:
        """One round, then every subscriber woken; those now more than the limit behind
        are cut off."""
        if not self.subscribers:
            return  # nobody to read it: the kept events serve whoever comes later
        self.journal.append(Round.of(items))
        cut = self.journal.cut_behind(self.limit)
        for sub in cut:
            sub.close("slow_consumer")
            if sub.on_cut is not None:
                sub.on_cut()
        self.cut_off += len(cut)
        for sub in self.subscribers:
            sub.wake.set()

    def close_all(self, reason: str) -> None:
        for sub in list(self.subscribers):
            sub.close(reason)
            self.journal.leave(sub)

    def wake_all(self) -> None:
        for sub in self.subscribers:
            sub.wake.set()
