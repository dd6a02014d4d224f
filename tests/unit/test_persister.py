"""The persister's leadership and write engine against an in-memory store (no processes)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from prometheus_client import REGISTRY

from services.persister.engine import Engine
from services.persister.leadership import (
    Claim,
    Holder,
    LostClaim,
    OpenedTerm,
    claim,
    newest_claim_holder,
    open_term,
)
from services.persister.release import Slot
from services.persister.watch import watch_terms
from tests.support.faults import FaultyStore, fail_times
from weaseldb.core import batchfile, claims, history, layout, recovery
from weaseldb.core.batchfile import BatchKind
from weaseldb.core.config import PersisterConfig
from weaseldb.core.errors import Deposed, StoreUnavailable, TransientError
from weaseldb.core.protocol import CommitEntry, CommitState, RingEntry, Write
from weaseldb.core.store import BlobStore
from weaseldb.core.types import NUMBER_TOP, BatchNumber, RequestId, Term, Version
from weaseldb.runtime.stores.memory import MemoryStore

T = TypeVar("T")
FAST = PersisterConfig(retry_base_delay_ms=1, batch_timeout_ms=1, max_in_flight_requests=5)
TOP = NUMBER_TOP
FIRST_DATA = TOP - 1  # a first term fences nothing: its data follow its opening at once


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def lead(store: BlobStore, name: str = "a", config: PersisterConfig = FAST) -> OpenedTerm:
    claimed = await claim(store, leader_id=name, pod_name=name, config=config)
    return await open_term(store, claimed, config)


def accepted(version: int, key: bytes = b"k") -> CommitEntry:
    entry = CommitEntry(
        0, version, RequestId(f"req-{version:016d}"), [], [Write(key, b"v%d" % version)]
    )
    entry.state, entry.version = CommitState.ACCEPTED, Version(version)
    return entry


class Harness:
    def __init__(self, store: BlobStore, term: OpenedTerm, config: PersisterConfig = FAST) -> None:
        self.released: list[Slot] = []
        self.failed: list[tuple[list[RingEntry], BaseException]] = []
        self.engine = Engine(
            store,
            config,
            term,
            on_release=self.released.extend,
            on_fail=lambda written, unwritten, error: self.failed.append(
                (written + unwritten, error)
            ),
        )

    def released_versions(self) -> list[int]:
        return [e.version for s in self.released for e in s.riders if isinstance(e, CommitEntry)]


async def write_versions(store: BlobStore, term: OpenedTerm, versions: list[int]) -> Harness:
    harness = Harness(store, term)
    for v in versions:
        harness.engine.submit([accepted(v)])
        await harness.engine.wait_for_capacity()
    await harness.engine.drain()
    return harness


# Claims and opening


def test_first_leader_opens_at_the_top_and_fences_nothing() -> None:
    store = MemoryStore()
    term = run(lead(store))
    assert (term.term, term.opening_batch, term.last_version) == (TOP, TOP, 0)
    assert term.next_number == FIRST_DATA
    assert [batchfile.decode(b).kind for b in store.objects.values() if b[:1] != b"{"] == [
        BatchKind.OPENING
    ]


def kinds_after(store: MemoryStore, opening: int) -> list[str]:
    """The kinds of the batches from `opening` on, until the first gap."""
    found = []
    number = opening
    while (key := layout.batch_key(BatchNumber(number))) in store.objects:
        found.append(batchfile.decode(store.objects[key]).kind)
        number -= 1
    return found


def test_the_fence_is_as_long_as_any_earlier_leader_could_have_batches_in_flight() -> None:
    """A leader may have max_in_flight_requests batches in flight; the next leader fences
    one fewer numbers after its opening. Each claim carries the largest window so far, so
    a leader with a small window still fences for a larger one before it."""

    async def scenario() -> list[tuple[int, int]]:
        store = MemoryStore()
        fences = []
        for name, window in (("a", 7), ("b", 3), ("c", 5), ("d", 5)):
            config = PersisterConfig(retry_base_delay_ms=1, max_in_flight_requests=window)
            term = await lead(store, name, config)
            kinds = kinds_after(store, term.opening_batch)
            assert kinds[0] == BatchKind.OPENING and set(kinds[1:]) <= {BatchKind.FENCE}
            assert term.next_number == term.opening_batch - len(kinds)
            fences.append((len(kinds) - 1, (await claims.read(store, term.term)).in_flight))
        return fences

    # (fence batches written, the claim's in_flight): a has no one before it; b fences
    # for a's 7; c and d still for a's 7, though b's and their own windows are smaller.
    assert run(scenario()) == [(0, 7), (6, 7), (6, 7), (6, 7)]


def test_a_claim_from_before_in_flight_was_recorded_means_the_longest_fence() -> None:
    async def scenario() -> int:
        store = MemoryStore()
        old = b'{"term": %d, "leader_id": "x", "pod": "p", "started_at_ms": 3}' % TOP
        await store.put_if_absent(layout.term_key(Term(TOP)), old)
        term = await lead(store, "new")
        return term.opening_batch - term.next_number - 1

    assert run(scenario()) == recovery.FENCE_LENGTH == 999


def test_concurrent_candidates_one_wins_the_claim() -> None:
    store = FaultyStore()

    async def both() -> list[Claim | BaseException]:
        return list(
            await asyncio.gather(
                claim(store, leader_id="a", pod_name="a", config=FAST),
                claim(store, leader_id="b", pod_name="b", config=FAST),
                return_exceptions=True,
            )
        )

    results = run(both())
    assert sum(isinstance(r, Claim) for r in results) == 1
    assert sum(isinstance(r, LostClaim) for r in results) == 1


def test_a_candidate_that_decided_on_an_older_claim_loses_instead_of_deposing() -> None:
    """Two pods start together and both see no claim: the one that claims second must
    not take the term after the winner's (that would depose a leader that just began)."""

    async def scenario() -> tuple[Holder, Claim, BaseException | Claim, Holder]:
        store = MemoryStore()
        seen_by_b = await newest_claim_holder(store, FAST)
        a = await claim(store, leader_id="a", pod_name="a", config=FAST)
        try:
            b: BaseException | Claim = await claim(
                store, leader_id="b", pod_name="b", config=FAST, observed=seen_by_b
            )
        except LostClaim as e:
            b = e
        return seen_by_b, a, b, await newest_claim_holder(store, FAST)

    seen_by_b, a, b, newest = run(scenario())
    assert seen_by_b == Holder(None, None, 0)
    assert a.term == TOP
    assert isinstance(b, LostClaim)
    assert newest == Holder(Term(TOP), "a", FAST.max_in_flight_requests)


