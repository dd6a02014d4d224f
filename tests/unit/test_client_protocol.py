"""The client's protocol decisions (weaseldb/client/protocol.py), driven without a network:
a scripted server answers each effect, a fake clock advances on each Sleep."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weaseldb.client.model import (
    BadRequest,
    Committed,
    CommitUnknown,
    Conflict,
    KeyValue,
    LeaderChanged,
    LogTruncated,
    NotCommitted,
    PointRead,
    StreamGap,
    TooLarge,
    TooOld,
    Unavailable,
    Write,
)
from weaseldb.client.protocol import (
    Answer,
    Chunk,
    Context,
    Emit,
    End,
    Failure,
    Open,
    Opened,
    Pull,
    Reply,
    Request,
    RetryPolicy,
    Session,
    Sleep,
    StreamCursor,
    VersionMemory,
    commit_steps,
    drive,
    subscribe_steps,
)
from weaseldb.client.transaction import Attempts, Runs, TransactionState
from weaseldb.core.changes import ChangeEvent, Checkpoint
from weaseldb.core.types import RequestId, Version

RID = "r" * 32
OPS = [Write(b"k", b"v")]


def ok(body: dict[str, Any], status: int = 200, retry_after: float | None = None) -> Answer:
    return Answer(status, orjson.dumps(body), retry_after)


def error(status: int, code: str, **extra: Any) -> Answer:
    return ok({"error": code, "message": code, **extra}, status, 1.0 if status == 503 else None)


COMMITTED = ok({"status": "committed", "version": 7, "request_id": RID, "leader_id": "a"})


@dataclass
class Server:
    """Answers effects from `script` (a function of the request), records what it saw."""

    script: Callable[[Request], Reply]
    now: float = 0.0
    seen: list[Request] = field(default_factory=list)
    sleeps: list[float] = field(default_factory=list)

    def __call__(self, effect: Request | Sleep) -> Reply | None:
        if isinstance(effect, Sleep):
            assert effect.seconds >= 0
            self.now += effect.seconds
            self.sleeps.append(effect.seconds)
            return None
        self.seen.append(effect)
        self.now += 0.01
        return self.script(effect)

    def context(self, policy: RetryPolicy | None = None) -> Context:
        return Context(policy or RetryPolicy(), lambda: self.now, random.Random(1))

    def paths(self) -> list[str]:
        return [r.path for r in self.seen]


def sequence(*replies: Reply, version: int = 5) -> Callable[[Request], Reply]:
    """Commits get `replies` in turn (the last one forever); /v1/version gets `version`."""
    queue = list(replies)

    def script(request: Request) -> Reply:
        if request.path == "/v1/version":
            return ok({"version": version, "leader_id": "a"})
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return script


def commit(server: Server, floor: int | None = None, **kw: Any) -> Any:
    steps = commit_steps(
        server.context(kw.pop("policy", None)), RID, OPS, kw.pop("preconditions", ()),
        floor=None if floor is None else Version(floor), **kw,
    )  # fmt: skip
    return drive(steps, server)


def test_a_first_answer_is_returned_after_reading_the_floor() -> None:
    server = Server(sequence(COMMITTED))
    assert commit(server) == Committed(Version(7), RID)
    assert server.paths() == ["/v1/version", "/v1/commit"]


def test_a_known_floor_saves_the_version_read() -> None:
    server = Server(sequence(COMMITTED))
    commit(server, floor=3)
    assert server.paths() == ["/v1/commit"]


def test_not_committed_is_an_answer_with_its_conflicts() -> None:
    answer = ok({"status": "not_committed", "version": 9, "request_id": RID, "leader_id": "a",
                 "conflicts": [{"index": 0, "reason": "too_old"}]})  # fmt: skip
    result = commit(Server(sequence(answer)), floor=3, preconditions=[PointRead("k", 1)])
    assert result == NotCommitted(((0, "too_old"),), Version(9), RID)
    assert result.too_old


def test_not_leader_is_sent_again_with_the_same_id_after_retry_after() -> None:
    server = Server(sequence(error(503, "not_leader"), error(503, "not_leader"), COMMITTED))
    assert commit(server, floor=3) == Committed(Version(7), RID)
    bodies = [orjson.loads(r.body or b"") for r in server.seen]
    assert [b["request_id"] for b in bodies] == [RID] * 3
    assert all(s >= 1.0 for s in server.sleeps)  # Retry-After: 1 honoured


def test_a_lost_answer_is_sent_again_and_the_duplicate_answer_returned() -> None:
    server = Server(sequence(Failure(sent=True, error="reset"), COMMITTED))
    assert commit(server, floor=3) == Committed(Version(7), RID)
    assert server.paths() == ["/v1/commit", "/v1/commit"]


@pytest.mark.parametrize("resends", [0, 1, 2])
def test_uncertain_answers_are_resent_then_settled_by_status_from_the_floor(
    resends: int,
) -> None:
    def script(request: Request) -> Reply:
        if request.path == "/v1/status":
            return ok({"request_id": RID, "status": "committed", "version": 8, "leader_id": "a"})
        return error(503, "commit_unknown")

    server = Server(script)
    policy = RetryPolicy(uncertain_resends=resends)
    assert commit(server, floor=3, policy=policy) == Committed(Version(8), RID)
    assert server.paths() == ["/v1/commit"] * (resends + 1) + ["/v1/status"]
    assert dict(server.seen[-1].params) == {"request_id": RID, "min_version": "3"}


def test_a_settled_never_applied_commit_is_not_committed_at_the_floor() -> None:
    def script(request: Request) -> Reply:
        if request.path == "/v1/status":
            return ok({"request_id": RID, "status": "not_committed", "leader_id": "a"})
        return Failure(sent=True, error="timeout")

    result = commit(Server(script), floor=3)
    assert result == NotCommitted((), Version(3), RID, "request_id_banned")


def test_nothing_sent_until_the_deadline_is_unavailable_without_a_status_lookup() -> None:
    server = Server(sequence(Failure(sent=False, error="refused")))
    with pytest.raises(Unavailable):
        commit(server, floor=3)
    assert set(server.paths()) == {"/v1/commit"}
    assert server.now <= RetryPolicy().deadline_s + 0.1


def test_an_unsettled_commit_raises_commit_unknown_with_its_id() -> None:
    server = Server(sequence(Failure(sent=True, error="reset")))
    with pytest.raises(CommitUnknown) as raised:
        commit(server, floor=3)
    assert raised.value.request_id == RID
    policy = RetryPolicy()
    assert server.now <= policy.deadline_s + policy.settle_s + 0.1


def test_status_log_truncated_raises() -> None:
    def script(request: Request) -> Reply:
        if request.path == "/v1/status":
            return ok({"request_id": RID, "status": "log_truncated", "leader_id": "a"})
        return error(503, "commit_unknown")

    with pytest.raises(LogTruncated):
        commit(Server(script), floor=3)


@pytest.mark.parametrize(
    ("answer", "raised"),
    [
        (error(400, "bad_request"), BadRequest),
        (error(400, "limit_exceeded"), BadRequest),
        (error(413, "too_large"), TooLarge),
        (error(409, "leader_changed", leader_id="b", version=4), LeaderChanged),
    ],
)
def test_refusals_raise_their_typed_error(answer: Answer, raised: type[Exception]) -> None:
    server = Server(sequence(answer))
    with pytest.raises(raised):
        commit(server, floor=3)
    assert server.paths() == ["/v1/commit"]


def test_leader_changed_carries_the_leader_and_version() -> None:
    with pytest.raises(LeaderChanged) as raised:
        commit(Server(sequence(error(409, "leader_changed", leader_id="b", version=4))), floor=3)
    assert (raised.value.leader_id, raised.value.version) == ("b", 4)


def test_a_refusal_after_an_uncertain_send_is_settled_first() -> None:
    """The first send may have been applied under the old leader; a later 409 must not
    hide that it committed."""

    def script(request: Request) -> Reply:
        if request.path == "/v1/status":
            return ok({"request_id": RID, "status": "committed", "version": 6, "leader_id": "a"})
        return replies.pop(0)

    moved = error(409, "leader_changed", leader_id="b", version=9)
    replies: list[Reply] = [Failure(sent=True, error="reset"), moved]
    assert commit(Server(script), floor=3) == Committed(Version(6), RID)


# The protocol against a model server: whatever it answers, the outcome is the truth.


@dataclass
class Truth:
    applied: int | None = None
    banned: bool = False
    statuses: int = 0


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_every_outcome_agrees_with_what_the_server_did(data: st.DataObject) -> None:
    truth = Truth()
    next_version = iter(range(10, 1000))

    def answer_commit() -> Reply:
        assert not truth.banned, "a commit was sent after its id was banned"
        action = data.draw(st.sampled_from(
            ["answer", "reject", "not_leader", "unknown", "lost", "refused", "500"]
        ))  # fmt: skip
        if (
            action in ("unknown", "lost", "500")
            and truth.applied is None
            and data.draw(st.booleans())
        ):
            truth.applied = next(next_version)  # applied, but the answer is lost
        if action == "answer" or (action == "reject" and truth.applied is not None):
            if truth.applied is None:
                truth.applied = next(next_version)
            return ok({"status": "committed", "version": truth.applied, "request_id": RID,
                       "leader_id": "a"})  # fmt: skip
        if action == "reject":
            return ok(
                {
                    "status": "not_committed",
                    "version": 9,
                    "request_id": RID,
                    "leader_id": "a",
                    "conflicts": [{"index": 0, "reason": "conflict"}],
                }
            )
        if action == "not_leader":
            return error(503, "not_leader")
        if action == "unknown":
            return error(503, "commit_unknown")
        if action == "500":
            return error(500, "internal")
        return Failure(sent=action == "lost", error=action)

    def answer_status() -> Reply:
        truth.statuses += 1
        action = data.draw(st.sampled_from(["answer", "not_leader", "lost"]))
        if action == "not_leader":
            return error(503, "not_leader")
        if action == "lost":
            truth.banned = True  # the ban may have happened
            return Failure(sent=True, error="lost")
        truth.banned = True
        if truth.applied is not None:
            return ok({"request_id": RID, "status": "committed", "version": truth.applied,
                       "leader_id": "a"})  # fmt: skip
        return ok({"request_id": RID, "status": "not_committed", "leader_id": "a"})

    def script(request: Request) -> Reply:
        if request.path == "/v1/status":
            return answer_status()
        assert orjson.loads(request.body or b"")["request_id"] == RID  # one id per call
        return answer_commit()

    server = Server(script)
    policy = RetryPolicy(deadline_s=5, settle_s=3)
    try:
        result = commit(server, floor=3, preconditions=[PointRead("k")], read_version=3,
                        policy=policy)  # fmt: skip
    except CommitUnknown:
        assert truth.statuses > 0  # only after trying to settle
        return
    except Unavailable:
        assert truth.applied is None  # nothing can have been applied
        assert truth.statuses == 0
        return
    finally:
        assert server.now <= policy.deadline_s + policy.settle_s + policy.max_delay_s + 1
    if isinstance(result, Committed):
        assert result.version == truth.applied
    else:
        assert truth.applied is None  # and it never will be: answered, or banned
        assert truth.banned or result.conflicts


def test_backoff_grows_and_never_undercuts_retry_after() -> None:
    policy, rng = RetryPolicy(), random.Random(0)
    assert all(policy.delay(n, 1.0, rng) >= 1.0 for n in range(20))
    assert all(policy.delay(n, None, rng) <= policy.max_delay_s for n in range(40))
    assert policy.delay(0, None, rng) < policy.delay(8, None, rng)


def test_version_memory_is_a_floor_only_while_fresh() -> None:
    memory = VersionMemory()
    assert memory.fresh(0, 5) is None
    memory.note(Version(10), 1.0)
    memory.note(Version(8), 2.0)  # older versions never lower it
    assert memory.fresh(3.0, 5) == 10
    assert memory.fresh(7.0, 5) is None


# The change stream


def event(version: int, prev: int) -> ChangeEvent:
    return ChangeEvent(Version(version), Version(prev), RequestId("r"), "t", "a", ())


def test_cursor_finds_gaps_and_duplicates() -> None:
    cursor = StreamCursor(Version(5))
    cursor.accept(event(7, 5))
    cursor.accept(Checkpoint(Version(9), "a"))
    cursor.accept(event(12, 7))  # filtered: prev may be below the checkpoint
    with pytest.raises(StreamGap, match="duplicate"):
        cursor.accept(event(12, 9))
    with pytest.raises(StreamGap, match="gap"):
        cursor.accept(event(20, 15))
    assert cursor.position == 12


def test_an_unfiltered_stream_chains_every_transaction_to_the_last_one() -> None:
    """A checkpoint cannot hide transactions never sent: in an unfiltered stream the
    next transaction's prev_version must be the last one received."""
    cursor = StreamCursor(Version(0), chained=True)
    cursor.accept(event(3, 0))
    cursor.accept(Checkpoint(Version(9), "a"))  # claims 4..9 were sent: they were not
    with pytest.raises(StreamGap, match="last one received was 3"):
        cursor.accept(event(10, 8))
    quiet = StreamCursor(Version(0), chained=True)
    quiet.accept(event(3, 0))
    quiet.accept(Checkpoint(Version(9), "a"))  # nothing committed in 4..9
    quiet.accept(event(10, 3))
    filtered = StreamCursor(Version(0))
    filtered.accept(event(3, 0))
    filtered.accept(Checkpoint(Version(9), "a"))
    filtered.accept(event(10, 8))  # a filtered stream chains to what it was sent only


