"""Memory stays bounded under backpressure and abuse: one test per bound (no processes)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from services.gateway.pipeline import PipelineClient, PipelineUnavailable
from services.gateway.subscriptions import CloseReason, Hub
from services.persister import engine as engine_module
from services.persister.outboxes import WorkerQueues
from services.resolver.app import AcceptedPublisher
from tests.support.faults import FaultyStore
from tests.unit.test_persister import Harness, accepted, lead
from weaseldb.core import layout
from weaseldb.core.protocol import (
    AcceptedEvents,
    CommitEntry,
    CommitState,
    Hello,
    Interest,
    RingEntry,
    StatusEntry,
    TermStart,
    Write,
    decode_replies,
)
from weaseldb.core.types import NUMBER_TOP, BatchNumber, RequestId, Stage, Term, Version
from weaseldb.runtime.ring import Inbox, Outbox
from weaseldb.runtime.stores.memory import MemoryStore


class RecordingOutbox:
    """Collects frames; blocks while `gate` is clear."""

    def __init__(self, blocked: bool = False) -> None:
        self.frames: list[bytes] = []
        self.gate = asyncio.Event()
        if not blocked:
            self.gate.set()

    async def send(self, frame: bytes) -> None:
        await self.gate.wait()
        self.frames.append(frame)


def as_outbox(fake: RecordingOutbox) -> Outbox:
    return cast(Outbox, fake)


def test_answers_waiting_behind_a_stuck_batch_stop_the_input(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch stuck in retries holds every later answer back; rejected commits keep coming.
    Past MAX_UNRELEASED_SLOTS the engine stops taking input instead of queueing more."""
    monkeypatch.setattr(engine_module, "MAX_UNRELEASED_SLOTS", 20)
    inner = MemoryStore()

    async def hold(op: str, key: str) -> None:
        if op == "put_if_absent" and key == layout.batch_key(
            BatchNumber(NUMBER_TOP - 1)
        ):  # first data
            await asyncio.Event().wait()

    async def scenario() -> tuple[int, bool]:
        term = await lead(inner)
        harness = Harness(FaultyStore(inner, hold), term)
        harness.engine.submit([accepted(1)])  # the stuck batch
        await asyncio.sleep(0.01)
        for version in range(2, 40):
            rejected = CommitEntry(
                0, version, RequestId(f"r-{version:020d}"), [], [Write(b"k", b"v")]
            )
            rejected.state, rejected.version = CommitState.REJECTED, Version(version)
            harness.engine.submit([rejected])
            try:
                await asyncio.wait_for(harness.engine.wait_for_capacity(), 0.05)
            except TimeoutError:
                return harness.engine.unreleased, True
        return harness.engine.unreleased, False

    unreleased, blocked = asyncio.run(scenario())
    assert blocked and unreleased == 20


def test_the_resolvers_accepted_backlog_is_dropped_and_the_gap_closes_streams() -> None:
    async def scenario() -> tuple[int, int, list[bytes]]:
        blocked = RecordingOutbox(blocked=True)
        publisher = AcceptedPublisher([as_outbox(blocked)], limit_bytes=4096)
        sender = asyncio.create_task(publisher.run())
        publisher.collect(
            [TermStart(Term(9), "L", Version(1), Version(0)), Interest(0, accepted=1)], Version(0)
        )
        peak = 0
        for version in range(1, 500):
            entry = CommitEntry(
                0, 0, RequestId(f"req-{version:020d}"), [], [Write(b"k", b"v" * 50)]
            )
            entry.state, entry.version = CommitState.ACCEPTED, Version(version)
            publisher.collect([entry], Version(version))
            peak = max(peak, publisher.backlog_bytes)
            await asyncio.sleep(0)
        blocked.gate.set()
        await asyncio.sleep(0.05)
        sender.cancel()
        return peak, publisher.backlog_bytes, blocked.frames

    peak, left, frames = asyncio.run(scenario())
    assert peak <= 4096 and left == 0

    hub = Hub(buffer_limit=1 << 20)
    hub.on_term_start(9, "L", 0)
    live = hub.register(durable=False)
    assert hub.wanted() == (0, 1)  # the number the Interest above carried
    live.go_live(0)
    for frame in frames:
        for message in decode_replies(frame):
            assert isinstance(message, AcceptedEvents)
            hub.on_accepted(message)
    assert live.closed == CloseReason.EVENTS_DROPPED  # it would have skipped transactions


