"""Resolver: conflict checking of sequenced commits, the window and too_old."""

from __future__ import annotations

import itertools

import pytest

from services.resolver.logic import Resolver
from weaseldb.core.config import ResolverConfig
from weaseldb.core.protocol import (
    CommitEntry,
    CommitState,
    Delete,
    Hello,
    Operation,
    PointRead,
    Precondition,
    RangeDelete,
    RangeRead,
    RingEntry,
    Shutdown,
    StatusEntry,
    TermStart,
    Write,
)
from weaseldb.core.types import RequestId, Stage, Term, Version

_tickets = itertools.count()


class FakeClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def term(first_version: int = 1, number: int = 1) -> TermStart:
    return TermStart(
        Term(number), "L", first_version=Version(first_version), committed_version=Version(0)
    )


def commit(
    version: int,
    preconditions: list[Precondition] | None = None,
    operations: list[Operation] | None = None,
    state: CommitState = CommitState.SEQUENCED,
    term: int = 1,
) -> CommitEntry:
    ticket = next(_tickets)
    return CommitEntry(
        origin=0,
        ticket=ticket,
        request_id=RequestId(f"request-{ticket:020d}"),
        preconditions=preconditions or [],
        operations=operations or [Write(b"unrelated", b"v")],
        state=state,
        version=Version(version),
        term=Term(term),
    )


def leading(
    first_version: int = 1, window: ResolverConfig | None = None, clock: FakeClock | None = None
) -> Resolver:
    resolver = Resolver(window or ResolverConfig(), clock or FakeClock())
    resolver.resolve([term(first_version)])
    return resolver


Outcome = tuple[CommitState, list[tuple[int, str]]]


def outcome(entry: CommitEntry) -> Outcome:
    return entry.state, entry.conflicts


ACCEPTED: Outcome = (CommitState.ACCEPTED, [])
CONFLICT: Outcome = (CommitState.REJECTED, [(0, "conflict")])
TOO_OLD: Outcome = (CommitState.REJECTED, [(0, "too_old")])


@pytest.mark.parametrize(
    ("operation", "precondition", "expected"),
    [
        pytest.param(Write(b"k", b"v"), PointRead(b"k", Version(1)), CONFLICT, id="write-vs-point"),
        pytest.param(
            Write(b"k", b"v"), PointRead(b"k", Version(2)), ACCEPTED, id="read-at-write-version"
        ),
        pytest.param(
            Write(b"k", b"v"), PointRead(b"k", Version(3)), ACCEPTED, id="read-after-write"
        ),
        pytest.param(Write(b"k", b"v"), PointRead(b"j", Version(1)), ACCEPTED, id="other-key"),
        pytest.param(
            Write(b"k", b"v"), PointRead(b"k\x00", Version(1)), ACCEPTED, id="successor-key"
        ),
        pytest.param(Delete(b"k"), PointRead(b"k", Version(1)), CONFLICT, id="delete-vs-point"),
        pytest.param(
            RangeDelete(b"a", b"m"), PointRead(b"k", Version(1)), CONFLICT, id="rdel-vs-point"
        ),
        pytest.param(
            RangeDelete(b"a", b"m"), PointRead(b"a", Version(1)), CONFLICT, id="rdel-begin"
        ),
        pytest.param(
            RangeDelete(b"a", b"m"), PointRead(b"m", Version(1)), ACCEPTED, id="rdel-end-open"
        ),
        pytest.param(
            Write(b"k", b"v"), RangeRead(b"a", b"z", Version(1)), CONFLICT, id="write-vs-range"
        ),
        pytest.param(
            Delete(b"k"), RangeRead(b"a", b"z", Version(1)), CONFLICT, id="delete-vs-range"
        ),
        pytest.param(
            Delete(b"k"), RangeRead(b"k", b"k\x00", Version(1)), CONFLICT, id="delete-vs-tight"
        ),
        pytest.param(
            Write(b"k", b"v"), RangeRead(b"a", b"k", Version(1)), ACCEPTED, id="range-end-open"
        ),
        pytest.param(
            Write(b"k", b"v"), RangeRead(b"k\x00", b"z", Version(1)), ACCEPTED, id="range-after"
        ),
        pytest.param(
            Write(b"k", b"v"), RangeRead(b"a", b"z", Version(2)), ACCEPTED, id="range-read-newer"
        ),
        pytest.param(
            RangeDelete(b"c", b"f"), RangeRead(b"e", b"g", Version(1)), CONFLICT, id="rdel-vs-range"
        ),
        pytest.param(
            RangeDelete(b"c", b"f"),
            RangeRead(b"f", b"g", Version(1)),
            ACCEPTED,
            id="rdel-adjacent-range",
        ),
        pytest.param(
            RangeDelete(b"c", b"f"),
            RangeRead(b"a", b"c", Version(1)),
            ACCEPTED,
            id="range-adjacent-rdel",
        ),
        pytest.param(Write(b"", b"v"), PointRead(b"", Version(1)), CONFLICT, id="empty-key"),
        pytest.param(
            Write(b"\xff", b"v"), RangeRead(b"\xfe", b"\xff", Version(1)), ACCEPTED, id="ff-key"
        ),
    ],
)
def test_precondition_against_an_earlier_commit(
    operation: Operation, precondition: Precondition, expected: Outcome
) -> None:
    resolver = leading()
    first = commit(1)
    written = commit(2, operations=[operation])
    probe = commit(3, preconditions=[precondition])
    resolver.resolve([first])
    resolver.resolve([written])
    resolver.resolve([probe])
    assert outcome(written) == ACCEPTED
    assert outcome(probe) == expected


