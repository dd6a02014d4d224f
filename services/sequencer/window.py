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

import numpy as np
import numpy.typing as npt
from rbloom import Bloom

from weaseldb.core.idring import IdRing
from weaseldb.core.requestids import BANNED, Entries, hashes_of

_LOW64 = (1 << 64) - 1
_LOW31 = (1 << 31) - 1
_MASK128 = (1 << 128) - 1
_SIGNED_128 = 1 << 127
#: An odd 128-bit multiplier: spreads a 64-bit key over both halves of the Bloom hash.
_SPREAD = 0x9E3779B97F4A7C15F39CC0605CEDC835
#: Window-file entries turned into Python ints at a time.
_LOAD_CHUNK = 65_536


#: What `get` answers for an id whose low 64 bits match a remembered id's but whose high
#: ones do not: a different id, that may or may not have an outcome of its own.
COLLIDED = -1


def window_key(hash_: int) -> int:
    """The 64 bits of an id hash the window keys by (the low half; the persister keys its
    outcomes by the high half, so a retry is answered from memory only when both match)."""
    return hash_ & _LOW64


def _bloom_hash(key: int) -> int:
    """rbloom wants a signed 128-bit hash; from the window's 64-bit key, mixed so both of
    the halves it derives bit positions from vary."""
    return ((key * _SPREAD) & _MASK128) - _SIGNED_128


def _ordered(stamps: npt.NDArray[np.uint64]) -> bool:
    return bool(np.all(stamps[1:] >= stamps[:-1]))


def _distinct(keys: npt.NDArray[np.uint64]) -> bool:
    by_key = np.sort(keys)  # (np.unique hashes uint64 keys: 13 s for 6M here)
    return not np.any(by_key[1:] == by_key[:-1])


class FadedIds:
    """Ids that left the exact window (by their 64-bit window key). Two generations of
    `capacity` ids each: when the newer one is full, the older is dropped, so the memory
    stays fixed."""

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
        self._newer.add(hash_ & _LOW64)  # window_key
        self._count += 1

    def __contains__(self, hash_: int) -> bool:
        key = hash_ & _LOW64  # window_key
        return key in self._newer or key in self._older


class RequestIdWindow:
    """id hash -> the version it was sequenced at (BANNED for an id a status lookup banned),
    oldest first, in an `IdRing`: 20 bytes per id plus its index. The key is the low 64
    bits of the hash and the high 64 bits are kept beside it (`check`), so an id is found
    only by its whole 128-bit hash: a new id that shares the low half with a remembered one
    is `COLLIDED` (the sequencer answers it commit_unknown, never another id's outcome;
    about 5M / 2^64 per commit at the cap). The version is 32 bits: 0 for BANNED, else the
    low 31 bits of the version shifted left with the low bit set. The full version is the
    newest one added less the 31-bit distance: every version in the window is within 2^31
    of the newest, as each was assigned to an id added since (a new term starts a new
    window) and the window holds millions of ids, not billions."""

    #: Bytes per id in the ring's columns (key, check, version).
    BYTES_PER_ID = 20

    def __init__(self, memory: int, window_ms: int, hard_cap: int, faded: FadedIds) -> None:
        self._memory = memory
        self._window_ms = window_ms
        self._hard_cap = max(hard_cap, memory)
        # One more than the cap: a new id is pushed before the oldest leaves (see `add`).
        self._ids = IdRing(self._hard_cap + 1, check=np.uint64, version=np.uint32)
        self._keys = self._ids.column("key")
        self._checks = self._ids.column("check")
        self._versions = self._ids.column("version")
        self._newest = 0  # the newest version added
        self.faded = faded

    def __len__(self) -> int:
        return len(self._ids)

    def get(self, hash_: int) -> int | None:
        position = self._ids.find(hash_ & _LOW64)  # window_key, inline: the hot path
        if position < 0:
            return None
        if self._checks[position] != hash_ >> 64:
            return COLLIDED
        stored = self._versions[position]
        if stored == BANNED:
            return BANNED
        return self._newest - ((self._newest - (stored >> 1)) & _LOW31)

    def add(self, hash_: int, version: int, now_ms: int) -> None:
        """Remember an id (a ban never replaces a version: the id already has an outcome)."""
        key = hash_ & _LOW64  # window_key
        ids = self._ids
        if ids.find(key) >= 0:
            return
        # Pushed right after the lookup, it takes the empty slot the lookup ended at.
        position = ids.push(key, now_ms)
        self._checks[position] = hash_ >> 64
        self._versions[position] = ((version & _LOW31) << 1 | 1) if version else 0
        self._newest = max(self._newest, version)
        if len(ids) > self._hard_cap:  # never past the cap, not even within a batch
            self.faded.add(self._keys[ids.pop()])

    def load(self, entries: Entries) -> None:
        """Add the ids of earlier terms, oldest first (from the window file). The file holds
        committed ids only, so its versions can lie further apart than its count (rejected
        commits between them): one more than 2^30 below its newest goes straight to the
        faded set (answered commit_unknown, never applied again)."""
        newest = max(self._newest, int(entries["version"].max(initial=0)))
        if newest > 1 << 30:
            versions = entries["version"]
            too_old = (versions != BANNED) & (versions <= np.uint64(newest - (1 << 30)))
            if too_old.any():
                self._fade(entries[too_old])
                entries = entries[~too_old]
            del versions, too_old
        stamps = entries["ts_ms"]
        if len(self._ids) or not _ordered(stamps) or not _distinct(entries["lo"]):
            self._add_each(entries)  # what one add after another does, at ~3 us an id
            return
        # A new term's window, the common case: the same outcome, vectorised.
        dropped = max(0, len(entries) - self._hard_cap)
        self._fade(entries[:dropped])  # past the cap: add would push them out in turn
        self._ids.fill(entries["lo"][dropped:], stamps, dropped)  # lo: window_key
        versions = entries["version"][dropped:]
        encoded = (versions & np.uint64(_LOW31)).astype(np.uint32)
        encoded <<= np.uint32(1)
        encoded |= np.uint32(1)
        encoded[versions == BANNED] = 0
        self._ids.array("version")[: len(encoded)] = encoded
        self._ids.array("check")[: len(encoded)] = entries["hi"][dropped:]
        self._newest = newest

    def _fade(self, entries: Entries) -> None:
        for start in range(0, len(entries), _LOAD_CHUNK):
            for hash_ in hashes_of(entries[start : start + _LOAD_CHUNK]):
                self.faded.add(hash_)

    def _add_each(self, entries: Entries) -> None:
        """A chunk at a time: as Python lists at once, a 6M-entry file would take about
        800 MB (three lists of 6M ints)."""
        for start in range(0, len(entries), _LOAD_CHUNK):
            chunk = entries[start : start + _LOAD_CHUNK]
            versions: list[int] = chunk["version"].tolist()
            stamps: list[int] = chunk["ts_ms"].tolist()
            for hash_, version, stamp in zip(hashes_of(chunk), versions, stamps, strict=True):
                self.add(hash_, version, stamp)

    def expire(self, now_ms: int) -> None:
        """Move ids past the window into the faded set."""
        cutoff = now_ms - self._window_ms
        ids = self._ids
        while len(ids) > self._memory and ids.oldest_pushed_by() <= cutoff:
            self.faded.add(self._keys[ids.pop()])


__all__ = ["BANNED", "COLLIDED", "FadedIds", "RequestIdWindow", "window_key"]
