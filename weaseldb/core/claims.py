"""Term claims (storage.md, "Terms and fencing"): what a claim object under ``terms/``
holds, which term comes next, and the create-only write every claimant makes.

Two kinds of claimant write the same format: a persister claiming a term to lead it
(services/persister/leadership.py), and the operator claiming one to delete the database
(weaseldb_operator.storage). A deletion claim is final: it deposes the leader like any
newer claim (its term watch stops it), and no term may be claimed after it, so nothing
writes again under a prefix that is being purged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from weaseldb.core import layout
from weaseldb.core.errors import AlreadyExists, NotFound
from weaseldb.core.store import BlobStore
from weaseldb.core.types import MAX_IN_FLIGHT_LIMIT, NUMBER_TOP, Term


class DatabaseDeleted(Exception):
    """The newest claim is a deletion claim (or vanished under a purge): claim nothing."""


@dataclass(frozen=True)
class TermClaim:
    term: Term
    leader_id: str
    pod: str
    started_at_ms: int
    #: Written by the operator before it purges the prefix: the last claim ever.
    deletion: bool = False
    #: The largest `persister.max_in_flight_requests` of this claimant and of every one
    #: before it: no leader of an earlier term can have more batches in flight, so the
    #: next leader's fence need not be longer (services/persister/leadership.py). A
    #: claim written before the field existed counts as the limit.
    in_flight: int = MAX_IN_FLIGHT_LIMIT

    def encode(self) -> bytes:
        document: dict[str, Any] = {
            "term": self.term,
            "leader_id": self.leader_id,
            "pod": self.pod,
            "started_at_ms": self.started_at_ms,
            "in_flight": self.in_flight,
        }
        if self.deletion:  # absent otherwise: claims stay what older readers expect
            document["deletion"] = True
        return orjson.dumps(document)

    @classmethod
    def decode(cls, body: bytes) -> TermClaim:
        """ValueError for a body that is not a claim."""
        try:
            document = orjson.loads(body)
            return cls(
                term=Term(int(document["term"])),
                leader_id=str(document.get("leader_id", "")),
                pod=str(document.get("pod", "")),
                started_at_ms=int(document.get("started_at_ms", 0)),
                deletion=document.get("deletion") is True,
                in_flight=_in_flight(document.get("in_flight")),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a term claim: {type(e).__name__}: {e}") from e


def _in_flight(value: object) -> int:
    """A claim's `in_flight`; anything but a number in 1..limit counts as the limit."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return min(value, MAX_IN_FLIGHT_LIMIT)
    return MAX_IN_FLIGHT_LIMIT


def next_term(prior: Term | None) -> Term:
    """The term after `prior` (the first term when nothing was claimed)."""
    return Term(NUMBER_TOP if prior is None else prior - 1)


async def read(store: BlobStore, term: Term) -> TermClaim:
    """The claim of `term` (`NotFound` when there is none)."""
    return TermClaim.decode(await store.get(layout.term_key(term)))


async def to_follow(store: BlobStore, prior: Term) -> TermClaim:
    """The claim of `prior`, the newest term, which a candidate is about to claim after;
    `DatabaseDeleted` when it is a deletion claim. Claims are deleted only by a purge
    (terms last), so a newest claim that vanished between the LIST and this GET means a
    purge too."""
    try:
        found = await read(store, prior)
    except NotFound:
        raise DatabaseDeleted(f"term claim {prior} vanished: the prefix is being purged") from None
    if found.deletion:
        raise DatabaseDeleted(f"term {prior} is the operator's deletion claim ({found.leader_id})")
    return found


async def exists(store: BlobStore, term: Term) -> bool:
    try:
        await read(store, term)
    except (NotFound, ValueError):
        return False
    return True


async def write(store: BlobStore, claim: TermClaim) -> bool:
    """Create the claim object create-only: True when `claim` holds its term (also when a
    retried PUT finds its own earlier attempt), False when another claimant won it."""
    try:
        await store.put_if_absent(layout.term_key(claim.term), claim.encode())
    except AlreadyExists:
        return (await read(store, claim.term)).leader_id == claim.leader_id
    return True