def test_a_non_durable_stream_resumes_after_its_last_checkpoint() -> None:
    cursor = StreamCursor(Version(0))
    cursor.accept(Checkpoint(Version(3), "a"))
    cursor.accept(event(4, 3))
    assert cursor.resume_after(durable=True) == 4
    assert cursor.resume_after(durable=False) == 3


def frame(ev: ChangeEvent | Checkpoint) -> bytes:
    if isinstance(ev, Checkpoint):
        data = {"committed_version": ev.committed_version, "leader_id": "a"}
        return b"event: checkpoint\ndata: " + orjson.dumps(data) + b"\n\n"
    data = {"request_id": "r", "version": ev.version, "prev_version": ev.prev_version,
            "timestamp": "t", "leader_id": "a", "operations": []}  # fmt: skip
    return (
        f"id: {ev.version}\nevent: transaction\n".encode()
        + b"data: "
        + orjson.dumps(data)
        + b"\n\n"
    )


def run_stream(
    connections: list[list[bytes] | Answer], limit: int, **kw: Any
) -> tuple[list[ChangeEvent | Checkpoint], list[Request]]:
    """Each connection: the chunks it streams then ends, or an error answer."""
    clock = [0.0]
    steps = subscribe_steps(Context(RetryPolicy(), lambda: clock[0], random.Random(1)), **kw)
    emitted: list[ChangeEvent | Checkpoint] = []
    opened: list[Request] = []
    current: list[bytes] = []
    reply: Any = None
    while len(emitted) < limit:
        step = steps.send(reply)
        reply = None
        if isinstance(step, Emit):
            emitted.append(step.item)
        elif isinstance(step, Sleep):
            clock[0] += step.seconds
        elif isinstance(step, Open):
            opened.append(step.request)
            connection = connections.pop(0)
            if isinstance(connection, Answer):
                reply = connection
            else:
                current, reply = list(connection), Opened()
        elif isinstance(step, Pull):
            reply = Chunk(current.pop(0)) if current else End()
    steps.close()
    return emitted, opened


