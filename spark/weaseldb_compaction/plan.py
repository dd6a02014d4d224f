"""What a compaction run folds (pure: no Spark, no I/O).

The driver decodes nothing itself: the executors fetch every batch after the previous
snapshot and send back one header per batch. Here the shared validity rule
(weaseldb.core.validity), seeded from the previous snapshot, says which of them are void, and
the target is the newest valid batch at or before the requested one (never past the
durability watermark: the driver only fetched the gapless run after the snapshot).

Batch and term numbers count down from 2**64-1 and do not fit Spark's LongType, so inside
Spark a batch is its ordinal `seq = NUMBER_TOP - number` (0 for the first batch ever).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from weaseldb.core.types import NUMBER_TOP, BatchNumber, Term, Version
from weaseldb.core.validity import Seed, valid_flags


def seq_of(number: int) -> int:
    return NUMBER_TOP - number


def number_of(seq: int) -> int:
    return NUMBER_TOP - seq


@dataclass(frozen=True)
class Header:
    number: BatchNumber
    term: Term
    first_version: Version
    last_version: Version
    operations: int
    size: int  # encoded bytes


@dataclass(frozen=True)
class Target:
    batch: BatchNumber  # the newest batch folded in
    term: Term  # the newest valid term up to and including `batch`
    version: Version  # the snapshot's version: `batch`'s last version
    oldest: BatchNumber  # the oldest batch read (numbers count down: oldest >= batch)
    count: int  # batches read, void ones included, up to `batch`
    void_seqs: list[int]  # ordinals of the void batches up to `batch`
    operations: int  # operations of the valid batches up to `batch`
    size: int  # encoded bytes of the valid batches up to `batch`

    @property
    def last_seq(self) -> int:
        return seq_of(self.batch)


def choose_target(
    headers_old_to_new: list[Header], seed: Seed, *, upto_batch: int | None = None
) -> Target | None:
    """The newest valid batch at or before `upto_batch` (None: the newest read), or None
    when no valid batch follows the seed."""
    headers = [h for h in headers_old_to_new if upto_batch is None or h.number >= upto_batch]
    flags = valid_flags([h.term for h in headers], seed)
    valid = [h for h, ok in zip(headers, flags, strict=True) if ok]
    if not valid:
        return None
    last = valid[-1]
    upto = [(h, ok) for h, ok in zip(headers, flags, strict=True) if h.number >= last.number]
    return Target(
        batch=last.number,
        term=last.term,
        version=last.last_version,
        oldest=headers[0].number,
        count=len(upto),
        void_seqs=[seq_of(h.number) for h, ok in upto if not ok],
        operations=sum(h.operations for h, ok in upto if ok),
        size=sum(h.size for h, ok in upto if ok),
    )


def partition_bounds(samples: Iterable[tuple[bytes, int]], partitions: int) -> list[bytes]:
    """Keys that cut the sampled keys, each weighted by the operations it stands for, into
    up to `partitions` ranges of about equal weight: partition i holds the keys k with
    bounds[i-1] <= k < bounds[i]. Increasing; fewer when the sample has few distinct keys."""
    ordered = sorted(samples)
    total = sum(weight for _, weight in ordered)
    bounds: list[bytes] = []
    seen = 0
    for key, weight in ordered:
        seen += weight
        # Cut before this key once the middle of its weight passes the next share.
        cut_due = (2 * seen - weight) * partitions >= 2 * (len(bounds) + 1) * total
        above = key > (bounds[-1] if bounds else ordered[0][0])  # no empty range
        if cut_due and len(bounds) < partitions - 1 and above:
            bounds.append(key)
    return bounds
