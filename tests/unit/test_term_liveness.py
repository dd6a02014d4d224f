"""Liveness traps around terms: a claim whose PUT landed but whose answer was lost, and a
gateway worker saying Hello while the persister is replacing the term."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import orjson
import pytest

from services.persister.app import PersisterStage
from services.persister.leadership import Holder, LostClaim, OpenedTerm, claim
from tests.support.cluster import short_run_dir
from weaseldb.core import layout
from weaseldb.core.config import Config, PersisterConfig
from weaseldb.core.errors import TransientError
from weaseldb.core.protocol import Hello, TermStart
from weaseldb.core.types import NUMBER_TOP, BatchNumber, Stage, Term, Version
from weaseldb.runtime.ring import Ring
from weaseldb.runtime.stores.directory import DirectoryStore
from weaseldb.runtime.stores.memory import MemoryStore

CONFIG = PersisterConfig(retry_base_delay_ms=1, max_retry_attempts=3)


class LandsThenTimesOut(DirectoryStore):
    """The first create of a term claim lands, then its answer is lost (a timeout)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.timed_out = 0

    async def put_if_absent(self, key: str, data: bytes) -> None:
        await super().put_if_absent(key, data)
        if key.startswith(layout.TERMS) and not self.timed_out:
            self.timed_out += 1
            raise TransientError("read timeout after the request was sent")


def test_a_claim_that_landed_but_timed_out_is_our_own(tmp_path: Path) -> None:
    store = LandsThenTimesOut(tmp_path)
    won = asyncio.run(claim(store, leader_id="me", pod_name="p", config=CONFIG))
    assert (won.term, won.leader_id, store.timed_out) == (NUMBER_TOP, "me", 1)


def test_a_term_another_candidate_claimed_first_is_still_lost(tmp_path: Path) -> None:
    theirs = {"term": NUMBER_TOP, "leader_id": "them", "pod": "q", "started_at_ms": 0}
    asyncio.run(
        DirectoryStore(tmp_path).put_if_absent(
            layout.term_key(Term(NUMBER_TOP)), orjson.dumps(theirs)
        )
    )
    store = LandsThenTimesOut(tmp_path)
    unclaimed = Holder(None, None)  # what both candidates saw before claiming
    with pytest.raises(LostClaim):
        asyncio.run(claim(store, leader_id="me", pod_name="p", config=CONFIG, observed=unclaimed))


def test_a_gateway_hello_during_a_term_reset_waits_for_the_next_term() -> None:
    """The sequencer's and a gateway worker's Hello arrive together (both restarted): the
    worker must not be told of the term being replaced (it would pass it on to the new
    sequencer, which would number its versions again); it hears the next announcement."""

    async def answered(hellos: list[Hello]) -> list[int]:
        run_dir = short_run_dir()
        ring = Ring()
        stage = PersisterStage(Config(store="memory:", run_dir=str(run_dir)), ring, MemoryStore())
        term = OpenedTerm(
            Term(NUMBER_TOP),
            "L",
            BatchNumber(NUMBER_TOP),
            BatchNumber(NUMBER_TOP - 1000),
            Version(0),
        )
        stage.state.opened(term)
        stage.state.announce(TermStart(term.term, term.leader_id, Version(1), Version(0), ""))
        stage.dispatch.take(list(hellos))
        ring.close()
        shutil.rmtree(run_dir)
        return [queue.pending_bytes for queue in stage.outgoing.queues]

    assert asyncio.run(answered([Hello(Stage.GATEWAY, 0)])) != [0]  # told the current term
    assert asyncio.run(answered([Hello(Stage.SEQUENCER), Hello(Stage.GATEWAY, 0)])) == [0]
