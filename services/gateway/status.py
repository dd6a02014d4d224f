"""Deciding a status lookup (pure: no framework, no I/O).

The persister answers a `StatusEntry` only after every commit up to the upper bound U is
released, with what its memory knows. `decide` turns that into an answer, or says which
versions must be read from the store; `search` looks through batches read from there.

Default `min_version` is 0, i.e. the whole log: the answer is then never a wrong
`not_committed` for an id whose batch was garbage collected; it is `log_truncated` instead.
A client that knows when it first sent the commit passes that version to bound the search.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from weaseldb.protocol import StatusReply
from weaseldb.types import Outcome


@dataclass(frozen=True)
class Answer:
    status: Outcome
    version: int | None = None
    source: str = "memory"  # memory | store (for metrics)


@dataclass(frozen=True)
class ReadStore:
    """The id is not in memory: search committed versions [low, high] in the store."""

    low: int
    high: int


def decide(reply: StatusReply, min_version: int) -> Answer | ReadStore:
    if reply.outcome == Outcome.COMMITTED:
        return Answer(Outcome.COMMITTED, reply.version)
    if reply.outcome:
        return Answer(Outcome.NOT_COMMITTED)
    high = min(reply.upper_bound, reply.memory_floor - 1)
    if min_version > high:  # memory covers the whole range [min_version, U]
        return Answer(Outcome.NOT_COMMITTED)
    return ReadStore(min_version, high)


@dataclass(frozen=True)
class StoredTx:
    version: int
    request_id: str


def search(
    request_id: str, low: int, high: int, oldest_retained: int, transactions: Iterable[StoredTx]
) -> Answer:
    """`transactions`: the valid log's transactions in version order (any superset of
    [low, high]); `oldest_retained`: the first version the store still holds (1 when
    nothing was garbage collected)."""
    for tx in transactions:
        if tx.version > high:
            break
        if tx.version >= low and tx.request_id == request_id:
            return Answer(Outcome.COMMITTED, tx.version, source="store")
    if max(low, 1) < oldest_retained:
        return Answer(Outcome.LOG_TRUNCATED, source="store")
    return Answer(Outcome.NOT_COMMITTED, source="store")