def test_subscribe_resumes_with_last_event_id_after_a_break() -> None:
    first = [frame(event(1, 0)), frame(event(2, 1))[:10], frame(event(2, 1))[10:]]
    second = [frame(Checkpoint(Version(4), "a")), frame(event(6, 2))]
    emitted, opened = run_stream([first, error(503, "not_leader"), second], 3, after=0)
    assert [e.version for e in emitted if isinstance(e, ChangeEvent)] == [1, 2, 6]
    assert dict(opened[0].params)["after"] == "0"
    assert dict(opened[1].headers) == {"Last-Event-ID": "2"}
    assert dict(opened[2].headers) == {"Last-Event-ID": "2"}


def test_subscribe_raises_on_a_gap_and_on_410() -> None:
    with pytest.raises(StreamGap):
        run_stream([[frame(event(1, 0)), frame(event(5, 3))]], 5, after=0)
    gone = error(410, "log_truncated", oldest_version=100, snapshot={"version": 99})
    with pytest.raises(LogTruncated) as raised:
        run_stream([gone], 1, after=0)
    assert raised.value.oldest_version == 100
    assert raised.value.snapshot == {"version": 99}


def test_subscribe_filters_travel_in_the_query() -> None:
    _, opened = run_stream([[frame(event(1, 0))]], 1, after=0, prefix=b"user/")
    query = parse_qs("&".join(f"{k}={v}" for k, v in opened[0].params))
    assert query["prefix"] == ["dXNlci8="]