def test_next_leader_continues_versions_and_numbers_after_recovery() -> None:
    store = MemoryStore()

    async def scenario() -> tuple[OpenedTerm, OpenedTerm, int]:
        first = await lead(store, "a")
        harness = await write_versions(store, first, [1, 2, 3])
        return first, await lead(store, "b"), len(harness.released)

    first, second, data_batches = run(scenario())
    assert second.term == first.term - 1
    assert second.last_version == 3
    assert second.opening_batch == first.next_number - data_batches  # right after the data


def test_opening_skips_numbers_taken_late_by_the_old_term_and_counts_their_versions() -> None:
    """The old leader lands a batch at the number the new leader wanted: it is still valid
    (no newer term before it), so the new term must start after its versions."""
    inner = MemoryStore()

    async def scenario() -> OpenedTerm:
        old = await lead(inner, "old")
        await write_versions(inner, old, [1, 2])
        late = batchfile.Batch(
            format=1,
            batch=BatchNumber(old.next_number - 2),
            term=old.term,
            leader_id="old",
            first_version=Version(3),
            last_version=Version(7),
            created_at_ms=0,
            transactions=[
                batchfile.Transaction(Version(v), RequestId(f"late-{v:016d}"), 0, [])
                for v in range(3, 8)
            ],
        )

        async def land_late_write(op: str, key: str) -> None:
            if (
                op == "put_if_absent"
                and key == layout.batch_key(late.batch)
                and key not in inner.objects
            ):
                await inner.put_if_absent(key, batchfile.encode(late))

        return await lead(FaultyStore(inner, land_late_write), "new")

    new = run(scenario())
    assert new.last_version == 7
    assert batchfile.decode(inner.objects[layout.batch_key(new.opening_batch)]).term == new.term


def test_watermark_in_a_void_run_uses_the_last_valid_version() -> None:
    """Old-term batches after a newer term's batch are void: recovery must not count them."""
    store = MemoryStore()

    async def scenario() -> recovery.Recovered:
        await store.put_if_absent(layout.term_key(Term(TOP)), b"{}")
        await store.put_if_absent(layout.term_key(Term(TOP - 1)), b"{}")
        batches = [(TOP, TOP, 5), (TOP - 1, TOP - 1, 9), (TOP - 2, TOP, 6), (TOP - 3, TOP, 7)]
        for number, term, last in batches:
            b = batchfile.empty_batch(
                number=BatchNumber(number),
                term=Term(term),
                leader_id="x",
                last_version=Version(last),
                now_ms=0,
                kind=BatchKind.DATA,
            )
            await store.put_if_absent(layout.batch_key(BatchNumber(number)), batchfile.encode(b))
        await store.put_if_absent(layout.term_key(Term(TOP - 2)), b"{}")  # a third candidate
        return await recovery.recover(store, prior_term=Term(TOP - 2))

    found = run(scenario())
    assert (found.watermark, found.last_version, found.newest_term) == (TOP - 3, 9, TOP - 1)


