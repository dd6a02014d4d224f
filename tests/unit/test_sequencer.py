from services.sequencer.logic import Sequencer
from services.sequencer.window import FadedIds, RequestIdWindow
from weaseldb.core.protocol import CommitEntry, CommitState, Hello, StatusEntry, TermStart, Write
from weaseldb.core.requestids import BANNED, Entries, id_hash, make_entries
from weaseldb.core.types import RequestId, Stage, Term, Version


def commit(request_id: str) -> CommitEntry:
    return CommitEntry(0, 1, RequestId(request_id), [], [Write(b"k", b"v")])


def started(
    first_version: int = 100, term: int = 50, *, memory: int = 3, window_ms: int = 0
) -> Sequencer:
    sequencer = Sequencer(id_memory=memory, window_ms=window_ms)
    sequencer.sequence(
        [TermStart(Term(term), "leader", Version(first_version), Version(first_version - 1))], 0
    )
    return sequencer


def test_versions_are_gapless_from_the_term_start_and_stamped_with_the_term() -> None:
    sequencer = started(100)
    entries = [commit(f"id-{i}") for i in range(5)]
    sequencer.sequence(list(entries), now_ms=7)
    assert [e.version for e in entries] == [100, 101, 102, 103, 104]
    assert all(e.state is CommitState.SEQUENCED and e.timestamp_ms == 7 for e in entries)
    assert all(e.term == 50 for e in entries)
    assert sequencer.last_assigned == 104


def test_commit_before_any_term_is_not_leader() -> None:
    entry = commit("x")
    Sequencer().sequence([entry], 0)
    assert entry.state is CommitState.NOT_LEADER and entry.version == 0


def test_status_bans_the_id_and_takes_the_upper_bound() -> None:
    sequencer = started(100)
    first, status, later = commit("a"), StatusEntry(0, 2, RequestId("b")), commit("b")
    sequencer.sequence([first, status, later], 0)
    assert status.upper_bound == 100 and status.term == 50
    assert later.state is CommitState.BANNED and later.version == 0


def test_status_after_the_commit_does_not_ban_it_retroactively() -> None:
    sequencer = started(100)
    original, status, retry = commit("a"), StatusEntry(0, 2, RequestId("a")), commit("a")
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


def test_an_id_past_the_window_is_unknown_never_sequenced_again() -> None:
    sequencer = started(1, memory=3)
    sequencer.sequence([commit(f"id-{i}") for i in range(4)], 0)  # memory holds 3
    faded, kept, fresh = commit("id-0"), commit("id-3"), commit("id-new")
    sequencer.sequence([faded, kept, fresh], 0)
    assert faded.state is CommitState.UNKNOWN and faded.version == 0
    assert kept.state is CommitState.DUPLICATE
    assert fresh.state is CommitState.SEQUENCED and fresh.version == 5


def test_an_id_sharing_half_its_hash_with_a_remembered_one_is_unknown_not_its_duplicate() -> None:
    """The window's ring is keyed by 64 bits of the hash: a fresh id whose low half matches
    a remembered id's must not get that id's outcome (a commit reported but never applied)."""
    sequencer = started(100)
    fresh = commit("fresh-id")
    low = id_hash(RequestId("fresh-id")) & ((1 << 64) - 1)
    other = (
        ((id_hash(RequestId("fresh-id")) >> 64) ^ 1) << 64
    ) | low  # same low half, other high half
    sequencer.sequence([StatusEntry(0, 2, RequestId("unrelated"))], 0)  # a term with some history
    sequencer._window.add(other, 42, 0)  # another id, remembered as committed at 42
    sequencer.sequence([fresh], 0)
    assert fresh.state is CommitState.UNKNOWN and fresh.version == 0


def test_the_time_window_keeps_more_than_the_count() -> None:
    sequencer = started(1, memory=2, window_ms=1_000)
    sequencer.sequence([commit(f"id-{i}") for i in range(5)], now_ms=0)
    sequencer.sequence([commit("later")], now_ms=500)  # all five are younger than 1 s
    young = commit("id-0")
    sequencer.sequence([young], now_ms=900)
    assert young.state is CommitState.DUPLICATE
    sequencer.sequence([commit("much-later")], now_ms=5_000)
    old = commit("id-1")
    sequencer.sequence([old], now_ms=5_000)
    assert old.state is CommitState.UNKNOWN


def test_every_copy_of_the_term_start_is_forwarded_but_counts_once() -> None:
    sequencer = started(100, term=50)
    first = commit("a")
    sequencer.sequence([first], 0)
    again = TermStart(Term(50), "leader", Version(100), Version(99), origin=1)
    entry = commit("b")
    forward = sequencer.sequence([again, entry], 0)
    assert forward == [again, entry] and entry.version == 101


def test_hello_passes_through_to_the_persister() -> None:
    hello = Hello(Stage.GATEWAY, 3)
    assert Sequencer().sequence([hello], 0) == [hello]


def window_with(rows: list[tuple[str, int, int]]) -> Entries:
    return make_entries([(id_hash(RequestId(r)), v, t) for r, v, t in rows])


def test_a_new_term_takes_the_window_of_earlier_terms_from_the_index() -> None:
    """Retries after a restart or leader change: the persister loads committed ids and bans
    from the request-id index and names the file in the TermStart."""
    files = {"w": window_with([("committed-before", 41, 0), ("banned-before", BANNED, 0)])}
    sequencer = Sequencer(load_window=files.__getitem__)
    sequencer.sequence([StatusEntry(0, 1, RequestId("banned-in-this-process-only"))], 0)
    sequencer.sequence(
        [TermStart(Term(49), "other", Version(500), Version(499), window_file="w")], 0
    )
    retry, banned, forgotten = commit("committed-before"), commit("banned-before"), commit("x")
    unbanned = commit("banned-in-this-process-only")
    sequencer.sequence([retry, banned, forgotten, unbanned], 0)
    assert (retry.state, retry.version) == (CommitState.DUPLICATE, 41)
    assert banned.state is CommitState.BANNED
    assert (forgotten.version, unbanned.version) == (500, 501)  # not in the store's window


def test_window_is_bounded_by_its_hard_cap_even_when_young() -> None:
    window = RequestIdWindow(memory=2, window_ms=10**9, hard_cap=4, faded=FadedIds(1024))
    for i in range(10):
        window.add(i + 1, i + 1, now_ms=0)
    window.expire(now_ms=0)
    assert len(window) == 4
    assert 1 in window.faded and window.get(10) == 10


def test_faded_ids_keep_two_generations() -> None:
    faded = FadedIds(capacity=100)
    ids = [id_hash(RequestId(f"faded-{i}")) for i in range(301)]
    for hash_ in ids[1:201]:
        faded.add(hash_)
    assert ids[1] in faded and ids[200] in faded  # both generations still held
    for hash_ in ids[201:301]:
        faded.add(hash_)
    assert ids[300] in faded and ids[150] in faded
    assert sum(h in faded for h in ids[1:101]) <= 1  # the oldest generation was dropped
