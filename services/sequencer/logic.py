"""Version assignment and the request-id tables, with no I/O.

Versions are gapless within a term and start where the persister's recovery says. Two
request-id tables live here because both must change atomically with version assignment:
- `banned`: ids a status lookup asked about; a commit carrying one never gets a version.
  It grows until the term ends, as the design intends (a new term invalidates old ids).
- `sequenced`: ids that already got a version this term, so a retried commit is answered
  with the original outcome instead of being applied twice. Bounded by `id_memory`, oldest
  first; the bound is the documented limit of idempotent retries (docs/api.md).
"""

from __future__ import annotations

from collections import OrderedDict

from weaseldb.protocol import CommitEntry, CommitState, RingEntry, StatusEntry, TermStart


class Sequencer:
    def __init__(self, id_memory: int = 1_000_000) -> None:
        self._id_memory = id_memory
        self._next_version: int | None = None
        self._term: int | None = None
        self._banned: set[str] = set()
        self._sequenced: OrderedDict[str, int] = OrderedDict()

    @property
    def leading(self) -> bool:
        return self._next_version is not None

    @property
    def last_assigned(self) -> int:
        """The highest version handed out so far (the status upper bound)."""
        return (self._next_version or 1) - 1

    def start_term(self, term: TermStart) -> bool:
        """Begin `term`; False when it is already the current term (every gateway worker
        forwards the announcement, so it arrives once per worker)."""
        if term.term == self._term:
            return False
        self._term = term.term
        self._next_version = term.first_version
        self._banned.clear()
        self._sequenced.clear()
        return True

    def sequence(self, entries: list[RingEntry], now_ms: int) -> list[RingEntry]:
        """Fill in every entry of one ring batch, in order; returns the entries to forward
        (repeated announcements of the current term are dropped here, once)."""
        forward: list[RingEntry] = []
        for entry in entries:
            if isinstance(entry, TermStart) and not self.start_term(entry):
                continue
            forward.append(entry)
            if isinstance(entry, CommitEntry):
                self._sequence_commit(entry, now_ms)
            elif isinstance(entry, StatusEntry):
                self._banned.add(entry.request_id)
                entry.upper_bound = self.last_assigned
        return forward

    def _sequence_commit(self, entry: CommitEntry, now_ms: int) -> None:
        if self._next_version is None:
            entry.state = CommitState.NOT_LEADER
            return
        original = self._sequenced.get(entry.request_id)
        if original is not None:
            entry.state = CommitState.DUPLICATE
            entry.version = original
            return
        if entry.request_id in self._banned:
            entry.state = CommitState.BANNED
            return
        entry.version = self._next_version
        entry.timestamp_ms = now_ms
        entry.state = CommitState.SEQUENCED
        self._next_version += 1
        self._remember(entry.request_id, entry.version)

    def _remember(self, request_id: str, version: int) -> None:
        self._sequenced[request_id] = version
        if len(self._sequenced) > self._id_memory:
            self._sequenced.popitem(last=False)
