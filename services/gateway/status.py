"""Deciding a status lookup (pure: no framework, no I/O).

The persister answers a `StatusEntry` only after every commit up to the upper bound U is
released, with what its memory knows. `decide` turns that into an answer, or says which
versions must be looked up in the request-id index; `judge` decides from what it holds.

Default `min_version` is 0, i.e. the whole log: the answer is then never a wrong
`not_committed` for an id whose batch was garbage collected; it is `log_truncated` instead.
A client that knows when it first sent the commit passes that version to bound the search.
"""

from __future__ import annotations

from dataclasses import dataclass

from weaseldb.core.protocol import StatusReply
from weaseldb.core.types import Outcome


@dataclass(frozen=True)
class Answer:
    status: Outcome
    version: int | None = None
    source: str = "memory"  # memory | index (for metrics)


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


def judge(committed_at: list[int], low: int, high: int, index_start: int) -> Answer:
    """The answer from the request-id index: `committed_at` are the versions the index
    holds for the id (bans excluded); `index_start` is the first version the index covers
    (1 while nothing was garbage collected)."""
    for version in committed_at:
        if low <= version <= high:
            return Answer(Outcome.COMMITTED, version, source="index")
    if max(low, 1) < index_start:
        return Answer(Outcome.LOG_TRUNCATED, source="index")
    return Answer(Outcome.NOT_COMMITTED, source="index")
