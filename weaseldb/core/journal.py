"""The change-stream journal shared by every fan-out (the gateway's hub, the reader's).

A producer appends one round of already-rendered events at a time; each reader (a
subscriber) reads the journal through its own cursor (a round sequence number) and
offset (bytes appended before that round), so a round costs one append whatever the
number of readers, and how far a reader is behind is `end - offset`. The readers are kept
in the order they last read, which is also the order of their offsets (a reader moves to
the end), so the slowest is always the first: the journal drops the rounds it has read
(so every reader has), and finds the readers too far behind without looking at the rest.
Generic over the round type (the journal needs only its rendered bytes, to count them)
and the reader type (only its cursor and offset).
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Generic, Protocol, TypeVar


class Rendered(Protocol):
    @property
    def data(self) -> bytes:
        """The round's events as sent to an unfiltered reader."""
        ...


class Cursor(Protocol):
    cursor: int  # the next round to read
    offset: int  # the journal's `end` when it last read


R = TypeVar("R", bound=Rendered)
S = TypeVar("S", bound=Cursor)


class Journal(Generic[R, S]):
    """Rounds in order; a round is dropped once every reader has read it."""

    def __init__(self) -> None:
        self._rounds: deque[R] = deque()
        self.first = 0  # sequence number of the oldest round kept
        self.end = 0  # bytes ever appended: the offset after the newest round
        self.readers: dict[S, None] = {}  # in the order they last read: the slowest first

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

    def join(self, reader: S) -> None:
        """A new reader: it reads what is appended from now on."""
        reader.cursor, reader.offset = self.next, self.end
        self.readers[reader] = None

    def leave(self, reader: S) -> None:
        self.readers.pop(reader, None)
        self._trim()

    def read(self, reader: S) -> list[R]:
        """Everything appended since the reader's last read (a reader that left reads
        what is still kept, and stays out)."""
        rounds = self.since(reader.cursor)
        reader.cursor, reader.offset = self.next, self.end
        if reader in self.readers:
            self.readers[reader] = self.readers.pop(reader)  # to the end: the newest offset
            self._trim()
        return rounds

    def cut_behind(self, limit: int) -> list[S]:
        """Remove and return the readers more than `limit` bytes behind (only those:
        nobody else waits for them)."""
        cut: list[S] = []
        for reader in self.readers:
            if self.end - reader.offset <= limit:
                break  # the rest read later, so they are nearer
            cut.append(reader)
        for reader in cut:
            del self.readers[reader]
        self._trim()
        return cut

    def _trim(self) -> None:
        slowest = next(iter(self.readers), None)
        cursor = slowest.cursor if slowest else self.next
        while self._rounds and self.first < cursor:
            self._rounds.popleft()
            self.first += 1