def test_earlier_accepted_entry_of_the_same_batch_is_visible() -> None:
    resolver = leading()
    writer = commit(1, operations=[Write(b"x", b"1")])
    reader = commit(2, preconditions=[PointRead(b"x", Version(0))])
    resolver.resolve([writer, reader])
    assert outcome(writer) == ACCEPTED
    assert outcome(reader) == CONFLICT


def test_rejected_entry_records_nothing() -> None:
    resolver = leading()
    resolver.resolve([commit(1, operations=[Write(b"y", b"1")])])
    rejected = commit(
        2, preconditions=[PointRead(b"y", Version(0))], operations=[Write(b"x", b"2")]
    )
    reader = commit(
        3, preconditions=[PointRead(b"x", Version(0)), RangeRead(b"a", b"z", Version(1))]
    )
    resolver.resolve([rejected, reader])
    assert outcome(rejected) == CONFLICT
    assert outcome(reader) == ACCEPTED


def test_accepted_commit_records_every_operation() -> None:
    resolver = leading()
    ops: list[Operation] = [Write(b"a", b"1"), Delete(b"d"), RangeDelete(b"p", b"r")]
    resolver.resolve([commit(1, operations=ops)])
    keys = [b"a", b"d", b"p", b"q", b"r"]
    probes = [commit(v, preconditions=[PointRead(k, Version(0))]) for v, k in enumerate(keys, 2)]
    resolver.resolve(list[RingEntry](probes))
    assert [p.state for p in probes] == [CommitState.REJECTED] * 4 + [CommitState.ACCEPTED]


def test_every_failed_precondition_is_listed_by_index() -> None:
    resolver = leading(first_version=10)
    resolver.resolve([commit(10, operations=[Write(b"a", b"1"), Write(b"c", b"1")])])
    probe = commit(
        11,
        preconditions=[
            PointRead(b"b", Version(9)),  # holds
            PointRead(b"a", Version(9)),  # conflict
            PointRead(b"b", Version(8)),  # too old: below the term start
            RangeRead(b"b", b"d", Version(10)),  # holds: read at the write's version
            RangeRead(b"b", b"d", Version(9)),  # conflict
            RangeRead(b"x", b"y", Version(0)),  # too old, even though nothing wrote there
        ],
    )
    resolver.resolve([probe])
    assert probe.state == CommitState.REJECTED
    assert probe.conflicts == [(1, "conflict"), (2, "too_old"), (4, "conflict"), (5, "too_old")]


@pytest.mark.parametrize(
    ("read_version", "expected"),
    [
        pytest.param(99, ACCEPTED, id="first-version-minus-1-checkable"),
        pytest.param(98, TOO_OLD, id="first-version-minus-2-too-old"),
        pytest.param(0, TOO_OLD, id="zero-too-old"),
        pytest.param(100, ACCEPTED, id="first-version"),
    ],
)
def test_too_old_below_term_start(read_version: int, expected: Outcome) -> None:
    resolver = leading(first_version=100)
    assert resolver.oldest_checkable == 99
    probe = commit(100, preconditions=[PointRead(b"k", Version(read_version))])
    resolver.resolve([probe])
    assert outcome(probe) == expected


def _fill(resolver: Resolver, first: int, last: int) -> None:
    """One batch of commits first..last, commit v writing key b"k<v>"."""
    batch: list[RingEntry] = [
        commit(v, operations=[Write(b"k%d" % v, b"")]) for v in range(first, last + 1)
    ]
    resolver.resolve(batch)


