"""Conflict checking for sequenced commits, with no I/O.

The resolver sees every sequenced commit of the term in version order and accepts a commit
when none of its preconditions was invalidated by an accepted commit with a newer version
than the one the client read at. Accepted commits' writes go into a `WriteHistory`, so later
commits (including later ones in the same ring batch) see them.

Which preconditions can be checked (the window)
-----------------------------------------------
A precondition with version v claims "nothing I depend on changed after v". The resolver can
decide it exactly when every accepted write with a version > v is in its history. The history
holds every accepted write of the current term with version >= `floor`, so:

    a precondition is checkable  iff  v >= floor - 1  (= `oldest_checkable`)

and an uncheckable one fails with reason `too_old`, never passes silently. The floor is

    floor = max(term.first_version, min(time_floor, version_floor))

evaluated once at the start of each ring batch (so it is exact and the same for every entry
of a batch), never moving back, where, with `newest` the highest version resolved before
the batch, and the window sizes `resolver.window_versions` and `resolver.window_seconds` of
the configuration (`ResolverConfig`, which holds their defaults and validation):
- `version_floor = newest - window_versions + 1`: the last `window_versions` versions are
  kept, so a read at most `window_versions` versions behind `newest` is checkable;
- `time_floor` = the lowest version resolved at a clock reading `t` with `now - t <=
  window_seconds` (`newest + 1` when none was), so whatever was resolved within the last
  `window_seconds` seconds is kept. A version's `t` is the clock read at the start of the
  batch that resolved it, and `now` the one read at the start of the current batch.
Taking the min keeps whichever window is larger. At a term start history is empty and the
floor is `first_version`: writes of earlier terms are not in history, so reads at versions
below `first_version - 1` are too_old, and a read at `first_version - 1` is checkable
(every write after it belongs to this term).

A precondition whose version is at or above the commit's own version cannot conflict: no
accepted commit is newer than the one being resolved.

A restarted sequencer (its Hello passes through here) has lost the versions it handed out:
if a copy of the current term's announcement reaches it before the persister's next term
(a gateway worker that restarted with it is answered with the current term), it would
number that term's commits again from `first_version`. So the sequencer's Hello retires the
term here: its commits are NOT_LEADER until a different term starts (the persister opens
one on the same Hello). A version that still goes backwards retires the term the same way,
with an error logged, instead of crashing the stage.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

from services.resolver.conflicts import WriteHistory
from weaseldb.core.config import ResolverConfig
from weaseldb.core.protocol import (
    CommitEntry,
    CommitState,
    Hello,
    PointRead,
    Precondition,
    RingEntry,
    TermStart,
    point_range,
    written_ranges,
)
from weaseldb.core.types import ConflictReason, Stage, Term, Version

log = logging.getLogger("weaseldb.resolver")


class Resolver:
    def __init__(
        self, window: ResolverConfig | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._window = window or ResolverConfig()
        self._clock = clock
        self._history = WriteHistory()
        self._term: Term | None = None
        self._first_version: Version | None = None  # None: no term is active
        self._floor = 0  # history holds every accepted write with version >= floor
        self._newest = Version(0)  # highest version resolved this term
        # (clock reading, first version resolved at or after it), oldest first: maps the
        # time window to versions.
        self._samples: deque[tuple[float, int]] = deque()

    @property
    def leading(self) -> bool:
        return self._first_version is not None

    @property
    def oldest_checkable(self) -> int:
        """Lowest precondition version still checkable (see the module docstring)."""
        return self._floor - 1

    @property
    def newest(self) -> Version:
        """The highest version resolved this term (first_version - 1 before any)."""
        return self._newest

    @property
    def history_size(self) -> int:
        """Boundaries held by the write history (for metrics)."""
        return len(self._history)

    def start_term(self, term: TermStart) -> None:
        """Forget everything: the new term's versions start at `term.first_version`. Every
        gateway worker forwards its own copy of the announcement: only the first counts,
        and a term that ended here is never started again."""
        if term.term == self._term:
            return
        self._term = term.term
        self._history = WriteHistory()
        self._first_version = term.first_version
        self._floor = term.first_version
        self._newest = Version(term.first_version - 1)
        self._samples = deque([(self._clock(), term.first_version)])

    def end_term(self) -> None:
        """Commits arriving from now on until a different term starts become NOT_LEADER (the
        ended term's number is kept, so a late copy of its announcement cannot restart it)."""
        self._first_version = None
        self._history = WriteHistory()  # release the memory now; a new term resets anyway
        self._samples.clear()

    def _retire(self, why: str) -> None:
        if self._first_version is not None:
            log.warning("%s: term %s retired until the next term starts", why, self._term)
            self.end_term()

    def resolve(self, entries: list[RingEntry]) -> None:
        """Fill in every entry of one ring batch, in order."""
        if self._first_version is not None:
            self._advance_window(self._first_version)
        for entry in entries:
            if isinstance(entry, CommitEntry):
                if entry.state == CommitState.SEQUENCED:
                    self._resolve_commit(entry)
            elif isinstance(entry, TermStart):
                self.start_term(entry)
            elif isinstance(entry, Hello) and entry.stage == Stage.SEQUENCER:
                self._retire("the sequencer restarted")

    def _resolve_commit(self, entry: CommitEntry) -> None:
        if self._first_version is None or entry.term != self._term:
            entry.state = CommitState.NOT_LEADER  # no term, or sequenced in another one
            return
        if entry.version <= self._newest:
            log.error("version %d came after %d in one term", entry.version, self._newest)
            self._retire("versions went backwards")
            entry.state = CommitState.NOT_LEADER
            return
        self._newest = entry.version
        failed = self._failed(entry.preconditions)
        if failed:
            entry.state = CommitState.REJECTED
            entry.conflicts = failed
            return
        entry.state = CommitState.ACCEPTED
        record = self._history.record
        for begin, end in written_ranges(entry.operations):
            record(begin, end, entry.version)

    def _failed(self, preconditions: list[Precondition]) -> list[tuple[int, str]]:
        """(index, reason) of every precondition that does not hold, by index."""
        failed: list[tuple[int, str]] = []
        oldest = self._floor - 1
        newest_in = self._history.newest_in
        for index, pre in enumerate(preconditions):
            if pre.version < oldest:
                failed.append((index, ConflictReason.TOO_OLD.value))
                continue
            if isinstance(pre, PointRead):
                begin, end = point_range(pre.key)
            else:
                begin, end = pre.begin, pre.end
            if newest_in(begin, end) > pre.version:
                failed.append((index, ConflictReason.CONFLICT.value))
        return failed

    def _advance_window(self, first_version: int) -> None:
        """Move the floor for this batch and let the history forget what fell out.

        Called once per batch, not per entry: `WriteHistory.forget_before` does work in
        proportion to the writes recorded since its last call, so calling it whenever the
        floor moves keeps memory tracking the window without pauses.
        """
        now = self._clock()
        samples = self._samples
        while samples and now - samples[0][0] > self._window.window_seconds:
            samples.popleft()
        time_floor = samples[0][1] if samples else self._newest + 1
        version_floor = self._newest - self._window.window_versions + 1
        floor = max(first_version, min(time_floor, version_floor))
        if floor > self._floor:
            self._floor = floor
            self._history.forget_before(floor)
        # Versions from newest + 1 on are resolved at `now` or later. When nothing was
        # resolved since the last sample, replace it: its time would make those versions
        # look older than they will be.
        if samples and samples[-1][1] == self._newest + 1:
            samples[-1] = (now, self._newest + 1)
        else:
            samples.append((now, self._newest + 1))
