"""The change-stream journal (weaseldb/core/journal.py) shared by the gateway's hub and
the reader's fan-out: each round kept until every reader has read it, the slowest reader
first, and only the readers too far behind cut off."""

from __future__ import annotations

from dataclasses import dataclass

from weaseldb.core.journal import Journal


@dataclass(frozen=True)
class Round:
    data: bytes


@dataclass(eq=False)
class Reader:
    cursor: int = 0
    offset: int = 0


def test_rounds_are_kept_until_every_reader_has_read_them() -> None:
    journal: Journal[Round, Reader] = Journal()
    journal.append(Round(b"before anyone"))  # nobody reads it: dropped at the next trim
    slow, fast = Reader(), Reader()
    journal.join(slow)
    journal.join(fast)
    journal.append(Round(b"a"))
    journal.append(Round(b"bb"))
    assert journal.read(fast) == [Round(b"a"), Round(b"bb")]
    assert list(journal.readers) == [slow, fast]
    assert journal.since(0) == [Round(b"a"), Round(b"bb")]
    assert journal.read(slow) == [Round(b"a"), Round(b"bb")]
    assert list(journal.readers) == [fast, slow] and journal.since(0) == []
    assert (fast.offset, slow.offset, journal.end) == (16, 16, 16)


def test_only_the_readers_beyond_the_limit_are_cut_and_their_rounds_dropped() -> None:
    journal: Journal[Round, Reader] = Journal()
    slow, fast = Reader(), Reader()
    journal.join(slow)
    journal.join(fast)
    journal.append(Round(b"x" * 10))
    journal.read(fast)
    journal.append(Round(b"y" * 5))
    assert journal.cut_behind(12) == [slow]
    assert list(journal.readers) == [fast]
    assert journal.since(0) == [Round(b"y" * 5)]  # what only the cut reader still needed
    journal.leave(fast)
    assert journal.since(0) == [] and journal.next == 2