def test_one_blocked_gateway_worker_holds_back_only_its_own_frames_in_order() -> None:
    async def scenario() -> tuple[list[bytes], list[bytes], bool]:
        fast, slow = RecordingOutbox(), RecordingOutbox(blocked=True)
        queues = WorkerQueues([as_outbox(fast), as_outbox(slow)], limit_bytes=50)
        queues.start()
        for i in range(10):
            queues.put_all(b"frame-%02d" % i)
        await asyncio.sleep(0.01)
        over = queues.over_limit  # the blocked worker's queue passed the limit
        slow.gate.set()
        await asyncio.wait_for(queues.room(), 1)
        await queues.drain()
        queues.stop()
        return fast.frames, slow.frames, over

    fast, slow, over = asyncio.run(scenario())
    expected = [b"frame-%02d" % i for i in range(10)]
    assert fast == expected and slow == expected and over


class NullInbox:
    async def receive(self) -> list[bytes]:
        await asyncio.Event().wait()
        return []


class Cell:
    def read(self) -> int:
        return 0


def test_the_gateway_sheds_instead_of_queueing_without_bound() -> None:
    async def scenario() -> PipelineUnavailable:
        client = PipelineClient(
            0,
            as_outbox(RecordingOutbox()),
            cast(Inbox, NullInbox()),
            cast(Any, Cell()),
            timeout_s=30,
            max_waiting=3,
        )
        client.leadership.leading = True
        entries: list[RingEntry] = [
            StatusEntry(0, t, RequestId(f"id-{t:020d}")) for t in range(1, 4)
        ]
        for ticket, entry in enumerate(entries, start=1):
            client.submit(entry, ticket)
        with pytest.raises(PipelineUnavailable) as refused:
            client.submit(StatusEntry(0, 4, RequestId("id-4" * 5)), 4)
        assert client.waiting == 3
        return refused.value

    refused = asyncio.run(scenario())
    assert refused.code == "overloaded" and not refused.unknown


def test_accepted_events_go_only_to_workers_that_asked() -> None:
    async def scenario() -> tuple[list[AcceptedEvents], list[AcceptedEvents]]:
        quiet, asking = RecordingOutbox(), RecordingOutbox()
        publisher = AcceptedPublisher([as_outbox(quiet), as_outbox(asking)])
        sender = asyncio.create_task(publisher.run())

        def commit(version: int) -> CommitEntry:
            entry = CommitEntry(0, 0, RequestId(f"req-{version:020d}"), [], [Write(b"k", b"v")])
            entry.state, entry.version = CommitState.ACCEPTED, Version(version)
            return entry

        publisher.collect([TermStart(Term(9), "L", Version(1), Version(0)), commit(1)], Version(1))
        publisher.collect([commit(2), Interest(1, accepted=7), commit(3)], Version(3))
        publisher.collect(
            [commit(4), Hello(Stage.GATEWAY, 1), commit(5)], Version(5)
        )  # it restarted
        await asyncio.sleep(0.01)
        sender.cancel()
        decoded = [
            [m for f in outbox.frames for m in decode_replies(f) if isinstance(m, AcceptedEvents)]
            for outbox in (quiet, asking)
        ]
        return decoded[0], decoded[1]

    quiet, asking = asyncio.run(scenario())
    assert quiet == []
    sync, *rounds = asking
    assert (sync.sync, sync.prev_version, sync.transactions) == (7, 2, [])
    assert [(m.prev_version, [t.version for t in m.transactions]) for m in rounds] == [
        (2, [3]),
        (3, [4]),
    ]
