"""The request ids the sequencer remembers (pure: no I/O).

- **Exactly**, in `RequestIdWindow`: every id sequenced or banned within the window, that is
  at least the newest `memory` ids and at least the last `window_ms` of them, whichever
  keeps more (never more than `hard_cap`). A new term loads the previous terms' part of it
  from the request-id index (the persister writes it to a file in the run directory), so
  the window does not end at a restart or a leader change. The sequencer answers a retried
  id with its original version (or as banned) from here.
- **Approximately**, in `FadedIds`: the ids that left the window, in two generations of a
  Bloom filter. An id found there may have been applied, so the sequencer answers it
  `commit_unknown` instead of applying it again; a false positive (one in a million) costs
  that client one status lookup.
"""

from __future__ import annotations

from collections import OrderedDict, deque

from rbloom import Bloom

from weaseldb.requestids import BANNED, Entries, hashes_of

#: A time mark is taken at most this often (ms); ages are known to this precision.
_MARK_EVERY_MS = 100
_SIGNED_128 = 1 << 127


def _bloom_hash(hash_: int) -> int:
    """rbloom wants a signed 128-bit hash; ours is already a uniform unsigned one."""
    return hash_ - _SIGNED_128


class FadedIds:
    """Ids that left the exact window. Two generations of `capacity` ids each: when the
    newer one is full, the older is dropped, so the memory stays fixed."""

    def __init__(self, capacity: int, error_rate: float = 1e-6) -> None:
        self._capacity = capacity
        self._error_rate = error_rate
        self._older = self._new()
        self._newer = self._new()
        self._count = 0

    def _new(self) -> Bloom:
        return Bloom(self._capacity, self._error_rate, hash_func=_bloom_hash)

    def add(self, hash_: int) -> None:
        if self._count >= self._capacity:
            self._older, self._newer, self._count = self._newer, self._new(), 0
        self._newer.add(hash_)
        self._count += 1

    def __contains__(self, hash_: int) -> bool:
        return hash_ in self._newer or hash_ in self._older


class RequestIdWindow:
    """id hash -> the version it was sequenced at (BANNED for an id a status lookup banned),
    oldest first."""

    def __init__(self, memory: int, window_ms: int, hard_cap: int, faded: FadedIds) -> None:
        self._memory = memory
        self._window_ms = window_ms
        self._hard_cap = max(hard_cap, memory)
        self._ids: OrderedDict[int, int] = OrderedDict()
        self._added = 0  # ids ever added; the oldest kept one is number added - len
        self._last_ms = 0  # when the newest id was added
        # (time in ms, number of the first id added at or after it), oldest first
        self._marks: deque[tuple[int, int]] = deque()
        self.faded = faded

    def __len__(self) -> int:
        return len(self._ids)

    def get(self, hash_: int) -> int | None:
        return self._ids.get(hash_)

    def add(self, hash_: int, version: int, now_ms: int) -> None:
        """Remember an id (a ban never replaces a version: the id already has an outcome)."""
        if hash_ in self._ids:
            return
        if not self._marks or now_ms - self._marks[-1][0] >= _MARK_EVERY_MS:
            self._marks.append((now_ms, self._added))
        self._ids[hash_] = version
        self._added += 1
        self._last_ms = max(self._last_ms, now_ms)

    def load(self, entries: Entries) -> None:
        """Add the ids of earlier terms, oldest first (from the window file)."""
        hashes = hashes_of(entries)
        versions: list[int] = entries["version"].tolist()
        stamps: list[int] = entries["ts_ms"].tolist()
        for hash_, version, stamp in zip(hashes, versions, stamps, strict=True):
            self.add(hash_, version, stamp)

    def expire(self, now_ms: int) -> None:
        """Move ids past the window into the faded set."""
        cutoff = now_ms - self._window_ms
        ids = self._ids
        while len(ids) > self._memory and (
            len(ids) > self._hard_cap or self._newest_time_of_oldest() <= cutoff
        ):
            hash_, _ = ids.popitem(last=False)
            self.faded.add(hash_)

    def _newest_time_of_oldest(self) -> int:
        """An upper bound on when the oldest kept id was added: the time of the mark after
        the one it belongs to (every id before a mark was added before its time)."""
        oldest = self._added - len(self._ids)
        marks = self._marks
        while len(marks) > 1 and marks[1][1] <= oldest:
            marks.popleft()
        return marks[1][0] if len(marks) > 1 else self._last_ms


__all__ = ["BANNED", "FadedIds", "RequestIdWindow"]
