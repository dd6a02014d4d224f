"""How each entry is answered when its batch is released (pure)."""

from __future__ import annotations

from collections import OrderedDict

from weaseldb.protocol import (
    CommitEntry,
    CommitReply,
    CommitState,
    RingEntry,
    StatusEntry,
    StatusReply,
)
from weaseldb.types import Outcome

NOT_LEADER = "not_leader"


class Answers:
    """Builds replies; remembers recent commit outcomes so a retried request id gets the
    original answer (the sequencer marks such retries DUPLICATE) and a status lookup of a
    recent id is answered without reading the store.

    `memory_floor`: every commit with a version >= it was seen here, so an id not remembered
    did not commit at any version from the floor on. It starts at the term's first version
    (`start_term`) and rises past each outcome forgotten to stay within `memory`."""

    def __init__(self, memory: int) -> None:
        self._memory = memory
        # request id -> (reply, the commit's own version), in release (= version) order
        self._outcomes: OrderedDict[str, tuple[CommitReply, int]] = OrderedDict()
        self.memory_floor = 0

    def start_term(self, first_version: int) -> None:
        self.memory_floor = max(self.memory_floor, first_version)

    def reply(self, entry: RingEntry, committed_version: int) -> CommitReply | StatusReply | None:
        if isinstance(entry, StatusEntry):
            return self._status(entry, committed_version)
        if not isinstance(entry, CommitEntry):
            return None
        if entry.state is CommitState.DUPLICATE:
            return self._original(entry)
        reply = self._fresh(entry, committed_version)
        if entry.state in (CommitState.ACCEPTED, CommitState.REJECTED):
            self._remember(entry.request_id, reply, entry.version)
        return reply

    def _status(self, entry: StatusEntry, committed_version: int) -> StatusReply:
        remembered = self._outcomes.get(entry.request_id)
        outcome, version = "", 0
        if remembered is not None:
            outcome = remembered[0].status
            version = remembered[0].version if outcome == Outcome.COMMITTED else 0
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
    def not_leader(entry: CommitEntry) -> CommitReply:
        return CommitReply(entry.ticket, NOT_LEADER, 0, entry.request_id)

    def _fresh(self, entry: CommitEntry, committed: int) -> CommitReply:
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
            case CommitState.BANNED:
                return CommitReply(
                    entry.ticket,
                    Outcome.NOT_COMMITTED,
                    committed,
                    entry.request_id,
                    reason="request_id_banned",
                )
            case _:
                return self.not_leader(entry)

    def _original(self, entry: CommitEntry) -> CommitReply:
        remembered = self._outcomes.get(entry.request_id)
        if remembered is None:  # forgotten: the outcome is unknown here, say so
            return self.not_leader(entry)
        original = remembered[0]
        return CommitReply(
            entry.ticket,
            original.status,
            original.version,
            entry.request_id,
            original.conflicts,
            original.reason,
        )

    def _remember(self, request_id: str, reply: CommitReply, version: int) -> None:
        self._outcomes[request_id] = (reply, version)
        if len(self._outcomes) > self._memory:
            _, (_, forgotten) = self._outcomes.popitem(last=False)
            self.memory_floor = max(self.memory_floor, forgotten + 1)
