from services.sequencer.logic import Sequencer
from weaseldb.protocol import CommitEntry, CommitState, StatusEntry, TermStart, Write


def commit(request_id: str) -> CommitEntry:
    return CommitEntry(0, 1, request_id, [], [Write(b"k", b"v")])


def started(first_version: int = 100, term: int = 50) -> Sequencer:
    sequencer = Sequencer(id_memory=3)
    sequencer.sequence([TermStart(term, "leader", first_version, first_version - 1)], 0)
    return sequencer


def test_versions_are_gapless_from_the_term_start() -> None:
    sequencer = started(100)
    entries = [commit(f"id-{i}") for i in range(5)]
    sequencer.sequence(list(entries), now_ms=7)
    assert [e.version for e in entries] == [100, 101, 102, 103, 104]
    assert all(e.state is CommitState.SEQUENCED and e.timestamp_ms == 7 for e in entries)
    assert sequencer.last_assigned == 104


def test_commit_before_any_term_is_not_leader() -> None:
    entry = commit("x")
    Sequencer().sequence([entry], 0)
    assert entry.state is CommitState.NOT_LEADER and entry.version == 0


def test_status_bans_the_id_and_takes_the_upper_bound() -> None:
    sequencer = started(100)
    first, status, later = commit("a"), StatusEntry(0, 2, "b"), commit("b")
    sequencer.sequence([first, status, later], 0)
    assert status.upper_bound == 100
    assert later.state is CommitState.BANNED and later.version == 0


def test_status_after_the_commit_does_not_ban_it_retroactively() -> None:
    sequencer = started(100)
    original, status, retry = commit("a"), StatusEntry(0, 2, "a"), commit("a")
    sequencer.sequence([original, status, retry], 0)
    assert original.state is CommitState.SEQUENCED
    assert retry.state is CommitState.DUPLICATE and retry.version == original.version


def test_retried_request_id_is_a_duplicate_not_a_new_version() -> None:
    sequencer = started(10)
    original, retry = commit("same"), commit("same")
    sequencer.sequence([original], 0)
    sequencer.sequence([retry], 0)
    assert retry.state is CommitState.DUPLICATE and retry.version == original.version == 10
    assert sequencer.last_assigned == 10


def test_id_memory_is_bounded_oldest_first() -> None:
    sequencer = started(1)
    sequencer.sequence([commit(f"id-{i}") for i in range(4)], 0)  # memory holds 3
    forgotten, kept = commit("id-0"), commit("id-3")
    sequencer.sequence([forgotten, kept], 0)
    assert forgotten.state is CommitState.SEQUENCED
    assert kept.state is CommitState.DUPLICATE


def test_repeated_announcement_of_the_same_term_is_dropped_once() -> None:
    sequencer = started(100, term=50)
    again = TermStart(50, "leader", 100, 99)
    entry = commit("a")
    forward = sequencer.sequence([again, entry], 0)
    assert forward == [entry] and entry.version == 100


def test_new_term_restarts_numbering_and_forgets_bans() -> None:
    sequencer = started(100, term=50)
    sequencer.sequence([StatusEntry(0, 1, "banned-id")], 0)
    sequencer.sequence([TermStart(49, "other", 500, 499)], 0)
    entry = commit("banned-id")
    sequencer.sequence([entry], 0)
    assert entry.state is CommitState.SEQUENCED and entry.version == 500
