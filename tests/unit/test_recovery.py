import pytest

from weaseldb.core.recovery import ListingScan, scan_listing
from weaseldb.core.types import NUMBER_TOP, BatchNumber, Term
from weaseldb.core.validity import GENESIS, Seed, valid_flags

TOP = NUMBER_TOP


def desc(*numbers: int) -> list[int]:
    """A listing: ascending numbers, i.e. newest batch first."""
    return sorted(numbers)


@pytest.mark.parametrize(
    ("listing", "complete", "expected"),
    [
        pytest.param([], True, ListingScan(None, BatchNumber(TOP)), id="empty-store"),
        pytest.param(
            desc(TOP), True, ListingScan(BatchNumber(TOP), BatchNumber(TOP - 1)), id="one-batch"
        ),
        pytest.param(
            desc(TOP, TOP - 1, TOP - 2),
            True,
            ListingScan(BatchNumber(TOP - 2), BatchNumber(TOP - 3)),
            id="gapless",
        ),
        pytest.param(
            desc(TOP, TOP - 1, TOP - 3, TOP - 4),
            True,
            ListingScan(BatchNumber(TOP - 1), BatchNumber(TOP - 2)),
            id="gap-stops-watermark",
        ),
        pytest.param(
            desc(TOP - 1, TOP - 2),
            True,
            ListingScan(None, BatchNumber(TOP)),
            id="first-batch-missing",
        ),
        pytest.param(
            desc(*range(1001, 2001)),
            False,
            ListingScan(BatchNumber(1001), BatchNumber(1000)),
            id="full-listing-no-gap",
        ),
        pytest.param(
            desc(2001, *range(1999, 1000, -1)),
            False,
            ListingScan(BatchNumber(2001), BatchNumber(2000)),
            id="design-example-1000-in-flight",
        ),
    ],
)
def test_scan_listing(listing: list[int], complete: bool, expected: ListingScan) -> None:
    assert scan_listing(listing, complete=complete) == expected


@pytest.mark.parametrize(
    ("terms", "flags"),
    [
        pytest.param([9, 9, 9], [True, True, True], id="one-term"),
        pytest.param([9, 8, 8], [True, True, True], id="newer-term-takes-over"),
        pytest.param([9, 8, 9, 9, 8], [True, True, False, False, True], id="late-old-term-is-void"),
        pytest.param([9, 7, 8, 7], [True, True, False, True], id="two-deposed"),
    ],
)
def test_validity_rule(terms: list[Term], flags: list[bool]) -> None:
    assert valid_flags(terms) == flags


@pytest.mark.parametrize(
    ("seed", "terms", "flags"),
    [
        pytest.param(
            Seed(BatchNumber(100), Term(8)),
            [9, 9, 8],
            [False, False, True],
            id="void-front-after-gc",
        ),
        pytest.param(
            Seed(BatchNumber(100), Term(9)),
            [9, 8, 9],
            [True, True, False],
            id="seeded-like-genesis",
        ),
        pytest.param(GENESIS, [9, 9, 8], [True, True, True], id="unseeded-takes-front-as-valid"),
    ],
)
def test_validity_rule_seeded(seed: Seed, terms: list[Term], flags: list[bool]) -> None:
    assert valid_flags(terms, seed) == flags
