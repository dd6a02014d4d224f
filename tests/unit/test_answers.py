"""The persister's remembered outcomes (services/persister/answers.py)."""

from services.persister.answers import Answers
from weaseldb.core.protocol import (
    CommitEntry,
    CommitReply,
    CommitState,
    RingEntry,
    StatusEntry,
    StatusReply,
    Write,
)
from weaseldb.core.types import Outcome, RequestId, Version


def released(request_id: str, version: int, state: CommitState) -> CommitEntry:
    entry = CommitEntry(version, 0, RequestId(request_id), [], [Write(b"k", b"v")])
    entry.state, entry.version = state, Version(version)
    if state is CommitState.REJECTED:
        entry.conflicts = [(version - 3, "a"), (version - 2, "b")]
    return entry


def duplicate(request_id: str, version: int) -> CommitEntry:
    entry = released(request_id, version, CommitState.DUPLICATE)
    entry.ticket = 99
    return entry


def commit_reply(answers: Answers, entry: RingEntry) -> CommitReply:
    reply = answers.reply(entry, Version(9))
    assert isinstance(reply, CommitReply)
    return reply


def status_reply(answers: Answers, request_id: str) -> StatusReply:
    reply = answers.reply(StatusEntry(1, 0, RequestId(request_id)), Version(9))
    assert isinstance(reply, StatusReply)
    return reply


def test_a_retry_gets_the_original_answer_committed_or_not() -> None:
    answers = Answers(10)
    answers.reply(released("ok", 5, CommitState.ACCEPTED), Version(4))
    answers.reply(released("no", 6, CommitState.REJECTED), Version(5))
    ok, no = commit_reply(answers, duplicate("ok", 5)), commit_reply(answers, duplicate("no", 6))
    assert (ok.ticket, ok.status, ok.version, ok.conflicts) == (99, Outcome.COMMITTED, 5, [])
    assert (no.status, no.version) == (Outcome.NOT_COMMITTED, 5)  # committed when released
    assert no.conflicts == [(3, "a"), (4, "b")] and no.reason == ""
    ok_status, no_status = status_reply(answers, "ok"), status_reply(answers, "no")
    assert (ok_status.outcome, ok_status.version) == (Outcome.COMMITTED, 5)
    assert (no_status.outcome, no_status.version) == (Outcome.NOT_COMMITTED, 0)


def test_an_answer_from_memory_needs_the_version_the_sequencer_found() -> None:
    """Another version for the same key: the sequencer's id is not this one (the two key
    on different halves of the hash), so the answer is unknown, never someone else's."""
    answers = Answers(10)
    answers.reply(released("x", 5, CommitState.ACCEPTED), Version(4))
    assert commit_reply(answers, duplicate("x", 7)).status == Outcome.COMMIT_UNKNOWN


def test_outcomes_are_forgotten_oldest_first_once_indexed_and_old() -> None:
    answers = Answers(2, window_ms=1_000, hard_cap=4)
    answers.start_term(Version(1))
    for version in range(1, 5):
        answers.reply(
            released(f"id-{version}", version, CommitState.ACCEPTED), Version(0), now_ms=0
        )
    assert len(answers) == 4  # young: the time window keeps them
    answers.forget_old(now_ms=5_000)
    assert len(answers) == 4 and answers.memory_floor == 1  # old, but not indexed yet
    answers.indexed_through = 1
    answers.forget_old(now_ms=5_000)
    assert len(answers) == 3 and answers.memory_floor == 2
    answers.indexed_through = 4
    answers.forget_old(now_ms=5_000)
    assert len(answers) == 2 and answers.memory_floor == 3
    assert status_reply(answers, "id-2").outcome == ""
    assert status_reply(answers, "id-3").outcome == Outcome.COMMITTED


def test_versions_beyond_32_bits_come_back_whole() -> None:
    answers = Answers(10)
    base = (1 << 32) - 2
    for offset in range(4):  # the low 32 bits wrap between these
        answers.reply(released(f"id-{offset}", base + offset, CommitState.ACCEPTED), Version(0))
    for offset in range(4):
        assert commit_reply(answers, duplicate(f"id-{offset}", base + offset)).version == (
            base + offset
        )
