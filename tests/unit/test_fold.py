"""The reference fold and the range-delete fragments (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weaseldb.core.batchfile import Transaction
from weaseldb.core.fold import RangeCut, RangeFragments, reference_fold
from weaseldb.core.protocol import Delete, Operation, RangeDelete, Write
from weaseldb.core.types import RequestId, Version

KEYS = st.binary(min_size=0, max_size=2).map(lambda b: b"k" + b)


def tx(version: int, *ops: Operation) -> Transaction:
    return Transaction(Version(version), RequestId(f"r{version}"), 0, list(ops))


@pytest.mark.parametrize(
    ("previous", "transactions", "expected"),
    [
        pytest.param([], [tx(1, Write(b"a", b"1"))], {b"a": (b"1", 1)}, id="one-write"),
        pytest.param(
            [(b"a", b"0", 3)], [tx(4, Delete(b"a"))], {}, id="delete-removes-snapshot-row"
        ),
        pytest.param(
            [(b"a", b"0", 3), (b"c", b"0", 3)],
            [tx(4, RangeDelete(b"a", b"c"), Write(b"b", b"2"))],
            {b"b": (b"2", 4), b"c": (b"0", 3)},
            id="range-delete-half-open-then-write-in-same-tx",
        ),
        pytest.param(
            [],
            [tx(1, Write(b"b", b"1"), RangeDelete(b"a", b"z"))],
            {},
            id="range-delete-after-write-in-same-tx",
        ),
    ],
)
def test_reference_fold(
    previous: list[tuple[bytes, bytes, int]],
    transactions: list[Transaction],
    expected: dict[bytes, tuple[bytes, int]],
) -> None:
    assert dict(reference_fold(previous, transactions)) == expected


cuts = st.lists(
    st.tuples(KEYS, KEYS, st.integers(1, 5), st.integers(0, 3)).map(
        lambda t: RangeCut(min(t[0], t[1]), max(t[0], t[1]), (t[2], t[3]))
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(cuts, st.lists(KEYS, max_size=20))
def test_fragments_equal_brute_force(ranges: list[RangeCut], keys: list[bytes]) -> None:
    fragments = RangeFragments(ranges)
    for key in keys:
        covering = [c.stamp for c in ranges if c.begin <= key < c.end]
        assert fragments.covering(key) == (max(covering) if covering else None)
    assert fragments.starts == sorted(fragments.starts)
    assert all(s < e for s, e in zip(fragments.starts, fragments.ends, strict=True))
    assert all(e <= s for e, s in zip(fragments.ends, fragments.starts[1:], strict=False))


def test_fragments_binary_search_at_scale() -> None:
    """10,000 overlapping ranges: built by one sweep, queried by bisection."""
    ranges = [RangeCut(b"%06d" % i, b"%06d" % (i + 50), (i, 0)) for i in range(0, 100_000, 10)]
    fragments = RangeFragments(ranges)
    assert fragments.covering(b"000055") == (50, 0)
    assert fragments.covering(b"100041") is None
    assert fragments.deletes(b"000055", (49, 9))
    assert not fragments.deletes(b"000055", (50, 1))
