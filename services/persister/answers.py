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
    original answer (the sequencer marks such retries DUPLICATE)."""

    def __init__(self, memory: int) -> None:
        self._memory = memory
        self._outcomes: OrderedDict[str, CommitReply] = OrderedDict()

    def reply(self, entry: RingEntry, committed_version: int) -> CommitReply | StatusReply | None:
        if isinstance(entry, StatusEntry):
            return StatusReply(entry.ticket, entry.request_id, entry.upper_bound, committed_version)
        if not isinstance(entry, CommitEntry):
            return None
        if entry.state is CommitState.DUPLICATE:
            return self._original(entry)
        reply = self._fresh(entry, committed_version)
        if entry.state in (CommitState.ACCEPTED, CommitState.REJECTED):
            self._remember(entry.request_id, reply)
        return reply

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
        original = self._outcomes.get(entry.request_id)
        if original is None:  # forgotten: the outcome is unknown here, say so
            return self.not_leader(entry)
        return CommitReply(
            entry.ticket,
            original.status,
            original.version,
            entry.request_id,
            original.conflicts,
            original.reason,
        )

    def _remember(self, request_id: str, reply: CommitReply) -> None:
        self._outcomes[request_id] = reply
        if len(self._outcomes) > self._memory:
            self._outcomes.popitem(last=False)
