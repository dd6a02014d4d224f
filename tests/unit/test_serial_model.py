"""Sequencer + resolver against a serial reference model.

Random transactions over a tiny key alphabet (so they conflict often), in random ring
batches, with a fake clock and a small window, go through the real `Sequencer` and
`Resolver`. The model replays them one at a time: a precondition read at version v fails
with `too_old` when v is below the checkable bound, else with `conflict` when a committed
transaction with a version above v touched its key or range.

The model's bound is computed from first principles: version u is kept while it is within
the last `window_versions` versions or was resolved at most `window_seconds` ago, and the
bound is one below the lowest version from which on everything is kept (never below the
term's first version - 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from services.resolver.logic import Resolver
from services.sequencer.logic import Sequencer
from weaseldb.core.config import ResolverConfig
from weaseldb.core.protocol import (
    CommitEntry,
    CommitState,
    Delete,
    Operation,
    PointRead,
    Precondition,
    RangeDelete,
    RangeRead,
    RingEntry,
    StatusEntry,
    TermStart,
    Write,
    point_range,
    written_ranges,
)
from weaseldb.core.types import RequestId, Term, Version

KEYS = [b"", b"\x00", b"a", b"a\x00", b"a\xff", b"b", b"\xff"]
keys = st.sampled_from(KEYS)
key_ranges = st.lists(keys, min_size=2, max_size=2, unique=True).map(sorted).map(tuple)

operations = st.one_of(
    st.builds(Write, keys, st.just(b"v")),
    st.builds(Delete, keys),
    key_ranges.map(lambda r: RangeDelete(*r)),
)
# A read is (begin, end or None for a point read, lag): it reads at version - 1 - lag.
reads = st.tuples(st.one_of(keys.map(lambda k: (k, None)), key_ranges), st.integers(0, 14)).map(
    lambda t: (t[0][0], t[0][1], t[1])
)


@dataclass
class Txn:
    kind: str  # "commit", "duplicate" (retries an earlier commit's id) or "banned"
    reads: list[tuple[bytes, bytes | None, int]]
    operations: list[Operation]


@dataclass
class Scenario:
    first_version: int
    window: ResolverConfig
    batches: list[tuple[float, list[Txn]]]  # (clock advance before the batch, its txns)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    txns = draw(
        st.lists(
            st.builds(
                Txn,
                st.sampled_from(["commit"] * 8 + ["duplicate", "banned"]),
                st.lists(reads, max_size=3),
                st.lists(operations, min_size=1, max_size=3),
            ),
            min_size=1,
            max_size=40,
        )
    )
    batches: list[tuple[float, list[Txn]]] = []
    while txns:
        size = draw(st.integers(1, 6))
        advance = draw(st.sampled_from([0.0, 0.5, 1.0, 2.0]))
        batches.append((advance, txns[:size]))
        txns = txns[size:]
    # 0.25 s is shorter than every clock step: only the current batch is in the time window
    # (the configuration refuses a window of 0 s).
    window = ResolverConfig(
        window_seconds=draw(st.sampled_from([0.25, 1.0, 2.5])),
        window_versions=draw(st.integers(1, 12)),
    )
    return Scenario(draw(st.integers(1, 20)), window, batches)


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Model:
    """The serial reference: committed writes and when each version was resolved."""

    first_version: int
    window: ResolverConfig
    next_version: int = 0
    bound: int = 0  # lowest checkable read version
    committed: list[tuple[int, list[tuple[bytes, bytes]]]] = field(default_factory=list)
    resolved_at: dict[int, float] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)  # request id -> version

    def __post_init__(self) -> None:
        self.next_version = self.first_version
        self.bound = self.first_version - 1

    def start_batch(self, now: float) -> None:
        newest = self.next_version - 1

        def kept(u: int) -> bool:
            in_versions = newest - u < self.window.window_versions
            return in_versions or now - self.resolved_at[u] <= self.window.window_seconds

        dropped = [u for u in self.resolved_at if not kept(u)]
        self.bound = max(self.bound, max(dropped, default=0))  # u dropped: reads at u ok

    def outcome(self, version: int, preconditions: list[Precondition]) -> list[tuple[int, str]]:
        failed = []
        for index, pre in enumerate(preconditions):
            begin, end = (
                point_range(pre.key) if isinstance(pre, PointRead) else (pre.begin, pre.end)
            )
            if pre.version < self.bound:
                failed.append((index, "too_old"))
            elif any(
                u > pre.version and b < end and begin < e
                for u, ranges in self.committed
                for b, e in ranges
            ):
                failed.append((index, "conflict"))
        return failed


def preconditions(txn: Txn, version: int) -> list[Precondition]:
    built: list[Precondition] = []
    for begin, end, lag in txn.reads:
        read_version = max(0, version - 1 - lag)
        if end is None:
            built.append(PointRead(begin, Version(read_version)))
        else:
            built.append(RangeRead(begin, end, Version(read_version)))
    return built


@settings(max_examples=200, deadline=None)
@given(scenario=scenarios())
def test_pipeline_matches_serial_model(scenario: Scenario) -> None:
    clock = Clock()
    sequencer = Sequencer()
    resolver = Resolver(scenario.window, clock)
    model = Model(scenario.first_version, scenario.window)
    term = TermStart(
        Term(1), "L", Version(scenario.first_version), Version(scenario.first_version - 1)
    )
    sequenced_versions: list[int] = []
    names = (f"request-{n:012d}" for n in range(10_000))

    for number, (advance, txns) in enumerate(scenario.batches):
        clock.now += advance
        if number:
            model.start_batch(clock.now)
        batch: list[RingEntry] = [term] if number == 0 else []
        expected: list[tuple[CommitEntry, CommitState, int, list[tuple[int, str]]]] = []
        for txn in txns:
            entry, state, version, failed = plan(txn, model, next(names), batch, clock.now)
            expected.append((entry, state, version, failed))
        sequencer.sequence(batch, now_ms=int(clock.now * 1000))
        resolver.resolve(batch)
        assert resolver.oldest_checkable == model.bound
        for entry, state, version, failed in expected:
            assert (entry.state, entry.version, entry.conflicts) == (state, version, failed)
            if state in (CommitState.ACCEPTED, CommitState.REJECTED):
                sequenced_versions.append(entry.version)

    first = scenario.first_version
    assert sequenced_versions == list(range(first, first + len(sequenced_versions)))


def plan(
    txn: Txn, model: Model, fresh_id: str, batch: list[RingEntry], now: float
) -> tuple[CommitEntry, CommitState, int, list[tuple[int, str]]]:
    """Append the ring entries for `txn` to `batch` and say what must happen to its commit."""
    if txn.kind == "duplicate" and model.ids:
        request_id = sorted(model.ids)[len(txn.reads) % len(model.ids)]
        original = model.ids[request_id]
        entry = _entry(request_id, preconditions(txn, original), txn.operations)
        batch.append(entry)
        return entry, CommitState.DUPLICATE, original, []
    if txn.kind == "banned":
        batch.append(StatusEntry(origin=0, ticket=0, request_id=RequestId(fresh_id)))
        entry = _entry(fresh_id, preconditions(txn, model.next_version), txn.operations)
        batch.append(entry)
        return entry, CommitState.BANNED, 0, []

    version = model.next_version
    model.next_version += 1
    model.ids[fresh_id] = version
    model.resolved_at[version] = now
    pres = preconditions(txn, version)
    entry = _entry(fresh_id, pres, txn.operations)
    batch.append(entry)
    failed = model.outcome(version, pres)
    if failed:
        return entry, CommitState.REJECTED, version, failed
    model.committed.append((version, written_ranges(txn.operations)))
    return entry, CommitState.ACCEPTED, version, []


def _entry(request_id: str, pres: list[Precondition], ops: list[Operation]) -> CommitEntry:
    return CommitEntry(
        origin=0,
        ticket=0,
        request_id=RequestId(request_id),
        preconditions=pres,
        operations=list(ops),
    )
