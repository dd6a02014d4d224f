"""Claiming a term and opening it (storage.md, "Terms and fencing").

1. `claim`: LIST one key of `terms/` for the newest term T, create `terms/{T-1}`
   create-only. Losing that race makes this process a standby (`LostClaim`). No term
   follows the operator's deletion claim (`weaseldb.core.claims.DatabaseDeleted`).
2. `open_term`: after recovery, write the empty opening batch at the first gap. A number
   already taken by an older term is skipped; that batch is still valid and raises the
   starting version. A newer term there means this leader was deposed before it began.
3. Then fill the numbers after the opening with empty fence batches, one fewer than the
   most batches any earlier leader could have in flight (the prior claim's `in_flight`,
   carried from claim to claim). A deposed leader's oldest batch not yet durable is at or
   before our opening, and the window rule keeps its newest within that many numbers of
   it, so it can only still be writing inside the fence: data batches never collide with
   its late writes and never need renumbering (which would break version order). A first
   term has no one to fence.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from weaseldb.core import batchfile, claims, layout, recovery
from weaseldb.core.batchfile import BatchKind
from weaseldb.core.clock import now_ms
from weaseldb.core.config import PersisterConfig
from weaseldb.core.errors import AlreadyExists, Deposed, NotLeader
from weaseldb.core.store import BlobStore
from weaseldb.core.types import BatchNumber, Term, Version
from weaseldb.runtime.retries import with_retries

#: Fence batches written at once when a term opens.
FENCE_PARALLELISM = 64


class LostClaim(NotLeader):
    """Another candidate claimed the term first: this process set is a standby."""


@dataclass(frozen=True)
class Claim:
    term: Term
    prior_term: Term | None
    leader_id: str
    fence: int = recovery.FENCE_LENGTH  # fence batches the opening writes after itself


@dataclass(frozen=True)
class OpenedTerm:
    term: Term
    leader_id: str
    opening_batch: BatchNumber
    next_number: BatchNumber  # where the first data batch goes
    last_version: Version  # versions of this term start right after it


@dataclass(frozen=True)
class Holder:
    """The newest term claim as one candidate saw it (both None: nothing claimed yet)."""

    term: Term | None
    pod: str | None
    #: The claim's `in_flight` (0: nothing claimed, no one to fence; None: not read yet).
    in_flight: int | None = None


async def newest_claim_holder(store: BlobStore, config: PersisterConfig) -> Holder:
    """The newest term claim and the pod it names; `DatabaseDeleted` when it is the
    operator's deletion claim (or vanished under its purge)."""
    newest = await with_retries(lambda: recovery.newest_claim(store), config, "list terms")
    if newest is None:
        return Holder(None, None, 0)
    found = await _to_follow(store, newest, config)
    return Holder(newest, found.pod, found.in_flight)


async def _to_follow(store: BlobStore, prior: Term, config: PersisterConfig) -> claims.TermClaim:
    return await with_retries(lambda: claims.to_follow(store, prior), config, "read the claim")


async def claim(
    store: BlobStore,
    *,
    leader_id: str,
    pod_name: str,
    config: PersisterConfig,
    observed: Holder | None = None,
) -> Claim:
    """Claim the term after the newest one. With `observed` (the claim a candidate decided
    on), the term after that one: if anyone claimed since, that term is taken and this
    candidate loses instead of deposing a leader that started a moment earlier."""
    # The prior claim (one GET; claims are rare): no term after the operator's deletion
    # claim, and how many batches its leader and those before could have in flight.
    holder = observed or await newest_claim_holder(store, config)
    if holder.in_flight is None and holder.term is not None:
        holder = Holder(
            holder.term, holder.pod, (await _to_follow(store, holder.term, config)).in_flight
        )
    prior_in_flight = holder.in_flight or 0
    term = claims.next_term(holder.term)
    in_flight = max(config.max_in_flight_requests, prior_in_flight)
    mine = claims.TermClaim(term, leader_id, pod_name, now_ms(), in_flight=in_flight)
    # A retried PUT whose first attempt landed (its answer lost) finds our own claim.
    if not await with_retries(lambda: claims.write(store, mine), config, "claim term"):
        raise LostClaim(f"term {term} was claimed by another candidate")
    return Claim(term, holder.term, leader_id, fence=max(prior_in_flight - 1, 0))


async def open_term(
    store: BlobStore, claimed: Claim, config: PersisterConfig, *, fence: bool = True
) -> OpenedTerm:
    """Recover, write the opening batch and (unless `fence` is off) the fence run. The
    fence guards against the previous term's leader still writing; a process renewing its
    own term after draining it has nothing left in flight, so it may skip the fence."""
    found = await with_retries(
        lambda: recovery.recover(store, prior_term=claimed.prior_term), config, "recover"
    )
    number, last_version, newest = found.next_number, found.last_version, found.newest_term
    while True:
        opening = batchfile.empty_batch(
            number=number,
            term=claimed.term,
            leader_id=claimed.leader_id,
            last_version=last_version,
            now_ms=now_ms(),
            kind=BatchKind.OPENING,
        )
        taken = await _put_or_read(store, opening, config)
        if taken is None or taken.term == claimed.term:
            break
        if layout.is_newer_term(taken.term, claimed.term):
            raise Deposed(f"term {taken.term} wrote batch {number} before our opening")
        if newest is None or not layout.is_newer_term(newest, taken.term):
            last_version, newest = max(last_version, taken.last_version), taken.term
        number = BatchNumber(number - 1)
    fenced = claimed.fence if fence else 0
    if fenced:
        await _fence(store, claimed, opening, fenced, config)
    first_data = BatchNumber(number - fenced - 1)
    return OpenedTerm(claimed.term, claimed.leader_id, number, first_data, last_version)


async def _put_or_read(
    store: BlobStore, batch: batchfile.Batch, config: PersisterConfig
) -> batchfile.Batch | None:
    """Create the batch; None when it landed, else the batch already at that number."""
    key = layout.batch_key(batch.batch)
    try:
        await with_retries(lambda: store.put_if_absent(key, batchfile.encode(batch)), config, key)
        return None
    except AlreadyExists:
        return await with_retries(lambda: recovery.read_batch(store, batch.batch), config, key)


async def _fence(
    store: BlobStore,
    claimed: Claim,
    opening: batchfile.Batch,
    length: int,
    config: PersisterConfig,
) -> None:
    # Fence batches are not data: the window rule does not apply, only how many requests
    # the store takes at once.
    limit = asyncio.Semaphore(max(config.max_in_flight_requests, FENCE_PARALLELISM))

    async def fence_one(number: BatchNumber) -> None:
        fence = batchfile.empty_batch(
            number=number,
            term=claimed.term,
            leader_id=claimed.leader_id,
            last_version=opening.last_version,
            now_ms=opening.created_at_ms,
            kind=BatchKind.FENCE,
        )
        async with limit:
            taken = await _put_or_read(store, fence, config)
        if taken is not None and layout.is_newer_term(taken.term, claimed.term):
            raise Deposed(f"term {taken.term} wrote batch {number} inside our fence")

    numbers = range(opening.batch - 1, opening.batch - length - 1, -1)
    await asyncio.gather(*(fence_one(BatchNumber(n)) for n in numbers))