# The write engine


def test_batches_are_released_in_order_even_when_they_land_out_of_order() -> None:
    store_inner = MemoryStore()
    gate = asyncio.Event()

    async def hold_first_batch(op: str, key: str) -> None:
        if op == "put_if_absent" and key == layout.batch_key(BatchNumber(FIRST_DATA)):
            await gate.wait()

    async def scenario() -> Harness:
        term = await lead(store_inner)
        harness = Harness(FaultyStore(store_inner, hold_first_batch), term)
        for v in (1, 2, 3):
            harness.engine.submit([accepted(v)])
            await asyncio.sleep(0.01)  # let each batch go out on its own
        assert harness.released == []  # 2 and 3 are durable but wait for 1
        gate.set()
        await harness.engine.drain()
        return harness

    harness = run(scenario())
    assert harness.released_versions() == [1, 2, 3]
    first = FIRST_DATA
    assert [s.number for s in harness.released] == [first, first - 1, first - 2]


def test_transient_failures_are_retried_then_succeed() -> None:
    async def scenario() -> Harness:
        inner = MemoryStore()
        term = await lead(inner)
        harness = Harness(FaultyStore(inner, fail_times(2)), term)
        harness.engine.submit([accepted(1)])
        await harness.engine.drain()
        return harness

    harness = run(scenario())
    assert harness.released_versions() == [1] and harness.failed == []
    assert harness.released[0].attempts == 3


def test_retries_exhausted_fail_every_unreleased_entry() -> None:
    async def scenario() -> Harness:
        inner = MemoryStore()
        term = await lead(inner)
        harness = Harness(FaultyStore(inner, fail_times(100)), term)
        harness.engine.submit([accepted(1), accepted(2)])
        await harness.engine.drain()
        return harness

    harness = run(scenario())
    assert harness.released == []
    ((entries, error),) = harness.failed
    assert isinstance(error, StoreUnavailable)
    assert sorted(e.version for e in entries if isinstance(e, CommitEntry)) == [1, 2]


def test_lost_answer_of_a_landed_put_counts_as_success() -> None:
    async def scenario() -> Harness:
        inner = MemoryStore()
        term = await lead(inner)
        lost = [True]

        async def store_then_fail(op: str, key: str) -> None:
            if op == "put_if_absent" and key == layout.batch_key(term.next_number) and lost[0]:
                lost[0] = False
                raise_after = key
                await inner.put_if_absent(raise_after, _encoded(term, 1))
                from weaseldb.core.errors import TransientError

                raise TransientError("connection reset after the object was stored")

        harness = Harness(FaultyStore(inner, store_then_fail), term)
        harness.engine.submit([accepted(1)])
        await harness.engine.drain()
        return harness

    harness = run(scenario())
    assert harness.failed == [] and harness.released_versions() == [1]


def _encoded(term: OpenedTerm, version: int) -> bytes:
    return batchfile.encode(
        batchfile.Batch(
            format=1,
            batch=term.next_number,
            term=term.term,
            leader_id=term.leader_id,
            first_version=Version(version),
            last_version=Version(version),
            created_at_ms=0,
            transactions=[
                batchfile.Transaction(
                    Version(version), RequestId(f"req-{version:016d}"), 0, [Write(b"k", b"v")]
                )
            ],
        )
    )


def test_a_newer_term_at_our_number_deposes_the_leader() -> None:
    async def scenario() -> tuple[Harness, OpenedTerm]:
        store = MemoryStore()
        old = await lead(store, "old")
        new = await lead(store, "new")  # opens right after the old leader's fence
        harness = Harness(store, old)
        harness.engine.submit([accepted(1)])  # old writes at its next number: inside new's range
        await harness.engine.drain()
        return harness, new

    result = run(scenario())
    harness, _new = result
    ((entries, error),) = harness.failed
    assert isinstance(error, Deposed)
    assert [e.version for e in entries if isinstance(e, CommitEntry)] == [1]
    assert harness.released == []


def test_size_threshold_and_in_flight_limit_bound_the_batches() -> None:
    config = PersisterConfig(
        retry_base_delay_ms=1,
        batch_timeout_ms=50,
        batch_size_threshold=200,
        max_in_flight_requests=2,
    )

    async def scenario() -> Harness:
        store = MemoryStore()
        term = await lead(store, config=config)
        harness = Harness(store, term, config)
        for v in range(1, 41):
            harness.engine.submit([accepted(v, key=b"x" * 50)])
            await harness.engine.wait_for_capacity()
            assert harness.engine.in_flight <= 2
        await harness.engine.drain()
        return harness

    harness = run(scenario())
    assert harness.released_versions() == list(range(1, 41))
    assert 1 < len(harness.released) < 40  # batched, but the threshold closed batches early


