"""How each entry is answered when its batch is released, or when it cannot be (pure)."""

from __future__ import annotations

from collections import OrderedDict

from weaseldb.protocol import (
    CommitEntry,
    CommitReply,
    CommitState,
    ReplyStatus,
    RingEntry,
    StatusEntry,
    StatusReply,
)

#: (status, version answered, conflicts, reason, the commit's own version, when): tuples of
#: plain str and int only, which the garbage collector stops tracking after one look. Up to a
#: million are kept; as CommitReply objects (each with its own conflicts list) they made
#: the persister's gen-1 collections take 160 ms and its gen-2 ones 0.5 s under load,
#: the latency tail of P2 (docs/architecture.md, "Bounded memory").
Remembered = tuple[str, int, tuple[tuple[int, str], ...], str, int, int]


class Answers:
    """Builds replies; remembers recent commit outcomes so a retried request id gets the
    original answer (the sequencer marks such retries DUPLICATE) and a status lookup of a
    recent id is answered without reading the store.

    `memory_floor`: every commit with a version >= it was seen here, so an id not remembered
    did not commit at any version from the floor on. It starts at the first version of this
    process's first term and rises past each outcome forgotten. An outcome is forgotten only
    when more than `memory` are kept and it is older than `window_ms`, or past `hard_cap`,
    and never before the request-id index covers its version (`indexed_through`), so a
    status lookup finds everything below the floor in the index."""

    def __init__(self, memory: int, *, window_ms: int = 0, hard_cap: int | None = None) -> None:
        self._memory = memory
        self._window_ms = window_ms
        self._hard_cap = max(hard_cap or memory, memory)
        # request id -> its outcome, in release (= version) order
        self._outcomes: OrderedDict[str, Remembered] = OrderedDict()
        self.memory_floor = 0
        self.indexed_through = 0  # the request-id index covers every version up to this
        self._term_first_version = 0

    def start_term(self, first_version: int) -> None:
        self._term_first_version = first_version
        self.memory_floor = max(self.memory_floor, first_version)

    def reply(
        self, entry: RingEntry, committed_version: int, now_ms: int = 0
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

    def _status(self, entry: StatusEntry, committed_version: int) -> StatusReply:
        remembered = self._outcomes.get(entry.request_id)
        outcome, version = "", 0
        if remembered is not None:
            outcome = remembered[0]
            version = remembered[1] if outcome == ReplyStatus.COMMITTED else 0
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
        return StatusReply(entry.ticket, entry.request_id, 0, 0, stale=True)

    @staticmethod
    def not_leader(entry: CommitEntry, why: str = "") -> CommitReply:
        """Nothing of this commit was applied."""
        return CommitReply(entry.ticket, ReplyStatus.NOT_LEADER, 0, entry.request_id, reason=why)

    @staticmethod
    def unknown(entry: CommitEntry, why: str = "") -> CommitReply:
        """This commit may or may not have been applied."""
        return CommitReply(
            entry.ticket, ReplyStatus.COMMIT_UNKNOWN, 0, entry.request_id, reason=why
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

    def _fresh(self, entry: CommitEntry, committed: int) -> CommitReply:
        match entry.state:
            case CommitState.ACCEPTED:
                return CommitReply(
                    entry.ticket, ReplyStatus.COMMITTED, entry.version, entry.request_id
                )
            case CommitState.REJECTED:
                return CommitReply(
                    entry.ticket,
                    ReplyStatus.NOT_COMMITTED,
                    committed,
                    entry.request_id,
                    entry.conflicts,
                )
            case CommitState.FUTURE_READ:
                return CommitReply(
                    entry.ticket,
                    ReplyStatus.BAD_REQUEST,
                    committed,
                    entry.request_id,
                    reason="a precondition reads at a version newer than any assigned",
                )
            case CommitState.BANNED:
                return CommitReply(
                    entry.ticket,
                    ReplyStatus.NOT_COMMITTED,
                    committed,
                    entry.request_id,
                    reason="request_id_banned",
                )
            case _:
                return self.not_leader(entry, "the set has no term")

    def _original(self, entry: CommitEntry) -> CommitReply:
        remembered = self._outcomes.get(entry.request_id)
        if remembered is not None:
            status, version, conflicts, reason, _, _ = remembered
            return CommitReply(
                entry.ticket, status, version, entry.request_id, list(conflicts), reason
            )
        if entry.version < self._term_first_version:
            # The sequencer knows it from the index of earlier terms, which holds only
            # commits that are in the log.
            return CommitReply(entry.ticket, ReplyStatus.COMMITTED, entry.version, entry.request_id)
        return self.unknown(entry, "its original outcome is no longer remembered")

    def _remember(self, request_id: str, reply: CommitReply, version: int, now_ms: int) -> None:
        conflicts = tuple(reply.conflicts)
        self._outcomes[request_id] = (
            str(reply.status),  # the plain string: an enum member is a tracked object
            reply.version,
            conflicts,
            reply.reason,
            version,
            now_ms,
        )
        self.forget_old(now_ms)

    def forget_old(self, now_ms: int) -> None:
        outcomes = self._outcomes
        while len(outcomes) > self._memory:
            _, (_, _, _, _, version, when) = next(iter(outcomes.items()))
            young = now_ms - when < self._window_ms and len(outcomes) <= self._hard_cap
            if young or version > self.indexed_through:
                return
            outcomes.popitem(last=False)
            self.memory_floor = max(self.memory_floor, version + 1)

    def __len__(self) -> int:
        return len(self._outcomes)
