"""How each entry is answered when its batch is released, or when it cannot be (pure)."""

from __future__ import annotations

import numpy as np

from weaseldb.core.idring import IdRing
from weaseldb.core.protocol import (
    CommitEntry,
    CommitReply,
    CommitState,
    RingEntry,
    StatusEntry,
    StatusReply,
)
from weaseldb.core.requestids import id_hash
from weaseldb.core.types import Outcome, RequestId, Version

_LOW32 = (1 << 32) - 1


def outcome_key(request_id: RequestId) -> int:
    """The 64 bits of an id's hash its outcome is found by: the high half (the sequencer's
    window keys by the low half, so a retry gets a remembered answer only when both match)."""
    return id_hash(request_id) >> 64


class Answers:
    """Builds replies; remembers recent commit outcomes so a retried request id gets the
    original answer (the sequencer marks such retries DUPLICATE) and a status lookup of a
    recent id is answered without reading the store.

    `memory_floor`: every commit with a version >= it was seen here, so an id not remembered
    did not commit at any version from the floor on. It starts at the first version of this
    process's first term and rises past each outcome forgotten. An outcome is forgotten only
    when more than `memory` are kept and it is older than `window_ms`, or past `hard_cap`,
    and never before the request-id index covers its version (`indexed_through`), so a
    status lookup finds everything below the floor in the index.

    Storage (docs/architecture.md, "Bounded memory"): an `IdRing` in release order, keyed by
    `outcome_key`, with the low 32 bits of the commit's own version (12 bytes per id plus
    the ring's index). Every remembered version is within 2^32 of the newest one (they are
    released in version order and the ring holds millions, not billions), so the full
    version is the newest one less the 32-bit distance. A committed outcome is all that:
    answered at its own version, no conflicts, no reason. A rejected one (not_committed,
    the version committed when it was released, its conflicts) also has an entry in
    `_rejected`, a dict by own version: it costs a few hundred bytes, as its conflicts
    (keys) are of any length."""

    #: Bytes per id in the ring's columns (key, low 32 bits of the version).
    BYTES_PER_ID = 12

    def __init__(self, memory: int, *, window_ms: int = 0, hard_cap: int | None = None) -> None:
        self._memory = memory
        self._window_ms = window_ms
        self._hard_cap = max(hard_cap or memory, memory)
        # outcomes in release (= version) order
        self._outcomes = IdRing(self._hard_cap, version=np.uint32)
        self._newest = Version(0)  # the newest version remembered
        # own version -> (version answered, conflicts) of a remembered rejection
        self._rejected: dict[Version, tuple[Version, tuple[tuple[int, str], ...]]] = {}
        self.memory_floor = Version(0)
        self.indexed_through = 0  # the request-id index covers every version up to this
        self._term_first_version = Version(0)

    def start_term(self, first_version: Version) -> None:
        self._term_first_version = first_version
        self.memory_floor = max(self.memory_floor, first_version)

    def reply(
        self, entry: RingEntry, committed_version: Version, now_ms: int = 0
    ) -> CommitReply | StatusReply | None:
        if isinstance(entry, StatusEntry):
            return self._status(entry, committed_version)
        if not isinstance(entry, CommitEntry):
            return None
        if entry.state is CommitState.DUPLICATE:
            return self._original(entry)
        if entry.state is CommitState.UNKNOWN:
            return self.unknown(entry, "its request id is past the idempotency window")
        reply = self._fresh(entry, committed_version)
        if entry.state in (CommitState.ACCEPTED, CommitState.REJECTED):
            self._remember(entry.request_id, reply, entry.version, now_ms)
        return reply

    def _status(self, entry: StatusEntry, committed_version: Version) -> StatusReply:
        position = self._outcomes.find(outcome_key(entry.request_id))
        outcome, version = Outcome.NOT_REMEMBERED, Version(0)
        if position >= 0:
            version = self._version_at(position)
            outcome = Outcome.COMMITTED
            if version in self._rejected:
                outcome, version = Outcome.NOT_COMMITTED, Version(0)
        return StatusReply(
            entry.ticket,
            entry.request_id,
            entry.upper_bound,
            committed_version,
            outcome,
            version,
            self.memory_floor,
        )

    @staticmethod
    def stale_status(entry: StatusEntry) -> StatusReply:
        """A lookup banned by another term's sequencer (or by none): its ban may be lost."""
        return StatusReply(entry.ticket, entry.request_id, Version(0), Version(0), stale=True)

    @staticmethod
    def not_leader(entry: CommitEntry, why: str = "") -> CommitReply:
        """Nothing of this commit was applied."""
        return CommitReply(
            entry.ticket, Outcome.NOT_LEADER, Version(0), entry.request_id, reason=why
        )

    @staticmethod
    def unknown(entry: CommitEntry, why: str = "") -> CommitReply:
        """This commit may or may not have been applied."""
        return CommitReply(
            entry.ticket, Outcome.COMMIT_UNKNOWN, Version(0), entry.request_id, reason=why
        )

    @classmethod
    def failed(cls, entry: CommitEntry, *, maybe_written: bool, why: str) -> CommitReply:
        """The answer when the leader stops with `entry` unreleased: only an accepted commit
        whose batch was being written (or a retry of an earlier one) may have been applied."""
        if entry.state is CommitState.DUPLICATE or (
            maybe_written and entry.state is CommitState.ACCEPTED
        ):
            return cls.unknown(entry, why)
        return cls.not_leader(entry, why)

    def _fresh(self, entry: CommitEntry, committed: Version) -> CommitReply:
        match entry.state:
            case CommitState.ACCEPTED:
                return CommitReply(entry.ticket, Outcome.COMMITTED, entry.version, entry.request_id)
            case CommitState.REJECTED:
                return CommitReply(
                    entry.ticket,
                    Outcome.NOT_COMMITTED,
                    committed,
                    entry.request_id,
                    entry.conflicts,
                )
            case CommitState.FUTURE_READ:
                return CommitReply(
                    entry.ticket,
                    Outcome.BAD_REQUEST,
                    committed,
                    entry.request_id,
                    reason="a precondition reads at a version newer than any assigned",
                )
            case CommitState.BANNED:
                return CommitReply(
                    entry.ticket,
                    Outcome.NOT_COMMITTED,
                    committed,
                    entry.request_id,
                    reason="request_id_banned",
                )
            case _:
                return self.not_leader(entry, "the set has no term")

    def _original(self, entry: CommitEntry) -> CommitReply:
        position = self._outcomes.find(outcome_key(entry.request_id))
        # The version check: the sequencer found the id at this version, so another version
        # here means two ids share this key (an answer from memory needs both halves).
        if position >= 0 and self._version_at(position) == entry.version:
            rejected = self._rejected.get(entry.version)
            if rejected is None:
                return CommitReply(entry.ticket, Outcome.COMMITTED, entry.version, entry.request_id)
            answered, conflicts = rejected
            return CommitReply(
                entry.ticket,
                Outcome.NOT_COMMITTED,
                answered,
                entry.request_id,
                list(conflicts),
            )
        if entry.version < self._term_first_version:
            # The sequencer knows it from the index of earlier terms, which holds only
            # commits that are in the log.
            return CommitReply(entry.ticket, Outcome.COMMITTED, entry.version, entry.request_id)
        return self.unknown(entry, "its original outcome is no longer remembered")

    def _version_at(self, position: int) -> Version:
        low = self._outcomes.column("version")[position]
        return Version(self._newest - ((self._newest - low) & _LOW32))

    def _remember(
        self, request_id: RequestId, reply: CommitReply, version: Version, now_ms: int
    ) -> None:
        outcomes = self._outcomes
        key = outcome_key(request_id)
        position = outcomes.find(key)
        if position < 0:
            position = outcomes.push(key, now_ms)
        else:  # remembered again: keeps its place, like a dict's key
            self._rejected.pop(self._version_at(position), None)
        outcomes.column("version")[position] = version & _LOW32
        self._newest = max(self._newest, version)
        if reply.status == Outcome.NOT_COMMITTED:
            self._rejected[version] = (reply.version, tuple(reply.conflicts))
        self.forget_old(now_ms)

    def forget_old(self, now_ms: int) -> None:
        outcomes = self._outcomes
        while len(outcomes) > self._memory:
            version = self._version_at(outcomes.oldest)
            young = (
                now_ms - outcomes.oldest_pushed_by() < self._window_ms
                and len(outcomes) <= self._hard_cap
            )
            if young or version > self.indexed_through:
                return
            outcomes.pop()
            self._rejected.pop(version, None)
            self.memory_floor = Version(max(self.memory_floor, version + 1))

    def __len__(self) -> int:
        return len(self._outcomes)
