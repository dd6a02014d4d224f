"""The leader's lease: the failure detector standbys run without the operator. The format
and the watch are pure; `read`, `is_held` and `hold` are the one place its objects are
read and written (through the store seam).

A leader that runs with standbys (`persister.claim_on_start = "unclaimed_or_own"`)
overwrites `leases/<its term>` every `persister.lease_renew_s` with a renewal counter. A
standby reads the lease of the newest claim on the same rhythm and claims the next term
itself when it has seen no change for `persister.lease_timeout_s` on its own clock: no
clocks are compared between machines, and a lease that was never written counts from the
first time the standby saw its term. The claim is create-only, so when several standbys
time out together one wins; the lease decides only *when* to try. Safety never rests on
it: a leader wrongly taken for dead is fenced by the claim (storage.md, "Terms and
fencing").
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import msgspec

from weaseldb.core import layout
from weaseldb.core.errors import NotFound
from weaseldb.core.store import BlobStore
from weaseldb.core.types import Term

#: The body of `failover-hold` (the reader only asks whether it exists).
HOLD_BODY = b'{"by": "weaseldb-operator", "why": "spec.paused"}'


class Lease(msgspec.Struct, frozen=True):
    """One renewal: which leader, and how many renewals it has written this term."""

    term: int
    leader_id: str
    pod: str
    renewal: int


def encode(lease: Lease) -> bytes:
    return msgspec.json.encode(lease)


def holder(body: bytes | None) -> str:
    """Who renewed this lease (its pod), for a log line; "" when unknown."""
    try:
        return msgspec.json.decode(body, type=Lease).pod if body else ""
    except msgspec.DecodeError:
        return ""


async def read(store: BlobStore, term: Term) -> bytes | None:
    """The lease of `term` as its leader last renewed it; None when it never wrote one (a
    leader without standbys, or one that died before its first renewal)."""
    try:
        return await store.get(layout.lease_key(term))
    except NotFound:
        return None


async def is_held(store: BlobStore) -> bool:
    """Whether the operator holds failover (spec.paused): standbys then claim only when
    promoted, which a paused operator does not do."""
    try:
        await store.get(layout.FAILOVER_HOLD)
    except NotFound:
        return False
    return True


async def hold(store: BlobStore, held: bool) -> None:
    """Put or remove `failover-hold` (the operator, following spec.paused)."""
    if held:
        await store.put(layout.FAILOVER_HOLD, HOLD_BODY)
        return
    with contextlib.suppress(NotFound):  # a store may answer 404 for a missing key
        await store.delete(layout.FAILOVER_HOLD)


@dataclass
class LeaseWatch:
    """A standby's view of the newest term's lease. `observe` each read; it answers
    whether the lease has gone `timeout_s` without changing."""

    timeout_s: float
    _seen: tuple[Term, bytes | None] | None = None
    _since: float = 0.0

    def observe(self, term: Term, lease: bytes | None, now: float) -> bool:
        """`lease` is the object's content (None: not written yet); `now` is this
        process's monotonic clock. A new term, or a renewal, restarts the count."""
        if (term, lease) != self._seen:
            self._seen, self._since = (term, lease), now
            return False
        return now - self._since >= self.timeout_s

    def silent_for(self, now: float) -> float:
        return now - self._since if self._seen is not None else 0.0
