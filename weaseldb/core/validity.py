"""The validity rule (storage.md, "Terms and fencing", 4): the one place it is written.

Walking batches from old to new, a batch is valid when there is no gap before it and its
term is the same as, or newer than, the newest term seen so far (newer = lower number).
Batches of an older term that come after a newer term's batch are void: their
transactions never happened.

Every reader (recovery, status lookups, subscribers, compaction, garbage collection) uses
`ValidityWalk`, started from a `Seed`. A walk that starts in the middle of the log (after
garbage collection deleted the older batches) must be seeded with the newest valid term
at that point, or a void batch left at the front would look valid.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from weaseldb.core.types import NUMBER_TOP, BatchNumber, Term

#: Older than every real term: the state of a walk that has seen nothing yet.
NO_TERM = Term(NUMBER_TOP + 1)


@dataclass(frozen=True)
class Seed:
    """Where a walk starts: right after batch `after_batch` (None: at the first batch of
    the log), with `term` the newest valid term up to and including that batch."""

    after_batch: BatchNumber | None = None
    term: Term = NO_TERM

    @property
    def first_number(self) -> BatchNumber:
        """The number of the first batch the walk reads (numbers count down)."""
        return BatchNumber(NUMBER_TOP if self.after_batch is None else self.after_batch - 1)


#: The start of a log nothing was ever deleted from.
GENESIS = Seed()


class ValidityWalk:
    """Feed it the terms of a gapless run of batches, oldest first; it says which are valid."""

    __slots__ = ("newest_term",)

    def __init__(self, seed: Seed = GENESIS) -> None:
        self.newest_term = seed.term

    def admit(self, term: Term) -> bool:
        """True when a batch of `term` coming next is valid (and remember its term)."""
        if term <= self.newest_term:
            self.newest_term = term
            return True
        return False


def valid_flags(terms_old_to_new: Iterable[Term], seed: Seed = GENESIS) -> list[bool]:
    """The validity rule over a gapless run of batches, oldest first."""
    walk = ValidityWalk(seed)
    return [walk.admit(term) for term in terms_old_to_new]
