"""Pure pieces of the client API: status decisions, SSE framing, retention rules and the
subscriber hand-over."""

from __future__ import annotations

import asyncio

import pytest

from services.gateway import retention, sse
from services.gateway import status as st
from services.gateway.requests import BadRequest
from services.gateway.subscriptions import CloseReason, Hub
from weaseldb.core.changes import checkpoint_frame
from weaseldb.core.protocol import (
    AcceptedEvents,
    DurableEvents,
    EventTransaction,
    StatusReply,
    Write,
)
from weaseldb.core.types import Outcome, RequestId, Term, Version


def reply(outcome: str = "", version: int = 0, floor: int = 50, upper: int = 100) -> StatusReply:
    return StatusReply(
        1,
        RequestId("r"),
        Version(upper),
        Version(upper),
        Outcome(outcome),
        Version(version),
        Version(floor),
    )


def test_status_decide_from_memory_or_store() -> None:
    assert st.decide(reply("committed", 70), 0) == st.Answer(Outcome.COMMITTED, 70)
    assert st.decide(reply("not_committed"), 0) == st.Answer(Outcome.NOT_COMMITTED)
    assert st.decide(reply(), 50) == st.Answer(Outcome.NOT_COMMITTED)  # memory covers it
    assert st.decide(reply(), 10) == st.ReadStore(10, 49)
    assert st.decide(reply(floor=200), 0) == st.ReadStore(0, 100)


def test_status_judged_from_the_index() -> None:
    assert st.judge([9], 0, 20, 1).version == 9
    assert st.judge([9], 0, 8, 1).status == Outcome.NOT_COMMITTED
    assert st.judge([], 0, 20, 5).status == Outcome.LOG_TRUNCATED
    assert st.judge([], 5, 20, 5).status == Outcome.NOT_COMMITTED


def tx(version: int) -> EventTransaction:
    return EventTransaction(Version(version), RequestId(f"r{version}"), 0, [Write(b"k", b"v")])


def test_sse_framing_and_parsing() -> None:
    event = sse.transaction_event(tx(7), 5, "L")
    assert event.startswith(b"id: 7\nevent: transaction\ndata: {") and event.endswith(b"\n\n")
    assert b'"prev_version":5' in event and b'"timestamp":"1970-01-01T00:00:00.000Z"' in event
    assert checkpoint_frame(3, "L") == (
        b'event: checkpoint\ndata: {"committed_version":3,"leader_id":"L"}\n\n'
    )
    assert sse.parse_after(None, "12") == 12 and sse.parse_after("3", "12") == 3
    assert sse.parse_after(None, None) is None
    for bad in ("-1", "x", str(2**64)):
        with pytest.raises(ValueError):
            sse.parse_after(bad, None)
    assert sse.parse_bool("false", True) is False


def test_retention_rules() -> None:
    assert retention.parse_body(b'{"version": 3}') == 3
    for body in (b"{", b"[]", b'{"version": -1}', b'{"version": true}', b'{"version": 1, "x": 1}'):
        with pytest.raises(BadRequest):
            retention.parse_body(body)
    with pytest.raises(BadRequest):
        retention.check_policy_id("a/b")
    current = retention.update(None, "p", 5, "t")
    assert retention.update(current.version, "p", 5, "t2").version == 5
    with pytest.raises(retention.MovesBack):
        retention.update(current.version, "p", 4, "t3")
    assert retention.decode(current.encode()) == current


def test_hand_over_drops_duplicates_and_keeps_order() -> None:
    async def run() -> None:
        hub = Hub(buffer_limit=1 << 20)
        sub = hub.register(durable=True)
        hub.on_durable(DurableEvents(Version(0), [], sync=hub.wanted()[0]))
        hub.on_durable(DurableEvents(Version(0), [tx(1), tx(2)]))
        hub.on_durable(DurableEvents(Version(2), [tx(3), tx(4)]))
        sub.go_live(3)  # history already sent 1..3
        hub.on_durable(DurableEvents(Version(4), [tx(5)]))
        hub.on_durable(DurableEvents(Version(4), [tx(5)]))  # a repeated round is ignored
        assert events_in(sub.take()) == [4, 5]

    asyncio.run(run())


def test_slow_subscriber_is_cut_alone_and_leader_change() -> None:
    async def run() -> None:
        hub = Hub(buffer_limit=2000)
        slow, fast = hub.register(durable=True), hub.register(durable=False)
        hub.on_durable(DurableEvents(Version(0), [], sync=hub.wanted()[0]))
        slow.go_live(0)
        cut: list[bool] = []
        slow.on_cut = lambda: cut.append(True)
        for v in range(1, 40):
            hub.on_durable(DurableEvents(Version(v - 1), [tx(v)]))
        assert slow.closed == CloseReason.SLOW and cut == [True] and hub.dropped == 1
        assert hub.subscribers == 1
        hub.on_leader_lost()
        assert fast.closed == CloseReason.LEADER_CHANGED and not fast.flush_first

    asyncio.run(run())


