"""weaseldb.core.backup: what a backup run copies next, how it judges an object already in
the backup, and what `backup verify` reports."""

from __future__ import annotations

import pytest

from tests.support.logs import BatchSpec, build_log
from weaseldb.core import backup
from weaseldb.core.backup import BackupError, LogCheck
from weaseldb.core.holdings import Holdings
from weaseldb.core.logstart import LogStart
from weaseldb.core.manifest import SnapshotFile
from weaseldb.core.protocol import Write
from weaseldb.core.types import NUMBER_TOP, BatchNumber, Term, Version
from weaseldb.core.validity import GENESIS

TOP = NUMBER_TOP


def marker(after: int, version: int) -> LogStart:
    return LogStart(BatchNumber(after), Term(TOP), Version(version))


def held(oldest: int, newest: int, snapshots: tuple[int, ...] = ()) -> Holdings:
    return Holdings(
        Version(oldest), None, Version(newest), None, tuple(Version(v) for v in snapshots)
    )


def test_identical_bytes_are_skipped_different_ones_refused() -> None:
    backup.judge_existing("batches/1", b"same", b"same")
    with pytest.raises(BackupError, match=r"batches/1 already exists .* different content"):
        backup.judge_existing("batches/1", b"ours", b"theirs")


def test_the_source_marker_is_copied_only_into_a_backup_without_marker_or_batch() -> None:
    source = marker(TOP - 10, 10)
    assert backup.marker_to_copy(None, False, source) == source  # the first run
    assert backup.marker_to_copy(None, False, None) is None  # the source was never collected
    # Later runs: a newer source marker would cut off history the backup holds.
    assert backup.marker_to_copy(marker(TOP - 5, 5), False, source) is None
    assert backup.marker_to_copy(None, True, source) is None


def test_the_next_batch_follows_the_held_run_or_the_seed() -> None:
    assert backup.next_number(None, GENESIS) == TOP
    start = marker(TOP - 10, 10)
    assert backup.next_number(None, start.seed) == TOP - 11
    assert backup.next_number(BatchNumber(TOP - 12), start.seed) == TOP - 13
    assert backup.listing_seed(BatchNumber(TOP)) == GENESIS
    assert backup.listing_seed(BatchNumber(TOP - 13)).first_number == TOP - 13


def test_snapshots_below_the_backups_oldest_version_or_already_held_are_not_copied() -> None:
    source = [Version(v) for v in (5, 10, 20, 30)]
    assert backup.snapshots_to_copy(source, [Version(20)], Version(10)) == [10, 30]
    assert backup.snapshots_to_copy(source, [], Version(0)) == source


def test_a_missing_needed_batch_is_the_sources_gc_only_past_its_log_start() -> None:
    assert backup.needed_but_gone(BatchNumber(TOP - 3), marker(TOP - 3, 3))
    assert backup.needed_but_gone(BatchNumber(TOP - 3), marker(TOP - 5, 5))
    assert not backup.needed_but_gone(BatchNumber(TOP - 6), marker(TOP - 5, 5))
    assert not backup.needed_but_gone(BatchNumber(TOP), None)


def test_falling_behind_names_the_lost_versions_and_what_to_do() -> None:
    error = backup.fell_behind(BatchNumber(TOP - 40), held(0, 39), marker(TOP - 70, 70))
    text = str(error)
    assert "versions 40..70 are lost" in text and "spec.backup.keepHistory" in text
    assert "start a new backup" in text


def test_a_snapshot_file_is_checked_against_its_manifest_entry() -> None:
    entry = SnapshotFile("snapshots/x/part-0.parquet", 100, 7, "", "")
    assert backup.file_problem(entry, 100, 7) is None
    assert "99 bytes, the manifest says 100" in str(backup.file_problem(entry, 99, 7))
    assert "not a readable Parquet file" in str(backup.file_problem(entry, 100, None))
    assert "6 rows, the manifest says 7" in str(backup.file_problem(entry, 100, 6))


def spec(term: int, n: int = 1) -> BatchSpec:
    return BatchSpec(term, [[Write(b"k%d" % i, b"v")] for i in range(n)])


def test_the_log_check_applies_the_validity_rule_and_ends_at_the_newest_valid_version() -> None:
    # Term 0, term 1, then a void batch of term 0, then term 1 again.
    batches = build_log([spec(0, 2), spec(1, 3), spec(0, 4), spec(1, 1)])
    check = LogCheck(None)
    for b in batches:
        check.add(b.batch, b)
    assert check.problems == [] and check.newest == 6


def test_the_log_check_stops_at_a_gap_and_at_a_corrupt_batch() -> None:
    batches = build_log([spec(0)] * 5)
    check = LogCheck(None)
    for b in batches[:2] + batches[3:]:
        check.add(b.batch, b)
    assert check.newest == 2 and check.problems == [
        f"gap: batch {TOP - 2} is missing (the log stops there)"
    ]
    check = LogCheck(None)
    check.add(batches[0].batch, batches[0])
    check.add(batches[1].batch, None, "batches/x: checksum mismatch")
    check.add(batches[2].batch, batches[2])
    assert check.newest == 1 and check.problems == ["batches/x: checksum mismatch"]


def test_the_log_check_starts_at_the_marker_and_checks_versions_move_forward() -> None:
    batches = build_log([spec(0, 2)] * 4)
    check = LogCheck(marker(batches[1].batch, 4))
    for b in batches[2:]:
        check.add(b.batch, b)
    assert check.newest == 8 and not check.problems
    check = LogCheck(marker(batches[1].batch, 6))  # a marker past what follows it
    check.add(batches[2].batch, batches[2])
    assert check.newest == 6 and "do not follow version 6" in check.problems[0]


def test_the_report_is_the_range_from_a_good_base_snapshot_to_the_checked_log() -> None:
    start = marker(TOP - 10, 10)
    check = LogCheck(start)
    check.newest, check.batches = Version(30), 20
    both = [Version(10), Version(20)]
    ok = backup.report(start, check, both, both, [], held(10, 30, (10, 20)))
    assert ok.line() == {"ok": True, "oldest_version": 10, "newest_version": 30, "problems": []}
    # The marker's snapshot lost a file: restorable from the next good one only.
    missing = backup.report(start, check, both, [Version(20)], ["snapshot 10: gone"], None)
    assert (missing.ok, missing.oldest_version, missing.newest_version) == (False, 20, 30)
    assert "no good snapshot at the log start, version 10" in missing.problems[-1]
    nothing = backup.report(start, check, both, [], ["snapshot 10: gone"], None)
    assert (nothing.ok, nothing.oldest_version, nothing.newest_version) == (False, None, None)
    empty = backup.report(None, LogCheck(None), [], [], [], None)
    assert empty.problems == ("the store holds no backup",)
    # The walk and the recovery scan (what a restore reads) disagree.
    odd = backup.report(start, check, both, both, [], held(10, 29))
    assert not odd.ok and "its recovery scan at 29" in odd.problems[0]


def test_a_log_from_the_genesis_restores_from_the_empty_state_without_snapshots() -> None:
    check = LogCheck(None)
    check.newest, check.batches = Version(5), 5
    report = backup.report(None, check, [], [], [], held(0, 5))
    assert (report.ok, report.oldest_version, report.newest_version) == (True, 0, 5)
