"""The change-stream journal shared by every fan-out (the gateway's hub, the reader's).

A producer appends one round of already-rendered events at a time; each subscriber reads
the journal through its own cursor (a round sequence number) and offset (bytes appended
before that round), so a round costs one append whatever the number of subscribers, and
how far a subscriber is behind is `end - offset`. The owner drops the rounds every
subscriber has read (`drop_before` the slowest cursor). Generic over the round type: the
journal only needs each round's rendered bytes to keep its byte count.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Generic, Protocol, TypeVar


class Rendered(Protocol):
    @property
    def data(self) -> bytes:
        """The round's events as sent to an unfiltered subscriber."""
        ...


R = TypeVar("R", bound=Rendered)


class Journal(Generic[R]):
    """Rounds in order; a round is dropped once every subscriber has read it."""

    def __init__(self) -> None:
        self._rounds: deque[R] = deque()
        self.first = 0  # sequence number of the oldest round kept
        self.end = 0  # bytes ever appended: the offset after the newest round

    @property
    def next(self) -> int:
        """The sequence number the next round will get."""
        return self.first + len(self._rounds)

    def append(self, round_: R) -> None:
        self.end += len(round_.data)
        self._rounds.append(round_)

    def since(self, cursor: int) -> list[R]:
        """The rounds from sequence number `cursor` on (those still kept)."""
        return list(islice(self._rounds, max(cursor - self.first, 0), None))

    def drop_before(self, cursor: int) -> None:
        while self._rounds and self.first < cursor:
            self._rounds.popleft()
            self.first += 1