@pytest.mark.parametrize(
    ("read_version", "key", "expected"),
    [
        pytest.param(10, b"untouched", ACCEPTED, id="at-boundary-checkable"),
        pytest.param(10, b"k11", CONFLICT, id="at-boundary-write-above-still-kept"),
        pytest.param(9, b"untouched", TOO_OLD, id="below-boundary-too-old"),
    ],
)
def test_version_window_edges(read_version: int, key: bytes, expected: Outcome) -> None:
    """Keep the last 10 versions: after v1..v20 a read at 10 (= 20 - 10) is the oldest."""
    clock = FakeClock()
    resolver = leading(window=ResolverConfig(window_seconds=1.0, window_versions=10), clock=clock)
    _fill(resolver, 1, 20)
    clock.now = 100.0  # the time window holds nothing any more
    probe = commit(21, preconditions=[PointRead(key, Version(read_version))])
    resolver.resolve([probe])
    assert resolver.oldest_checkable == 10
    assert outcome(probe) == expected


@pytest.mark.parametrize(
    ("now", "read_version", "expected"),
    [
        pytest.param(10.0, 0, ACCEPTED, id="exactly-window-seconds-old-kept"),
        pytest.param(10.5, 0, TOO_OLD, id="just-older-than-window-dropped"),
        pytest.param(10.5, 3, ACCEPTED, id="batch-inside-window-kept"),
        pytest.param(10.5, 2, TOO_OLD, id="below-batch-inside-window"),
        pytest.param(15.0, 3, ACCEPTED, id="second-batch-exactly-window-old"),
        pytest.param(15.5, 3, TOO_OLD, id="second-batch-dropped"),
    ],
)
def test_time_window_edges(now: float, read_version: int, expected: Outcome) -> None:
    """Versions 1-3 resolved at t=0 and 4-6 at t=5 are kept while at most 10 s old."""
    clock = FakeClock(0.0)
    resolver = leading(window=ResolverConfig(window_seconds=10.0, window_versions=1), clock=clock)
    _fill(resolver, 1, 3)
    clock.now = 5.0
    _fill(resolver, 4, 6)
    clock.now = now
    probe = commit(7, preconditions=[PointRead(b"untouched", Version(read_version))])
    resolver.resolve([probe])
    assert outcome(probe) == expected


def test_time_window_counts_from_the_batch_that_resolved_a_version() -> None:
    """A batch resolving no version must not date the next batch's versions back to it."""
    clock = FakeClock(0.0)
    resolver = leading(window=ResolverConfig(window_seconds=10.0, window_versions=1), clock=clock)
    _fill(resolver, 1, 3)
    clock.now = 4.0
    resolver.resolve([StatusEntry(origin=0, ticket=0, request_id=RequestId("s" * 20))])
    clock.now = 5.0
    _fill(resolver, 4, 6)  # resolved at t=5, so kept until t=15
    clock.now = 14.5
    probe = commit(
        7, preconditions=[PointRead(b"untouched", Version(3)), PointRead(b"untouched", Version(2))]
    )
    resolver.resolve([probe])
    assert probe.conflicts == [(1, "too_old")]


def test_larger_window_wins() -> None:
    clock = FakeClock(0.0)
    resolver = leading(window=ResolverConfig(window_seconds=10.0, window_versions=5), clock=clock)
    _fill(resolver, 1, 20)  # many versions at once: the time window is the larger one
    clock.now = 1.0
    probe = commit(21, preconditions=[PointRead(b"k1", Version(0))])
    resolver.resolve([probe])
    assert outcome(probe) == CONFLICT  # v1 still in history
    clock.now = 100.0  # long idle: the version window still keeps the last 5 versions
    probe = commit(
        22, preconditions=[PointRead(b"k17", Version(16)), PointRead(b"k17", Version(15))]
    )
    resolver.resolve([probe])
    assert resolver.oldest_checkable == 16
    assert probe.conflicts == [(0, "conflict"), (1, "too_old")]


def test_history_memory_follows_the_window() -> None:
    clock = FakeClock(0.0)
    resolver = leading(window=ResolverConfig(window_seconds=1.0, window_versions=100), clock=clock)
    for first in range(1, 20_000, 10):
        clock.now += 1.0
        _fill(resolver, first, first + 9)
    assert resolver.oldest_checkable >= 19_999 - 100 - 10
    # two boundaries per live key, plus what the lazy sweep has not reclaimed yet
    assert resolver.history_size <= 4 * 2 * 110


