"""Deterministic simulation of the persister against an in-memory store.

Hypothesis drives a state machine: commits arrive, the store answers PUTs in any order with
success, 5xx, 409 ConditionalRequestConflict, or a lost answer after the object landed, and
the leader crashes with PUTs in flight: each in-flight PUT lands before the next leader
recovers, never lands, or lands late, after the next leader opened and fenced its term (a
deposed leader's late write). After every step: each leader released its answers in
version order with no gap, everything released is in the valid log, the window rule holds
(no batch number more than max_in_flight_requests past the oldest one not yet durable), and
recovery, on its fast path and its slow path alike, never goes below what was released.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from services.persister.engine import Engine
from services.persister.leadership import OpenedTerm, claim, open_term
from services.persister.release import Slot
from weaseldb.core import batchfile, history, layout, recovery, validity
from weaseldb.core.config import PersisterConfig
from weaseldb.core.errors import AlreadyExists, TransientError
from weaseldb.core.protocol import CommitEntry, CommitState, RingEntry, Write
from weaseldb.core.types import BatchNumber, RequestId, Version
from weaseldb.runtime.stores.memory import MemoryStore

CONFIG = PersisterConfig(
    batch_timeout_ms=0.1, retry_base_delay_ms=0.1, max_retry_attempts=3, max_in_flight_requests=4
)
WINDOWS = st.integers(1, 6)  # max_in_flight_requests of each leader


@dataclass
class PendingPut:
    key: str
    data: bytes
    answer: asyncio.Future[str]


class ScriptedStore(MemoryStore):
    """PUTs wait until the test answers them; everything else is immediate."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[PendingPut] = []
        self.automatic = True

    async def put_if_absent(self, key: str, data: bytes) -> None:
        if self.automatic:
            await super().put_if_absent(key, data)
            return
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.pending.append(PendingPut(key, data, answer))
        outcome = await answer
        if outcome == "lands":
            await super().put_if_absent(key, data)
        elif outcome == "lands-answer-lost":
            if key not in self.objects:
                await super().put_if_absent(key, data)
            raise TransientError("connection reset after the object was stored")
        elif outcome in ("5xx", "409"):
            raise TransientError(outcome)

    def answer(self, index: int, outcome: str) -> None:
        put = self.pending.pop(index % len(self.pending))
        if outcome == "lands" and put.key in self.objects:
            put.answer.set_exception(AlreadyExists(put.key))
        else:
            put.answer.set_result(outcome)


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only when nothing is ready to run: then it jumps
    to the next timer. Timers (batch waits, retry backoff, the steps' own pauses) fire in
    the same order in every run however busy the machine is, which Hypothesis needs to
    replay a run (with the wall clock, a loaded machine changed which rules were enabled).
    It reads two attributes private to asyncio's base loop: the ready queue and the
    timer heap."""

    def __init__(self) -> None:
        super().__init__()
        self._virtual_now = 0.0

    def time(self) -> float:
        return self._virtual_now

    def _run_once(self) -> None:
        ready, scheduled = self._ready, self._scheduled  # type: ignore[attr-defined]
        if not ready and scheduled:
            self._virtual_now = max(self._virtual_now, scheduled[0].when())
        super()._run_once()  # type: ignore[misc]


class PersisterSimulation(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = VirtualClockLoop()
        self.store = ScriptedStore()
        self.next_version = 1
        self.released: list[int] = []  # versions answered committed, in answer order
        self.released_this_term: list[int] = []
        self.late_puts: list[PendingPut] = []  # a crashed leader's PUTs still on the wire
        self.failed: set[int] = set()
        self.engine: Engine | None = None
        self.config = CONFIG
        self.term: OpenedTerm | None = None
        self.decoded: dict[int, batchfile.Batch] = {}

    def teardown(self) -> None:
        self._stop_tasks()
        self.loop.close()

    def _stop_tasks(self) -> None:
        for put in self.store.pending:
            put.answer.cancel()
        self.store.pending.clear()
        tasks = asyncio.all_tasks(self.loop)
        for task in tasks:
            task.cancel()
        if tasks:
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))

    def run(self, seconds: float = 0.002) -> None:
        self.loop.run_until_complete(asyncio.sleep(seconds))

    @initialize(window=WINDOWS)
    def lead(self, window: int) -> None:
        """A new leader; each has its own max_in_flight_requests (a config change between
        restarts), so the fence must cover the largest window of any earlier leader."""
        self.store.automatic = True
        self.config = CONFIG.model_copy(update={"max_in_flight_requests": window})

        async def become_leader() -> OpenedTerm:
            claimed = await claim(self.store, leader_id="sim", pod_name="sim", config=self.config)
            return await open_term(self.store, claimed, self.config)

        self.term = self.loop.run_until_complete(become_leader())
        self._land_late_puts()
        self.released_this_term = []
        self.next_version = max(self.next_version, self.term.last_version + 1)
        self.engine = Engine(
            self.store, self.config, self.term, on_release=self._released, on_fail=self._failed
        )
        self.store.automatic = False

    def _released(self, slots: list[Slot]) -> None:
        for slot in slots:
            for entry in slot.riders:
                if isinstance(entry, CommitEntry):
                    self.released.append(entry.version)
                    self.released_this_term.append(entry.version)

    def _failed(
        self, written: list[RingEntry], unwritten: list[RingEntry], error: BaseException
    ) -> None:
        self.failed.update(e.version for e in written + unwritten if isinstance(e, CommitEntry))

    @rule(count=st.integers(1, 5))
    def commits_arrive(self, count: int) -> None:
        assert self.engine is not None
        entries: list[RingEntry] = []
        for _ in range(count):
            entry = CommitEntry(
                0,
                self.next_version,
                RequestId(f"sim-{self.next_version:016d}"),
                [],
                [Write(b"k%d" % (self.next_version % 7), b"v")],
            )
            entry.state, entry.version = CommitState.ACCEPTED, Version(self.next_version)
            self.next_version += 1
            entries.append(entry)
        engine = self.engine

        async def arrive() -> None:
            engine.submit(entries)
            await asyncio.sleep(0.002)

        self.loop.run_until_complete(arrive())

    @precondition(lambda self: bool(self.store.pending))
    @rule(
        index=st.integers(0, 50),
        outcome=st.sampled_from(["lands", "lands", "lands", "5xx", "409", "lands-answer-lost"]),
    )
    def store_answers(self, index: int, outcome: str) -> None:
        self.store.answer(index, outcome)
        self.run()

    @rule(fates=st.lists(st.sampled_from(["lands", "lost", "late"]), max_size=8), window=WINDOWS)
    def crash_and_recover(self, fates: list[str], window: int) -> None:
        """The process dies: each in-flight PUT lands now, never, or late (after the next
        leader has opened and fenced its term); then a new leader recovers."""
        for i, put in enumerate(list(self.store.pending)):
            fate = fates[i] if i < len(fates) else "lost"
            if fate == "lands" and put.key not in self.store.objects:
                self.loop.run_until_complete(
                    MemoryStore.put_if_absent(self.store, put.key, put.data)
                )
            elif fate == "late":
                self.late_puts.append(put)
        self.store.pending.clear()
        self._stop_tasks()
        self.check_recovery()
        self.lead(window)

    def _land_late_puts(self) -> None:
        """A deposed leader's writes arriving after the new term is fenced: create-only, so
        each lands only where nothing was written (it must then be void or harmless)."""
        for put in self.late_puts:
            if put.key not in self.store.objects:
                self.loop.run_until_complete(
                    MemoryStore.put_if_absent(self.store, put.key, put.data)
                )
        self.late_puts.clear()

    def check_recovery(self) -> None:
        """Both recovery paths: the fast one (the watermark's term is the claim before
        ours: one read) and the slow one (read back and apply the validity rule)."""
        claim = self.loop.run_until_complete(recovery.newest_claim(self.store))
        fast = self.loop.run_until_complete(recovery.recover(self.store, prior_term=claim))
        slow = self.loop.run_until_complete(recovery.recover(self.store, prior_term=None))
        assert fast == slow
        if self.released:
            assert fast.last_version >= max(self.released)

    @invariant()
    def released_in_order_without_gaps(self) -> None:
        assert self.released == sorted(self.released)
        assert len(set(self.released)) == len(self.released)
        assert not self.failed & set(self.released)
        # Every commit here is accepted, so one leader releases a gapless run of versions.
        mine = self.released_this_term
        assert mine == list(range(mine[0], mine[0] + len(mine))) if mine else True

    @invariant()
    def released_is_durable_and_valid(self) -> None:
        numbers = self.loop.run_until_complete(history.all_batch_numbers(self.store))
        gapless = [n for i, n in enumerate(numbers) if n == numbers[0] - i]
        batches = [self._decoded(n) for n in gapless]
        flags = validity.valid_flags([b.term for b in batches])
        durable = {
            t.version for b, ok in zip(batches, flags, strict=True) if ok for t in b.transactions
        }
        assert set(self.released) <= durable

    def _decoded(self, number: int) -> batchfile.Batch:
        if number not in self.decoded:  # batches are immutable once written
            self.decoded[number] = batchfile.decode(
                self.store.objects[layout.batch_key(BatchNumber(number))]
            )
        return self.decoded[number]

    @invariant()
    def window_rule_holds(self) -> None:
        if self.engine is not None and self.engine.failure is None:
            # (A failed engine drops its slots; PUTs still on the wire no longer matter.)
            assert self.engine.window_used <= self.config.max_in_flight_requests
            assert self.engine.in_flight <= self.engine.window_used

    @invariant()
    def no_late_write_lands_past_the_fence(self) -> None:
        """A deposed leader's late write never takes a number the new leader writes data
        at (the engine would refuse to renumber and fail)."""
        failure = self.engine.failure if self.engine is not None else None
        assert "older term" not in str(failure)


PersisterSimulation.TestCase.settings = settings(
    max_examples=400, stateful_step_count=25, deadline=None
)
TestPersisterSimulation = PersisterSimulation.TestCase
