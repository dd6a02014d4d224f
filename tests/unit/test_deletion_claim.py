"""The operator's deletion claim (weaseldb.core.claims) against an in-memory store: it is
the next term, claimed create-only; no persister claims after it, in either start mode
or on promotion; the sweep keeps the claims for last."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from weaseldb_operator.storage import fence, purge, sweep

from services.persister.leadership import claim, newest_claim_holder
from weaseldb.core import claims, layout, recovery
from weaseldb.core.claims import DatabaseDeleted
from weaseldb.core.config import PersisterConfig
from weaseldb.core.types import NUMBER_TOP, BatchNumber, Term
from weaseldb.runtime.stores.memory import MemoryStore

T = TypeVar("T")
FAST = PersisterConfig(retry_base_delay_ms=1)
OPERATOR = "weaseldb-operator-delete-ns-db-uid"


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def _claimed_then_fenced() -> MemoryStore:
    store = MemoryStore()
    await claim(store, leader_id="db-0-a", pod_name="db-0", config=FAST)
    await fence(store, OPERATOR, now_ms=1)
    return store


def test_the_fence_is_the_next_term_and_holds_on_retry() -> None:
    async def scenario() -> None:
        store = await _claimed_then_fenced()
        held = await claims.read(store, Term(NUMBER_TOP - 1))
        assert held.deletion and held.leader_id == OPERATOR
        again = await fence(store, OPERATOR, now_ms=2)  # a retried deletion
        assert again == held
        assert await recovery.newest_claim(store) == NUMBER_TOP - 1

    run(scenario())


def test_the_fence_takes_the_term_after_one_it_lost() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        rival = claims.TermClaim(Term(NUMBER_TOP), "db-0-a", "db-0", 1)
        assert await claims.write(store, rival)
        mine = await fence(store, OPERATOR, now_ms=1)
        assert mine.term == NUMBER_TOP - 1 and mine.deletion

    run(scenario())


@pytest.mark.parametrize("observed", [False, True], ids=["always-or-promoted", "unclaimed-or-own"])
def test_no_persister_claims_after_a_deletion_claim(observed: bool) -> None:
    async def scenario() -> None:
        store = await _claimed_then_fenced()
        with pytest.raises(DatabaseDeleted, match="deletion claim"):
            if observed:
                await newest_claim_holder(store, FAST)
            else:
                await claim(store, leader_id="db-0-b", pod_name="db-0", config=FAST)
        assert await recovery.newest_claim(store) == NUMBER_TOP - 1

    run(scenario())


def test_a_claim_vanishing_under_the_purge_refuses_too() -> None:
    async def scenario() -> None:
        store = await _claimed_then_fenced()
        with pytest.raises(DatabaseDeleted, match="purged"):
            await claims.to_follow(store, Term(NUMBER_TOP - 7))

    run(scenario())


def test_the_sweep_keeps_the_claims_and_the_purge_takes_them_last() -> None:
    async def scenario() -> None:
        store = await _claimed_then_fenced()
        for number in range(1500):  # two listing pages
            await store.put_if_absent(layout.batch_key(BatchNumber(NUMBER_TOP - number)), b"x")
        await store.put_if_absent("zzz-stray", b"x")  # sorts after terms/
        seen: list[int] = []

        async def progress(done: int) -> None:
            seen.append(done)

        assert await sweep(store, progress) == 1501
        assert seen[-1] == 1501
        terms = [layout.term_key(Term(NUMBER_TOP - 1)), layout.term_key(Term(NUMBER_TOP))]
        assert await store.list("") == terms
        assert await purge(store) == 2
        assert await store.list("") == []

    run(scenario())


def test_an_older_claim_body_decodes_without_the_deletion_flag() -> None:
    old = b'{"term": 5, "leader_id": "a", "pod": "p", "started_at_ms": 3}'
    assert claims.TermClaim.decode(old) == claims.TermClaim(Term(5), "a", "p", 3)
    with pytest.raises(ValueError, match="not a term claim"):
        claims.TermClaim.decode(b"[]")
