"""Point-in-time restore's planning (weaseldb.core.restore): pure, no I/O."""

from __future__ import annotations

import pytest

from weaseldb.core import layout
from weaseldb.core import restore as planning
from weaseldb.core.holdings import Holdings
from weaseldb.core.restore import BatchTimes, RestoreRefused
from weaseldb.core.types import Version

TERM, BATCH = planning.owned_keys()
MARKER = layout.log_start_key(planning.TOP)  # type: ignore[arg-type]


def held(
    oldest: int, newest: int, snapshots: tuple[int, ...] = (), oldest_ms: int | None = None
) -> Holdings:
    return Holdings(
        Version(oldest), oldest_ms, Version(newest), 2_000, tuple(Version(v) for v in snapshots)
    )


def test_version_outside_the_range_names_it() -> None:
    with pytest.raises(
        RestoreRefused, match=r"version 9 cannot be restored: the source holds versions 3\.\.8"
    ):
        planning.check_version(9, held(3, 8))
    with pytest.raises(RestoreRefused, match=r"versions 3\.\.8"):
        planning.check_version(2, held(3, 8))
    assert planning.check_version(3, held(3, 8)) == 3


def test_base_is_the_newest_snapshot_at_or_below_v_within_the_range() -> None:
    assert planning.base_snapshot(7, held(0, 9, (2, 5, 8))) == 5
    assert planning.base_snapshot(5, held(0, 9, (2, 5, 8))) == 5
    assert planning.base_snapshot(1, held(0, 9, (2, 5, 8))) is None  # the empty state
    assert planning.base_snapshot(4, held(2, 9, (2, 5, 8))) == 2
    with pytest.raises(RestoreRefused, match="missing its log-start snapshot"):
        planning.base_snapshot(4, held(2, 9, (5,)))


def test_upper_batch_is_the_oldest_snapshot_above() -> None:
    top = planning.TOP
    assert planning.upper_batch(4, [(2, top - 2), (5, top - 6), (8, top - 9)]) == top - 6
    assert planning.upper_batch(8, [(2, top - 2), (8, top - 9)]) is None


def test_time_maps_to_the_greatest_valid_version_committed_by_then() -> None:
    batches = [
        BatchTimes(True, 4, 1_040),
        BatchTimes(False, 6, 1_050),  # void: its versions never happened
        BatchTimes(True, 5, 1_045),
        BatchTimes(True, None, None),  # nothing committed by then
    ]
    assert planning.version_at_time(batches, 1_050, held(0, 9)) == (5, 1_045)
    assert planning.version_at_time([], 900, held(0, 9)) == (0, 0)
    assert planning.version_at_time([BatchTimes(True, 2, 10)], 900, held(3, 9, (3,), 5)) == (3, 5)


def test_time_range() -> None:
    with pytest.raises(RestoreRefused, match="in the future"):
        planning.check_time(5_000, held(0, 9), now_ms=4_000)
    with pytest.raises(RestoreRefused, match="before what the source holds"):
        planning.check_time(900, held(3, 9, (3,), oldest_ms=1_000), now_ms=4_000)
    planning.check_time(900, held(0, 9), now_ms=4_000)  # before the first commit: version 0


def test_parse_time() -> None:
    assert planning.parse_time("1970-01-01T00:00:01.5Z") == 1_500
    assert planning.parse_time("1970-01-01T01:00:01+01:00") == 1_000
    for bad in ("1970-01-01T00:00:01", "yesterday"):
        with pytest.raises(RestoreRefused, match="RFC 3339"):
            planning.parse_time(bad)


def test_destination_empty_or_an_unfinished_restore() -> None:
    assert planning.destination_leftovers([], "d", {}) == []
    leftovers = [
        "snapshots/00000000000000000003/restore-1-ab/part-0.parquet",
        "snapshots/00000000000000000003.manifest",
        TERM,
        BATCH,
    ]
    leaders = {TERM: "restore-1-ab", BATCH: "restore-1-ab"}
    assert planning.destination_leftovers(leftovers, "d", leaders) == leftovers


def test_a_databases_first_batch_is_not_a_leftover() -> None:
    """A database with one batch (number TOP, like the restore's) is refused, never removed."""
    with pytest.raises(RestoreRefused, match="not empty"):
        planning.destination_leftovers([BATCH], "d", {BATCH: "persister-0"})
    with pytest.raises(RestoreRefused, match="not empty"):
        planning.destination_leftovers([TERM], "d", {TERM: ""})


def test_a_finished_restore_or_anything_else_is_refused() -> None:
    with pytest.raises(RestoreRefused, match="already holds a database"):
        planning.destination_leftovers([BATCH, MARKER], "d", {BATCH: "restore-1"})
    with pytest.raises(RestoreRefused, match=r"not empty \(1 objects, e.g. retention/p"):
        planning.destination_leftovers(["retention/p"], "d", {})


def test_the_destinations_objects_in_order() -> None:
    keys = [k for k, _ in planning.objects_after_snapshot(7, "restore-1-ab", 5, 4)]
    assert keys == [TERM, BATCH, MARKER]
    batch = planning.empty_batch(7, "restore-1-ab", 5)
    assert (batch.first_version, batch.last_version, batch.term) == (8, 7, planning.TOP)
    marker = planning.log_start(7, 4)
    assert (marker.after_batch, marker.version, marker.committed_at_ms) == (planning.TOP, 7, 4)
