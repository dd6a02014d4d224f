"""weaseldb.core.holdings: the restorable range of a store, from its log, its snapshots and
its log-start marker."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.logs import BatchSpec, build_log, write_log
from weaseldb.core import logstart
from weaseldb.core.holdings import holdings
from weaseldb.core.protocol import Write
from weaseldb.core.types import BatchNumber, Term, Version
from weaseldb.runtime.stores.memory import MemoryStore


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def spec(term: int, transactions: int) -> BatchSpec:
    return BatchSpec(term, [[Write(b"k%d" % i, b"v")] for i in range(transactions)])


def test_an_empty_store_holds_nothing() -> None:
    assert run(holdings(MemoryStore())) is None


def test_a_log_nothing_was_collected_from_restores_from_the_empty_state() -> None:
    store = MemoryStore()
    # Term 0, then term 1, then a void batch of term 0 (a deposed leader's late write).
    batches = build_log([spec(0, 3), spec(1, 2), spec(0, 4)])
    run(write_log(store, batches))
    held = run(holdings(store))
    assert held is not None
    assert (held.oldest_version, held.newest_version) == (0, 5)  # the void batch is not held
    assert held.holds(0) and held.holds(5) and not held.holds(6)
    assert held.oldest_time_ms is None and held.snapshots == ()


def test_after_gc_the_marker_is_the_oldest_restorable_version() -> None:
    store = MemoryStore()
    batches = build_log([spec(0, 3), spec(0, 2), spec(0, 2)])
    run(write_log(store, batches))
    marker = logstart.LogStart(
        BatchNumber(batches[0].batch), Term(batches[0].term), Version(3), committed_at_ms=1234
    )
    run(logstart.write(store, marker))
    held = run(holdings(store))
    assert held is not None
    assert (held.oldest_version, held.oldest_time_ms, held.newest_version) == (3, 1234, 7)
    assert not held.holds(2)
    assert held.describe() == "versions 3..7"


def test_a_backup_whose_log_starts_at_its_marker_holds_what_follows_it() -> None:
    # A backup holds no batch at or before its marker's and may hold fewer than 1000: the
    # recovery scan alone would call its log empty (no first batch, a complete listing).
    store = MemoryStore()
    batches = build_log([spec(0, 3), spec(0, 2), spec(0, 2)])
    run(write_log(store, batches[1:]))
    run(
        logstart.write(
            store, logstart.LogStart(batches[0].batch, Term(batches[0].term), Version(3))
        )
    )
    held = run(holdings(store))
    assert held is not None
    assert (held.oldest_version, held.newest_version) == (3, 7)
