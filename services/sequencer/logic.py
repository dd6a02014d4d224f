"""Version assignment and request-id bookkeeping, with no I/O.

Versions are gapless within a term and start where the persister's recovery says. The
request-id rules live here because each must be decided atomically with version assignment:
- a commit whose id is in the window (`services/sequencer/window.py`) already has an
  outcome: it is marked DUPLICATE with the original version (or BANNED), never sequenced
  twice; this holds across restarts and leader changes, because a new term loads the
  window of earlier terms from the request-id index;
- a commit whose id left the window (faded) may have been applied: UNKNOWN, answered
  commit_unknown;
- a status lookup bans its id: a commit with it that was not sequenced yet never will be;
- a precondition at a version not assigned yet is refused (FUTURE_READ): only the sequencer
  knows the newest version assigned, which a `durable=false` reader may already have seen.
Every sequenced entry is stamped with the term, so a later term's stages can drop it.
"""

from __future__ import annotations

from collections.abc import Callable

from services.sequencer.window import COLLIDED, FadedIds, RequestIdWindow
from weaseldb.core.protocol import CommitEntry, CommitState, RingEntry, StatusEntry, TermStart
from weaseldb.core.requestids import BANNED, Entries, id_hash
from weaseldb.core.types import Term, Version

#: Reads the window of earlier terms that a TermStart names (a file in the run directory).
WindowLoader = Callable[[str], Entries]


class Sequencer:
    def __init__(
        self,
        id_memory: int = 1_000_000,
        *,
        window_ms: int = 600_000,
        id_hard_cap: int = 5_000_000,
        load_window: WindowLoader | None = None,
    ) -> None:
        self._faded = FadedIds(max(id_memory, 1024))
        self._window_size = (id_memory, window_ms, id_hard_cap)
        self._window = self._new_window()
        self._load_window = load_window
        self._next_version: Version | None = None
        self._term: Term | None = None

    def _new_window(self) -> RequestIdWindow:
        memory, window_ms, hard_cap = self._window_size
        return RequestIdWindow(memory, window_ms, hard_cap, self._faded)

    @property
    def leading(self) -> bool:
        return self._next_version is not None

    @property
    def term(self) -> Term | None:
        return self._term

    @property
    def last_assigned(self) -> Version:
        """The highest version handed out so far (the status upper bound)."""
        return Version((self._next_version or 1) - 1)

    @property
    def remembered(self) -> int:
        return len(self._window)

    def start_term(self, term: TermStart) -> bool:
        """Begin `term`; False when it is already the current term (every gateway worker
        forwards its own copy of the announcement)."""
        if term.term == self._term:
            return False
        self._term = term.term
        self._next_version = term.first_version
        # The persister's window is what the store says happened: ids this process
        # sequenced in a term that ended without making them durable did not commit.
        self._window = self._new_window()
        if term.window_file and self._load_window is not None:
            self._window.load(self._load_window(term.window_file))
        return True

    def sequence(self, entries: list[RingEntry], now_ms: int) -> list[RingEntry]:
        """Fill in every entry of one ring batch, in order; everything is forwarded."""
        for entry in entries:
            if isinstance(entry, CommitEntry):
                self._sequence_commit(entry, now_ms)
            elif isinstance(entry, StatusEntry):
                self._ban(entry, now_ms)
            elif isinstance(entry, TermStart):
                self.start_term(entry)
        self._window.expire(now_ms)
        return entries

    def _sequence_commit(self, entry: CommitEntry, now_ms: int) -> None:
        if self._next_version is None or self._term is None:
            entry.state = CommitState.NOT_LEADER
            return
        entry.term = self._term
        hash_ = id_hash(entry.request_id)
        original = self._window.get(hash_)
        if original == BANNED:
            entry.state = CommitState.BANNED
        elif original == COLLIDED or (original is None and hash_ in self._window.faded):
            entry.state = CommitState.UNKNOWN  # may have an outcome: never applied twice
        elif original is not None:
            entry.state = CommitState.DUPLICATE
            entry.version = Version(original)
        elif any(p.version >= self._next_version for p in entry.preconditions):
            entry.state = CommitState.FUTURE_READ  # nobody can have read there
        else:
            entry.version = self._next_version
            entry.timestamp_ms = now_ms
            entry.state = CommitState.SEQUENCED
            self._next_version = Version(self._next_version + 1)
            self._window.add(hash_, entry.version, now_ms)

    def _ban(self, entry: StatusEntry, now_ms: int) -> None:
        if self._term is None:
            return  # not leading: the persister answers it stale
        entry.term = self._term
        entry.upper_bound = self.last_assigned
        self._window.add(id_hash(entry.request_id), BANNED, now_ms)
