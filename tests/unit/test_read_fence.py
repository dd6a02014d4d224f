"""The gateway's term probe (services/gateway/readfence.py): coalesced like ReadIndex, and
never answering a request from a LIST that started before the request arrived."""

from __future__ import annotations

import asyncio

import pytest

from services.gateway.readfence import TermProbe
from weaseldb.core import layout
from weaseldb.core.errors import TransientError
from weaseldb.core.types import NUMBER_TOP, Term
from weaseldb.runtime.stores.memory import MemoryStore


class HeldList(MemoryStore):
    """A LIST reads the store at once and answers when the test lets it (a slow store)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.listed = asyncio.Event()
        self.failing = False

    async def list(self, prefix: str, start_after: str = "", limit: int = 1000) -> list[str]:
        keys = await super().list(prefix, start_after, limit)
        self.listed.set()
        await self.release.wait()
        if self.failing:
            raise TransientError("503 Slow Down")
        return keys


async def claim(store: MemoryStore, term: int) -> None:
    await store.put_if_absent(layout.term_key(Term(term)), b"{}")


def test_one_list_serves_every_request_that_arrived_before_it_started() -> None:
    async def scenario() -> tuple[list[int | None], list[int | None], int]:
        store = HeldList()
        await claim(store, NUMBER_TOP)
        probe = TermProbe(store)
        early = [asyncio.create_task(probe.newest_term()) for _ in range(5)]
        await store.listed.wait()  # the first round has looked, before the successor claims
        await claim(store, NUMBER_TOP - 1)
        late = [asyncio.create_task(probe.newest_term()) for _ in range(5)]
        await asyncio.sleep(0)
        store.release.set()
        return await asyncio.gather(*early), await asyncio.gather(*late), probe.rounds

    early, late, rounds = asyncio.run(scenario())
    assert early == [NUMBER_TOP] * 5
    assert late == [NUMBER_TOP - 1] * 5  # asked during the first LIST: served by the next
    assert rounds == 2


def test_a_failed_look_fails_its_waiters_and_the_next_one_looks_again() -> None:
    async def scenario() -> int | None:
        store = HeldList()
        await claim(store, NUMBER_TOP)
        probe = TermProbe(store)
        store.failing = True
        store.release.set()
        waiters = [asyncio.create_task(probe.newest_term()) for _ in range(3)]
        for waiter in waiters:
            with pytest.raises(TransientError):
                await waiter
        store.failing = False
        return await probe.newest_term()

    assert asyncio.run(scenario()) == NUMBER_TOP