# Transactions


def test_reads_see_the_transactions_own_writes_and_record_what_they_read() -> None:
    tr = TransactionState(Version(5))
    tr.set("a", "1")
    tr.delete_range("b", "d")
    tr.set("c", "3")
    assert tr.own("a") == (True, b"1")
    assert tr.own("b") == (True, None)
    assert tr.own("z") == (False, None)
    stored = [(b"a", b"0"), (b"b", b"2"), (b"e", b"5")]
    assert tr.merge(b"a", b"z", stored) == [(b"a", b"1"), (b"c", b"3"), (b"e", b"5")]
    tr.read_key("z")
    tr.read_range(b"a", None)
    assert [p.version for p in tr.preconditions] == [5, 5]


def test_transactional_reruns_at_the_conflicts_version_and_fresh_after_too_old() -> None:
    attempts = Attempts()
    conflict = NotCommitted(((0, "conflict"),), Version(9), RID)
    too_old = NotCommitted(((0, "conflict"), (1, "too_old")), Version(9), RID)
    banned = NotCommitted((), Version(9), RID, "request_id_banned")
    assert attempts.next_read_version(conflict) == 9
    assert attempts.next_read_version(too_old) is None
    assert attempts.next_read_version(banned) is None


def test_a_transactions_reads_record_only_what_the_buffer_does_not_decide() -> None:
    tr = TransactionState(Version(5))
    tr.set("a", "1")
    assert tr.lookup("a") == (True, b"1")
    assert tr.lookup("z") == (False, None)
    assert tr.scan(None, None, b"p") == (b"p", b"q")
    assert [type(p).__name__ for p in tr.preconditions] == ["PointRead", "RangeRead"]
    stored = [
        KeyValue(b"b", b"2", Version(5), Version(1)),
        KeyValue(b"c", b"3", Version(5), Version(1)),
    ]
    assert tr.view(b"a", b"z", stored, 2) == [(b"a", b"1"), (b"b", b"2")]


def test_transactional_runs_sleep_between_runs_and_give_up_with_the_last_answer() -> None:
    server = Server(sequence(COMMITTED))
    runs = Runs(Attempts(retries=2), server.context())
    conflict = NotCommitted(((0, "conflict"),), Version(9), RID)
    delays = []
    for delay in runs.delays():
        delays.append(delay)
        assert not runs.done(conflict)
        assert runs.read_version == 9
    assert delays[0] == 0 and all(d > 0 for d in delays[1:]) and len(delays) == 3
    assert isinstance(runs.give_up(), Conflict)
    runs.too_old(TooOld("gone", oldest_version=3))
    assert runs.read_version is None and isinstance(runs.give_up(), TooOld)
    assert Runs(Attempts(), server.context()).done(None)


def test_a_session_remembers_committed_versions_as_the_next_commits_floor() -> None:
    server = Server(sequence(COMMITTED))
    session = Session(server.context())
    assert drive(session.commit(OPS, request_id=RID), server) == Committed(Version(7), RID)
    assert drive(session.commit(OPS, request_id=RID), server).version == 7
    assert server.paths() == ["/v1/version", "/v1/commit", "/v1/commit"]
    assert session.memory.version == 7