@pytest.mark.parametrize(
    "state",
    [
        pytest.param(CommitState.BANNED, id="banned"),
        pytest.param(CommitState.DUPLICATE, id="duplicate"),
        pytest.param(CommitState.NOT_LEADER, id="not-leader"),
        pytest.param(CommitState.NEW, id="new"),
    ],
)
def test_unsequenced_entries_pass_through(state: CommitState) -> None:
    resolver = leading()
    other = commit(5, preconditions=[PointRead(b"x", Version(0))], operations=[Write(b"x", b"")])
    other.state = state
    other.conflicts = [(7, "sentinel")]
    reader = commit(1, preconditions=[PointRead(b"x", Version(0))])
    resolver.resolve([other, reader])
    assert (other.state, other.version, other.conflicts) == (state, 5, [(7, "sentinel")])
    assert outcome(reader) == ACCEPTED  # its write was not recorded


def test_status_and_shutdown_pass_through() -> None:
    resolver = leading()
    status = StatusEntry(origin=1, ticket=2, request_id=RequestId("r" * 20), upper_bound=Version(7))
    shutdown = Shutdown()
    batch: list[RingEntry] = [status, commit(1), shutdown]
    resolver.resolve(batch)
    assert batch[0] == StatusEntry(
        origin=1, ticket=2, request_id=RequestId("r" * 20), upper_bound=Version(7)
    )
    assert batch[2] is shutdown


def test_no_term_means_not_leader() -> None:
    resolver = Resolver(ResolverConfig(), FakeClock())
    before = commit(1)
    resolver.resolve([before])
    assert before.state == CommitState.NOT_LEADER
    after_start = commit(1)
    resolver.resolve([term(1), after_start])  # the term start travels in the batch
    assert after_start.state == CommitState.ACCEPTED
    resolver.end_term()
    after_end = commit(2)
    resolver.resolve([after_end])
    assert after_end.state == CommitState.NOT_LEADER


def test_new_term_resets_history() -> None:
    resolver = leading()
    resolver.resolve([commit(1, operations=[Write(b"x", b"")])])
    resolver.resolve([term(2, number=0)])
    probe = commit(
        2, preconditions=[PointRead(b"x", Version(1)), PointRead(b"x", Version(0))], term=0
    )
    resolver.resolve([probe])
    assert probe.conflicts == [(1, "too_old")]  # read at 1 = first_version - 1 is checkable


def test_commit_from_another_term_is_not_leader() -> None:
    """Stamped by a sequencer in another term (one that restarted, or an older term's
    entry still on the ring): dropped, whatever its version."""
    resolver = leading(first_version=50)
    stale, other = commit(49, term=2), commit(60, term=2)
    resolver.resolve([stale, other])
    assert stale.state == other.state == CommitState.NOT_LEADER


def test_each_workers_copy_of_the_term_start_resets_only_once() -> None:
    resolver = leading()
    resolver.resolve([commit(1, operations=[Write(b"x", b"")])])
    resolver.resolve([term(1)])  # another gateway worker's copy of the same term
    probe = commit(2, preconditions=[PointRead(b"x", Version(0))])
    resolver.resolve([probe])
    assert probe.conflicts == [(0, "conflict")]  # history survived the second copy


def test_a_restarted_sequencer_retires_the_term_until_the_next_one() -> None:
    """A sequencer and a gateway worker restart together; the worker is answered with the
    current term, forwards it, and the new sequencer numbers that term again from its
    first version. The resolver must not crash: those commits are NOT_LEADER (the persister
    is opening a new term), a copy of the old announcement does not revive it, and the
    next term is served."""
    resolver = leading()
    resolver.resolve([commit(1, operations=[Write(b"x", b"")]), commit(2)])
    renumbered = commit(1)
    resolver.resolve([Hello(Stage.SEQUENCER), term(1), renumbered])
    assert renumbered.state == CommitState.NOT_LEADER
    served = commit(3, term=2, preconditions=[PointRead(b"x", Version(2))])
    resolver.resolve([term(3, number=2), served])
    assert served.state == CommitState.ACCEPTED


def test_versions_going_backwards_retire_the_term() -> None:
    """Without the Hello (it cannot be lost, but if it were): logged, not a crash."""
    resolver = leading()
    resolver.resolve([commit(2)])
    again, later = commit(2), commit(3)
    resolver.resolve([again, later])
    assert again.state == later.state == CommitState.NOT_LEADER
    resolver.resolve([term(4, number=2)])
    fresh = commit(4, term=2)
    resolver.resolve([fresh])
    assert fresh.state == CommitState.ACCEPTED


def test_a_sequencer_hello_before_any_term_changes_nothing() -> None:
    resolver = Resolver(ResolverConfig(), FakeClock())
    first = commit(1)
    resolver.resolve([Hello(Stage.SEQUENCER), term(1), first])
    assert first.state == CommitState.ACCEPTED