def events_in(sub_data: bytes) -> list[int]:
    return [int(line[4:]) for line in sub_data.split(b"\n") if line.startswith(b"id: ")]


def test_a_feed_takes_nothing_before_its_sync_answer_and_misses_nothing_after() -> None:
    async def run() -> None:
        hub = Hub(buffer_limit=1 << 20)
        assert hub.wanted() == (0, 0)  # no subscriber: this worker asks for no events
        sub = hub.register(durable=True)
        number = hub.wanted()[0]
        assert number and not hub.ready(True).is_set()
        hub.on_durable(DurableEvents(Version(0), [tx(1), tx(2)]))  # a leftover: not synced yet
        hub.on_durable(DurableEvents(Version(2), [], sync=number + 1))  # not the awaited number
        assert not hub.synced(True)
        hub.on_durable(DurableEvents(Version(5), [], sync=number))
        target = hub.seen(True)  # history from the store reaches this
        assert hub.ready(True).is_set() and target == 5
        hub.on_durable(DurableEvents(Version(5), [tx(6), tx(7)]))
        sub.go_live(target)
        assert events_in(sub.take()) == [6, 7]

    asyncio.run(run())


def test_the_last_subscriber_leaving_stops_the_feed_and_a_new_one_needs_a_new_sync() -> None:
    async def run() -> None:
        hub = Hub(buffer_limit=1 << 20)
        first = hub.register(durable=False)
        old = hub.wanted()[1]
        hub.on_accepted(AcceptedEvents(Term(0), Version(3), Version(3), [], sync=old))
        hub.unregister(first)
        assert hub.wanted() == (0, 0) and not hub.synced(False)
        second = hub.register(durable=False)
        new = hub.wanted()[1]
        assert new != old
        hub.on_accepted(
            AcceptedEvents(Term(0), Version(3), Version(4), [tx(4)])
        )  # sent under the old want
        hub.on_accepted(
            AcceptedEvents(Term(0), Version(3), Version(3), [], sync=old)
        )  # a late answer to it
        assert not hub.synced(False)
        hub.on_accepted(AcceptedEvents(Term(0), Version(4), Version(4), [], sync=new))
        target = hub.seen(False)
        hub.on_accepted(AcceptedEvents(Term(0), Version(4), Version(5), [tx(5)]))
        second.go_live(target)
        assert events_in(second.take()) == [5]

    asyncio.run(run())


def test_leader_loss_wakes_a_subscriber_waiting_for_its_sync() -> None:
    async def run() -> None:
        hub = Hub(buffer_limit=1 << 20)
        sub = hub.register(durable=True)
        ready = hub.ready(True)
        hub.on_leader_lost()
        assert ready.is_set() and sub.closed == CloseReason.LEADER_CHANGED and not hub.synced(True)
        assert hub.wanted() == (0, 0)

    asyncio.run(run())


def test_subscribers_of_a_kind_share_one_journal_that_keeps_only_unread_rounds() -> None:
    async def run() -> None:
        hub = Hub(buffer_limit=3000)
        reader, idle = hub.register(durable=True), hub.register(durable=True)
        hub.on_durable(DurableEvents(Version(0), [], sync=hub.wanted()[0]))
        reader.go_live(0)
        idle.go_live(0)
        hub.on_durable(DurableEvents(Version(0), [tx(1), tx(2)]))
        assert events_in(reader.take()) == [1, 2]
        journal = reader.journal
        assert journal is idle.journal and journal.since(journal.first)  # idle has not read
        for v in range(3, 40):
            hub.on_durable(DurableEvents(Version(v - 1), [tx(v)]))
            if v % 5 == 0:
                reader.take()  # keeps up
        # The one that never read fell more than its limit behind: cut, alone.
        assert idle.closed == CloseReason.SLOW and not reader.closed and hub.dropped == 1
        assert events_in(reader.take()) == [36, 37, 38, 39]
        assert journal.since(journal.first) == []  # every round was read: none kept

    asyncio.run(run())


def test_a_stream_closed_with_flush_keeps_what_it_had_not_read() -> None:
    async def run() -> None:
        hub = Hub(buffer_limit=1 << 20)
        sub = hub.register(durable=True)
        hub.on_durable(DurableEvents(Version(0), [], sync=hub.wanted()[0]))
        sub.go_live(0)
        hub.on_durable(DurableEvents(Version(0), [tx(1), tx(2)]))
        hub.on_leader_lost()  # durable streams end after what they hold
        later = hub.register(durable=True)
        hub.on_durable(DurableEvents(Version(0), [], sync=hub.wanted()[0]))
        later.go_live(2)
        hub.on_durable(DurableEvents(Version(2), [tx(3)]))
        assert sub.closed == CloseReason.LEADER_CHANGED and sub.flush_first
        assert events_in(sub.take()) == [1, 2] and events_in(later.take()) == [3]

    asyncio.run(run())
