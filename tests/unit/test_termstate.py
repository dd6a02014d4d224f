"""The persister's term state (services/persister/termstate.py): which entries belong to
the term the ring carries, and what /readyz says, through a term's life."""

from __future__ import annotations

import asyncio

from services.persister.engine import Engine
from services.persister.leadership import OpenedTerm
from services.persister.termstate import Phase, Signal, TermState
from weaseldb.core.config import PersisterConfig
from weaseldb.core.protocol import TermStart
from weaseldb.core.types import BatchNumber, Term, Version
from weaseldb.runtime.service import Health
from weaseldb.runtime.stores.memory import MemoryStore

TERM = OpenedTerm(
    term=Term(7),
    leader_id="L",
    opening_batch=BatchNumber(100),
    next_number=BatchNumber(90),
    last_version=Version(41),
)
START = TermStart(TERM.term, TERM.leader_id, Version(42), Version(41), "")


def ignore(*_: object) -> None:
    pass


def test_only_an_announced_term_takes_entries_until_a_reset_ends_it() -> None:
    async def life() -> list[tuple[Phase, bool, bool, bool]]:
        state = TermState(Health())
        seen = []

        def note() -> None:
            seen.append(
                (
                    state.phase,
                    state.is_current(TERM.term),
                    state.health.ready,
                    state.raised(Signal.RESET),
                )
            )

        state.opening(TERM.term)
        state.opened(TERM)
        state.serving(
            Engine(MemoryStore(), PersisterConfig(), TERM, on_release=ignore, on_fail=ignore)
        )
        note()
        state.announce(START)
        note()
        state.ring_closed()
        note()
        assert state.carried == START and not state.is_current(TERM.term + 1)
        state.reset()
        note()
        assert state.carried is None
        state.ended()
        note()
        return seen

    assert asyncio.run(life()) == [
        (Phase.ASSEMBLING, False, False, False),
        (Phase.ANNOUNCED, True, False, False),
        (Phase.LEADING, True, True, False),
        (Phase.RESETTING, False, True, True),
        (Phase.CLAIMING, False, True, False),
    ]


def test_a_promotion_is_taken_once_and_a_stop_wins_over_it() -> None:
    async def promotions() -> tuple[bool, bool]:
        state = TermState(Health())
        state.raise_signal(Signal.PROMOTE)
        first = await state.promoted()
        state.raise_signal(Signal.PROMOTE)
        state.raise_signal(Signal.STOP)
        return first, await state.promoted()

    assert asyncio.run(promotions()) == (True, False)