def test_newest_claim_names_its_pod() -> None:
    async def scenario() -> tuple[str | None, str | None]:
        store = MemoryStore()
        before = (await newest_claim_holder(store, FAST)).pod
        await claim(store, leader_id="x", pod_name="db-0", config=FAST)
        return before, (await newest_claim_holder(store, FAST)).pod

    assert run(scenario()) == (None, "db-0")


def test_a_stuck_batch_holds_back_numbering_so_recovery_finds_its_gap_in_one_list() -> None:
    """The window rule: batch N never lands; 1,200 newer batches try to open. At most
    max_in_flight_requests - 1 numbers past N may be assigned, so after a crash one LIST of
    1000 keys still reaches N's gap: the next leader opens there, and its own commits are
    readable. (Assigning further would hide the gap beyond the LIST: the next leader would
    open past it, and every reader would stop at the gap, before its acknowledged commits.)"""
    config = PersisterConfig(
        retry_base_delay_ms=1, batch_timeout_ms=1, batch_size_threshold=1
    )  # max_in_flight_requests=50, every commit its own batch
    inner = MemoryStore()

    async def hold_forever(op: str, key: str) -> None:
        if op == "put_if_absent" and key == layout.batch_key(BatchNumber(FIRST_DATA)):
            await asyncio.Event().wait()

    async def old_leader() -> int:
        term = await lead(inner, "old", config)
        harness = Harness(FaultyStore(inner, hold_forever), term, config)
        for v in range(1, 1202):
            harness.engine.submit([accepted(v)])
            await asyncio.sleep(0)
        await asyncio.sleep(0.2)  # let every batch that may open go out
        assert harness.released == []  # nothing passes the stuck batch
        return harness.engine.window_used  # the process then dies with N in flight

    assert run(old_leader()) == config.max_in_flight_requests
    assert layout.batch_key(BatchNumber(FIRST_DATA)) not in inner.objects

    counting = FaultyStore(inner)

    async def new_leader() -> list[int]:
        term = await lead(counting, "new", config)
        assert term.opening_batch == FIRST_DATA  # the gap, not past it
        await write_versions(inner, term, [1, 2, 3])
        return [t.version for t in await history.committed_transactions(inner)]

    assert run(new_leader()) == [1, 2, 3]
    assert counting.calls.count(("list", layout.BATCHES)) == 1


def test_the_term_watch_survives_every_failure_to_look_and_still_deposes() -> None:
    """OSError from the store, a transient error and a stray key under terms/ are each
    logged, counted and retried; a newer claim afterwards still deposes the leader."""
    inner = MemoryStore()
    failures = [OSError("disk gone"), TransientError("503")]

    async def flaky(op: str, key: str) -> None:
        if op == "list" and failures:
            raise failures.pop(0)

    async def scenario() -> tuple[list[int], float]:
        await inner.put_if_absent(layout.term_key(Term(TOP)), b"{}")
        newer: list[int] = []
        errors_before = REGISTRY.get_sample_value("weaseldb_term_watch_errors_total") or 0.0
        watch = asyncio.create_task(
            watch_terms(
                FaultyStore(inner, flaky),
                Term(TOP),
                interval_s=0.001,
                on_newer=newer.append,
                leading=lambda: not newer,
                give_up_after=3,  # the two injected failures do not reach it
                on_unreachable=lambda why: None,
            )
        )
        await asyncio.sleep(0.05)
        await inner.put_if_absent("terms/0-stray", b"")  # listed first: not a term number
        await asyncio.sleep(0.05)
        await inner.delete("terms/0-stray")
        await inner.put_if_absent(layout.term_key(Term(TOP - 1)), b"{}")
        await asyncio.wait_for(watch, 5)
        errors = REGISTRY.get_sample_value("weaseldb_term_watch_errors_total") or 0.0
        return newer, errors - errors_before

    newer, errors = run(scenario())
    assert newer == [TOP - 1]
    assert errors >= 3  # the two injected failures, then the stray key at every round


def test_the_term_watch_gives_up_on_a_store_that_keeps_failing() -> None:
    """A leader that cannot look for a newer claim round after round cannot tell whether
    it was deposed: after `give_up_after` failures in a row it stops leading."""

    async def down(op: str, key: str) -> None:
        if op == "list":
            raise OSError("disk gone")

    async def scenario() -> list[str]:
        gave_up: list[str] = []
        watch = watch_terms(
            FaultyStore(MemoryStore(), down),
            Term(TOP),
            interval_s=0.001,
            on_newer=lambda newest: None,
            leading=lambda: not gave_up,
            give_up_after=4,
            on_unreachable=gave_up.append,
        )
        await asyncio.wait_for(watch, 5)
        return gave_up

    assert run(scenario()) == ["the term watch failed 4 times in a row: OSError('disk gone')"]
