"""The reader's multi-version state (weaseldb/reader/state.py) against the reference fold:
after any history of writes, deletes and range deletes, every get and range at every
readable version equals the fold of the log up to that version, before and after the
horizon moves; below the horizon, TooOld."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weaseldb.core.batchfile import Transaction
from weaseldb.core.changes import ChangeEvent
from weaseldb.core.fold import reference_fold
from weaseldb.core.protocol import Delete, Operation, RangeDelete, Write
from weaseldb.core.types import RequestId, Version
from weaseldb.reader.state import Item, TooOld, VersionedState

KEYS = st.sampled_from([b"", b"a", b"a\x00", b"ab", b"b", b"\x7f", b"\x80", b"\xff", b"\xff\xff"])
OPERATIONS: st.SearchStrategy[Operation] = st.one_of(
    st.builds(Write, KEYS, st.binary(max_size=3)),
    st.builds(Delete, KEYS),
    st.builds(RangeDelete, KEYS, KEYS),
)
HISTORIES = st.lists(st.lists(OPERATIONS, min_size=1, max_size=4), min_size=1, max_size=12)


def event(version: int, prev: int, ops: list[Operation]) -> ChangeEvent:
    return ChangeEvent(
        Version(version), Version(prev), RequestId(f"r{version}"),
        f"2026-01-01T00:00:{version % 60:02d}.000Z", "leader", tuple(ops),
    )  # fmt: skip


def fold_at(history: list[ChangeEvent], version: int) -> dict[bytes, tuple[bytes, int]]:
    txs = [
        Transaction(e.version, e.request_id, 0, list(e.operations))
        for e in history
        if e.version <= version
    ]
    return dict(reference_fold([], txs))


def assert_reads_equal_fold(state: VersionedState, history: list[ChangeEvent], top: int) -> None:
    oldest = state.position().oldest
    for version in range(oldest, top + 1):
        expected = fold_at(history, version)
        everything, more = state.range(b"", None, version, 1000)
        assert not more
        assert {i.key: (i.value, i.modified_version) for i in everything} == expected
        for key in [b"", b"a", b"ab", b"b", b"\xff", b"zz"]:
            item = state.get(key, version)
            found = None if item is None else (item.value, item.modified_version)
            assert found == expected.get(key)
        # A bounded range, paged one item at a time, gives the same keys.
        window = sorted(k for k in expected if b"a" <= k < b"\xff")
        paged: list[bytes] = []
        begin = b"a"
        while True:
            page, more = state.range(begin, b"\xff", version, 1)
            paged += [i.key for i in page]
            if not more:
                break
            begin = page[-1].key + b"\x00"
        assert paged == window


@pytest.fixture
def state(tmp_path: Path) -> VersionedState:
    return VersionedState(tmp_path / "state.sqlite")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(histories=HISTORIES, gaps=st.lists(st.integers(1, 3), min_size=12, max_size=12),
       horizon_at=st.integers(0, 12), chunk=st.integers(1, 5))  # fmt: skip
def test_reads_at_every_version_equal_the_fold(
    tmp_path_factory: pytest.TempPathFactory,
    histories: list[list[Operation]],
    gaps: list[int],
    horizon_at: int,
    chunk: int,
) -> None:
    state = VersionedState(tmp_path_factory.mktemp("s") / "state.sqlite")
    history: list[ChangeEvent] = []
    version = 0
    for ops, gap in zip(histories, gaps, strict=False):
        history.append(event(version + gap, version, ops))
        version += gap
    # Applied a few transactions per SQLite transaction, as the follower batches them.
    for i in range(0, len(history), chunk):
        part = history[i : i + chunk]
        state.apply(part, [b"{}"] * len(part), part[-1].version, "leader")
    assert state.position().applied == version
    assert_reads_equal_fold(state, history, version)
    horizon = history[min(horizon_at, len(history) - 1)].version
    state.prune(horizon)
    assert state.position().oldest == horizon
    assert_reads_equal_fold(state, history, version)
    if horizon > 0:
        with pytest.raises(TooOld):
            state.get(b"a", horizon - 1)
    assert [e.version for e in state.events_after(0)] == [
        e.version for e in history if e.version > horizon
    ]
    state.close()


def test_snapshot_rows_keep_their_versions_and_start_the_horizon(state: VersionedState) -> None:
    state.reset(10, [[(b"a", b"1", 3), (b"b", b"2", 10)]])
    assert state.position().applied == state.position().oldest == 10
    assert state.get(b"a", 10) == Item(b"a", b"1", 3)
    with pytest.raises(TooOld):
        state.get(b"a", 9)
    state.apply([event(12, 10, [RangeDelete(b"a", b"b")])], [b"{}"], 15, "L")
    assert state.get(b"a", 11) == Item(b"a", b"1", 3)
    assert state.get(b"a", 12) is None
    assert state.position().applied == 15
    assert state.position().leader_id == "L"


def test_pruning_drops_superseded_rows_and_old_tombstones(state: VersionedState) -> None:
    for v in range(1, 6):
        state.apply([event(v, v - 1, [Write(b"k", b"%d" % v)])], [b"{}"], v, "L")
    state.apply([event(6, 5, [Delete(b"k"), Write(b"j", b"x")])], [b"{}"], 6, "L")
    assert state.row_count() == 7
    state.prune(4)
    assert state.row_count() == 4  # k@4, k@5, k@6 (tombstone), j@6
    state.prune(6)
    assert state.row_count() == 1  # only j@6: the tombstone at the horizon goes
    assert state.get(b"j", 6) == Item(b"j", b"x", 6)
    assert state.get(b"k", 6) is None


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(histories=HISTORIES, cuts=st.lists(st.integers(0, 11), min_size=1, max_size=3))
def test_pruning_between_batches_keeps_every_version_above_the_horizon_exact(
    tmp_path_factory: pytest.TempPathFactory, histories: list[list[Operation]], cuts: list[int]
) -> None:
    """The horizon moves while transactions keep coming (as the reader runs): reads at every
    version at or above the newest horizon still equal the fold."""
    state = VersionedState(tmp_path_factory.mktemp("p") / "state.sqlite")
    history = [event(v + 1, v, ops) for v, ops in enumerate(histories)]
    horizon = 0
    for i, e in enumerate(history):
        state.apply([e], [b"{}"], e.version, "leader")
        if i in cuts:
            horizon = max(horizon, history[max(i - 1, 0)].version)
            state.prune(horizon)
    assert state.position().oldest == horizon
    assert_reads_equal_fold(state, history, history[-1].version)
    state.close()
